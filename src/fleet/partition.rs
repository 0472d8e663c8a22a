//! One partition of the event topic in the hands of this instance: its own
//! engine (join state and watermark, docs/SPEC.md §10), fed the partition's records
//! in offset order by one task, so that the partitions of an instance are
//! evaluated in parallel on its cores.
//!
//! A record's value is decoded and validated as a gRPC event would be; one
//! that is not an `Event` is counted as rejected (`undecodable`) and skipped,
//! and one whose key is not its event's `user_id` is evaluated by the
//! `user_id` and counted as a key mismatch, so no record stalls the partition.

use super::feed::{Feed, Fetched};
use super::partitioner::java_partition;
use super::snapshot::Chunks;
use crate::event::wire::parse_event_alone;
use crate::event::{id_hash_bytes, Nanos, Reason, Validator};
use crate::join::Engine;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

/// Checkpoint requests queued per partition.
pub const QUEUED_REQUESTS: usize = 4;

/// Records read from the partition's queue at once, at most.
const RECORDS_PER_READ: usize = 512;

/// Reads in a row before the task lets a checkpoint request in.
const READS_PER_TURN: usize = 16;

/// Undecodable records logged per partition per minute; the rest are only counted.
const LOGGED_PER_MINUTE: u32 = 10;

/// The open state of a partition at a record boundary.
pub struct Checkpoint {
    /// The first record the state has not seen.
    pub next_offset: i64,
    /// The open state, encoded as an `EngineState`; `None` when nothing
    /// changed since the last checkpoint.
    pub state: Option<Result<Chunks, postcard::Error>>,
}

/// What the consumer thread asks of a partition's task.
pub enum Work {
    /// Reply with a checkpoint; with `last`, stop after it (the partition
    /// is being handed over); with `unsaved`, carry the state even if
    /// nothing changed (the last snapshot of it was not stored).
    Checkpoint {
        /// The partition is being handed over: the last checkpoint.
        last: bool,
        /// State changed since the last snapshot.
        unsaved: bool,
        /// Where the answer goes.
        reply: oneshot::Sender<Checkpoint>,
    },
}

/// A partition's engine, shared between its task and whoever reads its figures.
pub struct Partition {
    /// The partition number.
    pub id: i32,
    engine: Mutex<Engine>,
}

impl Partition {
    /// Locks the engine (a poisoned lock still holds a consistent engine:
    /// no code panics half-way through an event on purpose).
    pub fn engine(&self) -> MutexGuard<'_, Engine> {
        self.engine
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// How a partition's task runs.
#[derive(Clone)]
pub struct PartitionSettings {
    /// Validates each event.
    pub validator: Validator,
    /// Whether the watermark follows the wall clock while a partition is idle.
    pub wall_clock_advance: bool,
}

/// Where a partition starts.
pub struct Start {
    /// Where batches and questions for figures go.
    pub engine: Engine,
    /// The first record to read.
    pub next_offset: i64,
    /// What an owner that died may have counted already.
    pub recount: Recount,
    /// The partition's end when it was taken: its watermark follows the
    /// wall clock only once the records before it are read, so that a
    /// backlog older than the attribution window is evaluated, not late.
    pub backlog_end: i64,
    /// The event topic's partitions when it was taken, if known: a record's
    /// key should fall to this partition among them.
    pub partitions: Option<usize>,
}

/// What a partition's owner counts as recounted: what an owner that died
/// without handing it over may have counted already.
#[derive(Clone, Copy, Debug, Default)]
pub struct Recount {
    /// Lists finalized while applying records before this offset.
    pub until_offset: i64,
    /// Lists the watermark's first advance to the wall clock closes up to
    /// this time, when the partition was taken: that owner's watermark may
    /// have followed its own wall clock that far since its last snapshot.
    pub closed_until: Option<Nanos>,
}

impl Recount {
    /// Only the lists finalized while applying records before `offset`.
    pub fn records_before(offset: i64) -> Self {
        Recount {
            until_offset: offset,
            closed_until: None,
        }
    }

