//! `rankwatch query`: asks a running server for its report
//! (`Evaluation.GetMetrics`), in plaintext or over TLS, and turns the answer
//! back into the report that `replay` prints. It owns the client side of the
//! query and nothing of the server.

mod filter;
mod tls_hint;

pub use tls_hint::chain as error_chain;
pub use tls_hint::hint as tls_hint;

pub use filter::ReportFilter;

use crate::config::parse_duration;
use crate::export::{IncompleteReport, Report};
use crate::pem;
use crate::proto::{self, evaluation_client::EvaluationClient};
use std::path::PathBuf;
use std::time::Duration;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};

/// Where to ask, what for, and how to trust the answer.
#[derive(clap::Args, Clone, Debug)]
pub struct QueryArgs {
    /// The server's gRPC address, as HOST:PORT (or a URL, http://HOST:PORT).
    #[arg(long, env = "RANKWATCH_GRPC_ADDR", default_value = "127.0.0.1:50051")]
    pub grpc_addr: String,
    /// A configured rolling window such as 5m [default: since start].
    #[arg(long)]
    pub window: Option<String>,
    /// PEM certificate of the CA that signed the server's: query over TLS.
    #[arg(long, env = "RANKWATCH_TLS_CA_CERT")]
    pub tls_ca_cert: Option<PathBuf>,
    /// PEM client certificate, for a server that asks for one (mutual TLS).
    #[arg(
        long,
        env = "RANKWATCH_TLS_CLIENT_CERT",
        requires_all = ["tls_client_key", "tls_ca_cert"]
    )]
    pub tls_client_cert: Option<PathBuf>,
    /// PEM private key of --tls-client-cert.
    #[arg(long, env = "RANKWATCH_TLS_CLIENT_KEY", requires = "tls_client_cert")]
    pub tls_client_key: Option<PathBuf>,
    /// The name the server's certificate must carry [default: the host of --grpc-addr].
    #[arg(long, env = "RANKWATCH_TLS_SERVER_NAME", requires = "tls_ca_cert")]
    pub tls_server_name: Option<String>,
    /// How long to wait for the server to answer (more than 0).
    #[arg(long, default_value = "10s", value_parser = parse_timeout)]
    pub timeout: Duration,
}

