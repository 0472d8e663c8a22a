//! The server's settings from flags, environment and the file: listeners,
//! their limits, TLS, state and shutdown.

use super::fleet::FleetArgs;
use super::{
    at_least, at_least_one, bounded, defaults, help, invalid, parse_duration, pick, positive,
    shown_duration, shown_list, ConfigError, FileSettings, LIMITS_HEADING,
};
use crate::server::{ServerSettings, TlsSettings};
use clap::Args;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Settings of the server, beyond the engine's.
#[derive(Args, Clone, Debug, Default)]
pub struct ServerArgs {
    /// gRPC listen address.
    #[arg(long, env = "RANKWATCH_GRPC_ADDR",
        help = help("gRPC listen address", defaults::GRPC_ADDR))]
    pub grpc_addr: Option<SocketAddr>,
    /// HTTP listen address for /metrics, /healthz, /readyz.
    #[arg(long, env = "RANKWATCH_HTTP_ADDR",
        help = help("HTTP listen address for /metrics, /healthz, /readyz", defaults::HTTP_ADDR))]
    pub http_addr: Option<SocketAddr>,
    /// Advance the watermark with the wall clock when traffic stops.
    #[arg(long, env = "RANKWATCH_WALL_CLOCK_ADVANCE",
        help = help("Advance the watermark with the wall clock when traffic stops", defaults::WALL_CLOCK_ADVANCE))]
    pub wall_clock_advance: Option<bool>,
    /// Let the kernel back the heap with transparent huge pages.
    #[arg(long, env = "RANKWATCH_HUGE_PAGES",
        help = help("Let the kernel back the heap with transparent huge pages: less CPU per event under heavy load, but a batch that faults in a fresh 2 MiB page waits milliseconds", defaults::HUGE_PAGES))]
    pub huge_pages: Option<bool>,
    /// Reject events further ahead of the wall clock than this.
    #[arg(help_heading = LIMITS_HEADING, long, env = "RANKWATCH_MAX_FUTURE_SKEW", value_parser = parse_duration,
        help = help("Reject events further ahead of the wall clock than this (time_in_future)", shown_duration(defaults::MAX_FUTURE_SKEW)))]
    pub max_future_skew: Option<Duration>,
    /// Rolling windows of the exported gauges.
    #[arg(long, env = "RANKWATCH_WINDOWS", value_delimiter = ',', value_parser = parse_duration,
        help = help("Rolling windows of the exported gauges, comma-separated: 1 to 8, each 1s or more", shown_list(defaults::WINDOWS.map(shown_duration))))]
    pub windows: Option<Vec<Duration>>,
    /// Directory for saved state; none means no persistence.
    #[arg(long, env = "RANKWATCH_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
    /// How often state is saved to the state directory.
    #[arg(long, env = "RANKWATCH_SNAPSHOT_INTERVAL", value_parser = parse_duration,
        help = help("How often state is saved to the state directory", shown_duration(defaults::SNAPSHOT_INTERVAL)))]
    pub snapshot_interval: Option<Duration>,
    /// At shutdown, how long open streams and requests may take to finish.
    #[arg(long, env = "RANKWATCH_DRAIN_TIMEOUT", value_parser = parse_duration,
        help = help("At shutdown, how long open streams and requests may take to finish before they are cut", shown_duration(defaults::DRAIN_TIMEOUT)))]
    pub drain_timeout: Option<Duration>,
    /// Limit: largest gRPC message in bytes.
    #[arg(help_heading = LIMITS_HEADING, long, env = "RANKWATCH_MAX_MESSAGE_SIZE",
        help = help("Limit: largest gRPC message in bytes; a larger one ends its RPC (RESOURCE_EXHAUSTED)", defaults::MAX_MESSAGE_SIZE))]
    pub max_message_size: Option<usize>,
    /// Limit: bytes of gRPC messages begun and not yet whole, all calls together.
    #[arg(help_heading = LIMITS_HEADING, long, env = "RANKWATCH_MAX_PARTIAL_MESSAGE_BYTES",
        help = help("Limit: bytes of gRPC messages begun and not yet whole, all calls together (at least max_message_size); a message that would hold more ends its call (UNAVAILABLE: retry)", defaults::MAX_PARTIAL_MESSAGE_BYTES))]
    pub max_partial_message_bytes: Option<usize>,
    /// Limit: most concurrent ingest streams.
    #[arg(help_heading = LIMITS_HEADING, long, env = "RANKWATCH_MAX_STREAMS",
        help = help("Limit: most concurrent ingest streams; more are refused (RESOURCE_EXHAUSTED)", defaults::MAX_STREAMS))]
    pub max_streams: Option<usize>,
    /// Limit: batches queued for the engine across all streams.
    #[arg(help_heading = LIMITS_HEADING, long, env = "RANKWATCH_MAX_INFLIGHT_BATCHES",
        help = help("Limit: batches queued for the engine across all streams before ingest waits (back-pressure); a unary IngestBatch past it is refused (RESOURCE_EXHAUSTED)", defaults::MAX_INFLIGHT_BATCHES))]
    pub max_inflight_batches: Option<usize>,
    /// How long an Ingest stream may send nothing before it is ended.
    #[arg(help_heading = LIMITS_HEADING, long, env = "RANKWATCH_INGEST_IDLE_TIMEOUT", value_parser = parse_duration,
        help = help("How long an Ingest stream may send nothing before it is ended (UNAVAILABLE) and its permit freed", shown_duration(defaults::INGEST_IDLE_TIMEOUT)))]
    pub ingest_idle_timeout: Option<Duration>,
    /// How long a group may receive no impression before it is retired.
    #[arg(help_heading = LIMITS_HEADING, long, env = "RANKWATCH_GROUP_IDLE_TIMEOUT", value_parser = parse_duration,
        help = help("How long a group (model, surface and segment values) may receive no impression before it is retired: gone from /metrics and GetMetrics, its slot under max_groups freed; not in fleet mode", shown_duration(defaults::GROUP_IDLE_TIMEOUT)))]
    pub group_idle_timeout: Option<Duration>,
    /// How much of the status page's history the server keeps.
    #[arg(long, env = "RANKWATCH_STATUS_HISTORY", value_parser = parse_duration,
        help = help("How much of the status page's history the server keeps, in 360 samples, for a page opened later (0s: none)", shown_duration(defaults::STATUS_HISTORY)))]
    pub status_history: Option<Duration>,
    /// Limit: bytes of the status page's history.
    #[arg(help_heading = LIMITS_HEADING, long, env = "RANKWATCH_MAX_STATUS_HISTORY_BYTES",
        help = help("Limit: bytes the status page's history may hold; the oldest samples go first", defaults::MAX_STATUS_HISTORY_BYTES))]
    pub max_status_history_bytes: Option<usize>,
    /// How long an HTTP client may take to send a request's head.
    #[arg(help_heading = LIMITS_HEADING, long, env = "RANKWATCH_HTTP_HEADER_TIMEOUT", value_parser = parse_duration,
        help = help("How long an HTTP client may take to send a request's head (the first from the connection's accept, later ones from their first byte) before its connection is closed", shown_duration(defaults::HTTP_HEADER_TIMEOUT)))]
    pub http_header_timeout: Option<Duration>,
    /// How long an HTTP connection may stay idle between requests.
    #[arg(help_heading = LIMITS_HEADING, long, env = "RANKWATCH_HTTP_IDLE_TIMEOUT", value_parser = parse_duration,
        help = help("How long an HTTP connection may stay idle between requests (no byte read or written) before it is closed; not while a request is being answered", shown_duration(defaults::HTTP_IDLE_TIMEOUT)))]
    pub http_idle_timeout: Option<Duration>,
    /// How long an HTTP response may take to be sent.
    #[arg(help_heading = LIMITS_HEADING, long, env = "RANKWATCH_HTTP_SEND_TIMEOUT", value_parser = parse_duration,
        help = help("How long an HTTP response may take to be sent, from its handler's end to its last byte, before its connection is closed (a reader that trickles keeps the idle deadline from passing)", shown_duration(defaults::HTTP_SEND_TIMEOUT)))]
    pub http_send_timeout: Option<Duration>,
    /// Limit: most open HTTP connections.
    #[arg(help_heading = LIMITS_HEADING, long, env = "RANKWATCH_MAX_HTTP_CONNECTIONS",
        help = help("Limit: most open HTTP connections; a new one past them closes the one quiet the longest with no request open, or is refused", defaults::MAX_HTTP_CONNECTIONS))]
    pub max_http_connections: Option<usize>,
    /// Limit: most reports held for their readers at once.
    #[arg(help_heading = LIMITS_HEADING, long, env = "RANKWATCH_MAX_CONCURRENT_REPORTS",
        help = help("Limit: most reports (/metrics, /api/status, /api/history, GetMetrics) rendered or held for their readers at once; more are refused (HTTP 503, RESOURCE_EXHAUSTED) and counted. A quarter of them (at least one, from 2 on) is kept for /metrics", defaults::MAX_CONCURRENT_REPORTS))]
    pub max_concurrent_reports: Option<usize>,
    /// Limit: most reports one client address may hold at once.
    #[arg(help_heading = LIMITS_HEADING, long, env = "RANKWATCH_MAX_REPORTS_PER_CLIENT",
        help = help("Limit: most of max_concurrent_reports one client address may hold at once; more from it are refused (HTTP 503, RESOURCE_EXHAUSTED) and counted, so that one host leaving reports unread cannot refuse Prometheus's scrapes from another", "half of max_concurrent_reports, at least 1"))]
    pub max_reports_per_client: Option<usize>,
    /// Limit: most open gRPC connections.
    #[arg(help_heading = LIMITS_HEADING, long, env = "RANKWATCH_MAX_GRPC_CONNECTIONS",
        help = help("Limit: most open gRPC connections; a new one past them closes the one quiet the longest with no RPC open, or is refused", defaults::MAX_GRPC_CONNECTIONS))]
    pub max_grpc_connections: Option<usize>,
    /// Limit: most gRPC connections one client address keeps once all are at work.
    #[arg(help_heading = LIMITS_HEADING, long, env = "RANKWATCH_MAX_GRPC_CONNECTIONS_PER_CLIENT",
        help = help("Limit: once max_grpc_connections are open, all with an RPC open, the most one client address keeps: a new connection from an address holding fewer closes the connection quiet the longest of the address holding the most, if that holds more; one from an address holding as many is refused. One host holding calls open on every connection thus cannot keep others out, and below max_grpc_connections one client may hold them all", "half of max_grpc_connections, at least 1"))]
    pub max_grpc_connections_per_client: Option<usize>,
    /// How long a new gRPC connection may take to send its first bytes.
    #[arg(help_heading = LIMITS_HEADING, long, env = "RANKWATCH_GRPC_HANDSHAKE_TIMEOUT", value_parser = parse_duration,
        help = help("How long a new gRPC connection may take to send the HTTP/2 preface (or its TLS hello) before it is closed", shown_duration(defaults::GRPC_HANDSHAKE_TIMEOUT)))]
    pub grpc_handshake_timeout: Option<Duration>,
    /// How long a gRPC connection may go without a byte read or written.
    #[arg(help_heading = LIMITS_HEADING, long, env = "RANKWATCH_GRPC_IDLE_TIMEOUT", value_parser = parse_duration,
        help = help("How long a gRPC connection may go without a byte read or written before it is closed", shown_duration(defaults::GRPC_IDLE_TIMEOUT)))]
    pub grpc_idle_timeout: Option<Duration>,
    /// How long a report over gRPC may take.
    #[arg(help_heading = LIMITS_HEADING, long, env = "RANKWATCH_GRPC_REPORT_TIMEOUT", value_parser = parse_duration,
        help = help("How long a GetMetrics call may take, from its start to its answer's last byte, before its connection is closed (a client that leaves the answer unread and sends pings keeps grpc_idle_timeout from passing)", shown_duration(defaults::GRPC_REPORT_TIMEOUT)))]
    pub grpc_report_timeout: Option<Duration>,
    /// Limit: concurrent HTTP/2 streams on one gRPC connection.
    #[arg(help_heading = LIMITS_HEADING, long, env = "RANKWATCH_MAX_CONCURRENT_STREAMS",
        help = help("Limit: concurrent HTTP/2 streams (calls) on one gRPC connection, from 1 to 2^31", defaults::MAX_CONCURRENT_STREAMS))]
    pub max_concurrent_streams: Option<usize>,
    /// PEM certificate chain: serve gRPC over TLS (with --tls-key) [default: plaintext].
    #[arg(
        help_heading = "TLS",
        long,
        env = "RANKWATCH_TLS_CERT",
        requires = "tls_key"
    )]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(
        help_heading = "TLS",
        long,
        env = "RANKWATCH_TLS_KEY",
        requires = "tls_cert"
    )]
    pub tls_key: Option<PathBuf>,
    /// PEM CA certificates: require client certificates signed by them (mutual TLS).
    #[arg(help_heading = "TLS", long, env = "RANKWATCH_TLS_CLIENT_CA")]
    pub tls_client_ca: Option<PathBuf>,
    #[command(flatten)]
    /// The settings of fleet mode.
    pub fleet: FleetArgs,
}

