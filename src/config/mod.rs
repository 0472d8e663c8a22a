//! Settings: TOML file, `RANKWATCH_*` environment variables and flags, with
//! defaults and validation. Precedence: flag, environment, file, default.
//!
//! Only the commands import this module. Each component owns a plain
//! settings type ([`crate::engine::EngineSettings`],
//! [`crate::server::ServerSettings`], [`crate::fleet::FleetSettings`]); the
//! files here resolve one each from flags, environment and the file:
//! [`engine`], [`server`], [`fleet`], and [`replay`] for how `replay`
//! reads its logs.

pub mod choices;
pub mod defaults;
pub mod engine;
pub mod fleet;
pub mod replay;
pub mod server;
pub mod suggest;

pub use choices::{DiscountName, GainName};
pub use engine::EngineArgs;
pub use fleet::{FleetArgs, FleetFile};
pub use replay::LogArgs;
pub use server::ServerArgs;

use crate::event::GradeTable;
use clap::ValueEnum;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The heading of `--help` under which the limits and timeouts stand,
/// after the settings a first run is about.
const LIMITS_HEADING: &str = "Limits and timeouts";

/// A setting that is missing, malformed or out of range.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file could not be read.
    #[error("cannot read config file {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The config file is not valid TOML for rankwatch.
    #[error("config file {path}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// Why.
        source: toml::de::Error,
    },
    /// The config file sets a key that is no setting.
    #[error("config file {}{}: unknown key `{}`{}",
        .path.display(),
        .line.map(|line| format!(", line {line}")).unwrap_or_default(),
        .key.escape_debug(),
        .meant.as_ref().map_or_else(
            || "; every key is in docs/settings.md".to_owned(),
            |meant| format!("; did you mean `{meant}`? Every key is in docs/settings.md")))]
    UnknownKey {
        /// The file.
        path: PathBuf,
        /// The line that sets it, when found.
        line: Option<usize>,
        /// The key.
        key: String,
        /// The setting it was probably meant to be.
        meant: Option<String>,
    },
    /// A value is out of range.
    #[error("setting `{key}`: {message}")]
    Invalid {
        /// The setting.
        key: &'static str,
        /// What is wrong and what to give instead.
        message: String,
    },
}

pub(crate) fn invalid(key: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key,
        message: message.into(),
    }
}

/// Parses a duration written like `300ms`, `30s`, `5m`, `1h`, with a hint when it is not one.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text)
        .map_err(|e| format!("{e} (write durations like 300ms, 30s, 5m, 1h)"))
}

/// A setting's value: the flag or its environment variable (clap has
/// already merged the two, the flag first), else the file's key, else the default.
pub(crate) fn resolved<T>(flag: Option<T>, file: Option<T>, default: T) -> T {
    flag.or(file).unwrap_or(default)
}

/// The largest value of a limit: far past any machine's memory for the
/// limits that count things, and within what a queue, a semaphore or a
/// gRPC frame (32-bit lengths) can hold.
pub(crate) const MAX_LIMIT: usize = 1 << 32;

/// The longest duration a setting may have: a year as durations are
/// written (`1y`, 365.25 days), so that `1y` is at the bound and a refusal
/// says `1year`, and every deadline and interval built from one stays far
/// from overflowing.
const MAX_DURATION: Duration = Duration::from_secs(31_557_600);

/// A limit's value, which must be between 1 and [`MAX_LIMIT`].
fn at_least_one(key: &'static str, value: usize) -> Result<usize, ConfigError> {
    if !(1..=MAX_LIMIT).contains(&value) {
        return Err(invalid(
            key,
            format!("{value} is out of range: give a whole number from 1 to {MAX_LIMIT}"),
        ));
    }
    Ok(value)
}

/// A duration that must be longer than zero and at most [`MAX_DURATION`].
fn positive(key: &'static str, value: Duration) -> Result<Duration, ConfigError> {
    if value.is_zero() {
        return Err(invalid(key, "must be longer than 0s"));
    }
    bounded(key, value)
}

/// A duration of at least `min` and at most [`MAX_DURATION`].
fn at_least(key: &'static str, value: Duration, min: Duration) -> Result<Duration, ConfigError> {
    if value < min {
        return Err(invalid(
            key,
            format!(
                "{} is too short: give {} or more",
                humantime::format_duration(value),
                humantime::format_duration(min)
            ),
        ));
    }
    bounded(key, value)
}

