//! The clock of the server's periodic tasks, and the two of them that
//! belong to no other room: the watermark's advance with the wall clock,
//! and the retirement of idle groups.

use super::engine_task::EngineHandle;
use crate::clock::wall_clock;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// A tick every period until shutdown; a late tick is delayed rather than
/// followed by a burst.
pub struct Every {
    ticks: tokio::time::Interval,
    shutdown: CancellationToken,
}

impl Every {
    /// Ticks every `period`, the first at once, until `shutdown`.
    pub fn new(period: Duration, shutdown: CancellationToken) -> Self {
        let mut ticks = tokio::time::interval(period);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Self { ticks, shutdown }
    }

    /// Ticks every `period`, the first one period in, until `shutdown`.
    pub fn after_one(period: Duration, shutdown: CancellationToken) -> Self {
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Self { ticks, shutdown }
    }

    /// Waits for the next tick; `false` once shutdown has begun.
    pub async fn tick(&mut self) -> bool {
        tokio::select! {
            _ = self.shutdown.cancelled() => false,
            _ = self.ticks.tick() => true,
        }
    }
}

/// Most time between two sweeps for idle groups.
const LONGEST_SWEEP_PERIOD: Duration = Duration::from_secs(60);

/// Retires the groups that received no impression for `idle`, sweeping
/// every tenth of `idle` and at least once a minute, so that a group goes
/// at most a tenth of `idle` late.
pub async fn retire_idle_groups(engine: EngineHandle, idle: Duration, shutdown: CancellationToken) {
    let period = (idle / 10).clamp(Duration::from_millis(1), LONGEST_SWEEP_PERIOD);
    let idle = crate::event::Nanos::try_from(idle.as_nanos()).unwrap_or(crate::event::Nanos::MAX);
    let mut every = Every::after_one(period, shutdown);
    while every.tick().await {
        if engine.retire_idle_groups(wall_clock(), idle).await.is_err() {
            return;
        }
    }
}

/// Moves the watermark with the wall clock while no events arrive, so that
/// no list waits forever.
pub async fn advance_with_wall_clock(engine: EngineHandle, shutdown: CancellationToken) {
    let mut every = Every::new(Duration::from_secs(1), shutdown);
    while every.tick().await {
        if engine.advance_if_idle(wall_clock()).await.is_err() {
            return;
        }
    }
}
