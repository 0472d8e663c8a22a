//! Finalized figures apart from open state, for fleet mode: one instance
//! sums the figures of the partitions it evaluates, and a partition handed
//! to another instance travels with its open state only, so that each list
//! and each event is counted by exactly one instance.

use super::finalized::CoverageParts;
use super::persist::{sorted_user_refs, StateRef, UsersAhead};
use super::{Counters, Engine, GroupAggregates};
use crate::metrics::Coverage;
use postcard::ser_flavors::Flavor;

impl Engine {
    /// Adds the finalized figures of `other` (counters, group aggregates
    /// matched by name, overflow count) and its open and waiting counts to
    /// this engine's; its watermark becomes the earlier of the two. The
    /// result is a view to export, not an engine to apply events to.
    pub fn absorb(&mut self, other: &Engine) {
        self.absorb_finalized(other);
        self.held = self.held + other.held;
        self.absorbed_item_numbers += other.item_numbers();
        self.max_time = match (self.max_time, other.max_time) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }

    /// Adds the finalized figures of `other` alone: its counters, group
    /// aggregates (matched by name), overflow and fold counts.
    pub fn absorb_finalized(&mut self, other: &Engine) {
        self.counters.add(&other.counters);
        self.experiments
            .absorb(&other.experiments, &self.settings.windows);
        self.groups.overflowed += other.groups.overflowed;
        self.groups.add_folded(&other.groups);
        for (aggregates, name) in other.aggregates.iter().zip(other.groups.names()) {
            let id = self.groups.id_of_name(name);
            self.add_group_figures(id as usize, aggregates);
        }
    }

    /// Adds the finalized figures of `shard`, a shard of the same
    /// [`super::ShardedEngine`] whose registry placed its lists: its
    /// counters, and its group and experiment aggregates by id.
    pub fn absorb_shard(&mut self, shard: &Engine) {
        self.counters.add(&shard.counters);
        self.experiments
            .absorb(&shard.experiments, &self.settings.windows);
        for (id, aggregates) in shard.aggregates.iter().enumerate() {
            self.add_group_figures(id, aggregates);
        }
    }

    /// Adds the coverage parts of a [`super::ShardedEngine`] to its
    /// groups', which hold none: exact parts are merged, and the one part
    /// of coverage with a cap is taken as it is (a merge could raise its
    /// sample's level: not what one engine would report).
    pub(super) fn absorb_coverage_parts(&mut self, parts: &CoverageParts) {
        let whole = parts.count() == 1;
        for (id, coverages) in parts.by_group() {
            let coverages: Vec<&Coverage> = coverages.collect();
            let mine = &mut self.group_aggregates(id).coverage;
            match coverages[..] {
                [coverage] if whole => *mine = coverage.clone(),
                _ => {
                    mine.reserve_disjoint(&coverages);
                    coverages.iter().for_each(|part| mine.merge(part, None));
                }
            }
        }
    }

    /// The aggregates of group `id`, made empty if it has none yet.
    pub(super) fn group_aggregates(&mut self, id: usize) -> &mut GroupAggregates {
        while self.aggregates.len() <= id {
            self.aggregates
                .push(GroupAggregates::new(&self.settings, self.values.len()));
        }
        &mut self.aggregates[id]
    }

    /// Adds `aggregates` to those of group `id`.
    fn add_group_figures(&mut self, id: usize, aggregates: &GroupAggregates) {
        let cap = self.settings.coverage.cap();
        let mine = self.group_aggregates(id);
        mine.totals.merge(&aggregates.totals);
        mine.windows.merge(&aggregates.windows);
        mine.positions.merge(&aggregates.positions);
        mine.coverage.merge(&aggregates.coverage, cap);
        mine.coverage_windows
            .merge(&aggregates.coverage_windows, cap);
    }

