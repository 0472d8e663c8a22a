//! The coverage of a [`super::ShardedEngine`]'s lists, kept apart from its
//! shards and split by item.
//!
//! Every shard sees nearly every item, so a coverage per shard and group
//! would hold each item's exposure [`SHARDS`] times over (in replay, half
//! the memory and a third of the time went to it). Instead each shard logs
//! the lists it finalizes, and after each batch the logs are added to
//! coverages split in [`PARTS`] parts by item hash, one thread per part at
//! a time: each item's exposure is kept once.
//!
//! The lists go in in the order one engine finalizes them, by deadline then
//! arrival: an engine's watermark only rises and a new list's deadline is
//! past it, so every list finalized after a batch comes after those
//! finalized in it. Each item's exposure is therefore summed in one
//! engine's order, whatever the threads, the batches and the shards.

use super::SHARDS;
use crate::event::Nanos;
use crate::metrics::Coverage;

/// Parts the items are split in: as many threads as can share the work.
pub const PARTS: usize = SHARDS;

/// The part of an item: bits that neither the exposure tables' slots nor
/// the sample's level read.
fn part_of(item: u64) -> usize {
    ((item >> 8) % PARTS as u64) as usize
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

/// The lists one shard finalized since its log was last added to coverage.
#[derive(Debug)]
pub struct ShownLog {
    /// Each list's place in finalization order: its deadline, then its
    /// sequence number. Increasing: a shard finalizes in this order.
    keys: Vec<ListKey>,
    /// Each list's group.
    groups: Vec<u32>,
    /// Each list's exposure summed.
    exposures: Vec<f64>,
    /// Where each list's engaged items end in `engaged`.
    engaged_ends: Vec<usize>,
    /// The lists' engaged items, one list after another.
    engaged: Vec<u64>,
    /// Per part, the items of the lists in it, list by list: the shard
    /// sorts them out as it finalizes, so that each part reads its own.
    parts: Vec<Vec<Shown>>,
}

impl Default for ShownLog {
    fn default() -> Self {
        Self {
            keys: Vec::new(),
            groups: Vec::new(),
            exposures: Vec::new(),
            engaged_ends: Vec::new(),
            engaged: Vec::new(),
            parts: (0..PARTS).map(|_| Vec::new()).collect(),
        }
    }
}

impl ShownLog {
    /// Logs a list finalized into group `group`: its items in rank order,
    /// their exposure summed, and its engaged items.
    pub fn push(
        &mut self,
        key: ListKey,
        group: usize,
        items: &[u64],
        exposure: f64,
        engaged: &[u64],
    ) {
        let list = self.keys.len() as u32;
        self.keys.push(key);
        self.groups.push(group as u32);
        self.exposures.push(exposure);
        self.engaged.extend_from_slice(engaged);
        self.engaged_ends.push(self.engaged.len());
        for (rank, &item) in (0..).zip(items) {
            self.parts[part_of(item)].push(Shown { list, rank, item });
        }
    }

    /// Forgets the lists, keeping the room they took.
    pub fn clear(&mut self) {
        self.keys.clear();
        self.groups.clear();
        self.exposures.clear();
        self.engaged_ends.clear();
        self.engaged.clear();
        self.parts.iter_mut().for_each(Vec::clear);
    }

    /// The engaged items of list `index`.
    fn engaged(&self, index: usize) -> &[u64] {
        let start = index
            .checked_sub(1)
            .map_or(0, |before| self.engaged_ends[before]);
        &self.engaged[start..self.engaged_ends[index]]
    }
}

/// The lists of `logs`, each given as `(log, index)`, in finalization
/// order: the logs merged by key.
fn in_finalization_order(logs: &[(&ShownLog, &[f64])]) -> Vec<(usize, usize)> {
    let mut next = vec![0; logs.len()];
    let total = logs.iter().map(|(log, _)| log.keys.len()).sum();
    let mut order = Vec::with_capacity(total);
    for _ in 0..total {
        let earliest = (0..logs.len())
            .filter_map(|log| Some((*logs[log].0.keys.get(next[log])?, log)))
            .min();
        if let Some((_, log)) = earliest {
            order.push((log, next[log]));
            next[log] += 1;
        }
    }
    order
}

/// Exact coverage per group, in [`PARTS`] parts by item.
#[derive(Debug, Default)]
pub struct CoverageParts {
    /// Per part, per group id.
    parts: Vec<Vec<Coverage>>,
}

impl CoverageParts {
    /// Empty parts.
    pub fn new() -> Self {
        Self {
            parts: (0..PARTS).map(|_| Vec::new()).collect(),
        }
    }

    /// Adds the lists of `logs` (each with its shard's exposure weights by
    /// rank) in finalization order, on up to `threads` threads.
    pub fn add(&mut self, logs: &[(&ShownLog, &[f64])], threads: usize) {
        let order = in_finalization_order(logs);
        let parts = self.parts.iter_mut().enumerate().collect();
        crate::parallel::each(parts, threads, |(part, groups)| {
            let mut read = vec![0; logs.len()];
            for &(log, index) in &order {
                let (shown, weights) = logs[log];
                let group = shown.groups[index] as usize;
                if groups.len() <= group {
                    groups.resize_with(group + 1, Coverage::default);
                }
                let items = &shown.parts[part][read[log]..];
                let count = items
                    .iter()
                    .take_while(|s| s.list as usize == index)
                    .count();
                read[log] += count;
                let exposures = items[..count]
                    .iter()
                    .map(|s| (s.item, weights[s.rank as usize]));
                let engaged = shown.engaged(index).iter().copied();
                let engaged = engaged.filter(|&item| part_of(item) == part);
                let total = if part == 0 {
                    shown.exposures[index]
                } else {
                    0.0
                };
                groups[group].add_exact(exposures, engaged, total);
            }
        });
    }

    /// Per group id, the parts of its coverage.
    pub fn by_group(&self) -> impl Iterator<Item = (usize, impl Iterator<Item = &Coverage>)> {
        let groups = self.parts.iter().map(Vec::len).max().unwrap_or(0);
        (0..groups).map(move |group| (group, self.parts.iter().filter_map(move |p| p.get(group))))
    }
}
