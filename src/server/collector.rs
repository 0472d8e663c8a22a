//! `rankwatch.v1.Collector`: validates each event of a batch on its own,
//! hands the batch to the engine and acknowledges it with its rejections.

use super::engine_task::{Batch, EngineHandle};
use crate::event::{Nanos, Validator};
use crate::proto::{collector_server::Collector, EventBatch, IngestAck, Rejection};
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio_stream::{wrappers::ReceiverStream, Stream};
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status, Streaming};

/// The collector service.
pub struct CollectorService {
    engine: EngineHandle,
    validator: Arc<Validator>,
    streams: Arc<Semaphore>,
    max_streams: usize,
    max_inflight_batches: usize,
    shutdown: CancellationToken,
}

impl CollectorService {
    /// A collector feeding `engine`, with at most `max_streams` concurrent
    /// ingest streams, each with at most `max_inflight_batches` unacknowledged batches.
    pub fn new(
        engine: EngineHandle,
        validator: Validator,
        max_streams: usize,
        max_inflight_batches: usize,
        shutdown: CancellationToken,
    ) -> Self {
        Self {
            engine,
            validator: Arc::new(validator),
            streams: Arc::new(Semaphore::new(max_streams)),
            max_streams,
            max_inflight_batches,
            shutdown,
        }
    }
}

/// Wall-clock time now, for the `time_in_future` check.
pub fn wall_clock() -> Nanos {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as Nanos)
}

/// Validates every event of `batch` on its own; returns what goes to the
/// engine and the acknowledgement that goes back.
fn validate(validator: &Validator, batch: &EventBatch) -> (Batch, IngestAck) {
    let now = wall_clock();
    let mut events = Vec::with_capacity(batch.events.len());
    let mut ack = IngestAck { sequence: batch.sequence, accepted: 0, rejections: Vec::new() };
    for (index, event) in batch.events.iter().enumerate() {
        match validator.proto(event, now) {
            Ok(event) => {
                ack.accepted += 1;
                events.push(Ok(event.into_owned()));
            }
            Err(rejection) => {
                ack.rejections.push(Rejection {
                    index: index as u32,
                    reason: rejection.reason.as_str().to_owned(),
                    message: rejection.message,
                });
                events.push(Err(rejection.reason));
            }
        }
    }
    metrics::counter!("rankwatch_events_received_total").increment(batch.events.len() as u64);
    (events, ack)
}

fn engine_stopped() -> Status {
    Status::unavailable("rankwatch is shutting down; retry against the restarted server")
}

type AckStream = Pin<Box<dyn Stream<Item = Result<IngestAck, Status>> + Send>>;

#[tonic::async_trait]
impl Collector for CollectorService {
    type IngestStream = AckStream;

    async fn ingest(&self, request: Request<Streaming<EventBatch>>) -> Result<Response<AckStream>, Status> {
        let Ok(permit) = self.streams.clone().try_acquire_owned() else {
            metrics::counter!("rankwatch_streams_refused_total").increment(1);
            return Err(Status::resource_exhausted(format!(
                "too many concurrent ingest streams (max_streams = {}); reuse one stream per client",
                self.max_streams
            )));
        };
        let mut inbound = request.into_inner();
        let (acks, response) = mpsc::channel(self.max_inflight_batches);
        let (pending, mut in_order) =
            mpsc::channel::<(IngestAck, Instant, oneshot::Receiver<()>)>(self.max_inflight_batches);
        let (engine, validator, shutdown) = (self.engine.clone(), self.validator.clone(), self.shutdown.clone());
        let failures = acks.clone();
        tokio::spawn(async move {
            let _permit = permit;
            metrics::gauge!("rankwatch_ingest_streams").increment(1.0);
            loop {
                let message = tokio::select! {
                    _ = shutdown.cancelled() => break,
                    message = inbound.message() => message,
                };
                let batch = match message {
                    Ok(Some(batch)) => batch,
                    Ok(None) => break,
                    Err(status) => {
                        metrics::counter!("rankwatch_streams_failed_total").increment(1);
                        let _ = failures.send(Err(status)).await;
                        break;
                    }
                };
                let started = Instant::now();
                let (events, ack) = validate(&validator, &batch);
                let Ok(applied) = engine.submit(events).await else {
                    let _ = failures.send(Err(engine_stopped())).await;
                    break;
                };
                if pending.send((ack, started, applied)).await.is_err() {
                    break;
                }
            }
            metrics::gauge!("rankwatch_ingest_streams").decrement(1.0);
        });
        tokio::spawn(async move {
            while let Some((ack, started, applied)) = in_order.recv().await {
                let reply = match applied.await {
                    Ok(()) => Ok(ack),
                    Err(_) => Err(engine_stopped()),
                };
                metrics::histogram!("rankwatch_batch_duration_seconds").record(started.elapsed().as_secs_f64());
                if acks.send(reply).await.is_err() {
                    break;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(response))))
    }

    async fn ingest_batch(&self, request: Request<EventBatch>) -> Result<Response<IngestAck>, Status> {
        let started = Instant::now();
        let (events, ack) = validate(&self.validator, request.get_ref());
        self.engine.apply(events).await.map_err(|_| engine_stopped())?;
        metrics::histogram!("rankwatch_batch_duration_seconds").record(started.elapsed().as_secs_f64());
        Ok(Response::new(ack))
    }
}
