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

/// `query --format json` orders comparisons as replay's JSON and
/// `GetMetrics` do (the metric key as text: `ndcg@10` before `ndcg@5`); only
/// the table puts cutoffs in the order of numbers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_gives_comparisons_in_the_order_of_replays_json() {
    let compared = ["--control-model", "good", "--k", "5,10"];
    let server = Server::exact(&compared);
    let lines = sent_log();
    server.stream_lines(&lines).await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("sent.jsonl");
    std::fs::write(&log, lines.join("\n") + "\n").unwrap();
    let expected = replay_as_served(&log, &compared);
    let metrics: Vec<&str> = expected["comparisons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["metric"].as_str().unwrap())
        .collect();
    assert_eq!(metrics[..2], ["dcg@10", "dcg@5"], "{metrics:?}");

    let addr = server.grpc.to_string();
    let all = query_json(&["--grpc-addr", &addr, "--format", "json"]);
    assert_eq!(all["comparisons"], expected["comparisons"]);
    let kept = query_json(&["--grpc-addr", &addr, "--format", "json", "--metric", "ndcg"]);
    let ndcg: Vec<&Value> = expected["comparisons"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["metric"].as_str().unwrap().starts_with("ndcg@"))
        .collect();
    assert_eq!(
        ndcg[..2].iter().map(|c| &c["metric"]).collect::<Vec<_>>(),
        ["ndcg@10", "ndcg@5"]
    );
    assert_eq!(kept["comparisons"], serde_json::json!(ndcg));
}

/// A server that cannot be reached is told once per cause: the transport's
/// errors wrap errors that say the same ("transport error: transport error:
/// tcp connect error: tcp connect error: …").
#[test]
fn a_server_that_cannot_be_reached_is_told_without_repeats() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = closed.local_addr().unwrap().to_string();
    drop(closed);
    let output = query(&["--grpc-addr", &address, "--timeout", "5s"]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8(output.stderr).unwrap();
    let causes: Vec<&str> = stderr.trim_end().split(": ").collect();
    assert!(causes.len() >= 3, "{stderr}");
    assert_eq!(
        causes[..2],
        ["rankwatch", &format!("connecting to {address}")]
    );
    assert!(causes.windows(2).all(|pair| pair[0] != pair[1]), "{stderr}");
    assert!(stderr.contains("Connection refused"), "{stderr}");
}

