//! The collector's codec: batches arrive as bytes, read by the engine task
//! with the zero-copy reader of [`crate::event::wire`]; acks leave through prost.

use crate::proto::IngestAck;
use bytes::{Buf, Bytes};
use prost::Message;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::Status;

/// An `EventBatch` as received, undecoded.
#[derive(Clone, Debug)]
pub struct RawBatch(pub Bytes);

/// Decodes nothing (hands the bytes over) and encodes acks with prost.
#[derive(Clone, Copy, Debug, Default)]
pub struct RawCodec;

/// Encodes an [`IngestAck`].
#[derive(Clone, Copy, Debug, Default)]
pub struct AckEncoder;

/// Takes a whole message as a [`RawBatch`].
#[derive(Clone, Copy, Debug, Default)]
pub struct BatchDecoder;

impl Codec for RawCodec {
    type Encode = IngestAck;
    type Decode = RawBatch;
    type Encoder = AckEncoder;
    type Decoder = BatchDecoder;

    fn encoder(&mut self) -> AckEncoder {
        AckEncoder
    }

    fn decoder(&mut self) -> BatchDecoder {
        BatchDecoder
    }
}

impl Encoder for AckEncoder {
    type Item = IngestAck;
    type Error = Status;

    fn encode(&mut self, ack: IngestAck, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        ack.encode(buf)
            .map_err(|e| Status::internal(format!("encoding an ack: {e}")))
    }
}

impl Decoder for BatchDecoder {
    type Item = RawBatch;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<RawBatch>, Status> {
        Ok(Some(RawBatch(buf.copy_to_bytes(buf.remaining()))))
    }
}
