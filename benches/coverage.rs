//! The cost of coverage (docs/SPEC.md §11) in `serve`'s engine without gRPC, for
//! counting instructions under cachegrind (see benches/README.md); not a
//! criterion benchmark. Build it with `cargo bench --bench coverage
//! --no-run` and run the binary it names:
//!
//! - `coverage ingest LOG [off]`: replays LOG on one thread with `serve`'s
//!   windows and coverage mode (or coverage off), then prints each group's
//!   coverage since start.
//! - `coverage scrape [SCRAPES]`: fills an engine with 15 s of traffic of 240
//!   groups at 10,000 lists/s, as the end-to-end scrape scenario does, then
//!   works out the figures of `/metrics` (`Snapshot::of`) SCRAPES times
//!   (default 5), printing each one's time and a digest of the figures.

use rankwatch::config::{defaults, EngineArgs, FileSettings};
use rankwatch::engine::EngineSettings;
use rankwatch::event::{id_hash, Event, Impression, Interaction, Nanos, NANOS_PER_SECOND};
use rankwatch::export::Snapshot;
use rankwatch::join::Engine;
use rankwatch::metrics::{CoverageFigures, CoverageMode};
use rankwatch::replay::{replay, ReplayOptions, ReplaySetup};
use std::borrow::Cow;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The server's allocator, so that allocation costs what it costs there.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Models and surfaces of the scrape scenario: 240 groups.
const MODELS: usize = 20;
const SURFACES: usize = 12;
/// Items to draw lists from, the most popular drawn most often.
const CATALOGUE: f64 = 5_000.0;
/// Items per list.
const LIST_LEN: usize = 20;
/// Lists per second of event time, and for how long.
const LISTS_PER_SECOND: i64 = 10_000;
const SECONDS: i64 = 15;

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["ingest", log] => ingest(log, true),
        ["ingest", log, "off"] => ingest(log, false),
        ["scrape"] => scrape(5),
        ["scrape", n] => scrape(n.parse().expect("SCRAPES is a number")),
        _ => eprintln!("usage: coverage ingest LOG [off] | coverage scrape [SCRAPES]"),
    }
}

/// `serve`'s defaults with the end-to-end scenario's join timing.
fn settings() -> EngineSettings {
    let args = EngineArgs {
        attribution_window: Some(Duration::from_secs(2)),
        allowed_lateness: Some(Duration::from_secs(1)),
        ..EngineArgs::default()
    };
    EngineSettings::resolve(&args, &FileSettings::default()).expect("valid settings")
}

/// Replays `log` as `serve`'s engine would evaluate it.
fn ingest(log: &str, coverage: bool) {
    let settings = settings();
    let mut setup = ReplaySetup::new(&settings);
    setup.join = settings.join(&defaults::WINDOWS);
    if !coverage {
        setup.join.coverage = CoverageMode::Off;
    }
    let options = ReplayOptions {
        threads: 1,
        ..ReplayOptions::default()
    };
    let replayed = replay(&[PathBuf::from(log)], setup, options, |_| {}, |_| {}).expect("replay");
    for group in &replayed.report.groups {
        println!("{} {} {:?}", group.model, group.surface, group.coverage);
    }
}

/// Fills an engine as the scrape scenario does, then times `scrapes` snapshots.
fn scrape(scrapes: usize) {
    let settings = settings();
    let mut engine = Engine::new(settings.join(&defaults::WINDOWS), settings.evaluator());
    let mut rng = fastrand::Rng::with_seed(7);
    let models: Vec<String> = (0..MODELS).map(|m| format!("m{m}")).collect();
    let surfaces: Vec<String> = (0..SURFACES).map(|s| format!("s{s}")).collect();
    let start = 1_793_527_200 * NANOS_PER_SECOND;
    let spacing = NANOS_PER_SECOND / LISTS_PER_SECOND;
    for n in 0..LISTS_PER_SECOND * SECONDS {
        let time: Nanos = start + n * spacing;
        let request = rng.u64(..);
        let user = rng.u64(..);
        let items = list(&mut rng);
        let clicked = items[rng.usize(0..LIST_LEN)];
        engine.apply(Event::Impression(Box::new(Impression {
            request,
            user,
            items,
            time,
            model: Cow::Borrowed(&models[rng.usize(0..MODELS)]),
            surface: Cow::Borrowed(&surfaces[rng.usize(0..SURFACES)]),
            segments: Vec::new(),
            interleaving: None,
        })));
        if rng.u8(0..10) < 3 {
            engine.apply(Event::Interaction(Interaction {
                event: Some(rng.u64(..)),
                user,
                item: clicked,
                request: Some(request),
                time: time + NANOS_PER_SECOND / 20,
                grade: 1.0,
                kind: 0,
            }));
        }
    }
    for _ in 0..scrapes {
        let began = Instant::now();
        let snapshot = Snapshot::of(&engine, None);
        let took = began.elapsed();
        println!(
            "{} groups, figures {:016x}, {:.2} ms",
            snapshot.groups.len(),
            digest(&snapshot),
            took.as_secs_f64() * 1e3
        );
    }
}

/// `LIST_LEN` distinct items, item `i` drawn about `1 / sqrt(i)` as often as item 0.
fn list(rng: &mut fastrand::Rng) -> Vec<u64> {
    let mut items = Vec::with_capacity(LIST_LEN);
    while items.len() < LIST_LEN {
        let item = id_hash(&format!("i{}", (rng.f64().powi(2) * CATALOGUE) as u32));
        if !items.contains(&item) {
            items.push(item);
        }
    }
    items
}

/// A hash of every coverage figure of the snapshot, bit for bit.
fn digest(snapshot: &Snapshot) -> u64 {
    let mut hasher = DefaultHasher::new();
    let mut add = |figures: &CoverageFigures| {
        (figures.items_shown, figures.items_engaged, figures.exact).hash(&mut hasher);
        (
            figures.exposure_gini.to_bits(),
            figures.exposure_entropy.to_bits(),
        )
            .hash(&mut hasher);
    };
    for group in &snapshot.groups {
        group.coverage.iter().for_each(&mut add);
        group.window_coverage.iter().for_each(&mut add);
    }
    hasher.finish()
}