/// Most rolling windows: each keeps its panes of every group's figures,
/// and multiplies the series `/metrics` exports.
const MAX_WINDOWS: usize = 8;

/// The rolling windows: 1 to [`MAX_WINDOWS`] distinct ones, each of 1s
/// or more and each at most a year.
fn windows(args: &ServerArgs, file: &FileSettings) -> Result<Vec<Duration>, ConfigError> {
    let mut windows = pick!(args, file, windows, defaults::WINDOWS.to_vec());
    // A window given twice (`1m,60s`) is one window, exported once.
    let mut seen = std::collections::HashSet::new();
    windows.retain(|window| seen.insert(*window));
    if windows.is_empty()
        || windows.len() > MAX_WINDOWS
        || windows.iter().any(|w| *w < Duration::from_secs(1))
    {
        return Err(invalid(
            "windows",
            format!("give 1 to {MAX_WINDOWS} windows of 1s or more, e.g. 1m,5m,1h"),
        ));
    }
    for window in &windows {
        bounded("windows", *window)?;
    }
    Ok(windows)
}

impl ServerSettings {
    /// Resolves flags and environment over `file` over defaults, each in its range.
    pub fn resolve(args: &ServerArgs, file: &FileSettings) -> Result<Self, ConfigError> {
        let windows = windows(args, file)?;
        let grpc = GrpcLimits::resolve(args, file)?;
        let skew = pick!(args, file, max_future_skew, defaults::MAX_FUTURE_SKEW);
        let snapshot = pick!(args, file, snapshot_interval, defaults::SNAPSHOT_INTERVAL);
        let drain = pick!(args, file, drain_timeout, defaults::DRAIN_TIMEOUT);
        let message = at_least_one(
            "max_message_size",
            pick!(args, file, max_message_size, defaults::MAX_MESSAGE_SIZE),
        )?;
        let partial = partial_message_bytes(args, file, message)?;
        let streams = pick!(args, file, max_streams, defaults::MAX_STREAMS);
        let inflight = pick!(
            args,
            file,
            max_inflight_batches,
            defaults::MAX_INFLIGHT_BATCHES
        );
        let ingest_idle = pick!(
            args,
            file,
            ingest_idle_timeout,
            defaults::INGEST_IDLE_TIMEOUT
        );
        let group_idle = pick!(args, file, group_idle_timeout, defaults::GROUP_IDLE_TIMEOUT);
        let header = pick!(
            args,
            file,
            http_header_timeout,
            defaults::HTTP_HEADER_TIMEOUT
        );
        let http_idle = pick!(args, file, http_idle_timeout, defaults::HTTP_IDLE_TIMEOUT);
        let http_send = pick!(args, file, http_send_timeout, defaults::HTTP_SEND_TIMEOUT);
        let (http, reports, per_client) = http_connections(args, file)?;
        let history = status_history(args, file)?;
        Ok(Self {
            tls: TlsSettings::resolve(args, file)?,
            grpc_addr: pick!(args, file, grpc_addr, defaults::GRPC_ADDR),
            http_addr: pick!(args, file, http_addr, defaults::HTTP_ADDR),
            wall_clock_advance: pick!(args, file, wall_clock_advance, defaults::WALL_CLOCK_ADVANCE),
            huge_pages: pick!(args, file, huge_pages, defaults::HUGE_PAGES),
            max_future_skew: bounded("max_future_skew", skew)?,
            windows,
            state_dir: state_dir(args, file)?,
            snapshot_interval: positive("snapshot_interval", snapshot)?,
            drain_timeout: positive("drain_timeout", drain)?,
            max_message_size: message,
            max_partial_message_bytes: partial,
            max_streams: at_least_one("max_streams", streams)?,
            max_inflight_batches: at_least_one("max_inflight_batches", inflight)?,
            ingest_idle_timeout: at_least(
                "ingest_idle_timeout",
                ingest_idle,
                defaults::MIN_INGEST_IDLE_TIMEOUT,
            )?,
            group_idle_timeout: positive("group_idle_timeout", group_idle)?,
            http_header_timeout: positive("http_header_timeout", header)?,
            http_idle_timeout: positive("http_idle_timeout", http_idle)?,
            http_send_timeout: positive("http_send_timeout", http_send)?,
            max_http_connections: http,
            max_concurrent_reports: reports,
            max_reports_per_client: per_client,
            max_grpc_connections: grpc.max_connections,
            max_grpc_connections_per_client: grpc.max_connections_per_client,
            grpc_handshake_timeout: grpc.handshake,
            grpc_idle_timeout: grpc.idle,
            grpc_report_timeout: grpc.report,
            max_concurrent_streams: grpc.streams_per_connection,
            status_history: history.0,
            max_status_history_bytes: history.1,
        })
    }
}

