//! Team-draft credit of an interleaved list (docs/SPEC.md §12): each
//! ranker earns the gain of the items it contributed, and each pair of its
//! rankers is a win for the one that earned more, else a tie. Pure
//! arithmetic on one list's grades.

use super::Gain;

/// Where a pair's per-list outcome puts each value, summed per experiment
/// as a group's metric values are ([`super::GroupTotals`]).
pub mod slot {
    /// 1 when `a` earned more credit than `b`.
    pub const WIN_A: usize = 0;
    /// 1 when `b` earned more credit than `a`.
    pub const WIN_B: usize = 1;
    /// 1 when `a` contributed the rank-1 item.
    pub const FIRST_A: usize = 2;
    /// 1 when `b` contributed the rank-1 item.
    pub const FIRST_B: usize = 3;
    /// Values per list.
    pub const WIDTH: usize = 4;
}

/// Each ranker's credit: `credits[r]` is the sum, in rank order, of
/// `gain(grade)` over the items whose team is `r`. `grades` and `teams`
/// are per item, rank order; `credits` is resized to `rankers`.
pub fn credits_into(
    grades: &[f64],
    teams: &[u8],
    gain: Gain,
    rankers: usize,
    credits: &mut Vec<f64>,
) {
    credits.clear();
    credits.resize(rankers, 0.0);
    for (&grade, &team) in grades.iter().zip(teams) {
        if grade > 0.0 {
            if let Some(credit) = credits.get_mut(usize::from(team)) {
                *credit += gain.apply(grade);
            }
        }
    }
}

/// The outcome of one list for the pair of rankers at indexes `a` and `b`,
/// laid out as [`slot`] says; `first` is the team of the rank-1 item.
pub fn pair_outcome(credits: &[f64], first: u8, a: usize, b: usize) -> [f64; slot::WIDTH] {
    let (credit_a, credit_b) = (credits[a], credits[b]);
    let mut outcome = [0.0; slot::WIDTH];
    outcome[slot::WIN_A] = f64::from(u8::from(credit_a > credit_b));
    outcome[slot::WIN_B] = f64::from(u8::from(credit_b > credit_a));
    outcome[slot::FIRST_A] = f64::from(u8::from(usize::from(first) == a));
    outcome[slot::FIRST_B] = f64::from(u8::from(usize::from(first) == b));
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_ranker_earns_the_gain_of_its_own_items() {
        let mut credits = Vec::new();
        // Items of rankers 0, 1, 1, 2; grades 1, 0, 3, 2.
        credits_into(
            &[1.0, 0.0, 3.0, 2.0],
            &[0, 1, 1, 2],
            Gain::Linear,
            3,
            &mut credits,
        );
        assert_eq!(credits, [1.0, 3.0, 2.0]);
        credits_into(
            &[1.0, 0.0, 3.0, 2.0],
            &[0, 1, 1, 2],
            Gain::Exponential,
            3,
            &mut credits,
        );
        assert_eq!(credits, [1.0, 7.0, 3.0]);
    }

    #[test]
    fn a_pair_is_won_by_more_credit_and_tied_otherwise() {
        let credits = [1.0, 3.0, 3.0];
        assert_eq!(pair_outcome(&credits, 0, 0, 1), [0.0, 1.0, 1.0, 0.0]);
        assert_eq!(pair_outcome(&credits, 0, 1, 0), [1.0, 0.0, 0.0, 1.0]);
        assert_eq!(pair_outcome(&credits, 2, 1, 2), [0.0, 0.0, 0.0, 1.0]);
        assert_eq!(pair_outcome(&[0.0, 0.0], 1, 0, 1), [0.0, 0.0, 0.0, 1.0]);
    }
}
