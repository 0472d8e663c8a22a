//! Consume mode: this instance's share of the consumer group. One thread
//! owns the Kafka consumer: it commits every `kafka_commit_interval` and
//! runs the group's rebalances, during which partitions are handed over
//! (docs/SPEC.md §10, docs/fleet.md). Each partition's task reads the
//! partition's own queue of records ([`super::feed`]).
//!
//! A commit checkpoints every owned partition at a record boundary, writes
//! the open state to the state topic and then commits the offsets. A
//! revoked partition is checkpointed the same way, marked handed over, and
//! its finalized figures stay with this instance. An assigned partition
//! starts from its last snapshot: its open state only, from the first
//! record the snapshot has not seen. When that snapshot was not a handover
//! (its owner died), the lists finalized from records up to the partition's
//! end at assignment may have been counted by the dead owner, and are
//! counted in `rankwatch_lists_recounted_total`. Reads of the topics while
//! partitions are taken are retried while the broker cannot be reached
//! ([`super::retry`]).

use super::feed::{self, Feed};
use super::generation;
use super::partition::{self, Checkpoint, Partition, PartitionSettings, Recount, Start, Work};
use super::retry::Retries;
use super::snapshot::{LastManifest, Manifest, Pending, SnapshotError, StateTopic};
use super::FleetSettings;
use crate::engine::EngineSettings;
use crate::join::{Engine, EngineState};
use crate::state::JoinRules;
use dashmap::DashMap;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

/// The consumer keeps one fetch request in flight per broker, so records
/// per response set the pace of a catch-up: the broker is asked to answer
/// once it holds this much for the instance (a megabyte: thousands of
/// records)…
const FETCH_MIN_BYTES: &str = "1048576";
/// …or after this many milliseconds, whichever comes first. librdkafka's
/// 500 ms made tansu, the test broker, answer slowly even with records
/// waiting: a catch-up ran at 110,000 events/s against 250,000 to 450,000
/// with 10 ms (benches/README.md). An idle instance then sends 100 fetch
/// requests a second per broker, which a broker serves without effort.
const FETCH_WAIT_MS: &str = "10";
/// How long a single poll of the consumer waits for an event.
const POLL: Duration = Duration::from_millis(100);
/// How long a request to the broker may take before it is retried or given up.
const BROKER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a departing instance polls for its revocation to complete.
const LEAVE_TIMEOUT: Duration = Duration::from_secs(30);
/// How often a new owner looks again for its predecessor's handover.
const HANDOVER_POLL: Duration = Duration::from_millis(100);

/// A partition this instance owns.
struct Owned {
    partition: Arc<Partition>,
    work: mpsc::Sender<Work>,
    /// The last manifest written for it (its chunks are in `slot`).
    manifest: Manifest,
    /// Its last snapshot was not stored: the next checkpoint writes one
    /// even if nothing changed, and its offset is not committed until then.
    unsaved: bool,
}

/// A rebalance's assignment to this instance, as its partitions are taken.
struct Assignment {
    /// The group's generation it belongs to, if known.
    generation: Option<i32>,
    /// The end of each assigned partition of the state topic when the
    /// assignment arrived (where it could be read).
    state_ends: BTreeMap<i32, i64>,
    /// When a previous owner still in the group stops being waited for.
    deadline: Instant,
    /// Reads of the topics retried while the broker cannot be reached.
    retries: Retries,
    /// The event topic's partitions, if the broker said.
    partitions: Option<usize>,
}

impl Assignment {
    /// Whether `last`, partition `id`'s last manifest, is a claim made
    /// since this assignment arrived, in a later generation: the partition
    /// is another instance's now.
    fn superseded_by(&self, id: i32, last: &LastManifest) -> bool {
        let since = self
            .state_ends
            .get(&id)
            .is_some_and(|&end| last.offset >= end);
        let later = matches!(
            (self.generation, last.manifest.generation),
            (Some(ours), Some(theirs)) if theirs > ours
        );
        since && later
    }
}

/// How the wait for an assigned partition's previous owner ended.
#[derive(Debug, PartialEq)]
enum Handover {
    /// The partition is this instance's to take.
    Take,
    /// A later rebalance gave it to another instance, which has claimed it.
    Superseded,
}

/// Everything of consume mode that the consumer thread and the readers of
/// figures share.
pub struct Fleet {
    settings: FleetSettings,
    engine: EngineSettings,
    windows: Vec<Duration>,
    partition: PartitionSettings,
    fingerprint: String,
    /// The join rules snapshots are computed under.
    join_rules: JoinRules,
    /// The partitions owned now; the consumer thread changes it, scrapes read it.
    owned: DashMap<i32, Owned>,
    /// Figures of the partitions this instance owned before and handed over.
    retired: Mutex<Engine>,
}

