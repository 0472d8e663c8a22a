//! What leaves the engine: the report of `replay` and `GetMetrics`, and the
//! Prometheus text of `/metrics`.

pub mod positions;
pub mod prometheus;
mod report;
mod snapshot;

pub use report::{GroupReport, PositionPoint, Report, ReportConfig, ReportCounters};
pub use snapshot::{GroupSnapshot, Snapshot};
