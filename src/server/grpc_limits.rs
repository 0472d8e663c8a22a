//! Bounds of the gRPC listener, as the HTTP listener has its own: at most
//! `max_grpc_connections` open connections (past them, a new one closes
//! the connection with no RPC open on which no byte moved for the longest,
//! or is refused when every one has an RPC open: see
//! [`super::connection_slots`]), a connection
//! must send its first bytes (the HTTP/2 preface, or TLS's hello) within
//! `grpc_handshake_timeout`, and one on which nothing was read or written
//! for `grpc_idle_timeout` is closed. A
//! flood of silent connections thus costs a bounded number of descriptors
//! and ends by itself, and cannot starve scrapes or ingest. Streams per
//! connection are bounded by HTTP/2 itself (`max_concurrent_streams`).

use super::connection_slots::{Call, Held, Limit, Slot, Slots, Taken};
use super::telemetry::{
    GRPC_CONNECTIONS_EVICTED_TOTAL, GRPC_CONNECTIONS_REFUSED_TOTAL,
    GRPC_CONNECTIONS_TIMED_OUT_TOTAL,
};
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::{Instant, Sleep};
use tokio_util::sync::{CancellationToken, DropGuard};
use tonic::codegen::http;
use tonic::transport::server::Connected;

/// The bytes a connection must send before `grpc_handshake_timeout`: the
/// length of HTTP/2's client preface (a TLS hello is longer).
const HANDSHAKE_BYTES: u64 = 24;

/// How many connections and for how long.
#[derive(Clone, Copy, Debug)]
pub struct GrpcBounds {
    /// Most open connections.
    pub max_connections: usize,
    /// Most of them one client address keeps once all are at work.
    pub max_connections_per_client: usize,
    /// How long a new connection may take to send its first bytes.
    pub handshake: Duration,
    /// How long a connection may go without a byte read or written.
    pub idle: Duration,
}

/// Accepts connections on `listener` within `bounds`, until the receiver
/// is dropped; the connections come out of the returned channel.
pub fn accept(
    listener: TcpListener,
    bounds: GrpcBounds,
) -> mpsc::Receiver<io::Result<BoundedConnection>> {
    let (sender, incoming) = mpsc::channel(16);
    for limit in [Limit::All, Limit::Client] {
        metrics::counter!(GRPC_CONNECTIONS_REFUSED_TOTAL, "reason" => reason(limit)).absolute(0);
        metrics::counter!(GRPC_CONNECTIONS_EVICTED_TOTAL, "reason" => reason(limit)).absolute(0);
    }
    let connections = Slots::new(bounds.max_connections, bounds.max_connections_per_client);
    tokio::spawn(async move {
        loop {
            let (stream, addr) = tokio::select! {
                _ = sender.closed() => return,
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        // Out of file descriptors, most likely: wait rather than spin.
                        tracing::warn!(%error, "gRPC accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
            };
            let (held, taken) = match connections.take(Some(addr.ip())) {
                Ok(taken) => taken,
                Err(limit) => {
                    metrics::counter!(GRPC_CONNECTIONS_REFUSED_TOTAL, "reason" => reason(limit))
                        .increment(1);
                    continue;
                }
            };
            if let Taken::Evicted(limit) = taken {
                metrics::counter!(GRPC_CONNECTIONS_EVICTED_TOTAL, "reason" => reason(limit))
                    .increment(1);
            }
            // Without TCP_NODELAY a small ack waits for the client's next packet.
            let _ = stream.set_nodelay(true);
            let connection = BoundedConnection::new(stream, held, bounds);
            if sender.send(Ok(connection)).await.is_err() {
                return;
            }
        }
    });
    incoming
}

/// The `reason` label of a connection refused, or closed to make room, past `limit`.
pub fn reason(limit: Limit) -> &'static str {
    match limit {
        Limit::All => "max_grpc_connections",
        Limit::Client => "max_grpc_connections_per_client",
    }
}

/// An accepted gRPC connection under its deadlines, holding its slot.
pub struct BoundedConnection {
    stream: TcpStream,
    held: Held,
    bounds: GrpcBounds,
    /// Bytes read so far (counted up to the handshake's).
    read: u64,
    accepted: Instant,
    last_activity: Instant,
    deadline: Pin<Box<Sleep>>,
    timed_out: bool,
}