/// A duration of at most [`MAX_DURATION`] (zero allowed).
fn bounded(key: &'static str, value: Duration) -> Result<Duration, ConfigError> {
    if value > MAX_DURATION {
        return Err(invalid(
            key,
            format!(
                "{} is out of range: at most {}",
                humantime::format_duration(value),
                humantime::format_duration(MAX_DURATION)
            ),
        ));
    }
    Ok(value)
}

/// A setting's value from flags and environment, else the file, else its default.
macro_rules! pick {
    ($args:ident, $file:ident, $key:ident, $default:expr) => {
        $crate::config::resolved($args.$key.clone(), $file.$key.clone(), $default)
    };
}
pub(crate) use pick;

/// The help line of a setting: `text` and the default it falls back to.
fn help(text: &str, default: impl std::fmt::Display) -> String {
    format!("{text} [default: {default}]")
}

/// A duration as settings write it (`5m`, `30s`).
fn shown_duration(duration: Duration) -> humantime::FormattedDuration {
    humantime::format_duration(duration)
}

/// A list as flags write it, comma-separated.
fn shown_list<T: std::fmt::Display>(items: impl IntoIterator<Item = T>) -> String {
    items
        .into_iter()
        .map(|item| item.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// The name of a choice as flags and files write it.
fn shown_choice(choice: impl ValueEnum) -> String {
    choice
        .to_possible_value()
        .map(|value| value.get_name().to_owned())
        .unwrap_or_default()
}

/// The default table of grades, as `--grade` writes it.
fn shown_grades() -> String {
    let table = GradeTable::default();
    let pairs: Vec<String> = table
        .pairs()
        .iter()
        .map(|(name, grade)| format!("{name}={grade}"))
        .collect();
    pairs.join(" ")
}

mod duration_serde {
    use serde::{Deserialize, Deserializer};
    use std::time::Duration;

    pub fn one<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        let text = String::deserialize(d)?;
        super::parse_duration(&text)
            .map(Some)
            .map_err(serde::de::Error::custom)
    }

    pub fn many<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<Duration>>, D::Error> {
        let texts = Vec::<String>::deserialize(d)?;
        texts
            .iter()
            .map(|t| super::parse_duration(t).map_err(serde::de::Error::custom))
            .collect::<Result<_, _>>()
            .map(Some)
    }
}

/// The TOML config file: every key optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSettings {
    grpc_addr: Option<SocketAddr>,
    http_addr: Option<SocketAddr>,
    #[serde(default, deserialize_with = "duration_serde::one")]
    attribution_window: Option<Duration>,
    #[serde(default, deserialize_with = "duration_serde::one")]
    allowed_lateness: Option<Duration>,
    wall_clock_advance: Option<bool>,
    huge_pages: Option<bool>,
    #[serde(default, deserialize_with = "duration_serde::one")]
    max_future_skew: Option<Duration>,
    k: Option<Vec<usize>>,
    gain: Option<GainName>,
    discount: Option<DiscountName>,
    log_base: Option<f64>,
    half_life: Option<f64>,
    g_max: Option<f64>,
    rbp_p: Option<f64>,
    position_curve_depth: Option<usize>,
    max_exposure_items: Option<usize>,
    number_items: Option<bool>,
    #[serde(default, deserialize_with = "duration_serde::many")]
    windows: Option<Vec<Duration>>,
    grades: Option<BTreeMap<String, f64>>,
    state_dir: Option<PathBuf>,
    #[serde(default, deserialize_with = "duration_serde::one")]
    snapshot_interval: Option<Duration>,
    #[serde(default, deserialize_with = "duration_serde::one")]
    drain_timeout: Option<Duration>,
    max_items: Option<usize>,
    max_label_bytes: Option<usize>,
    max_line_bytes: Option<usize>,
    max_grade: Option<f64>,
    max_ack_rejections: Option<usize>,
    max_open_impressions_per_user: Option<usize>,
    max_waiting_interactions_per_user: Option<usize>,
    max_interactions_per_impression: Option<usize>,
    max_groups: Option<usize>,
    segment_labels: Option<Vec<String>>,
    max_segment_values: Option<usize>,
    max_open_impressions: Option<usize>,
    max_open_items: Option<usize>,
    max_waiting_interactions: Option<usize>,
    max_open_credits: Option<usize>,
    control_model: Option<String>,
    expected_split: Option<BTreeMap<String, f64>>,
    max_interleaved_rankers: Option<usize>,
    max_message_size: Option<usize>,
    max_streams: Option<usize>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    tls_client_ca: Option<PathBuf>,
    max_inflight_batches: Option<usize>,
    #[serde(default, deserialize_with = "duration_serde::one")]
    ingest_idle_timeout: Option<Duration>,
    #[serde(default, deserialize_with = "duration_serde::one")]
    group_idle_timeout: Option<Duration>,
    #[serde(default, deserialize_with = "duration_serde::one")]
    status_history: Option<Duration>,
    max_status_history_bytes: Option<usize>,
    #[serde(default, deserialize_with = "duration_serde::one")]
    http_header_timeout: Option<Duration>,
    #[serde(default, deserialize_with = "duration_serde::one")]
    http_idle_timeout: Option<Duration>,
    #[serde(default, deserialize_with = "duration_serde::one")]
    http_send_timeout: Option<Duration>,
    max_http_connections: Option<usize>,
    max_concurrent_reports: Option<usize>,
    max_reports_per_client: Option<usize>,
    max_grpc_connections: Option<usize>,
    max_grpc_connections_per_client: Option<usize>,
    #[serde(default, deserialize_with = "duration_serde::one")]
    grpc_handshake_timeout: Option<Duration>,
    #[serde(default, deserialize_with = "duration_serde::one")]
    grpc_idle_timeout: Option<Duration>,
    #[serde(default, deserialize_with = "duration_serde::one")]
    grpc_report_timeout: Option<Duration>,
    max_concurrent_streams: Option<usize>,
    max_partial_message_bytes: Option<usize>,
    /// The fleet keys (`kafka_*`, `shutdown_linger`), read apart.
    #[serde(skip)]
    pub fleet: FleetFile,
}

