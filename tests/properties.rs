//! Properties of the metrics and of replay, checked on random inputs.
//!
//! The metric properties compare `ListEvaluator` with a reference written
//! here directly from the definitions of docs/SPEC.md §4, one metric at a time, with
//! no shared code. The replay properties generate logs with the awkward parts
//! of docs/SPEC.md §3 (events out of order, late impressions, retried impressions and
//! interactions, interactions with and without `request_id`, explicit grades,
//! bad lines) and check what must not depend on how the log is read.
//! Case counts are kept modest so that the file runs in seconds in debug.

use proptest::prelude::*;
use proptest::sample::{select, Index};
use rankwatch::config::{EngineArgs, FileSettings};
use rankwatch::engine::EngineSettings;
use rankwatch::event::format_rfc3339;
use rankwatch::event::json::parse_line;
use rankwatch::export::Report;
use rankwatch::join::Engine;
use rankwatch::metrics::{CoverageMode, Discount, Gain, ListEvaluator, Metric, MetricSettings};
use rankwatch::replay::{replay, LineNotice, ReplayOptions, ReplaySetup};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

// ---------------------------------------------------------------------------
// Metrics
// ---------------------------------------------------------------------------

/// Grades as the tests draw them: mostly 0, some of every positive level.
fn grade() -> impl Strategy<Value = f64> {
    select(vec![0.0, 0.0, 0.0, 1.0, 2.0, 3.0, 4.5])
}

/// A list's grades in rank order, 1 to 30 items.
fn grades() -> impl Strategy<Value = Vec<f64>> {
    prop::collection::vec(grade(), 1..=30)
}

/// Cutoffs in any order, with repeats, some beyond the longest list.
fn cutoffs() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(1usize..=35, 1..=5)
}

/// Every gain and discount, with random log bases and half-lives.
fn metric_settings() -> impl Strategy<Value = MetricSettings> {
    let gain = select(vec![Gain::Linear, Gain::Exponential]);
    let discount = prop_oneof![
        Just(Discount::Log2),
        Just(Discount::Jarvelin { base: 2.0 }),
        (1.1f64..12.0).prop_map(|base| Discount::Jarvelin { base }),
    ];
    let half_life = prop_oneof![Just(5.0), 1.1f64..20.0];
    let err_max_grade = prop_oneof![Just(3.0), Just(4.0), 0.5f64..6.0];
    let rbp_persistence = prop_oneof![Just(0.8), 0.01f64..0.99];
    (gain, discount, half_life, err_max_grade, rbp_persistence).prop_map(
        |(gain, discount, half_life, err_max_grade, rbp_persistence)| MetricSettings {
            gain,
            discount,
            half_life,
            err_max_grade,
            rbp_persistence,
        },
    )
}

/// Every metric at every cutoff of `ks`, keyed `(K, metric)`, as `ListEvaluator` computes them.
fn evaluate(settings: &MetricSettings, ks: &[usize], grades: &[f64]) -> Vec<(usize, Metric, f64)> {
    let mut evaluator = ListEvaluator::new(settings.clone(), ks);
    let mut row = vec![0.0; evaluator.width()];
    evaluator.evaluate(grades, &mut row);
    evaluator
        .ks()
        .iter()
        .enumerate()
        .flat_map(|(k_index, &k)| {
            let row = &row;
            Metric::ALL
                .into_iter()
                .map(move |metric| (k, metric, row[k_index * Metric::COUNT + metric as usize]))
        })
        .collect()
}

/// `gain(g)` of docs/SPEC.md §4.
fn reference_gain(settings: &MetricSettings, grade: f64) -> f64 {
    match settings.gain {
        Gain::Linear => grade,
        Gain::Exponential => 2f64.powf(grade) - 1.0,
    }
}

/// `discount(j)` of docs/SPEC.md §4, for the 1-based rank `j`.
fn reference_discount(settings: &MetricSettings, rank: usize) -> f64 {
    let j = rank as f64;
    match settings.discount {
        Discount::Log2 => (j + 1.0).log2(),
        Discount::Jarvelin { base } => (j.ln() / base.ln()).max(1.0),
    }
}

