//! Settings: TOML file, `RANKWATCH_*` environment variables and flags, with
//! defaults and validation. Precedence: flag, environment, file, default.

use crate::clock::nanos;
use crate::event::{GradeTable, Validator};
use crate::export::ReportConfig;
use crate::fleet::{FleetArgs, FleetFile, FleetSettings};
use crate::join::{JoinSettings, SegmentSettings};
use crate::metrics::{CoverageMode, Discount, Gain, ListEvaluator, MetricSettings};
use crate::replay::ReplaySetup;
use clap::{Args, ValueEnum};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A setting that is missing, malformed or out of range.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file could not be read.
    #[error("cannot read config file {path}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The config file is not valid TOML for rankwatch.
    #[error("config file {path}")]
    Parse {
        path: PathBuf,
        source: toml::de::Error,
    },
    /// A value is out of range.
    #[error("setting `{key}`: {message}")]
    Invalid { key: &'static str, message: String },
}

fn invalid(key: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key,
        message: message.into(),
    }
}

/// Gain setting as written in configs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GainName {
    Linear,
    Exponential,
}

/// Discount setting as written in configs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DiscountName {
    /// `log2(j + 1)`.
    Log2,
    /// `max(1, log_base j)`.
    Jarvelin,
}

/// Parses a duration written like `300ms`, `30s`, `5m`, `1h`, with a hint when it is not one.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text)
        .map_err(|e| format!("{e} (write durations like 300ms, 30s, 5m, 1h)"))
}

fn parse_grade(text: &str) -> Result<(String, f64), String> {
    let Some((name, grade)) = text.split_once('=') else {
        return Err(format!("{text:?} is not TYPE=GRADE, e.g. click=1"));
    };
    match grade.trim().parse() {
        Ok(grade) => Ok((name.trim().to_owned(), grade)),
        Err(_) => Err(format!("grade of {name:?} is not a number")),
    }
}

/// Every default, written once: resolution falls back to it and `--help` shows it.
pub mod defaults {
    use super::{DiscountName, GainName};
    use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
    use std::time::Duration;

    /// `attribution_window`.
    pub const ATTRIBUTION_WINDOW: Duration = Duration::from_secs(300);
    /// `allowed_lateness`.
    pub const ALLOWED_LATENESS: Duration = Duration::from_secs(30);
    /// `k`.
    pub const K: [usize; 4] = [1, 5, 10, 20];
    /// `gain`.
    pub const GAIN: GainName = GainName::Linear;
    /// `discount`.
    pub const DISCOUNT: DiscountName = DiscountName::Log2;
    /// `log_base`.
    pub const LOG_BASE: f64 = 2.0;
    /// `half_life`.
    pub const HALF_LIFE: f64 = 5.0;
    /// `control_model`: none, no comparisons.
    pub const CONTROL_MODEL: Option<String> = None;
    /// `position_curve_depth`.
    pub const POSITION_CURVE_DEPTH: usize = 20;
    /// `g_max`, ERR's largest grade.
    pub const G_MAX: f64 = 3.0;
    /// `rbp_p`, RBP's persistence.
    pub const RBP_P: f64 = 0.8;
    /// `max_items`.
    pub const MAX_ITEMS: usize = 1000;
    /// `max_exposure_items`.
    pub const MAX_EXPOSURE_ITEMS: usize = 4096;
    /// `max_label_bytes`.
    pub const MAX_LABEL_BYTES: usize = 256;
    /// `max_groups`.
    pub const MAX_GROUPS: usize = 1000;
    /// `segment_labels`: none, groups are `(model, surface)`.
    pub const SEGMENT_LABELS: [&str; 0] = [];
    /// `max_segment_values`.
    pub const MAX_SEGMENT_VALUES: usize = 20;
    /// `max_open_impressions`.
    pub const MAX_OPEN_IMPRESSIONS: usize = 1_000_000;
    /// `max_waiting_interactions`.
    pub const MAX_WAITING_INTERACTIONS: usize = 1_000_000;
    /// `grpc_addr`.
    pub const GRPC_ADDR: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 50051));
    /// `http_addr`.
    pub const HTTP_ADDR: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9477));
    /// `wall_clock_advance`.
    pub const WALL_CLOCK_ADVANCE: bool = true;
    /// `huge_pages`.
    pub const HUGE_PAGES: bool = false;
    /// `max_future_skew`.
    pub const MAX_FUTURE_SKEW: Duration = Duration::from_secs(300);
    /// `windows`.
    pub const WINDOWS: [Duration; 3] = [
        Duration::from_secs(60),
        Duration::from_secs(300),
        Duration::from_secs(3600),
    ];
    /// `snapshot_interval`.
    pub const SNAPSHOT_INTERVAL: Duration = Duration::from_secs(30);
    /// `drain_timeout`.
    pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
    /// `max_message_size`.
    pub const MAX_MESSAGE_SIZE: usize = 4 << 20;
    /// `max_streams`.
    pub const MAX_STREAMS: usize = 256;
    /// `ingest_idle_timeout`.
    pub const INGEST_IDLE_TIMEOUT: Duration = Duration::from_secs(300);
    /// `group_idle_timeout`: a day, so that a group fed once a day or
    /// less often, or paused over a night, keeps its since-start figures,
    /// while junk labels free their slots under `max_groups` within a day.
    pub const GROUP_IDLE_TIMEOUT: Duration = Duration::from_secs(24 * 3600);
    /// `http_header_timeout`.
    pub const HTTP_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
    /// `http_idle_timeout`.
    pub const HTTP_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
    /// `max_http_connections`.
    pub const MAX_HTTP_CONNECTIONS: usize = 128;
    /// `max_inflight_batches`.
    pub const MAX_INFLIGHT_BATCHES: usize = 64;
}

