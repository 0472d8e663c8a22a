//! Where a stream's batches come from: generated as they are sent, or
//! generated and encoded before the run.

use super::sender::EncodedBatch;
use super::Traffic;
use crate::clock::wall_clock;
use crate::event::Nanos;

/// Where a stream's batches come from.
pub(super) enum BatchSource {
    /// Generated as they are sent, at the wall clock.
    Live(Box<Traffic>),
    /// Generated and encoded before the run.
    Ready(std::vec::IntoIter<EncodedBatch>),
}

impl BatchSource {
    /// `count` batches of `batch_size` events from `traffic`, generated and
    /// encoded now, their event times `period` nanoseconds apart from now.
    pub(super) fn pregenerate(
        mut traffic: Traffic,
        count: u64,
        batch_size: usize,
        period: f64,
    ) -> Self {
        let start = wall_clock();
        let batches: Vec<_> = (0..count)
            .map(|index| {
                let now = start + (index as f64 * period) as Nanos;
                EncodedBatch::new(index + 1, traffic.next_batch(now, batch_size))
            })
            .collect();
        BatchSource::Ready(batches.into_iter())
    }

    /// The next batch, numbered `sequence` if generated now; `None` when a
    /// pregenerated source is used up.
    pub(super) fn next(&mut self, sequence: u64, batch_size: usize) -> Option<EncodedBatch> {
        match self {
            BatchSource::Live(traffic) => {
                let events = traffic.next_batch(wall_clock(), batch_size);
                Some(EncodedBatch::new(sequence, events))
            }
            BatchSource::Ready(batches) => batches.next(),
        }
    }
}
