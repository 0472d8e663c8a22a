//! The report in the wire API's messages (`rankwatch.v1.Report`) and back:
//! the server answers `GetMetrics` with [`to_proto`], and `rankwatch query`
//! reads the answer back into the report `replay` prints. Both directions
//! live here, so that a field added to one cannot be forgotten in the other.

use super::{
    Comparison, ExperimentReport, GroupReport, MeanPair, Pending, PositionPoint, Report,
    ReportConfig, ReportCounters, SplitReport,
};
use crate::metrics::{CoverageFigures, Metric};
use crate::proto;
use std::collections::BTreeMap;

/// A `rankwatch.v1.Report` that lacks a part the report needs.
#[derive(Debug, thiserror::Error)]
#[error("the server's report has no valid {0}")]
pub struct IncompleteReport(pub &'static str);

/// `report` as `GetMetrics` answers it; `window` names its rolling window
/// (empty: since start).
pub fn to_proto(report: Report, window: String) -> proto::Report {
    let config = report.config;
    let counters = report.counters;
    proto::Report {
        config: Some(proto::ReportConfig {
            k: config.k.iter().map(|&k| k as u32).collect(),
            attribution_window_s: config.attribution_window_s,
            allowed_lateness_s: config.allowed_lateness_s,
            gain: config.gain,
            control_model: config.control_model.clone().unwrap_or_default(),
            expected_split: config.expected_split.iter().cloned().collect(),
        }),
        counters: Some(proto::Counters {
            impressions: counters.impressions,
            interactions: counters.interactions,
            credited: counters.credited,
            unattributed: counters.unattributed.into_iter().collect(),
            late_impressions: counters.late["impressions"],
            duplicate_impressions: counters.duplicates["impressions"],
            duplicate_interactions: counters.duplicates["interactions"],
            rejected: counters.rejected.into_iter().collect(),
            shed: counters.shed.into_iter().collect(),
            unregistered_interleaved_lists: counters.unregistered_interleaved_lists,
        }),
        groups: report.groups.into_iter().map(group_to_proto).collect(),
        comparisons: report
            .comparisons
            .unwrap_or_default()
            .into_iter()
            .map(comparison_to_proto)
            .collect(),
        window,
        interleaving: report
            .interleaving
            .into_iter()
            .map(experiment_to_proto)
            .collect(),
        splits: report.splits.into_iter().map(split_to_proto).collect(),
        open_impressions: report.pending.map_or(0, |p| p.open_impressions),
        seconds_to_first_finalization: report
            .pending
            .map_or(0.0, |p| p.seconds_to_first_finalization),
    }
}

fn group_to_proto(group: GroupReport) -> proto::GroupReport {
    proto::GroupReport {
        model: group.model,
        surface: group.surface,
        segments: group.segments.into_iter().collect(),
        lists: group.lists,
        engaged_lists: group.engaged_lists,
        metrics: group
            .metrics
            .into_iter()
            .map(|(key, mean)| {
                (
                    key,
                    proto::MetricMean {
                        all: mean.all,
                        engaged: mean.engaged,
                        se_all: mean.se_all,
                        se_engaged: mean.se_engaged,
                    },
                )
            })
            .collect(),
        positions: group
            .positions
            .into_iter()
            .map(|point| proto::PositionPoint {
                rank: point.rank as u32,
                lists: point.lists,
                interactions: point.interactions.into_iter().collect(),
            })
            .collect(),
        coverage: group.coverage.map(|c| proto::Coverage {
            items_shown: c.items_shown,
            items_engaged: c.items_engaged,
            exposure_gini: c.exposure_gini,
            exposure_entropy: c.exposure_entropy,
            exact: c.exact,
        }),
    }
}

fn comparison_to_proto(c: Comparison) -> proto::Comparison {
    proto::Comparison {
        surface: c.surface,
        segments: c.segments.into_iter().collect(),
        model: c.model,
        control: c.control,
        metric: c.metric,
        diff: c.diff,
        se: c.se,
        ci95_lower: c.ci95[0],
        ci95_upper: c.ci95[1],
        cs95_lower: c.cs95[0],
        cs95_upper: c.cs95[1],
    }
}

fn experiment_to_proto(e: ExperimentReport) -> proto::InterleavingExperiment {
    proto::InterleavingExperiment {
        surface: e.surface,
        segments: e.segments.into_iter().collect(),
        a: e.a,
        b: e.b,
        lists: e.lists,
        wins_a: e.wins_a,
        wins_b: e.wins_b,
        ties: e.ties,
        preference: e.preference,
        se: e.se,
        ci95_lower: e.ci95[0],
        ci95_upper: e.ci95[1],
        cs95_lower: e.cs95[0],
        cs95_upper: e.cs95[1],
        first_a: e.first_a,
        first_b: e.first_b,
        first_pick_p_value: e.first_pick_p_value.unwrap_or(WINDOW_FIRST_PICK_P_VALUE),
    }
}

/// What a window's report carries for the first picks' p-value, which is
/// since start only: 1, as clients of the field before it could be left
/// out have always read it there.
const WINDOW_FIRST_PICK_P_VALUE: f64 = 1.0;

/// An experiment of a report, of a window's when `in_window`.
fn experiment(e: proto::InterleavingExperiment, in_window: bool) -> ExperimentReport {
    ExperimentReport {
        surface: e.surface,
        segments: e.segments.into_iter().collect(),
        a: e.a,
        b: e.b,
        lists: e.lists,
        wins_a: e.wins_a,
        wins_b: e.wins_b,
        ties: e.ties,
        preference: e.preference,
        se: e.se,
        ci95: [e.ci95_lower, e.ci95_upper],
        cs95: [e.cs95_lower, e.cs95_upper],
        first_a: e.first_a,
        first_b: e.first_b,
        first_pick_p_value: (!in_window).then_some(e.first_pick_p_value),
    }
}

fn split_to_proto(s: SplitReport) -> proto::SplitCheck {
    proto::SplitCheck {
        surface: s.surface,
        segments: s.segments.into_iter().collect(),
        lists: s.lists.into_iter().collect(),
        expected: s.expected.into_iter().collect(),
        p_value: s.p_value,
        mismatch: s.mismatch,
    }
}

fn split(s: proto::SplitCheck) -> SplitReport {
    SplitReport {
        surface: s.surface,
        segments: s.segments.into_iter().collect(),
        lists: s.lists.into_iter().collect(),
        expected: s.expected.into_iter().collect(),
        p_value: s.p_value,
        mismatch: s.mismatch,
    }
}

/// The report of `GetMetrics`, in the shape `replay` gives it.
impl TryFrom<proto::Report> for Report {
    type Error = IncompleteReport;

    fn try_from(report: proto::Report) -> Result<Self, IncompleteReport> {
        let config = report.config.ok_or(IncompleteReport("config"))?;
        let counters = report.counters.ok_or(IncompleteReport("counters"))?;
        let control_set = !config.control_model.is_empty();
        Ok(Report {
            config: ReportConfig {
                k: config.k.into_iter().map(|k| k as usize).collect(),
                attribution_window_s: config.attribution_window_s,
                allowed_lateness_s: config.allowed_lateness_s,
                gain: config.gain,
                control_model: Some(config.control_model).filter(|name| !name.is_empty()),
                expected_split: {
                    let mut split: Vec<(String, f64)> = config.expected_split.into_iter().collect();
                    split.sort_by(|a, b| a.0.cmp(&b.0));
                    split
                },
            },
            counters: ReportCounters {
                impressions: counters.impressions,
                interactions: counters.interactions,
                credited: counters.credited,
                unattributed: counters.unattributed.into_iter().collect(),
                late: BTreeMap::from([("impressions".to_owned(), counters.late_impressions)]),
                duplicates: BTreeMap::from([
                    ("impressions".to_owned(), counters.duplicate_impressions),
                    ("interactions".to_owned(), counters.duplicate_interactions),
                ]),
                rejected: counters.rejected.into_iter().collect(),
                shed: counters.shed.into_iter().collect(),
                unregistered_interleaved_lists: counters.unregistered_interleaved_lists,
            },
            groups: report.groups.into_iter().map(group_report).collect(),
            comparisons: control_set
                .then(|| report.comparisons.into_iter().map(comparison).collect())
                .transpose()?,
            interleaving: {
                let in_window = !report.window.is_empty();
                let experiments = report.interleaving.into_iter();
                experiments.map(|e| experiment(e, in_window)).collect()
            },
            splits: report.splits.into_iter().map(split).collect(),
            pending: (report.open_impressions > 0).then_some(Pending {
                open_impressions: report.open_impressions,
                seconds_to_first_finalization: report.seconds_to_first_finalization,
            }),
        })
    }
}

fn group_report(group: proto::GroupReport) -> GroupReport {
    GroupReport {
        model: group.model,
        surface: group.surface,
        segments: group.segments.into_iter().collect(),
        lists: group.lists,
        engaged_lists: group.engaged_lists,
        metrics: group
            .metrics
            .into_iter()
            .map(|(key, mean)| {
                let pair = MeanPair {
                    all: mean.all,
                    engaged: mean.engaged,
                    se_all: mean.se_all,
                    se_engaged: mean.se_engaged,
                };
                (key, pair)
            })
            .collect(),
        positions: group
            .positions
            .into_iter()
            .map(|point| PositionPoint {
                rank: point.rank as usize,
                lists: point.lists,
                interactions: point.interactions.into_iter().collect(),
            })
            .collect(),
        coverage: group.coverage.map(|c| CoverageFigures {
            items_shown: c.items_shown,
            items_engaged: c.items_engaged,
            exposure_gini: c.exposure_gini,
            exposure_entropy: c.exposure_entropy,
            exact: c.exact,
        }),
    }
}

/// A comparison of `GetMetrics`, its metric key (`ndcg@10`) read back into metric and cutoff.
fn comparison(c: proto::Comparison) -> Result<Comparison, IncompleteReport> {
    let (name, k) = c
        .metric
        .split_once('@')
        .ok_or(IncompleteReport("comparison metric"))?;
    let measure = Metric::ALL
        .into_iter()
        .find(|metric| metric.name() == name)
        .ok_or(IncompleteReport("comparison metric"))?;
    let k = k
        .parse()
        .map_err(|_| IncompleteReport("comparison cutoff"))?;
    Ok(Comparison {
        surface: c.surface,
        segments: c.segments.into_iter().collect(),
        model: c.model,
        control: c.control,
        metric: c.metric,
        diff: c.diff,
        se: c.se,
        ci95: [c.ci95_lower, c.ci95_upper],
        cs95: [c.cs95_lower, c.cs95_upper],
        measure,
        k,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Event, Impression, Interaction, Interleaving};
    use crate::join::{Engine, JoinSettings, SegmentSettings};
    use crate::metrics::{CoverageMode, ListEvaluator, MetricSettings};

    /// A report with two models, a control, segments, positions and coverage.
    fn report() -> Report {
        let settings = JoinSettings {
            attribution_window: 10,
            allowed_lateness: 0,
            shards: 1,
            max_groups: 10,
            segments: SegmentSettings::default(),
            max_open_impressions: 100,
            max_open_items: usize::MAX,
            max_open_credits: usize::MAX,
            max_waiting_interactions: 100,
            max_open_impressions_per_user: 100,
            max_waiting_interactions_per_user: 100,
            max_interactions_per_impression: 100,
            windows: vec![],
            position_curve_depth: 3,
            interaction_types: vec!["click".into()],
            coverage: CoverageMode::Exact,
            number_items: true,
        };
        let mut engine = Engine::new(
            settings,
            ListEvaluator::new(MetricSettings::default(), &[1, 3]),
        );
        for (user, model) in [(1, "a"), (2, "b"), (3, "a"), (4, "mixed")] {
            let interleaving = (model == "mixed").then(|| Interleaving {
                rankers: vec!["b".into(), "a".into()],
                teams: vec![0, 1, 0],
            });
            engine.apply(Event::Impression(Box::new(Impression {
                request: user,
                user,
                items: vec![10, 11, 12],
                time: 0,
                model: model.into(),
                surface: "home".into(),
                segments: vec![],
                interleaving,
            })));
            engine.apply(Event::Interaction(Interaction {
                event: None,
                user,
                item: 10 + user % 3,
                request: Some(user),
                time: 1,
                grade: 1.0,
                kind: 0,
            }));
        }
        engine.finish();
        let config = ReportConfig {
            k: vec![1, 3],
            attribution_window_s: 10.0,
            allowed_lateness_s: 0.0,
            gain: "linear".into(),
            control_model: Some("a".into()),
            expected_split: vec![("a".into(), 0.5), ("b".into(), 0.5)],
        };
        Report::since_start(&engine, &config)
    }

    #[test]
    fn a_report_survives_the_round_trip_through_the_wire() {
        let report = report();
        assert!(report.comparisons.as_ref().is_some_and(|c| !c.is_empty()));
        assert_eq!(report.interleaving.len(), 1);
        assert_eq!(report.splits.len(), 1);
        let back = Report::try_from(to_proto(report.clone(), String::new())).unwrap();
        assert_eq!(back, report);
    }

    #[test]
    fn a_report_without_its_config_is_incomplete() {
        let mut wire = to_proto(report(), String::new());
        wire.config = None;
        assert_eq!(Report::try_from(wire).unwrap_err().0, "config");
    }
}