    /// What an owner that died may have counted of a partition whose end
    /// was `end` when it was taken, now.
    pub fn after_death(end: i64) -> Self {
        Recount {
            until_offset: end,
            closed_until: Some(crate::clock::wall_clock()),
        }
    }
}

/// Starts the task of partition `id`, reading its records from `feed`;
/// returns its engine and where to send it requests.
pub fn start(
    id: i32,
    start: Start,
    feed: Feed,
    settings: PartitionSettings,
) -> (Arc<Partition>, mpsc::Sender<Work>) {
    let partition = Arc::new(Partition {
        id,
        engine: Mutex::new(start.engine),
    });
    let (work, queue) = mpsc::channel(QUEUED_REQUESTS);
    let applier = Applier {
        partition: partition.clone(),
        settings,
        next_offset: start.next_offset,
        recount: start.recount,
        backlog_end: start.backlog_end,
        partitions: start.partitions,
        changed: false,
        watermark_at_tick: None,
        logged: (Instant::now(), 0),
    };
    tokio::spawn(Task { feed, applier }.run(queue));
    (partition, work)
}

/// A partition's task: reads its queue, applies its records, answers checkpoints.
struct Task {
    feed: Feed,
    applier: Applier,
}

/// Applies a partition's records to its engine, in offset order.
struct Applier {
    partition: Arc<Partition>,
    settings: PartitionSettings,
    next_offset: i64,
    recount: Recount,
    /// See [`Start::backlog_end`].
    backlog_end: i64,
    /// See [`Start::partitions`].
    partitions: Option<usize>,
    /// Something changed since the last checkpoint.
    changed: bool,
    /// `T` as the last wall-clock tick left it.
    watermark_at_tick: Option<Nanos>,
    /// Start of the current minute of logging and lines logged in it.
    logged: (Instant, u32),
}

impl Task {
    async fn run(mut self, mut queue: mpsc::Receiver<Work>) {
        let mut ticks = tokio::time::interval(Duration::from_secs(1));
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let work = tokio::select! {
                biased;
                work = queue.recv() => work,
                _ = self.feed.arrived() => {
                    self.read_feed();
                    continue;
                }
                _ = ticks.tick() => {
                    // Reading on every tick too: a wake-up missed for any
                    // reason delays the partition by a second, never stalls it.
                    self.read_feed();
                    self.applier.advance_if_idle();
                    continue;
                }
            };
            let Some(Work::Checkpoint {
                last,
                unsaved,
                reply,
            }) = work
            else {
                return;
            };
            let checkpoint = self.applier.checkpoint(unsaved);
            if last {
                // The partition's queue goes before the consumer thread
                // hears back, so that the consumer, which the queue keeps
                // alive, is closed by that thread and not by this task.
                drop(self);
                let _ = reply.send(checkpoint);
                return;
            }
            let _ = reply.send(checkpoint);
        }
    }

    /// Applies what the partition's queue holds, [`READS_PER_TURN`] reads
    /// at most: when more is left, the task comes back for it after any
    /// request that came in meanwhile.
    fn read_feed(&mut self) {
        for _ in 0..READS_PER_TURN {
            if self.read_once() < RECORDS_PER_READ {
                return;
            }
        }
        self.feed.wake();
    }

    /// Applies one read of the partition's queue, under one lock of its
    /// engine and one reading of the wall clock; returns how many records
    /// it held. Every record's user (its key) is looked up before any is
    /// applied, as the gRPC path does with a batch, so that their cache
    /// misses overlap instead of following one another.
    fn read_once(&mut self) -> usize {
        let partition = self.applier.partition.clone();
        let mut engine = partition.engine();
        let now: Nanos = crate::clock::wall_clock();
        engine.received_at(now);
        let batch = self.feed.read(RECORDS_PER_READ);
        for key in batch.records().filter_map(|r| r.ok()?.key) {
            engine.prefetch(id_hash_bytes(key));
        }
        for fetched in batch.records() {
            match fetched {
                Ok(record) => self.applier.apply(&mut engine, &record, now),
                Err(error) => tracing::debug!(partition = partition.id, error, "fetch"),
            }
        }
        if !batch.is_empty() {
            self.applier.changed = true;
        }
        if batch.len() < RECORDS_PER_READ {
            // The queue is emptied: any transaction marker after the last
            // record is read too (a partition at its marker is caught up).
            if let Some(position) = self.feed.position() {
                self.applier.next_offset = self.applier.next_offset.max(position);
            }
        }
        batch.len()
    }
}

