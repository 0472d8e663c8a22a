//! The status page's routes on a real server: `/` and its assets come from
//! the binary under a policy that allows no other host, and `/api/status`
//! holds the replay's report of the events sent, since start and per window,
//! with the health figures and the settings in force.

mod common;

use common::server::{replay_as_served, sent_log, Server};
use common::{assert_reports_match, without_positions};
use serde_json::Value;

/// GETs `path` and returns the status, the headers in lower case and the body.
fn get_with_headers(server: &Server, path: &str) -> (u16, String, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(server.http).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    (
        head[9..12].parse().unwrap(),
        head.to_ascii_lowercase(),
        body.to_owned(),
    )
}

#[test]
fn the_page_and_its_assets_are_served_from_the_binary() {
    let server = Server::start(&[]);
    let (status, headers, body) = get_with_headers(&server, "/");
    assert_eq!(status, 200);
    assert!(headers.contains("content-type: text/html"), "{headers}");
    assert!(
        headers.contains("content-security-policy: default-src 'none'; script-src 'self';"),
        "{headers}"
    );
    assert!(body.contains(r#"<script src="status.js" defer></script>"#));
    assert!(
        !body.contains("http://") && !body.contains("https://"),
        "no other host"
    );
    for (path, kind) in [
        ("/status.js", "text/javascript"),
        ("/status.css", "text/css"),
    ] {
        let (status, headers, body) = get_with_headers(&server, path);
        assert_eq!(status, 200, "{path}");
        assert!(
            headers.contains(&format!("content-type: {kind}")),
            "{headers}"
        );
        assert!(!body.contains("https://"), "{path} asks no other host");
    }
    assert_eq!(get_with_headers(&server, "/nothing-here").0, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_status_holds_the_replay_report_health_and_settings() {
    let server = Server::exact(&["--k", "3,10"]);
    let lines = sent_log();
    server.stream_lines(&lines).await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("sent.jsonl");
    std::fs::write(&log, lines.join("\n") + "\n").unwrap();
    let expected = replay_as_served(&log, &["--k", "3,10"]);

    let (status, body) = server.get("/api/status");
    assert_eq!(status, 200);
    let status: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status["since_start"], expected);
    let windows = status["windows"].as_array().unwrap();
    let names: Vec<&str> = windows
        .iter()
        .map(|w| w["window"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["1m", "5m", "1h"]);
    assert_eq!(windows[0]["report"]["groups"], Value::Array(vec![]));
    assert_reports_match(&windows[2]["report"], &without_positions(&expected));

    let counters = &expected["counters"];
    let sum = |v: &Value| {
        v.as_object()
            .unwrap()
            .values()
            .map(|n| n.as_u64().unwrap())
            .sum::<u64>()
    };
    let accepted = counters["impressions"].as_u64().unwrap()
        + counters["interactions"].as_u64().unwrap()
        + sum(&counters["late"])
        + sum(&counters["duplicates"]);
    let health = &status["health"];
    assert_eq!(health["events_accepted"], accepted);
    assert_eq!(
        health["events_received"],
        accepted + sum(&counters["rejected"])
    );
    assert_eq!(health["open_impressions"], 0);
    assert_eq!(health["waiting_interactions"], 1, "the closing event");
    assert_eq!(health["groups"], 9);
    assert!(health["finalization_lag_s"].as_f64().unwrap() > 0.0);

    let settings = &status["settings"];
    assert_eq!(settings["k"], serde_json::json!([3, 10]));
    assert_eq!(settings["windows"], serde_json::json!(["1m", "5m", "1h"]));
    assert_eq!(settings["attribution_window"], "5m");
    assert_eq!(settings["grades"]["purchase"], 3.0);
    assert_eq!(settings["tls"], "off");
}

#[test]
fn the_server_keeps_the_pages_history_within_its_bounds() {
    // 36 s over 360 samples: one every 100 ms.
    let server = Server::start(&["--status-history", "36s"]);
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let (status, body) = server.get("/api/history");
    assert_eq!(status, 200);
    let samples: Vec<serde_json::Value> = serde_json::from_str(&body).unwrap();
    assert!(
        (5..=20).contains(&samples.len()),
        "{} samples",
        samples.len()
    );
    let times: Vec<f64> = samples
        .iter()
        .map(|s| s["time_s"].as_f64().unwrap())
        .collect();
    assert!(times.windows(2).all(|pair| pair[0] < pair[1]), "{times:?}");
    assert!(samples
        .iter()
        .all(|s| s["since_start"]["counters"].is_object()
            && s["settings"]["status_history"] == "36s"));

    let tight = Server::start(&["--status-history", "36s", "--max-status-history-bytes", "1"]);
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert_eq!(
        tight.get("/api/history"),
        (200, "[]".to_owned()),
        "no sample fits in 1 byte"
    );

    let off = Server::start(&["--status-history", "0s"]);
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(off.get("/api/history"), (200, "[]".to_owned()));
}
