//! The load generator's side of `Collector.Ingest`: batches are encoded by
//! the generator itself, ahead of time if asked, and tonic sends the bytes.

use crate::proto::{event::Kind, Event, EventBatch, IngestAck};
use bytes::{BufMut, Bytes};
use prost::Message;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder, Streaming};
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
            .streaming(tonic::Request::new(batches), path, BytesCodec)
            .await?;
        Ok(response.into_inner())
    }
}

/// Sends bytes as they are and decodes acks with prost.
#[derive(Clone, Copy, Debug, Default)]
struct BytesCodec;

impl Codec for BytesCodec {
    type Encode = Bytes;
    type Decode = IngestAck;
    type Encoder = BytesCodec;
    type Decoder = BytesCodec;

    fn encoder(&mut self) -> BytesCodec {
        BytesCodec
    }

    fn decoder(&mut self) -> BytesCodec {
        BytesCodec
    }
}

impl Encoder for BytesCodec {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, bytes: Bytes, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        buf.put(bytes);
        Ok(())
    }
}

impl Decoder for BytesCodec {
    type Item = IngestAck;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<IngestAck>, Status> {
        let ack = IngestAck::decode(buf)
            .map_err(|e| Status::internal(format!("decoding an ack: {e}")))?;
        Ok(Some(ack))
    }
}
