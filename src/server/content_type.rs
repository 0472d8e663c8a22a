//! The content type every gRPC request must carry: `application/grpc` or
//! `application/grpc+proto`. Any other is answered at once with HTTP 415, as
//! the gRPC protocol asks, so that a plain HTTP/2 client cannot mistake the
//! answer for a success, and no service reads a body it cannot decode.
//! Every call taken is a call open on its connection until its answer ends,
//! which keeps the connection from being closed to make room for another.

use super::connection_slots::WithCall;
use super::grpc_limits::{call_of, client_of, close_unless_done_within};
use super::reports::{self, Answer, ReportPermits};
use std::task::{Context, Poll};
use std::time::Duration;
use tonic::codegen::{http, Service};
use tonic::server::NamedService;
use tonic::Status;

/// A gRPC service that answers requests of another content type with 415;
/// one that answers with reports holds each by a permit
/// ([`super::reports`]) for at most a timeout.
#[derive(Clone, Debug)]
pub struct GrpcOnly<S> {
    service: S,
    reports: Option<(ReportPermits, Duration)>,
}

impl<S> GrpcOnly<S> {
    /// `service`, for requests of a gRPC content type.
    pub fn new(service: S) -> Self {
        Self {
            service,
            reports: None,
        }
    }

    /// `service`, whose every answer is a report held by a permit of
    /// `permits`; a call not answered whole within `timeout` of its start
    /// has its connection closed (`grpc_report_timeout`).
    pub fn holding_reports(service: S, permits: ReportPermits, timeout: Duration) -> Self {
        Self {
            service,
            reports: Some((permits, timeout)),
        }
    }
}

impl<S: NamedService> NamedService for GrpcOnly<S> {
    const NAME: &'static str = S::NAME;
}

/// Whether `content_type` is one this server decodes.
fn is_grpc_proto(content_type: Option<&http::HeaderValue>) -> bool {
    let Some(content_type) = content_type.and_then(|value| value.to_str().ok()) else {
        return false;
    };
    let media_type = content_type.split(';').next().unwrap_or_default().trim();
    media_type.eq_ignore_ascii_case("application/grpc")
        || media_type.eq_ignore_ascii_case("application/grpc+proto")
}

/// The answer to a request of `content_type`: HTTP 415, with a gRPC status
/// that says what to send instead.
fn unsupported(content_type: Option<&http::HeaderValue>) -> http::Response<tonic::body::Body> {
    let sent = content_type.map_or_else(
        || "none".to_owned(),
        |value| crate::event::quoted(&String::from_utf8_lossy(value.as_bytes())).to_string(),
    );
    let mut response = Status::invalid_argument(format!(
        "content type {sent} is not gRPC; send application/grpc or application/grpc+proto"
    ))
    .into_http();
    *response.status_mut() = http::StatusCode::UNSUPPORTED_MEDIA_TYPE;
    response
}

impl<S, B> Service<http::Request<B>> for GrpcOnly<S>
where
    S: Service<http::Request<B>, Response = http::Response<tonic::body::Body>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Answer<S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.service.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let content_type = request.headers().get(http::header::CONTENT_TYPE);
        if !is_grpc_proto(content_type) {
            let response = unsupported(content_type);
            return Box::pin(std::future::ready(Ok(response)));
        }
        let call = call_of(&request);
        let answer = match &self.reports {
            None => Box::pin(self.service.call(request)),
            Some((permits, timeout)) => {
                let client = client_of(&request);
                let deadline = close_unless_done_within(&request, *timeout);
                reports::held(permits, (client, deadline), || self.service.call(request))
            }
        };
        let Some(call) = call else {
            return answer;
        };
        Box::pin(async move {
            let response = answer.await?;
            Ok(response.map(|body| tonic::body::Body::new(WithCall::new(body, call))))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_grpc_and_grpc_proto_only() {
        let accepted =
            |value: &str| is_grpc_proto(Some(&http::HeaderValue::from_str(value).unwrap()));
        assert!(accepted("application/grpc"));
        assert!(accepted("application/grpc+proto"));
        assert!(accepted("Application/gRPC; charset=utf-8"));
        assert!(!accepted("application/grpc+json"));
        assert!(!accepted("application/grpc-web"));
        assert!(!accepted("application/json"));
        assert!(!is_grpc_proto(None));
    }
}
