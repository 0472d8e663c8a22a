//! The whole offline path: `replay()` of a JSON Lines log of 200,000 events
//! (read, parse and validate, join, evaluate, report), on one thread and on
//! two, in events per second.

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};
use rankwatch::config::{EngineArgs, FileSettings};
use rankwatch::engine::EngineSettings;
use rankwatch::event::{format_rfc3339, Nanos, NANOS_PER_SECOND};
use rankwatch::replay::{replay, ReplayOptions, ReplaySetup};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Events in the log.
const EVENTS: usize = 200_000;

/// Distinct users.
const USERS: u64 = 5_000;

/// Items per impression.
const LIST_LEN: usize = 20;

/// Items in the catalog that lists and feedback draw from.
const CATALOG: u64 = 100_000;

/// Time of the first event: 2026-11-01T10:00:00Z.
const START: Nanos = 1_793_527_200 * NANOS_PER_SECOND;

/// Nominal time between two events (100 events/s).
const EVENT_SPACING: Nanos = NANOS_PER_SECOND / 100;

/// Writes a log of `EVENTS` lines to `path`: 20% impressions of 20 items
/// and 80% interactions, mostly on an item of the user's latest list, half
/// of them naming its request id; times jitter by up to ±2 s.
fn write_log(path: &Path) -> std::io::Result<()> {
    let mut rng = fastrand::Rng::with_seed(42);
    let mut out = BufWriter::new(std::fs::File::create(path)?);
    let mut latest: Vec<Option<(u64, Vec<u64>)>> = vec![None; USERS as usize];
    for n in 0..EVENTS {
        let time = format_rfc3339(
            START
                + n as Nanos * EVENT_SPACING
                + rng.i64(-2 * NANOS_PER_SECOND..2 * NANOS_PER_SECOND),
        );
        let user = rng.u64(0..USERS);
        if rng.u8(0..5) == 0 {
            let request = rng.u64(..);
            let items = list(&mut rng);
            let item_ids: Vec<String> = items
                .iter()
                .map(|item| format!("\"item-{item}\""))
                .collect();
            let model = ["v7", "v8"][rng.usize(0..2)];
            writeln!(
                out,
                r#"{{"impression":{{"requestId":"req-{request:016x}","userId":"user-{user}","itemIds":[{}],"time":"{time}","model":"{model}","surface":"home"}}}}"#,
                item_ids.join(",")
            )?;
            latest[user as usize] = Some((request, items));
            continue;
        }
        let (request, item) = match &latest[user as usize] {
            Some((request, items)) if rng.u8(0..10) < 7 => {
                (Some(*request), items[rng.usize(0..items.len())])
            }
            _ => (None, rng.u64(0..CATALOG)),
        };
        let request_field = match request.filter(|_| rng.bool()) {
            Some(request) => format!(r#","requestId":"req-{request:016x}""#),
            None => String::new(),
        };
        let kind = ["click", "click", "click", "add_to_cart", "purchase"][rng.usize(0..5)];
        writeln!(
            out,
            r#"{{"interaction":{{"eventId":"evt-{:016x}","userId":"user-{user}","itemId":"item-{item}"{request_field},"type":"{kind}","time":"{time}"}}}}"#,
            rng.u64(..)
        )?;
    }
    out.flush()
}

/// `LIST_LEN` distinct items from the catalog.
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

/// Replays the log with the default settings on 1 and on 2 parser threads.
fn bench_replay(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temp dir");
    let log: PathBuf = dir.path().join("events.jsonl");
    write_log(&log).expect("write the log");
    let settings = EngineSettings::resolve(&EngineArgs::default(), &FileSettings::default())
        .expect("the default settings are valid");
    let check = replay(
        std::slice::from_ref(&log),
        ReplaySetup::new(&settings),
        ReplayOptions::default(),
        |_| {},
        |_| {},
    )
    .expect("replay")
    .report;
    assert!(
        check.counters.rejected.is_empty(),
        "the generated log is valid: {:?}",
        check.counters
    );
    let mut group = c.benchmark_group("replay");
    group
        .throughput(Throughput::Elements(EVENTS as u64))
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_secs(2))
        .measurement_time(Duration::from_secs(8));
    for threads in [1, 2] {
        let options = ReplayOptions {
            threads,
            ..ReplayOptions::default()
        };
        group.bench_function(format!("threads_{threads}"), |b| {
            b.iter(|| {
                replay(
                    std::slice::from_ref(&log),
                    ReplaySetup::new(&settings),
                    options,
                    |_| {},
                    |_| {},
                )
                .expect("replay")
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench_replay);
criterion_main!(benches);
