//! Prometheus text for the engine's figures (docs/SPEC.md §5): per-list summaries
//! (`_sum`/`_count`, fleet-correct under `rate()`), rolling-window gauges and
//! the join's counters. Rendered from one engine snapshot per scrape, like a
//! Prometheus collector, so recording costs ingest nothing.

use super::comparison::{compare, Comparison, NamedTotals};
use super::series::{Family, Kind, LabelSet, SeriesWriter, Text};
use super::{GroupSnapshot, Snapshot};
use crate::event::{Nanos, Reason, NANOS_PER_SECOND};
use crate::join::Unattributed;
use crate::metrics::{GroupTotals, Metric, MetricMeans, R_PRECISION};
use std::fmt::{self, Display};
use std::time::Duration;

/// Prefix of the per-list summaries, `rankwatch_list_<metric>` (`_sum`, `_count`).
pub const LIST_SUMMARY_PREFIX: &str = "rankwatch_list_";
/// Suffix of the per-list sums of squares, `rankwatch_list_<metric>_sum_of_squares_total`.
pub const SUM_OF_SQUARES_SUFFIX: &str = "_sum_of_squares_total";
/// Suffix of the rolling-window standard errors, `rankwatch_<metric>_standard_error`.
pub const STANDARD_ERROR_SUFFIX: &str = "_standard_error";
/// Prefix of the comparison gauges, `rankwatch_comparison_<figure>`.
pub const COMPARISON_PREFIX: &str = "rankwatch_comparison_";
pub use super::series::SINCE_START;
/// Prefix of the rolling-window gauges, `rankwatch_<metric>`.
pub const WINDOW_GAUGE_PREFIX: &str = "rankwatch_";
/// Finalized lists behind the rolling-window gauges.
pub const WINDOW_LISTS: &str = "rankwatch_window_lists";
/// Lists finalized since start.
pub const LISTS_FINALIZED: &str = "rankwatch_lists_finalized_total";
/// Finalized lists with an engaged item.
pub const LISTS_ENGAGED: &str = "rankwatch_lists_engaged_total";
/// Events received, valid or not.
pub const EVENTS_RECEIVED: &str = "rankwatch_events_received_total";
/// Valid events applied to the join (by a relay: produced to the topic).
pub const EVENTS_ACCEPTED: &str = "rankwatch_events_accepted_total";
/// Invalid events, by reason.
pub const EVENTS_REJECTED: &str = "rankwatch_events_rejected_total";
/// Impressions opened.
pub const IMPRESSIONS: &str = "rankwatch_impressions_total";
/// Interactions accepted.
pub const INTERACTIONS: &str = "rankwatch_interactions_total";
/// Interactions credited to an impression.
pub const INTERACTIONS_CREDITED: &str = "rankwatch_interactions_credited_total";
/// Interactions credited to no impression, by reason.
pub const INTERACTIONS_UNATTRIBUTED: &str = "rankwatch_interactions_unattributed_total";
/// Impressions that arrived after their window had closed.
pub const IMPRESSIONS_LATE: &str = "rankwatch_impressions_late_total";
/// Retried events ignored, by kind.
pub const DUPLICATES: &str = "rankwatch_duplicates_total";
/// Events dropped under a limit, by the limit.
pub const EVENTS_SHED: &str = "rankwatch_events_shed_total";
/// Impressions folded into the overflow group.
pub const IMPRESSIONS_OVERFLOWED: &str = "rankwatch_impressions_overflowed_total";
/// Impressions whose value of a segment label folded into `__other__`, by label.
pub const SEGMENT_VALUES_FOLDED: &str = "rankwatch_segment_values_folded_total";
/// Impressions open for attribution.
pub const OPEN_IMPRESSIONS: &str = "rankwatch_open_impressions";
/// Items of the open impressions.
pub const OPEN_ITEMS: &str = "rankwatch_open_items";
/// Interactions credited to the open impressions.
pub const OPEN_CREDITS: &str = "rankwatch_open_credits";
/// Interactions waiting for their impression.
pub const WAITING_INTERACTIONS: &str = "rankwatch_waiting_interactions";
/// Items numbered in the item table.
pub const ITEM_NUMBERS: &str = "rankwatch_item_numbers";
/// Groups with finalized lists.
pub const GROUPS: &str = "rankwatch_groups";
/// The event-time watermark.
pub const WATERMARK: &str = "rankwatch_watermark_seconds";
/// Wall clock minus the finalization frontier.
pub const FINALIZATION_LAG: &str = "rankwatch_finalization_lag_seconds";

