//! Per-list metrics at every cutoff K, computed in one pass over the list.
//!
//! Definitions follow docs/SPEC.md §4 and §11 and agree with trec_eval (`success`,
//! `recip_rank`, `P`, `recall`, `map_cut`, `ndcg_cut`, `Rprec`) and
//! ir_measures (`ERR@k`, `RBP@k`) on the same grades.

/// How a grade turns into gain in DCG and half-life utility.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Gain {
    /// `gain(g) = g`.
    Linear,
    /// `gain(g) = 2^g − 1` (Burges).
    Exponential,
}

impl Gain {
    /// The gain of `grade`.
    pub fn apply(self, grade: f64) -> f64 {
        match self {
            Gain::Linear => grade,
            Gain::Exponential => grade.exp2() - 1.0,
        }
    }

    /// The setting's name in configs and reports.
    pub fn name(self) -> &'static str {
        match self {
            Gain::Linear => "linear",
            Gain::Exponential => "exponential",
        }
    }
}

/// The position discount of DCG.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Discount {
    /// `log2(j + 1)`.
    Log2,
    /// Järvelin–Kekäläinen: `max(1, log_base j)`.
    Jarvelin {
        /// Logarithm base, greater than 1.
        base: f64,
    },
}

impl Discount {
    /// The discount of 1-based `rank`.
    pub fn at_rank(self, rank: usize) -> f64 {
        let rank = rank as f64;
        match self {
            Discount::Log2 => (rank + 1.0).log2(),
            Discount::Jarvelin { base } => rank.log(base).max(1.0),
        }
    }
}

/// Settings that change metric values.
#[derive(Clone, Debug, PartialEq)]
pub struct MetricSettings {
    /// Gain of DCG, nDCG and half-life utility.
    pub gain: Gain,
    /// Discount of DCG and nDCG.
    pub discount: Discount,
    /// Breese's half-life α, in ranks (greater than 1).
    pub half_life: f64,
    /// ERR's `g_max`: a grade `g` stops the user with probability
    /// `(2^min(g, g_max) − 1) / 2^g_max`.
    pub err_max_grade: f64,
    /// RBP's persistence `p`, the chance of going on to the next rank (in `(0, 1)`).
    pub rbp_persistence: f64,
}

impl Default for MetricSettings {
    fn default() -> Self {
        Self {
            gain: Gain::Linear,
            discount: Discount::Log2,
            half_life: 5.0,
            err_max_grade: 3.0,
            rbp_persistence: 0.8,
        }
    }
}

/// A per-list metric. The discriminant is the metric's slot in a row of values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Metric {
    /// Hit rate.
    HitRate,
    /// Mean reciprocal rank.
    Mrr,
    /// Precision.
    Precision,
    /// Recall.
    Recall,
    /// Average precision.
    Map,
    /// Normalized DCG.
    Ndcg,
    /// Discounted cumulative gain.
    Dcg,
    /// Half-life utility.
    HalfLifeUtility,
    /// Pairwise accuracy.
    PairwiseAccuracy,
    /// Expected reciprocal rank.
    Err,
    /// Rank-biased precision.
    Rbp,
}

impl Metric {
    /// Every metric, in slot order.
    pub const ALL: [Metric; 11] = [
        Metric::HitRate,
        Metric::Mrr,
        Metric::Precision,
        Metric::Recall,
        Metric::Map,
        Metric::Ndcg,
        Metric::Dcg,
        Metric::HalfLifeUtility,
        Metric::PairwiseAccuracy,
        Metric::Err,
        Metric::Rbp,
    ];

    /// Number of metrics, the width of one cutoff's row.
    pub const COUNT: usize = Metric::ALL.len();

