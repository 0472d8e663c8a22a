//! The lists a [`super::ShardedEngine`]'s shards finalize, added to its
//! figures in the order one engine would add them.
//!
//! A shard evaluates each list it finalizes (the metric values, the credit
//! of each ranker of an interleaved list) and logs the outcome rather than
//! adding it to figures of its own. After each batch the logs are merged in
//! one engine's finalization order, by deadline then arrival (an engine's
//! watermark only rises and a new list's deadline lies past it, so every
//! list finalized after a batch comes after those finalized in it), and
//! added on several threads at once, while the next events are parsed:
//! the sums of the metric values and the experiments' outcomes by one
//! engine that holds the figures, exact coverage in one part per two
//! threads, split by item hash (coverage estimated from
//! sketches past a cap, as `--sketch-coverage` asks, by one part, since a
//! sketch's estimate depends on all its items). Every sum is then added in one
//! engine's order, so the report is one engine's to the last digit,
//! whatever the threads, the batches and the shards; and each item's
//! exposure is kept once, not once per shard (every shard sees nearly every
//! item: coverage per shard had been half a replay's memory).

use super::{Engine, SHARDS};
use crate::event::Nanos;
use crate::metrics::{Coverage, CoverageMode, ShownList};
use std::cmp::Reverse;
use std::collections::binary_heap::{BinaryHeap, PeekMut};

/// Most parts the items are split in for exact coverage: one per two
/// threads, up to as many as the shards can keep busy. Each part walks
/// every list for its items, so each part more costs: a replay of 1M
/// events on one thread spent 66 ms adding coverage in one part, 98 ms in
/// two. The parts are added beside the parsing of the next events, which
/// keeps the other threads busy: on two threads one part replayed it in
/// 0.42 s, two parts in 0.44 s.
const MAX_PARTS: usize = SHARDS / 2;

/// The part of an item among `parts`: bits that neither the exposure
/// tables' slots nor the sample's level read.
fn part_of(item: u64, parts: usize) -> usize {
    ((item >> 8) % parts as u64) as usize
}

/// Where a list falls in finalization order: `(t + A, seq)`.
pub type ListKey = (Nanos, u64);

/// One item of a logged list, filed under its part.
#[derive(Clone, Copy, Debug)]
struct Shown {
    /// The list's index in its log.
    list: u32,
    /// The item's rank, from 0.
    rank: u32,
    /// The item's hash.
    item: u64,
}

/// A list's outcome for an interleaving experiment.
#[derive(Clone, Copy, Debug)]
struct Interleaved {
    /// The list's index in its log.
    list: u32,
    lineup: u32,
    /// The team that picked first.
    first: u8,
    /// Where its rankers' credits end in `credits`.
    credits_end: usize,
}

/// The lists one shard finalized since its log was last added to figures.
/// A list is started with [`FinalizedLog::start`], then its coverage and
/// its rankers' credits are filled in.
#[derive(Debug)]
pub struct FinalizedLog {
    /// Each list's place in finalization order: its deadline, then its
    /// sequence number. Increasing: a shard finalizes in this order.
    keys: Vec<ListKey>,
    /// Each list's group.
    groups: Vec<u32>,
    /// Each list's impression time.
    times: Vec<Nanos>,
    /// Where each list's metric values start in `values`; `u32::MAX` for
    /// a list with no item of grade > 0, whose values are all 0.
    value_starts: Vec<u32>,
    /// The metric values of the engaged lists, a row each.
    values: Vec<f64>,
    /// Each list's exposure summed (0 while coverage is not filled in).
    exposures: Vec<f64>,
    /// Where each list's engaged items end in `engaged`.
    engaged_ends: Vec<usize>,
    /// The lists' engaged items, one list after another.
    engaged: Vec<u64>,
    /// Per part, the items of the lists in it, list by list: the shard
    /// sorts them out as it finalizes, so that each part reads its own.
    parts: Vec<Vec<Shown>>,
    /// The interleaved lists, in order.
    interleaved: Vec<Interleaved>,
    /// Their rankers' credits, one list after another.
    credits: Vec<f64>,
}

impl FinalizedLog {
    /// An empty log, filing items in `parts` parts.
    pub fn new(parts: usize) -> Self {
        Self {
            keys: Vec::new(),
            groups: Vec::new(),
            times: Vec::new(),
            value_starts: Vec::new(),
            values: Vec::new(),
            exposures: Vec::new(),
            engaged_ends: Vec::new(),
            engaged: Vec::new(),
            parts: (0..parts).map(|_| Vec::new()).collect(),
            interleaved: Vec::new(),
            credits: Vec::new(),
        }
    }

    /// Starts the next list: its key, group and time, and its metric values
    /// (`None` when none of its items has grade > 0: all 0).
    pub fn start(&mut self, key: ListKey, group: usize, time: Nanos, values: Option<&[f64]>) {
        self.keys.push(key);
        self.groups.push(group as u32);
        self.times.push(time);
        let start = match values {
            Some(values) => {
                let start = self.values.len() as u32;
                self.values.extend_from_slice(values);
                start
            }
            None => u32::MAX,
        };
        self.value_starts.push(start);
        self.exposures.push(0.0);
        self.engaged_ends.push(self.engaged.len());
    }

