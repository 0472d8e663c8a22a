//! The engine's settings from flags, environment and the file: metric
//! definitions, grades, segments and the engine's limits.

use super::choices::{DiscountName, GainName};
use super::{
    at_least_one, bounded, defaults, help, invalid, parse_duration, pick, positive, resolved,
    shown_choice, shown_duration, shown_grades, shown_list, ConfigError, FileSettings,
    LIMITS_HEADING, MAX_LIMIT,
};
use crate::engine::EngineSettings;
use crate::event::GradeTable;
use crate::join::SegmentSettings;
use crate::metrics::{Discount, Gain, MetricSettings};
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;

/// `NAME=NUMBER`: `key` and `example` name the flag's form in the message.
fn parse_named_number(text: &str, key: &str, example: &str) -> Result<(String, f64), String> {
    let Some((name, number)) = text.split_once('=') else {
        return Err(format!("{text:?} is not {key}, e.g. {example}"));
    };
    match number.trim().parse() {
        Ok(number) => Ok((name.trim().to_owned(), number)),
        Err(_) => Err(format!(
            "the number of {name:?} in {text:?} is not a number"
        )),
    }
}

fn parse_grade(text: &str) -> Result<(String, f64), String> {
    parse_named_number(text, "TYPE=GRADE", "click=1")
}

