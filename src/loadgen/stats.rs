//! Counts of one stream as it sends and its acks come back, merged into the report.

use super::report::{LatencySummary, LoadReport};
use super::sender::EncodedBatch;
use super::LoadError;
use crate::proto::IngestAck;
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::time::Instant;

/// Counts of one stream, merged into the report.
#[derive(Debug, Default)]
pub(super) struct StreamStats {
    pub(super) batches: u64,
    pub(super) impressions: u64,
    pub(super) interactions: u64,
    pub(super) accepted: u64,
    pub(super) rejected: u64,
    pub(super) rejected_by_reason: BTreeMap<String, u64>,
    pub(super) unacked: u64,
    pub(super) latencies: Vec<Duration>,
}

impl StreamStats {
    pub(super) fn sent(&mut self, batch: &EncodedBatch) {
        self.batches += 1;
        self.impressions += batch.impressions;
        self.interactions += batch.interactions;
    }

    pub(super) fn acked(&mut self, ack: IngestAck, sent: Sent) -> Result<(), LoadError> {
        if ack.sequence != sent.sequence {
            return Err(LoadError::AckOutOfOrder {
                expected: sent.sequence,
                got: ack.sequence,
            });
        }
        self.latencies.push(sent.at.elapsed());
        self.accepted += u64::from(ack.accepted);
        self.rejected += ack.rejections.len() as u64;
        for rejection in ack.rejections {
            let count = self.rejected_by_reason.entry(rejection.reason).or_default();
            if *count == 0 {
                tracing::warn!(index = rejection.index, message = %rejection.message, "the server rejected an event");
            }
            *count += 1;
        }
        Ok(())
    }

    pub(super) fn merge(&mut self, other: StreamStats) {
        self.batches += other.batches;
        self.impressions += other.impressions;
        self.interactions += other.interactions;
        self.accepted += other.accepted;
        self.rejected += other.rejected;
        self.unacked += other.unacked;
        for (reason, count) in other.rejected_by_reason {
            *self.rejected_by_reason.entry(reason).or_default() += count;
        }
        self.latencies.extend(other.latencies);
    }

    pub(super) fn report(self, streams: usize, elapsed: Duration, cpu: Duration) -> LoadReport {
        let acked = self.accepted + self.rejected;
        let seconds = elapsed.as_secs_f64();
        LoadReport {
            streams,
            batches: self.batches,
            events_sent: self.impressions + self.interactions,
            impressions_sent: self.impressions,
            interactions_sent: self.interactions,
            accepted: self.accepted,
            rejected: self.rejected,
            rejected_by_reason: self.rejected_by_reason,
            unacked_batches: self.unacked,
            elapsed,
            events_per_second: if seconds > 0.0 {
                acked as f64 / seconds
            } else {
                0.0
            },
            ack_latency: LatencySummary::of(self.latencies),
            cpu,
        }
    }
}

/// A batch sent and not yet acknowledged.
#[derive(Clone, Copy, Debug)]
pub(super) struct Sent {
    pub(super) sequence: u64,
    pub(super) at: Instant,
}
