//! The registry of groups: `(model, surface)` and the values of the segment
//! labels (docs/SPEC.md §11), with bounds on how many there may be whatever clients
//! send. Past `max_segment_values` distinct values of a segment label, a new
//! value folds into `__other__`; past `max_groups`, new groups fold into one
//! overflow group. It remembers when each group last received an
//! impression, so that idle groups can be retired and their slots freed;
//! ids stay dense, in order of registration.

use crate::event::Nanos;
use serde::{Deserialize, Serialize, Serializer};
use std::collections::{BTreeMap, HashMap};

/// Index of a group in the registry.
pub type GroupId = u32;

/// When a group (or an interleaving lineup) restored from saved state was
/// last seen: unknown, so its idle time starts at the first sweep after the
/// restart.
pub(super) const UNSEEN: Nanos = Nanos::MAX;

/// Whether each entry of `last_seen` was last seen at or before `before`.
/// An entry restored unseen counts as seen `now`, and is not idle.
pub(super) fn idle_since(last_seen: &mut [Nanos], now: Nanos, before: Nanos) -> Vec<bool> {
    last_seen
        .iter_mut()
        .map(|seen| {
            if *seen == UNSEEN {
                *seen = now;
            }
            *seen <= before
        })
        .collect()
}

/// The new index of each entry of a list once those marked in `removed`
/// are removed (`None` for them).
pub(super) fn renumbered(removed: &[bool]) -> Vec<Option<u32>> {
    let mut next = 0;
    removed
        .iter()
        .map(|&gone| {
            (!gone).then(|| {
                next += 1;
                next - 1
            })
        })
        .collect()
}

/// Keeps the entries of `list` that `removed` does not mark, in order.
pub(super) fn keep_unmarked<T>(list: &mut Vec<T>, removed: &[bool]) {
    let mut index = 0;
    list.retain(|_| {
        index += 1;
        !removed.get(index - 1).copied().unwrap_or(false)
    });
}

/// The model and surface names (and segment values) of the overflow group.
const OVERFLOW_GROUP_NAME: &str = "__overflow__";

/// The value that a segment label's values fold into past `max_segment_values`.
pub const OTHER_SEGMENT_VALUE: &str = "__other__";

/// What a group is called: the labels of its series and its row of a report.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct GroupName {
    /// The model.
    pub model: String,
    /// The surface.
    pub surface: String,
    /// `(label, value)` of each segment label, in the configured order;
    /// empty when no segment label is configured.
    pub segments: Vec<(String, String)>,
}

impl GroupName {
    /// Whether this is the group that lists past `max_groups` go to, which
    /// `max_groups` does not count.
    pub fn is_overflow(&self) -> bool {
        self.model == OVERFLOW_GROUP_NAME
    }
}

/// The segment labels and the bound on their values.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SegmentSettings {
    /// The label keys whose values are dimensions of a group, in order.
    pub labels: Vec<String>,
    /// Most distinct values kept per label; later ones fold into `__other__`.
    pub max_values: usize,
}

/// The values seen of one segment label, interned to small ids.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct SegmentValues {
    label: String,
    /// Every value by id, `__other__` and `__overflow__` among them once used.
    names: Vec<String>,
    #[serde(serialize_with = "in_key_order")]
    ids: HashMap<String, u32>,
    /// Distinct values that clients sent and that were kept.
    kept: usize,
    /// Impressions whose value folded into `__other__`.
    folded: u64,
}

impl SegmentValues {
    fn new(label: &str) -> Self {
        Self {
            label: label.to_owned(),
            names: Vec::new(),
            ids: HashMap::new(),
            kept: 0,
            folded: 0,
        }
    }

    /// The id of an impression's `value`, which folds into `__other__`
    /// when `max_values` others are kept already.
    fn id(&mut self, value: &str, max_values: usize) -> u32 {
        if let Some(&id) = self.ids.get(value) {
            return id;
        }
        if self.kept >= max_values {
            self.folded += 1;
            return self.named(OTHER_SEGMENT_VALUE);
        }
        self.named(value)
    }

