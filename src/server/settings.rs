//! The server's own settings, resolved by the commands: listeners, their
//! limits, TLS, state and shutdown.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// TLS on the gRPC listener.
#[derive(Clone, Debug, PartialEq)]
pub struct TlsSettings {
    /// PEM certificate chain.
    pub cert: PathBuf,
    /// PEM private key.
    pub key: PathBuf,
    /// PEM CA bundle for client certificates; `None` means no client authentication.
    pub client_ca: Option<PathBuf>,
}

/// Server settings, resolved and validated.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerSettings {
    /// Where gRPC listens.
    pub grpc_addr: SocketAddr,
    /// Where HTTP listens.
    pub http_addr: SocketAddr,
    /// Whether the watermark follows the wall clock while traffic stops.
    pub wall_clock_advance: bool,
    /// Whether the kernel may back the heap with transparent huge pages.
    pub huge_pages: bool,
    /// How far ahead of the wall clock an event may be.
    pub max_future_skew: Duration,
    /// Rolling windows of the exported gauges.
    pub windows: Vec<Duration>,
    /// Where state is saved; `None`: nowhere.
    pub state_dir: Option<PathBuf>,
    /// How often state is saved.
    pub snapshot_interval: Duration,
    /// How long the drain at shutdown may take.
    pub drain_timeout: Duration,
    /// Largest gRPC message, in bytes.
    pub max_message_size: usize,
    /// Bytes of gRPC messages begun and not yet whole, all calls together.
    pub max_partial_message_bytes: usize,
    /// Most concurrent ingest streams.
    pub max_streams: usize,
    /// Batches queued for the engine before ingest waits (streams) or is refused (unary calls).
    pub max_inflight_batches: usize,
    /// How long an Ingest stream may send nothing.
    pub ingest_idle_timeout: Duration,
    /// How long a group may receive no impression before it is retired.
    pub group_idle_timeout: Duration,
    /// How much of the status page's history is kept (zero: none).
    pub status_history: Duration,
    /// Most bytes the status page's history holds.
    pub max_status_history_bytes: usize,
    /// How long an HTTP client may take to send a request's head.
    pub http_header_timeout: Duration,
    /// How long an HTTP connection may stay idle between requests.
    pub http_idle_timeout: Duration,
    /// How long an HTTP response may take to be sent.
    pub http_send_timeout: Duration,
    /// Most open HTTP connections.
    pub max_http_connections: usize,
    /// Most reports rendered or held for their readers at once.
    pub max_concurrent_reports: usize,
    /// Most of those one client address may hold.
    pub max_reports_per_client: usize,
    /// Most open gRPC connections.
    pub max_grpc_connections: usize,
    /// Most of those one client address keeps once all are at work.
    pub max_grpc_connections_per_client: usize,
    /// How long a new gRPC connection may take to send its first bytes.
    pub grpc_handshake_timeout: Duration,
    /// How long a gRPC connection may go without a byte read or written.
    pub grpc_idle_timeout: Duration,
    /// How long a report over gRPC may take, from its call's start.
    pub grpc_report_timeout: Duration,
    /// Most concurrent HTTP/2 streams on one gRPC connection.
    pub max_concurrent_streams: u32,
    /// TLS of the gRPC listener; `None`: plaintext.
    pub tls: Option<TlsSettings>,
}
