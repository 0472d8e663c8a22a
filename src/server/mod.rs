//! The online sidecar: gRPC ingest and query, the HTTP listener, and a
//! graceful shutdown that reaches every task. This file only wires the
//! rooms together; each concern lives in its own module.

pub mod codec;
mod collector;
mod engine_task;
mod evaluation;
mod http;
mod periodic;
mod persistence;
mod process;
mod telemetry;
mod tls;

/// The generated server of `rankwatch.v1.Collector` over [`codec::RawCodec`].
#[allow(clippy::default_constructed_unit_structs)]
mod wire_service {
    include!(concat!(env!("OUT_DIR"), "/rankwatch.v1.Collector.rs"));
}

pub use collector::wall_clock;
pub use engine_task::{EngineHandle, EngineStopped};

use crate::config::{EngineSettings, ServerSettings};
use crate::proto::{evaluation_server::EvaluationServer, FILE_DESCRIPTOR_SET};
use crate::state::StateFile;
use anyhow::Context;
use std::net::SocketAddr;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::transport::server::TcpIncoming;
use wire_service::collector_server::CollectorServer;

/// The addresses a running server listens on.
#[derive(Clone, Copy, Debug)]
pub struct Bound {
    /// gRPC.
    pub grpc: SocketAddr,
    /// HTTP.
    pub http: SocketAddr,
}

/// Binds both listeners, then serves until `shutdown` is cancelled. `on_bound`
/// hears the bound addresses (port 0 picks free ports).
pub async fn serve(
    engine_settings: EngineSettings,
    settings: ServerSettings,
    shutdown: CancellationToken,
    on_bound: impl FnOnce(Bound),
) -> anyhow::Result<()> {
    process::configure_memory(settings.huge_pages);
    let recorder = telemetry::recorder()?;
    telemetry::export_limits(&engine_settings, &settings);
    let grpc_listener = TcpListener::bind(settings.grpc_addr)
        .await
        .with_context(|| format!("binding gRPC to {}", settings.grpc_addr))?;
    let http_listener = TcpListener::bind(settings.http_addr)
        .await
        .with_context(|| format!("binding HTTP to {}", settings.http_addr))?;
    let bound = Bound {
        grpc: grpc_listener.local_addr()?,
        http: http_listener.local_addr()?,
    };
    tracing::info!(grpc_addr = %bound.grpc, http_addr = %bound.http, "rankwatch serving");
    on_bound(bound);

    let validator = engine_settings.validator(Some(settings.max_future_skew));
    let state_file = settings
        .state_dir
        .as_deref()
        .map(|dir| StateFile::new(dir, engine_settings.fingerprint(&settings.windows)));
    let restored = persistence::restore(&engine_settings, &settings, state_file.as_ref());
    let engine = EngineHandle::start(
        restored,
        validator,
        engine_settings.clone(),
        settings.max_inflight_batches,
    );
    tokio::spawn(telemetry::keep_up(recorder.clone(), shutdown.clone()));
    if settings.wall_clock_advance {
        tokio::spawn(periodic::advance_with_wall_clock(
            engine.clone(),
            shutdown.clone(),
        ));
    }
    if let Some(file) = &state_file {
        tokio::spawn(persistence::save_periodically(
            engine.clone(),
            file.clone(),
            settings.snapshot_interval,
            shutdown.clone(),
        ));
    }

    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_serving::<CollectorServer<collector::CollectorService>>()
        .await;
    health
        .set_serving::<EvaluationServer<evaluation::EvaluationService>>()
        .await;
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()?;
    let collector = collector::CollectorService::new(
        engine.clone(),
        settings.max_streams,
        settings.max_inflight_batches,
        shutdown.clone(),
    );
    let mut builder = tonic::transport::Server::builder();
    if let Some(tls) = &settings.tls {
        builder = builder.tls_config(tls::config(tls)?)?;
    }
    let grpc = builder
        .add_service(health_service)
        .add_service(reflection)
        .add_service(
            CollectorServer::new(collector).max_decoding_message_size(settings.max_message_size),
        )
        .add_service(EvaluationServer::new(evaluation::EvaluationService::new(
            engine.clone(),
            settings.windows.clone(),
        )))
        .serve_with_incoming_shutdown(
            // Without TCP_NODELAY a small ack waits for the client's next packet.
            TcpIncoming::from(grpc_listener).with_nodelay(Some(true)),
            shutdown.clone().cancelled_owned(),
        );
    let http = axum::serve(
        http_listener,
        http::router(
            engine.clone(),
            recorder,
            settings.windows.clone(),
            shutdown.clone(),
        ),
    )
    .with_graceful_shutdown(shutdown.clone().cancelled_owned());
    let (grpc, http) = tokio::join!(grpc, async { http.await });
    grpc.context("gRPC server")?;
    http.context("HTTP server")?;
    if let Some(file) = &state_file {
        persistence::save(&engine, file)
            .await
            .context("saving state at shutdown")?;
    }
    tracing::info!("rankwatch stopped");
    Ok(())
}
