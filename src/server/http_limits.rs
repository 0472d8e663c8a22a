//! Bounds of the HTTP listener: at most `max_http_connections` open
//! connections (past them, a new one closes the connection quiet the
//! longest, or is closed itself when every one is answering a request or
//! sending its response), and three deadlines per connection.
//!
//! - `http_header_timeout` bounds the arrival of a request's head: the
//!   first request's from the connection's accept, each later one's from
//!   its first byte.
//! - `http_idle_timeout` closes a connection on which nothing happened for
//!   that long between requests: every byte read or written restarts it.
//! - `http_send_timeout` bounds the sending of a response, from its
//!   handler's end to its last byte: a reader that takes a few bytes now
//!   and then keeps the idle deadline from passing, and would otherwise
//!   hold its connection, and a report's permit, for as long as it likes.
//!
//! While the router answers a request (from its complete head until its
//! response is handed over) neither deadline runs, however long the handler
//! takes. Half-open or silent clients thus cannot hold file descriptors
//! that scrapes and gRPC ingest need. This module knows nothing of the
//! routes; it only learns when one is answering.

use super::connection_slots::{Held, Slot, Slots, Taken, WithCall};
use super::telemetry::{
    HTTP_CONNECTIONS_EVICTED_TOTAL, HTTP_CONNECTIONS_REFUSED_TOTAL,
    HTTP_CONNECTIONS_TIMED_OUT_TOTAL,
};
use axum::extract::connect_info::{Connected, IntoMakeServiceWithConnectInfo};
use axum::extract::{ConnectInfo, Request};
use axum::middleware::Next;
use axum::response::Response;
use axum::serve::{IncomingStream, Listener};
use axum::Router;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::{Instant, Sleep};

/// The time limits of one HTTP connection.
#[derive(Clone, Copy, Debug)]
pub struct HttpTimeouts {
    /// How long a request's head may take to arrive.
    pub header: Duration,
    /// How long a connection may stay idle between requests.
    pub idle: Duration,
    /// How long a response may take to be sent.
    pub send: Duration,
}

/// A TCP listener that bounds its connections' number and time.
pub struct BoundedListener {
    listener: TcpListener,
    connections: Arc<Slots>,
    timeouts: HttpTimeouts,
}

impl BoundedListener {
    /// Bounds `listener` to `max_connections` connections with `timeouts`.
    pub fn new(listener: TcpListener, max_connections: usize, timeouts: HttpTimeouts) -> Self {
        Self {
            listener,
            // Reports, the calls that last, are capped by client already.
            connections: Slots::new(max_connections, max_connections),
            timeouts,
        }
    }
}

impl Listener for BoundedListener {
    type Io = BoundedStream;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let (stream, addr) = match self.listener.accept().await {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors, most likely: wait rather than spin.
                    tracing::warn!(%error, "HTTP accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let Ok((held, taken)) = self.connections.take(Some(addr.ip())) else {
                metrics::counter!(HTTP_CONNECTIONS_REFUSED_TOTAL).increment(1);
                tracing::debug!(%addr, "HTTP connection closed: max_http_connections answering");
                continue;
            };
            if matches!(taken, Taken::Evicted(_)) {
                metrics::counter!(HTTP_CONNECTIONS_EVICTED_TOTAL).increment(1);
            }
            return (BoundedStream::new(stream, held, self.timeouts), addr);
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.listener.local_addr()
    }
}

/// `router`, made to tell each connection's [`BoundedStream`] when one of
/// its requests is being answered.
pub fn tracking_requests(router: Router) -> IntoMakeServiceWithConnectInfo<Router, Requests> {
    router
        .layer(axum::middleware::from_fn(answer))
        .into_make_service_with_connect_info::<Requests>()
}

/// Marks the connection as answering while the router works on `request`,
/// and as at work until its response is sent.
async fn answer(
    ConnectInfo(requests): ConnectInfo<Requests>,
    request: Request,
    next: Next,
) -> Response {
    requests.0.started.fetch_add(1, Ordering::AcqRel);
    let call = requests.0.slot.call();
    let _answered = Answered(requests);
    let response = next.run(request).await;
    response.map(|body| axum::body::Body::new(WithCall::new(body, call)))
}