/// `max_http_connections`, `max_concurrent_reports` and
/// `max_reports_per_client`: more connections than reports, so that
/// connections held by reports sent to slow readers leave room for probes.
fn http_connections(
    args: &ServerArgs,
    file: &FileSettings,
) -> Result<(usize, usize, usize), ConfigError> {
    let http = at_least_one(
        "max_http_connections",
        pick!(
            args,
            file,
            max_http_connections,
            defaults::MAX_HTTP_CONNECTIONS
        ),
    )?;
    let reports = at_least_one(
        "max_concurrent_reports",
        pick!(
            args,
            file,
            max_concurrent_reports,
            defaults::MAX_CONCURRENT_REPORTS
        ),
    )?;
    if http <= reports {
        return Err(invalid(
            "max_http_connections",
            format!("{http} is not more than max_concurrent_reports ({reports}): reports held by slow readers could take every connection and keep probes out; allow more connections or fewer reports"),
        ));
    }
    let per_client = at_least_one(
        "max_reports_per_client",
        pick!(args, file, max_reports_per_client, (reports / 2).max(1)),
    )?;
    Ok((http, reports, per_client))
}

/// `state_dir`, which names a directory when it is set.
fn state_dir(args: &ServerArgs, file: &FileSettings) -> Result<Option<PathBuf>, ConfigError> {
    let dir = args.state_dir.clone().or_else(|| file.state_dir.clone());
    if dir.as_ref().is_some_and(|dir| dir.as_os_str().is_empty()) {
        return Err(invalid(
            "state_dir",
            "is empty: name a directory, or leave state_dir out to keep no state".to_owned(),
        ));
    }
    Ok(dir)
}

