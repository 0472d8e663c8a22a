//! The items that open lists show, numbered: a list keeps a 4-byte number
//! per item instead of the item id's 8-byte hash, and the table keeps each
//! hash once for as long as some open list shows it. Where items repeat
//! across lists (a catalogue smaller than the open lists' slots), this
//! halves what the items of an open list take. An item that no open list
//! shows has no number, so an interaction on it is known to match nothing
//! without a look at the user's lists.

use hashbrown::hash_table::Entry;
use hashbrown::HashTable;

/// The numbers of the items shown by open lists.
#[derive(Clone, Debug, Default)]
pub struct ItemTable {
    /// The numbers in use, found by the hash they stand for: 4 bytes a slot.
    numbers: HashTable<u32>,
    /// The hash of each number (of a free one, the last it stood for).
    hashes: Vec<u64>,
    /// How many open lists show each number; 0 for a free one.
    shown_by: Vec<u32>,
    /// Numbers free for reuse.
    free: Vec<u32>,
}

impl ItemTable {
    /// The number of the item with this hash, if an open list shows it.
    pub fn number(&self, hash: u64) -> Option<u32> {
        let hashes = &self.hashes;
        self.numbers
            .find(hash, |&n| hashes[n as usize] == hash)
            .copied()
    }

    /// The number of the item with this hash, for one more open list that
    /// shows it; numbered now if no open list showed it.
    pub fn hold(&mut self, hash: u64) -> u32 {
        let Self {
            numbers,
            hashes,
            shown_by,
            free,
        } = self;
        let entry = numbers.entry(
            hash,
            |&n| hashes[n as usize] == hash,
            |&n| hashes[n as usize],
        );
        let number = match entry {
            Entry::Occupied(entry) => *entry.get(),
            Entry::Vacant(entry) => {
                let number = match free.pop() {
                    Some(number) => {
                        hashes[number as usize] = hash;
                        number
                    }
                    None => {
                        hashes.push(hash);
                        shown_by.push(0);
                        // Each number stands for an item of some open list:
                        // 2³² of them would take over 100 GB of lists first.
                        u32::try_from(hashes.len() - 1).expect("fewer than 2³² items shown")
                    }
                };
                entry.insert(number);
                number
            }
        };
        shown_by[number as usize] += 1;
        number
    }

    /// One open list fewer shows `number`; the last one frees it.
    pub fn release(&mut self, number: u32) {
        let count = &mut self.shown_by[number as usize];
        *count -= 1;
        if *count > 0 {
            return;
        }
        let hash = self.hashes[number as usize];
        let hashes = &self.hashes;
        if let Ok(entry) = self
            .numbers
            .find_entry(hash, |&n| hashes[n as usize] == hash)
        {
            entry.remove();
        }
        self.free.push(number);
    }

    /// The hash of the item numbered `number`.
    pub fn hash(&self, number: u32) -> u64 {
        self.hashes[number as usize]
    }

    /// Items numbered now.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.numbers.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    proptest! {
        /// Held and released in any order, the table numbers exactly the
        /// items still held, each under one number that gives its hash
        /// back, and reuses the numbers it frees.
        #[test]
        fn numbers_stand_for_the_items_held(steps in prop::collection::vec((0u64..12, any::<bool>()), 0..300)) {
            let mut table = ItemTable::default();
            let mut held: HashMap<u64, (u32, u32)> = HashMap::new();
            for (item, hold) in steps {
                let hash = item.wrapping_mul(0x9e37_79b9_7f4a_7c15);
                match (hold, held.get_mut(&hash)) {
                    (true, _) => {
                        let number = table.hold(hash);
                        let (expected, count) = held.entry(hash).or_insert((number, 0));
                        prop_assert_eq!(number, *expected);
                        *count += 1;
                    }
                    (false, Some((number, count))) => {
                        table.release(*number);
                        *count -= 1;
                        if *count == 0 {
                            held.remove(&hash);
                        }
                    }
                    (false, None) => {}
                }
                prop_assert_eq!(table.len(), held.len());
                prop_assert!(table.hashes.len() <= 12, "freed numbers are reused");
                for (&hash, &(number, _)) in &held {
                    prop_assert_eq!(table.number(hash), Some(number));
                    prop_assert_eq!(table.hash(number), hash);
                }
            }
            for item in 0u64..12 {
                let hash = item.wrapping_mul(0x9e37_79b9_7f4a_7c15);
                prop_assert_eq!(table.number(hash).is_some(), held.contains_key(&hash));
            }
        }
    }
}
