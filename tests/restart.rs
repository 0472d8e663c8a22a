//! Restarts lose nothing: a SIGTERM in the middle of traffic gives the same
//! figures as an uninterrupted run, and after `kill -9` only the events since
//! the last snapshot are missing, none counted twice.

mod common;

use common::server::{event_from_json, parse_metrics, saving_to, Server};
use common::{conformance, read_json, replay_json};
use rankwatch::proto::{self, EventBatch};
use serde_json::{json, Value};
use std::os::unix::fs::FileTypeExt;
use std::time::Duration;

/// The conformance log's lines that are JSON, with the closing line that moves the watermark past all of them.
fn log_lines() -> Vec<String> {
    let log = std::fs::read_to_string(conformance("replay_small.jsonl")).unwrap();
    let mut lines: Vec<String> = log
        .lines()
        .filter(|l| event_from_json(l).is_some())
        .map(str::to_owned)
        .collect();
    lines.push(r#"{"interaction":{"userId":"closing-user","itemId":"x","type":"click","time":"2026-11-02T10:00:00Z"}}"#.into());
    lines
}

async fn send(server: &Server, lines: &[String]) {
    let events: Vec<proto::Event> = lines.iter().filter_map(|l| event_from_json(l)).collect();
    let mut client = server.collector().await;
    for (i, chunk) in events.chunks(50).enumerate() {
        client
            .ingest_batch(EventBatch {
                sequence: i as u64,
                events: chunk.to_vec(),
            })
            .await
            .unwrap();
    }
}

/// The server's report in the replay's JSON shape, for comparison.
fn as_replay_json(report: &proto::Report) -> Value {
    let c = report.counters.clone().unwrap();
    let groups: Vec<Value> = report
        .groups
        .iter()
        .map(|g| {
            let metrics: serde_json::Map<String, Value> =
                g.metrics.iter().map(|(k, m)| (k.clone(), json!({"all": m.all, "engaged": m.engaged, "se_all": m.se_all, "se_engaged": m.se_engaged}))).collect();
            let positions: Vec<Value> = g
                .positions
                .iter()
                .map(|p| json!({"rank": p.rank, "lists": p.lists, "interactions": p.interactions}))
                .collect();
            let mut group = json!({"model": g.model, "surface": g.surface, "lists": g.lists, "engaged_lists": g.engaged_lists, "metrics": metrics, "positions": positions});
            if let Some(c) = &g.coverage {
                group["coverage"] = json!({"items_shown": c.items_shown, "items_engaged": c.items_engaged,
                    "exposure_gini": c.exposure_gini, "exposure_entropy": c.exposure_entropy, "exact": c.exact});
            }
            group
        })
        .collect();
    json!({
        "counters": {"impressions": c.impressions, "interactions": c.interactions, "credited": c.credited,
            "unattributed": c.unattributed, "late": {"impressions": c.late_impressions},
            "duplicates": {"impressions": c.duplicate_impressions, "interactions": c.duplicate_interactions},
            "rejected": c.rejected},
        "groups": groups,
    })
}

/// The replay's report of `lines`, shaped like [`as_replay_json`] (no config).
fn replay_of(lines: &[String]) -> Value {
    let log: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let mut report = replay_json(&["-", "--format", "json"], Some(log.as_bytes()));
    report.as_object_mut().unwrap().remove("config");
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_and_restart_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let args = saving_to(dir.path());
    let lines = log_lines();
    let (first, rest) = lines.split_at(lines.len() / 2);

    let server = Server::start(&args);
    send(&server, first).await;
    assert_eq!(server.stop().await, Some(0));
    let server = Server::start(&args);
    let restored = parse_metrics(&server.get("/metrics").1);
    assert!(
        restored["rankwatch_open_impressions"] > 0.0,
        "open lists survived the restart"
    );
    send(&server, rest).await;

    let got = as_replay_json(&server.report().await);
    let expected = read_json(&conformance("replay_small.expected.json"));
    let mut expected_counters = expected["counters"].clone();
    expected_counters["rejected"]
        .as_object_mut()
        .unwrap()
        .remove("invalid_json");
    expected_counters["interactions"] =
        json!(expected_counters["interactions"].as_u64().unwrap() + 1);
    common::assert_reports_match(&got["counters"], &expected_counters);
    common::assert_reports_match(&got["groups"], &expected["groups"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_loses_only_what_came_after_the_last_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        &saving_to(dir.path())[..],
        &["--snapshot-interval", "200ms"],
    ]
    .concat();
    let lines = log_lines();
    let (a, rest) = lines.split_at(lines.len() / 3);
    let (b, c) = rest.split_at(rest.len() / 2);

    let mut server = Server::start(&args);
    send(&server, a).await;
    // Wait for a snapshot taken after A was applied.
    let saves = |server: &Server| {
        parse_metrics(&server.get("/metrics").1)
            .get("rankwatch_state_saves_total")
            .copied()
            .unwrap_or(0.0)
    };
    let before = saves(&server);
    let mut waited = 0;
    while saves(&server) < before + 2.0 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        waited += 1;
        assert!(waited < 100, "no snapshot within 10 s");
    }
    // No snapshot covers B: a directory where the next save writes its temporary file makes saves fail.
    let blocker = dir.path().join("rankwatch.state.tmp");
    std::fs::create_dir(&blocker).unwrap();
    send(&server, b).await;
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    std::fs::remove_dir(&blocker).unwrap();

    let server = Server::start(&args);
    send(&server, c).await;
    let got = as_replay_json(&server.report().await);
    let mut without_b: Vec<String> = a.to_vec();
    without_b.extend_from_slice(c);
    let expected = replay_of(&without_b);
    // The replay gives the closing interaction up at its end; the server still holds it waiting.
    let mut expected_counters = expected["counters"].clone();
    let no_impression = &mut expected_counters["unattributed"]["no_impression"];
    *no_impression = json!(no_impression.as_u64().unwrap() - 1);
    common::assert_reports_match(&got["counters"], &expected_counters);
    common::assert_reports_match(&got["groups"], &expected["groups"]);
}

/// Five lists of three items shown at `hour` o'clock, the first
/// interleaved, a click on each, and an interaction half an hour later
/// that finalizes them.
fn round(hour: u32) -> Vec<String> {
    let at = |minute: u32, second: u32| format!("2026-11-01T{hour:02}:{minute:02}:{second:02}Z");
    let mut lines = Vec::new();
    for user in 0..5 {
        let request = format!("r{hour}-{user}");
        let mut impression = json!({"impression": {"requestId": request,
            "userId": format!("u{user}"), "itemIds": ["a", "b", "c"], "time": at(0, 0)}});
        if user == 0 {
            impression["impression"]["interleaving"] =
                json!({"rankers": ["x", "y"], "teams": [0, 1, 0]});
        }
        lines.push(impression.to_string());
        lines.push(
            json!({"interaction": {"requestId": request, "userId": format!("u{user}"),
            "itemId": "b", "type": "click", "time": at(0, 1)}})
            .to_string(),
        );
    }
    lines.push(
        json!({"interaction": {"userId": "closing", "itemId": "x", "type": "click",
        "time": at(30, 0)}})
        .to_string(),
    );
    lines
}

/// Counter families that `/metrics` renders from the figures since start.
const COUNTED: [&str; 6] = [
    "rankwatch_events_received_total",
    "rankwatch_impressions_total",
    "rankwatch_lists_finalized_total",
    "rankwatch_list_ndcg_count",
    "rankwatch_position_lists_total",
    "rankwatch_interleaving_lists_total",
];

/// The sum of every series of `family`, whatever its labels.
fn family_sum(metrics: &std::collections::BTreeMap<String, f64>, family: &str) -> f64 {
    let labelled = format!("{family}{{");
    metrics
        .iter()
        .filter(|(key, _)| *key == family || key.starts_with(&labelled))
        .map(|(_, value)| value)
        .sum()
}

/// The sum of each of [`COUNTED`] on `server`'s `/metrics`.
fn counted(server: &Server) -> Vec<f64> {
    let metrics = parse_metrics(&server.get("/metrics").1);
    COUNTED.map(|family| family_sum(&metrics, family)).to_vec()
}

/// Waits until `server` has saved its state twice more.
async fn wait_for_two_saves(server: &Server) {
    let saves = |server: &Server| {
        parse_metrics(&server.get("/metrics").1)
            .get("rankwatch_state_saves_total")
            .copied()
            .unwrap_or(0.0)
    };
    let before = saves(server);
    for _ in 0..100 {
        if saves(server) >= before + 2.0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no snapshot within 10 s");
}

fn kill_9(mut server: Server) {
    server.child.kill().unwrap();
    server.child.wait().unwrap();
}

/// After `kill -9` the exported counters start again from 0, as a new
/// process's do, so that Prometheus reads the drop as the reset it is.
/// Restored at the last snapshot's values, lower than those it last
/// scraped, they were taken for new counts: `rate()` and `increase()`
/// counted every list and event since the first start again. The report
/// since start keeps the restored figures; a SIGTERM restart carries the
/// counters on; a `kill -9` before any save after such a restart resets
/// them again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_kill_9_the_exported_counters_start_again_from_zero() {
    let dir = tempfile::tempdir().unwrap();
    let saving = saving_to(dir.path());
    let often = [&saving[..], &["--snapshot-interval", "200ms"]].concat();
    let never = [&saving[..], &["--snapshot-interval", "1h"]].concat();
    let (a, b, c) = (round(10), round(12), round(14));
    let (a, b, c) = (&a[..], &b[..], &c[..]);

    let server = Server::start(&often);
    send(&server, a).await;
    wait_for_two_saves(&server).await;
    let before = counted(&server);
    assert!(before.iter().all(|&n| n > 0.0), "{COUNTED:?} {before:?}");
    let since_start = server.report().await.counters;
    kill_9(server);

    let server = Server::start(&often);
    assert_eq!(counted(&server), [0.0; 6], "{COUNTED:?} after kill -9");
    assert_eq!(server.report().await.counters, since_start);
    send(&server, b).await;
    let after_b = counted(&server);
    assert_eq!(
        after_b[0],
        b.len() as f64,
        "events received since the restart"
    );
    assert_eq!(server.stop().await, Some(0));

    let server = Server::start(&never);
    assert_eq!(counted(&server), after_b, "carried on after SIGTERM");
    kill_9(server);
    let server = Server::start(&often);
    assert_eq!(
        counted(&server),
        [0.0; 6],
        "{COUNTED:?} after a kill -9 before any save"
    );
    send(&server, c).await;
    assert_eq!(counted(&server)[0], c.len() as f64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_state_file_is_set_aside_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("rankwatch.state"), b"not a state file").unwrap();
    let server = Server::start(&["--state-dir", dir.path().to_str().unwrap()]);
    let metrics = parse_metrics(&server.get("/metrics").1);
    assert_eq!(metrics["rankwatch_state_restore_failures_total"], 1.0);
    // The saves' series are there from the start, for rate() and alerts.
    assert_eq!(metrics.get("rankwatch_state_saves_total"), Some(&0.0));
    assert_eq!(
        metrics.get("rankwatch_state_save_failures_total"),
        Some(&0.0)
    );
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names
            .iter()
            .any(|n| n.starts_with("rankwatch.state.rejected-")),
        "{names:?}"
    );
    assert_eq!(server.get("/readyz").0, 200, "the server runs, empty");
}

