//! `rankwatch.v1.Collector`: hands each batch to the engine task, which
//! reads, validates and applies it event by event, and acknowledges it with
//! its rejections, in order.

use super::tasks::Tasks;
use super::telemetry::{
    BATCH_DURATION_SECONDS, INGEST_STREAMS, STREAMS_FAILED_TOTAL, STREAMS_REFUSED_TOTAL,
    STREAMS_TIMED_OUT_TOTAL,
};
use super::wire_service::collector_server::Collector;
use crate::engine::RawBatch;
use crate::engine::{Applied, EngineHandle};
use crate::proto::IngestAck;
use std::pin::Pin;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio_stream::{wrappers::ReceiverStream, Stream};
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status, Streaming};

/// The collector service.
pub struct CollectorService {
    engine: EngineHandle,
    streams: Arc<Semaphore>,
    max_streams: usize,
    max_inflight_batches: usize,
    /// Unary `IngestBatch` calls in flight, at most `max_inflight_batches`.
    calls: Arc<Semaphore>,
    /// How long an `Ingest` stream may send nothing before it is ended.
    idle_timeout: Duration,
    shutdown: CancellationToken,
    tasks: Tasks,
}

impl CollectorService {
    /// A collector feeding `engine`, with at most `max_streams` concurrent
    /// ingest streams, each with at most `max_inflight_batches` unacknowledged
    /// batches and ended after `idle_timeout` without a batch, and at most
    /// `max_inflight_batches` unary calls in flight; the tasks of each
    /// stream are tracked by `tasks`.
    pub fn new(
        engine: EngineHandle,
        max_streams: usize,
        max_inflight_batches: usize,
        idle_timeout: Duration,
        shutdown: CancellationToken,
        tasks: Tasks,
    ) -> Self {
        Self {
            engine,
            streams: Arc::new(Semaphore::new(max_streams)),
            max_streams,
            max_inflight_batches,
            calls: Arc::new(Semaphore::new(max_inflight_batches)),
            idle_timeout,
            shutdown,
            tasks,
        }
    }
}

fn engine_stopped() -> Status {
    Status::unavailable(
        "rankwatch could not take the batch (it is shutting down, or its event log is unreachable); resend what was not acknowledged",
    )
}

/// The reply to a batch: its ack, or the status that ends the RPC
/// (`None`: the engine stopped before answering).
fn reply(applied: Option<Applied>) -> Result<IngestAck, Status> {
    match applied {
        Some(Ok(ack)) => Ok(ack),
        Some(Err(malformed)) => {
            metrics::counter!(STREAMS_FAILED_TOTAL).increment(1);
            Err(Status::invalid_argument(malformed.to_string()))
        }
        None => Err(engine_stopped()),
    }
}

/// The status that ends a stream at shutdown: retryable, after the acks
/// of every batch that was applied.
fn shut_down_mid_stream() -> Status {
    Status::unavailable(
        "rankwatch is shutting down: the batches acknowledged on this stream were applied; resend the rest to the restarted server",
    )
}

/// The status that ends a stream that sent nothing for `idle_timeout`.
fn idle_stream(idle_timeout: Duration) -> Status {
    Status::unavailable(format!(
        "no batch for {} (ingest_idle_timeout); the stream is closed, open a new one to send more",
        humantime::format_duration(idle_timeout)
    ))
}

type AckStream = Pin<Box<dyn Stream<Item = Result<IngestAck, Status>> + Send>>;

/// What a stream's acks wait for, in order: a batch's answer, or the end of the stream.
enum Pending {
    /// A batch queued at `Instant`, and where its answer will come.
    Batch(Instant, oneshot::Receiver<Applied>),
    /// The stream ends with this status once the batches before it are acknowledged.
    End(Status),
}

/// The reading half of an `Ingest` stream: hands each batch to the engine
/// in arrival order and queues its pending ack.
struct BatchReader {
    engine: EngineHandle,
    shutdown: CancellationToken,
    idle_timeout: Duration,
    /// Where an ack fails when the engine has stopped.
    failures: mpsc::Sender<Result<IngestAck, Status>>,
}

