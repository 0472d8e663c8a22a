//! `rankwatch replay` on logs no serving system meant to write: lines
//! without end, a byte order mark. The replay stays bounded and goes on.

mod common;

use common::{conformance, replay, replay_json};
use std::process::{Command, Stdio};

#[test]
fn a_line_longer_than_max_line_bytes_is_rejected_skipped_and_the_rest_replayed() {
    let dir = tempfile::tempdir().unwrap();
    let good = std::fs::read_to_string(conformance("replay_small.jsonl")).unwrap();
    let lines: Vec<&str> = good.lines().collect();
    let (head, tail) = lines.split_at(lines.len() / 2);
    // A 50 MB line in the middle of the log, then the rest of it.
    let long = format!(
        "{{\"impression\":{{\"userId\":\"{}\"}}}}",
        "x".repeat(50 << 20)
    );
    let log = format!("{}\n{long}\n{}\n", head.join("\n"), tail.join("\n"));
    let path = dir.path().join("long.jsonl");
    std::fs::write(&path, log).unwrap();
    let clean = dir.path().join("clean.jsonl");
    std::fs::write(
        &clean,
        format!("{}\n{}\n", head.join("\n"), tail.join("\n")),
    )
    .unwrap();
    let expected = replay_json(&[clean.to_str().unwrap(), "--format", "json"], None);
    for threads in ["1", "2"] {
        let output = replay(
            &[
                path.to_str().unwrap(),
                "--format",
                "json",
                "--threads",
                threads,
            ],
            None,
        );
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let stderr = String::from_utf8_lossy(&output.stderr);
        let line = head.len() + 1;
        let prefix = format!("{}:{line}: line_too_long: ", path.display());
        assert!(
            stderr.lines().any(|l| l.starts_with(&prefix)),
            "{stderr:.2000}"
        );
        assert!(stderr.contains("--max-line-bytes"), "{stderr:.500}");
        let mut report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(report["counters"]["rejected"]["line_too_long"], 1);
        report["counters"]["rejected"]
            .as_object_mut()
            .unwrap()
            .remove("line_too_long");
        assert_eq!(
            report, expected,
            "the other lines are replayed as without it"
        );
    }
    // Raised past it, the line is read (and rejected for what it is).
    let output = replay(
        &[
            path.to_str().unwrap(),
            "--format",
            "json",
            "--max-line-bytes",
            "100000000",
        ],
        None,
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert!(report["counters"]["rejected"]
        .get("line_too_long")
        .is_none());
    let bad = replay(&[path.to_str().unwrap(), "--max-line-bytes", "0"], None);
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("max_line_bytes"));
}

/// Resident memory of process `pid`, in KiB.
fn resident_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

#[test]
fn replay_of_an_endless_line_holds_a_bounded_amount_of_memory() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_rankwatch"))
        .args(["replay", "/dev/zero"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut largest = 0;
    // Some 2 s of reading: gigabytes of zeros at the rate a replay reads.
    for _ in 0..20 {
        std::thread::sleep(std::time::Duration::from_millis(100));
        largest = largest.max(resident_kib(child.id()));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(largest > 0, "the replay ran");
    assert!(largest < 64 * 1024, "{largest} KiB resident");
}

#[test]
fn a_byte_order_mark_before_the_first_line_is_skipped() {
    let log = std::fs::read(conformance("replay_small.jsonl")).unwrap();
    let expected = replay_json(&["-", "--format", "json"], Some(&log));
    let mut marked = b"\xef\xbb\xbf".to_vec();
    marked.extend_from_slice(&log);
    assert_eq!(
        replay_json(&["-", "--format", "json"], Some(&marked)),
        expected
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("marked.jsonl.gz");
    let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gzip, &marked).unwrap();
    std::fs::write(&path, gzip.finish().unwrap()).unwrap();
    assert_eq!(
        replay_json(&[path.to_str().unwrap(), "--format", "json"], None),
        expected
    );
}
