//! Coverage and exposure concentration (docs/SPEC.md §11): over a set of finalized
//! lists, the distinct items shown, the distinct items engaged (with a
//! credited interaction of grade > 0), and the Gini coefficient and
//! normalized entropy of each shown item's position-weighted exposure (the
//! sum, over the lists that showed it, of `1 / discount(rank)`).
//!
//! A [`Coverage`] is exact while it holds at most its cap of distinct items:
//! every item's exposure, every engaged item. Past the cap it turns into
//! sketches: two [`HyperLogLog`]s count the items shown and engaged, and the
//! exposures are kept for a sample of the items, those whose hash ends in
//! `level` zero bits (a uniform sample of `2^−level` of the items, the level
//! raised whenever the sample outgrows the cap). The sample's Gini estimates
//! the items' Gini; the entropy comes from the exact total exposure, the
//! sample's `Σ x ln x` scaled by `2^level`, and the estimated item count.
//! Counts only: it knows nothing of events, time or transport.

use super::hyperloglog::{HyperLogLog, Slot};
use serde::{Deserialize, Serialize};
use std::sync::Mutex;

/// How coverage is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CoverageMode {
    /// Not kept.
    Off,
    /// Exact, whatever the number of items (replay).
    Exact,
    /// Exact up to `max_items` distinct items, then from sketches (serve).
    Sketch {
        /// Most items whose exposure is kept.
        max_items: usize,
    },
}

impl CoverageMode {
    /// The cap on the items one [`Coverage`] keeps, `None` for no cap.
    pub fn cap(self) -> Option<usize> {
        match self {
            CoverageMode::Sketch { max_items } => Some(max_items),
            CoverageMode::Off | CoverageMode::Exact => None,
        }
    }
}

/// The figures of one set of lists, as the report gives them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct CoverageFigures {
    /// Distinct items shown.
    pub items_shown: u64,
    /// Distinct items with a credited interaction of grade > 0.
    pub items_engaged: u64,
    /// Gini coefficient of the items' exposures: 0 when even, towards 1 when concentrated.
    pub exposure_gini: f64,
    /// Entropy of the exposure shares over `ln(items shown)`: 1 when even, 0 for one item.
    pub exposure_entropy: f64,
    /// Whether the figures are exact (no sketch was needed).
    pub exact: bool,
}

/// One finalized list, as every coverage it goes into (since start and one
/// pane per window) reads it: item hashes and their slots, their exposures,
/// their sum, and the items engaged.
#[derive(Clone, Copy, Debug)]
pub struct ShownList<'a> {
    /// Item hashes in rank order.
    pub items: &'a [u64],
    /// Their slots in the sketches, as [`ShownList::slots_into`] writes them.
    pub slots: &'a [Slot],
    /// `weights[j]`, the exposure of rank `j + 1`, for at least as many ranks as items.
    pub weights: &'a [f64],
    /// The exposures of the items summed.
    pub exposure: f64,
    /// The items with a credited interaction of grade > 0 (repeats allowed).
    pub engaged: &'a [u64],
}

impl ShownList<'_> {
    /// Writes the slots of `items` into `slots`, once per list.
    pub fn slots_into(items: &[u64], slots: &mut Vec<Slot>) {
        slots.clear();
        slots.extend(items.iter().map(|&item| Slot::of(item)));
    }
}

/// The distinct-count sketches of a coverage past its cap.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct Sketches {
    shown: HyperLogLog,
    engaged: HyperLogLog,
}

/// Items shown and engaged, and their exposures, over a set of lists.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(from = "CoverageState", into = "CoverageState")]
pub struct Coverage {
    /// Exposure by item hash: every item while exact, the sampled ones once sketched.
    exposure: ExposureTable,
    /// Items engaged, while exact.
    engaged: ItemSet,
    /// The counts once past the cap.
    sketches: Option<Box<Sketches>>,
    /// The sample keeps items whose hash ends in this many zero bits.
    level: u32,
    /// Exposure summed over every item shown, sampled or not.
    total_exposure: f64,
    /// The figures, once asked for, until a list goes in.
    cache: FiguresCache<()>,
}

/// Figures worked out once for a key (such as a window's newest pane) and
/// kept until forgotten: a scrape that finds no new list since the last
/// one reads them rather than sorting and summing the exposures again.
/// Never saved, and no part of equality.
#[derive(Debug, Default)]
pub struct FiguresCache<K>(Mutex<Option<(K, CoverageFigures)>>);