fn parse_share(text: &str) -> Result<(String, f64), String> {
    parse_named_number(text, "MODEL=SHARE", "control=0.5")
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
        help = help("Cutoffs K, comma-separated: 1 to 10000, at most 16", shown_list(defaults::K)))]
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
    /// Keep open lists' items as numbers of a table of the items they show.
    #[arg(long, env = "RANKWATCH_NUMBER_ITEMS",
        help = help("Keep open lists' items as numbers of a table of the items open lists show (1 to 4 bytes each, the table's 24 to 40 bytes per item beside) instead of 8-byte hashes: less memory where items repeat across open lists, more where they hardly do; replay always keeps hashes", defaults::NUMBER_ITEMS))]
    pub number_items: Option<bool>,
    /// Grade of an interaction type, TYPE=GRADE, repeatable.
    #[arg(long = "grade", env = "RANKWATCH_GRADES", value_delimiter = ',', value_parser = parse_grade,
        help = help("Grade of an interaction type, TYPE=GRADE, repeatable; adds to or overrides the config's table", shown_grades()))]
    pub grades: Option<Vec<(String, f64)>>,
    /// Limit: most items in one impression.
    #[arg(help_heading = LIMITS_HEADING, long, env = "RANKWATCH_MAX_ITEMS",
        help = help("Limit: most items in one impression; longer lists are rejected (too_many_items)", defaults::MAX_ITEMS))]
    pub max_items: Option<usize>,
    /// Limit: longest model or surface name or segment value.
    #[arg(help_heading = LIMITS_HEADING, long, env = "RANKWATCH_MAX_LABEL_BYTES",
        help = help("Limit: longest model or surface name or segment value in bytes; longer ones are rejected (label_too_long)", defaults::MAX_LABEL_BYTES))]
    pub max_label_bytes: Option<usize>,
    /// Limit: most open impressions of one user.
    #[arg(help_heading = LIMITS_HEADING, long, env = "RANKWATCH_MAX_OPEN_IMPRESSIONS_PER_USER",
        help = help("Limit: most open impressions of one user (a user id shared by many people, such as \"guest\", holds many); a new one past it is shed, counted, and not evaluated", defaults::MAX_OPEN_IMPRESSIONS_PER_USER))]
    pub max_open_impressions_per_user: Option<usize>,
    /// Limit: most waiting interactions of one user.
    #[arg(help_heading = LIMITS_HEADING, long, env = "RANKWATCH_MAX_WAITING_INTERACTIONS_PER_USER",
        help = help("Limit: most interactions of one user waiting for their impressions; a new one that would wait past it is shed and counted", defaults::MAX_WAITING_INTERACTIONS_PER_USER))]
    pub max_waiting_interactions_per_user: Option<usize>,
    /// Limit: most interactions credited to one impression.
    #[arg(help_heading = LIMITS_HEADING, long, env = "RANKWATCH_MAX_INTERACTIONS_PER_IMPRESSION",
        help = help("Limit: most interactions credited to one impression as they arrive; more are shed and counted", defaults::MAX_INTERACTIONS_PER_IMPRESSION))]
    pub max_interactions_per_impression: Option<usize>,
    /// Limit: rejections detailed in one ack.
    #[arg(help_heading = LIMITS_HEADING, long, env = "RANKWATCH_MAX_ACK_REJECTIONS",
        help = help("Limit: rejections an ack details (index, reason, message); the others of its batch are counted by reason, so that an ack stays small whatever the batch holds", defaults::MAX_ACK_REJECTIONS))]
    pub max_ack_rejections: Option<usize>,
    /// Limit: largest grade.
    #[arg(long, env = "RANKWATCH_MAX_GRADE",
        help = help("Limit: largest grade of an interaction, explicit or from the grade table; a larger explicit grade is rejected (invalid_grade). Its gain must be at most 1e30, so that every figure stays finite", defaults::MAX_GRADE))]
    pub max_grade: Option<f64>,
    /// Limit: most groups.
    #[arg(help_heading = LIMITS_HEADING, long, env = "RANKWATCH_MAX_GROUPS",
        help = help("Limit: most groups (model, surface and segment values); new ones past it fold into the __overflow__ group", defaults::MAX_GROUPS))]
    pub max_groups: Option<usize>,
    /// Impression label keys whose values are dimensions of every group.
    #[arg(long, env = "RANKWATCH_SEGMENT_LABELS", value_delimiter = ',',
        help = help("Impression label keys whose values are dimensions of every group and labels of every per-group series, comma-separated; other keys are ignored", "none"))]
    pub segment_labels: Option<Vec<String>>,
    /// Limit: most distinct values of each segment label.
    #[arg(help_heading = LIMITS_HEADING, long, env = "RANKWATCH_MAX_SEGMENT_VALUES",
        help = help("Limit: most distinct values of each segment label; later values fold into __other__, counted", defaults::MAX_SEGMENT_VALUES))]
    pub max_segment_values: Option<usize>,
    /// Limit: most open impressions.
    #[arg(help_heading = LIMITS_HEADING, long, env = "RANKWATCH_MAX_OPEN_IMPRESSIONS",
        help = help("Limit: most open impressions; a new impression past it is shed, counted, and not evaluated", defaults::MAX_OPEN_IMPRESSIONS))]
    pub max_open_impressions: Option<usize>,
    /// Limit: most items of all open impressions together.
    #[arg(help_heading = LIMITS_HEADING, long, env = "RANKWATCH_MAX_OPEN_ITEMS",
        help = help("Limit: most items of all open impressions together, which bounds their memory whatever the length of lists; a new impression whose items would take them past it is shed, counted, and not evaluated", defaults::MAX_OPEN_ITEMS))]
    pub max_open_items: Option<usize>,
    /// Limit: most waiting interactions.
    #[arg(help_heading = LIMITS_HEADING, long, env = "RANKWATCH_MAX_WAITING_INTERACTIONS",
        help = help("Limit: most waiting interactions; a new one that would wait past it is shed and counted", defaults::MAX_WAITING_INTERACTIONS))]
    pub max_waiting_interactions: Option<usize>,
    /// Limit: most interactions credited to all open impressions together.
    #[arg(help_heading = LIMITS_HEADING, long, env = "RANKWATCH_MAX_OPEN_CREDITS",
        help = help("Limit: most interactions credited to all open impressions together, a waiting one counted as the credit it becomes, which bounds their memory whatever the traffic of one list; a new one that would be credited, or wait, past it is shed and counted", defaults::MAX_OPEN_CREDITS))]
    pub max_open_credits: Option<usize>,
    /// The model every other model on a surface is compared against.
    #[arg(long, env = "RANKWATCH_CONTROL_MODEL",
        help = help("The model every other model on a surface is compared against (docs/SPEC.md §9)", "none"))]
    pub control_model: Option<String>,
    /// The intended traffic split between models, checked continuously.
    #[arg(long, env = "RANKWATCH_EXPECTED_SPLIT", value_delimiter = ',', value_parser = parse_share,
        help = help("The intended share of lists of each model on every surface, MODEL=SHARE comma-separated (e.g. control=0.5,candidate=0.5); lists per model are tested against it continuously (the sample ratio check, docs/SPEC.md §12)", "none"))]
    pub expected_split: Option<Vec<(String, f64)>>,
    /// Limit: most rankers in one interleaved list.
    #[arg(help_heading = LIMITS_HEADING, long, env = "RANKWATCH_MAX_INTERLEAVED_RANKERS",
        help = help("Limit: most rankers one interleaved list may merge (2 to 255); a list naming more is rejected (invalid_interleaving)", defaults::MAX_INTERLEAVED_RANKERS))]
    pub max_interleaved_rankers: Option<usize>,
}

