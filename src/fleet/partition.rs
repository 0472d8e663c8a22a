//! One partition of the event topic in the hands of this instance: its own
//! engine (join state and watermark, SPEC §10), fed the partition's records
//! in offset order by one task, so that the partitions of an instance are
//! evaluated in parallel on its cores.
//!
//! A record's value is decoded and validated as a gRPC event would be; one
//! that is not an `Event` is counted as rejected (`undecodable`) and skipped,
//! and one whose key is not its event's `user_id` is evaluated by the
//! `user_id` and counted as a key mismatch, so no record stalls the partition.

use crate::event::wire::parse_batch;
use crate::event::{Nanos, Reason, Validator};
use crate::join::Engine;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

/// Records queued per partition (in batches) before the consumer waits.
pub const QUEUED_BATCHES: usize = 16;

/// Undecodable records logged per partition per minute; the rest are only counted.
const LOGGED_PER_MINUTE: u32 = 10;

/// Records of one partition, in offset order, copied out of the client's
/// buffers into one buffer: each value is stored as an `EventBatch` of one
/// event (field 2, length-delimited), ready for the batch reader, and the
/// buffer is freed at once by the partition's task.
#[derive(Debug, Default)]
pub struct Records {
    bytes: Vec<u8>,
    entries: Vec<Entry>,
}

/// Where one record's parts lie in [`Records::bytes`].
#[derive(Debug)]
struct Entry {
    offset: i64,
    key: Option<(usize, usize)>,
    batch: (usize, usize),
}

impl Records {
    /// Appends a record.
    pub fn push(&mut self, offset: i64, key: Option<&[u8]>, value: Option<&[u8]>) {
        let key = key.map(|key| self.append(key));
        let value = value.unwrap_or_default();
        let start = self.bytes.len();
        self.bytes.push(0x12);
        push_varint(&mut self.bytes, value.len() as u64);
        self.bytes.extend_from_slice(value);
        self.entries.push(Entry {
            offset,
            key,
            batch: (start, self.bytes.len()),
        });
    }

    fn append(&mut self, part: &[u8]) -> (usize, usize) {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(part);
        (start, self.bytes.len())
    }

    /// Each record: its offset, key, and value as an `EventBatch` of one.
    fn iter(&self) -> impl Iterator<Item = (i64, Option<&[u8]>, &[u8])> {
        self.entries.iter().map(|entry| {
            let key = entry.key.map(|(start, end)| &self.bytes[start..end]);
            let (start, end) = entry.batch;
            (entry.offset, key, &self.bytes[start..end])
        })
    }
}

/// The open state of a partition at a record boundary.
pub struct Checkpoint {
    /// The first record the state has not seen.
    pub next_offset: i64,
    /// The open state, encoded as an `EngineState`; `None` when nothing
    /// changed since the last checkpoint.
    pub state: Option<Result<Vec<u8>, postcard::Error>>,
}

/// What the consumer asks of a partition's task.
pub enum Work {
    /// Apply these records, in order.
    Records(Records),
    /// Reply with a checkpoint; with `last`, stop after it (the partition
    /// is being handed over); with `unsaved`, carry the state even if
    /// nothing changed (the last snapshot of it was not stored).
    Checkpoint {
        last: bool,
        unsaved: bool,
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
    pub validator: Validator,
    pub wall_clock_advance: bool,
}

/// Where a partition starts.
pub struct Start {
    pub engine: Engine,
    /// The first record to read.
    pub next_offset: i64,
    /// Lists finalized while applying records before this offset may have
    /// been counted by an owner that died: they are counted as recounted.
    pub recount_until: i64,
}

/// Starts the task of partition `id`; returns its engine and its queue.
pub fn start(
    id: i32,
    start: Start,
    settings: PartitionSettings,
) -> (Arc<Partition>, mpsc::Sender<Work>) {
    let partition = Arc::new(Partition {
        id,
        engine: Mutex::new(start.engine),
    });
    let (work, queue) = mpsc::channel(QUEUED_BATCHES);
    let task = Task {
        partition: partition.clone(),
        settings,
        next_offset: start.next_offset,
        recount_until: start.recount_until,
        changed: false,
        idle: true,
        logged: (Instant::now(), 0),
    };
    tokio::spawn(task.run(queue));
    (partition, work)
}

struct Task {
    partition: Arc<Partition>,
    settings: PartitionSettings,
    next_offset: i64,
    recount_until: i64,
    /// Something changed since the last checkpoint.
    changed: bool,
    /// No event was applied since the last wall-clock tick.
    idle: bool,
    /// Start of the current minute of logging and lines logged in it.
    logged: (Instant, u32),
}

impl Task {
    async fn run(mut self, mut queue: mpsc::Receiver<Work>) {
        let mut ticks = tokio::time::interval(Duration::from_secs(1));
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let work = tokio::select! {
                work = queue.recv() => work,
                _ = ticks.tick() => {
                    self.advance_if_idle();
                    continue;
                }
            };
            match work {
                None => return,
                Some(Work::Records(records)) => self.apply(&records),
                Some(Work::Checkpoint {
                    last,
                    unsaved,
                    reply,
                }) => {
                    let _ = reply.send(self.checkpoint(unsaved));
                    if last {
                        return;
                    }
                }
            }
        }
    }

    fn advance_if_idle(&mut self) {
        if self.settings.wall_clock_advance && self.idle {
            self.partition
                .engine()
                .advance_to(crate::clock::wall_clock());
            self.changed = true;
        }
        self.idle = true;
    }

    fn checkpoint(&mut self, unsaved: bool) -> Checkpoint {
        let state = (self.changed || unsaved).then(|| self.partition.engine().encode_open_state());
        self.changed = false;
        Checkpoint {
            next_offset: self.next_offset,
            state,
        }
    }

    fn apply(&mut self, records: &Records) {
        let partition = self.partition.clone();
        let mut engine = partition.engine();
        let now: Nanos = crate::clock::wall_clock();
        for (offset, key, batch) in records.iter() {
            if offset < self.next_offset {
                continue;
            }
            let recounting = offset < self.recount_until;
            let before = recounting.then(|| lists_by_group(&engine));
            self.apply_record(&mut engine, offset, key, batch, now);
            if let Some(before) = before {
                count_recounted(&engine, &before);
            }
            self.next_offset = offset + 1;
        }
        self.changed = true;
    }

    /// Applies one record, its value read as the `EventBatch` of one it is
    /// stored as, validated against the wall clock `now`.
    fn apply_record(
        &mut self,
        engine: &mut Engine,
        offset: i64,
        key: Option<&[u8]>,
        batch: &[u8],
        now: Nanos,
    ) {
        let batch = match parse_batch(batch) {
            Ok(batch) if batch.events.len() == 1 => batch,
            _ => {
                engine.reject(Reason::Undecodable);
                self.log_undecodable(offset);
                return;
            }
        };
        let view = &batch.events[0];
        if let Some(user_id) = view.user_id() {
            if key != Some(user_id.as_bytes()) {
                metrics::counter!("rankwatch_kafka_key_mismatches_total").increment(1);
            }
        }
        match self.settings.validator.view(view, &batch, now) {
            Ok(event) => {
                engine.apply(event);
                self.idle = false;
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

fn push_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
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
