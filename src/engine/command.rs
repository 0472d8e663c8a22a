//! What an engine is asked to do, and its answer to a batch: the protocol
//! between an [`super::EngineHandle`] and whoever answers it (a local
//! engine's owner task, or fleet mode's relay and consumer).

use super::RawBatch;
use crate::event::wire::WireError;
use crate::event::Nanos;
use crate::export::{Report, Snapshot};
use crate::join::{EncodedState, StatePieces};
use crate::proto::IngestAck;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use tokio::sync::oneshot;

/// The engine's answer to a batch: its ack, or why its bytes are not a batch.
pub type Applied = Result<IngestAck, WireError>;

/// What the engine task is asked to do (in fleet mode, the relay or the
/// consumer's figures answer instead).
pub enum Command {
    /// Apply a batch of a stream and send its ack to `done`.
    Apply {
        /// The batch, undecoded.
        batch: RawBatch,
        /// Set once a batch of the stream is malformed: its later batches are dropped.
        stream_failed: Arc<AtomicBool>,
        /// Where the ack goes.
        done: oneshot::Sender<Applied>,
    },
    /// Move the watermark to the wall clock `now` if no event raised it since the last time.
    AdvanceIfIdle {
        /// The wall clock.
        now: Nanos,
    },
    /// Retire the groups that received no impression during `idle` up to `now`.
    RetireIdleGroups {
        /// The wall clock.
        now: Nanos,
        /// How long a group may go without an impression.
        idle: Nanos,
    },
    /// Send the figures now.
    Snapshot {
        /// Where the answer goes.
        reply: oneshot::Sender<Snapshot>,
    },
    /// Send the report since start (`None`) or for rolling window `index`.
    Report {
        /// `None`: since start; else the index of a rolling window.
        window: Option<usize>,
        /// Where the answer goes.
        reply: oneshot::Sender<Report>,
    },
    /// Send the state to save, encoded.
    State {
        /// The pieces of the last save, to encode into first.
        spare: StatePieces,
        /// Where the answer goes.
        reply: oneshot::Sender<postcard::Result<EncodedState>>,
    },
}