/// Most interaction types in the grade table: each is a column of every
/// group's position curve.
const MAX_INTERACTION_TYPES: usize = 64;

/// Deepest position curve: each rank is a row of counters per group.
const MAX_POSITION_CURVE_DEPTH: usize = 1000;

/// `value`, unless it is outside `min..=max`.
fn between(key: &'static str, value: usize, min: usize, max: usize) -> Result<usize, ConfigError> {
    if !(min..=max).contains(&value) {
        return Err(invalid(
            key,
            format!("{value} is out of range: give a whole number from {min} to {max}"),
        ));
    }
    Ok(value)
}

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
fn grades(
    args: &EngineArgs,
    file: &FileSettings,
    max_grade: f64,
) -> Result<GradeTable, ConfigError> {
    let flags = args.grades.as_deref().unwrap_or_default();
    // A flag overrides the file's grade; a second flag for the same type
    // would override the first unseen.
    for (index, (name, grade)) in flags.iter().enumerate() {
        if let Some((_, earlier)) = flags[..index].iter().find(|(earlier, _)| earlier == name) {
            return Err(invalid(
                "grades",
                format!("{name:?} is graded twice on the command line or in RANKWATCH_GRADES ({earlier:?} and {grade:?}): give each type once"),
            ));
        }
    }
    let base = match &file.grades {
        Some(table) => GradeTable::new(table.iter().map(|(k, v)| (k.clone(), *v))),
        None => GradeTable::default(),
    };
    let grades = GradeTable::new(base.pairs().iter().cloned().chain(flags.iter().cloned()));
    if grades.pairs().is_empty() || grades.pairs().iter().any(|(name, _)| name.is_empty()) {
        return Err(invalid(
            "grades",
            "configure at least one interaction type, each with a name, e.g. click = 1.0",
        ));
    }
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
        .find(|(_, g)| !crate::event::is_grade(*g))
    {
        return Err(invalid(
            "grades",
            format!(
                "grade of {name:?} is {grade:?}; a grade is 0 or a finite number of at least {:?}",
                crate::event::MIN_POSITIVE_GRADE
            ),
        ));
    }
    if let Some((name, grade)) = grades.pairs().iter().find(|(_, g)| *g > max_grade) {
        return Err(invalid(
            "grades",
            format!("grade of {name:?} is {grade:?}, more than max_grade = {max_grade:?}; raise max_grade or lower the grade"),
        ));
    }
    Ok(grades)
}

/// Most segment labels: each multiplies the groups a model may have.
const MAX_SEGMENT_LABELS: usize = 8;