/// A state file that is not a regular file (here a named pipe; a link to
/// /dev/zero is refused the same way) is set aside unread: the server
/// starts, empty, instead of waiting for a writer that never comes or
/// reading until memory runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_file_that_is_not_a_regular_file_is_set_aside_unread() {
    let dir = tempfile::tempdir().unwrap();
    // A mark of a graceful shutdown beside it, which is checked against it.
    std::fs::write(dir.path().join("rankwatch.clean"), b"RNKWATCH").unwrap();
    let server = start_beside_a_pipe(dir.path(), "rankwatch.state");
    let metrics = parse_metrics(&server.get("/metrics").1);
    assert_eq!(metrics["rankwatch_state_restore_failures_total"], 1.0);
    server.logged("not a regular file");
    let aside: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().contains("rankwatch.state.rejected-"))
        .collect();
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert!(
        aside[0].metadata().unwrap().file_type().is_fifo(),
        "the pipe itself, moved aside"
    );
    assert_eq!(server.get("/readyz").0, 200, "the server runs, empty");
}

/// A mark of a graceful shutdown that is not a regular file (a named pipe,
/// a link) is removed unread, and the mark the next graceful shutdown
/// leaves is a file of its own: written through a link, it had truncated
/// the state file the link named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mark_that_is_not_a_regular_file_is_removed_unread_and_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let mark = dir.path().join("rankwatch.clean");
    let server = start_beside_a_pipe(dir.path(), "rankwatch.clean");
    assert_eq!(server.get("/readyz").0, 200);
    assert!(
        std::fs::symlink_metadata(&mark).is_err(),
        "the pipe removed"
    );
    send(&server, &round(10)).await;
    assert_eq!(server.stop().await, Some(0));

    std::fs::remove_file(&mark).unwrap();
    std::os::unix::fs::symlink("rankwatch.state", &mark).unwrap();
    let args = saving_to(dir.path());
    let server = Server::start(&args);
    assert_eq!(counted(&server), [0.0; 6], "a link is no mark");
    send(&server, &round(12)).await;
    let before = counted(&server);
    assert_eq!(server.stop().await, Some(0));
    assert!(std::fs::symlink_metadata(&mark).unwrap().is_file());
    let server = Server::start(&args);
    assert_eq!(counted(&server), before, "the state and the mark both kept");
}

