//! The gRPC listener's bounds against the real server: a flood of silent
//! connections is capped and timed out, and neither starves ingest nor
//! scrapes; the descriptors of both listeners fit the open-file limit.

mod common;

use common::server::{event_from_json, exit_of, parse_metrics, serve_command, Server};
use rankwatch::proto::EventBatch;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// The value of the series `name` on `/metrics`, or, for a name without
/// labels, of all its series together (a counter by reason, say).
fn counter(server: &Server, name: &str) -> f64 {
    parse_metrics(&server.get("/metrics").1)
        .iter()
        .filter(|(series, _)| {
            *series == name || (!name.contains('{') && series.starts_with(&format!("{name}{{")))
        })
        .map(|(_, value)| value)
        .sum()
}

/// Whether the server closes `stream` within about ten seconds (bounded polls).
fn closed_by_server(stream: &mut TcpStream) -> bool {
    stream
        .set_read_timeout(Some(Duration::from_millis(250)))
        .unwrap();
    let mut buf = [0u8; 4096];
    for _ in 0..40 {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                continue
            }
            Err(_) => return true,
        }
    }
    false
}

/// Whether the server has closed `stream`, having read what it sent
/// before (its HTTP/2 settings); it is given 300 ms to.
fn closed_at_once(stream: &mut TcpStream) -> bool {
    stream
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) => {
                return !matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                )
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connections_past_the_cap_neither_starve_ingest_nor_scrapes() {
    let server = Server::exact(&["--max-grpc-connections", "50"]);
    let silent: Vec<TcpStream> = (0..200)
        .filter_map(|_| TcpStream::connect(server.grpc).ok())
        .collect();
    assert!(silent.len() > 50);
    // Past the cap, each new one closes the one quiet the longest.
    let closed = || counter(&server, "rankwatch_grpc_connections_evicted_total");
    for _ in 0..40 {
        if closed() >= 150.0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(closed() >= 150.0);
    // Ten slots are free again: a client ingests, a scrape answers.
    let mut ingested = None;
    for _ in 0..40 {
        if let Ok(mut client) = rankwatch::proto::collector_client::CollectorClient::connect(
            format!("http://{}", server.grpc),
        )
        .await
        {
            let event = event_from_json(
                r#"{"impression":{"requestId":"r","userId":"u","itemIds":["a"],"time":"2026-11-01T10:00:00Z"}}"#,
            )
            .unwrap();
            let batch = EventBatch {
                sequence: 1,
                events: vec![event],
            };
            if let Ok(ack) = client.ingest_batch(batch).await {
                ingested = Some(ack.into_inner().accepted);
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(ingested, Some(1));
    assert_eq!(server.get("/metrics").0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_health_check_is_answered_while_silent_connections_hold_every_grpc_slot() {
    use tonic_health::pb::{health_check_response::ServingStatus, health_client::HealthClient};
    let server = Server::exact(&[
        "--max-grpc-connections",
        "4",
        "--grpc-handshake-timeout",
        "60s",
        "--grpc-idle-timeout",
        "60s",
    ]);
    let mut silent: Vec<TcpStream> = (0..4)
        .map(|_| TcpStream::connect(server.grpc).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", server.grpc))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let status = HealthClient::new(channel)
        .check(tonic_health::pb::HealthCheckRequest::default())
        .await
        .unwrap()
        .into_inner()
        .status;
    assert_eq!(status, ServingStatus::Serving as i32);
    // One silent connection made room (the one whose last byte, the
    // server's own settings, moved first); the others stay.
    let closed = silent
        .iter_mut()
        .map(closed_at_once)
        .filter(|&closed| closed)
        .count();
    assert_eq!(closed, 1);
    assert_eq!(
        counter(&server, "rankwatch_grpc_connections_evicted_total"),
        1.0
    );
}

/// A batch of one impression, the `sequence`th of its stream.
fn batch(sequence: u64) -> EventBatch {
    let json = format!(
        r#"{{"impression":{{"requestId":"r{sequence}","userId":"u","itemIds":["a"],"time":"2026-11-01T10:00:00Z"}}}}"#
    );
    EventBatch {
        sequence,
        events: vec![event_from_json(&json).unwrap()],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_with_a_stream_open_is_not_closed_to_make_room() {
    let server = Server::exact(&["--max-grpc-connections", "2"]);
    let (batches, mut acks) = server.ingest_stream().await;
    batches.send(batch(1)).await.unwrap();
    assert_eq!(acks.message().await.unwrap().unwrap().accepted, 1);
    // The stream's connection is now quieter than each silent one that
    // comes after it: they push each other out, not the stream.
    std::thread::sleep(Duration::from_millis(100));
    let silent: Vec<TcpStream> = (0..10)
        .map(|_| {
            let stream = TcpStream::connect(server.grpc).unwrap();
            std::thread::sleep(Duration::from_millis(20));
            stream
        })
        .collect();
    batches.send(batch(2)).await.unwrap();
    let ack = acks.message().await.unwrap().unwrap();
    assert_eq!((ack.sequence, ack.accepted), (2, 1));
    assert_eq!(
        counter(&server, "rankwatch_grpc_connections_evicted_total"),
        9.0
    );
    drop(silent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_connections_all_at_work_a_new_one_is_refused_not_a_stream_cut() {
    use tonic_health::pb::health_client::HealthClient;
    let server = Server::exact(&["--max-grpc-connections", "2"]);
    let (batches, mut acks) = server.ingest_stream().await;
    batches.send(batch(1)).await.unwrap();
    assert_eq!(acks.message().await.unwrap().unwrap().accepted, 1);
    std::thread::sleep(Duration::from_millis(100));
    // A second connection with a call open, busier of late than the stream's.
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", server.grpc))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut watch = HealthClient::new(channel)
        .watch(tonic_health::pb::HealthCheckRequest::default())
        .await
        .unwrap()
        .into_inner();
    watch.message().await.unwrap().unwrap();
    // Every connection is at work: the new one is refused.
    let mut refused = TcpStream::connect(server.grpc).unwrap();
    assert!(closed_at_once(&mut refused));
    batches.send(batch(2)).await.unwrap();
    let ack = acks.message().await.unwrap().unwrap();
    assert_eq!((ack.sequence, ack.accepted), (2, 1));
    assert_eq!(
        counter(&server, "rankwatch_grpc_connections_refused_total"),
        1.0
    );
    assert_eq!(
        counter(&server, "rankwatch_grpc_connections_evicted_total"),
        0.0
    );
}

/// Once every gRPC connection has a call open, one client address keeps at
/// most `max_grpc_connections_per_client` of them (half of eight by
/// default): a host holding a health watch on every connection gives one up
/// to another client, while below the cap it may hold them all. With a
/// watch on each of eight, every new connection had been refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_holding_calls_open_on_every_connection_keeps_no_other_out() {
    use tonic_health::pb::{
        health_check_response::ServingStatus, health_client::HealthClient, HealthCheckRequest,
    };
    let server = Server::exact(&["--max-grpc-connections", "8"]);
    let endpoint =
        tonic::transport::Endpoint::from_shared(format!("http://{}", server.grpc)).unwrap();
    let flood = endpoint
        .clone()
        .local_address(Some(std::net::Ipv4Addr::new(127, 0, 0, 2).into()));
    let mut watches = Vec::new();
    for _ in 0..8 {
        let channel = flood.connect().await.unwrap();
        let mut watch = HealthClient::new(channel)
            .watch(HealthCheckRequest::default())
            .await
            .unwrap()
            .into_inner();
        watch.message().await.unwrap().unwrap();
        watches.push(watch);
    }
    let status = HealthClient::new(endpoint.connect().await.unwrap())
        .check(HealthCheckRequest::default())
        .await
        .unwrap()
        .into_inner()
        .status;
    assert_eq!(status, ServingStatus::Serving as i32);
    let mut ended = 0;
    for watch in &mut watches {
        let next = tokio::time::timeout(Duration::from_millis(300), watch.message()).await;
        ended += usize::from(matches!(next, Ok(Err(_) | Ok(None))));
    }
    assert_eq!(ended, 1, "one watch gave up its connection");
    let by_reason =
        |name: &str, reason: &str| counter(&server, &format!(r#"{name}{{reason="{reason}"}}"#));
    let evicted = "rankwatch_grpc_connections_evicted_total";
    assert_eq!(by_reason(evicted, "max_grpc_connections_per_client"), 1.0);
    assert_eq!(by_reason(evicted, "max_grpc_connections"), 0.0);
    assert_eq!(
        counter(
            &server,
            r#"rankwatch_limit{limit="max_grpc_connections_per_client"}"#
        ),
        4.0
    );
}

#[test]
fn a_connection_that_sends_no_preface_is_closed_after_the_handshake_timeout() {
    let server = Server::exact(&["--grpc-handshake-timeout", "1s"]);
    let mut silent = TcpStream::connect(server.grpc).unwrap();
    assert!(closed_by_server(&mut silent));
    assert!(counter(&server, "rankwatch_grpc_connections_timed_out_total") >= 1.0);
}

#[test]
fn an_idle_connection_is_closed_after_the_idle_timeout() {
    let server = Server::exact(&["--grpc-idle-timeout", "1s"]);
    let mut client = TcpStream::connect(server.grpc).unwrap();
    // HTTP/2's preface and an empty SETTINGS frame, then nothing.
    client
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .unwrap();
    client.write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0]).unwrap();
    assert!(closed_by_server(&mut client));
    assert!(counter(&server, "rankwatch_grpc_connections_timed_out_total") >= 1.0);
}

#[test]
fn grpc_bounds_out_of_range_are_refused_at_start() {
    for (flag, value) in [
        ("--max-grpc-connections", "0"),
        ("--max-grpc-connections", "18446744073709551615"),
        ("--grpc-handshake-timeout", "0s"),
        ("--grpc-idle-timeout", "0s"),
        ("--max-concurrent-streams", "0"),
        ("--max-concurrent-streams", "4294967296"),
    ] {
        let (code, stderr) = exit_of(&mut serve_command(&[flag, value]));
        assert_eq!(code, Some(1), "{flag} {value}: {stderr}");
        let key = flag.trim_start_matches("--").replace('-', "_");
        assert!(stderr.contains(&key), "{flag} {value}: {stderr}");
    }
}

#[test]
fn both_listeners_must_fit_the_open_file_limit() {
    let binary = env!("CARGO_BIN_EXE_rankwatch");
    let (code, stderr) = exit_of(std::process::Command::new("bash").args([
        "-c",
        &format!(
            "ulimit -n 512 && exec {binary} serve --grpc-addr 127.0.0.1:0 --http-addr 127.0.0.1:0"
        ),
    ]));
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("max_grpc_connections") && stderr.contains("512"),
        "{stderr}"
    );
    // Within the limit, it starts.
    let mut server = std::process::Command::new("bash")
        .args([
            "-c",
            &format!("ulimit -n 512 && exec {binary} serve --grpc-addr 127.0.0.1:0 --http-addr 127.0.0.1:0 --max-grpc-connections 300 --max-http-connections 100"),
        ])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut log = String::new();
    let mut stderr = server.stderr.take().unwrap();
    let mut buf = [0u8; 1024];
    while !log.contains("rankwatch serving") {
        match stderr.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => log.push_str(&String::from_utf8_lossy(&buf[..n])),
        }
    }
    server.kill().unwrap();
    server.wait().unwrap();
    assert!(log.contains("rankwatch serving"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_health_watch_hears_not_serving_as_soon_as_the_drain_begins() {
    use tonic_health::pb::{health_check_response::ServingStatus, health_client::HealthClient};
    let server = Server::start(&[]);
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", server.grpc))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = HealthClient::new(channel);
    let mut watch = health
        .watch(tonic_health::pb::HealthCheckRequest::default())
        .await
        .unwrap()
        .into_inner();
    let first = watch.message().await.unwrap().unwrap();
    assert_eq!(first.status(), ServingStatus::Serving);
    let pid = server.child.id().to_string();
    std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    // Load balancers and client-side health checks stop sending here, not at the exit.
    let next = tokio::time::timeout(Duration::from_secs(5), watch.message())
        .await
        .expect("no health update within 5 s of SIGTERM");
    assert_eq!(next.unwrap().unwrap().status(), ServingStatus::NotServing);
}

/// The response `request` gets from the HTTP listener of `server`, whole.
fn response_to(server: &Server, request: &str) -> String {
    let mut stream = TcpStream::connect(server.http).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    String::from_utf8_lossy(&response).into_owned()
}

/// The status line `request` gets from the HTTP listener of `server`.
fn status_line(server: &Server, request: &str) -> String {
    let response = response_to(server, request);
    response.lines().next().unwrap_or_default().to_owned()
}

/// An HTTP/1.1 request without a Host header, and any request with more
/// than one or with one that is not a host and port, is answered 400 (RFC
/// 9112 §3.2: a server must); they had been answered 200. HTTP/1.0 needs none.
#[test]
fn a_request_without_one_valid_host_header_is_a_bad_request() {
    let server = Server::start(&[]);
    let request = |version: &str, hosts: &str| {
        let request = format!("GET /healthz HTTP/{version}\r\n{hosts}Connection: close\r\n\r\n");
        let status = status_line(&server, &request);
        status.split(' ').nth(1).unwrap_or_default().to_owned()
    };
    assert_eq!(request("1.1", ""), "400");
    assert_eq!(request("1.1", "Host: a\r\nHost: b\r\n"), "400");
    assert_eq!(request("1.0", "Host: a\r\nHost: b\r\n"), "400");
    assert_eq!(request("1.1", "Host: a, b\r\n"), "400");
    assert_eq!(request("1.1", "Host: user@rankwatch\r\n"), "400");
    assert_eq!(request("1.1", "Host: rankwatch:port\r\n"), "400");
    assert_eq!(request("1.1", "Host: rankwatch\r\n"), "200");
    assert_eq!(request("1.1", "host: rankwatch:9090\r\n"), "200");
    assert_eq!(request("1.1", "Host: [::1]:9090\r\n"), "200");
    assert_eq!(request("1.1", "Host: 127.0.0.1\r\n"), "200");
    assert_eq!(request("1.0", ""), "200");
}

/// A request refused for its Host header is refused for that alone: a
/// POST without one had been answered 400 with the `Allow` header of a
/// 405, as if its method were the fault.
#[test]
fn a_bad_host_is_answered_without_the_allowed_methods() {
    let server = Server::start(&[]);
    let post = |hosts: &str| {
        let request = format!(
            "POST /metrics HTTP/1.1\r\n{hosts}Content-Length: 0\r\nConnection: close\r\n\r\n"
        );
        let response = response_to(&server, &request).to_ascii_lowercase();
        let head = response
            .split("\r\n\r\n")
            .next()
            .unwrap_or_default()
            .to_owned();
        head
    };
    let without_host = post("");
    assert!(without_host.starts_with("http/1.1 400 "), "{without_host}");
    assert!(!without_host.contains("\r\nallow:"), "{without_host}");
    let with_host = post("Host: rankwatch\r\n");
    assert!(with_host.starts_with("http/1.1 405 "), "{with_host}");
    assert!(with_host.contains("\r\nallow: get,head"), "{with_host}");
}

/// A gRPC client pointed at the HTTP listener (two ports, an easy mix-up)
/// is told which port it reached and where gRPC is: it had been answered
/// HTTP 505, which clients show as "grpc-status header missing, mapped
/// from HTTP status code 505".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_call_to_the_http_listener_is_told_where_grpc_is() {
    let server = Server::start(&[]);
    let mut wrong = rankwatch::proto::evaluation_client::EvaluationClient::connect(format!(
        "http://{}",
        server.http
    ))
    .await
    .unwrap();
    let refused = wrong
        .get_metrics(rankwatch::proto::GetMetricsRequest::default())
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unimplemented, "{refused:?}");
    let message = refused.message();
    assert!(message.contains("HTTP listener"), "{message}");
    assert!(
        message.contains(&format!("gRPC listener is {}", server.grpc)),
        "{message}"
    );
    // The server goes on answering both.
    assert_eq!(server.get("/healthz").0, 200);
    server.report().await;
}

/// A server whose addresses are both taken says so of both at once, with
/// the flag that chooses another: it had named the gRPC address alone, and
/// the HTTP one only at the next start, neither with what to change.
#[test]
fn addresses_taken_are_all_named_with_the_flag_to_change() {
    let taken = [(); 2].map(|()| std::net::TcpListener::bind("127.0.0.1:0").unwrap());
    let [grpc, http] = taken
        .each_ref()
        .map(|listener| listener.local_addr().unwrap());
    let (code, log) = exit_of(
        std::process::Command::new(env!("CARGO_BIN_EXE_rankwatch"))
            .args(["serve", "--grpc-addr", &grpc.to_string()])
            .args(["--http-addr", &http.to_string()]),
    );
    assert_eq!(code, Some(1), "{log}");
    assert!(
        log.contains(&format!("cannot bind gRPC to {grpc}"))
            && log.contains("choose another address with --grpc-addr")
            && log.contains(&format!("cannot bind HTTP to {http}"))
            && log.contains("choose another address with --http-addr"),
        "{log}"
    );
}
