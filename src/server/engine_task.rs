//! The engine's owner: one task that applies batches in arrival order and
//! answers for snapshots and reports. Batches reach it over one bounded
//! channel, so a full queue pushes back on the ingest streams; questions
//! (snapshots for `/metrics`, reports) come over a second channel that it
//! serves first, so that a scrape never waits behind the queued batches,
//! only behind the one being applied. The state to save is asked for
//! behind the queued batches, so that a save holds every batch acknowledged
//! before it. It is a task
//! of the runtime rather than a thread of its own: handing batches between
//! threads cost 17% more CPU per event on a one-core sidecar.

use super::codec::RawBatch;
use super::telemetry::GROUPS_RETIRED_TOTAL;
use crate::config::EngineSettings;
use crate::event::wire::{parse_batch, WireError};
use crate::event::{Nanos, Validator};
use crate::export::{Report, ReportConfig, Snapshot};
use crate::join::{Engine, EngineState};
use crate::proto::{IngestAck, Rejection};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

/// The engine's answer to a batch: its ack, or why its bytes are not a batch.
pub type Applied = Result<IngestAck, WireError>;

/// What the engine task is asked to do (in fleet mode, the relay or the
/// consumer's figures answer instead).
pub(crate) enum Command {
    Apply {
        batch: RawBatch,
        stream_failed: Arc<AtomicBool>,
        done: oneshot::Sender<Applied>,
    },
    AdvanceIfIdle {
        now: Nanos,
    },
    RetireIdleGroups {
        now: Nanos,
        idle: Nanos,
    },
    Snapshot {
        reply: oneshot::Sender<Snapshot>,
    },
    Report {
        window: Option<usize>,
        reply: oneshot::Sender<Report>,
    },
    State {
        reply: oneshot::Sender<EngineState>,
    },
}

/// The engine task went away (it only does at shutdown).
#[derive(Debug, thiserror::Error)]
#[error("the engine has stopped")]
pub struct EngineStopped;

/// A cheap, cloneable handle to the engine task.
#[derive(Clone)]
pub struct EngineHandle {
    commands: mpsc::Sender<Command>,
    questions: mpsc::Sender<Command>,
}

/// Questions that may wait for the engine at once; more wait to be asked.
const QUESTION_QUEUE: usize = 64;

impl EngineHandle {
    /// Starts the engine task on `engine`, validating with `validator`, with
    /// a queue of `capacity` commands.
    pub fn start(
        engine: Engine,
        validator: Validator,
        settings: EngineSettings,
        capacity: usize,
    ) -> Self {
        let (commands, receiver) = mpsc::channel(capacity);
        let (questions, asked) = mpsc::channel(QUESTION_QUEUE);
        tokio::spawn(run(
            engine,
            validator,
            settings.report_config(),
            receiver,
            asked,
        ));
        Self {
            commands,
            questions,
        }
    }

    /// A handle whose commands and questions, queued together up to
    /// `capacity`, go to whoever holds the receiver.
    pub(crate) fn channel(capacity: usize) -> (Self, mpsc::Receiver<Command>) {
        let (commands, receiver) = mpsc::channel(capacity);
        let questions = commands.clone();
        (
            Self {
                commands,
                questions,
            },
            receiver,
        )
    }

    /// Queues a batch of a stream (waiting while the queue is full); the
    /// receiver gets its ack once it is applied. Once a batch of the stream
    /// turns out malformed, `stream_failed` is set and its later batches are
    /// dropped unapplied.
    pub async fn submit(
        &self,
        batch: RawBatch,
        stream_failed: Arc<AtomicBool>,
    ) -> Result<oneshot::Receiver<Applied>, EngineStopped> {
        let (done, applied) = oneshot::channel();
        self.commands
            .send(Command::Apply {
                batch,
                stream_failed,
                done,
            })
            .await
            .map_err(|_| EngineStopped)?;
        Ok(applied)
    }

    /// Applies one batch; returns its ack once it is applied.
    pub async fn apply(&self, batch: RawBatch) -> Result<Applied, EngineStopped> {
        self.submit(batch, Arc::default())
            .await?
            .await
            .map_err(|_| EngineStopped)
    }

    /// Moves the watermark to the wall clock `now` if no event arrived since the last call.
    pub async fn advance_if_idle(&self, now: Nanos) -> Result<(), EngineStopped> {
        self.commands
            .send(Command::AdvanceIfIdle { now })
            .await
            .map_err(|_| EngineStopped)
    }

