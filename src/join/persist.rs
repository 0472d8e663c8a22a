//! The engine's state as data, to save across restarts: everything but the
//! settings and what can be rebuilt from the rest (the due-time queues).
//! The engine fills it and carries on from it ([`super::Engine::to_state`],
//! [`super::Engine::from_state`]); this module owns its serialized form,
//! whose field order is the state file's format, and reads the format
//! before it, whose groups had no segments.

use super::{user::UserState, Counters, GroupAggregates, Groups, Shard};
use crate::event::Nanos;
use serde::{Deserialize, Serialize};

/// Everything an engine holds that a restart must not lose.
#[derive(Serialize, Deserialize)]
pub struct EngineState {
    pub(super) max_time: Option<Nanos>,
    pub(super) next_seq: u64,
    pub(super) groups: Groups,
    pub(super) aggregates: Vec<GroupAggregates>,
    pub(super) counters: Counters,
    pub(super) users: Vec<(u64, UserState)>,
}

/// An engine's open state, borrowed: the fields of [`EngineState`] in its
/// order, so that it encodes to the bytes of an `EngineState` without its
/// finalized aggregates and counters, and without copying the users.
#[derive(Serialize)]
pub(super) struct OpenState<'a> {
    pub(super) max_time: Option<Nanos>,
    pub(super) next_seq: u64,
    pub(super) groups: Groups,
    pub(super) aggregates: &'a [GroupAggregates],
    pub(super) counters: Counters,
    pub(super) users: Vec<(u64, &'a UserState)>,
}

/// A copy of every user of `shards`, sorted by id, so that the same state
/// always saves as the same bytes.
pub(super) fn sorted_users(shards: &[Shard]) -> Vec<(u64, UserState)> {
    sorted_user_refs(shards)
        .into_iter()
        .map(|(id, user)| (id, user.clone()))
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
