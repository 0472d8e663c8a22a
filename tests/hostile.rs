//! Hostile clients: huge values, forged names, floods of connections and
//! calls, and shutdowns mid-stream. The server stays bounded, counts what it
//! drops, and tells the client.

mod common;

use common::replay;
use common::server::{dechunk, event_from_json, parse_metrics, serve_command, Server};
use rankwatch::proto::{self, EventBatch};

const T: &str = r#""time":"2026-11-01T10:00:00Z""#;

fn event(json: &str) -> proto::Event {
    event_from_json(json).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejection_messages_quote_a_short_prefix_of_huge_client_values() {
    let server = Server::exact(&[]);
    let huge = "\n".repeat(1 << 20);
    let mut bad_type = event(&format!(
        r#"{{"interaction":{{"userId":"u","itemId":"a","type":"click",{T}}}}}"#
    ));
    let mut duplicate = event(&format!(
        r#"{{"impression":{{"requestId":"r","userId":"u","itemIds":["a"],{T}}}}}"#
    ));
    match (&mut bad_type.kind, &mut duplicate.kind) {
        (Some(proto::event::Kind::Interaction(x)), Some(proto::event::Kind::Impression(m))) => {
            x.r#type = huge.clone();
            m.item_ids = vec![huge.clone(), huge.clone()];
        }
        _ => unreachable!("an interaction and an impression"),
    }
    let mut client = server.collector().await;
    let ack = ingest(&mut client, 1, vec![bad_type, duplicate]).await;
    let reasons: Vec<&str> = ack.rejections.iter().map(|r| r.reason.as_str()).collect();
    assert_eq!(reasons, ["unknown_type", "duplicate_item_id"]);
    for rejection in &ack.rejections {
        assert!(rejection.message.len() < 600, "{}", rejection.message);
        assert!(
            rejection.message.contains("(1048576 bytes)"),
            "{}",
            rejection.message
        );
    }
}

#[test]
fn replay_quotes_a_short_prefix_of_huge_values_on_stderr() {
    let huge = "x".repeat(1 << 20);
    let line = format!(
        "{{\"interaction\":{{\"userId\":\"u\",\"itemId\":\"a\",\"type\":\"{huge}\",{T}}}}}\n{{\"impression\":{{\"requestId\":\"r\",\"userId\":\"u\",\"itemIds\":[\"{huge}\",\"{huge}\"],{T}}}}}\n"
    );
    // Lines of 1 and 2 MiB: past the default max_line_bytes, which is raised for them.
    let output = replay(&["-", "--max-line-bytes", "8000000"], Some(line.as_bytes()));
    assert!(output.status.success());
    let stderr = String::from_utf8(output.stderr).unwrap();
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{stderr:.2000}");
    assert!(lines[0].starts_with("-:1: unknown_type"), "{}", lines[0]);
    assert!(
        lines[1].starts_with("-:2: duplicate_item_id"),
        "{}",
        lines[1]
    );
    assert!(lines.iter().all(|line| line.len() < 600), "{stderr:.2000}");
}

/// A log's name is printed with what a terminal acts on escaped, in the
/// lines naming its bad lines and in the error of a log that cannot be
/// read: a name holding ESC and BEL had set the terminal's title.
#[test]
fn replay_escapes_the_names_of_logs_it_prints() {
    let dir = tempfile::tempdir().unwrap();
    let name = "log\u{1b}]0;TITLE\u{7}.jsonl";
    std::fs::write(dir.path().join(name), "not json\n").unwrap();
    let bad = dir.path().join(name).to_str().unwrap().to_owned();
    let missing = dir
        .path()
        .join(format!("gone-{name}"))
        .to_str()
        .unwrap()
        .to_owned();
    let output = replay(&[&bad, &missing], None);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains(r"log\u{1b}]0;TITLE\u{7}.jsonl:1: invalid_json"),
        "{stderr}"
    );
    assert!(
        stderr.contains(r"cannot read ") && stderr.contains(r"gone-log\u{1b}]0;TITLE\u{7}.jsonl"),
        "{stderr}"
    );
    assert!(!stderr.contains(['\u{1b}', '\u{7}']), "{stderr:?}");
}

#[test]
fn a_positive_grade_too_small_to_sum_is_rejected_and_a_small_one_evaluated() {
    let log = [
        r#"{"impression":{"requestId":"r","userId":"u","itemIds":["a","b"],"time":"2026-11-01T10:00:00Z"}}"#,
        r#"{"interaction":{"userId":"u","itemId":"b","requestId":"r","type":"click","grade":5e-324,"time":"2026-11-01T10:00:01Z"}}"#,
        r#"{"interaction":{"userId":"u","itemId":"b","requestId":"r","type":"click","grade":1e-6,"time":"2026-11-01T10:00:02Z"}}"#,
    ]
    .join("\n");
    let output = replay(&["-", "--format", "json"], Some(log.as_bytes()));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("-:2: invalid_grade"), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["counters"]["rejected"]["invalid_grade"], 1);
    // The hit at rank 2: nDCG 1 / log2(3), whatever the grade's size.
    let ndcg = report["groups"][0]["metrics"]["ndcg@10"]["all"]
        .as_f64()
        .unwrap();
    assert!((ndcg - 1.0 / 3f64.log2()).abs() < 1e-9, "{ndcg}");
}

