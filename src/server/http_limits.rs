//! Bounds of the HTTP listener: at most `max_http_connections` open
//! connections (more are closed as soon as they are accepted), a first
//! request whose headers must arrive within `http_header_timeout`, and a
//! connection closed once it has been idle for `http_idle_timeout` after
//! its last response. Half-open or silent clients thus cannot hold file
//! descriptors that scrapes and gRPC ingest need.

use super::telemetry::{HTTP_CONNECTIONS_REFUSED_TOTAL, HTTP_CONNECTIONS_TIMED_OUT_TOTAL};
use axum::serve::Listener;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

/// The time limits of one HTTP connection.
#[derive(Clone, Copy, Debug)]
pub struct HttpTimeouts {
    /// How long the first request's headers may take to arrive.
    pub header: Duration,
    /// How long a connection may stay idle after a response.
    pub idle: Duration,
}

/// A TCP listener that bounds its connections' number and time.
pub struct BoundedListener {
    listener: TcpListener,
    connections: Arc<Semaphore>,
    timeouts: HttpTimeouts,
}

impl BoundedListener {
    /// Bounds `listener` to `max_connections` connections with `timeouts`.
    pub fn new(listener: TcpListener, max_connections: usize, timeouts: HttpTimeouts) -> Self {
        Self {
            listener,
            connections: Arc::new(Semaphore::new(max_connections)),
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
            let Ok(permit) = self.connections.clone().try_acquire_owned() else {
                metrics::counter!(HTTP_CONNECTIONS_REFUSED_TOTAL).increment(1);
                tracing::debug!(%addr, "HTTP connection closed: max_http_connections reached");
                continue;
            };
            let deadline = Box::pin(tokio::time::sleep(self.timeouts.header));
            let stream = BoundedStream {
                stream,
                _permit: permit,
                deadline,
                idle: self.timeouts.idle,
                timed_out: false,
            };
            return (stream, addr);
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.listener.local_addr()
    }
}

/// A connection that fails once its deadline passes: the header timeout
/// until the first response, then the idle timeout after each response.
pub struct BoundedStream {
    stream: TcpStream,
    _permit: OwnedSemaphorePermit,
    deadline: Pin<Box<Sleep>>,
    idle: Duration,
    /// Its deadline passed (counted once).
    timed_out: bool,
}

impl BoundedStream {
    fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        if self.timed_out || self.deadline.as_mut().poll(cx).is_pending() {
            return self.timed_out;
        }
        self.timed_out = true;
        metrics::counter!(HTTP_CONNECTIONS_TIMED_OUT_TOTAL).increment(1);
        true
    }
}

fn timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "HTTP connection timed out")
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
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for BoundedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.stream).poll_write(cx, buf);
        if let Poll::Ready(Ok(_)) = written {
            let next = Instant::now() + self.idle;
            self.deadline.as_mut().reset(next);
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