/// What is left at the path of a save's temporary file (a named pipe, a
/// link to a file outside the state directory) is removed, not opened:
/// the pipe had held the start for good, the link had the start's check
/// write through it. A link as the lock file is refused, and the file it
/// names left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_is_left_at_the_temporary_or_lock_path_is_never_opened_through() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_beside_a_pipe(dir.path(), "rankwatch.state.tmp");
    assert_eq!(server.get("/readyz").0, 200);
    assert_eq!(server.stop().await, Some(0));

    let outside = tempfile::tempdir().unwrap();
    let victim = outside.path().join("victim");
    std::fs::write(&victim, "kept").unwrap();
    let temporary = dir.path().join("rankwatch.state.tmp");
    std::os::unix::fs::symlink(&victim, &temporary).unwrap();
    let server = Server::start(&saving_to(dir.path()));
    send(&server, &round(10)).await;
    assert_eq!(server.stop().await, Some(0));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "kept");
    assert!(std::fs::symlink_metadata(&temporary).is_err());
    assert!(
        std::fs::metadata(dir.path().join("rankwatch.state"))
            .unwrap()
            .len()
            > 28
    );

    let lock = dir.path().join("rankwatch.lock");
    std::fs::remove_file(&lock).unwrap();
    std::os::unix::fs::symlink(&victim, &lock).unwrap();
    let args = saving_to(dir.path());
    let (code, log) = common::server::exit_of(&mut common::server::serve_command(&args));
    assert_eq!(code, Some(1), "{log}");
    assert!(log.contains("cannot hold its lock file"), "{log}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "kept");
}

