//! Starting fleet mode: probing the broker, checking the topics, and the
//! tasks of a relay or a consuming instance behind the engine handle.

use super::{consume, partition, relay, topics, FleetMode, FleetSettings, Started};
use crate::engine::{Command, EngineHandle, EngineSettings, Readiness};
use crate::export::{Report, Snapshot};
use consume::Fleet;
use rdkafka::consumer::{BaseConsumer, Consumer};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// How often the broker's reachability is checked.
const PROBE_EVERY: Duration = Duration::from_secs(2);

/// The part of readiness that the broker's reachability sets.
const BROKER: &str = "kafka broker";

/// Records whether the broker answered the last probe, for `/readyz` and the gauge.
fn set_reachable(readiness: &Readiness, up: bool) {
    if up {
        readiness.ready(BROKER);
    } else {
        readiness.not_ready(BROKER, "unreachable");
    }
    metrics::gauge!("rankwatch_kafka_broker_up").set(f64::from(u8::from(up)));
}

/// Describes the fleet's series, and creates them at zero so that
/// `rate()` and alerts see them from the start.
pub fn describe() {
    metrics::describe_gauge!(
        "rankwatch_kafka_broker_up",
        "1 when the Kafka broker answered the last probe (every 2s), else 0."
    );
    metrics::describe_gauge!(
        "rankwatch_kafka_partitions",
        "Partitions of the event topic this instance evaluates now."
    );
    topics::describe_gauges();
    metrics::describe_counter!(
        "rankwatch_kafka_partitions_assigned_total",
        "Partitions taken over from the state topic's snapshots."
    );
    metrics::describe_counter!(
        "rankwatch_kafka_partitions_revoked_total",
        "Partitions handed over to the group."
    );
    metrics::describe_counter!(
        "rankwatch_lists_recounted_total",
        "Lists finalized again after taking over a partition from an instance that died: they may also be in the dead instance's last exported figures (at most one kafka_commit_interval of lists). Subtract from rankwatch_list_*_count for exact totals."
    );
    metrics::describe_counter!(
        "rankwatch_kafka_handover_timeouts_total",
        "Partitions taken without their previous owner's handover although it was still in the group, after kafka_handover_timeout: taken as from an owner that died."
    );
    metrics::describe_counter!(
        "rankwatch_kafka_partitions_superseded_total",
        "Assigned partitions left untaken because a later rebalance had given them to another instance, which had claimed them: consumed by it alone."
    );
    metrics::describe_counter!(
        "rankwatch_kafka_key_mismatches_total",
        "Records whose key is not their event's user_id; evaluated by the user_id."
    );
    metrics::describe_counter!(
        "rankwatch_kafka_partition_mismatches_total",
        "Records on another partition than Java's partitioner (murmur2 of the key) gives their key: produced by a client that partitions otherwise, such as librdkafka's default, so that a user's events may be split between partitions whose joins never meet."
    );
    metrics::describe_gauge!(
        "rankwatch_kafka_lag_records",
        "Records of the owned partitions not read yet, as the last fetch of each saw its end (at the last checkpoint)."
    );
    metrics::describe_gauge!(
        "rankwatch_kafka_stalled_partitions",
        "Owned partitions that read no record for kafka_stall_timeout while records wait: a batch this build cannot read (compressed with zstd) or a transaction left open holds its partition."
    );
    metrics::describe_histogram!(
        "rankwatch_kafka_snapshot_duration_seconds",
        metrics::Unit::Seconds,
        "Time to checkpoint the owned partitions, write their snapshots and commit."
    );
    metrics::describe_gauge!(
        "rankwatch_kafka_snapshot_bytes",
        metrics::Unit::Bytes,
        "Bytes of open state written by the last commit that wrote any."
    );
    metrics::describe_counter!(
        "rankwatch_kafka_snapshot_failures_total",
        "Partition snapshots that could not be written (the previous one stands)."
    );
    metrics::describe_counter!(
        "rankwatch_kafka_restore_failures_total",
        "Partitions whose snapshot could not be read on assignment (started empty)."
    );
    super::consume::describe_counters();
    metrics::describe_counter!(
        "rankwatch_kafka_produced_events_total",
        "Relay: events the broker acknowledged."
    );
    metrics::describe_counter!(
        "rankwatch_kafka_produce_failures_total",
        "Relay: streams failed with UNAVAILABLE because the broker did not store a batch."
    );
    metrics::describe_histogram!(
        "rankwatch_kafka_delivery_seconds",
        metrics::Unit::Seconds,
        "Relay: time from producing a batch's records to the broker's acknowledgement of all."
    );
    start_at_zero();
}