    /// The id of `value` as it is, registered if new: the server's own
    /// values, and the values of figures added by name.
    fn named(&mut self, value: &str) -> u32 {
        if let Some(&id) = self.ids.get(value) {
            return id;
        }
        let id = self.names.len() as u32;
        self.names.push(value.to_owned());
        self.ids.insert(value.to_owned(), id);
        if !value.starts_with(crate::event::RESERVED_PREFIX) {
            self.kept += 1;
        }
        id
    }
}

/// The groups of one `(model, surface)`: the one without segments, and
/// those of each combination of segment value ids.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct SurfaceGroups {
    plain: Option<GroupId>,
    #[serde(serialize_with = "in_key_order")]
    by_values: HashMap<Box<[u32]>, GroupId>,
}

/// Serializes `map` in key order: the same registry always saves as the
/// same bytes, whatever the hash maps' seeds.
fn in_key_order<K: Ord + Serialize, V: Serialize, S: Serializer>(
    map: &HashMap<K, V>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_map(map.iter().collect::<BTreeMap<_, _>>())
}

/// [`in_key_order`] for the models' maps of surfaces, both levels sorted.
fn surfaces_in_key_order<S: Serializer>(
    ids: &HashMap<String, HashMap<String, SurfaceGroups>>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_map(
        ids.iter()
            .map(|(model, surfaces)| (model, surfaces.iter().collect::<BTreeMap<_, _>>()))
            .collect::<BTreeMap<_, _>>(),
    )
}

/// Interns group names to dense ids.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Groups {
    names: Vec<GroupName>,
    #[serde(serialize_with = "surfaces_in_key_order")]
    ids: HashMap<String, HashMap<String, SurfaceGroups>>,
    segments: Vec<SegmentValues>,
    max_groups: usize,
    max_segment_values: usize,
    overflow: Option<GroupId>,
    /// Impressions folded into the overflow group.
    pub overflowed: u64,
    /// The value ids of the impression being placed, kept to reuse its room.
    #[serde(skip)]
    scratch: Vec<u32>,
    /// When each group last received an impression (the engine's receipt
    /// clock), by id. Not saved: a restart restarts every group's idle time.
    #[serde(skip)]
    last_seen: Vec<Nanos>,
}

impl Groups {
    /// A registry holding at most `max_groups` named groups plus the overflow group.
    pub fn new(max_groups: usize, segments: &SegmentSettings) -> Self {
        Self {
            names: Vec::new(),
            ids: HashMap::new(),
            segments: segments
                .labels
                .iter()
                .map(|l| SegmentValues::new(l))
                .collect(),
            max_groups,
            max_segment_values: segments.max_values,
            overflow: None,
            overflowed: 0,
            scratch: Vec::new(),
            last_seen: Vec::new(),
        }
    }

    /// The id of the group of an impression of `model` on `surface` with
    /// `segments`, the values of the segment labels in their order:
    /// registered if there is room, with values folded past their bound.
    /// The group is seen `now`.
    pub fn id<S: AsRef<str>>(
        &mut self,
        model: &str,
        surface: &str,
        segments: &[S],
        now: Nanos,
    ) -> GroupId {
        let id = self.find_or_register(model, surface, segments);
        self.last_seen[id as usize] = now;
        id
    }

    fn find_or_register<S: AsRef<str>>(
        &mut self,
        model: &str,
        surface: &str,
        segments: &[S],
    ) -> GroupId {
        if segments.is_empty() {
            return match self.find(model, surface, &[]) {
                Some(id) => id,
                None => self.new_group(model, surface, &[]),
            };
        }
        let mut values = std::mem::take(&mut self.scratch);
        values.clear();
        for (registry, value) in self.segments.iter_mut().zip(segments) {
            values.push(registry.id(value.as_ref(), self.max_segment_values));
        }
        let id = match self.find(model, surface, &values) {
            Some(id) => id,
            None => self.new_group(model, surface, &values),
        };
        self.scratch = values;
        id
    }

