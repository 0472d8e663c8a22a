//! The evaluation report (docs/SPEC.md §6): settings, counters, and per-group means
//! of every metric at every K in both scopes.

use super::comparison::{by_cutoff, compare, Comparison, NamedTotals};
use super::interleaving::{
    experiment_reports, segment_text, split_reports, ExperimentReport, SplitReport,
};
use super::printable::printable;
use super::Snapshot;
use crate::join::{Counters, Engine, ExperimentName, GroupAggregates, Unattributed};
use crate::metrics::{
    CoverageFigures, CoverageMode, GroupTotals, Metric, MetricMeans, PositionCurve, R_PRECISION,
};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    /// The settings the figures were computed under.
    pub config: ReportConfig,
    /// The join's counters.
    pub counters: ReportCounters,
    /// The figures of each group.
    pub groups: Vec<GroupReport>,
    /// Every other model against the control (docs/SPEC.md §9); present when a control model is set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comparisons: Option<Vec<Comparison>>,
    /// Interleaving experiments (docs/SPEC.md §12); left out when there are none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub interleaving: Vec<ExperimentReport>,
    /// Sample ratio checks against `expected_split`, since start only;
    /// left out when there are none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub splits: Vec<SplitReport>,
    /// Lists still open and when the first is finalized; a running server
    /// reports it while lists are open, replay never.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pending: Option<Pending>,
}

/// Lists still open, so that a report without figures says when they come.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Pending {
    /// Impressions open for attribution.
    pub open_impressions: u64,
    /// How far event time must still advance (with the wall-clock advance:
    /// how many seconds) until the earliest open list is finalized.
    pub seconds_to_first_finalization: f64,
}

/// The metrics the table shows (the JSON report has every metric).
pub const TABLE_METRICS: [Metric; 6] = [
    Metric::HitRate,
    Metric::Mrr,
    Metric::Ndcg,
    Metric::Map,
    Metric::Precision,
    Metric::Recall,
];

/// The settings that shaped the figures, built by whoever configured the engine.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ReportConfig {
    /// Cutoffs K, sorted.
    pub k: Vec<usize>,
    /// The attribution window, in seconds.
    pub attribution_window_s: f64,
    /// The allowed lateness, in seconds.
    pub allowed_lateness_s: f64,
    /// The gain's name.
    pub gain: String,
    /// The model the others are compared against, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub control_model: Option<String>,
    /// The intended share of lists of each model, sorted by model; each
    /// split check of the report shows it.
    #[serde(skip)]
    pub expected_split: Vec<(String, f64)>,
}

/// Event outcomes, shaped as in docs/SPEC.md §6.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ReportCounters {
    /// Impressions opened.
    pub impressions: u64,
    /// Interactions accepted.
    pub interactions: u64,
    /// Interactions credited to an impression.
    pub credited: u64,
    /// Interactions credited to none, by reason.
    pub unattributed: BTreeMap<String, u64>,
    /// Late events, by kind.
    pub late: BTreeMap<String, u64>,
    /// Retried events ignored, by kind.
    pub duplicates: BTreeMap<String, u64>,
    /// Only reasons that occurred.
    pub rejected: BTreeMap<String, u64>,
    /// Events shed under limits, by kind; left out when none were.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub shed: BTreeMap<String, u64>,
    /// Interleaved lists left out of their experiments, which did not fit
    /// under `max_groups` (they count in their group); left out when none were.
    #[serde(skip_serializing_if = "is_zero")]
    pub unregistered_interleaved_lists: u64,
}

/// Whether a count is 0, for the counters a report leaves out then.
fn is_zero(count: &u64) -> bool {
    *count == 0
}

