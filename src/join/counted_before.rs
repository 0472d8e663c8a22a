//! The figures since start at the moment the counters `/metrics` exports
//! were last reset, which a restart after `kill -9` does (docs/state.md):
//! `/metrics` takes them out, so that its counters fall to 0 and grow from
//! there as a new process's do, while the report since start keeps every
//! list. Restored at the last snapshot's values, lower than those
//! Prometheus last scraped, the counters would be taken for new counts, and
//! `rate()` would count every list since the first start again.

use super::{Counters, Engine};
use crate::metrics::{no_lower, GroupTotals, PositionCurve};
use serde::{Deserialize, Serialize};

/// One group's figures since start at the reset.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GroupBefore {
    /// Its per-list sums.
    pub totals: GroupTotals,
    /// Its position curve.
    pub positions: PositionCurve,
}

/// The engine's own counts since start at the reset.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EngineBefore {
    /// What happened to the events.
    pub counters: Counters,
    /// Impressions folded into the overflow group.
    pub overflowed: u64,
    /// Per segment label, in order: impressions whose value folded into `__other__`.
    pub folded: Vec<u64>,
    /// Interleaved lists that found no room for their experiments.
    pub unregistered: u64,
}

/// Everything counted before the last reset, as the state file keeps it
/// after the rest: `None` where nothing was (no reset yet, or a group or
/// experiment registered since), groups and experiments by id.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CountedBefore {
    /// The engine's own counts.
    pub engine: Option<EngineBefore>,
    /// Each group's figures.
    pub groups: Vec<Option<GroupBefore>>,
    /// Each interleaving experiment's totals.
    pub experiments: Vec<Option<GroupTotals>>,
}

impl Engine {
    /// Resets the counters `/metrics` exports to 0, keeping every figure
    /// since start: what is counted from now on is exported.
    pub fn reset_exported_counters(&mut self) {
        self.counted_before = Some(Box::new(EngineBefore {
            counters: self.counters.clone(),
            overflowed: self.groups.overflowed,
            folded: self.groups.folded().map(|(_, folded)| folded).collect(),
            unregistered: self.experiments.unregistered,
        }));
        for aggregates in &mut self.aggregates {
            aggregates.before = Some(Box::new(GroupBefore {
                totals: aggregates.totals.clone(),
                positions: aggregates.positions.clone(),
            }));
        }
        for aggregates in self.experiments.aggregates_mut() {
            aggregates.before = Some(Box::new(aggregates.totals.clone()));
        }
    }

    /// The engine's own counts at the last reset, if there was one.
    pub fn engine_before(&self) -> Option<&EngineBefore> {
        self.counted_before.as_deref()
    }

    /// What was counted before the last reset, to save with the state.
    pub fn counted_before(&self) -> CountedBefore {
        CountedBefore {
            engine: self.counted_before.as_deref().cloned(),
            groups: self
                .aggregates
                .iter()
                .map(|a| a.before.as_deref().cloned())
                .collect(),
            experiments: self
                .experiment_aggregates()
                .iter()
                .map(|a| a.before.as_deref().cloned())
                .collect(),
        }
    }

    /// Whether the engine's own counts could have grown from `before`.
    fn grew_from(&self, before: &EngineBefore) -> bool {
        let folded: Vec<u64> = self.groups.folded().map(|(_, folded)| folded).collect();
        self.counters.grew_from(&before.counters)
            && self.groups.overflowed >= before.overflowed
            && no_lower(&folded, &before.folded)
            && self.experiments.unregistered >= before.unregistered
    }

    /// Carries the exported counters on from `before`, saved with the
    /// state this engine was restored from; returns false, changing
    /// nothing, when it does not fit the figures (of other shapes, or a
    /// count or sum above theirs), as from a file written by hand.
    pub fn carry_on_from(&mut self, before: CountedBefore) -> bool {
        let groups_fit = before.groups.len() <= self.aggregates.len()
            && before.groups.iter().zip(&self.aggregates).all(|(b, a)| {
                b.as_ref().is_none_or(|b| {
                    a.totals.grew_from(&b.totals) && a.positions.grew_from(&b.positions)
                })
            });
        let experiments = self.experiment_aggregates();
        let experiments_fit = before.experiments.len() <= experiments.len()
            && (before.experiments.iter().zip(experiments))
                .all(|(b, a)| b.as_ref().is_none_or(|b| a.totals.grew_from(b)));
        let engine_fits = before.engine.as_ref().is_none_or(|b| self.grew_from(b));
        if !(groups_fit && experiments_fit && engine_fits) {
            return false;
        }
        self.counted_before = before.engine.map(Box::new);
        for (aggregates, b) in self.aggregates.iter_mut().zip(before.groups) {
            aggregates.before = b.map(Box::new);
        }
        let experiments = self.experiments.aggregates_mut();
        for (aggregates, b) in experiments.iter_mut().zip(before.experiments) {
            aggregates.before = b.map(Box::new);
        }
        true
    }
}
