//! The consumer group's generation this instance's consumer is in: the
//! `rdkafka` crate does not read it out of the group metadata (its pointer
//! is private there), so this module asks librdkafka's C API, as
//! [`super::feed`] does for partition queues.

#![allow(unsafe_code)] // explained at the block (SAFETY)

use rdkafka::bindings as rd;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};

/// The generation of the group that `consumer` joined last; `None` before
/// it has joined one.
pub fn of<C: ConsumerContext>(consumer: &BaseConsumer<C>) -> Option<i32> {
    // SAFETY: the client pointer is valid while `consumer` lives. The call
    // returns a new group metadata object (or null) owned by the caller,
    // read once and destroyed here.
    let generation = unsafe {
        let metadata = rd::rd_kafka_consumer_group_metadata(consumer.client().native_ptr());
        if metadata.is_null() {
            return None;
        }
        let generation = rd::rd_kafka_consumer_group_metadata_generation_id(metadata);
        rd::rd_kafka_consumer_group_metadata_destroy(metadata);
        generation
    };
    (generation >= 0).then_some(generation)
}