impl<K: Copy + PartialEq> FiguresCache<K> {
    /// The figures kept for `key`, or those `work_out` gives, then kept.
    pub fn get_or(&self, key: K, work_out: impl FnOnce() -> CoverageFigures) -> CoverageFigures {
        let mut held = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match *held {
            Some((cached, figures)) if cached == key => figures,
            _ => {
                let figures = work_out();
                *held = Some((key, figures));
                figures
            }
        }
    }

    /// Forgets the figures, as what they came from has changed.
    pub fn forget(&mut self) {
        *self
            .0
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = None;
    }
}

impl<K: Clone> Clone for FiguresCache<K> {
    fn clone(&self) -> Self {
        let held = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        Self(Mutex::new(held.clone()))
    }
}

/// Any two caches are equal: they only keep what the coverage gives.
impl<K> PartialEq for FiguresCache<K> {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Coverage {
    /// Empties the coverage as if new, keeping the room its exposures took:
    /// a pane that comes round fills to about as many items again.
    pub fn clear(&mut self) {
        self.cache.forget();
        self.exposure.clear();
        self.engaged.clear();
        self.sketches = None;
        self.level = 0;
        self.total_exposure = 0.0;
    }

    /// Adds one finalized list, keeping at most `cap` items' exposures.
    /// The cap is enforced as each item goes in, not once the list is in:
    /// the level reached is the same, and the table never grows past twice
    /// the cap to hold the rest of a list.
    pub fn add(&mut self, list: &ShownList<'_>, cap: Option<usize>) {
        self.cache.forget();
        self.total_exposure += list.exposure;
        let limit = cap.unwrap_or(usize::MAX);
        let items = list.items;
        let weights = &list.weights[..items.len()];
        if self.sketches.is_none() {
            self.engaged.extend(list.engaged.iter().copied());
            let mut start = 0;
            while start < items.len() {
                self.exposure.add(items[start], weights[start]);
                start += 1;
                if self.exposure.len() > limit {
                    // Every engaged item goes into the new sketches with the set.
                    self.enforce(cap);
                    return self.add_sketched(list, start, limit);
                }
            }
            return;
        }
        if let Some(sketches) = &mut self.sketches {
            for &item in list.engaged {
                sketches.engaged.insert(item);
            }
        }
        self.add_sketched(list, 0, limit);
    }

    /// Starts loading where the exposures of `items` and the marks of
    /// `engaged` are kept: asked a few lists before they are added, their
    /// cache misses overlap.
    pub fn prefetch_exact(
        &self,
        items: impl IntoIterator<Item = u64>,
        engaged: impl IntoIterator<Item = u64>,
    ) {
        items
            .into_iter()
            .for_each(|item| self.exposure.prefetch(item));
        engaged
            .into_iter()
            .for_each(|item| self.engaged.prefetch(item));
    }

    /// Adds exposures, engaged items and a total exposure exactly (a
    /// coverage with no cap): one of several that split the items of some
    /// lists between them, merged into the whole at the end, each list's
    /// total exposure given to one of them alone.
    pub fn add_exact(
        &mut self,
        exposures: impl IntoIterator<Item = (u64, f64)>,
        engaged: impl IntoIterator<Item = u64>,
        total_exposure: f64,
    ) {
        self.cache.forget();
        self.total_exposure += total_exposure;
        self.engaged.extend(engaged);
        for (item, exposure) in exposures {
            self.exposure.add(item, exposure);
        }
    }

    /// Adds the items of `list` from `start` on to the sketches, and the
    /// sampled ones' exposures, raising the level past `limit` of them.
    fn add_sketched(&mut self, list: &ShownList<'_>, start: usize, limit: usize) {
        let slots = &list.slots[start..list.items.len()];
        if let Some(sketches) = &mut self.sketches {
            for &slot in slots {
                sketches.shown.insert_slot(slot);
            }
        }
        // Only one item in 2^level is sampled: most items cost a register and a test.
        for (index, &slot) in (start..).zip(slots) {
            if u32::from(slot.zeros) < self.level {
                continue;
            }
            self.exposure.add(list.items[index], list.weights[index]);
            if self.exposure.len() > limit {
                self.enforce(Some(limit));
            }
        }
    }

