//! The engine's state across restarts: restored at start, saved every
//! `snapshot_interval` and once more after the drain, all by one task. The
//! file format is `state`'s; this module decides when to read and write it,
//! and counts.

use super::{EngineHandle, EngineSettings};
use crate::clock::Every;
use crate::join::{Engine, JoinSettings, StatePieces};
use crate::state::StateFile;
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Counter: state snapshots written.
pub const STATE_SAVES_TOTAL: &str = "rankwatch_state_saves_total";
/// Counter: state snapshots that could not be written.
pub const STATE_SAVE_FAILURES_TOTAL: &str = "rankwatch_state_save_failures_total";
/// Counter: saved states that could not be restored at start.
pub const STATE_RESTORE_FAILURES_TOTAL: &str = "rankwatch_state_restore_failures_total";
/// Gauge: size of the last saved state.
pub const STATE_BYTES: &str = "rankwatch_state_bytes";

/// Describes the series of saving and restoring.
pub(super) fn describe() {
    metrics::describe_counter!(
        STATE_SAVES_TOTAL,
        "State snapshots written to the state directory."
    );
    metrics::describe_counter!(
        STATE_SAVE_FAILURES_TOTAL,
        "State snapshots that could not be written."
    );
    metrics::describe_counter!(
        STATE_RESTORE_FAILURES_TOTAL,
        "Saved states that could not be restored at start (the server started empty)."
    );
    metrics::describe_gauge!(
        STATE_BYTES,
        metrics::Unit::Bytes,
        "Size of the last saved state."
    );
}

/// The engine to start with: the saved state when there is a usable one.
/// An unusable state file is set aside with a loud log line and a counter,
/// and the server starts empty rather than not at all.
pub fn restore(engine: &EngineSettings, windows: &[Duration], file: Option<&StateFile>) -> Engine {
    let fresh = || Engine::new(engine.join(windows), engine.evaluator());
    metrics::counter!(STATE_RESTORE_FAILURES_TOTAL).absolute(0);
    let Some(file) = file else { return fresh() };
    // Saves are counted from the start, so that rate() and alerts see them.
    metrics::counter!(STATE_SAVES_TOTAL).absolute(0);
    metrics::counter!(STATE_SAVE_FAILURES_TOTAL).absolute(0);
    let clean = file.take_clean_mark();
    match file.load() {
        Ok(Some(mut loaded)) => {
            let limits = engine.join(windows);
            let counted_before = std::mem::take(&mut loaded.state.counted_before);
            let mut restored = Engine::from_state(limits.clone(), engine.evaluator(), loaded.state);
            if !(clean && restored.carry_on_from(counted_before)) {
                restored.reset_exported_counters();
                tracing::info!(
                    path = %file.path().display(),
                    "the state was not saved by a graceful shutdown: the counters of /metrics start again from 0, as a new process's do, so that rate() does not count the restored figures again; the figures since start are kept"
                );
            }
            tracing::info!(
                path = %file.path().display(),
                open_impressions = restored.open_impressions(),
                waiting_interactions = restored.waiting_interactions(),
                "state restored"
            );
            if let Some(changed) = loaded.join_rules_changed {
                tracing::warn!(
                    ?changed,
                    path = %file.path().display(),
                    "state restored under other join settings than it was computed under: its figures since start mix lists joined under both, and the rolling windows until they pass; to count only under the new settings, stop the server and move the state file out of state_dir"
                );
            }
            warn_beyond_limits(&restored, &limits);
            restored
        }
        Ok(None) => fresh(),
        Err(error) => {
            metrics::counter!(STATE_RESTORE_FAILURES_TOTAL).increment(1);
            let error = format!("{:#}", anyhow::Error::new(error));
            match file.set_aside() {
                Ok(aside) => {
                    tracing::error!(%error, aside = %aside.display(), "STATE NOT RESTORED: starting empty; the unusable file was moved aside")
                }
                Err(move_error) => {
                    let move_error = format!("{:#}", anyhow::Error::new(move_error));
                    tracing::error!(%error, %move_error, path = %file.path().display(), "STATE NOT RESTORED: starting empty; the unusable file could not be moved aside: move it out of state_dir to keep it, since the next save replaces it")
                }
            }
            fresh()
        }
    }
}

