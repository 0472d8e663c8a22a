//! How sure a mean is (docs/SPEC.md §9): the standard error of a mean from its sums,
//! and the comparison of a candidate's mean with a control's — the
//! fixed-sample 95% interval and an anytime-valid 95% confidence sequence.
//! Pure arithmetic on sums; knows nothing of groups, labels or transport.

/// The normal quantile of the two-sided 95% interval.
pub const Z95: f64 = 1.959963984540054;

/// The error rate of the 95% confidence sequence.
pub const CS_ALPHA: f64 = 0.05;

/// The number of lists at which the confidence sequence is tuned to be tightest.
pub const CS_TIGHTEST_AT: f64 = 10_000.0;

/// The standard error of the mean of `n` values with sum `sum` and sum of squares `squares`.
///
/// `s² = (Σv² − n·mean²) / (n − 1)` for `n ≥ 2`, else 0; `se = sqrt(s² / n)`,
/// 0 when `n = 0`. A variance within the rounding error of the sums it
/// comes from counts as 0: of lists that all scored the same, sums added in
/// one order gave 0 and in another order a standard error of 1e-9 (the
/// square root of a rounding error).
pub fn standard_error(sum: f64, squares: f64, n: u64) -> f64 {
    if n < 2 {
        return 0.0;
    }
    let count = n as f64;
    let mean = sum / count;
    let centered = squares - count * mean * mean;
    if centered <= count * f64::EPSILON * squares {
        return 0.0;
    }
    ((centered / (count - 1.0)) / count).sqrt()
}

/// A mean over `n` lists with its standard error.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Estimate {
    /// The mean.
    pub mean: f64,
    /// Its standard error.
    pub se: f64,
    /// The lists behind it.
    pub n: u64,
}

/// A candidate's mean minus a control's, with its intervals.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Difference {
    /// `mean_candidate − mean_control`.
    pub diff: f64,
    /// `sqrt(se_candidate² + se_control²)`.
    pub se: f64,
    /// The fixed-sample 95% interval `diff ± 1.96·se`, valid at one look.
    pub ci95: [f64; 2],
    /// The anytime-valid 95% confidence sequence, valid however often it is looked at.
    pub cs95: [f64; 2],
}

impl Difference {
    /// `candidate − control`.
    pub fn between(candidate: Estimate, control: Estimate) -> Self {
        let diff = candidate.mean - control.mean;
        let se = candidate.se.hypot(control.se);
        let ci = Z95 * se;
        let [sample_m, sample_c] = floored_variances(candidate, control);
        let t = effective_lists(sample_m, sample_c);
        let sequence_se = (sample_m.per_list() + sample_c.per_list()).sqrt();
        let cs = confidence_sequence_multiplier(t, CS_ALPHA, CS_TIGHTEST_AT) * sequence_se;
        Self {
            diff,
            se,
            ci95: [diff - ci, diff + ci],
            cs95: [diff - cs, diff + cs],
        }
    }
}

/// A sample's variance and count.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    /// The sample variance `s²`.
    pub variance: f64,
    /// The values behind it.
    pub n: f64,
}

impl Sample {
    /// `s² / n`, the squared standard error (0 without values).
    fn per_list(self) -> f64 {
        if self.n > 0.0 {
            self.variance / self.n
        } else {
            0.0
        }
    }
}

/// Both samples' variances as the confidence sequence takes them: each at
/// least the pooled variance of both, `((n_M−1)s_M² + (n_C−1)s_C²) / (n_M +
/// n_C − 2)`. A few lists of rare engagement all score 0, and their sample
/// variance of 0 had the sequence take their mean as certain: a canary of 40
/// lists with no click against a control of 2,000 with one click in twenty
/// lay wholly below the control, though identical models give that in one
/// run in eight. Identical models have one variance, which the pooled one
/// estimates from all the lists; a sample whose own is larger keeps it.
pub fn floored_variances(candidate: Estimate, control: Estimate) -> [Sample; 2] {
    let sample = |e: Estimate| Sample {
        variance: e.se.powi(2) * e.n as f64,
        n: e.n as f64,
    };
    let (m, c) = (sample(candidate), sample(control));
    let freedom = m.n + c.n - 2.0;
    let pooled = if freedom > 0.0 {
        ((m.n - 1.0) * m.variance + (c.n - 1.0) * c.variance) / freedom
    } else {
        0.0
    };
    [m, c].map(|s| Sample {
        variance: s.variance.max(pooled),
        ..s
    })
}

