//! Interleaving experiments and sample ratio checks as the report and
//! `/metrics` show them (docs/SPEC.md §12): the preference of each
//! experiment with its intervals, computed from the summed per-list scores
//! exactly as a mean's are (docs/SPEC.md §9), and the anytime-valid p-value
//! of lists per model against `expected_split`.

use super::comparison::NamedTotals;
use super::printable::printable;
use super::series::{Kind, LabelSet, SeriesWriter, SINCE_START};
use super::Snapshot;
use crate::join::ExperimentName;
use crate::metrics::interleaving::slot;
use crate::metrics::uncertainty::{
    confidence_sequence_multiplier, standard_error, CS_ALPHA, CS_TIGHTEST_AT, Z95,
};
use crate::metrics::GroupTotals;
use crate::split_check::{split_p_value, SPLIT_CHECK_LEVEL};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// One experiment over the lists in view.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ExperimentReport {
    /// The surface.
    pub surface: String,
    /// The segment values of its lists; left out when there are none.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub segments: BTreeMap<String, String>,
    /// The ranker first by name.
    pub a: String,
    /// The other ranker.
    pub b: String,
    /// Interleaved lists finalized with both.
    pub lists: u64,
    /// Lists where `a`'s items earned more gain.
    pub wins_a: u64,
    /// Lists where `b`'s items earned more gain.
    pub wins_b: u64,
    /// The other lists.
    pub ties: u64,
    /// `(wins_a − wins_b) / lists`: above 0 when users prefer `a`.
    pub preference: f64,
    /// Its standard error.
    pub se: f64,
    /// The fixed-sample 95% interval.
    pub ci95: [f64; 2],
    /// The anytime-valid 95% confidence sequence.
    pub cs95: [f64; 2],
    /// Lists whose rank-1 item `a` contributed.
    pub first_a: u64,
    /// Lists whose rank-1 item `b` contributed.
    pub first_b: u64,
    /// Anytime-valid p-value of the first picks against an even coin;
    /// since start only, left out of window reports (a window's counts
    /// are not a sequence the test holds over).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_pick_p_value: Option<f64>,
}

impl ExperimentReport {
    /// The figures of `name` over `totals`; `since_start` tells whether the
    /// first picks' check applies.
    pub fn new(name: &ExperimentName, totals: &GroupTotals, since_start: bool) -> Self {
        let count = |slot: usize| totals.sum(slot) as u64;
        let (wins_a, wins_b) = (count(slot::WIN_A), count(slot::WIN_B));
        let (first_a, first_b) = (count(slot::FIRST_A), count(slot::FIRST_B));
        let lists = totals.lists;
        // Per-list scores s = +1, −1 or 0: Σs = wins_a − wins_b, Σs² = wins_a + wins_b.
        let sum = wins_a as f64 - wins_b as f64;
        let squares = (wins_a + wins_b) as f64;
        let preference = if lists == 0 { 0.0 } else { sum / lists as f64 };
        let se = standard_error(sum, squares, lists);
        let ci = Z95 * se;
        let cs = confidence_sequence_multiplier(lists as f64, CS_ALPHA, CS_TIGHTEST_AT) * se;
        Self {
            surface: name.surface.clone(),
            segments: name.segments.iter().cloned().collect(),
            a: name.a.clone(),
            b: name.b.clone(),
            lists,
            wins_a,
            wins_b,
            ties: lists.saturating_sub(wins_a + wins_b),
            preference,
            se,
            ci95: [preference - ci, preference + ci],
            cs95: [preference - cs, preference + cs],
            first_a,
            first_b,
            first_pick_p_value: since_start
                .then(|| split_p_value(&[first_a, first_b], &[0.5, 0.5])),
        }
    }
}

/// Every experiment with lists, sorted by surface, segment values, a, b.
pub fn experiment_reports<'a>(
    experiments: impl Iterator<Item = (&'a ExperimentName, GroupTotals)>,
    since_start: bool,
) -> Vec<ExperimentReport> {
    let mut reports: Vec<ExperimentReport> = experiments
        .filter(|(_, totals)| totals.lists > 0)
        .map(|(name, totals)| ExperimentReport::new(name, &totals, since_start))
        .collect();
    reports.sort_by(|x, y| {
        (&x.surface, &x.segments, &x.a, &x.b).cmp(&(&y.surface, &y.segments, &y.a, &y.b))
    });
    reports
}

