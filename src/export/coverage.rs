//! Prometheus gauges of coverage and exposure (docs/SPEC.md §11): per group and
//! window (`since_start` included), the distinct items shown and engaged and
//! the Gini coefficient and normalized entropy of their exposure. Distinct
//! counts do not add up across instances: each instance's gauge covers the
//! lists it finalized.

use super::series::{Kind, LabelSet, SeriesWriter, SINCE_START};
use super::GroupSnapshot;
use crate::metrics::CoverageFigures;

/// Distinct items shown.
pub const ITEMS_SHOWN: &str = "rankwatch_items_shown";
/// Distinct items with a credited interaction of grade > 0.
pub const ITEMS_ENGAGED: &str = "rankwatch_items_engaged";
/// Gini coefficient of position-weighted exposure.
pub const EXPOSURE_GINI: &str = "rankwatch_exposure_gini";
/// Normalized entropy of position-weighted exposure.
pub const EXPOSURE_ENTROPY: &str = "rankwatch_exposure_entropy_normalized";

type Figure = (&'static str, &'static str, fn(&CoverageFigures) -> f64);

/// Writes the four families for every group with coverage, since start and per window.
pub(super) fn render(
    writer: &mut SeriesWriter<'_>,
    groups: &[(LabelSet, &GroupSnapshot)],
    window_names: &[String],
) {
    if groups.iter().all(|(_, group)| group.coverage.is_none()) {
        return;
    }
    let figures: [Figure; 4] = [
        (ITEMS_SHOWN, "Distinct items shown in the lists of the window (estimated past max_exposure_items).", |c| c.items_shown as f64),
        (ITEMS_ENGAGED, "Distinct items with a credited interaction of grade > 0 in the lists of the window (estimated past max_exposure_items).", |c| c.items_engaged as f64),
        (EXPOSURE_GINI, "Gini coefficient of the items' position-weighted exposure (weight 1 / discount(rank)) in the window: 0 even, towards 1 concentrated.", |c| c.exposure_gini),
        (EXPOSURE_ENTROPY, "Entropy of the items' position-weighted exposure shares in the window over ln(items shown): 1 even, 0 for one item.", |c| c.exposure_entropy),
    ];
    for (name, help, value) in figures {
        let mut family = writer.family(name, Kind::Gauge, help);
        for (labels, group) in groups {
            let Some(since_start) = &group.coverage else {
                continue;
            };
            family.sample(labels, &[("window", SINCE_START)], value(since_start));
            for (window, figures) in window_names.iter().zip(&group.window_coverage) {
                family.sample(labels, &[("window", window)], value(figures));
            }
        }
    }
}