    /// The metric's key in reports (`ndcg` in `ndcg@10`) and series names.
    pub fn name(self) -> &'static str {
        match self {
            Metric::HitRate => "hit_rate",
            Metric::Mrr => "mrr",
            Metric::Precision => "precision",
            Metric::Recall => "recall",
            Metric::Map => "map",
            Metric::Ndcg => "ndcg",
            Metric::Dcg => "dcg",
            Metric::HalfLifeUtility => "half_life_utility",
            Metric::PairwiseAccuracy => "pairwise_accuracy",
            Metric::Err => "err",
            Metric::Rbp => "rbp",
        }
    }
}

/// The key of R-precision in reports and series names: it has no cutoff,
/// since it cuts each list at its own relevant count `R`.
pub const R_PRECISION: &str = "r_precision";

/// Evaluates lists at a fixed set of cutoffs, reusing its buffers so that
/// evaluating a list allocates nothing.
#[derive(Clone, Debug)]
pub struct ListEvaluator {
    settings: MetricSettings,
    /// Cutoffs, ascending and distinct.
    ks: Vec<usize>,
    /// `discount[j]` for rank `j + 1`, up to the largest K.
    discounts: Vec<f64>,
    /// Half-life weight `2^{-j/(α−1)}` for rank `j + 1`, up to the largest K.
    half_life_weights: Vec<f64>,
    /// RBP's weight `(1 − p)·p^j` for rank `j + 1`, up to the largest K.
    rbp_weights: Vec<f64>,
    /// The list's positive grades, sorted descending (the ideal order's head).
    ideal: Vec<f64>,
    /// Positive grades seen so far in the pass, for pair counting.
    seen_positive: Vec<f64>,
}

impl ListEvaluator {
    /// An evaluator for cutoffs `ks` (any order; duplicates and 0 are dropped).
    pub fn new(settings: MetricSettings, ks: &[usize]) -> Self {
        let mut ks: Vec<usize> = ks.iter().copied().filter(|&k| k > 0).collect();
        ks.sort_unstable();
        ks.dedup();
        let max_k = ks.last().copied().unwrap_or(0);
        let discounts = (1..=max_k)
            .map(|rank| settings.discount.at_rank(rank))
            .collect();
        let half_life_weights = (0..max_k)
            .map(|j| (-(j as f64) / (settings.half_life - 1.0)).exp2())
            .collect();
        let p = settings.rbp_persistence;
        let rbp_weights = (0..max_k).map(|j| (1.0 - p) * p.powi(j as i32)).collect();
        Self {
            settings,
            ks,
            discounts,
            half_life_weights,
            rbp_weights,
            ideal: Vec::new(),
            seen_positive: Vec::new(),
        }
    }

    /// The gain of DCG, which also credits interleaved rankers (docs/SPEC.md §12).
    pub fn gain(&self) -> Gain {
        self.settings.gain
    }

    /// The position discount of DCG, which also weighs exposure (docs/SPEC.md §11).
    pub fn discount(&self) -> Discount {
        self.settings.discount
    }

    /// The cutoffs, ascending: row `i` of [`evaluate`](Self::evaluate)'s output is `ks()[i]`.
    pub fn ks(&self) -> &[usize] {
        &self.ks
    }

    /// Number of values [`evaluate`](Self::evaluate) writes: a row of
    /// [`Metric::COUNT`] per cutoff, then R-precision.
    pub fn width(&self) -> usize {
        self.r_precision_slot() + 1
    }

    /// Where [`evaluate`](Self::evaluate) writes R-precision, after every cutoff's row.
    pub fn r_precision_slot(&self) -> usize {
        self.ks.len() * Metric::COUNT
    }

