//! The bound on reports held for their readers (docs/SPEC.md §8: every
//! answer a client does not read is bounded). `/metrics`, `/api/status`,
//! `/api/history` and `GetMetrics` each render a whole report, tens of
//! megabytes with many groups, which stays in memory until the client has
//! read it or its connection is gone: six scrapes left unread had held
//! 3 GB. At most `max_concurrent_reports` are rendered or held at once;
//! past that a request is refused at once (HTTP 503 with `Retry-After`,
//! gRPC `RESOURCE_EXHAUSTED`) and counted in [`REPORTS_REFUSED_TOTAL`].
//! A quarter of them (at least one, when there are two or more) only
//! `/metrics` may take: any client that reaches the gRPC listener could
//! otherwise hold every permit with `GetMetrics` calls, and Prometheus's
//! scrapes would fail. And one client address holds at most
//! `max_reports_per_client` of them (half, by default): eight scrapes left
//! unread from one host had held every permit until `http_send_timeout`,
//! refusing Prometheus's scrapes from another.
//!
//! A report is handed to its connection a slice at a time ([`Sliced`]):
//! HTTP/1 and HTTP/2 ask for the next slice only once they have room for
//! it, so the permit is held until the client has taken nearly all of the
//! report, not just until the report was handed over in one piece.

use super::http_limits::Requests;
use super::telemetry::REPORTS_REFUSED_TOTAL;
use bytes::{Buf, Bytes};
use http_body::{Body, Frame, SizeHint};
use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{ready, Context, Poll};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::DropGuard;
use tonic::codegen::http;
use tonic::Status;

/// The HTTP routes that answer with a report, and their `endpoint` label.
const HTTP_REPORTS: [(&str, &str); 3] = [
    ("/metrics", SCRAPE),
    ("/api/status", "api_status"),
    ("/api/history", "api_history"),
];

/// The `endpoint` label of `GetMetrics`.
const GRPC_REPORT: &str = "GetMetrics";

/// Bytes of a report handed to its connection at a time.
const SLICE: usize = 64 * 1024;

/// The `endpoint` label of Prometheus's scrapes, which have permits of their own.
const SCRAPE: &str = "metrics";

/// The `reason` label of a refusal when every permit it may take is held.
const ALL_HELD: &str = "max_concurrent_reports";
/// The `reason` label of a refusal when its client's address holds its share.
const CLIENT_HOLDS_ITS_SHARE: &str = "max_reports_per_client";

/// Permits for the reports rendered or held at once.
#[derive(Clone, Debug)]
pub struct ReportPermits {
    /// Permits any report may take.
    shared: Arc<Semaphore>,
    /// Permits only a scrape of `/metrics` may take, tried first.
    scrapes: Arc<Semaphore>,
    /// Most permits one client address may hold.
    per_client: usize,
    /// The permits each client address holds, for those that hold any.
    clients: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl ReportPermits {
    /// Room for `max` reports at once, a quarter of it (at least one when
    /// `max` is two or more) kept for scrapes, and `per_client` for one
    /// client address; the refusals are counted from 0.
    pub fn new(max: usize, per_client: usize) -> Self {
        let endpoints = HTTP_REPORTS.map(|(_, endpoint)| endpoint);
        for endpoint in endpoints.into_iter().chain([GRPC_REPORT]) {
            for reason in [ALL_HELD, CLIENT_HOLDS_ITS_SHARE] {
                metrics::counter!(REPORTS_REFUSED_TOTAL, "endpoint" => endpoint, "reason" => reason)
                    .absolute(0);
            }
        }
        let scrapes = if max >= 2 { (max / 4).max(1) } else { 0 };
        Self {
            shared: Arc::new(Semaphore::new(max - scrapes)),
            scrapes: Arc::new(Semaphore::new(scrapes)),
            per_client,
            clients: Arc::default(),
        }
    }

    /// A permit for one report to `endpoint` asked for by `client` (its
    /// address, when known), or what to tell it (counted) when all it may
    /// take are held: its address's share first, so that a client holding
    /// its share is told so even when every permit is held.
    pub fn try_hold(
        &self,
        endpoint: &'static str,
        client: Option<IpAddr>,
    ) -> Result<ReportPermit, &'static str> {
        let share = match client {
            Some(client) => Some(
                self.client_share(client)
                    .ok_or_else(|| refused(endpoint, CLIENT_HOLDS_ITS_SHARE, REFUSED_TO_CLIENT))?,
            ),
            None => None,
        };
        let own = (endpoint == SCRAPE)
            .then(|| self.scrapes.clone().try_acquire_owned().ok())
            .flatten();
        let permit = own
            .or_else(|| self.shared.clone().try_acquire_owned().ok())
            .ok_or_else(|| refused(endpoint, ALL_HELD, REFUSED))?;
        Ok(ReportPermit {
            _permit: permit,
            _share: share,
            _deadline: None,
        })
    }