impl Fleet {
    /// Consume mode with these settings; `fingerprint` names the metric settings.
    pub fn new(
        settings: FleetSettings,
        engine: EngineSettings,
        windows: Vec<Duration>,
        partition: PartitionSettings,
        fingerprint: String,
    ) -> Self {
        let retired = Engine::new(engine.join(&windows), engine.evaluator());
        Self {
            settings,
            join_rules: engine.join_rules(),
            engine,
            windows,
            partition,
            fingerprint,
            owned: DashMap::new(),
            retired: Mutex::new(retired),
        }
    }

    /// An engine holding the figures of every partition this instance
    /// evaluates or has evaluated, to export.
    pub fn figures(&self) -> Engine {
        let retired = lock(&self.retired);
        let mut view = self.empty_engine();
        view.absorb_finalized(&retired);
        for owned in self.owned.iter() {
            view.absorb(&owned.partition.engine());
        }
        view
    }

    /// The fleet settings.
    pub fn settings(&self) -> &FleetSettings {
        &self.settings
    }

    /// The engine settings, for reports.
    pub fn engine_settings(&self) -> &EngineSettings {
        &self.engine
    }

    fn empty_engine(&self) -> Engine {
        self.clocked(Engine::new(
            self.engine.join(&self.windows),
            self.engine.evaluator(),
        ))
    }

    fn restore(&self, state: EngineState) -> Engine {
        self.clocked(Engine::from_state(
            self.engine.join(&self.windows),
            self.engine.evaluator(),
            state,
        ))
    }

    /// `engine`, whose `T` rises at most to the wall clock where the
    /// watermark also follows it.
    fn clocked(&self, mut engine: Engine) -> Engine {
        if self.partition.wall_clock_advance {
            engine.cap_time_at_wall_clock();
        }
        engine
    }

    /// Moves the figures of a handed-over partition to the retired ones, and
    /// forgets it, at once for every reader.
    fn retire(&self, id: i32) {
        let mut retired = lock(&self.retired);
        if let Some((_, owned)) = self.owned.remove(&id) {
            retired.absorb_finalized(&owned.partition.engine());
        }
        metrics::gauge!("rankwatch_kafka_partitions").set(self.owned.len() as f64);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The consumer's callbacks: the group's rebalances.
struct Rebalancer {
    fleet: Arc<Fleet>,
    state: StateTopic,
    /// The consumer's client id, unique to this process: the owner named in
    /// the manifests it writes.
    owner: String,
    /// The consumer itself, whose partition queues the partitions' tasks
    /// read; set before its first poll.
    consumer: OnceLock<Weak<BaseConsumer<Rebalancer>>>,
    /// Where each owned partition was, and since when, at the checkpoints.
    progress: Mutex<BTreeMap<i32, Progress>>,
}

/// Where a partition was at a checkpoint, since when, and whether its
/// stall was said.
#[derive(Clone, Copy)]
struct Progress {
    next_offset: i64,
    since: Instant,
    said: bool,
}

impl ClientContext for Rebalancer {
    fn error(&self, error: KafkaError, reason: &str) {
        tracing::warn!(%error, reason, "kafka client");
    }
}

impl ConsumerContext for Rebalancer {
    fn rebalance(
        &self,
        consumer: &BaseConsumer<Self>,
        err: RDKafkaRespErr,
        tpl: &mut TopicPartitionList,
    ) {
        match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                let taken = self.take(consumer, tpl);
                if let Err(error) = consumer.assign(&taken) {
                    tracing::error!(%error, "cannot take the assigned partitions");
                }
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                let ids: Vec<i32> = tpl
                    .elements_for_topic(&self.fleet.settings.topic)
                    .iter()
                    .map(|e| e.partition())
                    .filter(|id| self.fleet.owned.contains_key(id))
                    .collect();
                if consumer.assignment_lost() {
                    self.let_go(&ids);
                } else {
                    self.checkpoint(consumer, &ids, true);
                }
                if let Err(error) = consumer.unassign() {
                    tracing::error!(%error, "cannot release the revoked partitions");
                }
            }
            other => tracing::error!(error = ?other, "rebalance failed"),
        }
    }
}

impl Rebalancer {
    /// Restores the assigned partitions of `tpl` and returns those taken,
    /// each with the offset it starts from.
    fn take(&self, consumer: &BaseConsumer<Self>, tpl: &TopicPartitionList) -> TopicPartitionList {
        let topic = self.fleet.settings.topic.clone();
        let ids: Vec<i32> = tpl
            .elements_for_topic(&topic)
            .iter()
            .map(|e| e.partition())
            .collect();
        let assignment = Assignment {
            generation: generation::of(consumer),
            state_ends: ids
                .iter()
                .filter_map(|&id| self.state.end(id).ok().map(|end| (id, end)))
                .collect(),
            deadline: Instant::now() + self.fleet.settings.handover_timeout,
            retries: Retries::new(self.fleet.settings.handover_timeout),
            partitions: consumer
                .fetch_metadata(Some(&topic), BROKER_TIMEOUT)
                .ok()
                .and_then(|metadata| Some(metadata.topics().first()?.partitions().len()))
                .filter(|&count| count > 0),
        };
        tracing::info!(generation = assignment.generation, partitions = ?ids, "partitions assigned");
        let mut taken = TopicPartitionList::new();
        for id in ids {
            let Some(offset) = self.take_one(consumer, id, &assignment) else {
                continue;
            };
            metrics::counter!("rankwatch_kafka_partitions_assigned_total").increment(1);
            if let Err(error) = taken.add_partition_offset(&topic, id, offset) {
                tracing::error!(%error, partition = id, "cannot set the start offset");
            }
        }
        metrics::gauge!("rankwatch_kafka_partitions").set(self.fleet.owned.len() as f64);
        taken
    }