    /// The figures of the union of `parts`, merged in their order with no
    /// cap: a window's figures from its panes. Parts with no list are left
    /// out and a lone part gives its own figures, as merging would leave it
    /// as it is; a union's table starts with room for its largest part
    /// rather than growing to it from 16 slots.
    pub fn union_figures(parts: &[&Coverage]) -> CoverageFigures {
        let parts: Vec<&Coverage> = parts.iter().copied().filter(|p| !p.is_empty()).collect();
        let [first, ..] = parts[..] else {
            return Coverage::default().figures();
        };
        if parts.len() == 1 {
            return first.figures();
        }
        let mut union = Coverage::default();
        let largest = parts.iter().map(|part| part.exposure.len()).max();
        union.exposure.reserve(largest.unwrap_or(0));
        for part in parts {
            union.merge(part, None);
        }
        union.figures()
    }

    /// Makes room for the exact exposures and engaged items of `parts`,
    /// which share no item (the parts of a sharded engine's coverage), so
    /// that merging them does not grow the tables on the way.
    pub fn reserve_disjoint(&mut self, parts: &[&Coverage]) {
        self.exposure
            .reserve(parts.iter().map(|part| part.exposure.len()).sum());
        self.engaged
            .reserve(parts.iter().map(|part| part.engaged.len()).sum());
    }

    /// Whether no list has gone in since new or cleared.
    fn is_empty(&self) -> bool {
        self.exposure.len() == 0
            && self.engaged.len() == 0
            && self.sketches.is_none()
            && self.level == 0
            && self.total_exposure == 0.0
    }

    /// Adds the lists of `other`, then keeps at most `cap` items' exposures.
    pub fn merge(&mut self, other: &Coverage, cap: Option<usize>) {
        self.cache.forget();
        self.total_exposure += other.total_exposure;
        if other.sketches.is_some() && self.sketches.is_none() {
            self.start_sketches();
        }
        if let Some(sketches) = &mut self.sketches {
            match &other.sketches {
                Some(theirs) => {
                    sketches.shown.merge(&theirs.shown);
                    sketches.engaged.merge(&theirs.engaged);
                }
                None => {
                    other
                        .exposure
                        .iter()
                        .for_each(|(item, _)| sketches.shown.insert(item));
                    other
                        .engaged
                        .items()
                        .for_each(|i| sketches.engaged.insert(i));
                }
            }
        } else {
            self.engaged.extend(other.engaged.items());
        }
        self.raise_level(self.level.max(other.level));
        let mask = (1u64 << self.level) - 1;
        for (item, exposure) in other.exposure.iter() {
            if item & mask == 0 {
                self.exposure.add(item, exposure);
            }
        }
        self.enforce(cap);
    }

    /// Turns to sketches, then samples, until at most `cap` exposures are kept.
    fn enforce(&mut self, cap: Option<usize>) {
        let Some(cap) = cap else {
            return;
        };
        if self.exposure.len() <= cap {
            return;
        }
        if self.sketches.is_none() {
            self.start_sketches();
        }
        let mut level = self.level;
        while self.exposure.len() > cap && level < 63 {
            level += 1;
            self.raise_level(level);
        }
    }

    /// Counts every item held so far in new sketches; the engaged set goes.
    fn start_sketches(&mut self) {
        let mut sketches = Box::<Sketches>::default();
        self.exposure
            .iter()
            .for_each(|(item, _)| sketches.shown.insert(item));
        self.engaged
            .items()
            .for_each(|i| sketches.engaged.insert(i));
        self.engaged = ItemSet::default();
        self.sketches = Some(sketches);
    }

    /// Keeps only the items of sample level `level` (no lower than the current one).
    fn raise_level(&mut self, level: u32) {
        if level <= self.level {
            return;
        }
        self.level = level;
        let mask = (1u64 << level) - 1;
        self.exposure.retain(|item| item & mask == 0);
    }

    /// The figures of the lists added so far.
    pub fn figures(&self) -> CoverageFigures {
        self.cache.get_or((), || self.work_out_figures())
    }