    /// One more of `client`'s share of the permits, or `None` when it holds
    /// all of it.
    fn client_share(&self, client: IpAddr) -> Option<ClientShare> {
        // A client over IPv4 on a dual-stack listener is the same client.
        let client = client.to_canonical();
        let mut clients = self.clients.lock().unwrap_or_else(PoisonError::into_inner);
        let held = clients.entry(client).or_default();
        if *held >= self.per_client {
            return None;
        }
        *held += 1;
        Some(ClientShare {
            client,
            clients: self.clients.clone(),
        })
    }
}

/// Counts a refusal of a report to `endpoint` for `reason`; `message`, to tell its client.
fn refused(endpoint: &'static str, reason: &'static str, message: &'static str) -> &'static str {
    metrics::counter!(REPORTS_REFUSED_TOTAL, "endpoint" => endpoint, "reason" => reason)
        .increment(1);
    message
}

/// A report's permit, with its client's share when its address is known.
#[derive(Debug)]
pub struct ReportPermit {
    /// Given back when dropped.
    _permit: OwnedSemaphorePermit,
    /// Given back with it.
    _share: Option<ClientShare>,
    /// Called off with it.
    _deadline: Option<DropGuard>,
}

/// One of the permits a client address holds, given back when dropped.
#[derive(Debug)]
struct ClientShare {
    client: IpAddr,
    clients: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl Drop for ClientShare {
    fn drop(&mut self) {
        let mut clients = self.clients.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(held) = clients.get_mut(&self.client) {
            *held -= 1;
            if *held == 0 {
                clients.remove(&self.client);
            }
        }
    }
}

/// What a report's client is told when every permit is held.
const REFUSED: &str =
    "too many reports are being rendered or sent at once (max_concurrent_reports); retry shortly";

/// What a report's client is told when its address holds its share.
const REFUSED_TO_CLIENT: &str =
    "this client address has as many reports being rendered or sent as it may (max_reports_per_client); read or close them, or retry shortly";

/// A report's permit, shared by its answer and by what renders it while
/// it is sent (`/metrics`, on a thread of its own): given back once both
/// are done, so that a reader that goes at once cannot start renders
/// without bound. The HTTP middleware puts it in the request's extensions.
#[derive(Clone, Debug)]
pub struct HeldPermit {
    /// Given back when the last holder lets go.
    _permit: Arc<ReportPermit>,
}

impl HeldPermit {
    /// `permit`, to share.
    fn new(permit: ReportPermit) -> Self {
        Self {
            _permit: Arc::new(permit),
        }
    }
}

/// A response body handed out in slices of [`SLICE`] bytes, each copied,
/// that holds its permit until the last is taken.
pub struct Sliced<B> {
    inner: B,
    /// What is left of the frame being sliced.
    rest: Bytes,
    permit: Option<HeldPermit>,
}

impl<B> Sliced<B> {
    /// `inner`, holding `permit`.
    pub fn new(inner: B, permit: HeldPermit) -> Self {
        Self {
            inner,
            rest: Bytes::new(),
            permit: Some(permit),
        }
    }

    /// The next slice of `rest`; the frame is let go once all is sliced.
    fn next_slice(&mut self) -> Frame<Bytes> {
        let len = SLICE.min(self.rest.len());
        let slice = Bytes::copy_from_slice(&self.rest[..len]);
        self.rest.advance(len);
        if self.rest.is_empty() {
            self.rest = Bytes::new();
        }
        Frame::data(slice)
    }
}

impl<B: Body<Data = Bytes> + Unpin> Body for Sliced<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.get_mut();
        if !this.rest.is_empty() {
            return Poll::Ready(Some(Ok(this.next_slice())));
        }
        let frame = match ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
            Some(Ok(frame)) => frame,
            other => {
                this.permit = None;
                return Poll::Ready(other);
            }
        };
        match frame.into_data() {
            Ok(data) => {
                this.rest = data;
                Poll::Ready(Some(Ok(this.next_slice())))
            }
            Err(trailers) => Poll::Ready(Some(Ok(trailers))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let inner = self.inner.size_hint();
        let rest = self.rest.len() as u64;
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower() + rest);
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper + rest);
        }
        hint
    }
}

