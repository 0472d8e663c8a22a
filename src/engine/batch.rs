//! A batch as the collector received it: the bytes of one `EventBatch`,
//! read by the engine with the zero-copy reader of [`crate::event::wire`].

use bytes::Bytes;

/// An `EventBatch` as received, undecoded.
#[derive(Clone, Debug)]
pub struct RawBatch(pub Bytes);