/// Labels that rankwatch's own series carry, which a segment label may not
/// shadow (a series with a label twice makes Prometheus drop the scrape),
/// and those Prometheus gives every target (a series's own are renamed
/// `exported_…` on scrape).
const SERIES_LABELS: [&str; 22] = [
    "instance",
    "job",
    "endpoint",
    "limit",
    "ranker",
    "model",
    "surface",
    "k",
    "window",
    "scope",
    "rank",
    "type",
    "control",
    "metric",
    "reason",
    "kind",
    "label",
    "le",
    "quantile",
    "ranker_a",
    "ranker_b",
    "candidate",
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
                format!("{label:?} is a label of rankwatch's own series or of every Prometheus target; name the key otherwise"),
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

/// Checks that events could name `model`, the value of `setting`: no
/// longer than `max_label_bytes`, and not starting with the prefix of
/// rankwatch's own groups. A comparison or a check that waits for a model
/// no event can name would wait forever.
fn nameable(setting: &'static str, model: &str, max_label_bytes: usize) -> Result<(), ConfigError> {
    if model.starts_with(crate::event::RESERVED_PREFIX) {
        return Err(invalid(
            setting,
            format!("{model:?} starts with {RESERVED}, which only rankwatch's own groups do (such as the overflow group)", RESERVED = crate::event::RESERVED_PREFIX),
        ));
    }
    if model.len() > max_label_bytes {
        return Err(invalid(
            setting,
            format!("the model name of {} bytes is longer than max_label_bytes = {max_label_bytes}, so no event could name it", model.len()),
        ));
    }
    Ok(())
}

/// The control model, if any: flags and environment over the file; a blank name is an error.
fn control_model(
    args: &EngineArgs,
    file: &FileSettings,
    max_label_bytes: usize,
) -> Result<Option<String>, ConfigError> {
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
    nameable("control_model", &name, max_label_bytes)?;
    Ok(Some(name))
}

/// The expected split, if any: flags and environment over the file. At
/// least two models, each share finite and greater than 0, and still a
/// normal number once the shares are normalized to sum to 1.
fn expected_split(
    args: &EngineArgs,
    file: &FileSettings,
    max_label_bytes: usize,
) -> Result<Vec<(String, f64)>, ConfigError> {
    let Some(split) = args.expected_split.clone().or_else(|| {
        file.expected_split
            .as_ref()
            .map(|table| table.iter().map(|(m, s)| (m.clone(), *s)).collect())
    }) else {
        return Ok(Vec::new());
    };
    let mut models: Vec<&str> = split.iter().map(|(model, _)| model.as_str()).collect();
    models.sort_unstable();
    models.dedup();
    if models.len() != split.len() || models.len() < 2 || models.iter().any(|m| m.is_empty()) {
        return Err(invalid(
            "expected_split",
            "name two or more distinct models, each once, e.g. control=0.5,candidate=0.5",
        ));
    }
    for model in &models {
        nameable("expected_split", model, max_label_bytes)?;
    }
    if let Some((model, share)) = split.iter().find(|(_, s)| !(s.is_finite() && *s > 0.0)) {
        return Err(invalid(
            "expected_split",
            format!("the share of {model:?} is {share}; give each model a share greater than 0"),
        ));
    }
    // Scaled by the largest first, so that shares near f64::MAX sum finitely.
    let largest = split.iter().map(|(_, share)| *share).fold(0.0, f64::max);
    let total: f64 = split.iter().map(|(_, share)| share / largest).sum();
    let mut split: Vec<(String, f64)> = split
        .into_iter()
        .map(|(m, s)| (m, s / largest / total))
        .collect();
    // A share so small beside the others that its part of the total is 0
    // (or loses its precision) would leave the check nothing to test.
    if let Some((model, _)) = split.iter().find(|(_, share)| !share.is_normal()) {
        return Err(invalid(
            "expected_split",
            format!("the share of {model:?} is too small beside the others to be told from 0 once the shares are normalized to sum to 1; give shares of comparable size, e.g. control=0.5,candidate=0.5"),
        ));
    }
    split.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(split)
}

/// The largest cutoff K: each group keeps weights up to it per metric
/// and window, and no list is longer than a few thousand items.
const MAX_K: usize = 10_000;

/// Most distinct cutoffs: each multiplies the figures of every group.
const MAX_CUTOFFS: usize = 16;

/// The cutoffs K: at least one, each from 1 to [`MAX_K`], at most
/// [`MAX_CUTOFFS`] distinct ones.
fn cutoffs(args: &EngineArgs, file: &FileSettings) -> Result<Vec<usize>, ConfigError> {
    let k = resolved(args.k.clone(), file.k.clone(), defaults::K.to_vec());
    let distinct: std::collections::BTreeSet<_> = k.iter().collect();
    if k.is_empty() || !k.iter().all(|k| (1..=MAX_K).contains(k)) || distinct.len() > MAX_CUTOFFS {
        return Err(invalid(
            "k",
            format!("cutoffs must be whole numbers from 1 to {MAX_K}, at most {MAX_CUTOFFS} of them, e.g. 1,5,10,20"),
        ));
    }
    Ok(k)
}

/// `max_interleaved_rankers`: 2 to what a team index's byte holds.
fn max_interleaved_rankers(args: &EngineArgs, file: &FileSettings) -> Result<usize, ConfigError> {
    between(
        "max_interleaved_rankers",
        pick!(
            args,
            file,
            max_interleaved_rankers,
            defaults::MAX_INTERLEAVED_RANKERS
        ),
        2,
        crate::event::MAX_INTERLEAVED_RANKERS,
    )
}

impl EngineSettings {
    /// Resolves flags and environment over `file` over defaults.
    pub fn resolve(args: &EngineArgs, file: &FileSettings) -> Result<Self, ConfigError> {
        let k = cutoffs(args, file)?;
        let metrics = metric_settings(args, file)?;
        let max_grade = max_grade(args, file, metrics.gain)?;
        // A limit's value: from 1 to MAX_LIMIT.
        macro_rules! limit {
            ($key:ident, $default:ident) => {
                at_least_one(
                    stringify!($key),
                    pick!(args, file, $key, defaults::$default),
                )
            };
        }
        let max_label_bytes = limit!(max_label_bytes, MAX_LABEL_BYTES)?;
        Ok(Self {
            attribution_window: positive(
                "attribution_window",
                pick!(args, file, attribution_window, defaults::ATTRIBUTION_WINDOW),
            )?,
            allowed_lateness: bounded(
                "allowed_lateness",
                pick!(args, file, allowed_lateness, defaults::ALLOWED_LATENESS),
            )?,
            k,
            metrics,
            grades: grades(args, file, max_grade)?,
            max_grade,
            max_open_impressions_per_user: limit!(
                max_open_impressions_per_user,
                MAX_OPEN_IMPRESSIONS_PER_USER
            )?,
            max_waiting_interactions_per_user: limit!(
                max_waiting_interactions_per_user,
                MAX_WAITING_INTERACTIONS_PER_USER
            )?,
            max_interactions_per_impression: limit!(
                max_interactions_per_impression,
                MAX_INTERACTIONS_PER_IMPRESSION
            )?,
            max_ack_rejections: limit!(max_ack_rejections, MAX_ACK_REJECTIONS)?,
            position_curve_depth: at_most(
                "position_curve_depth",
                resolved(
                    args.position_curve_depth,
                    file.position_curve_depth,
                    defaults::POSITION_CURVE_DEPTH,
                ),
                MAX_POSITION_CURVE_DEPTH,
            )?,
            max_exposure_items: at_most(
                "max_exposure_items",
                resolved(
                    args.max_exposure_items,
                    file.max_exposure_items,
                    defaults::MAX_EXPOSURE_ITEMS,
                ),
                MAX_LIMIT,
            )?,
            number_items: resolved(args.number_items, file.number_items, defaults::NUMBER_ITEMS),
            max_items: limit!(max_items, MAX_ITEMS)?,
            max_label_bytes,
            max_groups: limit!(max_groups, MAX_GROUPS)?,
            segments: SegmentSettings {
                labels: segment_labels(args, file)?,
                max_values: limit!(max_segment_values, MAX_SEGMENT_VALUES)?,
            },
            max_open_impressions: limit!(max_open_impressions, MAX_OPEN_IMPRESSIONS)?,
            max_open_items: limit!(max_open_items, MAX_OPEN_ITEMS)?,
            max_waiting_interactions: limit!(max_waiting_interactions, MAX_WAITING_INTERACTIONS)?,
            max_open_credits: limit!(max_open_credits, MAX_OPEN_CREDITS)?,
            control_model: control_model(args, file, max_label_bytes)?,
            expected_split: expected_split(args, file, max_label_bytes)?,
            max_interleaved_rankers: max_interleaved_rankers(args, file)?,
        })
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
}

/// The largest gain any figure may sum: with every grade's gain at most
/// this, sums and sums of squares over billions of lists of billions of
/// items stay far from overflowing.
const MAX_GAIN: f64 = 1e30;

/// `max_grade`: greater than 0, and its gain at most [`MAX_GAIN`].
fn max_grade(args: &EngineArgs, file: &FileSettings, gain: Gain) -> Result<f64, ConfigError> {
    let max_grade = pick!(args, file, max_grade, defaults::MAX_GRADE);
    let gained = match gain {
        Gain::Linear => max_grade,
        Gain::Exponential => max_grade.exp2() - 1.0,
    };
    if !(max_grade.is_finite() && max_grade > 0.0 && gained <= MAX_GAIN) {
        return Err(invalid(
            "max_grade",
            format!("{max_grade:?} is out of range: give a number greater than 0 whose gain is at most 1e30 (with exponential gain, at most 99)"),
        ));
    }
    Ok(max_grade)
}

/// A number that must be finite and greater than `min`.
fn greater_than(key: &'static str, value: f64, min: f64) -> Result<f64, ConfigError> {
    if !value.is_finite() {
        return Err(invalid(
            key,
            format!("{value:?} is not a finite number: give one greater than {min:?}"),
        ));
    }
    if value <= min {
        return Err(invalid(
            key,
            format!("{value:?} must be a number greater than {min:?}"),
        ));
    }
    Ok(value)
}

/// Gain, discount, half-life, ERR's largest grade and RBP's persistence.
fn metric_settings(args: &EngineArgs, file: &FileSettings) -> Result<MetricSettings, ConfigError> {
    let half_life = greater_than(
        "half_life",
        resolved(args.half_life, file.half_life, defaults::HALF_LIFE),
        1.0,
    )?;
    let g_max = greater_than(
        "g_max",
        resolved(args.g_max, file.g_max, defaults::G_MAX),
        0.0,
    )?;
    let rbp_p = resolved(args.rbp_p, file.rbp_p, defaults::RBP_P);
    if !(rbp_p > 0.0 && rbp_p < 1.0) {
        return Err(invalid(
            "rbp_p",
            format!("{rbp_p:?} must be a number between 0 and 1, exclusive"),
        ));
    }
    let log_base = greater_than(
        "log_base",
        resolved(args.log_base, file.log_base, defaults::LOG_BASE),
        1.0,
    )?;
    let discount = match resolved(args.discount, file.discount, defaults::DISCOUNT) {
        DiscountName::Log2 => Discount::Log2,
        DiscountName::Jarvelin => Discount::Jarvelin { base: log_base },
    };
    let gain = match resolved(args.gain, file.gain, defaults::GAIN) {
        GainName::Linear => Gain::Linear,
        GainName::Exponential => Gain::Exponential,
    };
    Ok(MetricSettings {
        gain,
        discount,
        half_life,
        err_max_grade: g_max,
        rbp_persistence: rbp_p,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Why `args`, with no settings file, are refused.
    fn refusal(args: &EngineArgs) -> String {
        EngineSettings::resolve(args, &FileSettings::default())
            .unwrap_err()
            .to_string()
    }

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
    fn an_expected_split_is_normalized_and_checked() {
        let file: FileSettings = toml::from_str("[expected_split]\nb = 3.0\na = 1.0").unwrap();
        let split = EngineSettings::resolve(&EngineArgs::default(), &file)
            .unwrap()
            .expected_split;
        assert_eq!(split, [("a".to_owned(), 0.25), ("b".to_owned(), 0.75)]);
        let huge = EngineArgs {
            expected_split: Some(vec![("a".into(), f64::MAX), ("b".into(), f64::MAX)]),
            ..EngineArgs::default()
        };
        let split = EngineSettings::resolve(&huge, &FileSettings::default())
            .unwrap()
            .expected_split;
        assert_eq!(split, [("a".to_owned(), 0.5), ("b".to_owned(), 0.5)]);
        for bad in [
            vec![("a".to_owned(), 1.0)],
            vec![("a".into(), 1.0), ("a".into(), 1.0)],
            vec![("a".into(), 0.0), ("b".into(), 1.0)],
            // b's share of the total is 1e-600, which is 0 as a number.
            vec![("a".into(), 1e300), ("b".into(), 1e-300)],
        ] {
            let args = EngineArgs {
                expected_split: Some(bad),
                ..EngineArgs::default()
            };
            let error = refusal(&args);
            assert!(error.contains("expected_split"), "{error}");
        }
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
        let error = refusal(&bad);
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
    fn a_number_that_is_not_finite_is_told_so() {
        for (value, shown) in [(f64::INFINITY, "inf"), (f64::NAN, "NaN")] {
            let bad = EngineArgs {
                half_life: Some(value),
                ..Default::default()
            };
            let error = refusal(&bad);
            assert!(
                error.contains(&format!(
                    "{shown} is not a finite number: give one greater than 1.0"
                )),
                "{error}"
            );
        }
        let grade = EngineArgs {
            grades: Some(vec![("click".into(), f64::INFINITY)]),
            ..Default::default()
        };
        let error = refusal(&grade);
        assert!(
            error.contains("is inf; a grade is 0 or a finite number"),
            "{error}"
        );
        let huge = EngineArgs {
            rbp_p: Some(1e308),
            ..Default::default()
        };
        let error = refusal(&huge);
        assert!(
            error.contains(": 1e308 must be a number between 0 and 1"),
            "{error}"
        );
    }
}
