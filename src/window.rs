//! Rolling time windows of finalized lists, per group, bucketed by impression
//! time. A window of span `w` is 60 buckets of `w / 60`, so its edge blurs by
//! at most 1/60 of the window (SPEC §5). Coverage, whose sets of items weigh
//! far more than a row of sums, is kept in 6 panes of `w / 6` per window.

use crate::event::Nanos;
use crate::metrics::{Coverage, CoverageFigures, GroupTotals};

/// Buckets per window.
const BUCKETS: i64 = 60;

/// The rolling windows of one group.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RollingWindows {
    windows: Vec<Window>,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Window {
    bucket_span: Nanos,
    /// Slot `id % BUCKETS` holds bucket `id` (lists with `time / bucket_span == id`).
    slots: Vec<Option<(i64, GroupTotals)>>,
}

impl RollingWindows {
    /// Windows of the given spans (each at least 60 ns), for rows of `width` values.
    pub fn new(spans: &[Nanos]) -> Self {
        let windows = spans
            .iter()
            .map(|&span| Window {
                bucket_span: (span / BUCKETS).max(1),
                slots: vec![None; BUCKETS as usize],
            })
            .collect();
        Self { windows }
    }

    /// Adds a finalized list whose impression time is `time`.
    pub fn add(&mut self, time: Nanos, values: &[f64], engaged: bool) {
        for window in &mut self.windows {
            let id = time.div_euclid(window.bucket_span);
            let slot = &mut window.slots[id.rem_euclid(BUCKETS) as usize];
            match slot {
                Some((held, totals)) if *held == id => totals.add(values, engaged),
                Some((held, _)) if *held > id => {} // older than the window: already out of every view
                _ => {
                    let mut totals = GroupTotals::new(values.len());
                    totals.add(values, engaged);
                    *slot = Some((id, totals));
                }
            }
        }
    }

    /// Adds the buckets of `other`, whose spans are the same as these.
    pub fn merge(&mut self, other: &RollingWindows) {
        for (window, theirs) in self.windows.iter_mut().zip(&other.windows) {
            for (slot, their_slot) in window.slots.iter_mut().zip(&theirs.slots) {
                let Some((id, totals)) = their_slot else {
                    continue;
                };
                match slot {
                    Some((held, mine)) if held == id => mine.merge(totals),
                    Some((held, _)) if *held > *id => {}
                    _ => *slot = Some((*id, totals.clone())),
                }
            }
        }
    }

    /// The totals of window `index` over lists with time in `(frontier − span, frontier]`.
    pub fn totals(&self, index: usize, frontier: Nanos) -> GroupTotals {
        let mut sum = GroupTotals::default();
        let Some(window) = self.windows.get(index) else {
            return sum;
        };
        let newest = frontier.div_euclid(window.bucket_span);
        let oldest = newest - BUCKETS + 1;
        for (id, totals) in window.slots.iter().flatten() {
            if (oldest..=newest).contains(id) {
                sum.merge(totals);
            }
        }
        sum
    }
}

/// Panes per window of the coverage windows.
const PANES: i64 = 6;

/// The rolling coverage of one group (SPEC §11): per window, 6 panes of
/// `w / 6` by impression time, so that a window's figure covers between
/// 5/6 of it and all of it.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CoverageWindows {
    windows: Vec<CoverageWindow>,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct CoverageWindow {
    pane_span: Nanos,
    /// Slot `id % PANES` holds pane `id` (lists with `time / pane_span == id`).
    panes: Vec<Option<(i64, Coverage)>>,
}

impl CoverageWindows {
    /// Windows of the given spans.
    pub fn new(spans: &[Nanos]) -> Self {
        let windows = spans
            .iter()
            .map(|&span| CoverageWindow {
                pane_span: (span / PANES).max(1),
                panes: vec![None; PANES as usize],
            })
            .collect();
        Self { windows }
    }

    /// The coverage of the pane of every window that a list shown at `time`
    /// falls in, or `None` for windows it is already too old for; a pane
    /// that comes round again starts empty.
    pub fn panes_at(&mut self, time: Nanos) -> impl Iterator<Item = &mut Coverage> {
        self.windows.iter_mut().filter_map(move |window| {
            let id = time.div_euclid(window.pane_span);
            let slot = &mut window.panes[id.rem_euclid(PANES) as usize];
            match slot {
                Some((held, _)) if *held > id => return None,
                Some((held, _)) if *held == id => {}
                _ => *slot = Some((id, Coverage::default())),
            }
            slot.as_mut().map(|(_, coverage)| coverage)
        })
    }

    /// Adds the panes of `other`, whose spans are the same as these,
    /// keeping at most `cap` items' exposures in each.
    pub fn merge(&mut self, other: &CoverageWindows, cap: Option<usize>) {
        for (window, theirs) in self.windows.iter_mut().zip(&other.windows) {
            for (slot, their_slot) in window.panes.iter_mut().zip(&theirs.panes) {
                let Some((id, coverage)) = their_slot else {
                    continue;
                };
                match slot {
                    Some((held, mine)) if held == id => mine.merge(coverage, cap),
                    Some((held, _)) if *held > *id => {}
                    _ => *slot = Some((*id, coverage.clone())),
                }
            }
        }
    }

    /// The figures of window `index` over lists with time in the panes
    /// from `frontier`'s back to the 5 before it.
    pub fn figures(&self, index: usize, frontier: Nanos) -> CoverageFigures {
        let Some(window) = self.windows.get(index) else {
            return CoverageFigures::default();
        };
        let newest = frontier.div_euclid(window.pane_span);
        let oldest = newest - PANES + 1;
        let mut union = Coverage::default();
        for (id, coverage) in window.panes.iter().flatten() {
            if (oldest..=newest).contains(id) {
                union.merge(coverage, None);
            }
        }
        union.figures()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{ShownList, Slot};

    #[test]
    fn counts_only_lists_inside_the_window() {
        let mut windows = RollingWindows::new(&[60, 600]);
        for time in [0, 30, 59, 100, 130] {
            windows.add(time, &[1.0], true);
        }
        assert_eq!(windows.totals(0, 130).lists, 2, "(70, 130]");
        assert_eq!(windows.totals(0, 59).lists, 3, "(-1, 59]");
        assert_eq!(windows.totals(1, 130).lists, 5);
        assert_eq!(windows.totals(0, 1_000).lists, 0);
        assert_eq!(windows.totals(0, 130).sums, vec![2.0]);
    }

    #[test]
    fn coverage_windows_count_the_items_of_their_panes() {
        let mut windows = CoverageWindows::new(&[60]);
        let show = |windows: &mut CoverageWindows, time, item| {
            let list = ShownList {
                items: &[item],
                slots: &[Slot::of(item)],
                weights: &[1.0],
                exposure: 1.0,
                engaged: &[],
            };
            for pane in windows.panes_at(time) {
                pane.add(&list, None);
            }
        };
        for (time, item) in [(0, 1u64), (15, 2), (30, 1), (59, 3)] {
            show(&mut windows, time, item);
        }
        assert_eq!(
            windows.figures(0, 59).items_shown,
            3,
            "panes [0, 60): items 1, 2, 3"
        );
        show(&mut windows, 75, 4);
        assert_eq!(
            windows.figures(0, 75).items_shown,
            3,
            "panes [20, 80): items 1 (at 30), 3, 4"
        );
        assert_eq!(windows.figures(0, 1_000).items_shown, 0);
        assert!(
            windows.panes_at(10).next().is_none(),
            "older than every pane"
        );
    }
}