/// Sets the fleet's counters and gauges to zero, as they are before any
/// partition is taken or any record produced.
fn start_at_zero() {
    for name in [
        "rankwatch_kafka_partitions_assigned_total",
        "rankwatch_kafka_partitions_revoked_total",
        "rankwatch_kafka_handover_timeouts_total",
        "rankwatch_kafka_partitions_superseded_total",
        "rankwatch_kafka_key_mismatches_total",
        "rankwatch_kafka_partition_mismatches_total",
        "rankwatch_kafka_snapshot_failures_total",
        "rankwatch_kafka_restore_failures_total",
        super::consume::RECORDS_EXPIRED_UNREAD,
        super::consume::PARTITIONS_LOST,
        "rankwatch_kafka_produced_events_total",
        "rankwatch_kafka_produce_failures_total",
    ] {
        metrics::counter!(name).absolute(0);
    }
    metrics::gauge!("rankwatch_kafka_partitions").set(0.0);
    metrics::gauge!(topics::EVENT_TOPIC_PARTITIONS).set(0.0);
    metrics::gauge!("rankwatch_kafka_lag_records").set(0.0);
    metrics::gauge!("rankwatch_kafka_stalled_partitions").set(0.0);
}

/// Checks every [`PROBE_EVERY`] that the broker answers, until `shutdown`.
pub fn probe_broker(
    settings: &FleetSettings,
    readiness: Readiness,
    shutdown: CancellationToken,
) -> Result<(), rdkafka::error::KafkaError> {
    let client: BaseConsumer = settings.client().create()?;
    let client = Arc::new(client);
    let topic = settings.topic.clone();
    set_reachable(&readiness, false);
    let mut reachable = false;
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(PROBE_EVERY);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = ticks.tick() => {}
            }
            let (client, topic) = (client.clone(), topic.clone());
            let answered = tokio::task::spawn_blocking(move || {
                client.fetch_metadata(Some(&topic), PROBE_EVERY).is_ok()
            })
            .await
            .unwrap_or(false);
            if answered != reachable {
                tracing::info!(reachable = answered, "kafka broker");
            }
            reachable = answered;
            set_reachable(&readiness, answered);
        }
    });
    Ok(())
}

/// Consumes once the topics give the handoff guarantees: the consumer
/// thread is started only then, so that no partition is evaluated whose
/// handoff would count lists twice. After `shutdown`, waits for the
/// consumer to hand its partitions over and keeps serving for
/// `shutdown_linger` before cancelling `serving`.
async fn consume_when_usable(
    fleet: Arc<Fleet>,
    readiness: Readiness,
    shutdown: CancellationToken,
    serving: CancellationToken,
) {
    let settings = fleet.settings().clone();
    let engine = fleet.engine_settings();
    let need = topics::Need::Consume {
        retention: engine.attribution_window + engine.allowed_lateness + settings.commit_interval,
    };
    if !topics::wait_until_usable(&settings, need, &readiness, &shutdown).await {
        // Nothing was evaluated, so there are no last figures to linger for.
        serving.cancel();
        return;
    }
    match consume::run(fleet, shutdown.clone(), tokio::runtime::Handle::current()) {
        Ok(consumer) => linger(consumer, settings.shutdown_linger, shutdown, serving).await,
        Err(error) => {
            tracing::error!(%error, "NOT CONSUMING: the consumer cannot be created");
            readiness.not_ready("kafka consumer", error.to_string());
            shutdown.cancelled().await;
            serving.cancel();
        }
    }
}

