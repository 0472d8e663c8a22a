//! One user's open impressions and waiting interactions, and the attribution
//! rules that only ever look inside one user.

use super::{Counters, GroupId, Unattributed};
use crate::event::{Impression, Interaction, Nanos};
use serde::{Deserialize, Serialize};
use std::hash::{BuildHasherDefault, Hasher};

/// An open impression, stored compactly: item ids are hashes, and each
/// credited interaction takes 24 bytes, in blocks of 2, 4, 8… (72 bytes in
/// all, beside those). Saved in the fixed-width form of [`super::packed`].
#[derive(Clone, Debug)]
pub struct OpenImpression {
    /// Arrival order, unique across the engine.
    pub seq: u64,
    pub request: u64,
    pub time: Nanos,
    pub group: GroupId,
    pub(super) items: Box<[u64]>,
    /// The interactions credited to it, in blocks of 2, 4, 8….
    pub(super) credits: Vec<Credit>,
}

/// One interaction credited to an impression.
#[derive(Clone, Copy, Debug)]
pub(super) struct Credit {
    pub(super) rank: u32,
    /// The interaction's type index (in the padding after `rank`).
    pub(super) kind: u16,
    pub(super) grade: f64,
    /// The event id's hash; 0 when it had none.
    pub(super) event: u64,
}

impl OpenImpression {
    /// A newly opened impression, taking over its item hashes.
    pub fn new(seq: u64, group: GroupId, impression: Impression<'_>) -> Self {
        Self {
            seq,
            request: impression.request,
            time: impression.time,
            group,
            items: impression.items.into_boxed_slice(),
            credits: Vec::new(),
        }
    }

    fn rank_of(&self, item: u64) -> Option<usize> {
        self.items.iter().position(|&i| i == item)
    }

    fn in_window(&self, time: Nanos, window: Nanos) -> bool {
        self.time <= time && time <= self.time.saturating_add(window)
    }

    /// The rank index of the interaction's item, when the interaction matches (SPEC §3 rule 2).
    fn matching_rank(&self, x: &Interaction, window: Nanos) -> Option<usize> {
        self.in_window(x.time, window)
            .then(|| self.rank_of(x.item))
            .flatten()
    }

    fn has_credited_event(&self, event: Option<u64>) -> bool {
        event.is_some_and(|e| self.credits.iter().any(|c| c.event == e))
    }

    fn credit(&mut self, rank: usize, x: &Interaction, counters: &mut Counters) {
        counters.credited += 1;
        // Room for two, then twice as many: growing by one would move the
        // credits to a new block at nearly every interaction.
        if self.credits.len() == self.credits.capacity() {
            self.credits.reserve_exact(self.credits.len().max(2));
        }
        self.credits.push(Credit {
            rank: rank as u32,
            kind: x.kind,
            grade: x.grade,
            event: x.event.unwrap_or(0),
        });
    }

    /// Why an interaction that named this impression does not match it.
    fn mismatch(&self, x: &Interaction) -> Unattributed {
        if self.rank_of(x.item).is_none() {
            Unattributed::NotInList
        } else {
            Unattributed::OutsideWindow
        }
    }

    /// Writes the grade of every item, rank order, into `grades`.
    pub fn grades_into(&self, grades: &mut Vec<f64>) {
        grades.clear();
        grades.resize(self.items.len(), 0.0);
        for credit in &self.credits {
            let grade = &mut grades[credit.rank as usize];
            *grade = grade.max(credit.grade);
        }
    }

    /// Whether every credit names a rank of the list, as `credit` gives
    /// them: `grades_into` indexes the list by them.
    pub fn is_well_formed(&self) -> bool {
        self.credits
            .iter()
            .all(|c| (c.rank as usize) < self.items.len())
    }

    /// The number of items shown.
    pub fn shown(&self) -> usize {
        self.items.len()
    }

    /// The item hashes shown, rank order.
    pub fn items(&self) -> &[u64] {
        &self.items
    }

    /// The items with a credited interaction of grade > 0 (an item once per credit).
    pub fn engaged_items(&self) -> impl Iterator<Item = u64> + '_ {
        self.credits
            .iter()
            .filter(|c| c.grade > 0.0)
            .map(|c| self.items[c.rank as usize])
    }

    /// `(rank index, type index)` of every credited interaction.
    pub fn credited(&self) -> impl Iterator<Item = (usize, u16)> + '_ {
        self.credits.iter().map(|c| (c.rank as usize, c.kind))
    }

    /// Whether some item has a grade above 0.
    pub fn is_engaged(&self) -> bool {
        self.credits.iter().any(|c| c.grade > 0.0)
    }
}

/// An interaction waiting for its impression.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct Waiting {
    /// Arrival order, unique across the engine.
    pub seq: u64,
    pub interaction: Interaction,
}

/// Everything held for one user.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct UserState {
    /// Open impressions ordered by (time, arrival): the latest last.
    pub open: Vec<OpenImpression>,
    /// Waiting interactions in arrival order.
    pub waiting: Vec<Waiting>,
}

