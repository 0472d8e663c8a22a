//! Figures that no client can poison, against the real server: valid
//! grades never make a figure NaN or infinite, one client's fast clock
//! cannot finalize the other clients' lists, and an ack stays small
//! whatever its batch holds.

mod common;

use common::server::{event_from_json, exit_of, parse_metrics, serve_command, Server};
use prost::Message;
use rankwatch::clock::wall_clock;
use rankwatch::event::{format_rfc3339, Nanos, NANOS_PER_SECOND};
use rankwatch::proto::{self, EventBatch};

const T: &str = r#""time":"2026-11-01T10:00:00Z""#;

fn event(json: &str) -> proto::Event {
    event_from_json(json).unwrap()
}

async fn send(server: &Server, events: Vec<proto::Event>) -> proto::IngestAck {
    let mut client = server.collector().await;
    client
        .ingest_batch(EventBatch {
            sequence: 1,
            events,
        })
        .await
        .unwrap()
        .into_inner()
}

/// A list of three items, each clicked with an explicit `grade`.
fn graded_list(user: &str, grade: f64) -> Vec<proto::Event> {
    let mut events = vec![event(&format!(
        r#"{{"impression":{{"requestId":"r","userId":"{user}","itemIds":["a","b","c"],"model":"m",{T}}}}}"#
    ))];
    for item in ["a", "b", "c"] {
        events.push(event(&format!(
            r#"{{"interaction":{{"userId":"{user}","itemId":"{item}","requestId":"r","type":"click","grade":{grade},{T}}}}}"#
        )));
    }
    events
}

