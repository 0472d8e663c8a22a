//! Fleet mode (docs/SPEC.md §10): events go through a Kafka topic partitioned by
//! user, and instances share its partitions as a consumer group. A relay
//! instance takes gRPC batches and produces them ([`relay`]); a consuming
//! instance evaluates the partitions the group assigns it, each with its own
//! engine ([`partition`]), each reading its own queue of records
//! ([`feed`]), and hands them over through snapshots of their
//! open state in the state topic ([`snapshot`], [`consume`]).
//!
//! The rest of the server sees an [`EngineHandle`]: the relay answers it
//! with its producer, a consuming instance with the sum of its partitions'
//! figures.

#[cfg(feature = "kafka")]
pub mod consume;
#[cfg(feature = "kafka")]
pub mod feed;
#[cfg(feature = "kafka")]
mod generation;
#[cfg(feature = "kafka")]
pub mod partition;
#[cfg(feature = "kafka")]
mod partitioner;
#[cfg(feature = "kafka")]
pub mod relay;
#[cfg(feature = "kafka")]
mod reports;
#[cfg(feature = "kafka")]
mod retry;
#[cfg(feature = "kafka")]
mod run;
pub mod settings;
#[cfg(feature = "kafka")]
pub mod snapshot;
#[cfg(feature = "kafka")]
pub mod topics;
#[cfg(feature = "kafka")]
pub use run::{describe, probe_broker, start, EngineSetup};

pub use settings::{FleetMode, FleetSettings};

use crate::engine::EngineHandle;
use tokio_util::sync::CancellationToken;

/// What the server runs in fleet mode.
pub struct Started {
    /// Where batches and questions for figures go.
    pub engine: EngineHandle,
    /// Whether the `Collector` API is served (relay) or not (consume).
    pub collector: bool,
    /// Cancelled when the listeners are to stop: at shutdown for a relay;
    /// for a consuming instance once it has handed its partitions over and
    /// lingered for `shutdown_linger`, so that its last counts are scraped.
    pub serving: CancellationToken,
}
