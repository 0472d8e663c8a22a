//! The sample ratio check (docs/SPEC.md §12): is the number of lists per
//! model what the intended split says, checked continuously? An
//! anytime-valid test for multinomial counts, after Lindon and Malek,
//! "Anytime-valid inference for multinomial count data" (NeurIPS 2022), the
//! sequential SRM test of A/B platforms: a Dirichlet-multinomial Bayes
//! factor against the expected shares `p`, with prior `Dirichlet(k·p)`,
//!
//! ```text
//! BF = Γ(K) / Γ(K + n) · Π Γ(k·p_i + c_i) / Γ(k·p_i) / Π p_i^c_i,   K = Σ k·p_i = k
//! ```
//!
//! for counts `c_i` summing to `n`. Under the expected split `BF` is a
//! nonnegative martingale with mean 1, so by Ville's inequality the chance
//! that it ever reaches `1/α` is at most `α`: the p-value `min(1, 1/BF)` may
//! be looked at after every list, and the check flags a mismatch when it is
//! at or below [`SPLIT_CHECK_LEVEL`]. `BF` depends on the counts only, not on
//! their order, so the p-value of counts summed across instances is the one
//! a single instance that saw every list would give. Also the simulation
//! that measures its false-alarm rate and detection delay
//! (`benches/split_check.rs`).

/// The level at or below which the p-value flags a mismatch.
pub const SPLIT_CHECK_LEVEL: f64 = 0.01;

/// `k`, the prior's concentration: with 100 a 52/48 split of an intended
/// 50/50 is flagged after a median of 6,800 lists; in a first simulation
/// (60 runs) 10, 1,000 and 10,000 took 18%, 3% and 65% more
/// (docs/statistics.md).
pub const PRIOR_CONCENTRATION: f64 = 100.0;

/// The anytime-valid p-value of `counts` under `shares` (which sum to 1):
/// 1 for input that has nothing to test (fewer than two arms, lengths that
/// differ, a share that is not a positive number, no count).
pub fn split_p_value(counts: &[u64], shares: &[f64]) -> f64 {
    let usable = counts.len() >= 2
        && counts.len() == shares.len()
        && shares.iter().all(|&p| p.is_finite() && p > 0.0)
        && counts.iter().any(|&c| c > 0);
    if !usable {
        return 1.0;
    }
    let log_bf = log_bayes_factor(counts, shares);
    if log_bf.is_nan() {
        return 1.0;
    }
    (-log_bf).exp().min(1.0)
}

/// `ln BF` of `counts` under `shares`, with the prior of [`PRIOR_CONCENTRATION`].
fn log_bayes_factor(counts: &[u64], shares: &[f64]) -> f64 {
    let total: f64 = shares.iter().sum();
    let k = PRIOR_CONCENTRATION;
    let n: u64 = counts.iter().sum();
    let mut log_bf = ln_gamma(k) - ln_gamma(k + n as f64);
    for (&c, &p) in counts.iter().zip(shares) {
        let p = p / total;
        let alpha = k * p;
        let c = c as f64;
        log_bf += ln_gamma(alpha + c) - ln_gamma(alpha) - c * p.ln();
    }
    log_bf
}

/// `ln Γ(x)` for `x > 0`: Stirling's series from 20 on, where its error is
/// below 1e-15 relative, and the recurrence `Γ(x) = Γ(x + 1) / x` below.
fn ln_gamma(x: f64) -> f64 {
    let mut shift = 0.0;
    let mut x = x;
    while x < 20.0 {
        shift += x.ln();
        x += 1.0;
    }
    let inverse = 1.0 / x;
    let inverse2 = inverse * inverse;
    let series = inverse
        * (1.0 / 12.0 - inverse2 * (1.0 / 360.0 - inverse2 * (1.0 / 1260.0 - inverse2 / 1680.0)));
    (x - 0.5) * x.ln() - x + 0.5 * (2.0 * std::f64::consts::PI).ln() + series - shift
}

/// How a simulation of the check runs: lists drawn one at a time with the
/// true shares, the p-value looked at after every list.
#[derive(Clone, Debug)]
pub struct SplitSimulation {
    /// Seed of the first run; run `i` uses `seed + i`.
    pub seed: u64,
    /// Independent runs.
    pub runs: u64,
    /// Lists per run.
    pub lists: u64,
    /// The shares the check expects.
    pub expected: Vec<f64>,
    /// The shares the lists are drawn with.
    pub actual: Vec<f64>,
}

impl SplitSimulation {
    /// Per run, the number of lists after which the p-value first fell to
    /// [`SPLIT_CHECK_LEVEL`] or below; `None` if it never did.
    pub fn first_flags(&self) -> Vec<Option<u64>> {
        (0..self.runs)
            .map(|run| self.run(self.seed + run))
            .collect()
    }

    /// The share of runs flagged: the false-alarm rate when `actual` equals `expected`.
    pub fn flagged_share(&self) -> f64 {
        let flags = self.first_flags();
        flags.iter().filter(|f| f.is_some()).count() as f64 / flags.len().max(1) as f64
    }

