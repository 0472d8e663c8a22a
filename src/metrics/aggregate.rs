//! Sums of per-list values for one group, from which both scopes' means follow.

/// The sums over a set of finalized lists of one group.
///
/// Unengaged lists contribute 0 to every metric, so the `all` and `engaged`
/// scopes share `sums` and differ only in the count they divide by.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GroupTotals {
    /// Finalized lists.
    pub lists: u64,
    /// Finalized lists with at least one item of grade > 0.
    pub engaged: u64,
    /// Per-list values summed, laid out as [`ListEvaluator::evaluate`](super::ListEvaluator::evaluate) writes them.
    pub sums: Vec<f64>,
}

/// Means of one set of lists in both scopes.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MetricMeans {
    /// Over every list.
    pub all: f64,
    /// Over engaged lists only.
    pub engaged: f64,
}

impl GroupTotals {
    /// Empty totals for rows of `width` values.
    pub fn new(width: usize) -> Self {
        Self {
            lists: 0,
            engaged: 0,
            sums: vec![0.0; width],
        }
    }

    /// Adds one finalized list's values.
    pub fn add(&mut self, values: &[f64], engaged: bool) {
        self.lists += 1;
        self.engaged += u64::from(engaged);
        for (sum, value) in self.sums.iter_mut().zip(values) {
            *sum += value;
        }
    }

    /// Adds another set of totals of the same width.
    pub fn merge(&mut self, other: &GroupTotals) {
        self.lists += other.lists;
        self.engaged += other.engaged;
        if self.sums.len() < other.sums.len() {
            self.sums.resize(other.sums.len(), 0.0);
        }
        for (sum, value) in self.sums.iter_mut().zip(&other.sums) {
            *sum += value;
        }
    }

    /// The means of the value at `slot`.
    pub fn means(&self, slot: usize) -> MetricMeans {
        let sum = self.sums.get(slot).copied().unwrap_or(0.0);
        let mean = |count: u64| if count == 0 { 0.0 } else { sum / count as f64 };
        MetricMeans {
            all: mean(self.lists),
            engaged: mean(self.engaged),
        }
    }
}