/// A server started on `dir`, where `pipe` is a named pipe, within 20 s.
fn start_beside_a_pipe(dir: &std::path::Path, pipe: &str) -> Server {
    let pipe = dir.join(pipe);
    let made = std::process::Command::new("mkfifo").arg(&pipe).status();
    assert!(made.unwrap().success(), "mkfifo");
    let state_dir = dir.to_str().unwrap().to_owned();
    let (sender, started) = std::sync::mpsc::channel();
    std::thread::spawn(move || sender.send(Server::start(&["--state-dir", &state_dir])));
    let Ok(server) = started.recv_timeout(Duration::from_secs(20)) else {
        // Lets a server stuck opening the pipe go on, so it ends with the test.
        let _ = std::fs::OpenOptions::new().write(true).open(&pipe);
        panic!("the server did not start within 20 s beside a named pipe {pipe:?}");
    };
    server
}

/// A state file whose header does not fit the file (a payload length
/// other than the file's, or a format version this build does not read) is
/// set aside once its header is read, the rest unread: a sparse file of
/// 1 GiB behind a well-formed header had been read whole first, memory
/// growing by the file's length before the server answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_file_whose_header_does_not_fit_is_set_aside_unread() {
    for (version, said) in [
        (9u32, "not as long as its header says"),
        (0, "format version 0"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let mut header = b"RNKWATCH".to_vec();
        header.extend(version.to_le_bytes());
        header.extend(10u64.to_le_bytes()); // the payload's length
        header.extend(0u64.to_le_bytes()); // its checksum
        let path = dir.path().join("rankwatch.state");
        std::fs::write(&path, header).unwrap();
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.set_len(1 << 30).unwrap();
        let server = Server::start(&["--state-dir", dir.path().to_str().unwrap()]);
        let metrics = parse_metrics(&server.get("/metrics").1);
        assert_eq!(metrics["rankwatch_state_restore_failures_total"], 1.0);
        server.logged(said);
        let peak = common::memory_kib(server.child.id(), "VmHWM");
        assert!(peak < 256 * 1024, "version {version}: peak {peak} KiB");
    }
}

/// With a save every millisecond, a periodic save is as good as always
/// under way when SIGTERM comes: the final save still succeeds (exit 0),
/// and the restarted server reports exactly what the stopped one did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_final_save_never_meets_a_periodic_one() {
    let dir = tempfile::tempdir().unwrap();
    let args = [&saving_to(dir.path())[..], &["--snapshot-interval", "1ms"]].concat();
    let lines = log_lines();
    let server = Server::start(&args);
    send(&server, &lines[..lines.len() / 2]).await;
    let before = server.report().await;
    assert!(before.counters.as_ref().unwrap().impressions > 0);
    let code = server.stop().await;
    assert_eq!(code, Some(0));

    let server = Server::start(&args);
    assert_eq!(server.report().await, before);
}