    /// Writes every metric at every cutoff for the list with `grades` (rank
    /// order) into `out[k_index * Metric::COUNT + metric as usize]`, and
    /// R-precision into `out[r_precision_slot()]`.
    pub fn evaluate(&mut self, grades: &[f64], out: &mut [f64]) {
        assert_eq!(out.len(), self.width(), "output row has the wrong width");
        self.ideal.clear();
        self.ideal
            .extend(grades.iter().copied().filter(|&g| g > 0.0));
        self.ideal.sort_unstable_by(|a, b| b.total_cmp(a));
        self.seen_positive.clear();
        let relevant_total = self.ideal.len() as f64;
        let gain = self.settings.gain;
        out[self.r_precision_slot()] = r_precision(grades, self.ideal.len());
        let stop = StopProbability::new(self.settings.err_max_grade);

        let mut pass = Pass {
            err_reach: 1.0,
            ..Pass::default()
        };
        let mut next_k = 0;
        for (j, &grade) in grades.iter().enumerate() {
            if next_k == self.ks.len() {
                break;
            }
            let weights = RankWeights {
                discount: self.discounts[j],
                half_life: self.half_life_weights[j],
                rbp: self.rbp_weights[j],
            };
            pass.add(j, grade, gain, &weights);
            pass.add_cascade(j, stop.of(grade), weights.rbp * grade);
            self.count_pairs(grade, &mut pass);
            if let Some(ideal) = self.ideal.get(j) {
                pass.ideal_dcg += gain.apply(*ideal) / self.discounts[j];
                pass.ideal_half_life += gain.apply(*ideal) * self.half_life_weights[j];
            }
            while next_k < self.ks.len() && self.ks[next_k] == j + 1 {
                pass.write(
                    self.ks[next_k],
                    relevant_total,
                    &mut out[next_k * Metric::COUNT..],
                );
                next_k += 1;
            }
        }
        // Cutoffs beyond the list's length see the whole list.
        while next_k < self.ks.len() {
            pass.write(
                self.ks[next_k],
                relevant_total,
                &mut out[next_k * Metric::COUNT..],
            );
            next_k += 1;
        }
    }

    /// Counts the pairs that `grade`, at the end of the prefix, forms with
    /// every earlier item of a different grade.
    fn count_pairs(&mut self, grade: f64, pass: &mut Pass) {
        let earlier = pass.seen as f64 - 1.0;
        let earlier_positive = self.seen_positive.len() as f64;
        if grade > 0.0 {
            let higher = self.seen_positive.iter().filter(|&&g| g > grade).count() as f64;
            let lower_positive = self.seen_positive.iter().filter(|&&g| g < grade).count() as f64;
            let earlier_zero = earlier - earlier_positive;
            pass.concordant_pairs += higher;
            pass.discordant_pairs += lower_positive + earlier_zero;
            self.seen_positive.push(grade);
        } else {
            pass.concordant_pairs += earlier_positive;
        }
    }
}

/// Precision at `R`, the list's relevant count (trec_eval's `Rprec`); 0 when
/// `R = 0`. `R` never exceeds the list's length, since it counts the list's items.
fn r_precision(grades: &[f64], relevant_total: usize) -> f64 {
    if relevant_total == 0 {
        return 0.0;
    }
    let hits = grades[..relevant_total]
        .iter()
        .filter(|&&g| g > 0.0)
        .count();
    hits as f64 / relevant_total as f64
}

/// ERR's chance that a user who reaches an item of grade `g` stops there:
/// `(2^min(g, g_max) − 1) / 2^g_max` (Chapelle et al. 2009). Clamping at
/// `g_max` keeps it a probability when a grade exceeds the configured
/// maximum. It is computed as `2^(min(g, g_max) − g_max) − 2^−g_max`, the
/// same for a `g_max` of a few, and finite for any: `2^1024` alone
/// overflows a double (`g_max = 1024` had made ERR NaN).
struct StopProbability {
    max_grade: f64,
    /// `2^−g_max`.
    floor: f64,
}

impl StopProbability {
    fn new(max_grade: f64) -> Self {
        Self {
            max_grade,
            floor: (-max_grade).exp2(),
        }
    }

    fn of(&self, grade: f64) -> f64 {
        if grade <= 0.0 {
            return 0.0;
        }
        (grade.min(self.max_grade) - self.max_grade).exp2() - self.floor
    }
}

/// The weights of one rank, precomputed up to the largest K.
struct RankWeights {
    discount: f64,
    half_life: f64,
    rbp: f64,
}