/// Warns of each limit in `limits` that the `restored` engine holds more
/// than: limits are not part of a state's fingerprint, so a restart may set
/// them lower than what was saved.
fn warn_beyond_limits(restored: &Engine, limits: &JoinSettings) {
    let groups = restored
        .group_names()
        .iter()
        .filter(|g| !g.is_overflow())
        .count();
    let one_user = restored.most_held_by_one_user();
    let mut held = vec![
        (
            "open_impressions".to_owned(),
            restored.open_impressions(),
            "max_open_impressions",
            limits.max_open_impressions,
        ),
        (
            "open_items".to_owned(),
            restored.open_items(),
            "max_open_items",
            limits.max_open_items,
        ),
        (
            "waiting_interactions".to_owned(),
            restored.waiting_interactions(),
            "max_waiting_interactions",
            limits.max_waiting_interactions,
        ),
        (
            "credited_and_waiting_interactions".to_owned(),
            restored.open_credits() + restored.waiting_interactions(),
            "max_open_credits",
            limits.max_open_credits,
        ),
        ("groups".to_owned(), groups, "max_groups", limits.max_groups),
        (
            "open_impressions_of_one_user".to_owned(),
            one_user.open_impressions,
            "max_open_impressions_per_user",
            limits.max_open_impressions_per_user,
        ),
        (
            "waiting_interactions_of_one_user".to_owned(),
            one_user.waiting_interactions,
            "max_waiting_interactions_per_user",
            limits.max_waiting_interactions_per_user,
        ),
        (
            "interactions_credited_to_one_impression".to_owned(),
            one_user.credited_to_one_impression,
            "max_interactions_per_impression",
            limits.max_interactions_per_impression,
        ),
    ];
    let max_segment_values = limits.segments.max_values;
    held.extend(restored.kept_segment_values().map(|(label, kept)| {
        let what = format!("segment_values.{label}");
        (what, kept, "max_segment_values", max_segment_values)
    }));
    let beyond: Vec<String> = held
        .into_iter()
        .filter(|(_, held, _, limit)| held > limit)
        .map(|(what, held, name, limit)| format!("{what}={held} {name}={limit}"))
        .collect();
    if !beyond.is_empty() {
        tracing::warn!(
            beyond = %beyond.join(" "),
            "state restored beyond the limits in force, set lower since it was saved: all of it is kept, and new impressions, interactions and groups meet the limits (shed or folded, and counted) until it falls below them; segment values stay kept, and every new one folds into __other__"
        );
    }
}

/// Has the engine encode its state into `spare` (the pieces of the last
/// save, which this one leaves there), and writes it off the engine task.
/// A state saved again and again is encoded into the same memory: new
/// pieces at each save had held about two states beside the engine, the
/// allocator keeping what each save freed for the thread that took it.
async fn save(
    engine: &EngineHandle,
    file: &StateFile,
    spare: &mut StatePieces,
) -> anyhow::Result<()> {
    let state = engine.state(std::mem::take(spare)).await??;
    let file = file.clone();
    let (written, state) = tokio::task::spawn_blocking(move || (file.save(&state), state)).await?;
    *spare = state.pieces;
    match written {
        Ok(bytes) => {
            metrics::counter!(STATE_SAVES_TOTAL).increment(1);
            metrics::gauge!(STATE_BYTES).set(bytes as f64);
            Ok(())
        }
        Err(error) => {
            metrics::counter!(STATE_SAVE_FAILURES_TOTAL).increment(1);
            Err(error.into())
        }
    }
}

/// The one task that writes the state file: a save every
/// `snapshot_interval` until shutdown, then, once the server has drained,
/// the final save. Every save goes through it, one after another, so no two
/// ever write the temporary file at once.
pub struct Saver {
    task: JoinHandle<anyhow::Result<()>>,
    drained: CancellationToken,
}

impl Saver {
    /// Starts saving `engine`'s state to `file` every `interval` until `shutdown`.
    pub fn start(
        engine: EngineHandle,
        file: StateFile,
        interval: Duration,
        shutdown: CancellationToken,
    ) -> Self {
        let drained = CancellationToken::new();
        let task = tokio::spawn(keep_saved(
            engine,
            file,
            interval,
            shutdown,
            drained.clone(),
        ));
        Self { task, drained }
    }

    /// Tells the saver the server has drained, and waits for the final save.
    pub async fn finish(self) -> anyhow::Result<()> {
        self.drained.cancel();
        self.task.await?
    }
}

async fn keep_saved(
    engine: EngineHandle,
    file: StateFile,
    interval: Duration,
    shutdown: CancellationToken,
    drained: CancellationToken,
) -> anyhow::Result<()> {
    let mut every = Every::after_one(interval, shutdown);
    let mut spare = StatePieces::default();
    while every.tick().await {
        if let Err(error) = save(&engine, &file, &mut spare).await {
            tracing::error!(
                error = format!("{error:#}"),
                "periodic state save failed: a restart would restore the last state saved, or none"
            );
        }
    }
    drained.cancelled().await;
    save(&engine, &file, &mut spare).await?;
    let marked = tokio::task::spawn_blocking(move || file.mark_clean()).await?;
    if let Err(error) = marked {
        tracing::warn!(%error, "could not mark the state as saved by a graceful shutdown: after a restart, the counters of /metrics start again from 0");
    }
    Ok(())
}
