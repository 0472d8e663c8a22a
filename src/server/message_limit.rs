//! The bound on a gRPC message's size (`max_message_size`), read from the
//! 5-byte frame header as the request body streams in, before any of the
//! message is buffered. An oversize message ends its RPC with
//! `RESOURCE_EXHAUSTED` and is counted in [`STREAMS_FAILED_TOTAL`], for
//! `Ingest` streams and unary `IngestBatch` calls alike. It knows nothing of
//! what a message holds; tonic's own limit stays set to the same size behind
//! it, as a second guard it never reaches.
//!
//! A message is buffered whole before it is decoded, so the bytes of
//! messages begun and not yet whole are bounded too, across all calls
//! (`max_partial_message_bytes`): a client that starts many calls and
//! sends all but the last byte of each had held 400 MB per connection.
//! A message that would pass the bound ends its call with `UNAVAILABLE`
//! (the bound frees as other calls' messages end), counted in
//! [`PARTIAL_MESSAGES_REFUSED_TOTAL`].

use super::telemetry::{PARTIAL_MESSAGES_REFUSED_TOTAL, STREAMS_FAILED_TOTAL};
use bytes::Bytes;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use tonic::codegen::{http, Body, Service, StdError};
use tonic::server::NamedService;
use tonic::Status;

/// Bytes in a gRPC frame header: a compression flag and a big-endian length.
const HEADER_BYTES: usize = 5;

/// The bytes of messages begun and not yet whole, all calls together, and
/// their bound.
#[derive(Debug)]
pub struct PartialBytes {
    held: AtomicUsize,
    max: usize,
}

impl PartialBytes {
    /// None held yet, at most `max`.
    pub fn new(max: usize) -> Arc<Self> {
        Arc::new(Self {
            held: AtomicUsize::new(0),
            max,
        })
    }

    /// Takes `bytes` more, unless that would hold more than the bound.
    fn take(&self, bytes: usize) -> bool {
        let more = |held: usize| held.checked_add(bytes).filter(|&total| total <= self.max);
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, more)
            .is_ok()
    }

    /// Gives back `bytes` taken before.
    fn give_back(&self, bytes: usize) {
        self.held.fetch_sub(bytes, Ordering::AcqRel);
    }
}

/// A gRPC service whose request messages may be at most `max_message_size`
/// bytes, and whose messages begun and not yet whole share `partial` with
/// the other services'.
#[derive(Clone, Debug)]
pub struct MessageLimit<S> {
    inner: S,
    max_message_size: usize,
    partial: Arc<PartialBytes>,
}

impl<S> MessageLimit<S> {
    /// `inner`, with its request bodies read through a [`LimitedBody`].
    pub fn new(inner: S, max_message_size: usize, partial: Arc<PartialBytes>) -> Self {
        Self {
            inner,
            max_message_size,
            partial,
        }
    }
}

impl<S: NamedService> NamedService for MessageLimit<S> {
    const NAME: &'static str = S::NAME;
}

impl<S, B> Service<http::Request<B>> for MessageLimit<S>
where
    S: Service<http::Request<LimitedBody<B>>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let max = self.max_message_size;
        let partial = self.partial.clone();
        self.inner
            .call(request.map(|body| LimitedBody::new(body, max, partial)))
    }
}

/// Where the reader is in the stream of frames.
#[derive(Clone, Copy, Debug)]
enum Position {
    /// Inside a header, with these of its bytes read so far.
    Header {
        read: usize,
        bytes: [u8; HEADER_BYTES],
    },
    /// Inside a message of `length` bytes, with `left` of them still to come.
    Message { length: usize, left: usize },
}

/// A request body that fails with `RESOURCE_EXHAUSTED` at the header of a
/// message larger than its limit, having passed on every byte before it.
#[derive(Debug)]
pub struct LimitedBody<B> {
    inner: B,
    max_message_size: usize,
    position: Position,
    /// The failure to report once the bytes before the oversize header are passed on.
    failed: Option<Status>,
    /// The failure was reported: the body ends there, however often it is polled.
    ended: bool,
    /// Shared with the other calls' bodies.
    partial: Arc<PartialBytes>,
    /// What this body took of `partial`: the bytes of its message begun
    /// and not yet whole.
    held: usize,
}

