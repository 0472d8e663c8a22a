//! The engine's state as data, to save across restarts: everything but the
//! settings and what can be rebuilt from the rest (the due-time queues).
//! The engine fills it and carries on from it ([`super::Engine::to_state`],
//! [`super::Engine::from_state`]); this module owns its serialized form,
//! whose field order is the state file's format.

use super::experiments::Experiments;
use super::finite::all_finite;
use super::items::ItemTable;
use super::open::NOT_INTERLEAVED;
use super::packed::SavedList;
use super::user::{HeldUser, SavedUser, UserState};
use super::{CountedBefore, Counters, Engine, GroupAggregates, Groups, Shard};
use crate::event::Nanos;
use serde::ser::SerializeSeq;
use serde::{Deserialize, Serialize, Serializer};

/// Everything an engine holds that a restart must not lose.
#[derive(Serialize, Deserialize)]
pub struct EngineState {
    pub(super) max_time: Option<Nanos>,
    pub(super) next_seq: u64,
    pub(super) groups: Groups,
    pub(super) aggregates: Vec<GroupAggregates>,
    pub(super) experiments: Experiments,
    pub(super) counters: Counters,
    pub(super) users: Vec<(u64, SavedUser)>,
    /// Saved by a build whose coverage since start took the panes the
    /// windows passed on, not each list (state format 8): the lists of
    /// the newest panes are not in it yet.
    #[serde(skip)]
    pub(crate) coverage_passed_on: bool,
    /// What `/metrics`' counters leave out, which the state file keeps
    /// after the rest (builds before it read the file as they did).
    #[serde(skip)]
    pub counted_before: CountedBefore,
}

/// An engine's state, borrowed: the fields of [`EngineState`] in its
/// order, so that it encodes to the bytes of an `EngineState` without
/// copying the users (the fleet's snapshots leave the finalized aggregates
/// and counters out).
#[derive(Serialize)]
pub(super) struct StateRef<'a> {
    pub(super) max_time: Option<Nanos>,
    pub(super) next_seq: u64,
    pub(super) groups: Groups,
    pub(super) aggregates: &'a [GroupAggregates],
    pub(super) experiments: Experiments,
    pub(super) counters: Counters,
    pub(super) users: UsersAhead<'a>,
}

/// Users by id, serialized as the `Vec` of saved users they are, while the
/// states of the users a few places ahead are loaded into the cache: ids
/// are hashes, so the walk through them is in no order of memory, and each
/// user is a chain of three loads (its state, its lists, their items). The
/// table gives the hashes of their items.
pub(super) struct UsersAhead<'a>(
    pub(super) Vec<(u64, &'a UserState)>,
    pub(super) &'a ItemTable,
);

impl Serialize for UsersAhead<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let Self(users, table) = self;
        let mut sequence = serializer.serialize_seq(Some(users.len()))?;
        for (index, user) in users.iter().enumerate() {
            if let Some((_, ahead)) = users.get(index + 8) {
                ahead.prefetch_state();
            }
            if let Some((_, ahead)) = users.get(index + 4) {
                ahead.prefetch_lists();
            }
            if let Some((_, ahead)) = users.get(index + 2) {
                ahead.prefetch();
            }
            let (id, user) = user;
            sequence.serialize_element(&(id, HeldUser(user, table)))?;
        }
        sequence.end()
    }
}

/// The counters added after the state file's layout was set, which it
/// keeps after everything else (a build before them reads the rest as it
/// did): each as counted since start, and as counted before the last reset
/// of `/metrics`' counters, in the order they were added, so that what an
/// earlier build wrote is a prefix of what this one writes.
#[derive(Debug, Default, PartialEq, Serialize)]
pub struct LaterCounters {
    /// Impressions shed under `max_open_items`.
    shed_open_items: [u64; 2],
    /// Interactions shed under `max_open_credits`.
    shed_open_credits: [u64; 2],
}

impl LaterCounters {
    /// Reads what a build wrote: the counters it knew of, and 0 for those
    /// added after it.
    pub fn from_bytes(mut bytes: &[u8]) -> Self {
        let mut later = Self::default();
        for pair in [&mut later.shed_open_items, &mut later.shed_open_credits] {
            let Ok((read, rest)) = postcard::take_from_bytes::<[u64; 2]>(bytes) else {
                break;
            };
            (*pair, bytes) = (read, rest);
        }
        later
    }

    /// The counters kept after everything else, of `counters` and of
    /// what `counted_before` holds.
    pub(super) fn of(counters: &Counters, counted_before: &CountedBefore) -> Self {
        let before = counted_before.engine.as_ref().map(|b| &b.counters);
        let pair = |count: fn(&Counters) -> u64| [count(counters), before.map_or(0, count)];
        LaterCounters {
            shed_open_items: pair(|c| c.shed_open_items),
            shed_open_credits: pair(|c| c.shed_open_credits),
        }
    }
}

