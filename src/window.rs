//! Rolling time windows of finalized lists, per group, bucketed by impression
//! time. A window of span `w` is 60 buckets of `w / 60`, so its edge blurs by
//! at most 1/60 of the window (docs/SPEC.md §5). Coverage, whose sets of items weigh
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

/// The rolling coverage of one group (docs/SPEC.md §11): per window, 6 panes of
/// `w / 6` by impression time, so that a window's figure covers between
/// 5/6 of it and all of it.
///
/// Nested windows cascade: where a window's panes are a whole number of a
/// shorter window's (10 s panes in 50 s panes in 10 min panes, with the
/// default windows), a list goes into the pane of the shortest window only,
/// and a pane passes its lists up when a newer one opens in its window (a
/// list later than that goes up at once). So the newest pane of each window
/// holds lists that the longer windows' panes do not, and the figures of a
/// window are its panes with the newest panes of the shorter windows under
/// it. The longest window passes its panes on to `since_start`, whose
/// figures are `since_start` with the newest pane of every window in its
/// chain. Each list costs one coverage update, whatever the windows.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(from = "SavedCoverageWindows")]
pub struct CoverageWindows {
    windows: Vec<CoverageWindow>,
    /// How the windows cascade, worked out from their spans.
    #[serde(skip)]
    chain: Chain,
}

/// The saved form of [`CoverageWindows`]: the windows alone.
#[derive(serde::Deserialize)]
struct SavedCoverageWindows {
    windows: Vec<CoverageWindow>,
}

impl From<SavedCoverageWindows> for CoverageWindows {
    fn from(saved: SavedCoverageWindows) -> Self {
        Self::of(saved.windows)
    }
}

/// How the windows cascade, by window index: worked out once, as every
/// list asks.
#[derive(Clone, Debug, Default, PartialEq)]
struct Chain {
    /// The window that takes each window's panes as they close: the next
    /// in order of pane span, if its panes are a whole number of these.
    parents: Vec<Option<usize>>,
    /// The window whose panes each window takes.
    children: Vec<Option<usize>>,
    /// The window of the longest pane span, at the head of its chain.
    longest: Option<usize>,
}

impl Chain {
    /// The chain of `windows`, from their pane spans.
    fn of(windows: &[CoverageWindow]) -> Self {
        let order = |index: usize| (windows[index].pane_span, index);
        let parent = |index: usize| {
            let next = (0..windows.len())
                .filter(|&i| order(i) > order(index))
                .min_by_key(|&i| order(i))?;
            let (span, longer) = (windows[index].pane_span, windows[next].pane_span);
            (span > 0 && longer % span == 0).then_some(next)
        };
        let parents: Vec<Option<usize>> = (0..windows.len()).map(parent).collect();
        let children = (0..windows.len())
            .map(|index| parents.iter().position(|&p| p == Some(index)))
            .collect();
        Self {
            parents,
            children,
            longest: (0..windows.len()).max_by_key(|&index| order(index)),
        }
    }
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

impl CoverageWindow {
    /// The id of the newest pane held.
    fn newest(&self) -> Option<i64> {
        self.panes.iter().flatten().map(|(id, _)| *id).max()
    }

