//! Writes seed corpora for `proto_event`, `ingest_batch` and `state_file` from a replay log:
//! `seeds LOG CORPUS_DIR`. Not a fuzz target; `run.sh` runs it.
//!
//! - `CORPUS_DIR/proto_event/` and `CORPUS_DIR/ingest_batch/`: the log's
//!   events as `EventBatch`es, behind the 8-byte clock the targets read
//!   (2026-11-01T10:00:00Z).
//! - `CORPUS_DIR/state_file/`: state files saved after replaying prefixes of
//!   the log, whole and as bare payloads (the target loads both ways).

use prost::Message;
use rankwatch::config::{EngineArgs, FileSettings};
use rankwatch::engine::EngineSettings;
use rankwatch::event::{json::parse_line, parse_rfc3339, Nanos, NANOS_PER_SECOND};
use rankwatch::join::Engine;
use rankwatch::proto::{self, event::Kind};
use rankwatch::state::StateFile;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The wall clock the proto seeds carry.
const CLOCK: &str = "2026-11-01T10:00:00Z";
/// Header length of a state file.
const HEADER_LEN: usize = 28;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, log, corpus] = args.as_slice() else {
        return Err("usage: seeds LOG CORPUS_DIR".into());
    };
    let lines: Vec<String> = std::fs::read_to_string(log)?
        .lines()
        .map(str::to_owned)
        .collect();
    let corpus = PathBuf::from(corpus);
    for target in ["proto_event", "ingest_batch"] {
        let written = write_proto_seeds(&lines, &corpus.join(target))?;
        println!("{target}: {written} seeds");
    }
    let written = write_state_seeds(&lines, &corpus.join("state_file"))?;
    println!("state_file: {written} seeds");
    Ok(())
}

fn write_proto_seeds(lines: &[String], dir: &Path) -> Result<usize, Box<dyn std::error::Error>> {
    std::fs::create_dir_all(dir)?;
    let clock = ((parse_rfc3339(CLOCK).ok_or("bad clock")? as u64) << 1).to_le_bytes();
    let events: Vec<proto::Event> = lines
        .iter()
        .filter_map(|line| serde_json::from_str(line).ok())
        .map(event)
        .collect();
    let singles = events.iter().step_by(16).map(std::slice::from_ref);
    let batches = events.chunks(8).take(32);
    let mut written = 0;
    for (sequence, batch) in singles.chain(batches).enumerate() {
        let batch = proto::EventBatch {
            sequence: sequence as u64,
            events: batch.to_vec(),
        };
        let mut bytes = clock.to_vec();
        batch.encode(&mut bytes)?;
        std::fs::write(dir.join(format!("seed-{sequence:04}")), bytes)?;
        written += 1;
    }
    Ok(written)
}

fn write_state_seeds(lines: &[String], dir: &Path) -> Result<usize, Box<dyn std::error::Error>> {
    std::fs::create_dir_all(dir)?;
    let state_dir =
        std::env::temp_dir().join(format!("rankwatch-fuzz-seeds-{}", std::process::id()));
    let file = StateFile::new(&state_dir, "fp".into());
    let settings = EngineSettings::resolve(&EngineArgs::default(), &FileSettings::default())?;
    let validator = settings.validator(None);
    let mut written = 0;
    for prefix in [0, 4, 40, 400] {
        let mut engine = Engine::new(
            settings.join(&[Duration::from_secs(60)]),
            settings.evaluator(),
        );
        for line in lines.iter().take(prefix) {
            match parse_line(line, &validator) {
                Ok(event) => {
                    engine.apply(event);
                }
                Err(rejection) => engine.reject(rejection.reason),
            }
        }
        file.save(&engine.to_state())?;
        let saved = std::fs::read(file.path())?;
        std::fs::write(dir.join(format!("file-{prefix:04}")), &saved)?;
        std::fs::write(
            dir.join(format!("payload-{prefix:04}")),
            &saved[HEADER_LEN..],
        )?;
        written += 2;
    }
    std::fs::remove_dir_all(&state_dir)?;
    Ok(written)
}

/// An `Event` from a line in the proto3 JSON mapping, as a client would send it.
fn event(line: Value) -> proto::Event {
    let text = |object: &Value, camel: &str, snake: &str| {
        object
            .get(camel)
            .or_else(|| object.get(snake))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let time = |object: &Value| {
        let at: Nanos = parse_rfc3339(object.get("time")?.as_str()?)?;
        Some(prost_types::Timestamp {
            seconds: at.div_euclid(NANOS_PER_SECOND),
            nanos: at.rem_euclid(NANOS_PER_SECOND) as i32,
        })
    };
    let kind = if let Some(m) = line.get("impression") {
        let items = m
            .get("itemIds")
            .or_else(|| m.get("item_ids"))
            .and_then(Value::as_array);
        let item_ids: Vec<String> = items
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect();
        // Every other list interleaved by two rankers, so that seeds reach
        // the interleaving reader and its validation.
        let interleaving = (item_ids.len() % 2 == 0).then(|| proto::Interleaving {
            rankers: vec!["a".into(), "b".into()],
            teams: (0..item_ids.len() as u32).map(|i| i % 2).collect(),
        });
        Some(Kind::Impression(proto::Impression {
            request_id: text(m, "requestId", "request_id"),
            user_id: text(m, "userId", "user_id"),
            item_ids,
            time: time(m),
            model: text(m, "model", "model"),
            surface: text(m, "surface", "surface"),
            labels: Default::default(),
            interleaving,
        }))
    } else if let Some(x) = line.get("interaction") {
        Some(Kind::Interaction(proto::Interaction {
            event_id: text(x, "eventId", "event_id"),
            user_id: text(x, "userId", "user_id"),
            item_id: text(x, "itemId", "item_id"),
            request_id: text(x, "requestId", "request_id"),
            r#type: text(x, "type", "type"),
            time: time(x),
            grade: x.get("grade").and_then(Value::as_f64),
        }))
    } else {
        None
    };
    proto::Event { kind }
}
