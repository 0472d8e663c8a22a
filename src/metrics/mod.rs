//! Ranking metrics: the pure per-list functions of docs/SPEC.md §4 and the sums they
//! are aggregated into. Knows nothing of events, time or transport.

mod aggregate;
mod coverage;
mod hyperloglog;
pub mod interleaving;
mod list;
mod position;
pub mod uncertainty;

pub use aggregate::{no_lower, GroupTotals, MetricMeans};
pub use coverage::{Coverage, CoverageFigures, CoverageMode, FiguresCache, ShownList};
pub use hyperloglog::Slot;
pub use list::{Discount, Gain, ListEvaluator, Metric, MetricSettings, R_PRECISION};
pub use position::PositionCurve;
