//! Maps keyed by ids that are already hashes ([`super::id_hash`]): their
//! hasher passes the key through instead of hashing it again.

use std::hash::{BuildHasherDefault, Hasher};

/// A hasher of `u64` keys that are already well mixed: the key itself.
#[derive(Default)]
pub struct PassThrough(u64);

impl Hasher for PassThrough {
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

/// For maps keyed by id hashes: the hash as it is.
pub type IdentityHash = BuildHasherDefault<PassThrough>;
