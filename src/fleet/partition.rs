//! One partition of the event topic in the hands of this instance: its own
//! engine (join state and watermark, SPEC §10), fed the partition's records
//! in offset order by one task, so that the partitions of an instance are
//! evaluated in parallel on its cores.
//!
//! A record's value is decoded and validated as a gRPC event would be; one
//! that is not an `Event` is counted as rejected (`undecodable`) and skipped,
//! and one whose key is not its event's `user_id` is evaluated by the
//! `user_id` and counted as a key mismatch, so no record stalls the partition.

use crate::event::raw::EventView;
use crate::event::wire::parse_batch;
use crate::event::{Nanos, Reason, Validator};
use crate::join::{Engine, EngineState};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

/// Records queued per partition (in batches) before the consumer waits.
pub const QUEUED_BATCHES: usize = 16;

/// Undecodable records logged per partition per minute; the rest are only counted.
const LOGGED_PER_MINUTE: u32 = 10;

/// A record of the event topic, copied out of the client's buffers.
#[derive(Debug)]
pub struct Record {
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
}

/// The open state of a partition at a record boundary.
pub struct Checkpoint {
    /// The first record the state has not seen.
    pub next_offset: i64,
    /// The open state; `None` when nothing changed since the last checkpoint.
    pub state: Option<EngineState>,
}

/// What the consumer asks of a partition's task.
pub enum Work {
    /// Apply these records, in order.
    Records(Vec<Record>),
    /// Reply with a checkpoint; with `last`, stop after it (the partition
    /// is being handed over).
    Checkpoint {
        last: bool,
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
        scratch: Vec::new(),
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
    /// An `EventBatch` around the record being read.
    scratch: Vec<u8>,
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
                Some(Work::Checkpoint { last, reply }) => {
                    let _ = reply.send(self.checkpoint());
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

    fn checkpoint(&mut self) -> Checkpoint {
        let state = self.changed.then(|| self.partition.engine().open_state());
        self.changed = false;
        Checkpoint {
            next_offset: self.next_offset,
            state,
        }
    }

    fn apply(&mut self, records: &[Record]) {
        let partition = self.partition.clone();
        let mut engine = partition.engine();
        for record in records {
            if record.offset < self.next_offset {
                continue;
            }
            let recounting = record.offset < self.recount_until;
            let before = recounting.then(|| lists_by_group(&engine));
            self.apply_record(&mut engine, record);
            if let Some(before) = before {
                count_recounted(&engine, &before);
            }
            self.next_offset = record.offset + 1;
        }
        self.changed = true;
    }

    fn apply_record(&mut self, engine: &mut Engine, record: &Record) {
        let value = record.value.as_deref().unwrap_or_default();
        // An `Event` is an `EventBatch` of one: field 2, length-delimited.
        self.scratch.clear();
        self.scratch.push(0x12);
        push_varint(&mut self.scratch, value.len() as u64);
        self.scratch.extend_from_slice(value);
        let batch = match parse_batch(&self.scratch) {
            Ok(batch) if batch.events.len() == 1 => batch,
            _ => {
                engine.reject(Reason::Undecodable);
                self.log_undecodable(record.offset);
                return;
            }
        };
        let view = &batch.events[0];
        if let Some(user_id) = user_id(view) {
            if record.key.as_deref() != Some(user_id.as_bytes()) {
                metrics::counter!("rankwatch_kafka_key_mismatches_total").increment(1);
            }
        }
        let now: Nanos = crate::clock::wall_clock();
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

fn user_id<'a>(view: &EventView<'a>) -> Option<&'a str> {
    match view {
        EventView::Empty => None,
        EventView::Impression(m) => Some(m.user_id),
        EventView::Interaction(x) => Some(x.user_id),
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
