//! A real `rankwatch serve` process on ephemeral loopback ports.

use rankwatch::proto;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running server; killed when dropped.
pub struct Server {
    pub child: Child,
    pub grpc: SocketAddr,
    pub http: SocketAddr,
    /// Lines the server logged, from its start.
    pub log: std::sync::mpsc::Receiver<String>,
}

/// The arguments of a server that follows the join rules exactly as
/// replay does (no wall-clock advance) and saves its state to `dir`.
pub fn saving_to(dir: &std::path::Path) -> [&str; 4] {
    let dir = dir.to_str().unwrap();
    ["--wall-clock-advance", "false", "--state-dir", dir]
}

/// `rankwatch serve` with both listeners on port 0, and `args`.
pub fn serve_command(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_rankwatch"));
    command
        .args([
            "serve",
            "--grpc-addr",
            "127.0.0.1:0",
            "--http-addr",
            "127.0.0.1:0",
        ])
        .args(args);
    command
}

impl Server {
    /// Starts `rankwatch serve` on port 0 with `args`, and waits for its addresses.
    pub fn start(args: &[&str]) -> Server {
        Server::started(args, true)
    }

    /// [`Server::start`], then closes the reading end of its standard
    /// error, as a log shipper that died would: what it logs next fails.
    pub fn start_unread(args: &[&str]) -> Server {
        Server::started(args, false)
    }

    /// Starts `rankwatch demo` (the server and its built-in traffic) on
    /// port 0 with `args`, and waits for its addresses.
    pub fn demo(args: &[&str]) -> Server {
        let mut command = Command::new(env!("CARGO_BIN_EXE_rankwatch"));
        command
            .args([
                "demo",
                "--grpc-addr",
                "127.0.0.1:0",
                "--http-addr",
                "127.0.0.1:0",
            ])
            .args(args);
        Server::launched(command, true)
    }

    fn started(args: &[&str], read_log: bool) -> Server {
        Server::launched(serve_command(args), read_log)
    }

