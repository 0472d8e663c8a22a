//! What leaves the engine: the report of `replay` and `GetMetrics`, and the
//! Prometheus text of `/metrics`.

pub mod prometheus;
mod report;

pub use report::{GroupReport, Report, ReportConfig, ReportCounters};
