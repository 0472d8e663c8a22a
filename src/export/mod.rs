//! What leaves the engine: the report of `replay` and `GetMetrics`, and the
//! Prometheus text of `/metrics`.

mod comparison;
pub mod coverage;
pub mod positions;
pub mod prometheus;
mod report;
mod series;
mod snapshot;

pub use comparison::{compare, Comparison, NamedTotals};
pub use report::{GroupReport, MeanPair, PositionPoint, Report, ReportConfig, ReportCounters};
pub use snapshot::{GroupSnapshot, Snapshot};