    /// Takes the queue of partition `id` for its task, before the
    /// partition is assigned, so that none of its records reach the
    /// consumer's own queue.
    fn feed(&self, id: i32) -> Option<Feed> {
        let Some(consumer) = self.consumer.get().and_then(Weak::upgrade) else {
            tracing::error!(
                partition = id,
                "partition not taken: the consumer is closing"
            );
            return None;
        };
        Feed::split(&consumer, &self.fleet.settings.topic, id)
            .inspect_err(|error| tracing::error!(%error, "partition not taken"))
            .ok()
    }

    /// Restores partition `id` from its last snapshot and starts its task;
    /// returns the first offset to read, or `None` when the partition is
    /// not taken (a later assignment has given it to another instance, or
    /// the consumer is closing).
    fn take_one(
        &self,
        consumer: &BaseConsumer<Self>,
        id: i32,
        assignment: &Assignment,
    ) -> Option<Offset> {
        let fleet = &self.fleet;
        let feed = self.feed(id)?;
        if self.await_handover(consumer, id, assignment) == Handover::Superseded {
            return None;
        }
        let marks = assignment.retries.read(
            id,
            "the partition's offsets",
            |_| true,
            || consumer.fetch_watermarks(&fleet.settings.topic, id, BROKER_TIMEOUT),
        );
        let (low, high) = marks.unwrap_or_else(|error| {
            tracing::error!(%error, partition = id, "cannot read the partition's offsets");
            (0, 0)
        });
        let committed = || committed_offset(consumer, &fleet.settings.topic, id);
        let restored = self.restore_one(id, (low, high), assignment, committed);
        let Some((engine, manifest, recount)) = restored else {
            restore_failed(id, "the state topic cannot be read");
            let (next_offset, recount) =
                self.read_on_unrestored(consumer, id, assignment, (low, high));
            let start = Start {
                engine: fleet.empty_engine(),
                next_offset,
                recount,
                backlog_end: high,
                partitions: assignment.partitions,
            };
            let manifest = Manifest {
                generation: assignment.generation,
                ..self.first_manifest(next_offset)
            };
            self.start_one(id, feed, start, manifest);
            return Some(Offset::Offset(next_offset));
        };
        let next_offset = first_offset_held(id, manifest.next_offset, low);
        let claim = Manifest {
            handed_over: false,
            next_offset,
            owner: self.owner.clone(),
            generation: assignment.generation,
            ..manifest
        };
        if let Err(error) = self.state.write_manifest(id, &claim) {
            tracing::warn!(%error, partition = id, "cannot claim the partition in the state topic");
        }
        tracing::info!(
            partition = id,
            next_offset,
            open_impressions = engine.open_impressions(),
            recount_until = recount.until_offset,
            "partition taken"
        );
        let start = Start {
            engine,
            next_offset,
            recount,
            backlog_end: high,
            partitions: assignment.partitions,
        };
        self.start_one(id, feed, start, claim);
        Some(Offset::Offset(next_offset))
    }

    /// Where partition `id`, whose snapshot cannot be restored, is read
    /// from, and up to where its lists may be counted again: the group's
    /// committed offset (the first record held when the group has none).
    /// Its task starts at that offset, so that an owner reading nothing
    /// before the next handover hands the partition over there, not at 0,
    /// which had the next owner count it whole again. When not even the
    /// committed offset can be read, the partition is read from its first
    /// record held, its lists counted again as after an owner's death.
    fn read_on_unrestored(
        &self,
        consumer: &BaseConsumer<Self>,
        id: i32,
        assignment: &Assignment,
        (low, high): (i64, i64),
    ) -> (i64, Recount) {
        let topic = &self.fleet.settings.topic;
        let committed = assignment.retries.read(
            id,
            "the group's committed offset",
            |_| true,
            || read_committed_offset(consumer, topic, id),
        );
        match committed {
            Ok(Some(offset)) => (first_offset_held(id, offset, low), Recount::default()),
            Ok(None) => (low, Recount::default()),
            Err(error) => {
                tracing::error!(%error, partition = id, "cannot read the group's committed offset: the partition is read from its first record held, and its lists up to its end are counted as counted again");
                (low, Recount::after_death(high))
            }
        }
    }