/// `num / den`, or 0 when `den` is 0: the convention of every normalized metric.
fn ratio_or_zero(num: f64, den: f64) -> f64 {
    if den == 0.0 {
        0.0
    } else {
        num / den
    }
}

/// DCG@K of `grades`: `Σ_{j ≤ min(K, n)} gain(g_j) / discount(j)`.
fn reference_dcg(settings: &MetricSettings, grades: &[f64], k: usize) -> f64 {
    grades
        .iter()
        .take(k)
        .enumerate()
        .map(|(i, &g)| reference_gain(settings, g) / reference_discount(settings, i + 1))
        .sum()
}

/// Breese's utility at K before normalization: `Σ_{j ≤ m} gain(g_j) · 2^{-(j-1)/(α-1)}`.
fn reference_half_life_sum(settings: &MetricSettings, grades: &[f64], k: usize) -> f64 {
    grades
        .iter()
        .take(k)
        .enumerate()
        .map(|(i, &g)| {
            reference_gain(settings, g) * 2f64.powf(-(i as f64) / (settings.half_life - 1.0))
        })
        .sum()
}

/// One metric at cutoff `k`, straight from its definition in docs/SPEC.md §4.
fn reference(settings: &MetricSettings, grades: &[f64], k: usize, metric: Metric) -> f64 {
    let m = k.min(grades.len());
    let head = &grades[..m];
    let relevant = |g: &f64| *g > 0.0;
    let relevant_in_list = grades.iter().filter(|g| relevant(g)).count() as f64;
    let relevant_in_head = head.iter().filter(|g| relevant(g)).count() as f64;
    let mut ideal = grades.to_vec();
    ideal.sort_by(|a, b| b.partial_cmp(a).expect("grades are finite"));
    match metric {
        Metric::HitRate => f64::from(u8::from(relevant_in_head > 0.0)),
        Metric::Mrr => head
            .iter()
            .position(relevant)
            .map_or(0.0, |i| 1.0 / (i + 1) as f64),
        Metric::Precision => relevant_in_head / k as f64,
        Metric::Recall => ratio_or_zero(relevant_in_head, relevant_in_list),
        Metric::Map => {
            let precision_at =
                |j: usize| grades[..j].iter().filter(|g| relevant(g)).count() as f64 / j as f64;
            let sum: f64 = (1..=m)
                .filter(|&j| relevant(&grades[j - 1]))
                .map(precision_at)
                .sum();
            ratio_or_zero(sum, relevant_in_list)
        }
        Metric::Ndcg => ratio_or_zero(
            reference_dcg(settings, grades, k),
            reference_dcg(settings, &ideal, k),
        ),
        Metric::Dcg => reference_dcg(settings, grades, k),
        Metric::HalfLifeUtility => ratio_or_zero(
            reference_half_life_sum(settings, grades, k),
            reference_half_life_sum(settings, &ideal, k),
        ),
        Metric::PairwiseAccuracy => {
            let (mut concordant, mut pairs) = (0.0, 0.0);
            for a in 0..m {
                for b in a + 1..m {
                    if head[a] != head[b] {
                        pairs += 1.0;
                        concordant += f64::from(u8::from(head[a] > head[b]));
                    }
                }
            }
            ratio_or_zero(concordant, pairs)
        }
        Metric::Err => {
            // Chapelle et al. 2009: Σ_r (1/r)·R_r·Π_{i<r}(1 − R_i), R = (2^g − 1)/2^g_max.
            let g_max = settings.err_max_grade;
            let stop = |g: f64| (2f64.powf(g.min(g_max)) - 1.0) / 2f64.powf(g_max);
            (0..m)
                .map(|r| {
                    let reach: f64 = head[..r].iter().map(|&g| 1.0 - stop(g)).product();
                    reach * stop(head[r]) / (r + 1) as f64
                })
                .sum()
        }
        Metric::Rbp => {
            // Moffat and Zobel 2008, graded, no residual: (1 − p)·Σ_j g_j·p^{j−1}.
            let p = settings.rbp_persistence;
            head.iter()
                .enumerate()
                .map(|(i, &g)| (1.0 - p) * g * p.powf(i as f64))
                .sum()
        }
    }
}

