//! The server's own health series: their names, written once here, the
//! process-wide Prometheus recorder that holds them, their descriptions and
//! the configured limits. The list-metric series are `export::prometheus`'s,
//! the engine's own are `engine`'s.

use super::ServerSettings;
use crate::clock::Every;
use crate::engine::EngineSettings;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use std::sync::OnceLock;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Histogram: time from receiving a batch to its acknowledgement.
pub const BATCH_DURATION_SECONDS: &str = "rankwatch_batch_duration_seconds";
/// Gauge: open Ingest streams.
pub const INGEST_STREAMS: &str = "rankwatch_ingest_streams";
/// Counter: Ingest streams refused past `max_streams`, and IngestBatch calls past `max_inflight_batches`.
pub const STREAMS_REFUSED_TOTAL: &str = "rankwatch_streams_refused_total";
/// Counter: Ingest RPCs ended by a malformed or oversize message.
pub const STREAMS_FAILED_TOTAL: &str = "rankwatch_streams_failed_total";
/// Counter: gRPC calls ended by a message that would have held more than `max_partial_message_bytes`.
pub const PARTIAL_MESSAGES_REFUSED_TOTAL: &str = "rankwatch_partial_messages_refused_total";
/// Counter: Ingest streams closed after `ingest_idle_timeout` without a batch.
pub const STREAMS_TIMED_OUT_TOTAL: &str = "rankwatch_streams_timed_out_total";
/// Counter: gRPC connections closed as soon as accepted, past
/// `max_grpc_connections` all with an RPC open, by the label `reason`
/// (`max_grpc_connections_per_client`: the client's address held its share).
pub const GRPC_CONNECTIONS_REFUSED_TOTAL: &str = "rankwatch_grpc_connections_refused_total";
/// Counter: gRPC connections closed to make room for a new one, past
/// `max_grpc_connections`, by the label `reason`
/// (`max_grpc_connections_per_client`: one of an address over its share, at work).
pub const GRPC_CONNECTIONS_EVICTED_TOTAL: &str = "rankwatch_grpc_connections_evicted_total";
/// Counter: gRPC connections closed by `grpc_handshake_timeout`,
/// `grpc_idle_timeout` or `grpc_report_timeout`.
pub const GRPC_CONNECTIONS_TIMED_OUT_TOTAL: &str = "rankwatch_grpc_connections_timed_out_total";
/// Counter: HTTP connections closed as soon as accepted, past `max_http_connections` all answering.
pub const HTTP_CONNECTIONS_REFUSED_TOTAL: &str = "rankwatch_http_connections_refused_total";
/// Counter: HTTP connections closed to make room for a new one, past `max_http_connections`.
pub const HTTP_CONNECTIONS_EVICTED_TOTAL: &str = "rankwatch_http_connections_evicted_total";
/// Counter: HTTP connections closed by `http_header_timeout`, `http_idle_timeout` or `http_send_timeout`.
pub const HTTP_CONNECTIONS_TIMED_OUT_TOTAL: &str = "rankwatch_http_connections_timed_out_total";
/// Counter: reports refused past `max_concurrent_reports` or
/// `max_reports_per_client`, by the labels `endpoint` and `reason` (the limit).
pub const REPORTS_REFUSED_TOTAL: &str = "rankwatch_reports_refused_total";
/// Gauge: configured limits, by the label `limit`.
pub const LIMIT: &str = "rankwatch_limit";

/// How often the recorder's upkeep runs (the exporter's own default).
const RECORDER_UPKEEP: Duration = Duration::from_secs(5);

/// Bucket bounds of [`BATCH_DURATION_SECONDS`].
const BATCH_SECONDS_BUCKETS: [f64; 12] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];

/// The process-wide Prometheus recorder of the health series.
pub fn recorder() -> anyhow::Result<PrometheusHandle> {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    if let Some(handle) = HANDLE.get() {
        return Ok(handle.clone());
    }
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full(BATCH_DURATION_SECONDS.into()),
            &BATCH_SECONDS_BUCKETS,
        )?
        .install_recorder()?;
    describe_health_series();
    Ok(HANDLE.get_or_init(|| handle).clone())
}

