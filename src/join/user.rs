//! One user's open impressions and waiting interactions, and the attribution
//! rules that only ever look inside one user.

use super::items::ItemTable;
use super::open::OpenImpression;
use super::packed::{HeldList, SavedList};
use super::Counters;
use crate::event::hashed::KeyedIdHash;
use crate::event::{Interaction, Nanos};
use crate::prefetch::prefetch;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};

/// An interaction waiting for its impression.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct Waiting {
    /// Arrival order, unique across the engine.
    pub seq: u64,
    /// The interaction.
    pub interaction: Interaction,
}

/// Everything held for one user: 24 bytes in the user map, beside the
/// lists, while the user has no waiting interaction (most users).
#[derive(Clone, Debug, Default)]
pub struct UserState {
    /// Open impressions ordered by (time, arrival): the latest last. Most
    /// users hold one list at a time, so the block holds as many as there
    /// are and no room to spare.
    pub open: Box<[OpenImpression]>,
    /// What few users hold, in a block of its own; none when empty.
    rare: Option<Box<Rare>>,
}

/// What few users hold.
#[derive(Clone, Debug, Default)]
struct Rare {
    /// Waiting interactions in arrival order.
    waiting: Vec<Waiting>,
    /// What is looked up, for a user who holds many lists or interactions
    /// (a shared id such as "guest"); rebuilt, not saved.
    index: Option<Box<UserIndex>>,
}

/// A user as saved: its open lists, with item hashes, and its waiting
/// interactions.
#[derive(Clone, Serialize, Deserialize)]
pub struct SavedUser<Lists = Vec<SavedList>, Interactions = Vec<Waiting>> {
    /// Open lists.
    pub open: Lists,
    /// Waiting interactions.
    pub waiting: Interactions,
}

/// A user saved as it is held: the bytes of its [`SavedUser`], its items'
/// numbers looked up in the table as they are written.
pub struct HeldUser<'a>(pub &'a UserState, pub &'a ItemTable);

impl Serialize for HeldUser<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let Self(user, table) = *self;
        SavedUser {
            open: HeldLists(&user.open, table),
            waiting: user.waiting(),
        }
        .serialize(serializer)
    }
}

/// A user's open lists, serialized as the sequence of their saved forms.
struct HeldLists<'a>(&'a [OpenImpression], &'a ItemTable);

impl Serialize for HeldLists<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let Self(lists, table) = *self;
        serializer.collect_seq(lists.iter().map(|list| HeldList(list, table)))
    }
}

/// A user holding more than this many lists and waiting interactions gets
/// an index, so that an event's work does not grow with the user's state.
const INDEX_FROM: usize = 16;

/// What a user's events look up, by key instead of by scanning.
#[derive(Clone, Debug, Default)]
struct UserIndex {
    /// Open impressions by request id: `(time, seq)`.
    requests: HashMap<u64, (Nanos, u64), KeyedIdHash>,
    /// Open impressions by the number of an item shown: `(time, seq)`, ascending.
    items: HashMap<u64, VecDeque<(Nanos, u64)>>,
    /// Event ids of waiting interactions, with how many wait with each.
    events: HashMap<u64, u32, KeyedIdHash>,
    /// Waiting interactions by the request id they name: seqs, ascending.
    named: HashMap<u64, Vec<u64>, KeyedIdHash>,
    /// Waiting interactions without a request id, by item: seqs, ascending.
    unnamed: HashMap<u64, Vec<u64>, KeyedIdHash>,
}

impl UserIndex {
    fn add_open(&mut self, m: &OpenImpression) {
        self.requests.insert(m.request, (m.time, m.seq));
        for item in m.numbers() {
            let lists = self.items.entry(item).or_default();
            let at = lists.partition_point(|&key| key <= (m.time, m.seq));
            lists.insert(at, (m.time, m.seq));
        }
    }

    fn remove_open(&mut self, m: &OpenImpression) {
        self.requests.remove(&m.request);
        for item in m.numbers() {
            if let Some(lists) = self.items.get_mut(&item) {
                if let Some(at) = lists.iter().position(|&key| key == (m.time, m.seq)) {
                    lists.remove(at);
                }
                if lists.is_empty() {
                    self.items.remove(&item);
                }
            }
        }
    }