/// R-precision: relevant among the first `R` items over `R`, `R` the list's relevant count.
fn reference_r_precision(grades: &[f64]) -> f64 {
    let r = grades.iter().filter(|&&g| g > 0.0).count();
    let hits = grades.iter().take(r).filter(|&&g| g > 0.0).count();
    ratio_or_zero(hits as f64, r as f64)
}

/// Whether `actual` agrees with `expected` to 1e-12, relative to the size of
/// `expected` where it exceeds 1 (only DCG does).
fn agrees(actual: f64, expected: f64) -> bool {
    (actual - expected).abs() <= 1e-12 * expected.abs().max(1.0)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn metrics_agree_with_the_definitions(settings in metric_settings(), ks in cutoffs(), grades in grades()) {
        for (k, metric, actual) in evaluate(&settings, &ks, &grades) {
            let expected = reference(&settings, &grades, k, metric);
            prop_assert!(agrees(actual, expected), "{}@{k} = {actual}, expected {expected}", metric.name());
        }
    }

    #[test]
    fn r_precision_agrees_with_its_definition(settings in metric_settings(), ks in cutoffs(), grades in grades()) {
        let mut evaluator = ListEvaluator::new(settings, &ks);
        let mut row = vec![0.0; evaluator.width()];
        evaluator.evaluate(&grades, &mut row);
        let expected = reference_r_precision(&grades);
        prop_assert!(agrees(row[evaluator.r_precision_slot()], expected));
    }

    #[test]
    fn normalized_metrics_lie_in_the_unit_interval(settings in metric_settings(), ks in cutoffs(), grades in grades()) {
        for (k, metric, value) in evaluate(&settings, &ks, &grades) {
            if matches!(metric, Metric::Dcg | Metric::Rbp) {
                prop_assert!(value.is_finite() && value >= 0.0, "dcg@{k} = {value}");
            } else {
                prop_assert!((0.0..=1.0).contains(&value), "{}@{k} = {value}", metric.name());
            }
        }
    }

    #[test]
    fn the_ideal_order_scores_one(settings in metric_settings(), ks in cutoffs(), mut grades in grades()) {
        if grades.iter().all(|&g| g == 0.0) {
            grades[0] = 1.0;
        }
        grades.sort_by(|a, b| b.partial_cmp(a).expect("grades are finite"));
        for (k, metric, value) in evaluate(&settings, &ks, &grades) {
            if matches!(metric, Metric::Ndcg | Metric::HalfLifeUtility) {
                prop_assert!(agrees(value, 1.0), "{}@{k} = {value} for {grades:?}", metric.name());
            }
        }
    }

    #[test]
    fn a_list_without_feedback_scores_zero(settings in metric_settings(), ks in cutoffs(), len in 1usize..=30) {
        for (k, metric, value) in evaluate(&settings, &ks, &vec![0.0; len]) {
            prop_assert_eq!(value, 0.0, "{}@{}", metric.name(), k);
        }
    }
}

// ---------------------------------------------------------------------------
// Replay
// ---------------------------------------------------------------------------

/// Time of the first step of every generated log: 2026-11-01T10:00:00Z.
const LOG_START_MS: i64 = 1_761_991_200_000;

/// Nominal time between two consecutive steps of a generated log.
const STEP_MS: i64 = 2_000;

/// Models of generated impressions; empty means `default`.
const MODELS: [&str; 3] = ["v1", "v2", ""];

/// Surfaces of generated impressions; empty means `default`.
const SURFACES: [&str; 2] = ["home", ""];

/// Interaction types of generated interactions, all configured by default.
const TYPES: [&str; 3] = ["click", "add_to_cart", "purchase"];

