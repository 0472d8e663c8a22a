//! Pacing of a stream's batches to its share of the rate.

use std::time::Duration;
use tokio::time::Instant;

/// How far a paced stream may fall behind before it stops catching up, in batches.
const MAX_CATCH_UP: u32 = 8;

/// Spaces batches to a rate; lets a stream that fell behind catch up a little, not without bound.
pub(super) struct Pacer {
    period: Option<Duration>,
    next: Instant,
}

impl Pacer {
    /// `rate` events per second in batches of `batch_size`; 0 is unpaced.
    pub(super) fn new(rate: f64, batch_size: usize) -> Self {
        let period =
            (rate > 0.0).then(|| Duration::from_secs_f64((batch_size as f64 / rate).min(3600.0)));
        Self {
            period,
            next: Instant::now(),
        }
    }

    /// Waits for the next batch's turn; cancel-safe.
    pub(super) async fn ready(&self) {
        if self.period.is_some() {
            tokio::time::sleep_until(self.next).await;
        }
    }

    pub(super) fn sent(&mut self) {
        let Some(period) = self.period else { return };
        let now = Instant::now();
        let floor = now.checked_sub(period * MAX_CATCH_UP).unwrap_or(now);
        self.next = (self.next + period).max(floor);
    }
}