/// A setting's value: the flag or its environment variable (clap has
/// already merged the two, the flag first), else the file's key, else the default.
fn resolved<T>(flag: Option<T>, file: Option<T>, default: T) -> T {
    flag.or(file).unwrap_or(default)
}

/// A limit's value, which must be at least 1.
fn at_least_one(key: &'static str, value: usize) -> Result<usize, ConfigError> {
    if value == 0 {
        return Err(invalid(key, "must be at least 1"));
    }
    Ok(value)
}

/// A duration that must be longer than zero.
fn positive(key: &'static str, value: Duration) -> Result<Duration, ConfigError> {
    if value.is_zero() {
        return Err(invalid(key, "must be longer than 0s"));
    }
    Ok(value)
}

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
    max_groups: Option<usize>,
    segment_labels: Option<Vec<String>>,
    max_segment_values: Option<usize>,
    max_open_impressions: Option<usize>,
    max_waiting_interactions: Option<usize>,
    control_model: Option<String>,
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
    http_header_timeout: Option<Duration>,
    #[serde(default, deserialize_with = "duration_serde::one")]
    http_idle_timeout: Option<Duration>,
    max_http_connections: Option<usize>,
    /// The fleet keys (`kafka_*`, `shutdown_linger`), read apart.
    #[serde(skip)]
    pub fleet: FleetFile,
}

impl FileSettings {
    /// Reads `path`, or nothing when no file is given.
    pub fn load(path: Option<&Path>) -> Result<Self, ConfigError> {
        let Some(path) = path else {
            return Ok(Self::default());
        };
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.into(),
            source,
        })?;
        let parse_error = |source| ConfigError::Parse {
            path: path.into(),
            source,
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

/// Join and metric settings, shared by `serve` and `replay`.
#[derive(Args, Clone, Debug, Default)]
pub struct EngineArgs {
    /// TOML config file; flags and RANKWATCH_* variables override its keys.
    #[arg(long, env = "RANKWATCH_CONFIG")]
    pub config: Option<PathBuf>,
    /// How long after an impression its interactions count.
    #[arg(long, env = "RANKWATCH_ATTRIBUTION_WINDOW", value_parser = parse_duration,
        help = help("How long after an impression its interactions count", shown_duration(defaults::ATTRIBUTION_WINDOW)))]
    pub attribution_window: Option<Duration>,
    /// How far the watermark trails the latest event time.
    #[arg(long, env = "RANKWATCH_ALLOWED_LATENESS", value_parser = parse_duration,
        help = help("How far the watermark trails the latest event time", shown_duration(defaults::ALLOWED_LATENESS)))]
    pub allowed_lateness: Option<Duration>,
    /// Cutoffs K.
    #[arg(long, env = "RANKWATCH_K", value_delimiter = ',',
        help = help("Cutoffs K, comma-separated", shown_list(defaults::K)))]
    pub k: Option<Vec<usize>>,
    /// Gain of DCG, nDCG and half-life utility.
    #[arg(long, env = "RANKWATCH_GAIN",
        help = help("Gain of DCG, nDCG and half-life utility", shown_choice(defaults::GAIN)))]
    pub gain: Option<GainName>,
    /// Discount of DCG and nDCG.
    #[arg(long, env = "RANKWATCH_DISCOUNT",
        help = help("Discount of DCG and nDCG", shown_choice(defaults::DISCOUNT)))]
    pub discount: Option<DiscountName>,
    /// Logarithm base of the jarvelin discount.
    #[arg(long, env = "RANKWATCH_LOG_BASE",
        help = help("Logarithm base of the jarvelin discount", defaults::LOG_BASE))]
    pub log_base: Option<f64>,
    /// Half-life α of half-life utility, in ranks.
    #[arg(long, env = "RANKWATCH_HALF_LIFE",
        help = help("Half-life α of half-life utility, in ranks", defaults::HALF_LIFE))]
    pub half_life: Option<f64>,
    /// ERR's largest grade g_max.
    #[arg(long, env = "RANKWATCH_G_MAX",
        help = help("ERR's largest grade g_max: grade g stops the user with probability (2^min(g, g_max) - 1) / 2^g_max", defaults::G_MAX))]
    pub g_max: Option<f64>,
    /// RBP's persistence p.
    #[arg(long, env = "RANKWATCH_RBP_P",
        help = help("RBP's persistence p, the chance of reading on to the next rank, between 0 and 1", defaults::RBP_P))]
    pub rbp_p: Option<f64>,
    /// Deepest rank of the position curves.
    #[arg(long, env = "RANKWATCH_POSITION_CURVE_DEPTH",
        help = help("Deepest rank of the position curves (lists and interactions by rank); 0 turns them off", defaults::POSITION_CURVE_DEPTH))]
    pub position_curve_depth: Option<usize>,
    /// Most items whose exposure one coverage sketch keeps.
    #[arg(long, env = "RANKWATCH_MAX_EXPOSURE_ITEMS",
        help = help("Most items whose exposure each group's coverage keeps per window pane and since start: exact up to it, estimated from sketches past it (replay is always exact); 0 turns coverage off", defaults::MAX_EXPOSURE_ITEMS))]
    pub max_exposure_items: Option<usize>,
    /// Grade of an interaction type, TYPE=GRADE, repeatable.
    #[arg(long = "grade", env = "RANKWATCH_GRADES", value_delimiter = ',', value_parser = parse_grade,
        help = help("Grade of an interaction type, TYPE=GRADE, repeatable; adds to or overrides the config's table", shown_grades()))]
    pub grades: Option<Vec<(String, f64)>>,
    /// Limit: most items in one impression.
    #[arg(long, env = "RANKWATCH_MAX_ITEMS",
        help = help("Limit: most items in one impression; longer lists are rejected (too_many_items)", defaults::MAX_ITEMS))]
    pub max_items: Option<usize>,
    /// Limit: longest model or surface name or segment value.
    #[arg(long, env = "RANKWATCH_MAX_LABEL_BYTES",
        help = help("Limit: longest model or surface name or segment value in bytes; longer ones are rejected (label_too_long)", defaults::MAX_LABEL_BYTES))]
    pub max_label_bytes: Option<usize>,
    /// Limit: most groups.
    #[arg(long, env = "RANKWATCH_MAX_GROUPS",
        help = help("Limit: most groups (model, surface and segment values); new ones past it fold into the __overflow__ group", defaults::MAX_GROUPS))]
    pub max_groups: Option<usize>,
    /// Impression label keys whose values are dimensions of every group.
    #[arg(long, env = "RANKWATCH_SEGMENT_LABELS", value_delimiter = ',',
        help = help("Impression label keys whose values are dimensions of every group and labels of every per-group series, comma-separated; other keys are ignored", "none"))]
    pub segment_labels: Option<Vec<String>>,
    /// Limit: most distinct values of each segment label.
    #[arg(long, env = "RANKWATCH_MAX_SEGMENT_VALUES",
        help = help("Limit: most distinct values of each segment label; later values fold into __other__, counted", defaults::MAX_SEGMENT_VALUES))]
    pub max_segment_values: Option<usize>,
    /// Limit: most open impressions.
    #[arg(long, env = "RANKWATCH_MAX_OPEN_IMPRESSIONS",
        help = help("Limit: most open impressions; a new impression past it is shed, counted, and not evaluated", defaults::MAX_OPEN_IMPRESSIONS))]
    pub max_open_impressions: Option<usize>,
    /// Limit: most waiting interactions.
    #[arg(long, env = "RANKWATCH_MAX_WAITING_INTERACTIONS",
        help = help("Limit: most waiting interactions; a new one that would wait past it is shed and counted", defaults::MAX_WAITING_INTERACTIONS))]
    pub max_waiting_interactions: Option<usize>,
    /// The model every other model on a surface is compared against.
    #[arg(long, env = "RANKWATCH_CONTROL_MODEL",
        help = help("The model every other model on a surface is compared against (SPEC §9)", "none"))]
    pub control_model: Option<String>,
}

