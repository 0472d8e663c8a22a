//! rankwatch: an evaluation sidecar for online recommenders. It joins ranked
//! lists (impressions) with feedback (interactions) inside an attribution
//! window and computes rank-aware metrics per list, online (`serve`) and
//! offline (`replay`) with the same engine.

pub mod clock;
pub mod codec;
pub mod config;
pub mod demo;
pub mod event;
pub mod export;
pub mod join;
pub mod loadgen;
pub mod metrics;
pub mod query;
pub mod replay;
pub mod server;
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
