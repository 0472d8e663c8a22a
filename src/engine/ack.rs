//! The ack of a batch, bounded whatever the batch holds: the first
//! `max_ack_rejections` rejections are detailed (index, reason, message),
//! the rest only counted by reason. A 4 MB batch of two million empty
//! events would otherwise be answered by an ack some 35 times its size.

use crate::proto::{IngestAck, Rejection, RejectionCount};
use std::collections::BTreeMap;

/// Builds one batch's ack.
pub struct AckBuilder {
    ack: IngestAck,
    max_detailed: usize,
    counted: BTreeMap<&'static str, u32>,
}

impl AckBuilder {
    /// The ack of batch `sequence`, detailing at most `max_detailed` rejections.
    pub fn new(sequence: u64, max_detailed: usize) -> Self {
        Self {
            ack: IngestAck {
                sequence,
                ..IngestAck::default()
            },
            max_detailed,
            counted: BTreeMap::new(),
        }
    }

    /// Counts an accepted event.
    pub fn accept(&mut self) {
        self.ack.accepted += 1;
    }

    /// Records that event `index` was not accepted, for `reason`; `message`
    /// is made only when the rejection is detailed.
    pub fn reject(&mut self, index: usize, reason: &'static str, message: impl FnOnce() -> String) {
        if self.ack.rejections.len() < self.max_detailed {
            self.ack.rejections.push(Rejection {
                index: u32::try_from(index).unwrap_or(u32::MAX),
                reason: reason.to_owned(),
                message: message(),
            });
        } else {
            *self.counted.entry(reason).or_default() += 1;
        }
    }

    /// The ack: detailed rejections, then the others counted by reason.
    pub fn finish(mut self) -> IngestAck {
        self.ack.more_rejections = self
            .counted
            .into_iter()
            .map(|(reason, count)| RejectionCount {
                reason: reason.to_owned(),
                count,
            })
            .collect();
        self.ack
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejections_past_the_bound_are_counted_by_reason() {
        let mut ack = AckBuilder::new(7, 2);
        ack.accept();
        for index in 1..6 {
            let reason = if index % 2 == 0 {
                "empty_event"
            } else {
                "missing_user_id"
            };
            ack.reject(index, reason, || format!("event {index}"));
        }
        let ack = ack.finish();
        assert_eq!((ack.sequence, ack.accepted), (7, 1));
        let detailed: Vec<_> = ack
            .rejections
            .iter()
            .map(|r| (r.index, r.reason.as_str()))
            .collect();
        assert_eq!(detailed, [(1, "missing_user_id"), (2, "empty_event")]);
        let counted: Vec<_> = ack
            .more_rejections
            .iter()
            .map(|c| (c.reason.as_str(), c.count))
            .collect();
        assert_eq!(counted, [("empty_event", 1), ("missing_user_id", 2)]);
    }
}