    /// Retires the groups that received no impression during `idle` up to `now`.
    pub async fn retire_idle_groups(&self, now: Nanos, idle: Nanos) -> Result<(), EngineStopped> {
        self.commands
            .send(Command::RetireIdleGroups { now, idle })
            .await
            .map_err(|_| EngineStopped)
    }

    /// The engine's figures now.
    pub async fn snapshot(&self) -> Result<Snapshot, EngineStopped> {
        self.ask(|reply| Command::Snapshot { reply }).await
    }

    /// Sends the command that `command` makes of a reply channel, and awaits the reply.
    async fn ask<T>(
        &self,
        command: impl FnOnce(oneshot::Sender<T>) -> Command,
    ) -> Result<T, EngineStopped> {
        let (reply, answer) = oneshot::channel();
        self.questions
            .send(command(reply))
            .await
            .map_err(|_| EngineStopped)?;
        answer.await.map_err(|_| EngineStopped)
    }

    /// A copy of the engine's state, to save, once the batches queued
    /// before this call are applied: a save never misses a batch that was
    /// acknowledged before it was asked for.
    pub async fn state(&self) -> Result<EngineState, EngineStopped> {
        let (reply, answer) = oneshot::channel();
        self.commands
            .send(Command::State { reply })
            .await
            .map_err(|_| EngineStopped)?;
        answer.await.map_err(|_| EngineStopped)
    }

    /// The report since start (`None`) or for rolling window `index`.
    pub async fn report(&self, window: Option<usize>) -> Result<Report, EngineStopped> {
        self.ask(|reply| Command::Report { window, reply }).await
    }
}

async fn run(
    mut engine: Engine,
    validator: Validator,
    report_config: ReportConfig,
    mut commands: mpsc::Receiver<Command>,
    mut questions: mpsc::Receiver<Command>,
) {
    let mut idle = true;
    loop {
        let command = tokio::select! {
            biased;
            Some(question) = questions.recv() => question,
            command = commands.recv() => match command {
                Some(command) => command,
                None => break,
            },
        };
        match command {
            Command::Apply {
                batch,
                stream_failed,
                done,
            } => {
                if stream_failed.load(Ordering::Relaxed) {
                    continue;
                }
                let applied = apply(&mut engine, &validator, &batch);
                match &applied {
                    Ok(ack) => idle &= ack.accepted == 0,
                    Err(_) => stream_failed.store(true, Ordering::Relaxed),
                }
                let _ = done.send(applied);
            }
            Command::AdvanceIfIdle { now } => {
                if idle {
                    engine.advance_to(now);
                }
                idle = true;
            }
            Command::RetireIdleGroups { now, idle } => {
                let retired = engine.retire_idle_groups(now, idle);
                metrics::counter!(GROUPS_RETIRED_TOTAL).increment(retired as u64);
            }
            Command::Snapshot { reply } => {
                let _ = reply.send(Snapshot::of(&engine, report_config.control_model.clone()));
            }
            Command::Report { window, reply } => {
                let report = match window {
                    None => Report::since_start(&engine, &report_config),
                    Some(index) => Report::window(&engine, &report_config, index),
                };
                let _ = reply.send(report);
            }
            Command::State { reply } => {
                let _ = reply.send(engine.to_state());
            }
        }
    }
}

/// Reads and validates one batch, then applies it event by event, having
/// first prefetched the state of every event's user.
fn apply(engine: &mut Engine, validator: &Validator, batch: &RawBatch) -> Applied {
    let view = parse_batch(&batch.0)?;
    let now = crate::clock::wall_clock();
    engine.received_at(now);
    let mut ack = IngestAck {
        sequence: view.sequence,
        accepted: 0,
        rejections: Vec::new(),
    };
    let events: Vec<_> = view
        .events
        .iter()
        .map(|event| validator.view(event, &view, now))
        .collect();
    for event in events.iter().flatten() {
        engine.prefetch(event.user());
    }
    for (index, event) in events.into_iter().enumerate() {
        match event {
            Ok(event) => match engine.apply(event) {
                None => ack.accepted += 1,
                Some(shed) => ack.rejections.push(Rejection {
                    index: index as u32,
                    reason: shed.reason().to_owned(),
                    message: shed.message().to_owned(),
                }),
            },
            Err(rejection) => {
                engine.reject(rejection.reason);
                ack.rejections.push(Rejection {
                    index: index as u32,
                    reason: rejection.reason.as_str().to_owned(),
                    message: rejection.message,
                });
            }
        }
    }
    Ok(ack)
}