/// Lines that every validator rejects, each with a different reason; `{t}` is
/// replaced by a valid time.
const BAD_LINES: [&[u8]; 10] = [
    b"this is not json {",
    b"{}",
    br#"{"interaction":{"userId":"u0","itemId":"i1","type":"clik","time":"{t}"}}"#,
    br#"{"impression":{"requestId":"r0","userId":"u0","itemIds":[],"time":"{t}"}}"#,
    br#"{"impression":{"requestId":"r0","userId":"u0","itemIds":["i1","i2","i1"],"time":"{t}"}}"#,
    br#"{"interaction":{"userId":"u0","itemId":"i1","type":"click","grade":-1,"time":"{t}"}}"#,
    br#"{"interaction":{"userId":"u0","itemId":"i1","type":"click"}}"#,
    b"\xff\xfe not UTF-8",
    br#"{"impression":{"userId":"u1","itemIds":["i1"],"time":"{t}"}}"#,
    br#"{"interaction":{"userId":"u1","itemId":"i1","type":"click","time":"2026-13-01T00:00:00Z"}}"#,
];

/// One line of a generated log, before rendering. Small integers pick ids
/// from small pools so that interactions both hit and miss open lists.
#[derive(Clone, Debug)]
enum Step {
    /// A ranked list of distinct items from the pool.
    Impression {
        user: u8,
        request: u8,
        items: Vec<u8>,
        model: u8,
        surface: u8,
        shift_ms: i64,
    },
    /// Feedback, named by `request_id` or not, with an explicit grade or not.
    Interaction {
        user: u8,
        item: u8,
        request: Option<u8>,
        event: Option<u8>,
        kind: u8,
        grade: Option<f64>,
        shift_ms: i64,
    },
    /// The same bytes as an earlier line, as a client's retry sends them
    /// (an empty line when there is none).
    Retry(Index),
    /// One of [`BAD_LINES`].
    Bad(usize),
    /// An empty line, which is skipped and is not a bad line.
    Blank,
}

/// How far an event's time is from its step's nominal time: mostly a little
/// jitter either way, so that events arrive out of order, sometimes far in
/// the past, so that impressions arrive after their window closed.
fn time_shift() -> impl Strategy<Value = i64> {
    prop_oneof![8 => -40_000i64..20_000, 1 => -900_000i64..-300_000]
}

/// A step, mostly interactions and impressions.
fn step() -> impl Strategy<Value = Step> {
    let items = proptest::sample::subsequence((0u8..10).collect::<Vec<_>>(), 1..=6).prop_shuffle();
    let impression = (
        0u8..3,
        0u8..4,
        items,
        0..MODELS.len() as u8,
        0..SURFACES.len() as u8,
        time_shift(),
    )
        .prop_map(
            |(user, request, items, model, surface, shift_ms)| Step::Impression {
                user,
                request,
                items,
                model,
                surface,
                shift_ms,
            },
        );
    let grade = prop_oneof![4 => Just(None), 1 => select(vec![0.0, 0.5, 2.0, 4.5]).prop_map(Some)];
    let interaction = (
        0u8..3,
        0u8..10,
        prop::option::of(0u8..4),
        prop::option::of(0u8..12),
        0..TYPES.len() as u8,
        grade,
        time_shift(),
    )
        .prop_map(
            |(user, item, request, event, kind, grade, shift_ms)| Step::Interaction {
                user,
                item,
                request,
                event,
                kind,
                grade,
                shift_ms,
            },
        );
    prop_oneof![
        6 => interaction,
        3 => impression,
        1 => any::<Index>().prop_map(Step::Retry),
        1 => (0..BAD_LINES.len()).prop_map(Step::Bad),
        1 => Just(Step::Blank),
    ]
}

/// A time as the log writes it.
fn time_text(ms: i64) -> String {
    format_rfc3339(ms * 1_000_000)
}

