//! The registry of `(model, surface)` groups, with a bound on how many there
//! may be: past it, new groups fold into one overflow group. It remembers
//! when each group last received an impression, so that idle groups can be
//! retired and their slots freed; ids stay dense, in order of registration.

use crate::event::Nanos;
use std::collections::HashMap;

/// Index of a group in the registry.
pub type GroupId = u32;

/// When a group restored from saved state was last seen: unknown, so its
/// idle time starts at the first sweep after the restart.
const UNSEEN: Nanos = Nanos::MAX;

/// The model and surface names of the overflow group.
const OVERFLOW_GROUP_NAME: &str = "__overflow__";

/// Interns group names to dense ids.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Groups {
    names: Vec<(String, String)>,
    ids: HashMap<String, HashMap<String, GroupId>>,
    max_groups: usize,
    overflow: Option<GroupId>,
    /// Impressions folded into the overflow group.
    pub overflowed: u64,
    /// When each group last received an impression (the engine's receipt
    /// clock), by id. Not saved: a restart restarts every group's idle time.
    #[serde(skip)]
    last_seen: Vec<Nanos>,
}

impl Groups {
    /// A registry holding at most `max_groups` named groups plus the overflow group.
    pub fn new(max_groups: usize) -> Self {
        Self {
            names: Vec::new(),
            ids: HashMap::new(),
            max_groups,
            overflow: None,
            overflowed: 0,
            last_seen: Vec::new(),
        }
    }

    /// The id of `(model, surface)`, registering it if there is room; the
    /// group is seen `now`.
    pub fn id(&mut self, model: &str, surface: &str, now: Nanos) -> GroupId {
        let id = self.find_or_register(model, surface);
        self.last_seen[id as usize] = now;
        id
    }

    fn find_or_register(&mut self, model: &str, surface: &str) -> GroupId {
        if let Some(&id) = self
            .ids
            .get(model)
            .and_then(|surfaces| surfaces.get(surface))
        {
            return id;
        }
        if self.names.len() - usize::from(self.overflow.is_some()) >= self.max_groups {
            self.overflowed += 1;
            return match self.overflow {
                Some(id) => id,
                None => {
                    let id = self.register(OVERFLOW_GROUP_NAME, OVERFLOW_GROUP_NAME);
                    self.overflow = Some(id);
                    id
                }
            };
        }
        self.register(model, surface)
    }

    fn register(&mut self, model: &str, surface: &str) -> GroupId {
        let id = self.names.len() as GroupId;
        self.names.push((model.to_owned(), surface.to_owned()));
        self.last_seen.push(UNSEEN);
        self.ids
            .entry(model.to_owned())
            .or_default()
            .insert(surface.to_owned(), id);
        id
    }

    /// Readies a registry restored from saved state: it takes the running
    /// limit, and its groups' idle times start at the next sweep.
    pub(super) fn restored(&mut self, max_groups: usize) {
        self.max_groups = max_groups;
        self.last_seen = vec![UNSEEN; self.names.len()];
    }

    /// Whether each group, by id, received no impression after `before`. A
    /// group restored unseen counts as seen `now`, and is not idle.
    pub(super) fn idle(&mut self, now: Nanos, before: Nanos) -> Vec<bool> {
        self.last_seen
            .iter_mut()
            .map(|seen| {
                if *seen == UNSEEN {
                    *seen = now;
                }
                *seen <= before
            })
            .collect()
    }

    /// Removes the groups marked in `retired` (by id); the others keep their
    /// order. Returns the new id of each old one (`None`: retired).
    pub(super) fn retire(&mut self, retired: &[bool]) -> Vec<Option<GroupId>> {
        let mut next = 0;
        let new_ids: Vec<Option<GroupId>> = retired
            .iter()
            .map(|&gone| {
                (!gone).then(|| {
                    next += 1;
                    next - 1
                })
            })
            .collect();
        let mut id = 0;
        self.names.retain(|_| {
            id += 1;
            !retired[id - 1]
        });
        let mut id = 0;
        self.last_seen.retain(|_| {
            id += 1;
            !retired[id - 1]
        });
        for surfaces in self.ids.values_mut() {
            surfaces.retain(|_, id| match new_ids[*id as usize] {
                Some(new) => {
                    *id = new;
                    true
                }
                None => false,
            });
        }
        self.ids.retain(|_, surfaces| !surfaces.is_empty());
        self.overflow = self.overflow.and_then(|id| new_ids[id as usize]);
        new_ids
    }

    /// `(model, surface)` of every group, indexed by id.
    pub fn names(&self) -> &[(String, String)] {
        &self.names
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folds_groups_past_the_limit_into_overflow() {
        let mut groups = Groups::new(2);
        assert_eq!(groups.id("a", "home", 0), 0);
        assert_eq!(groups.id("b", "home", 0), 1);
        assert_eq!(groups.id("a", "home", 0), 0);
        let overflow = groups.id("c", "home", 0);
        assert_eq!(groups.id("d", "x", 0), overflow);
        assert_eq!(groups.names()[overflow as usize].0, OVERFLOW_GROUP_NAME);
        assert_eq!(groups.overflowed, 2);
    }

    #[test]
    fn retiring_a_group_frees_its_slot_and_keeps_the_others_in_order() {
        let mut groups = Groups::new(2);
        assert_eq!(groups.id("a", "home", 10), 0);
        assert_eq!(groups.id("b", "home", 20), 1);
        assert_eq!(groups.id("c", "home", 30), 2, "the overflow group");
        assert_eq!(groups.idle(40, 15), [true, false, false]);
        assert_eq!(
            groups.retire(&[true, false, false]),
            [None, Some(0), Some(1)]
        );
        assert_eq!(groups.id("b", "home", 50), 0);
        assert_eq!(groups.id("c", "home", 50), 2, "a slot is free again");
        assert_eq!(
            groups.id("d", "home", 50),
            1,
            "the overflow group kept its place"
        );
        let names: Vec<&str> = groups.names().iter().map(|(m, _)| m.as_str()).collect();
        assert_eq!(names, ["b", OVERFLOW_GROUP_NAME, "c"]);
    }

    #[test]
    fn a_restored_group_is_idle_only_after_a_full_timeout_from_the_first_sweep() {
        let mut groups = Groups::new(4);
        groups.id("a", "home", 10);
        groups.restored(4);
        assert_eq!(groups.idle(1_000, 900), [false]);
        assert_eq!(groups.idle(2_000, 1_000), [true]);
    }
}
