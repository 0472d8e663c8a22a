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

/// Credits closer than this share of the larger are equal: a sum of up to
/// `max_items` gains rounds by at most about 1,000 × 2.2e-16 of it, while
/// the least grade (1e-6) apart is a share of 1.6e-11 of the largest linear
/// credit (1,000 items of grade 64).
const CREDIT_TIE: f64 = 1e-12;

/// The outcome of one list for the pair of rankers at indexes `a` and `b`,
/// laid out as [`slot`] says; `first` is the team of the rank-1 item.
/// Credits equal but for the rounding of their sums (0.1 + 0.2 against
/// 0.3) are a tie.
pub fn pair_outcome(credits: &[f64], first: u8, a: usize, b: usize) -> [f64; slot::WIDTH] {
    let (credit_a, credit_b) = (credits[a], credits[b]);
    let tied = (credit_a - credit_b).abs() <= CREDIT_TIE * credit_a.max(credit_b);
    let mut outcome = [0.0; slot::WIDTH];
    outcome[slot::WIN_A] = f64::from(u8::from(!tied && credit_a > credit_b));
    outcome[slot::WIN_B] = f64::from(u8::from(!tied && credit_b > credit_a));
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

    #[test]
    fn credits_equal_but_for_the_rounding_of_their_sums_are_a_tie() {
        // 0.1 + 0.2 is 0.30000000000000004 in binary floating point.
        let mut credits = Vec::new();
        credits_into(&[0.1, 0.2, 0.3], &[0, 0, 1], Gain::Linear, 2, &mut credits);
        assert_ne!(credits[0], credits[1]);
        assert_eq!(pair_outcome(&credits, 0, 0, 1), [0.0, 0.0, 1.0, 0.0]);
        assert_eq!(pair_outcome(&credits, 0, 1, 0), [0.0, 0.0, 0.0, 1.0]);
        // The least grade apart is a win.
        let close = [64.0 * 1000.0, 64.0 * 1000.0 - 1e-6];
        assert_eq!(pair_outcome(&close, 0, 0, 1), [1.0, 0.0, 1.0, 0.0]);
    }
}