/// The requests of one connection as the router sees them, shared with its stream.
#[derive(Clone, Debug)]
pub struct Requests(Arc<RequestCounts>);

impl Requests {
    /// The address of the connection's client, when known.
    pub fn client(&self) -> Option<IpAddr> {
        self.0.slot.client()
    }
}

/// A request is being answered while more were started than answered.
#[derive(Debug)]
struct RequestCounts {
    started: AtomicU64,
    answered: AtomicU64,
    /// The connection's slot, with a call open while a request is answered
    /// and its response sent.
    slot: Arc<Slot>,
}

impl Connected<IncomingStream<'_, BoundedListener>> for Requests {
    fn connect_info(stream: IncomingStream<'_, BoundedListener>) -> Self {
        stream.io().requests.clone()
    }
}

/// Counts its request answered when dropped: once the response is handed
/// over, or when the connection goes away before.
struct Answered(Requests);

impl Drop for Answered {
    fn drop(&mut self) {
        self.0 .0.answered.fetch_add(1, Ordering::AcqRel);
    }
}

/// Which deadline a connection is under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// A request's head is on its way: the header deadline runs.
    Head,
    /// The router is answering a request: no deadline runs.
    Answering,
    /// Between requests: the idle deadline runs from the last byte.
    Idle,
}

/// A connection that fails once the deadline of its phase passes.
pub struct BoundedStream {
    stream: TcpStream,
    held: Held,
    timeouts: HttpTimeouts,
    requests: Requests,
    phase: Phase,
    deadline: Pin<Box<Sleep>>,
    /// Requests answered when the phase was last brought up to date.
    answered: u64,
    /// When the response being sent must be sent by, while one is.
    send_by: Option<Instant>,
    /// Its deadline passed (counted once), or it was closed to make room.
    timed_out: bool,
}

impl BoundedStream {
    fn new(stream: TcpStream, held: Held, timeouts: HttpTimeouts) -> Self {
        let requests = Requests(Arc::new(RequestCounts {
            started: AtomicU64::new(0),
            answered: AtomicU64::new(0),
            slot: held.slot().clone(),
        }));
        Self {
            stream,
            held,
            timeouts,
            requests,
            phase: Phase::Head,
            deadline: Box::pin(tokio::time::sleep(timeouts.header)),
            answered: 0,
            send_by: None,
            timed_out: false,
        }
    }

    /// Starts `phase` with its full deadline; idle while a response is
    /// being sent, no later than it must be sent by.
    fn enter(&mut self, phase: Phase) {
        self.phase = phase;
        let now = Instant::now();
        let deadline = match phase {
            Phase::Head => now + self.timeouts.header,
            Phase::Idle => {
                if !self.held.slot().at_work() {
                    self.send_by = None;
                }
                let idle = now + self.timeouts.idle;
                self.send_by.map_or(idle, |send_by| idle.min(send_by))
            }
            Phase::Answering => return,
        };
        self.deadline.as_mut().reset(deadline);
    }

    /// Follows the router: answering while it works on a request, idle
    /// once it has handed a response over.
    fn follow_requests(&mut self) {
        let counts = &self.requests.0;
        let answered = counts.answered.load(Ordering::Acquire);
        if counts.started.load(Ordering::Acquire) > answered {
            self.phase = Phase::Answering;
        } else if answered != self.answered {
            self.answered = answered;
            self.send_by = Some(Instant::now() + self.timeouts.send);
            self.enter(Phase::Idle);
        }
    }

    /// Whether the deadline of the current phase has passed or the
    /// connection was closed to make room; registers a wake-up for either
    /// if not.
    fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        self.follow_requests();
        if !self.timed_out && self.held.evicted(cx) {
            self.timed_out = true;
        }
        if self.timed_out
            || self.phase == Phase::Answering
            || self.deadline.as_mut().poll(cx).is_pending()
        {
            return self.timed_out;
        }
        self.timed_out = true;
        metrics::counter!(HTTP_CONNECTIONS_TIMED_OUT_TOTAL).increment(1);
        true
    }
}

fn timed_out() -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        "HTTP connection timed out, or closed to make room",
    )
}

impl AsyncRead for BoundedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.expired(cx) {
            return Poll::Ready(Err(timed_out()));
        }
        let before = buf.filled().len();
        let read = Pin::new(&mut self.stream).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.held.slot().moved();
            // The first byte after a response starts the next request's head.
            if self.phase == Phase::Idle {
                self.enter(Phase::Head);
            }
        }
        read
    }
}

