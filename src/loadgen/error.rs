//! Why a load run or a feed stops.

use super::TrafficError;

/// Why a load run or a feed stopped.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// A load setting is unusable.
    #[error("{0}")]
    Setting(String),
    /// A traffic setting is unusable.
    #[error(transparent)]
    Traffic(#[from] TrafficError),
    /// The target is not a URI.
    #[error("invalid target {target:?}; give a URI like http://127.0.0.1:50051")]
    Target {
        /// The target given.
        target: String,
        /// Why it does not parse.
        #[source]
        source: tonic::transport::Error,
    },
    /// The server cannot be reached.
    #[error("cannot connect to {target}")]
    Connect {
        /// The target given.
        target: String,
        /// The transport's reason.
        #[source]
        source: tonic::transport::Error,
    },
    /// The Kafka producer failed, or the broker did not store a record in time.
    #[cfg(feature = "kafka")]
    #[error("producing to the Kafka brokers {brokers}")]
    Kafka {
        /// The brokers given.
        brokers: String,
        /// librdkafka's reason.
        #[source]
        source: rdkafka::error::KafkaError,
    },
    /// The server ended the stream with a status.
    #[error("ingest stream failed: {0}")]
    Rpc(Box<tonic::Status>),
    /// An ack for another batch than the oldest unacknowledged one.
    #[error("the server acknowledged batch {got} while batch {expected} was the oldest unacknowledged one")]
    AckOutOfOrder {
        /// The oldest unacknowledged sequence.
        expected: u64,
        /// The acknowledged sequence.
        got: u64,
    },
    /// The server closed the stream early.
    #[error("the server closed the ingest stream with {unacked} batches unacknowledged")]
    Closed {
        /// Batches sent and never acknowledged.
        unacked: usize,
    },
}

impl From<tonic::Status> for LoadError {
    fn from(status: tonic::Status) -> Self {
        LoadError::Rpc(Box::new(status))
    }
}
