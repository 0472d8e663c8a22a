//! A gRPC `EventBatch`, as arbitrary bytes, ingested as the engine thread
//! ingests it: read with `parse_batch`, every event validated with
//! `Validator::view`, the valid ones applied to a fresh engine and the
//! others counted as rejected. Tight limits (4 open impressions, 4 waiting
//! interactions, 2 groups) put the shedding and the overflow group within
//! reach of small inputs.
//!
//! It must never panic, and the accounting must add up: every event of the
//! batch has one outcome (accepted, rejected with a known reason, or shed),
//! the engine's counters agree with the outcomes, and received = accepted +
//! rejected + shed. Then the engine finishes (nothing stays open or
//! waiting), and the `/metrics` text of its snapshot has only comment and
//! sample lines, whatever labels the batch brought; the report of
//! `GetMetrics` is built too.
//!
//! Input layout as in `proto_event`: 8 bytes little-endian wall clock (top
//! bit dropped), then the encoded batch.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rankwatch::config::{EngineArgs, FileSettings};
use rankwatch::engine::EngineSettings;
use rankwatch::event::{wire::parse_batch, Nanos, Validator};
use rankwatch::export::{prometheus::render, Report, Snapshot, Text};
use rankwatch::join::{Engine, JoinSettings};
use rankwatch_fuzz::{check_accepted, check_rejection, InputPath};
use std::sync::LazyLock;
use std::time::Duration;

struct Fixture {
    settings: EngineSettings,
    join: JoinSettings,
    validator: Validator,
}

/// Default settings but for the tight limits, one 60 s rolling window and
/// the server's 5-minute `max_future_skew`.
static FIXTURE: LazyLock<Fixture> = LazyLock::new(|| {
    let settings = EngineSettings::resolve(&EngineArgs::default(), &FileSettings::default())
        .expect("the default settings resolve");
    let mut join = settings.join(&[Duration::from_secs(60)]);
    join.max_open_impressions = 4;
    join.max_waiting_interactions = 4;
    join.max_groups = 2;
    let validator = settings.validator(Some(Duration::from_secs(300)));
    Fixture {
        settings,
        join,
        validator,
    }
});

/// What became of the events of one batch.
#[derive(Default)]
struct Outcomes {
    accepted: u64,
    rejected: u64,
    shed: u64,
}

fuzz_target!(|bytes: &[u8]| {
    let fixture = &*FIXTURE;
    let Some((clock, encoded)) = bytes.split_first_chunk::<8>() else {
        return;
    };
    let now = (u64::from_le_bytes(*clock) >> 1) as Nanos;
    let Ok(view) = parse_batch(encoded) else {
        return;
    };
    let mut engine = Engine::new(fixture.join.clone(), fixture.settings.evaluator());
    let events: Vec<_> = view
        .events
        .iter()
        .map(|event| fixture.validator.view(event, &view, now))
        .collect();
    for event in events.iter().flatten() {
        engine.prefetch(event.user());
    }
    let mut outcomes = Outcomes::default();
    for event in events {
        match event {
            Ok(event) => {
                check_accepted(&event, &fixture.validator);
                match engine.apply(event) {
                    None => outcomes.accepted += 1,
                    Some(_) => outcomes.shed += 1,
                }
            }
            Err(rejection) => {
                check_rejection(&rejection, InputPath::Wire);
                engine.reject(rejection.reason);
                outcomes.rejected += 1;
            }
        }
    }
    let counters = engine.counters();
    assert_eq!(counters.accepted(), outcomes.accepted, "accepted");
    assert_eq!(
        counters.rejected.values().sum::<u64>(),
        outcomes.rejected,
        "rejected"
    );
    assert_eq!(
        counters.shed_impressions + counters.shed_interactions,
        outcomes.shed,
        "shed"
    );
    assert_eq!(
        counters.received(),
        view.events.len() as u64,
        "received is not accepted + rejected + shed"
    );
    assert!(
        engine.open_impressions() <= fixture.join.max_open_impressions,
        "{} impressions open",
        engine.open_impressions()
    );
    assert!(
        engine.group_names().len() <= fixture.join.max_groups + 1,
        "{} groups past max_groups and the overflow group",
        engine.group_names().len()
    );
    engine.finish();
    assert_eq!(engine.open_impressions(), 0, "open after finish");
    assert_eq!(engine.waiting_interactions(), 0, "waiting after finish");
    let snapshot = Snapshot::of(&engine, None);
    let mut text = Text::default();
    render(&mut text, &snapshot, &[Duration::from_secs(60)], now);
    let text = text.into_pieces().concat();
    for line in String::from_utf8(text).expect("UTF-8").lines() {
        assert!(
            line.starts_with("# ") || line.starts_with("rankwatch_"),
            "a /metrics line that is neither a comment nor a sample: {:?}",
            line.chars().take(200).collect::<String>()
        );
    }
    let _ = Report::since_start(&engine, &fixture.settings.report_config());
});
