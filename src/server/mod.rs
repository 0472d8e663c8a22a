//! The online sidecar's listeners: gRPC ingest and query, and HTTP for the
//! status page, `/metrics` and the probes, with a graceful shutdown that
//! reaches every connection. It is handed an engine handle, the engine's
//! readiness and its own settings; the `serve` command decides which
//! engine (local or fleet) answers. This file only wires the rooms together;
//! each concern lives in its own module.

pub mod codec;
mod collector;
mod connection_slots;
mod content_type;
mod evaluation;
mod grpc_limits;
mod history;
mod http;
mod http_limits;
mod message_limit;
mod reports;
mod settings;
mod status;
mod tasks;
mod telemetry;
mod tls;

/// The generated server of `rankwatch.v1.Collector` over [`codec::RawCodec`].
#[allow(clippy::default_constructed_unit_structs)]
mod wire_service {
    include!(concat!(env!("OUT_DIR"), "/rankwatch.v1.Collector.rs"));
}

pub use settings::{ServerSettings, TlsSettings};
pub use status::StatusSettings;
pub use telemetry::{export_limits, recorder};

use crate::engine::{EngineHandle, Readiness};
use crate::export::ReportConfig;
use crate::proto::{evaluation_server::EvaluationServer, FILE_DESCRIPTOR_SET};
use anyhow::Context;
use content_type::GrpcOnly;
use metrics_exporter_prometheus::PrometheusHandle;
use std::future::IntoFuture;
use std::net::SocketAddr;
use tasks::{Drain, Tasks};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::server::NamedService;
use tonic::transport::server::Router;
use tonic_health::server::HealthReporter;
use wire_service::collector_server::CollectorServer;

/// The addresses a running server listens on.
#[derive(Clone, Copy, Debug)]
pub struct Bound {
    /// gRPC.
    pub grpc: SocketAddr,
    /// HTTP.
    pub http: SocketAddr,
}

/// Both listeners, bound and not yet accepting, and the gRPC server with
/// its TLS.
pub struct Listeners {
    grpc: TcpListener,
    http: TcpListener,
    grpc_server: tonic::transport::Server,
}

impl Listeners {
    /// Reads the TLS files of `settings`, then binds the gRPC and HTTP
    /// addresses (port 0 picks free ports).
    pub async fn bind(settings: &ServerSettings) -> anyhow::Result<Self> {
        let grpc_server = tls::server(settings.tls.as_ref())?;
        let grpc = TcpListener::bind(settings.grpc_addr).await;
        let http = TcpListener::bind(settings.http_addr).await;
        match (grpc, http) {
            (Ok(grpc), Ok(http)) => Ok(Self {
                grpc,
                http,
                grpc_server,
            }),
            (grpc, http) => {
                let failed = [
                    ("gRPC", settings.grpc_addr, "--grpc-addr", grpc.err()),
                    ("HTTP", settings.http_addr, "--http-addr", http.err()),
                ];
                let said: Vec<String> = failed
                    .into_iter()
                    .filter_map(|(listener, addr, flag, error)| {
                        let error = error?;
                        Some(format!("cannot bind {listener} to {addr} ({error}): choose another address with {flag}"))
                    })
                    .collect();
                anyhow::bail!("{}", said.join("; "))
            }
        }
    }

    /// The addresses bound.
    pub fn bound(&self) -> std::io::Result<Bound> {
        Ok(Bound {
            grpc: self.grpc.local_addr()?,
            http: self.http.local_addr()?,
        })
    }
}

/// What the listeners serve: an engine, and how it runs.
pub struct Served {
    /// Where batches and questions for figures go.
    pub engine: EngineHandle,
    /// Whether the engine can take work, for `/readyz`.
    pub readiness: Readiness,
    /// Whether the `Collector` API is served.
    pub collector: bool,
    /// Cancelled when the listeners are to stop (at shutdown, or later for
    /// an instance that keeps serving its last figures for a while).
    pub serving: CancellationToken,
    /// The settings the report prints.
    pub report: ReportConfig,
    /// The settings the status page shows.
    pub status: StatusSettings,
}

