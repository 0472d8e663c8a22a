//! The load generator's side of `Collector.Ingest`: batches are encoded by
//! the generator itself, ahead of time if asked, and tonic sends the bytes
//! through [`crate::codec`].

use crate::codec::FrameCodec;
use crate::proto::{event::Kind, Event, EventBatch, IngestAck};
use bytes::Bytes;
use prost::Message;
use tonic::codec::Streaming;
use tonic::transport::Channel;
use tonic::Status;

/// The method's path, as the generated client spells it.
const INGEST_PATH: &str = "/rankwatch.v1.Collector/Ingest";

/// An encoded `EventBatch` and what it holds.
#[derive(Clone, Debug)]
pub struct EncodedBatch {
    /// The batch's sequence number, which its ack repeats.
    pub sequence: u64,
    /// The protobuf encoding.
    pub bytes: Bytes,
    /// Impressions in it.
    pub impressions: u64,
    /// Interactions in it.
    pub interactions: u64,
}

impl EncodedBatch {
    /// Encodes `events` as batch `sequence`.
    pub fn new(sequence: u64, events: Vec<Event>) -> Self {
        let impressions = events
            .iter()
            .filter(|e| matches!(e.kind, Some(Kind::Impression(_))))
            .count() as u64;
        let interactions = events.len() as u64 - impressions;
        let batch = EventBatch { sequence, events };
        Self {
            sequence,
            bytes: batch.encode_to_vec().into(),
            impressions,
            interactions,
        }
    }
}

/// A `Collector` client that sends encoded batches.
pub struct IngestClient(tonic::client::Grpc<Channel>);

impl IngestClient {
    /// A client on `channel`.
    pub fn new(channel: Channel) -> Self {
        Self(tonic::client::Grpc::new(channel))
    }

    /// Opens an `Ingest` stream sending `batches`; returns the stream of acks.
    pub async fn ingest(
        &mut self,
        batches: impl tokio_stream::Stream<Item = Bytes> + Send + 'static,
    ) -> Result<Streaming<IngestAck>, Status> {
        self.0
            .ready()
            .await
            .map_err(|e| Status::unavailable(format!("the server is not ready: {e}")))?;
        let path = tonic::codegen::http::uri::PathAndQuery::from_static(INGEST_PATH);
        let response = self
            .0
            .streaming(tonic::Request::new(batches), path, FrameCodec::default())
            .await?;
        Ok(response.into_inner())
    }
}
