//! The settings of fleet mode (docs/SPEC.md §10) from flags, environment and
//! the file: where the broker is, which topic and group, which mode, how
//! often to commit, how long to linger, and the client's TLS/SASL options.
//! Each is a TOML key, a flag and a `RANKWATCH_*` variable; precedence as
//! for every setting.

use super::{parse_duration, ConfigError};
use crate::fleet::{FleetMode, FleetSettings};
use clap::{Args, ValueEnum};
use serde::Deserialize;
use std::path::PathBuf;
use std::time::Duration;

/// How the client authenticates and encrypts (librdkafka's `security.protocol`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SecurityProtocol {
    /// No TLS, no SASL.
    Plaintext,
    /// TLS.
    Ssl,
    #[value(name = "sasl_plaintext")]
    /// SASL without TLS.
    SaslPlaintext,
    #[value(name = "sasl_ssl")]
    /// SASL over TLS.
    SaslSsl,
}

impl SecurityProtocol {
    fn as_str(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "plaintext",
            SecurityProtocol::Ssl => "ssl",
            SecurityProtocol::SaslPlaintext => "sasl_plaintext",
            SecurityProtocol::SaslSsl => "sasl_ssl",
        }
    }
}

/// Fleet settings from flags and environment.
#[derive(Args, Clone, Debug, Default)]
#[command(next_help_heading = "Fleet mode (Kafka)")]
pub struct FleetArgs {
    /// Fleet mode: `relay` (gRPC in, Kafka out) or `consume` (evaluate assigned partitions) [default: unset, gRPC only].
    #[arg(long, env = "RANKWATCH_KAFKA_MODE", value_enum)]
    pub kafka_mode: Option<FleetMode>,
    /// Kafka bootstrap brokers, comma-separated, e.g. 127.0.0.1:9092.
    #[arg(long, env = "RANKWATCH_KAFKA_BROKERS")]
    pub kafka_brokers: Option<String>,
    /// Topic of the events, keyed by user_id [default: rankwatch.events].
    #[arg(long, env = "RANKWATCH_KAFKA_TOPIC")]
    pub kafka_topic: Option<String>,
    /// Consumer group of the consuming instances [default: rankwatch].
    #[arg(long, env = "RANKWATCH_KAFKA_GROUP")]
    pub kafka_group: Option<String>,
    /// Topic of the partitions' handoff snapshots (compacted) [default: <kafka_topic>.state].
    #[arg(long, env = "RANKWATCH_KAFKA_STATE_TOPIC")]
    pub kafka_state_topic: Option<String>,
    /// How often each partition's open state is snapshotted and its offset committed [default: 1s].
    #[arg(long, env = "RANKWATCH_KAFKA_COMMIT_INTERVAL", value_parser = parse_duration)]
    pub kafka_commit_interval: Option<Duration>,
    /// Relay: how long a batch waits for the broker before its stream fails with UNAVAILABLE [default: 30s].
    #[arg(long, env = "RANKWATCH_KAFKA_DELIVERY_TIMEOUT", value_parser = parse_duration)]
    pub kafka_delivery_timeout: Option<Duration>,
    /// Consume: how long a newly assigned partition waits for its previous owner, still in the group, to hand it over, and for a broker that cannot be reached to answer [default: 30s].
    #[arg(long, env = "RANKWATCH_KAFKA_HANDOVER_TIMEOUT", value_parser = parse_duration)]
    pub kafka_handover_timeout: Option<Duration>,
    /// Consume: how long an owned partition may read no record while records wait before it is called stalled (logged, rankwatch_kafka_stalled_partitions) [default: 30s].
    #[arg(long, env = "RANKWATCH_KAFKA_STALL_TIMEOUT", value_parser = parse_duration)]
    pub kafka_stall_timeout: Option<Duration>,
    /// Consume: how long a departing instance keeps serving /metrics and GetMetrics after its last commit [default: 30s].
    #[arg(long, env = "RANKWATCH_SHUTDOWN_LINGER", value_parser = parse_duration)]
    pub shutdown_linger: Option<Duration>,
    /// Kafka security protocol [default: plaintext].
    #[arg(long, env = "RANKWATCH_KAFKA_SECURITY_PROTOCOL", value_enum)]
    pub kafka_security_protocol: Option<SecurityProtocol>,
    /// SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
    #[arg(long, env = "RANKWATCH_KAFKA_SASL_MECHANISM")]
    pub kafka_sasl_mechanism: Option<String>,
    /// SASL user name.
    #[arg(long, env = "RANKWATCH_KAFKA_SASL_USERNAME")]
    pub kafka_sasl_username: Option<String>,
    /// SASL password (prefer the environment variable to the flag).
    #[arg(long, env = "RANKWATCH_KAFKA_SASL_PASSWORD", hide_env_values = true)]
    pub kafka_sasl_password: Option<String>,
    /// PEM CA certificates to verify the brokers [default: the system's].
    #[arg(long, env = "RANKWATCH_KAFKA_SSL_CA")]
    pub kafka_ssl_ca: Option<PathBuf>,
    /// PEM client certificate, for brokers that require one.
    #[arg(long, env = "RANKWATCH_KAFKA_SSL_CERT")]
    pub kafka_ssl_cert: Option<PathBuf>,
    /// PEM private key of --kafka-ssl-cert.
    #[arg(long, env = "RANKWATCH_KAFKA_SSL_KEY")]
    pub kafka_ssl_key: Option<PathBuf>,
}

