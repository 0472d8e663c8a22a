//! The online sidecar: gRPC ingest and query, the HTTP listener, and a
//! graceful shutdown that reaches every task. This file only wires the
//! rooms together; each concern lives in its own module.

pub mod codec;
mod collector;
mod content_type;
mod engine_task;
mod evaluation;
mod http;
mod http_limits;
mod message_limit;
mod periodic;
mod persistence;
mod process;
mod status;
mod tasks;
mod telemetry;
mod tls;

/// The generated server of `rankwatch.v1.Collector` over [`codec::RawCodec`].
#[allow(clippy::default_constructed_unit_structs)]
mod wire_service {
    include!(concat!(env!("OUT_DIR"), "/rankwatch.v1.Collector.rs"));
}

pub use codec::RawBatch;
pub(crate) use engine_task::Command;
pub use engine_task::{Applied, EngineHandle, EngineStopped};

use crate::config::{EngineSettings, ServerSettings};
use crate::proto::{evaluation_server::EvaluationServer, FILE_DESCRIPTOR_SET};
use crate::state::StateFile;
use anyhow::Context;
use content_type::GrpcOnly;
use std::future::IntoFuture;
use std::net::SocketAddr;
use tasks::{Drain, Tasks};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::transport::server::{Router, TcpIncoming};
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
    let state_file = settings
        .state_dir
        .as_deref()
        .filter(|_| settings.fleet.is_none())
        .map(|dir| StateFile::new(dir, engine_settings.fingerprint(&settings.windows)));
    if let Some(file) = &state_file {
        if file.prepare()? {
            tracing::warn!(path = %file.path().display(), "removed the temporary file of a save that was cut short");
        }
    }
    process::configure_memory(settings.huge_pages);
    process::raise_file_limit();
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
    let fleet = match &settings.fleet {
        Some(fleet) => Some(
            start_fleet(
                fleet,
                &engine_settings,
                &settings,
                validator.clone(),
                &shutdown,
            )
            .await?,
        ),
        None => None,
    };
    let engine = match &fleet {
        Some(fleet) => fleet.engine.clone(),
        None => EngineHandle::start(
            persistence::restore(&engine_settings, &settings, state_file.as_ref()),
            validator,
            engine_settings.clone(),
            settings.max_inflight_batches,
        ),
    };
    // A consuming instance keeps serving its figures after shutdown,
    // until it has handed its partitions over and lingered.
    let serving = fleet
        .as_ref()
        .map_or(shutdown.clone(), |f| f.serving.clone());
    let (drain, tasks) = Drain::new();
    let serves_collector = fleet.as_ref().is_none_or(|f| f.collector);
    let grpc = grpc_server(
        &settings,
        engine.clone(),
        serves_collector,
        shutdown.clone(),
        tasks.clone(),
    )
    .await?;
    let grpc = grpc.serve_with_incoming_shutdown(
        // Without TCP_NODELAY a small ack waits for the client's next packet.
        TcpIncoming::from(grpc_listener).with_nodelay(Some(true)),
        serving.clone().cancelled_owned(),
    );
    let http_listener = http_limits::BoundedListener::new(
        http_listener,
        settings.max_http_connections,
        http_limits::HttpTimeouts {
            header: settings.http_header_timeout,
            idle: settings.http_idle_timeout,
        },
    );
    let http = axum::serve(
        http_listener,
        http_limits::tracking_requests(
            http::router(
                engine.clone(),
                recorder.clone(),
                settings.windows.clone(),
                shutdown.clone(),
                fleet.as_ref().map(|f| f.reachable.clone()),
            )
            .merge(status::router(
                engine.clone(),
                engine_settings.report_config(),
                status::StatusSettings::new(&engine_settings, &settings),
            )),
        ),
    )
    .with_graceful_shutdown(serving.clone().cancelled_owned());
    let saver = state_file.map(|file| {
        persistence::Saver::start(
            engine.clone(),
            file,
            settings.snapshot_interval,
            shutdown.clone(),
        )
    });
    tasks.spawn(telemetry::keep_up(recorder, shutdown.clone()));
    // In fleet mode each partition's watermark follows the wall clock on its own.
    // In fleet mode groups live in the partitions, handed between instances.
    if fleet.is_none() {
        tasks.spawn(periodic::retire_idle_groups(
            engine.clone(),
            settings.group_idle_timeout,
            shutdown.clone(),
        ));
    }
    if settings.wall_clock_advance && fleet.is_none() {
        tasks.spawn(periodic::advance_with_wall_clock(engine, shutdown.clone()));
    }
    let grpc = tasks.spawn(grpc);
    let http = tasks.spawn(http.into_future());

    serving.cancelled().await;
    if drain.wait(tasks, settings.drain_timeout).await {
        grpc.await?.context("gRPC server")?;
        http.await?.context("HTTP server")?;
    }
    if let Some(saver) = saver {
        saver.finish().await.context("saving state at shutdown")?;
    }
    tracing::info!("rankwatch stopped");
    Ok(())
}

/// The gRPC services (collector, evaluation, health, reflection) on
/// `engine`, over TLS when the settings ask for it.
async fn grpc_server(
    settings: &ServerSettings,
    engine: EngineHandle,
    serves_collector: bool,
    shutdown: CancellationToken,
    tasks: Tasks,
) -> anyhow::Result<Router> {
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
        settings.ingest_idle_timeout,
        shutdown,
        tasks,
    );
    let mut builder = tonic::transport::Server::builder();
    if let Some(tls) = &settings.tls {
        builder = builder.tls_config(tls::config(tls)?)?;
    }
    Ok(builder
        .add_service(GrpcOnly(health_service))
        .add_service(GrpcOnly(reflection))
        .add_optional_service(serves_collector.then(|| {
            GrpcOnly(message_limit::MessageLimit::new(
                CollectorServer::new(collector)
                    .max_decoding_message_size(settings.max_message_size),
                settings.max_message_size,
            ))
        }))
        .add_service(GrpcOnly(EvaluationServer::new(
            evaluation::EvaluationService::new(engine, settings.windows.clone()),
        ))))
}

/// Starts fleet mode (SPEC §10): the relay's producer, or the consumer.
async fn start_fleet(
    fleet: &crate::fleet::FleetSettings,
    engine: &EngineSettings,
    settings: &ServerSettings,
    validator: crate::event::Validator,
    shutdown: &CancellationToken,
) -> anyhow::Result<crate::fleet::Started> {
    if settings.state_dir.is_some() {
        tracing::warn!(
            "state_dir is not used in fleet mode: partition state lives in the state topic"
        );
    }
    let setup = crate::fleet::EngineSetup {
        settings: engine.clone(),
        windows: settings.windows.clone(),
        wall_clock_advance: settings.wall_clock_advance,
        validator,
        fingerprint: engine.fingerprint(&settings.windows),
        capacity: settings.max_inflight_batches,
    };
    crate::fleet::start(fleet, setup, shutdown.clone())
        .await
        .context("starting fleet mode")
}
