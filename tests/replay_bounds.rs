//! `rankwatch replay` on logs no serving system meant to write: lines
//! without end, many long lines, a byte order mark however its bytes arrive.
//! The replay stays bounded and goes on; its line bound is a setting like
//! any other.

mod common;

use common::{conformance, memory_kib, replay, replay_json};
use std::io::Write;
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
        let output = replay_json_on(&path, threads);
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

/// The output of a replay of `path` on `threads` threads, as JSON, which succeeded.
fn replay_json_on(path: &std::path::Path, threads: &str) -> std::process::Output {
    let path = path.to_str().unwrap();
    let output = replay(&[path, "--format", "json", "--threads", threads], None);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
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
        largest = largest.max(memory_kib(child.id(), "VmRSS"));
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

/// A log of `count` impressions of group `m`, each padded past `pad` bytes
/// by a label that is no segment.
fn padded_impressions(count: usize, pad: usize) -> Vec<String> {
    let padding = "p".repeat(pad);
    (0..count)
        .map(|i| {
            format!(
                r#"{{"impression":{{"requestId":"r{i}","userId":"u{i}","itemIds":["a"],"time":"2026-11-01T10:00:00Z","model":"m","labels":{{"pad":"{padding}"}}}}}}"#
            )
        })
        .collect()
}

#[test]
fn many_lines_just_under_max_line_bytes_are_not_held_together() {
    // 200 lines of about 1,000,000 bytes each, under the 1 MiB bound: read
    // 2,048 lines at a time, they were all held at once, 200 MB.
    let lines = padded_impressions(200, 1_000_000);
    let mut child = Command::new(env!("CARGO_BIN_EXE_rankwatch"))
        .args(["replay", "-", "--format", "json", "--threads", "2"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    for line in &lines {
        input.write_all(line.as_bytes()).unwrap();
        input.write_all(b"\n").unwrap();
    }
    // The pipe holds 64 KiB at most: every line but that much was read.
    let peak = memory_kib(child.id(), "VmHWM");
    drop(input);
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["counters"]["impressions"], 200);
    assert_eq!(report["groups"][0]["lists"], 200);
    assert!(peak > 0, "the replay ran");
    assert!(peak < 64 * 1024, "{peak} KiB resident at the peak");
}

/// Writes `config` to a file in `dir` and replays `log` with it, `args`
/// after and `env` set: exit code, standard error and the report.
fn replay_with_config(
    dir: &std::path::Path,
    config: &str,
    log: &std::path::Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> (Option<i32>, String, Option<serde_json::Value>) {
    let path = dir.join("rankwatch.toml");
    std::fs::write(&path, config).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_rankwatch"))
        .arg("replay")
        .arg(log)
        .args(["--format", "json", "--config"])
        .arg(&path)
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
        serde_json::from_slice(&output.stdout).ok(),
    )
}

#[test]
fn max_line_bytes_is_a_key_of_the_config_file_checked_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log.jsonl");
    std::fs::write(&log, padded_impressions(3, 500).join("\n")).unwrap();
    let too_long = |report: &Option<serde_json::Value>| {
        report.as_ref().expect("a report")["counters"]["rejected"]["line_too_long"].clone()
    };
    let (code, stderr, report) =
        replay_with_config(dir.path(), "max_line_bytes = 400\n", &log, &[], &[]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(too_long(&report), 3);
    // A flag or the environment wins over the file.
    let (code, stderr, report) = replay_with_config(
        dir.path(),
        "max_line_bytes = 400\n",
        &log,
        &["--max-line-bytes", "1000"],
        &[],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(too_long(&report), serde_json::Value::Null);
    let (code, stderr, report) = replay_with_config(
        dir.path(),
        "max_line_bytes = 400\n",
        &log,
        &[],
        &[("RANKWATCH_MAX_LINE_BYTES", "1000")],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(too_long(&report), serde_json::Value::Null);
    // Out of range, from any of the three: refused at start, saying the range.
    for (config, args, env) in [
        ("max_line_bytes = 0\n", &[][..], &[][..]),
        ("max_line_bytes = 4294967297\n", &[], &[]),
        ("", &["--max-line-bytes", "0"], &[]),
        ("", &[], &[("RANKWATCH_MAX_LINE_BYTES", "4294967297")]),
    ] {
        let (code, stderr, report) = replay_with_config(dir.path(), config, &log, args, env);
        assert_eq!(code, Some(1), "{config} {args:?} {env:?}: {stderr}");
        assert!(report.is_none(), "nothing replayed");
        assert!(
            stderr.contains("setting `max_line_bytes`") && stderr.contains("from 1 to 4294967296"),
            "{stderr}"
        );
    }
}

/// Replays `log` from standard input handed over in two writes, the first
/// `split` bytes then the rest after a pause, so that the first read of the
/// replay gets only the first part.
fn replay_split(log: &[u8], split: usize) -> serde_json::Value {
    let mut child = Command::new(env!("CARGO_BIN_EXE_rankwatch"))
        .args(["replay", "-", "--format", "json"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(&log[..split]).unwrap();
    input.flush().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    input.write_all(&log[split..]).unwrap();
    drop(input);
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// Asserts two reports are the same, showing their counters when not
/// (the whole of one is thousands of lines).
fn assert_same(got: &serde_json::Value, expected: &serde_json::Value, what: &str) {
    assert!(
        got == expected,
        "{what}: the reports differ; counters {} against {}",
        got["counters"],
        expected["counters"]
    );
}

/// Gzips `data` into one member.
fn gzip(data: &[u8]) -> Vec<u8> {
    let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gzip.write_all(data).unwrap();
    gzip.finish().unwrap()
}

#[test]
fn the_first_bytes_of_a_log_are_looked_at_whole_however_few_a_read_hands_out() {
    let log = std::fs::read(conformance("replay_small.jsonl")).unwrap();
    let expected = replay_json(&["-", "--format", "json"], Some(&log));
    let mut marked = b"\xef\xbb\xbf".to_vec();
    marked.extend_from_slice(&log);
    // A byte order mark, and gzip's magic number, cut by a pipe.
    assert_same(
        &replay_split(&marked, 1),
        &expected,
        "a split byte order mark",
    );
    assert_same(
        &replay_split(&gzip(&log), 1),
        &expected,
        "a split gzip header",
    );
    // A byte order mark cut between two gzip members.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("members.jsonl.gz");
    let mut members = gzip(&marked[..1]);
    members.extend(gzip(&marked[1..]));
    std::fs::write(&path, members).unwrap();
    assert_same(
        &replay_json(&[path.to_str().unwrap(), "--format", "json"], None),
        &expected,
        "a byte order mark split between gzip members",
    );
}

#[test]
fn a_byte_order_mark_is_skipped_at_the_start_of_each_log_only() {
    let log = std::fs::read_to_string(conformance("replay_small.jsonl")).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    let (head, tail) = lines.split_at(lines.len() / 2);
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: String| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let plain = [
        write("a.jsonl", format!("{}\n", head.join("\n"))),
        write("b.jsonl", format!("{}\n", tail.join("\n"))),
    ];
    let marked = [
        write("a.marked.jsonl", format!("\u{feff}{}\n", head.join("\n"))),
        write("b.marked.jsonl", format!("\u{feff}{}\n", tail.join("\n"))),
    ];
    let expected = replay_json(&[&plain[0], &plain[1], "--format", "json"], None);
    assert_same(
        &replay_json(&[&marked[0], &marked[1], "--format", "json"], None),
        &expected,
        "a mark before each log's first line",
    );
    // Within a log, the mark is part of its line, which is then no event.
    let inner = write(
        "inner.jsonl",
        format!("{}\n\u{feff}{}\n", head.join("\n"), tail.join("\n")),
    );
    let output = replay(&[&inner, "--format", "json"], None);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let prefix = format!("{inner}:{}: invalid_json: ", head.len() + 1);
    assert!(stderr.lines().any(|l| l.starts_with(&prefix)), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let invalid =
        |report: &serde_json::Value| report["counters"]["rejected"]["invalid_json"].as_u64();
    assert_eq!(invalid(&report), invalid(&expected).map(|n| n + 1));
}

#[test]
fn a_line_too_long_is_skipped_in_a_gzip_log_and_on_standard_input() {
    let log = std::fs::read_to_string(conformance("replay_small.jsonl")).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    let (head, tail) = lines.split_at(lines.len() / 2);
    let expected = replay_json(&["-", "--format", "json"], Some(log.as_bytes()));
    // 50 MB of one line, then the rest of the log.
    let long = format!(
        "{}\n{}\n{}\n",
        head.join("\n"),
        "z".repeat(50 << 20),
        tail.join("\n")
    );
    let dir = tempfile::tempdir().unwrap();
    let gz = dir.path().join("long.jsonl.gz");
    std::fs::write(&gz, gzip(long.as_bytes())).unwrap();
    for (args, stdin) in [
        (vec![gz.to_str().unwrap(), "--threads", "2"], None),
        (vec!["-", "--threads", "2"], Some(long.as_bytes())),
        (vec!["-", "--threads", "1"], Some(long.as_bytes())),
    ] {
        let output = replay(&[&args[..], &["--format", "json"]].concat(), stdin);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{args:?}: {stderr:.2000}");
        let line = format!(":{}: line_too_long: ", head.len() + 1);
        assert!(stderr.contains(&line), "{args:?}: {stderr:.2000}");
        let mut report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        let rejected = report["counters"]["rejected"].as_object_mut().unwrap();
        assert_eq!(rejected.remove("line_too_long"), Some(1.into()), "{args:?}");
        assert_same(
            &report,
            &expected,
            &format!("{args:?}: the other lines as without it"),
        );
    }
}

/// The peak resident memory of a replay of `lines` from standard input,
/// in KiB, read while the replay waits for more input after them (blank
/// lines fill its last chunk, so that every event is applied).
fn peak_kib_replaying(lines: &[String]) -> u64 {
    let mut child = Command::new(env!("CARGO_BIN_EXE_rankwatch"))
        .args([
            "replay",
            "-",
            "--threads",
            "2",
            "--attribution-window",
            "1h",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    for line in lines {
        input.write_all(line.as_bytes()).unwrap();
        input.write_all(b"\n").unwrap();
    }
    input.write_all(&[b'\n'; 40_000]).unwrap();
    input.flush().unwrap();
    // Enough for the replay to apply what it was given; it then waits.
    std::thread::sleep(std::time::Duration::from_secs(2));
    let peak = memory_kib(child.id(), "VmHWM");
    drop(input);
    assert!(child.wait().unwrap().success());
    peak
}

/// A day's gap in a log makes every open list final at once. Their
/// outcomes are added to the figures a few thousand lists at a time, so
/// the replay holds little more than the open lists themselves (all at
/// once, it had held twice as much again).
#[test]
fn a_gap_in_time_that_makes_every_open_list_final_holds_little_more_memory() {
    let event = |i: usize, time: &str| {
        let items: Vec<String> = (0..20)
            .map(|r| format!("\"i{}\"", (i * 7 + r * 13) % 50_000))
            .collect();
        format!(
            r#"{{"impression":{{"requestId":"r{i}","userId":"u{i}","itemIds":[{}],"time":"{time}","model":"m"}}}}"#,
            items.join(",")
        )
    };
    let open: Vec<String> = (0..150_000)
        .map(|i| {
            event(
                i,
                &format!(
                    "2026-11-01T10:{:02}:{:02}.000Z",
                    i / 6000 % 60,
                    i / 100 % 60
                ),
            )
        })
        .collect();
    let later = |day: &str| -> Vec<String> {
        let mut lines = open.clone();
        lines
            .extend((0..1000).map(|i| event(200_000 + i, &format!("2026-11-{day}T11:00:00.000Z"))));
        lines
    };
    let within_the_window = peak_kib_replaying(&later("01"));
    let a_day_later = peak_kib_replaying(&later("02"));
    assert!(within_the_window > 0 && a_day_later > 0, "the replays ran");
    assert!(
        a_day_later < within_the_window * 5 / 4,
        "{a_day_later} KiB at the peak after a day's gap, {within_the_window} KiB without"
    );
}

/// A line that makes so many lists final that the batch is applied before
/// the next line is routed: the lines after it, in the same chunk, are
/// routed once it is applied, each counted and each bad one reported at
/// its own line, whatever the threads.
#[test]
fn lines_after_one_that_makes_many_lists_final_are_routed_and_numbered() {
    let impression = |id: &str, time: &str| {
        format!(
            r#"{{"impression":{{"requestId":"{id}","userId":"u-{id}","itemIds":["a","b","c"],"time":"{time}","model":"m"}}}}"#
        )
    };
    let click = |id: &str, time: &str| {
        format!(
            r#"{{"interaction":{{"eventId":"e-{id}","userId":"u-{id}","itemId":"b","requestId":"{id}","type":"click","time":"{time}"}}}}"#
        )
    };
    // 20,000 lists within a minute, then an hour later one that makes them all final.
    let mut lines: Vec<String> = (0..20_000)
        .map(|i| {
            impression(
                &format!("r{i}"),
                &format!("2026-11-01T10:00:{:02}.{:03}Z", i / 1000, i % 1000),
            )
        })
        .collect();
    lines.push(impression("late", "2026-11-01T11:00:00.000Z"));
    lines.push("{not json".to_owned()); // line 20,002
    lines.extend((0..48).map(|i| impression(&format!("s{i}"), "2026-11-01T11:00:01.000Z")));
    lines.extend((0..48).map(|i| click(&format!("s{i}"), "2026-11-01T11:00:02.000Z")));
    lines.push(r#"{"interaction":{"eventId":"x","userId":"u","itemId":"b","requestId":"s1","type":"click"}}"#.to_owned()); // line 20,099
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gap.jsonl");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let mut reports = Vec::new();
    for threads in ["1", "2"] {
        let output = replay_json_on(&path, threads);
        let stderr = String::from_utf8_lossy(&output.stderr);
        let at = |line: u64, reason: &str| format!("{}:{line}: {reason}: ", path.display());
        for (line, reason) in [(20_002, "invalid_json"), (20_099, "missing_time")] {
            assert!(
                stderr.lines().any(|l| l.starts_with(&at(line, reason))),
                "{threads} threads: no {reason} at line {line} in {stderr:.1000}"
            );
        }
        let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        let counters = &report["counters"];
        assert_eq!(counters["impressions"], 20_049, "{threads} threads");
        assert_eq!(counters["interactions"], 48, "{threads} threads");
        assert_eq!(counters["credited"], 48, "{threads} threads");
        reports.push(report);
    }
    assert_eq!(
        reports[0], reports[1],
        "one engine's report on 1 and 2 threads"
    );
}

/// A log named by a path that is a pipe (`/dev/stdin` on a pipe, a named
/// pipe, a shell's `<(zcat log.gz)`) or a file without a length is read to
/// its end like a file: the check that a file did not shrink while read
/// does not apply to it, and had ended every such replay with exit code 3
/// ("Illegal seek", or "shrank from 1420 to 0 bytes").
#[test]
fn a_log_named_by_a_pipe_is_read_to_its_end() {
    let log = std::fs::read(conformance("replay_small.jsonl")).unwrap();
    let expected = replay_json(&["-", "--format", "json"], Some(&log));
    let through_stdin = replay_json(&["/dev/stdin", "--format", "json"], Some(&log));
    assert_same(&through_stdin, &expected, "/dev/stdin on a pipe");

    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("log.jsonl");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let writer = {
        let (fifo, log) = (fifo.clone(), log.clone());
        std::thread::spawn(move || std::fs::write(fifo, log).unwrap())
    };
    let through_fifo = replay_json(&[fifo.to_str().unwrap(), "--format", "json"], None);
    writer.join().unwrap();
    assert_same(&through_fifo, &expected, "a named pipe");

    // A file of /proc says its length is 0 however much it holds: it had
    // been taken for a log truncated while read (exit 3).
    let proc_file = replay_json(&["/proc/self/status", "--format", "json"], None);
    assert!(proc_file["counters"]["rejected"]["invalid_json"].as_u64() > Some(10));
}

/// An impression that came late is in no figure, so replay names its line
/// as it names a bad one: it was only counted, which left its reader
/// looking for it (a time written with another zone's offset, say). The
/// first ten are named, the rest counted.
#[test]
fn late_impressions_are_named_by_their_lines() {
    let log = std::fs::read_to_string(conformance("replay_small.jsonl")).unwrap();
    let output = replay(&["-"], Some(log.as_bytes()));
    let stderr = String::from_utf8_lossy(&output.stderr);
    let named: Vec<usize> = stderr
        .lines()
        .filter(|line| line.contains(": late: the impression's time"))
        .map(|line| line.split(':').nth(1).unwrap().parse().unwrap())
        .collect();
    let expected = replay_json(&["-", "--format", "json"], Some(log.as_bytes()));
    assert_eq!(
        named.len() as u64,
        expected["counters"]["late"]["impressions"]
            .as_u64()
            .unwrap(),
        "{stderr}"
    );
    let lines: Vec<&str> = log.lines().collect();
    for number in named {
        assert!(
            lines[number - 1].contains("\"impression\""),
            "line {number}"
        );
    }

    let many: Vec<String> = std::iter::once(
        r#"{"impression":{"requestId":"r0","userId":"u","itemIds":["a"],"time":"2026-11-01T10:00:00Z"}}"#.to_owned(),
    )
    .chain((1..=15).map(|i| {
        format!(r#"{{"impression":{{"requestId":"r{i}","userId":"u","itemIds":["a"],"time":"2026-11-01T09:00:00Z"}}}}"#)
    }))
    .collect();
    let output = replay(&["-"], Some(many.join("\n").as_bytes()));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.matches(": late: ").count(), 10, "{stderr}");
    assert!(stderr.contains("-:2: late: the impression's time, 2026-11-01T09:00:00.000Z, is at least attribution window + allowed lateness (5m 30s) before the latest event time then, 2026-11-01T10:00:00.000Z"), "{stderr}");
    assert!(
        stderr.contains("... 5 more late impressions (counted under `late`)"),
        "{stderr}"
    );
}

/// A misspelled key of the config file is named with its line and the key
/// it was probably meant to be (it was "unknown field", then all 62 keys),
/// and a misspelled `RANKWATCH_*` variable, which had been ignored without
/// a word, is named with the setting it was probably meant to be.
#[test]
fn a_misspelled_key_or_variable_is_told_what_it_was_probably_meant_to_be() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log.jsonl");
    std::fs::write(&log, "").unwrap();
    let config = "k = [1, 5]\natribution_window = \"10s\"\n";
    let (code, stderr, _) = replay_with_config(dir.path(), config, &log, &[], &[]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("rankwatch.toml, line 2: unknown key `atribution_window`; did you mean `attribution_window`? Every key is in docs/settings.md"),
        "{stderr}"
    );
    let (code, stderr, _) =
        replay_with_config(dir.path(), "kafka_broker = \"b:9092\"\n", &log, &[], &[]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("did you mean `kafka_brokers`?"), "{stderr}");

    let env = [
        ("RANKWATCH_ALLOWED_LATENES", "1s"),
        ("RANKWATCH_SOMETHING_ELSE_ENTIRELY", "1"),
        ("RANKWATCH_MAX_ITEMS\u{7}", "3"),
    ];
    let (code, stderr, report) = replay_with_config(dir.path(), "", &log, &[], &env);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(report.unwrap()["config"]["allowed_lateness_s"], 30.0);
    assert_eq!(
        stderr.trim(),
        "rankwatch: the environment variable RANKWATCH_ALLOWED_LATENES is no setting and is ignored; did you mean RANKWATCH_ALLOWED_LATENESS?\n\
         rankwatch: the environment variable RANKWATCH_MAX_ITEMS\\u{7} is no setting and is ignored; did you mean RANKWATCH_MAX_ITEMS?"
    );
}