/// Join and metric settings, resolved and validated.
#[derive(Clone, Debug, PartialEq)]
pub struct EngineSettings {
    /// How long after an impression its interactions count.
    pub attribution_window: Duration,
    /// How far the watermark trails the latest event time.
    pub allowed_lateness: Duration,
    /// Cutoffs K.
    pub k: Vec<usize>,
    /// Gain, discount and half-life of the metrics.
    pub metrics: MetricSettings,
    /// Grade of each interaction type.
    pub grades: GradeTable,
    /// Deepest rank of the position curves; 0 keeps none.
    pub position_curve_depth: usize,
    /// Most items whose exposure one coverage keeps; 0 keeps no coverage.
    pub max_exposure_items: usize,
    /// Most items in one impression.
    pub max_items: usize,
    /// Longest model or surface name, in bytes.
    pub max_label_bytes: usize,
    /// Most groups.
    pub max_groups: usize,
    /// The segment labels and the bound on their values.
    pub segments: SegmentSettings,
    /// Most open impressions.
    pub max_open_impressions: usize,
    /// Most waiting interactions.
    pub max_waiting_interactions: usize,
    /// The model compared against; none means no comparisons.
    pub control_model: Option<String>,
}

/// Most interaction types in the grade table: each is a column of every
/// group's position curve.
const MAX_INTERACTION_TYPES: usize = 64;

/// Deepest position curve: each rank is a row of counters per group.
const MAX_POSITION_CURVE_DEPTH: usize = 1000;

/// `value`, unless it exceeds `max`.
fn at_most(key: &'static str, value: usize, max: usize) -> Result<usize, ConfigError> {
    if value > max {
        return Err(invalid(
            key,
            format!("{value} is more than the most, {max}"),
        ));
    }
    Ok(value)
}

/// The grade table: the file's table replaces the defaults; flags add
/// types or override them.
fn grades(args: &EngineArgs, file: &FileSettings) -> Result<GradeTable, ConfigError> {
    let base = match &file.grades {
        Some(table) => GradeTable::new(table.iter().map(|(k, v)| (k.clone(), *v))),
        None => GradeTable::default(),
    };
    let grades = GradeTable::new(
        base.pairs()
            .iter()
            .cloned()
            .chain(args.grades.iter().flatten().cloned()),
    );
    if grades.pairs().len() > MAX_INTERACTION_TYPES {
        return Err(invalid(
            "grades",
            format!(
                "{} interaction types; at most {MAX_INTERACTION_TYPES} may be configured",
                grades.pairs().len()
            ),
        ));
    }
    if let Some((name, grade)) = grades
        .pairs()
        .iter()
        .find(|(_, g)| !(g.is_finite() && *g >= 0.0))
    {
        return Err(invalid(
            "grades",
            format!("grade of {name:?} is {grade}; grades are finite numbers >= 0"),
        ));
    }
    Ok(grades)
}

