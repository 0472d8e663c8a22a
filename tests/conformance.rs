//! The conformance data of `tests/data/conformance/`, as it is, through the
//! `rankwatch replay` command.

mod common;

use common::{assert_reports_match, conformance, replay_json};
use serde_json::{json, Value};
use std::io::Write;

#[test]
fn replay_matches_the_expected_report() {
    let log = conformance("replay_small.jsonl");
    let report = replay_json(&[log.to_str().unwrap(), "--format", "json"], None);
    assert_reports_match(
        &report,
        &common::read_json(&conformance("replay_small.expected.json")),
    );
}

#[test]
fn replay_with_exponential_gain_matches_the_expected_report() {
    let log = conformance("replay_small.jsonl");
    let report = replay_json(
        &[
            log.to_str().unwrap(),
            "--format",
            "json",
            "--gain",
            "exponential",
        ],
        None,
    );
    assert_reports_match(
        &report,
        &common::read_json(&conformance("replay_small.expected_exponential.json")),
    );
}

#[test]
fn replay_reads_gzip_and_standard_input_alike() {
    let log = std::fs::read(conformance("replay_small.jsonl")).unwrap();
    let expected = common::read_json(&conformance("replay_small.expected.json"));
    let dir = tempfile::tempdir().unwrap();
    let gz = dir.path().join("log.jsonl.gz");
    let mut encoder = flate2::write::GzEncoder::new(
        std::fs::File::create(&gz).unwrap(),
        flate2::Compression::fast(),
    );
    encoder.write_all(&log).unwrap();
    encoder.finish().unwrap();
    assert_reports_match(
        &replay_json(&[gz.to_str().unwrap(), "--format", "json"], None),
        &expected,
    );
    assert_reports_match(
        &replay_json(&["-", "--format", "json"], Some(&log)),
        &expected,
    );
}

/// A one-list log whose items have the example's grades, credited by
/// interactions with explicit grades.
fn log_with_grades(grades: &[f64]) -> String {
    let items: Vec<String> = (0..grades.len()).map(|i| format!("item{i}")).collect();
    let mut lines = vec![
        json!({"impression": {"requestId": "r1", "userId": "u1", "itemIds": items,
        "time": "2026-11-01T10:00:00Z", "model": "m", "surface": "s"}}),
    ];
    for (i, grade) in grades.iter().enumerate().filter(|(_, g)| **g > 0.0) {
        lines.push(
            json!({"interaction": {"userId": "u1", "itemId": format!("item{i}"), "requestId": "r1",
            "type": "click", "time": "2026-11-01T10:00:01Z", "grade": grade}}),
        );
    }
    lines.iter().map(|l| format!("{l}\n")).collect()
}

#[test]
fn every_seed_example_passes_through_replay() {
    let seeds = common::read_json(&conformance("seed_examples.json"));
    let examples = seeds["examples"].as_array().unwrap();
    assert!(
        examples.len() >= 40,
        "the seed file lists {} examples",
        examples.len()
    );
    for example in examples {
        let grades: Vec<f64> = example["grades"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g.as_f64().unwrap())
            .collect();
        let k = example["k"].as_u64().unwrap().to_string();
        let mut args = vec![
            "-".to_owned(),
            "--format".into(),
            "json".into(),
            "--k".into(),
            k.clone(),
        ];
        for (key, value) in example["settings"].as_object().unwrap() {
            args.push(format!("--{}", key.replace('_', "-")));
            args.push(match value {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            });
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let report = replay_json(&args, Some(log_with_grades(&grades).as_bytes()));
        let key = format!("{}@{k}", example["metric"].as_str().unwrap());
        let got = report["groups"][0]["metrics"][&key]["all"]
            .as_f64()
            .unwrap();
        let expected = example["expected"].as_f64().unwrap();
        assert!(
            (got - expected).abs() <= 1e-9,
            "{}: {key} = {got}, expected {expected} ({args:?})",
            example["note"]
        );
    }
}

/// Events shed under a limit are not evaluated: the table says how many,
/// and which settings shed them, as the JSON report does. It had said
/// nothing of them, though they were most of the log.
#[test]
fn the_table_says_how_many_events_limits_shed() {
    let log: String = (0..4)
        .map(|i| format!("{{\"impression\":{{\"requestId\":\"r{i}\",\"userId\":\"u{i}\",\"itemIds\":[\"a\",\"b\"],\"time\":\"2026-11-01T10:00:00Z\"}}}}\n"))
        .collect();
    let output = common::replay(&["-", "--max-open-items", "3"], Some(log.as_bytes()));
    assert!(output.status.success());
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("shed under limits, not evaluated: impressions 3 (settings max_open_*, max_waiting_* and max_interactions_per_impression)"),
        "{stdout}"
    );
    let quiet = common::replay(&["-"], Some(log.as_bytes()));
    assert!(!String::from_utf8_lossy(&quiet.stdout).contains("shed"));
}

#[test]
fn bad_lines_are_reported_with_their_line_number_and_skipped() {
    let log = "{\"impression\":{\"requestId\":\"r1\",\"userId\":\"u1\",\"itemIds\":[\"a\"],\"time\":\"2026-11-01T10:00:00Z\"}}\nnot json\n";
    let output = common::replay(&["-"], Some(log.as_bytes()));
    assert!(output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("-:2: invalid_json"), "{stderr}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("rejected: invalid_json 1"), "{stdout}");
    assert!(
        stdout.contains("default        default              1"),
        "{stdout}"
    );
}
