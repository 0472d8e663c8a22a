//! The server's tasks and the drain that waits for them, as mini-redis's
//! shutdown does: every task holds a token while it runs, and the drain is
//! over once the last token is dropped.

use std::future::Future;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Spawns the server's tasks, each holding a token of the drain while it runs.
#[derive(Clone)]
pub struct Tasks {
    running: watch::Receiver<()>,
}

impl Tasks {
    /// Spawns `task`, which the drain waits for.
    pub fn spawn<F>(&self, task: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let running = self.running.clone();
        tokio::spawn(async move {
            let _running = running;
            task.await
        })
    }
}

/// What waits, at shutdown, for every task spawned through its [`Tasks`].
pub struct Drain {
    over: watch::Sender<()>,
}

impl Drain {
    /// A drain and the spawner of the tasks it waits for.
    pub fn new() -> (Self, Tasks) {
        let (over, running) = watch::channel(());
        (Self { over }, Tasks { running })
    }

    /// Waits for every task, at most `deadline`, once `tasks` (the last
    /// spawner) is given up; `false`, with a log line, when the deadline
    /// passed first. The tasks still running then end with the runtime.
    pub async fn wait(self, tasks: Tasks, deadline: Duration) -> bool {
        drop(tasks);
        if tokio::time::timeout(deadline, self.over.closed())
            .await
            .is_ok()
        {
            return true;
        }
        tracing::warn!(
            drain_timeout = %humantime::format_duration(deadline),
            unfinished_tasks = self.over.receiver_count(),
            "drain deadline passed; stopping without waiting for the rest"
        );
        false
    }
}
