//! `rankwatch.v1.Collector`: hands each batch to the engine task, which
//! reads, validates and applies it event by event, and acknowledges it with
//! its rejections, in order.

use super::codec::RawBatch;
use super::engine_task::{Applied, EngineHandle};
use super::tasks::Tasks;
use super::telemetry::{
    BATCH_DURATION_SECONDS, INGEST_STREAMS, STREAMS_FAILED_TOTAL, STREAMS_REFUSED_TOTAL,
};
use super::wire_service::collector_server::Collector;
use crate::proto::IngestAck;
use std::pin::Pin;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;
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
    shutdown: CancellationToken,
    tasks: Tasks,
}

impl CollectorService {
    /// A collector feeding `engine`, with at most `max_streams` concurrent
    /// ingest streams, each with at most `max_inflight_batches` unacknowledged
    /// batches; the tasks of each stream are tracked by `tasks`.
    pub fn new(
        engine: EngineHandle,
        max_streams: usize,
        max_inflight_batches: usize,
        shutdown: CancellationToken,
        tasks: Tasks,
    ) -> Self {
        Self {
            engine,
            streams: Arc::new(Semaphore::new(max_streams)),
            max_streams,
            max_inflight_batches,
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

type AckStream = Pin<Box<dyn Stream<Item = Result<IngestAck, Status>> + Send>>;
type Pending = (Instant, oneshot::Receiver<Applied>);

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
        let mut inbound = request.into_inner();
        let (acks, response) = mpsc::channel(self.max_inflight_batches);
        let (pending, mut in_order) = mpsc::channel::<Pending>(self.max_inflight_batches);
        let (engine, shutdown) = (self.engine.clone(), self.shutdown.clone());
        let failures = acks.clone();
        let stream_failed = Arc::new(AtomicBool::new(false));
        self.tasks.spawn(async move {
            let _permit = permit;
            metrics::gauge!(INGEST_STREAMS).increment(1.0);
            loop {
                let message = tokio::select! {
                    _ = shutdown.cancelled() => break,
                    message = inbound.message() => message,
                };
                let batch = match message {
                    Ok(Some(batch)) => batch,
                    Ok(None) => break,
                    Err(status) => {
                        metrics::counter!(STREAMS_FAILED_TOTAL).increment(1);
                        let _ = failures.send(Err(status)).await;
                        break;
                    }
                };
                let started = Instant::now();
                let Ok(applied) = engine.submit(batch, stream_failed.clone()).await else {
                    let _ = failures.send(Err(engine_stopped())).await;
                    break;
                };
                if pending.send((started, applied)).await.is_err() {
                    break;
                }
            }
            metrics::gauge!(INGEST_STREAMS).decrement(1.0);
        });
        self.tasks.spawn(async move {
            while let Some((started, applied)) = in_order.recv().await {
                let reply = reply(applied.await.ok());
                metrics::histogram!(BATCH_DURATION_SECONDS).record(started.elapsed().as_secs_f64());
                let failed = reply.is_err();
                if acks.send(reply).await.is_err() || failed {
                    break;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(response))))
    }

    async fn ingest_batch(
        &self,
        request: Request<RawBatch>,
    ) -> Result<Response<IngestAck>, Status> {
        let started = Instant::now();
        let ack = reply(self.engine.apply(request.into_inner()).await.ok())?;
        metrics::histogram!(BATCH_DURATION_SECONDS).record(started.elapsed().as_secs_f64());
        Ok(Response::new(ack))
    }
}
