//! The one gRPC codec of the hand-written `Collector` endpoints, for the
//! server, the load generator and the tests alike. Each direction carries a
//! [`Frame`]: bytes as they are (a batch the server reads with the zero-copy
//! reader of [`crate::event::wire`], or one the load generator encoded ahead
//! of time), or an [`IngestAck`] through prost. It knows nothing of what a
//! batch holds.

use crate::proto::IngestAck;
use bytes::{Buf, BufMut, Bytes};
use prost::Message;
use std::fmt;
use std::marker::PhantomData;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::Status;

/// A message as one gRPC frame: how it is written and read.
pub trait Frame: Sized + Send + 'static {
    /// Writes the message into `buf`.
    fn encode_frame(self, buf: &mut EncodeBuf<'_>) -> Result<(), Status>;
    /// Reads the message from the whole of `buf`.
    fn decode_frame(buf: &mut DecodeBuf<'_>) -> Result<Self, Status>;
}

/// Bytes sent as they are and received undecoded, without a copy.
impl Frame for Bytes {
    fn encode_frame(self, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        buf.put(self);
        Ok(())
    }

    fn decode_frame(buf: &mut DecodeBuf<'_>) -> Result<Self, Status> {
        Ok(buf.copy_to_bytes(buf.remaining()))
    }
}

impl Frame for IngestAck {
    fn encode_frame(self, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        self.encode(buf)
            .map_err(|e| Status::internal(format!("encoding an ack: {e}")))
    }

    fn decode_frame(buf: &mut DecodeBuf<'_>) -> Result<Self, Status> {
        IngestAck::decode(buf).map_err(|e| Status::internal(format!("decoding an ack: {e}")))
    }
}

/// Sends `E` and receives `D`, each as its [`Frame`].
pub struct FrameCodec<E, D>(PhantomData<fn(E) -> D>);

impl<E, D> Default for FrameCodec<E, D> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<E, D> Clone for FrameCodec<E, D> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<E, D> Copy for FrameCodec<E, D> {}

impl<E, D> fmt::Debug for FrameCodec<E, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FrameCodec")
    }
}

impl<E: Frame, D: Frame> Codec for FrameCodec<E, D> {
    type Encode = E;
    type Decode = D;
    type Encoder = Self;
    type Decoder = Self;

    fn encoder(&mut self) -> Self {
        *self
    }

    fn decoder(&mut self) -> Self {
        *self
    }
}

impl<E: Frame, D: Frame> Encoder for FrameCodec<E, D> {
    type Item = E;
    type Error = Status;

    fn encode(&mut self, item: E, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        item.encode_frame(buf)
    }
}

impl<E: Frame, D: Frame> Decoder for FrameCodec<E, D> {
    type Item = D;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<D>, Status> {
        D::decode_frame(buf).map(Some)
    }
}
