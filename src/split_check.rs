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
//!
//! Pure arithmetic on counts the caller hands over: no clock, no I/O, no
//! knowledge of models, surfaces or series.

/// The level at or below which the p-value flags a mismatch.
pub const SPLIT_CHECK_LEVEL: f64 = 0.01;

/// `k`, the prior's concentration. A small `k` spreads the prior over
/// splits far from the intended one and is slow to flag a near one; a large
/// `k` concentrates it near the intended split and is slow to flag a far
/// one. Of 1, 10, 100, 1,000 and 10,000, 100 flags a 55/45 split of an
/// intended 50/50 soonest (a median of 1,071 lists) and a 52/48 split within
/// 1% of the soonest (6,803 lists; 6,746 with 1,000), by
/// `cargo bench --bench split_check` (docs/statistics.md).
pub const PRIOR_CONCENTRATION: f64 = 100.0;

/// The anytime-valid p-value of `counts` under `shares` (meant to sum to 1;
/// they are normalized here):
/// 1 for input that has nothing to test (fewer than two arms, lengths that
/// differ, a share that is not a positive number or is too small beside the
/// largest to be one, no count). Any counts up to `u64::MAX` give a finite
/// answer in `[0, 1]`.
pub fn split_p_value(counts: &[u64], shares: &[f64]) -> f64 {
    let usable = counts.len() >= 2
        && counts.len() == shares.len()
        && shares.iter().all(|&p| p.is_finite() && p > 0.0)
        && counts.iter().any(|&c| c > 0);
    if !usable {
        return 1.0;
    }
    log_bayes_factor(counts, shares).map_or(1.0, |log_bf| (-log_bf).exp().min(1.0))
}

/// `ln BF` of `counts` under `shares` (normalized here), with the prior of
/// [`PRIOR_CONCENTRATION`]; `None` where it is not a number.
///
/// `ln Γ` of `n` lists is about `n ln n`, and `ln BF` of a correct split
/// about `−ln n`: summing the `ln Γ` of the closed form as they are loses
/// all of it to rounding from some 10¹⁵ lists on. So each `ln Γ(x)` is split
/// into Stirling's leading part and its remainder `r(x)` (small), and the
/// leading parts are summed by hand, which leaves for arm `i`, with
/// `x_i = k·p_i + c_i`, `X = k + n`, `d_i = c_i − p_i·n` and
/// `e_i = d_i / (p_i·X)` (so `x_i = p_i·X·(1 + e_i)` and `Σ d_i = 0`):
///
/// ```text
/// ln BF = ln Γ(k) − r(X) − (m − 1)/2 · ln(X / 2π)
///       + Σ [(x_i − ½)·ln(1 + e_i) − d_i + (k·p_i − ½)·ln p_i − ln Γ(k·p_i) + r(x_i)]
/// ```
///
/// where `(x − ½)·ln(1 + e) − d` is worked out as `d·e − e/2 + (x − ½)·(ln(1 + e) − e)`
/// while `−½ ≤ e ≤ 1`: second-order terms, nothing large cancels (beyond,
/// the form as it stands loses at most a couple of bits).
fn log_bayes_factor(counts: &[u64], shares: &[f64]) -> Option<f64> {
    let k = PRIOR_CONCENTRATION;
    let largest = shares.iter().fold(0.0, |a: f64, &b| a.max(b));
    let total: f64 = shares.iter().map(|&p| p / largest).sum();
    let n: f64 = counts.iter().map(|&c| c as f64).sum();
    let big = k + n;
    let arms = counts.len() as f64;
    let mut log_bf =
        ln_gamma(k) - stirling_remainder(big) - 0.5 * (arms - 1.0) * (big.ln() - LN_2PI);
    for (&c, &share) in counts.iter().zip(shares) {
        let p = share / largest / total;
        if p <= 0.0 {
            return None;
        }
        let alpha = k * p;
        let x = alpha + c as f64;
        log_bf += arm_term(x, c as f64 - p * n, p * big) + (alpha - 0.5) * p.ln() - ln_gamma(alpha)
            + stirling_remainder(x);
    }
    Some(log_bf).filter(|l| !l.is_nan())
}

/// `(x − ½)·ln(x / expected) − deviation` for an arm with `x = expected + deviation`.
fn arm_term(x: f64, deviation: f64, expected: f64) -> f64 {
    let e = deviation / expected;
    if e > 1.0 {
        (x - 0.5) * e.ln_1p() - deviation
    } else if e < -0.5 {
        // `1 + e` may round to 0 when the arm has nearly no list.
        (x - 0.5) * (x / expected).ln() - deviation
    } else {
        deviation * e - 0.5 * e + (x - 0.5) * (e.ln_1p() - e)
    }
}

/// `ln 2π`.
const LN_2PI: f64 = 1.837_877_066_409_345_5;

/// `ln Γ(x)` for `x > 0`.
fn ln_gamma(x: f64) -> f64 {
    (x - 0.5) * x.ln() - x + 0.5 * LN_2PI + stirling_remainder(x)
}