    /// Lets go of the room of the waiting interactions' keys, once none waits.
    fn forget_waiting_room(&mut self) {
        self.events.shrink_to_fit();
        self.named.shrink_to_fit();
        self.unnamed.shrink_to_fit();
    }

    /// The waiting interactions' keys: by request id, else by item.
    fn waiting_key(&mut self, w: &Waiting) -> &mut Vec<u64> {
        match w.interaction.request {
            Some(request) => self.named.entry(request).or_default(),
            None => self.unnamed.entry(w.interaction.item).or_default(),
        }
    }

    fn add_waiting(&mut self, w: &Waiting) {
        if let Some(event) = w.interaction.event {
            *self.events.entry(event).or_default() += 1;
        }
        let seqs = self.waiting_key(w);
        let at = seqs.partition_point(|&seq| seq <= w.seq);
        seqs.insert(at, w.seq);
    }

    fn remove_waiting(&mut self, w: &Waiting) {
        if let Some(event) = w.interaction.event {
            if let Some(count) = self.events.get_mut(&event) {
                *count -= 1;
                if *count == 0 {
                    self.events.remove(&event);
                }
            }
        }
        let seqs = self.waiting_key(w);
        if let Ok(at) = seqs.binary_search(&w.seq) {
            seqs.remove(at);
        }
        let empty = seqs.is_empty();
        if empty {
            match w.interaction.request {
                Some(request) => self.named.remove(&request),
                None => self.unnamed.remove(&w.interaction.item),
            };
        }
    }
}

/// What became of an interaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attributed {
    /// Credited to an open list.
    Credited,
    /// Counted as unattributed, or as a duplicate.
    Settled,
    /// It must wait for its impression (not counted yet).
    Waits,
    /// Its impression holds `max_interactions_per_impression` already.
    ListFull,
    /// The open lists together hold `max_open_credits` already.
    AllFull,
}

/// The limits on crediting an interaction as it arrives.
#[derive(Clone, Copy, Debug)]
pub struct CreditLimits {
    /// Most credits of one list (`max_interactions_per_impression`).
    pub per_list: usize,
    /// Whether the open lists together hold `max_open_credits` credits.
    pub all_full: bool,
}