    /// The name the impression placed last would have, `model` on
    /// `surface` with its segment values folded, had it had a group of its
    /// own: what an interleaved list in the overflow group is registered
    /// under, so that its experiment is its surface's whatever the groups.
    pub fn last_placed_name(&self, model: &str, surface: &str) -> GroupName {
        let segments = self
            .segments
            .iter()
            .zip(&self.scratch)
            .map(|(registry, &value)| {
                (
                    registry.label.clone(),
                    registry.names[value as usize].clone(),
                )
            })
            .collect();
        GroupName {
            model: model.to_owned(),
            surface: surface.to_owned(),
            segments,
        }
    }

    /// The id of the group called `name`, registered as it is (its values
    /// do not fold) if there is room: how figures from elsewhere are added.
    pub fn id_of_name(&mut self, name: &GroupName) -> GroupId {
        let values: Vec<u32> = self
            .segments
            .iter_mut()
            .zip(&name.segments)
            .map(|(registry, (_, value))| registry.named(value))
            .collect();
        if let Some(id) = self.find(&name.model, &name.surface, &values) {
            return id;
        }
        if self.has_room() {
            return self.register(&name.model, &name.surface, &values);
        }
        // Figures added by name were counted where they came from.
        self.overflow_group()
    }

    fn find(&self, model: &str, surface: &str, values: &[u32]) -> Option<GroupId> {
        let groups = self.ids.get(model)?.get(surface)?;
        if values.is_empty() {
            return groups.plain;
        }
        groups.by_values.get(values).copied()
    }

    /// A new group, or the overflow group (counted) when there is no room.
    fn new_group(&mut self, model: &str, surface: &str, values: &[u32]) -> GroupId {
        if self.has_room() {
            return self.register(model, surface, values);
        }
        self.overflowed += 1;
        self.overflow_group()
    }

    /// Whether a named group may be added under `max_groups`.
    fn has_room(&self) -> bool {
        self.names.len() - usize::from(self.overflow.is_some()) < self.max_groups
    }

    /// The overflow group, registered on first use.
    fn overflow_group(&mut self) -> GroupId {
        if let Some(id) = self.overflow {
            return id;
        }
        let values: Vec<u32> = self
            .segments
            .iter_mut()
            .map(|registry| registry.named(OVERFLOW_GROUP_NAME))
            .collect();
        let id = self.register(OVERFLOW_GROUP_NAME, OVERFLOW_GROUP_NAME, &values);
        self.overflow = Some(id);
        id
    }

    fn register(&mut self, model: &str, surface: &str, values: &[u32]) -> GroupId {
        let id = self.names.len() as GroupId;
        let segments = self
            .segments
            .iter()
            .zip(values)
            .map(|(registry, &value)| {
                let value = registry.names[value as usize].clone();
                (registry.label.clone(), value)
            })
            .collect();
        self.names.push(GroupName {
            model: model.to_owned(),
            surface: surface.to_owned(),
            segments,
        });
        self.last_seen.push(UNSEEN);
        let groups = self
            .ids
            .entry(model.to_owned())
            .or_default()
            .entry(surface.to_owned())
            .or_default();
        if values.is_empty() {
            groups.plain = Some(id);
        } else {
            groups.by_values.insert(values.into(), id);
        }
        id
    }

    /// Readies a registry restored from saved state: it takes the running
    /// limits, and its groups' idle times start at the next sweep.
    pub(super) fn restored(&mut self, max_groups: usize, max_segment_values: usize) {
        self.max_groups = max_groups;
        self.max_segment_values = max_segment_values;
        self.last_seen = vec![UNSEEN; self.names.len()];
    }

    /// Whether each group, by id, received no impression after `before`. A
    /// group restored unseen counts as seen `now`, and is not idle.
    pub(super) fn idle(&mut self, now: Nanos, before: Nanos) -> Vec<bool> {
        idle_since(&mut self.last_seen, now, before)
    }

