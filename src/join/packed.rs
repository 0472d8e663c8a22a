//! The saved form of an open impression: one run of fixed-width
//! little-endian fields, so that a snapshot copies an impression's item
//! hashes and credits as they are instead of writing each 64-bit hash as a
//! variable-length integer of up to ten bytes, one call at a time.
//!
//! Layout: `seq` (8 bytes), `request` (8), `time` (8), `group` (4),
//! `lineup` (4), the number of words of the item box (4), those words (8
//! each: the item hashes, then an interleaved list's teams), then the
//! credits to the end: rank (4), type index (2), grade (8, IEEE 754 bits),
//! event hash (8).

use super::user::{Credit, OpenImpression};
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use std::cell::RefCell;
use std::fmt;

const HEADER_BYTES: usize = 8 + 8 + 8 + 4 + 4 + 4;
const ITEM_BYTES: usize = 8;
const CREDIT_BYTES: usize = 4 + 2 + 8 + 8;

thread_local! {
    /// The bytes of the impression being written, reused from one to the next.
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

impl Serialize for OpenImpression {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        SCRATCH.with_borrow_mut(|bytes| {
            bytes.clear();
            bytes.reserve(
                HEADER_BYTES + self.items.len() * ITEM_BYTES + self.credits.len() * CREDIT_BYTES,
            );
            bytes.extend_from_slice(&self.seq.to_le_bytes());
            bytes.extend_from_slice(&self.request.to_le_bytes());
            bytes.extend_from_slice(&self.time.to_le_bytes());
            bytes.extend_from_slice(&self.group.to_le_bytes());
            bytes.extend_from_slice(&self.lineup.to_le_bytes());
            bytes.extend_from_slice(&(self.items.len() as u32).to_le_bytes());
            for item in self.items.iter() {
                bytes.extend_from_slice(&item.to_le_bytes());
            }
            for credit in self.credits.iter() {
                bytes.extend_from_slice(&credit.rank.to_le_bytes());
                bytes.extend_from_slice(&credit.kind.to_le_bytes());
                bytes.extend_from_slice(&credit.grade.to_bits().to_le_bytes());
                bytes.extend_from_slice(&credit.event.to_le_bytes());
            }
            serializer.serialize_bytes(bytes)
        })
    }
}

impl<'de> Deserialize<'de> for OpenImpression {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_bytes(PackedVisitor)
    }
}

struct PackedVisitor;

impl Visitor<'_> for PackedVisitor {
    type Value = OpenImpression;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an open impression's packed bytes")
    }

    fn visit_bytes<E: de::Error>(self, bytes: &[u8]) -> Result<OpenImpression, E> {
        unpack(bytes).ok_or_else(|| E::invalid_length(bytes.len(), &self))
    }
}

/// The impression `bytes` hold, if they are laid out as [`Serialize`] writes them.
fn unpack(bytes: &[u8]) -> Option<OpenImpression> {
    let mut reader = Reader(bytes);
    let seq = u64::from_le_bytes(reader.take()?);
    let request = u64::from_le_bytes(reader.take()?);
    let time = i64::from_le_bytes(reader.take()?);
    let group = u32::from_le_bytes(reader.take()?);
    let lineup = u32::from_le_bytes(reader.take()?);
    let count = u32::from_le_bytes(reader.take()?) as usize;
    let item_bytes = reader.take_slice(count.checked_mul(ITEM_BYTES)?)?;
    let (items, _) = item_bytes.as_chunks::<ITEM_BYTES>();
    let items = items.iter().map(|item| u64::from_le_bytes(*item)).collect();
    if reader.0.len() % CREDIT_BYTES != 0 {
        return None;
    }
    let mut credits = Vec::with_capacity(reader.0.len() / CREDIT_BYTES);
    while !reader.0.is_empty() {
        credits.push(Credit {
            rank: u32::from_le_bytes(reader.take()?),
            kind: u16::from_le_bytes(reader.take()?),
            grade: f64::from_bits(u64::from_le_bytes(reader.take()?)),
            event: u64::from_le_bytes(reader.take()?),
        });
    }
    Some(OpenImpression {
        seq,
        request,
        time,
        group,
        lineup,
        items,
        credits: credits.into(),
    })
}

/// Reads fixed-width fields off the front of a byte slice.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take_slice(&mut self, len: usize) -> Option<&'a [u8]> {
        let (head, rest) = self.0.split_at_checked(len)?;
        self.0 = rest;
        Some(head)
    }

    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take_slice(N)?.try_into().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> OpenImpression {
        OpenImpression {
            seq: 7,
            request: u64::MAX - 3,
            time: -1_700_000_000_000_000_000,
            group: 2,
            lineup: 5,
            items: vec![1, u64::MAX, 1 << 63].into_boxed_slice(),
            credits: vec![Credit {
                rank: 1,
                kind: 3,
                grade: 2.5,
                event: 0xdead_beef_dead_beef,
            }]
            .into(),
        }
    }

    #[test]
    fn an_impression_comes_back_as_it_was_saved() {
        let bytes = postcard::to_stdvec(&sample()).unwrap();
        assert_eq!(
            bytes.len(),
            1 + HEADER_BYTES + 3 * ITEM_BYTES + CREDIT_BYTES
        );
        let restored: OpenImpression = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(format!("{restored:?}"), format!("{:?}", sample()));
        assert_eq!(postcard::to_stdvec(&restored).unwrap(), bytes);
    }

    #[test]
    fn bytes_cut_short_or_with_a_partial_credit_are_refused() {
        let bytes = postcard::to_stdvec(&sample()).unwrap();
        let packed = &bytes[1..];
        for len in [0, HEADER_BYTES - 1, HEADER_BYTES, packed.len() - 1] {
            assert!(unpack(&packed[..len]).is_none(), "{len} bytes");
        }
        let mut items_overrun = packed.to_vec();
        items_overrun[32..36].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(unpack(&items_overrun).is_none());
    }
}