/// `max_partial_message_bytes`, which must hold one message of
/// `max_message_size` bytes.
fn partial_message_bytes(
    args: &ServerArgs,
    file: &FileSettings,
    max_message_size: usize,
) -> Result<usize, ConfigError> {
    let key = "max_partial_message_bytes";
    let default = defaults::MAX_PARTIAL_MESSAGE_BYTES.max(max_message_size);
    let bytes = at_least_one(key, pick!(args, file, max_partial_message_bytes, default))?;
    if bytes < max_message_size {
        return Err(invalid(
            key,
            format!("{bytes} is less than max_message_size ({max_message_size}): a message that large could never arrive; give at least {max_message_size}"),
        ));
    }
    Ok(bytes)
}

/// `status_history` and `max_status_history_bytes`.
fn status_history(
    args: &ServerArgs,
    file: &FileSettings,
) -> Result<(Duration, usize), ConfigError> {
    Ok((
        bounded(
            "status_history",
            pick!(args, file, status_history, defaults::STATUS_HISTORY),
        )?,
        at_least_one(
            "max_status_history_bytes",
            pick!(
                args,
                file,
                max_status_history_bytes,
                defaults::MAX_STATUS_HISTORY_BYTES
            ),
        )?,
    ))
}

/// The gRPC listener's bounds.
struct GrpcLimits {
    max_connections: usize,
    max_connections_per_client: usize,
    handshake: Duration,
    idle: Duration,
    report: Duration,
    streams_per_connection: u32,
}