    /// Removes the groups marked in `retired` (by id); the others keep their
    /// order. Returns the new id of each old one (`None`: retired). The
    /// segment values of a retired group stay known.
    pub(super) fn retire(&mut self, retired: &[bool]) -> Vec<Option<GroupId>> {
        let new_ids = renumbered(retired);
        keep_unmarked(&mut self.names, retired);
        keep_unmarked(&mut self.last_seen, retired);
        let renumber = |id: &mut GroupId| match new_ids[*id as usize] {
            Some(new) => {
                *id = new;
                true
            }
            None => false,
        };
        for surfaces in self.ids.values_mut() {
            for groups in surfaces.values_mut() {
                groups.plain = groups
                    .plain
                    .and_then(|mut id| renumber(&mut id).then_some(id));
                groups.by_values.retain(|_, id| renumber(id));
            }
            surfaces.retain(|_, groups| groups.plain.is_some() || !groups.by_values.is_empty());
        }
        self.ids.retain(|_, surfaces| !surfaces.is_empty());
        self.overflow = self.overflow.and_then(|id| new_ids[id as usize]);
        new_ids
    }

    /// The name of every group, indexed by id.
    pub fn names(&self) -> &[GroupName] {
        &self.names
    }

    /// Per segment label, in order: the label and the impressions whose
    /// value of it folded into `__other__`.
    pub fn folded(&self) -> impl Iterator<Item = (&str, u64)> {
        self.segments.iter().map(|s| (s.label.as_str(), s.folded))
    }

    /// Per segment label, in order: the label and the distinct values
    /// kept (besides `__other__`).
    pub fn kept(&self) -> impl Iterator<Item = (&str, usize)> {
        self.segments.iter().map(|s| (s.label.as_str(), s.kept))
    }

    /// Adds the fold counts of `other` to these, label by label.
    pub(super) fn add_folded(&mut self, other: &Groups) {
        for theirs in &other.segments {
            if let Some(mine) = self.segments.iter_mut().find(|s| s.label == theirs.label) {
                mine.folded += theirs.folded;
            }
        }
    }

    /// Zeroes the fold and overflow counts: the counts stay with the
    /// instance that counted them when open state moves.
    pub(super) fn clear_counts(&mut self) {
        self.overflowed = 0;
        for segment in &mut self.segments {
            segment.folded = 0;
        }
    }

