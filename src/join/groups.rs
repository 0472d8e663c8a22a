//! The registry of `(model, surface)` groups, with a bound on how many there
//! may be: past it, new groups fold into one overflow group.

use std::collections::HashMap;

/// Index of a group in the registry.
pub type GroupId = u32;

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
        }
    }

    /// The id of `(model, surface)`, registering it if there is room.
    pub fn id(&mut self, model: &str, surface: &str) -> GroupId {
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
        self.ids
            .entry(model.to_owned())
            .or_default()
            .insert(surface.to_owned(), id);
        id
    }

    /// Sets the most named groups: a restored registry takes the running limit.
    pub(super) fn limit(&mut self, max_groups: usize) {
        self.max_groups = max_groups;
    }

    /// `(model, surface)` of every group, indexed by id.
    pub fn names(&self) -> &[(String, String)] {
        &self.names
    }

    /// Whether every id it hands out names a registered group.
    pub(super) fn is_well_formed(&self) -> bool {
        let registered = |id: &GroupId| (*id as usize) < self.names.len();
        self.overflow.as_ref().is_none_or(registered)
            && self.ids.values().flat_map(|s| s.values()).all(registered)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folds_groups_past_the_limit_into_overflow() {
        let mut groups = Groups::new(2);
        assert_eq!(groups.id("a", "home"), 0);
        assert_eq!(groups.id("b", "home"), 1);
        assert_eq!(groups.id("a", "home"), 0);
        let overflow = groups.id("c", "home");
        assert_eq!(groups.id("d", "x"), overflow);
        assert_eq!(groups.names()[overflow as usize].0, OVERFLOW_GROUP_NAME);
        assert_eq!(groups.overflowed, 2);
    }
}
