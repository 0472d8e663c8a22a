//! The online sidecar: gRPC ingest and query, the HTTP listener, and a
//! graceful shutdown that reaches every task.

pub mod codec;
mod collector;
mod engine_task;
mod evaluation;
mod http;

/// The generated server of `rankwatch.v1.Collector` over [`codec::RawCodec`].
#[allow(clippy::default_constructed_unit_structs)]
mod wire_service {
    include!(concat!(env!("OUT_DIR"), "/rankwatch.v1.Collector.rs"));
}

pub use engine_task::{EngineHandle, EngineStopped};

use crate::clock::wall_clock;
use crate::config::{EngineSettings, ServerSettings, TlsSettings};
use crate::join::Engine;
use crate::proto::{evaluation_server::EvaluationServer, FILE_DESCRIPTOR_SET};
use crate::state::StateFile;
use anyhow::Context;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::transport::server::TcpIncoming;
use wire_service::collector_server::CollectorServer;

/// How often the recorder's upkeep runs (the exporter's own default).
const RECORDER_UPKEEP: Duration = Duration::from_secs(5);

/// Bucket bounds of `rankwatch_batch_duration_seconds`.
const BATCH_SECONDS_BUCKETS: [f64; 12] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];

/// The process-wide Prometheus recorder of the health series.
fn recorder() -> anyhow::Result<PrometheusHandle> {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    if let Some(handle) = HANDLE.get() {
        return Ok(handle.clone());
    }
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full("rankwatch_batch_duration_seconds".into()),
            &BATCH_SECONDS_BUCKETS,
        )?
        .install_recorder()?;
    describe_health_series();
    Ok(HANDLE.get_or_init(|| handle).clone())
}

fn describe_health_series() {
    metrics::describe_histogram!(
        "rankwatch_batch_duration_seconds",
        metrics::Unit::Seconds,
        "Time from receiving a batch to its acknowledgement."
    );
    metrics::describe_gauge!("rankwatch_ingest_streams", "Open Ingest streams.");
    metrics::describe_counter!(
        "rankwatch_streams_refused_total",
        "Ingest streams refused past max_streams."
    );
    metrics::describe_counter!(
        "rankwatch_streams_failed_total",
        "Ingest RPCs ended by a malformed or oversize message."
    );
    metrics::describe_gauge!("rankwatch_limit", "Configured limits, by name.");
    metrics::describe_counter!(
        "rankwatch_state_saves_total",
        "State snapshots written to the state directory."
    );
    metrics::describe_counter!(
        "rankwatch_state_save_failures_total",
        "State snapshots that could not be written."
    );
    metrics::describe_counter!(
        "rankwatch_state_restore_failures_total",
        "Saved states that could not be restored at start (the server started empty)."
    );
    metrics::describe_gauge!(
        "rankwatch_state_bytes",
        metrics::Unit::Bytes,
        "Size of the last saved state."
    );
    // Zero series exist from the start, so that rate() and alerts see them.
    metrics::counter!("rankwatch_streams_refused_total").absolute(0);
    metrics::counter!("rankwatch_streams_failed_total").absolute(0);
    metrics::gauge!("rankwatch_ingest_streams").set(0.0);
}