/// One group: a model on a surface, with its segment values.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GroupReport {
    /// The model.
    pub model: String,
    /// The surface.
    pub surface: String,
    /// The value of each segment label; left out when none is configured.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub segments: BTreeMap<String, String>,
    /// Finalized lists.
    pub lists: u64,
    /// Finalized lists with an engaged item.
    pub engaged_lists: u64,
    /// Keyed `metric@K`, and `r_precision`, which has no cutoff.
    pub metrics: BTreeMap<String, MeanPair>,
    /// The position curve since start, rank 1 first; left out of window reports.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub positions: Vec<PositionPoint>,
    /// Coverage and exposure of the same lists (docs/SPEC.md §11); left out when coverage is off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub coverage: Option<CoverageFigures>,
}

/// One rank of a position curve: CTR at the rank is `interactions["click"] / lists`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PositionPoint {
    /// 1-based rank.
    pub rank: usize,
    /// Finalized lists that showed at least `rank` items.
    pub lists: u64,
    /// Interactions credited at this rank, by type (every configured type).
    pub interactions: BTreeMap<String, u64>,
}

/// A group's name as the report reads it: model, surface, segment values.
type Named<'a> = (&'a str, &'a str, &'a [(String, String)]);

/// The points of `curve`, one per rank up to its depth.
fn position_points(curve: &PositionCurve, types: &[String]) -> Vec<PositionPoint> {
    (1..=curve.depth())
        .map(|rank| PositionPoint {
            rank,
            lists: curve.lists_reaching(rank),
            interactions: types
                .iter()
                .enumerate()
                .map(|(kind, name)| (name.clone(), curve.interactions_at(rank, kind)))
                .collect(),
        })
        .collect()
}

/// Both scopes' means and their standard errors, serialized as
/// `{"all": …, "engaged": …, "se_all": …, "se_engaged": …}` (docs/SPEC.md §9).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct MeanPair {
    /// The mean over all lists.
    pub all: f64,
    /// The mean over engaged lists.
    pub engaged: f64,
    /// Standard error of `all`.
    pub se_all: f64,
    /// Standard error of `engaged`.
    pub se_engaged: f64,
}

impl From<MetricMeans> for MeanPair {
    fn from(means: MetricMeans) -> Self {
        Self {
            all: means.all,
            engaged: means.engaged,
            se_all: means.se_all,
            se_engaged: means.se_engaged,
        }
    }
}

impl ReportCounters {
    /// Counters in report shape.
    pub fn new(counters: &Counters) -> Self {
        Self {
            impressions: counters.impressions,
            interactions: counters.interactions,
            credited: counters.credited,
            unattributed: Unattributed::ALL
                .iter()
                .map(|r| (r.as_str().to_owned(), counters.unattributed_count(*r)))
                .collect(),
            late: BTreeMap::from([("impressions".to_owned(), counters.late_impressions)]),
            duplicates: BTreeMap::from([
                ("impressions".to_owned(), counters.duplicate_impressions),
                ("interactions".to_owned(), counters.duplicate_interactions),
            ]),
            rejected: counters
                .rejected
                .iter()
                .map(|(reason, n)| (reason.as_str().to_owned(), *n))
                .collect(),
            shed: [
                (
                    "impressions",
                    counters.shed_impressions
                        + counters.shed_open_items
                        + counters.shed_open_per_user,
                ),
                (
                    "interactions",
                    counters.shed_interactions
                        + counters.shed_waiting_per_user
                        + counters.shed_interactions_per_impression
                        + counters.shed_open_credits,
                ),
            ]
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .map(|(kind, n)| (kind.to_owned(), n))
            .collect(),
            unregistered_interleaved_lists: 0,
        }
    }
}

impl Report {
    /// The report of every list finalized since start.
    pub fn since_start(engine: &Engine, config: &ReportConfig) -> Self {
        let groups = per_group(engine, |aggregates| aggregates.totals.clone());
        let curves = per_group(engine, |aggregates| &aggregates.positions);
        let coverage = per_group(engine, |aggregates| aggregates.coverage.figures())
            .filter(|_| engine.coverage_mode() != CoverageMode::Off);
        let experiments = per_experiment(engine, |aggregates| aggregates.totals.clone());
        Self::build(config, engine.counters(), engine.evaluator().ks(), groups)
            .with_positions(curves, engine.interaction_types())
            .with_coverage(coverage)
            .with_interleaving(experiments, true, engine.unregistered_interleavings())
    }