impl<B> LimitedBody<B> {
    fn new(inner: B, max_message_size: usize, partial: Arc<PartialBytes>) -> Self {
        Self {
            inner,
            max_message_size,
            position: Position::Header {
                read: 0,
                bytes: [0; HEADER_BYTES],
            },
            failed: None,
            ended: false,
            partial,
            held: 0,
        }
    }

    /// Takes from the shared bytes, or gives back, what the message begun
    /// and not yet whole now holds; false when taking more would pass
    /// their bound.
    fn hold_partial(&mut self) -> bool {
        let partial = match self.position {
            Position::Message { length, left } => length - left,
            Position::Header { .. } => 0,
        };
        if partial > self.held && !self.partial.take(partial - self.held) {
            return false;
        }
        if partial < self.held {
            self.partial.give_back(self.held - partial);
        }
        self.held = partial;
        true
    }

    /// Follows the frames through `chunk`; returns the offset of the first
    /// oversize header's start in it, if there is one (0 when it began in an
    /// earlier chunk).
    fn scan(&mut self, chunk: &[u8]) -> Option<(usize, usize)> {
        let mut offset = 0;
        while offset < chunk.len() {
            match &mut self.position {
                Position::Message { left, .. } => {
                    let step = (*left).min(chunk.len() - offset);
                    *left -= step;
                    offset += step;
                    if *left == 0 {
                        self.position = Position::Header {
                            read: 0,
                            bytes: [0; HEADER_BYTES],
                        };
                    }
                }
                Position::Header { read, bytes } => {
                    let start = offset.saturating_sub(*read);
                    let step = (HEADER_BYTES - *read).min(chunk.len() - offset);
                    bytes[*read..*read + step].copy_from_slice(&chunk[offset..offset + step]);
                    *read += step;
                    offset += step;
                    if *read < HEADER_BYTES {
                        continue;
                    }
                    let length = u32::from_be_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]);
                    let length = length as usize;
                    if length > self.max_message_size {
                        return Some((start, length));
                    }
                    self.position = match length {
                        0 => Position::Header {
                            read: 0,
                            bytes: [0; HEADER_BYTES],
                        },
                        left => Position::Message { length: left, left },
                    };
                }
            }
        }
        None
    }
}

/// The status of a message that arrived while `max` bytes of messages
/// begun and not yet whole were held: `UNAVAILABLE`, since the budget is
/// shared by every call and frees as their messages end, so the client
/// retries with backoff (`RESOURCE_EXHAUSTED` had clients take the message
/// for one too large, and give its events up).
fn partial_bytes_full(max: usize) -> Status {
    Status::unavailable(format!(
        "{PARTIAL_BYTES_FULL} ({max} bytes) of messages begun and not yet whole, across all calls; retry shortly, and finish each message you start"
    ))
}

/// How the status of [`partial_bytes_full`] begins.
const PARTIAL_BYTES_FULL: &str = "the server holds max_partial_message_bytes";

/// Whether a call's body ended with `status` at a limit of this module, which
/// counted it where it was found: an oversize message (in
/// `rankwatch_streams_failed_total`) or a full budget of messages begun (in
/// `rankwatch_partial_messages_refused_total` alone: no message of the
/// call's was at fault).
pub(super) fn counted_where_found(status: &Status) -> bool {
    match status.code() {
        tonic::Code::ResourceExhausted => true,
        tonic::Code::Unavailable => status.message().starts_with(PARTIAL_BYTES_FULL),
        _ => false,
    }
}

impl<B> Drop for LimitedBody<B> {
    fn drop(&mut self) {
        self.partial.give_back(self.held);
    }
}

/// The status of a message of `length` bytes past `max_message_size`.
fn oversize(length: usize, max_message_size: usize) -> Status {
    Status::resource_exhausted(format!(
        "a message of {length} bytes is larger than max_message_size ({max_message_size} bytes); send smaller batches"
    ))
}