/// Renders the steps as JSON lines, without newlines; also says which
/// lines are bad.
fn render(steps: &[Step]) -> (Vec<Vec<u8>>, Vec<bool>) {
    let mut lines: Vec<Vec<u8>> = Vec::with_capacity(steps.len());
    let mut bad: Vec<bool> = Vec::with_capacity(steps.len());
    for (position, step) in steps.iter().enumerate() {
        let nominal_ms = LOG_START_MS + position as i64 * STEP_MS;
        let (line, is_bad) = match step {
            Step::Impression {
                user,
                request,
                items,
                model,
                surface,
                shift_ms,
            } => {
                let impression = serde_json::json!({"impression": {
                    "requestId": format!("r{request}"),
                    "userId": format!("u{user}"),
                    "itemIds": items.iter().map(|i| format!("i{i}")).collect::<Vec<_>>(),
                    "time": time_text(nominal_ms + shift_ms),
                    "model": MODELS[usize::from(*model)],
                    "surface": SURFACES[usize::from(*surface)],
                }});
                (impression.to_string().into_bytes(), false)
            }
            Step::Interaction {
                user,
                item,
                request,
                event,
                kind,
                grade,
                shift_ms,
            } => {
                let mut fields = serde_json::json!({
                    "userId": format!("u{user}"),
                    "itemId": format!("i{item}"),
                    "type": TYPES[usize::from(*kind)],
                    "time": time_text(nominal_ms + shift_ms),
                });
                if let Some(request) = request {
                    fields["requestId"] = format!("r{request}").into();
                }
                if let Some(event) = event {
                    fields["eventId"] = format!("e{event}").into();
                }
                if let Some(grade) = grade {
                    fields["grade"] = (*grade).into();
                }
                (
                    serde_json::json!({ "interaction": fields })
                        .to_string()
                        .into_bytes(),
                    false,
                )
            }
            Step::Retry(index) if position > 0 => {
                let earlier = index.index(position);
                (lines[earlier].clone(), bad[earlier])
            }
            Step::Retry(_) | Step::Blank => (Vec::new(), false),
            Step::Bad(which) => {
                let text = String::from_utf8_lossy(BAD_LINES[*which]);
                let line = if text.contains("{t}") {
                    text.replace("{t}", &time_text(nominal_ms)).into_bytes()
                } else {
                    BAD_LINES[*which].to_vec()
                };
                (line, true)
            }
        };
        lines.push(line);
        bad.push(is_bad);
    }
    (lines, bad)
}

/// Join and metric settings for a generated log: a short window and
/// lateness, so that lists close and interactions give up mid-log.
fn engine_settings() -> impl Strategy<Value = EngineSettings> {
    let window = select(vec![20u64, 60, 300]);
    let lateness = select(vec![0u64, 10, 30]);
    (window, lateness, cutoffs(), metric_settings()).prop_map(|(window, lateness, k, metrics)| {
        let mut settings =
            EngineSettings::resolve(&EngineArgs::default(), &FileSettings::default())
                .expect("the default settings are valid");
        settings.attribution_window = Duration::from_secs(window);
        settings.allowed_lateness = Duration::from_secs(lateness);
        settings.k = k;
        settings.metrics = metrics;
        settings
    })
}

/// Writes `lines` to `path`, one per line.
fn write_log(path: &Path, lines: &[Vec<u8>]) {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).expect("create log"));
    for line in lines {
        out.write_all(line)
            .and_then(|()| out.write_all(b"\n"))
            .expect("write log");
    }
    out.flush().expect("write log");
}

/// Writes `lines` gzip-compressed to `path`, as two concatenated gzip
/// members split at `split` (what `cat a.gz b.gz` gives).
fn write_gzip_log(path: &Path, lines: &[Vec<u8>], split: usize) {
    let mut file = std::fs::File::create(path).expect("create log");
    for part in [&lines[..split], &lines[split..]] {
        let mut encoder = flate2::write::GzEncoder::new(&mut file, flate2::Compression::fast());
        for line in part {
            encoder
                .write_all(line)
                .and_then(|()| encoder.write_all(b"\n"))
                .expect("write log");
        }
        encoder.finish().expect("write log");
    }
}

/// Replays `paths`; returns the report and the 1-based numbers of the bad lines.
fn run(
    paths: &[PathBuf],
    settings: &EngineSettings,
    threads: usize,
    chunk_lines: usize,
) -> (Report, Noticed) {
    run_setup(paths, ReplaySetup::new(settings), threads, chunk_lines)
}

