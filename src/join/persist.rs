//! The engine's state as data, to save across restarts: everything but the
//! settings and what can be rebuilt from the rest (the due-time queues).
//! The engine fills it and carries on from it ([`super::Engine::to_state`],
//! [`super::Engine::from_state`]); this module owns its serialized form,
//! whose field order is the state file's format, and reads the format
//! before it, whose groups had no segments.

use super::groups::GroupsV2;
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

/// The state as format 2 saved it, before groups had segments: it
/// restores as a state without segment labels.
#[derive(Deserialize)]
pub struct EngineStateV2 {
    max_time: Option<Nanos>,
    next_seq: u64,
    groups: GroupsV2,
    aggregates: Vec<GroupAggregates>,
    counters: Counters,
    users: Vec<(u64, UserState)>,
}

impl From<EngineStateV2> for EngineState {
    fn from(old: EngineStateV2) -> Self {
        Self {
            max_time: old.max_time,
            next_seq: old.next_seq,
            groups: old.groups.into(),
            aggregates: old.aggregates,
            counters: old.counters,
            users: old.users,
        }
    }
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

#[cfg(test)]
mod tests {
    use super::super::{Engine, JoinSettings, SegmentSettings};
    use super::*;
    use crate::event::{id_hash, Event, Impression, Interaction, NANOS_PER_SECOND};
    use crate::metrics::{ListEvaluator, MetricSettings};
    use std::borrow::Cow;
    use std::collections::HashMap;

    const S: Nanos = NANOS_PER_SECOND;

    fn new_engine() -> Engine {
        let settings = JoinSettings {
            attribution_window: 300 * S,
            allowed_lateness: 30 * S,
            shards: 4,
            max_groups: 10,
            segments: SegmentSettings::default(),
            max_open_impressions: 100,
            max_waiting_interactions: 100,
            windows: vec![3600 * S],
            position_curve_depth: 5,
            interaction_types: vec!["click".to_owned()],
        };
        Engine::new(
            settings,
            ListEvaluator::new(MetricSettings::default(), &[1, 5]),
        )
    }

    fn impression(request: &str, model: &'static str, time: Nanos) -> Event<'static> {
        Event::Impression(Impression {
            request: id_hash(request),
            user: id_hash(request),
            items: vec![id_hash("a"), id_hash("b")],
            time,
            model: Cow::Borrowed(model),
            surface: Cow::Borrowed("home"),
            segments: Vec::new(),
        })
    }

    #[test]
    fn reads_a_state_of_format_2_as_one_without_segments() {
        let mut engine = new_engine();
        engine.apply(impression("r1", "v1", 0));
        engine.apply(Event::Interaction(Interaction {
            event: None,
            user: id_hash("r1"),
            item: id_hash("b"),
            request: None,
            time: S,
            grade: 1.0,
            kind: 0,
        }));
        engine.apply(impression("r2", "v2", 400 * S));
        engine.apply(impression("r3", "v1", 401 * S));
        let state = engine.to_state();
        // Format 2 wrote the registry as names, a map of ids by model and
        // surface, the limit, the overflow group and its count; the rest as now.
        let names: Vec<(String, String)> = state
            .groups
            .names()
            .iter()
            .map(|name| (name.model.clone(), name.surface.clone()))
            .collect();
        let mut ids: HashMap<String, HashMap<String, u32>> = HashMap::new();
        for (id, (model, surface)) in names.iter().enumerate() {
            ids.entry(model.clone())
                .or_default()
                .insert(surface.clone(), id as u32);
        }
        let mut bytes = postcard::to_stdvec(&(state.max_time, state.next_seq)).unwrap();
        let groups = (&names, &ids, 10usize, None::<u32>, 0u64);
        bytes.extend(postcard::to_stdvec(&groups).unwrap());
        let rest = (&state.aggregates, &state.counters, &state.users);
        bytes.extend(postcard::to_stdvec(&rest).unwrap());

        let old: EngineStateV2 = postcard::from_bytes(&bytes).unwrap();
        let fresh = new_engine();
        let (settings, evaluator) = (fresh.settings.clone(), fresh.evaluator().clone());
        let mut restored = Engine::from_state(settings, evaluator, old.into());
        assert_eq!(restored.open_impressions(), 2);
        assert_eq!(restored.group_names(), engine.group_names());
        restored.apply(impression("r4", "v2", 402 * S));
        engine.apply(impression("r4", "v2", 402 * S));
        assert_eq!(restored.group_names().len(), 2, "v2 found by name");
        restored.finish();
        engine.finish();
        assert_eq!(restored.counters(), engine.counters());
        for (a, b) in restored.aggregates().iter().zip(engine.aggregates()) {
            assert_eq!(a.totals, b.totals);
        }
    }
}
