//! Validation: every event is checked on its own and either becomes a domain
//! event or a [`Rejection`] with a stable reason.

use super::raw::{EventView, LabelText, RawImpression, RawInteraction, RawTime};
use super::wire::BatchView;
use super::{id_hash, quoted, Event, Impression, Interaction, Nanos, Reason, Rejection};
use std::borrow::Cow;
use std::fmt::Display;

/// Grades of the configured interaction types.
#[derive(Clone, Debug, PartialEq)]
pub struct GradeTable {
    /// `(type, grade)`, sorted by type.
    grades: Vec<(String, f64)>,
}

impl GradeTable {
    /// A table of `(type, grade)` pairs; later pairs override earlier ones.
    pub fn new(pairs: impl IntoIterator<Item = (String, f64)>) -> Self {
        let mut grades: Vec<(String, f64)> = Vec::new();
        for (name, grade) in pairs {
            match grades.iter_mut().find(|(known, _)| *known == name) {
                Some(entry) => entry.1 = grade,
                None => grades.push((name, grade)),
            }
        }
        grades.sort_by(|a, b| a.0.cmp(&b.0));
        Self { grades }
    }

    /// The grade of interactions of type `name`.
    pub fn grade(&self, name: &str) -> Option<f64> {
        self.kind(name).map(|(_, grade)| grade)
    }

    /// The index of type `name` among the types sorted by name, and its grade.
    pub fn kind(&self, name: &str) -> Option<(u16, f64)> {
        self.grades
            .iter()
            .position(|(known, _)| known == name)
            .map(|index| (index as u16, self.grades[index].1))
    }

    /// The type names, sorted: an interaction's `kind` indexes them.
    pub fn types(&self) -> Vec<String> {
        self.grades.iter().map(|(name, _)| name.clone()).collect()
    }

    /// `(type, grade)` pairs sorted by type.
    pub fn pairs(&self) -> &[(String, f64)] {
        &self.grades
    }