    /// Fills in the coverage of the list started last: its items in rank
    /// order, their exposure summed, and its engaged items.
    pub fn shown(&mut self, items: &[u64], exposure: f64, engaged: &[u64]) {
        let list = self.keys.len() - 1;
        self.exposures[list] = exposure;
        self.engaged.extend_from_slice(engaged);
        self.engaged_ends[list] = self.engaged.len();
        let parts = self.parts.len();
        for (rank, &item) in (0..).zip(items) {
            let list = list as u32;
            self.parts[part_of(item, parts)].push(Shown { list, rank, item });
        }
    }

    /// Fills in the outcome of the list started last, interleaved: its
    /// lineup, its rankers' credits and the team that picked first.
    pub fn interleaved(&mut self, lineup: u32, credits: &[f64], first: u8) {
        self.credits.extend_from_slice(credits);
        self.interleaved.push(Interleaved {
            list: (self.keys.len() - 1) as u32,
            lineup,
            first,
            credits_end: self.credits.len(),
        });
    }

    /// Forgets the lists, keeping the room they took.
    pub fn clear(&mut self) {
        self.keys.clear();
        self.groups.clear();
        self.times.clear();
        self.value_starts.clear();
        self.values.clear();
        self.exposures.clear();
        self.engaged_ends.clear();
        self.engaged.clear();
        self.parts.iter_mut().for_each(Vec::clear);
        self.interleaved.clear();
        self.credits.clear();
    }

    /// The metric values of list `index`, `width` of them; `None` when all 0.
    fn values(&self, index: usize, width: usize) -> Option<&[f64]> {
        let start = self.value_starts[index];
        (start != u32::MAX).then(|| &self.values[start as usize..][..width])
    }

    /// The engaged items of list `index` that lie in part `part` of `parts`.
    fn engaged_in(
        &self,
        index: usize,
        (part, parts): (usize, usize),
    ) -> impl Iterator<Item = u64> + '_ {
        let engaged = self.engaged(index).iter().copied();
        engaged.filter(move |&item| part_of(item, parts) == part)
    }

    /// The engaged items of list `index`.
    fn engaged(&self, index: usize) -> &[u64] {
        let start = index
            .checked_sub(1)
            .map_or(0, |before| self.engaged_ends[before]);
        &self.engaged[start..self.engaged_ends[index]]
    }
}

/// A shard's log, with the exposure of each rank as that shard weighs it.
pub type ShardLog<'a> = (&'a FinalizedLog, &'a [f64]);

/// The lists of `logs`, each given as `(log, index)`, in finalization
/// order: the logs merged by key, the earliest next list of each log kept
/// on top of a heap (a scan of every log's next list for each list took a
/// tenth of the additions with 16 shards).
pub fn in_finalization_order(logs: &[ShardLog<'_>]) -> Vec<(usize, usize)> {
    let total = logs.iter().map(|(log, _)| log.keys.len()).sum();
    let mut order = Vec::with_capacity(total);
    let mut next: BinaryHeap<Reverse<(ListKey, usize, usize)>> = (logs.iter().enumerate())
        .filter_map(|(log, (shard, _))| Some(Reverse((*shard.keys.first()?, log, 0))))
        .collect();
    while let Some(mut earliest) = next.peek_mut() {
        let Reverse((_, log, index)) = *earliest;
        order.push((log, index));
        match logs[log].0.keys.get(index + 1) {
            Some(&key) => *earliest = Reverse((key, log, index + 1)),
            None => drop(PeekMut::pop(earliest)),
        }
    }
    order
}

impl Engine {
    /// This shard's log, with the exposure of each rank as it weighs it.
    pub(super) fn shard_log(&self) -> Option<ShardLog<'_>> {
        Some((self.finalized_log.as_ref()?, &self.exposure_weights[..]))
    }

    /// Adds the metric values and interleaving outcomes of the lists of
    /// `logs`, taken in `order`, to this engine's figures, as its own
    /// finalization would.
    pub(super) fn add_finalized(&mut self, logs: &[ShardLog<'_>], order: &[(usize, usize)]) {
        let mut interleaved_read = vec![0; logs.len()];
        for &(shard, index) in order {
            let (log, _) = logs[shard];
            let group = log.groups[index] as usize;
            let time = log.times[index];
            let values = log.values(index, self.values.len());
            match values {
                Some(values) => self.values.copy_from_slice(values),
                None => self.values.fill(0.0),
            }
            self.group_aggregates(group);
            let aggregates = &mut self.aggregates[group];
            let engaged = values.is_some();
            aggregates.totals.add(&self.values, engaged);
            aggregates.windows.add(time, &self.values, engaged);
            let read = &mut interleaved_read[shard];
            if let Some(list) = log
                .interleaved
                .get(*read)
                .filter(|l| l.list as usize == index)
            {
                let start = read
                    .checked_sub(1)
                    .map_or(0, |before| log.interleaved[before].credits_end);
                let credits = &log.credits[start..list.credits_end];
                self.experiments.add(list.lineup, credits, list.first, time);
                *read += 1;
            }
        }
    }
}

/// Coverage per group, in parts by item: one per two threads (at most
/// [`MAX_PARTS`]) when exact, one when estimated from sketches past a cap.
/// Each item lies in one part and gets its exposures there in the same
/// order whatever the parts, so their number changes no figure.
#[derive(Debug)]
pub struct CoverageParts {
    /// Per part, per group id.
    parts: Vec<Vec<Coverage>>,
    /// The cap on the items one coverage keeps exactly.
    cap: Option<usize>,
}

impl CoverageParts {
    /// Empty parts for coverage kept as `mode` says, added to on `threads` threads.
    pub fn new(mode: CoverageMode, threads: usize) -> Self {
        let cap = mode.cap();
        let parts = match cap {
            Some(_) => 1,
            None => threads.div_ceil(2).clamp(1, MAX_PARTS),
        };
        Self {
            parts: (0..parts).map(|_| Vec::new()).collect(),
            cap,
        }
    }

    /// The number of parts.
    pub fn count(&self) -> usize {
        self.parts.len()
    }

    /// Each part, with its coverage per group, to add to on its own.
    pub fn parts_mut(&mut self) -> impl Iterator<Item = CoveragePart<'_>> {
        let (cap, parts) = (self.cap, self.parts.len());
        self.parts
            .iter_mut()
            .enumerate()
            .map(move |(part, groups)| CoveragePart {
                part,
                parts,
                cap,
                groups,
            })
    }

    /// Per group id, the parts of its coverage.
    pub fn by_group(&self) -> impl Iterator<Item = (usize, impl Iterator<Item = &Coverage>)> {
        let groups = self.parts.iter().map(Vec::len).max().unwrap_or(0);
        (0..groups).map(move |group| {
            let parts = self.parts.iter().filter_map(move |p| p.get(group));
            (group, parts)
        })
    }
}

