//! Prometheus counters of the position curves (docs/SPEC.md §11): per group and rank,
//! the lists that reached the rank and the interactions credited at it by
//! type, so that `rate(interactions) / rate(lists)` is CTR by rank across
//! any number of instances.

use super::series::{Kind, LabelSet, SeriesWriter};
use super::GroupSnapshot;

/// Lists that showed at least `rank` items.
pub const POSITION_LISTS: &str = "rankwatch_position_lists_total";
/// Interactions credited at `rank`, by type.
pub const POSITION_INTERACTIONS: &str = "rankwatch_position_interactions_total";

/// Writes both families for every group, ranks `1..=depth`.
pub(super) fn render(
    writer: &mut SeriesWriter<'_>,
    groups: &[(LabelSet, &GroupSnapshot)],
    types: &[String],
) {
    let help = "Finalized lists that showed at least `rank` items, since start.";
    let mut family = writer.family(POSITION_LISTS, Kind::Counter, help);
    for (labels, group) in groups {
        for rank in 1..=group.positions.depth() {
            let lists = group.positions.lists_reaching(rank);
            family.sample(labels, &[("rank", &rank.to_string())], lists);
        }
    }
    let help = "Interactions credited at `rank` of finalized lists, by type, since start.";
    let mut family = writer.family(POSITION_INTERACTIONS, Kind::Counter, help);
    for (labels, group) in groups {
        for rank in 1..=group.positions.depth() {
            let rank_label = rank.to_string();
            for (kind, name) in types.iter().enumerate() {
                let n = group.positions.interactions_at(rank, kind);
                family.sample(labels, &[("rank", &rank_label), ("type", name)], n);
            }
        }
    }
}
