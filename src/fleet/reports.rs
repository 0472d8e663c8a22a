//! A producer's delivery reports served on the async runtime, without a
//! polling thread of their own: librdkafka writes a byte to a socket when
//! its report queue goes from empty to not empty, the runtime wakes the
//! serving task on it, and the task runs the delivery callbacks of all the
//! reports queued. A report thus crosses from librdkafka's broker thread to
//! the runtime in one wake-up, rather than through a polling thread first.
//!
//! It owns the queue handle and the socket pair; the callbacks are the
//! producer context's.

#![allow(unsafe_code)] // explained at each block (SAFETY)

use rdkafka::bindings as ffi;
use rdkafka::producer::{BaseProducer, Producer, ProducerContext};
use std::io::ErrorKind;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Duration;

/// The byte librdkafka writes on a wake-up; its value does not matter.
const WAKE_UP: u8 = 1;

/// The producer's main queue (where delivery reports go), set to write to
/// a socket when it stops being empty.
pub struct ReportQueue {
    queue: *mut ffi::rd_kafka_queue_t,
    /// The end librdkafka writes to; kept open while the queue may write.
    _writer: UnixStream,
    reader: tokio::net::UnixStream,
}

// SAFETY: librdkafka's queue handles may be used from any thread, at once:
// every function called on it takes the queue's own lock.
unsafe impl Send for ReportQueue {}
// SAFETY: as above.
unsafe impl Sync for ReportQueue {}

impl ReportQueue {
    /// The report queue of `producer`, waking the runtime when it fills.
    /// Needs a runtime with I/O enabled.
    pub fn of<C: ProducerContext>(producer: &BaseProducer<C>) -> std::io::Result<Self> {
        let (writer, reader) = UnixStream::pair()?;
        writer.set_nonblocking(true)?;
        reader.set_nonblocking(true)?;
        let reader = tokio::net::UnixStream::from_std(reader)?;
        // SAFETY: the client pointer is valid while `producer` lives, and
        // the queue handle returned holds its own reference to the queue,
        // released in `drop`.
        let queue = unsafe { ffi::rd_kafka_queue_get_main(producer.client().native_ptr()) };
        // SAFETY: `queue` is valid; librdkafka copies the payload; the fd
        // stays open until the event is disabled again in `drop`.
        unsafe {
            ffi::rd_kafka_queue_io_event_enable(
                queue,
                writer.as_raw_fd(),
                (&WAKE_UP as *const u8).cast(),
                1,
            );
        }
        Ok(Self {
            queue,
            _writer: writer,
            reader,
        })
    }

    /// Events waiting in the queue.
    fn length(&self) -> usize {
        // SAFETY: `queue` is valid until `drop`.
        unsafe { ffi::rd_kafka_queue_length(self.queue) }
    }

    /// Waits for a wake-up, and reads every byte written so far. False once
    /// the socket is closed or broken (it is not: the writer lives as long).
    async fn woken(&self) -> bool {
        if self.reader.readable().await.is_err() {
            return false;
        }
        let mut bytes = [0u8; 64];
        loop {
            match self.reader.try_read(&mut bytes) {
                Ok(0) => return false,
                Ok(_) => {}
                Err(error) if error.kind() == ErrorKind::WouldBlock => return true,
                Err(error) if error.kind() == ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
    }
}

impl Drop for ReportQueue {
    fn drop(&mut self) {
        // SAFETY: `queue` is valid; fd -1 stops the writes before the
        // socket closes, then the handle's reference is released.
        unsafe {
            ffi::rd_kafka_queue_io_event_enable(self.queue, -1, std::ptr::null(), 0);
            ffi::rd_kafka_queue_destroy(self.queue);
        }
    }
}

/// Runs `producer`'s delivery callbacks whenever reports are queued, until
/// the task is aborted.
pub async fn serve<C: ProducerContext>(producer: Arc<BaseProducer<C>>, queue: ReportQueue) {
    loop {
        // Each poll serves one event; the queue wakes us again only once
        // it has been emptied, so serve until it is.
        while queue.length() > 0 {
            producer.poll(Duration::ZERO);
        }
        if !queue.woken().await {
            return;
        }
    }
}
