//! An open impression as the engine holds it, in as few bytes as its
//! rules allow: its items as the numbers of the engine's [`ItemTable`], in
//! as few bytes each as its largest number needs (8 for an engine whose
//! table passes item hashes through).

use super::items::ItemTable;
use super::{Counters, GroupId, Unattributed};
use crate::event::{Impression, Interaction, Nanos};

/// An open impression: 56 bytes, beside its items (1 to 4 bytes each, as
/// many as the engine's item numbers need; 8 for hashes) and its credits
/// (24 bytes each, in blocks of 2, 4, 8…). Saved with item hashes, as the
/// saved form of the `packed` module lays it out.
#[derive(Clone, Debug)]
pub struct OpenImpression {
    /// Arrival order, unique across the engine.
    pub seq: u64,
    /// The request id's hash.
    pub request: u64,
    /// When it was shown.
    pub time: Nanos,
    /// Where its figures go.
    pub group: GroupId,
    /// How `items` is laid out (in what would be padding after `group`).
    shape: Shape,
    /// The item numbers, rank order, `shape.width` bytes each, little
    /// endian; for an interleaved list, then the team of each item (one
    /// byte each) and the lineup (4 bytes).
    items: Box<[u8]>,
    /// The interactions credited to it.
    credits: Credits,
}

/// How an open list's items are laid out.
#[derive(Clone, Copy, Debug)]
struct Shape {
    /// Bytes per item number: 1 to 8.
    width: u8,
    /// Whether teams and a lineup follow the numbers.
    interleaved: bool,
}

/// The lineup of a list that was not interleaved.
pub const NOT_INTERLEAVED: u32 = u32::MAX;

/// Bytes of the lineup at the end of an interleaved list's items.
const LINEUP_BYTES: usize = 4;

/// The interactions credited to an open list: one word while there are
/// none, as for most open lists, then a block of 2, 4, 8… credits.
#[derive(Clone, Debug, Default)]
#[expect(
    clippy::box_collection,
    reason = "one word in every open list, not a vector's three"
)]
struct Credits(Option<Box<Vec<Credit>>>);

impl Credits {
    /// Adds a credit. Room for two, then twice as many: growing by one
    /// would move the credits to a new block at nearly every interaction.
    fn push(&mut self, credit: Credit) {
        let credits = self
            .0
            .get_or_insert_with(|| Box::new(Vec::with_capacity(2)));
        if credits.len() == credits.capacity() {
            credits.reserve_exact(credits.len());
        }
        credits.push(credit);
    }

    /// The block's address, to load it ahead (null without one).
    fn block(&self) -> *const Vec<Credit> {
        self.0
            .as_deref()
            .map_or(std::ptr::null(), std::ptr::from_ref)
    }
}

impl std::ops::Deref for Credits {
    type Target = [Credit];

    fn deref(&self) -> &[Credit] {
        self.0.as_deref().map_or(&[], Vec::as_slice)
    }
}

impl From<Vec<Credit>> for Credits {
    fn from(credits: Vec<Credit>) -> Self {
        Self((!credits.is_empty()).then(|| Box::new(credits)))
    }
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

/// The fields of a list besides its items and credits.
#[derive(Clone, Debug)]
pub struct Header {
    /// Arrival order, unique across the engine.
    pub seq: u64,
    /// The request id's hash.
    pub request: u64,
    /// When it was shown.
    pub time: Nanos,
    /// Where its figures go.
    pub group: GroupId,
    /// Its interleaving lineup, or [`NOT_INTERLEAVED`].
    pub lineup: u32,
}

impl OpenImpression {
    /// A newly opened impression that closes at `deadline`, its items
    /// numbered in `table`; its teams are kept when `lineup` is one (not
    /// [`NOT_INTERLEAVED`]).
    pub fn new(
        seq: u64,
        placement: (GroupId, u32),
        impression: &Impression<'_>,
        deadline: Nanos,
        table: &mut ItemTable,
    ) -> Self {
        let (group, lineup) = placement;
        let teams = match (&impression.interleaving, lineup) {
            (Some(interleaving), lineup) if lineup != NOT_INTERLEAVED => &interleaving.teams[..],
            _ => &[],
        };
        let header = Header {
            seq,
            request: impression.request,
            time: impression.time,
            group,
            lineup: match teams.is_empty() {
                true => NOT_INTERLEAVED,
                false => lineup,
            },
        };
        let numbers = table.numbers_of(&impression.items, deadline);
        Self::with_numbers(header, numbers, teams, Vec::new())
    }

