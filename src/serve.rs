//! `rankwatch serve`: wires an engine to the listeners. It binds them,
//! chooses the engine (a local one restored from `state_dir`, or fleet
//! mode's relay or consumer), starts the engine's periodic work and the
//! state saver, and hands the listeners the engine's handle and readiness.
//! Neither `server` nor `fleet` knows of the other; this command does.

use crate::engine::persistence::{self, Saver};
use crate::engine::{self, periodic, EngineHandle, EngineSettings, Readiness};
use crate::event::Validator;
use crate::fleet::{FleetSettings, Started};
use crate::server::{self, Bound, Listeners, Served, ServerSettings, StatusSettings};
use crate::state::StateFile;
use anyhow::Context;
use tokio_util::sync::CancellationToken;

/// Binds both listeners, then serves until `shutdown` is cancelled. `on_bound`
/// hears the bound addresses (port 0 picks free ports). With `fleet` set,
/// fleet mode's engine answers (docs/SPEC.md §10); otherwise a local one.
pub async fn serve(
    engine_settings: EngineSettings,
    settings: ServerSettings,
    fleet: Option<FleetSettings>,
    shutdown: CancellationToken,
    on_bound: impl FnOnce(Bound),
) -> anyhow::Result<()> {
    let state_file = match &fleet {
        None => prepare_state_file(&engine_settings, &settings)?,
        Some(_) => {
            if settings.state_dir.is_some() {
                tracing::warn!(
                    "state_dir is not used in fleet mode: partition state lives in the state topic"
                );
            }
            None
        }
    };
    crate::process::configure_memory(settings.huge_pages);
    check_file_budget(&settings, crate::process::raise_file_limit())?;
    let recorder = server::recorder()?;
    engine::describe();
    server::export_limits(&engine_settings, &settings);
    let listeners = Listeners::bind(&settings).await?;
    let bound = listeners.bound()?;
    tracing::info!(grpc_addr = %bound.grpc, http_addr = %bound.http, "rankwatch serving");
    on_bound(bound);

    let readiness = Readiness::default();
    let (started, saver) = start_engine(
        &engine_settings,
        &settings,
        fleet.as_ref(),
        state_file,
        &readiness,
        &shutdown,
    )
    .await?;
    let served = Served {
        engine: started.engine,
        readiness,
        collector: started.collector,
        serving: started.serving,
        report: engine_settings.report_config(),
        status: StatusSettings::new(&engine_settings, &settings),
    };
    let stopped_early = tokio::spawn(stop_with_the_engine(
        served.engine.clone(),
        shutdown.clone(),
    ));
    let engine = served.engine.clone();
    server::run(listeners, served, &settings, recorder, shutdown).await?;
    if stopped_early.await.unwrap_or(false) {
        anyhow::bail!("the engine stopped while the server ran (its error is logged above); the state file keeps the last periodic save");
    }
    match saver {
        Some(saver) => saver.finish().await.context("saving state at shutdown")?,
        None if fleet.is_none() => tell_what_is_lost(&engine).await,
        None => {}
    }
    tracing::info!("rankwatch stopped");
    Ok(())
}

/// Logs what a local engine without `state_dir` loses as it stops: the
/// lists still open and the interactions waiting for theirs, acknowledged
/// to their senders, go with the process.
async fn tell_what_is_lost(engine: &EngineHandle) {
    let Ok(snapshot) = engine.snapshot().await else {
        return;
    };
    let (open, waiting) = (snapshot.open_impressions, snapshot.waiting_interactions);
    if open + waiting > 0 {
        tracing::warn!(
            open_lists = open,
            waiting_interactions = waiting,
            "state_dir is not set: the lists still open and the interactions waiting for theirs are lost, unsaved; set state_dir to keep them across restarts"
        );
    }
}

/// Shuts the server down if its engine stops before `shutdown` (nothing
/// but a panic in it ends it sooner), so that the process exits 1 and is
/// restarted, rather than answering probes while every batch is refused.
/// Resolves to whether it did.
async fn stop_with_the_engine(engine: EngineHandle, shutdown: CancellationToken) -> bool {
    tokio::select! {
        biased;
        () = shutdown.cancelled() => false,
        () = engine.stopped() => {
            tracing::error!("the engine stopped while the server ran: shutting down");
            shutdown.cancel();
            true
        }
    }
}

/// The engine that answers: fleet mode's when `fleet` is set, else a local
/// one restored from `state_file`, with the saver of its state.
async fn start_engine(
    engine_settings: &EngineSettings,
    settings: &ServerSettings,
    fleet: Option<&FleetSettings>,
    state_file: Option<StateFile>,
    readiness: &Readiness,
    shutdown: &CancellationToken,
) -> anyhow::Result<(Started, Option<Saver>)> {
    let validator = engine_settings.validator(Some(settings.max_future_skew));
    Ok(match fleet {
        Some(fleet) => {
            let started = start_fleet(
                fleet,
                engine_settings,
                settings,
                validator,
                readiness,
                shutdown,
            )
            .await?;
            (started, None)
        }
        None => {
            let engine = start_local(
                engine_settings,
                settings,
                validator,
                state_file.as_ref(),
                shutdown,
            );
            let saver = state_file.map(|file| {
                Saver::start(
                    engine.clone(),
                    file,
                    settings.snapshot_interval,
                    shutdown.clone(),
                )
            });
            // A local engine's listeners stop at shutdown.
            let started = Started {
                engine,
                collector: true,
                serving: shutdown.clone(),
            };
            (started, saver)
        }
    })
}

