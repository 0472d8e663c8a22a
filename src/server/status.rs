//! The status page at `/` of the HTTP listener: a page built into the binary
//! (HTML, CSS and script, no request to any other host) and `/api/status`,
//! the JSON it polls: the report since start and per rolling window, the
//! pipeline's health and the settings in force. Like `/metrics` it reads one
//! snapshot of the engine per request and renders it off the engine's task.

use super::history::History;
use super::ServerSettings;
use crate::clock::wall_clock;
use crate::engine::EngineHandle;
use crate::engine::EngineSettings;
use crate::event::{Nanos, NANOS_PER_SECOND};
use crate::export::{Report, ReportConfig, Snapshot};
use crate::metrics::Discount;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

const PAGE: &str = include_str!("status/index.html");
const STYLE: &str = include_str!("status/status.css");
const SCRIPT: &str = include_str!("status/status.js");

/// Samples of the page's history kept over `status_history`.
const HISTORY_SAMPLES: usize = 360;

/// The shortest time between two samples of the history.
const MIN_HISTORY_EVERY: Duration = Duration::from_millis(100);

/// Samples of the history take at most one part in this of a core: at the
/// shortest period, samples of 1,000 groups had kept an idle server at two
/// thirds of a core.
const HISTORY_COST_SHARE: u32 = 20;

/// Only this origin's assets, no inline script, no frames.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
    img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The settings in force, as the page lists them.
#[derive(Clone, Debug, Serialize)]
pub struct StatusSettings {
    k: Vec<usize>,
    windows: Vec<String>,
    attribution_window: String,
    allowed_lateness: String,
    gain: &'static str,
    discount: String,
    half_life: f64,
    g_max: f64,
    rbp_p: f64,
    grades: BTreeMap<String, f64>,
    max_grade: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    control_model: Option<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    expected_split: BTreeMap<String, f64>,
    max_interleaved_rankers: usize,
    position_curve_depth: usize,
    max_exposure_items: usize,
    wall_clock_advance: bool,
    max_future_skew: String,
    max_items: usize,
    max_groups: usize,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    segment_labels: Vec<String>,
    max_segment_values: usize,
    max_open_impressions: usize,
    max_open_items: usize,
    max_waiting_interactions: usize,
    max_open_credits: usize,
    max_open_impressions_per_user: usize,
    max_waiting_interactions_per_user: usize,
    max_interactions_per_impression: usize,
    max_label_bytes: usize,
    max_ack_rejections: usize,
    max_message_size: usize,
    max_partial_message_bytes: usize,
    max_streams: usize,
    max_inflight_batches: usize,
    ingest_idle_timeout: String,
    group_idle_timeout: String,
    max_http_connections: usize,
    http_header_timeout: String,
    http_idle_timeout: String,
    http_send_timeout: String,
    max_grpc_connections: usize,
    max_concurrent_streams: u32,
    grpc_handshake_timeout: String,
    grpc_idle_timeout: String,
    drain_timeout: String,
    tls: &'static str,
    state_dir: Option<String>,
    snapshot_interval: String,
    status_history: String,
    max_status_history_bytes: usize,
    /// How often the history is sampled; `None` when it is off.
    #[serde(skip)]
    status_history_every: Option<Duration>,
    /// Samples the history holds at most.
    #[serde(skip)]
    status_history_samples: usize,
}

