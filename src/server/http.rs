//! The HTTP listener: `/metrics` (Prometheus text), `/healthz` (alive) and
//! `/readyz` (ready to ingest).

use super::reports::HeldPermit;
use crate::clock::wall_clock;
use crate::engine::EngineHandle;
use crate::engine::Readiness;
use crate::export::{prometheus, Text};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode, Version};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Extension;
use axum::Router;
use metrics_exporter_prometheus::PrometheusHandle;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// What the handlers share.
struct Shared {
    engine: EngineHandle,
    recorder: PrometheusHandle,
    process: metrics_process::Collector,
    windows: Vec<Duration>,
    shutdown: CancellationToken,
    readiness: Readiness,
}

/// The HTTP routes.
pub fn router(
    engine: EngineHandle,
    recorder: PrometheusHandle,
    windows: Vec<Duration>,
    shutdown: CancellationToken,
    readiness: Readiness,
) -> Router {
    let process = metrics_process::Collector::default();
    process.describe();
    let shared = Arc::new(Shared {
        engine,
        recorder,
        process,
        windows,
        shutdown,
        readiness,
    });
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .with_state(shared)
}

/// Answers 505 to a request over HTTP/2 (prior knowledge; there is no TLS
/// on this listener to offer it), before any route sees it. Prometheus,
/// probes and browsers speak HTTP/1.1 here, one request at a time on a
/// connection; one HTTP/2 connection could start a hundred reports at once
/// and, its window shut, hold every report's permit until the send timeout.
/// The answer has no body, which such a window would hold back, keeping
/// the connection at work and out of reach of eviction. A gRPC call, from
/// a client given this port for the gRPC listener's at `grpc`, is answered
/// UNIMPLEMENTED with where gRPC is, as trailers only (no body either).
pub async fn require_http1(
    State(grpc): State<GrpcListener>,
    request: Request,
    next: Next,
) -> Response {
    if request.version() < Version::HTTP_2 {
        return next.run(request).await;
    }
    let content_type = request.headers().get(header::CONTENT_TYPE);
    if content_type.is_some_and(|kind| is_grpc(kind.as_bytes())) {
        let over_tls = if grpc.tls { ", over TLS" } else { "" };
        let message = format!(
            "this is rankwatch's HTTP listener (/metrics, /healthz, the status page); its gRPC listener is {} (grpc_addr{over_tls})",
            grpc.addr
        );
        return tonic::Status::unimplemented(message).into_http();
    }
    StatusCode::HTTP_VERSION_NOT_SUPPORTED.into_response()
}

/// Where the gRPC listener is, for a gRPC call that came to the HTTP one.
#[derive(Clone, Copy)]
pub struct GrpcListener {
    /// Its address.
    pub addr: std::net::SocketAddr,
    /// Whether it speaks TLS.
    pub tls: bool,
}

/// Whether `content_type` is gRPC's: `application/grpc`, alone or with a
/// `+` format (`+proto`, `+json`), in any case.
fn is_grpc(content_type: &[u8]) -> bool {
    const GRPC: &[u8] = b"application/grpc";
    let Some(head) = content_type.get(..GRPC.len()) else {
        return false;
    };
    let rest = &content_type[GRPC.len()..];
    head.eq_ignore_ascii_case(GRPC)
        && (rest.is_empty() || rest.starts_with(b"+") || rest.starts_with(b";"))
}

/// Answers 400 to an HTTP/1.1 request without a `Host` header and to any
/// request with several or one that is not a host, as a server must (RFC
/// 9112 §3.2), before any route sees it.
pub async fn require_host(request: Request, next: Next) -> Response {
    if let Some(problem) = host_problem(&request) {
        return (StatusCode::BAD_REQUEST, problem).into_response();
    }
    next.run(request).await
}

/// What is wrong with `request`'s `Host` header, if anything.
fn host_problem(request: &Request) -> Option<&'static str> {
    let mut hosts = request.headers().get_all(header::HOST).iter();
    match (hosts.next(), hosts.next()) {
        (None, _) if request.version() == Version::HTTP_11 => {
            Some("an HTTP/1.1 request must carry a Host header\n")
        }
        (None, _) => None,
        (Some(_), Some(_)) => Some("a request must carry one Host header, not several\n"),
        (Some(host), None) => (!is_host(host.as_bytes()))
            .then_some("the Host header must be a host, with a port or not, or empty\n"),
    }
}

/// Whether `value` is a host with an optional port (an `authority` with
/// no user information), or empty, as a `Host` header may be.
fn is_host(value: &[u8]) -> bool {
    if value.is_empty() {
        return true;
    }
    let Ok(authority) = axum::http::uri::Authority::try_from(value) else {
        return false;
    };
    let authority = authority.as_str();
    // The port follows the last colon past an IPv6 address's brackets.
    let after_host = authority.rfind(']').map_or(0, |bracket| bracket + 1);
    let port = authority[after_host..]
        .split_once(':')
        .map(|(_, port)| port);
    !authority.contains('@') && port.is_none_or(|port| port.bytes().all(|b| b.is_ascii_digit()))
}

/// Pieces of a scrape (256 KiB each) rendered ahead of what its reader has
/// taken: a slow reader holds these and the snapshot, not the whole text.
const PIECES_AHEAD: usize = 2;

/// `/metrics`, rendered on a thread of its own (a large one takes seconds
/// that would hold up the runtime) piece by piece as the reader takes them,
/// holding the scrape's permit until it is rendered; a reader gone ends
/// the rendering. Its length is not known ahead: it is sent in chunks.
async fn metrics(
    State(shared): State<Arc<Shared>>,
    permit: Option<Extension<HeldPermit>>,
) -> Response {
    let Ok(snapshot) = shared.engine.snapshot().await else {
        let headers = [(header::CONTENT_TYPE, "text/plain")];
        return (StatusCode::SERVICE_UNAVAILABLE, headers, "shutting down\n").into_response();
    };
    shared.process.collect();
    let recorded = shared.recorder.render();
    let windows = shared.windows.clone();
    let (sender, pieces) = tokio::sync::mpsc::channel(PIECES_AHEAD);
    tokio::task::spawn_blocking(move || {
        let _permit = permit;
        let failed = sender.clone();
        let rendered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            let mut text = Text::streamed(move |piece| sender.blocking_send(Ok(piece)).is_ok());
            let snapshot = snapshot.since_counters_reset();
            prometheus::render(&mut text, &snapshot, &windows, wall_clock());
            text.push_piece(recorded);
            text.end();
        }));
        if rendered.is_err() {
            // The body ends in an error, not as if whole: the scrape fails
            // rather than passing for a complete one.
            let _ = failed.blocking_send(Err(std::io::Error::other("rendering /metrics failed")));
        }
    });
    let headers = [(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4"),
    )];
    let body = Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(pieces));
    (StatusCode::OK, headers, body).into_response()
}

async fn ready(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    if shared.shutdown.is_cancelled() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting down\n".to_owned(),
        );
    }
    match shared.readiness.problems() {
        Some(problems) => (StatusCode::SERVICE_UNAVAILABLE, problems),
        None => (StatusCode::OK, "ready\n".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::is_grpc;

    #[test]
    fn grpcs_content_types_are_told_from_others() {
        for grpc in [
            "application/grpc",
            "application/grpc+proto",
            "APPLICATION/GRPC",
        ] {
            assert!(is_grpc(grpc.as_bytes()), "{grpc}");
        }
        for other in [
            "application/grpcx",
            "application/grpc-web",
            "text/plain",
            "application/gr",
        ] {
            assert!(!is_grpc(other.as_bytes()), "{other}");
        }
    }
}