/// Middleware of the HTTP listener: each answer of a report route holds a
/// permit of `permits` until its reader has taken it, or is refused.
pub async fn hold_http(
    axum::extract::State(permits): axum::extract::State<ReportPermits>,
    mut request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let path = request.uri().path();
    let Some(&(_, endpoint)) = HTTP_REPORTS.iter().find(|(route, _)| *route == path) else {
        // Probes and the page's files: small, and never refused.
        return next.run(request).await;
    };
    let client = request
        .extensions()
        .get::<axum::extract::ConnectInfo<Requests>>()
        .and_then(|info| info.0.client());
    let permit = match permits.try_hold(endpoint, client) {
        Ok(permit) => permit,
        Err(message) => return refused_http(message),
    };
    let permit = HeldPermit::new(permit);
    request.extensions_mut().insert(permit.clone());
    next.run(request)
        .await
        .map(|body| axum::body::Body::new(Sliced::new(body, permit)))
}

/// HTTP's answer to a refused report: 503, to retry after a second.
fn refused_http(message: &str) -> axum::response::Response {
    let mut refused = axum::response::Response::new(axum::body::Body::from(format!("{message}\n")));
    *refused.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
    let headers = refused.headers_mut();
    headers.insert(
        http::header::RETRY_AFTER,
        http::HeaderValue::from_static("1"),
    );
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain"),
    );
    refused
}

/// The answer of a gRPC `call` from `client` that renders a report, held
/// by a permit of `permits` until its reader has taken it, and its
/// `deadline` with it; refused at once when all it may take are held.
pub fn held<F, E>(
    permits: &ReportPermits,
    (client, deadline): (Option<IpAddr>, Option<DropGuard>),
    call: impl FnOnce() -> F,
) -> Answer<E>
where
    F: Future<Output = Result<http::Response<tonic::body::Body>, E>> + Send + 'static,
    E: Send + 'static,
{
    let permit = match permits.try_hold(GRPC_REPORT, client) {
        Ok(permit) => ReportPermit {
            _deadline: deadline,
            ..permit
        },
        Err(message) => {
            let refused = Status::resource_exhausted(message).into_http();
            return Box::pin(std::future::ready(Ok(refused)));
        }
    };
    let answer = call();
    Box::pin(async move {
        let response = answer.await?;
        let permit = HeldPermit::new(permit);
        Ok(response.map(|body| tonic::body::Body::new(Sliced::new(body, permit))))
    })
}