    /// The open state alone, encoded as an [`EngineState`]: open
    /// impressions, waiting interactions, the watermark, sequence numbers
    /// and group names, without the finalized aggregates and counters, which
    /// stay with the instance that counted them.
    /// It is written into `output`, a postcard flavor.
    pub fn encode_open_state<F: Flavor>(&self, output: F) -> postcard::Result<F::Output> {
        let mut groups = self.groups.clone();
        groups.clear_counts();
        postcard::serialize_with_flavor(
            &StateRef {
                max_time: self.max_time,
                next_seq: self.next_seq,
                groups,
                aggregates: &[],
                experiments: self.experiments.without_figures(&self.settings.windows),
                counters: Counters::default(),
                users: UsersAhead(sorted_user_refs(&self.shards), &self.items),
            },
            output,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::super::{JoinSettings, SegmentSettings};
    use super::*;
    use crate::event::{id_hash, Event, Impression, Interaction, NANOS_PER_SECOND};
    use crate::metrics::{ListEvaluator, MetricSettings};
    use postcard::ser_flavors::StdVec;
    use std::borrow::Cow;

    const S: i64 = NANOS_PER_SECOND;

    fn engine() -> Engine {
        let settings = JoinSettings {
            attribution_window: 300 * S,
            allowed_lateness: 30 * S,
            shards: 4,
            max_groups: 10,
            segments: SegmentSettings::default(),
            max_open_impressions: 100,
            max_open_items: usize::MAX,
            max_open_credits: usize::MAX,
            max_waiting_interactions: 100,
            max_open_impressions_per_user: usize::MAX,
            max_waiting_interactions_per_user: usize::MAX,
            max_interactions_per_impression: usize::MAX,
            windows: vec![3600 * S],
            position_curve_depth: 20,
            interaction_types: vec!["click".to_owned()],
            coverage: crate::metrics::CoverageMode::Exact,
            number_items: true,
        };
        Engine::new(
            settings,
            ListEvaluator::new(MetricSettings::default(), &[1, 5]),
        )
    }

    fn impression(user: &str, request: &str, model: &'static str, time: i64) -> Event<'static> {
        Event::Impression(Box::new(Impression {
            request: id_hash(request),
            user: id_hash(user),
            items: vec![id_hash("a"), id_hash("b")],
            time,
            model: Cow::Borrowed(model),
            surface: Cow::Borrowed("home"),
            segments: Vec::new(),
            interleaving: None,
        }))
    }

    fn click(user: &str, time: i64) -> Event<'static> {
        Event::Interaction(Interaction {
            event: None,
            user: id_hash(user),
            item: id_hash("b"),
            request: None,
            time,
            grade: 1.0,
            kind: 0,
        })
    }

    #[test]
    fn absorbing_adds_figures_by_group_name() {
        let mut first = engine();
        first.apply(impression("u", "r1", "v1", 0));
        first.apply(click("u", S));
        first.finish();
        let mut second = engine();
        second.apply(impression("w", "r2", "v2", 0));
        second.apply(impression("x", "r3", "v1", 0));
        second.finish();
        let mut view = engine();
        view.absorb(&first);
        view.absorb(&second);
        let lists: Vec<(String, u64)> = view
            .group_names()
            .iter()
            .zip(view.aggregates())
            .map(|(name, a)| (name.model.clone(), a.totals.lists))
            .collect();
        assert_eq!(lists, [("v1".to_owned(), 2), ("v2".to_owned(), 1)]);
        assert_eq!(
            (view.counters().impressions, view.counters().credited),
            (3, 1)
        );
    }

    #[test]
    fn a_handed_over_state_carries_open_lists_but_no_figures() {
        let mut before = engine();
        before.apply(impression("u", "r1", "v1", 0));
        before.apply(impression("w", "r2", "v1", 400 * S));
        assert_eq!(before.aggregates()[0].totals.lists, 1);
        let settings = before.settings.clone();
        let evaluator = before.evaluator().clone();
        let encoded = before.encode_open_state(StdVec::new()).expect("encodes");
        let state = postcard::from_bytes(&encoded).expect("decodes as an EngineState");
        let after = Engine::from_state(settings, evaluator, state);
        assert_eq!(after.open_impressions(), 1);
        assert_eq!(after.watermark(), before.watermark());
        assert_eq!(after.counters(), &Counters::default());
        assert!(after.aggregates().is_empty());
        assert_eq!(before.aggregates()[0].totals.lists, 1, "the figures stay");
    }

    fn interleaved(
        user: &str,
        request: &str,
        rankers: [&'static str; 2],
        time: i64,
    ) -> Event<'static> {
        let Event::Impression(mut m) = impression(user, request, "mixed", time) else {
            unreachable!("an impression")
        };
        m.interleaving = Some(crate::event::Interleaving {
            rankers: rankers.iter().map(|&r| Cow::Borrowed(r)).collect(),
            teams: vec![0, 1],
        });
        Event::Impression(m)
    }

    #[test]
    fn interleaved_lists_handed_over_count_once_as_one_engine_counts_them() {
        // One engine sees everything; the other is handed over half-way.
        let events = |engine: &mut Engine, from: usize, to: usize| {
            for i in from..to {
                let user = format!("u{i}");
                let rankers = if i % 3 == 0 { ["y", "x"] } else { ["x", "y"] };
                engine.apply(interleaved(&user, &user, rankers, i as i64 * S));
                if i % 2 == 0 {
                    engine.apply(click(&user, i as i64 * S + 1));
                }
            }
        };
        let mut whole = engine();
        events(&mut whole, 0, 40);
        whole.finish();

        let mut before = engine();
        events(&mut before, 0, 20);
        let encoded = before.encode_open_state(StdVec::new()).expect("encodes");
        let state = postcard::from_bytes(&encoded).expect("decodes as an EngineState");
        let mut after =
            Engine::from_state(before.settings.clone(), before.evaluator().clone(), state);
        assert!(after
            .experiment_aggregates()
            .iter()
            .all(|a| a.totals.lists == 0));
        events(&mut after, 20, 40);
        after.finish();
        let mut view = engine();
        view.absorb(&before);
        view.absorb(&after);

        let totals = |engine: &Engine| -> Vec<(String, String, u64, Vec<f64>)> {
            engine
                .experiment_names()
                .iter()
                .zip(engine.experiment_aggregates())
                .map(|(n, a)| {
                    (
                        n.a.clone(),
                        n.b.clone(),
                        a.totals.lists,
                        a.totals.sums.clone(),
                    )
                })
                .collect()
        };
        assert_eq!(totals(&view), totals(&whole));
        // Clicks on the rank-2 item (team 1) of the even lists: x's in the 7
        // of them whose rankers came as [y, x], y's in the other 13; y picked
        // first in the 14 lists with i % 3 == 0, x in the other 26.
        assert_eq!(
            totals(&whole),
            [("x".into(), "y".into(), 40, vec![7.0, 13.0, 26.0, 14.0])]
        );
    }
}