/// The address may be given as a URL, as `loadgen --target` takes it; a
/// timeout of zero, which no answer can meet, is refused as a bad setting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_address_may_be_a_url_and_a_zero_timeout_is_refused() {
    let server = Server::start(&[]);
    let url = format!("http://{}", server.grpc);
    let output = query(&["--grpc-addr", &url, "--format", "json"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let output = query(&["--grpc-addr", &server.grpc.to_string(), "--timeout", "0s"]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--timeout"), "{stderr}");
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_larger_than_four_mebibytes_is_printed_whole() {
    use common::server::event_from_json;
    let server = Server::exact(&["--max-groups", "4000", "--control-model", "m0"]);
    let mut events = Vec::new();
    for i in 0..3000 {
        let (model, surface) = (i % 100, i / 100);
        events.push(event_from_json(&format!(
            r#"{{"impression":{{"requestId":"r{i}","userId":"u{i}","itemIds":["a","b"],"model":"m{model}","surface":"s{surface}","time":"2026-11-01T10:00:00Z"}}}}"#
        )).unwrap());
        events.push(event_from_json(&format!(
            r#"{{"interaction":{{"userId":"u{i}","itemId":"b","requestId":"r{i}","type":"click","time":"2026-11-01T10:00:01Z"}}}}"#
        )).unwrap());
    }
    events.push(event_from_json(
        r#"{"impression":{"requestId":"z","userId":"z","itemIds":["x"],"model":"closing","time":"2026-11-02T10:00:00Z"}}"#,
    ).unwrap());
    let mut client = server.collector().await;
    let ack = client
        .ingest_batch(rankwatch::proto::EventBatch {
            sequence: 1,
            events,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(ack.accepted, 6001);
    let output = query(&["--grpc-addr", &server.grpc.to_string(), "--format", "json"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        output.stdout.len() > 4 << 20,
        "a report of {} bytes",
        output.stdout.len()
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["groups"].as_array().unwrap().len(), 3000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_keeps_only_the_models_metrics_and_cutoffs_asked_for() {
    let server = Server::exact(&[]);
    server.stream_lines(&sent_log()).await;
    let addr = server.grpc.to_string();
    let all = query_json(&["--grpc-addr", &addr, "--format", "json"]);
    let model = all["groups"][0]["model"].as_str().unwrap().to_owned();
    let kept = query_json(&[
        "--grpc-addr",
        &addr,
        "--format",
        "json",
        "--model",
        &model,
        "--metric",
        "ndcg,mrr",
        "--k",
        "10",
    ]);
    let groups = kept["groups"].as_array().unwrap();
    assert!(!groups.is_empty());
    assert!(groups.iter().all(|g| g["model"] == model.as_str()));
    for group in groups {
        let keys: Vec<&str> = group["metrics"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(keys, ["mrr@10", "ndcg@10"]);
    }
    assert_eq!(kept["config"]["k"], serde_json::json!([10]));
    let table = query(&["--grpc-addr", &addr, "--metric", "ndcg", "--k", "10"]);
    let table = String::from_utf8(table.stdout).unwrap();
    assert!(table.contains("ndcg") && !table.contains("mrr"), "{table}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_of_a_report_with_no_list_yet_says_why() {
    let server = Server::start(&[]);
    let output = query(&["--grpc-addr", &server.grpc.to_string()]);
    assert!(output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("no list is finalized yet") && stderr.contains("330 s"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_server_says_how_many_lists_are_open_and_when_the_first_is_finalized() {
    let server = Server::start(&["--attribution-window", "60s", "--allowed-lateness", "10s"]);
    let now = rankwatch::clock::wall_clock();
    let time = rankwatch::event::format_rfc3339(now);
    let lines: Vec<String> = (0..3)
        .map(|i| format!(r#"{{"impression":{{"requestId":"r{i}","userId":"u{i}","itemIds":["a","b"],"time":"{time}"}}}}"#))
        .collect();
    server.stream_lines(&lines).await;

    let output = query(&["--grpc-addr", &server.grpc.to_string()]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let said = stderr
        .split("3 lists are open; the first is finalized in about ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|seconds| seconds.parse::<f64>().ok());
    assert!(said.is_some_and(|s| (60.0..=70.0).contains(&s)), "{stderr}");

    let (status, body) = server.get("/api/status");
    assert_eq!(status, 200);
    let health = &serde_json::from_str::<Value>(&body).unwrap()["health"];
    assert_eq!(health["open_impressions"], 3);
    let first = health["first_finalization_in_s"].as_f64().unwrap();
    assert!((60.0..=70.0).contains(&first), "{health}");

    let logged = server
        .log
        .recv_timeout(std::time::Duration::from_secs(5))
        .into_iter()
        .chain(server.log.try_iter())
        .find(|line| line.contains("lists open"));
    let logged = logged.expect("the server logs when the first lists are open");
    assert!(
        logged.contains("open_impressions=3") && logged.contains("first_finalized_in_s="),
        "{logged}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filter_that_can_never_match_is_refused_and_one_that_matches_nothing_yet_is_said() {
    let server = Server::exact(&[]);
    server.stream_lines(&sent_log()).await;
    let addr = server.grpc.to_string();

    let typo = query(&["--grpc-addr", &addr, "--metric", "ndgc"]);
    let stderr = String::from_utf8_lossy(&typo.stderr);
    assert!(!typo.status.success(), "{stderr}");
    assert!(
        stderr.contains("\"ndgc\"") && stderr.contains("ndcg") && stderr.contains("r_precision"),
        "{stderr}"
    );

    let cutoff = query(&["--grpc-addr", &addr, "--k", "7"]);
    let stderr = String::from_utf8_lossy(&cutoff.stderr);
    assert!(!cutoff.status.success(), "{stderr}");
    assert!(
        stderr.contains("7") && stderr.contains("1, 5, 10, 20"),
        "{stderr}"
    );

    let unseen = query(&[
        "--grpc-addr",
        &addr,
        "--model",
        "nomodel",
        "--segment",
        "country=xx",
        "--segment",
        "city=\u{1b}[2J",
    ]);
    let stderr = String::from_utf8_lossy(&unseen.stderr);
    assert!(unseen.status.success(), "{stderr}");
    assert!(
        stderr.contains("no group has model \"nomodel\"")
            && stderr.contains("no group has segment country=\"xx\"")
            // A value that would clear the terminal is shown escaped.
            && stderr.contains(r#"no group has segment city="\u{1b}[2J""#)
            && !stderr.contains('\u{1b}'),
        "{stderr}"
    );

    let beyond = query(&["--grpc-addr", &addr, "--metric", "err,ndcg"]);
    let stderr = String::from_utf8_lossy(&beyond.stderr);
    assert!(beyond.status.success(), "{stderr}");
    assert!(stderr.contains("--format json gives err"), "{stderr}");
}

/// A model whose lists are all still open is said to have no group yet,
/// with the open lists; a segment asked of a server without segment labels
/// is said to need them. Both had been "no group has ...", as of a typo.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_not_seen_yet_and_a_segment_without_labels_are_told_why() {
    let server = Server::exact(&[]);
    let lines = [
        r#"{"impression":{"requestId":"r1","userId":"u1","itemIds":["a"],"time":"2026-11-01T10:00:00Z","model":"old"}}"#,
        r#"{"impression":{"requestId":"r2","userId":"u2","itemIds":["a"],"time":"2026-11-01T11:00:00Z","model":"v7"}}"#,
    ];
    server.stream_lines(&lines.map(str::to_owned)).await;
    let addr = server.grpc.to_string();
    let asked = query(&["--grpc-addr", &addr, "--model", "v7"]);
    let stderr = String::from_utf8_lossy(&asked.stderr);
    assert!(
        stderr.contains(
            "no group has model \"v7\" yet: a group appears when its first list is finalized (open lists: 1)"
        ),
        "{stderr}"
    );
    let asked = query(&["--grpc-addr", &addr, "--segment", "country=de"]);
    let stderr = String::from_utf8_lossy(&asked.stderr);
    assert!(
        stderr.contains("no group has segment country=\"de\": the server's groups have no segment labels (its segment_labels setting names none)"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_that_holds_no_list_is_told_apart_from_no_list_at_all() {
    let server = Server::start(&[
        "--attribution-window",
        "1s",
        "--allowed-lateness",
        "0s",
        "--windows",
        "1s",
    ]);
    let time = rankwatch::event::format_rfc3339(rankwatch::clock::wall_clock());
    let line = format!(
        r#"{{"impression":{{"requestId":"r1","userId":"u1","itemIds":["a","b"],"time":"{time}"}}}}"#
    );
    server.stream_lines(&[line]).await;
    let addr = server.grpc.to_string();
    // The list is finalized as the wall clock passes its window, then leaves the last second.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let output = loop {
        let since_start = query_json(&["--grpc-addr", &addr, "--format", "json"]);
        let window = query(&["--grpc-addr", &addr, "--window", "1s", "--format", "json"]);
        let report: Value = serde_json::from_slice(&window.stdout).unwrap_or_default();
        if since_start["groups"][0]["lists"] == 1 && report["groups"] == serde_json::json!([]) {
            break window;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{since_start} {report}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("no list was finalized in the last 1s")
            && !stderr.contains("no list is finalized yet"),
        "{stderr}"
    );
}

/// A server whose every list was finalized, in groups since retired as
/// idle, holds no figures: the query says so, not that no list is
/// finalized yet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_after_every_group_retired_says_so() {
    let server = Server::exact(&["--group-idle-timeout", "1s"]);
    server
        .stream_lines(&[
            r#"{"impression":{"requestId":"r1","userId":"u1","itemIds":["a","b"],"time":"2026-11-01T10:00:00Z"}}"#.into(),
            r#"{"interaction":{"userId":"closing","itemId":"a","type":"click","time":"2026-11-01T11:00:00Z"}}"#.into(),
        ])
        .await;
    server.wait_for_a_retired_group().await;
    let output = query(&["--grpc-addr", &server.grpc.to_string()]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("the 1 lists received since start were finalized")
            && stderr.contains("retired")
            && !stderr.contains("no list is finalized yet"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filters_that_each_match_a_group_but_none_together_are_said() {
    let server = Server::exact(&[]);
    let list = |model: &str, surface: &str| {
        format!(
            r#"{{"impression":{{"requestId":"{model}","userId":"u-{model}","itemIds":["a"],"model":"{model}","surface":"{surface}","time":"2026-11-01T10:00:00Z"}}}}"#
        )
    };
    let closing = r#"{"interaction":{"userId":"closing","itemId":"a","type":"click","time":"2026-11-02T10:00:00Z"}}"#;
    let interleaved = r#"{"impression":{"requestId":"mix","userId":"u-mix","itemIds":["a","b"],"model":"mix","surface":"home","time":"2026-11-01T10:00:00Z","interleaving":{"rankers":["a","v9"],"teams":[0,1]}}}"#;
    server
        .stream_lines(&[
            list("a", "home"),
            list("b", "search"),
            interleaved.to_owned(),
            closing.to_owned(),
        ])
        .await;
    let addr = server.grpc.to_string();
    let apart = query(&["--grpc-addr", &addr, "--model", "a", "--surface", "search"]);
    let stderr = String::from_utf8_lossy(&apart.stderr);
    assert!(apart.status.success(), "{stderr}");
    assert!(
        stderr.contains(
            "no group has all of the models, surfaces and segment values asked for at once"
        ),
        "{stderr}"
    );
    let together = query(&["--grpc-addr", &addr, "--model", "a", "--surface", "home"]);
    assert_eq!(String::from_utf8_lossy(&together.stderr), "");
    // A ranker of an interleaving experiment, though no group's model, is there.
    let ranker = query(&["--grpc-addr", &addr, "--model", "v9"]);
    assert_eq!(String::from_utf8_lossy(&ranker.stderr), "");
    assert!(String::from_utf8_lossy(&ranker.stdout).contains("v9"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_asked_for_in_another_spelling_is_answered_under_its_configured_name() {
    let server = Server::start(&["--windows", "1m,5m"]);
    let mut evaluation = server.evaluation().await;
    for spelling in ["1m", "60s", "1m0s", "60000ms"] {
        let request = rankwatch::proto::GetMetricsRequest {
            window: spelling.to_owned(),
        };
        let report = evaluation.get_metrics(request).await.unwrap().into_inner();
        assert_eq!(report.window, "1m", "asked for {spelling}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_name_asked_for_is_the_default_that_events_without_one_are_filed_under() {
    let server = Server::exact(&["--segment-labels", "country"]);
    let unnamed = r#"{"impression":{"requestId":"r","userId":"u","itemIds":["a"],"model":"","labels":{"country":""},"time":"2026-11-01T10:00:00Z"}}"#;
    let named = r#"{"impression":{"requestId":"s","userId":"v","itemIds":["a"],"model":"m","surface":"home","labels":{"country":"de"},"time":"2026-11-01T10:00:00Z"}}"#;
    let closing = r#"{"interaction":{"userId":"closing","itemId":"a","type":"click","time":"2026-11-02T10:00:00Z"}}"#;
    server
        .stream_lines(&[unnamed.to_owned(), named.to_owned(), closing.to_owned()])
        .await;
    let addr = server.grpc.to_string();
    for asked in [
        &["--model", ""][..],
        &["--surface", ""],
        &["--segment", "country="],
    ] {
        let mut args = vec!["--grpc-addr", &addr, "--format", "json"];
        args.extend(asked);
        let kept = query_json(&args);
        let groups = kept["groups"].as_array().unwrap();
        assert_eq!(groups.len(), 1, "{asked:?}: {kept}");
        assert_eq!(groups[0]["model"], "default", "{asked:?}");
        assert_eq!(groups[0]["surface"], "default", "{asked:?}");
        assert_eq!(groups[0]["segments"]["country"], "default", "{asked:?}");
    }
}

#[test]
fn a_server_that_never_answers_is_said_to_have_not_answered() {
    // A listener nobody serves: the kernel accepts the connection, and no
    // HTTP/2 answer ever comes (as from a stopped server).
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap().to_string();
    let output = query(&["--grpc-addr", &addr, "--timeout", "1s"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("no answer from {addr} within --timeout 1s")),
        "{stderr}"
    );
    assert!(!stderr.contains("the server answered"), "{stderr}");
}

/// A control model that no list has (misspelled, say) is said by replay
/// and by query, with the models that have lists: both had printed an
/// empty comparison and nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_model_without_lists_is_said_with_the_models_that_have_them() {
    let lines = sent_log();
    let said = "the control model \"contrl\" has no finalized list, so nothing is compared against it; the models with lists: ";
    let (_dir, path) = {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.jsonl");
        std::fs::write(&path, lines.join("\n")).unwrap();
        (dir, path)
    };
    let replayed = replay(&[path.to_str().unwrap(), "--control-model", "contrl"], None);
    let stderr = String::from_utf8_lossy(&replayed.stderr);
    assert!(stderr.contains(said), "{stderr}");

    let server = Server::exact(&["--control-model", "contrl"]);
    server.stream_lines(&lines).await;
    let queried = query(&["--grpc-addr", &server.grpc.to_string()]);
    let stderr = String::from_utf8_lossy(&queried.stderr);
    assert!(
        queried.status.success() && stderr.contains(said),
        "{stderr}"
    );
}
