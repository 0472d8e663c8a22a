//! `rankwatch serve` over real loopback gRPC and HTTP: the conformance log
//! streamed through `Collector.Ingest` must give the replay's figures.

mod common;

use common::server::{event_from_json, parse_metrics, Server};
use common::{conformance, read_json, replay_json};
use rankwatch::metrics::Metric;
use rankwatch::proto::{self, EventBatch};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// The conformance log as protobuf events (lines that are not JSON cannot be sent).
fn conformance_events() -> Vec<proto::Event> {
    let log = std::fs::read_to_string(conformance("replay_small.jsonl")).unwrap();
    log.lines().filter_map(event_from_json).collect()
}

/// A valid interaction a day after the log, for a user nobody else has: it
/// moves the watermark past every list of the log and then waits itself.
fn closing_event() -> proto::Event {
    proto::Event {
        kind: Some(proto::event::Kind::Interaction(proto::Interaction {
            user_id: "closing-user".into(),
            item_id: "closing-item".into(),
            r#type: "click".into(),
            time: Some(prost_types::Timestamp {
                seconds: 1_793_613_600,
                nanos: 0,
            }),
            ..Default::default()
        })),
    }
}

/// Streams `events` in batches of `batch_size` over one Ingest stream; returns the acks.
async fn stream(
    server: &Server,
    events: Vec<proto::Event>,
    batch_size: usize,
) -> Vec<proto::IngestAck> {
    let batches: Vec<EventBatch> = events
        .chunks(batch_size)
        .enumerate()
        .map(|(i, chunk)| EventBatch {
            sequence: i as u64 + 1,
            events: chunk.to_vec(),
        })
        .collect();
    let count = batches.len();
    let mut client = server.collector().await;
    let mut acks = client
        .ingest(tokio_stream::iter(batches))
        .await
        .unwrap()
        .into_inner();
    let mut received = Vec::new();
    while let Some(ack) = acks.message().await.unwrap() {
        received.push(ack);
    }
    assert_eq!(received.len(), count, "one ack per batch");
    received
}

fn rejections_by_reason(acks: &[proto::IngestAck]) -> BTreeMap<String, u64> {
    let mut by_reason = BTreeMap::new();
    for ack in acks {
        for rejection in &ack.rejections {
            assert!(
                !rejection.message.is_empty(),
                "every rejection explains itself"
            );
            *by_reason.entry(rejection.reason.clone()).or_default() += 1;
        }
    }
    by_reason
}

/// The expected report's rejections without the lines that are not JSON.
fn expected_rejections(expected: &Value) -> BTreeMap<String, u64> {
    expected["counters"]["rejected"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(reason, _)| *reason != "invalid_json")
        .map(|(reason, n)| (reason.clone(), n.as_u64().unwrap()))
        .collect()
}

/// Checks `metrics` against every metric of the report `expected`; returns how many were checked.
fn assert_series_match_report(metrics: &BTreeMap<String, f64>, expected: &Value) -> usize {
    let mut checked = 0;
    for group in expected["groups"].as_array().unwrap() {
        let labels = format!(
            "model=\"{}\",surface=\"{}\"",
            group["model"].as_str().unwrap(),
            group["surface"].as_str().unwrap()
        );
        let lists = group["lists"].as_f64().unwrap();
        let engaged = group["engaged_lists"].as_f64().unwrap();
        assert_eq!(
            metrics[&format!("rankwatch_lists_finalized_total{{{labels}}}")],
            lists
        );
        assert_eq!(
            metrics[&format!("rankwatch_lists_engaged_total{{{labels}}}")],
            engaged
        );
        for (key, means) in group["metrics"].as_object().unwrap() {
            let series = |suffix: &str| match key.split_once('@') {
                Some((metric, k)) => {
                    format!("rankwatch_list_{metric}_{suffix}{{k=\"{k}\",{labels}}}")
                }
                None => format!("rankwatch_list_{key}_{suffix}{{{labels}}}"),
            };
            let sum = metrics[&series("sum")];
            let count = metrics[&series("count")];
            assert_eq!(count, lists, "{}", series("count"));
            let all = means["all"].as_f64().unwrap();
            let engaged_mean = means["engaged"].as_f64().unwrap();
            assert!(
                (sum / count - all).abs() <= 1e-9,
                "{key} all: {} vs {all}",
                sum / count
            );
            assert!(
                (sum / engaged - engaged_mean).abs() <= 1e-9,
                "{key} engaged: {} vs {engaged_mean}",
                sum / engaged
            );
            checked += 1;
        }
    }
    checked
}

