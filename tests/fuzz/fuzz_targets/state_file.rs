//! A state file, as arbitrary bytes, restored as the server restores it:
//! `StateFile::load`, then `Engine::from_state`. Neither may panic; errors
//! are fine. A restored engine must then serve as one: the snapshot and
//! `/metrics` text a scrape makes, finishing every open list, and the state
//! the next save writes.
//!
//! Each input is loaded twice: as the whole file, which exercises the header
//! checks, and as the payload behind a valid header (magic, version, length,
//! checksum), which is the only way past the 64-bit checksum into the
//! postcard decoder. The valid header is learned from a real save, so a
//! change of the file format fails here loudly instead of quietly leaving the
//! decoder unfuzzed.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rankwatch::config::{EngineArgs, FileSettings};
use rankwatch::engine::EngineSettings;
use rankwatch::export::{prometheus::render, Snapshot, Text};
use rankwatch::join::{Engine, JoinSettings};
use rankwatch::state::StateFile;
use std::path::PathBuf;
use std::sync::LazyLock;
use std::time::Duration;

/// The server's rolling windows.
const WINDOWS: [Duration; 1] = [Duration::from_secs(60)];

/// Magic and format version, then payload length and xxh3 checksum.
const HEADER_LEN: usize = 28;

struct Fixture {
    file: StateFile,
    settings: EngineSettings,
    /// Default join settings with one 60 s rolling window, as a server has.
    join: JoinSettings,
    /// Magic and format version of a real save.
    prefix: Vec<u8>,
}

/// One directory per process, reused for every input.
static FIXTURE: LazyLock<Fixture> = LazyLock::new(|| {
    let dir = PathBuf::from(format!("/tmp/rankwatch-fuzz-state-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("the fuzz state directory can be created");
    let file = StateFile::new(&dir, "fp".into());
    let settings = EngineSettings::resolve(&EngineArgs::default(), &FileSettings::default())
        .expect("defaults resolve");
    let join = settings.join(&WINDOWS);
    let engine = Engine::new(join.clone(), settings.evaluator());
    file.save(&engine.encode_state(Default::default()).expect("an empty state encodes"))
        .expect("an empty state saves");
    let saved = std::fs::read(file.path()).expect("the saved state reads back");
    let payload = &saved[HEADER_LEN..];
    assert_eq!(
        wrap(&saved[..12], payload),
        saved,
        "the state file format changed; update this target's header"
    );
    Fixture {
        file,
        settings,
        join,
        prefix: saved[..12].to_vec(),
    }
});

/// `payload` behind a header that passes the length and checksum checks.
fn wrap(prefix: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(HEADER_LEN + payload.len());
    bytes.extend_from_slice(prefix);
    bytes.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    bytes.extend_from_slice(&xxhash_rust::xxh3::xxh3_64(payload).to_le_bytes());
    bytes.extend_from_slice(payload);
    bytes
}

fuzz_target!(|bytes: &[u8]| {
    let fixture = &*FIXTURE;
    for contents in [bytes.to_vec(), wrap(&fixture.prefix, bytes)] {
        std::fs::write(fixture.file.path(), &contents).expect("the fuzz state file can be written");
        if let Ok(Some(loaded)) = fixture.file.load() {
            serve(fixture, loaded.state);
        }
    }
});

/// Uses a restored engine as the server would after a restart.
fn serve(fixture: &Fixture, state: rankwatch::join::EngineState) {
    let mut engine = Engine::from_state(fixture.join.clone(), fixture.settings.evaluator(), state);
    let now = engine.watermark().unwrap_or(0);
    render(&mut Text::default(), &Snapshot::of(&engine, None), &WINDOWS, now);
    engine.finish();
    render(&mut Text::default(), &Snapshot::of(&engine, None), &WINDOWS, now);
    let _ = engine.encode_state(Default::default());
}