    fn names(&self) -> String {
        self.grades
            .iter()
            .map(|(name, _)| name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl Default for GradeTable {
    fn default() -> Self {
        Self::new([
            ("click".into(), 1.0),
            ("add_to_cart".into(), 2.0),
            ("purchase".into(), 3.0),
        ])
    }
}

/// Checks events against the configured types and limits.
#[derive(Clone, Debug)]
pub struct Validator {
    /// Configured interaction types.
    pub grades: GradeTable,
    /// Most items one impression may list.
    pub max_items: usize,
    /// How far ahead of the wall clock an event may be; `None` disables the check.
    pub max_future_skew: Option<Nanos>,
    /// Longest `model`, `surface` or segment value, in bytes.
    pub max_label_bytes: usize,
    /// Largest grade; a larger explicit grade is rejected.
    pub max_grade: f64,
    /// Most rankers one interleaved list may merge.
    pub max_interleaved_rankers: usize,
    /// The label keys whose values become segments of a group, in order;
    /// an impression's other labels are ignored.
    pub segment_labels: Vec<String>,
}

/// The smallest positive grade: a smaller one is lost in the sums (a grade
/// of 5e-324 had made nDCG 1 for a hit at rank 2).
pub const MIN_POSITIVE_GRADE: f64 = 1e-6;

/// Whether `grade` is one a list can be evaluated with: 0, or finite and
/// at least [`MIN_POSITIVE_GRADE`] (the upper bound is a setting's).
pub fn is_grade(grade: f64) -> bool {
    grade == 0.0 || (grade.is_finite() && grade >= MIN_POSITIVE_GRADE)
}

impl Validator {
    /// Validates an event read from the wire; `batch` holds its item ids and
    /// labels, and `now` is the wall clock for the future check.
    pub fn view<'a>(
        &self,
        event: &EventView<'a>,
        batch: &BatchView<'a>,
        now: Nanos,
    ) -> Result<Event<'a>, Rejection> {
        match event {
            EventView::Empty => Err(Rejection::new(
                Reason::EmptyEvent,
                "event has neither an impression nor an interaction",
            )),
            EventView::Impression(m) => self
                .impression(
                    RawImpression {
                        request_id: m.request_id,
                        user_id: m.user_id,
                        item_ids: &batch.items[m.items.clone()],
                        time: m.time.unwrap_or(RawTime::Missing),
                        model: Cow::Borrowed(m.model),
                        surface: Cow::Borrowed(m.surface),
                        labels: &batch.labels[m.labels.clone()],
                        interleaving: match m.interleaving {
                            None => None,
                            Some(bytes) => {
                                Some(super::wire::parse_interleaving(bytes).map_err(|e| {
                                    let message =
                                        format!("interleaving cannot be read: {}", e.detail());
                                    Rejection::new(Reason::InvalidInterleaving, message)
                                })?)
                            }
                        },
                    },
                    Some(now),
                )
                .map(|m| Event::Impression(Box::new(m))),
            EventView::Interaction(x) => self.interaction(*x, Some(now)).map(Event::Interaction),
        }
    }

    /// Validates an impression; `now`, when given, enables the future check.
    pub fn impression<'m, S: AsRef<str>, L: LabelText<'m>>(
        &self,
        raw: RawImpression<'_, 'm, S, L>,
        now: Option<Nanos>,
    ) -> Result<Impression<'m>, Rejection> {
        require(
            raw.user_id,
            Reason::MissingUserId,
            "impression has no user_id",
        )?;
        require(
            raw.request_id,
            Reason::MissingRequestId,
            "impression has no request_id; set a unique id per served list",
        )?;
        if raw.item_ids.is_empty() {
            return Err(Rejection::new(
                Reason::EmptyItemIds,
                "impression has no item_ids; send the ranked list that was shown",
            ));
        }
        if raw.item_ids.len() > self.max_items {
            return Err(Rejection::new(
                Reason::TooManyItems,
                format!(
                    "impression lists {} items, more than max_items = {}",
                    raw.item_ids.len(),
                    self.max_items
                ),
            ));
        }
        let mut items = Vec::with_capacity(raw.item_ids.len());
        for (rank, id) in raw.item_ids.iter().enumerate() {
            let id = id.as_ref();
            if id.is_empty() {
                return Err(Rejection::new(
                    Reason::EmptyItemId,
                    format!("item_ids[{rank}] is empty"),
                ));
            }
            items.push(id_hash(id));
        }
        if let Some(rank) = first_repeat(&items) {
            let id = raw.item_ids[rank].as_ref();
            return Err(Rejection::new(
                Reason::DuplicateItemId,
                format!("item {} appears twice in item_ids (again at rank {}); a list shows each item once", quoted(id), rank + 1),
            ));
        }
        let time = self.time(raw.time, now)?;
        self.label("model", &raw.model)?;
        self.label("surface", &raw.surface)?;
        let segments = self.segments(raw.labels)?;
        let interleaving = match raw.interleaving {
            None => None,
            Some(interleaving) => Some(super::interleaving::validate(
                interleaving,
                items.len(),
                self.max_interleaved_rankers,
                self.max_label_bytes,
            )?),
        };
        Ok(Impression {
            request: id_hash(raw.request_id),
            user: id_hash(raw.user_id),
            items,
            time,
            model: group_name(raw.model),
            surface: group_name(raw.surface),
            segments,
            interleaving,
        })
    }