    /// The report of rolling window `index` (figures of the lists in the window; counters since start).
    pub fn window(engine: &Engine, config: &ReportConfig, index: usize) -> Self {
        let frontier = engine.frontier().unwrap_or(0);
        let groups = per_group(engine, |aggregates| {
            aggregates.windows.totals(index, frontier)
        });
        let coverage = per_group(engine, |aggregates| {
            aggregates.coverage_windows.figures(index, frontier)
        })
        .filter(|_| engine.coverage_mode() != CoverageMode::Off);
        let experiments = per_experiment(engine, |aggregates| {
            aggregates.windows.totals(index, frontier)
        });
        Self::build(config, engine.counters(), engine.evaluator().ks(), groups)
            .with_coverage(coverage)
            .with_interleaving(experiments, false, engine.unregistered_interleavings())
    }

    /// The report of `snapshot`: since start (`None`) or of rolling window `index`.
    pub fn of_snapshot(snapshot: &Snapshot, config: &ReportConfig, window: Option<usize>) -> Self {
        let groups = snapshot.groups.iter().map(|group| {
            let totals = match window {
                None => group.totals.clone(),
                Some(index) => group.windows.get(index).cloned().unwrap_or_default(),
            };
            (snapshot_named(group), totals)
        });
        let coverage = snapshot.groups.iter().filter_map(|group| {
            let figures = match window {
                None => group.coverage?,
                Some(index) => *group.window_coverage.get(index)?,
            };
            Some((snapshot_named(group), figures))
        });
        let experiments = snapshot.experiments.iter().map(|experiment| {
            let totals = match window {
                None => experiment.totals.clone(),
                Some(index) => experiment.windows.get(index).cloned().unwrap_or_default(),
            };
            (&experiment.name, totals)
        });
        let report = Self::build(config, &snapshot.counters, &snapshot.ks, groups)
            .with_coverage(coverage)
            .with_interleaving(
                experiments,
                window.is_none(),
                snapshot.unregistered_interleavings,
            );
        if window.is_some() {
            return report;
        }
        let curves = snapshot
            .groups
            .iter()
            .map(|group| (snapshot_named(group), &group.positions));
        report.with_positions(curves, &snapshot.interaction_types)
    }