/// Most segment labels: each multiplies the groups a model may have.
const MAX_SEGMENT_LABELS: usize = 8;

/// Labels that rankwatch's own series carry, which a segment label may not shadow.
const SERIES_LABELS: [&str; 14] = [
    "model", "surface", "k", "window", "scope", "rank", "type", "control", "metric", "reason",
    "kind", "label", "le", "quantile",
];

/// The segment labels: flags and environment over the file; each a
/// Prometheus label name of its own, at most [`MAX_SEGMENT_LABELS`].
fn segment_labels(args: &EngineArgs, file: &FileSettings) -> Result<Vec<String>, ConfigError> {
    let default = || defaults::SEGMENT_LABELS.map(str::to_owned).to_vec();
    let labels: Vec<String> = resolved(
        args.segment_labels.clone(),
        file.segment_labels.clone(),
        default(),
    )
    .into_iter()
    .map(|label| label.trim().to_owned())
    .filter(|label| !label.is_empty())
    .collect();
    if labels.len() > MAX_SEGMENT_LABELS {
        return Err(invalid(
            "segment_labels",
            format!(
                "{} labels; at most {MAX_SEGMENT_LABELS} may be named",
                labels.len()
            ),
        ));
    }
    for (index, label) in labels.iter().enumerate() {
        let mut chars = label.chars();
        let well_formed = chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !well_formed || label.starts_with("__") {
            return Err(invalid(
                "segment_labels",
                format!("{label:?} is not a label name: letters, digits and _, not starting with a digit or __"),
            ));
        }
        if SERIES_LABELS.contains(&label.as_str()) {
            return Err(invalid(
                "segment_labels",
                format!("{label:?} is a label of rankwatch's own series; name the key otherwise"),
            ));
        }
        if labels[..index].contains(label) {
            return Err(invalid(
                "segment_labels",
                format!("{label:?} is named twice"),
            ));
        }
    }
    Ok(labels)
}

/// The control model, if any: flags and environment over the file; a blank name is an error.
fn control_model(args: &EngineArgs, file: &FileSettings) -> Result<Option<String>, ConfigError> {
    let Some(name) = args
        .control_model
        .clone()
        .or_else(|| file.control_model.clone())
    else {
        return Ok(defaults::CONTROL_MODEL);
    };
    if name.trim().is_empty() {
        return Err(invalid(
            "control_model",
            "the control model's name is empty",
        ));
    }
    Ok(Some(name))
}

impl EngineSettings {
    /// Resolves flags and environment over `file` over defaults.
    pub fn resolve(args: &EngineArgs, file: &FileSettings) -> Result<Self, ConfigError> {
        let k = resolved(args.k.clone(), file.k.clone(), defaults::K.to_vec());
        if k.is_empty() || k.contains(&0) {
            return Err(invalid(
                "k",
                "cutoffs must be whole numbers of at least 1, e.g. 1,5,10,20",
            ));
        }
        let half_life = resolved(args.half_life, file.half_life, defaults::HALF_LIFE);
        if !(half_life.is_finite() && half_life > 1.0) {
            return Err(invalid(
                "half_life",
                format!("{half_life} must be a number greater than 1"),
            ));
        }
        let g_max = resolved(args.g_max, file.g_max, defaults::G_MAX);
        if !(g_max.is_finite() && g_max > 0.0) {
            return Err(invalid(
                "g_max",
                format!("{g_max} must be a number greater than 0"),
            ));
        }
        let rbp_p = resolved(args.rbp_p, file.rbp_p, defaults::RBP_P);
        if !(rbp_p > 0.0 && rbp_p < 1.0) {
            return Err(invalid(
                "rbp_p",
                format!("{rbp_p} must be a number between 0 and 1, exclusive"),
            ));
        }
        let log_base = resolved(args.log_base, file.log_base, defaults::LOG_BASE);
        if !(log_base.is_finite() && log_base > 1.0) {
            return Err(invalid(
                "log_base",
                format!("{log_base} must be a number greater than 1"),
            ));
        }
        let discount = match resolved(args.discount, file.discount, defaults::DISCOUNT) {
            DiscountName::Log2 => Discount::Log2,
            DiscountName::Jarvelin => Discount::Jarvelin { base: log_base },
        };
        let gain = match resolved(args.gain, file.gain, defaults::GAIN) {
            GainName::Linear => Gain::Linear,
            GainName::Exponential => Gain::Exponential,
        };
        Ok(Self {
            attribution_window: resolved(
                args.attribution_window,
                file.attribution_window,
                defaults::ATTRIBUTION_WINDOW,
            ),
            allowed_lateness: resolved(
                args.allowed_lateness,
                file.allowed_lateness,
                defaults::ALLOWED_LATENESS,
            ),
            k,
            metrics: MetricSettings {
                gain,
                discount,
                half_life,
                err_max_grade: g_max,
                rbp_persistence: rbp_p,
            },
            grades: grades(args, file)?,
            position_curve_depth: at_most(
                "position_curve_depth",
                resolved(
                    args.position_curve_depth,
                    file.position_curve_depth,
                    defaults::POSITION_CURVE_DEPTH,
                ),
                MAX_POSITION_CURVE_DEPTH,
            )?,
            max_exposure_items: resolved(
                args.max_exposure_items,
                file.max_exposure_items,
                defaults::MAX_EXPOSURE_ITEMS,
            ),
            max_items: at_least_one(
                "max_items",
                resolved(args.max_items, file.max_items, defaults::MAX_ITEMS),
            )?,
            max_label_bytes: at_least_one(
                "max_label_bytes",
                resolved(
                    args.max_label_bytes,
                    file.max_label_bytes,
                    defaults::MAX_LABEL_BYTES,
                ),
            )?,
            max_groups: at_least_one(
                "max_groups",
                resolved(args.max_groups, file.max_groups, defaults::MAX_GROUPS),
            )?,
            segments: SegmentSettings {
                labels: segment_labels(args, file)?,
                max_values: at_least_one(
                    "max_segment_values",
                    resolved(
                        args.max_segment_values,
                        file.max_segment_values,
                        defaults::MAX_SEGMENT_VALUES,
                    ),
                )?,
            },
            max_open_impressions: at_least_one(
                "max_open_impressions",
                resolved(
                    args.max_open_impressions,
                    file.max_open_impressions,
                    defaults::MAX_OPEN_IMPRESSIONS,
                ),
            )?,
            max_waiting_interactions: at_least_one(
                "max_waiting_interactions",
                resolved(
                    args.max_waiting_interactions,
                    file.max_waiting_interactions,
                    defaults::MAX_WAITING_INTERACTIONS,
                ),
            )?,
            control_model: control_model(args, file)?,
        })
    }