/// Serves `served` on `listeners` until `served.serving` is cancelled,
/// then waits at most `drain_timeout` for open streams and requests.
/// `shutdown` stops accepting ingest and makes `/readyz` answer 503.
pub async fn run(
    listeners: Listeners,
    served: Served,
    settings: &ServerSettings,
    recorder: PrometheusHandle,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let Served {
        engine,
        readiness,
        collector,
        serving,
        report,
        status,
    } = served;
    let (drain, tasks) = Drain::new();
    let permits = reports::ReportPermits::new(
        settings.max_concurrent_reports,
        settings.max_reports_per_client,
    );
    let grpc = grpc_server(
        (settings, listeners.grpc_server),
        (engine.clone(), permits.clone()),
        collector,
        shutdown.clone(),
        tasks.clone(),
    )
    .await?;
    let grpc_listener = http::GrpcListener {
        addr: listeners.grpc.local_addr()?,
        tls: settings.tls.is_some(),
    };
    let incoming = grpc_limits::accept(
        listeners.grpc,
        grpc_limits::GrpcBounds {
            max_connections: settings.max_grpc_connections,
            max_connections_per_client: settings.max_grpc_connections_per_client,
            handshake: settings.grpc_handshake_timeout,
            idle: settings.grpc_idle_timeout,
        },
    );
    let grpc = grpc.serve_with_incoming_shutdown(
        tokio_stream::wrappers::ReceiverStream::new(incoming),
        serving.clone().cancelled_owned(),
    );
    let http_listener = bounded_http(listeners.http, settings);
    let routes = http::router(
        engine.clone(),
        recorder.clone(),
        settings.windows.clone(),
        shutdown.clone(),
        readiness,
    )
    .merge(status::router(engine, report, status))
    .layer(axum::middleware::from_fn_with_state(
        permits,
        reports::hold_http,
    ));
    let routes = checking_requests(routes, grpc_listener);
    let http = axum::serve(http_listener, http_limits::tracking_requests(routes))
        .with_graceful_shutdown(serving.clone().cancelled_owned());
    tasks.spawn(telemetry::keep_up(recorder, shutdown));
    let grpc = tasks.spawn(grpc);
    let http = tasks.spawn(http.into_future());

    serving.cancelled().await;
    if drain.wait(tasks, settings.drain_timeout).await {
        grpc.await?.context("gRPC server")?;
        http.await?.context("HTTP server")?;
    }
    Ok(())
}

/// `routes` behind the checks of a request's `Host` and HTTP version
/// (a gRPC call is told where `grpc` is). Around the whole router, not
/// each route: a request refused for its Host or its version never reaches
/// the routing that would add a 405's `Allow` header.
fn checking_requests(routes: axum::Router, grpc: http::GrpcListener) -> axum::Router {
    axum::Router::new()
        .fallback_service(routes)
        .layer(axum::middleware::from_fn(http::require_host))
        .layer(axum::middleware::from_fn_with_state(
            grpc,
            http::require_http1,
        ))
}

/// The HTTP listener `listener` within the bounds of `settings`.
fn bounded_http(listener: TcpListener, settings: &ServerSettings) -> http_limits::BoundedListener {
    let timeouts = http_limits::HttpTimeouts {
        header: settings.http_header_timeout,
        idle: settings.http_idle_timeout,
        send: settings.http_send_timeout,
    };
    http_limits::BoundedListener::new(listener, settings.max_http_connections, timeouts)
}

/// Sets the health of the server as a whole ("") and of each of its services.
async fn set_health(health: &HealthReporter, status: tonic_health::ServingStatus) {
    let services = [
        "",
        <CollectorServer<collector::CollectorService> as NamedService>::NAME,
        <EvaluationServer<evaluation::EvaluationService> as NamedService>::NAME,
    ];
    for service in services {
        health.set_service_status(service, status).await;
    }
}

/// The gRPC services (collector, evaluation, health, reflection) on
/// `engine`, over TLS when the settings ask for it.
async fn grpc_server(
    (settings, builder): (&ServerSettings, tonic::transport::Server),
    (engine, permits): (EngineHandle, reports::ReportPermits),
    serves_collector: bool,
    shutdown: CancellationToken,
    tasks: Tasks,
) -> anyhow::Result<Router> {
    let (health, health_service) = tonic_health::server::health_reporter();
    set_health(&health, tonic_health::ServingStatus::Serving).await;
    // The gRPC health convention: every service turns NOT_SERVING as the
    // drain begins, so that watching load balancers stop sending at once.
    let draining = shutdown.clone();
    tokio::spawn(async move {
        draining.cancelled().await;
        set_health(&health, tonic_health::ServingStatus::NotServing).await;
    });
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()?;
    let collector = collector::CollectorService::new(
        engine.clone(),
        settings.max_streams,
        settings.max_inflight_batches,
        settings.ingest_idle_timeout,
        shutdown,
        tasks,
    );
    let mut builder = builder.max_concurrent_streams(Some(settings.max_concurrent_streams));
    // Every service's messages begun and not yet whole share one bound.
    let partial = message_limit::PartialBytes::new(settings.max_partial_message_bytes);
    let max = settings.max_message_size;
    use message_limit::MessageLimit as Limited;
    Ok(builder
        .add_service(GrpcOnly::new(Limited::new(
            health_service,
            max,
            partial.clone(),
        )))
        .add_service(GrpcOnly::new(Limited::new(
            reflection,
            max,
            partial.clone(),
        )))
        .add_optional_service(serves_collector.then(|| {
            let collector = CollectorServer::new(collector).max_decoding_message_size(max);
            GrpcOnly::new(Limited::new(collector, max, partial))
        }))
        .add_service(GrpcOnly::holding_reports(
            EvaluationServer::new(evaluation::EvaluationService::new(
                engine,
                settings.windows.clone(),
            )),
            permits,
            settings.grpc_report_timeout,
        )))
}
