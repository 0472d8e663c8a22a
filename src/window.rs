//! Rolling time windows of finalized lists, per group, bucketed by impression
//! time. A window of span `w` is 60 buckets of `w / 60`, so its edge blurs by
//! at most 1/60 of the window (SPEC §5).

use crate::event::Nanos;
use crate::metrics::GroupTotals;

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

    /// Whether every window has a bucket span and its 60 slots, as
    /// [`RollingWindows::new`] makes them: `add` divides by the one and
    /// indexes the other.
    pub fn is_well_formed(&self) -> bool {
        self.windows
            .iter()
            .all(|w| w.bucket_span > 0 && w.slots.len() == BUCKETS as usize)
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