impl UserState {
    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.open.is_empty() && self.waiting.is_empty()
    }

    /// Whether an open impression has this request id.
    pub fn has_open_request(&self, request: u64) -> bool {
        self.open.iter().rev().any(|m| m.request == request)
    }

    /// Starts loading this state itself, the first step of a walk through
    /// users in no order of memory: [`Self::prefetch_lists`] follows it,
    /// then [`Self::prefetch`].
    pub fn prefetch_state(&self) {
        prefetch(self);
    }

    /// Starts loading the open lists' headers.
    pub fn prefetch_lists(&self) {
        prefetch(self.open.as_ptr());
    }

    /// Starts loading the items and credits of the latest open lists, which
    /// an interaction searches first.
    pub fn prefetch(&self) {
        for m in self.open.iter().rev().take(2) {
            prefetch(m.items.as_ptr());
            prefetch(m.credits.as_ptr());
        }
    }

    /// Adds a newly opened impression in (time, arrival) order; it is
    /// usually the latest, so the search starts from the end.
    pub fn insert_open(&mut self, open: OpenImpression) {
        let index = self
            .open
            .iter()
            .rposition(|m| m.time <= open.time)
            .map_or(0, |i| i + 1);
        // Most users hold one list at a time: grow by one, not by the default four.
        self.open.reserve_exact(1);
        self.open.insert(index, open);
    }

    /// Removes and returns the open impression `seq`.
    pub fn take_open(&mut self, seq: u64) -> Option<OpenImpression> {
        let position = self.open.iter().position(|m| m.seq == seq)?;
        Some(self.open.remove(position))
    }

    /// Removes and returns the waiting interaction `seq`.
    pub fn take_waiting(&mut self, seq: u64) -> Option<Waiting> {
        let position = self.waiting.iter().position(|w| w.seq == seq)?;
        Some(self.waiting.remove(position))
    }

    /// Credits, counts as unattributed or as a duplicate; returns `false`
    /// when the interaction must wait for its impression (and is not counted yet).
    pub fn attribute(&mut self, x: Interaction, window: Nanos, counters: &mut Counters) -> bool {
        let target = match x.request {
            Some(request) => match self.open.iter().rposition(|m| m.request == request) {
                Some(index) => match self.open[index].matching_rank(&x, window) {
                    Some(rank) => Some((index, rank)),
                    None => {
                        counters.interactions += 1;
                        counters.unattributed(self.open[index].mismatch(&x));
                        return true;
                    }
                },
                None => None,
            },
            None => self.latest_match(&x, window),
        };
        let waiting_retry =
            x.event.is_some() && self.waiting.iter().any(|w| w.interaction.event == x.event);
        let credited_retry =
            target.is_some_and(|(index, _)| self.open[index].has_credited_event(x.event));
        if waiting_retry || credited_retry {
            counters.duplicate_interactions += 1;
            return true;
        }
        let Some((index, rank)) = target else {
            return false;
        };
        counters.interactions += 1;
        self.open[index].credit(rank, &x, counters);
        true
    }

    /// The latest (by time, then arrival) open impression the interaction
    /// matches. `open` is in that order, so the search runs from the end and
    /// stops at the first list shown more than a window before the interaction.
    fn latest_match(&self, x: &Interaction, window: Nanos) -> Option<(usize, usize)> {
        for (index, m) in self.open.iter().enumerate().rev() {
            if m.time.saturating_add(window) < x.time {
                return None;
            }
            if let Some(rank) = m.matching_rank(x, window) {
                return Some((index, rank));
            }
        }
        None
    }

    /// Settles the waiting interactions that a newly opened impression
    /// claims, in arrival order; returns how many left the waiting list.
    pub fn claim_waiting(
        &mut self,
        open: &mut OpenImpression,
        window: Nanos,
        counters: &mut Counters,
    ) -> usize {
        let before = self.waiting.len();
        self.waiting.retain(|w| {
            let x = &w.interaction;
            let named = x.request == Some(open.request);
            if !named && x.request.is_some() {
                return true;
            }
            match open.matching_rank(x, window) {
                Some(rank) => open.credit(rank, x, counters),
                None if named => counters.unattributed(open.mismatch(x)),
                None => return true,
            }
            false
        });
        before - self.waiting.len()
    }
}

/// Asks the CPU to start loading the cache line at `address`: a hint that
/// never faults, whatever the address.
#[inline(always)]
#[allow(unsafe_code)]
fn prefetch<T>(address: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch instruction reads nothing into the program and
    // cannot fault, so any address is sound.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(address.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = address;
}

/// User ids are already well-mixed hashes: the map uses them as they are.
pub type IdentityHash = BuildHasherDefault<IdentityHasher>;

/// A hasher that passes a `u64` key through.
#[derive(Default)]
pub struct IdentityHasher(u64);

impl Hasher for IdentityHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = value;
    }
}