/// Fleet settings of the TOML file: every key optional.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetFile {
    /// `kafka_mode`.
    pub kafka_mode: Option<FleetMode>,
    /// `kafka_brokers`.
    pub kafka_brokers: Option<String>,
    /// `kafka_topic`.
    pub kafka_topic: Option<String>,
    /// `kafka_group`.
    pub kafka_group: Option<String>,
    /// `kafka_state_topic`.
    pub kafka_state_topic: Option<String>,
    #[serde(default, deserialize_with = "duration")]
    /// `kafka_commit_interval`.
    pub kafka_commit_interval: Option<Duration>,
    #[serde(default, deserialize_with = "duration")]
    /// `kafka_delivery_timeout`.
    pub kafka_delivery_timeout: Option<Duration>,
    #[serde(default, deserialize_with = "duration")]
    /// `kafka_handover_timeout`.
    pub kafka_handover_timeout: Option<Duration>,
    #[serde(default, deserialize_with = "duration")]
    /// `kafka_stall_timeout`.
    pub kafka_stall_timeout: Option<Duration>,
    #[serde(default, deserialize_with = "duration")]
    /// `shutdown_linger`.
    pub shutdown_linger: Option<Duration>,
    /// `kafka_security_protocol`.
    pub kafka_security_protocol: Option<SecurityProtocol>,
    /// `kafka_sasl_mechanism`.
    pub kafka_sasl_mechanism: Option<String>,
    /// `kafka_sasl_username`.
    pub kafka_sasl_username: Option<String>,
    /// `kafka_sasl_password`.
    pub kafka_sasl_password: Option<String>,
    /// `kafka_ssl_ca`.
    pub kafka_ssl_ca: Option<PathBuf>,
    /// `kafka_ssl_cert`.
    pub kafka_ssl_cert: Option<PathBuf>,
    /// `kafka_ssl_key`.
    pub kafka_ssl_key: Option<PathBuf>,
}

impl FleetFile {
    /// Whether `key` of the config file is a fleet setting.
    pub fn owns(key: &str) -> bool {
        key.starts_with("kafka_") || key == "shutdown_linger"
    }
}

fn duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    let text = String::deserialize(d)?;
    parse_duration(&text)
        .map(Some)
        .map_err(serde::de::Error::custom)
}

