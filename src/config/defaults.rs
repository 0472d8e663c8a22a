//! Every default, written once: resolution falls back to it and `--help` shows it.

use super::choices::{DiscountName, GainName};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;

/// `attribution_window`.
pub const ATTRIBUTION_WINDOW: Duration = Duration::from_secs(300);
/// `allowed_lateness`.
pub const ALLOWED_LATENESS: Duration = Duration::from_secs(30);
/// `k`.
pub const K: [usize; 4] = [1, 5, 10, 20];
/// `gain`.
pub const GAIN: GainName = GainName::Linear;
/// `discount`.
pub const DISCOUNT: DiscountName = DiscountName::Log2;
/// `log_base`.
pub const LOG_BASE: f64 = 2.0;
/// `half_life`.
pub const HALF_LIFE: f64 = 5.0;
/// `control_model`: none, no comparisons.
pub const CONTROL_MODEL: Option<String> = None;
/// `position_curve_depth`.
pub const POSITION_CURVE_DEPTH: usize = 20;
/// `g_max`, ERR's largest grade.
pub const G_MAX: f64 = 3.0;
/// `rbp_p`, RBP's persistence.
pub const RBP_P: f64 = 0.8;
/// `max_items`.
pub const MAX_ITEMS: usize = 1000;
/// `number_items`.
pub const NUMBER_ITEMS: bool = true;
/// `max_exposure_items`.
pub const MAX_EXPOSURE_ITEMS: usize = 4096;
/// `max_grade`: exponential gain stays below 2^64.
pub const MAX_GRADE: f64 = 64.0;
/// `max_ack_rejections`.
pub const MAX_ACK_REJECTIONS: usize = 100;
/// `max_open_impressions_per_user`.
pub const MAX_OPEN_IMPRESSIONS_PER_USER: usize = 1000;
/// `max_waiting_interactions_per_user`.
pub const MAX_WAITING_INTERACTIONS_PER_USER: usize = 1000;
/// `max_interactions_per_impression`.
pub const MAX_INTERACTIONS_PER_IMPRESSION: usize = 1000;
/// `max_label_bytes`.
pub const MAX_LABEL_BYTES: usize = 256;
/// `max_line_bytes`: 1 MiB, far past any event a serving system sends.
pub const MAX_LINE_BYTES: usize = 1 << 20;
/// `max_interleaved_rankers`: team-draft multileaving rarely merges more.
pub const MAX_INTERLEAVED_RANKERS: usize = 8;
/// `max_groups`.
pub const MAX_GROUPS: usize = 1000;
/// `segment_labels`: none, groups are `(model, surface)`.
pub const SEGMENT_LABELS: [&str; 0] = [];
/// `max_segment_values`.
pub const MAX_SEGMENT_VALUES: usize = 20;
/// `max_open_impressions`.
pub const MAX_OPEN_IMPRESSIONS: usize = 1_000_000;
/// `max_waiting_interactions`.
pub const MAX_WAITING_INTERACTIONS: usize = 1_000_000;
/// `max_open_credits`: some 0.5 GB at the 41 to 52 bytes a credit measured
/// (docs/settings.md, "Sizing").
pub const MAX_OPEN_CREDITS: usize = 10_000_000;
/// `max_open_items`: the items of a million open lists of 50; some 1.5 GB
/// where no two lists show the same item (docs/settings.md, "Sizing").
pub const MAX_OPEN_ITEMS: usize = 50_000_000;
/// `grpc_addr`.
pub const GRPC_ADDR: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 50051));
/// `http_addr`.
pub const HTTP_ADDR: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9477));
/// `wall_clock_advance`.
pub const WALL_CLOCK_ADVANCE: bool = true;
/// `huge_pages`.
pub const HUGE_PAGES: bool = false;
/// `max_future_skew`.
pub const MAX_FUTURE_SKEW: Duration = Duration::from_secs(300);
/// `windows`.
pub const WINDOWS: [Duration; 3] = [
    Duration::from_secs(60),
    Duration::from_secs(300),
    Duration::from_secs(3600),
];
/// `snapshot_interval`.
pub const SNAPSHOT_INTERVAL: Duration = Duration::from_secs(30);
/// `drain_timeout`.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// `max_message_size`.
pub const MAX_MESSAGE_SIZE: usize = 4 << 20;
/// `max_partial_message_bytes`: sixteen messages of the default largest
/// size arriving at once.
pub const MAX_PARTIAL_MESSAGE_BYTES: usize = 64 << 20;
/// `max_streams`.
pub const MAX_STREAMS: usize = 256;
/// `ingest_idle_timeout`.
pub const INGEST_IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// The shortest `ingest_idle_timeout`: a shorter one closes streams before
/// the batches a client sends as it opens one can arrive, so the client
/// reconnects and backs off over and over.
pub const MIN_INGEST_IDLE_TIMEOUT: Duration = Duration::from_secs(1);
/// `group_idle_timeout`: a day, so that a group fed once a day or
/// less often, or paused over a night, keeps its since-start figures,
/// while junk labels free their slots under `max_groups` within a day.
pub const GROUP_IDLE_TIMEOUT: Duration = Duration::from_secs(24 * 3600);
/// `status_history`: the last hour of the status page.
pub const STATUS_HISTORY: Duration = Duration::from_secs(3600);
/// `max_status_history_bytes`: 16 MiB.
pub const MAX_STATUS_HISTORY_BYTES: usize = 16 << 20;
/// `http_header_timeout`.
pub const HTTP_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// `http_idle_timeout`.
pub const HTTP_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// `http_send_timeout`: longer than a Prometheus scrape may take.
pub const HTTP_SEND_TIMEOUT: Duration = Duration::from_secs(60);
/// `max_http_connections`.
pub const MAX_HTTP_CONNECTIONS: usize = 128;
/// `max_concurrent_reports`.
pub const MAX_CONCURRENT_REPORTS: usize = 8;
/// `max_grpc_connections`.
pub const MAX_GRPC_CONNECTIONS: usize = 1024;
/// `grpc_handshake_timeout`.
pub const GRPC_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// `grpc_idle_timeout`: longer than `ingest_idle_timeout`, which ends an idle stream first.
pub const GRPC_IDLE_TIMEOUT: Duration = Duration::from_secs(600);
/// `grpc_report_timeout`: as `http_send_timeout`.
pub const GRPC_REPORT_TIMEOUT: Duration = Duration::from_secs(60);
/// `max_concurrent_streams`.
pub const MAX_CONCURRENT_STREAMS: usize = 100;
/// `max_inflight_batches`.
pub const MAX_INFLIGHT_BATCHES: usize = 64;
