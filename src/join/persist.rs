//! The engine's state as data, to save across restarts: everything but the
//! settings and what can be rebuilt from the rest (the due-time queues).

use super::{user::UserState, Counters, Engine, GroupAggregates, Groups, JoinSettings};
use crate::event::Nanos;
use crate::metrics::ListEvaluator;
use serde::{Deserialize, Serialize};

/// Everything an engine holds that a restart must not lose.
#[derive(Serialize, Deserialize)]
pub struct EngineState {
    max_time: Option<Nanos>,
    next_seq: u64,
    groups: Groups,
    aggregates: Vec<GroupAggregates>,
    counters: Counters,
    users: Vec<(u64, UserState)>,
}

impl Engine {
    /// A copy of the state, in a deterministic order.
    pub fn state(&self) -> EngineState {
        let mut users: Vec<(u64, UserState)> = self
            .shards
            .iter()
            .flat_map(|shard| shard.iter().map(|(id, user)| (*id, user.clone())))
            .collect();
        users.sort_unstable_by_key(|(id, _)| *id);
        EngineState {
            max_time: self.max_time,
            next_seq: self.next_seq,
            groups: self.groups.clone(),
            aggregates: self.aggregates.clone(),
            counters: self.counters.clone(),
            users,
        }
    }

    /// An engine that carries on from `state`. The caller checks that the
    /// state was saved under the same cutoffs, metric settings and windows.
    pub fn restore(settings: JoinSettings, evaluator: ListEvaluator, state: EngineState) -> Engine {
        let mut engine = Engine::new(settings, evaluator);
        engine.max_time = state.max_time;
        engine.next_seq = state.next_seq;
        engine.groups = state.groups;
        engine.groups.max_groups = engine.settings.max_groups;
        engine.aggregates = state.aggregates;
        engine.counters = state.counters;
        let window = engine.settings.attribution_window;
        for (id, user) in state.users {
            for open in &user.open {
                engine
                    .deadlines
                    .push((open.time.saturating_add(window), open.seq, id));
            }
            for waiting in &user.waiting {
                engine
                    .give_ups
                    .push((waiting.interaction.time, waiting.seq, id));
            }
            engine.open_impressions += user.open.len();
            engine.waiting_interactions += user.waiting.len();
            let index = super::shard_index(id, engine.shards.len());
            engine.shards[index].insert(id, user);
        }
        engine
    }
}
