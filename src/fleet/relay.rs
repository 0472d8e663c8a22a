//! Relay mode: the gRPC `Collector` API stays as it is for the serving pod;
//! each batch is validated as in `serve` (rejections as in `serve`), and its
//! accepted events are produced to the topic keyed by `user_id`. The ack of
//! a batch is sent only once the broker has acknowledged every one of its
//! records, so an acknowledged event is durable. While the broker is
//! unreachable acks wait; past `kafka_delivery_timeout` the stream fails with
//! UNAVAILABLE, and the client resends what was not acknowledged.
//!
//! It evaluates nothing: its engine only counts the events it takes and
//! rejects, for `/metrics`.

use super::reports::{self, ReportQueue};
use super::FleetSettings;
use crate::engine::{AckBuilder, Applied, Command, EngineHandle, RawBatch};
use crate::event::wire::{parse_batch_with_events, WireError};
use crate::event::Validator;
use crate::export::{Report, ReportConfig, Snapshot};
use crate::join::Engine;
use crate::proto::IngestAck;
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientContext;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

/// How long a batch waits before trying again when the producer's queue is full.
const QUEUE_FULL_WAIT: Duration = Duration::from_millis(5);

/// The relay's producer and what it checks batches with.
struct Relay {
    producer: Arc<BaseProducer<Deliveries>>,
    /// The task that runs the producer's delivery callbacks.
    reports: tokio::task::JoinHandle<()>,
    topic: String,
    validator: Validator,
    engine: Engine,
    report: ReportConfig,
    /// Most rejections an ack details.
    max_ack_rejections: usize,
    /// Accepted events the broker stored, counted as their batches' acks go out.
    relayed: Arc<AtomicU64>,
}

/// Starts the relay; the handle takes batches as the engine's does.
///
/// The producer's settings, and why:
/// - `acks=all`: a batch is acknowledged only once every replica has it.
/// - `partitioner=murmur2_random`: Java's default (murmur2 of the key),
///   which most producers of a topic use: all producers of a topic must agree.
/// - `enable.idempotence=false`: a client resends what was not acknowledged
///   anyway, and brokers differ in how they keep producer state across a
///   restart.
/// - `linger.ms=10`: librdkafka sends one request per partition; records
///   wait up to 10 ms to share it with others, so that the broker thread
///   wakes, and delivery reports come, per request of many records rather
///   than of a few (benches/README.md: the relay's CPU per event against
///   `linger.ms`). An ack waits those 10 ms more; clients keep enough
///   batches in flight for it (64 per stream are allowed).
/// - `batch.num.messages=10000`, `compression.type=none`: record batches as
///   large as 10 ms of traffic makes them; compressing would cost the relay
///   more CPU than the loopback or a LAN saves.
/// - `message.timeout.ms` = `kafka_delivery_timeout`: how long acks wait
///   for an unreachable broker before the stream fails.
pub fn start(
    settings: &FleetSettings,
    engine: Engine,
    engine_settings: crate::engine::EngineSettings,
    validator: Validator,
    capacity: usize,
) -> Result<EngineHandle, KafkaError> {
    let producer: BaseProducer<Deliveries> = settings
        .client()
        .set("acks", "all")
        .set("partitioner", "murmur2_random")
        .set("enable.idempotence", "false")
        .set("linger.ms", "10")
        .set("batch.num.messages", "10000")
        .set("compression.type", "none")
        .set(
            "message.timeout.ms",
            settings.delivery_timeout.as_millis().to_string(),
        )
        .create_with_context(Deliveries)?;
    let queue = ReportQueue::of(&producer).map_err(|error| {
        KafkaError::ClientCreation(format!("the relay's delivery report socket: {error}"))
    })?;
    let producer = Arc::new(producer);
    let relay = Relay {
        reports: tokio::spawn(reports::serve(producer.clone(), queue)),
        producer,
        topic: settings.topic.clone(),
        validator,
        engine,
        report: engine_settings.report_config(),
        max_ack_rejections: engine_settings.max_ack_rejections,
        relayed: Arc::default(),
    };
    let (handle, commands) = EngineHandle::channel(capacity);
    tokio::spawn(relay.run(commands));
    Ok(handle)
}

/// The producer's delivery reports: each record's goes to its batch's [`Pending`].
struct Deliveries;

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = Arc<Pending>;

    fn delivery(&self, result: &DeliveryResult<'_>, batch: Arc<Pending>) {
        match result {
            Ok(_) => batch.stored(),
            Err((error, _)) => batch.fail(&error.to_string()),
        }
    }
}