impl FleetSettings {
    /// Resolves flags and environment over `file` over defaults; `None` when no mode is set.
    pub fn resolve(args: &FleetArgs, file: &FleetFile) -> Result<Option<Self>, ConfigError> {
        let Some(mode) = args.kafka_mode.or(file.kafka_mode) else {
            return Ok(None);
        };
        if !cfg!(feature = "kafka") {
            return Err(invalid("kafka_mode", crate::fleet::settings::NO_KAFKA));
        }
        let text = |arg: &Option<String>, key: &Option<String>| arg.clone().or_else(|| key.clone());
        let brokers = text(&args.kafka_brokers, &file.kafka_brokers).ok_or_else(|| {
            invalid(
                "kafka_brokers",
                "kafka_mode needs the brokers, e.g. --kafka-brokers 127.0.0.1:9092",
            )
        })?;
        let Names {
            topic,
            group,
            state_topic,
        } = Names::resolve(args, file, mode)?;
        let commit_interval = args
            .kafka_commit_interval
            .or(file.kafka_commit_interval)
            .unwrap_or(Duration::from_secs(1));
        if commit_interval < Duration::from_millis(10) {
            return Err(invalid("kafka_commit_interval", "must be at least 10ms"));
        }
        super::bounded("kafka_commit_interval", commit_interval)?;
        let delivery_timeout = args
            .kafka_delivery_timeout
            .or(file.kafka_delivery_timeout)
            .unwrap_or(Duration::from_secs(30));
        if delivery_timeout < Duration::from_secs(1) {
            return Err(invalid("kafka_delivery_timeout", "must be at least 1s"));
        }
        super::bounded("kafka_delivery_timeout", delivery_timeout)?;
        let handover_timeout = args
            .kafka_handover_timeout
            .or(file.kafka_handover_timeout)
            .unwrap_or(Duration::from_secs(30));
        super::positive("kafka_handover_timeout", handover_timeout)?;
        let stall_timeout = args
            .kafka_stall_timeout
            .or(file.kafka_stall_timeout)
            .unwrap_or(Duration::from_secs(30));
        super::positive("kafka_stall_timeout", stall_timeout)?;
        super::bounded("kafka_stall_timeout", stall_timeout)?;
        Ok(Some(Self {
            mode,
            brokers,
            topic,
            group,
            state_topic,
            commit_interval,
            delivery_timeout,
            handover_timeout,
            stall_timeout,
            shutdown_linger: super::bounded(
                "shutdown_linger",
                args.shutdown_linger
                    .or(file.shutdown_linger)
                    .unwrap_or(Duration::from_secs(30)),
            )?,
            connection: connection(args, file),
        }))
    }
}

/// The consumer group of the consuming instances unless `kafka_group` is set.
const DEFAULT_GROUP: &str = "rankwatch";

fn invalid(key: &'static str, message: &str) -> ConfigError {
    ConfigError::Invalid {
        key,
        message: message.to_owned(),
    }
}

/// The librdkafka properties of the TLS and SASL settings that are set.
fn connection(args: &FleetArgs, file: &FleetFile) -> Vec<(&'static str, String)> {
    let path = |arg: &Option<PathBuf>, key: &Option<PathBuf>| {
        arg.clone()
            .or_else(|| key.clone())
            .map(|p| p.display().to_string())
    };
    let text = |arg: &Option<String>, key: &Option<String>| arg.clone().or_else(|| key.clone());
    [
        (
            "security.protocol",
            args.kafka_security_protocol
                .or(file.kafka_security_protocol)
                .map(|p| p.as_str().to_owned()),
        ),
        (
            "sasl.mechanism",
            text(&args.kafka_sasl_mechanism, &file.kafka_sasl_mechanism),
        ),
        (
            "sasl.username",
            text(&args.kafka_sasl_username, &file.kafka_sasl_username),
        ),
        (
            "sasl.password",
            text(&args.kafka_sasl_password, &file.kafka_sasl_password),
        ),
        (
            "ssl.ca.location",
            path(&args.kafka_ssl_ca, &file.kafka_ssl_ca),
        ),
        (
            "ssl.certificate.location",
            path(&args.kafka_ssl_cert, &file.kafka_ssl_cert),
        ),
        (
            "ssl.key.location",
            path(&args.kafka_ssl_key, &file.kafka_ssl_key),
        ),
    ]
    .into_iter()
    .filter_map(|(key, value)| value.map(|v| (key, v)))
    .collect()
}

/// The topics and group of fleet mode.
struct Names {
    topic: String,
    group: String,
    state_topic: String,
}

impl Names {
    /// Flags over `file` over defaults, each checked as Kafka would.
    fn resolve(args: &FleetArgs, file: &FleetFile, mode: FleetMode) -> Result<Self, ConfigError> {
        let text = |arg: &Option<String>, key: &Option<String>| arg.clone().or_else(|| key.clone());
        let topic = text(&args.kafka_topic, &file.kafka_topic)
            .unwrap_or_else(|| "rankwatch.events".to_owned());
        let group =
            text(&args.kafka_group, &file.kafka_group).unwrap_or_else(|| DEFAULT_GROUP.to_owned());
        topic_name("kafka_topic", &topic)?;
        if group.is_empty() {
            return Err(invalid("kafka_group", "must not be empty"));
        }
        let state_topic = match text(&args.kafka_state_topic, &file.kafka_state_topic) {
            Some(state_topic) => topic_name("kafka_state_topic", &state_topic).map(|()| state_topic)?,
            // Manifests do not name their group: a second group on the
            // default state topic restores the first one's snapshots.
            None if mode == FleetMode::Consume && group != DEFAULT_GROUP => {
                return Err(invalid(
                    "kafka_state_topic",
                    &format!("consumer group {group:?} needs a state topic of its own: the default, {topic}.state, is the {DEFAULT_GROUP:?} group's, and two groups on one state topic restore each other's snapshots, counting lists twice or losing them; set kafka_state_topic, e.g. to \"{topic}.{group}.state\" (or to \"{topic}.state\" if no other group has used it)"),
                ))
            }
            None => {
                let state_topic = format!("{topic}.state");
                topic_name("kafka_state_topic", &state_topic).map_err(|_| {
                    invalid(
                        "kafka_state_topic",
                        &format!("the default, {topic:?} + \".state\", is longer than Kafka's {MAX_TOPIC_NAME} characters: set kafka_state_topic, or shorten kafka_topic"),
                    )
                })?;
                state_topic
            }
        };
        Ok(Self {
            topic,
            group,
            state_topic,
        })
    }
}