    /// Join settings for an engine keeping rolling windows of `windows`.
    pub fn join(&self, windows: &[Duration]) -> JoinSettings {
        JoinSettings {
            attribution_window: nanos(self.attribution_window),
            allowed_lateness: nanos(self.allowed_lateness),
            shards: 16,
            max_groups: self.max_groups,
            segments: self.segments.clone(),
            max_open_impressions: self.max_open_impressions,
            max_waiting_interactions: self.max_waiting_interactions,
            windows: windows.iter().map(|&w| nanos(w)).collect(),
            position_curve_depth: self.position_curve_depth,
            interaction_types: self.grades.types(),
            coverage: self.coverage_mode(),
        }
    }

    /// How `serve` keeps coverage: from sketches past `max_exposure_items`.
    pub fn coverage_mode(&self) -> CoverageMode {
        match self.max_exposure_items {
            0 => CoverageMode::Off,
            max_items => CoverageMode::Sketch { max_items },
        }
    }

    /// These settings with the demo's join timing (a 10 s window, 2 s of
    /// lateness) where neither flags, environment nor file set one, so
    /// that lists finalize within seconds.
    pub fn with_quick_join(mut self, args: &EngineArgs, file: &FileSettings) -> Self {
        if args
            .attribution_window
            .or(file.attribution_window)
            .is_none()
        {
            self.attribution_window = Duration::from_secs(10);
        }
        if args.allowed_lateness.or(file.allowed_lateness).is_none() {
            self.allowed_lateness = Duration::from_secs(2);
        }
        self
    }

    /// What saved state must have been computed under to be restored:
    /// the cutoffs, the metric settings, the rolling windows and the
    /// segment labels (written only when there are some).
    pub fn fingerprint(&self, windows: &[Duration]) -> String {
        let mut fingerprint = format!(
            "k={:?} metrics={:?} windows={windows:?} positions={} types={:?} coverage={}",
            self.evaluator().ks(),
            self.metrics,
            self.position_curve_depth,
            self.grades.types(),
            self.max_exposure_items > 0
        );
        if !self.segments.labels.is_empty() {
            fingerprint.push_str(&format!(" segments={:?}", self.segments.labels));
        }
        fingerprint
    }

    /// The list evaluator for these settings.
    pub fn evaluator(&self) -> ListEvaluator {
        ListEvaluator::new(self.metrics.clone(), &self.k)
    }

    /// The settings a report prints: the engine's cutoffs (sorted, as evaluated) and windows.
    pub fn report_config(&self) -> ReportConfig {
        ReportConfig {
            k: self.evaluator().ks().to_vec(),
            attribution_window_s: self.attribution_window.as_secs_f64(),
            allowed_lateness_s: self.allowed_lateness.as_secs_f64(),
            gain: self.metrics.gain.name().to_owned(),
            control_model: self.control_model.clone(),
        }
    }

    /// What `replay` evaluates with: no rolling windows, no wall clock,
    /// exact coverage.
    pub fn replay_setup(&self) -> ReplaySetup {
        let mut join = self.join(&[]);
        if join.coverage != CoverageMode::Off {
            join.coverage = CoverageMode::Exact;
        }
        ReplaySetup {
            join,
            evaluator: self.evaluator(),
            validator: self.validator(None),
            report: self.report_config(),
        }
    }

    /// A validator; `max_future_skew` is `None` where there is no wall clock.
    pub fn validator(&self, max_future_skew: Option<Duration>) -> Validator {
        Validator {
            grades: self.grades.clone(),
            max_items: self.max_items,
            max_future_skew: max_future_skew.map(nanos),
            max_label_bytes: self.max_label_bytes,
            segment_labels: self.segments.labels.clone(),
        }
    }
}

