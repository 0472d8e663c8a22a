//! Interleaving's sensitivity against an A/B comparison, by simulation,
//! behind the figures of docs/statistics.md:
//! `cargo bench --bench interleaving -- [RUNS]`.
//!
//! Two rankers of known quality under the load generator's position-based
//! click model; users whose activity varies (log-normal, σ = 1) or not
//! (σ = 0); the same traffic interleaved by team draft or split A/B. Prints,
//! per setting, the median lists until the anytime-valid 95% sequence
//! excludes 0 for each method, and their ratio.

use rankwatch::sensitivity::{lists_needed, Sensitivity};

fn main() -> anyhow::Result<()> {
    // `cargo bench` passes `--bench`; the figures are the other arguments.
    let mut args = std::env::args()
        .skip(1)
        .filter(|arg| !arg.starts_with("--"));
    let runs = args.next().map(|a| a.parse()).transpose()?.unwrap_or(100);
    println!("control quality 0.9; looks every 50 lists; at most 400,000 lists per run and method");
    for (candidate_quality, activity_sigma) in [(0.8, 1.0), (0.8, 0.0), (0.85, 1.0), (0.7, 1.0)] {
        let needed = lists_needed(&Sensitivity {
            seed: 100,
            runs,
            max_lists: 400_000,
            look_every: 50,
            control_quality: 0.9,
            candidate_quality,
            activity_sigma,
        })?;
        let (interleaving, ab) = (needed.interleaving_median(), needed.ab_median());
        let found = |runs: &[Option<u64>]| runs.iter().filter(|r| r.is_some()).count();
        let ratio = match (interleaving, ab) {
            (Some(i), Some(a)) => format!("{:.1}x fewer", a as f64 / i as f64),
            _ => "—".to_owned(),
        };
        println!(
            "candidate {candidate_quality}, activity σ {activity_sigma}, {runs} runs: interleaving median {interleaving:?} lists ({} found), A/B median {ab:?} lists ({} found): {ratio}",
            found(&needed.interleaving),
            found(&needed.ab),
        );
    }
    Ok(())
}