    /// The report with each group's position curve, matched by name (since start only).
    fn with_positions<'a>(
        mut self,
        curves: impl Iterator<Item = (Named<'a>, &'a PositionCurve)>,
        types: &[String],
    ) -> Self {
        let curves: BTreeMap<GroupKey<'_>, &PositionCurve> =
            curves.map(|(name, curve)| (key_of(name), curve)).collect();
        for group in &mut self.groups {
            if let Some(curve) = curves.get(&group_key(group)) {
                group.positions = position_points(curve, types);
            }
        }
        self
    }

    /// Fills in each group's coverage and exposure.
    fn with_coverage<'a>(
        mut self,
        figures: impl Iterator<Item = (Named<'a>, CoverageFigures)>,
    ) -> Self {
        let figures: BTreeMap<GroupKey<'_>, CoverageFigures> =
            figures.map(|(name, f)| (key_of(name), f)).collect();
        for group in &mut self.groups {
            group.coverage = figures.get(&group_key(group)).copied();
        }
        self
    }

    /// The report with the open lists of `engine`, when there are some.
    pub fn with_pending(mut self, engine: &Engine) -> Self {
        self.pending = engine
            .seconds_to_first_finalization()
            .map(|seconds| Pending {
                open_impressions: engine.open_impressions() as u64,
                seconds_to_first_finalization: seconds,
            });
        self
    }

    /// Fills in the interleaving experiments, and the count of the lists
    /// left out of them (`unregistered`); `since_start` tells whether the
    /// figures are since start, where the anytime-valid checks apply.
    fn with_interleaving<'a>(
        mut self,
        experiments: impl Iterator<Item = (&'a ExperimentName, GroupTotals)>,
        since_start: bool,
        unregistered: u64,
    ) -> Self {
        self.interleaving = experiment_reports(experiments, since_start);
        self.counters.unregistered_interleaved_lists = unregistered;
        if !since_start {
            self.splits.clear();
        }
        self
    }

    fn build<'a>(
        config: &ReportConfig,
        counters: &Counters,
        ks: &[usize],
        groups: impl Iterator<Item = (Named<'a>, GroupTotals)>,
    ) -> Self {
        let totals: Vec<(Named<'a>, GroupTotals)> = groups.collect();
        let named: Vec<NamedTotals<'_>> = totals
            .iter()
            .map(|((model, surface, segments), totals)| NamedTotals {
                model,
                surface,
                segments,
                totals,
            })
            .collect();
        let mut groups: Vec<GroupReport> = named
            .iter()
            .map(|g| group_report(g, ks))
            .filter(|group| group.lists > 0)
            .collect();
        groups.sort_by(|a, b| {
            (&a.model, &a.surface, &a.segments).cmp(&(&b.model, &b.surface, &b.segments))
        });
        let comparisons = config
            .control_model
            .as_deref()
            .map(|control| compare(&named, control, ks));
        Self {
            config: config.clone(),
            counters: ReportCounters::new(counters),
            groups,
            comparisons,
            interleaving: Vec::new(),
            splits: split_reports(&named, &config.expected_split),
            pending: None,
        }
    }

    /// What to say when the control model has no group while others have:
    /// nothing is compared (a misspelled `control_model`, say), and the
    /// first models that have groups. `scope` says over what the report
    /// runs: "" since start, " in the last 5m" for a window.
    pub fn control_unseen(&self, scope: &str) -> Option<String> {
        /// Models named before the rest are only counted.
        const MODELS_SHOWN: usize = 10;
        let control = self.config.control_model.as_ref()?;
        let mut models: Vec<&str> = self.groups.iter().map(|g| g.model.as_str()).collect();
        models.dedup();
        if models.is_empty() || models.contains(&control.as_str()) {
            return None;
        }
        let mut named: Vec<String> = models
            .iter()
            .take(MODELS_SHOWN)
            .map(|m| format!("{m:?}"))
            .collect();
        if models.len() > MODELS_SHOWN {
            named.push(format!("and {} more", models.len() - MODELS_SHOWN));
        }
        Some(format!(
            "the control model {control:?} has no finalized list{scope}, so nothing is compared against it; the models with lists: {}",
            named.join(", ")
        ))
    }

    /// A table for people: counters, then one row per group and K.
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        write_counters(&mut out, &self.counters);
        out.push('\n');
        // The usual columns, less those a filter left out of every group.
        let columns: Vec<Metric> = TABLE_METRICS
            .into_iter()
            .filter(|metric| {
                self.groups.is_empty()
                    || self.groups.iter().any(|group| {
                        group
                            .metrics
                            .keys()
                            .any(|key| key.split('@').next() == Some(metric.name()))
                    })
            })
            .collect();
        let segment_labels: Vec<&String> = self
            .groups
            .first()
            .map(|group| group.segments.keys().collect())
            .unwrap_or_default();
        write_name_header(&mut out, &segment_labels);
        let _ = write!(out, " {:>7} {:>7} {:>4}", "lists", "engaged", "K");
        for &metric in &columns {
            let _ = write!(out, " {:>15}", metric.name());
        }
        out.push('\n');
        for group in &self.groups {
            for k in &self.config.k {
                write_name(&mut out, group, &segment_labels);
                let _ = write!(
                    out,
                    " {:>7} {:>7} {:>4}",
                    group.lists, group.engaged_lists, k
                );
                for &metric in &columns {
                    let (mean, se) = group
                        .metrics
                        .get(&format!("{}@{k}", metric.name()))
                        .map_or((0.0, 0.0), |m| (m.all, m.se_all));
                    let shown = format!("{mean:.4}±{:.4}", 1.96 * se);
                    let _ = write!(out, " {shown:>15}");
                }
                out.push('\n');
            }
        }
        out.push_str("\nmeans over all finalized lists ± 1.96 standard errors; `--format json` gives every metric in both scopes.\n");
        write_coverage(&mut out, &self.groups, &segment_labels);
        if let Some(comparisons) = &self.comparisons {
            write_comparisons(&mut out, comparisons);
        }
        super::interleaving::write_table(&mut out, &self.interleaving, &self.splits);
        out
    }
}

