//! One line of a replay log, as arbitrary bytes, through `parse_line` with the
//! default validator: it must never panic, and what it accepts must satisfy
//! the validated types' promises.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rankwatch::config::{EngineArgs, EngineSettings, FileSettings};
use rankwatch::event::{json::parse_line, Event, Validator};
use std::collections::HashSet;
use std::sync::LazyLock;

/// The replay's validator under default settings (no wall clock, as in `replay`).
static VALIDATOR: LazyLock<Validator> = LazyLock::new(|| {
    EngineSettings::resolve(&EngineArgs::default(), &FileSettings::default())
        .expect("the default settings resolve")
        .validator(None)
});

fuzz_target!(|bytes: &[u8]| {
    let Ok(line) = std::str::from_utf8(bytes) else {
        return;
    };
    match parse_line(line, &VALIDATOR) {
        Err(_) => {}
        Ok(Event::Impression(impression)) => {
            let count = impression.items.len();
            assert!(
                (1..=VALIDATOR.max_items).contains(&count),
                "accepted an impression with {count} items"
            );
            let distinct: HashSet<u64> = impression.items.iter().copied().collect();
            assert_eq!(
                distinct.len(),
                count,
                "accepted an impression with repeated item hashes"
            );
        }
        Ok(Event::Interaction(interaction)) => {
            let grade = interaction.grade;
            assert!(
                grade.is_finite() && grade >= 0.0,
                "accepted an interaction with grade {grade}"
            );
        }
    }
});
