//! The large simulation of docs/SPEC.md §9 behind the figures of docs/statistics.md:
//! `cargo bench --bench sequential -- [RUNS] [LOOKS]`.
//!
//! Two identical models (the demo's control, quality 0.9) watched every 100
//! lists of each: how often the fixed 95% interval and the anytime-valid 95%
//! sequence of the nDCG@10 difference ever exclude zero. Then a candidate 5%
//! worse on nDCG@10: lists of each model until the sequence lies below zero.
//! Then canaries: identical models, the candidate on 2% of the lists, one
//! list in twenty (and one in a hundred) clicked.

use rankwatch::sequential::{canary_false_alarms, detection, false_alarms, Canary, Simulation};

fn main() -> anyhow::Result<()> {
    // `cargo bench` passes `--bench`; the figures are the other arguments.
    let mut args = std::env::args()
        .skip(1)
        .filter(|arg| !arg.starts_with("--"));
    let runs = args.next().map(|a| a.parse()).transpose()?.unwrap_or(1_000);
    let looks = args.next().map(|a| a.parse()).transpose()?.unwrap_or(100);
    let simulation = Simulation {
        seed: 20,
        runs,
        looks,
        lists_per_look: 100,
        control_quality: 0.9,
    };
    let alarms = false_alarms(&simulation)?;
    println!(
        "identical models, {runs} runs, {looks} looks of 100 lists each: false alarms: fixed interval {:.1}%, confidence sequence {:.1}%",
        100.0 * alarms.interval_rate(),
        100.0 * alarms.sequence_rate()
    );
    let found = detection(
        &Simulation {
            looks: 1_000,
            runs: runs.min(200),
            ..simulation
        },
        0.05,
    )?;
    let detected: Vec<u64> = found.lists.iter().flatten().copied().collect();
    println!(
        "candidate 5% worse (nDCG@10 {:.4} against {:.4}), {} runs: the sequence excluded zero in {} runs, median {} lists of each model (min {}, max {})",
        found.candidate_mean,
        found.control_mean,
        found.lists.len(),
        detected.len(),
        found.median_lists().map_or("never".into(), |l| l.to_string()),
        detected.iter().min().copied().unwrap_or(0),
        detected.iter().max().copied().unwrap_or(0),
    );
    for engaged in [0.05, 0.01] {
        let canary = Canary {
            seed: 20,
            runs: runs.min(1_000),
            looks: 100,
            candidate_lists: 2,
            control_lists: 98,
            engaged,
        };
        for min_lists in [2, 30] {
            let alarms = canary_false_alarms(&canary, min_lists);
            println!(
                "canary on 2% of the lists, {}% clicked, {} runs of {} looks every 100 lists, looked at from {min_lists} lists of each: false alarms: fixed interval {:.1}%, confidence sequence {:.1}%",
                engaged * 100.0,
                canary.runs,
                canary.looks,
                100.0 * alarms.interval_rate(),
                100.0 * alarms.sequence_rate()
            );
        }
    }
    Ok(())
}