impl UserState {
    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.open.is_empty() && self.waiting().is_empty()
    }

    /// Waiting interactions in arrival order.
    pub fn waiting(&self) -> &[Waiting] {
        self.rare.as_ref().map_or(&[], |rare| &rare.waiting[..])
    }

    fn index(&self) -> Option<&UserIndex> {
        self.rare.as_ref()?.index.as_deref()
    }

    fn index_mut(&mut self) -> Option<&mut UserIndex> {
        self.rare.as_mut()?.index.as_deref_mut()
    }

    /// Lets go of the rare block once it holds nothing.
    fn forget_rare_if_empty(&mut self) {
        if self
            .rare
            .as_ref()
            .is_some_and(|rare| rare.waiting.is_empty() && rare.index.is_none())
        {
            self.rare = None;
        }
    }

    /// Whether an open impression has this request id.
    pub fn has_open_request(&self, request: u64) -> bool {
        match self.index() {
            Some(index) => index.requests.contains_key(&request),
            None => self.open.iter().rev().any(|m| m.request == request),
        }
    }

    /// Builds the index once the user holds many lists or interactions.
    fn index_if_large(&mut self) {
        if self.index().is_some() || self.open.len() + self.waiting().len() <= INDEX_FROM {
            return;
        }
        let mut index = UserIndex::default();
        self.open.iter().for_each(|m| index.add_open(m));
        self.waiting().iter().for_each(|w| index.add_waiting(w));
        self.rare.get_or_insert_default().index = Some(Box::new(index));
    }

    /// The user as saved, its items' hashes looked up in `table`.
    pub fn saved(&self, table: &ItemTable) -> SavedUser {
        SavedUser {
            open: self
                .open
                .iter()
                .map(|list| SavedList::of(list, table))
                .collect(),
            waiting: self.waiting().to_vec(),
        }
    }

    /// The user `saved` holds, its items numbered in `table` for lists
    /// open for `window`, with what is not saved rebuilt.
    pub fn restore(saved: SavedUser, window: Nanos, table: &mut ItemTable) -> Self {
        let rare = (!saved.waiting.is_empty()).then(|| {
            Box::new(Rare {
                waiting: saved.waiting,
                index: None,
            })
        });
        let mut user = Self {
            open: saved
                .open
                .into_iter()
                .map(|list| {
                    let deadline = list.header.time.saturating_add(window);
                    list.restore(deadline, table)
                })
                .collect(),
            rare,
        };
        user.index_if_large();
        user
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
            // The credits' block's header, not its credits: reading where
            // they are would wait for that load.
            let (items, credits) = m.addresses();
            prefetch(items);
            prefetch(credits);
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
        if let Some(user_index) = self.index_mut() {
            user_index.add_open(&open);
        }
        let mut lists = std::mem::take(&mut self.open).into_vec();
        lists.reserve_exact(1);
        lists.insert(index, open);
        self.open = lists.into_boxed_slice();
        self.index_if_large();
    }

    /// Adds an interaction that waits for its impression.
    pub fn push_waiting(&mut self, waiting: Waiting) {
        let rare = self.rare.get_or_insert_default();
        if let Some(index) = &mut rare.index {
            index.add_waiting(&waiting);
        }
        rare.waiting.reserve_exact(1);
        rare.waiting.push(waiting);
        self.index_if_large();
    }

    /// Removes and returns the open impression `seq`: lists close in the
    /// order they opened, so the search starts from the front.
    pub fn take_open(&mut self, seq: u64) -> Option<OpenImpression> {
        let position = self.open.iter().position(|m| m.seq == seq)?;
        let mut lists = std::mem::take(&mut self.open).into_vec();
        let open = lists.remove(position);
        self.open = lists.into_boxed_slice();
        if let Some(index) = self.index_mut() {
            index.remove_open(&open);
        }
        Some(open)
    }

    /// Removes and returns the waiting interaction `seq` (they are in seq order).
    pub fn take_waiting(&mut self, seq: u64) -> Option<Waiting> {
        let rare = self.rare.as_mut()?;
        let position = rare.waiting.binary_search_by_key(&seq, |w| w.seq).ok()?;
        let waiting = rare.waiting.remove(position);
        if let Some(index) = &mut rare.index {
            index.remove_waiting(&waiting);
        }
        if rare.waiting.is_empty() {
            // The room of interactions its lists claimed, let go of while
            // the lists stay open: 999 of them had held 120 bytes a credit.
            rare.waiting = Vec::new();
            if let Some(index) = &mut rare.index {
                index.forget_waiting_room();
            }
        }
        self.forget_rare_if_empty();
        Some(waiting)
    }

    /// The position in `open` of the list `(time, seq)`.
    fn position_of(&self, key: (Nanos, u64)) -> Option<usize> {
        self.open
            .binary_search_by(|m| (m.time, m.seq).cmp(&key))
            .ok()
    }

    /// The position of the open list with request id `request`.
    fn open_request(&self, request: u64) -> Option<usize> {
        match self.index() {
            Some(index) => self.position_of(*index.requests.get(&request)?),
            None => self.open.iter().rposition(|m| m.request == request),
        }
    }

    /// Whether an interaction with event id `event` is waiting.
    fn is_waiting(&self, event: Option<u64>) -> bool {
        let Some(event) = event else {
            return false;
        };
        match self.index() {
            Some(index) => index.events.contains_key(&event),
            None => self
                .waiting()
                .iter()
                .any(|w| w.interaction.event == Some(event)),
        }
    }

    /// Credits, counts as unattributed or as a duplicate, or says that the
    /// interaction must wait for its impression (not counted yet) or is
    /// shed because crediting it would pass one of `limits`.
    /// `item` is the number of the interaction's item, if an open list shows it.
    pub fn attribute(
        &mut self,
        x: Interaction,
        item: Option<u64>,
        window: Nanos,
        limits: CreditLimits,
        counters: &mut Counters,
    ) -> Attributed {
        let target = match x.request {
            Some(request) => match self.open_request(request) {
                Some(index) => match self.open[index].matching_rank(&x, item, window) {
                    Some(rank) => Some((index, rank)),
                    None => {
                        counters.interactions += 1;
                        counters.unattributed(self.open[index].mismatch(item));
                        return Attributed::Settled;
                    }
                },
                None => None,
            },
            None => item.and_then(|item| self.latest_match(&x, item, window)),
        };
        let credited_retry =
            target.is_some_and(|(index, _)| self.open[index].has_credited_event(x.event));
        if credited_retry || self.is_waiting(x.event) {
            counters.duplicate_interactions += 1;
            return Attributed::Settled;
        }
        let Some((index, rank)) = target else {
            return Attributed::Waits;
        };
        if self.open[index].credit_count() >= limits.per_list {
            return Attributed::ListFull;
        }
        if limits.all_full {
            return Attributed::AllFull;
        }
        counters.interactions += 1;
        self.open[index].credit(rank, &x, counters);
        Attributed::Credited
    }

    /// The latest (by time, then arrival) open impression the interaction
    /// matches. `open` is in that order, so the search runs from the end and
    /// stops at the first list shown more than a window before the interaction.
    fn latest_match(&self, x: &Interaction, item: u64, window: Nanos) -> Option<(usize, usize)> {
        if let Some(index) = self.index() {
            let lists = index.items.get(&item)?;
            let &(time, seq) = lists.iter().rev().find(|(time, _)| *time <= x.time)?;
            if time.saturating_add(window) < x.time {
                return None;
            }
            let position = self.position_of((time, seq))?;
            return Some((position, self.open[position].rank_of(Some(item))?));
        }
        for (index, m) in self.open.iter().enumerate().rev() {
            if m.time.saturating_add(window) < x.time {
                return None;
            }
            if let Some(rank) = m.matching_rank(x, Some(item), window) {
                return Some((index, rank));
            }
        }
        None
    }

    /// Settles the waiting interactions that a newly opened impression
    /// claims, in arrival order; returns how many left the waiting list.
    /// `table` numbers the impression's items.
    pub fn claim_waiting(
        &mut self,
        open: &mut OpenImpression,
        window: Nanos,
        counters: &mut Counters,
        table: &ItemTable,
    ) -> usize {
        if let Some(index) = self.index() {
            let mut candidates: Vec<u64> =
                index.named.get(&open.request).cloned().unwrap_or_default();
            for item in open.numbers() {
                let waiting = index.unnamed.get(&table.hash(item));
                candidates.extend(waiting.into_iter().flatten());
            }
            if candidates.is_empty() {
                return 0;
            }
            candidates.sort_unstable();
            let mut claimed = 0;
            for seq in candidates {
                let Ok(position) = self.waiting().binary_search_by_key(&seq, |w| w.seq) else {
                    continue;
                };
                if settle(
                    open,
                    &self.waiting()[position].interaction,
                    window,
                    counters,
                    table,
                ) {
                    self.take_waiting(seq);
                    claimed += 1;
                }
            }
            return claimed;
        }
        let Some(rare) = &mut self.rare else {
            return 0;
        };
        let before = rare.waiting.len();
        rare.waiting
            .retain(|w| !settle(open, &w.interaction, window, counters, table));
        let claimed = before - rare.waiting.len();
        self.forget_rare_if_empty();
        claimed
    }
}

