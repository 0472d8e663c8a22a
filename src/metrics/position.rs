//! Position curves (docs/SPEC.md §11): per group, for each rank `r` up to a depth,
//! the finalized lists that showed at least `r` items and the interactions
//! credited at rank `r` by type, so that CTR by rank is one division away.
//! Counts only: it knows nothing of events, time or transport.

use super::aggregate::no_lower;
use serde::{Deserialize, Serialize};

/// One group's position curve, since start.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PositionCurve {
    /// `lengths[r − 1]`: lists that showed exactly `r` items, the last entry
    /// those that showed `depth` or more. Adding a list is one increment.
    lengths: Vec<u64>,
    /// `interactions[(r − 1) · types + kind]`: credited at rank `r`, of type `kind`.
    interactions: Vec<u64>,
    /// Interaction types, the width of one rank's row.
    types: usize,
}

impl PositionCurve {
    /// An empty curve of ranks `1..=depth` and `types` interaction types; depth 0 keeps nothing.
    pub fn new(depth: usize, types: usize) -> Self {
        Self {
            lengths: vec![0; depth],
            interactions: vec![0; depth * types],
            types,
        }
    }

    /// Whether there is a row of `types` counts per rank, as
    /// [`PositionCurve::new`] makes it: `add` indexes the rows.
    pub fn is_well_formed(&self) -> bool {
        self.lengths.len().checked_mul(self.types) == Some(self.interactions.len())
    }

    /// The deepest rank kept.
    pub fn depth(&self) -> usize {
        self.lengths.len()
    }

    /// Adds a finalized list of `shown` items with its credited interactions as
    /// `(rank index, type index)`; ranks past the depth and unknown types are not kept.
    pub fn add(&mut self, shown: usize, credited: impl Iterator<Item = (usize, u16)>) {
        let depth = self.depth();
        if depth == 0 || shown == 0 {
            return;
        }
        self.lengths[shown.min(depth) - 1] += 1;
        for (rank_index, kind) in credited {
            let kind = usize::from(kind);
            if rank_index < depth && kind < self.types {
                self.interactions[rank_index * self.types + kind] += 1;
            }
        }
    }

    /// Adds the counts of `other`, a curve of the same depth and types (as
    /// every partition of one fleet instance keeps).
    pub fn merge(&mut self, other: &PositionCurve) {
        for (mine, theirs) in self.lengths.iter_mut().zip(&other.lengths) {
            *mine += theirs;
        }
        for (mine, theirs) in self.interactions.iter_mut().zip(&other.interactions) {
            *mine += theirs;
        }
    }

    /// Takes out `before`, a curve this one grew from: what was counted since.
    pub fn less(&mut self, before: &PositionCurve) {
        for (mine, earlier) in [
            (&mut self.lengths, &before.lengths),
            (&mut self.interactions, &before.interactions),
        ] {
            for (count, earlier) in mine.iter_mut().zip(earlier) {
                *count = count.saturating_sub(*earlier);
            }
        }
    }

    /// Whether this curve could have grown from `before`: of the same shape,
    /// with no count lower.
    pub fn grew_from(&self, before: &PositionCurve) -> bool {
        self.types == before.types
            && no_lower(&self.lengths, &before.lengths)
            && no_lower(&self.interactions, &before.interactions)
    }

    /// Lists that showed at least `rank` items (1-based).
    pub fn lists_reaching(&self, rank: usize) -> u64 {
        self.lengths.iter().skip(rank.saturating_sub(1)).sum()
    }

    /// Interactions of type `kind` credited at `rank` (1-based).
    pub fn interactions_at(&self, rank: usize, kind: usize) -> u64 {
        if rank == 0 || rank > self.depth() || kind >= self.types {
            return 0;
        }
        self.interactions[(rank - 1) * self.types + kind]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_lists_reaching_each_rank_and_interactions_by_type() {
        let mut curve = PositionCurve::new(3, 2);
        curve.add(1, [(0, 1)].into_iter());
        curve.add(2, [(1, 0), (1, 0), (0, 1)].into_iter());
        curve.add(5, [(4, 0), (2, 1)].into_iter());
        assert_eq!(
            (1..=4).map(|r| curve.lists_reaching(r)).collect::<Vec<_>>(),
            [3, 2, 1, 0]
        );
        assert_eq!(curve.interactions_at(1, 1), 2);
        assert_eq!(curve.interactions_at(2, 0), 2);
        assert_eq!(curve.interactions_at(3, 1), 1);
        assert_eq!(curve.interactions_at(3, 0), 0);
        // Rank 5 is past the depth: not kept.
        assert_eq!(curve.interactions_at(5, 0), 0);
    }

    #[test]
    fn depth_zero_keeps_nothing() {
        let mut curve = PositionCurve::new(0, 3);
        curve.add(4, [(0, 0)].into_iter());
        assert_eq!(curve.lists_reaching(1), 0);
        assert_eq!(curve.interactions_at(1, 0), 0);
    }
}
