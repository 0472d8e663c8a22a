//! Reads that a new owner retries while the broker cannot be reached: a
//! broker restarting while partitions are taken must not make them start
//! empty (a partition whose snapshot cannot be read loses its open lists).

use std::cell::Cell;
use std::time::{Duration, Instant};

/// The first pause between two tries; each pause doubles…
const FIRST_PAUSE: Duration = Duration::from_millis(100);
/// …up to this.
const LONGEST_PAUSE: Duration = Duration::from_secs(2);

/// The retries of one assignment's reads, all partitions together: they
/// stop once the broker has been unreachable for `timeout` since the first
/// failure, so that a long outage holds the rebalance for `timeout` in
/// all, not once per partition.
pub struct Retries {
    timeout: Duration,
    /// When retrying stops; set at the first failure.
    deadline: Cell<Option<Instant>>,
}

impl Retries {
    /// Retries that stop `timeout` after the first failure.
    pub fn new(timeout: Duration) -> Self {
        Self {
            timeout,
            deadline: Cell::new(None),
        }
    }

    /// Calls `read` until it succeeds, fails with an error that is not
    /// `transient`, or the time for retries is over; logs each failure
    /// retried, naming partition `id` and `what` was read.
    pub fn read<T, E: std::fmt::Display>(
        &self,
        id: i32,
        what: &str,
        transient: impl Fn(&E) -> bool,
        mut read: impl FnMut() -> Result<T, E>,
    ) -> Result<T, E> {
        let mut pause = FIRST_PAUSE;
        loop {
            let error = match read() {
                Err(error) if transient(&error) => error,
                done => return done,
            };
            let now = Instant::now();
            let deadline = self.deadline.get().unwrap_or(now + self.timeout);
            self.deadline.set(Some(deadline));
            if now + pause > deadline {
                return Err(error);
            }
            tracing::warn!(%error, partition = id, retry_in_ms = pause.as_millis() as u64, "reading {what} failed");
            std::thread::sleep(pause);
            pause = (pause * 2).min(LONGEST_PAUSE);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transient_failure_is_retried_until_the_read_succeeds() {
        let retries = Retries::new(Duration::from_secs(10));
        let mut failures = 3;
        let read = retries.read(
            0,
            "a test",
            |_: &&str| true,
            || {
                if failures == 0 {
                    return Ok(7);
                }
                failures -= 1;
                Err("down")
            },
        );
        assert_eq!(read, Ok(7));
    }

    #[test]
    fn a_lasting_failure_stops_at_the_timeout_shared_by_every_read() {
        // Alone, a read is tried 4 times in 1 s: at 0, 0.1, 0.3 and 0.7 s.
        let tries_within = |retries: &Retries| {
            let mut tries = 0;
            let read = retries.read(
                0,
                "a test",
                |_| true,
                || {
                    tries += 1;
                    Err::<(), _>("down")
                },
            );
            assert_eq!(read, Err("down"));
            tries
        };
        let retries = Retries::new(Duration::from_secs(1));
        let first = tries_within(&retries);
        // The next partition's read has what is left of the same second.
        let next = tries_within(&retries);
        assert!(next < first, "{next} tries after {first}");
    }

    #[test]
    fn a_failure_for_good_is_not_retried() {
        let retries = Retries::new(Duration::from_secs(10));
        let mut tries = 0;
        let read = retries.read(
            0,
            "a test",
            |_: &&str| false,
            || {
                tries += 1;
                Err::<(), _>("corrupt")
            },
        );
        assert_eq!((read, tries), (Err("corrupt"), 1));
    }
}