/// The sample ratio check of one surface and segment values.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SplitReport {
    /// The surface.
    pub surface: String,
    /// Its segment values; left out when there are none.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub segments: BTreeMap<String, String>,
    /// Finalized lists of each model of the expected split.
    pub lists: BTreeMap<String, u64>,
    /// The expected share of each.
    pub expected: BTreeMap<String, f64>,
    /// Anytime-valid p-value of the counts under the expected shares.
    pub p_value: f64,
    /// `p_value` is at or below the check's level: the split is broken,
    /// and so is every comparison on this surface.
    pub mismatch: bool,
}

/// A surface and its segment values.
type SurfaceKey<'a> = (&'a str, &'a [(String, String)]);

/// The check of every surface (and segment values) where a model of
/// `expected` has finalized lists, sorted by surface and segment values.
pub fn split_reports(groups: &[NamedTotals<'_>], expected: &[(String, f64)]) -> Vec<SplitReport> {
    if expected.is_empty() {
        return Vec::new();
    }
    let mut counts: BTreeMap<SurfaceKey<'_>, Vec<u64>> = BTreeMap::new();
    for group in groups {
        let Some(index) = expected.iter().position(|(model, _)| model == group.model) else {
            continue;
        };
        let row = counts
            .entry((group.surface, group.segments))
            .or_insert_with(|| vec![0; expected.len()]);
        row[index] += group.totals.lists;
    }
    let shares: Vec<f64> = expected.iter().map(|(_, share)| *share).collect();
    counts
        .into_iter()
        .filter(|(_, row)| row.iter().any(|&n| n > 0))
        .map(|((surface, segments), row)| {
            let p_value = split_p_value(&row, &shares);
            SplitReport {
                surface: surface.to_owned(),
                segments: segments.iter().cloned().collect(),
                lists: expected.iter().map(|(m, _)| m.clone()).zip(row).collect(),
                expected: expected.iter().cloned().collect(),
                p_value,
                mismatch: p_value <= SPLIT_CHECK_LEVEL,
            }
        })
        .collect()
}

/// Prefix of the interleaving series, `rankwatch_interleaving_<figure>`.
pub const INTERLEAVING_PREFIX: &str = "rankwatch_interleaving_";
/// The sample ratio check's p-value per surface.
pub const SPLIT_CHECK_P_VALUE: &str = "rankwatch_split_check_p_value";

/// A gauge of an experiment: its name after the prefix, its help, and how
/// to read it off the experiment's report.
type ExperimentFigure = (&'static str, &'static str, fn(&ExperimentReport) -> f64);

/// A counter of an experiment, the same way.
type CounterFigure<T> = (&'static str, &'static str, fn(&ExperimentReport) -> T);

/// `rankwatch_interleaving_*` and `rankwatch_split_check_p_value`: counters
/// since start, so that PromQL sums them across instances, and gauges of the
/// preference and its bounds per window and since start.
pub(super) fn render(writer: &mut SeriesWriter<'_>, snapshot: &Snapshot, window_names: &[String]) {
    let help = "Interleaved lists that found no room for their experiments under max_groups, since start; they count in their groups only.";
    writer.single(
        &format!("{INTERLEAVING_PREFIX}unregistered_lists_total"),
        Kind::Counter,
        help,
        snapshot.unregistered_interleavings,
    );
    let since_start: Vec<(LabelSet, ExperimentReport)> = snapshot
        .experiments
        .iter()
        .filter(|e| e.totals.lists > 0)
        .map(|e| {
            (
                LabelSet::of_experiment(&e.name),
                ExperimentReport::new(&e.name, &e.totals, true),
            )
        })
        .collect();
    let counters: [CounterFigure<u64>; 2] = [
        (
            "lists_total",
            "Interleaved lists finalized with both rankers, since start.",
            |e| e.lists,
        ),
        (
            "ties_total",
            "Interleaved lists where ranker_a and ranker_b earned equal gain, since start.",
            |e| e.ties,
        ),
    ];
    for (figure, help, value) in counters {
        let mut family = writer.family(
            format!("{INTERLEAVING_PREFIX}{figure}"),
            Kind::Counter,
            help,
        );
        for (labels, experiment) in &since_start {
            family.sample(labels, &[], value(experiment));
        }
    }
    let by_ranker: [CounterFigure<[u64; 2]>; 2] = [
        ("wins_total", "Interleaved lists where the items of one ranker of the pair (ranker=\"a\": ranker_a, \"b\": ranker_b) earned more gain than the other's, since start.", |e| [e.wins_a, e.wins_b]),
        ("first_picks_total", "Interleaved lists whose rank-1 item one ranker of the pair (ranker=\"a\": ranker_a, \"b\": ranker_b) contributed, since start.", |e| [e.first_a, e.first_b]),
    ];
    for (figure, help, value) in by_ranker {
        let mut family = writer.family(
            format!("{INTERLEAVING_PREFIX}{figure}"),
            Kind::Counter,
            help,
        );
        for (labels, experiment) in &since_start {
            let [a, b] = value(experiment);
            family.sample(labels, &[("ranker", "a")], a);
            family.sample(labels, &[("ranker", "b")], b);
        }
    }
    let help = "Anytime-valid p-value of the first picks against an even coin, since start: at or below 0.01, the interleaver's coin is not fair.";
    let mut family = writer.family(
        format!("{INTERLEAVING_PREFIX}first_pick_p_value"),
        Kind::Gauge,
        help,
    );
    for (labels, experiment) in &since_start {
        if let Some(p_value) = experiment.first_pick_p_value {
            family.sample(labels, &[], p_value);
        }
    }
    render_preference(writer, snapshot, since_start, window_names);
    render_splits(writer, snapshot);
}

/// The preference gauges, since start and per window.
fn render_preference(
    writer: &mut SeriesWriter<'_>,
    snapshot: &Snapshot,
    since_start: Vec<(LabelSet, ExperimentReport)>,
    window_names: &[String],
) {
    let mut views: Vec<(&str, Vec<(LabelSet, ExperimentReport)>)> =
        vec![(SINCE_START, since_start)];
    for (index, window) in window_names.iter().enumerate() {
        let reports = snapshot
            .experiments
            .iter()
            .filter_map(|e| {
                let totals = e.windows.get(index)?;
                Some((
                    LabelSet::of_experiment(&e.name),
                    ExperimentReport::new(&e.name, totals, false),
                ))
            })
            .collect();
        views.push((window, reports));
    }
    let figures: [ExperimentFigure; 7] = [
        ("window_lists", "Interleaved lists behind the preference gauges.", |e| e.lists as f64),
        ("preference", "(wins_a - wins_b) / lists: above 0 when users prefer ranker_a's items.", |e| e.preference),
        ("preference_standard_error", "Standard error of the preference.", |e| e.se),
        ("preference_ci95_lower", "Lower bound of the fixed-sample 95% interval of the preference (valid at one look).", |e| e.ci95[0]),
        ("preference_ci95_upper", "Upper bound of the fixed-sample 95% interval of the preference (valid at one look).", |e| e.ci95[1]),
        ("preference_cs95_lower", "Lower bound of the anytime-valid 95% confidence sequence of the preference (valid however often it is looked at).", |e| e.cs95[0]),
        ("preference_cs95_upper", "Upper bound of the anytime-valid 95% confidence sequence of the preference (valid however often it is looked at).", |e| e.cs95[1]),
    ];
    for (figure, help, value) in figures {
        let mut family = writer.family(format!("{INTERLEAVING_PREFIX}{figure}"), Kind::Gauge, help);
        for (window, reports) in &views {
            for (labels, experiment) in reports {
                family.sample(labels, &[("window", window)], value(experiment));
            }
        }
    }
    if let Some(control) = &snapshot.control_model {
        render_against_control(writer, &views, control);
    }
}

/// `rankwatch_interleaving_candidate_preference*`: for each experiment one
/// of whose rankers is the control model, the other's preference over it
/// (the sign and the bounds turned when the candidate is `b`), which the
/// alert rules read with `candidate` and `control` labels.
fn render_against_control(
    writer: &mut SeriesWriter<'_>,
    views: &[(&str, Vec<(LabelSet, ExperimentReport)>)],
    control: &str,
) {
    let against: Vec<(&str, LabelSet, [f64; 3])> = views
        .iter()
        .flat_map(|(window, reports)| reports.iter().map(move |(_, e)| (*window, e)))
        .filter_map(|(window, e)| {
            let (candidate, figures) = if e.b == control {
                (&e.a, [e.preference, e.cs95[0], e.cs95[1]])
            } else if e.a == control {
                (&e.b, [-e.preference, -e.cs95[1], -e.cs95[0]])
            } else {
                return None;
            };
            let segments: Vec<(String, String)> = e.segments.clone().into_iter().collect();
            let mut labels = vec![("surface", e.surface.as_str())];
            labels.extend(segments.iter().map(|(l, v)| (l.as_str(), v.as_str())));
            labels.extend([
                ("candidate", candidate.as_str()),
                ("control", control),
                ("window", window),
            ]);
            Some((window, LabelSet::of(&labels), figures))
        })
        .collect();
    let gauges = [
        ("candidate_preference", "Preference of the candidate ranker over the control model in interleaved lists: below 0 when users prefer the control."),
        ("candidate_preference_cs95_lower", "Lower bound of the anytime-valid 95% confidence sequence of the candidate's preference over the control."),
        ("candidate_preference_cs95_upper", "Upper bound of the anytime-valid 95% confidence sequence of the candidate's preference over the control: below minus the margin, the candidate loses."),
    ];
    for (index, (figure, help)) in gauges.into_iter().enumerate() {
        let mut family = writer.family(format!("{INTERLEAVING_PREFIX}{figure}"), Kind::Gauge, help);
        for (_, labels, figures) in &against {
            family.sample(labels, &[], figures[index]);
        }
    }
}

/// `rankwatch_split_check_p_value`: per surface (and segment values), the
/// anytime-valid p-value of lists per model against `expected_split`.
fn render_splits(writer: &mut SeriesWriter<'_>, snapshot: &Snapshot) {
    if snapshot.expected_split.is_empty() {
        return;
    }
    let groups: Vec<NamedTotals<'_>> = snapshot
        .groups
        .iter()
        .map(|g| NamedTotals {
            model: &g.model,
            surface: &g.surface,
            segments: &g.segments,
            totals: &g.totals,
        })
        .collect();
    let help = "Anytime-valid p-value of finalized lists per model against expected_split, since start: at or below 0.01, the traffic split is broken and the surface's comparisons are not to be trusted.";
    let mut family = writer.family(SPLIT_CHECK_P_VALUE, Kind::Gauge, help);
    for check in split_reports(&groups, &snapshot.expected_split) {
        let segments: Vec<(String, String)> = check.segments.into_iter().collect();
        family.sample(
            &LabelSet::of_surface(&check.surface, &segments),
            &[],
            check.p_value,
        );
    }
}

/// Segment values as `label=value,…`, as the tables print them.
pub(super) fn segment_text(segments: &BTreeMap<String, String>) -> String {
    let pairs: Vec<String> = segments
        .iter()
        .map(|(l, v)| format!("{l}={}", printable(v)))
        .collect();
    pairs.join(",")
}

/// The experiments and the split checks as tables, each when there is one.
pub(super) fn write_table(
    out: &mut String,
    experiments: &[ExperimentReport],
    splits: &[SplitReport],
) {
    write_experiments(out, experiments);
    write_splits(out, splits);
}

fn write_experiments(out: &mut String, experiments: &[ExperimentReport]) {
    let segments = segment_text;
    if !experiments.is_empty() {
        let _ = writeln!(
            out,
            "\n{:<14} {:<15} {:<14} {:<14} {:>8} {:>8} {:>8} {:>8} {:>9} {:>21} {:>21} {:>11}",
            "surface",
            "segments",
            "a",
            "b",
            "lists",
            "wins a",
            "wins b",
            "ties",
            "pref",
            "95% interval",
            "95% anytime-valid",
            "coin p"
        );
        for e in experiments {
            let interval = |[lo, hi]: [f64; 2]| format!("[{lo:.4}, {hi:.4}]");
            let coin = e
                .first_pick_p_value
                .map_or_else(|| "-".to_owned(), |p| format!("{p:.4}"));
            let _ = writeln!(
                out,
                "{:<14} {:<15} {:<14} {:<14} {:>8} {:>8} {:>8} {:>8} {:>9.4} {:>21} {:>21} {:>11}",
                printable(&e.surface),
                segments(&e.segments),
                printable(&e.a),
                printable(&e.b),
                e.lists,
                e.wins_a,
                e.wins_b,
                e.ties,
                e.preference,
                interval(e.ci95),
                interval(e.cs95),
                coin
            );
        }
        out.push_str("\ninterleaving: pref = (wins a − wins b) / lists, above 0 when users prefer a; coin p: first picks against an even coin (since start only; - in a window).\n");
    }
}

fn write_splits(out: &mut String, splits: &[SplitReport]) {
    let segments = segment_text;
    if !splits.is_empty() {
        let _ = writeln!(
            out,
            "\n{:<14} {:<15} {:<40} {:>10}  verdict",
            "surface", "segments", "lists (expected share)", "p-value"
        );
        for check in splits {
            let lists: Vec<String> = check
                .lists
                .iter()
                .map(|(model, n)| {
                    format!(
                        "{} {n} ({:.2})",
                        printable(model),
                        check.expected.get(model).copied().unwrap_or(0.0)
                    )
                })
                .collect();
            let verdict = if check.mismatch {
                "MISMATCH: comparisons not to be trusted"
            } else {
                "ok"
            };
            let _ = writeln!(
                out,
                "{:<14} {:<15} {:<40} {:>10.4}  {verdict}",
                printable(&check.surface),
                segments(&check.segments),
                lists.join(", "),
                check.p_value
            );
        }
        out.push_str("\nsample ratio check: anytime-valid p-value of lists per model against expected_split; a mismatch at or below 0.01.\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn totals(wins_a: u64, wins_b: u64, ties: u64) -> GroupTotals {
        let mut totals = GroupTotals::new(slot::WIDTH);
        let lists = [
            ([1.0, 0.0, 1.0, 0.0], wins_a),
            ([0.0, 1.0, 0.0, 1.0], wins_b),
            ([0.0; 4], ties),
        ];
        for (outcome, count) in lists {
            for _ in 0..count {
                totals.add(&outcome, true);
            }
        }
        totals
    }

    proptest! {
        #[test]
        fn every_figure_is_finite_and_the_sequence_holds_the_interval(
            wins_a in 0u64..200, wins_b in 0u64..200, ties in 0u64..200,
        ) {
            let name = ExperimentName::default();
            let e = ExperimentReport::new(&name, &totals(wins_a, wins_b, ties), true);
            let p_value = e.first_pick_p_value.unwrap_or(f64::NAN);
            let figures = [e.preference, e.se, e.ci95[0], e.ci95[1], e.cs95[0], e.cs95[1], p_value];
            prop_assert!(figures.iter().all(|f| f.is_finite()));
            prop_assert!((-1.0..=1.0).contains(&e.preference));
            prop_assert!(e.cs95[0] <= e.ci95[0] && e.ci95[1] <= e.cs95[1]);
            prop_assert_eq!(e.lists, wins_a + wins_b + ties);
            prop_assert_eq!((e.wins_a, e.wins_b, e.ties), (wins_a, wins_b, ties));
            prop_assert!((0.0..=1.0).contains(&p_value));
        }
    }

    #[test]
    fn a_split_is_checked_per_surface_with_the_models_it_names() {
        let (a, b, other) = (totals(60, 0, 0), totals(40, 0, 0), totals(500, 0, 0));
        let group = |model, surface, totals| NamedTotals {
            model,
            surface,
            segments: &[],
            totals,
        };
        let groups = [
            group("a", "home", &a),
            group("b", "home", &b),
            group("c", "home", &other),
            group("c", "search", &other),
        ];
        let expected = [("a".to_owned(), 0.5), ("b".to_owned(), 0.5)];
        let checks = split_reports(&groups, &expected);
        assert_eq!(checks.len(), 1, "search shows no model of the split");
        assert_eq!(
            checks[0].lists,
            BTreeMap::from([("a".into(), 60), ("b".into(), 40)])
        );
        assert!(split_reports(&groups, &[]).is_empty());
    }
}