/// A gRPC answer to come.
pub type Answer<E> =
    Pin<Box<dyn Future<Output = Result<http::Response<tonic::body::Body>, E>> + Send>>;

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body as Full;

    /// The next frame of `body`.
    async fn frame(body: &mut Sliced<Full>) -> Option<Frame<Bytes>> {
        std::future::poll_fn(|cx| Pin::new(&mut *body).poll_frame(cx))
            .await
            .map(Result::unwrap)
    }

    #[tokio::test]
    async fn a_report_comes_out_whole_in_slices_and_frees_its_permit_at_its_end() {
        let permits = ReportPermits::new(1, 1);
        let text: Vec<u8> = (0..3 * SLICE + 5).map(|i| i as u8).collect();
        let permit = HeldPermit::new(permits.try_hold("test", None).unwrap());
        let mut body = Sliced::new(Full::from(text.clone()), permit);
        assert!(permits.try_hold("test", None).is_err(), "held while unread");
        let mut read = Vec::new();
        let mut slices = 0;
        while let Some(frame) = frame(&mut body).await {
            let data = frame.into_data().unwrap();
            assert!(data.len() <= SLICE);
            read.extend_from_slice(&data);
            slices += 1;
            if read.len() < text.len() {
                assert!(
                    permits.try_hold("test", None).is_err(),
                    "held until the end"
                );
            }
        }
        assert_eq!((read, slices), (text, 4));
        assert!(permits.try_hold("test", None).is_ok(), "freed at the end");
    }

    #[tokio::test]
    async fn a_report_dropped_unread_frees_its_permit() {
        let permits = ReportPermits::new(1, 1);
        let permit = HeldPermit::new(permits.try_hold("test", None).unwrap());
        let body = Sliced::new(Full::from(vec![0; 2 * SLICE]), permit);
        assert!(permits.try_hold("test", None).is_err());
        drop(body);
        assert!(permits.try_hold("test", None).is_ok());
    }

    #[test]
    fn one_client_holds_its_share_of_the_permits_and_another_finds_the_rest() {
        let permits = ReportPermits::new(4, 2);
        let one = Some(IpAddr::from([10, 0, 0, 1]));
        let other = Some(IpAddr::from([10, 0, 0, 2]));
        let held: Vec<_> = (0..2)
            .map(|_| permits.try_hold("test", one).unwrap())
            .collect();
        let refused = permits.try_hold("test", one).unwrap_err();
        assert!(refused.contains("max_reports_per_client"), "{refused}");
        let theirs = permits.try_hold("test", other).unwrap();
        // The same address over IPv6 on a dual-stack listener holds the same share.
        let mapped = Some(IpAddr::from(
            std::net::Ipv4Addr::new(10, 0, 0, 1).to_ipv6_mapped(),
        ));
        assert!(permits.try_hold("test", mapped).is_err());
        drop(held);
        assert!(permits.try_hold("test", one).is_ok(), "its share is back");
        drop(theirs);
        assert!(permits.clients.lock().unwrap().is_empty(), "{permits:?}");
    }

    #[test]
    fn a_client_holding_its_share_is_told_so_even_when_every_permit_is_held() {
        let permits = ReportPermits::new(2, 1);
        let one = Some(IpAddr::from([10, 0, 0, 1]));
        let other = Some(IpAddr::from([10, 0, 0, 2]));
        let _held = [
            permits.try_hold(SCRAPE, one).unwrap(),
            permits.try_hold(SCRAPE, other).unwrap(),
        ];
        let refused = permits.try_hold(SCRAPE, one).unwrap_err();
        assert!(refused.contains("max_reports_per_client"), "{refused}");
        let refused = permits.try_hold(SCRAPE, Some(IpAddr::from([10, 0, 0, 3])));
        assert!(refused.unwrap_err().contains("max_concurrent_reports"));
        assert_eq!(permits.clients.lock().unwrap().len(), 2, "{permits:?}");
    }
}
