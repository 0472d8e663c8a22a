//! Prometheus text for the engine's figures (SPEC §5): per-list summaries
//! (`_sum`/`_count`, fleet-correct under `rate()`), rolling-window gauges and
//! the join's counters. Rendered from one engine snapshot per scrape, like a
//! Prometheus collector, so recording costs ingest nothing.

use super::{GroupSnapshot, Snapshot};
use crate::event::{Nanos, Reason, NANOS_PER_SECOND};
use crate::join::Unattributed;
use crate::metrics::{GroupTotals, Metric};
use std::fmt::Write as _;
use std::time::Duration;

/// Renders `snapshot`; `windows` are the configured window spans, `now` the wall clock.
pub fn render(snapshot: &Snapshot, windows: &[Duration], now: Nanos) -> String {
    let mut out = String::with_capacity(64 * 1024);
    let window_names: Vec<String> = windows
        .iter()
        .map(|w| humantime::format_duration(*w).to_string())
        .collect();
    let groups: Vec<(String, &GroupSnapshot)> = snapshot
        .groups
        .iter()
        .map(|g| {
            (
                format!(
                    "model=\"{}\",surface=\"{}\"",
                    escape(&g.model),
                    escape(&g.surface)
                ),
                g,
            )
        })
        .collect();

    for metric in Metric::ALL {
        let name = metric.name();
        header(&mut out, &format!("rankwatch_list_{name}"), "summary", &format!("Per-list {name}@k of finalized lists since start: _sum of values and _count of lists. rate(_sum)/rate(_count) is the mean across instances."));
        for (labels, group) in &groups {
            for (k_index, k) in snapshot.ks.iter().enumerate() {
                let slot = k_index * Metric::COUNT + metric as usize;
                let sum = group.totals.sums.get(slot).copied().unwrap_or(0.0);
                let _ = writeln!(out, "rankwatch_list_{name}_sum{{{labels},k=\"{k}\"}} {sum}");
                let _ = writeln!(
                    out,
                    "rankwatch_list_{name}_count{{{labels},k=\"{k}\"}} {}",
                    group.totals.lists
                );
            }
        }
    }
    for metric in Metric::ALL {
        let name = metric.name();
        header(&mut out, &format!("rankwatch_{name}"), "gauge", &format!("Mean per-list {name}@k over the lists of the rolling window, by scope (all lists, or engaged lists only)."));
        for (labels, group) in &groups {
            for (window, totals) in window_names.iter().zip(&group.windows) {
                for (k_index, k) in snapshot.ks.iter().enumerate() {
                    let means = totals.means(k_index * Metric::COUNT + metric as usize);
                    for (scope, mean) in [("all", means.all), ("engaged", means.engaged)] {
                        let _ = writeln!(out, "rankwatch_{name}{{{labels},k=\"{k}\",window=\"{window}\",scope=\"{scope}\"}} {mean}");
                    }
                }
            }
        }
    }
    header(
        &mut out,
        "rankwatch_window_lists",
        "gauge",
        "Finalized lists behind the rolling-window gauges, by scope.",
    );
    for (labels, group) in &groups {
        for (window, totals) in window_names.iter().zip(&group.windows) {
            let GroupTotals { lists, engaged, .. } = totals;
            let _ = writeln!(
                out,
                "rankwatch_window_lists{{{labels},window=\"{window}\",scope=\"all\"}} {lists}"
            );
            let _ = writeln!(out, "rankwatch_window_lists{{{labels},window=\"{window}\",scope=\"engaged\"}} {engaged}");
        }
    }
    header(
        &mut out,
        "rankwatch_lists_finalized_total",
        "counter",
        "Lists finalized since start.",
    );
    for (labels, group) in &groups {
        let _ = writeln!(
            out,
            "rankwatch_lists_finalized_total{{{labels}}} {}",
            group.totals.lists
        );
    }
    header(
        &mut out,
        "rankwatch_lists_engaged_total",
        "counter",
        "Finalized lists with at least one item of grade > 0.",
    );
    for (labels, group) in &groups {
        let _ = writeln!(
            out,
            "rankwatch_lists_engaged_total{{{labels}}} {}",
            group.totals.engaged
        );
    }
    render_counters(&mut out, snapshot, now);
    out
}

