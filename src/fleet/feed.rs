//! A partition's own queue of fetched records, read by the partition's task
//! in batches straight from librdkafka: no consumer thread in between, no
//! copy of a record, one queue lock per batch rather than per record, and
//! the partitions of an instance read in parallel on its cores.
//!
//! Most of the fleet's `unsafe` lives here (the rest reads the group's
//! generation, [`super::generation`]): the `rdkafka` crate reads a
//! queue one message at a time (`rd_kafka_consume_batch_queue` is not
//! wrapped), so this module calls librdkafka's C API for the partition
//! queue, its wake-up callback and the batch read, and for the partition's
//! end as the last fetch saw it ([`cached_end`]). It owns nothing else.

#![allow(unsafe_code)] // explained at each block (SAFETY)

use rdkafka::bindings as rd;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::{Offset, TopicPartitionList};
use std::ffi::{c_void, CString};
use std::ptr::NonNull;
use std::sync::Arc;
use tokio::sync::futures::Notified;
use tokio::sync::Notify;

/// The end (high watermark) of partition `partition` of `topic` as the
/// consumer's last fetch of it reported, without asking the broker; `None`
/// until a fetch has reported one.
pub fn cached_end<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topic: &str,
    partition: i32,
) -> Option<i64> {
    let name = CString::new(topic).ok()?;
    let (mut low, mut high) = (-1i64, -1i64);
    // SAFETY: the client pointer is valid while `consumer` lives, `name`
    // is NUL-terminated, and the call only writes the two integers.
    let error = unsafe {
        rd::rd_kafka_get_watermark_offsets(
            consumer.client().native_ptr(),
            name.as_ptr(),
            partition,
            &mut low,
            &mut high,
        )
    };
    (error == rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR && high >= 0).then_some(high)
}

/// A record of the partition, borrowed from librdkafka with its batch.
pub struct Fetched<'a> {
    /// Its offset in the partition.
    pub offset: i64,
    /// Its key, if any.
    pub key: Option<&'a [u8]>,
    /// Its value (empty for none).
    pub value: &'a [u8],
}

/// The fetch queue of one partition of the event topic, taken out of the
/// consumer's queue. Reading it does not serve the consumer's own events
/// (rebalances, commits): the consumer thread still polls for those.
pub struct Feed {
    queue: NonNull<rd::rd_kafka_queue_t>,
    /// Notified when the queue receives a record while it is empty.
    arrived: Arc<Notify>,
    /// What the wake-up callback is handed; freed only after it is disabled.
    callback: *mut Arc<Notify>,
    /// The consumer's client, for the partition's position.
    client: NonNull<rd::rd_kafka_t>,
    /// The partition, as the consumer names it.
    topic: String,
    partition: i32,
    /// Keeps the client alive while its queue is read.
    _client: Arc<dyn Send + Sync>,
}

// SAFETY: librdkafka's queues may be read and destroyed from any thread
// (every operation takes the queue's lock), as may its client's positions
// be asked, and the `Arc<Notify>` behind `callback` is itself `Send + Sync`.
unsafe impl Send for Feed {}

/// The partition's queue could not be had.
#[derive(Debug, thiserror::Error)]
#[error("no fetch queue for {topic} partition {partition}")]
pub struct FeedError {
    topic: String,
    partition: i32,
}

