//! The wall clock, read in one place, in the nanoseconds since the Unix
//! epoch that event times use. It owns no state: the server's `time_in_future`
//! check and watermark advance, the `/metrics` render, a rejected state file's
//! name and the load generator all read the same clock through it.

use crate::event::Nanos;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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
