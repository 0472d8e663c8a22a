//! The join: `Engine::apply` on a stream of already validated events, 80%
//! interactions and 20% impressions of 20 items, in events per second. Each
//! iteration runs a fresh engine over the whole stream and finishes it, so
//! every list is also evaluated and aggregated.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use rankwatch::config::{EngineArgs, EngineSettings, FileSettings};
use rankwatch::event::{Event, Impression, Interaction, Nanos, NANOS_PER_SECOND};
use rankwatch::join::Engine;
use std::borrow::Cow;
use std::hint::black_box;
use std::time::Duration;

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
fn stream() -> Vec<Event<'static>> {
    let mut rng = fastrand::Rng::with_seed(42);
    let mut latest: Vec<Option<(u64, Vec<u64>)>> = vec![None; USERS as usize];
    let models = ["v7", "v8"];
    (0..EVENTS)
        .map(|n| {
            let time = START
                + n as Nanos * EVENT_SPACING
                + rng.i64(-2 * NANOS_PER_SECOND..2 * NANOS_PER_SECOND);
            let user = rng.u64(0..USERS);
            if rng.u8(0..5) == 0 {
                let request = rng.u64(..);
                let items = list(&mut rng);
                latest[user as usize] = Some((request, items.clone()));
                return Event::Impression(Impression {
                    request,
                    user,
                    items,
                    time,
                    model: Cow::Borrowed(models[rng.usize(0..models.len())]),
                    surface: Cow::Borrowed("home"),
                });
            }
            let (request, item) = match &latest[user as usize] {
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
            })
        })
        .collect()
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
    let events = stream();
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

criterion_group!(benches, apply);
criterion_main!(benches);