    /// A list of the items numbered `numbers`, with their `teams` when
    /// `header` gives a lineup.
    pub(super) fn with_numbers(
        header: Header,
        numbers: &[u64],
        teams: &[u8],
        credits: Vec<Credit>,
    ) -> Self {
        let largest = numbers.iter().copied().max().unwrap_or(0);
        let width = (8 - (largest.leading_zeros() as usize) / 8).max(1);
        let interleaved = header.lineup != NOT_INTERLEAVED;
        let extra = if interleaved {
            teams.len() + LINEUP_BYTES
        } else {
            0
        };
        let mut items = Vec::with_capacity(numbers.len() * width + extra);
        for number in numbers {
            items.extend_from_slice(&number.to_le_bytes()[..width]);
        }
        if interleaved {
            items.extend_from_slice(teams);
            items.extend_from_slice(&header.lineup.to_le_bytes());
        }
        Self {
            seq: header.seq,
            request: header.request,
            time: header.time,
            group: header.group,
            shape: Shape {
                width: width as u8,
                interleaved,
            },
            items: items.into_boxed_slice(),
            credits: credits.into(),
        }
    }

    /// The fields besides its items and credits.
    pub(super) fn header(&self) -> Header {
        Header {
            seq: self.seq,
            request: self.request,
            time: self.time,
            group: self.group,
            lineup: self.lineup(),
        }
    }

    /// The interleaving lineup of the list, or [`NOT_INTERLEAVED`].
    pub fn lineup(&self) -> u32 {
        match self.shape.interleaved {
            false => NOT_INTERLEAVED,
            true => {
                let at = self.items.len() - LINEUP_BYTES;
                let mut bytes = [0; LINEUP_BYTES];
                bytes.copy_from_slice(&self.items[at..]);
                u32::from_le_bytes(bytes)
            }
        }
    }

    /// Gives an interleaved list its lineup's new id, once lineups were
    /// retired; a list that was not interleaved stays so.
    pub(super) fn set_lineup(&mut self, lineup: u32) {
        if self.shape.interleaved {
            let at = self.items.len() - LINEUP_BYTES;
            self.items[at..].copy_from_slice(&lineup.to_le_bytes());
        }
    }

    /// The team of each item, rank order, into `teams`; none for a list
    /// that was not interleaved.
    pub fn teams_into(&self, teams: &mut Vec<u8>) {
        teams.clear();
        if self.shape.interleaved {
            let start = self.shown() * usize::from(self.shape.width);
            teams.extend_from_slice(&self.items[start..start + self.shown()]);
        }
    }

    /// The number of items shown.
    pub fn shown(&self) -> usize {
        let width = usize::from(self.shape.width);
        match self.shape.interleaved {
            false => self.items.len() / width,
            true => (self.items.len() - LINEUP_BYTES) / (width + 1),
        }
    }

    /// The item numbers' bytes, rank order.
    fn number_bytes(&self) -> &[u8] {
        &self.items[..self.shown() * usize::from(self.shape.width)]
    }

    /// The item numbers shown, rank order.
    pub fn numbers(&self) -> impl Iterator<Item = u64> + Clone + '_ {
        self.number_bytes()
            .chunks_exact(usize::from(self.shape.width))
            .map(read_number)
    }

    /// The number of the item shown at rank index `rank`.
    fn number_at(&self, rank: usize) -> u64 {
        let width = usize::from(self.shape.width);
        read_number(&self.items[rank * width..(rank + 1) * width])
    }

    /// The rank index of the item numbered `item`, if the list shows it.
    pub(super) fn rank_of(&self, item: Option<u64>) -> Option<usize> {
        let width = usize::from(self.shape.width);
        let item = item?.to_le_bytes();
        let (item, beyond) = item.split_at(width);
        if beyond.iter().any(|&byte| byte != 0) {
            return None;
        }
        let bytes = self.number_bytes();
        // Widths known here compare as integers, not as slices.
        match width {
            1 => bytes.iter().position(|&i| i == item[0]),
            2 => bytes.chunks_exact(2).position(|i| i == item),
            3 => bytes.chunks_exact(3).position(|i| i == item),
            4 => bytes.chunks_exact(4).position(|i| i == item),
            8 => bytes.chunks_exact(8).position(|i| i == item),
            _ => bytes.chunks_exact(width).position(|i| i == item),
        }
    }

    fn in_window(&self, time: Nanos, window: Nanos) -> bool {
        self.time <= time && time <= self.time.saturating_add(window)
    }

    /// The rank index of the interaction's item, numbered `item`, when the
    /// interaction matches (docs/SPEC.md §3 rule 2).
    pub(super) fn matching_rank(
        &self,
        x: &Interaction,
        item: Option<u64>,
        window: Nanos,
    ) -> Option<usize> {
        self.in_window(x.time, window)
            .then(|| self.rank_of(item))
            .flatten()
    }

    /// Whether an interaction with event id `event` is credited already.
    pub(super) fn has_credited_event(&self, event: Option<u64>) -> bool {
        event.is_some_and(|e| self.credits.iter().any(|c| c.event == e))
    }

    /// How many interactions are credited.
    pub(super) fn credit_count(&self) -> usize {
        self.credits.len()
    }

    /// Credits interaction `x` to the item at rank index `rank`.
    pub(super) fn credit(&mut self, rank: usize, x: &Interaction, counters: &mut Counters) {
        counters.credited += 1;
        self.credits.push(Credit {
            rank: rank as u32,
            kind: x.kind,
            grade: x.grade,
            event: x.event.unwrap_or(0),
        });
    }

