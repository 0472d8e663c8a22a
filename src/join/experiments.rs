//! Interleaving experiments (docs/SPEC.md §12): a surface with its segment
//! values and a pair of rankers, `a` before `b` by name. An interleaved
//! list is registered under its lineup (its surface, segment values and
//! rankers, which validation puts in name order), which knows the experiment
//! of each pair of its rankers, so that finalizing it looks up no name.
//! Lineups and experiments are each bounded by `max_groups`; an interleaved
//! list that would need more counts in its group only, and is counted
//! (`unregistered`). A lineup that takes no list for the groups' idle
//! timeout and that no open list names is retired with the groups, and so
//! is an experiment no lineup names any more, freeing their slots.

use super::groups::{idle_since, keep_unmarked, renumbered, GroupName, UNSEEN};
use crate::event::Nanos;
use crate::metrics::interleaving::{pair_outcome, slot};
use crate::metrics::GroupTotals;
use crate::window::RollingWindows;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::HashMap;

/// Index of a lineup in the registry.
pub type LineupId = u32;

/// What an experiment is called: its row of a report and the labels of its series.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ExperimentName {
    /// The surface.
    pub surface: String,
    /// `(label, value)` of each segment label, in the configured order.
    pub segments: Vec<(String, String)>,
    /// The ranker first by name.
    pub a: String,
    /// The other ranker.
    pub b: String,
}

/// One experiment's aggregates: per-list outcomes laid out as
/// [`slot`] says, since start and per rolling window.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ExperimentAggregates {
    /// Since start.
    pub totals: GroupTotals,
    /// Per configured window.
    pub windows: RollingWindows,
    /// The totals when `/metrics`' counters were last reset, if since
    /// this experiment was registered (saved apart, after the state).
    #[serde(skip)]
    pub before: Option<Box<GroupTotals>>,
}

impl ExperimentAggregates {
    /// Empty aggregates, with `windows`.
    fn new(windows: &[Nanos]) -> Self {
        Self {
            totals: GroupTotals::new(slot::WIDTH),
            windows: RollingWindows::new(windows),
            before: None,
        }
    }
}

/// A pair of a lineup's rankers: their indexes in the list, `a` first by name.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
struct Pair {
    experiment: u32,
    a: u8,
    b: u8,
}

/// A set of rankers, in name order, on one surface and segment values.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Lineup {
    key: String,
    rankers: u8,
    pairs: Vec<Pair>,
}

/// The registry of lineups and experiments, with each experiment's aggregates.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Experiments {
    names: Vec<ExperimentName>,
    aggregates: Vec<ExperimentAggregates>,
    lineups: Vec<Lineup>,
    /// Interleaved lists that found no room for their lineup or experiments.
    pub unregistered: u64,
    #[serde(skip)]
    ids: HashMap<ExperimentName, u32>,
    #[serde(skip)]
    lineup_ids: HashMap<String, LineupId>,
    /// When each lineup last took a list (the engine's receipt clock), by
    /// id. Not saved: a restart restarts every lineup's idle time.
    #[serde(skip)]
    last_seen: Vec<Nanos>,
    #[serde(skip)]
    scratch: String,
}

