//! Validated domain events, built at the edge from protobuf messages or JSON
//! lines. Ids are hashed to `u64` here, once, so that the join never touches
//! strings; only group names, which people read, stay strings.

#![allow(unsafe_code)] // explained at each block (SAFETY)

pub mod hashed;
mod interleaving;
pub mod json;
mod quoted;
pub mod raw;
mod time;
mod validate;
pub mod wire;

pub use interleaving::MAX_INTERLEAVED_RANKERS;
pub use quoted::{cut_message, quoted, QUOTED_CHARS};
pub use time::{format_rfc3339, parse_rfc3339, Nanos, NANOS_PER_SECOND};
pub use validate::{
    group_name, is_grade, GradeTable, Validator, MIN_POSITIVE_GRADE, RESERVED_PREFIX,
};

use std::{borrow::Cow, fmt};

/// The hash that stands for an id string everywhere past the edge.
pub fn id_hash(id: &str) -> u64 {
    id_hash_bytes(id.as_bytes())
}

/// [`id_hash`] of an id's bytes (a Kafka record's key, its user id).
pub fn id_hash_bytes(id: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(id)
}

/// `bytes` as text, or `None` when they are not UTF-8. Ids and log lines
/// are nearly always ASCII: checking that inline is several times cheaper
/// than the full UTF-8 check, which only the rest go through.
#[inline]
fn utf8(bytes: &[u8]) -> Option<&str> {
    if bytes.is_ascii() {
        // SAFETY: ASCII bytes are valid UTF-8.
        return Some(unsafe { std::str::from_utf8_unchecked(bytes) });
    }
    std::str::from_utf8(bytes).ok()
}

/// A ranked list shown to a user, validated.
#[derive(Clone, Debug, PartialEq)]
pub struct Impression<'a> {
    /// Hash of `request_id`.
    pub request: u64,
    /// Hash of `user_id`.
    pub user: u64,
    /// Hashes of `item_ids`, rank order, distinct.
    pub items: Vec<u64>,
    /// Event time.
    pub time: Nanos,
    /// Model name, `default` when empty.
    pub model: Cow<'a, str>,
    /// Surface name, `default` when empty.
    pub surface: Cow<'a, str>,
    /// Values of the configured segment labels, in their order (`default`
    /// when absent or empty); empty when no segment label is configured.
    pub segments: Vec<Cow<'a, str>>,
    /// Which ranker contributed each item, when the list was interleaved.
    pub interleaving: Option<Interleaving<'a>>,
}

/// The rankers of an interleaved list, validated (docs/SPEC.md §12).
#[derive(Clone, Debug, PartialEq)]
pub struct Interleaving<'a> {
    /// The competing rankers, distinct, 2 to `max_interleaved_rankers`, in the order sent.
    pub rankers: Vec<Cow<'a, str>>,
    /// Per item, rank order, the index in `rankers` of the ranker that contributed it.
    pub teams: Vec<u8>,
}

/// A feedback event, validated, with its grade resolved.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Interaction {
    /// Hash of a non-empty `event_id`.
    pub event: Option<u64>,
    /// Hash of `user_id`.
    pub user: u64,
    /// Hash of `item_id`.
    pub item: u64,
    /// Hash of a non-empty `request_id`.
    pub request: Option<u64>,
    /// Event time.
    pub time: Nanos,
    /// Explicit grade, or the grade of the interaction's type.
    pub grade: f64,
    /// The interaction's type, as its index among the grade table's types (sorted by name).
    pub kind: u16,
}

/// A validated event.
#[derive(Clone, Debug, PartialEq)]
pub enum Event<'a> {
    /// A ranked list, boxed: a line of a log is parsed into room for the
    /// larger of the two, and most lines are interactions.
    Impression(Box<Impression<'a>>),
    /// A feedback event.
    Interaction(Interaction),
}

impl Event<'_> {
    /// The event's time.
    pub fn time(&self) -> Nanos {
        match self {
            Event::Impression(impression) => impression.time,
            Event::Interaction(interaction) => interaction.time,
        }
    }

    /// The hash of the event's user, which picks its shard.
    pub fn user(&self) -> u64 {
        match self {
            Event::Impression(impression) => impression.user,
            Event::Interaction(interaction) => interaction.user,
        }
    }
}