/// An engine's state, encoded as the bytes of an [`EngineState`], with
/// what the state file keeps after it: what a save holds besides the
/// engine, a state's bytes and no copy of it in any other shape.
pub struct EncodedState {
    /// The bytes of the [`EngineState`].
    pub pieces: StatePieces,
    /// What `/metrics`' counters leave out.
    pub counted_before: CountedBefore,
    /// The counters added after the state file's layout was set.
    pub later_counters: LaterCounters,
}

/// Bytes in pieces, as a postcard flavor writes them: each piece is `HEAD`
/// bytes left for its reader to fill in, then up to `BODY` bytes of what
/// was written. Hundreds of megabytes are thus never one block, and are
/// not copied as they grow. The pieces of an earlier writing can be
/// written again ([`Pieces::reusing`]), so that writing the same state
/// again and again takes no new memory.
#[derive(Default)]
pub struct Pieces<const HEAD: usize, const BODY: usize> {
    pieces: Vec<Vec<u8>>,
    /// Emptied pieces to write before any new one is taken.
    spare: Vec<Vec<u8>>,
}

/// The pieces of an encoded state: 1 MiB each, no head.
pub type StatePieces = Pieces<0, { 1 << 20 }>;

impl<const HEAD: usize, const BODY: usize> Pieces<HEAD, BODY> {
    /// No pieces, to be written into `old`'s before any new one is
    /// taken; those left unwritten are let go when the writing ends.
    pub fn reusing(old: Self) -> Self {
        let mut spare = old.pieces;
        spare.reverse();
        for piece in &mut spare {
            piece.clear();
        }
        Self {
            pieces: Vec::new(),
            spare,
        }
    }

    /// The pieces, in order, heads included.
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> + Clone {
        self.pieces.iter().map(Vec::as_slice)
    }

    /// The pieces, in order, heads included, to fill the heads in.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut [u8]> {
        self.pieces.iter_mut().map(Vec::as_mut_slice)
    }

    /// How many pieces there are.
    pub fn count(&self) -> usize {
        self.pieces.len()
    }

    /// The bytes written, heads left out.
    pub fn written(&self) -> usize {
        self.pieces.iter().map(|piece| piece.len() - HEAD).sum()
    }
}

impl<const HEAD: usize, const BODY: usize> postcard::ser_flavors::Flavor for Pieces<HEAD, BODY> {
    type Output = Self;

    fn try_push(&mut self, byte: u8) -> postcard::Result<()> {
        self.try_extend(&[byte])
    }

    fn try_extend(&mut self, mut data: &[u8]) -> postcard::Result<()> {
        let full = HEAD + BODY;
        while !data.is_empty() {
            if self.pieces.last().is_none_or(|piece| piece.len() == full) {
                let mut piece = self.spare.pop().unwrap_or_default();
                piece.reserve_exact(full);
                piece.resize(HEAD, 0);
                self.pieces.push(piece);
            }
            let Some(piece) = self.pieces.last_mut() else {
                break;
            };
            let (now, later) = data.split_at(data.len().min(full - piece.len()));
            piece.extend_from_slice(now);
            data = later;
        }
        Ok(())
    }

    fn finalize(mut self) -> postcard::Result<Self> {
        self.spare = Vec::new();
        Ok(self)
    }
}

impl EngineState {
    /// The counters this state keeps after everything else.
    pub fn later_counters(&self) -> LaterCounters {
        LaterCounters::of(&self.counters, &self.counted_before)
    }

    /// Sets the counters kept after everything else, read with the rest.
    pub fn restore_later_counters(&mut self, later: LaterCounters) {
        let restore = |counters: &mut Counters, at: usize| {
            counters.shed_open_items = later.shed_open_items[at];
            counters.shed_open_credits = later.shed_open_credits[at];
        };
        restore(&mut self.counters, 0);
        if let Some(engine) = &mut self.counted_before.engine {
            restore(&mut engine.counters, 1);
        }
    }

