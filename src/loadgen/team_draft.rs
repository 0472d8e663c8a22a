//! Team-draft interleaving (Radlinski, Kurup and Joachims 2008) and its
//! multileaving form (Schuth et al. 2014), as a serving system does it: in
//! each round the rankers pick in an order drawn at random, each taking its
//! highest-ranked item not yet shown; a ranker with nothing new left is
//! skipped.

/// Merges `rankings` (items in rank order, one list per ranker) into at most
/// `length` items in `shown`, writing in `teams` the index of the ranker
/// that contributed each.
pub fn team_draft(
    rankings: &[Vec<u32>],
    length: usize,
    rng: &mut fastrand::Rng,
    shown: &mut Vec<u32>,
    teams: &mut Vec<u32>,
) {
    shown.clear();
    teams.clear();
    let mut next = vec![0usize; rankings.len()];
    let mut order: Vec<usize> = (0..rankings.len()).collect();
    while shown.len() < length {
        rng.shuffle(&mut order);
        let mut picked = false;
        for &ranker in &order {
            if shown.len() == length {
                break;
            }
            let ranking = &rankings[ranker];
            while next[ranker] < ranking.len() && shown.contains(&ranking[next[ranker]]) {
                next[ranker] += 1;
            }
            if let Some(&item) = ranking.get(next[ranker]) {
                shown.push(item);
                teams.push(ranker as u32);
                next[ranker] += 1;
                picked = true;
            }
        }
        if !picked {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_pick_is_its_rankers_highest_item_not_yet_shown() {
        let rankings = vec![
            vec![1, 2, 3, 4, 5],
            vec![2, 1, 6, 7, 8],
            vec![9, 1, 2, 3, 4],
        ];
        let mut rng = fastrand::Rng::with_seed(3);
        let (mut shown, mut teams) = (Vec::new(), Vec::new());
        for _ in 0..200 {
            team_draft(&rankings, 7, &mut rng, &mut shown, &mut teams);
            assert_eq!(shown.len(), 7);
            for (at, (&item, &team)) in shown.iter().zip(&teams).enumerate() {
                let highest = rankings[team as usize]
                    .iter()
                    .find(|i| !shown[..at].contains(i))
                    .copied();
                assert_eq!(Some(item), highest, "{shown:?} {teams:?}");
            }
            let mut distinct = shown.clone();
            distinct.sort_unstable();
            distinct.dedup();
            assert_eq!(distinct.len(), 7);
        }
    }

    #[test]
    fn the_first_pick_goes_to_each_ranker_about_equally() {
        let rankings = vec![vec![1, 2], vec![3, 4], vec![5, 6]];
        let mut rng = fastrand::Rng::with_seed(9);
        let (mut shown, mut teams) = (Vec::new(), Vec::new());
        let mut first = [0u32; 3];
        for _ in 0..30_000 {
            team_draft(&rankings, 3, &mut rng, &mut shown, &mut teams);
            first[teams[0] as usize] += 1;
        }
        assert!(
            first.iter().all(|&n| (9_500..=10_500).contains(&n)),
            "{first:?}"
        );
    }

    #[test]
    fn exhausted_rankers_are_skipped_and_the_list_ends_with_the_items() {
        let rankings = vec![vec![1], vec![1, 2, 3]];
        let mut rng = fastrand::Rng::with_seed(1);
        let (mut shown, mut teams) = (Vec::new(), Vec::new());
        team_draft(&rankings, 10, &mut rng, &mut shown, &mut teams);
        let mut sorted = shown.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, [1, 2, 3]);
        assert_eq!(
            teams.iter().filter(|&&t| t == 1).count(),
            shown.len() - usize::from(teams.contains(&0))
        );
    }
}