/// Checks the position counters against the report's position curves.
fn assert_position_series_match_report(metrics: &BTreeMap<String, f64>, expected: &Value) {
    let mut clicks_at_rank_1 = 0.0;
    for group in expected["groups"].as_array().unwrap() {
        let (model, surface) = (
            group["model"].as_str().unwrap(),
            group["surface"].as_str().unwrap(),
        );
        let positions = group["positions"].as_array().unwrap();
        assert_eq!(positions.len(), 20, "the default depth");
        for point in positions {
            let rank = point["rank"].as_u64().unwrap();
            let labels = format!("model=\"{model}\",rank=\"{rank}\",surface=\"{surface}\"");
            let series = format!("rankwatch_position_lists_total{{{labels}}}");
            assert_eq!(
                metrics[&series],
                point["lists"].as_f64().unwrap(),
                "{series}"
            );
            for (kind, n) in point["interactions"].as_object().unwrap() {
                let series =
                    format!("rankwatch_position_interactions_total{{{labels},type=\"{kind}\"}}");
                assert_eq!(metrics[&series], n.as_f64().unwrap(), "{series}");
                if rank == 1 && kind == "click" {
                    clicks_at_rank_1 += n.as_f64().unwrap();
                }
            }
        }
        assert_eq!(
            positions[0]["lists"], group["lists"],
            "every list reaches rank 1"
        );
    }
    assert!(clicks_at_rank_1 > 0.0, "the log has clicks at rank 1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_log_gives_the_replay_figures() {
    let server = Server::exact(&[]);
    let expected = read_json(&conformance("replay_small.expected.json"));
    let mut events = conformance_events();
    events.push(closing_event());
    let acks = stream(&server, events, 37).await;
    assert_eq!(rejections_by_reason(&acks), expected_rejections(&expected));

    let metrics = parse_metrics(&server.get("/metrics").1);
    let checked = assert_series_match_report(&metrics, &expected);
    assert_eq!(checked, 9 * 36, "every metric at every K of every group");
    // The replay's own report has the metrics added since, and position curves.
    let log = conformance("replay_small.jsonl");
    let replayed = replay_json(&[log.to_str().unwrap(), "--format", "json"], None);
    let checked = assert_series_match_report(&metrics, &replayed);
    assert_eq!(checked, 9 * (Metric::COUNT * 4 + 1), "and R-precision");
    assert_position_series_match_report(&metrics, &replayed);
    let counters = &expected["counters"];
    assert_eq!(
        metrics["rankwatch_interactions_credited_total"],
        counters["credited"].as_f64().unwrap()
    );
    assert_eq!(
        metrics["rankwatch_interactions_unattributed_total{reason=\"not_in_list\"}"],
        30.0
    );
    assert_eq!(
        metrics["rankwatch_impressions_late_total"],
        counters["late"]["impressions"].as_f64().unwrap()
    );
    assert_eq!(
        metrics["rankwatch_waiting_interactions"], 1.0,
        "only the closing event waits"
    );
    assert_eq!(metrics["rankwatch_open_impressions"], 0.0);

    let report = server.report().await;
    let report_counters = report.counters.unwrap();
    assert_eq!(
        report_counters.credited,
        counters["credited"].as_u64().unwrap()
    );
    assert_eq!(
        report_counters.interactions,
        counters["interactions"].as_u64().unwrap() + 1,
        "the closing event"
    );
    assert_eq!(
        report.groups.len(),
        expected["groups"].as_array().unwrap().len()
    );
    for (got, want) in report
        .groups
        .iter()
        .zip(expected["groups"].as_array().unwrap())
    {
        assert_eq!(got.model, want["model"].as_str().unwrap());
        let replayed_group = replayed["groups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["model"] == want["model"] && g["surface"] == want["surface"])
            .unwrap();
        let positions: Vec<Value> = got
            .positions
            .iter()
            .map(|p| json!({"rank": p.rank, "lists": p.lists, "interactions": p.interactions}))
            .collect();
        assert_eq!(Value::from(positions), replayed_group["positions"]);
        let ndcg = &got.metrics["ndcg@10"];
        assert!((ndcg.all - want["metrics"]["ndcg@10"]["all"].as_f64().unwrap()).abs() <= 1e-9);
        assert!(
            (ndcg.engaged - want["metrics"]["ndcg@10"]["engaged"].as_f64().unwrap()).abs() <= 1e-9
        );
    }
}

/// Coverage since start is the replay's to the last digit: item X's
/// exposures, at ranks 2, 4 and 4, were summed by `serve` as the first plus
/// the pane of the other two, which rounds otherwise than one sum in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coverage_since_start_is_the_replays_to_the_last_digit() {
    let server = Server::exact(&[]);
    let log = [
        r#"{"impression":{"requestId":"r1","userId":"u1","itemIds":["Y","X"],"time":"2026-11-01T10:00:00Z"}}"#,
        r#"{"impression":{"requestId":"r2","userId":"u2","itemIds":["f1","f2","f3","X"],"time":"2026-11-01T10:00:20Z"}}"#,
        r#"{"impression":{"requestId":"r3","userId":"u3","itemIds":["g1","g2","g3","X"],"time":"2026-11-01T10:00:21Z"}}"#,
    ];
    let mut events: Vec<_> = log
        .iter()
        .filter_map(|line| event_from_json(line))
        .collect();
    events.push(closing_event());
    stream(&server, events, 1).await;
    let report = server.report().await;
    let got = report.groups[0].coverage.unwrap();
    let lines: String = log.iter().map(|line| format!("{line}\n")).collect();
    let replayed = replay_json(&["-", "--format", "json"], Some(lines.as_bytes()));
    let want = &replayed["groups"][0]["coverage"];
    assert_eq!(got.items_shown, 8);
    assert_eq!(
        (got.exposure_gini, got.exposure_entropy),
        (
            want["exposure_gini"].as_f64().unwrap(),
            want["exposure_entropy"].as_f64().unwrap()
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unary_batches_give_the_same_figures() {
    let server = Server::exact(&[]);
    let expected = read_json(&conformance("replay_small.expected.json"));
    let mut client = server.collector().await;
    let mut events = conformance_events();
    events.push(closing_event());
    let mut acks = Vec::new();
    for (i, chunk) in events.chunks(500).enumerate() {
        let batch = EventBatch {
            sequence: i as u64,
            events: chunk.to_vec(),
        };
        acks.push(client.ingest_batch(batch).await.unwrap().into_inner());
    }
    assert_eq!(rejections_by_reason(&acks), expected_rejections(&expected));
    let checked = assert_series_match_report(&parse_metrics(&server.get("/metrics").1), &expected);
    assert_eq!(checked, 9 * 36, "every metric at every K of every group");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_events_are_rejected_one_by_one_and_the_stream_goes_on() {
    let server = Server::exact(&[]);
    let good = event_from_json(r#"{"impression":{"requestId":"r1","userId":"u1","itemIds":["a","b"],"time":"2026-11-01T10:00:00Z"}}"#).unwrap();
    let unknown_type = event_from_json(r#"{"interaction":{"userId":"u1","itemId":"a","type":"clik","time":"2026-11-01T10:00:01Z"}}"#).unwrap();
    let future = event_from_json(r#"{"interaction":{"userId":"u1","itemId":"a","type":"click","time":"2200-01-01T00:00:00Z"}}"#).unwrap();
    let empty = proto::Event { kind: None };
    let acks = stream(
        &server,
        vec![unknown_type, good.clone(), future, empty, good],
        5,
    )
    .await;
    let ack = &acks[0];
    assert_eq!(ack.accepted, 2);
    let reasons: Vec<(u32, &str)> = ack
        .rejections
        .iter()
        .map(|r| (r.index, r.reason.as_str()))
        .collect();
    assert_eq!(
        reasons,
        [
            (0, "unknown_type"),
            (2, "time_in_future"),
            (3, "empty_event")
        ]
    );
    assert_eq!(
        ack.rejections[0].message,
        r#"unknown interaction type "clik"; configured: add_to_cart, click, purchase"#
    );
    let metrics = parse_metrics(&server.get("/metrics").1);
    assert_eq!(
        metrics["rankwatch_events_rejected_total{reason=\"unknown_type\"}"],
        1.0
    );
    assert_eq!(
        metrics["rankwatch_events_rejected_total{reason=\"time_in_future\"}"],
        1.0
    );
    assert_eq!(
        metrics["rankwatch_duplicates_total{kind=\"impression\"}"], 1.0,
        "the resent impression"
    );
    assert_eq!(metrics["rankwatch_events_received_total"], 5.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_message_ends_only_its_own_stream() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = Server::exact(&["--max-message-size", "1024"]);
    // An oversize message ends its RPC with RESOURCE_EXHAUSTED.
    let mut client = server.collector().await;
    let item_ids: Vec<String> = (0..200).map(|i| format!("item-{i}")).collect();
    let big = EventBatch {
        sequence: 1,
        events: vec![proto::Event {
            kind: Some(proto::event::Kind::Impression(proto::Impression {
                item_ids,
                ..Default::default()
            })),
        }],
    };
    let status = client.ingest_batch(big).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    // Bytes that are not an EventBatch end that RPC with INVALID_ARGUMENT.
    let truncated = vec![0x12, 0x05, 0x0a];
    let status = common::server::ingest_raw_bytes(&server, truncated)
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    assert!(
        status.message().contains("malformed EventBatch"),
        "{}",
        status.message()
    );
    // Garbage on a raw connection: the server drops that connection only.
    let mut raw = tokio::net::TcpStream::connect(server.grpc).await.unwrap();
    raw.write_all(
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x04\x08\x00\x00\x00\x00\x00garbage-garbage",
    )
    .await
    .unwrap();
    let mut sink = Vec::new();
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        raw.read_to_end(&mut sink),
    )
    .await;
    // The server still ingests and answers.
    let good = event_from_json(r#"{"impression":{"requestId":"r1","userId":"u1","itemIds":["a"],"time":"2026-11-01T10:00:00Z"}}"#).unwrap();
    let ack = client
        .ingest_batch(EventBatch {
            sequence: 2,
            events: vec![good],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(ack.accepted, 1);
    assert_eq!(server.get("/healthz").0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_reflection_and_readiness_answer() {
    use tonic_health::pb::{
        health_check_response::ServingStatus, health_client::HealthClient, HealthCheckRequest,
    };
    let server = Server::start(&[]);
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", server.grpc))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = HealthClient::new(channel.clone());
    let status = health
        .check(HealthCheckRequest {
            service: "rankwatch.v1.Collector".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .status;
    assert_eq!(status, ServingStatus::Serving as i32);
    assert_eq!(server.get("/healthz").0, 200);
    assert_eq!(server.get("/readyz").0, 200);

    use tonic_reflection::pb::v1::{
        server_reflection_client::ServerReflectionClient,
        server_reflection_request::MessageRequest, server_reflection_response::MessageResponse,
        ServerReflectionRequest,
    };
    let mut reflection = ServerReflectionClient::new(channel);
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut responses = reflection
        .server_reflection_info(tokio_stream::iter([request]))
        .await
        .unwrap()
        .into_inner();
    let Some(MessageResponse::ListServicesResponse(list)) =
        responses.message().await.unwrap().unwrap().message_response
    else {
        panic!("expected a service list");
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    for service in [
        "rankwatch.v1.Collector",
        "rankwatch.v1.Evaluation",
        "grpc.health.v1.Health",
    ] {
        assert!(
            names.iter().any(|n| n == service),
            "{service} missing from {names:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_open_streams_and_exits_zero() {
    let server = Server::exact(&[]);
    let mut client = server.collector().await;
    let (sender, receiver) = tokio::sync::mpsc::channel(4);
    let mut acks = client
        .ingest(tokio_stream::wrappers::ReceiverStream::new(receiver))
        .await
        .unwrap()
        .into_inner();
    let good = event_from_json(r#"{"impression":{"requestId":"r1","userId":"u1","itemIds":["a"],"time":"2026-11-01T10:00:00Z"}}"#).unwrap();
    sender
        .send(EventBatch {
            sequence: 1,
            events: vec![good],
        })
        .await
        .unwrap();
    assert_eq!(acks.message().await.unwrap().unwrap().sequence, 1);
    // The stream stays open while the server shuts down.
    let code = server.stop().await;
    assert_eq!(code, Some(0));
    assert!(
        acks.message().await.map(|m| m.is_none()).unwrap_or(true),
        "the stream ended"
    );
    drop(sender);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promtool_finds_nothing_to_fix_in_a_real_scrape() {
    let server = Server::exact(&[]);
    let mut events = conformance_events();
    events.push(closing_event());
    stream(&server, events, 100).await;
    let (status, body) = server.get("/metrics");
    assert_eq!(status, 200);
    assert!(
        body.contains("process_resident_memory_bytes"),
        "process series are exported"
    );
    assert!(
        body.contains("rankwatch_batch_duration_seconds_bucket"),
        "batch latency is a histogram"
    );
    common::server::assert_promtool_clean(&body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wall_clock_finalizes_lists_when_traffic_stops() {
    let server = Server::start(&["--attribution-window", "1s", "--allowed-lateness", "0s"]);
    let now = rankwatch::clock::wall_clock() / 1_000_000_000;
    let mut client = server.collector().await;
    client
        .ingest_batch(EventBatch {
            sequence: 1,
            events: vec![impression_at(now)],
        })
        .await
        .unwrap();
    assert_eq!(finalized(&server), 0.0, "open while its window is open");
    let mut waited = 0;
    while finalized(&server) < 1.0 {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        waited += 1;
        assert!(
            waited < 50,
            "no traffic for 10 s and the list is still open"
        );
    }
    let metrics = parse_metrics(&server.get("/metrics").1);
    assert_eq!(metrics["rankwatch_open_impressions"], 0.0);
    assert!(metrics["rankwatch_finalization_lag_seconds"] < 5.0);
}

/// Events that keep arriving but never raise `T` (a backfill or a retry
/// queue of old events after live traffic stopped) do not hold the wall
/// clock back: it had moved `T` only after a second with no valid event,
/// and a trickle of old ones kept every list open for as long as it lasted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickle_of_old_events_does_not_keep_lists_open() {
    let server = Server::start(&["--attribution-window", "1s", "--allowed-lateness", "0s"]);
    let at = |seconds: i64| Some(prost_types::Timestamp { seconds, nanos: 0 });
    let now = rankwatch::clock::wall_clock() / 1_000_000_000;
    let old_click = |n: u64| proto::Event {
        kind: Some(proto::event::Kind::Interaction(proto::Interaction {
            event_id: format!("old-{n}"),
            user_id: format!("backfill-{n}"),
            item_id: "b".into(),
            r#type: "click".into(),
            time: at(now - 3600),
            ..Default::default()
        })),
    };
    let mut client = server.collector().await;
    let send = |sequence, event| EventBatch {
        sequence,
        events: vec![event],
    };
    client
        .ingest_batch(send(1, impression_at(now)))
        .await
        .unwrap();
    let mut sent = 1;
    while finalized(&server) < 1.0 {
        sent += 1;
        let ack = client
            .ingest_batch(send(sent, old_click(sent)))
            .await
            .unwrap();
        assert_eq!(ack.into_inner().accepted, 1, "an old event is valid");
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        assert!(
            sent < 40,
            "10 s of old events only, and the list is still open"
        );
    }
    let metrics = parse_metrics(&server.get("/metrics").1);
    assert_eq!(metrics["rankwatch_open_impressions"], 0.0);
}

/// An impression of one item by user `u1` at `seconds` since the epoch.
fn impression_at(seconds: i64) -> proto::Event {
    proto::Event {
        kind: Some(proto::event::Kind::Impression(proto::Impression {
            request_id: "r1".into(),
            user_id: "u1".into(),
            item_ids: vec!["a".into()],
            time: Some(prost_types::Timestamp { seconds, nanos: 0 }),
            ..Default::default()
        })),
    }
}

/// The lists `server` has finalized of the group of events that name no
/// model or surface.
fn finalized(server: &Server) -> f64 {
    parse_metrics(&server.get("/metrics").1)
        .get("rankwatch_lists_finalized_total{model=\"default\",surface=\"default\"}")
        .copied()
        .unwrap_or(0.0)
}

/// The server asks the kernel for no transparent huge pages unless
/// `--huge-pages true`: the prctl flag shows in `/proc/<pid>/status`.
#[cfg(target_os = "linux")]
#[test]
fn huge_pages_are_off_unless_asked_for() {
    let thp_enabled = |server: &Server| {
        std::fs::read_to_string(format!("/proc/{}/status", server.child.id()))
            .unwrap()
            .lines()
            .find_map(|line| line.strip_prefix("THP_enabled:"))
            .map(|value| value.trim().to_owned())
    };
    assert_eq!(thp_enabled(&Server::start(&[])).as_deref(), Some("0"));
    assert_eq!(
        thp_enabled(&Server::start(&["--huge-pages", "true"])).as_deref(),
        Some("1")
    );
}

/// The loadgen's streams, generating as they send or sending batches made
/// beforehand, reach a real server: every event sent is accepted, and the
/// server counts as many.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loadgen_events_are_all_accepted_live_or_pregenerated() {
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: rankwatch::loadgen::LoadgenArgs,
    }
    let server = Server::exact(&[]);
    let target = format!("http://{}", server.grpc);
    let mut sent = 0;
    let live = &["--rate", "20000"][..];
    // 2 streams of 10,000 events/s for 1 s: 100 batches of 100 each, sent unpaced.
    let pregenerated = &["--rate", "0", "--pregenerate", "20000"][..];
    for (extra, expected) in [(live, None), (pregenerated, Some(20_000))] {
        let flags = [
            "loadgen",
            "--target",
            &target,
            "--streams",
            "2",
            "--duration",
            "1s",
        ];
        let args = <Cli as clap::Parser>::parse_from(flags.iter().chain(extra)).args;
        let report = rankwatch::loadgen::run(&args).await.unwrap();
        assert!(report.events_sent > 0, "{report}");
        if let Some(expected) = expected {
            assert_eq!(report.events_sent, expected, "{report}");
        }
        assert_eq!(report.accepted, report.events_sent, "{report}");
        assert_eq!(
            (report.rejected, report.unacked_batches),
            (0, 0),
            "{report}"
        );
        sent += report.events_sent;
    }
    let metrics = parse_metrics(&server.get("/metrics").1);
    assert_eq!(metrics["rankwatch_events_accepted_total"], sent as f64);
}

/// `demo --help` shows the settings the demo runs with where they differ
/// from `serve`'s: it showed `serve`'s 5m window, 30s of lateness and no
/// control model while the demo ran with 10s, 2s and its first model.
#[test]
fn the_demos_help_shows_the_defaults_it_runs_with() {
    let demo = Server::demo(&[]);
    let (status, body) = demo.get("/api/status");
    assert_eq!(status, 200);
    let settings = serde_json::from_str::<Value>(&body).unwrap()["settings"].clone();
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_rankwatch"))
        .args(["demo", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    let shown = |flag: &str| {
        let mut lines = help.lines().skip_while(|line| !line.contains(flag));
        lines.nth(1).unwrap_or_default().to_owned()
    };
    for (flag, key) in [
        ("--attribution-window <", "attribution_window"),
        ("--allowed-lateness <", "allowed_lateness"),
    ] {
        let default = format!("[default: {}]", settings[key].as_str().unwrap());
        assert!(shown(flag).ends_with(&default), "{flag}: {}", shown(flag));
    }
    assert_eq!(settings["control_model"], "control");
    assert!(
        shown("--control-model <").ends_with("[default: the first of --models]"),
        "{help}"
    );
}

/// `serve --help` opens with the settings a first run is about, and keeps
/// the limits and timeouts, TLS and fleet mode under headings of their
/// own: the window came after some thirty limits and every Kafka flag.
#[test]
fn serves_help_opens_with_the_evaluation_settings() {
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_rankwatch"))
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    let headings: Vec<&str> = help
        .lines()
        .filter(|line| !line.starts_with(' ') && line.ends_with(':'))
        .collect();
    assert_eq!(
        headings,
        [
            "Options:",
            "Limits and timeouts:",
            "TLS:",
            "Fleet mode (Kafka):"
        ]
    );
    let flags: Vec<&str> = help
        .lines()
        .filter_map(|line| line.trim_start().strip_prefix("--"))
        .filter_map(|flag| flag.split([' ', '<']).next())
        .collect();
    let at = |flag: &str| flags.iter().position(|f| *f == flag).unwrap();
    assert!(at("attribution-window") < 3, "{flags:?}");
    let limits = at("max-future-skew");
    for flag in &flags[limits..] {
        assert!(
            flag.starts_with("max-")
                || flag.ends_with("-timeout")
                || flag.starts_with("tls-")
                || flag.starts_with("kafka-")
                || *flag == "shutdown-linger",
            "{flag} stands among the limits, TLS or fleet flags"
        );
    }
}