    /// Validates an interaction and resolves its grade.
    pub fn interaction(
        &self,
        raw: RawInteraction<'_>,
        now: Option<Nanos>,
    ) -> Result<Interaction, Rejection> {
        require(
            raw.user_id,
            Reason::MissingUserId,
            "interaction has no user_id",
        )?;
        require(
            raw.item_id,
            Reason::MissingItemId,
            "interaction has no item_id",
        )?;
        if raw.kind.is_empty() {
            return Err(Rejection::new(
                Reason::MissingType,
                format!(
                    "interaction has no type; configured: {}",
                    self.grades.names()
                ),
            ));
        }
        let Some((kind, type_grade)) = self.grades.kind(raw.kind) else {
            return Err(Rejection::new(
                Reason::UnknownType,
                format!(
                    "unknown interaction type {}; configured: {}",
                    quoted(raw.kind),
                    self.grades.names()
                ),
            ));
        };
        let grade = match raw.grade {
            None => type_grade,
            Some(grade) if is_grade(grade) && grade <= self.max_grade => grade,
            Some(grade) => {
                return Err(Rejection::new(
                    Reason::InvalidGrade,
                    format!(
                        "grade {grade:?} is invalid; an explicit grade is 0 or a number from {MIN_POSITIVE_GRADE:?} to max_grade = {:?}",
                        self.max_grade
                    ),
                ))
            }
        };
        let time = self.time(raw.time, now)?;
        let optional_hash = |id: &str| (!id.is_empty()).then(|| id_hash(id));
        Ok(Interaction {
            event: optional_hash(raw.event_id),
            user: id_hash(raw.user_id),
            item: id_hash(raw.item_id),
            request: optional_hash(raw.request_id),
            time,
            grade,
            kind,
        })
    }

    fn time(&self, time: RawTime, now: Option<Nanos>) -> Result<Nanos, Rejection> {
        let time = match time {
            RawTime::Missing => {
                return Err(Rejection::new(
                    Reason::MissingTime,
                    "event has no time; set the event time",
                ))
            }
            RawTime::Invalid(message) => return Err(Rejection::new(Reason::InvalidTime, message)),
            RawTime::At(time) => time,
        };
        if let (Some(now), Some(skew)) = (now, self.max_future_skew) {
            if time > now.saturating_add(skew) {
                let ahead = (time - now) as f64 / 1e9;
                return Err(Rejection::new(
                    Reason::TimeInFuture,
                    format!(
                        "time is {ahead:.3}s ahead of this server's clock, more than max_future_skew = {}s; check the sender's clock",
                        skew as f64 / 1e9
                    ),
                ));
            }
        }
        Ok(time)
    }
}

impl Validator {
    /// The values of the segment labels, in their configured order: a
    /// label that is absent or empty takes the value `default`, as model and
    /// surface do; a repeated key's last value wins. Nothing is read, checked
    /// or kept of the labels that are not segment labels.
    fn segments<'m, L: LabelText<'m>>(
        &self,
        labels: &[(L, L)],
    ) -> Result<Vec<Cow<'m, str>>, Rejection> {
        if self.segment_labels.is_empty() {
            return Ok(Vec::new());
        }
        let mut values = Vec::with_capacity(self.segment_labels.len());
        for name in &self.segment_labels {
            let value = labels
                .iter()
                .rev()
                .find(|(key, _)| key.text() == name)
                .map_or(Cow::Borrowed(""), |(_, value)| value.to_cow());
            self.label(format_args!("labels[{name:?}]"), &value)?;
            values.push(group_name(value));
        }
        Ok(values)
    }

    /// Checks a group label (`model`, `surface` or a segment value) against
    /// the length limit and the names the server keeps for itself.
    fn label(&self, field: impl Display, value: &str) -> Result<(), Rejection> {
        if value.len() > self.max_label_bytes {
            return Err(Rejection::new(
                Reason::LabelTooLong,
                format!(
                    "{field} {} is longer than max_label_bytes = {}",
                    quoted(value),
                    self.max_label_bytes
                ),
            ));
        }
        if value.starts_with(RESERVED_PREFIX) {
            return Err(Rejection::new(
                Reason::ReservedName,
                format!(
                    "{field} {} starts with {RESERVED_PREFIX:?}, which names groups of the server's own (such as __overflow__)",
                    quoted(value)
                ),
            ));
        }
        Ok(())
    }
}

/// The start of the group names the server keeps for itself: `__overflow__`, `__other__`.
pub const RESERVED_PREFIX: &str = "__";

/// A rejection for `reason` with `message` when the required `id` is empty.
fn require(id: &str, reason: Reason, message: &'static str) -> Result<(), Rejection> {
    if id.is_empty() {
        return Err(Rejection::new(reason, message));
    }
    Ok(())
}

