//! The items that open lists show, numbered: a list keeps a number of 1 to
//! 4 bytes per item instead of the item id's 8-byte hash, and the table
//! keeps each hash once. Where items repeat across lists (a catalogue
//! smaller than the open lists' slots), this saves most of what an open
//! list's items took.
//!
//! A number is not given back as each list closes, which would cost a
//! visit to the table per item: the table keeps, per number, the latest
//! deadline of the lists that showed it, and lists close in deadline order,
//! so a number whose deadline is before that of the last list closed is
//! shown by no open list. Such numbers are freed in one pass once the
//! table has grown by a quarter since the last, and reused.
//!
//! The table is looked up once per item of every list that opens, in a
//! structure larger than the cache, so a list's items are looked up
//! together: the slots of all of them are loaded at once, then the items
//! those slots name, then each is found or numbered.
//!
//! A table that does not number items passes their hashes through as their
//! "numbers": lists then keep 8 bytes per item, and nothing is looked up.

use crate::event::hashed::{mixed, process_key};
use crate::event::Nanos;
use crate::prefetch::prefetch;

/// The numbers of the items shown by open lists.
#[derive(Clone, Debug)]
pub struct ItemTable {
    /// Whether items are numbered; if not, a hash is its own number.
    numbered: bool,
    /// Mixed into a hash to find its slot, so that no client can aim
    /// items at one ([`crate::event::hashed`]).
    key: u64,
    /// Open addressing, linear probing: each slot a number, or [`EMPTY`].
    /// At most half of them are taken.
    slots: Vec<u32>,
    /// What each number stands for (a free one: what it last stood for).
    items: Vec<Item>,
    /// Numbers free for reuse; every other number below `items.len()` is
    /// in a slot.
    free: Vec<u32>,
    /// Numbers in use after the last pass that freed numbers.
    kept: usize,
    /// The deadline of the last list closed: lists close in deadline
    /// order, so every list due before it is closed.
    closed: Nanos,
    /// Room for the numbers of the list being opened.
    numbers: Vec<u64>,
}

/// What a number stands for.
#[derive(Clone, Copy, Debug)]
struct Item {
    /// The item id's hash.
    hash: u64,
    /// The latest deadline of the lists that showed it.
    until: Nanos,
}

/// A slot that holds no number.
const EMPTY: u32 = u32::MAX;

/// Numbers the table holds before its first pass to free some.
const FIRST_PASS_AT: usize = 1024;

impl Default for ItemTable {
    fn default() -> Self {
        Self::new(true)
    }
}

impl ItemTable {
    /// An empty table, which numbers items if `numbered`, else passes
    /// their hashes through.
    pub fn new(numbered: bool) -> Self {
        Self {
            numbered,
            key: process_key(),
            slots: vec![EMPTY; 2 * FIRST_PASS_AT],
            items: Vec::new(),
            free: Vec::new(),
            kept: 0,
            closed: Nanos::MIN,
            numbers: Vec::new(),
        }
    }

    /// Where the probe for `hash` starts: the hash mixed with the table's
    /// key, so that hashes alike in some of their bits spread.
    fn start(&self, hash: u64) -> usize {
        mixed(hash, self.key) as usize & (self.slots.len() - 1)
    }

    /// The slot that holds `hash`'s number, or the empty slot where it
    /// would go.
    fn slot_of(&self, hash: u64) -> usize {
        let mask = self.slots.len() - 1;
        let mut slot = self.start(hash);
        loop {
            let number = self.slots[slot];
            if number == EMPTY || self.items[number as usize].hash == hash {
                return slot;
            }
            slot = (slot + 1) & mask;
        }
    }

    /// The number of the item with this hash, if it has one; one that an
    /// open list shows has one.
    pub fn number(&self, hash: u64) -> Option<u64> {
        if !self.numbered {
            return Some(hash);
        }
        let number = self.slots[self.slot_of(hash)];
        (number != EMPTY).then_some(u64::from(number))
    }

