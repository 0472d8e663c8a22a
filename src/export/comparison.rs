//! Comparisons against the control model (docs/SPEC.md §9): for each surface, each
//! other model shown on it and each metric at each K (scope `all`), the
//! difference of means with its fixed-sample interval and its anytime-valid
//! confidence sequence. Built from the same totals as the report and the
//! gauges, so that the three agree.

use crate::metrics::uncertainty::Difference;
use crate::metrics::{GroupTotals, Metric};
use serde::Serialize;
use std::collections::BTreeMap;

/// One model against the control on one surface, for one metric at one K.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Comparison {
    /// The surface.
    pub surface: String,
    /// The segment values both groups share; left out when there are none.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub segments: BTreeMap<String, String>,
    /// The model.
    pub model: String,
    /// The control model.
    pub control: String,
    /// Keyed `metric@K`, as in the groups' metrics.
    pub metric: String,
    /// `mean_model − mean_control`.
    pub diff: f64,
    /// `sqrt(se_model² + se_control²)`.
    pub se: f64,
    /// The fixed-sample 95% interval.
    pub ci95: [f64; 2],
    /// The anytime-valid 95% confidence sequence.
    pub cs95: [f64; 2],
    /// The metric, for labels.
    #[serde(skip)]
    pub measure: Metric,
    /// The cutoff, for labels.
    #[serde(skip)]
    pub k: usize,
}

/// One group's totals, named.
#[derive(Clone, Copy, Debug)]
pub struct NamedTotals<'a> {
    /// The group's model.
    pub model: &'a str,
    /// The group's surface.
    pub surface: &'a str,
    /// `(label, value)` of each segment label.
    pub segments: &'a [(String, String)],
    /// Its totals over the lists in view.
    pub totals: &'a GroupTotals,
}

/// Every comparison against `control` among `groups` (groups without lists
/// take no part): models are compared within one surface and one set of
/// segment values. Sorted by surface, segment values, model, metric.
pub fn compare(groups: &[NamedTotals<'_>], control: &str, ks: &[usize]) -> Vec<Comparison> {
    let mut comparisons = Vec::new();
    for reference in groups
        .iter()
        .filter(|g| g.model == control && g.totals.lists > 0)
    {
        for candidate in groups.iter().filter(|g| {
            g.surface == reference.surface
                && g.segments == reference.segments
                && g.model != control
                && g.totals.lists > 0
        }) {
            comparisons.extend(compare_pair(candidate, reference, ks));
        }
    }
    comparisons.sort_by(|a, b| {
        (&a.surface, &a.segments, &a.model, &a.metric).cmp(&(
            &b.surface,
            &b.segments,
            &b.model,
            &b.metric,
        ))
    });
    comparisons
}

/// The order people read comparisons in: by surface, segment values, model,
/// metric and then cutoff as a number (`ndcg@5` before `ndcg@10`), where
/// [`compare`] orders the metric keys as text.
pub fn by_cutoff(a: &Comparison, b: &Comparison) -> std::cmp::Ordering {
    (&a.surface, &a.segments, &a.model, a.measure.name(), a.k).cmp(&(
        &b.surface,
        &b.segments,
        &b.model,
        b.measure.name(),
        b.k,
    ))
}

fn compare_pair<'a>(
    candidate: &'a NamedTotals<'_>,
    control: &'a NamedTotals<'_>,
    ks: &'a [usize],
) -> impl Iterator<Item = Comparison> + 'a {
    ks.iter().enumerate().flat_map(move |(k_index, &k)| {
        Metric::ALL.into_iter().map(move |measure| {
            let slot = k_index * Metric::COUNT + measure as usize;
            let difference = Difference::between(
                candidate.totals.estimate(slot),
                control.totals.estimate(slot),
            );
            Comparison {
                surface: candidate.surface.to_owned(),
                segments: candidate.segments.iter().cloned().collect(),
                model: candidate.model.to_owned(),
                control: control.model.to_owned(),
                metric: format!("{}@{k}", measure.name()),
                diff: difference.diff,
                se: difference.se,
                ci95: difference.ci95,
                cs95: difference.cs95,
                measure,
                k,
            }
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn totals(values: &[f64]) -> GroupTotals {
        let mut totals = GroupTotals::new(Metric::COUNT);
        for &v in values {
            totals.add(&[v; Metric::COUNT], v > 0.0);
        }
        totals
    }

    #[test]
    fn compares_each_other_model_on_the_control_surface_only() {
        let (control, candidate, elsewhere) = (
            totals(&[1.0, 0.0, 1.0, 1.0]),
            totals(&[0.0, 0.0, 1.0]),
            totals(&[1.0]),
        );
        let groups = [
            NamedTotals {
                model: "b",
                surface: "home",
                segments: &[],
                totals: &candidate,
            },
            NamedTotals {
                model: "a",
                surface: "home",
                segments: &[],
                totals: &control,
            },
            NamedTotals {
                model: "b",
                surface: "search",
                segments: &[],
                totals: &elsewhere,
            },
        ];
        let comparisons = compare(&groups, "a", &[10]);
        assert_eq!(comparisons.len(), Metric::COUNT);
        let first = &comparisons[0];
        assert_eq!(
            (first.surface.as_str(), first.model.as_str()),
            ("home", "b")
        );
        assert!((first.diff - (1.0 / 3.0 - 0.75)).abs() < 1e-12);
        let se = (1.0f64 / 3.0 / 3.0 + 0.25 / 4.0).sqrt();
        assert!((first.se - se).abs() < 1e-12);
        assert!(comparisons.windows(2).all(|w| w[0].metric < w[1].metric));
    }
}