/// The table's first lines: what happened to the events.
fn write_counters(out: &mut String, c: &ReportCounters) {
    let _ = writeln!(
        out,
        "events since start: {} impressions, {} interactions ({} credited, unattributed: {}), late impressions: {}, duplicates: {} impressions / {} interactions",
        c.impressions,
        c.interactions,
        c.credited,
        join_counts(&c.unattributed),
        c.late["impressions"],
        c.duplicates["impressions"],
        c.duplicates["interactions"],
    );
    let rejected = if c.rejected.is_empty() {
        "none".to_owned()
    } else {
        join_counts(&c.rejected)
    };
    let _ = writeln!(out, "rejected: {rejected}");
    if !c.shed.is_empty() {
        let _ = writeln!(
            out,
            "shed under limits, not evaluated: {} (settings max_open_*, max_waiting_* and max_interactions_per_impression)",
            join_counts(&c.shed)
        );
    }
    if c.unregistered_interleaved_lists > 0 {
        let _ = writeln!(
            out,
            "interleaved lists left out of their experiments: {} (max_groups reached: they count in their groups only; raise max_groups)",
            c.unregistered_interleaved_lists
        );
    }
}

/// The header of a group's name columns: model, surface, each segment label.
fn write_name_header(out: &mut String, segment_labels: &[&String]) {
    let _ = write!(out, "{:<14} {:<14}", "model", "surface");
    for label in segment_labels {
        let _ = write!(out, " {label:<14}");
    }
}

/// A group's name columns, under [`write_name_header`]'s.
fn write_name(out: &mut String, group: &GroupReport, segment_labels: &[&String]) {
    let (model, surface) = (printable(&group.model), printable(&group.surface));
    let _ = write!(out, "{model:<14} {surface:<14}");
    for label in segment_labels {
        let value = printable(group.segments.get(*label).map_or("", String::as_str));
        let _ = write!(out, " {value:<14}");
    }
}

/// Each group's coverage and exposure, one row each, when coverage is kept.
fn write_coverage(out: &mut String, groups: &[GroupReport], segment_labels: &[&String]) {
    if groups.iter().all(|group| group.coverage.is_none()) {
        return;
    }
    out.push('\n');
    write_name_header(out, segment_labels);
    let _ = writeln!(
        out,
        " {:>12} {:>13} {:>13} {:>16}",
        "items shown", "items engaged", "exposure gini", "exposure entropy"
    );
    for group in groups {
        let Some(c) = &group.coverage else {
            continue;
        };
        let estimated = if c.exact { "" } else { " (estimated)" };
        write_name(out, group, segment_labels);
        let _ = writeln!(
            out,
            " {:>12} {:>13} {:>13.4} {:>16.4}{estimated}",
            c.items_shown, c.items_engaged, c.exposure_gini, c.exposure_entropy
        );
    }
    out.push_str("\nexposure of an item: the sum of 1 / discount(rank) over the lists that showed it; entropy over ln(items shown).\n");
}

