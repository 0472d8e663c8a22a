//! Maps keyed by ids that are already hashes ([`super::id_hash`]): their
//! hasher passes the key through instead of hashing it again.

use std::hash::{BuildHasherDefault, Hasher};

/// A hasher of `u64` keys that are already well mixed: the key, rotated
/// left by `ROTATE` bits. A map picks its slot by the low bits, so a
/// sample that keeps only hashes whose low bits are zero rotates them away.
#[derive(Default)]
pub struct PassThrough<const ROTATE: u32>(u64);

impl<const ROTATE: u32> Hasher for PassThrough<ROTATE> {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = value.rotate_left(ROTATE);
    }
}

/// For maps keyed by id hashes: the hash as it is.
pub type IdentityHash = BuildHasherDefault<PassThrough<0>>;

/// For maps keyed by id hashes whose low bits are all alike: the halves swapped.
pub type SwappedHash = BuildHasherDefault<PassThrough<32>>;