    /// Why no engine could have saved this state, if it could not: a group
    /// id, credit rank, window or position curve out of shape, or a user
    /// listed twice. The engine indexes by these without checking, so a
    /// state file that passes its checksum but breaks them (written by
    /// hand, or by a faulty build) would crash or exhaust a server long
    /// after the restore instead of being set aside at once.
    pub fn inconsistency(&self) -> Option<&'static str> {
        let groups = self.groups.names().len();
        if !self.groups.is_well_formed() {
            return Some("the group registry names a group it does not hold");
        }
        if self.aggregates.len() > groups {
            return Some("more aggregates than groups");
        }
        if !self.aggregates.iter().all(|a| {
            a.windows.is_well_formed()
                && a.positions.is_well_formed()
                && a.coverage_windows.is_well_formed()
        }) {
            return Some("a rolling window, position curve or coverage pane is out of shape");
        }
        if !all_finite(&self.aggregates)
            || !all_finite(&self.experiments)
            || !all_finite(&self.counted_before)
        {
            return Some("a sum or figure is not a finite number");
        }
        if !self.users.windows(2).all(|pair| pair[0].0 < pair[1].0) {
            return Some("users are not listed once each, by id");
        }
        let opens = || self.users.iter().flat_map(|(_, user)| &user.open);
        if !opens().all(|open| (open.header.group as usize) < groups) {
            return Some("an open impression names an unknown group");
        }
        if !opens().all(|open| open.is_well_formed()) {
            return Some("an open impression credits a rank it does not show");
        }
        let grades_finite = |open: &SavedList| open.credits.iter().all(|c| c.grade.is_finite());
        if !opens().all(grades_finite) || !self.users.iter().all(|(_, u)| all_finite(&u.waiting)) {
            return Some("an interaction's grade is not a finite number");
        }
        if !self.experiments.is_well_formed() {
            return Some("the interleaving registry names an experiment it does not hold");
        }
        let mut teams = Vec::new();
        let teams_fit = |open: &SavedList| {
            if open.header.lineup == NOT_INTERLEAVED {
                return true;
            }
            let rankers = self.experiments.rankers(open.header.lineup);
            open.teams_into(&mut teams);
            rankers > 0 && teams.iter().all(|&t| usize::from(t) < rankers)
        };
        if !opens().all(teams_fit) {
            return Some("an open interleaved list names an unknown lineup or ranker");
        }
        None
    }
}

impl Engine {
    /// The whole state, encoded as [`Engine::to_state`]'s `EngineState`
    /// encodes, without that copy of every user, into `spare`'s pieces
    /// first (those of the last save).
    pub fn encode_state(&self, spare: StatePieces) -> postcard::Result<EncodedState> {
        let pieces = postcard::serialize_with_flavor(
            &StateRef {
                max_time: self.max_time,
                next_seq: self.next_seq,
                groups: self.groups.clone(),
                aggregates: &self.aggregates,
                experiments: self.experiments.clone(),
                counters: self.counters.clone(),
                users: UsersAhead(sorted_user_refs(&self.shards), &self.items),
            },
            StatePieces::reusing(spare),
        )?;
        let counted_before = self.counted_before();
        Ok(EncodedState {
            pieces,
            later_counters: LaterCounters::of(&self.counters, &counted_before),
            counted_before,
        })
    }
}

/// The saved form of every user of `shards`, sorted by id, so that the same
/// state always saves as the same bytes; `table` numbers their items.
pub(super) fn sorted_users(shards: &[Shard], table: &ItemTable) -> Vec<(u64, SavedUser)> {
    sorted_user_refs(shards)
        .into_iter()
        .map(|(id, user)| (id, user.saved(table)))
        .collect()
}