/// Settings of the server, beyond the engine's.
#[derive(Args, Clone, Debug, Default)]
pub struct ServerArgs {
    /// gRPC listen address.
    #[arg(long, env = "RANKWATCH_GRPC_ADDR",
        help = help("gRPC listen address", defaults::GRPC_ADDR))]
    pub grpc_addr: Option<SocketAddr>,
    /// HTTP listen address for /metrics, /healthz, /readyz.
    #[arg(long, env = "RANKWATCH_HTTP_ADDR",
        help = help("HTTP listen address for /metrics, /healthz, /readyz", defaults::HTTP_ADDR))]
    pub http_addr: Option<SocketAddr>,
    /// Advance the watermark with the wall clock when traffic stops.
    #[arg(long, env = "RANKWATCH_WALL_CLOCK_ADVANCE",
        help = help("Advance the watermark with the wall clock when traffic stops", defaults::WALL_CLOCK_ADVANCE))]
    pub wall_clock_advance: Option<bool>,
    /// Let the kernel back the heap with transparent huge pages.
    #[arg(long, env = "RANKWATCH_HUGE_PAGES",
        help = help("Let the kernel back the heap with transparent huge pages: less CPU per event under heavy load, but a batch that faults in a fresh 2 MiB page waits milliseconds", defaults::HUGE_PAGES))]
    pub huge_pages: Option<bool>,
    /// Reject events further ahead of the wall clock than this.
    #[arg(long, env = "RANKWATCH_MAX_FUTURE_SKEW", value_parser = parse_duration,
        help = help("Reject events further ahead of the wall clock than this (time_in_future)", shown_duration(defaults::MAX_FUTURE_SKEW)))]
    pub max_future_skew: Option<Duration>,
    /// Rolling windows of the exported gauges.
    #[arg(long, env = "RANKWATCH_WINDOWS", value_delimiter = ',', value_parser = parse_duration,
        help = help("Rolling windows of the exported gauges, comma-separated", shown_list(defaults::WINDOWS.map(shown_duration))))]
    pub windows: Option<Vec<Duration>>,
    /// Directory for saved state; none means no persistence.
    #[arg(long, env = "RANKWATCH_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
    /// How often state is saved to the state directory.
    #[arg(long, env = "RANKWATCH_SNAPSHOT_INTERVAL", value_parser = parse_duration,
        help = help("How often state is saved to the state directory", shown_duration(defaults::SNAPSHOT_INTERVAL)))]
    pub snapshot_interval: Option<Duration>,
    /// At shutdown, how long open streams and requests may take to finish.
    #[arg(long, env = "RANKWATCH_DRAIN_TIMEOUT", value_parser = parse_duration,
        help = help("At shutdown, how long open streams and requests may take to finish before they are cut", shown_duration(defaults::DRAIN_TIMEOUT)))]
    pub drain_timeout: Option<Duration>,
    /// Limit: largest gRPC message in bytes.
    #[arg(long, env = "RANKWATCH_MAX_MESSAGE_SIZE",
        help = help("Limit: largest gRPC message in bytes; a larger one ends its RPC (RESOURCE_EXHAUSTED)", defaults::MAX_MESSAGE_SIZE))]
    pub max_message_size: Option<usize>,
    /// Limit: most concurrent ingest streams.
    #[arg(long, env = "RANKWATCH_MAX_STREAMS",
        help = help("Limit: most concurrent ingest streams; more are refused (RESOURCE_EXHAUSTED)", defaults::MAX_STREAMS))]
    pub max_streams: Option<usize>,
    /// Limit: batches queued for the engine across all streams.
    #[arg(long, env = "RANKWATCH_MAX_INFLIGHT_BATCHES",
        help = help("Limit: batches queued for the engine across all streams before ingest waits (back-pressure); a unary IngestBatch past it is refused (RESOURCE_EXHAUSTED)", defaults::MAX_INFLIGHT_BATCHES))]
    pub max_inflight_batches: Option<usize>,
    /// How long an Ingest stream may send nothing before it is ended.
    #[arg(long, env = "RANKWATCH_INGEST_IDLE_TIMEOUT", value_parser = parse_duration,
        help = help("How long an Ingest stream may send nothing before it is ended (UNAVAILABLE) and its permit freed", shown_duration(defaults::INGEST_IDLE_TIMEOUT)))]
    pub ingest_idle_timeout: Option<Duration>,
    /// How long a group may receive no impression before it is retired.
    #[arg(long, env = "RANKWATCH_GROUP_IDLE_TIMEOUT", value_parser = parse_duration,
        help = help("How long a group (model, surface and segment values) may receive no impression before it is retired: gone from /metrics and GetMetrics, its slot under max_groups freed; not in fleet mode", shown_duration(defaults::GROUP_IDLE_TIMEOUT)))]
    pub group_idle_timeout: Option<Duration>,
    /// How long an HTTP client may take to send a request's head.
    #[arg(long, env = "RANKWATCH_HTTP_HEADER_TIMEOUT", value_parser = parse_duration,
        help = help("How long an HTTP client may take to send a request's head (the first from the connection's accept, later ones from their first byte) before its connection is closed", shown_duration(defaults::HTTP_HEADER_TIMEOUT)))]
    pub http_header_timeout: Option<Duration>,
    /// How long an HTTP connection may stay idle between requests.
    #[arg(long, env = "RANKWATCH_HTTP_IDLE_TIMEOUT", value_parser = parse_duration,
        help = help("How long an HTTP connection may stay idle between requests (no byte read or written) before it is closed; not while a request is being answered", shown_duration(defaults::HTTP_IDLE_TIMEOUT)))]
    pub http_idle_timeout: Option<Duration>,
    /// Limit: most open HTTP connections.
    #[arg(long, env = "RANKWATCH_MAX_HTTP_CONNECTIONS",
        help = help("Limit: most open HTTP connections; more are closed at once", defaults::MAX_HTTP_CONNECTIONS))]
    pub max_http_connections: Option<usize>,
    /// PEM certificate chain: serve gRPC over TLS (with --tls-key) [default: plaintext].
    #[arg(long, env = "RANKWATCH_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, env = "RANKWATCH_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// PEM CA certificates: require client certificates signed by them (mutual TLS).
    #[arg(long, env = "RANKWATCH_TLS_CLIENT_CA")]
    pub tls_client_ca: Option<PathBuf>,
    #[command(flatten)]
    pub fleet: FleetArgs,
}

