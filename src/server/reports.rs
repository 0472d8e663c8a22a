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
//! scrapes would fail.
//!
//! A report is handed to its connection a slice at a time ([`Sliced`]):
//! HTTP/1 and HTTP/2 ask for the next slice only once they have room for
//! it, so the permit is held until the client has taken nearly all of the
//! report, not just until the report was handed over in one piece.

use super::telemetry::REPORTS_REFUSED_TOTAL;
use bytes::{Buf, Bytes};
use http_body::{Body, Frame, SizeHint};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
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

/// Permits for the reports rendered or held at once.
#[derive(Clone, Debug)]
pub struct ReportPermits {
    /// Permits any report may take.
    shared: Arc<Semaphore>,
    /// Permits only a scrape of `/metrics` may take, tried first.
    scrapes: Arc<Semaphore>,
}

impl ReportPermits {
    /// Room for `max` reports at once, a quarter of it (at least one when
    /// `max` is two or more) kept for scrapes; the refusals are counted from 0.
    pub fn new(max: usize) -> Self {
        for (_, endpoint) in HTTP_REPORTS {
            metrics::counter!(REPORTS_REFUSED_TOTAL, "endpoint" => endpoint).absolute(0);
        }
        metrics::counter!(REPORTS_REFUSED_TOTAL, "endpoint" => GRPC_REPORT).absolute(0);
        let scrapes = if max >= 2 { (max / 4).max(1) } else { 0 };
        Self {
            shared: Arc::new(Semaphore::new(max - scrapes)),
            scrapes: Arc::new(Semaphore::new(scrapes)),
        }
    }

    /// A permit for one report to `endpoint`, or `None` (counted) when all
    /// it may take are held.
    pub fn try_hold(&self, endpoint: &'static str) -> Option<OwnedSemaphorePermit> {
        let own = (endpoint == SCRAPE)
            .then(|| self.scrapes.clone().try_acquire_owned().ok())
            .flatten();
        let permit = own.or_else(|| self.shared.clone().try_acquire_owned().ok());
        if permit.is_none() {
            metrics::counter!(REPORTS_REFUSED_TOTAL, "endpoint" => endpoint).increment(1);
        }
        permit
    }
}

/// What a refused report's client is told.
pub const REFUSED: &str =
    "too many reports are being rendered or sent at once (max_concurrent_reports); retry shortly";

/// A report's permit, shared by its answer and by what renders it while
/// it is sent (`/metrics`, on a thread of its own): given back once both
/// are done, so that a reader that goes at once cannot start renders
/// without bound. The HTTP middleware puts it in the request's extensions.
#[derive(Clone, Debug)]
pub struct HeldPermit {
    /// Given back when the last holder lets go.
    _permit: Arc<OwnedSemaphorePermit>,
}

impl HeldPermit {
    /// `permit`, to share.
    fn new(permit: OwnedSemaphorePermit) -> Self {
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
    let Some(permit) = permits.try_hold(endpoint) else {
        let mut refused =
            axum::response::Response::new(axum::body::Body::from(format!("{REFUSED}\n")));
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
        return refused;
    };
    let permit = HeldPermit::new(permit);
    request.extensions_mut().insert(permit.clone());
    next.run(request)
        .await
        .map(|body| axum::body::Body::new(Sliced::new(body, permit)))
}

/// The answer of a gRPC `call` that renders a report, held by a permit of
/// `permits` until its reader has taken it; refused at once when all are
/// held.
pub fn held<F, E>(permits: &ReportPermits, call: impl FnOnce() -> F) -> Answer<E>
where
    F: Future<Output = Result<http::Response<tonic::body::Body>, E>> + Send + 'static,
    E: Send + 'static,
{
    let Some(permit) = permits.try_hold(GRPC_REPORT) else {
        let refused = Status::resource_exhausted(REFUSED).into_http();
        return Box::pin(std::future::ready(Ok(refused)));
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
        let permits = ReportPermits::new(1);
        let text: Vec<u8> = (0..3 * SLICE + 5).map(|i| i as u8).collect();
        let permit = HeldPermit::new(permits.try_hold("test").unwrap());
        let mut body = Sliced::new(Full::from(text.clone()), permit);
        assert!(permits.try_hold("test").is_none(), "held while unread");
        let mut read = Vec::new();
        let mut slices = 0;
        while let Some(frame) = frame(&mut body).await {
            let data = frame.into_data().unwrap();
            assert!(data.len() <= SLICE);
            read.extend_from_slice(&data);
            slices += 1;
            if read.len() < text.len() {
                assert!(permits.try_hold("test").is_none(), "held until the end");
            }
        }
        assert_eq!((read, slices), (text, 4));
        assert!(permits.try_hold("test").is_some(), "freed at the end");
    }

    #[tokio::test]
    async fn a_report_dropped_unread_frees_its_permit() {
        let permits = ReportPermits::new(1);
        let permit = HeldPermit::new(permits.try_hold("test").unwrap());
        let body = Sliced::new(Full::from(vec![0; 2 * SLICE]), permit);
        assert!(permits.try_hold("test").is_none());
        drop(body);
        assert!(permits.try_hold("test").is_some());
    }
}
