//! The join: `Engine::apply` on a stream of already validated events, 80%
//! interactions and 20% impressions of 20 items, in events per second. Each
//! iteration runs a fresh engine over the whole stream and finishes it, so
//! every list is also evaluated and aggregated. A second group measures the
//! cost per event in steady state against the size of the open state and
//! the number of lists finalized before.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use rankwatch::config::{EngineArgs, FileSettings};
use rankwatch::engine::EngineSettings;
use rankwatch::event::{id_hash, Event, Impression, Interaction, Nanos, NANOS_PER_SECOND};
use rankwatch::join::Engine;
use std::borrow::Cow;
use std::hint::black_box;
use std::time::{Duration, Instant};

/// The server's allocator, so that allocation costs what it costs there.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Events in the stream.
const EVENTS: usize = 200_000;

/// Distinct users; with an impression every 50 ms on average, a user sees
/// a new list every few minutes, so most feedback finds its list still open.
const USERS: u64 = 5_000;

/// Items per impression.
const LIST_LEN: usize = 20;

/// Items in the catalog that lists and feedback draw from.
const CATALOG: u64 = 100_000;

/// Time of the first event: 2026-11-01T10:00:00Z.
const START: Nanos = 1_793_527_200 * NANOS_PER_SECOND;

/// Nominal time between two events (100 events/s).
const EVENT_SPACING: Nanos = NANOS_PER_SECOND / 100;

/// A synthetic stream: users see lists and, a little later, interact with
/// items of their latest list (mostly) or with others; half the
/// interactions name their list's request id. Times jitter by up to ±2 s,
/// so events arrive slightly out of order, as from several senders.
struct Stream {
    rng: fastrand::Rng,
    /// Each user's id as the engine sees it: the hash of `user-N`.
    users: Vec<u64>,
    /// Each user's latest list: its request id and items.
    latest: Vec<Option<(u64, Vec<u64>)>>,
    spacing: Nanos,
    next: Nanos,
}

impl Stream {
    /// A stream over `users` users, one event every `spacing` of event time.
    fn new(users: u64, spacing: Nanos) -> Self {
        Self {
            rng: fastrand::Rng::with_seed(42),
            users: (0..users).map(|n| id_hash(&format!("user-{n}"))).collect(),
            latest: vec![None; users as usize],
            spacing,
            next: START,
        }
    }

    fn event(&mut self) -> Event<'static> {
        let rng = &mut self.rng;
        let models = ["v7", "v8"];
        let time = self.next + rng.i64(-2 * NANOS_PER_SECOND..2 * NANOS_PER_SECOND);
        self.next += self.spacing;
        let index = rng.usize(0..self.users.len());
        let user = self.users[index];
        if rng.u8(0..5) == 0 {
            let request = rng.u64(..);
            let items = list(rng);
            self.latest[index] = Some((request, items.clone()));
            return Event::Impression(Box::new(Impression {
                request,
                user,
                items,
                time,
                model: Cow::Borrowed(models[rng.usize(0..models.len())]),
                surface: Cow::Borrowed("home"),
                segments: Vec::new(),
                interleaving: None,
            }));
        }
        let (request, item) = match &self.latest[index] {
            Some((request, items)) if rng.u8(0..10) < 7 => {
                (Some(*request), items[rng.usize(0..items.len())])
            }
            _ => (None, rng.u64(0..CATALOG)),
        };
        Event::Interaction(Interaction {
            event: Some(rng.u64(..)),
            user,
            item,
            request: request.filter(|_| rng.bool()),
            time,
            grade: [1.0, 1.0, 1.0, 2.0, 3.0][rng.usize(0..5)],
            kind: 0,
        })
    }

    /// The next `count` events.
    fn take(&mut self, count: usize) -> Vec<Event<'static>> {
        (0..count).map(|_| self.event()).collect()
    }
}

/// `LIST_LEN` distinct items from the catalog, as validation guarantees.
fn list(rng: &mut fastrand::Rng) -> Vec<u64> {
    let mut items = Vec::with_capacity(LIST_LEN);
    while items.len() < LIST_LEN {
        let item = rng.u64(0..CATALOG);
        if !items.contains(&item) {
            items.push(item);
        }
    }
    items
}

