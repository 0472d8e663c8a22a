//! rankwatch: an evaluation sidecar for online recommenders. It joins ranked
//! lists (impressions) with feedback (interactions) inside an attribution
//! window and computes rank-aware metrics per list, online (`serve`) and
//! offline (`replay`) with the same engine.
//!
//! # The path of an event
//!
//! ```text
//! gRPC EventBatch ─ server::collector ─ event::wire ─┐
//!                                                     ├─ event::raw ─ event::validate ─ join ─ metrics ─ window ─ export
//! JSON Lines log ─── replay ─────────── event::json ─┘    (readers)    (domain events)  (attribution)  (per list) (rolling) (Prometheus, report)
//! ```
//!
//! 1. A reader turns bytes into [`event::raw`] events, borrowing every string:
//!    [`event::wire`] reads protobuf batches as the collector receives them,
//!    [`event::json`] reads the replay log.
//! 2. `event::validate` checks each event on its own and either builds a
//!    domain [`event::Event`] (ids hashed to 64 bits once) or rejects it with
//!    a stable reason.
//! 3. [`join::Engine`] keeps each user's open impressions and waiting
//!    interactions, credits interactions under the watermark, and finalizes
//!    lists whose window has closed.
//! 4. [`metrics`] computes every metric of a finalized list in one pass and
//!    adds it to its group's sums; [`window`] keeps the same sums in rolling
//!    time buckets.
//! 5. [`export`] turns the sums into Prometheus text and the JSON/table
//!    report.
//!
//! # Layout
//!
//! Dependencies point down this table: a module uses those below it, never
//! one above. Commands wire the rest together; no component imports
//! [`config`]; [`server`] and [`fleet`] each use [`engine`] and never each
//! other.
//!
//! | layer | module | owns |
//! |---|---|---|
//! | commands | `main.rs` | the command line, handing over to a command |
//! | | [`serve`] | `rankwatch serve`: binds the listeners, chooses the local engine or fleet mode, wires them |
//! | | [`replay`] | `rankwatch replay`: offline evaluation of a log with the same engine |
//! | | [`query`] | `rankwatch query`: a running server's report, filtered |
//! | | [`kafka_check`] | `rankwatch kafka-check`: the topics and group fleet mode needs |
//! | | [`demo`], [`loadgen`] | synthetic traffic and its click model |
//! | settings | [`config`] | file, environment, flags, defaults, ranges; one file per component |
//! | shells | [`server`] | gRPC services and the HTTP listener with their bounds, handed an engine handle |
//! | | [`fleet`] | Kafka relay and consume: an engine per partition behind the same handle, the topics' checks |
//! | | [`process`] | the process's memory and file limits |
//! | engine | [`engine`] | the engine's settings, handle, owner task, saved state, periodic work, readiness |
//! | | [`state`] | the state file on disk |
//! | pure | [`event`] | readers, validation, domain events, event time |
//! | | [`join`] | attribution state per user, watermark, finalization |
//! | | [`metrics`] | the per-list metric functions and their sums |
//! | | [`window`] | rolling time buckets per group |
//! | | [`export`] | Prometheus series, the report and its wire form |
//! | | [`sequential`] | anytime-valid confidence sequences and their simulation |
//! | | [`split_check`] | the anytime-valid sample ratio check and its simulation |
//! | | [`sensitivity`] | interleaving against A/B by simulation: lists until the sequence excludes 0 |
//! | shared | [`codec`], [`clock`], [`address`] | the raw gRPC codec; the wall clock and the ticker of periodic tasks; the gRPC address a command is given |
//! | | [`pem`], [`files`] | the TLS settings' PEM files, checked; files the settings name, read within a bound |
//!
//! Pure logic ([`event`], [`join`], [`metrics`], [`window`], [`export`])
//! knows nothing of gRPC, HTTP, Kafka or files; `serve`, fleet mode and
//! `replay` are shells around the same engine, so offline and online figures
//! cannot drift apart.

#![deny(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod address;
pub mod clock;
pub mod codec;
pub mod config;
pub mod demo;
pub mod engine;
pub mod event;
pub mod export;
pub mod files;
pub mod fleet;
pub mod join;
#[cfg(feature = "kafka")]
pub mod kafka_check;
pub mod loadgen;
pub mod metrics;
pub mod parallel;
pub mod pem;
mod prefetch;
pub mod process;
pub mod query;
pub mod replay;
pub mod sensitivity;
pub mod sequential;
pub mod serve;
pub mod server;
pub mod split_check;
pub mod state;
pub mod window;

/// Types generated from `proto/rankwatch/v1/rankwatch.proto`.
#[allow(missing_docs, clippy::all)]
pub mod proto {
    tonic::include_proto!("rankwatch.v1");

    /// Encoded descriptors of the API, for gRPC server reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        tonic::include_file_descriptor_set!("rankwatch_descriptor");
}