impl<B> Body for LimitedBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<StdError>,
{
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Status>>> {
        if self.ended {
            return Poll::Ready(None);
        }
        if let Some(status) = self.failed.take() {
            self.ended = true;
            return Poll::Ready(Some(Err(status)));
        }
        let frame = match std::task::ready!(Pin::new(&mut self.inner).poll_frame(cx)) {
            None => return Poll::Ready(None),
            Some(Err(error)) => return Poll::Ready(Some(Err(Status::from_error(error.into())))),
            Some(Ok(frame)) => frame,
        };
        let Some(mut data) = frame.data_ref().cloned() else {
            return Poll::Ready(Some(Ok(frame)));
        };
        let Some((start, length)) = self.scan(&data) else {
            if !self.hold_partial() {
                metrics::counter!(PARTIAL_MESSAGES_REFUSED_TOTAL).increment(1);
                self.ended = true;
                return Poll::Ready(Some(Err(partial_bytes_full(self.partial.max))));
            }
            return Poll::Ready(Some(Ok(frame)));
        };
        metrics::counter!(STREAMS_FAILED_TOTAL).increment(1);
        let status = oversize(length, self.max_message_size);
        if start == 0 {
            self.ended = true;
            return Poll::Ready(Some(Err(status)));
        }
        self.failed = Some(status);
        data.truncate(start);
        Poll::Ready(Some(Ok(http_body::Frame::data(data))))
    }

    fn is_end_stream(&self) -> bool {
        self.ended || (self.failed.is_none() && self.inner.is_end_stream())
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(length: u32) -> Vec<u8> {
        let mut header = vec![0];
        header.extend(length.to_be_bytes());
        header
    }

    #[test]
    fn finds_an_oversize_header_after_whole_messages_and_across_chunks() {
        let mut body = LimitedBody::new((), 4, PartialBytes::new(usize::MAX));
        let mut chunk = header(3);
        chunk.extend([1, 2, 3]);
        chunk.extend(header(0));
        chunk.extend(&header(5)[..2]);
        assert_eq!(body.scan(&chunk), None);
        assert_eq!(body.scan(&header(5)[2..]), Some((0, 5)));

        let mut body = LimitedBody::new((), 4, PartialBytes::new(usize::MAX));
        let mut chunk = header(4);
        chunk.extend([1, 2, 3, 4]);
        chunk.extend(header(9));
        assert_eq!(body.scan(&chunk), Some((9, 9)));
    }

    #[test]
    fn follows_a_message_split_over_many_chunks() {
        let mut body = LimitedBody::new((), 4, PartialBytes::new(usize::MAX));
        assert_eq!(body.scan(&header(4)), None);
        assert_eq!(body.scan(&[1, 2]), None);
        assert_eq!(body.scan(&[3, 4, 0, 0]), None);
        assert_eq!(body.scan(&[0, 0, 5]), Some((0, 5)));
    }

    /// A body of one frame per chunk.
    struct Chunks(std::collections::VecDeque<Bytes>);

    impl Body for Chunks {
        type Data = Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
            Poll::Ready(
                self.0
                    .pop_front()
                    .map(|chunk| Ok(http_body::Frame::data(chunk))),
            )
        }
    }

    #[test]
    fn the_body_ends_after_reporting_an_oversize_message_once() {
        let mut whole = header(2);
        whole.extend([1, 2]);
        let mut cut = header(9);
        cut.extend([0; 9]);
        let chunks = [whole.clone(), [whole, cut.clone()].concat(), cut];
        let inner = Chunks(chunks.into_iter().map(Bytes::from).collect());
        let mut body = LimitedBody::new(inner, 4, PartialBytes::new(usize::MAX));
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        let mut poll = || match Pin::new(&mut body).poll_frame(&mut cx) {
            Poll::Ready(Some(Ok(frame))) => Ok(frame.into_data().ok().map(|d| d.len())),
            Poll::Ready(Some(Err(status))) => Err(status.code()),
            Poll::Ready(None) => Ok(None),
            Poll::Pending => unreachable!("the chunks are all there"),
        };
        assert_eq!(poll(), Ok(Some(7)));
        // The whole message before the oversize header is passed on, then the failure.
        assert_eq!(poll(), Ok(Some(7)));
        assert_eq!(poll(), Err(tonic::Code::ResourceExhausted));
        assert_eq!(poll(), Ok(None));
        assert_eq!(poll(), Ok(None));
        assert!(body.is_end_stream());
    }
}