impl Feed {
    /// Takes the fetch queue of `topic`'s `partition` out of `consumer`'s
    /// queue. Call it before the partition is assigned: the queue's records
    /// then never reach the consumer's queue (librdkafka leaves a queue the
    /// application forwarded itself as it is when fetching starts).
    pub fn split<C: ConsumerContext + 'static>(
        consumer: &Arc<BaseConsumer<C>>,
        topic: &str,
        partition: i32,
    ) -> Result<Feed, FeedError> {
        let failed = || FeedError {
            topic: topic.to_owned(),
            partition,
        };
        let name = CString::new(topic).map_err(|_| failed())?;
        let client = NonNull::new(consumer.client().native_ptr()).ok_or_else(failed)?;
        // SAFETY: the client pointer is valid while `consumer` lives, and
        // `name` is a NUL-terminated string; the call returns a new
        // reference to the queue (or null), released in `Drop`.
        let queue =
            unsafe { rd::rd_kafka_queue_get_partition(client.as_ptr(), name.as_ptr(), partition) };
        let queue = NonNull::new(queue).ok_or_else(failed)?;
        let arrived = Arc::new(Notify::new());
        let callback = Box::into_raw(Box::new(arrived.clone()));
        // SAFETY: `queue` is a live queue handle. Forwarding to null takes
        // it out of the consumer's queue. The callback's opaque pointer is
        // the boxed `Arc<Notify>`, which lives until `Drop` has disabled the
        // callback; librdkafka calls it from its own threads, which
        // `Notify` allows.
        unsafe {
            rd::rd_kafka_queue_forward(queue.as_ptr(), std::ptr::null_mut());
            rd::rd_kafka_queue_cb_event_enable(
                queue.as_ptr(),
                Some(wake),
                callback.cast::<c_void>(),
            );
        }
        Ok(Feed {
            queue,
            arrived,
            callback,
            client,
            topic: topic.to_owned(),
            partition,
            _client: consumer.clone(),
        })
    }

    /// Where the partition is read next, past its last record read and
    /// past the transaction markers after it: librdkafka steps over a
    /// marker without handing it out. `None` before the first read.
    pub fn position(&self) -> Option<i64> {
        let mut list = TopicPartitionList::new();
        list.add_partition(&self.topic, self.partition);
        // SAFETY: the client is valid while `_client` lives, and `list` is
        // a valid list, whose offsets the call fills in.
        unsafe { rd::rd_kafka_position(self.client.as_ptr(), list.ptr()) };
        match list.find_partition(&self.topic, self.partition)?.offset() {
            Offset::Offset(offset) => Some(offset),
            _ => None,
        }
    }

    /// Waits until the queue may hold records: at once if a record arrived
    /// since the last [`Feed::read`] found the queue empty.
    pub fn arrived(&self) -> Notified<'_> {
        self.arrived.notified()
    }

    /// Has [`Feed::arrived`] return at once, to come back for records left
    /// in the queue.
    pub fn wake(&self) {
        self.arrived.notify_one();
    }

    /// Reads up to `max` records without waiting, in offset order. Fewer
    /// than `max` means the queue was emptied, and [`Feed::arrived`] wakes
    /// when the next record comes.
    pub fn read(&self, max: usize) -> Batch {
        let mut messages: Vec<*mut rd::rd_kafka_message_t> = vec![std::ptr::null_mut(); max];
        // SAFETY: `messages` has room for `max` pointers; a timeout of 0
        // never blocks. librdkafka fills the first `read` of them with
        // messages the batch owns until it destroys them when dropped.
        let read = unsafe {
            rd::rd_kafka_consume_batch_queue(self.queue.as_ptr(), 0, messages.as_mut_ptr(), max)
        };
        messages.truncate(usize::try_from(read).unwrap_or(0));
        Batch { messages }
    }
}

/// Records read from a partition's queue, owned until dropped.
pub struct Batch {
    messages: Vec<*mut rd::rd_kafka_message_t>,
}

impl Batch {
    /// How many records were read (errors included).
    pub fn len(&self) -> usize {
        self.messages.len()
    }

    /// Whether the queue held no record.
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// The records in offset order; a fetch error is handed over as its
    /// message, in place of a record.
    pub fn records(&self) -> impl Iterator<Item = Result<Fetched<'_>, String>> {
        // SAFETY: every pointer is a valid message of this batch, destroyed
        // only when the batch is dropped; its key and payload point to
        // `key_len` and `len` bytes (or are null), and the slices made of
        // them borrow the batch.
        self.messages
            .iter()
            .map(|&message| unsafe { fetched(&*message) })
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        for &message in &self.messages {
            // SAFETY: each message is this batch's own, destroyed once.
            unsafe { rd::rd_kafka_message_destroy(message) };
        }
    }
}

/// A message of a batch as a record, or its error.
///
/// # Safety
/// `message`'s key and payload must point to `key_len` and `len` readable
/// bytes, or be null.
unsafe fn fetched(message: &rd::rd_kafka_message_t) -> Result<Fetched<'_>, String> {
    if message.err != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
        let error: rdkafka::error::RDKafkaErrorCode = message.err.into();
        return Err(error.to_string());
    }
    // SAFETY: the caller vouches for the key and the payload.
    let (key, value) = unsafe {
        (
            bytes(message.key, message.key_len),
            bytes(message.payload, message.len),
        )
    };
    Ok(Fetched {
        offset: message.offset,
        key,
        value: value.unwrap_or_default(),
    })
}

/// # Safety
/// `data` must point to `len` readable bytes, or be null.
unsafe fn bytes<'a>(data: *mut c_void, len: usize) -> Option<&'a [u8]> {
    // SAFETY: the caller vouches for `data` and `len`.
    (!data.is_null()).then(|| unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len) })
}

/// librdkafka's wake-up callback: a record arrived in an empty queue.
unsafe extern "C" fn wake(_: *mut rd::rd_kafka_t, opaque: *mut c_void) {
    // SAFETY: `opaque` is the `Arc<Notify>` boxed in `Feed::split`, which
    // outlives every call (see `Drop`).
    let arrived = unsafe { &*opaque.cast::<Arc<Notify>>() };
    arrived.notify_one();
}

impl Drop for Feed {
    fn drop(&mut self) {
        // SAFETY: disabling the callback takes the queue's lock, which
        // librdkafka holds while it calls the callback, so no call is under
        // way or to come once it returns; then the box is freed, and the
        // queue reference taken in `split` released, the client still alive.
        unsafe {
            rd::rd_kafka_queue_cb_event_enable(self.queue.as_ptr(), None, std::ptr::null_mut());
            drop(Box::from_raw(self.callback));
            rd::rd_kafka_queue_destroy(self.queue.as_ptr());
        }
    }
}