    /// The figures, from the exposures and sketches.
    fn work_out_figures(&self) -> CoverageFigures {
        let mut exposures: Vec<f64> = self.exposure.iter().map(|(_, x)| x).collect();
        sort_ascending(&mut exposures);
        let gini = gini(&exposures);
        let Some(sketches) = &self.sketches else {
            return CoverageFigures {
                items_shown: exposures.len() as u64,
                items_engaged: self.engaged.len() as u64,
                exposure_gini: gini,
                exposure_entropy: normalized_entropy(&exposures),
                exact: true,
            };
        };
        let items = sketches.shown.estimate();
        let scale = (self.level as f64).exp2();
        let x_ln_x = sum_of_x_ln_x(&exposures) * scale;
        CoverageFigures {
            items_shown: items.round() as u64,
            items_engaged: sketches.engaged.estimate().round() as u64,
            exposure_gini: gini,
            exposure_entropy: entropy_from_sums(self.total_exposure, x_ln_x, items),
            exact: false,
        }
    }
}

/// The Gini coefficient of `values`, sorted ascending and non-negative:
/// `Σ_i (2i − n − 1) x_i / (n Σ x)` with `i` from 1. 0 for fewer than two
/// values or a zero sum.
pub fn gini(sorted: &[f64]) -> f64 {
    let n = sorted.len() as f64;
    let total: f64 = sorted.iter().sum();
    if sorted.len() < 2 || total <= 0.0 {
        return 0.0;
    }
    let weighted: f64 = sorted
        .iter()
        .enumerate()
        .map(|(i, &x)| (2.0 * (i as f64 + 1.0) - n - 1.0) * x)
        .sum();
    weighted / (n * total)
}

/// The entropy of the shares `x / Σx` of `values` divided by `ln n`, its
/// largest value: 1 when all are equal, 0 for one value or none.
pub fn normalized_entropy(values: &[f64]) -> f64 {
    let total: f64 = values.iter().sum();
    let positive = values.iter().copied().filter(|&x| x > 0.0);
    entropy_from_sums(total, x_ln_x_of(positive), values.len() as f64)
}

/// `Σ x ln x` over `sorted`, in its order.
fn sum_of_x_ln_x(sorted: &[f64]) -> f64 {
    x_ln_x_of(sorted.iter().copied())
}

/// `Σ x ln x` over `values`, in their order. Exposures repeat (every item
/// shown once at rank `r` has the same one), so a value equal to the one
/// before it reuses its term rather than taking another logarithm.
fn x_ln_x_of(values: impl Iterator<Item = f64>) -> f64 {
    let mut previous = (f64::NAN, 0.0);
    let mut sum = 0.0;
    for x in values {
        if x.to_bits() != previous.0.to_bits() {
            previous = (x, x * x.ln());
        }
        sum += previous.1;
    }
    sum
}

/// Sorts `values` ascending in the order of [`f64::total_cmp`], as
/// unsigned keys: a scrape sorts every window's sampled exposures, thousands
/// per group, and integers compare in a third less time than the floats.
fn sort_ascending(values: &mut [f64]) {
    let mut keys: Vec<u64> = values.iter().map(|&x| order_key(x)).collect();
    keys.sort_unstable();
    for (value, &key) in values.iter_mut().zip(&keys) {
        *value = from_order_key(key);
    }
}

/// The bits of `x` as an unsigned key in the order of [`f64::total_cmp`].
fn order_key(x: f64) -> u64 {
    let bits = x.to_bits();
    if bits >> 63 == 1 {
        !bits
    } else {
        bits | 1 << 63
    }
}

/// The value whose [`order_key`] is `key`.
fn from_order_key(key: u64) -> f64 {
    f64::from_bits(if key >> 63 == 1 {
        key & !(1 << 63)
    } else {
        !key
    })
}

/// `(ln X − Σ x ln x / X) / ln n` for `X = Σ x`, within `[0, 1]`.
fn entropy_from_sums(total: f64, x_ln_x: f64, items: f64) -> f64 {
    if items <= 1.0 || total <= 0.0 {
        return 0.0;
    }
    let entropy = total.ln() - x_ln_x / total;
    (entropy / items.ln()).clamp(0.0, 1.0)
}

/// A value per item hash, in one open-addressed table (linear probing, about
/// half full at most): reaching an item is a few instructions, which every
/// sampled item of every list pays in each coverage it goes into.
#[derive(Clone, Debug, Default)]
struct ItemSlots<V> {
    /// Item hash and value, side by side so that reaching an item misses
    /// the cache once; a hash of 0 marks an empty slot.
    slots: Vec<(u64, V)>,
    /// Occupied slots.
    len: usize,
    /// The value of the item whose hash is 0, which no slot can hold.
    zero: Option<V>,
}

/// Exposure by item hash.
type ExposureTable = ItemSlots<f64>;

/// Items engaged: a set of item hashes.
type ItemSet = ItemSlots<()>;

impl<V: Copy + Default> ItemSlots<V> {
    /// Items held.
    fn len(&self) -> usize {
        self.len + usize::from(self.zero.is_some())
    }

