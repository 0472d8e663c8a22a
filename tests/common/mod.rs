//! Helpers shared by the integration tests.
#![allow(dead_code)]

use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// A file of the conformance data kept in `tests/data/conformance/`.
pub fn conformance(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/conformance")
        .join(name)
}

/// Parses a JSON file.
pub fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// Runs `rankwatch replay ARGS` with `stdin`.
pub fn replay(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_rankwatch"))
        .arg("replay")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.unwrap_or_default()).unwrap();
    drop(input);
    child.wait_with_output().unwrap()
}

/// Runs `rankwatch replay ARGS` and parses its JSON report.
pub fn replay_json(args: &[&str], stdin: Option<&[u8]>) -> Value {
    let output = replay(args, stdin);
    assert!(
        output.status.success(),
        "replay failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// `report` without its position curves, which window reports leave out
/// (the curves are kept since start only).
pub fn without_positions(report: &Value) -> Value {
    let mut report = report.clone();
    for group in report["groups"].as_array_mut().unwrap() {
        group.as_object_mut().unwrap().remove("positions");
    }
    report
}

/// Asserts two reports agree: everything but metric values exactly, metric values within 1e-9.
/// A group's `metrics` may hold metrics the expectation does not name, and
/// objects the [`ADDED_KEYS`] (both added after it was written); every key it
/// names must be there and agree.
pub fn assert_reports_match(got: &Value, expected: &Value) {
    assert_close(got, expected, "$");
}

/// Report keys added after the conformance expectations were written: the
/// standard errors and comparisons of docs/SPEC.md §9, and the position curves and
/// coverage of §11.
const ADDED_KEYS: [&str; 5] = [
    "se_all",
    "se_engaged",
    "comparisons",
    "positions",
    "coverage",
];

fn assert_close(got: &Value, expected: &Value, path: &str) {
    match (got, expected) {
        (Value::Object(a), Value::Object(b)) => {
            let (mut ka, mut kb): (Vec<_>, Vec<_>) = (a.keys().collect(), b.keys().collect());
            if path.ends_with(".metrics") {
                ka.retain(|key| b.contains_key(*key));
            }
            ka.retain(|key| b.contains_key(*key) || !ADDED_KEYS.contains(&key.as_str()));
            ka.sort();
            kb.sort();
            assert_eq!(ka, kb, "keys differ at {path}");
            for key in kb {
                assert_close(&a[key], &b[key], &format!("{path}.{key}"));
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            assert_eq!(a.len(), b.len(), "lengths differ at {path}");
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                assert_close(x, y, &format!("{path}[{i}]"));
            }
        }
        (Value::Number(a), Value::Number(b)) => {
            let (a, b) = (a.as_f64().unwrap(), b.as_f64().unwrap());
            assert!((a - b).abs() <= 1e-9, "{path}: got {a}, expected {b}");
        }
        _ => assert_eq!(got, expected, "at {path}"),
    }
}

/// A memory figure of process `pid` (`VmRSS` resident now, `VmHWM` at the
/// peak), in KiB; 0 once it is gone.
pub fn memory_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

pub mod server;

/// splitmix64: a small seeded generator, so a generated log is the same on every run.
pub struct Seeded(pub u64);

impl Seeded {
    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A uniform draw from [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}