/// Renders `snapshot` into `out`; `windows` are the configured window
/// spans, `now` the wall clock.
pub fn render(out: &mut Text, snapshot: &Snapshot, windows: &[Duration], now: Nanos) {
    let mut writer = SeriesWriter::new(out);
    let window_names: Vec<String> = windows
        .iter()
        .map(|w| humantime::format_duration(*w).to_string())
        .collect();
    let groups: Vec<(LabelSet, &GroupSnapshot)> = snapshot
        .groups
        .iter()
        .map(|g| (LabelSet::of_group(&g.model, &g.surface, &g.segments), g))
        .collect();
    let ks: Vec<String> = snapshot.ks.iter().map(usize::to_string).collect();
    for metric in Metric::ALL {
        list_summary(&mut writer, metric, &groups, &ks);
        list_sum_of_squares(&mut writer, metric, &groups, &ks);
    }
    for metric in Metric::ALL {
        window_gauge(&mut writer, metric, &groups, &ks, &window_names);
        window_standard_error(&mut writer, metric, &groups, &ks, &window_names);
    }
    r_precision(
        &mut writer,
        &groups,
        snapshot.ks.len() * Metric::COUNT,
        &window_names,
    );
    window_lists(&mut writer, &groups, &window_names);
    super::positions::render(&mut writer, &groups, &snapshot.interaction_types);
    super::coverage::render(&mut writer, &groups, &window_names);
    if let Some(control) = &snapshot.control_model {
        comparison_gauges(&mut writer, snapshot, control, &window_names);
    }
    super::interleaving::render(&mut writer, snapshot, &window_names);
    let help = "Lists finalized since start.";
    let mut family = writer.family(LISTS_FINALIZED, Kind::Counter, help);
    for (labels, group) in &groups {
        family.sample(labels, &[], group.totals.lists);
    }
    let help = "Finalized lists with at least one item of grade > 0.";
    let mut family = writer.family(LISTS_ENGAGED, Kind::Counter, help);
    for (labels, group) in &groups {
        family.sample(labels, &[], group.totals.engaged);
    }
    render_counters(&mut writer, snapshot, now);
}

/// `rankwatch_list_<metric>`: sums and counts of per-list values since start.
fn list_summary(
    writer: &mut SeriesWriter<'_>,
    metric: Metric,
    groups: &[(LabelSet, &GroupSnapshot)],
    ks: &[String],
) {
    let name = metric.name();
    let help = format_args!("Per-list {name}@k of finalized lists since start: _sum of values and _count of lists. rate(_sum)/rate(_count) is the mean across instances.");
    let mut family = writer.family(
        MetricSeries(LIST_SUMMARY_PREFIX, metric),
        Kind::Summary,
        help,
    );
    for (labels, group) in groups {
        for (k_index, k) in ks.iter().enumerate() {
            let slot = k_index * Metric::COUNT + metric as usize;
            let sum = group.totals.sums.get(slot).copied().unwrap_or(0.0);
            family.sample_suffixed("_sum", labels, &[("k", k)], sum);
            family.sample_suffixed("_count", labels, &[("k", k)], group.totals.lists);
        }
    }
}

/// `rankwatch_list_<metric>_sum_of_squares_total`: squared per-list values summed since start.
fn list_sum_of_squares(
    writer: &mut SeriesWriter<'_>,
    metric: Metric,
    groups: &[(LabelSet, &GroupSnapshot)],
    ks: &[String],
) {
    let name = metric.name();
    let help = format_args!("Squares of per-list {name}@k of finalized lists since start, summed. With rankwatch_list_{name}_sum and _count, gives the standard error of the mean across instances.");
    let family_name = format!("{LIST_SUMMARY_PREFIX}{name}{SUM_OF_SQUARES_SUFFIX}");
    let mut family = writer.family(family_name, Kind::Counter, help);
    for (labels, group) in groups {
        for (k_index, k) in ks.iter().enumerate() {
            let slot = k_index * Metric::COUNT + metric as usize;
            family.sample(labels, &[("k", k)], group.totals.sum_of_squares(slot));
        }
    }
}

