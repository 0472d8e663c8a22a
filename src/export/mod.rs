//! What leaves the engine: the report of `replay` and `GetMetrics` (and its
//! wire form), and the Prometheus text of `/metrics`.

mod comparison;
pub mod coverage;
mod interleaving;
pub mod positions;
mod printable;
pub mod prometheus;
mod report;
mod series;
mod snapshot;
mod wire;

pub use comparison::{compare, Comparison, NamedTotals};
pub use interleaving::{ExperimentReport, SplitReport};
pub use printable::printable;
pub use report::{
    GroupReport, MeanPair, Pending, PositionPoint, Report, ReportConfig, ReportCounters,
    TABLE_METRICS,
};
pub use series::Text;
pub use snapshot::{ExperimentSnapshot, GroupSnapshot, Snapshot};
pub use wire::{to_proto, IncompleteReport};