impl BoundedConnection {
    fn new(stream: TcpStream, held: Held, bounds: GrpcBounds) -> Self {
        let now = Instant::now();
        Self {
            stream,
            held,
            bounds,
            read: 0,
            accepted: now,
            last_activity: now,
            deadline: Box::pin(tokio::time::sleep_until(now + bounds.handshake)),
            timed_out: false,
        }
    }

    /// Notes that bytes moved just now.
    fn moved(&mut self) {
        self.last_activity = Instant::now();
        self.held.slot().moved();
    }

    /// When the connection is due to be closed if nothing happens.
    fn due(&self) -> Instant {
        match self.read < HANDSHAKE_BYTES {
            true => self.accepted + self.bounds.handshake,
            false => self.last_activity + self.bounds.idle,
        }
    }

    /// An error once a deadline has passed or the connection was closed
    /// to make room; else registers for the next one and for that.
    fn check_deadline(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        if self.timed_out || self.held.evicted(cx) {
            self.timed_out = true;
            return Err(timed_out());
        }
        loop {
            let due = self.due();
            if self.deadline.deadline() != due {
                self.deadline.as_mut().reset(due);
            }
            match self.deadline.as_mut().poll(cx) {
                Poll::Pending => return Ok(()),
                Poll::Ready(()) if Instant::now() >= self.due() => {
                    self.timed_out = true;
                    metrics::counter!(GRPC_CONNECTIONS_TIMED_OUT_TOTAL).increment(1);
                    return Err(timed_out());
                }
                Poll::Ready(()) => {}
            }
        }
    }
}

fn timed_out() -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        "grpc_handshake_timeout or grpc_idle_timeout, or closed to make room",
    )
}

impl AsyncRead for BoundedConnection {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.stream).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let read = (buf.filled().len() - before) as u64;
                if read > 0 {
                    this.read = this.read.saturating_add(read);
                    this.moved();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(error)) => Poll::Ready(Err(error)),
            Poll::Pending => match this.check_deadline(cx) {
                Ok(()) => Poll::Pending,
                Err(error) => Poll::Ready(Err(error)),
            },
        }
    }
}

impl AsyncWrite for BoundedConnection {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.stream).poll_write(cx, data) {
            Poll::Ready(Ok(written)) => {
                if written > 0 {
                    this.moved();
                }
                Poll::Ready(Ok(written))
            }
            Poll::Ready(Err(error)) => Poll::Ready(Err(error)),
            // A client that reads nothing holds the connection only until the idle deadline.
            Poll::Pending => match this.check_deadline(cx) {
                Ok(()) => Poll::Pending,
                Err(error) => Poll::Ready(Err(error)),
            },
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

/// What a request learns of its connection: its slot, for its call and
/// its client's address.
#[derive(Clone, Debug)]
pub struct ConnectionSlot(Arc<Slot>);

impl Connected for BoundedConnection {
    type ConnectInfo = ConnectionSlot;

    fn connect_info(&self) -> Self::ConnectInfo {
        ConnectionSlot(self.held.slot().clone())
    }
}

/// Closes the connection `request` came on, counted as timed out, unless
/// the returned guard is dropped within `timeout`; `None` for a request
/// that came another way.
pub fn close_unless_done_within<B>(
    request: &http::Request<B>,
    timeout: Duration,
) -> Option<DropGuard> {
    let slot = request.extensions().get::<ConnectionSlot>()?.0.clone();
    let done = CancellationToken::new();
    let guard = done.clone().drop_guard();
    tokio::spawn(async move {
        tokio::select! {
            () = done.cancelled() => {}
            // Counted once per connection, however many of its calls time out.
            () = tokio::time::sleep(timeout) => if slot.close() {
                metrics::counter!(GRPC_CONNECTIONS_TIMED_OUT_TOTAL).increment(1);
            }
        }
    });
    Some(guard)
}

/// The address of the client `request` came from, when known.
pub fn client_of<B>(request: &http::Request<B>) -> Option<IpAddr> {
    request.extensions().get::<ConnectionSlot>()?.0.client()
}

/// A call open on the connection `request` came on (tonic puts the
/// connection's [`ConnectionSlot`] among a request's extensions, over TLS
/// too); `None` for a request that came another way.
pub fn call_of<B>(request: &http::Request<B>) -> Option<Call> {
    Some(request.extensions().get::<ConnectionSlot>()?.0.call())
}