/// `rankwatch_<metric>_standard_error`: standard errors of the window gauges' means.
fn window_standard_error(
    writer: &mut SeriesWriter<'_>,
    metric: Metric,
    groups: &[(LabelSet, &GroupSnapshot)],
    ks: &[String],
    window_names: &[String],
) {
    let name = metric.name();
    let help = format_args!("Standard error of the mean per-list {name}@k over the lists of the rolling window, by scope.");
    let family_name = format!("{WINDOW_GAUGE_PREFIX}{name}{STANDARD_ERROR_SUFFIX}");
    let mut family = writer.family(family_name, Kind::Gauge, help);
    sample_window_scopes(&mut family, metric, groups, ks, window_names, |means| {
        [means.se_all, means.se_engaged]
    });
}

/// A comparison gauge: its name after the prefix, its help, and how to read it off a comparison.
type ComparisonFigure = (&'static str, &'static str, fn(&Comparison) -> f64);

/// `rankwatch_comparison_*`: each model against the control, per window and since start.
fn comparison_gauges(
    writer: &mut SeriesWriter<'_>,
    snapshot: &Snapshot,
    control: &str,
    window_names: &[String],
) {
    let named = |totals_of: &dyn Fn(&GroupSnapshot) -> Option<&GroupTotals>| {
        snapshot
            .groups
            .iter()
            .filter_map(|g| {
                totals_of(g).map(|totals| NamedTotals {
                    model: &g.model,
                    surface: &g.surface,
                    segments: &g.segments,
                    totals,
                })
            })
            .collect::<Vec<_>>()
    };
    let mut views: Vec<(&str, Vec<Comparison>)> = vec![(
        SINCE_START,
        compare(&named(&|g| Some(&g.totals)), control, &snapshot.ks),
    )];
    for (index, window) in window_names.iter().enumerate() {
        let groups = named(&|g| g.windows.get(index));
        views.push((window, compare(&groups, control, &snapshot.ks)));
    }
    let figures: [ComparisonFigure; 6] = [
        ("diff", "Mean of the model minus mean of the control model, scope all.", |c| c.diff),
        ("standard_error", "Standard error of the difference.", |c| c.se),
        ("ci95_lower", "Lower bound of the fixed-sample 95% interval of the difference (valid at one look).", |c| c.ci95[0]),
        ("ci95_upper", "Upper bound of the fixed-sample 95% interval of the difference (valid at one look).", |c| c.ci95[1]),
        ("cs95_lower", "Lower bound of the anytime-valid 95% confidence sequence of the difference (valid however often it is looked at).", |c| c.cs95[0]),
        ("cs95_upper", "Upper bound of the anytime-valid 95% confidence sequence of the difference (valid however often it is looked at).", |c| c.cs95[1]),
    ];
    for (figure, help, value) in figures {
        let mut family = writer.family(format!("{COMPARISON_PREFIX}{figure}"), Kind::Gauge, help);
        for (window, comparisons) in &views {
            for c in comparisons {
                let segments: Vec<(String, String)> = c.segments.clone().into_iter().collect();
                let labels = LabelSet::of_group(&c.model, &c.surface, &segments);
                let k = c.k.to_string();
                let extra = [
                    ("control", c.control.as_str()),
                    ("metric", c.measure.name()),
                    ("k", &k),
                    ("window", window),
                ];
                family.sample(&labels, &extra, value(c));
            }
        }
    }
}

/// `rankwatch_<metric>`: means over the lists of each rolling window, in both scopes.
fn window_gauge(
    writer: &mut SeriesWriter<'_>,
    metric: Metric,
    groups: &[(LabelSet, &GroupSnapshot)],
    ks: &[String],
    window_names: &[String],
) {
    let name = metric.name();
    let help = format_args!("Mean per-list {name}@k over the lists of the rolling window, by scope (all lists, or engaged lists only).");
    let mut family = writer.family(MetricSeries(WINDOW_GAUGE_PREFIX, metric), Kind::Gauge, help);
    sample_window_scopes(&mut family, metric, groups, ks, window_names, |means| {
        [means.all, means.engaged]
    });
}

/// Samples of `metric` per group, window, `k` and scope (`all`, `engaged`),
/// the pair of figures `of` takes from each window's means.
fn sample_window_scopes(
    family: &mut Family<'_>,
    metric: Metric,
    groups: &[(LabelSet, &GroupSnapshot)],
    ks: &[String],
    window_names: &[String],
    of: fn(&MetricMeans) -> [f64; 2],
) {
    for (labels, group) in groups {
        for (window, totals) in window_names.iter().zip(&group.windows) {
            for (k_index, k) in ks.iter().enumerate() {
                let [all, engaged] = of(&totals.means(k_index * Metric::COUNT + metric as usize));
                for (scope, value) in [("all", all), ("engaged", engaged)] {
                    let extra = [("k", k.as_str()), ("window", window), ("scope", scope)];
                    family.sample(labels, &extra, value);
                }
            }
        }
    }
}