/// Answers for the figures of a consuming instance.
async fn answer(fleet: Arc<Fleet>, mut commands: mpsc::Receiver<Command>) {
    while let Some(command) = commands.recv().await {
        match command {
            // The collector is not served in consume mode.
            // Groups are not retired in fleet mode: they live in the partitions.
            Command::Apply { .. }
            | Command::AdvanceIfIdle { .. }
            | Command::RetireIdleGroups { .. } => {}
            Command::Snapshot { reply } => {
                let settings = fleet.engine_settings();
                let snapshot = Snapshot::of(&fleet.figures(), settings.control_model.clone())
                    .with_expected_split(&settings.expected_split);
                let _ = reply.send(snapshot);
            }
            Command::Report { window, reply } => {
                let view = fleet.figures();
                let settings = &fleet.engine_settings().report_config();
                let report = match window {
                    None => Report::since_start(&view, settings).with_pending(&view),
                    Some(index) => Report::window(&view, settings, index).with_pending(&view),
                };
                let _ = reply.send(report);
            }
            Command::State { spare, reply } => {
                let _ = reply.send(fleet.figures().encode_state(spare));
            }
        }
    }
}

/// How the engines of fleet mode are made.
pub struct EngineSetup {
    /// The engine's settings.
    pub settings: EngineSettings,
    /// The rolling windows.
    pub windows: Vec<Duration>,
    /// Whether the watermark follows the wall clock while a partition is idle.
    pub wall_clock_advance: bool,
    /// Validates each event.
    pub validator: crate::event::Validator,
    /// Names the metric settings a snapshot was computed under.
    pub fingerprint: String,
    /// Batches queued for the relay.
    pub capacity: usize,
}

/// Starts fleet mode as `settings` say.
pub async fn start(
    settings: &FleetSettings,
    setup: EngineSetup,
    readiness: Readiness,
    shutdown: CancellationToken,
) -> Result<Started, rdkafka::error::KafkaError> {
    describe();
    probe_broker(settings, readiness.clone(), shutdown.clone())?;
    match settings.mode {
        FleetMode::Relay => {
            let engine = crate::join::Engine::new(
                setup.settings.join(&setup.windows),
                setup.settings.evaluator(),
            );
            let capacity = setup.capacity;
            let engine = relay::start(settings, engine, setup.settings, setup.validator, capacity)?;
            let (settings, shutdown_check) = (settings.clone(), shutdown.clone());
            tokio::spawn(async move {
                let need = topics::Need::Produce;
                while topics::wait_until_usable(&settings, need, &readiness, &shutdown_check).await
                {
                    topics::watch_while_usable(&settings, need, &shutdown_check).await;
                }
            });
            Ok(Started {
                engine,
                collector: true,
                serving: shutdown,
            })
        }
        FleetMode::Consume => {
            let partition = partition::PartitionSettings {
                validator: setup.validator,
                wall_clock_advance: setup.wall_clock_advance,
            };
            let fleet = Fleet::new(
                settings.clone(),
                setup.settings,
                setup.windows,
                partition,
                setup.fingerprint,
            );
            let fleet = Arc::new(fleet);
            let (engine, commands) = EngineHandle::channel(64);
            tokio::spawn(answer(fleet.clone(), commands));
            let serving = CancellationToken::new();
            tokio::spawn(consume_when_usable(
                fleet,
                readiness,
                shutdown,
                serving.clone(),
            ));
            Ok(Started {
                engine,
                collector: false,
                serving,
            })
        }
    }
}

/// After `shutdown`, waits for the consumer to hand its partitions over,
/// then keeps serving for `linger` before cancelling `serving`.
async fn linger(
    consumer: std::thread::JoinHandle<()>,
    linger: Duration,
    shutdown: CancellationToken,
    serving: CancellationToken,
) {
    shutdown.cancelled().await;
    let _ = tokio::task::spawn_blocking(move || consumer.join()).await;
    tracing::info!(
        linger = %humantime::format_duration(linger),
        "partitions handed over; serving the last figures before exiting"
    );
    tokio::time::sleep(linger).await;
    serving.cancel();
}