/// A batch whose records are with the producer. Its ack is sent once, by the
/// delivery report of its last record stored; a record not stored drops it,
/// and the stream fails with UNAVAILABLE.
struct Pending {
    /// Records not yet stored, and one more while the batch is still being produced.
    remaining: AtomicUsize,
    /// The ack and where it goes, until it is sent or given up.
    ack: Mutex<Option<(IngestAck, oneshot::Sender<Applied>)>>,
    stream_failed: Arc<AtomicBool>,
    /// The relay's count of accepted events stored.
    relayed: Arc<AtomicU64>,
    started: Instant,
}

impl Pending {
    fn new(
        records: usize,
        ack: IngestAck,
        done: oneshot::Sender<Applied>,
        stream_failed: Arc<AtomicBool>,
        relayed: Arc<AtomicU64>,
    ) -> Self {
        Self {
            remaining: AtomicUsize::new(records + 1),
            ack: Mutex::new(Some((ack, done))),
            stream_failed,
            relayed,
            started: Instant::now(),
        }
    }

    /// One record stored (or, the last time, the batch all produced).
    fn stored(&self) {
        if self.remaining.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        let Some((ack, done)) = self.take_ack() else {
            return;
        };
        metrics::counter!("rankwatch_kafka_produced_events_total")
            .increment(u64::from(ack.accepted));
        self.relayed
            .fetch_add(u64::from(ack.accepted), Ordering::Relaxed);
        metrics::histogram!("rankwatch_kafka_delivery_seconds")
            .record(self.started.elapsed().as_secs_f64());
        let _ = done.send(Ok(ack));
    }

    /// A record was not stored: the ack is dropped, the stream fails.
    fn fail(&self, error: &str) {
        failed(&self.stream_failed, error);
        drop(self.take_ack());
    }

    fn take_ack(&self) -> Option<(IngestAck, oneshot::Sender<Applied>)> {
        // A poisoned lock only means a delivery report panicked; the ack is still whole.
        let mut ack = self
            .ack
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        ack.take()
    }
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
                    self.count_relayed();
                    let snapshot = Snapshot::of(&self.engine, self.report.control_model.clone())
                        .with_expected_split(&self.report.expected_split);
                    let _ = reply.send(snapshot);
                }
                Command::Report { window, reply } => {
                    self.count_relayed();
                    let report = match window {
                        None => Report::since_start(&self.engine, &self.report),
                        Some(index) => Report::window(&self.engine, &self.report, index),
                    };
                    let _ = reply.send(report);
                }
                Command::State { spare, reply } => {
                    let _ = reply.send(self.engine.encode_state(spare));
                }
            }
        }
        self.reports.abort();
    }

    /// Brings the engine's count of relayed events up to the acks sent.
    fn count_relayed(&mut self) {
        self.engine
            .set_relayed(self.relayed.load(Ordering::Relaxed));
    }

    /// Validates a batch and produces its accepted events; the delivery
    /// report of its last record sends its ack, while the next batches are
    /// produced.
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
        let relayed = self.relayed.clone();
        let pending = Arc::new(Pending::new(
            accepted.len(),
            ack,
            done,
            stream_failed,
            relayed,
        ));
        for (key, value) in accepted {
            if let Err(error) = self.produce(key, value, &pending).await {
                return pending.fail(&error.to_string());
            }
        }
        pending.stored();
    }

    /// The batch's ack (rejections filled in) and the key and value of each
    /// accepted event: its `user_id`, and the `Event` as the client encoded it.
    #[allow(clippy::type_complexity)]
    fn validate<'b>(
        &mut self,
        batch: &'b RawBatch,
    ) -> Result<(IngestAck, Vec<(&'b str, &'b [u8])>), WireError> {
        let (view, encoded) = parse_batch_with_events(&batch.0)?;
        let now = crate::clock::wall_clock();
        let mut ack = AckBuilder::new(view.sequence, self.max_ack_rejections);
        let mut accepted = Vec::with_capacity(view.events.len());
        for (index, (event, bytes)) in view.events.iter().zip(encoded).enumerate() {
            match self.validator.view(event, &view, now) {
                Ok(_) => {
                    accepted.push((event.user_id().unwrap_or_default(), bytes));
                    ack.accept();
                }
                Err(rejection) => {
                    self.engine.reject(rejection.reason);
                    ack.reject(index, rejection.reason.as_str(), || rejection.message);
                }
            }
        }
        Ok((ack.finish(), accepted))
    }

    /// Queues one record of `batch` (waiting while the client's queue is full).
    async fn produce(
        &self,
        key: &str,
        value: &[u8],
        batch: &Arc<Pending>,
    ) -> Result<(), KafkaError> {
        loop {
            let record = BaseRecord::with_opaque_to(&self.topic, batch.clone())
                .key(key)
                .payload(value);
            match self.producer.send(record) {
                Ok(()) => return Ok(()),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                    tokio::time::sleep(QUEUE_FULL_WAIT).await;
                }
                Err((error, _)) => return Err(error),
            }
        }
    }
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
