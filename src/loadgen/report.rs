//! What a load run achieved: events/s, ack latency percentiles, the
//! loadgen's own CPU time, rejections by reason.

#![allow(unsafe_code)] // explained at each block (SAFETY)

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// How long a stream waits for its outstanding acks after its last batch.
pub(super) const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Ack latency percentiles over a run's batches.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LatencySummary {
    /// Median.
    pub p50: Duration,
    /// 90th percentile.
    pub p90: Duration,
    /// 99th percentile.
    pub p99: Duration,
    /// Slowest batch.
    pub max: Duration,
}

impl LatencySummary {
    /// Nearest-rank percentiles of `samples`; all zero when there are none.
    pub(super) fn of(mut samples: Vec<Duration>) -> Self {
        samples.sort_unstable();
        let at = |p: f64| {
            let rank = (p * samples.len() as f64).ceil() as usize;
            samples
                .get(rank.saturating_sub(1))
                .copied()
                .unwrap_or_default()
        };
        Self {
            p50: at(0.50),
            p90: at(0.90),
            p99: at(0.99),
            max: samples.last().copied().unwrap_or_default(),
        }
    }
}

/// What a load run achieved.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LoadReport {
    /// Streams used.
    pub streams: usize,
    /// Batches sent.
    pub batches: u64,
    /// Events sent.
    pub events_sent: u64,
    /// Impressions among the events sent.
    pub impressions_sent: u64,
    /// Interactions among the events sent.
    pub interactions_sent: u64,
    /// Events the server accepted.
    pub accepted: u64,
    /// Events the server rejected.
    pub rejected: u64,
    /// Rejected events by reason.
    pub rejected_by_reason: BTreeMap<String, u64>,
    /// Batches still unacknowledged when the drain timed out.
    pub unacked_batches: u64,
    /// From the first batch to the last ack.
    pub elapsed: Duration,
    /// Acknowledged events per second of `elapsed`.
    pub events_per_second: f64,
    /// Time from sending a batch to receiving its ack.
    pub ack_latency: LatencySummary,
    /// CPU time the loadgen process used over `elapsed` (not generating
    /// batches beforehand): what sending cost it.
    pub cpu: Duration,
}

impl fmt::Display for LoadReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let share = |part: u64| {
            if self.events_sent == 0 {
                0.0
            } else {
                100.0 * part as f64 / self.events_sent as f64
            }
        };
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        writeln!(
            f,
            "rankwatch loadgen: {} stream(s), {:.2} s",
            self.streams,
            self.elapsed.as_secs_f64()
        )?;
        writeln!(
            f,
            "  sent         {} events in {} batches ({:.1}% impressions, {:.1}% interactions)",
            self.events_sent,
            self.batches,
            share(self.impressions_sent),
            share(self.interactions_sent)
        )?;
        writeln!(
            f,
            "  acked        {} accepted, {} rejected",
            self.accepted, self.rejected
        )?;
        writeln!(f, "  throughput   {:.0} events/s", self.events_per_second)?;
        writeln!(
            f,
            "  ack latency  p50 {:.2} ms  p90 {:.2} ms  p99 {:.2} ms  max {:.2} ms",
            ms(self.ack_latency.p50),
            ms(self.ack_latency.p90),
            ms(self.ack_latency.p99),
            ms(self.ack_latency.max)
        )?;
        let elapsed = self.elapsed.as_secs_f64();
        writeln!(
            f,
            "  loadgen cpu  {:.2} s ({:.0}% of one core)",
            self.cpu.as_secs_f64(),
            if elapsed > 0.0 {
                100.0 * self.cpu.as_secs_f64() / elapsed
            } else {
                0.0
            }
        )?;
        for (reason, count) in &self.rejected_by_reason {
            writeln!(f, "  rejected     {reason}: {count}")?;
        }
        if self.unacked_batches > 0 {
            writeln!(
                f,
                "  unacked      {} batches (no ack within {:?})",
                self.unacked_batches, DRAIN_TIMEOUT
            )?;
        }
        Ok(())
    }
}

/// User and system CPU time this process has used so far.
pub(super) fn process_cpu() -> Duration {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage fills the rusage it points to, or leaves it zeroed
    // on failure (which only a bad `who` argument causes).
    let usage = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr());
        usage.assume_init()
    };
    let time = |t: libc::timeval| {
        Duration::new(t.tv_sec.max(0) as u64, 0) + Duration::from_micros(t.tv_usec.max(0) as u64)
    };
    time(usage.ru_utime) + time(usage.ru_stime)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loadgen::stats::StreamStats;

    #[test]
    fn latency_percentiles_use_the_nearest_rank() {
        let samples = (1..=100).map(Duration::from_millis).collect();
        let summary = LatencySummary::of(samples);
        assert_eq!(summary.p50, Duration::from_millis(50));
        assert_eq!(summary.p90, Duration::from_millis(90));
        assert_eq!(summary.p99, Duration::from_millis(99));
        assert_eq!(summary.max, Duration::from_millis(100));
        assert_eq!(LatencySummary::of(Vec::new()), LatencySummary::default());
    }

    #[test]
    fn the_report_reads_as_one_block() {
        let stats = StreamStats {
            batches: 10,
            impressions: 200,
            interactions: 800,
            accepted: 999,
            rejected: 1,
            rejected_by_reason: BTreeMap::from([("time_in_future".to_owned(), 1)]),
            latencies: vec![Duration::from_millis(2); 10],
            ..StreamStats::default()
        };
        let text = stats
            .report(1, Duration::from_secs(1), Duration::from_millis(250))
            .to_string();
        assert!(text.contains("1000 events/s"), "{text}");
        assert!(
            text.contains("loadgen cpu  0.25 s (25% of one core)"),
            "{text}"
        );
        assert!(
            text.contains("20.0% impressions, 80.0% interactions"),
            "{text}"
        );
        assert!(text.contains("p99 2.00 ms"), "{text}");
        assert!(text.contains("time_in_future: 1"), "{text}");
    }
}