    /// Partition `id`'s engine, manifest and what of it may be counted
    /// again, from its last snapshot; `None` when the state topic cannot be
    /// read, within the assignment's retries. `low` and `high` are the
    /// partition's first and next offsets; `committed` gives the group's
    /// committed offset, asked for when there is no snapshot.
    fn restore_one(
        &self,
        id: i32,
        (low, high): (i64, i64),
        assignment: &Assignment,
        committed: impl FnOnce() -> Option<i64>,
    ) -> Option<(Engine, Manifest, Recount)> {
        let fleet = &self.fleet;
        // Read again, not taken from the wait: an owner hands over (a last
        // manifest) and then leaves the group, so the manifest the wait read
        // before it saw the owner gone may be the periodic one before the handover.
        let restored = assignment
            .retries
            .read(id, "the partition's snapshot", SnapshotError::is_transient, || {
                self.state.read_last(id)
            })
            .inspect_err(|error| tracing::error!(%error, partition = id, "cannot read the partition's snapshot"))
            .ok()?;
        Some(match restored {
            Some(restored) if restored.manifest.fingerprint == fleet.fingerprint => {
                let manifest = restored.manifest;
                warn_if_joined_otherwise(id, manifest.join_rules.as_ref(), &fleet.join_rules);
                let recount = if manifest.handed_over {
                    Recount::records_before(manifest.next_offset)
                } else {
                    Recount::after_death(high)
                };
                let engine = restored
                    .state
                    .map_or_else(|| fleet.empty_engine(), |state| fleet.restore(state));
                (engine, manifest, recount)
            }
            Some(restored) => {
                let changed = crate::state::settings_changed(
                    &restored.manifest.fingerprint,
                    &fleet.fingerprint,
                );
                restore_failed(
                    id,
                    &format!("it was computed under other metric settings ({changed})"),
                );
                let manifest = Manifest {
                    chunks: 0,
                    fingerprint: fleet.fingerprint.clone(),
                    join_rules: Some(fleet.join_rules.clone()),
                    ..restored.manifest
                };
                (fleet.empty_engine(), manifest, Recount::default())
            }
            // No snapshot, though the group has read the partition: the
            // state topic was renamed, recreated or lost. Reading from the
            // start had counted every list again.
            None => match committed().filter(|&offset| offset > low) {
                Some(offset) => {
                    restore_failed(id, &format!("the state topic holds no snapshot of it, though the group has read it up to offset {offset} (was kafka_state_topic renamed, or the topic recreated?)"));
                    (
                        fleet.empty_engine(),
                        self.first_manifest(offset),
                        Recount::default(),
                    )
                }
                None => (
                    fleet.empty_engine(),
                    self.first_manifest(low),
                    Recount::default(),
                ),
            },
        })
    }

    /// Starts partition `id`'s task from `start`, reading `feed`, and owns it.
    fn start_one(&self, id: i32, feed: Feed, start: Start, manifest: Manifest) {
        let (partition, work) = partition::start(id, start, feed, self.fleet.partition.clone());
        self.fleet.owned.insert(
            id,
            Owned {
                partition,
                work,
                manifest,
                unsaved: false,
            },
        );
    }

    /// The manifest of a partition that has had no owner.
    fn first_manifest(&self, next_offset: i64) -> Manifest {
        Manifest {
            version: 0,
            fingerprint: self.fleet.fingerprint.clone(),
            id: 0,
            slot: 1,
            chunks: 0,
            first_chunk: 0,
            checksum: 0,
            next_offset,
            handed_over: false,
            owner: self.owner.clone(),
            generation: None,
            join_rules: Some(self.fleet.join_rules.clone()),
        }
    }