/// `r(x) = ln Γ(x) − (x − ½)·ln x + x − ½·ln 2π` for `x > 0`: Stirling's
/// series from 20 on, where its first omitted term is below 2e-15, and the
/// recurrence `Γ(x) = Γ(x + 1) / x` below.
fn stirling_remainder(x: f64) -> f64 {
    if x >= 20.0 {
        return stirling_series(x);
    }
    let mut shift = 0.0;
    let mut y = x;
    while y < 20.0 {
        shift += y.ln();
        y += 1.0;
    }
    (y - 0.5) * y.ln() - y - (x - 0.5) * x.ln() + x + stirling_series(y) - shift
}

/// Stirling's series for `r(x)`, to the term in `x⁻⁷`.
fn stirling_series(x: f64) -> f64 {
    let inverse = 1.0 / x;
    let inverse2 = inverse * inverse;
    inverse
        * (1.0 / 12.0 - inverse2 * (1.0 / 360.0 - inverse2 * (1.0 / 1260.0 - inverse2 / 1680.0)))
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
    /// The shares the lists are drawn with, one per expected share.
    pub actual: Vec<f64>,
    /// The prior's concentration `k`: [`PRIOR_CONCENTRATION`] for the check
    /// as it runs, others to measure what `k` trades.
    pub concentration: f64,
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
        let k = self.concentration;
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

    /// `|got − want| ≤ tolerance · max(1, |want|)`.
    fn close(got: f64, want: f64, tolerance: f64) -> bool {
        (got - want).abs() <= tolerance * want.abs().max(1.0)
    }

    #[test]
    fn ln_gamma_matches_known_values() {
        // ln Γ(1) = ln Γ(2) = 0, Γ(0.5) = √π, ln Γ(100) = ln 99!.
        assert!(ln_gamma(1.0).abs() < 1e-13, "{}", ln_gamma(1.0));
        assert!(ln_gamma(2.0).abs() < 1e-13);
        assert!((ln_gamma(0.5) - std::f64::consts::PI.sqrt().ln()).abs() < 1e-13);
        let ln_99_factorial: f64 = (1..100).map(|i| (i as f64).ln()).sum();
        assert!((ln_gamma(100.0) - ln_99_factorial).abs() < 1e-10);
        // mpmath.loggamma at 40 digits.
        for (x, want) in [
            (0.01, 4.599_479_878_042_022),
            (0.1, 2.252_712_651_734_206),
            (1.5, -0.120_782_237_635_245_22),
            (3.7, 1.428_072_326_665_388),
            (19.99, 39.310_181_511_256_347),
            (20.5, 40.831_500_974_530_8),
            (50.5, 146.519_255_490_720_6),
            (1e3, 5_905.220_423_209_181),
            (1e6, 12_815_504.569_147_612),
            (1e9, 19_723_265_827.503_717),
            (1e12, 26_631_021_115_915.652),
        ] {
            assert!(
                close(ln_gamma(x), want, 1e-12),
                "ln Γ({x}) = {}",
                ln_gamma(x)
            );
        }
    }

    #[test]
    fn the_p_value_is_the_bayes_factor_worked_out_by_hand() {
        // Counts (3, 1), shares (1/2, 1/2), k = 100, α = (50, 50):
        // BF = Γ(100)/Γ(104) · Γ(53)/Γ(50) · Γ(51)/Γ(50) · 2^4
        //    = 16 · (50·51·52 · 50) / (100·101·102·103) = 0.9803...
        let by_hand: f64 = 16.0 * (50.0 * 51.0 * 52.0 * 50.0) / (100.0 * 101.0 * 102.0 * 103.0);
        assert_eq!(split_p_value(&[3, 1], &[0.5, 0.5]), 1.0, "BF < 1: p = 1");
        let log_bf = log_bayes_factor(&[3, 1], &[0.5, 0.5]);
        assert!(
            log_bf.is_some_and(|l| (l - by_hand.ln()).abs() < 1e-12),
            "{log_bf:?}"
        );
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
    fn p_values_below_one_match_exact_fractions() {
        // With k = 100 and these shares every α is an integer, so each Γ
        // ratio is a product of integers: BF exactly, as a fraction, by
        // Python's `fractions.Fraction`, then 1/BF as a float.
        // (30, 5), α = (50, 50): BF = 2^35 · (50⋯79)(50⋯54) / (100⋯134) = 8.98058652441...
        // (60, 10), α = (50, 50): BF = 2^70 · (50⋯109)(50⋯59) / (100⋯169) = 1396.71919026...
        // (25, 10, 15), α = (20, 30, 50): BF = (20⋯44)(30⋯39)(50⋯64)
        //     / ((100⋯149) · 0.2^25 · 0.3^10 · 0.5^15) = 42.6139714871...
        for (counts, shares, want) in [
            (&[30, 5][..], &[0.5, 0.5][..], 0.111_351_301_753_147_22),
            (&[60, 10], &[0.5, 0.5], 0.000_715_963_528_651_121_3),
            (&[25, 10, 15], &[0.2, 0.3, 0.5], 0.023_466_482_120_786_954),
        ] {
            let p = split_p_value(counts, shares);
            assert!((p - want).abs() < 1e-12 * want, "{counts:?}: {p}");
        }
    }

    #[test]
    fn huge_counts_keep_their_precision() {
        // ln BF by mpmath at 60 digits (loggamma of the closed form): the
        // sums of ln Γ as they are would lose these to rounding.
        for (counts, shares, want) in [
            (
                &[500_000_000, 500_000_000][..],
                &[0.5, 0.5][..],
                -8.061_547_833_567_49,
            ),
            (
                &[7_048_750, 7_660_026],
                &[0.224, 0.243],
                -0.332_778_357_989_232_85,
            ),
            (
                &[200_000_000_123, 300_000_000_000, 499_999_999_877],
                &[0.2, 0.3, 0.5],
                -23.033_628_185_785_784,
            ),
            (
                &[500_000_000_000_000_001, 500_000_000_000_000_000],
                &[0.5, 0.5],
                -18.423_180_702_290_697,
            ),
            (&[u64::MAX, u64::MAX], &[0.5, 0.5], -20.227_198_233_542_51),
            (&[10, 10], &[1e-300, 1.0], 6_186.984_148_672_642),
            (&[3, 0, 0], &[0.001, 0.5, 0.499], 5.412_664_752_372_446),
        ] {
            let log_bf = log_bayes_factor(counts, shares);
            assert!(
                log_bf.is_some_and(|l| close(l, want, 1e-10)),
                "{counts:?}: {log_bf:?}"
            );
        }
        let one_sided = log_bayes_factor(&[u64::MAX, 0], &[0.5, 0.5]);
        assert!(
            one_sided.is_some_and(|l| close(l, 1.278_630_864_520_265_4e19, 1e-12)),
            "{one_sided:?}"
        );
    }

    #[test]
    fn a_broken_split_is_flagged_and_a_right_one_is_not() {
        assert!(split_p_value(&[52_000, 48_000], &[0.5, 0.5]) < 1e-6);
        assert!(split_p_value(&[50_000, 50_000], &[0.5, 0.5]) > 0.5);
        assert!(split_p_value(&[500_000_000, 500_000_000], &[0.5, 0.5]) > 0.5);
        assert!(split_p_value(&[20_000, 30_000, 50_000], &[0.2, 0.3, 0.5]) > 0.5);
        assert!(split_p_value(&[20_000, 32_000, 48_000], &[0.2, 0.3, 0.5]) < SPLIT_CHECK_LEVEL);
        let exact_halves = 1u64 << 62;
        assert_eq!(
            split_p_value(&[exact_halves, exact_halves], &[0.5, 0.5]),
            1.0
        );
    }

    #[test]
    fn nothing_to_test_gives_one_and_never_nan() {
        assert_eq!(split_p_value(&[], &[]), 1.0);
        assert_eq!(split_p_value(&[5], &[1.0]), 1.0);
        assert_eq!(split_p_value(&[5, 5], &[0.5]), 1.0);
        assert_eq!(split_p_value(&[0, 0], &[0.5, 0.5]), 1.0);
        assert_eq!(split_p_value(&[3, 4], &[0.5, f64::NAN]), 1.0);
        assert_eq!(split_p_value(&[3, 4], &[0.5, f64::INFINITY]), 1.0);
        assert_eq!(split_p_value(&[3, 4], &[0.5, -0.5]), 1.0);
        assert_eq!(split_p_value(&[3, 4], &[0.5, 0.0]), 1.0);
        assert_eq!(
            split_p_value(&[3, 4], &[1e-320, 1e10]),
            1.0,
            "rounds to a share of 0"
        );
        for counts in [
            [u64::MAX, 1],
            [u64::MAX, u64::MAX],
            [u64::MAX / 4, 1],
            [1, u64::MAX],
        ] {
            let p = split_p_value(&counts, &[0.5, 0.5]);
            assert!((0.0..=1.0).contains(&p), "{counts:?}: {p}");
        }
        assert_eq!(split_p_value(&[u64::MAX, 1], &[0.5, 0.5]), 0.0);
    }

    #[test]
    fn shares_need_not_sum_to_one() {
        let normalized = split_p_value(&[30, 5], &[0.5, 0.5]);
        for shares in [[1.0, 1.0], [f64::MAX, f64::MAX], [1e-300, 1e-300]] {
            let p = split_p_value(&[30, 5], &shares);
            assert!((p - normalized).abs() < 1e-12, "{shares:?}: {p}");
        }
    }

    #[test]
    fn few_false_alarms_and_a_52_48_split_found() {
        let correct = SplitSimulation {
            seed: 1,
            runs: 200,
            lists: 20_000,
            expected: vec![0.5, 0.5],
            actual: vec![0.5, 0.5],
            concentration: PRIOR_CONCENTRATION,
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