    /// The numbers of the items `hashes` of a list that closes at `until`,
    /// numbering the items that have none (the hashes themselves when
    /// items are not numbered); the list keeps the numbers from being
    /// freed before then.
    pub fn numbers_of<'a>(&'a mut self, hashes: &'a [u64], until: Nanos) -> &'a [u64] {
        if !self.numbered {
            return hashes;
        }
        let mut numbers = std::mem::take(&mut self.numbers);
        numbers.clear();
        numbers.extend_from_slice(hashes);
        self.hold_all(&mut numbers, until);
        self.numbers = numbers;
        &self.numbers
    }

    /// Replaces each item hash of a list that closes at `until` with the
    /// item's number, numbering the items that have none; the list keeps
    /// the numbers from being freed before then.
    pub fn hold_all(&mut self, items: &mut [u64], until: Nanos) {
        if !self.numbered {
            return;
        }
        // Load the slots of all of them at once, then the items they name.
        for &hash in items.iter() {
            prefetch(&raw const self.slots[self.start(hash)]);
        }
        for &hash in items.iter() {
            let number = self.slots[self.start(hash)];
            if number != EMPTY {
                prefetch(&raw const self.items[number as usize]);
            }
        }
        for item in items.iter_mut() {
            *item = u64::from(self.hold(*item, until));
        }
    }

    /// The number of the item with this hash, for a list that closes at
    /// `until`, which keeps the number from being freed before then.
    fn hold(&mut self, hash: u64, until: Nanos) -> u32 {
        let mut slot = self.slot_of(hash);
        let number = self.slots[slot];
        if number != EMPTY {
            let item = &mut self.items[number as usize];
            item.until = item.until.max(until);
            return number;
        }
        if self.free.is_empty() && self.items.len() >= FIRST_PASS_AT.max(self.kept * 5 / 4) {
            self.free_closed();
            slot = self.slot_of(hash);
        }
        let item = Item { hash, until };
        let number = match self.free.pop() {
            Some(number) => {
                self.items[number as usize] = item;
                number
            }
            None => {
                self.items.push(item);
                // Each number stands for an item of some open list: 2³²
                // of them would take over 100 GB of lists first.
                u32::try_from(self.items.len() - 1)
                    .ok()
                    .filter(|&number| number != EMPTY)
                    .expect("fewer than 2³² − 1 items shown")
            }
        };
        if 2 * self.in_use() > self.slots.len() {
            self.rebuild(2 * self.slots.len());
            slot = self.slot_of(hash);
        }
        self.slots[slot] = number;
        number
    }

    /// A list that closes at `deadline` closed: every list due earlier has.
    pub fn closed(&mut self, deadline: Nanos) {
        self.closed = self.closed.max(deadline);
    }

    /// Frees the numbers that no open list shows.
    fn free_closed(&mut self) {
        for slot in &mut self.slots {
            if *slot != EMPTY && self.items[*slot as usize].until < self.closed {
                self.free.push(*slot);
                *slot = EMPTY;
            }
        }
        self.kept = self.in_use();
        // Linear probing finds a number only past no empty slot: place the
        // rest anew.
        self.rebuild(self.slots.len());
    }

    /// Puts the numbers in the slots into `size` slots.
    fn rebuild(&mut self, size: usize) {
        let numbers = std::mem::replace(&mut self.slots, vec![EMPTY; size]);
        for number in numbers.into_iter().filter(|&n| n != EMPTY) {
            let slot = self.slot_of(self.items[number as usize].hash);
            self.slots[slot] = number;
        }
    }

    /// Writes the hash of each item numbered in `numbers` into `hashes`.
    pub fn hashes_into(&self, numbers: impl Iterator<Item = u64> + Clone, hashes: &mut Vec<u64>) {
        if self.numbered {
            for number in numbers.clone() {
                prefetch(&raw const self.items[number as usize]);
            }
        }
        hashes.clear();
        hashes.extend(numbers.map(|number| self.hash(number)));
    }

