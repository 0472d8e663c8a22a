//! Bad input, vanished clients, too many streams, overload and retries: the
//! server stays up, bounded and exact, and says why it dropped anything.

mod common;

use common::server::{event_from_json, parse_metrics, saving_to, Server};
use common::{conformance, replay_json};
use prost::Message;
use rankwatch::proto::{self, EventBatch};
use std::collections::BTreeMap;

fn event(json: &str) -> proto::Event {
    event_from_json(json).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rejection_reason_over_grpc() {
    let server = Server::exact(&["--max-items", "3", "--max-label-bytes", "8"]);
    let t = r#""time":"2026-11-01T10:00:00Z""#;
    let cases = [
        ("empty_event", proto::Event { kind: None }),
        (
            "missing_user_id",
            event(&format!(
                r#"{{"impression":{{"requestId":"r","itemIds":["a"],{t}}}}}"#
            )),
        ),
        (
            "missing_request_id",
            event(&format!(
                r#"{{"impression":{{"userId":"u","itemIds":["a"],{t}}}}}"#
            )),
        ),
        (
            "empty_item_ids",
            event(&format!(
                r#"{{"impression":{{"requestId":"r","userId":"u",{t}}}}}"#
            )),
        ),
        (
            "too_many_items",
            event(&format!(
                r#"{{"impression":{{"requestId":"r","userId":"u","itemIds":["a","b","c","d"],{t}}}}}"#
            )),
        ),
        (
            "empty_item_id",
            event(&format!(
                r#"{{"impression":{{"requestId":"r","userId":"u","itemIds":["a",""],{t}}}}}"#
            )),
        ),
        (
            "duplicate_item_id",
            event(&format!(
                r#"{{"impression":{{"requestId":"r","userId":"u","itemIds":["a","a"],{t}}}}}"#
            )),
        ),
        (
            "missing_time",
            event(r#"{"impression":{"requestId":"r","userId":"u","itemIds":["a"]}}"#),
        ),
        (
            "time_in_future",
            event(
                r#"{"impression":{"requestId":"r","userId":"u","itemIds":["a"],"time":"2200-01-01T00:00:00Z"}}"#,
            ),
        ),
        (
            "label_too_long",
            event(&format!(
                r#"{{"impression":{{"requestId":"r","userId":"u","itemIds":["a"],"model":"nine-long",{t}}}}}"#
            )),
        ),
        (
            "reserved_name",
            event(&format!(
                r#"{{"impression":{{"requestId":"r","userId":"u","itemIds":["a"],"model":"__x__","surface":"__x__",{t}}}}}"#
            )),
        ),
        (
            "missing_item_id",
            event(&format!(
                r#"{{"interaction":{{"userId":"u","type":"click",{t}}}}}"#
            )),
        ),
        (
            "missing_type",
            event(&format!(
                r#"{{"interaction":{{"userId":"u","itemId":"a",{t}}}}}"#
            )),
        ),
        (
            "unknown_type",
            event(&format!(
                r#"{{"interaction":{{"userId":"u","itemId":"a","type":"view",{t}}}}}"#
            )),
        ),
        (
            "invalid_grade",
            event(&format!(
                r#"{{"interaction":{{"userId":"u","itemId":"a","type":"click","grade":-2,{t}}}}}"#
            )),
        ),
    ];
    let mut invalid_time = event(&format!(
        r#"{{"interaction":{{"userId":"u","itemId":"a","type":"click",{t}}}}}"#
    ));
    if let Some(proto::event::Kind::Interaction(x)) = &mut invalid_time.kind {
        x.time.as_mut().unwrap().nanos = -1;
    }
    let mut events: Vec<proto::Event> = cases.iter().map(|(_, e)| e.clone()).collect();
    events.push(invalid_time);
    let mut client = server.collector().await;
    let ack = client
        .ingest_batch(EventBatch {
            sequence: 7,
            events,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((ack.sequence, ack.accepted), (7, 0));
    let mut expected: Vec<&str> = cases.iter().map(|(reason, _)| *reason).collect();
    expected.push("invalid_time");
    let got: Vec<&str> = ack.rejections.iter().map(|r| r.reason.as_str()).collect();
    assert_eq!(got, expected);
    assert!(ack
        .rejections
        .iter()
        .enumerate()
        .all(|(i, r)| r.index as usize == i && r.message.len() > 10));
    let metrics = parse_metrics(&server.get("/metrics").1);
    for reason in expected {
        assert_eq!(
            metrics[&format!("rankwatch_events_rejected_total{{reason=\"{reason}\"}}")],
            1.0,
            "{reason}"
        );
    }
    assert_eq!(metrics["rankwatch_events_accepted_total"], 0.0);
    assert_eq!(metrics["rankwatch_limit{limit=\"max_label_bytes\"}"], 8.0);
    assert_eq!(
        metrics["rankwatch_limit{limit=\"max_exposure_items\"}"],
        4096.0
    );
    assert_eq!(
        metrics["rankwatch_limit{limit=\"max_interleaved_rankers\"}"],
        8.0
    );
    assert_eq!(
        metrics["rankwatch_limit{limit=\"max_status_history_bytes\"}"],
        16777216.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_vanishes_mid_stream_leaves_the_server_healthy() {
    let server = Server::exact(&[]);
    let addr = server.grpc;
    // The client runs on a runtime of its own; dropping that runtime closes its connection mid-stream.
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async move {
            let mut client = proto::collector_client::CollectorClient::connect(format!("http://{addr}")).await.unwrap();
            let batches = (0..u64::MAX).map(|i| EventBatch {
                sequence: i,
                events: vec![event(&format!(
                    r#"{{"impression":{{"requestId":"r{i}","userId":"u{i}","itemIds":["a"],"time":"2026-11-01T10:00:00Z"}}}}"#
                ))],
            });
            let mut acks = client.ingest(tokio_stream::iter(batches)).await.unwrap().into_inner();
            let _ = tokio::time::timeout(std::time::Duration::from_millis(300), async { while acks.message().await.is_ok() {} }).await;
        });
        runtime.shutdown_background();
    })
    .join()
    .unwrap();
    let mut streams = f64::NAN;
    for _ in 0..50 {
        streams = parse_metrics(&server.get("/metrics").1)["rankwatch_ingest_streams"];
        if streams == 0.0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(streams, 0.0, "the vanished stream was cleaned up");
    let metrics = parse_metrics(&server.get("/metrics").1);
    assert!(metrics["rankwatch_impressions_total"] > 0.0);
    let mut client = server.collector().await;
    let ack = client
        .ingest_batch(EventBatch {
            sequence: 1,
            events: vec![],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(ack.sequence, 1);
}

/// A server whose log nobody reads any more (a log shipper that died, a
/// pipe into `head`) drops the lines it cannot write and goes on: its
/// engine had stopped at the next line it logged, while the probes stayed
/// green and SIGTERM was never answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_whose_log_reader_went_away_goes_on_serving() {
    let dir = tempfile::tempdir().unwrap();
    let args = saving_to(dir.path());
    let mut server = Server::start_unread(&args);
    let t = r#""time":"2026-11-01T10:00:00Z""#;
    let first = event(&format!(
        r#"{{"impression":{{"requestId":"r1","userId":"u1","itemIds":["a","b"],{t}}}}}"#
    ));
    let mut client = server.collector().await;
    for (sequence, request) in [(1, "r1"), (2, "r2")] {
        let mut event = first.clone();
        if let Some(proto::event::Kind::Impression(impression)) = &mut event.kind {
            impression.request_id = request.into();
        }
        let batch = EventBatch {
            sequence,
            events: vec![event],
        };
        let ack = client.ingest_batch(batch).await.unwrap().into_inner();
        assert_eq!(ack.accepted, 1);
    }
    assert_eq!(server.report().await.open_impressions, 2);
    assert_eq!(server.get("/readyz").0, 200);
    let code = tokio::task::spawn_blocking(move || server.terminate())
        .await
        .unwrap();
    assert_eq!(code, Some(0));
    // What it held was saved on the way out.
    let restarted = Server::start(&args);
    assert_eq!(restarted.report().await.open_impressions, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_past_the_limit_are_refused_and_counted() {
    let server = Server::start(&["--max-streams", "1"]);
    let mut first = server.collector().await;
    let (keep, receiver) = tokio::sync::mpsc::channel::<EventBatch>(1);
    let _open = first
        .ingest(tokio_stream::wrappers::ReceiverStream::new(receiver))
        .await
        .unwrap();
    let mut second = server.collector().await;
    let status = second
        .ingest(tokio_stream::iter(Vec::<EventBatch>::new()))
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::ResourceExhausted);
    assert!(
        status.message().contains("max_streams = 1"),
        "{}",
        status.message()
    );
    assert_eq!(
        parse_metrics(&server.get("/metrics").1)["rankwatch_streams_refused_total"],
        1.0
    );
    drop(keep);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overload_stays_within_limits_and_every_drop_is_counted() {
    let server = Server::exact(&[
        "--max-open-impressions",
        "5000",
        "--max-waiting-interactions",
        "5000",
        "--max-inflight-batches",
        "4",
    ]);
    let (streams, batches, per_batch) = (4u64, 60u64, 500u64);
    let mut senders = Vec::new();
    for stream in 0..streams {
        let mut client = server.collector().await;
        senders.push(tokio::spawn(async move {
            let batches = (0..batches).map(move |b| EventBatch {
                sequence: b,
                events: (0..per_batch)
                    .map(|i| {
                        let n = (stream * batches + b) * per_batch + i;
                        let items: Vec<String> = (0..20).map(|j| format!("\"item{}\"", (n + j) % 5000)).collect();
                        if n % 2 == 0 {
                            event(&format!(r#"{{"impression":{{"requestId":"r{n}","userId":"u{n}","itemIds":[{}],"time":"2026-11-01T10:00:00Z"}}}}"#, items.join(",")))
                        } else {
                            event(&format!(r#"{{"interaction":{{"userId":"x{n}","itemId":"item1","type":"click","time":"2026-11-01T10:00:00Z"}}}}"#))
                        }
                    })
                    .collect(),
            });
            let mut acks = client.ingest(tokio_stream::iter(batches)).await.unwrap().into_inner();
            let (mut accepted, mut shed) = (0, 0);
            while let Some(ack) = acks.message().await.unwrap() {
                accepted += u64::from(ack.accepted);
                assert!(ack.rejections.iter().all(|r| r.reason.starts_with("shed_max_")));
                assert!(ack.more_rejections.iter().all(|c| c.reason.starts_with("shed_max_")));
                // Past max_ack_rejections an ack counts rejections by reason.
                shed += ack.rejections.len() as u64;
                shed += ack.more_rejections.iter().map(|c| u64::from(c.count)).sum::<u64>();
            }
            (accepted, shed)
        }));
    }
    let (mut accepted, mut shed_in_acks) = (0, 0);
    for sender in senders {
        let (a, s) = sender.await.unwrap();
        (accepted, shed_in_acks) = (accepted + a, shed_in_acks + s);
    }
    let sent = streams * batches * per_batch;
    assert_eq!(accepted + shed_in_acks, sent);
    let metrics = parse_metrics(&server.get("/metrics").1);
    assert_eq!(metrics["rankwatch_events_received_total"], sent as f64);
    assert_eq!(metrics["rankwatch_events_accepted_total"], accepted as f64);
    assert_eq!(metrics["rankwatch_open_impressions"], 5000.0);
    assert_eq!(metrics["rankwatch_waiting_interactions"], 5000.0);
    let shed = |limit: &str| metrics[&format!("rankwatch_events_shed_total{{reason=\"{limit}\"}}")];
    assert_eq!(
        metrics["rankwatch_impressions_total"] + shed("max_open_impressions"),
        (sent / 2) as f64
    );
    assert_eq!(
        metrics["rankwatch_interactions_total"] + shed("max_waiting_interactions"),
        (sent / 2) as f64
    );
    assert_eq!(
        shed("max_open_impressions") + shed("max_waiting_interactions"),
        shed_in_acks as f64
    );
    let rss = metrics["process_resident_memory_bytes"];
    assert!(rss < 256.0 * 1024.0 * 1024.0, "resident memory {rss} bytes");
    assert_eq!(server.get("/healthz").0, 200);
}

/// Lines of the conformance log that are JSON, each interaction given an event id so resends are
/// recognised. Interactions without a request id are left out: a resent one may match a newer
/// impression than the first time, and docs/SPEC.md §3 then credits it there (docs/choices.md, "Retries").
fn log_with_event_ids() -> Vec<String> {
    let log = std::fs::read_to_string(conformance("replay_small.jsonl")).unwrap();
    log.lines()
        .enumerate()
        .filter_map(|(n, line)| {
            let mut value: serde_json::Value = serde_json::from_str(line).ok()?;
            if let Some(x) = value.get_mut("interaction").and_then(|x| x.as_object_mut()) {
                x.get("requestId")?;
                x.entry("eventId")
                    .or_insert_with(|| format!("line-{n}").into());
            }
            Some(value.to_string())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resending_after_a_broken_stream_gives_the_same_figures() {
    let lines = log_with_event_ids();
    let log: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let expected = replay_json(&["-", "--format", "json"], Some(log.as_bytes()));
    let server = Server::exact(&[]);
    let events: Vec<proto::Event> = lines.iter().map(|l| event(l)).collect();
    let batches: Vec<EventBatch> = events
        .chunks(40)
        .enumerate()
        .map(|(i, c)| EventBatch {
            sequence: i as u64,
            events: c.to_vec(),
        })
        .collect();
    // Every fifth batch the stream breaks after sending; the client resends the unacknowledged batches on a new stream.
    let mut next = 0;
    while next < batches.len() {
        let end = (next + 5).min(batches.len());
        let mut client = server.collector().await;
        let mut acks = client
            .ingest(tokio_stream::iter(batches[next..end].to_vec()))
            .await
            .unwrap()
            .into_inner();
        let mut acked = 0;
        while let Some(_ack) = acks.message().await.unwrap() {
            acked += 1;
        }
        assert_eq!(acked, end - next);
        next = if end < batches.len() { end - 2 } else { end };
        if end == batches.len() {
            break;
        }
    }
    let closing = event(
        r#"{"interaction":{"eventId":"closing","userId":"closing-user","itemId":"x","type":"click","time":"2026-11-02T10:00:00Z"}}"#,
    );
    server
        .collector()
        .await
        .ingest_batch(EventBatch {
            sequence: 0,
            events: vec![closing],
        })
        .await
        .unwrap();
    let metrics = parse_metrics(&server.get("/metrics").1);
    let mut checked = BTreeMap::new();
    for group in expected["groups"].as_array().unwrap() {
        let labels = format!(
            "model=\"{}\",surface=\"{}\"",
            group["model"].as_str().unwrap(),
            group["surface"].as_str().unwrap()
        );
        assert_eq!(
            metrics[&format!("rankwatch_lists_finalized_total{{{labels}}}")],
            group["lists"].as_f64().unwrap()
        );
        for (key, means) in group["metrics"].as_object().unwrap() {
            let series = match key.split_once('@') {
                Some((metric, k)) => format!("rankwatch_list_{metric}_sum{{k=\"{k}\",{labels}}}"),
                None => format!("rankwatch_list_{key}_sum{{{labels}}}"),
            };
            let sum = metrics[&series];
            let mean = sum / group["lists"].as_f64().unwrap();
            assert!(
                (mean - means["all"].as_f64().unwrap()).abs() <= 1e-9,
                "{labels} {key}"
            );
            checked.insert(key.clone(), ());
        }
    }
    assert_eq!(
        checked.len(),
        11 * 4 + 1,
        "every metric at every K, and r_precision"
    );
    assert!(
        metrics["rankwatch_duplicates_total{kind=\"impression\"}"] > 17.0,
        "the resent impressions were recognised"
    );
    assert!(
        metrics["rankwatch_duplicates_total{kind=\"interaction\"}"] > 64.0,
        "the resent interactions were recognised"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_malformed_message_over_grpc() {
    use common::server::ingest_raw_bytes;
    let server = Server::exact(&["--max-message-size", "4096"]);
    // An interaction whose grade (field 7, a double) is sent as a varint.
    let mut grade_as_varint = proto::Event {
        kind: Some(proto::event::Kind::Interaction(
            proto::Interaction::default(),
        )),
    }
    .encode_to_vec();
    grade_as_varint.extend([0x38, 0x02]);
    grade_as_varint[1] += 2;
    let mut batch = vec![0x12, grade_as_varint.len() as u8];
    batch.extend(grade_as_varint);
    let cases: [(Vec<u8>, tonic::Code, &str); 4] = [
        (
            vec![0x12, 0x05, 0x0a],
            tonic::Code::InvalidArgument,
            "malformed EventBatch: a field runs past the end of its message",
        ),
        (
            batch,
            tonic::Code::InvalidArgument,
            "malformed EventBatch: Interaction.grade is a double (wire type 1)",
        ),
        (
            vec![0x0a, 0x01, 0x01],
            tonic::Code::InvalidArgument,
            "malformed EventBatch: EventBatch.sequence is a uint64 (wire type 0)",
        ),
        (
            vec![0x08; 4097],
            tonic::Code::ResourceExhausted,
            "a message of 4097 bytes is larger than max_message_size (4096 bytes); send smaller batches",
        ),
    ];
    for (bytes, code, message) in &cases {
        let status = ingest_raw_bytes(&server, bytes.clone()).await.unwrap_err();
        assert_eq!((status.code(), status.message()), (*code, *message));
    }
    let metrics = parse_metrics(&server.get("/metrics").1);
    assert_eq!(
        metrics["rankwatch_streams_failed_total"],
        cases.len() as f64
    );
    assert_eq!(metrics["rankwatch_events_received_total"], 0.0);
}

/// An interleaving whose bytes cannot be read rejects its own event, and
/// the message says so of the interleaving: it had said the whole
/// `EventBatch` was malformed, of an event the batch's ack rejected alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interleaving_that_cannot_be_read_rejects_its_event_alone() {
    use common::server::ingest_raw_bytes;
    let server = Server::exact(&[]);
    let impression = event(
        r#"{"impression":{"requestId":"r1","userId":"u1","itemIds":["a","b"],"time":"2026-11-01T10:00:00Z","interleaving":{"rankers":["ZZ","other"],"teams":[0,1]}}}"#,
    );
    let mut bytes = EventBatch {
        sequence: 1,
        events: vec![impression],
    }
    .encode_to_vec();
    let at = bytes.windows(2).position(|w| w == b"ZZ").unwrap();
    bytes[at..at + 2].copy_from_slice(&[0xff, 0xfe]);
    let ack = ingest_raw_bytes(&server, bytes).await.unwrap();
    assert_eq!(ack.accepted, 0);
    let rejection = &ack.rejections[0];
    assert_eq!(
        (
            rejection.index,
            rejection.reason.as_str(),
            rejection.message.as_str()
        ),
        (
            0,
            "invalid_interleaving",
            "interleaving cannot be read: a string field is not valid UTF-8"
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_is_not_grpc_gets_http_415() {
    use tonic::codegen::{http, Service};
    let server = Server::exact(&[]);
    let mut channel = tonic::transport::Channel::from_shared(format!("http://{}", server.grpc))
        .unwrap()
        .connect()
        .await
        .unwrap();
    for (path, content_type) in [
        ("/rankwatch.v1.Collector/IngestBatch", "application/json"),
        ("/rankwatch.v1.Evaluation/GetMetrics", "text/plain"),
        (
            "/rankwatch.v1.Collector/IngestBatch",
            "application/grpc+json",
        ),
    ] {
        let request = http::Request::post(format!("http://{}{path}", server.grpc))
            .header(http::header::CONTENT_TYPE, content_type)
            .header("te", "trailers")
            .body(tonic::body::Body::empty())
            .unwrap();
        std::future::poll_fn(|cx| channel.poll_ready(cx))
            .await
            .unwrap();
        let response = channel.call(request).await.unwrap();
        assert_eq!(response.status(), http::StatusCode::UNSUPPORTED_MEDIA_TYPE);
        let status = tonic::Status::from_header_map(response.headers()).unwrap();
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert_eq!(
            status.message(),
            format!(
                "content type \"{content_type}\" is not gRPC; send application/grpc or application/grpc+proto"
            )
        );
    }
    // gRPC itself still works, and nothing was counted as a failed stream.
    let ack = server
        .collector()
        .await
        .ingest_batch(EventBatch {
            sequence: 1,
            events: vec![event(
                r#"{"impression":{"requestId":"r","userId":"u","itemIds":["a"],"time":"2026-11-01T10:00:00Z"}}"#,
            )],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(ack.accepted, 1);
    let metrics = parse_metrics(&server.get("/metrics").1);
    assert_eq!(metrics["rankwatch_streams_failed_total"], 0.0);
}

#[cfg(feature = "kafka")]
#[test]
fn a_relay_whose_broker_cannot_be_reached_stops_at_once_on_sigterm() {
    // Its first look at the topics waits up to 10 s for the broker; SIGTERM
    // came during it, the server said it had stopped, lived 8 s longer and
    // at times panicked on a timer of the runtime shutting down.
    let mut server = Server::start(&["--kafka-mode", "relay", "--kafka-brokers", "127.0.0.1:1"]);
    std::thread::sleep(std::time::Duration::from_secs(2));
    let asked = std::time::Instant::now();
    assert_eq!(server.terminate(), Some(0));
    let took = asked.elapsed();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let logged: Vec<String> = server.log.try_iter().collect();
    assert!(
        took < std::time::Duration::from_secs(5),
        "exited {took:?} after SIGTERM: {logged:#?}"
    );
    assert!(
        !logged.iter().any(|line| line.contains("panicked")),
        "{logged:#?}"
    );
}

#[test]
fn sighup_saves_the_state_and_stops_as_sigterm_does() {
    // Closing the terminal a server runs in sends SIGHUP: it had killed the
    // server without saving its open lists.
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(&saving_to(dir.path()));
    let pid = server.child.id().to_string();
    std::process::Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .unwrap();
    let mut exit = None;
    for _ in 0..100 {
        exit = server.child.try_wait().unwrap();
        if exit.is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(exit.and_then(|status| status.code()), Some(0), "{exit:?}");
    assert!(dir.path().join("rankwatch.state").exists());
}

#[cfg(feature = "kafka")]
#[test]
fn a_topic_name_kafka_would_refuse_stops_the_server_at_start_naming_the_setting() {
    use common::server::{exit_of, serve_command};
    let long = "t".repeat(244);
    for (flags, setting) in [
        (vec!["--kafka-topic", "a/b"], "kafka_topic"),
        (vec!["--kafka-topic", ""], "kafka_topic"),
        (vec!["--kafka-topic", ".."], "kafka_topic"),
        (
            vec!["--kafka-state-topic", "state topic"],
            "kafka_state_topic",
        ),
        // 244 characters are a valid topic, but its default state topic
        // ("<topic>.state") would pass Kafka's 249.
        (vec!["--kafka-topic", &long], "kafka_state_topic"),
        (vec!["--kafka-group", ""], "kafka_group"),
    ] {
        let mut args = vec!["--kafka-mode", "relay", "--kafka-brokers", "127.0.0.1:1"];
        args.extend_from_slice(&flags);
        let (code, stderr) = exit_of(&mut serve_command(&args));
        assert_eq!(code, Some(1), "{flags:?}: {stderr}");
        assert!(stderr.contains(setting), "{flags:?}: {stderr}");
        assert!(!stderr.contains("rankwatch serving"), "{flags:?}: {stderr}");
    }
}