/// A client that connects and never speaks holds the drain: the server
/// gives up on it after `--drain-timeout`, says so, saves its state and
/// exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_drain_ends_at_its_deadline_and_the_state_is_saved() {
    let dir = tempfile::tempdir().unwrap();
    let args = [&saving_to(dir.path())[..], &["--drain-timeout", "500ms"]].concat();
    let lines = log_lines();
    let mut server = Server::start(&args);
    send(&server, &lines[..lines.len() / 2]).await;
    let before = server.report().await;
    let silent = std::net::TcpStream::connect(server.grpc).unwrap();
    let code = tokio::task::spawn_blocking(move || {
        let code = server.terminate();
        (code, server.log.iter().collect::<Vec<_>>())
    });
    let (code, log) = code.await.unwrap();
    drop(silent);
    assert_eq!(code, Some(0));
    assert!(
        log.iter()
            .any(|line| line.contains("drain deadline passed")),
        "{log:#?}"
    );

    let server = Server::start(&args);
    assert_eq!(server.report().await, before);
}

/// A state file whose checksum is right but whose open impression names a
/// group that does not exist (found by fuzzing: restored, it made the
/// server allocate aggregates for four billion groups at finalization) is
/// set aside and counted like a damaged one, and the server starts empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inconsistent_state_file_is_set_aside_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    // Without the wall clock's advance, the impression stays open until the save.
    let args = saving_to(dir.path());
    let mut server = Server::start(&args);
    let impression = r#"{"impression":{"requestId":"r1","userId":"u1","itemIds":["item-a"],"time":"2026-11-01T10:00:00Z"}}"#;
    send(&server, &[impression.to_owned()]).await;
    assert_eq!(server.terminate(), Some(0));

    // The saved state ends with its one user's open impression, in
    // fixed-width fields: group 0, no interleaving lineup, one item, no
    // credits; then no waiting interactions; then the join settings.
    let path = dir.path().join("rankwatch.state");
    let saved = std::fs::read(&path).unwrap();
    let (header, payload) = saved.split_at(28);
    let mut tail = vec![0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 1, 0, 0, 0];
    tail.extend(rankwatch::event::id_hash("item-a").to_le_bytes());
    tail.push(0x00);
    let group = payload
        .windows(tail.len())
        .rposition(|w| w == tail)
        .expect("the state file format changed");
    let mut payload = payload.to_vec();
    payload[group..group + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    let mut forged = header[..12].to_vec();
    forged.extend((payload.len() as u64).to_le_bytes());
    forged.extend(xxhash_rust::xxh3::xxh3_64(&payload).to_le_bytes());
    forged.extend(&payload);
    std::fs::write(&path, forged).unwrap();

    let server = Server::start(&args);
    let metrics = parse_metrics(&server.get("/metrics").1);
    assert_eq!(metrics["rankwatch_state_restore_failures_total"], 1.0);
    assert_eq!(metrics["rankwatch_open_impressions"], 0.0);
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names
            .iter()
            .any(|n| n.starts_with("rankwatch.state.rejected-")),
        "{names:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_server_on_the_same_state_dir_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let args = saving_to(dir.path());
    let first = Server::start(&args);
    // Both saving to one file, each would overwrite the other's figures.
    let (code, log) = common::server::exit_of(&mut common::server::serve_command(&args));
    assert_ne!(code, Some(0), "{log}");
    assert!(code.is_some(), "the second server did not exit: {log}");
    assert!(log.contains("in use by another rankwatch server"), "{log}");
    assert!(log.contains(&format!("pid {}", first.child.id())), "{log}");
    assert_eq!(first.stop().await, Some(0));
    // Once the first has gone, the directory is free.
    let second = Server::start(&args);
    assert_eq!(second.get("/healthz").0, 200);
    assert_eq!(second.stop().await, Some(0));
}