impl Applier {
    /// Moves the watermark to the wall clock if no event raised it since
    /// the last tick (old events that do not raise it do not hold the wall
    /// clock back) and the backlog the partition was taken with is read (its
    /// first tick comes before its first fetch: a restart after an outage
    /// had counted the whole backlog late).
    fn advance_if_idle(&mut self) {
        if !self.settings.wall_clock_advance {
            return;
        }
        let caught_up = self.next_offset >= self.backlog_end;
        let mut engine = self.partition.engine();
        if engine.max_time() == self.watermark_at_tick && caught_up {
            let held = |e: &Engine| (e.open_impressions(), e.waiting_interactions());
            let before = held(&engine);
            if let Some(closed_until) = self.recount.closed_until.take() {
                let finalized = lists_by_group(&engine);
                engine.advance_to(closed_until);
                count_recounted(&engine, &finalized);
            }
            engine.advance_to(crate::clock::wall_clock());
            // The open state changed only if lists closed or interactions
            // gave up: `T` alone is not worth a snapshot of every open list
            // each second (a restored owner's wall clock moves it again).
            self.changed |= held(&engine) != before;
        }
        self.watermark_at_tick = engine.max_time();
    }

    fn checkpoint(&mut self, unsaved: bool) -> Checkpoint {
        let state = (self.changed || unsaved)
            .then(|| self.partition.engine().encode_open_state(Chunks::default()));
        self.changed = false;
        Checkpoint {
            next_offset: self.next_offset,
            state,
        }
    }

    /// Applies one record unless it was applied before (the queue may
    /// repeat records after the partition moved between instances).
    fn apply(&mut self, engine: &mut Engine, record: &Fetched<'_>, now: Nanos) {
        if record.offset < self.next_offset {
            return;
        }
        let recounting = record.offset < self.recount.until_offset;
        let before = recounting.then(|| lists_by_group(engine));
        self.apply_record(engine, record, now);
        if let Some(before) = before {
            count_recounted(engine, &before);
        }
        self.next_offset = record.offset + 1;
    }

    /// Applies one record, its value read as an `Event`, validated against
    /// the wall clock `now`.
    fn apply_record(&mut self, engine: &mut Engine, record: &Fetched<'_>, now: Nanos) {
        let Ok(batch) = parse_event_alone(record.value) else {
            engine.reject(Reason::Undecodable);
            self.log_undecodable(record.offset);
            return;
        };
        let view = &batch.events[0];
        if let Some(user_id) = view.user_id() {
            if record.key != Some(user_id.as_bytes()) {
                metrics::counter!("rankwatch_kafka_key_mismatches_total").increment(1);
            }
        }
        if let (Some(key), Some(partitions)) = (record.key, self.partitions) {
            if java_partition(key, partitions) != self.partition.id {
                metrics::counter!("rankwatch_kafka_partition_mismatches_total").increment(1);
            }
        }
        match self.settings.validator.view(view, &batch, now) {
            Ok(event) => {
                engine.apply(event);
            }
            Err(rejection) => engine.reject(rejection.reason),
        }
    }

    fn log_undecodable(&mut self, offset: i64) {
        let (minute, lines) = &mut self.logged;
        if minute.elapsed() >= Duration::from_secs(60) {
            *minute = Instant::now();
            *lines = 0;
        }
        *lines += 1;
        if *lines <= LOGGED_PER_MINUTE {
            tracing::warn!(
                partition = self.partition.id,
                offset,
                "skipped a record that is not a rankwatch.v1.Event (counted as rejected, reason undecodable)"
            );
        }
    }
}

/// Finalized lists per group id.
fn lists_by_group(engine: &Engine) -> Vec<u64> {
    engine.aggregates().iter().map(|a| a.totals.lists).collect()
}

/// Counts the lists finalized since `before` as recounted, per group.
fn count_recounted(engine: &Engine, before: &[u64]) {
    let mut recounted: BTreeMap<usize, u64> = BTreeMap::new();
    for (id, aggregates) in engine.aggregates().iter().enumerate() {
        let was = before.get(id).copied().unwrap_or(0);
        if aggregates.totals.lists > was {
            recounted.insert(id, aggregates.totals.lists - was);
        }
    }
    for (id, lists) in recounted {
        let name = &engine.group_names()[id];
        let mut labels = vec![
            metrics::Label::new("model", name.model.clone()),
            metrics::Label::new("surface", name.surface.clone()),
        ];
        for (label, value) in &name.segments {
            labels.push(metrics::Label::new(label.clone(), value.clone()));
        }
        metrics::counter!("rankwatch_lists_recounted_total", labels).increment(lists);
    }
}