    /// Waits until partition `id`'s last snapshot is a handover or its
    /// owner has left the group, or until the assignment's deadline
    /// (`kafka_handover_timeout` after it). A broker may assign a partition
    /// before its owner has revoked it (tansu completes a rebalance without
    /// waiting for every member to rejoin), and the owner goes on evaluating
    /// until it hears of the rebalance: taking the partition from its last
    /// periodic snapshot would count what it evaluated since twice. An owner
    /// that died has left the group by the time its partitions are
    /// assigned, and is not waited for.
    ///
    /// The assignment itself may be stale: a later rebalance, formed while
    /// this instance was still taking the partitions before this one, may
    /// have given the partition to another instance, which claimed it since.
    /// That owner hands it over only after a rebalance that this instance's
    /// rejoining starts, so waiting for it would wait out the deadline and
    /// then consume the partition twice: the partition is left to it.
    fn await_handover(
        &self,
        consumer: &BaseConsumer<Self>,
        id: i32,
        assignment: &Assignment,
    ) -> Handover {
        let started = Instant::now();
        loop {
            let last = assignment.retries.read(
                id,
                "the partition's last manifest",
                SnapshotError::is_transient,
                || self.state.last_manifest(id),
            );
            let last = match last {
                Ok(Some(last))
                    if !last.manifest.handed_over
                        && !last.manifest.owner.is_empty()
                        && last.manifest.owner != self.owner =>
                {
                    last
                }
                _ => break,
            };
            let owner = &last.manifest.owner;
            if assignment.superseded_by(id, &last) {
                metrics::counter!("rankwatch_kafka_partitions_superseded_total").increment(1);
                tracing::info!(
                    partition = id,
                    owner,
                    generation = assignment.generation,
                    owner_generation = last.manifest.generation,
                    "partition left to the owner a later rebalance assigned it to"
                );
                return Handover::Superseded;
            }
            if !self.is_member(consumer, owner) {
                break;
            }
            if Instant::now() >= assignment.deadline {
                metrics::counter!("rankwatch_kafka_handover_timeouts_total").increment(1);
                tracing::warn!(
                    partition = id,
                    owner,
                    "the previous owner, still in the group, did not hand the partition over in time: taken from its last snapshot, as from an owner that died"
                );
                return Handover::Take;
            }
            std::thread::sleep(HANDOVER_POLL);
        }
        if started.elapsed() >= HANDOVER_POLL {
            let waited_ms = started.elapsed().as_millis() as u64;
            tracing::info!(partition = id, waited_ms, "waited for the previous owner");
        }
        Handover::Take
    }

    /// Whether the consumer with client id `owner` is a member of the group
    /// now (a member id is the client id and a suffix, on Kafka and tansu
    /// alike); when the group cannot be described, it may be.
    fn is_member(&self, consumer: &BaseConsumer<Self>, owner: &str) -> bool {
        match consumer.fetch_group_list(Some(&self.fleet.settings.group), BROKER_TIMEOUT) {
            Ok(list) => list
                .groups()
                .iter()
                .flat_map(|g| g.members())
                .any(|member| {
                    member.client_id() == owner
                        || member
                            .id()
                            .strip_prefix(owner)
                            .is_some_and(|suffix| suffix.starts_with('-'))
                }),
            Err(error) => {
                tracing::warn!(%error, "cannot describe the consumer group");
                true
            }
        }
    }

    /// Exports how far the owned partitions, at `next_offsets`, are behind
    /// their ends, and says once of each that has not moved for
    /// `kafka_stall_timeout` while records wait: a record librdkafka cannot
    /// hand over (a compression codec this build lacks) had stopped a
    /// partition with nothing to show it.
    fn watch_progress(&self, consumer: &BaseConsumer<Self>, next_offsets: &BTreeMap<i32, i64>) {
        let topic = &self.fleet.settings.topic;
        let mut progress = lock(&self.progress);
        progress.retain(|id, _| next_offsets.contains_key(id));
        let (mut behind, mut stalled) = (0, 0);
        for (&id, &next_offset) in next_offsets {
            let Some(end) = feed::cached_end(consumer, topic, id) else {
                continue;
            };
            let waiting = (end - next_offset).max(0);
            behind += waiting;
            let moved = Progress {
                next_offset,
                since: Instant::now(),
                said: false,
            };
            let seen = progress.entry(id).or_insert(moved);
            if seen.next_offset != next_offset || waiting == 0 {
                *seen = moved;
            } else if seen.since.elapsed() >= self.fleet.settings.stall_timeout {
                stalled += 1;
                if !seen.said {
                    seen.said = true;
                    tracing::warn!(
                        partition = id,
                        next_offset,
                        end,
                        "PARTITION STALLED: no record read for {} while {waiting} wait: a batch this build cannot read (compressed with zstd: producers must use none, gzip, snappy or lz4), or a transaction its producer left open, holds the partition",
                        humantime::format_duration(self.fleet.settings.stall_timeout)
                    );
                }
            }
        }
        metrics::gauge!("rankwatch_kafka_lag_records").set(behind as f64);
        metrics::gauge!("rankwatch_kafka_stalled_partitions").set(f64::from(stalled));
    }

