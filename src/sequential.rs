//! Watching a comparison continuously, by simulation (docs/SPEC.md §9): lists of two
//! models drawn from the demo's click model, evaluated with the engine's
//! metrics, and the difference in nDCG@10 looked at every `lists_per_look`
//! lists of each model. Counts how often the fixed-sample interval and the
//! anytime-valid sequence exclude zero when the models are identical (false
//! alarms), and how many lists the sequence needs to see a worse candidate.
//! Used by the tests (small) and `benches/sequential.rs` (large).

use crate::loadgen::{Traffic, TrafficConfig, TrafficError};
use crate::metrics::uncertainty::{standard_error, Difference, Estimate};
use crate::metrics::{ListEvaluator, Metric, MetricSettings};

/// The cutoff of the simulated metric, nDCG@10.
const K: usize = 10;
/// Lists per model of the pilot that measures both models' means.
const PILOT_LISTS: u64 = 20_000;

/// How a simulation runs.
#[derive(Clone, Copy, Debug)]
pub struct Simulation {
    /// Seed of the first run; run `i` uses `seed + i`.
    pub seed: u64,
    /// Independent runs.
    pub runs: u64,
    /// Looks per run.
    pub looks: u64,
    /// Lists of each model between two looks.
    pub lists_per_look: u64,
    /// Ranking quality of the control model (the demo's is 0.9).
    pub control_quality: f64,
}

/// False alarms between two identical models: runs in which a look excluded zero.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FalseAlarms {
    /// Runs.
    pub runs: u64,
    /// Runs in which the fixed-sample 95% interval excluded zero at some look.
    pub interval: u64,
    /// Runs in which the anytime-valid 95% sequence excluded zero at some look.
    pub sequence: u64,
}

impl FalseAlarms {
    /// The share of runs with a false alarm of the interval.
    pub fn interval_rate(&self) -> f64 {
        self.interval as f64 / self.runs as f64
    }

    /// The share of runs with a false alarm of the sequence.
    pub fn sequence_rate(&self) -> f64 {
        self.sequence as f64 / self.runs as f64
    }
}

/// How soon the sequence shows a worse candidate worse.
#[derive(Clone, Debug, PartialEq)]
pub struct Detection {
    /// Mean nDCG@10 of the control (pilot).
    pub control_mean: f64,
    /// Mean nDCG@10 of the candidate (pilot).
    pub candidate_mean: f64,
    /// Per run, the lists of each model at the first look whose sequence lay
    /// below zero; `None` if no look did.
    pub lists: Vec<Option<u64>>,
}

impl Detection {
    /// The median over runs of the lists needed, counting misses as never (`None` if half missed).
    pub fn median_lists(&self) -> Option<u64> {
        median_lists(&self.lists)
    }
}

/// The median of the lists each run needed, counting a run that never got
/// there as never (`None` if half of them did not).
pub fn median_lists(runs: &[Option<u64>]) -> Option<u64> {
    let mut lists: Vec<u64> = runs.iter().map(|l| l.unwrap_or(u64::MAX)).collect();
    lists.sort_unstable();
    lists
        .get(lists.len() / 2)
        .copied()
        .filter(|&l| l != u64::MAX)
}

/// Draws nDCG@10 of lists of the demo's click model.
struct ListSource {
    traffic: Traffic,
    evaluator: ListEvaluator,
    row: Vec<f64>,
    rng: fastrand::Rng,
}

impl ListSource {
    fn new(seed: u64) -> Result<Self, TrafficError> {
        let traffic = Traffic::new(TrafficConfig {
            seed,
            ..TrafficConfig::default()
        })?;
        let evaluator = ListEvaluator::new(MetricSettings::default(), &[K]);
        let row = vec![0.0; evaluator.width()];
        Ok(Self {
            traffic,
            evaluator,
            row,
            rng: fastrand::Rng::with_seed(seed ^ 0x5e9e_7e1a_1000),
        })
    }

    /// nDCG@10 of one list of quality `quality`.
    fn ndcg(&mut self, quality: f64) -> f64 {
        let grades = self.traffic.list_grades(quality);
        self.evaluator.evaluate(&grades, &mut self.row);
        self.row[Metric::Ndcg as usize]
    }

    /// nDCG@10 of one list of a candidate that shows the control's ranking
    /// except, with probability `random_share`, a random order.
    fn mixed(&mut self, quality: f64, random_share: f64) -> f64 {
        if self.rng.f64() < random_share {
            self.ndcg(0.0)
        } else {
            self.ndcg(quality)
        }
    }
}

/// Running sums of one model's values.
#[derive(Default)]
pub(crate) struct Sums {
    n: u64,
    sum: f64,
    squares: f64,
}

impl Sums {
    pub(crate) fn add(&mut self, value: f64) {
        self.n += 1;
        self.sum += value;
        self.squares += value * value;
    }

