//! Per-list metrics at every cutoff K, computed in one pass over the list.
//!
//! Definitions follow SPEC §4 and agree with trec_eval (`success`,
//! `recip_rank`, `P`, `recall`, `map_cut`, `ndcg_cut`) on the same grades.

/// How a grade turns into gain in DCG and half-life utility.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Gain {
    /// `gain(g) = g`.
    Linear,
    /// `gain(g) = 2^g − 1` (Burges).
    Exponential,
}

impl Gain {
    fn apply(self, grade: f64) -> f64 {
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
    fn at_rank(self, rank: usize) -> f64 {
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
}

impl Default for MetricSettings {
    fn default() -> Self {
        Self {
            gain: Gain::Linear,
            discount: Discount::Log2,
            half_life: 5.0,
        }
    }
}

/// A per-list metric. The discriminant is the metric's slot in a row of values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Metric {
    HitRate,
    Mrr,
    Precision,
    Recall,
    Map,
    Ndcg,
    Dcg,
    HalfLifeUtility,
    PairwiseAccuracy,
}

impl Metric {
    /// Every metric, in slot order.
    pub const ALL: [Metric; 9] = [
        Metric::HitRate,
        Metric::Mrr,
        Metric::Precision,
        Metric::Recall,
        Metric::Map,
        Metric::Ndcg,
        Metric::Dcg,
        Metric::HalfLifeUtility,
        Metric::PairwiseAccuracy,
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
        }
    }
}

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
        Self {
            settings,
            ks,
            discounts,
            half_life_weights,
            ideal: Vec::new(),
            seen_positive: Vec::new(),
        }
    }

    /// The cutoffs, ascending: row `i` of [`evaluate`](Self::evaluate)'s output is `ks()[i]`.
    pub fn ks(&self) -> &[usize] {
        &self.ks
    }

    /// Number of values [`evaluate`](Self::evaluate) writes.
    pub fn width(&self) -> usize {
        self.ks.len() * Metric::COUNT
    }

    /// Writes every metric at every cutoff for the list with `grades` (rank
    /// order) into `out[k_index * Metric::COUNT + metric as usize]`.
    pub fn evaluate(&mut self, grades: &[f64], out: &mut [f64]) {
        assert_eq!(out.len(), self.width(), "output row has the wrong width");
        self.ideal.clear();
        self.ideal
            .extend(grades.iter().copied().filter(|&g| g > 0.0));
        self.ideal.sort_unstable_by(|a, b| b.total_cmp(a));
        self.seen_positive.clear();
        let relevant_total = self.ideal.len() as f64;
        let gain = self.settings.gain;

        let mut pass = Pass::default();
        let mut next_k = 0;
        for (j, &grade) in grades.iter().enumerate() {
            if next_k == self.ks.len() {
                break;
            }
            pass.add(j, grade, gain, self.discounts[j], self.half_life_weights[j]);
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
}

impl Pass {
    fn add(&mut self, j: usize, grade: f64, gain: Gain, discount: f64, half_life_weight: f64) {
        self.seen = j + 1;
        if grade > 0.0 {
            self.hits += 1.0;
            self.first_hit_rank.get_or_insert(j + 1);
            self.precision_sum += self.hits / (j + 1) as f64;
        }
        let gained = gain.apply(grade);
        self.dcg += gained / discount;
        self.half_life += gained * half_life_weight;
    }

    fn write(&self, k: usize, relevant_total: f64, row: &mut [f64]) {
        let ratio = |num: f64, den: f64| if den > 0.0 { num / den } else { 0.0 };
        row[Metric::HitRate as usize] = if self.hits > 0.0 { 1.0 } else { 0.0 };
        row[Metric::Mrr as usize] = self.first_hit_rank.map_or(0.0, |rank| 1.0 / rank as f64);
        row[Metric::Precision as usize] = self.hits / k as f64;
        row[Metric::Recall as usize] = ratio(self.hits, relevant_total);
        row[Metric::Map as usize] = ratio(self.precision_sum, relevant_total);
        row[Metric::Ndcg as usize] = ratio(self.dcg, self.ideal_dcg);
        row[Metric::Dcg as usize] = self.dcg;
        row[Metric::HalfLifeUtility as usize] = ratio(self.half_life, self.ideal_half_life);
        row[Metric::PairwiseAccuracy as usize] = ratio(
            self.concordant_pairs,
            self.concordant_pairs + self.discordant_pairs,
        );
    }
}