impl AsyncWrite for BoundedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.expired(cx) {
            return Poll::Ready(Err(timed_out()));
        }
        let written = Pin::new(&mut self.stream).poll_write(cx, buf);
        if matches!(written, Poll::Ready(Ok(n)) if n > 0) {
            self.held.slot().moved();
            if self.phase == Phase::Idle {
                self.enter(Phase::Idle);
            }
        }
        written
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;
    use std::net::SocketAddr;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const REQUEST: &[u8] = b"GET /fast HTTP/1.1\r\nHost: rankwatch\r\n\r\n";

    /// A server of one fast and one slow route on a loopback port, under `timeouts`.
    async fn serve(timeouts: HttpTimeouts) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let router = Router::new()
            .route("/fast", get(|| async { "fast" }))
            .route(
                "/slow",
                get(|| async {
                    tokio::time::sleep(Duration::from_millis(600)).await;
                    "slow"
                }),
            );
        let listener = BoundedListener::new(listener, 4, timeouts);
        tokio::spawn(async move { axum::serve(listener, tracking_requests(router)).await });
        addr
    }

    /// The body of the next response on `stream`, or `None` if it was closed first.
    async fn response(stream: &mut tokio::net::TcpStream) -> Option<String> {
        let mut bytes = Vec::new();
        let mut chunk = [0u8; 1024];
        loop {
            let text = String::from_utf8_lossy(&bytes).into_owned();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let length: usize = head
                    .lines()
                    .find_map(|line| line.strip_prefix("content-length: "))
                    .and_then(|length| length.parse().ok())
                    .expect("a response with a length");
                if body.len() >= length {
                    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
                    return Some(body.to_owned());
                }
            }
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return None,
                Ok(read) => bytes.extend(&chunk[..read]),
            }
        }
    }

    fn timeouts(header_ms: u64, idle_ms: u64) -> HttpTimeouts {
        HttpTimeouts {
            header: Duration::from_millis(header_ms),
            idle: Duration::from_millis(idle_ms),
            send: Duration::from_secs(60),
        }
    }

    #[tokio::test]
    async fn a_slow_handler_is_cut_by_neither_deadline() {
        let addr = serve(timeouts(100, 100)).await;
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(b"GET /slow HTTP/1.1\r\nHost: rankwatch\r\n\r\n")
            .await
            .unwrap();
        assert_eq!(response(&mut stream).await.as_deref(), Some("slow"));
        // The same connection serves another request right after.
        stream.write_all(REQUEST).await.unwrap();
        assert_eq!(response(&mut stream).await.as_deref(), Some("fast"));
    }

    #[tokio::test]
    async fn a_head_sent_slowly_is_cut_at_the_header_deadline() {
        let addr = serve(timeouts(300, 60_000)).await;
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let started = Instant::now();
        // A byte every 50 ms keeps reading busy, but the head takes 2 s.
        for byte in REQUEST {
            if stream.write_all(&[*byte]).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(response(&mut stream).await, None);
        assert!(started.elapsed() < Duration::from_millis(1500));
    }

    #[tokio::test]
    async fn a_later_head_has_the_header_deadline_from_its_first_byte() {
        let addr = serve(timeouts(2_000, 300)).await;
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.write_all(REQUEST).await.unwrap();
        assert_eq!(response(&mut stream).await.as_deref(), Some("fast"));
        // Sent over about 1 s, past the idle deadline but within the header one.
        for part in REQUEST.chunks(4) {
            stream.write_all(part).await.unwrap();
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(response(&mut stream).await.as_deref(), Some("fast"));
        // Nothing more is sent: the connection is idle and closed.
        let started = Instant::now();
        assert_eq!(response(&mut stream).await, None);
        assert!(started.elapsed() < Duration::from_millis(1500));
    }

    #[tokio::test]
    async fn a_connection_kept_busy_outlives_many_idle_deadlines() {
        let addr = serve(timeouts(300, 300)).await;
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        for _ in 0..12 {
            stream.write_all(REQUEST).await.unwrap();
            assert_eq!(response(&mut stream).await.as_deref(), Some("fast"));
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
    }
}
