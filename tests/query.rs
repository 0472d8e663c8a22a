//! `rankwatch query` against a real server: the report it prints, as JSON
//! and as a table, is the one `rankwatch replay` gives of the same events.

mod common;

use common::server::{event_from_json, Server};
use common::{assert_reports_match, conformance, replay, replay_json};
use rankwatch::proto::{self, EventBatch};
use serde_json::Value;
use std::process::{Command, Output};

/// An interaction 20 minutes after the log, for a user nobody else has: it
/// moves the finalization frontier past every list of the log (and within
/// the last hour of it), then waits itself.
const CLOSING: &str = r#"{"interaction":{"userId":"closing-user","itemId":"closing-item","type":"click","time":"2026-11-01T10:30:00Z"}}"#;

/// The conformance log's lines that are JSON (the others cannot be sent), then the closing event.
fn log_lines() -> Vec<String> {
    let log = std::fs::read_to_string(conformance("replay_small.jsonl")).unwrap();
    log.lines()
        .filter(|line| event_from_json(line).is_some())
        .chain([CLOSING])
        .map(str::to_owned)
        .collect()
}

/// Streams `lines` to `server` over one Ingest stream, in batches of 50.
async fn stream(server: &Server, lines: &[String]) {
    let events: Vec<proto::Event> = lines.iter().filter_map(|l| event_from_json(l)).collect();
    let batches: Vec<EventBatch> = events
        .chunks(50)
        .enumerate()
        .map(|(i, chunk)| EventBatch {
            sequence: i as u64 + 1,
            events: chunk.to_vec(),
        })
        .collect();
    let count = batches.len();
    let mut acks = server
        .collector()
        .await
        .ingest(tokio_stream::iter(batches))
        .await
        .unwrap()
        .into_inner();
    let mut received = 0;
    while acks.message().await.unwrap().is_some() {
        received += 1;
    }
    assert_eq!(received, count, "one ack per batch");
}

/// Runs `rankwatch query ARGS`.
fn query(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rankwatch"))
        .arg("query")
        .args(args)
        .output()
        .unwrap()
}

/// Runs `rankwatch query ARGS` and parses the JSON it prints.
fn query_json(args: &[&str]) -> Value {
    let output = query(args);
    assert!(
        output.status.success(),
        "query failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_prints_the_replay_report_of_the_same_events() {
    let server = Server::start(&["--wall-clock-advance", "false"]);
    let lines = log_lines();
    stream(&server, &lines).await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("sent.jsonl");
    std::fs::write(&log, lines.join("\n") + "\n").unwrap();
    let log = log.to_str().unwrap();

    let mut expected = replay_json(&["--format", "json", log], None);
    // The end of a replay gives up the closing event; the server still waits for its impression.
    let no_impression = &mut expected["counters"]["unattributed"]["no_impression"];
    *no_impression = (no_impression.as_u64().unwrap() - 1).into();
    assert_eq!(expected["groups"].as_array().unwrap().len(), 9);

    let addr = server.grpc.to_string();
    let since_start = query_json(&["--grpc-addr", &addr, "--format", "json"]);
    assert_eq!(since_start, expected);

    let last_hour = query_json(&["--grpc-addr", &addr, "--window", "1h", "--format", "json"]);
    // Every list lies in the last hour; a window sums its buckets in another order.
    assert_reports_match(&last_hour, &expected);
    let last_minute = query_json(&["--grpc-addr", &addr, "--window", "1m", "--format", "json"]);
    assert_eq!(last_minute["counters"], expected["counters"]);
    assert_eq!(
        last_minute["groups"],
        Value::Array(vec![]),
        "no list in the last minute"
    );

    let table = query(&["--grpc-addr", &addr]);
    assert!(table.status.success());
    let replayed = replay(&[log], None);
    assert!(replayed.status.success());
    let rows = |output: &Output| {
        let text = String::from_utf8(output.stdout.clone()).unwrap();
        text.lines().skip(1).map(str::to_owned).collect::<Vec<_>>()
    };
    assert_eq!(
        rows(&table),
        rows(&replayed),
        "the same table below the counters"
    );
    // rejected, a blank line, the header, 4 Ks of 9 groups, a blank line, the note
    assert_eq!(rows(&table).len(), 3 + 9 * 4 + 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unconfigured_window_is_refused_with_the_configured_ones() {
    let server = Server::start(&[]);
    let output = query(&["--grpc-addr", &server.grpc.to_string(), "--window", "2m"]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("InvalidArgument") || stderr.contains("invalid argument"),
        "{stderr}"
    );
    assert!(stderr.contains("configured: 1m, 5m, 1h"), "{stderr}");
}