impl BatchReader {
    /// Reads `inbound` until it ends, fails, idles past the timeout or the
    /// server shuts down; each batch's pending ack goes to `pending`.
    async fn read(self, mut inbound: Streaming<RawBatch>, pending: mpsc::Sender<Pending>) {
        let stream_failed = Arc::new(AtomicBool::new(false));
        loop {
            let message = tokio::select! {
                _ = self.shutdown.cancelled() => {
                    let _ = pending.send(Pending::End(shut_down_mid_stream())).await;
                    return;
                }
                message = tokio::time::timeout(self.idle_timeout, inbound.message()) => message,
            };
            let Ok(message) = message else {
                metrics::counter!(STREAMS_TIMED_OUT_TOTAL).increment(1);
                let _ = pending
                    .send(Pending::End(idle_stream(self.idle_timeout)))
                    .await;
                return;
            };
            let batch = match message {
                Ok(Some(batch)) => batch,
                Ok(None) => return,
                Err(status) => {
                    if !super::message_limit::counted_where_found(&status) {
                        metrics::counter!(STREAMS_FAILED_TOTAL).increment(1);
                    }
                    // After the acks of the batches before it.
                    let _ = pending.send(Pending::End(status)).await;
                    return;
                }
            };
            let started = Instant::now();
            let Ok(applied) = self.engine.submit(batch, stream_failed.clone()).await else {
                let _ = self.failures.send(Err(engine_stopped())).await;
                return;
            };
            if pending
                .send(Pending::Batch(started, applied))
                .await
                .is_err()
            {
                return;
            }
        }
    }
}

/// The answering half of an `Ingest` stream: sends each batch's ack once
/// it is applied, in the order the batches came.
async fn acknowledge_in_order(
    mut in_order: mpsc::Receiver<Pending>,
    acks: mpsc::Sender<Result<IngestAck, Status>>,
) {
    while let Some(next) = in_order.recv().await {
        let (started, applied) = match next {
            Pending::Batch(started, applied) => (started, applied),
            Pending::End(status) => {
                let _ = acks.send(Err(status)).await;
                break;
            }
        };
        let reply = reply(applied.await.ok());
        metrics::histogram!(BATCH_DURATION_SECONDS).record(started.elapsed().as_secs_f64());
        let failed = reply.is_err();
        if acks.send(reply).await.is_err() || failed {
            break;
        }
    }
}

#[tonic::async_trait]
impl Collector for CollectorService {
    type IngestStream = AckStream;

    async fn ingest(
        &self,
        request: Request<Streaming<RawBatch>>,
    ) -> Result<Response<AckStream>, Status> {
        let Ok(permit) = self.streams.clone().try_acquire_owned() else {
            metrics::counter!(STREAMS_REFUSED_TOTAL).increment(1);
            return Err(Status::resource_exhausted(format!(
                "too many concurrent ingest streams (max_streams = {}); reuse one stream per client",
                self.max_streams
            )));
        };
        let (acks, response) = mpsc::channel(self.max_inflight_batches);
        let (pending, in_order) = mpsc::channel::<Pending>(self.max_inflight_batches);
        let reader = BatchReader {
            engine: self.engine.clone(),
            shutdown: self.shutdown.clone(),
            idle_timeout: self.idle_timeout,
            failures: acks.clone(),
        };
        let inbound = request.into_inner();
        self.tasks.spawn(async move {
            let _permit = permit;
            metrics::gauge!(INGEST_STREAMS).increment(1.0);
            reader.read(inbound, pending).await;
            metrics::gauge!(INGEST_STREAMS).decrement(1.0);
        });
        self.tasks.spawn(acknowledge_in_order(in_order, acks));
        Ok(Response::new(Box::pin(ReceiverStream::new(response))))
    }

    async fn ingest_batch(
        &self,
        request: Request<RawBatch>,
    ) -> Result<Response<IngestAck>, Status> {
        let started = Instant::now();
        let Ok(_call) = self.calls.try_acquire() else {
            metrics::counter!(STREAMS_REFUSED_TOTAL).increment(1);
            return Err(Status::resource_exhausted(format!(
                "too many IngestBatch calls in flight (max_inflight_batches = {}); retry later, or send over one Ingest stream",
                self.max_inflight_batches
            )));
        };
        let ack = reply(self.engine.apply(request.into_inner()).await.ok())?;
        metrics::histogram!(BATCH_DURATION_SECONDS).record(started.elapsed().as_secs_f64());
        Ok(Response::new(ack))
    }
}
