//! The promises every fuzz target checks on what validation decides: an
//! accepted event satisfies the validated types' invariants, and a
//! rejection carries a reason its input path can give and a message whose
//! size does not grow with what the client sent.

use rankwatch::event::{Event, Reason, Rejection, Validator, QUOTED_CHARS, RESERVED_PREFIX};
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

/// The path an event came in by, which decides the reasons it can be rejected for.
#[derive(Clone, Copy)]
pub enum InputPath {
    /// A replay-log line: every reason but the wall-clock check (replay has
    /// no clock) and Kafka's undecodable record.
    Line,
    /// An event of a gRPC batch: every reason but the JSON reader's and
    /// Kafka's (a malformed batch fails as a whole).
    Wire,
}

impl InputPath {
    fn gives(self, reason: Reason) -> bool {
        match self {
            InputPath::Line => !matches!(reason, Reason::TimeInFuture | Reason::Undecodable),
            InputPath::Wire => !matches!(reason, Reason::InvalidJson | Reason::Undecodable),
        }
    }
}

/// Panics unless `rejection` gives a reason its input `path` can give, with a bounded message.
pub fn check_rejection(rejection: &Rejection, path: InputPath) {
    assert!(
        path.gives(rejection.reason),
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