impl GrpcLimits {
    fn resolve(args: &ServerArgs, file: &FileSettings) -> Result<Self, ConfigError> {
        let streams = pick!(
            args,
            file,
            max_concurrent_streams,
            defaults::MAX_CONCURRENT_STREAMS
        );
        let streams_per_connection = u32::try_from(streams)
            .ok()
            .filter(|n| (1..=1 << 31).contains(n))
            .ok_or_else(|| {
                invalid(
                    "max_concurrent_streams",
                    format!("{streams} is out of range: give a whole number from 1 to 2147483648"),
                )
            })?;
        let max_connections = at_least_one(
            "max_grpc_connections",
            pick!(
                args,
                file,
                max_grpc_connections,
                defaults::MAX_GRPC_CONNECTIONS
            ),
        )?;
        let half = (max_connections / 2).max(1);
        Ok(Self {
            max_connections,
            max_connections_per_client: at_least_one(
                "max_grpc_connections_per_client",
                pick!(args, file, max_grpc_connections_per_client, half),
            )?,
            handshake: positive(
                "grpc_handshake_timeout",
                pick!(
                    args,
                    file,
                    grpc_handshake_timeout,
                    defaults::GRPC_HANDSHAKE_TIMEOUT
                ),
            )?,
            idle: positive(
                "grpc_idle_timeout",
                pick!(args, file, grpc_idle_timeout, defaults::GRPC_IDLE_TIMEOUT),
            )?,
            report: positive(
                "grpc_report_timeout",
                pick!(
                    args,
                    file,
                    grpc_report_timeout,
                    defaults::GRPC_REPORT_TIMEOUT
                ),
            )?,
            streams_per_connection,
        })
    }
}

impl TlsSettings {
    /// TLS when both a certificate and its key are set; none when nothing is.
    fn resolve(args: &ServerArgs, file: &FileSettings) -> Result<Option<Self>, ConfigError> {
        let cert = args.tls_cert.clone().or_else(|| file.tls_cert.clone());
        let key = args.tls_key.clone().or_else(|| file.tls_key.clone());
        let client_ca = args
            .tls_client_ca
            .clone()
            .or_else(|| file.tls_client_ca.clone());
        match (cert, key, client_ca) {
            (Some(cert), Some(key), client_ca) => Ok(Some(Self {
                cert,
                key,
                client_ca,
            })),
            (None, None, None) => Ok(None),
            _ => Err(invalid(
                "tls_cert/tls_key",
                "TLS needs both tls_cert and tls_key (and tls_client_ca only with them)",
            )),
        }
    }
}