/// The longest topic name Kafka takes.
const MAX_TOPIC_NAME: usize = 249;

/// Refuses, naming `setting`, a topic name Kafka would refuse: its
/// characters are ASCII letters, digits, '.', '_' and '-', at most 249 of
/// them, and neither "." nor "..".
fn topic_name(setting: &'static str, name: &str) -> Result<(), ConfigError> {
    let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    let why = if name.is_empty() || name == "." || name == ".." {
        "is not a topic name Kafka takes (empty, \".\" or \"..\")".to_owned()
    } else if let Some(c) = name.chars().find(|&c| !legal(c)) {
        format!("holds {c:?}: Kafka topic names use only ASCII letters, digits, '.', '_' and '-'")
    } else if name.len() > MAX_TOPIC_NAME {
        format!(
            "is {} characters long: Kafka takes at most {MAX_TOPIC_NAME}",
            name.len()
        )
    } else {
        return Ok(());
    };
    Err(invalid(setting, &why))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_mode_means_grpc_only() {
        let resolved = FleetSettings::resolve(&FleetArgs::default(), &FleetFile::default());
        assert!(matches!(resolved, Ok(None)));
    }

    #[test]
    fn flags_win_over_the_file_and_defaults_fill_the_rest() {
        let args = FleetArgs {
            kafka_mode: Some(FleetMode::Consume),
            kafka_topic: Some("events".into()),
            ..FleetArgs::default()
        };
        let file: FleetFile = toml::from_str(
            "kafka_brokers = \"b:9092\"\nkafka_topic = \"other\"\nkafka_commit_interval = \"250ms\"\nkafka_stall_timeout = \"10s\"\nkafka_security_protocol = \"sasl_ssl\"",
        )
        .unwrap();
        let settings = FleetSettings::resolve(&args, &file).unwrap().unwrap();
        assert_eq!(settings.topic, "events");
        assert_eq!(settings.state_topic, "events.state");
        assert_eq!(settings.group, "rankwatch");
        assert_eq!(settings.commit_interval, Duration::from_millis(250));
        assert_eq!(settings.stall_timeout, Duration::from_secs(10));
        assert_eq!(settings.shutdown_linger, Duration::from_secs(30));
        assert_eq!(
            settings.connection,
            [("security.protocol", "sasl_ssl".to_owned())]
        );
    }

    #[test]
    fn a_group_of_its_own_is_refused_the_default_groups_state_topic() {
        let resolve = |group: Option<&str>, state_topic: Option<&str>| {
            let args = FleetArgs {
                kafka_mode: Some(FleetMode::Consume),
                kafka_brokers: Some("b:9092".into()),
                kafka_group: group.map(Into::into),
                kafka_state_topic: state_topic.map(Into::into),
                ..FleetArgs::default()
            };
            FleetSettings::resolve(&args, &FleetFile::default())
        };
        let refused = resolve(Some("canary"), None).unwrap_err().to_string();
        assert!(
            refused.contains("kafka_state_topic")
                && refused.contains("\"rankwatch.events.canary.state\""),
            "{refused}"
        );
        let own = resolve(Some("canary"), Some("canary.state"))
            .unwrap()
            .unwrap();
        assert_eq!(own.state_topic, "canary.state");
        let default = resolve(None, None).unwrap().unwrap();
        assert_eq!(default.state_topic, "rankwatch.events.state");
    }

    #[test]
    fn a_mode_without_brokers_is_refused() {
        let args = FleetArgs {
            kafka_mode: Some(FleetMode::Relay),
            ..FleetArgs::default()
        };
        let error = FleetSettings::resolve(&args, &FleetFile::default()).unwrap_err();
        assert!(error.to_string().contains("kafka_brokers"), "{error}");
    }
}