    /// Checkpoints partitions `ids`, writes their snapshots and commits
    /// their offsets. With `last` they are handed over: their tasks stop
    /// and their figures are retired. The partitions checkpoint and encode
    /// their states at once, each on its own task, and the snapshots are
    /// written together.
    fn checkpoint(&self, consumer: &BaseConsumer<Self>, ids: &[i32], last: bool) {
        let started = Instant::now();
        let asked: Vec<_> = ids
            .iter()
            .map(|&id| (id, self.ask_checkpoint(id, last)))
            .collect();
        let mut next_offsets = BTreeMap::new();
        let mut snapshots = Vec::new();
        for (id, answer) in asked {
            match answer.and_then(|answer| self.snapshot_of(id, answer, last)) {
                Ok((next_offset, snapshot)) => {
                    next_offsets.insert(id, next_offset);
                    snapshots.extend(snapshot);
                }
                Err(error) => self.snapshot_failed(id, &error),
            }
        }
        let mut bytes = 0;
        for (id, written) in self.state.write_all(snapshots) {
            match written {
                Ok((manifest, payload)) => {
                    bytes += payload;
                    if let Some(mut owned) = self.fleet.owned.get_mut(&id) {
                        owned.manifest = manifest;
                        owned.unsaved = false;
                    }
                }
                Err(error) => {
                    next_offsets.remove(&id);
                    self.snapshot_failed(id, &error.to_string());
                }
            }
        }
        if last {
            for &id in ids {
                self.fleet.retire(id);
                tracing::info!(
                    partition = id,
                    next_offset = next_offsets.get(&id),
                    "partition handed over"
                );
                metrics::counter!("rankwatch_kafka_partitions_revoked_total").increment(1);
            }
        }
        self.commit(consumer, &next_offsets, last);
        if !last {
            self.watch_progress(consumer, &next_offsets);
        }
        metrics::histogram!("rankwatch_kafka_snapshot_duration_seconds")
            .record(started.elapsed().as_secs_f64());
        if bytes > 0 {
            metrics::gauge!("rankwatch_kafka_snapshot_bytes").set(bytes as f64);
        }
    }

    /// Stops evaluating partitions `ids`, which the group gave to other
    /// instances while this one did not answer (paused or cut off past its
    /// session timeout), writing and committing nothing: their new owners
    /// have taken them from their last snapshots, and a handover written
    /// now, after their claims, would tell the owners after them that no
    /// list past it was counted. The figures finalized here stay this
    /// instance's; the new owners count those lists again as recounted.
    fn let_go(&self, ids: &[i32]) {
        for &id in ids {
            if let Ok(answer) = self.ask_checkpoint(id, true) {
                // Waits for the task to stop, so that its figures are final.
                let _ = answer.blocking_recv();
            }
            self.fleet.retire(id);
            tracing::warn!(
                partition = id,
                "PARTITION LOST: the group gave it to another instance while this one did not answer (paused or cut off past its session timeout); not handed over"
            );
            metrics::counter!(PARTITIONS_LOST).increment(1);
        }
    }

    /// Commits the offsets of the partitions whose snapshots stand.
    fn commit(&self, consumer: &BaseConsumer<Self>, next_offsets: &BTreeMap<i32, i64>, last: bool) {
        let mut offsets = TopicPartitionList::new();
        for (&id, &next_offset) in next_offsets {
            let topic = &self.fleet.settings.topic;
            if let Err(error) = offsets.add_partition_offset(topic, id, Offset::Offset(next_offset))
            {
                tracing::warn!(%error, partition = id, "cannot commit");
            }
        }
        if offsets.count() == 0 {
            return;
        }
        let mode = if last {
            CommitMode::Sync
        } else {
            CommitMode::Async
        };
        if let Err(error) = consumer.commit(&offsets, mode) {
            tracing::warn!(%error, "offset commit failed (the snapshots stand)");
        }
    }

    /// Counts a snapshot that was not stored, and has the next checkpoint
    /// of the partition write one.
    fn snapshot_failed(&self, partition: i32, error: &str) {
        metrics::counter!("rankwatch_kafka_snapshot_failures_total").increment(1);
        tracing::warn!(error, partition, "snapshot failed; the last one stands");
        if let Some(mut owned) = self.fleet.owned.get_mut(&partition) {
            owned.unsaved = true;
        }
    }

    /// The slot of partition `id`'s last stored snapshot, as the state
    /// topic says: after a write that failed, its manifest may have been
    /// stored all the same (a broker that took it but did not answer), and
    /// the next snapshot must not overwrite the chunks it names.
    fn stored_slot(&self, id: i32) -> Result<u8, String> {
        match self.state.last_manifest(id) {
            Ok(last) => Ok(last.map_or(0, |last| last.manifest.slot)),
            Err(error) => Err(format!(
                "cannot tell which slot the last snapshot is in: {error}"
            )),
        }
    }

    /// Asks partition `id`'s task for a checkpoint.
    fn ask_checkpoint(&self, id: i32, last: bool) -> Result<oneshot::Receiver<Checkpoint>, String> {
        let (work, unsaved) = self
            .fleet
            .owned
            .get(&id)
            .map(|o| (o.work.clone(), o.unsaved))
            .ok_or("not owned")?;
        let (reply, answer) = oneshot::channel();
        work.blocking_send(Work::Checkpoint {
            last,
            unsaved,
            reply,
        })
        .map_err(|_| "the partition's task has stopped".to_owned())?;
        Ok(answer)
    }