fn render_counters(out: &mut String, snapshot: &Snapshot, now: Nanos) {
    let c = &snapshot.counters;
    let accepted = c.impressions
        + c.interactions
        + c.late_impressions
        + c.duplicate_impressions
        + c.duplicate_interactions;
    let rejected: u64 = c.rejected.values().sum();
    single(
        out,
        "rankwatch_events_received_total",
        "counter",
        "Events received in batches, valid or not.",
        accepted + rejected,
    );
    single(
        out,
        "rankwatch_events_accepted_total",
        "counter",
        "Valid events applied to the join.",
        accepted,
    );
    header(
        out,
        "rankwatch_events_rejected_total",
        "counter",
        "Invalid events, by reason.",
    );
    for reason in Reason::ALL {
        let n = c.rejected.get(&reason).copied().unwrap_or(0);
        let _ = writeln!(
            out,
            "rankwatch_events_rejected_total{{reason=\"{reason}\"}} {n}"
        );
    }
    single(
        out,
        "rankwatch_impressions_total",
        "counter",
        "Impressions opened (valid, not late, not duplicates).",
        c.impressions,
    );
    single(
        out,
        "rankwatch_interactions_total",
        "counter",
        "Interactions accepted (valid, not duplicates).",
        c.interactions,
    );
    single(
        out,
        "rankwatch_interactions_credited_total",
        "counter",
        "Interactions credited to an impression.",
        c.credited,
    );
    header(
        out,
        "rankwatch_interactions_unattributed_total",
        "counter",
        "Interactions credited to no impression, by reason.",
    );
    for reason in Unattributed::ALL {
        let _ = writeln!(
            out,
            "rankwatch_interactions_unattributed_total{{reason=\"{}\"}} {}",
            reason.as_str(),
            c.unattributed_count(reason)
        );
    }
    single(
        out,
        "rankwatch_impressions_late_total",
        "counter",
        "Impressions whose attribution window had closed on arrival (ignored).",
        c.late_impressions,
    );
    header(
        out,
        "rankwatch_duplicates_total",
        "counter",
        "Retried events recognised and ignored, by kind.",
    );
    let _ = writeln!(
        out,
        "rankwatch_duplicates_total{{kind=\"impression\"}} {}",
        c.duplicate_impressions
    );
    let _ = writeln!(
        out,
        "rankwatch_duplicates_total{{kind=\"interaction\"}} {}",
        c.duplicate_interactions
    );
    header(
        out,
        "rankwatch_events_shed_total",
        "counter",
        "Events dropped under a limit, by the limit.",
    );
    let _ = writeln!(
        out,
        "rankwatch_events_shed_total{{reason=\"max_open_impressions\"}} {}",
        c.shed_impressions
    );
    let _ = writeln!(
        out,
        "rankwatch_events_shed_total{{reason=\"max_waiting_interactions\"}} {}",
        c.shed_interactions
    );
    single(
        out,
        "rankwatch_impressions_overflowed_total",
        "counter",
        "Impressions folded into the __overflow__ group past max_groups.",
        snapshot.overflowed_impressions,
    );
    single(
        out,
        "rankwatch_open_impressions",
        "gauge",
        "Impressions open for attribution.",
        snapshot.open_impressions,
    );
    single(
        out,
        "rankwatch_waiting_interactions",
        "gauge",
        "Interactions waiting for their impression.",
        snapshot.waiting_interactions,
    );
    single(
        out,
        "rankwatch_groups",
        "gauge",
        "(model, surface) groups with finalized lists.",
        snapshot.groups.len(),
    );
    if let (Some(watermark), Some(frontier)) = (snapshot.watermark, snapshot.frontier) {
        single(
            out,
            "rankwatch_watermark_seconds",
            "gauge",
            "The event-time watermark W, as Unix time.",
            seconds(watermark),
        );
        single(
            out,
            "rankwatch_finalization_lag_seconds",
            "gauge",
            "Wall clock minus the finalization frontier W - A.",
            seconds(now.saturating_sub(frontier)),
        );
    }
}

fn seconds(nanos: Nanos) -> f64 {
    nanos as f64 / NANOS_PER_SECOND as f64
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

fn single(out: &mut String, name: &str, kind: &str, help: &str, value: impl std::fmt::Display) {
    header(out, name, kind, help);
    let _ = writeln!(out, "{name} {value}");
}

/// Escapes a label value as the text format requires.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
