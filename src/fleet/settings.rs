//! The settings of fleet mode (docs/SPEC.md §10), resolved by the commands:
//! the mode, the broker, the topics and group, the commit and handover
//! timing, and the client's TLS/SASL properties.

use clap::ValueEnum;
#[cfg(feature = "kafka")]
use rdkafka::ClientConfig;
use serde::Deserialize;
use std::time::Duration;

/// What an instance does with the event log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FleetMode {
    /// Keep the gRPC `Collector` API and produce every accepted event to the topic.
    Relay,
    /// Evaluate the partitions the consumer group assigns.
    Consume,
}

/// Fleet settings, resolved and validated; `None` of [`FleetSettings::resolve`] means gRPC only.
#[derive(Clone, Debug, PartialEq)]
pub struct FleetSettings {
    /// Relay or consume.
    pub mode: FleetMode,
    /// Bootstrap brokers, comma-separated.
    pub brokers: String,
    /// The event topic, keyed by user.
    pub topic: String,
    /// The consumer group of the consuming instances.
    pub group: String,
    /// The compacted topic of the partitions' handoff snapshots.
    pub state_topic: String,
    /// How often each partition is snapshotted and its offset committed.
    pub commit_interval: Duration,
    /// Relay: how long a batch waits for the broker.
    pub delivery_timeout: Duration,
    /// How long a new owner waits for a live previous owner's handover,
    /// and retries the state topic while the broker cannot be reached.
    pub handover_timeout: Duration,
    /// Consume: how long an owned partition may read no record while
    /// records wait before it is called stalled.
    pub stall_timeout: Duration,
    /// How long a departing instance keeps serving its last figures.
    pub shutdown_linger: Duration,
    /// librdkafka properties of the connection: security protocol, SASL, TLS files.
    pub connection: Vec<(&'static str, String)>,
}

impl FleetSettings {
    /// The client configuration every connection of this instance starts from.
    #[cfg(feature = "kafka")]
    pub fn client(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", &self.brokers)
            .set("client.id", "rankwatch")
            // Never let a request of ours make a broker auto-create a topic
            // (Apache Kafka does by default, with its default partition
            // count and no compaction): topics are checked through the
            // admin API and the state topic is created as it must be.
            .set("allow.auto.create.topics", "false")
            // Reconnect quickly once an unreachable broker returns.
            .set("reconnect.backoff.max.ms", "1000");
        for (key, value) in &self.connection {
            config.set(*key, value);
        }
        config
    }
}

/// Why fleet settings are refused in a build without the `kafka` feature.
pub const NO_KAFKA: &str = "this rankwatch was built without Kafka (cargo's --no-default-features): fleet mode and kafka-check need the default build, e.g. cargo install --path .";