/// Every user of `shards`, sorted by id.
pub(super) fn sorted_user_refs(shards: &[Shard]) -> Vec<(u64, &UserState)> {
    let mut users: Vec<(u64, &UserState)> = shards
        .iter()
        .flat_map(|shard| shard.iter().map(|(id, user)| (*id, user)))
        .collect();
    users.sort_unstable_by_key(|(id, _)| *id);
    users
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{EngineArgs, FileSettings};
    use crate::engine::EngineSettings;
    use crate::event::json::parse_line;
    use crate::join::Engine;

    /// An engine of the default settings, and the validator of its events.
    fn engine() -> (Engine, crate::event::Validator) {
        let settings =
            EngineSettings::resolve(&EngineArgs::default(), &FileSettings::default()).unwrap();
        let engine = Engine::new(
            settings.join(&[std::time::Duration::from_secs(60)]),
            settings.evaluator(),
        );
        (engine, settings.validator(None))
    }

    /// The state of an engine holding one open impression, credited a
    /// click, and a click waiting for another; one list of another user
    /// is finalized.
    fn saved() -> EngineState {
        let (mut engine, validator) = engine();
        for line in [
            r#"{"impression":{"requestId":"r0","userId":"u0","itemIds":["a"],"time":"2026-11-01T09:00:00Z"}}"#,
            r#"{"impression":{"requestId":"r1","userId":"u1","itemIds":["a","b"],"time":"2026-11-01T10:00:00Z"}}"#,
            r#"{"interaction":{"requestId":"r1","userId":"u1","itemId":"a","type":"click","time":"2026-11-01T10:00:01Z"}}"#,
            r#"{"interaction":{"requestId":"r2","userId":"u1","itemId":"c","type":"click","time":"2026-11-01T10:00:01Z"}}"#,
        ] {
            engine.apply(parse_line(line, &validator).unwrap());
        }
        engine.to_state()
    }

    /// A figure, a credit's grade or a waiting interaction's grade that is
    /// NaN or infinite (a file damaged, its checksum taken again) is found:
    /// a restored NaN had been exported in /metrics for good.
    #[test]
    fn a_state_with_a_number_that_is_not_finite_is_inconsistent() {
        let sums = "a sum or figure is not a finite number";
        let grades = "an interaction's grade is not a finite number";
        let mut state = saved();
        state.aggregates[0].totals.squares[0] = f64::NAN;
        assert_eq!(state.inconsistency(), Some(sums));
        let mut state = saved();
        let aggregates = &mut state.aggregates[0];
        let width = aggregates.totals.sums.len();
        let time = state.max_time.unwrap();
        aggregates
            .windows
            .add(time, &vec![f64::INFINITY; width], true);
        assert_eq!(state.inconsistency(), Some(sums));
        let mut state = saved();
        state.users[0].1.open[0].credits[0].grade = f64::NAN;
        assert_eq!(state.inconsistency(), Some(grades));
        let mut state = saved();
        state.users[0].1.waiting[0].interaction.grade = f64::NEG_INFINITY;
        assert_eq!(state.inconsistency(), Some(grades));
    }

    #[test]
    fn the_encoded_state_is_the_bytes_of_the_state_copied() {
        let (mut engine, validator) = engine();
        let items: Vec<String> = (0..20).map(|i| format!("\"item-{i}\"")).collect();
        let items = items.join(",");
        for user in 0..6_000 {
            let lines = [
                format!(
                    r#"{{"impression":{{"requestId":"r{user}","userId":"u{user}","itemIds":[{items}],"time":"2026-11-01T10:00:00Z","model":"m{}"}}}}"#,
                    user % 3
                ),
                format!(
                    r#"{{"interaction":{{"requestId":"r{user}","userId":"u{user}","itemId":"item-3","type":"click","time":"2026-11-01T10:00:01Z"}}}}"#
                ),
                format!(
                    r#"{{"interaction":{{"requestId":"later{user}","userId":"u{user}","itemId":"item-4","type":"click","time":"2026-11-01T10:00:01Z"}}}}"#
                ),
            ];
            for line in &lines {
                engine.apply(parse_line(line, &validator).unwrap());
            }
            if user == 3_000 {
                engine.reset_exported_counters();
            }
        }
        let first = engine.encode_state(Default::default()).unwrap();
        let pieces = first.pieces.count();
        assert!(pieces > 1, "more than one piece");
        let memory = |pieces: &StatePieces| pieces.iter().map(<[u8]>::as_ptr).collect::<Vec<_>>();
        let spare = memory(&first.pieces);
        // Into the pieces of the first: the same bytes, in the same memory.
        let encoded = engine.encode_state(first.pieces).unwrap();
        assert_eq!(encoded.pieces.count(), pieces);
        assert_eq!(memory(&encoded.pieces), spare);
        let bytes: Vec<u8> = encoded.pieces.iter().flatten().copied().collect();
        let state = engine.to_state();
        assert_eq!(bytes, postcard::to_stdvec(&state).unwrap());
        assert_eq!(encoded.counted_before, state.counted_before);
        assert_eq!(encoded.later_counters, state.later_counters());
    }

    #[test]
    fn a_saved_state_is_consistent_and_an_unknown_group_is_not() {
        let mut state = saved();
        assert_eq!(state.inconsistency(), None);
        state.users[0].1.open[0].header.group = u32::MAX;
        assert_eq!(
            state.inconsistency(),
            Some("an open impression names an unknown group")
        );
    }

    #[test]
    fn a_user_listed_twice_or_an_emptied_registry_is_inconsistent() {
        let mut state = saved();
        let user = state.users[0].clone();
        state.users.push(user);
        assert_eq!(
            state.inconsistency(),
            Some("users are not listed once each, by id")
        );
        let mut state = saved();
        state.groups = Groups::new(10, &super::super::SegmentSettings::default());
        assert_eq!(state.inconsistency(), Some("more aggregates than groups"));
        state.aggregates.clear();
        assert_eq!(
            state.inconsistency(),
            Some("an open impression names an unknown group")
        );
    }
}