/// Descriptors kept for what is not a connection: the state file, Kafka's
/// sockets, logs.
const RESERVED_FILES: u64 = 64;

/// Checks that both listeners at their connection limits, and the rest,
/// fit the open-file limit: a flood of one listener then runs into its own
/// limit, never into the descriptors the other listener or ingest needs.
fn check_file_budget(settings: &ServerSettings, limit: Option<u64>) -> anyhow::Result<()> {
    let Some(limit) = limit else {
        return Ok(());
    };
    let needed = (settings.max_grpc_connections as u64)
        .saturating_add(settings.max_http_connections as u64)
        .saturating_add(RESERVED_FILES);
    if needed > limit {
        anyhow::bail!(
            "setting `max_grpc_connections` ({}) + `max_http_connections` ({}) + {RESERVED_FILES} descriptors for the rest exceed the open-file limit of {limit}: lower a setting, or raise the limit (ulimit -n, LimitNOFILE= of systemd)",
            settings.max_grpc_connections,
            settings.max_http_connections,
        );
    }
    Ok(())
}

/// The state file of a local engine, checked usable, if `state_dir` is set.
fn prepare_state_file(
    engine: &EngineSettings,
    settings: &ServerSettings,
) -> anyhow::Result<Option<StateFile>> {
    let Some(dir) = settings.state_dir.as_deref() else {
        tracing::info!("state_dir is not set: nothing is saved, and a restart starts empty (open lists and the figures since start are lost); set state_dir to keep them");
        return Ok(None);
    };
    let file = StateFile::new(dir, engine.fingerprint(&settings.windows))
        .with_join_rules(engine.join_rules())
        .lock()?;
    if let Some(temporary) = file.prepare()? {
        tracing::warn!(path = %temporary.display(), "removed the temporary file of a save that was cut short");
    }
    Ok(Some(file))
}

/// A local engine, restored from `state_file` when it holds a usable
/// state, with its periodic work: retiring idle groups and, unless turned
/// off, advancing the watermark with the wall clock.
fn start_local(
    engine_settings: &EngineSettings,
    settings: &ServerSettings,
    validator: Validator,
    state_file: Option<&StateFile>,
    shutdown: &CancellationToken,
) -> EngineHandle {
    let mut restored = persistence::restore(engine_settings, &settings.windows, state_file);
    if settings.wall_clock_advance {
        restored.cap_time_at_wall_clock();
    }
    let engine = EngineHandle::start(
        restored,
        validator,
        engine_settings.clone(),
        settings.max_inflight_batches,
    );
    tokio::spawn(periodic::retire_idle_groups(
        engine.clone(),
        settings.group_idle_timeout,
        shutdown.clone(),
    ));
    if settings.wall_clock_advance {
        tokio::spawn(periodic::advance_with_wall_clock(
            engine.clone(),
            shutdown.clone(),
        ));
    }
    engine
}

/// Starts fleet mode: the relay's producer, or the consumer.
#[cfg(feature = "kafka")]
async fn start_fleet(
    fleet: &FleetSettings,
    engine: &EngineSettings,
    settings: &ServerSettings,
    validator: Validator,
    readiness: &Readiness,
    shutdown: &CancellationToken,
) -> anyhow::Result<Started> {
    let setup = crate::fleet::EngineSetup {
        settings: engine.clone(),
        windows: settings.windows.clone(),
        wall_clock_advance: settings.wall_clock_advance,
        validator,
        fingerprint: engine.fingerprint(&settings.windows),
        capacity: settings.max_inflight_batches,
    };
    crate::fleet::start(fleet, setup, readiness.clone(), shutdown.clone())
        .await
        .context("starting fleet mode")
}

/// Refuses fleet mode in a build without Kafka.
#[cfg(not(feature = "kafka"))]
async fn start_fleet(
    _fleet: &FleetSettings,
    _engine: &EngineSettings,
    _settings: &ServerSettings,
    _validator: Validator,
    _readiness: &Readiness,
    _shutdown: &CancellationToken,
) -> anyhow::Result<Started> {
    anyhow::bail!("{}", crate::fleet::settings::NO_KAFKA)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_engine_that_stops_before_shutdown_shuts_the_server_down() {
        let (engine, commands) = EngineHandle::channel(1);
        let shutdown = CancellationToken::new();
        let watching = tokio::spawn(stop_with_the_engine(engine, shutdown.clone()));
        tokio::task::yield_now().await;
        assert!(!shutdown.is_cancelled());
        drop(commands);
        assert!(watching.await.unwrap(), "the engine's end is told");
        assert!(shutdown.is_cancelled());
    }

    #[tokio::test]
    async fn an_engine_that_stops_at_shutdown_is_no_error() {
        let (engine, commands) = EngineHandle::channel(1);
        let shutdown = CancellationToken::new();
        let watching = tokio::spawn(stop_with_the_engine(engine, shutdown.clone()));
        shutdown.cancel();
        drop(commands);
        assert!(!watching.await.unwrap());
    }
}
