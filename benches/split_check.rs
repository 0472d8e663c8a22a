//! The simulation of the sample ratio check behind docs/statistics.md:
//! `cargo bench --bench split_check -- [RUNS] [LISTS]`.
//!
//! Lists drawn one at a time with the true shares, the anytime-valid
//! p-value looked at after every list: how often a correct split is ever
//! flagged (false alarms, 50/50 and 20/30/50), and after how many lists a
//! broken one is (52/48 and 55/45 against an intended 50/50), with the
//! prior's concentration `k` of the check and with others.

use rankwatch::sequential::median_lists;
use rankwatch::split_check::{SplitSimulation, PRIOR_CONCENTRATION, SPLIT_CHECK_LEVEL};

fn main() -> anyhow::Result<()> {
    // `cargo bench` passes `--bench`; the figures are the other arguments.
    let mut args = std::env::args()
        .skip(1)
        .filter(|arg| !arg.starts_with("--"));
    let runs = args.next().map(|a| a.parse()).transpose()?.unwrap_or(2_000);
    let lists = args
        .next()
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(100_000);
    println!("prior concentration k = {PRIOR_CONCENTRATION}, level {SPLIT_CHECK_LEVEL}, a look after every list");
    for shares in [vec![0.5, 0.5], vec![0.2, 0.3, 0.5]] {
        let simulation = SplitSimulation {
            seed: 7,
            runs,
            lists,
            expected: shares.clone(),
            actual: shares.clone(),
            concentration: PRIOR_CONCENTRATION,
        };
        println!(
            "correct split {shares:?}, {runs} runs of {lists} lists: false alarms {:.2}%",
            100.0 * simulation.flagged_share()
        );
    }
    for actual in [vec![0.52, 0.48], vec![0.55, 0.45]] {
        for concentration in [1.0, 10.0, 100.0, 1_000.0, 10_000.0] {
            let simulation = SplitSimulation {
                seed: 11,
                runs: runs.min(1_000),
                lists: 1_000_000,
                expected: vec![0.5, 0.5],
                actual: actual.clone(),
                concentration,
            };
            print_delay(&simulation);
        }
    }
    Ok(())
}

/// Prints how many runs were flagged and after how many lists.
fn print_delay(simulation: &SplitSimulation) {
    let flags = simulation.first_flags();
    let mut found: Vec<u64> = flags.iter().flatten().copied().collect();
    found.sort_unstable();
    let quartile = |q: usize| found.get(found.len() * q / 4).copied().unwrap_or(0);
    println!(
        "split {:?} against 50/50, k = {}, {} runs: flagged in {} runs; lists until flagged: median {}, quartiles {} and {}",
        simulation.actual,
        simulation.concentration,
        flags.len(),
        found.len(),
        median_lists(&flags).map_or("never".into(), |l| l.to_string()),
        quartile(1),
        quartile(3)
    );
}