/// [`run`] with the setup given.
fn run_setup(
    paths: &[PathBuf],
    setup: ReplaySetup,
    threads: usize,
    chunk_lines: usize,
) -> (Report, Noticed) {
    let mut noticed = Noticed::default();
    let report = replay(
        paths,
        setup,
        ReplayOptions {
            threads,
            chunk_lines,
            ..ReplayOptions::default()
        },
        |_| {},
        |line| match line.what {
            LineNotice::Rejected(_) => noticed.rejected.push(line.line),
            LineNotice::Late { .. } => noticed.late.push(line.line),
        },
    )
    .expect("the log is readable")
    .report;
    (report, noticed)
}

/// The lines a replay named: rejected, and impressions that came late.
#[derive(Debug, Default, PartialEq)]
struct Noticed {
    rejected: Vec<u64>,
    late: Vec<u64>,
}

/// Checks every replay property on one log: the same report and bad lines
/// whatever the threads and chunk size, from a gzip file and from the log
/// split over two files; and the counters' balance.
fn check_replay(
    steps: &[Step],
    settings: &EngineSettings,
    chunk_sizes: &[usize],
    split: Index,
) -> Result<(), TestCaseError> {
    let (lines, bad) = render(steps);
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("log.jsonl");
    write_log(&log, &lines);

    let (report, noticed) = run(std::slice::from_ref(&log), settings, 1, chunk_sizes[0]);
    let expected_bad: Vec<u64> = (1..)
        .zip(&bad)
        .filter(|(_, is_bad)| **is_bad)
        .map(|(line, _)| line)
        .collect();
    prop_assert_eq!(&noticed.rejected, &expected_bad);
    prop_assert_eq!(
        noticed.late.len() as u64,
        report.counters.late["impressions"]
    );
    for threads in [1, 2, 3] {
        for &chunk_lines in chunk_sizes {
            let (other, other_noticed) =
                run(std::slice::from_ref(&log), settings, threads, chunk_lines);
            prop_assert_eq!(
                &other,
                &report,
                "threads {}, chunk_lines {}",
                threads,
                chunk_lines
            );
            prop_assert_eq!(
                &other_noticed,
                &noticed,
                "threads {}, chunk_lines {}",
                threads,
                chunk_lines
            );
        }
    }

    let c = &report.counters;
    prop_assert_eq!(
        c.interactions,
        c.credited + c.unattributed.values().sum::<u64>(),
        "{:?}",
        c
    );
    prop_assert_eq!(
        report.groups.iter().map(|g| g.lists).sum::<u64>(),
        c.impressions,
        "{:?}",
        c
    );
    prop_assert_eq!(
        c.rejected.values().sum::<u64>(),
        expected_bad.len() as u64,
        "{:?}",
        c
    );

    let split = split.index(lines.len() + 1);
    let gzip = dir.path().join("log.jsonl.gz");
    write_gzip_log(&gzip, &lines, split);
    prop_assert_eq!(
        &run(&[gzip], settings, 2, chunk_sizes[0]).0,
        &report,
        "gzip"
    );

    let (head, tail) = (dir.path().join("head.jsonl"), dir.path().join("tail.jsonl"));
    write_log(&head, &lines[..split]);
    write_log(&tail, &lines[split..]);
    prop_assert_eq!(
        &run(&[head, tail], settings, 2, chunk_sizes[0]).0,
        &report,
        "split at line {}",
        split
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn replay_is_independent_of_how_the_log_is_read(
        steps in prop::collection::vec(step(), 0..300),
        settings in engine_settings(),
        split in any::<Index>(),
    ) {
        check_replay(&steps, &settings, &[1, 7, 4096], split)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4, ..ProptestConfig::default() })]

    /// Replay parses a chunk on several threads only past 1024 lines, so
    /// these logs are long enough for 2 and 3 threads to split a chunk.
    #[test]
    fn replay_of_long_logs_is_independent_of_the_threads(
        steps in prop::collection::vec(step(), 2_100..2_600),
        settings in engine_settings(),
        split in any::<Index>(),
    ) {
        check_replay(&steps, &settings, &[4096, 7, 1500], split)?;
    }
}