    /// The hash of the item numbered `number`.
    pub fn hash(&self, number: u64) -> u64 {
        match self.numbered {
            true => self.items[number as usize].hash,
            false => number,
        }
    }

    /// Numbers in use: those of the items open lists show, and of items
    /// only closed lists showed until a pass frees them; 0 for a table that
    /// passes hashes through.
    pub fn in_use(&self) -> usize {
        self.items.len() - self.free.len()
    }

    /// Numbers shown by some list due after the last list closed.
    #[cfg(test)]
    pub fn held(&self) -> usize {
        let shown = |&&n: &&u32| n != EMPTY && self.items[n as usize].until > self.closed;
        self.slots.iter().filter(shown).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    /// Items whose ids a client picked, by trying ids in turn, so that
    /// hashes taken as they are would start their probes at one slot of
    /// the table's 2,048: in one run, each lookup would walk all of them.
    /// The table's key spreads them as chance does.
    #[test]
    fn items_aimed_at_one_slot_do_not_pile_into_one_run() {
        let unkeyed_start = |hash: u64| (hash.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) & 2047;
        let mut aimed: Vec<u64> = (0u64..)
            .map(|i| crate::event::id_hash(&format!("item-{i}")))
            .filter(|&hash| unkeyed_start(hash) == 7)
            .take(1000)
            .collect();
        let mut table = ItemTable::default();
        table.hold_all(&mut aimed, 1);
        assert_eq!(table.slots.len(), 2048);
        let mut longest = 0;
        let mut run = 0;
        for &slot in &table.slots {
            run = if slot == EMPTY { 0 } else { run + 1 };
            longest = longest.max(run);
        }
        assert!(longest < 200, "a run of {longest} slots");
    }

    proptest! {
        /// Lists of a few items, opened in turn and closed in deadline
        /// order: every open list's items keep their numbers, each number
        /// gives its hash back, and the table frees and reuses numbers, so
        /// that it holds no more than about the items open lists show.
        #[test]
        fn open_lists_keep_their_numbers(
            lists in prop::collection::vec((prop::collection::vec(0u64..3000, 1..6), 0i64..50), 1..2000),
        ) {
            let mut table = ItemTable::default();
            let mut open: Vec<(Nanos, Vec<(u64, u64)>)> = Vec::new();
            let (mut time, mut peak) = (0, 0);
            for (items, window) in lists {
                time += 1;
                let until = time + window;
                let hashes: Vec<u64> = items.iter().map(|&i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15) & !0xffff).collect();
                let mut numbers = hashes.clone();
                table.hold_all(&mut numbers, until);
                let numbered = hashes.iter().zip(&numbers).map(|(&h, &n)| (h, n)).collect();
                open.push((until, numbered));
                // Close, in deadline order, the lists due by now.
                open.sort_by_key(|(until, _)| *until);
                while open.first().is_some_and(|(until, _)| *until <= time) {
                    let (until, _) = open.remove(0);
                    table.closed(until);
                }
                let mut shown: HashMap<u64, u64> = HashMap::new();
                for (_, numbered) in &open {
                    for &(hash, number) in numbered {
                        prop_assert_eq!(*shown.entry(hash).or_insert(number), number);
                        prop_assert_eq!(table.number(hash), Some(number));
                        prop_assert_eq!(table.hash(number), hash);
                    }
                }
                peak = peak.max(shown.len());
                prop_assert!(table.items.len() <= FIRST_PASS_AT.max(peak * 2 + 64));
                prop_assert!(2 * table.in_use() <= table.slots.len());
                let in_slots = table.slots.iter().filter(|&&n| n != EMPTY).count();
                prop_assert_eq!(in_slots, table.in_use());
            }
            let last = open.last().map_or(time, |(until, _)| *until);
            table.closed(last);
            prop_assert_eq!(table.held(), 0);
        }
    }
}
