//! Validation of an impression's `interleaving` (docs/SPEC.md §12): 2 to
//! `max_interleaved_rankers` distinct rankers named like groups, and one
//! valid ranker index per item.

use super::raw::RawInterleaving;
use super::{quoted, Interleaving, Reason, Rejection, RESERVED_PREFIX};
use std::borrow::Cow;

/// The largest `max_interleaved_rankers`: a team index is kept in one byte.
pub const MAX_INTERLEAVED_RANKERS: usize = 255;

/// Checks `raw` for a list of `items` items; `max_rankers` and
/// `max_label_bytes` are the configured limits.
pub fn validate<'m>(
    raw: RawInterleaving<'m>,
    items: usize,
    max_rankers: usize,
    max_label_bytes: usize,
) -> Result<Interleaving<'m>, Rejection> {
    let rankers = raw.rankers;
    if rankers.len() < 2 || rankers.len() > max_rankers {
        return Err(invalid(format!(
            "interleaving names {} rankers; an interleaved list merges 2 to max_interleaved_rankers = {max_rankers}",
            rankers.len()
        )));
    }
    for (index, ranker) in rankers.iter().enumerate() {
        if ranker.is_empty() {
            return Err(invalid(format!(
                "interleaving.rankers[{index}] is empty; name each ranker as its model would be named"
            )));
        }
        if ranker.len() > max_label_bytes {
            return Err(invalid(format!(
                "interleaving.rankers[{index}] {} is longer than max_label_bytes = {max_label_bytes}",
                quoted(ranker)
            )));
        }
        if ranker.starts_with(RESERVED_PREFIX) {
            return Err(invalid(format!(
                "interleaving.rankers[{index}] {} starts with {RESERVED_PREFIX:?}, which names the server's own groups",
                quoted(ranker)
            )));
        }
        if let Some(earlier) = rankers[..index].iter().position(|r| r == ranker) {
            return Err(invalid(format!(
                "interleaving.rankers[{index}] {} repeats rankers[{earlier}]; each ranker is named once",
                quoted(ranker)
            )));
        }
    }
    if raw.teams.len() != items {
        return Err(invalid(format!(
            "interleaving.teams has {} entries for {items} item_ids; send one per item, the index of the ranker that contributed it",
            raw.teams.len()
        )));
    }
    let mut teams = Vec::with_capacity(items);
    for (rank, &team) in raw.teams.iter().enumerate() {
        match u8::try_from(team) {
            Ok(team) if usize::from(team) < rankers.len() => teams.push(team),
            _ => {
                let shown = match team {
                    u64::MAX => "not a whole number from 0 to 4294967295".to_owned(),
                    team => team.to_string(),
                };
                return Err(invalid(format!(
                    "interleaving.teams[{rank}] is {shown}; it must index rankers, 0 to {}",
                    rankers.len() - 1
                )));
            }
        }
    }
    Ok(in_name_order(Interleaving { rankers, teams }))
}

/// `interleaving` with its rankers in name order and its teams renumbered
/// to match. The order a client names them in means nothing (a team
/// indexes them), and a Go map or a set gives another order from run to
/// run: in name order, one set of rankers on a surface is one lineup
/// (`crate::join::experiments`), however it was sent.
fn in_name_order(interleaving: Interleaving<'_>) -> Interleaving<'_> {
    let Interleaving { rankers, mut teams } = interleaving;
    if rankers.is_sorted() {
        return Interleaving { rankers, teams };
    }
    // At most 255 rankers, so every index fits a team's byte.
    let mut order: Vec<u8> = (0..=u8::MAX).take(rankers.len()).collect();
    order.sort_unstable_by_key(|&old| &rankers[usize::from(old)]);
    let mut renumbered = vec![0; rankers.len()];
    for (new, &old) in (0..=u8::MAX).zip(&order) {
        renumbered[usize::from(old)] = new;
    }
    for team in &mut teams {
        *team = renumbered[usize::from(*team)];
    }
    let mut sent: Vec<Cow<'_, str>> = rankers;
    let rankers = order
        .iter()
        .map(|&old| std::mem::take(&mut sent[usize::from(old)]))
        .collect();
    Interleaving { rankers, teams }
}

fn invalid(message: String) -> Rejection {
    Rejection::new(Reason::InvalidInterleaving, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(rankers: &[&'static str], teams: &[u64]) -> RawInterleaving<'static> {
        RawInterleaving {
            rankers: rankers.iter().map(|&r| Cow::Borrowed(r)).collect(),
            teams: teams.to_vec(),
        }
    }

    fn message(rankers: &[&'static str], teams: &[u64], items: usize) -> String {
        match validate(raw(rankers, teams), items, 3, 8) {
            Ok(_) => String::new(),
            Err(rejection) => {
                assert_eq!(rejection.reason, Reason::InvalidInterleaving);
                rejection.message
            }
        }
    }

    #[test]
    fn a_well_formed_interleaving_keeps_its_rankers_in_name_order_and_their_teams() {
        let valid = validate(raw(&["a", "b"], &[1, 0, 0]), 3, 3, 8).unwrap();
        assert_eq!(valid.rankers, ["a", "b"]);
        assert_eq!(valid.teams, [1, 0, 0]);
        let reordered = validate(raw(&["c", "a", "b"], &[0, 1, 2, 0]), 4, 3, 8).unwrap();
        assert_eq!(reordered.rankers, ["a", "b", "c"]);
        assert_eq!(reordered.teams, [2, 0, 1, 2], "each item keeps its ranker");
    }

    #[test]
    fn each_malformation_is_named() {
        assert!(message(&["a"], &[0], 1).contains("names 1 rankers"));
        assert!(message(&["a", "b", "c", "d"], &[0], 1).contains("max_interleaved_rankers = 3"));
        assert!(message(&["a", ""], &[0], 1).contains("rankers[1] is empty"));
        assert!(message(&["a", "__x"], &[0], 1).contains("starts with"));
        assert!(message(&["a", "longer-than-8"], &[0], 1).contains("max_label_bytes = 8"));
        assert!(message(&["a", "b", "a"], &[0], 1).contains("repeats rankers[0]"));
        assert!(message(&["a", "b"], &[0, 1], 3).contains("2 entries for 3 item_ids"));
        assert!(message(&["a", "b"], &[0, 2], 2).contains("teams[1] is 2"));
        assert!(message(&["a", "b"], &[u64::MAX, 0], 2).contains("teams[0] is not a whole number"));
        assert!(message(&["a", "b"], &[300, 0], 2).contains("teams[0] is 300"));
    }
}
