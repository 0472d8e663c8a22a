//! How many fewer lists interleaving needs than an A/B comparison, by
//! simulation (docs/SPEC.md §12): two rankers of known quality under the
//! load generator's position-based click model, users whose activity varies
//! (each list's examination probabilities scaled by a log-normal factor of
//! mean 1), and the same traffic either interleaved by team draft or split
//! A/B. For each, the lists until the anytime-valid 95% confidence sequence
//! excludes 0: of the interleaving preference (credit by
//! [`crate::metrics::interleaving`], statistics as the report computes them)
//! and of the nDCG@10 difference of docs/SPEC.md §9. Used by a test (small)
//! and `benches/interleaving.rs` (large).

use crate::loadgen::{ModelSpec, Traffic, TrafficConfig, TrafficError};
use crate::metrics::interleaving::credits_into;
use crate::metrics::uncertainty::{
    confidence_sequence_multiplier, standard_error, Difference, CS_ALPHA, CS_TIGHTEST_AT,
};
use crate::metrics::{Gain, ListEvaluator, Metric, MetricSettings};
use crate::sequential::{median_lists, Sums};

/// How a simulation runs.
#[derive(Clone, Copy, Debug)]
pub struct Sensitivity {
    /// Seed of the first run; run `i` uses `seed + i`.
    pub seed: u64,
    /// Independent runs.
    pub runs: u64,
    /// Most lists per run and method before it counts as not found.
    pub max_lists: u64,
    /// Lists between two looks at the sequence.
    pub look_every: u64,
    /// Ranking quality of the control (the demo's is 0.9).
    pub control_quality: f64,
    /// Ranking quality of the candidate, below the control's.
    pub candidate_quality: f64,
    /// σ of the users' log-normal activity (0: every user alike).
    pub activity_sigma: f64,
}

/// Per run, the lists each method needed; `None` when `max_lists` did not do.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ListsNeeded {
    /// Interleaved lists until the preference's sequence lay below 0.
    pub interleaving: Vec<Option<u64>>,
    /// Lists of both models until the nDCG@10 difference's sequence lay below 0.
    pub ab: Vec<Option<u64>>,
}

impl ListsNeeded {
    /// The median of interleaving's runs (`None` if half were not found).
    pub fn interleaving_median(&self) -> Option<u64> {
        median_lists(&self.interleaving)
    }

    /// The median of the A/B runs (`None` if half were not found).
    pub fn ab_median(&self) -> Option<u64> {
        median_lists(&self.ab)
    }
}

/// Runs `simulation`: each run measures both methods on traffic of its own seed.
pub fn lists_needed(simulation: &Sensitivity) -> Result<ListsNeeded, TrafficError> {
    let mut needed = ListsNeeded::default();
    for run in 0..simulation.runs {
        let seed = simulation.seed + run;
        needed
            .interleaving
            .push(interleaving_run(simulation, seed)?);
        needed.ab.push(ab_run(simulation, seed)?);
    }
    Ok(needed)
}

/// The traffic of one run: the control first, then the candidate.
fn traffic(simulation: &Sensitivity, seed: u64) -> Result<Traffic, TrafficError> {
    Traffic::new(TrafficConfig {
        seed,
        models: vec![
            ModelSpec::new("control", simulation.control_quality),
            ModelSpec::new("candidate", simulation.candidate_quality),
        ],
        ..TrafficConfig::default()
    })
}

/// A user's activity: log-normal with mean 1.
fn activity(rng: &mut fastrand::Rng, sigma: f64) -> f64 {
    // Box–Muller: one standard normal from two uniforms.
    let (u, v) = (1.0 - rng.f64(), rng.f64());
    let z = (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos();
    (sigma * z - sigma * sigma / 2.0).exp()
}

fn interleaving_run(simulation: &Sensitivity, seed: u64) -> Result<Option<u64>, TrafficError> {
    let mut traffic = traffic(simulation, seed)?;
    let mut rng = fastrand::Rng::with_seed(seed ^ 0xac71_0117);
    let (mut teams, mut team_bytes, mut credits) = (Vec::new(), Vec::new(), Vec::new());
    // Pair (candidate, control): s = +1 when the candidate's items earn more.
    let (mut wins_candidate, mut wins_control) = (0u64, 0u64);
    for n in 1..=simulation.max_lists {
        let grades =
            traffic.interleaved_grades(activity(&mut rng, simulation.activity_sigma), &mut teams);
        team_bytes.clear();
        team_bytes.extend(teams.iter().map(|&t| t as u8));
        credits_into(&grades, &team_bytes, Gain::Linear, 2, &mut credits);
        wins_candidate += u64::from(credits[1] > credits[0]);
        wins_control += u64::from(credits[0] > credits[1]);
        if n % simulation.look_every == 0 {
            let sum = wins_candidate as f64 - wins_control as f64;
            let squares = (wins_candidate + wins_control) as f64;
            let se = standard_error(sum, squares, n);
            let upper = sum / n as f64
                + confidence_sequence_multiplier(n as f64, CS_ALPHA, CS_TIGHTEST_AT) * se;
            if upper < 0.0 {
                return Ok(Some(n));
            }
        }
    }
    Ok(None)
}

fn ab_run(simulation: &Sensitivity, seed: u64) -> Result<Option<u64>, TrafficError> {
    let mut traffic = traffic(simulation, seed)?;
    let mut rng = fastrand::Rng::with_seed(seed ^ 0xab_0117);
    let mut evaluator = ListEvaluator::new(MetricSettings::default(), &[10]);
    let mut row = vec![0.0; evaluator.width()];
    let mut arms = [Sums::default(), Sums::default()];
    let qualities = [simulation.control_quality, simulation.candidate_quality];
    for n in 1..=simulation.max_lists {
        // Users split between the models at random, one list each.
        let arm = rng.usize(0..2);
        let grades = traffic.list_grades_of(
            qualities[arm],
            activity(&mut rng, simulation.activity_sigma),
        );
        evaluator.evaluate(&grades, &mut row);
        arms[arm].add(row[Metric::Ndcg as usize]);
        if n % simulation.look_every == 0 && arms.iter().all(|a| a.estimate().n >= 2) {
            let difference = Difference::between(arms[1].estimate(), arms[0].estimate());
            if difference.cs95[1] < 0.0 {
                return Ok(Some(n));
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interleaving_finds_a_worse_candidate_with_fewer_lists_than_a_b() {
        let needed = lists_needed(&Sensitivity {
            seed: 3,
            runs: 5,
            max_lists: 40_000,
            look_every: 50,
            control_quality: 0.9,
            candidate_quality: 0.6,
            activity_sigma: 1.0,
        })
        .unwrap();
        let (interleaving, ab) = (needed.interleaving_median(), needed.ab_median());
        assert!(interleaving.is_some() && ab.is_some(), "{needed:?}");
        assert!(interleaving < ab, "{needed:?}");
    }
}