/// A rolling gauge: its name's suffix, its help, and its values in the
/// scopes `all` and `engaged`.
type WindowFigure = (&'static str, &'static str, fn(&MetricMeans) -> [f64; 2]);

/// `rankwatch_list_r_precision` and `rankwatch_r_precision`: R-precision's
/// summary, sum of squares, rolling gauges and their standard errors, as
/// for the other metrics but with no `k` label, since each list is cut at
/// its own relevant count.
fn r_precision(
    writer: &mut SeriesWriter<'_>,
    groups: &[(LabelSet, &GroupSnapshot)],
    slot: usize,
    window_names: &[String],
) {
    let help = "Per-list R-precision (precision at R, the list's relevant count) of finalized lists since start: _sum of values and _count of lists.";
    let name = format_args!("{LIST_SUMMARY_PREFIX}{R_PRECISION}");
    let mut family = writer.family(name, Kind::Summary, help);
    for (labels, group) in groups {
        let sum = group.totals.sums.get(slot).copied().unwrap_or(0.0);
        family.sample_suffixed("_sum", labels, &[], sum);
        family.sample_suffixed("_count", labels, &[], group.totals.lists);
    }
    let help = "Squares of per-list R-precision of finalized lists since start, summed. With rankwatch_list_r_precision_sum and _count, gives the standard error of the mean across instances.";
    let name = format!("{LIST_SUMMARY_PREFIX}{R_PRECISION}{SUM_OF_SQUARES_SUFFIX}");
    let mut family = writer.family(name, Kind::Counter, help);
    for (labels, group) in groups {
        family.sample(labels, &[], group.totals.sum_of_squares(slot));
    }
    let gauges: [WindowFigure; 2] = [
        ("", "Mean per-list R-precision over the lists of the rolling window, by scope (all lists, or engaged lists only).", |m| [m.all, m.engaged]),
        (STANDARD_ERROR_SUFFIX, "Standard error of the mean per-list R-precision over the lists of the rolling window, by scope.", |m| [m.se_all, m.se_engaged]),
    ];
    for (suffix, help, of) in gauges {
        let name = format!("{WINDOW_GAUGE_PREFIX}{R_PRECISION}{suffix}");
        let mut family = writer.family(name, Kind::Gauge, help);
        for (labels, group) in groups {
            for (window, totals) in window_names.iter().zip(&group.windows) {
                let [all, engaged] = of(&totals.means(slot));
                for (scope, value) in [("all", all), ("engaged", engaged)] {
                    family.sample(labels, &[("window", window), ("scope", scope)], value);
                }
            }
        }
    }
}

/// `rankwatch_window_lists`: the lists behind the window gauges.
fn window_lists(
    writer: &mut SeriesWriter<'_>,
    groups: &[(LabelSet, &GroupSnapshot)],
    window_names: &[String],
) {
    let help = "Finalized lists behind the rolling-window gauges, by scope.";
    let mut family = writer.family(WINDOW_LISTS, Kind::Gauge, help);
    for (labels, group) in groups {
        for (window, totals) in window_names.iter().zip(&group.windows) {
            let GroupTotals { lists, engaged, .. } = totals;
            family.sample(labels, &[("window", window), ("scope", "all")], lists);
            family.sample(labels, &[("window", window), ("scope", "engaged")], engaged);
        }
    }
}