    /// Whether every id it hands out names a registered group, and every
    /// group's segment values a registered value.
    pub(super) fn is_well_formed(&self) -> bool {
        let registered = |id: &GroupId| (*id as usize) < self.names.len();
        let known_values = |values: &[u32]| {
            values.len() == self.segments.len()
                && values
                    .iter()
                    .zip(&self.segments)
                    .all(|(&value, registry)| (value as usize) < registry.names.len())
        };
        let values_well_formed = self.segments.iter().all(|registry| {
            registry.ids.len() == registry.names.len()
                && registry.ids.iter().all(|(value, &id)| {
                    registry
                        .names
                        .get(id as usize)
                        .is_some_and(|name| name == value)
                })
        });
        let surfaces = || self.ids.values().flat_map(|s| s.values());
        values_well_formed
            && self.overflow.as_ref().is_none_or(registered)
            && surfaces().all(|groups| groups.plain.as_ref().is_none_or(registered))
            && surfaces()
                .flat_map(|groups| &groups.by_values)
                .all(|(values, id)| registered(id) && known_values(values))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_segments() -> SegmentSettings {
        SegmentSettings::default()
    }

    #[test]
    fn the_same_registry_saves_as_the_same_bytes() {
        let settings = SegmentSettings {
            labels: vec!["country".to_owned()],
            max_values: 100,
        };
        let registry = || {
            let mut groups = Groups::new(1000, &settings);
            for i in 0..60 {
                let country = format!("c{}", i % 30);
                groups.id(&format!("m{}", i % 7), &format!("s{i}"), &[country], 0);
            }
            postcard::to_allocvec(&groups).unwrap()
        };
        assert_eq!(registry(), registry());
    }

    #[test]
    fn folds_groups_past_the_limit_into_overflow() {
        let mut groups = Groups::new(2, &no_segments());
        let none: [&str; 0] = [];
        assert_eq!(groups.id("a", "home", &none, 0), 0);
        assert_eq!(groups.id("b", "home", &none, 0), 1);
        assert_eq!(groups.id("a", "home", &none, 0), 0);
        let overflow = groups.id("c", "home", &none, 0);
        assert_eq!(groups.id("d", "x", &none, 0), overflow);
        assert_eq!(groups.names()[overflow as usize].model, OVERFLOW_GROUP_NAME);
        assert_eq!(groups.overflowed, 2);
    }

    #[test]
    fn folds_values_past_the_bound_into_other_per_label() {
        let settings = SegmentSettings {
            labels: vec!["country".to_owned(), "app".to_owned()],
            max_values: 2,
        };
        let mut groups = Groups::new(100, &settings);
        let de = groups.id("a", "home", &["de", "ios"], 0);
        assert_eq!(groups.id("a", "home", &["fr", "ios"], 0), de + 1);
        let other = groups.id("a", "home", &["it", "ios"], 0);
        assert_eq!(groups.id("a", "home", &["es", "ios"], 0), other);
        assert_eq!(groups.id("a", "home", &["de", "ios"], 0), de);
        assert_eq!(
            groups.names()[other as usize].segments,
            [
                ("country".to_owned(), OTHER_SEGMENT_VALUE.to_owned()),
                ("app".to_owned(), "ios".to_owned())
            ]
        );
        let folded: Vec<(&str, u64)> = groups.folded().collect();
        assert_eq!(folded, [("country", 2), ("app", 0)]);
        assert_eq!(
            groups.id_of_name(&groups.names()[other as usize].clone()),
            other
        );
    }

    #[test]
    fn the_overflow_group_bounds_the_combinations_of_values() {
        let settings = SegmentSettings {
            labels: vec!["country".to_owned()],
            max_values: 20,
        };
        let mut groups = Groups::new(3, &settings);
        for country in ["de", "fr", "it", "es", "pt"] {
            groups.id("a", "home", &[country], 0);
        }
        assert_eq!(groups.names().len(), 4);
        let overflow = &groups.names()[3];
        assert_eq!(
            overflow.segments,
            [("country".to_owned(), OVERFLOW_GROUP_NAME.to_owned())]
        );
        assert_eq!(groups.overflowed, 2);
        assert_eq!(groups.folded().next(), Some(("country", 0)));
    }

    #[test]
    fn retiring_a_group_frees_its_slot_and_keeps_the_others_in_order() {
        let mut groups = Groups::new(2, &no_segments());
        let none: [&str; 0] = [];
        assert_eq!(groups.id("a", "home", &none, 10), 0);
        assert_eq!(groups.id("b", "home", &none, 20), 1);
        assert_eq!(groups.id("c", "home", &none, 30), 2, "the overflow group");
        assert_eq!(groups.idle(40, 15), [true, false, false]);
        assert_eq!(
            groups.retire(&[true, false, false]),
            [None, Some(0), Some(1)]
        );
        assert_eq!(groups.id("b", "home", &none, 50), 0);
        assert_eq!(groups.id("c", "home", &none, 50), 2, "a slot is free again");
        assert_eq!(
            groups.id("d", "home", &none, 50),
            1,
            "the overflow group kept its place"
        );
        let names: Vec<&str> = groups.names().iter().map(|n| n.model.as_str()).collect();
        assert_eq!(names, ["b", OVERFLOW_GROUP_NAME, "c"]);
    }

    #[test]
    fn retiring_a_segmented_group_keeps_its_siblings() {
        let settings = SegmentSettings {
            labels: vec!["country".to_owned()],
            max_values: 20,
        };
        let mut groups = Groups::new(10, &settings);
        assert_eq!(groups.id("a", "home", &["de"], 10), 0);
        assert_eq!(groups.id("a", "home", &["fr"], 20), 1);
        assert_eq!(groups.retire(&[true, false]), [None, Some(0)]);
        assert_eq!(groups.id("a", "home", &["fr"], 30), 0);
        assert_eq!(groups.id("a", "home", &["de"], 30), 1, "registered anew");
    }

    #[test]
    fn a_restored_group_is_idle_only_after_a_full_timeout_from_the_first_sweep() {
        let mut groups = Groups::new(4, &no_segments());
        groups.id("a", "home", &[] as &[&str], 10);
        groups.restored(4, 20);
        assert_eq!(groups.idle(1_000, 900), [false]);
        assert_eq!(groups.idle(2_000, 1_000), [true]);
    }
}
