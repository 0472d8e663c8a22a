//! Rolling time windows of finalized lists, per group, bucketed by impression
//! time. A window of span `w` is 60 buckets of `w / 60`, so its edge blurs by
//! at most 1/60 of the window (SPEC §5). Coverage, whose sets of items weigh
//! far more than a row of sums, is kept in 6 panes of `w / 6` per window.

use crate::event::Nanos;
use crate::metrics::{Coverage, CoverageFigures, FiguresCache, GroupTotals, ShownList};

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

/// Panes per window of the coverage windows.
const PANES: i64 = 6;

/// The rolling coverage of one group (SPEC §11): per window, 6 panes of
/// `w / 6` by impression time, so that a window's figure covers between
/// 5/6 of it and all of it.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CoverageWindows {
    windows: Vec<CoverageWindow>,
    /// The figures since start, until a list or pane comes in.
    #[serde(skip)]
    since_start_cache: FiguresCache<()>,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct CoverageWindow {
    pane_span: Nanos,
    /// Slot `id % PANES` holds pane `id` (lists with `time / pane_span == id`).
    panes: Vec<Option<(i64, Coverage)>>,
    /// The figures by the newest pane in view, until a list or pane comes in.
    #[serde(skip)]
    cache: FiguresCache<i64>,
}

impl CoverageWindows {
    /// Windows of the given spans.
    pub fn new(spans: &[Nanos]) -> Self {
        let windows = spans
            .iter()
            .map(|&span| CoverageWindow {
                pane_span: (span / PANES).max(1),
                panes: vec![None; PANES as usize],
                cache: FiguresCache::default(),
            })
            .collect();
        Self {
            windows,
            since_start_cache: FiguresCache::default(),
        }
    }

    /// Whether every window has a pane span and its panes, as
    /// [`CoverageWindows::new`] makes them: `add` divides by the one and
    /// indexes the other.
    pub fn is_well_formed(&self) -> bool {
        self.windows
            .iter()
            .all(|w| w.pane_span > 0 && w.panes.len() == PANES as usize)
    }

    /// The window of the longest span, whose panes also hold the newest
    /// lists of the figures since start.
    fn longest(&self) -> Option<usize> {
        (0..self.windows.len()).max_by_key(|&index| (self.windows[index].pane_span, index))
    }

    /// Adds a finalized list shown at `time` to the pane of every window it
    /// falls in; a pane that comes round again starts empty (in the room
    /// the pane it replaces took). The figures
    /// since start are `since_start` with the panes of the longest window: a
    /// list too old for those panes, and a pane of it that comes round, go
    /// into `since_start`, so that each list is added to one coverage fewer.
    pub fn add(
        &mut self,
        time: Nanos,
        list: &ShownList<'_>,
        cap: Option<usize>,
        since_start: &mut Coverage,
    ) {
        self.forget_figures();
        let longest = self.longest();
        let mut in_a_longest_pane = false;
        for (index, window) in self.windows.iter_mut().enumerate() {
            let id = time.div_euclid(window.pane_span);
            let slot = &mut window.panes[id.rem_euclid(PANES) as usize];
            match slot {
                Some((held, _)) if *held > id => continue,
                Some((held, _)) if *held == id => {}
                _ => {
                    let mut pane = match slot.take() {
                        Some((_, passed)) => {
                            if Some(index) == longest {
                                since_start.merge(&passed, cap);
                            }
                            passed
                        }
                        None => Coverage::default(),
                    };
                    pane.clear();
                    *slot = Some((id, pane));
                }
            }
            if let Some((_, pane)) = slot {
                pane.add(list, cap);
                in_a_longest_pane |= Some(index) == longest;
            }
        }
        if !in_a_longest_pane {
            since_start.add(list, cap);
        }
    }

    /// Adds the panes of `other`, whose spans are the same as these,
    /// keeping at most `cap` items' exposures in each; a pane of the longest
    /// window that no slot keeps goes into `since_start`.
    pub fn merge(
        &mut self,
        other: &CoverageWindows,
        cap: Option<usize>,
        since_start: &mut Coverage,
    ) {
        self.forget_figures();
        let longest = self.longest();
        for (index, (window, theirs)) in self.windows.iter_mut().zip(&other.windows).enumerate() {
            let keeps_since_start = Some(index) == longest;
            for (slot, their_slot) in window.panes.iter_mut().zip(&theirs.panes) {
                let Some((id, coverage)) = their_slot else {
                    continue;
                };
                let passed = match slot {
                    Some((held, mine)) if held == id => {
                        mine.merge(coverage, cap);
                        None
                    }
                    Some((held, _)) if *held > *id => Some(coverage.clone()),
                    _ => slot.replace((*id, coverage.clone())).map(|(_, mine)| mine),
                };
                if let (Some(passed), true) = (passed, keeps_since_start) {
                    since_start.merge(&passed, cap);
                }
            }
        }
    }