/// Runs the stream through a fresh engine keeping rolling windows of `windows`.
fn bench_windows(c: &mut Criterion, name: &str, windows: &[Duration]) {
    let settings = EngineSettings::resolve(&EngineArgs::default(), &FileSettings::default())
        .expect("the default settings are valid");
    let events = Stream::new(USERS, EVENT_SPACING).take(EVENTS);
    let mut group = c.benchmark_group("engine_apply");
    group
        .throughput(Throughput::Elements(EVENTS as u64))
        .sample_size(20)
        .measurement_time(Duration::from_secs(5));
    group.bench_function(name, |b| {
        b.iter_batched(
            || events.clone(),
            |events| {
                let mut engine = Engine::new(settings.join(windows), settings.evaluator());
                for event in events {
                    engine.apply(black_box(event));
                }
                engine.finish();
                engine
            },
            BatchSize::PerIteration,
        )
    });
    group.finish();
}

/// As in replay (no rolling windows) and as in `serve` (windows 1m, 5m, 1h).
fn apply(c: &mut Criterion) {
    bench_windows(c, "replay", &[]);
    let serve_windows = [60, 300, 3600].map(Duration::from_secs);
    bench_windows(c, "serve_windows", &serve_windows);
}

/// Events applied per measured iteration of the scaling benchmark.
const STEADY_CHUNK: usize = 10_000;

/// Cost per event in steady state against the open state's size: the
/// stream has one user per open list and an event every millisecond (200
/// lists a second), and the window keeps `open` lists open, so lists close
/// as fast as they open. Events go in batches of 100, each prefetched
/// first, as in the server. The engine lives across iterations and keeps
/// finalizing; the last case has first finalized 1,000,000 more lists, which
/// must cost nothing per event.
fn scaling(c: &mut Criterion) {
    let settings = EngineSettings::resolve(&EngineArgs::default(), &FileSettings::default())
        .expect("the default settings are valid");
    let spacing = NANOS_PER_SECOND / 1_000;
    let mut group = c.benchmark_group("engine_steady_state");
    group
        .throughput(Throughput::Elements(STEADY_CHUNK as u64))
        .sample_size(20)
        .measurement_time(Duration::from_secs(5));
    for (name, open, extra_lists) in [
        ("open_10000", 10_000, 0),
        ("open_100000", 100_000, 0),
        ("open_1000000", 1_000_000, 0),
        (
            "open_100000_after_1000000_more_finalized",
            100_000,
            1_000_000,
        ),
    ] {
        let mut join = settings.join(&[]);
        join.allowed_lateness = 5 * NANOS_PER_SECOND;
        join.attribution_window = open as Nanos / 200 * NANOS_PER_SECOND - join.allowed_lateness;
        join.max_open_impressions = 2 * open as usize;
        let mut engine = Engine::new(join, settings.evaluator());
        let mut stream = Stream::new(open, spacing);
        // Two windows' worth of events reach the steady state.
        for event in stream.take(10 * open as usize + 5 * extra_lists) {
            engine.apply(event);
        }
        let held = engine.open_impressions() as f64 / open as f64;
        assert!(
            (0.9..1.1).contains(&held),
            "{name}: {held} of the intended open lists"
        );
        group.bench_function(name, |b| {
            b.iter_custom(|iterations| {
                let mut spent = Duration::ZERO;
                for _ in 0..iterations {
                    let batches: Vec<_> =
                        (0..STEADY_CHUNK / 100).map(|_| stream.take(100)).collect();
                    let started = Instant::now();
                    for batch in batches {
                        for event in &batch {
                            engine.prefetch(event.user());
                        }
                        for event in batch {
                            engine.apply(black_box(event));
                        }
                    }
                    spent += started.elapsed();
                }
                spent
            })
        });
    }
    group.finish();
}

criterion_group!(benches, apply, scaling);
criterion_main!(benches);