impl StatusSettings {
    /// The settings of a server running `engine` under `server`.
    pub fn new(engine: &EngineSettings, server: &ServerSettings) -> Self {
        let tls = match &server.tls {
            None => "off",
            Some(tls) if tls.client_ca.is_some() => "mutual",
            Some(_) => "on",
        };
        Self {
            k: engine.evaluator().ks().to_vec(),
            windows: server.windows.iter().map(|w| duration(*w)).collect(),
            attribution_window: duration(engine.attribution_window),
            allowed_lateness: duration(engine.allowed_lateness),
            gain: engine.metrics.gain.name(),
            discount: match engine.metrics.discount {
                Discount::Log2 => "log2".to_owned(),
                Discount::Jarvelin { base } => format!("jarvelin (base {base})"),
            },
            half_life: engine.metrics.half_life,
            g_max: engine.metrics.err_max_grade,
            rbp_p: engine.metrics.rbp_persistence,
            grades: engine.grades.pairs().iter().cloned().collect(),
            max_grade: engine.max_grade,
            control_model: engine.control_model.clone(),
            expected_split: engine.expected_split.iter().cloned().collect(),
            max_interleaved_rankers: engine.max_interleaved_rankers,
            position_curve_depth: engine.position_curve_depth,
            max_exposure_items: engine.max_exposure_items,
            wall_clock_advance: server.wall_clock_advance,
            max_future_skew: duration(server.max_future_skew),
            max_items: engine.max_items,
            max_groups: engine.max_groups,
            segment_labels: engine.segments.labels.clone(),
            max_segment_values: engine.segments.max_values,
            max_open_impressions: engine.max_open_impressions,
            max_open_items: engine.max_open_items,
            max_waiting_interactions: engine.max_waiting_interactions,
            max_open_credits: engine.max_open_credits,
            max_open_impressions_per_user: engine.max_open_impressions_per_user,
            max_waiting_interactions_per_user: engine.max_waiting_interactions_per_user,
            max_interactions_per_impression: engine.max_interactions_per_impression,
            max_label_bytes: engine.max_label_bytes,
            max_ack_rejections: engine.max_ack_rejections,
            max_message_size: server.max_message_size,
            max_partial_message_bytes: server.max_partial_message_bytes,
            max_streams: server.max_streams,
            max_inflight_batches: server.max_inflight_batches,
            ingest_idle_timeout: duration(server.ingest_idle_timeout),
            group_idle_timeout: duration(server.group_idle_timeout),
            max_http_connections: server.max_http_connections,
            http_header_timeout: duration(server.http_header_timeout),
            http_idle_timeout: duration(server.http_idle_timeout),
            http_send_timeout: duration(server.http_send_timeout),
            max_grpc_connections: server.max_grpc_connections,
            max_concurrent_streams: server.max_concurrent_streams,
            grpc_handshake_timeout: duration(server.grpc_handshake_timeout),
            grpc_idle_timeout: duration(server.grpc_idle_timeout),
            drain_timeout: duration(server.drain_timeout),
            tls,
            state_dir: server
                .state_dir
                .as_ref()
                .map(|dir| dir.display().to_string()),
            snapshot_interval: duration(server.snapshot_interval),
            status_history: duration(server.status_history),
            max_status_history_bytes: server.max_status_history_bytes,
            status_history_every: (!server.status_history.is_zero())
                .then(|| (server.status_history / HISTORY_SAMPLES as u32).max(MIN_HISTORY_EVERY)),
            status_history_samples: HISTORY_SAMPLES,
        }
    }
}

fn duration(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

/// The pipeline's health at one moment.
#[derive(Debug, Serialize)]
struct Health {
    events_received: u64,
    events_accepted: u64,
    open_impressions: usize,
    waiting_interactions: usize,
    overflowed_impressions: u64,
    groups: usize,
    /// Wall clock minus the watermark, once there is one.
    watermark_lag_s: Option<f64>,
    /// Wall clock minus the finalization frontier, once there is one.
    finalization_lag_s: Option<f64>,
    /// Seconds (of event time, which the wall clock advances) until the
    /// earliest open list is finalized; none when no list is open.
    first_finalization_in_s: Option<f64>,
}

impl Health {
    fn of(snapshot: &Snapshot, now: Nanos) -> Self {
        let lag = |at: Option<Nanos>| at.map(|at| seconds(now.saturating_sub(at)));
        Self {
            events_received: snapshot.counters.received(),
            events_accepted: snapshot.counters.accepted(),
            open_impressions: snapshot.open_impressions,
            waiting_interactions: snapshot.waiting_interactions,
            overflowed_impressions: snapshot.overflowed_impressions,
            groups: snapshot.groups.len(),
            watermark_lag_s: lag(snapshot.watermark),
            finalization_lag_s: lag(snapshot.frontier),
            first_finalization_in_s: snapshot.seconds_to_first_finalization,
        }
    }
}

fn seconds(nanos: Nanos) -> f64 {
    nanos as f64 / NANOS_PER_SECOND as f64
}

/// One rolling window's report.
#[derive(Debug, Serialize)]
struct WindowReport {
    window: String,
    report: Report,
}

/// What `/api/status` answers.
#[derive(Debug, Serialize)]
struct Status<'a> {
    /// Wall clock, Unix seconds.
    time_s: f64,
    settings: &'a StatusSettings,
    health: Health,
    since_start: Report,
    windows: Vec<WindowReport>,
}

/// What the handlers share.
struct Shared {
    engine: EngineHandle,
    settings: StatusSettings,
    report_config: ReportConfig,
    history: History,
}