/// The longest config file read: a few kilobytes is a long one, and a
/// device such as /dev/zero never ends.
const MAX_CONFIG_BYTES: u64 = 1 << 20;

impl FileSettings {
    /// Reads `path`, or nothing when no file is given.
    pub fn load(path: Option<&Path>) -> Result<Self, ConfigError> {
        let Some(path) = path else {
            return Ok(Self::default());
        };
        let read = |source| ConfigError::Read {
            path: path.into(),
            source,
        };
        let bytes =
            crate::files::read_at_most(path, MAX_CONFIG_BYTES, "config file").map_err(read)?;
        let text = String::from_utf8(bytes)
            .map_err(|error| std::io::Error::new(std::io::ErrorKind::InvalidData, error))
            .map_err(read)?;
        let parse_error = |source: toml::de::Error| match suggest::unknown_key(source.message()) {
            Some((key, expected)) => ConfigError::UnknownKey {
                path: path.into(),
                line: suggest::line_of(&text, key),
                meant: suggest::closest(key, expected).map(str::to_owned),
                key: key.to_owned(),
            },
            None => ConfigError::Parse {
                path: path.into(),
                source,
            },
        };
        let mut table: toml::Table = toml::from_str(&text).map_err(parse_error)?;
        let fleet: toml::Table = table
            .keys()
            .filter(|key| FleetFile::owns(key))
            .cloned()
            .collect::<Vec<_>>()
            .into_iter()
            .filter_map(|key| table.remove_entry(&key))
            .collect();
        let mut settings: Self = table.try_into().map_err(parse_error)?;
        settings.fleet = fleet.try_into().map_err(parse_error)?;
        Ok(settings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::EngineSettings;
    use crate::server::ServerSettings;

    #[test]
    fn the_readme_settings_example_is_a_valid_file() {
        let readme = include_str!("../../README.md");
        let example = readme
            .split("```toml\n")
            .nth(1)
            .and_then(|rest| rest.split("```").next())
            .expect("the README has a TOML example");
        let file: FileSettings = toml::from_str(example).unwrap();
        let server = ServerSettings::resolve(&ServerArgs::default(), &file).unwrap();
        assert!(!server.huge_pages);
        let huge = ServerArgs {
            huge_pages: Some(true),
            ..Default::default()
        };
        assert!(ServerSettings::resolve(&huge, &file).unwrap().huge_pages);
        assert_eq!(
            EngineSettings::resolve(&EngineArgs::default(), &file)
                .unwrap()
                .k,
            vec![1, 5, 10, 20]
        );
    }

    #[test]
    fn a_config_file_that_does_not_end_is_refused() {
        let error = FileSettings::load(Some(Path::new("/dev/zero"))).unwrap_err();
        assert!(matches!(error, ConfigError::Read { .. }), "{error}");
    }

    /// Settings that would exhaust memory, flood the exposition or make
    /// every event invalid are refused at start, naming the setting.
    #[test]
    fn settings_that_would_exhaust_or_mislead_are_refused() {
        let refused = |args: EngineArgs, file: &str, key: &str| {
            let file: FileSettings = toml::from_str(file).unwrap();
            let error = EngineSettings::resolve(&args, &file)
                .unwrap_err()
                .to_string();
            assert!(error.contains(key), "{key}: {error}");
        };
        let k = |k: Vec<usize>| EngineArgs {
            k: Some(k),
            ..Default::default()
        };
        refused(k(vec![usize::MAX]), "", "k");
        refused(k(vec![4_294_967_296]), "", "k");
        refused(k((1..=17).collect()), "", "k");
        let exposure = EngineArgs {
            max_exposure_items: Some(usize::MAX),
            ..Default::default()
        };
        refused(exposure, "", "max_exposure_items");
        refused(EngineArgs::default(), "[grades]\n", "grades");
        refused(
            EngineArgs::default(),
            "control_model = \"__overflow__\"\n",
            "control_model",
        );
        refused(
            EngineArgs::default(),
            "attribution_window = \"0s\"\n",
            "attribution_window",
        );
        refused(EngineArgs::default(), "[grades]\n\"\" = 1.0\n", "grades");
        // A year as durations are written: `1y` is at the bound, and the
        // bound is said in the same units.
        let year: FileSettings = toml::from_str("attribution_window = \"1y\"\n").unwrap();
        assert!(EngineSettings::resolve(&EngineArgs::default(), &year).is_ok());
        let two: FileSettings = toml::from_str("attribution_window = \"2y\"\n").unwrap();
        let refusal = EngineSettings::resolve(&EngineArgs::default(), &two).unwrap_err();
        assert!(refusal.to_string().ends_with("at most 1year"), "{refusal}");
        assert_eq!(
            EngineSettings::resolve(&k(vec![10_000, 1, 1]), &FileSettings::default())
                .unwrap()
                .k,
            vec![10_000, 1, 1]
        );

        let server = |args: ServerArgs| ServerSettings::resolve(&args, &FileSettings::default());
        let windows = |windows: &[u64]| ServerArgs {
            windows: Some(windows.iter().map(|&s| Duration::from_secs(s)).collect()),
            ..Default::default()
        };
        let resolved = server(windows(&[60, 60, 300, 60])).unwrap();
        assert_eq!(resolved.windows, [60, 300].map(Duration::from_secs));
        let many: Vec<u64> = (1..=9).collect();
        assert!(server(windows(&many))
            .unwrap_err()
            .to_string()
            .contains("windows"));
        let drain = ServerArgs {
            drain_timeout: Some(Duration::ZERO),
            ..Default::default()
        };
        assert!(server(drain)
            .unwrap_err()
            .to_string()
            .contains("drain_timeout"));
        let partial = |message, partial| ServerArgs {
            max_message_size: Some(message),
            max_partial_message_bytes: partial,
            ..Default::default()
        };
        let refusal = server(partial(2 << 20, Some(1 << 20))).unwrap_err();
        assert!(
            refusal.to_string().contains("max_partial_message_bytes")
                && refusal.to_string().contains("less than max_message_size"),
            "{refusal}"
        );
        let file: FileSettings = toml::from_str("state_dir = \"\"\n").unwrap();
        let refusal = ServerSettings::resolve(&ServerArgs::default(), &file).unwrap_err();
        assert!(refusal.to_string().contains("state_dir"), "{refusal}");
        let raised = server(partial(128 << 20, None)).unwrap();
        assert_eq!(
            raised.max_partial_message_bytes,
            128 << 20,
            "the default holds one message"
        );
    }
}

#[cfg(test)]
mod edge_values {
    use super::*;
    use crate::engine::EngineSettings;
    use crate::server::ServerSettings;
    use proptest::prelude::*;

    fn count() -> impl Strategy<Value = usize> {
        prop_oneof![
            Just(0),
            Just(1),
            Just(MAX_LIMIT),
            Just(MAX_LIMIT + 1),
            Just(usize::MAX),
            any::<usize>()
        ]
    }

    fn duration() -> impl Strategy<Value = Duration> {
        prop_oneof![
            Just(Duration::ZERO),
            Just(Duration::from_nanos(1)),
            Just(MAX_DURATION),
            Just(MAX_DURATION + Duration::from_secs(1)),
            Just(Duration::MAX),
            (0u64..u64::MAX).prop_map(Duration::from_secs)
        ]
    }

    fn number() -> impl Strategy<Value = f64> {
        prop_oneof![
            Just(0.0),
            Just(-1.0),
            Just(f64::NAN),
            Just(f64::INFINITY),
            Just(f64::MAX),
            Just(99.0),
            Just(100.0),
            any::<f64>()
        ]
    }

    proptest! {
        /// Any value of a setting resolves to one in its range or to an
        /// error naming the setting; none panics.
        #[test]
        fn every_setting_resolves_in_range_or_names_itself(
            limits in prop::collection::vec(count(), 9),
            durations in prop::collection::vec(duration(), 8),
            numbers in prop::collection::vec(number(), 5),
        ) {
            let server = ServerArgs {
                max_streams: Some(limits[0]),
                max_inflight_batches: Some(limits[1]),
                max_http_connections: Some(limits[2]),
                max_message_size: Some(limits[3]),
                snapshot_interval: Some(durations[0]),
                drain_timeout: Some(durations[1]),
                ingest_idle_timeout: Some(durations[2]),
                group_idle_timeout: Some(durations[3]),
                http_header_timeout: Some(durations[4]),
                max_future_skew: Some(durations[5]),
                windows: Some(vec![durations[6]]),
                ..ServerArgs::default()
            };
            match ServerSettings::resolve(&server, &FileSettings::default()) {
                Ok(s) => {
                    for limit in [s.max_streams, s.max_inflight_batches, s.max_http_connections, s.max_message_size] {
                        prop_assert!((1..=MAX_LIMIT).contains(&limit));
                    }
                    prop_assert!(!s.snapshot_interval.is_zero() && s.snapshot_interval <= MAX_DURATION);
                    prop_assert!(s.group_idle_timeout <= MAX_DURATION);
                    prop_assert!((defaults::MIN_INGEST_IDLE_TIMEOUT..=MAX_DURATION).contains(&s.ingest_idle_timeout));
                }
                Err(error) => prop_assert!(matches!(error, ConfigError::Invalid { .. }), "{error}"),
            }
            let engine = EngineArgs {
                max_items: Some(limits[4]),
                max_groups: Some(limits[5]),
                max_open_impressions_per_user: Some(limits[6]),
                max_ack_rejections: Some(limits[7]),
                attribution_window: Some(durations[7]),
                max_grade: Some(numbers[0]),
                half_life: Some(numbers[1]),
                rbp_p: Some(numbers[2]),
                max_interleaved_rankers: Some(limits[8]),
                expected_split: Some(vec![("a".into(), numbers[3]), ("b".into(), numbers[4])]),
                ..EngineArgs::default()
            };
            match EngineSettings::resolve(&engine, &FileSettings::default()) {
                Ok(s) => {
                    prop_assert!(s.max_grade.is_finite() && s.max_grade > 0.0);
                    prop_assert!((2..=255).contains(&s.max_interleaved_rankers));
                    let total: f64 = s.expected_split.iter().map(|(_, share)| share).sum();
                    prop_assert!(s.expected_split.iter().all(|(_, share)| share.is_normal() && *share > 0.0));
                    prop_assert!((total - 1.0).abs() < 1e-9, "{total}");
                    prop_assert!((1..=MAX_LIMIT).contains(&s.max_items));
                    prop_assert!(s.attribution_window <= MAX_DURATION);
                }
                Err(error) => prop_assert!(matches!(error, ConfigError::Invalid { .. }), "{error}"),
            }
            let log = LogArgs {
                max_line_bytes: Some(limits[0]),
            };
            match log.max_line_bytes(&FileSettings::default()) {
                Ok(max) => prop_assert!((1..=MAX_LIMIT).contains(&max)),
                Err(error) => prop_assert!(matches!(error, ConfigError::Invalid { .. }), "{error}"),
            }
        }
    }
}