/// A closing impression far later than the lists, so that they finalize.
fn closing() -> proto::Event {
    event(
        r#"{"impression":{"requestId":"z","userId":"z","itemIds":["x"],"model":"closing","time":"2026-11-02T10:00:00Z"}}"#,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valid_grades_cannot_make_a_figure_non_finite() {
    for gain in ["linear", "exponential"] {
        let server = Server::exact(&["--gain", gain]);
        // The largest grade there is: rejected, with the setting named.
        let ack = send(&server, graded_list("huge", 1e308)).await;
        let reasons: Vec<&str> = ack.rejections.iter().map(|r| r.reason.as_str()).collect();
        assert_eq!(reasons, ["invalid_grade"; 3], "{gain}");
        assert!(
            ack.rejections[0].message.contains("max_grade"),
            "{:?}",
            ack.rejections[0]
        );
        // The largest grade accepted (64 by default) on every item.
        let mut events = graded_list("top", 64.0);
        events.push(closing());
        let ack = send(&server, events).await;
        assert_eq!((ack.accepted, ack.rejections.len()), (5, 0), "{gain}");
        let metrics = parse_metrics(&server.get("/metrics").1);
        let ndcg = metrics
            .iter()
            .find(|(name, _)| {
                name.starts_with("rankwatch_list_ndcg_sum{") && name.contains("model=\"m\"")
            })
            .map(|(_, value)| *value);
        assert_eq!(
            ndcg.map(|v| v > 0.0),
            Some(true),
            "{gain}: a list was evaluated"
        );
        let poisoned: Vec<_> = metrics
            .iter()
            .filter(|(_, value)| !value.is_finite())
            .collect();
        assert!(poisoned.is_empty(), "{gain}: {poisoned:?}");
        // serde_json writes a NaN or an infinity as null.
        let status = server
            .get("/api/status")
            .1
            .replace(r#""state_dir":null"#, "");
        assert!(
            !status.contains("null"),
            "{gain}: a figure of /api/status is null"
        );
    }
}

#[test]
fn a_max_grade_whose_gain_could_overflow_is_refused_at_start() {
    for args in [
        ["--gain", "exponential", "--max-grade", "100"],
        ["--gain", "linear", "--max-grade", "inf"],
        ["--gain", "linear", "--max-grade", "0"],
    ] {
        let (code, stderr) = exit_of(&mut serve_command(&args));
        assert_eq!(code, Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains("max_grade"), "{args:?}: {stderr}");
    }
    let (code, stderr) = exit_of(&mut serve_command(&[
        "--max-grade",
        "2",
        "--grade",
        "purchase=3",
    ]));
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("purchase"), "{stderr}");
}

fn at(time: Nanos) -> String {
    format_rfc3339(time)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_fast_clock_does_not_finalize_the_other_clients_lists() {
    // The defaults: a 5 m window, 5 m of allowed skew, the wall clock advancing.
    let server = Server::start(&[]);
    let now = wall_clock();
    let shown = now - 60 * NANOS_PER_SECOND;
    let lists: Vec<proto::Event> = (0..100)
        .map(|u| {
            event(&format!(
                r#"{{"impression":{{"requestId":"r{u}","userId":"u{u}","itemIds":["a","b"],"time":"{}"}}}}"#,
                at(shown)
            ))
        })
        .collect();
    assert_eq!(send(&server, lists).await.accepted, 100);
    // One client whose clock runs 4 m 55 s ahead: accepted, within the skew.
    let ahead = now + (4 * 60 + 55) * NANOS_PER_SECOND;
    let fast = event(&format!(
        r#"{{"impression":{{"requestId":"f","userId":"fast","itemIds":["a"],"time":"{}"}}}}"#,
        at(ahead)
    ));
    assert_eq!(send(&server, vec![fast]).await.accepted, 1);
    // Every other client's clicks, on time.
    let clicks: Vec<proto::Event> = (0..100)
        .map(|u| {
            event(&format!(
                r#"{{"interaction":{{"userId":"u{u}","itemId":"b","requestId":"r{u}","type":"click","time":"{}"}}}}"#,
                at(shown + NANOS_PER_SECOND)
            ))
        })
        .collect();
    assert_eq!(send(&server, clicks).await.accepted, 100);
    let metrics = parse_metrics(&server.get("/metrics").1);
    let unattributed: f64 = metrics
        .iter()
        .filter(|(name, _)| name.starts_with("rankwatch_interactions_unattributed_total"))
        .map(|(_, value)| value)
        .sum();
    assert_eq!(
        (
            metrics["rankwatch_open_impressions"],
            metrics["rankwatch_interactions_credited_total"],
            unattributed
        ),
        (101.0, 100.0, 0.0),
        "the lists stay open and their clicks are credited"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ack_stays_small_whatever_the_batch_holds() {
    let server = Server::exact(&[]);
    // 200,000 empty events: 400 KB of batch.
    let mut events = vec![proto::Event::default(); 200_000];
    events[7] = event(&format!(
        r#"{{"impression":{{"requestId":"r","userId":"u","itemIds":["a"],{T}}}}}"#
    ));
    let ack = send(&server, events).await;
    assert!(
        ack.encoded_len() < 64 * 1024,
        "an ack of {} bytes",
        ack.encoded_len()
    );
    assert_eq!(ack.accepted, 1);
    assert_eq!(ack.rejections.len(), 100);
    assert_eq!(
        ack.rejections[7].index, 8,
        "the accepted event is not among them"
    );
    let counted: Vec<(&str, u32)> = ack
        .more_rejections
        .iter()
        .map(|c| (c.reason.as_str(), c.count))
        .collect();
    assert_eq!(counted, [("empty_event", 200_000 - 1 - 100)]);
    // Fewer detailed, by the setting.
    let server = Server::start(&["--max-ack-rejections", "3"]);
    let ack = send(&server, vec![proto::Event::default(); 10]).await;
    assert_eq!(ack.rejections.len(), 3);
    assert_eq!(ack.more_rejections[0].count, 7);
}

/// The same with items kept as numbers (the default) and as hashes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_shared_user_id_is_bounded_and_credited_like_any_user() {
    for (number_items, numbered) in [("true", 1001.0), ("false", 0.0)] {
        shared_user_id(number_items, numbered).await;
    }
}

/// 3,000 lists and their clicks for one user id, on a server with
/// `--number-items number_items`, which numbers `numbered` items.
async fn shared_user_id(number_items: &str, numbered: f64) {
    let server = Server::exact(&["--number-items", number_items]);
    // Logged-out traffic: 3,000 lists for one user id, each with its clicks.
    let mut events = Vec::new();
    for r in 0..3000 {
        events.push(event(&format!(
            r#"{{"impression":{{"requestId":"r{r}","userId":"guest","itemIds":["a{r}","b"],{T}}}}}"#
        )));
    }
    for r in 0..3000 {
        events.push(event(&format!(
            r#"{{"interaction":{{"userId":"guest","itemId":"a{r}","requestId":"r{r}","type":"click",{T}}}}}"#
        )));
    }
    // Clicks without a request id go to the latest list showing the item.
    for _ in 0..10 {
        events.push(event(&format!(
            r#"{{"interaction":{{"userId":"guest","itemId":"b","type":"click",{T}}}}}"#
        )));
    }
    let ack = send(&server, events).await;
    // 1,000 lists; 1,000 clicks credited, 1,000 waiting; 10 without a request id.
    assert_eq!(ack.accepted, 1000 + 2000 + 10);
    let shed: Vec<(u32, &str)> = ack
        .rejections
        .iter()
        .take(2)
        .map(|r| (r.index, r.reason.as_str()))
        .collect();
    assert_eq!(
        shed,
        [
            (1000, "shed_max_open_impressions_per_user"),
            (1001, "shed_max_open_impressions_per_user")
        ]
    );
    let metrics = parse_metrics(&server.get("/metrics").1);
    assert_eq!(metrics["rankwatch_open_impressions"], 1000.0);
    // Their items, numbered once each (a0 to a999, and b), unless kept as hashes.
    assert_eq!(metrics["rankwatch_item_numbers"], numbered);
    assert_eq!(
        metrics[r#"rankwatch_events_shed_total{reason="max_open_impressions_per_user"}"#],
        2000.0
    );
    // The clicks of the 2,000 lists that were shed wait for them, up to the per-user bound.
    assert_eq!(metrics["rankwatch_interactions_credited_total"], 1010.0);
    assert_eq!(metrics["rankwatch_waiting_interactions"], 1000.0);
    assert_eq!(
        metrics[r#"rankwatch_events_shed_total{reason="max_waiting_interactions_per_user"}"#],
        1000.0
    );
}

#[test]
fn settings_that_could_break_the_server_are_refused_at_start_with_their_range() {
    for (flag, value) in [
        ("--snapshot-interval", "0s"),
        ("--snapshot-interval", "400000000000s"),
        ("--max-streams", "18446744073709551615"),
        ("--max-inflight-batches", "18446744073709551615"),
        ("--max-http-connections", "0"),
        // No more connections than the reports that slow readers may hold.
        ("--max-http-connections", "8"),
        ("--max-reports-per-client", "0"),
        ("--grpc-report-timeout", "0s"),
        ("--max-grpc-connections-per-client", "0"),
        ("--group-idle-timeout", "1000y"),
    ] {
        let (code, stderr) = exit_of(&mut serve_command(&[flag, value]));
        assert_eq!(code, Some(1), "{flag} {value}: {stderr}");
        let key = flag.trim_start_matches("--").replace('-', "_");
        assert!(stderr.contains(&key), "{flag} {value}: {stderr}");
        assert!(!stderr.contains("panicked"), "{flag} {value}: {stderr}");
    }
}

#[test]
fn an_interaction_type_graded_twice_on_the_command_line_is_refused() {
    let twice = [
        "--grade",
        "click=1",
        "--grade",
        "purchase=3",
        "--grade",
        "click=2",
    ];
    let (code, stderr) = exit_of(&mut serve_command(&twice));
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("grades") && stderr.contains("\"click\" is graded twice"),
        "{stderr}"
    );
    let mut listed = serve_command(&[]);
    listed.env("RANKWATCH_GRADES", "click=1,click=2");
    let (code, stderr) = exit_of(&mut listed);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("\"click\" is graded twice"), "{stderr}");
}

/// A log filter that does not parse is refused at start, naming the
/// variable, instead of the log silently falling back to `info`; one that
/// parses but names nothing of rankwatch's (a typo of a level) is warned
/// of, since it turns the server's own log off, errors included.
#[test]
fn a_log_filter_that_does_not_parse_is_refused_and_one_that_silences_rankwatch_is_warned_of() {
    let mut broken = serve_command(&[]);
    broken.env("RANKWATCH_LOG", "info,rankwatch=[");
    let (code, stderr) = exit_of(&mut broken);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("RANKWATCH_LOG"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");

    let mut typo = serve_command(&["--max-http-connections", "0"]);
    typo.env("RANKWATCH_LOG", "inf");
    let (code, stderr) = exit_of(&mut typo);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("RANKWATCH_LOG=inf") && stderr.contains("turns rankwatch's own log off"),
        "{stderr}"
    );
    for quiet in ["warn", "off", "rankwatch=debug", "tonic=warn,error"] {
        let mut fine = serve_command(&["--max-http-connections", "0"]);
        fine.env("RANKWATCH_LOG", quiet);
        let (_, stderr) = exit_of(&mut fine);
        assert!(!stderr.contains("RANKWATCH_LOG"), "{quiet}: {stderr}");
    }
}

/// A named pipe given as the config file is refused at once, as the TLS
/// files are, instead of keeping the start waiting for a writer.
#[test]
fn a_named_pipe_as_the_config_file_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let pipe = dir.path().join("rankwatch.toml");
    let made = std::process::Command::new("mkfifo").arg(&pipe).status();
    assert!(made.unwrap().success(), "mkfifo");
    let (code, stderr) = exit_of(&mut serve_command(&["--config", pipe.to_str().unwrap()]));
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("rankwatch.toml") && stderr.contains("named pipe"),
        "{stderr}"
    );
}

/// A value that does not parse (a negative limit, one past 2^64, a word
/// for a duration) exits 1 like every other bad setting, and one that came
/// from the environment names its variable: the message alone names the
/// flag, which the operator may never have typed.
#[test]
fn a_value_that_does_not_parse_exits_1_and_names_the_variable_it_came_from() {
    for (flag, value) in [
        ("--max-items", "-1"),
        ("--max-streams", "18446744073709551616"),
        ("--attribution-window", "soon"),
    ] {
        let (code, stderr) = exit_of(&mut serve_command(&[&format!("{flag}={value}")]));
        assert_eq!(code, Some(1), "{flag}={value}: {stderr}");
        assert!(stderr.contains(flag), "{flag}={value}: {stderr}");
        assert!(!stderr.contains("RANKWATCH_"), "{flag}={value}: {stderr}");
    }
    let mut from_env = serve_command(&[]);
    from_env.env("RANKWATCH_ATTRIBUTION_WINDOW", "5");
    let (code, stderr) = exit_of(&mut from_env);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("from the environment variable RANKWATCH_ATTRIBUTION_WINDOW"),
        "{stderr}"
    );
    let (code, stderr) = exit_of(&mut serve_command(&["--no-such-flag"]));
    assert_eq!(
        code,
        Some(2),
        "a flag that does not exist is a usage error: {stderr}"
    );
}

/// A control model or a model of the expected split that no event could
/// name (longer than max_label_bytes, or starting with `__`) is refused at
/// start: the comparisons or the sample ratio check would wait for it
/// forever.
#[test]
fn models_that_no_event_could_name_are_refused_as_control_or_split() {
    let long = "m".repeat(300);
    let split_long = format!("{long}=0.5,b=0.5");
    let cases: [(&[&str], &str); 4] = [
        (&["--control-model", &long], "control_model"),
        (
            &["--control-model", "abcd", "--max-label-bytes", "3"],
            "control_model",
        ),
        (&["--expected-split", &split_long], "expected_split"),
        (&["--expected-split", "__x=0.5,b=0.5"], "expected_split"),
    ];
    for (args, setting) in cases {
        let (code, stderr) = exit_of(&mut serve_command(args));
        assert_eq!(code, Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(setting), "{args:?}: {stderr}");
    }
}