/// Running sums over a prefix of the list.
#[derive(Default)]
struct Pass {
    seen: usize,
    hits: f64,
    first_hit_rank: Option<usize>,
    precision_sum: f64,
    dcg: f64,
    ideal_dcg: f64,
    half_life: f64,
    ideal_half_life: f64,
    concordant_pairs: f64,
    discordant_pairs: f64,
    /// ERR so far: `Σ_j (1/j)·stop_j·Π_{i<j}(1 − stop_i)`.
    err: f64,
    /// `Π_{i ≤ j}(1 − stop_i)`: the chance the user reads past the prefix.
    err_reach: f64,
    /// RBP so far: `(1 − p)·Σ_j g_j·p^{j−1}`.
    rbp: f64,
}

impl Pass {
    fn add(&mut self, j: usize, grade: f64, gain: Gain, weights: &RankWeights) {
        self.seen = j + 1;
        if grade > 0.0 {
            self.hits += 1.0;
            self.first_hit_rank.get_or_insert(j + 1);
            self.precision_sum += self.hits / (j + 1) as f64;
        }
        let gained = gain.apply(grade);
        self.dcg += gained / weights.discount;
        self.half_life += gained * weights.half_life;
    }

    /// Adds rank `j + 1` to the cascade metrics: ERR with the item's stop
    /// probability, RBP with its weighted grade.
    fn add_cascade(&mut self, j: usize, stop: f64, rbp: f64) {
        self.rbp += rbp;
        if stop == 0.0 {
            return;
        }
        self.err += self.err_reach * stop / (j + 1) as f64;
        self.err_reach *= 1.0 - stop;
    }