/// Why an event was rejected: stable snake_case names, part of the API.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum Reason {
    /// The line is not JSON, or not an `Event` in the proto3 JSON mapping.
    InvalidJson,
    /// Neither an impression nor an interaction.
    EmptyEvent,
    /// `user_id` is empty.
    MissingUserId,
    /// An impression's `request_id` is empty.
    MissingRequestId,
    /// An impression has no items.
    EmptyItemIds,
    /// An impression has more items than the configured limit.
    TooManyItems,
    /// An impression lists an empty item id.
    EmptyItemId,
    /// An impression lists the same item twice.
    DuplicateItemId,
    /// An interaction's `item_id` is empty.
    MissingItemId,
    /// An interaction's `type` is empty.
    MissingType,
    /// An interaction's `type` is not configured.
    UnknownType,
    /// An explicit grade is negative or not finite.
    InvalidGrade,
    /// `time` is not set.
    MissingTime,
    /// `time` is not a valid timestamp, or outside 1678–2262.
    InvalidTime,
    /// `time` is further ahead of the wall clock than the allowed skew.
    TimeInFuture,
    /// A Kafka record's value is not a `rankwatch.v1.Event` (fleet mode).
    Undecodable,
    /// A `model`, `surface` or segment label value is longer than the configured limit.
    LabelTooLong,
    /// A `model`, `surface` or segment label value is a name the server keeps for itself (it starts with `__`).
    ReservedName,
    /// A line of a replayed log is longer than `max_line_bytes` (replay).
    LineTooLong,
    /// An impression's `interleaving` is malformed: too few, too many or
    /// repeated rankers, or `teams` not one valid index per item.
    InvalidInterleaving,
}

impl Reason {
    /// Every reason, in a stable order.
    pub const ALL: [Reason; 20] = [
        Reason::InvalidJson,
        Reason::EmptyEvent,
        Reason::MissingUserId,
        Reason::MissingRequestId,
        Reason::EmptyItemIds,
        Reason::TooManyItems,
        Reason::EmptyItemId,
        Reason::DuplicateItemId,
        Reason::MissingItemId,
        Reason::MissingType,
        Reason::UnknownType,
        Reason::InvalidGrade,
        Reason::MissingTime,
        Reason::InvalidTime,
        Reason::TimeInFuture,
        Reason::Undecodable,
        Reason::LabelTooLong,
        Reason::ReservedName,
        Reason::LineTooLong,
        Reason::InvalidInterleaving,
    ];

    /// The stable name clients and dashboards see.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::InvalidJson => "invalid_json",
            Reason::EmptyEvent => "empty_event",
            Reason::MissingUserId => "missing_user_id",
            Reason::MissingRequestId => "missing_request_id",
            Reason::EmptyItemIds => "empty_item_ids",
            Reason::TooManyItems => "too_many_items",
            Reason::EmptyItemId => "empty_item_id",
            Reason::DuplicateItemId => "duplicate_item_id",
            Reason::MissingItemId => "missing_item_id",
            Reason::MissingType => "missing_type",
            Reason::UnknownType => "unknown_type",
            Reason::InvalidGrade => "invalid_grade",
            Reason::MissingTime => "missing_time",
            Reason::InvalidTime => "invalid_time",
            Reason::TimeInFuture => "time_in_future",
            Reason::Undecodable => "undecodable",
            Reason::LabelTooLong => "label_too_long",
            Reason::ReservedName => "reserved_name",
            Reason::LineTooLong => "line_too_long",
            Reason::InvalidInterleaving => "invalid_interleaving",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An event that was not accepted: the stable reason and a message a person can act on.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{reason}: {message}")]
pub struct Rejection {
    /// Stable reason.
    pub reason: Reason,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl Rejection {
    /// A rejection for `reason` with `message`.
    pub fn new(reason: Reason, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::utf8;

    #[test]
    fn reads_ascii_and_other_utf8_and_refuses_the_rest() {
        assert_eq!(utf8(b"item-42"), Some("item-42"));
        assert_eq!(utf8("caf\u{e9}".as_bytes()), Some("caf\u{e9}"));
        assert_eq!(utf8(b"caf\xe9"), None);
    }
}