/// TLS on the gRPC listener.
#[derive(Clone, Debug, PartialEq)]
pub struct TlsSettings {
    /// PEM certificate chain.
    pub cert: PathBuf,
    /// PEM private key.
    pub key: PathBuf,
    /// PEM CA bundle for client certificates; `None` means no client authentication.
    pub client_ca: Option<PathBuf>,
}

/// Server settings, resolved and validated.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerSettings {
    /// Where gRPC listens.
    pub grpc_addr: SocketAddr,
    /// Where HTTP listens.
    pub http_addr: SocketAddr,
    /// Whether the watermark follows the wall clock while traffic stops.
    pub wall_clock_advance: bool,
    /// Whether the kernel may back the heap with transparent huge pages.
    pub huge_pages: bool,
    /// How far ahead of the wall clock an event may be.
    pub max_future_skew: Duration,
    /// Rolling windows of the exported gauges.
    pub windows: Vec<Duration>,
    /// Where state is saved; `None`: nowhere.
    pub state_dir: Option<PathBuf>,
    /// How often state is saved.
    pub snapshot_interval: Duration,
    /// How long the drain at shutdown may take.
    pub drain_timeout: Duration,
    /// Largest gRPC message, in bytes.
    pub max_message_size: usize,
    /// Most concurrent ingest streams.
    pub max_streams: usize,
    /// Batches queued for the engine before ingest waits (streams) or is refused (unary calls).
    pub max_inflight_batches: usize,
    /// How long an Ingest stream may send nothing.
    pub ingest_idle_timeout: Duration,
    /// How long a group may receive no impression before it is retired.
    pub group_idle_timeout: Duration,
    /// How long an HTTP client may take to send a request's head.
    pub http_header_timeout: Duration,
    /// How long an HTTP connection may stay idle between requests.
    pub http_idle_timeout: Duration,
    /// Most open HTTP connections.
    pub max_http_connections: usize,
    /// TLS of the gRPC listener; `None`: plaintext.
    pub tls: Option<TlsSettings>,
    /// Fleet mode (SPEC §10); `None`: gRPC only.
    pub fleet: Option<FleetSettings>,
}

impl ServerSettings {
    /// Resolves flags and environment over `file` over defaults.
    pub fn resolve(args: &ServerArgs, file: &FileSettings) -> Result<Self, ConfigError> {
        let windows = resolved(
            args.windows.clone(),
            file.windows.clone(),
            defaults::WINDOWS.to_vec(),
        );
        if windows.is_empty() || windows.iter().any(|w| *w < Duration::from_secs(1)) {
            return Err(invalid(
                "windows",
                "give at least one window of 1s or more, e.g. 1m,5m,1h",
            ));
        }
        Ok(Self {
            tls: TlsSettings::resolve(args, file)?,
            fleet: FleetSettings::resolve(&args.fleet, &file.fleet)?,
            grpc_addr: resolved(args.grpc_addr, file.grpc_addr, defaults::GRPC_ADDR),
            http_addr: resolved(args.http_addr, file.http_addr, defaults::HTTP_ADDR),
            wall_clock_advance: resolved(
                args.wall_clock_advance,
                file.wall_clock_advance,
                defaults::WALL_CLOCK_ADVANCE,
            ),
            huge_pages: resolved(args.huge_pages, file.huge_pages, defaults::HUGE_PAGES),
            max_future_skew: resolved(
                args.max_future_skew,
                file.max_future_skew,
                defaults::MAX_FUTURE_SKEW,
            ),
            windows,
            state_dir: args.state_dir.clone().or_else(|| file.state_dir.clone()),
            snapshot_interval: resolved(
                args.snapshot_interval,
                file.snapshot_interval,
                defaults::SNAPSHOT_INTERVAL,
            ),
            drain_timeout: resolved(
                args.drain_timeout,
                file.drain_timeout,
                defaults::DRAIN_TIMEOUT,
            ),
            max_message_size: at_least_one(
                "max_message_size",
                resolved(
                    args.max_message_size,
                    file.max_message_size,
                    defaults::MAX_MESSAGE_SIZE,
                ),
            )?,
            max_streams: at_least_one(
                "max_streams",
                resolved(args.max_streams, file.max_streams, defaults::MAX_STREAMS),
            )?,
            max_inflight_batches: at_least_one(
                "max_inflight_batches",
                resolved(
                    args.max_inflight_batches,
                    file.max_inflight_batches,
                    defaults::MAX_INFLIGHT_BATCHES,
                ),
            )?,
            ingest_idle_timeout: positive(
                "ingest_idle_timeout",
                resolved(
                    args.ingest_idle_timeout,
                    file.ingest_idle_timeout,
                    defaults::INGEST_IDLE_TIMEOUT,
                ),
            )?,
            group_idle_timeout: positive(
                "group_idle_timeout",
                resolved(
                    args.group_idle_timeout,
                    file.group_idle_timeout,
                    defaults::GROUP_IDLE_TIMEOUT,
                ),
            )?,
            http_header_timeout: positive(
                "http_header_timeout",
                resolved(
                    args.http_header_timeout,
                    file.http_header_timeout,
                    defaults::HTTP_HEADER_TIMEOUT,
                ),
            )?,
            http_idle_timeout: positive(
                "http_idle_timeout",
                resolved(
                    args.http_idle_timeout,
                    file.http_idle_timeout,
                    defaults::HTTP_IDLE_TIMEOUT,
                ),
            )?,
            max_http_connections: at_least_one(
                "max_http_connections",
                resolved(
                    args.max_http_connections,
                    file.max_http_connections,
                    defaults::MAX_HTTP_CONNECTIONS,
                ),
            )?,
        })
    }
}

