//! One line of a replay log, as arbitrary bytes (the replay reads bytes and
//! rejects those that are not UTF-8), through `parse_line` with the default
//! validator: it must never panic; what it accepts must keep the validated
//! types' promises, and what it rejects must carry a reason a log line can
//! be rejected for and a message of bounded size.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rankwatch::config::{EngineArgs, FileSettings};
use rankwatch::engine::EngineSettings;
use rankwatch::event::{json::parse_line, Validator};
use rankwatch_fuzz::{check_accepted, check_rejection, InputPath};
use std::sync::LazyLock;

/// The replay's validator under default settings (no wall clock, as in `replay`).
static VALIDATOR: LazyLock<Validator> = LazyLock::new(|| {
    EngineSettings::resolve(&EngineArgs::default(), &FileSettings::default())
        .expect("the default settings resolve")
        .validator(None)
});

fuzz_target!(|bytes: &[u8]| {
    match parse_line(bytes, &VALIDATOR) {
        Ok(event) => check_accepted(&event, &VALIDATOR),
        Err(rejection) => check_rejection(&rejection, InputPath::Line),
    }
});