/// The number of observations `t` of a difference of two independent means.
///
/// The variance-weighted harmonic mean of both counts,
/// `t = (s_M² + s_C²) / (s_M²/n_M + s_C²/n_C)`, is the `n` for which
/// `se_diff = sqrt((s_M² + s_C²) / n)`: the count of paired observations with
/// the same variance. Equal counts give that count; without variance, the
/// plain harmonic mean. At least 1.
pub fn effective_lists(m: Sample, c: Sample) -> f64 {
    if m.n == 0.0 || c.n == 0.0 {
        return 1.0;
    }
    let weighted = if m.variance + c.variance > 0.0 {
        (m.variance + c.variance) / (m.per_list() + c.per_list())
    } else {
        2.0 / (1.0 / m.n + 1.0 / c.n)
    };
    weighted.max(1.0)
}

/// The half-width of the asymptotic confidence sequence in standard errors.
///
/// Waudby-Smith, Arnold, Wu, Howard and Ramdas, "Time-uniform central limit
/// theory and asymptotic confidence sequences" (Annals of Statistics, 2024),
/// two-sided: `μ̂_t ± se · sqrt((tρ² + 1)/(tρ²) · log((tρ² + 1)/α²))`, with
/// `ρ² = (−2 log α + log(−2 log α + 1)) / t*` so that it is tightest at `t*`.
/// Always above [`Z95`] at α = 0.05, so the sequence contains the interval.
pub fn confidence_sequence_multiplier(t: f64, alpha: f64, tightest_at: f64) -> f64 {
    let log_alpha = -2.0 * alpha.ln();
    let rho2 = (log_alpha + (log_alpha + 1.0).ln()) / tightest_at;
    let t_rho2 = t.max(1.0) * rho2;
    ((t_rho2 + 1.0) / t_rho2 * ((t_rho2 + 1.0) / (alpha * alpha)).ln()).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standard_error_follows_the_sample_variance() {
        // values 1, 2, 3, 4: mean 2.5, s² = 5/3, se = sqrt(5/12)
        let se = standard_error(10.0, 30.0, 4);
        assert!((se - (5.0f64 / 12.0).sqrt()).abs() < 1e-15);
        assert_eq!(standard_error(1.0, 1.0, 1), 0.0);
        assert_eq!(standard_error(0.0, 0.0, 0), 0.0);
        assert_eq!(standard_error(3.0, 3.0, 3), 0.0, "constant values");
    }

    #[test]
    fn the_sequence_contains_the_interval() {
        for t in [1.0, 10.0, 100.0, 1e4, 1e6, 1e9] {
            assert!(confidence_sequence_multiplier(t, CS_ALPHA, CS_TIGHTEST_AT) > Z95);
        }
        let difference = Difference::between(
            Estimate {
                mean: 0.5,
                se: 0.01,
                n: 400,
            },
            Estimate {
                mean: 0.6,
                se: 0.02,
                n: 100,
            },
        );
        assert!((difference.diff + 0.1).abs() < 1e-15);
        assert!((difference.se - 0.0005f64.sqrt()).abs() < 1e-15);
        assert!(difference.cs95[0] < difference.ci95[0]);
        assert!(difference.cs95[1] > difference.ci95[1]);
    }

    #[test]
    fn equal_counts_are_the_effective_count() {
        let a = Sample {
            variance: 0.09 * 50.0,
            n: 50.0,
        };
        let b = Sample {
            variance: 0.01 * 50.0,
            n: 50.0,
        };
        assert!((effective_lists(a, b) - 50.0).abs() < 1e-9);
        let none = Sample {
            variance: 0.0,
            n: 30.0,
        };
        let other = Sample { n: 60.0, ..none };
        assert!((effective_lists(none, other) - 40.0).abs() < 1e-9);
    }

    #[test]
    fn a_sample_without_variance_takes_the_pooled_one_in_the_sequence() {
        // 40 lists of 0 against 2,000 of which 100 scored 1.
        let candidate = Estimate {
            mean: 0.0,
            se: 0.0,
            n: 40,
        };
        let control_variance = (100.0 - 2000.0 * 0.05f64.powi(2)) / 1999.0;
        let control = Estimate {
            mean: 0.05,
            se: (control_variance / 2000.0).sqrt(),
            n: 2000,
        };
        let [m, c] = floored_variances(candidate, control);
        let pooled = 1999.0 * control_variance / 2038.0;
        assert!((m.variance - pooled).abs() < 1e-15, "{m:?}");
        assert!(
            (c.variance - control_variance).abs() < 1e-15,
            "the larger own one"
        );
        let difference = Difference::between(candidate, control);
        assert_eq!(
            difference.se, control.se,
            "the standard error as the contract has it"
        );
        assert!(
            difference.cs95[0] < 0.0 && difference.cs95[1] > 0.0,
            "no evidence that the candidate is worse: {:?}",
            difference.cs95
        );
        // One list against one: nothing to pool, the point of the difference.
        let one = Estimate {
            mean: 1.0,
            se: 0.0,
            n: 1,
        };
        let zero = Estimate { mean: 0.0, ..one };
        assert_eq!(Difference::between(zero, one).cs95, [-1.0, -1.0]);
    }
}
