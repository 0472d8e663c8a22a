//! The saved form of an open impression: one run of fixed-width
//! little-endian fields, so that a snapshot copies an impression's item
//! hashes and credits as they are instead of writing each 64-bit hash as a
//! variable-length integer of up to ten bytes, one call at a time. Saved
//! state names items by their hashes, not by the numbers an engine gave
//! them ([`super::items`]), so that any engine can read it.
//!
//! Layout: `seq` (8 bytes), `request` (8), `time` (8), `group` (4),
//! `lineup` (4), the number of words of the item box (4), those words (8
//! each: the item hashes, then an interleaved list's teams), then the
//! credits to the end: rank (4), type index (2), grade (8, IEEE 754 bits),
//! event hash (8).

use super::items::ItemTable;
use super::open::{Credit, Header, OpenImpression, NOT_INTERLEAVED};
use crate::event::Nanos;
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use std::cell::RefCell;
use std::fmt;

/// Teams (one byte each) per word of a saved list's words.
const TEAMS_PER_WORD: usize = 8;

/// An open impression as saved.
#[derive(Clone, Debug)]
pub struct SavedList {
    /// The fields besides its items and credits.
    pub header: Header,
    /// The item hashes, rank order; for an interleaved list followed by
    /// its teams, eight to a word.
    words: Box<[u64]>,
    /// The interactions credited to it.
    pub(super) credits: Vec<Credit>,
}

impl SavedList {
    /// The saved form of `list`, its items' hashes looked up in `table`.
    pub fn of(list: &OpenImpression, table: &ItemTable) -> Self {
        Self {
            header: list.header(),
            words: saved_words(list, table).collect(),
            credits: list.credits().to_vec(),
        }
    }

    /// The list it holds, which closes at `deadline`, its items numbered
    /// in `table`.
    pub fn restore(self, deadline: Nanos, table: &mut ItemTable) -> OpenImpression {
        let mut teams = Vec::new();
        self.teams_into(&mut teams);
        let mut numbers = self.items().to_vec();
        table.hold_all(&mut numbers, deadline);
        OpenImpression::with_numbers(self.header, &numbers, &teams, self.credits)
    }

    /// The number of items shown.
    /// A list of `n` items holds `L = n + ⌈n/8⌉` words when interleaved,
    /// and `n = ⌊8L/9⌋` is the one `n` that gives `L`.
    pub fn shown(&self) -> usize {
        match self.header.lineup {
            NOT_INTERLEAVED => self.words.len(),
            _ => self.words.len() * TEAMS_PER_WORD / (TEAMS_PER_WORD + 1),
        }
    }

    /// The item hashes shown, rank order.
    pub fn items(&self) -> &[u64] {
        &self.words[..self.shown()]
    }

    /// The team of each item, rank order, into `teams`; none for a list
    /// that was not interleaved.
    pub fn teams_into(&self, teams: &mut Vec<u8>) {
        teams.clear();
        let shown = self.shown();
        for word in &self.words[shown..] {
            teams.extend_from_slice(&word.to_le_bytes());
        }
        teams.truncate(shown);
    }

    /// Whether its words hold its items and teams as an engine saves them,
    /// and every credit names a rank of the list: an engine indexes the
    /// list by them.
    pub fn is_well_formed(&self) -> bool {
        let shown = self.shown();
        let lineup = self.header.lineup;
        let packed = (shown > 0 || lineup == NOT_INTERLEAVED)
            && word_count(shown, lineup) == self.words.len();
        packed && self.credits.iter().all(|c| (c.rank as usize) < shown)
    }
}

/// How many words a list of `shown` items with `lineup` is saved with.
fn word_count(shown: usize, lineup: u32) -> usize {
    match lineup {
        NOT_INTERLEAVED => shown,
        _ => shown + shown.div_ceil(TEAMS_PER_WORD),
    }
}

/// The words `list` is saved with: its items' hashes, then its teams.
fn saved_words<'a>(
    list: &'a OpenImpression,
    table: &'a ItemTable,
) -> impl Iterator<Item = u64> + 'a {
    let mut teams = Vec::new();
    list.teams_into(&mut teams);
    let team_words: Vec<u64> = teams
        .chunks(TEAMS_PER_WORD)
        .map(|teams| {
            let mut word = [0u8; TEAMS_PER_WORD];
            word[..teams.len()].copy_from_slice(teams);
            u64::from_le_bytes(word)
        })
        .collect();
    let hashes = list.numbers().map(|number| table.hash(number));
    hashes.chain(team_words)
}

/// An open list saved as it is held: the bytes of its [`SavedList`], its
/// items' hashes looked up in the table as they are written.
pub struct HeldList<'a>(pub &'a OpenImpression, pub &'a ItemTable);

const HEADER_BYTES: usize = 8 + 8 + 8 + 4 + 4 + 4;
const ITEM_BYTES: usize = 8;
const CREDIT_BYTES: usize = 4 + 2 + 8 + 8;

thread_local! {
    /// The bytes of the impression being written, reused from one to the next.
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

impl Serialize for SavedList {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let words = self.words.iter().copied();
        pack(
            &self.header,
            words,
            self.words.len(),
            &self.credits,
            serializer,
        )
    }
}