impl Experiments {
    /// The lineup of an interleaved list of `rankers` in `group`, registered
    /// if new and if it and its experiments fit under `max`; seen `now`.
    pub fn lineup(
        &mut self,
        group: &GroupName,
        rankers: &[Cow<'_, str>],
        max: usize,
        windows: &[Nanos],
        now: Nanos,
    ) -> Option<LineupId> {
        let mut key = std::mem::take(&mut self.scratch);
        lineup_key(&mut key, group, rankers);
        let found = self.lineup_ids.get(key.as_str()).copied();
        let id = found.or_else(|| self.register(&key, group, rankers, max, windows));
        self.scratch = key;
        match id {
            Some(id) => {
                self.last_seen.resize(self.lineups.len(), UNSEEN);
                self.last_seen[id as usize] = now;
            }
            None => self.unregistered += 1,
        }
        id
    }

    fn register(
        &mut self,
        key: &str,
        group: &GroupName,
        rankers: &[Cow<'_, str>],
        max: usize,
        windows: &[Nanos],
    ) -> Option<LineupId> {
        if self.lineups.len() >= max {
            return None;
        }
        let mut pairs = Vec::with_capacity(rankers.len() * (rankers.len() - 1) / 2);
        // The experiments this lineup would add: the work stops once they
        // are too many (255 rankers make 32,385 pairs; a list had taken
        // seconds when each new pair was looked for among the others).
        let mut names = std::collections::HashSet::new();
        for i in 0..rankers.len() {
            for j in i + 1..rankers.len() {
                let (a, b) = match rankers[i] <= rankers[j] {
                    true => (i, j),
                    false => (j, i),
                };
                let name = ExperimentName {
                    surface: group.surface.clone(),
                    segments: group.segments.clone(),
                    a: rankers[a].to_string(),
                    b: rankers[b].to_string(),
                };
                if !self.ids.contains_key(&name) {
                    names.insert(name.clone());
                    if self.names.len() + names.len() > max {
                        return None;
                    }
                }
                pairs.push((name, a as u8, b as u8));
            }
        }
        let pairs = pairs
            .into_iter()
            .map(|(name, a, b)| Pair {
                experiment: self.id_of_name(&name, windows),
                a,
                b,
            })
            .collect();
        let id = self.lineups.len() as LineupId;
        self.lineups.push(Lineup {
            key: key.to_owned(),
            rankers: rankers.len() as u8,
            pairs,
        });
        self.lineup_ids.insert(key.to_owned(), id);
        Some(id)
    }

    /// The id of the experiment called `name`, registered if new, with
    /// empty aggregates: how figures from elsewhere are added.
    fn id_of_name(&mut self, name: &ExperimentName, windows: &[Nanos]) -> u32 {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        let id = self.names.len() as u32;
        self.names.push(name.clone());
        self.ids.insert(name.clone(), id);
        self.aggregates.push(ExperimentAggregates::new(windows));
        id
    }

    /// Adds a finalized list of `lineup` shown at `time`: `credits` per
    /// ranker in the list's order, `first` the team of its rank-1 item.
    pub fn add(&mut self, lineup: LineupId, credits: &[f64], first: u8, time: Nanos) {
        let Some(lineup) = self.lineups.get(lineup as usize) else {
            return;
        };
        for pair in &lineup.pairs {
            let outcome = pair_outcome(credits, first, pair.a.into(), pair.b.into());
            let aggregates = &mut self.aggregates[pair.experiment as usize];
            aggregates.totals.add(&outcome, true);
            aggregates.windows.add(time, &outcome, true);
        }
    }

    /// The number of rankers of `lineup` (0 for an unknown one).
    pub fn rankers(&self, lineup: LineupId) -> usize {
        self.lineups
            .get(lineup as usize)
            .map_or(0, |l| usize::from(l.rankers))
    }

    /// Every experiment's name, by id.
    pub fn names(&self) -> &[ExperimentName] {
        &self.names
    }

    /// Every experiment's aggregates, by id.
    pub fn aggregates(&self) -> &[ExperimentAggregates] {
        &self.aggregates
    }

    /// Every experiment's aggregates, by id, to change.
    pub(super) fn aggregates_mut(&mut self) -> &mut [ExperimentAggregates] {
        &mut self.aggregates
    }

    /// Adds the figures of `other`, experiment by name, and its count of
    /// unregistered lists.
    pub fn absorb(&mut self, other: &Experiments, windows: &[Nanos]) {
        self.unregistered += other.unregistered;
        for (name, theirs) in other.names.iter().zip(&other.aggregates) {
            let id = self.id_of_name(name, windows) as usize;
            let mine = &mut self.aggregates[id];
            mine.totals.merge(&theirs.totals);
            mine.windows.merge(&theirs.windows);
        }
    }

    /// Registers the lineups and experiments of `registry` that this one
    /// lacks, under the same ids: `registry` holds this one's, and more
    /// registered after them.
    pub fn follow(&mut self, registry: &Experiments, windows: &[Nanos]) {
        for name in &registry.names[self.names.len().min(registry.names.len())..] {
            self.id_of_name(name, windows);
        }
        for lineup in &registry.lineups[self.lineups.len().min(registry.lineups.len())..] {
            self.lineup_ids
                .insert(lineup.key.clone(), self.lineups.len() as LineupId);
            self.lineups.push(lineup.clone());
        }
    }

    /// The number of lineups registered.
    pub fn lineup_count(&self) -> usize {
        self.lineups.len()
    }

    /// The registry without figures: lineups and names, for a partition's
    /// open state, whose lists name their lineups.
    pub fn without_figures(&self, windows: &[Nanos]) -> Experiments {
        let mut registry = self.clone();
        registry.unregistered = 0;
        for aggregates in &mut registry.aggregates {
            *aggregates = ExperimentAggregates::new(windows);
        }
        registry
    }

    /// Rebuilds the lookups that are not saved, for a registry just
    /// restored; every lineup's idle time starts at the next check.
    pub fn restored(&mut self) {
        self.last_seen = vec![UNSEEN; self.lineups.len()];
        self.rebuild_lookups();
    }

    /// Whether each lineup, by id, took no list after `before`. A lineup
    /// restored unseen counts as seen `now`, and is not idle.
    pub fn idle(&mut self, now: Nanos, before: Nanos) -> Vec<bool> {
        self.last_seen.resize(self.lineups.len(), UNSEEN);
        idle_since(&mut self.last_seen, now, before)
    }

    /// Removes the lineups marked in `retired` (by id), then the
    /// experiments that no lineup left names, figures and all; the others
    /// keep their order. Returns the new id of each old lineup (`None`:
    /// retired) and how many experiments went.
    pub fn retire(&mut self, retired: &[bool]) -> (Vec<Option<LineupId>>, usize) {
        let new_lineups = renumbered(retired);
        keep_unmarked(&mut self.lineups, retired);
        keep_unmarked(&mut self.last_seen, retired);
        let mut unnamed = vec![true; self.names.len()];
        for pair in self.lineups.iter().flat_map(|l| &l.pairs) {
            if let Some(unnamed) = unnamed.get_mut(pair.experiment as usize) {
                *unnamed = false;
            }
        }
        let new_experiments = renumbered(&unnamed);
        keep_unmarked(&mut self.names, &unnamed);
        keep_unmarked(&mut self.aggregates, &unnamed);
        for pair in self.lineups.iter_mut().flat_map(|l| &mut l.pairs) {
            if let Some(Some(id)) = new_experiments.get(pair.experiment as usize) {
                pair.experiment = *id;
            }
        }
        self.rebuild_lookups();
        let experiments = unnamed.iter().filter(|&&gone| gone).count();
        (new_lineups, experiments)
    }

    /// Rebuilds the lookups by name and by key from the lists they index.
    fn rebuild_lookups(&mut self) {
        self.ids = self.names.iter().cloned().zip(0..).collect();
        self.lineup_ids = self
            .lineups
            .iter()
            .map(|l| l.key.clone())
            .zip(0..)
            .collect();
    }

    /// Whether every lineup names experiments that exist with indexes
    /// below its ranker count, and every experiment has its aggregates in
    /// shape: what [`Self::add`] indexes without checking.
    pub fn is_well_formed(&self) -> bool {
        self.names.len() == self.aggregates.len()
            && self
                .aggregates
                .iter()
                .all(|a| a.windows.is_well_formed() && a.totals.sums.len() == slot::WIDTH)
            && self.lineups.iter().all(|lineup| {
                lineup.pairs.iter().all(|p| {
                    (p.experiment as usize) < self.names.len()
                        && p.a < lineup.rankers
                        && p.b < lineup.rankers
                })
            })
    }
}

/// Writes the key of a lineup: each part behind its length, so that no
/// name can run into the next.
fn lineup_key(key: &mut String, group: &GroupName, rankers: &[Cow<'_, str>]) {
    use std::fmt::Write;
    key.clear();
    let parts = std::iter::once(group.surface.as_str())
        .chain(group.segments.iter().map(|(_, value)| value.as_str()))
        .chain(std::iter::once("|"))
        .chain(rankers.iter().map(|r| r.as_ref()));
    for part in parts {
        let _ = write!(key, "{}:{part}", part.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(surface: &str) -> GroupName {
        GroupName {
            model: "mixed".into(),
            surface: surface.into(),
            segments: Vec::new(),
        }
    }

    fn rankers(names: &[&'static str]) -> Vec<Cow<'static, str>> {
        names.iter().map(|&n| Cow::Borrowed(n)).collect()
    }

    #[test]
    fn a_lineup_credits_each_pair_oriented_by_name() {
        let mut experiments = Experiments::default();
        let id = experiments
            .lineup(&group("home"), &rankers(&["c", "a", "b"]), 10, &[], 0)
            .unwrap();
        let names: Vec<(String, String)> = experiments
            .names()
            .iter()
            .map(|n| (n.a.clone(), n.b.clone()))
            .collect();
        assert_eq!(
            names,
            [
                ("a".into(), "c".into()),
                ("b".into(), "c".into()),
                ("a".into(), "b".into())
            ]
        );
        // c earned 2, a 0, b 1; c picked first.
        experiments.add(id, &[2.0, 0.0, 1.0], 0, 0);
        let totals = |i: usize| experiments.aggregates()[i].totals.sums.clone();
        assert_eq!(
            totals(0),
            [0.0, 1.0, 0.0, 1.0],
            "a vs c: c wins and picked first"
        );
        assert_eq!(totals(1), [0.0, 1.0, 0.0, 1.0], "b vs c");
        assert_eq!(totals(2), [0.0, 1.0, 0.0, 0.0], "a vs b: b wins");
        let same = experiments.lineup(&group("home"), &rankers(&["c", "a", "b"]), 10, &[], 0);
        assert_eq!(same, Some(id));
        let reordered = experiments
            .lineup(&group("home"), &rankers(&["a", "b", "c"]), 10, &[], 0)
            .unwrap();
        assert_ne!(reordered, id, "another order is another lineup");
        assert_eq!(experiments.names().len(), 3, "of the same experiments");
    }

    #[test]
    fn past_the_bound_a_lineup_is_not_registered_and_is_counted() {
        let mut experiments = Experiments::default();
        assert!(experiments
            .lineup(&group("s"), &rankers(&["a", "b"]), 2, &[], 0)
            .is_some());
        assert!(experiments
            .lineup(&group("s"), &rankers(&["a", "b", "c"]), 2, &[], 0)
            .is_none());
        assert!(experiments
            .lineup(&group("t"), &rankers(&["a", "b"]), 2, &[], 0)
            .is_some());
        assert!(experiments
            .lineup(&group("u"), &rankers(&["a", "b"]), 2, &[], 0)
            .is_none());
        assert_eq!(experiments.unregistered, 2);
    }

    #[test]
    fn names_cannot_run_into_each_other_in_a_key() {
        let (mut one, mut other) = (String::new(), String::new());
        lineup_key(&mut one, &group("s"), &rankers(&["a:b", "c"]));
        lineup_key(&mut other, &group("s"), &rankers(&["a", "b:c"]));
        assert_ne!(one, other);
    }
}
