//! The collector's side of [`crate::codec`]: batches arrive as bytes, read by
//! the engine task with the zero-copy reader of [`crate::event::wire`]; acks
//! leave through prost.

use crate::codec::{Frame, FrameCodec};
use crate::engine::RawBatch;
use crate::proto::IngestAck;
use bytes::Bytes;
use tonic::codec::{DecodeBuf, EncodeBuf};
use tonic::Status;

impl Frame for RawBatch {
    fn encode_frame(self, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        self.0.encode_frame(buf)
    }

    fn decode_frame(buf: &mut DecodeBuf<'_>) -> Result<Self, Status> {
        Bytes::decode_frame(buf).map(RawBatch)
    }
}

/// Encodes acks with prost and hands each batch over undecoded.
pub type RawCodec = FrameCodec<IngestAck, RawBatch>;
