//! The replay log's edge: `parse_line` (JSON decoding, validation, id
//! hashing) on an impression of 20 items and on an interaction, in lines
//! per second and in bytes per second.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rankwatch::config::{EngineArgs, EngineSettings, FileSettings};
use rankwatch::event::json::parse_line;
use std::hint::black_box;
use std::time::Duration;

/// An impression as a recommender logs it: 20 items, model and surface set.
fn impression_line() -> String {
    let items: Vec<String> = (0..20)
        .map(|i| format!("\"item-{:06}\"", 104_729 * (i + 1) % 1_000_000))
        .collect();
    format!(
        r#"{{"impression":{{"requestId":"req-5f3a9c1e-000123","userId":"user-0048213","itemIds":[{}],"time":"2026-11-01T10:00:00.125Z","model":"v7","surface":"home"}}}}"#,
        items.join(",")
    )
}

/// An interaction naming its impression, with an event id for retries.
fn interaction_line() -> String {
    r#"{"interaction":{"eventId":"evt-7d21c0aa-000456","userId":"user-0048213","itemId":"item-418916","requestId":"req-5f3a9c1e-000123","type":"click","time":"2026-11-01T10:00:04.250Z"}}"#.to_owned()
}

/// Parses each kind of line, once per iteration, under both throughputs.
fn parse(c: &mut Criterion) {
    let settings = EngineSettings::resolve(&EngineArgs::default(), &FileSettings::default())
        .expect("the default settings are valid");
    let validator = settings.validator(None);
    let lines = [
        ("impression", impression_line()),
        ("interaction", interaction_line()),
    ];
    for (group_name, bytes) in [("parse_line", false), ("parse_line_bytes", true)] {
        let mut group = c.benchmark_group(group_name);
        group
            .warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(3));
        for (name, line) in &lines {
            group.throughput(if bytes {
                Throughput::Bytes(line.len() as u64)
            } else {
                Throughput::Elements(1)
            });
            group.bench_function(*name, |b| {
                b.iter(|| {
                    let event = parse_line(black_box(line), &validator).expect("the line is valid");
                    black_box(event);
                })
            });
        }
        group.finish();
    }
}

criterion_group!(benches, parse);
criterion_main!(benches);