    /// Partition `id`'s next offset, and the snapshot to write for its
    /// checkpoint: none when its state did not change, unless it is handed over.
    fn snapshot_of(
        &self,
        id: i32,
        answer: oneshot::Receiver<Checkpoint>,
        last: bool,
    ) -> Result<(i64, Option<Pending>), String> {
        let checkpoint = answer
            .blocking_recv()
            .map_err(|_| "the partition's task has stopped".to_owned())?;
        let next_offset = checkpoint.next_offset;
        let (mut previous, unsaved) = self
            .fleet
            .owned
            .get(&id)
            .map(|o| (o.manifest.clone(), o.unsaved))
            .ok_or("not owned")?;
        if unsaved && checkpoint.state.is_some() {
            previous.slot = self.stored_slot(id)?;
        }
        let snapshot = match checkpoint.state {
            None if !last => return Ok((next_offset, None)),
            None => Pending::new(
                id,
                None,
                Manifest {
                    handed_over: true,
                    next_offset,
                    ..previous
                },
            ),
            Some(encoded) => Pending::new(
                id,
                Some(encoded.map_err(|e| e.to_string())?),
                Manifest {
                    id: fastrand::u64(..),
                    slot: 1 - previous.slot.min(1),
                    next_offset,
                    handed_over: last,
                    fingerprint: self.fleet.fingerprint.clone(),
                    join_rules: Some(self.fleet.join_rules.clone()),
                    ..previous
                },
            ),
        };
        Ok((next_offset, Some(snapshot)))
    }
}

/// Warns that partition `partition`'s state, computed under the join rules
/// `saved` (when known), is restored under other `running` ones.
fn warn_if_joined_otherwise(partition: i32, saved: Option<&JoinRules>, running: &JoinRules) {
    if let Some(changed) = saved.and_then(|saved| running.changed_since(saved)) {
        tracing::warn!(
            partition,
            ?changed,
            "partition restored under other join settings than its snapshot was computed under: its figures mix lists joined under both; every instance of a group must share them"
        );
    }
}

/// Counter of the event topic's records the broker deleted before any
/// instance read them.
pub const RECORDS_EXPIRED_UNREAD: &str = "rankwatch_kafka_records_expired_unread_total";

/// Counter of partitions the group gave to other instances while this one
/// did not answer.
pub const PARTITIONS_LOST: &str = "rankwatch_kafka_partitions_lost_total";

/// Describes the counters of taking partitions that this module alone counts.
pub fn describe_counters() {
    metrics::describe_counter!(
        PARTITIONS_LOST,
        "Partitions the group gave to other instances while this one did not answer (paused or cut off past its session timeout): let go without a handover, their new owners count the lists finalized here since the last snapshot again, in rankwatch_lists_recounted_total."
    );
    metrics::describe_counter!(
        RECORDS_EXPIRED_UNREAD,
        "Records of the event topic the broker deleted before any instance read them (the fleet was behind by more than the topic's retention): their lists and interactions are not counted."
    );
}

/// Where partition `partition` is read from: `next_offset`, where its
/// snapshot (or the group) left off, unless the broker no longer holds it
/// (`low`, its first offset, is past it: the topic's retention deleted
/// records that no instance had read); then from `low`, the records
/// between counted as lost and logged.
fn first_offset_held(partition: i32, next_offset: i64, low: i64) -> i64 {
    if next_offset < low {
        let lost = low - next_offset;
        metrics::counter!(RECORDS_EXPIRED_UNREAD).increment(u64::try_from(lost).unwrap_or(0));
        tracing::error!(
            partition,
            from_offset = next_offset,
            to_offset = low,
            lost,
            "RECORDS LOST: the broker deleted records of the event topic that no instance had read (the fleet was behind by more than the topic's retention.ms or retention.bytes); their lists and interactions are not counted"
        );
    }
    next_offset.max(low)
}

fn restore_failed(partition: i32, why: &str) {
    metrics::counter!("rankwatch_kafka_restore_failures_total").increment(1);
    tracing::error!(
        partition,
        "PARTITION STATE NOT RESTORED: {why}; its open lists start empty from the committed offset"
    );
}

/// The offset the group committed for partition `id` of `topic`, if it
/// committed one and the broker says so.
fn committed_offset(consumer: &BaseConsumer<Rebalancer>, topic: &str, id: i32) -> Option<i64> {
    read_committed_offset(consumer, topic, id)
        .inspect_err(|error| tracing::warn!(%error, partition = id, "cannot read the group's committed offset"))
        .ok()?
}

/// The offset the group committed for partition `id` of `topic`; `None`
/// when it committed none.
fn read_committed_offset(
    consumer: &BaseConsumer<Rebalancer>,
    topic: &str,
    id: i32,
) -> Result<Option<i64>, KafkaError> {
    let mut partitions = TopicPartitionList::new();
    partitions.add_partition(topic, id);
    let committed = consumer.committed_offsets(partitions, BROKER_TIMEOUT)?;
    Ok(
        match committed.find_partition(topic, id).map(|p| p.offset()) {
            Some(Offset::Offset(offset)) => Some(offset),
            _ => None,
        },
    )
}

