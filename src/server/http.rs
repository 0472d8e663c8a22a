//! The HTTP listener: `/metrics` (Prometheus text), `/healthz` (alive) and
//! `/readyz` (ready to ingest).

use crate::clock::wall_clock;
use crate::engine::EngineHandle;
use crate::engine::Readiness;
use crate::export::prometheus;
use axum::extract::{Request, State};
use axum::http::{header, StatusCode, Version};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
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

/// Answers an HTTP/1.1 request without a `Host` header 400, as a server
/// must (RFC 9112 §3.2), before any route sees it.
pub async fn require_host(request: Request, next: Next) -> Response {
    if request.version() == Version::HTTP_11 && !request.headers().contains_key(header::HOST) {
        let problem = "an HTTP/1.1 request must carry a Host header\n";
        return (StatusCode::BAD_REQUEST, problem).into_response();
    }
    next.run(request).await
}

async fn metrics(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    let Ok(snapshot) = shared.engine.snapshot().await else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::CONTENT_TYPE, "text/plain")],
            "shutting down\n".to_owned(),
        );
    };
    shared.process.collect();
    let mut text = prometheus::render(&snapshot, &shared.windows, wall_clock());
    text.push_str(&shared.recorder.render());
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        text,
    )
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
