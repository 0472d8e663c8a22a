//! A gRPC `EventBatch`, as arbitrary bytes, read as the engine thread reads
//! it (`event::wire::parse_batch`) and every event validated with
//! `Validator::view`: it must never panic. Where prost decodes the same bytes
//! too, both must see the same sequence number and number of events. An
//! accepted event keeps the validated types' promises and is no further
//! ahead of `now` than the skew allows; a rejected one carries a reason a
//! batch's event can be rejected for and a message of bounded size.
//!
//! Input layout: 8 bytes little-endian wall clock, then the encoded batch.
//! The clock's top bit is dropped, so `now` lies in `0..=i64::MAX` ns since
//! the epoch, the range the server's clock (`SystemTime` since `UNIX_EPOCH`)
//! can produce.

#![no_main]

use libfuzzer_sys::fuzz_target;
use prost::Message;
use rankwatch::config::{EngineArgs, FileSettings};
use rankwatch::engine::EngineSettings;
use rankwatch::event::{wire::parse_batch, Nanos, Validator};
use rankwatch::proto::EventBatch;
use rankwatch_fuzz::{check_accepted, check_rejection, InputPath};
use std::sync::LazyLock;
use std::time::Duration;

/// The server's validator under default settings: `max_future_skew` 5 minutes.
static VALIDATOR: LazyLock<Validator> = LazyLock::new(|| {
    EngineSettings::resolve(&EngineArgs::default(), &FileSettings::default())
        .expect("the default settings resolve")
        .validator(Some(Duration::from_secs(300)))
});

fuzz_target!(|bytes: &[u8]| {
    let Some((clock, encoded)) = bytes.split_first_chunk::<8>() else {
        return;
    };
    let now = (u64::from_le_bytes(*clock) >> 1) as Nanos;
    let Ok(view) = parse_batch(encoded) else {
        return;
    };
    if let Ok(batch) = EventBatch::decode(encoded) {
        assert_eq!(
            view.sequence, batch.sequence,
            "the wire reader and prost disagree on the sequence"
        );
        assert_eq!(
            view.events.len(),
            batch.events.len(),
            "the wire reader and prost disagree on the events"
        );
    }
    let latest = now.saturating_add(VALIDATOR.max_future_skew.expect("the skew is set"));
    for event in &view.events {
        let accepted = match VALIDATOR.view(event, &view, now) {
            Ok(accepted) => accepted,
            Err(rejection) => {
                check_rejection(&rejection, InputPath::Wire);
                continue;
            }
        };
        assert!(
            accepted.time() <= latest,
            "accepted an event {}ns ahead of now",
            accepted.time() - now
        );
        check_accepted(&accepted, &VALIDATOR);
    }
});