/// The page's routes: `/`, its script and style, `/api/status` and
/// `/api/history`; starts keeping the history when it is on.
pub fn router(
    engine: EngineHandle,
    report_config: ReportConfig,
    settings: StatusSettings,
) -> Router {
    let history = History::new(
        settings.status_history_samples,
        settings.max_status_history_bytes,
    );
    let every = settings.status_history_every;
    let shared = Arc::new(Shared {
        engine,
        settings,
        report_config,
        history,
    });
    if let Some(every) = every {
        tokio::spawn(keep_history(shared.clone(), every));
    }
    Router::new()
        .route(
            "/",
            get(|| async { asset("text/html; charset=utf-8", PAGE) }),
        )
        .route(
            "/status.css",
            get(|| async { asset("text/css; charset=utf-8", STYLE) }),
        )
        .route(
            "/status.js",
            get(|| async { asset("text/javascript; charset=utf-8", SCRIPT) }),
        )
        .route("/api/status", get(status))
        .route("/api/history", get(history_json))
        .with_state(shared)
}

fn asset(content_type: &'static str, body: &'static str) -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_SECURITY_POLICY, POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        body,
    )
}

async fn status(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    let json = [(header::CONTENT_TYPE, "application/json")];
    match status_json(&shared).await {
        Ok(body) => (StatusCode::OK, json, body),
        Err((code, body)) => (code, json, body),
    }
}

/// What `/api/status` answers now, or the status code and body of why not.
async fn status_json(shared: &Shared) -> Result<String, (StatusCode, String)> {
    let Ok(snapshot) = shared.engine.snapshot().await else {
        return Err((
            StatusCode::SERVICE_UNAVAILABLE,
            r#"{"error":"shutting down"}"#.to_owned(),
        ));
    };
    let config = &shared.report_config;
    let now = wall_clock();
    let status = Status {
        time_s: seconds(now),
        settings: &shared.settings,
        health: Health::of(&snapshot, now),
        since_start: Report::of_snapshot(&snapshot, config, None),
        windows: shared
            .settings
            .windows
            .iter()
            .enumerate()
            .map(|(index, window)| WindowReport {
                window: window.clone(),
                report: Report::of_snapshot(&snapshot, config, Some(index)),
            })
            .collect(),
    };
    serde_json::to_string(&status).map_err(|error| {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            serde_json::json!({ "error": error.to_string() }).to_string(),
        )
    })
}

/// `/api/history`: the samples the server kept, oldest first, as a JSON array.
async fn history_json(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    let json = [(header::CONTENT_TYPE, "application/json")];
    (StatusCode::OK, json, shared.history.to_json())
}

/// Samples `/api/status` into the history every `status_history / 360`,
/// or less often where a sample takes long ([`sampling_period`]), until the
/// engine is gone. A sample larger than the history's byte bound is said
/// once, and the next is taken a tenth of `status_history` later: rendering
/// them as often as the others cost half a core for nothing.
async fn keep_history(shared: Arc<Shared>, every: Duration) {
    let mut said = false;
    loop {
        let started = std::time::Instant::now();
        let too_large = match status_json(&shared).await {
            Ok(sample) => !keep_sample(&shared.history, sample, &mut said),
            Err((StatusCode::SERVICE_UNAVAILABLE, _)) => return,
            Err(_) => false,
        };
        let spent = started.elapsed();
        tokio::time::sleep(sampling_period(spent, every).saturating_sub(spent)).await;
        if too_large {
            tokio::time::sleep(every * (HISTORY_SAMPLES as u32 / 10)).await;
        }
    }
}

/// Keeps `sample` in `history`; when it is larger than the history's byte
/// bound, says so once (`said`) and returns false.
fn keep_sample(history: &History, sample: String, said: &mut bool) -> bool {
    let bytes = sample.len();
    if history.push(sample) {
        return true;
    }
    if !*said {
        *said = true;
        tracing::warn!(
            sample_bytes = bytes,
            "a status page sample is larger than max_status_history_bytes, so the history keeps none: raise max_status_history_bytes, or lower max_groups"
        );
    }
    false
}

/// The time from one sample to the next when one takes `spent`: `every`,
/// or longer where sampling would otherwise take more than a
/// [`HISTORY_COST_SHARE`]th of a core.
fn sampling_period(spent: Duration, every: Duration) -> Duration {
    every.max(spent * HISTORY_COST_SHARE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_that_take_long_are_taken_less_often() {
        let every = Duration::from_millis(100);
        let ms = Duration::from_millis;
        assert_eq!(sampling_period(ms(2), every), every);
        assert_eq!(sampling_period(ms(5), every), every);
        // 66 ms a sample (1,000 groups): one every 1.32 s, not every 100 ms.
        assert_eq!(sampling_period(ms(66), every), ms(1_320));
        assert_eq!(
            sampling_period(ms(66), Duration::from_secs(10)),
            Duration::from_secs(10)
        );
    }
}
