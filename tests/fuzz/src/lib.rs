//! The promises every fuzz target checks on what validation decides: an
//! accepted event satisfies the validated types' invariants, and a
//! rejection carries a reason its input path can give and a message whose
//! size does not grow with what the client sent.

use rankwatch::event::{Event, Reason, Rejection, Validator, QUOTED_CHARS};
use std::collections::HashSet;

/// Longest message a rejection may carry. A quoted client value is at most
/// `QUOTED_CHARS` characters of at most 10 bytes each once escaped
/// (`\u{10ffff}`); a parser's message is cut to 256 characters of at most
/// 4 bytes each. Either comes with less than 256 bytes of fixed text and
/// lengths.
pub const MESSAGE_BYTES: usize = if QUOTED_CHARS * 10 > 256 * 4 {
    QUOTED_CHARS * 10
} else {
    256 * 4
} + 256;

/// The start of the group names the server keeps for itself.
const RESERVED_PREFIX: &str = "__";

/// Reasons a replay-log line can be rejected for: every reason but the
/// wall-clock check (replay has no clock) and Kafka's undecodable record.
pub const LINE_REASONS: &[Reason] = &[
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
    Reason::LabelTooLong,
    Reason::ReservedName,
];

/// Reasons an event of a gRPC batch can be rejected for: every reason but
/// the JSON reader's and Kafka's (a malformed batch fails as a whole).
pub const WIRE_REASONS: &[Reason] = &[
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
    Reason::LabelTooLong,
    Reason::ReservedName,
];

/// Panics unless `rejection` gives one of `reasons` and a bounded message.
pub fn check_rejection(rejection: &Rejection, reasons: &[Reason]) {
    assert!(
        reasons.contains(&rejection.reason),
        "rejected for {}, which this input path never gives",
        rejection.reason
    );
    assert!(
        rejection.message.len() <= MESSAGE_BYTES,
        "a {} message of {} bytes, more than {MESSAGE_BYTES}",
        rejection.reason,
        rejection.message.len()
    );
    assert!(
        !rejection.message.contains('\n'),
        "a {} message spans lines",
        rejection.reason
    );
}

/// Panics unless the accepted `event` keeps the promises of the validated
/// types under `validator`.
pub fn check_accepted(event: &Event<'_>, validator: &Validator) {
    match event {
        Event::Impression(impression) => {
            let count = impression.items.len();
            assert!(
                (1..=validator.max_items).contains(&count),
                "accepted an impression with {count} items"
            );
            let distinct: HashSet<u64> = impression.items.iter().copied().collect();
            assert_eq!(
                distinct.len(),
                count,
                "accepted an impression with repeated item hashes"
            );
            for label in [&impression.model, &impression.surface] {
                assert!(!label.is_empty(), "accepted an empty group label");
                assert!(
                    label.len() <= validator.max_label_bytes,
                    "accepted a label of {} bytes",
                    label.len()
                );
                assert!(
                    !label.starts_with(RESERVED_PREFIX),
                    "accepted the reserved label {label:?}"
                );
            }
        }
        Event::Interaction(interaction) => {
            let grade = interaction.grade;
            assert!(
                grade.is_finite() && grade >= 0.0,
                "accepted an interaction with grade {grade}"
            );
            assert!(
                usize::from(interaction.kind) < validator.grades.pairs().len(),
                "accepted an interaction of unknown kind {}",
                interaction.kind
            );
        }
    }
}
