//! Sums of per-list values for one group, from which both scopes' means
//! and their standard errors follow.

use super::uncertainty::{standard_error, Estimate};

/// The sums over a set of finalized lists of one group.
///
/// Unengaged lists contribute 0 to every metric, so the `all` and `engaged`
/// scopes share `sums` and `squares` and differ only in the count they divide by.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GroupTotals {
    /// Finalized lists.
    pub lists: u64,
    /// Finalized lists with at least one item of grade > 0.
    pub engaged: u64,
    /// Per-list values summed, laid out as [`ListEvaluator::evaluate`](super::ListEvaluator::evaluate) writes them.
    pub sums: Vec<f64>,
    /// Squares of the per-list values summed, in the same layout (docs/SPEC.md §9).
    pub squares: Vec<f64>,
}

/// Means of one set of lists in both scopes.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MetricMeans {
    /// Over every list.
    pub all: f64,
    /// Over engaged lists only.
    pub engaged: f64,
    /// Standard error of `all`.
    pub se_all: f64,
    /// Standard error of `engaged`.
    pub se_engaged: f64,
}

impl GroupTotals {
    /// Empty totals for rows of `width` values.
    pub fn new(width: usize) -> Self {
        Self {
            lists: 0,
            engaged: 0,
            sums: vec![0.0; width],
            squares: vec![0.0; width],
        }
    }

    /// Adds one finalized list's values. Those of a list that is not
    /// engaged are all 0 (docs/SPEC.md §4: no item has a grade > 0), so only its
    /// count changes.
    pub fn add(&mut self, values: &[f64], engaged: bool) {
        self.lists += 1;
        if !engaged {
            debug_assert!(values.iter().all(|&v| v == 0.0), "an unengaged list scored");
            return;
        }
        self.engaged += 1;
        for (sum, value) in self.sums.iter_mut().zip(values) {
            *sum += value;
        }
        for (square, value) in self.squares.iter_mut().zip(values) {
            *square += value * value;
        }
    }

    /// Adds another set of totals of the same width.
    pub fn merge(&mut self, other: &GroupTotals) {
        self.lists += other.lists;
        self.engaged += other.engaged;
        merge_into(&mut self.sums, &other.sums);
        merge_into(&mut self.squares, &other.squares);
    }

    /// Takes out `before`, totals these grew from: what was added since.
    /// Floating-point sums of non-negative values stay non-negative and
    /// grow with the totals.
    pub fn less(&mut self, before: &GroupTotals) {
        self.lists = self.lists.saturating_sub(before.lists);
        self.engaged = self.engaged.saturating_sub(before.engaged);
        for (mine, earlier) in [
            (&mut self.sums, &before.sums),
            (&mut self.squares, &before.squares),
        ] {
            for (value, earlier) in mine.iter_mut().zip(earlier) {
                *value -= earlier;
            }
        }
    }

    /// Whether these totals could have grown from `before`: of the same
    /// width, with no count or sum lower, and `before`'s sums finite and
    /// at least 0 (as every per-list value is).
    pub fn grew_from(&self, before: &GroupTotals) -> bool {
        let possible = |sum: &f64| sum.is_finite() && *sum >= 0.0;
        before.sums.iter().chain(&before.squares).all(possible)
            && self.lists >= before.lists
            && self.engaged >= before.engaged
            && no_lower(&self.sums, &before.sums)
            && no_lower(&self.squares, &before.squares)
    }

    /// The sum of the values at `slot`.
    pub fn sum(&self, slot: usize) -> f64 {
        self.sums.get(slot).copied().unwrap_or(0.0)
    }

    /// The sum of the squared values at `slot`.
    pub fn sum_of_squares(&self, slot: usize) -> f64 {
        self.squares.get(slot).copied().unwrap_or(0.0)
    }

    /// The means of the value at `slot`, with their standard errors.
    pub fn means(&self, slot: usize) -> MetricMeans {
        let (sum, squares) = (self.sum(slot), self.sum_of_squares(slot));
        let mean = |count: u64| if count == 0 { 0.0 } else { sum / count as f64 };
        MetricMeans {
            all: mean(self.lists),
            engaged: mean(self.engaged),
            se_all: standard_error(sum, squares, self.lists),
            se_engaged: standard_error(sum, squares, self.engaged),
        }
    }

    /// The mean over every list of the value at `slot` (scope `all`), with its standard error.
    pub fn estimate(&self, slot: usize) -> Estimate {
        let means = self.means(slot);
        Estimate {
            mean: means.all,
            se: means.se_all,
            n: self.lists,
        }
    }
}

/// Adds `other` element-wise into `totals`, growing it to fit.
fn merge_into(totals: &mut Vec<f64>, other: &[f64]) {
    if totals.len() < other.len() {
        totals.resize(other.len(), 0.0);
    }
    for (total, value) in totals.iter_mut().zip(other) {
        *total += value;
    }
}

/// Whether `mine` holds as many values as `earlier`, none lower than the
/// one at its place (and so none NaN).
pub fn no_lower<T: PartialOrd>(mine: &[T], earlier: &[T]) -> bool {
    mine.len() == earlier.len() && mine.iter().zip(earlier).all(|(m, e)| m >= e)
}
