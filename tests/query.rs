//! `rankwatch query` against a real server: the report it prints, as JSON
//! and as a table, is the one `rankwatch replay` gives of the same events.

mod common;

use common::server::{replay_as_served, sent_log, Server};
use common::{assert_reports_match, replay, without_positions};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

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
    let server = Server::exact(&[]);
    let lines = sent_log();
    server.stream_lines(&lines).await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("sent.jsonl");
    std::fs::write(&log, lines.join("\n") + "\n").unwrap();
    let log = log.to_str().unwrap();

    let expected = replay_as_served(Path::new(log), &[]);
    assert_eq!(expected["groups"].as_array().unwrap().len(), 9);

    let addr = server.grpc.to_string();
    let since_start = query_json(&["--grpc-addr", &addr, "--format", "json"]);
    assert_eq!(since_start, expected);

    let last_hour = query_json(&["--grpc-addr", &addr, "--window", "1h", "--format", "json"]);
    // Every list lies in the last hour; a window sums its buckets in another
    // order, and position curves are kept since start only.
    assert_reports_match(&last_hour, &without_positions(&expected));
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
    // rejected, a blank line, the header, 4 Ks of 9 groups, a blank line, the
    // note; then coverage: a blank line, the header, 9 groups, a blank line, the note
    assert_eq!(rows(&table).len(), 3 + 9 * 4 + 2 + (2 + 9 + 2));
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
