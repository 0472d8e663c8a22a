//! The engine's owner: one thread that applies batches in arrival order and
//! answers for snapshots and reports. Everything reaches it over one bounded
//! channel, so a full queue pushes back on the ingest streams.

use crate::config::EngineSettings;
use crate::event::{Event, Nanos, Reason};
use crate::export::{Report, Snapshot};
use crate::join::{Engine, EngineState};
use tokio::sync::{mpsc, oneshot};

/// A batch's validated events and the reasons of its rejected ones, in batch order.
pub type Batch = Vec<Result<Event<'static>, Reason>>;

/// What the engine thread is asked to do.
enum Command {
    Apply { batch: Batch, done: oneshot::Sender<()> },
    AdvanceIfIdle { now: Nanos },
    Snapshot { reply: oneshot::Sender<Snapshot> },
    Report { window: Option<usize>, reply: oneshot::Sender<Report> },
    State { reply: oneshot::Sender<EngineState> },
}

/// The engine thread went away (it only does at shutdown).
#[derive(Debug, thiserror::Error)]
#[error("the engine has stopped")]
pub struct EngineStopped;

/// A cheap, cloneable handle to the engine thread.
#[derive(Clone)]
pub struct EngineHandle {
    commands: mpsc::Sender<Command>,
}

impl EngineHandle {
    /// Starts the engine thread on `engine` with a queue of `capacity` commands.
    pub fn start(engine: Engine, settings: EngineSettings, capacity: usize) -> Self {
        let (commands, receiver) = mpsc::channel(capacity);
        std::thread::Builder::new()
            .name("rankwatch-engine".into())
            .spawn(move || run(engine, settings, receiver))
            .expect("the engine thread could not start");
        Self { commands }
    }

    /// Queues a batch (waiting while the queue is full); the receiver
    /// completes once the batch is applied.
    pub async fn submit(&self, batch: Batch) -> Result<oneshot::Receiver<()>, EngineStopped> {
        let (done, applied) = oneshot::channel();
        self.commands.send(Command::Apply { batch, done }).await.map_err(|_| EngineStopped)?;
        Ok(applied)
    }

    /// Applies a batch in arrival order; returns once it is applied.
    pub async fn apply(&self, batch: Batch) -> Result<(), EngineStopped> {
        self.submit(batch).await?.await.map_err(|_| EngineStopped)
    }

    /// Moves the watermark to the wall clock `now` if no event arrived since the last call.
    pub async fn advance_if_idle(&self, now: Nanos) -> Result<(), EngineStopped> {
        self.commands.send(Command::AdvanceIfIdle { now }).await.map_err(|_| EngineStopped)
    }

    /// The engine's figures now.
    pub async fn snapshot(&self) -> Result<Snapshot, EngineStopped> {
        let (reply, answer) = oneshot::channel();
        self.commands.send(Command::Snapshot { reply }).await.map_err(|_| EngineStopped)?;
        answer.await.map_err(|_| EngineStopped)
    }

    /// A copy of the engine's state, to save.
    pub async fn state(&self) -> Result<EngineState, EngineStopped> {
        let (reply, answer) = oneshot::channel();
        self.commands.send(Command::State { reply }).await.map_err(|_| EngineStopped)?;
        answer.await.map_err(|_| EngineStopped)
    }

    /// The report since start (`None`) or for rolling window `index`.
    pub async fn report(&self, window: Option<usize>) -> Result<Report, EngineStopped> {
        let (reply, answer) = oneshot::channel();
        self.commands.send(Command::Report { window, reply }).await.map_err(|_| EngineStopped)?;
        answer.await.map_err(|_| EngineStopped)
    }
}

fn run(mut engine: Engine, settings: EngineSettings, mut commands: mpsc::Receiver<Command>) {
    let mut idle = true;
    while let Some(command) = commands.blocking_recv() {
        match command {
            Command::Apply { batch, done } => {
                for event in batch {
                    match event {
                        Ok(event) => {
                            engine.apply(event);
                            idle = false;
                        }
                        Err(reason) => engine.reject(reason),
                    }
                }
                let _ = done.send(());
            }
            Command::AdvanceIfIdle { now } => {
                if idle {
                    engine.advance_to(now);
                }
                idle = true;
            }
            Command::Snapshot { reply } => {
                let _ = reply.send(Snapshot::of(&engine));
            }
            Command::Report { window, reply } => {
                let report = match window {
                    None => Report::since_start(&engine, &settings),
                    Some(index) => Report::window(&engine, &settings, index),
                };
                let _ = reply.send(report);
            }
            Command::State { reply } => {
                let _ = reply.send(engine.state());
            }
        }
    }
}