    fn write(&self, k: usize, relevant_total: f64, row: &mut [f64]) {
        let ratio = |num: f64, den: f64| if den > 0.0 { num / den } else { 0.0 };
        // A list's gain over its ideal order's is at most 1; the two sums add
        // the same gains in other orders, which may round the ratio past it.
        let normalized = |num: f64, den: f64| ratio(num, den).min(1.0);
        row[Metric::HitRate as usize] = if self.hits > 0.0 { 1.0 } else { 0.0 };
        row[Metric::Mrr as usize] = self.first_hit_rank.map_or(0.0, |rank| 1.0 / rank as f64);
        row[Metric::Precision as usize] = self.hits / k as f64;
        row[Metric::Recall as usize] = ratio(self.hits, relevant_total);
        row[Metric::Map as usize] = ratio(self.precision_sum, relevant_total);
        row[Metric::Ndcg as usize] = normalized(self.dcg, self.ideal_dcg);
        row[Metric::Dcg as usize] = self.dcg;
        row[Metric::HalfLifeUtility as usize] = normalized(self.half_life, self.ideal_half_life);
        row[Metric::PairwiseAccuracy as usize] = ratio(
            self.concordant_pairs,
            self.concordant_pairs + self.discordant_pairs,
        );
        row[Metric::Err as usize] = self.err;
        row[Metric::Rbp as usize] = self.rbp;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every value of `grades` at the single cutoff `k`, and R-precision.
    fn row(settings: MetricSettings, k: usize, grades: &[f64]) -> (Vec<f64>, f64) {
        let mut evaluator = ListEvaluator::new(settings, &[k]);
        let mut out = vec![0.0; evaluator.width()];
        evaluator.evaluate(grades, &mut out);
        let r_precision = out[evaluator.r_precision_slot()];
        out.truncate(Metric::COUNT);
        (out, r_precision)
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn err_follows_the_cascade_worked_by_hand() {
        // g_max = 3: stop at grade 3 with 7/8, at grade 2 with 3/8, never at 0.
        // ERR@3 = 7/8 + (1/8)·0/2 + (1/8)·(3/8)/3 = 0.875 + 0.015625.
        let (values, _) = row(MetricSettings::default(), 3, &[3.0, 0.0, 2.0]);
        assert!(close(values[Metric::Err as usize], 0.890625));
        // The cut at K = 1 keeps the first term only.
        let (values, _) = row(MetricSettings::default(), 1, &[3.0, 0.0, 2.0]);
        assert!(close(values[Metric::Err as usize], 0.875));
    }

    #[test]
    fn normalized_metrics_of_an_ideal_order_are_one_however_sums_round() {
        // Discounts of 1 at every rank make any order ideal; DCG and ideal
        // DCG then add the same gains in other orders, and 0.1 + 0.2 + 0.7
        // rounds above 0.7 + 0.2 + 0.1.
        let settings = MetricSettings {
            discount: Discount::Jarvelin { base: 3.0 },
            half_life: 1e300,
            ..MetricSettings::default()
        };
        let (values, _) = row(settings, 3, &[0.1, 0.2, 0.7]);
        assert_eq!(values[Metric::Ndcg as usize], 1.0);
        assert_eq!(values[Metric::HalfLifeUtility as usize], 1.0);
    }

    #[test]
    fn err_clamps_grades_above_g_max() {
        // Grade 5 stops like grade 3 (7/8): the next item is still reached with 1/8.
        let (values, _) = row(MetricSettings::default(), 2, &[5.0, 3.0]);
        assert!(close(
            values[Metric::Err as usize],
            0.875 + 0.125 * 0.875 / 2.0
        ));
    }

    #[test]
    fn err_stays_finite_whatever_g_max() {
        // 2^1024 overflows a double: the chance must not be computed through it.
        for g_max in [1023.0, 1024.0, 1e6, f64::MAX] {
            let settings = MetricSettings {
                err_max_grade: g_max,
                ..MetricSettings::default()
            };
            let (values, _) = row(settings, 3, &[1024.0, 2.0, 1e300]);
            let err = values[Metric::Err as usize];
            assert!(
                err.is_finite() && (0.0..=1.0).contains(&err),
                "g_max {g_max}: {err}"
            );
        }
        // At g_max = 1024 the top grade stops the user all but surely.
        let settings = MetricSettings {
            err_max_grade: 1024.0,
            ..MetricSettings::default()
        };
        let (values, _) = row(settings, 1, &[1024.0]);
        assert!(close(values[Metric::Err as usize], 1.0));
    }

    #[test]
    fn rbp_weights_grades_geometrically_without_residual() {
        // p = 0.8: 0.2·(1 + 0.8²·1) = 0.328; graded, 0.2·(2 + 0.64) = 0.528.
        let (values, _) = row(MetricSettings::default(), 10, &[1.0, 0.0, 1.0]);
        assert!(close(values[Metric::Rbp as usize], 0.328));
        let (values, _) = row(MetricSettings::default(), 10, &[2.0, 0.0, 1.0]);
        assert!(close(values[Metric::Rbp as usize], 0.528));
        // K = 2 cuts the third item off.
        let (values, _) = row(MetricSettings::default(), 2, &[2.0, 0.0, 1.0]);
        assert!(close(values[Metric::Rbp as usize], 0.4));
        let half = MetricSettings {
            rbp_persistence: 0.5,
            ..MetricSettings::default()
        };
        let (values, _) = row(half, 10, &[0.0, 1.0, 1.0]);
        assert!(close(values[Metric::Rbp as usize], 0.5 * (0.5 + 0.25)));
    }

    #[test]
    fn r_precision_cuts_at_the_lists_relevant_count_whatever_k() {
        // R = 2; one of the first two is relevant.
        let (_, r_precision) = row(MetricSettings::default(), 1, &[1.0, 0.0, 2.0, 0.0]);
        assert!(close(r_precision, 0.5));
        let (_, r_precision) = row(MetricSettings::default(), 20, &[0.0, 0.0, 3.0]);
        assert!(close(r_precision, 0.0));
        let (_, r_precision) = row(MetricSettings::default(), 2, &[1.0, 1.0, 1.0, 0.0]);
        assert!(close(r_precision, 1.0));
        let (_, r_precision) = row(MetricSettings::default(), 5, &[0.0, 0.0]);
        assert_eq!(r_precision, 0.0);
    }
}