impl TlsSettings {
    /// TLS when both a certificate and its key are set; none when nothing is.
    fn resolve(args: &ServerArgs, file: &FileSettings) -> Result<Option<Self>, ConfigError> {
        let cert = args.tls_cert.clone().or_else(|| file.tls_cert.clone());
        let key = args.tls_key.clone().or_else(|| file.tls_key.clone());
        let client_ca = args
            .tls_client_ca
            .clone()
            .or_else(|| file.tls_client_ca.clone());
        match (cert, key, client_ca) {
            (Some(cert), Some(key), client_ca) => Ok(Some(Self {
                cert,
                key,
                client_ca,
            })),
            (None, None, None) => Ok(None),
            _ => Err(invalid(
                "tls_cert/tls_key",
                "TLS needs both tls_cert and tls_key (and tls_client_ca only with them)",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_override_file_which_overrides_defaults() {
        let file: FileSettings =
            toml::from_str("k = [3, 7]\nallowed_lateness = \"10s\"\ngain = \"exponential\"\n[grades]\nview = 0.5\n").unwrap();
        let args = EngineArgs {
            k: Some(vec![50]),
            grades: Some(vec![("buy".into(), 4.0)]),
            ..Default::default()
        };
        let settings = EngineSettings::resolve(&args, &file).unwrap();
        assert_eq!(settings.k, vec![50]);
        assert_eq!(settings.allowed_lateness, Duration::from_secs(10));
        assert_eq!(settings.attribution_window, Duration::from_secs(300));
        assert_eq!(settings.metrics.gain, Gain::Exponential);
        assert_eq!(settings.grades.grade("view"), Some(0.5));
        assert_eq!(
            settings.grades.grade("click"),
            None,
            "the file's table replaces the defaults"
        );
        assert_eq!(
            settings.grades.grade("buy"),
            Some(4.0),
            "flags add to the table"
        );
        let flag_only = EngineSettings::resolve(&args, &FileSettings::default()).unwrap();
        assert_eq!(
            (
                flag_only.grades.grade("click"),
                flag_only.grades.grade("buy")
            ),
            (Some(1.0), Some(4.0))
        );
    }

    #[test]
    fn the_control_model_comes_from_the_flag_then_the_file() {
        let file: FileSettings = toml::from_str("control_model = \"v7\"").unwrap();
        let none = EngineSettings::resolve(&EngineArgs::default(), &FileSettings::default());
        assert_eq!(none.unwrap().control_model, None);
        let from_file = EngineSettings::resolve(&EngineArgs::default(), &file).unwrap();
        assert_eq!(from_file.control_model.as_deref(), Some("v7"));
        assert_eq!(
            from_file.report_config().control_model.as_deref(),
            Some("v7")
        );
        let flag = EngineArgs {
            control_model: Some("v8".into()),
            ..Default::default()
        };
        let from_flag = EngineSettings::resolve(&flag, &file).unwrap();
        assert_eq!(from_flag.control_model.as_deref(), Some("v8"));
        let blank = EngineArgs {
            control_model: Some(" ".into()),
            ..Default::default()
        };
        let error = EngineSettings::resolve(&blank, &file)
            .unwrap_err()
            .to_string();
        assert!(error.contains("control_model"), "{error}");
    }

    #[test]
    fn explains_bad_values() {
        let bad = EngineArgs {
            half_life: Some(1.0),
            ..Default::default()
        };
        let error = EngineSettings::resolve(&bad, &FileSettings::default())
            .unwrap_err()
            .to_string();
        assert!(error.contains("half_life"), "{error}");
        let unknown = toml::from_str::<FileSettings>("attribution_windw = \"5m\"")
            .unwrap_err()
            .to_string();
        assert!(unknown.contains("attribution_windw"), "{unknown}");
        let duration = toml::from_str::<FileSettings>("allowed_lateness = \"soon\"")
            .unwrap_err()
            .to_string();
        assert!(duration.contains("30s"), "{duration}");
    }

    #[test]
    fn the_readme_settings_example_is_a_valid_file() {
        let readme = include_str!("../README.md");
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
}