/// One part of a [`CoverageParts`].
pub struct CoveragePart<'a> {
    part: usize,
    /// The number of parts.
    parts: usize,
    /// The cap on the items kept exactly: then there is one part.
    cap: Option<usize>,
    /// Its coverage per group id.
    groups: &'a mut Vec<Coverage>,
}

impl CoveragePart<'_> {
    /// Adds the items in this part of the lists of `logs`, taken in `order`.
    pub fn add(&mut self, logs: &[ShardLog<'_>], order: &[(usize, usize)]) {
        let (part, parts, cap) = (self.part, self.parts, self.cap);
        if cap.is_some() {
            // The one part: whole lists, as one engine adds them to a coverage with a cap.
            let (mut items, mut slots) = (Vec::new(), Vec::new());
            return self.each_list(logs, order, |coverage, log, index, shown, weights| {
                items.clear();
                items.extend(shown.iter().map(|s| s.item));
                ShownList::slots_into(&items, &mut slots);
                let list = ShownList {
                    items: &items,
                    slots: &slots,
                    weights,
                    exposure: log.exposures[index],
                    engaged: log.engaged(index),
                };
                coverage.add(&list, cap);
            });
        }
        self.each_list(logs, order, |coverage, log, index, shown, weights| {
            let exposures = shown.iter().map(|s| (s.item, weights[s.rank as usize]));
            let engaged = log.engaged_in(index, (part, parts));
            let total = if part == 0 { log.exposures[index] } else { 0.0 };
            coverage.add_exact(exposures, engaged, total);
        });
    }

    /// Calls `add` on each list of `logs`, taken in `order`, with its
    /// group's coverage, its log and index there, its items in this part
    /// and its shard's exposure per rank.
    fn each_list(
        &mut self,
        logs: &[ShardLog<'_>],
        order: &[(usize, usize)],
        mut add: impl FnMut(&mut Coverage, &FinalizedLog, usize, &[Shown], &[f64]),
    ) {
        let mut read = vec![0; logs.len()];
        for &(log, index) in order {
            let (shown, weights) = logs[log];
            let group = shown.groups[index] as usize;
            if self.groups.len() <= group {
                self.groups.resize_with(group + 1, Coverage::default);
            }
            let items = &shown.parts[self.part][read[log]..];
            let count = items
                .iter()
                .take_while(|s| s.list as usize == index)
                .count();
            read[log] += count;
            // This log's next list comes a few lists later (one from each
            // shard between): its items' exposures start loading now (the
            // exact tables only: a capped part adds whole lists by sample).
            let next = &items[count..];
            if let (Some(&Shown { list, .. }), None) = (next.first(), self.cap) {
                let group = shown.groups[list as usize] as usize;
                if let Some(coverage) = self.groups.get(group) {
                    let same = next.iter().take_while(|s| s.list == list);
                    let engaged = shown.engaged_in(list as usize, (self.part, self.parts));
                    coverage.prefetch_exact(same.map(|s| s.item), engaged);
                }
            }
            add(
                &mut self.groups[group],
                shown,
                index,
                &items[..count],
                weights,
            );
        }
    }
}