    /// Why an interaction on the item numbered `item` that named this
    /// impression does not match it.
    pub(super) fn mismatch(&self, item: Option<u64>) -> Unattributed {
        if self.rank_of(item).is_none() {
            Unattributed::NotInList
        } else {
            Unattributed::OutsideWindow
        }
    }

    /// Writes the grade of every item, rank order, into `grades`.
    pub fn grades_into(&self, grades: &mut Vec<f64>) {
        grades.clear();
        grades.resize(self.shown(), 0.0);
        for credit in self.credits.iter() {
            let grade = &mut grades[credit.rank as usize];
            *grade = grade.max(credit.grade);
        }
    }

    /// The credits, in the order they came.
    pub(super) fn credits(&self) -> &[Credit] {
        &self.credits
    }

    /// The items with a credited interaction of grade > 0 (an item once per credit).
    pub fn engaged_items(&self) -> impl Iterator<Item = u64> + Clone + '_ {
        self.credits
            .iter()
            .filter(|c| c.grade > 0.0)
            .map(|c| self.number_at(c.rank as usize))
    }

    /// `(rank index, type index)` of every credited interaction.
    pub fn credited(&self) -> impl Iterator<Item = (usize, u16)> + '_ {
        self.credits.iter().map(|c| (c.rank as usize, c.kind))
    }

    /// Whether some item has a grade above 0.
    pub fn is_engaged(&self) -> bool {
        self.credits.iter().any(|c| c.grade > 0.0)
    }

    /// The addresses of its items and of its credits' block, to load ahead.
    pub(super) fn addresses(&self) -> (*const u8, *const Vec<Credit>) {
        (self.items.as_ptr(), self.credits.block())
    }
}

/// An item number of 1 to 8 little-endian bytes.
fn read_number(bytes: &[u8]) -> u64 {
    match *bytes {
        [a] => u64::from(a),
        [a, b] => u64::from(u16::from_le_bytes([a, b])),
        [a, b, c] => u64::from(u32::from_le_bytes([a, b, c, 0])),
        [a, b, c, d] => u64::from(u32::from_le_bytes([a, b, c, d])),
        [a, b, c, d, e, f, g, h] => u64::from_le_bytes([a, b, c, d, e, f, g, h]),
        _ => bytes
            .iter()
            .rev()
            .fold(0, |number, &byte| number << 8 | u64::from(byte)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Interleaving;
    use std::borrow::Cow;

    fn impression(
        items: &[u64],
        interleaving: Option<Interleaving<'static>>,
    ) -> Impression<'static> {
        Impression {
            request: 1,
            user: 2,
            items: items.to_vec(),
            time: 3,
            model: Cow::Borrowed("m"),
            surface: Cow::Borrowed("s"),
            segments: Vec::new(),
            interleaving,
        }
    }

    /// Item numbers take as few bytes as the largest needs, and every
    /// width finds the same ranks and gives the same numbers back.
    #[test]
    fn numbers_of_every_width_are_found_and_read_back() {
        let widths = [
            (0u64, 1u8),
            (300, 2),
            (70_000, 3),
            (17_000_000, 4),
            (1 << 33, 5),
            (1 << 50, 7),
            (u64::MAX - 2, 8),
        ];
        for (first, width) in widths {
            let numbers = [first + 2, first, first + 1];
            let header = Header {
                seq: 1,
                request: 2,
                time: 3,
                group: 0,
                lineup: NOT_INTERLEAVED,
            };
            let list = OpenImpression::with_numbers(header, &numbers, &[], Vec::new());
            assert_eq!(list.shape.width, width, "from {first}");
            assert_eq!(list.items.len(), 3 * usize::from(width));
            assert_eq!(list.numbers().collect::<Vec<_>>(), numbers);
            for (rank, &number) in numbers.iter().enumerate() {
                assert_eq!(list.rank_of(Some(number)), Some(rank));
                assert_eq!(list.number_at(rank), number);
            }
            let absent = [3, 258, 65_539, 1 << 40].map(|n| first.wrapping_add(n));
            assert!(absent.iter().all(|&n| list.rank_of(Some(n)).is_none()));
            assert_eq!(list.rank_of(None), None);
            assert_eq!(list.lineup(), NOT_INTERLEAVED);
        }
    }

    #[test]
    fn an_interleaved_list_keeps_its_teams_and_lineup() {
        let mut table = ItemTable::default();
        let interleaving = Interleaving {
            rankers: vec![Cow::Borrowed("a"), Cow::Borrowed("b")],
            teams: vec![0, 1, 1, 0, 1],
        };
        let hashes = [5u64, 6, 7, 8, 9];
        let list = OpenImpression::new(
            1,
            (0, 7),
            &impression(&hashes, Some(interleaving)),
            9,
            &mut table,
        );
        assert_eq!(list.shown(), 5);
        assert_eq!(list.lineup(), 7);
        let mut teams = Vec::new();
        list.teams_into(&mut teams);
        assert_eq!(teams, [0, 1, 1, 0, 1]);
        let numbers: Vec<u64> = list.numbers().map(|n| table.hash(n)).collect();
        assert_eq!(numbers, hashes);
    }
}
