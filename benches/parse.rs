//! The two edges: the replay log's `parse_line` (JSON decoding, validation,
//! id hashing) on an impression of 20 items and on an interaction, in lines
//! per second and in bytes per second; and the collector's `parse_batch`
//! (protobuf, ids borrowed) on a batch of 100 events, in events per second.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rankwatch::config::{EngineArgs, FileSettings};
use rankwatch::engine::EngineSettings;
use rankwatch::event::json::parse_line;
use rankwatch::event::wire::parse_batch;
use rankwatch::proto::{event::Kind, Event, EventBatch, Impression, Interaction};
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

/// A batch as the ingest scenario sends it: 100 events, every fifth an
/// impression of 20 items, the rest interactions with it.
fn encoded_batch() -> Vec<u8> {
    let time = Some(prost_types::Timestamp {
        seconds: 1_793_527_200,
        nanos: 125_000_000,
    });
    let events = (0..100)
        .map(|i| {
            // The impression that event i is, or answers.
            let list = i / 5 * 5;
            let kind = if i == list {
                Kind::Impression(Impression {
                    request_id: format!("req-5f3a9c1e-{list:06}"),
                    user_id: format!("user-{:07}", 48_213 + list),
                    item_ids: (0..20)
                        .map(|j| format!("item-{:06}", 104_729 * (list + j + 1) % 1_000_000))
                        .collect(),
                    time,
                    model: "v7".into(),
                    surface: "home".into(),
                    labels: Default::default(),
                    interleaving: None,
                })
            } else {
                Kind::Interaction(Interaction {
                    event_id: format!("evt-7d21c0aa-{i:06}"),
                    user_id: format!("user-{:07}", 48_213 + list),
                    item_id: format!("item-{:06}", 104_729 * (list + 1) % 1_000_000),
                    request_id: format!("req-5f3a9c1e-{list:06}"),
                    r#type: "click".into(),
                    time,
                    grade: None,
                })
            };
            Event { kind: Some(kind) }
        })
        .collect();
    prost::Message::encode_to_vec(&EventBatch {
        sequence: 1,
        events,
    })
}

/// Reads a batch of 100 events from its protobuf bytes, ids borrowed.
fn wire(c: &mut Criterion) {
    let bytes = encoded_batch();
    let mut group = c.benchmark_group("parse_batch");
    group
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .throughput(Throughput::Elements(100));
    group.bench_function("100_events", |b| {
        b.iter(|| {
            let batch = parse_batch(black_box(&bytes)).expect("the batch is well formed");
            black_box(batch);
        })
    });
    group.finish();
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

criterion_group!(benches, parse, wire);
criterion_main!(benches);
