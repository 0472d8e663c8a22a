//! The engine as `serve` runs it, below both the gRPC/HTTP server and fleet
//! mode: its settings, the handle that every caller holds, the task that
//! owns a local engine, its state across restarts, its periodic work, and
//! the readiness that the HTTP listener reports.
//!
//! Dependencies point down: `server` and `fleet` use this module and never
//! each other; this module uses the pure stages (`event`, `join`,
//! `export`) and knows nothing of gRPC, HTTP or Kafka.

mod ack;
mod batch;
mod command;
mod handle;
mod owner;
pub mod periodic;
pub mod persistence;
mod readiness;
mod settings;

pub use ack::AckBuilder;
pub use batch::RawBatch;
pub use command::{Applied, Command};
pub use handle::{EngineHandle, EngineStopped};
pub use owner::{EXPERIMENTS_RETIRED_TOTAL, GROUPS_RETIRED_TOTAL};
pub use readiness::Readiness;
pub use settings::EngineSettings;

/// Describes the engine's own series, and creates its counters at zero so
/// that `rate()` and alerts see them from the start.
pub fn describe() {
    metrics::describe_counter!(
        GROUPS_RETIRED_TOTAL,
        "Groups retired after group_idle_timeout without an impression (gone from the list metrics, their slots under max_groups freed)."
    );
    metrics::counter!(GROUPS_RETIRED_TOTAL).absolute(0);
    metrics::describe_counter!(
        EXPERIMENTS_RETIRED_TOTAL,
        "Interleaving experiments retired with the idle groups: no lineup left names them (gone from the interleaving series, their slots under max_groups freed)."
    );
    metrics::counter!(EXPERIMENTS_RETIRED_TOTAL).absolute(0);
    persistence::describe();
}