/// Runs the consumer on its own thread until `shutdown`, then hands every
/// partition over and returns. Fails only when the consumer cannot be made.
pub fn run(
    fleet: Arc<Fleet>,
    shutdown: CancellationToken,
    runtime: tokio::runtime::Handle,
) -> Result<std::thread::JoinHandle<()>, KafkaError> {
    let settings = &fleet.settings;
    let state = StateTopic::connect(
        &settings.client(),
        &settings.state_topic,
        &settings.group,
        runtime.clone(),
    )?;
    let owner = format!("rankwatch-{:016x}", fastrand::u64(..));
    let consumer: BaseConsumer<Rebalancer> = settings
        .client()
        .set("client.id", &owner)
        .set("group.id", &settings.group)
        .set("enable.auto.commit", "false")
        // Commits name their offsets (those of the snapshots): storing
        // each record's offset as it is read would only take a lock per record.
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("enable.partition.eof", "false")
        .set("session.timeout.ms", "10000")
        // A member learns of a rebalance from its heartbeat's answer; tansu
        // was seen to complete one without a member that had not rejoined
        // within about a second, handing its partitions to another before
        // it had handed them over (a graceful handoff then recounted).
        .set("heartbeat.interval.ms", "500")
        .set("fetch.min.bytes", FETCH_MIN_BYTES)
        .set("fetch.wait.max.ms", FETCH_WAIT_MS)
        .create_with_context(Rebalancer {
            fleet: fleet.clone(),
            state,
            owner,
            consumer: OnceLock::new(),
            progress: Mutex::new(BTreeMap::new()),
        })?;
    let consumer = Arc::new(consumer);
    let _ = consumer.context().consumer.set(Arc::downgrade(&consumer));
    consumer.subscribe(&[&fleet.settings.topic])?;
    std::thread::Builder::new()
        .name("rankwatch-consumer".into())
        .spawn(move || {
            // Partition tasks are spawned from this thread's rebalances.
            let _runtime = runtime.enter();
            consume(consumer, fleet, shutdown)
        })
        .map_err(|e| KafkaError::Subscription(e.to_string()))
}

/// Serves the consumer's events (rebalances, commits) and checkpoints every
/// commit interval until `shutdown`, then leaves the group.
fn consume(
    consumer: Arc<BaseConsumer<Rebalancer>>,
    fleet: Arc<Fleet>,
    shutdown: CancellationToken,
) {
    let mut last_commit = Instant::now();
    while !shutdown.is_cancelled() {
        serve_events(&consumer);
        if last_commit.elapsed() >= fleet.settings.commit_interval {
            let ids: Vec<i32> = fleet.owned.iter().map(|o| *o.key()).collect();
            consumer.context().checkpoint(&consumer, &ids, false);
            last_commit = Instant::now();
        }
    }
    leave(&consumer, &fleet);
}

/// Polls the consumer's own queue once: its rebalances and commit results
/// are served in the poll. Records come through the partitions' queues; one
/// here would belong to a partition not taken, and is skipped.
fn serve_events(consumer: &BaseConsumer<Rebalancer>) {
    match consumer.poll(POLL) {
        Some(Ok(message)) => tracing::warn!(
            partition = message.partition(),
            offset = message.offset(),
            "a record of a partition not taken; skipped"
        ),
        Some(Err(error)) => tracing::debug!(%error, "consumer"),
        None => {}
    }
}

/// Leaves the group: the revocation hands every partition over (snapshot
/// and commit), then the consumer closes.
fn leave(consumer: &BaseConsumer<Rebalancer>, fleet: &Fleet) {
    tracing::info!("leaving the consumer group: handing partitions over");
    consumer.unsubscribe();
    let deadline = Instant::now() + LEAVE_TIMEOUT;
    while !fleet.owned.is_empty() && Instant::now() < deadline {
        serve_events(consumer);
    }
    if !fleet.owned.is_empty() {
        let ids: Vec<i32> = fleet.owned.iter().map(|o| *o.key()).collect();
        consumer.context().checkpoint(consumer, &ids, true);
    }
    tracing::info!("partitions handed over");
}

#[cfg(test)]
mod tests {
    use super::{first_offset_held, RECORDS_EXPIRED_UNREAD};

    /// The value of the lost records' counter in `rendered` metrics text.
    fn expired(rendered: &str) -> f64 {
        rendered
            .lines()
            .find_map(|line| {
                line.strip_prefix(RECORDS_EXPIRED_UNREAD)?
                    .trim()
                    .parse()
                    .ok()
            })
            .unwrap_or(0.0)
    }

    #[test]
    fn records_deleted_before_they_were_read_are_counted_as_lost() {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || {
            // Where the snapshot left off is still held: read from there.
            assert_eq!(first_offset_held(3, 120, 100), 120);
            assert_eq!(first_offset_held(3, 100, 100), 100);
            assert_eq!(expired(&handle.render()), 0.0);
            // Records 120 to 149 were deleted unread: read from 150, and say so.
            assert_eq!(first_offset_held(3, 120, 150), 150);
            assert_eq!(expired(&handle.render()), 30.0);
        });
    }
}