    /// Forgets the figures kept, as a list or pane has come in.
    fn forget_figures(&mut self) {
        self.since_start_cache.forget();
        for window in &mut self.windows {
            window.cache.forget();
        }
    }

    /// The figures since start: `since_start` with every pane of the
    /// longest window. `since_start` is the one that `add` and `merge` are
    /// given, and changes only with them.
    pub fn since_start(&self, since_start: &Coverage) -> CoverageFigures {
        let Some(longest) = self.longest() else {
            return since_start.figures();
        };
        self.since_start_cache
            .get_or((), || self.work_out_since_start(since_start, longest))
    }

    fn work_out_since_start(&self, since_start: &Coverage, longest: usize) -> CoverageFigures {
        let panes = self.windows[longest].panes.iter().flatten();
        let parts: Vec<&Coverage> = std::iter::once(since_start)
            .chain(panes.map(|(_, pane)| pane))
            .collect();
        Coverage::union_figures(&parts)
    }

    /// The figures of window `index` over lists with time in the panes
    /// from `frontier`'s back to the 5 before it.
    pub fn figures(&self, index: usize, frontier: Nanos) -> CoverageFigures {
        let Some(window) = self.windows.get(index) else {
            return CoverageFigures::default();
        };
        let newest = frontier.div_euclid(window.pane_span);
        window.cache.get_or(newest, || window.figures(newest))
    }
}

impl CoverageWindow {
    /// The figures of the panes from `newest` back to the 5 before it.
    fn figures(&self, newest: i64) -> CoverageFigures {
        let oldest = newest - PANES + 1;
        let parts: Vec<&Coverage> = self
            .panes
            .iter()
            .flatten()
            .filter(|(id, _)| (oldest..=newest).contains(id))
            .map(|(_, pane)| pane)
            .collect();
        Coverage::union_figures(&parts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Slot;

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
        let mut since_start = Coverage::default();
        let mut show = |windows: &mut CoverageWindows, time, item| {
            let list = ShownList {
                items: &[item],
                slots: &[Slot::of(item)],
                weights: &[1.0],
                exposure: 1.0,
                engaged: &[],
            };
            windows.add(time, &list, None, &mut since_start);
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
        show(&mut windows, 10, 5);
        assert_eq!(
            windows.figures(0, 75).items_shown,
            3,
            "older than every pane"
        );
        assert_eq!(windows.since_start(&since_start).items_shown, 5);
    }

    #[test]
    fn figures_kept_between_scrapes_follow_new_lists() {
        let mut windows = CoverageWindows::new(&[60, 600]);
        let mut since_start = Coverage::default();
        let mut shown = Vec::new();
        for (time, item) in [(0, 1u64), (15, 2), (30, 3), (31, 4)] {
            let list = ShownList {
                items: &[item],
                slots: &[Slot::of(item)],
                weights: &[1.0],
                exposure: 1.0,
                engaged: &[],
            };
            windows.add(time, &list, None, &mut since_start);
            let figures = (0..2).map(|index| windows.figures(index, 31).items_shown);
            shown.push((
                figures.collect::<Vec<_>>(),
                windows.since_start(&since_start).items_shown,
            ));
        }
        let counts = |n| (vec![n, n], n);
        assert_eq!(shown, [counts(1), counts(2), counts(3), counts(4)]);
    }

    #[test]
    fn since_start_is_every_list_wherever_it_went() {
        let mut windows = CoverageWindows::new(&[60, 600]);
        let (mut since_start, mut whole) = (Coverage::default(), Coverage::default());
        for i in 0..5_000u64 {
            let item = crate::event::id_hash(&format!("item-{}", i % 1_700));
            let weight = 1.0 + (i % 3) as f64;
            let list = ShownList {
                items: &[item],
                slots: &[Slot::of(item)],
                weights: &[weight],
                exposure: weight,
                engaged: &[],
            };
            // Mostly in time order, some late, some far too old.
            let late = (i % 7) as i64 * 30 + if i % 500 == 0 { 5_000 } else { 0 };
            windows.add(i as i64 * 2 - late, &list, Some(512), &mut since_start);
            whole.add(&list, Some(512));
        }
        let (got, want) = (windows.since_start(&since_start), whole.figures());
        assert_eq!(got.items_shown, want.items_shown);
        assert!((got.exposure_gini - want.exposure_gini).abs() < 1e-9);
        assert!((got.exposure_entropy - want.exposure_entropy).abs() < 1e-9);
    }
}