    pub(crate) fn estimate(&self) -> Estimate {
        Estimate {
            mean: self.sum / self.n as f64,
            se: standard_error(self.sum, self.squares, self.n),
            n: self.n,
        }
    }
}

/// Runs `simulation` with two identical models (both of the control's quality).
pub fn false_alarms(simulation: &Simulation) -> Result<FalseAlarms, TrafficError> {
    let mut alarms = FalseAlarms {
        runs: simulation.runs,
        interval: 0,
        sequence: 0,
    };
    for run in 0..simulation.runs {
        let mut source = ListSource::new(simulation.seed + run)?;
        let (mut control, mut candidate) = (Sums::default(), Sums::default());
        let (mut interval, mut sequence) = (false, false);
        for _ in 0..simulation.looks {
            for _ in 0..simulation.lists_per_look {
                control.add(source.ndcg(simulation.control_quality));
                candidate.add(source.ndcg(simulation.control_quality));
            }
            let difference = Difference::between(candidate.estimate(), control.estimate());
            interval |= excludes_zero(difference.ci95);
            sequence |= excludes_zero(difference.cs95);
        }
        alarms.interval += u64::from(interval);
        alarms.sequence += u64::from(sequence);
    }
    Ok(alarms)
}

/// A canary between two identical models of low engagement: the candidate
/// gets a small share of the lists, and a list is 1 (a click on its first
/// item: nDCG@10 = 1) with probability `engaged`, else 0.
#[derive(Clone, Copy, Debug)]
pub struct Canary {
    /// Seed of the run's draws.
    pub seed: u64,
    /// Independent runs.
    pub runs: u64,
    /// Looks per run.
    pub looks: u64,
    /// Lists of the candidate between two looks.
    pub candidate_lists: u64,
    /// Lists of the control between two looks.
    pub control_lists: u64,
    /// The share of lists that get their click.
    pub engaged: f64,
}

/// Runs `canary`: false alarms of its interval and sequence, counted from
/// the first look at which both models have `min_lists` lists (the alert
/// rules wait for 30).
pub fn canary_false_alarms(canary: &Canary, min_lists: u64) -> FalseAlarms {
    let mut rng = fastrand::Rng::with_seed(canary.seed);
    let mut alarms = FalseAlarms {
        runs: canary.runs,
        interval: 0,
        sequence: 0,
    };
    let mut draw = |sums: &mut Sums, lists: u64| {
        for _ in 0..lists {
            sums.add(if rng.f64() < canary.engaged { 1.0 } else { 0.0 });
        }
    };
    for _ in 0..canary.runs {
        let (mut control, mut candidate) = (Sums::default(), Sums::default());
        let (mut interval, mut sequence) = (false, false);
        for _ in 0..canary.looks {
            draw(&mut candidate, canary.candidate_lists);
            draw(&mut control, canary.control_lists);
            if candidate.n.min(control.n) < min_lists {
                continue;
            }
            let difference = Difference::between(candidate.estimate(), control.estimate());
            interval |= excludes_zero(difference.ci95);
            sequence |= excludes_zero(difference.cs95);
        }
        alarms.interval += u64::from(interval);
        alarms.sequence += u64::from(sequence);
    }
    alarms
}

/// Runs `simulation` with a candidate whose mean nDCG@10 is `relative_drop`
/// (e.g. 0.05) below the control's: it shows a random order instead of the
/// control's ranking in a share of its lists, set from a pilot of both.
pub fn detection(simulation: &Simulation, relative_drop: f64) -> Result<Detection, TrafficError> {
    let mut pilot = ListSource::new(simulation.seed.wrapping_sub(1))?;
    let quality = simulation.control_quality;
    let control_mean =
        (0..PILOT_LISTS).map(|_| pilot.ndcg(quality)).sum::<f64>() / PILOT_LISTS as f64;
    let random_mean = (0..PILOT_LISTS).map(|_| pilot.ndcg(0.0)).sum::<f64>() / PILOT_LISTS as f64;
    let random_share =
        (relative_drop * control_mean / (control_mean - random_mean)).clamp(0.0, 1.0);
    let candidate_mean = (1.0 - random_share) * control_mean + random_share * random_mean;
    let mut lists = Vec::new();
    for run in 0..simulation.runs {
        let mut source = ListSource::new(simulation.seed + run)?;
        let (mut control, mut candidate) = (Sums::default(), Sums::default());
        let mut found = None;
        for look in 1..=simulation.looks {
            for _ in 0..simulation.lists_per_look {
                control.add(source.ndcg(quality));
                candidate.add(source.mixed(quality, random_share));
            }
            let difference = Difference::between(candidate.estimate(), control.estimate());
            if difference.cs95[1] < 0.0 {
                found = Some(look * simulation.lists_per_look);
                break;
            }
        }
        lists.push(found);
    }
    Ok(Detection {
        control_mean,
        candidate_mean,
        lists,
    })
}

fn excludes_zero([lower, upper]: [f64; 2]) -> bool {
    lower > 0.0 || upper < 0.0
}