/// Replays `lines` with one engine applying every event in file order, as
/// `serve` does: the reference the sharded replay is held to.
fn replay_with_one_engine(lines: &[Vec<u8>], setup: ReplaySetup) -> Report {
    let mut engine = Engine::new(setup.join, setup.evaluator);
    for line in lines {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match parse_line(line.as_slice(), &setup.validator) {
            Ok(event) => {
                engine.apply(event);
            }
            Err(rejection) => engine.reject(rejection.reason),
        }
    }
    engine.finish();
    Report::since_start(&engine, &setup.report)
}

/// What `settings` replay with, coverage estimated from sketches past
/// `sketch_cap` items when there is one, as `replay --sketch-coverage` does.
fn setup_with(settings: &EngineSettings, sketch_cap: Option<usize>) -> ReplaySetup {
    let mut setup = ReplaySetup::new(settings);
    if let (Some(max_items), true) = (sketch_cap, setup.join.coverage != CoverageMode::Off) {
        setup.join.coverage = CoverageMode::Sketch { max_items };
    }
    setup
}

/// Limits small enough for a generated log to meet them: lists, their
/// items, credits and interactions shed on all shards and per user, groups
/// overflowing.
fn tight_settings() -> impl Strategy<Value = EngineSettings> {
    let open = select(vec![2usize, 5, 40, 1_000_000]);
    let items = select(vec![3usize, 12, 100, 50_000_000]);
    let waiting = select(vec![1usize, 4, 40, 1_000_000]);
    let credits = select(vec![0usize, 2, 20, 10_000_000]);
    let per_user = select(vec![1usize, 3, 1000]);
    let groups = select(vec![1usize, 2, 1000]);
    let held = (waiting, credits);
    (engine_settings(), (open, items), held, per_user, groups).prop_map(
        |(mut settings, (open, items), (waiting, credits), per_user, groups)| {
            settings.max_open_impressions = open;
            settings.max_open_items = items;
            settings.max_waiting_interactions = waiting;
            settings.max_open_credits = credits;
            settings.max_open_impressions_per_user = per_user;
            settings.max_waiting_interactions_per_user = per_user;
            settings.max_groups = groups;
            settings
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// The replay, sharded by user over threads, gives the figures of one
    /// engine applying every event in file order, to the last digit (the
    /// shards' lists are added to the figures in one engine's order); under
    /// limits that shed and groups that overflow too, and with coverage
    /// estimated from sketches past a few items.
    #[test]
    fn sharded_replay_gives_the_figures_of_one_engine(
        steps in prop::collection::vec(step(), 0..400),
        settings in tight_settings(),
        threads in 1usize..4,
        chunk_lines in select(vec![1usize, 7, 4096]),
        sketch_cap in select(vec![None, Some(2usize)]),
    ) {
        let (lines, _) = render(&steps);
        let dir = tempfile::tempdir().expect("temp dir");
        let log = dir.path().join("log.jsonl");
        write_log(&log, &lines);
        let setup = setup_with(&settings, sketch_cap);
        let (sharded, _) = run_setup(std::slice::from_ref(&log), setup, threads, chunk_lines);
        let one = replay_with_one_engine(&lines, setup_with(&settings, sketch_cap));
        prop_assert_eq!(sharded, one);
    }
}

/// An interaction waiting for its list becomes a credit when the list
/// opens: a chunk of a sharded replay in which one user's list claims it and
/// another user's interaction arrives is applied in order when the two could
/// meet `max_open_credits`, so the second is shed as one engine sheds it.
/// Eight pairs of users, a day apart, so that two of them fall in shards of
/// their own.
#[test]
fn a_waiting_interaction_claimed_in_a_chunk_counts_against_max_open_credits() {
    let mut lines = Vec::new();
    for day in 1..=8 {
        let at = format!("2026-11-{day:02}T10:00:00Z");
        let impression = |user: &str| {
            format!(
                r#"{{"impression":{{"requestId":"r{user}{day}","userId":"{user}{day}","itemIds":["i0","i1"],"time":"{at}"}}}}"#
            )
        };
        let click = |user: &str| {
            format!(
                r#"{{"interaction":{{"userId":"{user}{day}","itemId":"i0","requestId":"r{user}{day}","type":"click","time":"{at}"}}}}"#
            )
        };
        // Chunks of two lines: b's list opens and a's click waits; then
        // a's list claims it, and b's click meets the limit.
        lines.extend([impression("b"), click("a"), impression("a"), click("b")]);
    }
    let lines: Vec<Vec<u8>> = lines.into_iter().map(String::into_bytes).collect();
    let mut settings = EngineSettings::resolve(&EngineArgs::default(), &FileSettings::default())
        .expect("the default settings are valid");
    settings.max_open_credits = 1;
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("log.jsonl");
    write_log(&log, &lines);
    let one = replay_with_one_engine(&lines, ReplaySetup::new(&settings));
    assert_eq!(
        (one.counters.credited, one.counters.shed.get("interactions")),
        (8, Some(&8))
    );
    let (sharded, _) = run(std::slice::from_ref(&log), &settings, 2, 2);
    assert_eq!(sharded, one);
}

/// A replay that ends with thousands of lists open in every shard
/// finalizes them in rounds; the rounds keep one engine's order, so the
/// report is still one engine's to the last digit. Deadlines come out of
/// order (times shuffled within the lateness) and lists score unevenly.
#[test]
fn a_replay_ending_with_many_open_lists_gives_the_figures_of_one_engine() {
    let mut lines = Vec::new();
    for i in 0..40_000u64 {
        let time = 1_000_000 + i * 10 - (i * 7919 % 13) * 1_000;
        let stamp = |ms: u64| {
            format!(
                "2026-11-01T{:02}:{:02}:{:02}.{:03}Z",
                ms / 3_600_000,
                ms / 60_000 % 60,
                ms / 1000 % 60,
                ms % 1000
            )
        };
        let items: Vec<String> = (0..10)
            .map(|r| format!("\"i{}\"", (i * 31 + r * 17) % 5_000))
            .collect();
        lines.push(format!(
            r#"{{"impression":{{"requestId":"r{i}","userId":"u{i}","itemIds":[{}],"time":"{}","model":"m{}","surface":"s"}}}}"#,
            items.join(","),
            stamp(time),
            i % 3
        ));
        if i % 4 != 0 {
            let rank = i * 13 % 10;
            lines.push(format!(
                r#"{{"interaction":{{"userId":"u{i}","itemId":"i{}","requestId":"r{i}","type":"click","time":"{}"}}}}"#,
                (i * 31 + rank * 17) % 5_000,
                stamp(time + 5)
            ));
        }
    }
    let lines: Vec<Vec<u8>> = lines.into_iter().map(String::into_bytes).collect();
    let mut settings = EngineSettings::resolve(&EngineArgs::default(), &FileSettings::default())
        .expect("the default settings are valid");
    settings.attribution_window = Duration::from_secs(3600);
    settings.allowed_lateness = Duration::from_secs(30);
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("log.jsonl");
    write_log(&log, &lines);
    // 5,000 items: past a cap of 1,000, coverage comes from sketches.
    for sketch_cap in [None, Some(1_000)] {
        let one = replay_with_one_engine(&lines, setup_with(&settings, sketch_cap));
        assert_eq!(one.counters.impressions, 40_000);
        assert_eq!(one.counters.credited, 30_000);
        for threads in [1, 2] {
            let setup = setup_with(&settings, sketch_cap);
            let (sharded, noticed) = run_setup(std::slice::from_ref(&log), setup, threads, 4096);
            assert_eq!(noticed, Noticed::default());
            assert_eq!(
                sharded, one,
                "threads {threads}, sketches past {sketch_cap:?}"
            );
        }
    }
}