    /// One run. `ln BF` is updated list by list: a list of arm `i` multiplies
    /// `BF` by `(k·p_i + c_i) / (k + n) / p_i` (counts before it), which is
    /// the closed form's ratio, so every look costs one step.
    fn run(&self, seed: u64) -> Option<u64> {
        let mut rng = fastrand::Rng::with_seed(seed);
        let k = PRIOR_CONCENTRATION;
        let mut counts = vec![0u64; self.expected.len()];
        let threshold = (1.0 / SPLIT_CHECK_LEVEL).ln();
        let mut log_bf = 0.0;
        for n in 0..self.lists {
            let arm = draw(&mut rng, &self.actual);
            let p = self.expected[arm];
            log_bf += (k * p + counts[arm] as f64).ln() - (k + n as f64).ln() - p.ln();
            counts[arm] += 1;
            if log_bf >= threshold {
                return Some(n + 1);
            }
        }
        None
    }
}

/// The index drawn with probabilities `shares`.
fn draw(rng: &mut fastrand::Rng, shares: &[f64]) -> usize {
    let mut u = rng.f64();
    for (index, &share) in shares.iter().enumerate() {
        if u < share {
            return index;
        }
        u -= share;
    }
    shares.len() - 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ln_gamma_matches_known_values() {
        // ln Γ(1) = ln Γ(2) = 0, Γ(0.5) = √π, ln Γ(100) = ln 99!.
        assert!(ln_gamma(1.0).abs() < 1e-13, "{}", ln_gamma(1.0));
        assert!(ln_gamma(2.0).abs() < 1e-13);
        assert!((ln_gamma(0.5) - std::f64::consts::PI.sqrt().ln()).abs() < 1e-13);
        let ln_99_factorial: f64 = (1..100).map(|i| (i as f64).ln()).sum();
        assert!((ln_gamma(100.0) - ln_99_factorial).abs() < 1e-10);
        assert!(
            (ln_gamma(50.5) - 146.519_255_490_720_6).abs() < 1e-9,
            "{}",
            ln_gamma(50.5)
        );
    }

    #[test]
    fn the_p_value_is_the_bayes_factor_worked_out_by_hand() {
        // Counts (3, 1), shares (1/2, 1/2), k = 100, α = (50, 50):
        // BF = Γ(100)/Γ(104) · Γ(53)/Γ(50) · Γ(51)/Γ(50) · 2^4
        //    = 16 · (50·51·52 · 50) / (100·101·102·103) = 0.9803...
        let by_hand: f64 = 16.0 * (50.0 * 51.0 * 52.0 * 50.0) / (100.0 * 101.0 * 102.0 * 103.0);
        assert_eq!(split_p_value(&[3, 1], &[0.5, 0.5]), 1.0, "BF < 1: p = 1");
        assert!((log_bayes_factor(&[3, 1], &[0.5, 0.5]) - by_hand.ln()).abs() < 1e-12);
        // The same by the step of the simulation, in either order.
        let steps = |arms: &[usize]| {
            let mut counts = [0u64; 2];
            let mut log_bf = 0.0;
            for (n, &arm) in arms.iter().enumerate() {
                log_bf += (50.0 + counts[arm] as f64).ln() - (100.0 + n as f64).ln() - 0.5f64.ln();
                counts[arm] += 1;
            }
            log_bf
        };
        assert!((steps(&[0, 0, 0, 1]) - by_hand.ln()).abs() < 1e-12);
        assert!((steps(&[1, 0, 0, 0]) - by_hand.ln()).abs() < 1e-12);
    }

    #[test]
    fn a_broken_split_is_flagged_and_a_right_one_is_not() {
        assert!(split_p_value(&[52_000, 48_000], &[0.5, 0.5]) < 1e-6);
        assert!(split_p_value(&[50_000, 50_000], &[0.5, 0.5]) > 0.5);
        assert!(split_p_value(&[500_000_000, 500_000_000], &[0.5, 0.5]) > 0.5);
        assert!(split_p_value(&[20_000, 30_000, 50_000], &[0.2, 0.3, 0.5]) > 0.5);
        assert!(split_p_value(&[20_000, 32_000, 48_000], &[0.2, 0.3, 0.5]) < SPLIT_CHECK_LEVEL);
    }

    #[test]
    fn nothing_to_test_gives_one_and_never_nan() {
        assert_eq!(split_p_value(&[], &[]), 1.0);
        assert_eq!(split_p_value(&[5], &[1.0]), 1.0);
        assert_eq!(split_p_value(&[5, 5], &[0.5]), 1.0);
        assert_eq!(split_p_value(&[0, 0], &[0.5, 0.5]), 1.0);
        assert_eq!(split_p_value(&[3, 4], &[0.5, f64::NAN]), 1.0);
        assert_eq!(split_p_value(&[3, 4], &[0.5, 0.0]), 1.0);
        let extreme = split_p_value(&[u64::MAX / 4, 1], &[0.5, 0.5]);
        assert!((0.0..=1.0).contains(&extreme), "{extreme}");
    }

    #[test]
    fn few_false_alarms_and_a_52_48_split_found() {
        let correct = SplitSimulation {
            seed: 1,
            runs: 200,
            lists: 20_000,
            expected: vec![0.5, 0.5],
            actual: vec![0.5, 0.5],
        };
        assert!(
            correct.flagged_share() <= 0.03,
            "{}",
            correct.flagged_share()
        );
        let broken = SplitSimulation {
            actual: vec![0.52, 0.48],
            runs: 50,
            lists: 100_000,
            ..correct
        };
        let median = crate::sequential::median_lists(&broken.first_flags());
        assert!(median.is_some_and(|lists| lists < 30_000), "{median:?}");
    }
}