/// Why there is no report.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// The address is not HOST:PORT.
    #[error("--grpc-addr {0:?} is not HOST:PORT")]
    Address(String),
    /// A certificate or key could not be read, or holds no PEM block of its kind.
    #[error(transparent)]
    Pem(#[from] pem::PemError),
    /// The connection could not be made.
    #[error("connecting to {addr}: {source}")]
    Connect {
        /// The address.
        addr: String,
        /// Why.
        source: tonic::transport::Error,
    },
    /// The server refused the query.
    #[error("the server answered {}: {}", .0.code(), .0.message())]
    Refused(tonic::Status),
    /// No answer came in time.
    #[error("no answer from {addr} within --timeout {timeout}: the server is stopped, stalled or busy, or something else listens there; raise --timeout to wait longer")]
    NoAnswer {
        /// The address asked.
        addr: String,
        /// `--timeout`, as given.
        timeout: String,
    },
    /// The answer lacks a part every report has.
    #[error(transparent)]
    Incomplete(#[from] IncompleteReport),
    /// A failure whose text names a TLS mistake, and what to change.
    #[error("{error}\n  hint: {hint}")]
    Tls {
        /// The failure, with its causes.
        error: String,
        /// What to change.
        hint: &'static str,
    },
}

impl QueryError {
    /// This error, with what to change when it names a TLS mistake;
    /// `tls` tells whether the query spoke TLS, `identity` whether it
    /// presented a client certificate.
    fn with_tls_hint(self, tls: bool, identity: bool) -> Self {
        let text = match &self {
            QueryError::Connect { source, .. } => tls_hint::describe(source),
            QueryError::Refused(status) => tls_hint::describe(status),
            _ => return self,
        };
        // A server that asks for a client certificate may just close the
        // connection after the handshake when none comes (TLS 1.3).
        let closed = ["cancel", "reset", "broken pipe", "closed"]
            .iter()
            .any(|word| text.contains(word));
        let hint = tls_hint::hint(&text, tls).or(match (tls, identity, closed) {
            (true, false, true) => Some(tls_hint::MISSING_IDENTITY),
            _ => None,
        });
        match hint {
            Some(hint) => QueryError::Tls {
                error: tls_hint::chain(&self),
                hint,
            },
            None => self,
        }
    }

    /// This error, or [`QueryError::NoAnswer`] when it is the client's own
    /// timeout, which tonic reports as a status the server never sent.
    fn unanswered(self, args: &QueryArgs) -> Self {
        match &self {
            QueryError::Refused(status)
                if status.code() == tonic::Code::Cancelled
                    && status.message() == tonic::TimeoutExpired(()).to_string() =>
            {
                QueryError::NoAnswer {
                    addr: args.grpc_addr.clone(),
                    timeout: humantime::format_duration(args.timeout).to_string(),
                }
            }
            _ => self,
        }
    }
}

/// Asks the server of `args` for its report.
pub async fn fetch(args: &QueryArgs) -> Result<Report, QueryError> {
    fetch_report(args).await.map_err(|error| {
        error
            .with_tls_hint(args.tls_ca_cert.is_some(), args.tls_client_cert.is_some())
            .unanswered(args)
    })
}

async fn fetch_report(args: &QueryArgs) -> Result<Report, QueryError> {
    let channel = endpoint(args)?
        .connect()
        .await
        .map_err(|source| QueryError::Connect {
            addr: args.grpc_addr.clone(),
            source,
        })?;
    let request = proto::GetMetricsRequest {
        window: args.window.clone().unwrap_or_default(),
    };
    // The server sends a report of any size (max_groups × segments ×
    // comparisons can pass tonic's 4 MiB default); read what it sends.
    let report = EvaluationClient::new(channel)
        .max_decoding_message_size(usize::MAX)
        .get_metrics(request)
        .await
        .map_err(QueryError::Refused)?
        .into_inner();
    Ok(Report::try_from(report)?)
}

/// A timeout: a duration of more than 0, which an answer could meet.
fn parse_timeout(text: &str) -> Result<Duration, String> {
    let timeout = parse_duration(text)?;
    if timeout.is_zero() {
        return Err("no answer comes in 0s; give a timeout of more than 0, e.g. 10s".to_owned());
    }
    Ok(timeout)
}

/// The endpoint of `args`: `https` with the TLS settings when a CA is given.
/// An address given as a URL keeps its scheme.
fn endpoint(args: &QueryArgs) -> Result<Endpoint, QueryError> {
    let address = || QueryError::Address(args.grpc_addr.clone());
    let scheme = if args.tls_ca_cert.is_some() {
        "https"
    } else {
        "http"
    };
    let endpoint = Endpoint::from_shared(crate::address::url(&args.grpc_addr, scheme))
        .map_err(|_| address())?
        .connect_timeout(args.timeout)
        .timeout(args.timeout);
    let Some(ca) = &args.tls_ca_cert else {
        return Ok(endpoint);
    };
    let host = endpoint.uri().host().ok_or_else(address)?.to_owned();
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(pem::certificates(
            "--tls-ca-cert",
            ca,
        )?))
        .domain_name(args.tls_server_name.clone().unwrap_or(host));
    if let (Some(cert), Some(key)) = (&args.tls_client_cert, &args.tls_client_key) {
        let cert = pem::certificates("--tls-client-cert", cert)?;
        let key = pem::private_key("--tls-client-key", key)?;
        tls = tls.identity(Identity::from_pem(cert, key));
    }
    endpoint
        .tls_config(tls)
        .map_err(|source| QueryError::Connect {
            addr: args.grpc_addr.clone(),
            source,
        })
}
