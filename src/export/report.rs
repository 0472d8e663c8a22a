//! The evaluation report (SPEC §6): settings, counters, and per-group means
//! of every metric at every K in both scopes.

use crate::join::{Counters, Engine, Unattributed};
use crate::metrics::{GroupTotals, Metric, MetricMeans, PositionCurve, R_PRECISION};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    pub config: ReportConfig,
    pub counters: ReportCounters,
    pub groups: Vec<GroupReport>,
}

/// The settings that shaped the figures, built by whoever configured the engine.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ReportConfig {
    pub k: Vec<usize>,
    pub attribution_window_s: f64,
    pub allowed_lateness_s: f64,
    pub gain: &'static str,
}

/// Event outcomes, shaped as in SPEC §6.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ReportCounters {
    pub impressions: u64,
    pub interactions: u64,
    pub credited: u64,
    pub unattributed: BTreeMap<&'static str, u64>,
    pub late: BTreeMap<&'static str, u64>,
    pub duplicates: BTreeMap<&'static str, u64>,
    /// Only reasons that occurred.
    pub rejected: BTreeMap<&'static str, u64>,
    /// Events shed under limits, by kind; left out when none were.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub shed: BTreeMap<&'static str, u64>,
}

/// One `(model, surface)` group.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GroupReport {
    pub model: String,
    pub surface: String,
    pub lists: u64,
    pub engaged_lists: u64,
    /// Keyed `metric@K`, and `r_precision`, which has no cutoff.
    pub metrics: BTreeMap<String, MeanPair>,
    /// The position curve since start, rank 1 first; left out of window reports.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub positions: Vec<PositionPoint>,
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

/// Both scopes' means, serialized as `{"all": …, "engaged": …}`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct MeanPair {
    pub all: f64,
    pub engaged: f64,
}

impl From<MetricMeans> for MeanPair {
    fn from(means: MetricMeans) -> Self {
        Self {
            all: means.all,
            engaged: means.engaged,
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
                .map(|r| (r.as_str(), counters.unattributed_count(*r)))
                .collect(),
            late: BTreeMap::from([("impressions", counters.late_impressions)]),
            duplicates: BTreeMap::from([
                ("impressions", counters.duplicate_impressions),
                ("interactions", counters.duplicate_interactions),
            ]),
            rejected: counters
                .rejected
                .iter()
                .map(|(reason, n)| (reason.as_str(), *n))
                .collect(),
            shed: [
                ("impressions", counters.shed_impressions),
                ("interactions", counters.shed_interactions),
            ]
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .collect(),
        }
    }
}

impl Report {
    /// The report of every list finalized since start.
    pub fn since_start(engine: &Engine, config: &ReportConfig) -> Self {
        let mut report = Self::build(engine, config, |aggregates| aggregates.totals.clone());
        let types = engine.interaction_types();
        let curves: BTreeMap<(&str, &str), &PositionCurve> = engine
            .aggregates()
            .iter()
            .zip(engine.group_names())
            .map(|(aggregates, (model, surface))| {
                ((model.as_str(), surface.as_str()), &aggregates.positions)
            })
            .collect();
        for group in &mut report.groups {
            if let Some(curve) = curves.get(&(group.model.as_str(), group.surface.as_str())) {
                group.positions = position_points(curve, types);
            }
        }
        report
    }

    /// The report of rolling window `index` (figures of the lists in the window; counters since start).
    pub fn window(engine: &Engine, config: &ReportConfig, index: usize) -> Self {
        let frontier = engine.frontier().unwrap_or(0);
        Self::build(engine, config, |aggregates| {
            aggregates.windows.totals(index, frontier)
        })
    }

    fn build(
        engine: &Engine,
        config: &ReportConfig,
        totals_of: impl Fn(&crate::join::GroupAggregates) -> GroupTotals,
    ) -> Self {
        let ks = engine.evaluator().ks();
        let mut groups: Vec<GroupReport> = engine
            .aggregates()
            .iter()
            .zip(engine.group_names())
            .map(|(aggregates, (model, surface))| {
                group_report(model, surface, &totals_of(aggregates), ks)
            })
            .filter(|group| group.lists > 0)
            .collect();
        groups.sort_by(|a, b| (&a.model, &a.surface).cmp(&(&b.model, &b.surface)));
        Self {
            config: config.clone(),
            counters: ReportCounters::new(engine.counters()),
            groups,
        }
    }

    /// A table for people: counters, then one row per group and K.
    pub fn to_table(&self) -> String {
        let c = &self.counters;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "events: {} impressions, {} interactions ({} credited, unattributed: {}), late impressions: {}, duplicates: {} impressions / {} interactions",
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
        let _ = writeln!(out, "rejected: {rejected}\n");
        let columns = [
            Metric::HitRate,
            Metric::Mrr,
            Metric::Ndcg,
            Metric::Map,
            Metric::Precision,
            Metric::Recall,
        ];
        let _ = write!(
            out,
            "{:<14} {:<14} {:>7} {:>7} {:>4}",
            "model", "surface", "lists", "engaged", "K"
        );
        for metric in columns {
            let _ = write!(out, " {:>9}", metric.name());
        }
        out.push('\n');
        for group in &self.groups {
            for k in &self.config.k {
                let _ = write!(
                    out,
                    "{:<14} {:<14} {:>7} {:>7} {:>4}",
                    group.model, group.surface, group.lists, group.engaged_lists, k
                );
                for metric in columns {
                    let mean = group
                        .metrics
                        .get(&format!("{}@{k}", metric.name()))
                        .map_or(0.0, |m| m.all);
                    let _ = write!(out, " {mean:>9.4}");
                }
                out.push('\n');
            }
        }
        out.push_str("\nmeans over all finalized lists; `--format json` gives every metric in both scopes.\n");
        out
    }
}

fn join_counts(counts: &BTreeMap<&'static str, u64>) -> String {
    counts
        .iter()
        .map(|(name, n)| format!("{name} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn group_report(model: &str, surface: &str, totals: &GroupTotals, ks: &[usize]) -> GroupReport {
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
        model: model.to_owned(),
        surface: surface.to_owned(),
        lists: totals.lists,
        engaged_lists: totals.engaged,
        metrics,
        positions: Vec::new(),
    }
}