    /// The value of `item`, the default put in first if it has none.
    #[inline(always)]
    fn entry(&mut self, item: u64) -> &mut V {
        // Grown once more than half full: a table of `2n` slots holds up to
        // `n + 1` items, so a coverage capped at `n` items never needs `4n`.
        if item == 0 || self.slots.is_empty() || 2 * self.len > self.slots.len() {
            return self.entry_rarely(item);
        }
        let mask = self.slots.len() - 1;
        // The middle bits: the top ones pick HyperLogLog registers, the low
        // ones are zero in every sampled item.
        let mut slot = (item >> 24) as usize & mask;
        loop {
            let key = self.slots[slot].0;
            if key == item {
                return &mut self.slots[slot].1;
            }
            if key == 0 {
                self.slots[slot] = (item, V::default());
                self.len += 1;
                return &mut self.slots[slot].1;
            }
            slot = (slot + 1) & mask;
        }
    }

    /// Starts loading the slot where the search for `item` begins.
    #[inline(always)]
    fn prefetch(&self, item: u64) {
        let mask = self.slots.len().wrapping_sub(1);
        if let Some(slot) = self.slots.get((item >> 24) as usize & mask) {
            crate::prefetch::prefetch(slot);
        }
    }

    /// Makes room for `items` items in all without growing as they come.
    fn reserve(&mut self, items: usize) {
        if 2 * items > self.slots.len() {
            self.rebuild(2 * items);
        }
    }

    /// The value of the item whose hash is 0, or of `item` once the table has grown.
    #[cold]
    fn entry_rarely(&mut self, item: u64) -> &mut V {
        if item == 0 {
            return self.zero.get_or_insert_with(V::default);
        }
        self.rebuild(2 * self.slots.len());
        self.entry(item)
    }

    /// Puts every item back into `slots` slots (at least 16, and twice the items).
    fn rebuild(&mut self, slots: usize) {
        let slots = slots.max(16).max(2 * self.len).next_power_of_two();
        let old = std::mem::replace(&mut self.slots, vec![(0, V::default()); slots]);
        self.len = 0;
        for (item, value) in old.into_iter().filter(|(k, _)| *k != 0) {
            *self.entry(item) = value;
        }
    }

    /// Every item and its value, in no particular order.
    fn iter(&self) -> impl Iterator<Item = (u64, V)> + '_ {
        let zero = self.zero.map(|value| (0, value));
        self.slots
            .iter()
            .filter(|(k, _)| *k != 0)
            .copied()
            .chain(zero)
    }

    /// Every item, in no particular order.
    fn items(&self) -> impl Iterator<Item = u64> + '_ {
        self.iter().map(|(item, _)| item)
    }

    /// Keeps the items that `keep` accepts. Emptied slots would break the
    /// probe runs, so the kept ones go back into the same slots, cleared
    /// (no new table to allocate: they will fill again).
    fn retain(&mut self, keep: impl Fn(u64) -> bool) {
        if self.zero.is_some() && !keep(0) {
            self.zero = None;
        }
        let kept: Vec<(u64, V)> = self
            .slots
            .iter()
            .filter(|(k, _)| *k != 0 && keep(*k))
            .copied()
            .collect();
        self.slots.fill((0, V::default()));
        self.len = 0;
        for (item, value) in kept {
            *self.entry(item) = value;
        }
    }

    /// Empties the table, keeping its slots for the items to come.
    fn clear(&mut self) {
        self.slots.fill((0, V::default()));
        self.len = 0;
        self.zero = None;
    }
}

impl ExposureTable {
    /// Adds `weight` to the exposure of `item`.
    #[inline(always)]
    fn add(&mut self, item: u64, weight: f64) {
        *self.entry(item) += weight;
    }
}

impl ItemSet {
    /// Puts `items` in the set.
    fn extend(&mut self, items: impl IntoIterator<Item = u64>) {
        for item in items {
            self.entry(item);
        }
    }
}