#[test]
fn a_line_that_moves_time_far_ahead_of_later_lines_is_named() {
    // Lists a minute apart over three hours, each clicked.
    let mut lines = Vec::new();
    for i in 0..180 {
        let (hour, minute) = (10 + i / 60, i % 60);
        lines.push(format!(r#"{{"impression":{{"requestId":"r{i}","userId":"u{i}","itemIds":["a","b"],"time":"2026-11-01T{hour}:{minute:02}:00Z"}}}}"#));
        lines.push(format!(r#"{{"interaction":{{"userId":"u{i}","itemId":"b","requestId":"r{i}","type":"click","time":"2026-11-01T{hour}:{minute:02}:05Z"}}}}"#));
    }
    let log = |lines: &[String]| lines.iter().map(|l| format!("{l}\n")).collect::<String>();
    let stderr = |lines: &[String]| {
        let output = replay(&["-"], Some(log(lines).as_bytes()));
        assert!(output.status.success());
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    assert!(!stderr(&lines).contains("ahead"), "an ordinary log");
    // The log with a click of `time` inserted before line `at` (0-based).
    let with_click_at = |at: usize, time: &str| {
        let mut skewed = lines.clone();
        let click = format!(
            r#"{{"interaction":{{"userId":"u5","itemId":"b","type":"click","time":"{time}"}}}}"#
        );
        skewed.insert(at, click);
        stderr(&skewed)
    };
    // One click from a clock an hour fast, long before the log's end: the
    // 110 events of the next 55 minutes are then late (it had gone unsaid).
    let said = with_click_at(20, "2026-11-01T11:10:00Z");
    assert!(
        said.contains("-:21: its time, 2026-11-01T11:10:00.000Z, moved the latest event time 1h 55s ahead, and 110 later events were older")
            && said.contains("fix or drop the line"),
        "{said}"
    );
    // One 73 years fast: every later event is behind it.
    let said = with_click_at(10, "2099-01-01T00:00:00Z");
    assert!(
        said.contains("-:11: its time, 2099-01-01T00:00:00.000Z")
            && said.contains(", and 350 later events"),
        "{said}"
    );
    // From one end of the times a log may hold to the other: the jump is
    // told whole (it had been cut at the 292 years a signed time holds).
    let ends = [
        r#"{"impression":{"requestId":"r1","userId":"u1","itemIds":["a"],"time":"1678-01-01T00:00:00Z"}}"#,
        r#"{"interaction":{"userId":"u2","itemId":"a","type":"click","time":"2262-01-01T00:00:00Z"}}"#,
        r#"{"impression":{"requestId":"r2","userId":"u3","itemIds":["a"],"time":"1678-01-01T00:00:01Z"}}"#,
    ];
    let said = stderr(&ends.map(str::to_owned));
    assert!(
        said.contains("moved the latest event time 583years 11months 25days"),
        "{said}"
    );
}

#[test]
fn replay_tables_escape_what_a_terminal_acts_on_in_names() {
    // A model name that sets the terminal's title and starts a row of its
    // own, a surface that turns the text's direction.
    let line = format!(
        "{}\n",
        r#"{"impression":{"requestId":"r","userId":"u","itemIds":["a"],"model":"m\u001b]0;owned\u0007\nfake row","surface":"s\u202e","time":"2026-11-01T10:00:00Z"}}"#
    );
    let output = replay(&["-"], Some(line.as_bytes()));
    assert!(output.status.success());
    let table = String::from_utf8(output.stdout).unwrap();
    for c in ['\u{1b}', '\u{7}', '\u{202e}'] {
        assert!(!table.contains(c), "{c:?} printed raw:\n{table}");
    }
    assert!(
        table.contains(r"m\u{1b}]0;owned\u{7}\u{a}fake row"),
        "{table}"
    );
    assert!(table.contains(r"s\u{202e}"), "{table}");
    assert!(!table.lines().any(|l| l.starts_with("fake row")), "{table}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_cannot_forge_the_overflow_group() {
    let server = Server::exact(&[]);
    let forged = event(&format!(
        r#"{{"impression":{{"requestId":"r","userId":"u","itemIds":["a"],"model":"__overflow__","surface":"__overflow__",{T}}}}}"#
    ));
    let mut client = server.collector().await;
    let ack = ingest(&mut client, 1, vec![forged]).await;
    assert_eq!(ack.accepted, 0);
    assert_eq!(ack.rejections[0].reason, "reserved_name");
    let metrics = parse_metrics(&server.get("/metrics").1);
    assert_eq!(
        metrics["rankwatch_events_rejected_total{reason=\"reserved_name\"}"],
        1.0
    );
    assert_eq!(metrics["rankwatch_events_received_total"], 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shed_events_are_in_the_ack_and_in_received_equals_accepted_plus_rejected_plus_shed() {
    let server = Server::exact(&[
        "--max-open-impressions",
        "2",
        "--max-waiting-interactions",
        "1",
    ]);
    let mut events: Vec<proto::Event> = (0..4)
        .map(|u| {
            event(&format!(
                r#"{{"impression":{{"requestId":"r{u}","userId":"u{u}","itemIds":["a"],{T}}}}}"#
            ))
        })
        .collect();
    events.extend((0..3).map(|w| {
        event(&format!(
            r#"{{"interaction":{{"userId":"w{w}","itemId":"a","type":"click",{T}}}}}"#
        ))
    }));
    events.push(event(r#"{"impression":{"userId":"u"}}"#));
    let mut client = server.collector().await;
    let ack = ingest(&mut client, 1, events).await;
    assert_eq!(ack.accepted, 3);
    let rejections = rejection_reasons(&ack);
    assert_eq!(
        rejections,
        [
            (2, "shed_max_open_impressions"),
            (3, "shed_max_open_impressions"),
            (5, "shed_max_waiting_interactions"),
            (6, "shed_max_waiting_interactions"),
            (7, "missing_request_id"),
        ]
    );
    let metrics = parse_metrics(&server.get("/metrics").1);
    let rejected: f64 = metrics
        .iter()
        .filter(|(name, _)| name.starts_with("rankwatch_events_rejected_total{"))
        .map(|(_, value)| value)
        .sum();
    let shed: f64 = metrics
        .iter()
        .filter(|(name, _)| name.starts_with("rankwatch_events_shed_total{"))
        .map(|(_, value)| value)
        .sum();
    assert_eq!(
        (
            metrics["rankwatch_events_received_total"],
            metrics["rankwatch_events_accepted_total"],
            rejected,
            shed
        ),
        (8.0, 3.0, 1.0, 4.0)
    );
}

/// Interactions credited to open lists are bounded all together, not only
/// per list: a client crediting many lists would otherwise hold 24 bytes a
/// credit without end. A waiting interaction holds the place of the credit
/// it becomes when its list opens and claims it, so feedback sent before
/// its lists cannot take them past the limit either. One that would be
/// credited, or wait, past `max_open_credits` is shed, counted and told
/// why; a list's credits are given back as it closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_credits_of_open_lists_together_are_bounded_by_max_open_credits() {
    let server = Server::exact(&["--max-open-credits", "3"]);
    let at = "2026-11-01T10:00:00Z";
    let impression = |user: usize, time: &str| {
        event(&format!(
            r#"{{"impression":{{"requestId":"r{user}","userId":"u{user}","itemIds":["i0","i1","i2","i3"],"time":"{time}"}}}}"#
        ))
    };
    let click = |user: usize, item: usize, time: &str| {
        event(&format!(
            r#"{{"interaction":{{"userId":"u{user}","itemId":"i{item}","requestId":"r{user}","type":"click","time":"{time}"}}}}"#
        ))
    };
    // Each click waits, then its list opens and claims it: three fill the
    // limit, and the fourth can neither wait nor, once its list is open,
    // be credited.
    let mut events = Vec::new();
    for user in 0..4 {
        events.extend([click(user, 0, at), impression(user, at)]);
    }
    events.push(click(3, 1, at));
    let mut client = server.collector().await;
    let ack = ingest(&mut client, 1, events).await;
    assert_eq!(ack.accepted, 7, "{:?}", ack.rejections);
    assert_eq!(
        rejection_reasons(&ack),
        [(6, "shed_max_open_credits"), (8, "shed_max_open_credits")]
    );
    assert!(
        ack.rejections[0].message.contains("max_open_credits"),
        "{:?}",
        ack.rejections[0]
    );
    let metrics = parse_metrics(&server.get("/metrics").1);
    assert_eq!(metrics["rankwatch_open_credits"], 3.0);
    assert_eq!(metrics["rankwatch_waiting_interactions"], 0.0);
    assert_eq!(metrics["rankwatch_interactions_credited_total"], 3.0);
    assert_eq!(shed_and_limit(&metrics, "max_open_credits"), (2.0, 3.0));
    assert_eq!(metrics["rankwatch_events_received_total"], 9.0);

    // An event a day later closes the lists, their credits given back.
    let later = "2026-11-02T10:00:00Z";
    let events = vec![impression(4, later), click(4, 3, later)];
    let ack = ingest(&mut client, 2, events).await;
    assert_eq!(ack.accepted, 2, "{:?}", ack.rejections);
    let metrics = parse_metrics(&server.get("/metrics").1);
    assert_eq!(metrics["rankwatch_open_credits"], 1.0);
    assert_eq!(metrics["rankwatch_interactions_credited_total"], 4.0);
}

/// Long lists meet `max_open_items` before `max_open_impressions`: the
/// items of all open lists together bound their memory whatever a list's
/// length. An impression whose items would take them past it is shed,
/// counted, and told why; a list's items are given back as it closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_items_of_open_lists_together_are_bounded_by_max_open_items() {
    let server = Server::exact(&["--max-open-items", "5"]);
    let impression = |user: usize, items: usize, time: &str| {
        let items: Vec<String> = (0..items).map(|i| format!("\"i{i}\"")).collect();
        event(&format!(
            r#"{{"impression":{{"requestId":"r{user}","userId":"u{user}","itemIds":[{}],"time":"{time}"}}}}"#,
            items.join(",")
        ))
    };
    let at = "2026-11-01T10:00:00Z";
    let events = vec![
        impression(0, 3, at),
        impression(1, 3, at),
        impression(2, 2, at),
        impression(3, 1, at),
    ];
    let mut client = server.collector().await;
    let ack = ingest(&mut client, 1, events).await;
    assert_eq!(ack.accepted, 2);
    let rejections = rejection_reasons(&ack);
    assert_eq!(
        rejections,
        [(1, "shed_max_open_items"), (3, "shed_max_open_items")]
    );
    assert!(
        ack.rejections[0].message.contains("max_open_items"),
        "{:?}",
        ack.rejections[0]
    );
    let metrics = parse_metrics(&server.get("/metrics").1);
    assert_eq!(metrics["rankwatch_open_impressions"], 2.0);
    assert_eq!(metrics["rankwatch_open_items"], 5.0);
    assert_eq!(shed_and_limit(&metrics, "max_open_items"), (2.0, 5.0));
    assert_eq!(metrics["rankwatch_events_received_total"], 4.0);

    // An event a day later closes the lists, their items given back.
    let later = "2026-11-02T10:00:00Z";
    let events = vec![
        event(&format!(
            r#"{{"interaction":{{"userId":"u9","itemId":"i0","requestId":"r9","type":"click","time":"{later}"}}}}"#
        )),
        impression(4, 4, later),
    ];
    let ack = ingest(&mut client, 2, events).await;
    assert_eq!(ack.accepted, 2, "{:?}", ack.rejections);
    let metrics = parse_metrics(&server.get("/metrics").1);
    assert_eq!(metrics["rankwatch_open_items"], 4.0);
    assert_eq!(
        metrics[r#"rankwatch_lists_finalized_total{model="default",surface="default"}"#],
        2.0
    );
}

/// The ack of one batch of `events`, numbered `sequence`, sent on `client`.
async fn ingest(
    client: &mut proto::collector_client::CollectorClient<tonic::transport::Channel>,
    sequence: u64,
    events: Vec<proto::Event>,
) -> proto::IngestAck {
    let batch = EventBatch { sequence, events };
    client.ingest_batch(batch).await.unwrap().into_inner()
}

/// The series of a limit under which `rankwatch_events_shed_total` counts.
fn shed_and_limit(metrics: &std::collections::BTreeMap<String, f64>, limit: &str) -> (f64, f64) {
    (
        metrics[&format!(r#"rankwatch_events_shed_total{{reason="{limit}"}}"#)],
        metrics[&format!(r#"rankwatch_limit{{limit="{limit}"}}"#)],
    )
}

/// Each rejection of `ack`: the event's index and the reason.
fn rejection_reasons(ack: &proto::IngestAck) -> Vec<(u32, &str)> {
    ack.rejections
        .iter()
        .map(|r| (r.index, r.reason.as_str()))
        .collect()
}

fn impression_batch(sequence: u64) -> EventBatch {
    EventBatch {
        sequence,
        events: vec![event(&format!(
            r#"{{"impression":{{"requestId":"r{sequence}","userId":"u","itemIds":["a"],{T}}}}}"#
        ))],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_an_unfinished_stream_with_unavailable_after_its_acks() {
    let server = Server::exact(&[]);
    let (batches, mut acks) = server.ingest_stream().await;
    batches.send(impression_batch(1)).await.unwrap();
    let ack = acks.message().await.unwrap().unwrap();
    assert_eq!((ack.sequence, ack.accepted), (1, 1));
    let code = server.stop().await;
    let status = acks.message().await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    assert!(status.message().contains("acknowledged"), "{status:?}");
    assert_eq!(code, Some(0));
    drop(batches);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_stream_is_ended_and_its_permit_freed() {
    let server = Server::exact(&["--ingest-idle-timeout", "1s", "--max-streams", "1"]);
    let (batches, mut acks) = server.ingest_stream().await;
    batches.send(impression_batch(1)).await.unwrap();
    assert_eq!(acks.message().await.unwrap().unwrap().accepted, 1);
    let status = acks.message().await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    assert!(
        status.message().contains("ingest_idle_timeout"),
        "{status:?}"
    );
    let mut again = server.collector().await;
    let acks = again
        .ingest(tokio_stream::iter([impression_batch(2)]))
        .await
        .unwrap()
        .into_inner();
    let acks: Vec<_> = tokio_stream::StreamExt::collect::<Vec<_>>(acks).await;
    assert_eq!(acks.len(), 1);
    assert_eq!(acks[0].as_ref().unwrap().accepted, 1);
    drop(batches);
    let metrics = parse_metrics(&server.get("/metrics").1);
    assert_eq!(metrics["rankwatch_streams_timed_out_total"], 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unary_calls_past_max_inflight_batches_are_refused_and_counted() {
    let server = Server::exact(&["--max-inflight-batches", "1"]);
    let big = EventBatch {
        sequence: 1,
        events: (0..20_000)
            .map(|i| {
                event(&format!(
                    r#"{{"impression":{{"requestId":"r{i}","userId":"u{i}","itemIds":["a","b","c"],{T}}}}}"#
                ))
            })
            .collect(),
    };
    let calls: Vec<_> = (0..16)
        .map(|_| {
            let (address, batch) = (format!("http://{}", server.grpc), big.clone());
            tokio::spawn(async move {
                let mut client = proto::collector_client::CollectorClient::connect(address)
                    .await
                    .unwrap();
                client.ingest_batch(batch).await
            })
        })
        .collect();
    let (mut ok, mut refused) = (0, 0);
    for call in calls {
        match call.await.unwrap() {
            Ok(_) => ok += 1,
            Err(status) => {
                assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
                refused += 1;
            }
        }
    }
    assert_eq!(ok + refused, 16);
    assert!(ok >= 1);
    let metrics = parse_metrics(&server.get("/metrics").1);
    assert_eq!(metrics["rankwatch_streams_refused_total"], refused as f64);
}

/// A server with the report limits `limits`, holding 200 groups of 16
/// cutoffs, their lists final once an event an hour later moves `T` on: a
/// report of some megabytes, more than HTTP/2 buffers for a stream
/// whatever its reader's window (400 KiB).
async fn server_with_a_large_report(limits: &[&str]) -> Server {
    let k = (1..=16)
        .map(|k| k.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let server = Server::exact(&[limits, &["--k", &k]].concat());
    let mut events: Vec<_> = (0..200)
        .map(|i| {
            event(&format!(
                r#"{{"impression":{{"requestId":"r{i}","userId":"u{i}","itemIds":["a","b"],"model":"model-{i}",{T}}}}}"#
            ))
        })
        .collect();
    events.push(event(
        r#"{"impression":{"requestId":"later","userId":"u","itemIds":["a"],"model":"model-0","time":"2026-11-01T11:00:00Z"}}"#,
    ));
    let batch = EventBatch {
        sequence: 1,
        events,
    };
    server.collector().await.ingest_batch(batch).await.unwrap();
    server
}

/// A `GetMetrics` call whose reader, with a window of 1 KiB, never reads
/// the answer's body: the server holds the rest of the report until the
/// returned call and client are dropped.
async fn unread_report(server: &Server) -> UnreadReport {
    unread_report_from(server, std::net::Ipv4Addr::LOCALHOST.into())
        .await
        .unwrap()
}

/// [`unread_report`] from the loopback address `client`, or its refusal.
async fn unread_report_from(
    server: &Server,
    client: std::net::IpAddr,
) -> Result<UnreadReport, tonic::Status> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", server.grpc))
        .unwrap()
        .local_address(Some(client))
        .initial_stream_window_size(Some(1024))
        .initial_connection_window_size(Some(1024))
        .connect()
        .await
        .unwrap();
    let mut reader = tonic::client::Grpc::new(channel);
    reader.ready().await.unwrap();
    let codec = tonic_prost::ProstCodec::<proto::GetMetricsRequest, proto::Report>::default();
    let path =
        tonic::codegen::http::uri::PathAndQuery::from_static("/rankwatch.v1.Evaluation/GetMetrics");
    let request = tonic::Request::new(proto::GetMetricsRequest::default());
    let unread = reader.server_streaming(request, path, codec).await?;
    Ok((unread, reader))
}

/// A call whose answer is not read, and its client.
type UnreadReport = (
    tonic::Response<tonic::Streaming<proto::Report>>,
    tonic::client::Grpc<tonic::transport::Channel>,
);

/// A report whose client does not read it holds one of
/// `max_concurrent_reports` until the client goes (the memory of unread
/// answers stays bounded); past it, reports are refused at once, counted,
/// and the client told why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_held_for_clients_that_do_not_read_them_are_bounded() {
    // Room for two of one client's, so that the limit met is all reports'.
    let limits = [
        "--max-concurrent-reports",
        "1",
        "--max-reports-per-client",
        "2",
    ];
    let server = server_with_a_large_report(&limits).await;
    let unread = unread_report(&server).await;

    let answer = server
        .evaluation()
        .await
        .get_metrics(proto::GetMetricsRequest::default())
        .await;
    let Err(refused) = answer else {
        panic!("a second report was answered while the first is held");
    };
    assert_eq!(
        refused.code(),
        tonic::Code::ResourceExhausted,
        "{refused:?}"
    );
    assert!(
        refused.message().contains("max_concurrent_reports"),
        "{refused:?}"
    );
    let (status, body) = server.get("/metrics");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("max_concurrent_reports"), "{body}");
    assert_eq!(server.get("/healthz").0, 200, "probes are never refused");

    // Once the reader is gone, its permit is free again.
    drop(unread);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let metrics = loop {
        let (status, body) = server.get("/metrics");
        if status == 200 {
            break parse_metrics(&body);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still refused: {body}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(server.report().await.groups.len(), 200);
    let refused = |endpoint: &str| {
        metrics[&format!(
            r#"rankwatch_reports_refused_total{{endpoint="{endpoint}",reason="max_concurrent_reports"}}"#
        )]
    };
    assert_eq!(refused("GetMetrics"), 1.0);
    assert!(refused("metrics") >= 1.0);
    assert_eq!(
        metrics[r#"rankwatch_limit{limit="max_concurrent_reports"}"#],
        1.0
    );
}

/// A quarter of `max_concurrent_reports` is kept for `/metrics`: clients
/// of `GetMetrics` that hold every other permit (a flood of queries, or
/// answers left unread) no longer make Prometheus's scrapes fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_held_by_queries_leave_room_for_scrapes() {
    let limits = [
        "--max-concurrent-reports",
        "4",
        "--max-reports-per-client",
        "4",
    ];
    let server = server_with_a_large_report(&limits).await;
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(unread_report(&server).await);
    }
    let answer = server
        .evaluation()
        .await
        .get_metrics(proto::GetMetricsRequest::default())
        .await;
    let refused = answer.expect_err("a fourth query was answered while three are held");
    assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
    let (status, body) = server.get("/metrics");
    assert_eq!(status, 200, "{body}");
    let metrics = parse_metrics(&body);
    assert_eq!(
        metrics[r#"rankwatch_reports_refused_total{endpoint="GetMetrics",reason="max_concurrent_reports"}"#],
        1.0
    );
    assert_eq!(
        metrics[r#"rankwatch_reports_refused_total{endpoint="metrics",reason="max_concurrent_reports"}"#],
        0.0
    );
}

/// One client address holds at most `max_reports_per_client` reports over
/// gRPC too (half of four by default): its third `GetMetrics` left unread
/// is refused, saying which limit, while another address is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_holds_at_most_its_share_of_grpc_reports() {
    let server = server_with_a_large_report(&["--max-concurrent-reports", "4"]).await;
    let one = std::net::Ipv4Addr::LOCALHOST.into();
    let held = [unread_report(&server).await, unread_report(&server).await];
    let Err(refused) = unread_report_from(&server, one).await else {
        panic!("a third report was answered to one client holding two");
    };
    assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
    assert!(
        refused.message().contains("max_reports_per_client"),
        "{refused:?}"
    );
    let other = std::net::Ipv4Addr::new(127, 0, 0, 2).into();
    let answered = unread_report_from(&server, other).await;
    assert!(answered.is_ok(), "{:?}", answered.err());
    let metrics = parse_metrics(
        &server
            .get_from(std::net::Ipv4Addr::new(127, 0, 0, 3).into(), "/metrics")
            .1,
    );
    assert_eq!(
        metrics[r#"rankwatch_reports_refused_total{endpoint="GetMetrics",reason="max_reports_per_client"}"#],
        1.0
    );
    drop((held, answered));
}

/// A `GetMetrics` answer left unread holds its permit only until
/// `grpc_report_timeout`: then its connection is closed, counted, and the
/// permit is free again. A client whose window stays shut (sending pings,
/// which keep `grpc_idle_timeout` from passing) had held it for as long as
/// it liked, its address's scrapes of `/metrics` refused meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_left_unread_on_grpc_is_cut_at_the_report_timeout() {
    let limits = [
        "--max-concurrent-reports",
        "1",
        "--grpc-report-timeout",
        "1s",
    ];
    let server = server_with_a_large_report(&limits).await;
    let unread = unread_report(&server).await;
    assert_eq!(
        server.get("/metrics").0,
        503,
        "the unread report holds the permit"
    );
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let (status, body) = server.get("/metrics");
    assert_eq!(status, 200, "{body}");
    let metrics = parse_metrics(&body);
    assert_eq!(metrics["rankwatch_grpc_connections_timed_out_total"], 1.0);
    drop(unread);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_open_http_connections_are_capped_and_timed_out() {
    use std::io::Read;
    let server = Server::exact(&[
        "--max-http-connections",
        "8",
        "--max-concurrent-reports",
        "1",
        "--http-header-timeout",
        "300ms",
    ]);
    let mut silent: Vec<std::net::TcpStream> = (0..200)
        .map(|_| std::net::TcpStream::connect(server.http).unwrap())
        .collect();
    for stream in &mut silent {
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        let mut byte = [0u8; 1];
        // The server closes each one: at once past the cap, after the header timeout within it.
        match stream.read(&mut byte) {
            Ok(read) => assert_eq!(read, 0),
            Err(error) => assert_eq!(error.kind(), std::io::ErrorKind::ConnectionReset),
        }
    }
    assert_eq!(server.get("/metrics").0, 200);
    let mut client = server.collector().await;
    let ack = client
        .ingest_batch(impression_batch(1))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(ack.accepted, 1);
    let metrics = parse_metrics(&server.get("/metrics").1);
    assert_eq!(
        metrics["rankwatch_limit{limit=\"max_http_connections\"}"],
        8.0
    );
    // Each silent connection was closed once, one way or another: past
    // the cap, each new one closed the one quiet the longest.
    let evicted = metrics["rankwatch_http_connections_evicted_total"];
    let refused = metrics["rankwatch_http_connections_refused_total"];
    let timed_out = metrics["rankwatch_http_connections_timed_out_total"];
    let counts = format!("{evicted} + {refused} + {timed_out}");
    assert_eq!(evicted + refused + timed_out, 200.0, "{counts}");
    assert!(timed_out >= 8.0 && evicted >= 1.0, "{counts}");
}

#[test]
fn probes_are_answered_while_silent_connections_hold_every_http_slot() {
    use std::io::Write;
    use std::time::Duration;
    let server = Server::exact(&[
        "--max-http-connections",
        "4",
        "--max-concurrent-reports",
        "1",
        "--http-header-timeout",
        "60s",
        "--http-idle-timeout",
        "60s",
    ]);
    let connect = || std::net::TcpStream::connect(server.http).unwrap();
    let mut silent: Vec<std::net::TcpStream> = (0..4).map(|_| connect()).collect();
    std::thread::sleep(Duration::from_millis(300));
    // Each probe makes room by closing the connection quiet the longest:
    // the silent ones in the order they came, not the probes kept open.
    let request = b"GET /healthz HTTP/1.1\r\nHost: rankwatch\r\n\r\n";
    let mut probes = Vec::new();
    for _ in 0..3 {
        let mut probe = connect();
        probe.write_all(request).unwrap();
        assert_eq!(http_response(&mut probe).as_deref(), Some("ok\n"));
        probes.push(probe);
    }
    for (index, stream) in silent.iter_mut().enumerate() {
        assert_eq!(
            closed_by_server(stream),
            index < 3,
            "silent connection {index}"
        );
    }
    for probe in &mut probes {
        probe.write_all(request).unwrap();
        assert_eq!(http_response(probe).as_deref(), Some("ok\n"));
    }
    let metrics = parse_metrics(&server.get("/metrics").1);
    assert_eq!(metrics["rankwatch_http_connections_evicted_total"], 4.0);
    assert_eq!(metrics["rankwatch_http_connections_refused_total"], 0.0);
}

/// A server started with `args` whose /metrics is some tens of megabytes,
/// far more than the sockets' buffers hold: a few hundred groups, their
/// model names `padding` bytes longer than they need be.
async fn server_with_large_metrics(args: &[&str], padding: usize) -> Server {
    let server = Server::exact(args);
    let padding = "x".repeat(padding);
    let mut events: Vec<_> = (0..400)
        .map(|i| {
            event(&format!(
                r#"{{"impression":{{"requestId":"r{i}","userId":"u{i}","itemIds":["a"],"model":"m{i}{padding}",{T}}}}}"#
            ))
        })
        .collect();
    // A day later: every list of them is finalized.
    events.push(event(
        r#"{"impression":{"requestId":"later","userId":"u","itemIds":["a"],"time":"2026-11-02T10:00:00Z"}}"#,
    ));
    let batch = EventBatch {
        sequence: 1,
        events,
    };
    let ack = server.collector().await.ingest_batch(batch).await.unwrap();
    assert_eq!(ack.into_inner().accepted, 401);
    server
}

/// A scrape costs the server less than the length of its text in memory
/// (0.8 times here for the first, later ones reusing it; 1.0 to 1.9 times
/// while a text was rendered whole before it was sent), not the 3.6 times
/// that a text grown in one buffer held while it doubled and moved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrape_holds_about_its_own_length_in_memory() {
    let server = server_with_large_metrics(&["--position-curve-depth", "100"], 0).await;
    let pid = server.child.id();
    let before = common::memory_kib(pid, "VmRSS");
    let peak_before = common::memory_kib(pid, "VmHWM");
    let (status, text) = server.get("/metrics");
    assert_eq!(status, 200);
    let peak = common::memory_kib(pid, "VmHWM");
    let body_kib = text.len() as u64 / 1024;
    assert!(
        body_kib > 20 * 1024,
        "{body_kib} KiB of /metrics: too small to tell"
    );
    assert!(
        peak.saturating_sub(before) < body_kib * 5 / 2,
        "a scrape of {body_kib} KiB took the server from {before} to {peak} KiB (peak before it {peak_before})"
    );
}

/// `count` scrapes of `/metrics` whose answers are left unread.
fn unread_scrapes(server: &Server, count: usize) -> Vec<std::net::TcpStream> {
    use std::io::Write;
    let scrape = |_| {
        let mut stream = std::net::TcpStream::connect(server.http).unwrap();
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: rankwatch\r\n\r\n")
            .unwrap();
        stream
    };
    (0..count).map(scrape).collect()
}

/// A scrape left unread holds the few pieces of its text rendered ahead of
/// its reader and the snapshot they are rendered from, not the whole text:
/// eight of them take the server's memory up by less than half of one
/// text (35 MB for texts of 100 MB of long model names here). Each had held
/// all of its text until its reader took it or went away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scrapes_left_unread_hold_pieces_of_their_text_not_all_of_it() {
    let server = server_with_large_metrics(&["--max-reports-per-client", "8"], 240).await;
    let pid = server.child.id();
    let (status, text) = server.get("/metrics");
    assert_eq!(status, 200);
    let body_kib = text.len() as u64 / 1024;
    assert!(
        body_kib > 20 * 1024,
        "{body_kib} KiB of /metrics: too small to tell"
    );
    let before = common::memory_kib(pid, "VmRSS");
    let unread = unread_scrapes(&server, 8);
    // Time to render what each will hold.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let held = common::memory_kib(pid, "VmRSS").saturating_sub(before);
    assert!(
        held < body_kib / 2,
        "8 unread scrapes of {body_kib} KiB each hold {held} KiB"
    );
    drop(unread);
}

/// One client cannot hold every report: eight scrapes left unread from one
/// address take `max_reports_per_client` permits (half of the eight by
/// default) and the rest are refused, so that Prometheus, scraping from
/// another address, is answered. The eight had held every permit until
/// `http_send_timeout`, and every scrape meanwhile was answered 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_leaving_scrapes_unread_cannot_keep_out_another() {
    let server = server_with_large_metrics(&[], 240).await;
    let unread = unread_scrapes(&server, 8);
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let prometheus = std::net::Ipv4Addr::new(127, 0, 0, 2).into();
    let (status, body) = server.get_from(prometheus, "/metrics");
    assert_eq!(status, 200, "{body}");
    let metrics = parse_metrics(&body);
    let refused = |reason: &str| {
        metrics
            [&format!(r#"rankwatch_reports_refused_total{{endpoint="metrics",reason="{reason}"}}"#)]
    };
    assert_eq!(refused("max_reports_per_client"), 4.0);
    assert_eq!(refused("max_concurrent_reports"), 0.0);
    assert_eq!(
        metrics[r#"rankwatch_limit{limit="max_reports_per_client"}"#],
        4.0
    );
    drop(unread);
}

/// A scrape whose reader goes at once ends its rendering and gives back
/// its permit only then: a burst of such scrapes renders no more texts at
/// once than `max_concurrent_reports` allows. Each had rendered on, a
/// thread apiece, with its permit already given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scrapes_whose_readers_leave_at_once_render_no_more_than_the_permits_allow() {
    use std::io::Write;
    let args = [
        "--max-concurrent-reports",
        "2",
        "--max-reports-per-client",
        "2",
    ];
    let server = server_with_large_metrics(&args, 240).await;
    let pid = server.child.id();
    let threads = || {
        std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .count()
    };
    let before = threads();
    for _ in 0..30 {
        let mut stream = std::net::TcpStream::connect(server.http).unwrap();
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: rankwatch\r\n\r\n")
            .unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let during = threads();
    assert!(
        during <= before + 3,
        "{before} threads before 30 scrapes left at once, {during} after"
    );
}

/// An HTTP/2 connection to the HTTP listener with a window of 0, sending
/// `requests` GETs of `path`: the statuses answered, and whether each
/// answer ended with its head.
async fn http2_gets(server: &Server, path: &str, requests: usize) -> Vec<(u16, bool)> {
    let tcp = tokio::net::TcpStream::connect(server.http).await.unwrap();
    let (mut client, connection) = h2::client::Builder::new()
        .initial_window_size(0)
        .handshake::<_, bytes::Bytes>(tcp)
        .await
        .unwrap();
    tokio::spawn(connection);
    let mut answers = Vec::new();
    let mut unread = Vec::new();
    for _ in 0..requests {
        client = client.ready().await.unwrap();
        let uri = format!("http://{}{path}", server.http);
        let request = tonic::codegen::http::Request::get(uri).body(()).unwrap();
        let (response, _) = client.send_request(request, true).unwrap();
        let response = response.await.unwrap();
        answers.push((response.status().as_u16(), response.body().is_end_stream()));
        unread.push(response);
    }
    // The connection stays open and its answers unread, neither taken nor
    // cancelled, until the test ends.
    std::mem::forget((client, unread));
    answers
}

/// The HTTP listener answers HTTP/1.1 only. Over one HTTP/2 connection a
/// client could start many scrapes and, its window shut, hold every
/// report's permit, so that Prometheus's scrapes were refused until the
/// send timeout; and an answer's body that such a window holds back kept
/// its connection at work, so that `max_http_connections` of them shut
/// out every other client. Each HTTP/2 request is answered 505 at once,
/// with no body, holding nothing: scrapes and probes over HTTP/1.1 go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_connections_hold_neither_report_permits_nor_connections() {
    let args = [
        "--max-concurrent-reports",
        "4",
        "--max-http-connections",
        "6",
    ];
    let server = server_with_large_metrics(&args, 240).await;
    assert_eq!(http2_gets(&server, "/metrics", 8).await, [(505, true); 8]);
    for _ in 0..5 {
        assert_eq!(http2_gets(&server, "/healthz", 1).await, [(505, true)]);
    }
    // Every connection is taken: an HTTP/1.1 scrape needs a quiet one closed.
    let (status, body) = server.get("/metrics");
    assert_eq!(status, 200, "{}", &body[..body.len().min(200)]);
    assert_eq!(server.get("/healthz").0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrape_being_read_is_not_closed_to_make_room() {
    use std::io::{Read, Write};
    use std::time::Duration;
    let args = [
        "--max-http-connections",
        "2",
        "--max-concurrent-reports",
        "1",
    ];
    let server = server_with_large_metrics(&args, 0).await;
    let mut scrape = std::net::TcpStream::connect(server.http).unwrap();
    scrape
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: rankwatch\r\nConnection: close\r\n\r\n")
        .unwrap();
    // Read slowly while silent connections come, each needing room.
    let mut response = Vec::new();
    let mut chunk = vec![0u8; 256 * 1024];
    let mut silent = Vec::new();
    loop {
        let read = scrape.read(&mut chunk).unwrap();
        if read == 0 {
            break;
        }
        response.extend_from_slice(&chunk[..read]);
        if silent.len() < 8 {
            silent.push(std::net::TcpStream::connect(server.http).unwrap());
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let text = String::from_utf8(response).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    assert!(head.contains("transfer-encoding: chunked"), "{head}");
    assert!(body.ends_with("\r\n0\r\n\r\n"), "the scrape was cut");
    let length = dechunk(body).len();
    assert!(length > 16 << 20, "{length} bytes");
    drop(silent);
    let metrics = parse_metrics(&server.get("/metrics").1);
    assert!(metrics["rankwatch_http_connections_evicted_total"] >= 7.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_read_too_slowly_is_cut_at_the_send_timeout_and_frees_its_report() {
    use std::io::{Read, Write};
    use std::time::{Duration, Instant};
    let args = ["--max-concurrent-reports", "1", "--http-send-timeout", "1s"];
    let server = server_with_large_metrics(&args, 0).await;
    let mut slow = std::net::TcpStream::connect(server.http).unwrap();
    slow.write_all(b"GET /metrics HTTP/1.1\r\nHost: rankwatch\r\n\r\n")
        .unwrap();
    // A few kilobytes every 100 ms for 3 s, far from the tens of megabytes
    // sent: each write restarts the idle deadline, not the send deadline.
    let started = Instant::now();
    let mut chunk = [0u8; 4096];
    while started.elapsed() < Duration::from_secs(3) {
        assert!(slow.read(&mut chunk).unwrap() > 0);
        std::thread::sleep(Duration::from_millis(100));
    }
    // The slow reader's report holds the only permit no more: the next
    // scrape is answered (the slow reader still has bytes the kernel kept).
    let (status, body) = server.get("/metrics");
    assert_eq!(status, 200, "{body}");
    let metrics = parse_metrics(&body);
    assert_eq!(metrics["rankwatch_http_connections_timed_out_total"], 1.0);
}

/// Whether the server has closed `stream` (it is given 300 ms to).
fn closed_by_server(stream: &mut std::net::TcpStream) -> bool {
    use std::io::{ErrorKind, Read};
    stream
        .set_read_timeout(Some(std::time::Duration::from_millis(300)))
        .unwrap();
    match stream.read(&mut [0u8; 1]) {
        Ok(read) => read == 0,
        Err(error) => !matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
    }
}

/// The body of the next response on `stream`, or `None` if the server closed it first.
fn http_response(stream: &mut std::net::TcpStream) -> Option<String> {
    use std::io::Read;
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&bytes).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .find_map(|line| line.strip_prefix("content-length: "))
                .and_then(|length| length.parse::<usize>().ok());
            if length.is_some_and(|length| body.len() >= length) {
                assert!(head.starts_with("HTTP/1.1 200"), "{head}");
                return Some(body.to_owned());
            }
            if head.contains("transfer-encoding: chunked") && body.ends_with("\r\n0\r\n\r\n") {
                assert!(head.starts_with("HTTP/1.1 200"), "{head}");
                return Some(dechunk(body));
            }
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(read) => bytes.extend(&chunk[..read]),
        }
    }
}

#[test]
fn http_deadlines_bound_each_head_and_idleness() {
    use std::io::Write;
    use std::time::{Duration, Instant};
    let server = Server::exact(&[
        "--http-header-timeout",
        "2s",
        "--http-idle-timeout",
        "300ms",
    ]);
    let connect = || {
        let stream = std::net::TcpStream::connect(server.http).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        stream
    };
    let request = b"GET /healthz HTTP/1.1\r\nHost: rankwatch\r\n\r\n";
    // A scrape, then a second request whose head takes 600 ms: past the
    // idle deadline, within the header one, which runs from its first byte.
    let mut kept = connect();
    kept.write_all(b"GET /metrics HTTP/1.1\r\nHost: rankwatch\r\n\r\n")
        .unwrap();
    let scrape = http_response(&mut kept).unwrap();
    assert!(scrape.contains("rankwatch_http_connections_timed_out_total 0"));
    for part in request.chunks(7) {
        kept.write_all(part).unwrap();
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(http_response(&mut kept).as_deref(), Some("ok\n"));
    // Then nothing: the idle deadline closes it.
    let idle = Instant::now();
    assert_eq!(http_response(&mut kept), None);
    assert!(idle.elapsed() < Duration::from_secs(5));
    // A head sent a byte every 100 ms (4.2 s in all) is cut at the header deadline.
    let mut slow = connect();
    let slowloris = Instant::now();
    for byte in request {
        if slow.write_all(&[*byte]).is_err() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(http_response(&mut slow), None);
    assert!(slowloris.elapsed() < Duration::from_millis(3500));
    let metrics = parse_metrics(&server.get("/metrics").1);
    assert_eq!(metrics["rankwatch_http_connections_timed_out_total"], 2.0);
    assert_eq!(metrics["rankwatch_http_connections_refused_total"], 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversize_message_gets_resource_exhausted_and_is_counted_on_streams_and_unary_calls() {
    let server = Server::exact(&["--max-message-size", "1024"]);
    let big = EventBatch {
        sequence: 2,
        events: vec![proto::Event {
            kind: Some(proto::event::Kind::Impression(proto::Impression {
                item_ids: (0..200).map(|i| format!("item-{i}")).collect(),
                ..Default::default()
            })),
        }],
    };
    let mut client = server.collector().await;
    let acks = client
        .ingest(tokio_stream::iter([impression_batch(1), big.clone()]))
        .await
        .unwrap()
        .into_inner();
    let acks: Vec<_> = tokio_stream::StreamExt::collect::<Vec<_>>(acks).await;
    assert_eq!(acks.len(), 2, "{acks:?}");
    assert_eq!(acks[0].as_ref().unwrap().accepted, 1);
    let status = acks[1].as_ref().unwrap_err();
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    assert!(
        status.message().contains("max_message_size (1024 bytes)"),
        "{status:?}"
    );
    let metrics = parse_metrics(&server.get("/metrics").1);
    assert_eq!(metrics["rankwatch_streams_failed_total"], 1.0);

    let status = client.ingest_batch(big).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    assert!(
        status.message().contains("max_message_size (1024 bytes)"),
        "{status:?}"
    );
    let metrics = parse_metrics(&server.get("/metrics").1);
    assert_eq!(metrics["rankwatch_streams_failed_total"], 2.0);
    assert_eq!(metrics["rankwatch_events_received_total"], 1.0);
    let ack = client
        .ingest_batch(impression_batch(3))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(ack.accepted, 1);
}

/// The conformance log gzipped into `dir`, and its lines.
fn gzipped_log(dir: &std::path::Path) -> (std::path::PathBuf, Vec<u8>, usize) {
    use std::io::Write;
    let log = std::fs::read(common::conformance("replay_small.jsonl")).unwrap();
    let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gzip.write_all(&log).unwrap();
    let path = dir.join("log.jsonl.gz");
    std::fs::write(&path, gzip.finish().unwrap()).unwrap();
    let lines = log.iter().filter(|&&b| b == b'\n').count();
    (path, log, lines)
}

/// A failed replay's exit code, report and the line number its message gives.
fn failed_replay(args: &[&str]) -> (Option<i32>, serde_json::Value, String) {
    let output = replay(&[&["--format", "json"], args].concat(), None);
    let stderr = String::from_utf8(output.stderr).unwrap();
    let report = serde_json::from_slice(&output.stdout).unwrap();
    let last = stderr.lines().last().unwrap_or_default().to_owned();
    (output.status.code(), report, last)
}

/// The report and message of a replay of `bytes`, written to `path`,
/// that stops with exit code 3 (a log it could not read to its end).
fn replay_stopping_at(path: &std::path::Path, bytes: &[u8]) -> (serde_json::Value, String) {
    std::fs::write(path, bytes).unwrap();
    let (code, report, message) = failed_replay(&[path.to_str().unwrap()]);
    assert_eq!(code, Some(3), "{message}");
    (report, message)
}

/// The report of the first `lines` lines of `log`, replayed from standard input.
fn report_of_lines(log: &[u8], lines: usize) -> serde_json::Value {
    let end = log
        .iter()
        .enumerate()
        .filter(|(_, &b)| b == b'\n')
        .nth(lines - 1)
        .map_or(log.len(), |(i, _)| i + 1);
    common::replay_json(&["--format", "json", "-"], Some(&log[..end]))
}

#[test]
fn replay_of_a_truncated_gzip_reports_the_lines_before_the_cut_and_exits_3() {
    let dir = tempfile::tempdir().unwrap();
    let (path, log, _) = gzipped_log(dir.path());
    let gzip = std::fs::read(&path).unwrap();
    std::fs::write(&path, &gzip[..gzip.len() / 2]).unwrap();
    let (code, report, message) = failed_replay(&[path.to_str().unwrap()]);
    assert_eq!(code, Some(3), "{message}");
    let prefix = format!("rankwatch: cannot read {} past its line ", path.display());
    let line: usize = message
        .strip_prefix(&prefix)
        .and_then(|rest| rest.split(':').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{message}"));
    assert!(line > 1000, "{message}");
    assert!(
        message.ends_with("; the report covers the lines read before it"),
        "{message}"
    );
    assert_eq!(report, report_of_lines(&log, line));
}

#[test]
fn replay_of_a_file_named_gz_that_is_not_gzip_exits_3_saying_so() {
    let dir = tempfile::tempdir().unwrap();
    let log = std::fs::read(common::conformance("replay_small.jsonl")).unwrap();
    // Plain text, and a gzip stream behind one stray byte: neither starts with gzip's header.
    let (path, _, _) = gzipped_log(dir.path());
    let shifted = [&b"x"[..], &std::fs::read(&path).unwrap()].concat();
    for (name, bytes) in [("plain.jsonl.gz", log), ("shifted.jsonl.gz", shifted)] {
        let path = dir.path().join(name);
        let (report, message) = replay_stopping_at(&path, &bytes);
        assert_eq!(
            message,
            format!(
                "rankwatch: cannot read {}: it is named .gz but does not start with gzip's header (1f 8b); the report covers the lines read before it",
                path.display()
            )
        );
        assert_eq!(report["counters"]["impressions"], 0, "{report}");
    }
}

#[test]
fn replay_of_a_gzip_with_trailing_garbage_reports_every_line_and_exits_3() {
    let dir = tempfile::tempdir().unwrap();
    let (path, log, lines) = gzipped_log(dir.path());
    let gzip = std::fs::read(&path).unwrap();
    // Bytes too few for a gzip header, and enough: neither is another member.
    let cases = [
        (&b"x"[..], "78"),
        (b"not gzip at all", "6e 6f 74 20"),
        (b"\0\0\0\0\0x", "00 00 00 00"),
        (b"\x1f\x9d\x90hello", "1f 9d 90 68"),
    ];
    for (garbage, shown) in cases {
        let (report, message) = replay_stopping_at(&path, &[&gzip[..], garbage].concat());
        assert_eq!(
            message,
            format!(
                "rankwatch: cannot read {} past its line {lines}: the gzip data ends at byte {}, and what follows (starting {shown}) is not another gzip member: a damaged member, or other data appended to the file; the report covers the lines read before it",
                path.display(),
                gzip.len(),
            )
        );
        assert_eq!(report, report_of_lines(&log, lines));
    }
}

#[test]
fn replay_of_a_gzip_whose_later_member_is_damaged_says_where_that_member_starts() {
    let dir = tempfile::tempdir().unwrap();
    let (path, log, lines) = gzipped_log(dir.path());
    let gzip = std::fs::read(&path).unwrap();
    // A member's header with an unknown compression method (7, not 8).
    let damaged = [&gzip[..], b"\x1f\x8b\x07\0\0\0\0\0\0\xff"].concat();
    let (report, message) = replay_stopping_at(&path, &damaged);
    assert_eq!(
        message,
        format!(
            "rankwatch: cannot read {} past its line {lines}: in the gzip member that starts at byte {}: invalid gzip header; the report covers the lines read before it",
            path.display(),
            gzip.len(),
        )
    );
    assert_eq!(report, report_of_lines(&log, lines));
}

#[test]
fn replay_of_a_gzip_padded_with_zeros_reads_every_line() {
    let dir = tempfile::tempdir().unwrap();
    let (path, log, lines) = gzipped_log(dir.path());
    // Zeros after the last member (as a tape or a block device pads a
    // file) hold no data, and gzip itself reads past them.
    let padded = [std::fs::read(&path).unwrap(), vec![0; 4096]].concat();
    std::fs::write(&path, padded).unwrap();
    let output = replay(&["--format", "json", path.to_str().unwrap()], None);
    assert!(output.status.success(), "{output:?}");
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report, report_of_lines(&log, lines));
}

#[test]
fn replay_with_a_later_log_missing_reports_the_earlier_ones_and_exits_3() {
    let dir = tempfile::tempdir().unwrap();
    let (path, log, lines) = gzipped_log(dir.path());
    let missing = dir.path().join("missing.jsonl");
    let (code, report, message) =
        failed_replay(&[path.to_str().unwrap(), missing.to_str().unwrap()]);
    assert_eq!(code, Some(3), "{message}");
    assert_eq!(
        message,
        format!(
            "rankwatch: cannot read {}: No such file or directory (os error 2); the report covers the lines read before it",
            missing.display()
        )
    );
    assert_eq!(report, report_of_lines(&log, lines));
}

/// `rankwatch serve ARGS` that fails at start: its exit code and last line.
fn failed_start(args: &[&str]) -> (Option<i32>, String) {
    let output = serve_command(args).output().unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    (
        output.status.code(),
        stderr.lines().last().unwrap_or_default().to_owned(),
    )
}

#[test]
fn an_unusable_state_dir_stops_the_server_at_start_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"").unwrap();
    let (code, message) = failed_start(&["--state-dir", file.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{message}");
    assert_eq!(
        message,
        format!(
            "rankwatch: state_dir {} is a file, not a directory: point state_dir at a directory (it is created if missing), or move the file away",
            file.display()
        )
    );
    let below_a_file = file.join("state");
    let (code, message) = failed_start(&["--state-dir", below_a_file.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{message}");
    assert!(
        message.starts_with(&format!(
            "rankwatch: state_dir {} cannot be created (",
            below_a_file.display()
        )),
        "{message}"
    );
    assert!(!message.contains("overwritten"), "{message}");
}

#[test]
fn a_stale_temporary_state_file_is_removed_at_start_and_a_failed_save_leaves_none() {
    let dir = tempfile::tempdir().unwrap();
    let temporary = dir.path().join("rankwatch.state.tmp");
    std::fs::write(&temporary, b"half a state, from a full disk").unwrap();
    let mut server = Server::exact(&[
        "--state-dir",
        dir.path().to_str().unwrap(),
        "--snapshot-interval",
        "1h",
    ]);
    assert!(!temporary.exists(), "removed at start");
    // Once the server answers, it has restored (nothing) and only saves are left.
    assert_eq!(server.get("/readyz").0, 200);
    // The final save cannot rename its file over a directory that is not empty.
    std::fs::create_dir_all(dir.path().join("rankwatch.state/in-the-way")).unwrap();
    assert_eq!(server.terminate(), Some(1));
    assert!(!temporary.exists(), "removed after the failed save");
    let mut names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    // The lock file stays: only the lock on it ends with the server.
    assert_eq!(names, ["rankwatch.lock", "rankwatch.state"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_group_is_retired_counted_and_its_slot_freed() {
    let server = Server::exact(&["--max-groups", "1", "--group-idle-timeout", "1s"]);
    let impression = |request: &str, model: &str, time: &str| {
        event(&format!(
            r#"{{"impression":{{"requestId":"{request}","userId":"{request}","itemIds":["a"],"model":"{model}","surface":"home","time":"{time}"}}}}"#
        ))
    };
    let mut client = server.collector().await;
    let mut send = async |sequence, events| {
        let ack = ingest(&mut client, sequence, events).await;
        assert_eq!(ack.rejections, [], "batch {sequence}");
    };
    // The junk group's one list is finalized by the watermark of a later
    // interaction; the list of "late" folds into the overflow group and stays open.
    let closing = event(
        r#"{"interaction":{"userId":"w","itemId":"a","type":"click","time":"2026-11-01T10:20:00Z"}}"#,
    );
    send(
        1,
        vec![impression("r1", "junk", "2026-11-01T10:00:00Z"), closing],
    )
    .await;
    send(2, vec![impression("r2", "late", "2026-11-01T10:20:00Z")]).await;
    let metrics = parse_metrics(&server.get("/metrics").1);
    assert_eq!(
        metrics["rankwatch_lists_finalized_total{model=\"junk\",surface=\"home\"}"],
        1.0
    );
    assert_eq!(metrics["rankwatch_impressions_overflowed_total"], 1.0);
    assert_eq!(metrics["rankwatch_groups"], 1.0);
    let groups = server.report().await.groups;
    assert_eq!(
        groups
            .iter()
            .map(|g| (&*g.model, g.lists))
            .collect::<Vec<_>>(),
        [("junk", 1)]
    );
    server.wait_for_a_retired_group().await;
    // The freed slot takes a new group instead of the overflow group.
    send(3, vec![impression("r3", "next", "2026-11-01T10:20:00Z")]).await;
    let text = server.get("/metrics").1;
    assert!(
        !text.contains("model=\"junk\""),
        "the retired group is gone"
    );
    let metrics = parse_metrics(&text);
    assert_eq!(metrics["rankwatch_groups_retired_total"], 1.0);
    assert_eq!(metrics["rankwatch_impressions_overflowed_total"], 1.0);
    assert_eq!(metrics["rankwatch_impressions_total"], 3.0);
    assert_eq!(metrics["rankwatch_interactions_total"], 1.0);
    assert_eq!(metrics["rankwatch_groups"], 0.0, "none has finalized lists");
    // GetMetrics reports groups with finalized lists: the junk group is gone.
    assert_eq!(server.report().await.groups, []);
}

/// What replay says of bad lines goes to standard error; when nothing
/// reads that any more (`rankwatch replay LOG 2>&1 >report.json | head`),
/// the report is still written whole. The first line said had panicked
/// the replay, and no report was written.
#[test]
fn replay_whose_standard_error_is_a_closed_pipe_still_writes_its_report() {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let log = common::conformance("replay_small.jsonl");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_rankwatch"))
        .args(["replay", "--format", "json"])
        .arg(&log)
        .stderr(writer)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0));
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert!(report["counters"]["rejected"]
        .as_object()
        .is_some_and(|r| !r.is_empty()));
    assert_eq!(
        report,
        common::replay_json(&["--format", "json", log.to_str().unwrap()], None)
    );
}

#[test]
fn replay_into_a_closed_pipe_ends_quietly() {
    // As `rankwatch replay LOG | head` does once head has read enough.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_rankwatch"))
        .args(["replay", "--format", "json"])
        .arg(common::conformance("replay_small.jsonl"))
        .stdout(writer)
        .output()
        .unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(output.status.success(), "{stderr}");
    // Only the log's own bad lines are told; no panic, no write error.
    assert!(
        stderr
            .lines()
            .all(|line| line.contains("replay_small.jsonl:")),
        "{stderr}"
    );
}

/// Starts a unary `IngestBatch` call on `client` and sends all but the last
/// byte of a message of `length` bytes, never the rest.
fn begin_a_message(
    client: &mut h2::client::SendRequest<bytes::Bytes>,
    grpc: std::net::SocketAddr,
    length: u32,
) -> (h2::client::ResponseFuture, h2::SendStream<bytes::Bytes>) {
    let request = tonic::codegen::http::Request::post(format!(
        "http://{grpc}/rankwatch.v1.Collector/IngestBatch"
    ))
    .header("content-type", "application/grpc")
    .header("te", "trailers")
    .body(())
    .unwrap();
    let (response, mut send) = client.send_request(request, false).unwrap();
    let mut frame = vec![0u8; 5 + length as usize - 1];
    frame[1..5].copy_from_slice(&length.to_be_bytes());
    send.send_data(frame.into(), false).unwrap();
    (response, send)
}

/// The gRPC status of a call's answer: in its headers (an answer of
/// trailers only) or its trailers.
async fn grpc_status(response: tonic::codegen::http::Response<h2::RecvStream>) -> String {
    if let Some(status) = response.headers().get("grpc-status") {
        return status.to_str().unwrap().to_owned();
    }
    let mut body = response.into_body();
    while body.data().await.is_some() {}
    let trailers = body.trailers().await.unwrap().unwrap_or_default();
    trailers["grpc-status"].to_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_begun_and_never_finished_hold_no_more_than_their_budget() {
    // Each call sends all but the last byte of a 1 MiB message and waits:
    // before the budget, 100 such calls on one connection held 400 MB of
    // 4 MiB messages, for as long as the client kept it open.
    let server = Server::start(&[
        "--max-message-size",
        "1048576",
        "--max-partial-message-bytes",
        "2097152",
    ]);
    let tcp = tokio::net::TcpStream::connect(server.grpc).await.unwrap();
    let (mut client, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(connection);
    let mut calls = Vec::new();
    for _ in 0..3 {
        calls.push(begin_a_message(&mut client, server.grpc, 1 << 20));
    }
    let (answer, mut answered) = tokio::sync::mpsc::unbounded_channel();
    for (response, send) in calls {
        let answer = answer.clone();
        tokio::spawn(async move {
            let _open = send;
            let _ = answer.send(grpc_status(response.await.unwrap()).await);
        });
    }
    let first = tokio::time::timeout(std::time::Duration::from_secs(10), answered.recv())
        .await
        .expect(
            "no call was refused: three unfinished 1 MiB messages are held past a 2 MiB budget",
        );
    assert_eq!(
        first.as_deref(),
        Some("14"),
        "UNAVAILABLE: the budget frees, so the client retries"
    );
    let metrics = parse_metrics(&server.get("/metrics").1);
    assert!(metrics["rankwatch_partial_messages_refused_total"] >= 1.0);
    // No message of the refused call's was at fault: it is no failed stream.
    assert_eq!(metrics["rankwatch_streams_failed_total"], 0.0);
    assert_eq!(
        metrics[r#"rankwatch_limit{limit="max_partial_message_bytes"}"#],
        2097152.0
    );
}

/// A log truncated in place while replay reads it (a rotation by copy and
/// truncate) ends the replay with exit code 3, saying so, whether it is cut
/// before or past where replay has read to: cut past it, replay had read
/// on to the new end and taken it for the log's (exit 0).
#[test]
fn replay_of_a_log_truncated_while_read_reports_the_lines_before_and_exits_3() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rotated.jsonl");
    let items: Vec<String> = (0..20).map(|i| format!("\"item-{i}\"")).collect();
    let items = items.join(",");
    let write_log = || {
        let mut log = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
        for i in 0..300_000 {
            writeln!(
                log,
                r#"{{"impression":{{"requestId":"r{i}","userId":"u{}","itemIds":[{items}],{T}}}}}"#,
                i % 5000
            )
            .unwrap();
        }
    };
    // Cut to nothing, and halfway between where replay has read and the
    // end; the log named, or redirected to standard input (`-`), where a
    // cut had gone unnoticed (exit 0).
    /// Where to cut, from the bytes read and the size.
    type Cut = fn(u64, u64) -> u64;
    let cuts: [(Cut, bool); 3] = [
        (|_, _| 0, false),
        (|read, size| read + (size - read) / 2, false),
        (|read, size| read + (size - read) / 2, true),
    ];
    for (cut, from_stdin) in cuts {
        write_log();
        let size = std::fs::metadata(&path).unwrap().len();
        let mut replay = std::process::Command::new(env!("CARGO_BIN_EXE_rankwatch"));
        replay.args(["replay", "--threads", "1", "--format", "json"]);
        if from_stdin {
            replay.arg("-").stdin(std::fs::File::open(&path).unwrap());
        } else {
            replay.arg(&path);
        }
        let replay = replay
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = replay.id().to_string();
        // Once replay has begun reading the log, it is paused, the log is
        // truncated in place, and replay goes on.
        let position = || -> Option<u64> {
            let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
            let fd = fds
                .flatten()
                .find(|fd| std::fs::read_link(fd.path()).is_ok_and(|target| target == path))?;
            let info =
                std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{}", fd.file_name().to_str()?))
                    .ok()?;
            info.lines()
                .find_map(|line| line.strip_prefix("pos:")?.trim().parse().ok())
        };
        let signal = |name: &str| {
            let sent = std::process::Command::new("kill")
                .args([name, &pid])
                .status();
            assert!(sent.unwrap().success());
        };
        let mut waited = 0;
        while position().is_none_or(|read| read == 0) {
            assert!(waited < 10_000, "replay never began reading");
            std::thread::sleep(std::time::Duration::from_millis(1));
            waited += 1;
        }
        signal("-STOP");
        let read = position().unwrap();
        assert!(
            read < size,
            "replay read all {size} bytes before it was paused"
        );
        let cut_to = cut(read, size);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(cut_to)
            .unwrap();
        signal("-CONT");
        let output = replay.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(3), "cut to {cut_to}: {stderr}");
        assert!(
            stderr.contains(&format!(
                "shrank from {size} to {cut_to} bytes while it was read"
            )),
            "{stderr}"
        );
        let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        let impressions = report["counters"]["impressions"].as_u64().unwrap();
        assert!(impressions > 0 && impressions < 300_000, "{impressions}");
    }
}
