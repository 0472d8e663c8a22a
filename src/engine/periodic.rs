//! The engine's periodic work in `serve`: the watermark's advance with the
//! wall clock, and the retirement of idle groups.

use super::EngineHandle;
use crate::clock::{wall_clock, Every};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

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

/// Moves the watermark with the wall clock while no event raises it, so that
/// no list waits forever.
pub async fn advance_with_wall_clock(engine: EngineHandle, shutdown: CancellationToken) {
    let mut every = Every::new(Duration::from_secs(1), shutdown);
    while every.tick().await {
        if engine.advance_if_idle(wall_clock()).await.is_err() {
            return;
        }
    }
}