fn describe_health_series() {
    metrics::describe_histogram!(
        BATCH_DURATION_SECONDS,
        metrics::Unit::Seconds,
        "Time from receiving a batch to its acknowledgement."
    );
    metrics::describe_gauge!(INGEST_STREAMS, "Open Ingest streams.");
    metrics::describe_counter!(
        STREAMS_REFUSED_TOTAL,
        "Ingest streams refused past max_streams, and IngestBatch calls refused past max_inflight_batches."
    );
    metrics::describe_counter!(
        STREAMS_FAILED_TOTAL,
        "Ingest RPCs ended by a malformed or oversize message."
    );
    metrics::describe_counter!(
        PARTIAL_MESSAGES_REFUSED_TOTAL,
        "gRPC calls ended by a message arriving while max_partial_message_bytes of messages begun and not yet whole were held."
    );
    metrics::describe_counter!(
        STREAMS_TIMED_OUT_TOTAL,
        "Ingest streams closed after ingest_idle_timeout without a batch."
    );
    metrics::describe_counter!(
        GRPC_CONNECTIONS_EVICTED_TOTAL,
        "gRPC connections closed to make room for a new one past max_grpc_connections: of those with no RPC open, the one on which no byte moved for the longest (reason max_grpc_connections); with every one at work, that of the client address holding the most, past max_grpc_connections_per_client (reason max_grpc_connections_per_client)."
    );
    metrics::describe_counter!(
        GRPC_CONNECTIONS_REFUSED_TOTAL,
        "gRPC connections closed as soon as accepted, past max_grpc_connections all with an RPC open: no address held more than max_grpc_connections_per_client (reason max_grpc_connections), or the new one's held that many (reason max_grpc_connections_per_client)."
    );
    metrics::describe_counter!(
        GRPC_CONNECTIONS_TIMED_OUT_TOTAL,
        "gRPC connections closed by grpc_handshake_timeout (no HTTP/2 preface in time), grpc_idle_timeout (nothing read or written) or grpc_report_timeout (a report not sent whole in time)."
    );
    metrics::describe_counter!(
        HTTP_CONNECTIONS_REFUSED_TOTAL,
        "HTTP connections closed as soon as accepted, past max_http_connections all answering a request or sending its response."
    );
    metrics::describe_counter!(
        HTTP_CONNECTIONS_EVICTED_TOTAL,
        "HTTP connections closed to make room for a new one past max_http_connections: of those with no request being answered or sent, the one quiet the longest."
    );
    metrics::describe_counter!(
        HTTP_CONNECTIONS_TIMED_OUT_TOTAL,
        "HTTP connections closed by http_header_timeout, http_idle_timeout or http_send_timeout."
    );
    metrics::describe_counter!(
        REPORTS_REFUSED_TOTAL,
        "Reports refused past max_concurrent_reports (rendered or held for slow readers at once) or max_reports_per_client (held for one client address), by endpoint and reason (the limit)."
    );
    metrics::describe_gauge!(LIMIT, "Configured limits, by name.");
    // Zero series exist from the start, so that rate() and alerts see them.
    metrics::counter!(STREAMS_REFUSED_TOTAL).absolute(0);
    metrics::counter!(STREAMS_FAILED_TOTAL).absolute(0);
    metrics::counter!(PARTIAL_MESSAGES_REFUSED_TOTAL).absolute(0);
    metrics::counter!(STREAMS_TIMED_OUT_TOTAL).absolute(0);
    metrics::counter!(HTTP_CONNECTIONS_REFUSED_TOTAL).absolute(0);
    metrics::counter!(HTTP_CONNECTIONS_EVICTED_TOTAL).absolute(0);
    metrics::counter!(GRPC_CONNECTIONS_TIMED_OUT_TOTAL).absolute(0);
    metrics::counter!(HTTP_CONNECTIONS_TIMED_OUT_TOTAL).absolute(0);
    metrics::gauge!(INGEST_STREAMS).set(0.0);
}

/// Exports every configured limit as a [`LIMIT`] series.
pub fn export_limits(engine: &EngineSettings, server: &ServerSettings) {
    let limits = [
        ("max_items", engine.max_items),
        ("max_label_bytes", engine.max_label_bytes),
        ("max_groups", engine.max_groups),
        ("max_exposure_items", engine.max_exposure_items),
        ("max_open_impressions", engine.max_open_impressions),
        ("max_open_items", engine.max_open_items),
        ("max_waiting_interactions", engine.max_waiting_interactions),
        ("max_open_credits", engine.max_open_credits),
        (
            "max_open_impressions_per_user",
            engine.max_open_impressions_per_user,
        ),
        (
            "max_waiting_interactions_per_user",
            engine.max_waiting_interactions_per_user,
        ),
        (
            "max_interactions_per_impression",
            engine.max_interactions_per_impression,
        ),
        ("max_ack_rejections", engine.max_ack_rejections),
        ("max_interleaved_rankers", engine.max_interleaved_rankers),
        ("max_status_history_bytes", server.max_status_history_bytes),
        ("max_message_size", server.max_message_size),
        (
            "max_partial_message_bytes",
            server.max_partial_message_bytes,
        ),
        ("max_streams", server.max_streams),
        ("max_inflight_batches", server.max_inflight_batches),
        ("max_http_connections", server.max_http_connections),
        ("max_concurrent_reports", server.max_concurrent_reports),
        ("max_reports_per_client", server.max_reports_per_client),
        ("max_grpc_connections", server.max_grpc_connections),
        (
            "max_grpc_connections_per_client",
            server.max_grpc_connections_per_client,
        ),
        (
            "max_concurrent_streams",
            server.max_concurrent_streams as usize,
        ),
    ];
    for (name, value) in limits {
        metrics::gauge!(LIMIT, "limit" => name).set(value as f64);
    }
    if !engine.segments.labels.is_empty() {
        let value = engine.segments.max_values as f64;
        metrics::gauge!(LIMIT, "limit" => "max_segment_values").set(value);
    }
}

/// Folds the histogram samples recorded since the last upkeep into their
/// buckets, every [`RECORDER_UPKEEP`] until shutdown. Without it they pile
/// up between scrapes, without bound when nothing scrapes.
pub async fn keep_up(recorder: PrometheusHandle, shutdown: CancellationToken) {
    let mut every = Every::new(RECORDER_UPKEEP, shutdown);
    while every.tick().await {
        recorder.run_upkeep();
    }
}
