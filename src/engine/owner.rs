//! The engine's owner: one task that applies batches in arrival order and
//! answers for snapshots and reports. Batches reach it over one bounded
//! channel, so a full queue pushes back on the ingest streams; questions
//! (snapshots for `/metrics`, reports) come over a second channel that it
//! serves first, so that a scrape never waits behind the queued batches,
//! only behind the one being applied. The state to save is asked for
//! behind the queued batches, so that a save holds every batch acknowledged
//! before it. It is a task of the runtime rather than a thread of its own:
//! handing batches between threads cost 17% more CPU per event on a
//! one-core sidecar.

use super::command::{Applied, Command};
use super::{AckBuilder, RawBatch};
use crate::event::wire::parse_batch;
use crate::event::Validator;
use crate::export::{Report, ReportConfig, Snapshot};
use crate::join::Engine;
use std::sync::atomic::Ordering;
use tokio::sync::mpsc;

/// Counter: groups retired after `group_idle_timeout` without an impression.
pub const GROUPS_RETIRED_TOTAL: &str = "rankwatch_groups_retired_total";
/// Interleaving experiments retired with the idle groups.
pub const EXPERIMENTS_RETIRED_TOTAL: &str = "rankwatch_interleaving_experiments_retired_total";

/// Runs the engine until every sender of `commands` is gone.
pub(super) async fn run(
    mut engine: Engine,
    validator: Validator,
    report_config: ReportConfig,
    max_ack_rejections: usize,
    mut commands: mpsc::Receiver<Command>,
    mut questions: mpsc::Receiver<Command>,
) {
    // `T` as the last tick left it: a tick that finds it unmoved moves it
    // to the wall clock. Events that do not raise it (old ones, after live
    // traffic stopped) do not hold the wall clock back.
    let mut watermark_at_tick = None;
    let mut announced = false;
    loop {
        let command = tokio::select! {
            biased;
            Some(question) = questions.recv() => question,
            command = commands.recv() => match command {
                Some(command) => command,
                None => break,
            },
        };
        match command {
            Command::Apply {
                batch,
                stream_failed,
                done,
            } => {
                if stream_failed.load(Ordering::Relaxed) {
                    continue;
                }
                let applied = apply(&mut engine, &validator, &batch, max_ack_rejections);
                if applied.is_err() {
                    stream_failed.store(true, Ordering::Relaxed);
                }
                let _ = done.send(applied);
                if !announced {
                    announced = announce_first_lists(&engine);
                }
            }
            Command::AdvanceIfIdle { now } => {
                if engine.max_time() == watermark_at_tick {
                    engine.advance_to(now);
                }
                watermark_at_tick = engine.max_time();
            }
            Command::RetireIdleGroups { now, idle } => {
                let retired = engine.retire_idle_groups(now, idle);
                metrics::counter!(GROUPS_RETIRED_TOTAL).increment(retired.groups as u64);
                metrics::counter!(EXPERIMENTS_RETIRED_TOTAL).increment(retired.experiments as u64);
            }
            Command::Snapshot { reply } => {
                let snapshot = Snapshot::of(&engine, report_config.control_model.clone())
                    .with_expected_split(&report_config.expected_split);
                let _ = reply.send(snapshot);
            }
            Command::Report { window, reply } => {
                let report = match window {
                    None => Report::since_start(&engine, &report_config),
                    Some(index) => Report::window(&engine, &report_config, index),
                }
                .with_pending(&engine);
                let _ = reply.send(report);
            }
            Command::State { spare, reply } => {
                let _ = reply.send(engine.encode_state(spare));
            }
        }
    }
}

/// Logs, once, that lists are open and when the first is finalized: a new
/// server shows no figure for attribution window + allowed lateness.
/// Returns whether it did.
fn announce_first_lists(engine: &Engine) -> bool {
    let Some(seconds) = engine.seconds_to_first_finalization() else {
        return false;
    };
    tracing::info!(
        open_impressions = engine.open_impressions(),
        first_finalized_in_s = seconds.round(),
        "lists open: each is evaluated once its attribution window and the allowed lateness have passed"
    );
    true
}

/// Reads and validates one batch, then applies it event by event, having
/// first prefetched the state of every event's user.
fn apply(
    engine: &mut Engine,
    validator: &Validator,
    batch: &RawBatch,
    max_ack_rejections: usize,
) -> Applied {
    let view = parse_batch(&batch.0)?;
    let now = crate::clock::wall_clock();
    engine.received_at(now);
    let mut ack = AckBuilder::new(view.sequence, max_ack_rejections);
    let events: Vec<_> = view
        .events
        .iter()
        .map(|event| validator.view(event, &view, now))
        .collect();
    for event in events.iter().flatten() {
        engine.prefetch(event.user());
    }
    for (index, event) in events.into_iter().enumerate() {
        match event {
            Ok(event) => match engine.apply(event) {
                None => ack.accept(),
                Some(shed) => ack.reject(index, shed.reason(), || shed.message().to_owned()),
            },
            Err(rejection) => {
                engine.reject(rejection.reason);
                ack.reject(index, rejection.reason.as_str(), || rejection.message);
            }
        }
    }
    Ok(ack.finish())
}
