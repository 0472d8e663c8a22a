//! The wall clock, read in one place, in the nanoseconds since the Unix
//! epoch that event times use, and the ticker of periodic tasks. It owns no
//! state: the server's `time_in_future` check and watermark advance, the
//! `/metrics` render, a rejected state file's name and the load generator
//! all read the same clock through it.

use crate::event::Nanos;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio_util::sync::CancellationToken;

/// Nanoseconds since the Unix epoch now; 0 on a clock set before it.
pub fn wall_clock() -> Nanos {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, nanos)
}

/// `duration` in nanoseconds, saturating at [`Nanos::MAX`] (some 292 years).
pub fn nanos(duration: Duration) -> Nanos {
    Nanos::try_from(duration.as_nanos()).unwrap_or(Nanos::MAX)
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::NANOS_PER_SECOND;

    #[test]
    fn the_wall_clock_reads_nanoseconds_since_the_epoch() {
        // 2020-01-01T00:00:00Z: any machine running this is later.
        assert!(wall_clock() > 1_577_836_800 * NANOS_PER_SECOND);
        assert_eq!(nanos(Duration::from_millis(1_500)), 1_500_000_000);
        assert_eq!(nanos(Duration::MAX), Nanos::MAX);
    }
}
