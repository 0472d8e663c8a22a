//! Relay mode: the gRPC `Collector` API stays as it is for the serving pod;
//! each batch is validated as in `serve` (rejections as in `serve`), and its
//! accepted events are produced to the topic keyed by `user_id`. The ack of
//! a batch is sent only once the broker has acknowledged every one of its
//! records, so an acknowledged event is durable. While the broker is
//! unreachable acks wait; past `kafka_delivery_timeout` the stream fails with
//! UNAVAILABLE, and the client resends what was not acknowledged.
//!
//! It evaluates nothing: its engine only counts rejections for `/metrics`.

use super::FleetSettings;
use crate::event::wire::{event_bytes, parse_batch};
use crate::event::Validator;
use crate::export::{Report, ReportConfig, Snapshot};
use crate::join::Engine;
use crate::proto::{IngestAck, Rejection};
use crate::server::{Applied, Command, EngineHandle, RawBatch};
use rdkafka::error::KafkaError;
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::{mpsc, oneshot};

/// The relay's producer and what it checks batches with.
struct Relay {
    producer: FutureProducer,
    topic: String,
    validator: Validator,
    engine: Engine,
    report: ReportConfig,
}

/// Starts the relay; the handle takes batches as the engine's does.
pub fn start(
    settings: &FleetSettings,
    engine: Engine,
    engine_settings: crate::config::EngineSettings,
    validator: Validator,
    capacity: usize,
) -> Result<EngineHandle, KafkaError> {
    let producer: FutureProducer = settings
        .client()
        .set("acks", "all")
        // Java's default partitioner (murmur2 of the key), which most
        // producers of a topic use: all producers of a topic must agree.
        .set("partitioner", "murmur2_random")
        // Not idempotent: a client resends what was not acknowledged
        // anyway, and brokers differ in how they keep producer state
        // across a restart.
        .set("enable.idempotence", "false")
        .set("linger.ms", "1")
        .set(
            "message.timeout.ms",
            settings.delivery_timeout.as_millis().to_string(),
        )
        .create()?;
    let relay = Relay {
        producer,
        topic: settings.topic.clone(),
        validator,
        engine,
        report: engine_settings.report_config(),
    };
    let (handle, commands) = EngineHandle::channel(capacity);
    tokio::spawn(relay.run(commands));
    Ok(handle)
}

impl Relay {
    async fn run(mut self, mut commands: mpsc::Receiver<Command>) {
        while let Some(command) = commands.recv().await {
            match command {
                Command::Apply {
                    batch,
                    stream_failed,
                    done,
                } => self.relay(batch, stream_failed, done).await,
                Command::AdvanceIfIdle { .. } | Command::RetireIdleGroups { .. } => {}
                Command::Snapshot { reply } => {
                    let _ = reply.send(Snapshot::of(
                        &self.engine,
                        self.report.control_model.clone(),
                    ));
                }
                Command::Report { window, reply } => {
                    let report = match window {
                        None => Report::since_start(&self.engine, &self.report),
                        Some(index) => Report::window(&self.engine, &self.report, index),
                    };
                    let _ = reply.send(report);
                }
                Command::State { reply } => {
                    let _ = reply.send(self.engine.to_state());
                }
            }
        }
    }

    /// Validates a batch and produces its accepted events; its ack goes out
    /// once the broker has them all, from a task of its own, so that the
    /// next batch is produced meanwhile.
    async fn relay(
        &mut self,
        batch: RawBatch,
        stream_failed: Arc<AtomicBool>,
        done: oneshot::Sender<Applied>,
    ) {
        if stream_failed.load(Ordering::Relaxed) {
            return;
        }
        let (ack, accepted) = match self.validate(&batch) {
            Ok(checked) => checked,
            Err(malformed) => {
                stream_failed.store(true, Ordering::Relaxed);
                let _ = done.send(Err(malformed));
                return;
            }
        };
        let mut deliveries = Vec::with_capacity(accepted.len());
        for (key, value) in accepted {
            match self.produce(key, value).await {
                Ok(delivery) => deliveries.push(delivery),
                Err(error) => {
                    failed(&stream_failed, &error.to_string());
                    return;
                }
            }
        }
        tokio::spawn(await_deliveries(deliveries, ack, stream_failed, done));
    }

    /// The batch's ack (rejections filled in) and the key and value of each
    /// accepted event: its `user_id`, and the `Event` as the client encoded it.
    #[allow(clippy::type_complexity)]
    fn validate<'b>(
        &mut self,
        batch: &'b RawBatch,
    ) -> Result<(IngestAck, Vec<(&'b str, &'b [u8])>), crate::event::wire::WireError> {
        let view = parse_batch(&batch.0)?;
        let encoded = event_bytes(&batch.0)?;
        let now = crate::clock::wall_clock();
        let mut ack = IngestAck {
            sequence: view.sequence,
            accepted: 0,
            rejections: Vec::new(),
        };
        let mut accepted = Vec::with_capacity(view.events.len());
        for (index, (event, bytes)) in view.events.iter().zip(encoded).enumerate() {
            match self.validator.view(event, &view, now) {
                Ok(_) => {
                    accepted.push((event.user_id().unwrap_or_default(), bytes));
                    ack.accepted += 1;
                }
                Err(rejection) => {
                    self.engine.reject(rejection.reason);
                    ack.rejections.push(Rejection {
                        index: index as u32,
                        reason: rejection.reason.as_str().to_owned(),
                        message: rejection.message,
                    });
                }
            }
        }
        Ok((ack, accepted))
    }

    /// Queues one record (waiting while the client's queue is full).
    async fn produce(&self, key: &str, value: &[u8]) -> Result<DeliveryFuture, KafkaError> {
        loop {
            let record = FutureRecord::to(&self.topic).key(key).payload(value);
            match self.producer.send_result(record) {
                Ok(delivery) => return Ok(delivery),
                Err((
                    KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull),
                    _,
                )) => {
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
                Err((error, _)) => return Err(error),
            }
        }
    }
}

/// Sends the ack once every record is stored; drops it (the stream fails
/// with UNAVAILABLE) when one is not.
async fn await_deliveries(
    deliveries: Vec<DeliveryFuture>,
    ack: IngestAck,
    stream_failed: Arc<AtomicBool>,
    done: oneshot::Sender<Applied>,
) {
    let started = Instant::now();
    let produced = deliveries.len() as u64;
    for delivery in deliveries {
        match delivery.await {
            Ok(Ok(_)) => {}
            Ok(Err((error, _))) => return failed(&stream_failed, &error.to_string()),
            Err(_) => return failed(&stream_failed, "the producer went away"),
        }
    }
    metrics::counter!("rankwatch_kafka_produced_events_total").increment(produced);
    metrics::histogram!("rankwatch_kafka_delivery_seconds").record(started.elapsed().as_secs_f64());
    let _ = done.send(Ok(ack));
}

fn failed(stream_failed: &AtomicBool, error: &str) {
    if !stream_failed.swap(true, Ordering::Relaxed) {
        metrics::counter!("rankwatch_kafka_produce_failures_total").increment(1);
        tracing::warn!(
            error,
            "the broker did not store a batch; its stream fails with UNAVAILABLE"
        );
    }
}