impl FromIterator<u64> for ItemSet {
    fn from_iter<I: IntoIterator<Item = u64>>(items: I) -> Self {
        let mut set = Self::default();
        set.extend(items);
        set
    }
}

/// Two tables are equal when they hold the same values, wherever their slots.
impl<V: Copy + Default + PartialEq> PartialEq for ItemSlots<V> {
    fn eq(&self, other: &Self) -> bool {
        let sorted = |table: &ItemSlots<V>| {
            let mut items: Vec<(u64, V)> = table.iter().collect();
            items.sort_unstable_by_key(|(item, _)| *item);
            items
        };
        self.len() == other.len() && sorted(self) == sorted(other)
    }
}

/// The saved form of a [`Coverage`]: maps as sorted lists, so that the same
/// coverage always saves as the same bytes.
#[derive(Serialize, Deserialize)]
struct CoverageState {
    exposure: Vec<(u64, f64)>,
    engaged: Vec<u64>,
    sketches: Option<Box<Sketches>>,
    level: u32,
    total_exposure: f64,
}

impl From<Coverage> for CoverageState {
    fn from(coverage: Coverage) -> Self {
        let mut exposure: Vec<(u64, f64)> = coverage.exposure.iter().collect();
        exposure.sort_unstable_by_key(|(item, _)| *item);
        let mut engaged: Vec<u64> = coverage.engaged.items().collect();
        engaged.sort_unstable();
        Self {
            exposure,
            engaged,
            sketches: coverage.sketches,
            level: coverage.level,
            total_exposure: coverage.total_exposure,
        }
    }
}

impl From<CoverageState> for Coverage {
    fn from(state: CoverageState) -> Self {
        Self {
            exposure: state.exposure.into_iter().fold(
                ExposureTable::default(),
                |mut table, (item, exposure)| {
                    table.add(item, exposure);
                    table
                },
            ),
            engaged: state.engaged.into_iter().collect(),
            sketches: state.sketches,
            level: state.level.min(63),
            total_exposure: state.total_exposure,
            cache: FiguresCache::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::id_hash;

    const EPSILON: f64 = 1e-12;

    #[test]
    fn even_exposure_has_gini_0_and_entropy_1() {
        let even = [2.5; 4];
        assert!(gini(&even).abs() < EPSILON);
        assert!((normalized_entropy(&even) - 1.0).abs() < EPSILON);
    }

    #[test]
    fn one_item_has_entropy_0_and_gini_0() {
        assert_eq!(normalized_entropy(&[3.0]), 0.0);
        assert_eq!(gini(&[3.0]), 0.0);
        assert_eq!((gini(&[]), normalized_entropy(&[])), (0.0, 0.0));
    }

    #[test]
    fn a_worked_three_item_case() {
        // Exposures 1, 2, 3 (sum 6): Gini = ((−2)·1 + 0·2 + 2·3) / (3·6) = 4/18;
        // entropy = −(1/6 ln 1/6 + 2/6 ln 2/6 + 3/6 ln 3/6) = 1.0114042647…,
        // over ln 3 = 1.0986122886… gives 0.9206198357….
        let values = [1.0, 2.0, 3.0];
        assert!((gini(&values) - 4.0 / 18.0).abs() < EPSILON);
        assert!((normalized_entropy(&values) - 0.920_619_835_714_305_4).abs() < 1e-9);
    }

    #[test]
    fn all_exposure_on_one_of_many_items_nears_gini_1() {
        let mut values = vec![0.0; 99];
        values.push(10.0);
        assert!((gini(&values) - 0.99).abs() < EPSILON, "(n − 1) / n");
    }

    /// Items `0..n`, item `i` shown in `1 + i % 7` lists at rank 1.
    fn lists(n: u32) -> Vec<u64> {
        (0..n)
            .flat_map(|i| std::iter::repeat_n(id_hash(&format!("item-{i}")), 1 + i as usize % 7))
            .collect()
    }

    /// One list of one item at rank 1, engaged when `engaged`.
    fn single<'a>(item: &'a u64, slot: &'a Slot, engaged: bool) -> ShownList<'a> {
        ShownList {
            items: std::slice::from_ref(item),
            slots: std::slice::from_ref(slot),
            weights: &[1.0],
            exposure: 1.0,
            engaged: if engaged {
                std::slice::from_ref(item)
            } else {
                &[]
            },
        }
    }

    fn coverage_of(items: &[u64], cap: Option<usize>) -> Coverage {
        let mut coverage = Coverage::default();
        for item in items {
            coverage.add(&single(item, &Slot::of(*item), item % 10 == 0), cap);
        }
        coverage
    }

    fn ranked<'a>(
        items: &'a [u64],
        slots: &'a [Slot],
        weights: &'a [f64],
        engaged: &'a [u64],
    ) -> ShownList<'a> {
        ShownList {
            items,
            slots,
            weights,
            exposure: weights[..items.len()].iter().sum(),
            engaged,
        }
    }