/// The group name used for an empty `model`, `surface` or segment value.
const DEFAULT_GROUP_NAME: &str = "default";

/// The name a group is filed under for `name`: [`DEFAULT_GROUP_NAME`] for
/// an empty one.
pub fn group_name(name: Cow<'_, str>) -> Cow<'_, str> {
    if name.is_empty() {
        Cow::Borrowed(DEFAULT_GROUP_NAME)
    } else {
        name
    }
}

/// The index of the first item that repeats an earlier one.
fn first_repeat(items: &[u64]) -> Option<usize> {
    if items.len() <= 32 {
        // A bit per value of a hash's low byte: only an item whose bit is
        // already set can repeat an earlier one, so only those search.
        let mut seen = [0u64; 4];
        return (0..items.len()).find(|&i| {
            let low = items[i] as u8;
            let (word, bit) = (usize::from(low / 64), 1 << (low % 64));
            let maybe = seen[word] & bit != 0;
            seen[word] |= bit;
            maybe && items[..i].contains(&items[i])
        });
    }
    let mut sorted: Vec<(u64, usize)> = items.iter().copied().zip(0..).collect();
    sorted.sort_unstable();
    sorted
        .windows(2)
        .filter(|pair| pair[0].0 == pair[1].0)
        .map(|pair| pair[1].1.max(pair[0].1))
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn validator() -> Validator {
        Validator {
            grades: GradeTable::default(),
            max_items: 3,
            max_future_skew: Some(10),
            max_label_bytes: 8,
            max_grade: 64.0,
            max_interleaved_rankers: 8,
            segment_labels: vec!["country".to_owned(), "app".to_owned()],
        }
    }

    fn impression<'a>(items: &'a [&'a str]) -> RawImpression<'a, 'a, &'a str, &'a str> {
        RawImpression {
            request_id: "r",
            user_id: "u",
            item_ids: items,
            time: RawTime::At(5),
            model: Cow::Borrowed(""),
            surface: Cow::Borrowed("home"),
            labels: &[],
            interleaving: None,
        }
    }

    fn interaction(kind: &str) -> RawInteraction<'_> {
        RawInteraction {
            event_id: "",
            user_id: "u",
            item_id: "a",
            request_id: "",
            kind,
            time: RawTime::At(5),
            grade: None,
        }
    }

    #[test]
    fn accepts_a_valid_impression_with_default_model() {
        let event = validator()
            .impression(impression(&["a", "b"]), Some(0))
            .unwrap();
        assert_eq!(
            (&*event.model, &*event.surface, event.items.len()),
            ("default", "home", 2)
        );
    }

    #[test]
    fn rejects_each_bad_impression_with_its_reason() {
        let v = validator();
        let reason =
            |raw: RawImpression<'_, '_, &str, &str>| v.impression(raw, Some(0)).unwrap_err().reason;
        assert_eq!(reason(impression(&[])), Reason::EmptyItemIds);
        assert_eq!(
            reason(impression(&["a", "b", "c", "d"])),
            Reason::TooManyItems
        );
        assert_eq!(
            reason(impression(&["a", "b", "a"])),
            Reason::DuplicateItemId
        );
        assert_eq!(reason(impression(&["a", ""])), Reason::EmptyItemId);
        assert_eq!(
            reason(RawImpression {
                user_id: "",
                ..impression(&["a"])
            }),
            Reason::MissingUserId
        );
        assert_eq!(
            reason(RawImpression {
                request_id: "",
                ..impression(&["a"])
            }),
            Reason::MissingRequestId
        );
        assert_eq!(
            reason(RawImpression {
                time: RawTime::Missing,
                ..impression(&["a"])
            }),
            Reason::MissingTime
        );
        assert_eq!(
            reason(RawImpression {
                time: RawTime::At(11),
                ..impression(&["a"])
            }),
            Reason::TimeInFuture
        );
        assert_eq!(
            reason(RawImpression {
                model: Cow::Borrowed("nine-long"),
                ..impression(&["a"])
            }),
            Reason::LabelTooLong
        );
        assert_eq!(
            reason(RawImpression {
                surface: Cow::Borrowed("__other"),
                ..impression(&["a"])
            }),
            Reason::ReservedName
        );
    }

    #[test]
    fn reads_the_segment_labels_alone_in_their_configured_order() {
        let v = validator();
        let labels = [
            ("app", "ios"),
            ("ignored", "__anything of any length at all"),
            ("country", "fr"),
            ("country", "de"),
        ];
        let m = v
            .impression(
                RawImpression {
                    labels: &labels,
                    ..impression(&["a"])
                },
                Some(0),
            )
            .unwrap();
        assert_eq!(m.segments, ["de", "ios"], "the last country wins");
        let m = v.impression(impression(&["a"]), Some(0)).unwrap();
        assert_eq!(m.segments, ["default", "default"]);
        let unsegmented = Validator {
            segment_labels: Vec::new(),
            ..validator()
        };
        let m = unsegmented
            .impression(
                RawImpression {
                    labels: &labels,
                    ..impression(&["a"])
                },
                Some(0),
            )
            .unwrap();
        assert!(m.segments.is_empty());
    }

    #[test]
    fn rejects_long_and_reserved_segment_values_quoting_a_prefix() {
        let v = validator();
        let long = "x".repeat(10_000);
        let labels = [("country", long.as_str())];
        let rejection = v
            .impression(
                RawImpression {
                    labels: &labels,
                    ..impression(&["a"])
                },
                Some(0),
            )
            .unwrap_err();
        assert_eq!(rejection.reason, Reason::LabelTooLong);
        assert_eq!(
            rejection.message,
            format!(
                "labels[\"country\"] \"{}\"… (10000 bytes) is longer than max_label_bytes = 8",
                "x".repeat(64)
            )
        );
        let labels = [("app", "__x")];
        let rejection = v
            .impression(
                RawImpression {
                    labels: &labels,
                    ..impression(&["a"])
                },
                Some(0),
            )
            .unwrap_err();
        assert_eq!(rejection.reason, Reason::ReservedName);
        assert!(rejection.message.starts_with("labels[\"app\"] \"__x\""));
    }

    #[test]
    fn finds_repeats_in_short_lists_whose_hashes_share_a_low_byte() {
        let items: Vec<u64> = (0..32).map(|i| i << 8 | 7).collect();
        assert_eq!(first_repeat(&items), None);
        for (earlier, later) in [(0, 1), (3, 17), (30, 31)] {
            let mut repeated = items.clone();
            repeated[later] = repeated[earlier];
            assert_eq!(first_repeat(&repeated), Some(later));
        }
        assert_eq!(first_repeat(&[5, 6, 5, 6]), Some(2));
    }

    #[test]
    fn finds_repeats_in_long_lists() {
        let mut items: Vec<u64> = (0..100).collect();
        assert_eq!(first_repeat(&items), None);
        items[70] = 3;
        assert_eq!(first_repeat(&items), Some(70));
    }

    #[test]
    fn resolves_grades_and_names_configured_types() {
        let v = validator();
        assert_eq!(
            v.interaction(interaction("purchase"), None).unwrap().grade,
            3.0
        );
        let explicit = RawInteraction {
            grade: Some(0.5),
            ..interaction("click")
        };
        assert_eq!(v.interaction(explicit, None).unwrap().grade, 0.5);
        let unknown = v.interaction(interaction("clik"), None).unwrap_err();
        assert_eq!(unknown.reason, Reason::UnknownType);
        assert_eq!(
            unknown.message,
            r#"unknown interaction type "clik"; configured: add_to_cart, click, purchase"#
        );
        for bad in [-1.0, f64::NAN, f64::INFINITY] {
            let raw = RawInteraction {
                grade: Some(bad),
                ..interaction("click")
            };
            assert_eq!(
                v.interaction(raw, None).unwrap_err().reason,
                Reason::InvalidGrade
            );
        }
    }
}