fn export_limits(engine: &EngineSettings, server: &ServerSettings) {
    let limits = [
        ("max_items", engine.max_items),
        ("max_groups", engine.max_groups),
        ("max_open_impressions", engine.max_open_impressions),
        ("max_waiting_interactions", engine.max_waiting_interactions),
        ("max_message_size", server.max_message_size),
        ("max_streams", server.max_streams),
        ("max_inflight_batches", server.max_inflight_batches),
    ];
    for (name, value) in limits {
        metrics::gauge!("rankwatch_limit", "limit" => name).set(value as f64);
    }
}

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
    if !settings.huge_pages {
        disable_huge_pages();
    }
    let recorder = recorder()?;
    export_limits(&engine_settings, &settings);
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
    let restored = restore(&engine_settings, &settings, state_file.as_ref());
    let engine = EngineHandle::start(
        restored,
        validator,
        engine_settings.clone(),
        settings.max_inflight_batches,
    );
    tokio::spawn(keep_up(recorder.clone(), shutdown.clone()));
    if settings.wall_clock_advance {
        tokio::spawn(advance_with_wall_clock(engine.clone(), shutdown.clone()));
    }
    if let Some(file) = &state_file {
        tokio::spawn(save_periodically(
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
        builder = builder.tls_config(tls_config(tls)?)?;
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
        save(&engine, file)
            .await
            .context("saving state at shutdown")?;
    }
    tracing::info!("rankwatch stopped");
    Ok(())
}

/// The rustls configuration of the gRPC listener.
fn tls_config(tls: &TlsSettings) -> anyhow::Result<tonic::transport::ServerTlsConfig> {
    let read = |path: &std::path::Path| {
        std::fs::read(path).with_context(|| format!("reading {}", path.display()))
    };
    let identity = tonic::transport::Identity::from_pem(read(&tls.cert)?, read(&tls.key)?);
    let mut config = tonic::transport::ServerTlsConfig::new().identity(identity);
    if let Some(ca) = &tls.client_ca {
        config = config.client_ca_root(tonic::transport::Certificate::from_pem(read(ca)?));
    }
    Ok(config)
}

/// The engine to start with: the saved state when there is a usable one.
/// An unusable state file is set aside with a loud log line and a counter,
/// and the server starts empty rather than not at all.
fn restore(engine: &EngineSettings, server: &ServerSettings, file: Option<&StateFile>) -> Engine {
    let fresh = || Engine::new(engine.join(&server.windows), engine.evaluator());
    metrics::counter!("rankwatch_state_restore_failures_total").absolute(0);
    let Some(file) = file else { return fresh() };
    match file.load() {
        Ok(Some(state)) => {
            let restored =
                Engine::from_state(engine.join(&server.windows), engine.evaluator(), state);
            tracing::info!(
                path = %file.path().display(),
                open_impressions = restored.open_impressions(),
                waiting_interactions = restored.waiting_interactions(),
                "state restored"
            );
            restored
        }
        Ok(None) => fresh(),
        Err(error) => {
            metrics::counter!("rankwatch_state_restore_failures_total").increment(1);
            let error = format!("{:#}", anyhow::Error::new(error));
            match file.set_aside() {
                Ok(aside) => {
                    tracing::error!(%error, aside = %aside.display(), "STATE NOT RESTORED: starting empty; the unusable file was moved aside")
                }
                Err(move_error) => {
                    let move_error = format!("{:#}", anyhow::Error::new(move_error));
                    tracing::error!(%error, %move_error, "STATE NOT RESTORED: starting empty; the unusable file could not be moved aside and will be overwritten")
                }
            }
            fresh()
        }
    }
}

/// Copies the engine's state and writes it off the engine task.
async fn save(engine: &EngineHandle, file: &StateFile) -> anyhow::Result<()> {
    let state = engine.state().await?;
    let file = file.clone();
    let written = tokio::task::spawn_blocking(move || file.save(&state)).await?;
    match written {
        Ok(bytes) => {
            metrics::counter!("rankwatch_state_saves_total").increment(1);
            metrics::gauge!("rankwatch_state_bytes").set(bytes as f64);
            Ok(())
        }
        Err(error) => {
            metrics::counter!("rankwatch_state_save_failures_total").increment(1);
            Err(error.into())
        }
    }
}

/// Saves the state every `interval` until shutdown (the final save follows the drain).
async fn save_periodically(
    engine: EngineHandle,
    file: StateFile,
    interval: Duration,
    shutdown: CancellationToken,
) {
    let mut every = Every::new(interval, shutdown);
    // The first tick is at once; the first save is one interval in.
    every.ticks.tick().await;
    while every.tick().await {
        if let Err(error) = save(&engine, &file).await {
            tracing::warn!(error = format!("{error:#}"), "periodic state save failed");
        }
    }
}

/// Stops the kernel from backing this process's memory with transparent
/// huge pages. Faulting in a fresh 2 MiB page stalls the thread for
/// milliseconds, and at 1,000 batches/s those stalls were most of the ack
/// latency's p99.
fn disable_huge_pages() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: PR_SET_THP_DISABLE reads only its integer arguments and
        // writes no memory of this process.
        let result = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
        if result != 0 {
            tracing::warn!(
                error = %std::io::Error::last_os_error(),
                "could not disable transparent huge pages; latency may have millisecond spikes"
            );
        }
    }
}

/// Folds the histogram samples recorded since the last upkeep into their
/// buckets, every [`RECORDER_UPKEEP`] until shutdown. Without it they pile
/// up between scrapes, without bound when nothing scrapes.
async fn keep_up(recorder: PrometheusHandle, shutdown: CancellationToken) {
    let mut every = Every::new(RECORDER_UPKEEP, shutdown);
    while every.tick().await {
        recorder.run_upkeep();
    }
}

/// Moves the watermark with the wall clock while no events arrive, so that
/// no list waits forever.
async fn advance_with_wall_clock(engine: EngineHandle, shutdown: CancellationToken) {
    let mut every = Every::new(Duration::from_secs(1), shutdown);
    while every.tick().await {
        if engine.advance_if_idle(wall_clock()).await.is_err() {
            return;
        }
    }
}

/// The clock of the server's periodic tasks: a tick every period until
/// shutdown; a late tick is delayed rather than followed by a burst.
struct Every {
    ticks: tokio::time::Interval,
    shutdown: CancellationToken,
}

impl Every {
    /// Ticks every `period`, the first at once, until `shutdown`.
    fn new(period: Duration, shutdown: CancellationToken) -> Self {
        let mut ticks = tokio::time::interval(period);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Self { ticks, shutdown }
    }

    /// Waits for the next tick; `false` once shutdown has begun.
    async fn tick(&mut self) -> bool {
        tokio::select! {
            _ = self.shutdown.cancelled() => false,
            _ = self.ticks.tick() => true,
        }
    }
}
