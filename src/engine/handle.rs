//! The handle to an engine: what the gRPC services, the HTTP listener and
//! the periodic tasks hold. A local engine answers through its owner task
//! ([`super::owner`]); in fleet mode the relay or the consumer's figures
//! answer the same commands.

use super::command::{Applied, Command};
use super::{EngineSettings, RawBatch};
use crate::event::{Nanos, Validator};
use crate::export::{Report, Snapshot};
use crate::join::{EncodedState, Engine, StatePieces};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

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
        tokio::spawn(super::owner::run(
            engine,
            validator,
            settings.report_config(),
            settings.max_ack_rejections,
            receiver,
            asked,
        ));
        Self {
            commands,
            questions,
        }
    }

    /// Resolves once the engine has stopped taking commands: at shutdown,
    /// or when it ended unexpectedly (a panic in it).
    pub async fn stopped(&self) {
        self.commands.closed().await;
    }

    /// A handle whose commands and questions, queued together up to
    /// `capacity`, go to whoever holds the receiver.
    pub fn channel(capacity: usize) -> (Self, mpsc::Receiver<Command>) {
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

    /// Moves the watermark to the wall clock `now` if no event raised it since the last call.
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

    /// The engine's state, encoded to save into `spare`'s pieces first,
    /// once the batches queued before this call are applied: a save never
    /// misses a batch that was acknowledged before it was asked for.
    pub async fn state(
        &self,
        spare: StatePieces,
    ) -> Result<postcard::Result<EncodedState>, EngineStopped> {
        let (reply, answer) = oneshot::channel();
        self.commands
            .send(Command::State { spare, reply })
            .await
            .map_err(|_| EngineStopped)?;
        answer.await.map_err(|_| EngineStopped)
    }

    /// The report since start (`None`) or for rolling window `index`.
    pub async fn report(&self, window: Option<usize>) -> Result<Report, EngineStopped> {
        self.ask(|reply| Command::Report { window, reply }).await
    }
}