/// Waits up to 20 s for `path` to exist.
fn wait_for_file(path: &std::path::Path) {
    for _ in 0..200 {
        if path.exists() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("{} did not appear within 20 s", path.display());
}

/// A state directory deleted while its server runs (a cleanup that removed
/// it, lock file and all) is taken again, locked, at the next save, so that
/// a second server pointed at it is refused; when a second server took it
/// first, the first stops saving and says why, rather than each overwrite
/// the other's figures. The directory had been recreated without a lock,
/// and two servers saved to one file in turns, without a word.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_directory_deleted_while_its_server_runs_is_taken_again_or_left_to_its_new_holder()
{
    let dir = tempfile::tempdir().unwrap();
    let state_dir = dir.path().join("state");
    let args = [&saving_to(&state_dir)[..], &["--snapshot-interval", "1s"]].concat();
    let state = state_dir.join("rankwatch.state");
    let first = Server::start(&args);
    send(&first, &log_lines()).await;
    wait_for_file(&state);

    std::fs::remove_dir_all(&state_dir).unwrap();
    wait_for_file(&state);
    let (code, log) = common::server::exit_of(&mut common::server::serve_command(&args));
    assert!(code.is_some_and(|c| c != 0), "{log}");
    assert!(log.contains("in use by another rankwatch server"), "{log}");
    first.logged(
        "lock file was removed or replaced while this server ran; took the directory again",
    );

    std::fs::remove_dir_all(&state_dir).unwrap();
    let second = Server::start(&args);
    first.logged("lost the state directory");
    let failures = |server: &Server| {
        parse_metrics(&server.get("/metrics").1)["rankwatch_state_save_failures_total"]
    };
    assert!(failures(&first) >= 1.0);
    // The first cannot save at shutdown either; the state left is the
    // second's, which was given no list.
    assert_eq!(first.stop().await, Some(1));
    assert_eq!(second.stop().await, Some(0));
    let third = Server::start(&args);
    let restored = parse_metrics(&third.get("/metrics").1);
    assert_eq!(restored["rankwatch_open_impressions"], 0.0);
    assert_eq!(restored["rankwatch_events_accepted_total"], 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_under_lower_limits_says_what_it_restored_beyond_them() {
    let dir = tempfile::tempdir().unwrap();
    let args = saving_to(dir.path());
    let lines = log_lines();
    let server = Server::start(&args);
    // All but the closing line (every list of the log finalized, its groups
    // made), and three lists that stay open.
    let mut sent = lines[..lines.len() - 1].to_vec();
    sent.extend((0..3).map(|i| format!(r#"{{"impression":{{"requestId":"open{i}","userId":"u{i}","itemIds":["a"],"time":"2026-11-02T09:00:00Z"}}}}"#)));
    send(&server, &sent).await;
    let saved = parse_metrics(&server.get("/metrics").1);
    let (open, items, groups) = (
        saved["rankwatch_open_impressions"],
        saved["rankwatch_open_items"],
        saved["rankwatch_groups"],
    );
    assert!(
        open > 1.0 && items >= open && groups > 1.0,
        "{open} {items} {groups}"
    );
    assert_eq!(server.stop().await, Some(0));

    let lower = [
        &args[..],
        &["--max-open-impressions", "1", "--max-groups", "1"],
        &["--max-open-items", "1"],
    ]
    .concat();
    let server = Server::start(&lower);
    let said = server.logged("beyond the limits");
    assert!(
        said.contains(&format!("open_impressions={open} max_open_impressions=1"))
            && said.contains(&format!("open_items={items} max_open_items=1"))
            && said.contains(&format!("groups={groups} max_groups=1")),
        "{said}"
    );
}

/// The counts of events shed under `max_open_items` and
/// `max_open_credits`, which the state file keeps after the rest, carry on
/// across a graceful restart as the other counters do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_restart_carries_on_the_events_shed_under_max_open_items_and_credits() {
    let dir = tempfile::tempdir().unwrap();
    let limits = ["--max-open-items", "2", "--max-open-credits", "1"];
    let args = [&saving_to(dir.path())[..], &limits].concat();
    let server = Server::start(&args);
    let mut sent: Vec<String> = (0..3)
        .map(|i| format!(r#"{{"impression":{{"requestId":"r{i}","userId":"u{i}","itemIds":["a"],"time":"2026-11-02T09:00:00Z"}}}}"#))
        .collect();
    sent.extend((0..2).map(|i| format!(r#"{{"interaction":{{"userId":"u{i}","itemId":"a","requestId":"r{i}","type":"click","time":"2026-11-02T09:00:01Z"}}}}"#)));
    send(&server, &sent).await;
    let items = r#"rankwatch_events_shed_total{reason="max_open_items"}"#;
    let credits = r#"rankwatch_events_shed_total{reason="max_open_credits"}"#;
    let saved = parse_metrics(&server.get("/metrics").1);
    assert_eq!((saved[items], saved[credits]), (1.0, 1.0));
    assert_eq!(server.stop().await, Some(0));

    let server = Server::start(&args);
    let restored = parse_metrics(&server.get("/metrics").1);
    assert_eq!(
        (
            restored[items],
            restored[credits],
            restored["rankwatch_events_received_total"],
            restored["rankwatch_open_items"],
            restored["rankwatch_open_credits"],
        ),
        (1.0, 1.0, 5.0, 2.0, 1.0)
    );
}

/// The per-user limits too: a user's open lists, and the interactions
/// credited to one list, beyond them are kept and named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_under_lower_limits_per_user_says_what_one_user_holds_beyond_them() {
    let dir = tempfile::tempdir().unwrap();
    let args = saving_to(dir.path());
    let server = Server::start(&args);
    let mut sent: Vec<String> = (0..3).map(|i| format!(r#"{{"impression":{{"requestId":"r{i}","userId":"u1","itemIds":["a","b"],"time":"2026-11-02T09:00:0{i}Z"}}}}"#)).collect();
    sent.extend((0..2).map(|i| format!(r#"{{"interaction":{{"eventId":"e{i}","userId":"u1","itemId":"a","requestId":"r0","type":"click","time":"2026-11-02T09:00:05Z"}}}}"#)));
    send(&server, &sent).await;
    assert_eq!(server.stop().await, Some(0));
    let lower = [
        &args[..],
        &[
            "--max-open-impressions-per-user",
            "1",
            "--max-interactions-per-impression",
            "1",
            "--max-open-credits",
            "1",
        ],
    ]
    .concat();
    let server = Server::start(&lower);
    let said = server.logged("beyond the limits");
    assert!(
        said.contains("open_impressions_of_one_user=3 max_open_impressions_per_user=1")
            && said.contains("credited_and_waiting_interactions=2 max_open_credits=1")
            && said.contains(
                "interactions_credited_to_one_impression=2 max_interactions_per_impression=1"
            )
            && !said.contains(" waiting_interactions")
            && !said.contains("waiting_interactions_of_one_user"),
        "{said}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_under_the_same_limits_warns_of_nothing_though_groups_overflowed() {
    let dir = tempfile::tempdir().unwrap();
    let args = [&saving_to(dir.path())[..], &["--max-groups", "2"]].concat();
    let server = Server::start(&args);
    send(&server, &log_lines()).await;
    let saved = parse_metrics(&server.get("/metrics").1);
    assert_eq!(
        saved["rankwatch_groups"], 3.0,
        "two groups and the overflow group"
    );
    assert_eq!(server.stop().await, Some(0));
    let server = Server::start(&args);
    // The warning would come right after the line of the restore.
    let mut log = Vec::new();
    while let Ok(line) = server.log.recv_timeout(Duration::from_secs(2)) {
        log.push(line);
    }
    assert!(log.iter().any(|l| l.contains("state restored")), "{log:#?}");
    assert!(
        !log.iter()
            .any(|l| l.contains("beyond the limits") || l.contains("other join settings")),
        "{log:#?}"
    );
}

/// The attribution window, the allowed lateness and the grades change what
/// a list counts without changing what a state holds: a restart under
/// other values restores the state, and says that its figures since start
/// mix lists joined under both (they had mixed silently).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_under_another_attribution_window_says_the_figures_mix_both() {
    let dir = tempfile::tempdir().unwrap();
    let args = saving_to(dir.path());
    let server = Server::start(&args);
    send(&server, &log_lines()).await;
    let finalized = |server: &Server| -> f64 {
        parse_metrics(&server.get("/metrics").1)
            .iter()
            .filter(|(series, _)| series.starts_with("rankwatch_lists_finalized_total{"))
            .map(|(_, lists)| lists)
            .sum()
    };
    let lists = finalized(&server);
    assert!(lists > 0.0);
    assert_eq!(server.stop().await, Some(0));

    let changed = [
        &args[..],
        &["--attribution-window", "10m", "--grade", "click=2"],
    ]
    .concat();
    let server = Server::start(&changed);
    let said = server.logged("other join settings");
    assert!(
        said.contains(r#"changed="attribution_window was 5m, is 10m; grade of click was 1, is 2""#),
        "{said}"
    );
    assert_eq!(finalized(&server), lists, "the state was restored");
    let failures =
        parse_metrics(&server.get("/metrics").1)["rankwatch_state_restore_failures_total"];
    assert_eq!(failures, 0.0);
}

/// A state saved by the build before format 9 (`tests/data/state-format-8`:
/// `serve --wall-clock-advance false --state-dir …` given 1,200 events over
/// ten minutes, 400 lists of two models, then SIGTERM), whose coverage
/// since start left out the lists of the windows' newest panes, is restored
/// with them: the figures since start are those that build reported
/// before it stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_of_format_8_is_restored_with_every_list_in_its_coverage_since_start() {
    let dir = tempfile::tempdir().unwrap();
    let saved = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/state-format-8/rankwatch.state");
    std::fs::copy(saved, dir.path().join("rankwatch.state")).unwrap();
    let server = Server::start(&saving_to(dir.path()));
    let metrics = parse_metrics(&server.get("/metrics").1);
    assert_eq!(metrics["rankwatch_state_restore_failures_total"], 0.0);
    let report = server.report().await;
    // (model, lists, items shown, items engaged, Gini, entropy) as reported before the stop.
    let before = [
        ("a", 93, 290, 134, 0.3148213136265219, 0.9722358233491827),
        ("b", 87, 282, 131, 0.3034032593565289, 0.97360773471542),
    ];
    assert_eq!(report.groups.len(), before.len());
    for (group, (model, lists, shown, engaged, gini, entropy)) in report.groups.iter().zip(before) {
        let coverage = group.coverage.unwrap();
        assert_eq!(
            (
                group.model.as_str(),
                group.lists,
                coverage.items_shown,
                coverage.items_engaged
            ),
            (model, lists, shown, engaged)
        );
        // Summed in another order than the build before did.
        assert!(
            (coverage.exposure_gini - gini).abs() < 1e-12,
            "{coverage:?}"
        );
        assert!(
            (coverage.exposure_entropy - entropy).abs() < 1e-12,
            "{coverage:?}"
        );
    }
}

/// A save holds the state's bytes beside the engine, and nothing more:
/// the server's memory rises by about the size of the file (0.9 times
/// here), where a copy of the state, then its bytes, then those bytes
/// framed in a second buffer had taken it up by 4.2 times. A restore
/// peaks at what it then holds, where reading the file whole before
/// decoding it had taken the peak 0.65 times the file above it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_save_and_a_restore_hold_about_the_size_of_the_state_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    let state_dir = dir.path().to_str().unwrap();
    let args = [
        "--state-dir",
        state_dir,
        "--snapshot-interval",
        "15s",
        "--attribution-window",
        "1h",
        "--wall-clock-advance",
        "false",
    ];
    let server = Server::start(&args);
    let items: Vec<String> = (0..20).map(|i| format!(r#""item-{i}""#)).collect();
    let items = items.join(",");
    let lines: Vec<String> = (0..150_000)
        .map(|i| format!(r#"{{"impression":{{"requestId":"r{i}","userId":"u{i}","itemIds":[{items}],"time":"2026-11-02T09:00:00Z"}}}}"#))
        .collect();
    server.stream_lines(&lines).await;
    let pid = server.child.id();
    let saves = || parse_metrics(&server.get("/metrics").1)["rankwatch_state_saves_total"];
    assert_eq!(saves(), 0.0, "the lists were sent before the first save");
    let before = common::memory_kib(pid, "VmRSS");
    for _ in 0..300 {
        if saves() >= 1.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let peak = common::memory_kib(pid, "VmHWM");
    let file_kib = std::fs::metadata(dir.path().join("rankwatch.state"))
        .unwrap()
        .len()
        / 1024;
    assert!(
        file_kib > 20 * 1024,
        "{file_kib} KiB of state: too small to tell"
    );
    assert!(
        peak.saturating_sub(before) < file_kib * 2,
        "a save of {file_kib} KiB took the server from {before} to {peak} KiB"
    );
    assert_eq!(server.stop().await, Some(0));

    let server = Server::start(&args);
    let metrics = parse_metrics(&server.get("/metrics").1);
    assert_eq!(metrics["rankwatch_open_impressions"], 150_000.0);
    let (peak, held) = (
        common::memory_kib(server.child.id(), "VmHWM"),
        common::memory_kib(server.child.id(), "VmRSS"),
    );
    assert!(
        peak < held + file_kib / 4,
        "a restore of {file_kib} KiB peaked at {peak} KiB, to hold {held} KiB"
    );
}

/// Without `state_dir` nothing is saved, and a graceful stop says what it
/// loses: it had logged only "rankwatch stopped", though the lists still
/// open, acknowledged to their senders, were gone with the process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_without_state_dir_says_what_it_loses() {
    let mut server = Server::exact(&[]);
    server.logged("state_dir is not set");
    let open = r#"{"impression":{"requestId":"r1","userId":"u1","itemIds":["item-a"],"time":"2026-11-01T10:00:00Z"}}"#;
    let waiting = r#"{"interaction":{"userId":"u2","itemId":"item-a","requestId":"r2","type":"click","time":"2026-11-01T10:00:01Z"}}"#;
    send(&server, &[open.to_owned(), waiting.to_owned()]).await;
    let code = tokio::task::spawn_blocking(move || {
        let code = server.terminate();
        (code, server.log.iter().collect::<Vec<_>>())
    });
    let (code, log) = code.await.unwrap();
    assert_eq!(code, Some(0));
    assert!(
        log.iter().any(|line| line.contains("are lost, unsaved")
            && line.contains("open_lists=1")
            && line.contains("waiting_interactions=1")),
        "{log:#?}"
    );
}
