//! Tables keyed by ids that are already hashes ([`super::id_hash`]), mixed
//! with a key this process draws at random. The id hash is no secret (any
//! client can compute it for the ids it sends), so a table indexed by its
//! bits as they are can be aimed at: ids picked so that their hashes share
//! the bits that choose a slot pile into one probe run, and every lookup
//! walks it. Mixed with the key, which no client sees, a slot depends on
//! all 64 bits of the hash: ids that share a slot are as rare as chance
//! makes them.

use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;

/// A key for this process's tables, drawn once.
pub fn process_key() -> u64 {
    static KEY: OnceLock<u64> = OnceLock::new();
    *KEY.get_or_init(|| std::collections::hash_map::RandomState::new().hash_one(0u64))
}

/// `hash` mixed with `key`: a folded 128-bit product, each bit of which
/// depends on every bit of `hash`.
#[inline(always)]
pub fn mixed(hash: u64, key: u64) -> u64 {
    const MULTIPLIER: u64 = 0x9e37_79b9_7f4a_7c15;
    let product = u128::from(hash ^ key) * u128::from(MULTIPLIER);
    (product >> 64) as u64 ^ product as u64
}

/// The hasher of [`KeyedIdHash`]: a `u64` key mixed with the process's key.
#[derive(Clone, Copy)]
pub struct KeyedMix {
    key: u64,
    hash: u64,
}

impl Hasher for KeyedMix {
    fn finish(&self) -> u64 {
        self.hash
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.hash = mixed(self.hash.rotate_left(8) ^ u64::from(b), self.key);
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.hash = mixed(value, self.key);
    }
}

/// For maps keyed by id hashes: the hash mixed with the process's key.
#[derive(Clone, Copy, Debug)]
pub struct KeyedIdHash {
    key: u64,
}

impl Default for KeyedIdHash {
    fn default() -> Self {
        Self { key: process_key() }
    }
}

impl BuildHasher for KeyedIdHash {
    type Hasher = KeyedMix;

    fn build_hasher(&self) -> KeyedMix {
        KeyedMix {
            key: self.key,
            hash: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ids picked, by trying ids in turn, so that their hashes share the
    /// low 16 bits (which pick a slot of a table of 65,536 when hashes are
    /// used as they are) get slots spread as chance spreads them.
    #[test]
    fn ids_aimed_at_one_slot_are_spread_by_the_key() {
        let aimed: Vec<u64> = (0u64..)
            .map(|i| crate::event::id_hash(&format!("user-{i}")))
            .filter(|hash| hash & 0xffff == 0x1234)
            .take(64)
            .collect();
        let hasher = KeyedIdHash::default();
        let mut slots: Vec<u64> = aimed.iter().map(|&h| hasher.hash_one(h) & 0xffff).collect();
        slots.sort_unstable();
        slots.dedup();
        // 64 draws of 65,536 slots: a repeat is rare, two are rarer.
        assert!(slots.len() >= 62, "{} distinct of 64", slots.len());
    }
}