/// The comparisons against the control, one row each, their cutoffs in
/// the order of numbers.
fn write_comparisons(out: &mut String, comparisons: &[Comparison]) {
    let mut comparisons: Vec<&Comparison> = comparisons.iter().collect();
    comparisons.sort_by(|a, b| by_cutoff(a, b));
    let segments: Vec<String> = comparisons
        .iter()
        .map(|c| segment_text(&c.segments))
        .collect();
    // A column of segment values only when there are some.
    let width = segments
        .iter()
        .map(|s| s.chars().count() + 1)
        .max()
        .unwrap_or(0);
    let width = if width > 1 { width.max(15) } else { 0 };
    let _ = writeln!(
        out,
        "\n{:<14} {:<width$}{:<14} {:<14} {:<24} {:>9} {:>9} {:>21} {:>21}",
        "surface",
        if width > 0 { "segments" } else { "" },
        "model",
        "control",
        "metric",
        "diff",
        "se",
        "95% interval",
        "95% anytime-valid"
    );
    for (c, segments) in comparisons.iter().zip(&segments) {
        let interval = |[lo, hi]: [f64; 2]| format!("[{lo:.4}, {hi:.4}]");
        let _ = writeln!(
            out,
            "{:<14} {:<width$}{:<14} {:<14} {:<24} {:>9.4} {:>9.4} {:>21} {:>21}",
            printable(&c.surface),
            segments,
            printable(&c.model),
            printable(&c.control),
            c.metric,
            c.diff,
            c.se,
            interval(c.ci95),
            interval(c.cs95)
        );
    }
    out.push_str("\ndiff = model − control, scope all; the anytime-valid sequence stays valid however often it is looked at.\n");
}

fn join_counts(counts: &BTreeMap<String, u64>) -> String {
    counts
        .iter()
        .map(|(name, n)| format!("{name} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// How the report names an engine's group.
fn named(name: &crate::join::GroupName) -> Named<'_> {
    (&name.model, &name.surface, &name.segments)
}

/// A group's name as a map key: model, surface and segment values.
type GroupKey<'a> = (&'a str, &'a str, BTreeMap<&'a str, &'a str>);

fn key_of(name: Named<'_>) -> GroupKey<'_> {
    let (model, surface, segments) = name;
    let segments = segments
        .iter()
        .map(|(label, value)| (label.as_str(), value.as_str()))
        .collect();
    (model, surface, segments)
}

fn group_key(group: &GroupReport) -> GroupKey<'_> {
    let segments = group
        .segments
        .iter()
        .map(|(label, value)| (label.as_str(), value.as_str()))
        .collect();
    (group.model.as_str(), group.surface.as_str(), segments)
}

/// Each group of `engine` by name, with what `figure` takes of its aggregates.
fn per_group<'a, T>(
    engine: &'a Engine,
    figure: impl Fn(&'a GroupAggregates) -> T + 'a,
) -> impl Iterator<Item = (Named<'a>, T)> + 'a {
    engine
        .aggregates()
        .iter()
        .zip(engine.group_names())
        .map(move |(aggregates, name)| (named(name), figure(aggregates)))
}

/// Each interleaving experiment of `engine` by name, with what `figure`
/// takes of its aggregates.
fn per_experiment<'a, T>(
    engine: &'a Engine,
    figure: impl Fn(&'a crate::join::ExperimentAggregates) -> T + 'a,
) -> impl Iterator<Item = (&'a ExperimentName, T)> + 'a {
    engine
        .experiment_names()
        .iter()
        .zip(engine.experiment_aggregates())
        .map(move |(name, aggregates)| (name, figure(aggregates)))
}

/// How the report names a snapshot's group.
fn snapshot_named(group: &super::GroupSnapshot) -> Named<'_> {
    (&group.model, &group.surface, &group.segments)
}

fn group_report(group: &NamedTotals<'_>, ks: &[usize]) -> GroupReport {
    let totals = group.totals;
    let mut metrics = BTreeMap::new();
    for (k_index, k) in ks.iter().enumerate() {
        for metric in Metric::ALL {
            let slot = k_index * Metric::COUNT + metric as usize;
            metrics.insert(format!("{}@{k}", metric.name()), totals.means(slot).into());
        }
    }
    let r_precision_slot = ks.len() * Metric::COUNT;
    metrics.insert(
        R_PRECISION.to_owned(),
        totals.means(r_precision_slot).into(),
    );
    GroupReport {
        model: group.model.to_owned(),
        surface: group.surface.to_owned(),
        segments: group.segments.iter().cloned().collect(),
        lists: totals.lists,
        engaged_lists: totals.engaged,
        metrics,
        positions: Vec::new(),
        coverage: None,
    }
}