    #[test]
    fn exact_under_the_cap() {
        let mut coverage = Coverage::default();
        let [a, b, c] = ["a", "b", "c"].map(id_hash);
        // Weights of ranks 1, 2, 3 under log2(j + 1).
        let weights = [1.0, 1.0 / 3f64.log2(), 0.5];
        let (first, second) = ([a, b, c], [c, a]);
        let slots = |items: &[u64]| items.iter().map(|&i| Slot::of(i)).collect::<Vec<_>>();
        let (first_slots, second_slots) = (slots(&first), slots(&second));
        coverage.add(&ranked(&first, &first_slots, &weights, &[b]), Some(3));
        coverage.add(&ranked(&second, &second_slots, &weights, &[c, a]), Some(3));
        let figures = coverage.figures();
        assert!(figures.exact);
        assert_eq!((figures.items_shown, figures.items_engaged), (3, 3));
        // a: ranks 1 and 2; b: rank 2; c: ranks 3 and 1.
        let mut exposures = vec![1.0 + weights[1], weights[1], 1.5];
        exposures.sort_unstable_by(f64::total_cmp);
        assert!((figures.exposure_gini - gini(&exposures)).abs() < EPSILON);
    }

    #[test]
    fn past_the_cap_estimates_stay_close_to_the_exact_figures() {
        let items = lists(50_000);
        let exact = coverage_of(&items, None).figures();
        let sketched = coverage_of(&items, Some(4096)).figures();
        assert!(exact.exact && !sketched.exact);
        assert_eq!(exact.items_shown, 50_000);
        let relative = |a: u64, b: u64| (a as f64 / b as f64 - 1.0).abs();
        assert!(relative(sketched.items_shown, exact.items_shown) < 0.02);
        assert!(relative(sketched.items_engaged, exact.items_engaged) < 0.02);
        assert!((sketched.exposure_gini - exact.exposure_gini).abs() < 0.02);
        assert!((sketched.exposure_entropy - exact.exposure_entropy).abs() < 0.02);
    }

    #[test]
    fn merging_parts_gives_the_whole() {
        let items = lists(20_000);
        let (first, second) = items.split_at(items.len() / 3);
        for cap in [None, Some(2048)] {
            let mut merged = coverage_of(first, cap);
            merged.merge(&coverage_of(second, cap), cap);
            let whole = coverage_of(&items, cap);
            assert_eq!(merged.figures().items_shown, whole.figures().items_shown);
            assert_eq!(merged.sketches, whole.sketches);
            assert_eq!(merged.level, whole.level);
            assert!((merged.figures().exposure_gini - whole.figures().exposure_gini).abs() < 1e-9);
        }
    }

    #[test]
    fn sorting_by_keys_orders_as_total_cmp_does() {
        // Exposures as the sums of a few rank weights, so that many repeat,
        // and some signed and odd values for the order's ends.
        let weights: Vec<f64> = (1..=20).map(|r| 1.0 / (r as f64 + 1.0).log2()).collect();
        let mut values: Vec<f64> = (0..5_000u64)
            .map(|i| {
                let hash = id_hash(&i.to_string());
                (0..1 + hash % 4)
                    .map(|j| weights[((hash >> (8 * j)) % 20) as usize])
                    .sum()
            })
            .collect();
        values.extend([0.0, -0.0, -1.5, f64::INFINITY, 1e-300, 7.0]);
        let mut want = values.clone();
        want.sort_unstable_by(f64::total_cmp);
        sort_ascending(&mut values);
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&values), bits(&want));
    }

    #[test]
    fn saves_and_restores_the_same_figures() {
        let coverage = coverage_of(&lists(10_000), Some(1024));
        let bytes = postcard::to_stdvec(&coverage).unwrap();
        let restored: Coverage = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(restored, coverage);
        assert_eq!(postcard::to_stdvec(&restored).unwrap(), bytes);
    }
}