/// Settles waiting interaction `x` with newly opened impression `open` if
/// it claims it (rule 2 of docs/SPEC.md §3): credits it, or counts it as
/// unattributed when it named `open` and does not match. `false`: it waits
/// on. `table` numbers `open`'s items.
fn settle(
    open: &mut OpenImpression,
    x: &Interaction,
    window: Nanos,
    counters: &mut Counters,
    table: &ItemTable,
) -> bool {
    let named = x.request == Some(open.request);
    if !named && x.request.is_some() {
        return false;
    }
    let item = table.number(x.item);
    match open.matching_rank(x, item, window) {
        Some(rank) => open.credit(rank, x, counters),
        None if named => counters.unattributed(open.mismatch(item)),
        None => return false,
    }
    true
}

#[cfg(test)]
mod tests {
    use super::super::open::NOT_INTERLEAVED;
    use super::*;
    use crate::event::Impression;
    use proptest::prelude::*;
    use std::borrow::Cow;

    /// One step on a user's state.
    #[derive(Clone, Debug)]
    enum Step {
        Open {
            request: u64,
            items: Vec<u64>,
            time: i64,
        },
        Interact {
            item: u64,
            request: Option<u64>,
            event: Option<u64>,
            time: i64,
        },
        Finalize,
        GiveUp,
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            (
                0u64..6,
                prop::collection::btree_set(0u64..6, 1..4),
                0i64..20
            )
                .prop_map(|(request, items, time)| Step::Open {
                    request,
                    items: items.into_iter().collect(),
                    time
                }),
            (
                0u64..6,
                prop::option::of(0u64..6),
                prop::option::of(0u64..4),
                0i64..30
            )
                .prop_map(|(item, request, event, time)| Step::Interact {
                    item,
                    request,
                    event,
                    time
                }),
            Just(Step::Finalize),
            Just(Step::GiveUp),
        ]
    }

    /// Each open list's seq with its credits' `(rank, event)`.
    type Lists = Vec<(u64, Vec<(u32, u64)>)>;

    /// What a user's state shows: its lists with their credits, and what waits.
    fn shown(user: &UserState) -> (Lists, Vec<u64>) {
        let open = user
            .open
            .iter()
            .map(|m| {
                (
                    m.seq,
                    m.credits().iter().map(|c| (c.rank, c.event)).collect(),
                )
            })
            .collect();
        (open, user.waiting().iter().map(|w| w.seq).collect())
    }

    /// A user and the table of its items' numbers.
    #[derive(Default)]
    struct Held {
        user: UserState,
        table: ItemTable,
    }

    /// Applies `step` as the engine would, with `seq` as its arrival.
    fn apply(held: &mut Held, step: &Step, seq: u64, counters: &mut Counters) -> String {
        let Held { user, table } = held;
        const WINDOW: Nanos = 10;
        match step {
            Step::Open {
                request,
                items,
                time,
            } => {
                if user.has_open_request(*request) || user.open.len() >= 8 {
                    return "duplicate or full".into();
                }
                let impression = Impression {
                    request: *request,
                    user: 1,
                    items: items.clone(),
                    time: *time,
                    model: Cow::Borrowed("m"),
                    surface: Cow::Borrowed("s"),
                    segments: Vec::new(),
                    interleaving: None,
                };
                let placement = (0, NOT_INTERLEAVED);
                let deadline = time + WINDOW;
                let mut open = OpenImpression::new(seq, placement, &impression, deadline, table);
                let claimed = user.claim_waiting(&mut open, WINDOW, counters, table);
                user.insert_open(open);
                format!("claimed {claimed}")
            }
            Step::Interact {
                item,
                request,
                event,
                time,
            } => {
                let x = Interaction {
                    event: *event,
                    user: 1,
                    item: *item,
                    request: *request,
                    time: *time,
                    grade: 1.0,
                    kind: 0,
                };
                let item = table.number(x.item);
                let limits = CreditLimits {
                    per_list: 3,
                    all_full: false,
                };
                let outcome = user.attribute(x, item, WINDOW, limits, counters);
                if outcome == Attributed::Waits && user.waiting().len() < 8 {
                    user.push_waiting(Waiting {
                        seq,
                        interaction: x,
                    });
                }
                format!("{outcome:?}")
            }
            Step::Finalize => {
                let first = user.open.first().map(|m| m.seq);
                let taken = first.and_then(|seq| user.take_open(seq));
                if let Some(list) = &taken {
                    table.closed(list.time + WINDOW);
                }
                format!("{:?}", taken.map(|m| m.seq))
            }
            Step::GiveUp => {
                let first = user.waiting().first().map(|w| w.seq);
                format!(
                    "{:?}",
                    first.and_then(|seq| user.take_waiting(seq)).map(|w| w.seq)
                )
            }
        }
    }

    /// A user whose waiting interactions have all been claimed or given up
    /// holds nothing beside its lists, so that its entry in the user map
    /// stays at its 24 bytes.
    #[test]
    fn a_user_with_nothing_waiting_holds_no_block_for_it() {
        let mut held = Held::default();
        let mut counters = Counters::default();
        let steps = [
            Step::Interact {
                item: 1,
                request: Some(7),
                event: None,
                time: 5,
            },
            Step::Interact {
                item: 2,
                request: None,
                event: None,
                time: 5,
            },
        ];
        for (seq, step) in steps.iter().enumerate() {
            apply(&mut held, step, seq as u64 + 1, &mut counters);
        }
        assert_eq!(held.user.waiting().len(), 2);
        let open = Step::Open {
            request: 7,
            items: vec![1, 3],
            time: 4,
        };
        assert_eq!(apply(&mut held, &open, 3, &mut counters), "claimed 1");
        assert!(held.user.rare.is_some(), "one interaction still waits");
        assert_eq!(
            format!("{}", apply(&mut held, &Step::GiveUp, 4, &mut counters)),
            "Some(2)"
        );
        assert!(held.user.rare.is_none());
        let waits = Step::Interact {
            item: 9,
            request: None,
            event: None,
            time: 5,
        };
        apply(&mut held, &waits, 5, &mut counters);
        let claims = Step::Open {
            request: 8,
            items: vec![9],
            time: 5,
        };
        assert_eq!(apply(&mut held, &claims, 6, &mut counters), "claimed 1");
        assert!(held.user.rare.is_none());
        assert_eq!(held.user.open.len(), 2);
    }

    /// Interactions that waited for their list, claimed when it opens,
    /// leave no room behind them while the list stays open: neither their
    /// block nor their keys in the user's index.
    #[test]
    fn a_user_whose_list_claimed_its_many_waiting_interactions_keeps_no_room_for_them() {
        let mut held = Held::default();
        let mut counters = Counters::default();
        for seq in 1..=100 {
            let interaction = Interaction {
                event: Some(seq),
                user: 1,
                item: 1,
                request: Some(7),
                time: 5,
                grade: 1.0,
                kind: 0,
            };
            held.user.push_waiting(Waiting { seq, interaction });
        }
        assert_eq!(held.user.waiting().len(), 100);
        assert!(held.user.index().is_some());
        let open = Step::Open {
            request: 7,
            items: vec![1, 3],
            time: 4,
        };
        assert_eq!(apply(&mut held, &open, 101, &mut counters), "claimed 100");
        let rare = held.user.rare.as_ref().expect("the index stays");
        let index = rare.index.as_ref().expect("the index stays");
        assert_eq!(
            (
                rare.waiting.capacity(),
                index.events.capacity(),
                index.named.capacity()
            ),
            (0, 0, 0)
        );
    }

    proptest! {
        /// The index changes no outcome: a user indexed from the start and
        /// one that scans (held below the index's threshold) agree on every step.
        #[test]
        fn the_index_finds_what_a_scan_finds(steps in prop::collection::vec(step(), 1..80)) {
            let mut indexed = Held {
                user: UserState {
                    rare: Some(Box::new(Rare {
                        index: Some(Box::default()),
                        ..Rare::default()
                    })),
                    ..UserState::default()
                },
                ..Held::default()
            };
            let mut scanned = Held::default();
            let (mut with_index, mut with_scan) = (Counters::default(), Counters::default());
            for (seq, step) in steps.iter().enumerate() {
                let seq = seq as u64 + 1;
                let a = apply(&mut indexed, step, seq, &mut with_index);
                let b = apply(&mut scanned, step, seq, &mut with_scan);
                prop_assert!(scanned.user.index().is_none(), "the scanning user stays below the threshold");
                prop_assert_eq!(a, b, "{:?}", step);
                prop_assert_eq!(shown(&indexed.user), shown(&scanned.user));
                prop_assert_eq!(&with_index, &with_scan);
            }
        }
    }
}