    fn launched(mut command: Command, read_log: bool) -> Server {
        let mut child = command
            .env("RANKWATCH_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("rankwatch starts");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let (mut grpc, mut http) = (None, None);
        let (sender, log) = std::sync::mpsc::channel();
        for line in lines.by_ref() {
            let line = line.unwrap();
            sender.send(line.clone()).unwrap();
            for word in line.split_whitespace() {
                if let Some(addr) = word.strip_prefix("grpc_addr=") {
                    grpc = addr.parse().ok();
                }
                if let Some(addr) = word.strip_prefix("http_addr=") {
                    http = addr.parse().ok();
                }
            }
            if grpc.is_some() {
                break;
            }
        }
        if read_log {
            std::thread::spawn(move || {
                for line in lines.map_while(Result::ok) {
                    if sender.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        Server {
            child,
            grpc: grpc.expect("server logs its gRPC address"),
            http: http.expect("server logs its HTTP address"),
            log,
        }
    }

    /// `rankwatch serve` that follows the join rules exactly as replay does
    /// (no wall-clock advance), with `args` besides.
    pub fn exact(args: &[&str]) -> Server {
        let mut all = vec!["--wall-clock-advance", "false"];
        all.extend_from_slice(args);
        Server::start(&all)
    }

    /// A gRPC client of the collector.
    pub async fn collector(
        &self,
    ) -> proto::collector_client::CollectorClient<tonic::transport::Channel> {
        proto::collector_client::CollectorClient::connect(format!("http://{}", self.grpc))
            .await
            .unwrap()
    }

    /// An `Ingest` stream on a client of its own: batches sent into the
    /// sender go out on it, and its acks come out of the stream.
    pub async fn ingest_stream(
        &self,
    ) -> (
        tokio::sync::mpsc::Sender<proto::EventBatch>,
        tonic::Streaming<proto::IngestAck>,
    ) {
        let (batches, outbound) = tokio::sync::mpsc::channel(4);
        let acks = self
            .collector()
            .await
            .ingest(tokio_stream::wrappers::ReceiverStream::new(outbound))
            .await
            .unwrap()
            .into_inner();
        (batches, acks)
    }

    /// A gRPC client of the evaluation service.
    pub async fn evaluation(
        &self,
    ) -> proto::evaluation_client::EvaluationClient<tonic::transport::Channel> {
        proto::evaluation_client::EvaluationClient::connect(format!("http://{}", self.grpc))
            .await
            .unwrap()
    }

    /// The report since start, from `Evaluation.GetMetrics`.
    pub async fn report(&self) -> proto::Report {
        let request = proto::GetMetricsRequest {
            window: String::new(),
        };
        self.evaluation()
            .await
            .get_metrics(request)
            .await
            .unwrap()
            .into_inner()
    }

    /// The first line logged from here on that contains `text`, waiting up
    /// to 10 s for it; panics, showing the lines logged meanwhile, without one.
    pub fn logged(&self, text: &str) -> String {
        let mut log = Vec::new();
        loop {
            match self.log.recv_timeout(Duration::from_secs(10)) {
                Ok(line) if line.contains(text) => return line,
                Ok(line) => log.push(line),
                Err(_) => panic!("nothing logged with {text:?} within 10 s: {log:#?}"),
            }
        }
    }

    /// GETs `path` on the HTTP listener: status code and body.
    pub fn get(&self, path: &str) -> (u16, String) {
        self.get_from(std::net::Ipv4Addr::LOCALHOST.into(), path)
    }

    /// GETs `path` on the HTTP listener from the loopback address `client`
    /// (any of 127.0.0.0/8): status code and body.
    pub fn get_from(&self, client: std::net::IpAddr, path: &str) -> (u16, String) {
        use std::io::{Read, Write};
        let mut stream = connect_from(client, self.http);
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut response = Vec::new();
        stream.read_to_end(&mut response).unwrap();
        let response = String::from_utf8(response).unwrap();
        let status = response[9..12].parse().unwrap();
        let body_start = response.find("\r\n\r\n").map_or(response.len(), |i| i + 4);
        let body = &response[body_start..];
        let headers = &response[..body_start];
        let body = if headers
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked")
        {
            dechunk(body)
        } else {
            body.to_owned()
        };
        (status, body)
    }

    /// [`Server::terminate`] off the async runtime, for an async test.
    pub async fn stop(mut self) -> Option<i32> {
        tokio::task::spawn_blocking(move || self.terminate())
            .await
            .unwrap()
    }

    /// Sends SIGTERM and waits for the exit; returns the exit code.
    pub fn terminate(&mut self) -> Option<i32> {
        let pid = self.child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        for _ in 0..100 {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("rankwatch did not exit within 10 s of SIGTERM");
    }
}

/// A TCP connection to `server` from the local address `client`.
pub fn connect_from(client: std::net::IpAddr, server: SocketAddr) -> std::net::TcpStream {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.bind(&SocketAddr::new(client, 0).into()).unwrap();
    socket.connect(&server.into()).unwrap();
    socket.into()
}

/// The body of a response sent in chunks, its chunks joined.
pub fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        out.push_str(&rest[..size]);
        body = &rest[size + 2..];
    }
    out
}

impl Drop for Server {
    /// Kills the server; when a test is failing, prints what it logged.
    fn drop(&mut self) {
        if std::thread::panicking() {
            for line in self.log.try_iter() {
                eprintln!("{}: {line}", self.http);
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Parses Prometheus text into `(name{labels}, value)` pairs, labels sorted.
pub fn parse_metrics(text: &str) -> std::collections::BTreeMap<String, f64> {
    let mut series = std::collections::BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let (key, value) = line.rsplit_once(' ').unwrap();
        let key = match key.split_once('{') {
            Some((name, labels)) => {
                let mut labels: Vec<&str> = split_labels(labels.trim_end_matches('}'));
                labels.sort();
                format!("{name}{{{}}}", labels.join(","))
            }
            None => key.to_owned(),
        };
        series.insert(key, value.parse().unwrap());
    }
    series
}

/// The `name="value"` pairs of a label set written as in the text format
/// (without its braces), split at the commas outside the values.
pub fn split_labels(labels: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, c) in labels.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' => quoted = !quoted,
            ',' if !quoted => {
                parts.push(&labels[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if start < labels.len() {
        parts.push(&labels[start..]);
    }
    parts
}

/// The `interleaving` object of a JSON impression as protobuf; values of
/// the wrong type become empty names and index `u32::MAX`, which the
/// server rejects as it would from a client.
fn interleaving(value: &serde_json::Value) -> proto::Interleaving {
    use serde_json::Value;
    let array = |key: &str| {
        value
            .get(key)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    proto::Interleaving {
        rankers: array("rankers")
            .iter()
            .map(|r| r.as_str().unwrap_or_default().to_owned())
            .collect(),
        teams: array("teams")
            .iter()
            .map(|t| {
                t.as_u64()
                    .and_then(|t| u32::try_from(t).ok())
                    .unwrap_or(u32::MAX)
            })
            .collect(),
    }
}

/// Converts one line of a JSON log into a protobuf event; `None` for a line that is not JSON.
pub fn event_from_json(line: &str) -> Option<proto::Event> {
    use proto::event::Kind;
    use serde_json::Value;
    let value: Value = serde_json::from_str(line).ok()?;
    let text = |v: &Value, camel: &str, snake: &str| -> String {
        v.get(camel)
            .or_else(|| v.get(snake))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let time = |v: &Value| {
        v.get("time").and_then(Value::as_str).map(|t| {
            let nanos = rankwatch::event::parse_rfc3339(t).expect("valid times in the test logs");
            prost_types::Timestamp {
                seconds: nanos.div_euclid(1_000_000_000),
                nanos: nanos.rem_euclid(1_000_000_000) as i32,
            }
        })
    };
    let kind = if let Some(m) = value.get("impression") {
        Kind::Impression(proto::Impression {
            request_id: text(m, "requestId", "request_id"),
            user_id: text(m, "userId", "user_id"),
            item_ids: m
                .get("itemIds")
                .or_else(|| m.get("item_ids"))
                .and_then(Value::as_array)
                .map(|items| {
                    items
                        .iter()
                        .map(|i| i.as_str().unwrap_or_default().to_owned())
                        .collect()
                })
                .unwrap_or_default(),
            time: time(m),
            model: text(m, "model", "model"),
            surface: text(m, "surface", "surface"),
            labels: m
                .get("labels")
                .and_then(Value::as_object)
                .map(|labels| {
                    labels
                        .iter()
                        .map(|(key, value)| {
                            (key.clone(), value.as_str().unwrap_or_default().to_owned())
                        })
                        .collect()
                })
                .unwrap_or_default(),
            interleaving: m.get("interleaving").map(interleaving),
        })
    } else {
        let x = value.get("interaction")?;
        Kind::Interaction(proto::Interaction {
            event_id: text(x, "eventId", "event_id"),
            user_id: text(x, "userId", "user_id"),
            item_id: text(x, "itemId", "item_id"),
            request_id: text(x, "requestId", "request_id"),
            r#type: text(x, "type", "type"),
            time: time(x),
            grade: x.get("grade").and_then(Value::as_f64),
        })
    };
    Some(proto::Event { kind: Some(kind) })
}

/// Sends `bytes` as the raw message of a unary `IngestBatch` call, as a
/// client with a broken encoder would.
pub async fn ingest_raw_bytes(
    server: &Server,
    bytes: Vec<u8>,
) -> Result<proto::IngestAck, tonic::Status> {
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", server.grpc))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let path =
        tonic::codegen::http::uri::PathAndQuery::from_static("/rankwatch.v1.Collector/IngestBatch");
    let codec = rankwatch::codec::FrameCodec::<bytes::Bytes, proto::IngestAck>::default();
    grpc.unary(tonic::Request::new(bytes.into()), path, codec)
        .await
        .map(tonic::Response::into_inner)
}

/// An interaction 20 minutes after the conformance log, for a user nobody
/// else has: it moves the finalization frontier past every list of the log
/// (and keeps them in the last hour), then waits itself.
pub const CLOSING: &str = r#"{"interaction":{"userId":"closing-user","itemId":"closing-item","type":"click","time":"2026-11-01T10:30:00Z"}}"#;

/// The conformance log's lines that are JSON (the others cannot be sent), then [`CLOSING`].
pub fn sent_log() -> Vec<String> {
    let log = std::fs::read_to_string(super::conformance("replay_small.jsonl")).unwrap();
    log.lines()
        .filter(|line| event_from_json(line).is_some())
        .chain([CLOSING])
        .map(str::to_owned)
        .collect()
}

/// `rankwatch replay --format json ARGS` of `log` (written from
/// [`sent_log`]) as a server that was sent it reports: the end of a replay
/// gives up the closing event, the server still waits for its impression.
pub fn replay_as_served(log: &std::path::Path, args: &[&str]) -> serde_json::Value {
    let log = log.to_str().unwrap();
    let mut expected = super::replay_json(&[&["--format", "json", log], args].concat(), None);
    let no_impression = &mut expected["counters"]["unattributed"]["no_impression"];
    *no_impression = (no_impression.as_u64().unwrap() - 1).into();
    expected
}

impl Server {
    /// Streams the events of JSON `lines` over one Ingest stream, in batches of 50.
    pub async fn stream_lines(&self, lines: &[String]) {
        let events: Vec<proto::Event> = lines.iter().filter_map(|l| event_from_json(l)).collect();
        let batches: Vec<proto::EventBatch> = events
            .chunks(50)
            .enumerate()
            .map(|(i, chunk)| proto::EventBatch {
                sequence: i as u64 + 1,
                events: chunk.to_vec(),
            })
            .collect();
        let count = batches.len();
        let mut acks = self
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

    /// Waits, up to 20 s, until the server has retired a group as idle.
    pub async fn wait_for_a_retired_group(&self) {
        for _ in 0..200 {
            if parse_metrics(&self.get("/metrics").1)["rankwatch_groups_retired_total"] >= 1.0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("no group retired within 20 s");
    }
}

/// Runs `command`, which should exit by itself at start: its exit code and
/// standard error. One still running after about ten seconds (a server
/// that started where it should have refused to) is killed and gives `None`.
pub fn exit_of(command: &mut Command) -> (Option<i32>, String) {
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut child = command
        .stdout(Stdio::null())
        .stderr(Stdio::from(log.reopen().unwrap()))
        .spawn()
        .unwrap();
    let mut code = None;
    for _ in 0..100 {
        if let Some(status) = child.try_wait().unwrap() {
            code = status.code();
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    if code.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    (
        code,
        std::fs::read_to_string(log.path()).unwrap_or_default(),
    )
}

/// Asserts that `promtool check metrics` finds nothing to say of `body`.
pub fn assert_promtool_clean(body: &str) {
    use std::io::Write;
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect(
            "promtool is installed (tests/install-deps.sh installs Debian's prometheus package)",
        );
    promtool
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let output = promtool.wait_with_output().unwrap();
    let findings = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success() && findings.trim().is_empty(),
        "promtool check metrics: {findings}"
    );
}
