//! One `Ingest` stream: sends a source's batches, paced and with a bounded
//! number in flight, and matches each ack to its batch.

use super::pacer::Pacer;
use super::report::DRAIN_TIMEOUT;
use super::sender::IngestClient;
use super::source::BatchSource;
use super::stats::{Sent, StreamStats};
use super::LoadError;
use bytes::Bytes;
use std::collections::VecDeque;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

/// How one stream sends.
#[derive(Clone, Copy, Debug)]
pub(super) struct StreamPlan {
    pub(super) rate: f64,
    pub(super) batch_size: usize,
    pub(super) max_inflight: usize,
}

/// Sends `source`'s batches on one `Ingest` stream until `stop` or until
/// they run out, then waits for the outstanding acks (at most [`DRAIN_TIMEOUT`]).
pub(super) async fn drive(
    channel: Channel,
    mut source: BatchSource,
    plan: StreamPlan,
    stop: CancellationToken,
) -> Result<StreamStats, LoadError> {
    let (batches, outbound) = mpsc::channel::<Bytes>(plan.max_inflight);
    let mut acks = IngestClient::new(channel)
        .ingest(ReceiverStream::new(outbound))
        .await?;
    let mut batches = Some(batches);
    let mut pacer = Pacer::new(plan.rate, plan.batch_size);
    let mut inflight: VecDeque<Sent> = VecDeque::with_capacity(plan.max_inflight);
    let mut stats = StreamStats::default();
    let mut sequence = 0u64;
    let drain = tokio::time::sleep(DRAIN_TIMEOUT);
    tokio::pin!(drain);
    loop {
        let sending = batches.is_some();
        if !sending && inflight.is_empty() {
            return Ok(stats);
        }
        tokio::select! {
            biased;
            message = acks.message(), if !inflight.is_empty() => {
                let ack = message?.ok_or(LoadError::Closed { unacked: inflight.len() })?;
                let sent = inflight.pop_front().ok_or(LoadError::AckOutOfOrder { expected: 0, got: ack.sequence })?;
                stats.acked(ack, sent)?;
            }
            () = stop.cancelled(), if sending => {
                batches = None;
                drain.as_mut().reset(Instant::now() + DRAIN_TIMEOUT);
            }
            () = &mut drain, if !sending => {
                tracing::warn!(unacked = inflight.len(), "no ack within {DRAIN_TIMEOUT:?}; giving up on them");
                stats.unacked = inflight.len() as u64;
                return Ok(stats);
            }
            () = pacer.ready(), if sending && inflight.len() < plan.max_inflight => {
                let Some(batch) = source.next(sequence + 1, plan.batch_size) else {
                    batches = None;
                    drain.as_mut().reset(Instant::now() + DRAIN_TIMEOUT);
                    continue;
                };
                sequence = batch.sequence;
                stats.sent(&batch);
                let Some(sender) = &batches else { continue };
                // The channel holds max_inflight batches and fewer are in flight: this never waits.
                if sender.send(batch.bytes).await.is_err() {
                    return Err(LoadError::Closed { unacked: inflight.len() });
                }
                inflight.push_back(Sent { sequence, at: Instant::now() });
                pacer.sent();
            }
        }
    }
}