fn render_counters(writer: &mut SeriesWriter<'_>, snapshot: &Snapshot, now: Nanos) {
    let c = &snapshot.counters;
    let none = &LabelSet::default();
    let help = "Events received in batches, valid or not: accepted + rejected + shed.";
    writer.single(EVENTS_RECEIVED, Kind::Counter, help, c.received());
    let help = "Valid events applied to the join (by a relay: produced to the topic).";
    writer.single(EVENTS_ACCEPTED, Kind::Counter, help, c.accepted());
    let help = "Invalid events, by reason.";
    let mut family = writer.family(EVENTS_REJECTED, Kind::Counter, help);
    for reason in Reason::ALL {
        let n = c.rejected.get(&reason).copied().unwrap_or(0);
        family.sample(none, &[("reason", reason.as_str())], n);
    }
    let help = "Impressions opened (valid, not late, not duplicates).";
    writer.single(IMPRESSIONS, Kind::Counter, help, c.impressions);
    let help = "Interactions accepted (valid, not duplicates).";
    writer.single(INTERACTIONS, Kind::Counter, help, c.interactions);
    let help = "Interactions credited to an impression.";
    writer.single(INTERACTIONS_CREDITED, Kind::Counter, help, c.credited);
    let help = "Interactions credited to no impression, by reason.";
    let mut family = writer.family(INTERACTIONS_UNATTRIBUTED, Kind::Counter, help);
    for reason in Unattributed::ALL {
        let n = c.unattributed_count(reason);
        family.sample(none, &[("reason", reason.as_str())], n);
    }
    let help = "Impressions whose attribution window had closed on arrival (ignored).";
    writer.single(IMPRESSIONS_LATE, Kind::Counter, help, c.late_impressions);
    let help = "Retried events recognised and ignored, by kind.";
    let mut family = writer.family(DUPLICATES, Kind::Counter, help);
    family.sample(none, &[("kind", "impression")], c.duplicate_impressions);
    family.sample(none, &[("kind", "interaction")], c.duplicate_interactions);
    let help = "Events dropped under a limit, by the limit.";
    let mut family = writer.family(EVENTS_SHED, Kind::Counter, help);
    family.sample(
        none,
        &[("reason", "max_open_impressions")],
        c.shed_impressions,
    );
    family.sample(
        none,
        &[("reason", "max_waiting_interactions")],
        c.shed_interactions,
    );
    let others = [
        ("max_open_items", c.shed_open_items),
        ("max_open_impressions_per_user", c.shed_open_per_user),
        ("max_waiting_interactions_per_user", c.shed_waiting_per_user),
        (
            "max_interactions_per_impression",
            c.shed_interactions_per_impression,
        ),
        ("max_open_credits", c.shed_open_credits),
    ];
    for (reason, count) in others {
        family.sample(none, &[("reason", reason)], count);
    }
    render_engine_state(writer, snapshot, now);
}

/// The gauges of the join's state and the watermark.
fn render_engine_state(writer: &mut SeriesWriter<'_>, snapshot: &Snapshot, now: Nanos) {
    let help = "Impressions folded into the __overflow__ group past max_groups.";
    writer.single(
        IMPRESSIONS_OVERFLOWED,
        Kind::Counter,
        help,
        snapshot.overflowed_impressions,
    );
    if !snapshot.folded_segment_values.is_empty() {
        let help = "Impressions whose value of a segment label folded into __other__ past max_segment_values, by label.";
        let mut family = writer.family(SEGMENT_VALUES_FOLDED, Kind::Counter, help);
        for (label, n) in &snapshot.folded_segment_values {
            family.sample(&LabelSet::default(), &[("label", label)], n);
        }
    }
    let help = "Impressions open for attribution.";
    writer.single(
        OPEN_IMPRESSIONS,
        Kind::Gauge,
        help,
        snapshot.open_impressions,
    );
    let help = "Items of the impressions open for attribution, which max_open_items bounds.";
    writer.single(OPEN_ITEMS, Kind::Gauge, help, snapshot.open_items);
    let help = "Interactions credited to the impressions open for attribution, which max_open_credits bounds.";
    writer.single(OPEN_CREDITS, Kind::Gauge, help, snapshot.open_credits);
    let help = "Interactions waiting for their impression.";
    writer.single(
        WAITING_INTERACTIONS,
        Kind::Gauge,
        help,
        snapshot.waiting_interactions,
    );
    let help = "Items numbered in the item table: those open lists show, and those only closed lists showed until they are freed (docs/settings.md#sizing).";
    writer.single(ITEM_NUMBERS, Kind::Gauge, help, snapshot.item_numbers);
    let help = "(model, surface) groups with finalized lists.";
    writer.single(GROUPS, Kind::Gauge, help, snapshot.groups.len());
    let (Some(watermark), Some(frontier)) = (snapshot.watermark, snapshot.frontier) else {
        return;
    };
    let help = "The event-time watermark W, as Unix time.";
    writer.single(WATERMARK, Kind::Gauge, help, seconds(watermark));
    let help = "Wall clock minus the finalization frontier W - A.";
    let lag = seconds(now.saturating_sub(frontier));
    writer.single(FINALIZATION_LAG, Kind::Gauge, help, lag);
}

fn seconds(nanos: Nanos) -> f64 {
    nanos as f64 / NANOS_PER_SECOND as f64
}

/// The name of a per-metric family: a prefix and the metric's name.
#[derive(Clone, Copy)]
struct MetricSeries(&'static str, Metric);

impl Display for MetricSeries {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.0, self.1.name())
    }
}
