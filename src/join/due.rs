//! When each open impression closes and each waiting interaction gives up.
//!
//! Events mostly arrive in time order, so due times are mostly pushed in
//! order: those go to the back of a queue, at no cost, and only the rest
//! to a heap. Popping takes the earlier of the two fronts, so entries come
//! out in exactly the order one heap would give.

use crate::event::Nanos;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// An entry: `(when, seq, user)`. Sequence numbers are unique, so entries
/// are totally ordered by when, then arrival.
pub type Due = (Nanos, u64, u64);

/// Entries by due time, earliest first.
#[derive(Debug, Default)]
pub struct DueQueue {
    /// Entries pushed in order, each no earlier than the one before.
    in_order: VecDeque<Due>,
    /// The entries pushed earlier than the back of `in_order` was.
    out_of_order: BinaryHeap<Reverse<Due>>,
}

impl DueQueue {
    /// Adds an entry.
    pub fn push(&mut self, due: Due) {
        if self.in_order.back().is_none_or(|&last| last <= due) {
            self.in_order.push_back(due);
        } else {
            self.out_of_order.push(Reverse(due));
        }
    }

    /// The earliest entry, left in place.
    pub fn peek(&self) -> Option<Due> {
        let queued = self.in_order.front().copied();
        let heaped = self.out_of_order.peek().map(|entry| entry.0);
        match (queued, heaped) {
            (Some(q), Some(h)) => Some(q.min(h)),
            (q, h) => q.or(h),
        }
    }

    /// Removes and returns the earliest entry.
    pub fn pop(&mut self) -> Option<Due> {
        self.pop_due_by(Nanos::MAX)
    }

    /// The entries pushed in order, earliest first, without those pushed
    /// out of order: what a prefetch of the next entries to come due reads.
    pub fn upcoming(&self) -> impl Iterator<Item = &Due> {
        self.in_order.iter()
    }

    /// Removes and returns the earliest entry, if it is due by `time`.
    pub fn pop_due_by(&mut self, time: Nanos) -> Option<Due> {
        let queued = self.in_order.front().copied();
        let earliest = self.peek()?;
        if earliest.0 > time {
            return None;
        }
        if queued == Some(earliest) {
            self.in_order.pop_front();
        } else {
            self.out_of_order.pop();
        }
        Some(earliest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever the push order, entries come out in sorted order, and
        /// only those due by the time asked.
        #[test]
        fn entries_come_out_in_order(times in prop::collection::vec(0i64..50, 0..200), cut in 0i64..50) {
            let mut queue = DueQueue::default();
            let mut entries = Vec::new();
            for (seq, time) in (0u64..).zip(times) {
                let due = (time, seq, time as u64 * 7 % 5);
                queue.push(due);
                entries.push(due);
            }
            entries.sort_unstable();
            // What is upcoming comes due in that order, without what was pushed out of order.
            let upcoming: Vec<Due> = queue.upcoming().copied().collect();
            prop_assert!(upcoming.is_sorted());
            prop_assert!(upcoming.iter().all(|due| entries.contains(due)));
            let mut popped = Vec::new();
            while let Some(due) = queue.pop_due_by(cut) {
                popped.push(due);
            }
            let due_count = entries.iter().take_while(|due| due.0 <= cut).count();
            prop_assert_eq!(&popped[..], &entries[..due_count]);
            while let Some(due) = queue.pop() {
                popped.push(due);
            }
            prop_assert_eq!(popped, entries);
        }
    }
}