impl Serialize for HeldList<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let Self(list, table) = *self;
        let header = list.header();
        let count = word_count(list.shown(), list.lineup());
        pack(
            &header,
            saved_words(list, table),
            count,
            list.credits(),
            serializer,
        )
    }
}

/// Serializes a saved list of `count` words as one run of bytes.
fn pack<S: Serializer>(
    header: &Header,
    words: impl Iterator<Item = u64>,
    count: usize,
    credits: &[Credit],
    serializer: S,
) -> Result<S::Ok, S::Error> {
    SCRATCH.with_borrow_mut(|bytes| {
        bytes.clear();
        bytes.reserve(HEADER_BYTES + count * ITEM_BYTES + credits.len() * CREDIT_BYTES);
        bytes.extend_from_slice(&header.seq.to_le_bytes());
        bytes.extend_from_slice(&header.request.to_le_bytes());
        bytes.extend_from_slice(&header.time.to_le_bytes());
        bytes.extend_from_slice(&header.group.to_le_bytes());
        bytes.extend_from_slice(&header.lineup.to_le_bytes());
        bytes.extend_from_slice(&(count as u32).to_le_bytes());
        for word in words {
            bytes.extend_from_slice(&word.to_le_bytes());
        }
        for credit in credits {
            bytes.extend_from_slice(&credit.rank.to_le_bytes());
            bytes.extend_from_slice(&credit.kind.to_le_bytes());
            bytes.extend_from_slice(&credit.grade.to_bits().to_le_bytes());
            bytes.extend_from_slice(&credit.event.to_le_bytes());
        }
        serializer.serialize_bytes(bytes)
    })
}

impl<'de> Deserialize<'de> for SavedList {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_byte_buf(PackedVisitor)
    }
}

struct PackedVisitor;

impl Visitor<'_> for PackedVisitor {
    type Value = SavedList;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an open impression's packed bytes")
    }

    fn visit_bytes<E: de::Error>(self, bytes: &[u8]) -> Result<SavedList, E> {
        unpack(bytes).ok_or_else(|| E::invalid_length(bytes.len(), &self))
    }
}

/// The impression `bytes` hold, if they are laid out as [`Serialize`] writes them.
fn unpack(bytes: &[u8]) -> Option<SavedList> {
    let mut reader = Reader(bytes);
    let seq = u64::from_le_bytes(reader.take()?);
    let request = u64::from_le_bytes(reader.take()?);
    let time = i64::from_le_bytes(reader.take()?);
    let group = u32::from_le_bytes(reader.take()?);
    let lineup = u32::from_le_bytes(reader.take()?);
    let count = u32::from_le_bytes(reader.take()?) as usize;
    let item_bytes = reader.take_slice(count.checked_mul(ITEM_BYTES)?)?;
    let (items, _) = item_bytes.as_chunks::<ITEM_BYTES>();
    let words = items.iter().map(|item| u64::from_le_bytes(*item)).collect();
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
    Some(SavedList {
        header: Header {
            seq,
            request,
            time,
            group,
            lineup,
        },
        words,
        credits,
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

    fn sample() -> SavedList {
        SavedList {
            header: Header {
                seq: 7,
                request: u64::MAX - 3,
                time: -1_700_000_000_000_000_000,
                group: 2,
                lineup: 5,
            },
            words: vec![1, u64::MAX, 1 << 63].into_boxed_slice(),
            credits: vec![Credit {
                rank: 1,
                kind: 3,
                grade: 2.5,
                event: 0xdead_beef_dead_beef,
            }],
        }
    }

    #[test]
    fn an_impression_comes_back_as_it_was_saved() {
        let bytes = postcard::to_stdvec(&sample()).unwrap();
        assert_eq!(
            bytes.len(),
            1 + HEADER_BYTES + 3 * ITEM_BYTES + CREDIT_BYTES
        );
        let restored: SavedList = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(format!("{restored:?}"), format!("{:?}", sample()));
        assert_eq!(postcard::to_stdvec(&restored).unwrap(), bytes);
    }

    /// A list saved and restored into a table of its own is the list it
    /// was, teams, lineup and credits included, and saves the same bytes.
    #[test]
    fn an_interleaved_list_comes_back_from_its_saved_form() {
        let mut table = ItemTable::default();
        let hashes = [5u64 << 40, 6, 7, 8, 9, 10, 11, 12, 13];
        let mut numbers = hashes.to_vec();
        table.hold_all(&mut numbers, 9);
        let teams = [0, 1, 1, 0, 1, 0, 0, 1, 1];
        let list =
            OpenImpression::with_numbers(sample().header, &numbers, &teams, sample().credits);
        let saved = SavedList::of(&list, &table);
        assert_eq!(saved.items(), hashes);
        let mut saved_teams = Vec::new();
        saved.teams_into(&mut saved_teams);
        assert_eq!(saved_teams, teams);
        assert!(saved.is_well_formed());
        let bytes = postcard::to_stdvec(&saved).unwrap();
        assert_eq!(
            postcard::to_stdvec(&HeldList(&list, &table)).unwrap(),
            bytes
        );
        let restored = saved.restore(9, &mut ItemTable::default());
        assert_eq!(format!("{restored:?}"), format!("{list:?}"));
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