    /// The pane `id`, if held.
    fn pane(&self, id: i64) -> Option<&Coverage> {
        match &self.panes[id.rem_euclid(PANES) as usize] {
            Some((held, pane)) if *held == id => Some(pane),
            _ => None,
        }
    }
}

/// What goes up a chain of windows: a finalized list, or a pane's lists.
#[derive(Clone, Copy)]
enum Lists<'a> {
    One(&'a ShownList<'a>),
    Pane(&'a Coverage),
}

impl Lists<'_> {
    /// Adds the lists to `coverage`, keeping at most `cap` items' exposures.
    fn add_to(self, coverage: &mut Coverage, cap: Option<usize>) {
        match self {
            Lists::One(list) => coverage.add(list, cap),
            Lists::Pane(pane) => coverage.merge(pane, cap),
        }
    }
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
        Self::of(windows)
    }

    /// These windows, with their chain worked out.
    fn of(windows: Vec<CoverageWindow>) -> Self {
        Self {
            chain: Chain::of(&windows),
            windows,
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

    /// The window of the longest span, at the head of its chain.
    fn longest(&self) -> Option<usize> {
        self.chain.longest
    }

    /// The window that takes the panes of window `index` as they close.
    fn parent(&self, index: usize) -> Option<usize> {
        self.chain.parents.get(index).copied().flatten()
    }

    /// The window whose panes window `index` takes, if any.
    fn child(&self, index: usize) -> Option<usize> {
        self.chain.children.get(index).copied().flatten()
    }

    /// Adds a finalized list shown at `time` to `since_start`, and to the
    /// pane of the shortest window of each chain that it is not too old
    /// for, and on up the chain while that pane is not its window's newest;
    /// a pane that comes round again starts empty (in the room the pane it
    /// replaces took). `since_start` takes every list as it comes, as one
    /// coverage given every list in a replay does, so that the two sum each
    /// item's exposure in one order and agree to the last digit (panes
    /// passed on to it had summed a pane's lists first).
    pub fn add(
        &mut self,
        time: Nanos,
        list: &ShownList<'_>,
        cap: Option<usize>,
        since_start: &mut Coverage,
    ) {
        self.forget_figures();
        since_start.add(list, cap);
        for index in 0..self.windows.len() {
            if self.child(index).is_none() {
                self.deliver(index, time, Lists::One(list), cap);
            }
        }
    }

    /// Puts `lists`, of `time`, into window `index`'s pane, then on up its
    /// chain unless that pane is its window's newest.
    fn deliver(&mut self, index: usize, time: Nanos, lists: Lists<'_>, cap: Option<usize>) {
        let id = time.div_euclid(self.windows[index].pane_span);
        if let Some(pane) = self.open_pane(index, id, cap) {
            lists.add_to(pane, cap);
            if self.windows[index].newest() == Some(id) {
                return;
            }
        }
        self.pass_up(index, time, lists, cap);
    }

    /// Puts `lists` into the window above window `index`, if any.
    fn pass_up(&mut self, index: usize, time: Nanos, lists: Lists<'_>, cap: Option<usize>) {
        if let Some(parent) = self.parent(index) {
            self.deliver(parent, time, lists, cap);
        }
    }

    /// Window `index`'s pane `id`, opened if its slot holds an older one
    /// (a newer one than every pane held closes the newest, which passes
    /// its lists up); `None` when the slot holds a newer pane.
    fn open_pane(&mut self, index: usize, id: i64, cap: Option<usize>) -> Option<&mut Coverage> {
        let slot = id.rem_euclid(PANES) as usize;
        match &self.windows[index].panes[slot] {
            Some((held, _)) if *held > id => return None,
            Some((held, _)) if *held == id => {}
            _ => {
                if let Some(newest) = self.windows[index].newest().filter(|&n| n < id) {
                    self.close(index, newest, cap);
                }
                let window = &mut self.windows[index];
                let mut pane = window.panes[slot]
                    .take()
                    .map_or_else(Coverage::default, |(_, pane)| pane);
                pane.clear();
                window.panes[slot] = Some((id, pane));
            }
        }
        self.windows[index].panes[slot]
            .as_mut()
            .map(|(_, pane)| pane)
    }

    /// Passes the lists of window `index`'s pane `id` up its chain.
    fn close(&mut self, index: usize, id: i64, cap: Option<usize>) {
        let slot = id.rem_euclid(PANES) as usize;
        let Some((held, pane)) = self.windows[index].panes[slot].take() else {
            return;
        };
        let time = held * self.windows[index].pane_span;
        self.pass_up(index, time, Lists::Pane(&pane), cap);
        self.windows[index].panes[slot] = Some((held, pane));
    }

    /// Adds the panes of `other`, whose spans are the same as these,
    /// keeping at most `cap` items' exposures in each. Pane by pane, then
    /// the newest pane of either side that is no longer the newest passes
    /// its lists up, from the longest window down (the other panes have
    /// passed theirs up already, into the panes just merged). The
    /// coverages since start are merged apart: they hold every list.
    pub fn merge(&mut self, other: &CoverageWindows, cap: Option<usize>) {
        self.forget_figures();
        let newest: Vec<Option<(i64, Coverage)>> = self
            .windows
            .iter()
            .map(|w| w.newest().and_then(|id| Some((id, w.pane(id)?.clone()))))
            .collect();
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
        let mut longest_first: Vec<usize> =
            (0..self.windows.len().min(other.windows.len())).collect();
        longest_first
            .sort_by_key(|&index| std::cmp::Reverse((self.windows[index].pane_span, index)));
        for index in longest_first {
            let theirs = &other.windows[index];
            let their_newest = theirs.newest().and_then(|id| Some((id, theirs.pane(id)?)));
            let mine = newest[index].as_ref().map(|(id, pane)| (*id, pane));
            for (id, pane) in [mine, their_newest].into_iter().flatten() {
                if self.windows[index].newest() != Some(id) {
                    let time = id * self.windows[index].pane_span;
                    self.pass_up(index, time, Lists::Pane(pane), cap);
                }
            }
        }
    }

    /// Forgets the figures kept, as a list or pane has come in.
    fn forget_figures(&mut self) {
        for window in &mut self.windows {
            window.cache.forget();
        }
    }

    /// Adds to `since_start`, saved by a build that passed panes on to it
    /// (state format 8), the lists it did not hold yet: those of the newest
    /// pane of each window of the longest window's chain. It then holds
    /// every list, as [`CoverageWindows::add`] now keeps it.
    pub fn fold_newest_panes_into(&self, since_start: &mut Coverage, cap: Option<usize>) {
        let mut next = self.longest();
        while let Some(index) = next {
            let window = &self.windows[index];
            if let Some(pane) = window.newest().and_then(|id| window.pane(id)) {
                since_start.merge(pane, cap);
            }
            next = self.child(index);
        }
    }

    /// The figures of window `index` over lists with time in the panes
    /// from `frontier`'s back to the 5 before it.
    pub fn figures(&self, index: usize, frontier: Nanos) -> CoverageFigures {
        let Some(window) = self.windows.get(index) else {
            return CoverageFigures::default();
        };
        let newest = frontier.div_euclid(window.pane_span);
        window
            .cache
            .get_or(newest, || self.work_out_figures(index, newest))
    }

    /// The figures of window `index`'s panes from `newest` back to the 5
    /// before it, oldest first, with the newest panes of the shorter
    /// windows of its chain that fall in them, longest first.
    fn work_out_figures(&self, index: usize, newest: i64) -> CoverageFigures {
        let window = &self.windows[index];
        let in_view = newest - PANES + 1..=newest;
        let mut parts: Vec<(i64, &Coverage)> = window
            .panes
            .iter()
            .flatten()
            .filter(|(id, _)| in_view.contains(id))
            .map(|(id, pane)| (*id, pane))
            .collect();
        parts.sort_unstable_by_key(|(id, _)| *id);
        let mut parts: Vec<&Coverage> = parts.into_iter().map(|(_, pane)| pane).collect();
        let mut next = self.child(index);
        while let Some(shorter) = next {
            let below = &self.windows[shorter];
            if let Some(id) = below.newest() {
                let time = id * below.pane_span;
                if in_view.contains(&time.div_euclid(window.pane_span)) {
                    parts.extend(below.pane(id));
                }
            }
            next = self.child(shorter);
        }
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
            one_item(item, 1.0, |list| {
                windows.add(time, list, None, &mut since_start)
            });
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
        assert_eq!(since_start.figures().items_shown, 5);
    }

    #[test]
    fn figures_kept_between_scrapes_follow_new_lists() {
        let mut windows = CoverageWindows::new(&[60, 600]);
        let mut since_start = Coverage::default();
        let mut shown = Vec::new();
        for (time, item) in [(0, 1u64), (15, 2), (30, 3), (31, 4)] {
            one_item(item, 1.0, |list| {
                windows.add(time, list, None, &mut since_start)
            });
            let figures = (0..2).map(|index| windows.figures(index, 31).items_shown);
            shown.push((
                figures.collect::<Vec<_>>(),
                since_start.figures().items_shown,
            ));
        }
        let counts = |n| (vec![n, n], n);
        assert_eq!(shown, [counts(1), counts(2), counts(3), counts(4)]);
    }

    /// A list of one item from 1,700 at `time`, mostly in time order: lists
    /// come up to 40 late, never too old for a pane in view.
    fn cascade_lists(count: u64) -> Vec<(Nanos, u64, f64)> {
        (0..count)
            .map(|i| {
                let item = crate::event::id_hash(&format!("item-{}", i % 1_700));
                let time = i as i64 * 2 - (i % 5) as i64 * 10;
                // Exposures of ranks 1 to 3 under the log discount, whose
                // sums round differently in another order.
                (time, item, 1.0 / ((2 + i % 3) as f64).log2())
            })
            .collect()
    }

    /// Hands `visit` a list of the one item `item`, of exposure `weight`.
    fn one_item<T>(item: u64, weight: f64, visit: impl FnOnce(&ShownList) -> T) -> T {
        let list = ShownList {
            items: &[item],
            slots: &[Slot::of(item)],
            weights: &[weight],
            exposure: weight,
            engaged: &[],
        };
        visit(&list)
    }

    fn add_list(
        windows: &mut CoverageWindows,
        since_start: &mut Coverage,
        (time, item, weight): (Nanos, u64, f64),
        cap: Option<usize>,
    ) {
        one_item(item, weight, |list| {
            windows.add(time, list, cap, since_start)
        });
    }

    /// The figures of the lists whose pane of `span / 6` is among the 6 up to `frontier`'s.
    fn figures_in_view(
        lists: &[(Nanos, u64, f64)],
        span: Nanos,
        frontier: Nanos,
        cap: Option<usize>,
    ) -> CoverageFigures {
        let pane_span = span / PANES;
        let newest = frontier.div_euclid(pane_span);
        let mut coverage = Coverage::default();
        for &(time, item, weight) in lists.iter().filter(|(time, ..)| *time <= frontier) {
            if (newest - PANES + 1..=newest).contains(&time.div_euclid(pane_span)) {
                one_item(item, weight, |list| coverage.add(list, cap));
            }
        }
        coverage.figures()
    }

    fn assert_close(got: CoverageFigures, want: CoverageFigures) {
        assert_eq!((got.items_shown, got.exact), (want.items_shown, want.exact));
        assert!(
            (got.exposure_gini - want.exposure_gini).abs() < 1e-9,
            "{got:?} {want:?}"
        );
        assert!(
            (got.exposure_entropy - want.exposure_entropy).abs() < 1e-9,
            "{got:?} {want:?}"
        );
    }

    #[test]
    fn cascaded_windows_count_what_each_window_holds() {
        let spans = [60, 300, 3_600];
        let lists = cascade_lists(6_000);
        for cap in [None, Some(256)] {
            let mut windows = CoverageWindows::new(&spans);
            let mut since_start = Coverage::default();
            for (n, &list) in lists.iter().enumerate() {
                add_list(&mut windows, &mut since_start, list, cap);
                if n % 997 != 0 {
                    continue;
                }
                // Every list up to `frontier` is in: the later ones come at most 40 later.
                let frontier = list.0 - 40;
                for (index, &span) in spans.iter().enumerate() {
                    let want = figures_in_view(&lists[..=n], span, frontier, cap);
                    let newer = lists[..=n].iter().filter(|(time, ..)| *time > frontier);
                    if newer.count() == 0 {
                        assert_close(windows.figures(index, frontier), want);
                    }
                }
                // Since start is one engine's to the last digit, as a replay's.
                let whole = figures_source(&lists[..=n], cap).figures();
                assert_eq!(since_start.figures(), whole);
            }
        }
    }

    /// Every list in one coverage.
    fn figures_source(lists: &[(Nanos, u64, f64)], cap: Option<usize>) -> Coverage {
        let mut coverage = Coverage::default();
        for &(_, item, weight) in lists {
            one_item(item, weight, |list| coverage.add(list, cap));
        }
        coverage
    }

    #[test]
    fn merged_cascades_count_as_one_would() {
        let spans = [60, 300, 3_600];
        let lists = cascade_lists(6_000);
        // Exact, so that the unions of panes compare with one coverage of their lists.
        let cap = None;
        let mut parts = [
            (CoverageWindows::new(&spans), Coverage::default()),
            (CoverageWindows::new(&spans), Coverage::default()),
        ];
        // The second part stops early, as a partition whose traffic stopped.
        for (n, &list) in lists.iter().enumerate() {
            let (windows, since_start) = &mut parts[n % 2];
            if n % 2 == 0 || n < 4_000 {
                add_list(windows, since_start, list, cap);
            }
        }
        let [(mut merged, mut merged_since), (other, other_since)] = parts;
        merged_since.merge(&other_since, cap);
        merged.merge(&other, cap);
        let kept: Vec<_> = lists
            .iter()
            .enumerate()
            .filter(|(n, _)| n % 2 == 0 || *n < 4_000)
            .map(|(_, &list)| list)
            .collect();
        let frontier = kept.iter().map(|(time, ..)| *time).max().unwrap();
        for (index, &span) in spans.iter().enumerate() {
            assert_close(
                merged.figures(index, frontier),
                figures_in_view(&kept, span, frontier, cap),
            );
        }
        assert_close(merged_since.figures(), figures_source(&kept, cap).figures());
    }

    #[test]
    fn since_start_is_every_list_wherever_it_went() {
        let mut windows = CoverageWindows::new(&[60, 600]);
        let (mut since_start, mut whole) = (Coverage::default(), Coverage::default());
        for i in 0..5_000u64 {
            let item = crate::event::id_hash(&format!("item-{}", i % 1_700));
            let weight = 1.0 / ((2 + i % 3) as f64).log2();
            // Mostly in time order, some late, some far too old.
            let late = (i % 7) as i64 * 30 + if i % 500 == 0 { 5_000 } else { 0 };
            one_item(item, weight, |list| {
                windows.add(i as i64 * 2 - late, list, Some(512), &mut since_start);
                whole.add(list, Some(512));
            });
        }
        assert_eq!(since_start.figures(), whole.figures());
    }
}
