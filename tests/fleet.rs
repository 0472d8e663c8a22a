//! Fleet mode against a real Kafka-compatible broker (tansu, built by
//! `tests/install-broker.sh`): consuming instances share a topic of 12
//! partitions as a consumer group, and a relay produces to it.
//!
//! The exact comparisons follow docs/SPEC.md §10: the fleet's totals (the sum over
//! instances of every `_sum`, `_count` and counter of `/metrics`, each
//! instance's last values) equal the sum over partitions of `rankwatch
//! replay` of each partition's records in offset order. The instances run
//! with `--wall-clock-advance false`, as replay does; a closing impression
//! per partition, far later than the log, finalizes the rest. The fleet
//! holds those closing lists open (their window has not passed), while
//! replay finalizes them at its end, so the closing group's lists are the
//! only figures left out of the comparison.

#[path = "common/broker.rs"]
mod broker;
mod common;
#[path = "common/kafka_proxy.rs"]
mod kafka_proxy;

use broker::{Broker, PARTITIONS, POLL, POLLS};
use common::server::{event_from_json, parse_metrics, Server};
use common::{conformance, replay_json};
use postcard::ser_flavors::Flavor;
use prost::Message;
use rankwatch::fleet::snapshot::{
    Chunks, LastManifest, Manifest, Pending, StateTopic, CHUNK_BYTES,
};
use rankwatch::proto::{self, EventBatch};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::Duration;

const TOPIC: &str = "rankwatch.events";
/// The closing impressions' model: far later than the log, so that each
/// partition's other lists are final once its closing record is read.
const CLOSING_MODEL: &str = "closing";

/// One record to produce: its key, its value, and the log line it came from
/// (`None` for a value that is not an event).
#[derive(Clone)]
struct Produced {
    key: String,
    value: Vec<u8>,
    line: Option<String>,
    partition: Option<i32>,
}

fn event_record(line: &str) -> Produced {
    let event = event_from_json(line).unwrap();
    let key = match &event.kind {
        Some(proto::event::Kind::Impression(m)) => m.user_id.clone(),
        Some(proto::event::Kind::Interaction(x)) => x.user_id.clone(),
        None => String::new(),
    };
    Produced {
        key,
        value: event.encode_to_vec(),
        line: Some(line.to_owned()),
        partition: None,
    }
}

/// The conformance log as records keyed by user.
fn log_records() -> Vec<Produced> {
    std::fs::read_to_string(conformance("replay_small.jsonl"))
        .unwrap()
        .lines()
        .filter(|line| event_from_json(line).is_some())
        .map(event_record)
        .collect()
}

/// The log's records in two halves, the closing records after the second.
fn log_in_halves() -> (Vec<Produced>, Vec<Produced>) {
    let mut first = log_records();
    let mut second = first.split_off(first.len() / 2);
    second.extend(closing_records());
    (first, second)
}

/// One closing impression per partition, far later than the log.
fn closing_records() -> Vec<Produced> {
    marker_records(CLOSING_MODEL, "2026-11-03T00:00:00Z")
}

/// One impression per partition of user `<model>-<partition>` at `time`:
/// it moves every partition's watermark to `time` less the lateness.
fn marker_records(model: &str, time: &str) -> Vec<Produced> {
    (0..PARTITIONS)
        .map(|partition| {
            let line = format!(
                r#"{{"impression":{{"requestId":"{model}","userId":"{model}-{partition}","itemIds":["x"],"time":"{time}","model":"{model}"}}}}"#
            );
            Produced {
                partition: Some(partition),
                ..event_record(&line)
            }
        })
        .collect()
}

/// Records that must not stall a partition: bytes that are not an event,
/// and an event under another user's key.
fn bad_records() -> Vec<Produced> {
    let mismatched = event_record(
        r#"{"interaction":{"userId":"u-mismatch","itemId":"i","type":"click","time":"2026-11-01T10:00:00Z"}}"#,
    );
    vec![
        Produced {
            key: "u1".into(),
            value: vec![0xff, 0xff, 0xff],
            line: None,
            partition: None,
        },
        Produced {
            key: "someone-else".into(),
            ..mismatched
        },
    ]
}

async fn produce(producer: &FutureProducer, records: &[Produced]) {
    for record in records {
        let mut future = FutureRecord::to(TOPIC)
            .key(&record.key)
            .payload(&record.value);
        if let Some(partition) = record.partition {
            future = future.partition(partition);
        }
        producer
            .send(future, Duration::from_secs(30))
            .await
            .map_err(|(e, _)| e)
            .unwrap();
    }
}

/// A consuming instance of the fleet.
fn instance(broker: &Broker, extra: &[&str]) -> Server {
    // A handover on a loaded 2-core machine (the broker, two tests'
    // instances and their builds) can take longer than the default 30 s;
    // the tests assert that it happens, not how fast.
    instance_waiting(broker, "90s", extra)
}

/// A consuming instance that waits `handover_timeout` for a previous owner.
fn instance_waiting(broker: &Broker, handover_timeout: &str, extra: &[&str]) -> Server {
    let mut args = vec![
        "--wall-clock-advance",
        "false",
        "--shutdown-linger",
        "3s",
        "--kafka-handover-timeout",
        handover_timeout,
    ];
    args.extend_from_slice(extra);
    consuming(broker, &args)
}

/// A consuming instance of `broker` with `settings`, the defaults otherwise
/// (its idle partitions' watermarks follow the wall clock).
fn consuming(broker: &Broker, settings: &[&str]) -> Server {
    let brokers = broker.address();
    let mut args = vec!["--kafka-mode", "consume", "--kafka-brokers", &brokers];
    args.extend_from_slice(settings);
    Server::start(&args)
}

/// `/metrics` of `server`, parsed; `None` once it has stopped answering.
fn scrape(server: &Server) -> Option<BTreeMap<String, f64>> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(server.http).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    write!(stream, "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    if !response.starts_with("HTTP/1.0 200") && !response.starts_with("HTTP/1.1 200") {
        return None;
    }
    let (_, body) = response.split_once("\r\n\r\n")?;
    Some(parse_metrics(body))
}

fn value(metrics: &BTreeMap<String, f64>, key: &str) -> f64 {
    metrics.get(key).copied().unwrap_or(0.0)
}

/// The sum of the series whose keys start with `prefix`.
fn prefixed(metrics: &BTreeMap<String, f64>, prefix: &str) -> f64 {
    metrics
        .iter()
        .filter(|(key, _)| key.starts_with(prefix))
        .map(|(_, v)| v)
        .sum()
}

/// Adds every series of `metrics` into `into`.
fn add(into: &mut BTreeMap<String, f64>, metrics: &BTreeMap<String, f64>) {
    for (key, v) in metrics {
        *into.entry(key.clone()).or_default() += v;
    }
}

/// Polls until `done` holds of the instances' metrics; returns them.
fn wait_for(
    servers: &[&Server],
    what: &str,
    done: impl Fn(&[BTreeMap<String, f64>]) -> bool,
) -> Vec<BTreeMap<String, f64>> {
    let mut last = Vec::new();
    for _ in 0..POLLS {
        let scraped: Option<Vec<_>> = servers.iter().map(|s| scrape(s)).collect();
        if let Some(scraped) = scraped {
            if done(&scraped) {
                return scraped;
            }
            last = scraped;
        }
        std::thread::sleep(POLL);
    }
    for server in servers {
        for line in server.log.try_iter() {
            eprintln!("{}: {line}", server.http);
        }
    }
    let progress: Vec<(f64, f64)> = last
        .iter()
        .map(|m| {
            (
                value(m, "rankwatch_events_received_total"),
                value(m, "rankwatch_kafka_partitions"),
            )
        })
        .collect();
    let answering: Vec<bool> = servers.iter().map(|s| scrape(s).is_some()).collect();
    panic!("timed out waiting for {what}; events received and partitions per instance: {progress:?}; answering: {answering:?}");
}

fn total(scraped: &[BTreeMap<String, f64>], key: &str) -> f64 {
    scraped.iter().map(|m| value(m, key)).sum()
}

/// Sends SIGTERM; returns the instance's metrics once it has handed its
/// partitions over (its last values), then waits for its exit.
fn terminate(server: &mut Server) -> BTreeMap<String, f64> {
    let pid = server.child.id().to_string();
    Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    let mut last = None;
    for _ in 0..POLLS {
        match scrape(server) {
            Some(metrics) if value(&metrics, "rankwatch_kafka_partitions") == 0.0 => {
                last = Some(metrics);
                break;
            }
            _ => std::thread::sleep(POLL),
        }
    }
    let last = last.expect("the departing instance serves its last figures");
    for _ in 0..POLLS {
        if server.child.try_wait().unwrap().is_some() {
            return last;
        }
        std::thread::sleep(POLL);
    }
    panic!("the departing instance did not exit after its linger");
}

/// The sum over partitions of `rankwatch replay` of each partition's records
/// in offset order, as `/metrics` series: per group and K, `_sum` and
/// `_count` of every metric; and the counters. The closing group is left out.
fn replayed(broker: &Broker, lines: &BTreeMap<Vec<u8>, String>) -> BTreeMap<String, f64> {
    let dir = tempfile::tempdir().unwrap();
    let mut series = BTreeMap::new();
    for (partition, records) in broker.records(TOPIC) {
        let log: String = records
            .iter()
            .filter_map(|(_, value)| lines.get(value))
            .map(|line| format!("{line}\n"))
            .collect();
        let path = dir.path().join(format!("partition-{partition}.jsonl"));
        std::fs::write(&path, log).unwrap();
        let report = replay_json(&[path.to_str().unwrap(), "--format", "json"], None);
        add(&mut series, &report_series(&report));
    }
    series
}

/// A replay report as the series `/metrics` would show for it.
fn report_series(report: &Value) -> BTreeMap<String, f64> {
    let mut series = BTreeMap::new();
    let c = &report["counters"];
    let n = |v: &Value| v.as_f64().unwrap_or(0.0);
    series.insert("rankwatch_impressions_total".into(), n(&c["impressions"]));
    series.insert("rankwatch_interactions_total".into(), n(&c["interactions"]));
    series.insert(
        "rankwatch_interactions_credited_total".into(),
        n(&c["credited"]),
    );
    for (reason, count) in c["unattributed"].as_object().unwrap() {
        series.insert(
            format!("rankwatch_interactions_unattributed_total{{reason=\"{reason}\"}}"),
            n(count),
        );
    }
    series.insert(
        "rankwatch_impressions_late_total".into(),
        n(&c["late"]["impressions"]),
    );
    for (kind, key) in [
        ("impression", "impressions"),
        ("interaction", "interactions"),
    ] {
        series.insert(
            format!("rankwatch_duplicates_total{{kind=\"{kind}\"}}"),
            n(&c["duplicates"][key]),
        );
    }
    for (reason, count) in c["rejected"].as_object().unwrap() {
        series.insert(
            format!("rankwatch_events_rejected_total{{reason=\"{reason}\"}}"),
            n(count),
        );
    }
    for group in report["groups"].as_array().unwrap() {
        let (model, surface) = (
            group["model"].as_str().unwrap(),
            group["surface"].as_str().unwrap(),
        );
        if model == CLOSING_MODEL {
            continue;
        }
        let lists = n(&group["lists"]);
        for (key, means) in group["metrics"].as_object().unwrap() {
            // R-precision has no cutoff, and its series no `k` label.
            let (metric, labels) = match key.split_once('@') {
                Some((metric, k)) => (
                    metric,
                    format!("k=\"{k}\",model=\"{model}\",surface=\"{surface}\""),
                ),
                None => (
                    key.as_str(),
                    format!("model=\"{model}\",surface=\"{surface}\""),
                ),
            };
            series.insert(format!("rankwatch_list_{metric}_count{{{labels}}}"), lists);
            series.insert(
                format!("rankwatch_list_{metric}_sum{{{labels}}}"),
                n(&means["all"]) * lists,
            );
        }
    }
    series
}

/// Asserts that `fleet` has every series of `expected`: counts and counters
/// exactly, sums to the last bits that adding in another order changes.
fn assert_fleet_matches(fleet: &BTreeMap<String, f64>, expected: &BTreeMap<String, f64>) {
    let mut compared = 0;
    for (key, want) in expected {
        let got = value(fleet, key);
        if key.contains("_sum{") {
            assert!(
                (got - want).abs() <= 1e-9 * want.abs().max(1.0),
                "{key}: fleet {got}, replay {want}"
            );
        } else {
            assert_eq!(got, *want, "{key}");
        }
        compared += 1;
    }
    assert!(compared > 100, "only {compared} series compared");
}

/// Lines by encoded value, to turn records back into the log they came from.
fn lines_by_value(records: &[Produced]) -> BTreeMap<Vec<u8>, String> {
    records
        .iter()
        .filter_map(|r| r.line.clone().map(|line| (r.value.clone(), line)))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_graceful_handoff_leaves_the_fleet_totals_equal_to_replay_by_partition() {
    let broker = Broker::in_memory();
    broker.create_topic(TOPIC).await;
    let instances = vec![
        instance(&broker, &[]),
        instance(&broker, &[]),
        instance(&broker, &[]),
    ];
    hand_over_exactly(&broker, instances).await;
}

/// Whether the instances have received `events` events and evaluated
/// every list: none is open and no interaction waits.
fn all_evaluated(scraped: &[BTreeMap<String, f64>], events: usize) -> bool {
    total(scraped, "rankwatch_events_received_total") == events as f64
        && total(scraped, "rankwatch_open_impressions") == 0.0
        && total(scraped, "rankwatch_waiting_interactions") == 0.0
}

/// A partition taken with a backlog older than attribution window +
/// lateness is read before its watermark follows the wall clock (on by
/// default): its lists are evaluated as a replay of the partition evaluates
/// them. The first tick, before the first fetch, had moved the watermark to
/// the wall clock, and every impression of the backlog was counted late.
#[tokio::test(flavor = "multi_thread")]
async fn a_backlog_older_than_the_window_is_read_before_the_wall_clock_moves_the_watermark() {
    let broker = Broker::in_memory();
    broker.create_topic(TOPIC).await;
    let records = log_records();
    produce(&broker.producer(), &records).await;
    let server = consuming(&broker, &[]);
    let read = |m: &[BTreeMap<String, f64>]| all_evaluated(m, records.len());
    let scraped = wait_for(&[&server], "the backlog, evaluated", read);
    let expected = replayed(&broker, &lines_by_value(&records));
    // The log's own late impressions, and no more.
    let late = "rankwatch_impressions_late_total";
    assert_eq!(value(&scraped[0], late), expected[late]);
    assert_fleet_matches(&scraped[0], &expected);
}

/// A transactional producer ends each transaction with a commit marker: an
/// offset of the partition that no consumer is handed. A partition read up
/// to its marker is caught up: its lag is 0, its watermark follows the wall
/// clock, and it is evaluated as replay evaluates its records. The next
/// offset had stopped at the marker: a lag of 1 a partition for good (a
/// stall said after `kafka_stall_timeout`), and lists that never closed in
/// a partition taken with a marker at its end.
#[tokio::test(flavor = "multi_thread")]
async fn a_partition_ending_in_a_transaction_marker_is_caught_up() {
    let broker = Broker::in_memory();
    broker.create_topic(TOPIC).await;
    let records = log_records();
    produce(&broker.producer(), &records).await;
    for partition in 0..PARTITIONS {
        broker.append_commit_marker(TOPIC, partition);
    }
    let server = consuming(&broker, &["--kafka-stall-timeout", "1s"]);
    let read = |m: &[BTreeMap<String, f64>]| {
        all_evaluated(m, records.len()) && total(m, "rankwatch_kafka_lag_records") == 0.0
    };
    wait_for(&[&server], "the transaction, evaluated", read);
    std::thread::sleep(Duration::from_secs(2)); // past the stall timeout
    let scraped = scrape(&server).unwrap();
    assert_eq!(value(&scraped, "rankwatch_kafka_lag_records"), 0.0);
    assert_eq!(value(&scraped, "rankwatch_kafka_stalled_partitions"), 0.0);
    assert_fleet_matches(&scraped, &replayed(&broker, &lines_by_value(&records)));
}

/// Creates the event topic, has one instance read the first half of the
/// log and hand it over (SIGTERM); returns both halves and that
/// instance's last figures.
async fn first_half_handed_over(
    broker: &Broker,
) -> (Vec<Produced>, Vec<Produced>, BTreeMap<String, f64>) {
    broker.create_topic(TOPIC).await;
    let (first, second) = log_in_halves();
    let mut instance = instance(broker, &[]);
    produce(&broker.producer(), &first).await;
    wait_for(&[&instance], "the first half", |m| {
        total(m, "rankwatch_events_received_total") == first.len() as f64
    });
    wait_until_committed(broker);
    let figures = terminate(&mut instance);
    (first, second, figures)
}

/// Once `server` has taken every partition, produces `second` and waits
/// until it has read as many events, and 2 s more for any it would read
/// again; returns its figures then.
async fn second_half_read(
    broker: &Broker,
    server: &Server,
    second: &[Produced],
) -> BTreeMap<String, f64> {
    wait_for(&[server], "the partitions", |m| {
        total(m, "rankwatch_kafka_partitions") == f64::from(PARTITIONS)
    });
    produce(&broker.producer(), second).await;
    wait_for(&[server], "the second half", |m| {
        total(m, "rankwatch_events_received_total") >= second.len() as f64
    });
    std::thread::sleep(Duration::from_secs(2)); // for what reading from the start would add
    scrape(server).unwrap()
}

/// An instance whose state topic holds no snapshot, though the group has
/// read the partitions (`kafka_state_topic` renamed, or the topic recreated
/// or lost), reads on from the group's committed offsets, counting each
/// partition's state as not restored. It had read every partition from its
/// start again, counting the first half twice with no failure counted.
#[tokio::test(flavor = "multi_thread")]
async fn a_state_topic_without_snapshots_reads_on_from_the_committed_offsets() {
    let broker = Broker::in_memory();
    let (first, second, before) = first_half_handed_over(&broker).await;
    let received = "rankwatch_events_received_total";
    let after = instance(&broker, &["--kafka-state-topic", "elsewhere.state"]);
    let metrics = second_half_read(&broker, &after, &second).await;
    let all = (first.len() + second.len()) as f64;
    assert_eq!(value(&before, received) + value(&metrics, received), all);
    let first_values: BTreeSet<&[u8]> = first.iter().map(|r| r.value.as_slice()).collect();
    let partitions_read = broker
        .records(TOPIC)
        .values()
        .filter(|records| {
            records
                .iter()
                .any(|(_, v)| first_values.contains(v.as_slice()))
        })
        .count();
    assert_eq!(
        value(&metrics, "rankwatch_kafka_restore_failures_total"),
        partitions_read as f64,
        "each partition the first half went to"
    );
}

/// A partition whose snapshot cannot be restored is read on from the
/// group's committed offset, and an owner that reads nothing of it before
/// handing it over hands it over at that offset. It had taken offset 0 for
/// its own until a record came, committed 0 and handed over at 0, so that
/// the next owner counted the whole partition again (and called the
/// records before its first offset lost).
#[tokio::test(flavor = "multi_thread")]
async fn a_quiet_partition_whose_snapshot_cannot_be_restored_is_handed_over_where_it_was_read() {
    let broker = Broker::in_memory();
    let (first, second, a) = first_half_handed_over(&broker).await;
    let received = "rankwatch_events_received_total";
    for partition in 0..PARTITIONS {
        write_unreadable_manifest(&broker, partition).await;
    }

    let mut b = instance(&broker, &[]);
    let taken = wait_for(&[&b], "the partitions", |m| {
        total(m, "rankwatch_kafka_partitions") == f64::from(PARTITIONS)
    });
    assert_eq!(
        value(&taken[0], "rankwatch_kafka_restore_failures_total"),
        f64::from(PARTITIONS)
    );
    std::thread::sleep(Duration::from_secs(3)); // a few checkpoints of the quiet partitions
    let b = terminate(&mut b);
    assert_eq!(value(&b, received), 0.0, "nothing new to read");

    let c = second_half_read(&broker, &instance(&broker, &[]), &second).await;
    assert_eq!(value(&a, received), first.len() as f64);
    assert_eq!(
        value(&c, received),
        second.len() as f64,
        "the second half alone"
    );
    assert_eq!(
        value(&c, "rankwatch_kafka_records_expired_unread_total"),
        0.0,
        "no record was lost"
    );
}

/// Writes, as the last manifest of `partition`, one handed over by an
/// owner gone from the group that names a snapshot of a format this build
/// does not read: restoring it fails.
async fn write_unreadable_manifest(broker: &Broker, partition: i32) {
    let unreadable = Manifest {
        version: u32::MAX,
        chunks: 1,
        handed_over: true,
        owner: "rankwatch-gone".to_owned(),
        generation: None,
        ..written_manifest()
    };
    write_manifest(broker, partition, unreadable).await;
}

/// A partition's snapshot taken by an instance with another attribution
/// window is restored, and the instance says that its figures mix lists
/// joined under both (they had mixed silently).
#[tokio::test(flavor = "multi_thread")]
async fn a_snapshot_taken_under_another_attribution_window_is_restored_with_a_warning() {
    let broker = Broker::in_memory();
    broker.create_topic(TOPIC).await;
    let (first, _) = log_in_halves();
    let received = "rankwatch_events_received_total";
    let mut before = instance(&broker, &[]);
    produce(&broker.producer(), &first).await;
    wait_for(&[&before], "the first half", |m| {
        total(m, received) == first.len() as f64
    });
    terminate(&mut before);
    let after = instance(&broker, &["--attribution-window", "10m"]);
    wait_for_line(&after, "attribution_window was 5m, is 10m");
    wait_for(&[&after], "the partitions", |m| {
        total(m, "rankwatch_kafka_partitions") == f64::from(PARTITIONS)
    });
    let metrics = scrape(&after).unwrap();
    assert_eq!(
        value(&metrics, "rankwatch_kafka_restore_failures_total"),
        0.0
    );
}

/// Records that Java's partitioner put where their key falls (librdkafka's
/// `murmur2_random`, as the relay and the Python client produce) are not
/// counted; those of librdkafka's default partitioner (CRC32), which may
/// split a user's events between partitions whose joins never meet, mostly
/// fall elsewhere and are counted.
#[tokio::test(flavor = "multi_thread")]
async fn records_off_the_partition_javas_partitioner_gives_are_counted() {
    let broker = Broker::in_memory();
    broker.create_topic(TOPIC).await;
    let server = instance(&broker, &[]);
    let records = log_records();
    let java: FutureProducer = broker
        .client()
        .set("partitioner", "murmur2_random")
        .create()
        .unwrap();
    produce(&java, &records).await;
    let received = "rankwatch_events_received_total";
    let mismatches = "rankwatch_kafka_partition_mismatches_total";
    let scraped = wait_for(&[&server], "the records of Java's partitioner", |m| {
        total(m, received) == records.len() as f64
    });
    assert_eq!(value(&scraped[0], mismatches), 0.0);
    produce(&broker.producer(), &records).await;
    let scraped = wait_for(&[&server], "the records of librdkafka's default", |m| {
        total(m, received) == 2.0 * records.len() as f64
    });
    let counted = value(&scraped[0], mismatches);
    assert!(counted > records.len() as f64 / 2.0, "{counted}");
}

/// An idle partition whose watermark follows the wall clock writes no
/// snapshot while nothing of its open state changes: each tick had marked
/// it changed, and an idle instance wrote every open list to the state
/// topic every second.
#[tokio::test(flavor = "multi_thread")]
async fn an_idle_partition_writes_no_snapshot_while_its_open_lists_stay_as_they_are() {
    let broker = Broker::in_memory();
    broker.create_topic(TOPIC).await;
    let server = consuming(&broker, &["--attribution-window", "1h"]);
    wait_for(&[&server], "the partitions", |m| {
        total(m, "rankwatch_kafka_partitions") == f64::from(PARTITIONS)
    });
    let now = rankwatch::event::format_rfc3339(rankwatch::clock::wall_clock());
    let lists: Vec<Produced> = (0..40)
        .map(|i| event_record(&format!(r#"{{"impression":{{"requestId":"r{i}","userId":"u{i}","itemIds":["a","b"],"time":"{now}"}}}}"#)))
        .collect();
    produce(&broker.producer(), &lists).await;
    wait_for(&[&server], "the lists, open", |m| {
        total(m, "rankwatch_open_impressions") == lists.len() as f64
    });
    std::thread::sleep(Duration::from_secs(3)); // their snapshots written
    let written = || {
        broker
            .records(STATE_TOPIC)
            .values()
            .map(Vec::len)
            .sum::<usize>()
    };
    let before = written();
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(
        written(),
        before,
        "records written to the state topic while idle"
    );
}

/// With `instances` consuming from `broker`: produces half the log, stops
/// the first instance with SIGTERM, starts another, produces the rest, and
/// asserts that the fleet's totals equal the sum of replays by partition
/// with no list counted twice.
async fn hand_over_exactly(broker: &Broker, mut instances: Vec<Server>) {
    let log = log_records();
    let (first, second) = log.split_at(log.len() / 2);
    let mut first = first.to_vec();
    first.extend(bad_records());
    let mut second = second.to_vec();
    second.extend(closing_records());
    let producer = broker.producer();

    produce(&producer, &first).await;
    let received = "rankwatch_events_received_total";
    wait_for(
        &instances.iter().collect::<Vec<_>>(),
        "the first half",
        |m| total(m, received) == first.len() as f64,
    );

    let a_last = terminate(&mut instances[0]);
    instances.remove(0);
    instances.push(instance(broker, &[]));
    let live: Vec<&Server> = instances.iter().collect();
    let shared = wait_for(&live, "the partitions to be shared again", |m| {
        total(m, "rankwatch_kafka_partitions") == f64::from(PARTITIONS)
    });
    for metrics in &shared {
        // What the alert on unowned partitions compares the owned ones with.
        let seen = value(metrics, "rankwatch_kafka_event_topic_partitions");
        assert_eq!(seen, f64::from(PARTITIONS));
    }
    produce(&producer, &second).await;
    let expected_received = first.len() + second.len();
    let live = wait_for(&live, "the second half", |m| {
        total(m, received) + value(&a_last, received) == expected_received as f64
    });

    let mut fleet = a_last.clone();
    for metrics in &live {
        add(&mut fleet, metrics);
    }
    let all: Vec<Produced> = first.iter().chain(&second).cloned().collect();
    assert_fleet_matches(&fleet, &replayed(broker, &lines_by_value(&all)));
    assert_eq!(
        value(
            &fleet,
            "rankwatch_events_rejected_total{reason=\"undecodable\"}"
        ),
        1.0
    );
    assert_eq!(value(&fleet, "rankwatch_kafka_key_mismatches_total"), 1.0);
    assert_eq!(
        value(&fleet, "rankwatch_open_impressions"),
        f64::from(PARTITIONS),
        "only the closing lists are open"
    );
    assert!(value(&a_last, "rankwatch_kafka_partitions_revoked_total") > 0.0);
    assert_eq!(
        value(&fleet, "rankwatch_kafka_handover_timeouts_total"),
        0.0,
        "every partition was taken from its previous owner's handover"
    );
    assert!(
        live.iter().all(|m| !m
            .keys()
            .any(|k| k.starts_with("rankwatch_lists_recounted_total"))),
        "no list was counted twice"
    );
}

/// Polls until the group has committed every partition up to its end:
/// the instances have evaluated every record.
fn wait_until_committed(broker: &Broker) {
    let consumer: BaseConsumer = broker
        .client()
        .set("group.id", "rankwatch")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut ends = TopicPartitionList::new();
    let mut partitions = TopicPartitionList::new();
    for partition in 0..PARTITIONS {
        let (_, high) = consumer
            .fetch_watermarks(TOPIC, partition, Duration::from_secs(10))
            .unwrap();
        ends.add_partition_offset(TOPIC, partition, Offset::Offset(high))
            .unwrap();
        partitions.add_partition(TOPIC, partition);
    }
    for _ in 0..POLLS {
        let committed = consumer.committed_offsets(partitions.clone(), Duration::from_secs(10));
        if committed.is_ok_and(|c| {
            c.elements()
                .iter()
                .zip(ends.elements())
                .all(|(c, e)| c.offset() == e.offset())
        }) {
            return;
        }
        std::thread::sleep(POLL);
    }
    panic!("the group did not commit every partition to its end");
}

/// Asserts that each group's list counts in `fleet`, less the lists it
/// counted again (`rankwatch_lists_recounted_total`), equal `expected`'s;
/// returns the lists counted again (those of nDCG@10's series).
fn assert_counts_less_recounted_match(
    fleet: &BTreeMap<String, f64>,
    expected: &BTreeMap<String, f64>,
) -> f64 {
    let mut recounted_total = 0.0;
    let mut compared = 0;
    for (key, want) in expected {
        let Some(rest) = key.strip_prefix("rankwatch_list_") else {
            continue;
        };
        let Some((_, labels)) = rest.split_once("_count{") else {
            continue;
        };
        let group = labels
            .trim_end_matches('}')
            .split(',')
            .filter(|l| !l.starts_with("k="))
            .collect::<Vec<_>>()
            .join(",");
        let recounted = value(
            fleet,
            &format!("rankwatch_lists_recounted_total{{{group}}}"),
        );
        assert_eq!(
            value(fleet, key) - recounted,
            *want,
            "{key}: every list once, after the recounted ones"
        );
        compared += 1;
        if key.starts_with("rankwatch_list_ndcg_count{k=\"10\"") {
            recounted_total += recounted;
        }
    }
    assert!(compared > 10);
    recounted_total
}

#[tokio::test(flavor = "multi_thread")]
async fn after_kill_9_no_open_list_is_lost_and_the_lists_counted_again_are_exported() {
    let broker = Broker::in_memory();
    broker.create_topic(TOPIC).await;
    let log = log_records();
    let (first, second) = log.split_at(log.len() / 2);
    // Past the attribution window of every list so far: the instance that
    // dies has finalized lists in each of its partitions.
    let mut first = first.to_vec();
    first.extend(marker_records("push", "2026-11-01T10:20:00Z"));
    let first = &first[..];
    let mut second = second.to_vec();
    second.extend(closing_records());
    let producer = broker.producer();

    // The instance that dies never commits on its own: every list it
    // finalized is counted again by the next owners, and exported as such.
    let mut a = instance(&broker, &["--kafka-commit-interval", "1h"]);
    let b = instance(&broker, &[]);
    let c = instance(&broker, &[]);
    produce(&producer, first).await;
    let received = "rankwatch_events_received_total";
    let partitions = "rankwatch_kafka_partitions";
    let scraped = wait_for(&[&a, &b, &c], "the first half on all three", |m| {
        total(m, received) == first.len() as f64 && m.iter().all(|m| value(m, partitions) > 0.0)
    });
    let a_last = scraped[0].clone();
    let finalized_by_a = prefixed(&a_last, "rankwatch_lists_finalized_total");
    assert!(finalized_by_a > 0.0);
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    // A replacement starts once the dead one's session (10 s) has expired,
    // as a Deployment's would; tansu 0.6 rebalances on the replacement's
    // join rather than on the survivors' heartbeats.
    std::thread::sleep(Duration::from_secs(12));
    let d = instance(&broker, &[]);

    wait_for(
        &[&b, &c, &d],
        "the dead instance's partitions to be taken",
        |m| total(m, partitions) == f64::from(PARTITIONS),
    );
    produce(&producer, &second).await;
    wait_until_committed(&broker);
    let live = wait_for(&[&b, &c, &d], "the figures", |_| true);

    let mut fleet = a_last.clone();
    for metrics in &live {
        add(&mut fleet, metrics);
    }
    let all: Vec<Produced> = first.iter().chain(&second).cloned().collect();
    let expected = replayed(&broker, &lines_by_value(&all));
    assert_eq!(
        total(&live, "rankwatch_open_impressions"),
        f64::from(PARTITIONS),
        "only the closing lists are open: none was lost"
    );
    let recounted_total = assert_counts_less_recounted_match(&fleet, &expected);
    assert!(
        recounted_total > 0.0,
        "the dead instance's lists were counted again"
    );
    assert!(
        recounted_total <= finalized_by_a,
        "at most what the dead instance finalized since its last commit"
    );
    assert_eq!(
        value(&fleet, "rankwatch_kafka_handover_timeouts_total"),
        0.0,
        "an owner that died is not waited for"
    );
}

/// An owner killed after its idle partitions' watermarks followed the wall
/// clock had closed their lists since its last snapshot: the next owner
/// closes those lists again the same way, and counts them as recounted, as
/// it does the lists its records finalize again.
#[tokio::test(flavor = "multi_thread")]
async fn after_kill_9_the_lists_the_wall_clock_closed_again_are_counted_as_recounted() {
    let broker = Broker::in_memory();
    broker.create_topic(TOPIC).await;
    let log = log_records();
    // Produced before any instance reads: a partition's watermark follows
    // the wall clock only once its backlog is read, so every list is
    // evaluated with all of its interactions, as replay evaluates it.
    produce(&broker.producer(), &log).await;
    let expected = replayed(&broker, &lines_by_value(&log));
    let open = "rankwatch_open_impressions";
    let received = "rankwatch_events_received_total";

    // It never commits on its own: its only snapshots are its claims.
    let a = consuming(&broker, &["--kafka-commit-interval", "1h"]);
    let a_last = wait_for(&[&a], "every list closed by the wall clock", |m| {
        total(m, received) == log.len() as f64 && total(m, open) == 0.0
    })
    .remove(0);
    let finalized_by_a = prefixed(&a_last, "rankwatch_lists_finalized_total");
    signal(&a, "KILL");
    // Past the dead one's session timeout (10 s), as in the test above.
    std::thread::sleep(Duration::from_secs(12));
    let b = consuming(&broker, &[]);
    let b_last = wait_for(&[&b], "every list closed again", |m| {
        total(m, "rankwatch_kafka_partitions") == f64::from(PARTITIONS)
            && total(m, received) == log.len() as f64
            && total(m, open) == 0.0
    })
    .remove(0);

    let mut fleet = a_last;
    add(&mut fleet, &b_last);
    let recounted = assert_counts_less_recounted_match(&fleet, &expected);
    assert_eq!(
        prefixed(&b_last, "rankwatch_lists_recounted_total"),
        finalized_by_a,
        "every list the dead owner finalized, counted again"
    );
    assert!(recounted > 0.0);
}

/// Sends `signal` (`STOP`, `KILL`, …) to `server`'s process.
fn signal(server: &Server, signal: &str) {
    let pid = server.child.id().to_string();
    let sent = Command::new("kill")
        .args([&format!("-{signal}"), &pid])
        .status();
    assert!(sent.unwrap().success(), "kill -{signal} {pid}");
}

/// Waits until `server` logs a line containing `text`.
fn wait_for_line(server: &Server, text: &str) {
    let deadline = std::time::Instant::now() + POLL * POLLS;
    while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
        match server.log.recv_timeout(left) {
            Ok(line) if line.contains(text) => return,
            Ok(_) => {}
            Err(_) => break,
        }
    }
    panic!("the instance did not log {text:?}");
}

/// An owner paused past its session timeout, whose partitions the group
/// gave to another instance meanwhile, lets them go when it comes back,
/// writing no handover. It had written one after the new owner's claims,
/// so that an owner after a `kill -9` of the new one would have taken the
/// stale handover for the last word and counted the new owner's lists again
/// without saying so.
#[tokio::test(flavor = "multi_thread")]
async fn an_owner_back_after_its_partitions_were_given_away_writes_no_handover() {
    let broker = Broker::in_memory();
    broker.create_topic(TOPIC).await;
    let (first, _) = log_in_halves();
    let a = instance(&broker, &[]);
    produce(&broker.producer(), &first).await;
    wait_for(&[&a], "the first half", |m| {
        total(m, "rankwatch_events_received_total") == first.len() as f64
    });
    wait_until_committed(&broker);
    let stopped = std::time::Instant::now();
    signal(&a, "STOP");
    let b = instance_waiting(&broker, "5s", &[]);
    wait_for(&[&b], "the partitions", |m| {
        total(m, "rankwatch_kafka_partitions") == f64::from(PARTITIONS)
    });
    let before = manifests(&broker);
    let claims: BTreeMap<i32, usize> = before
        .iter()
        .map(|(partition, written)| (*partition, written.len()))
        .collect();
    let claimant = before[&0].last().unwrap().owner.clone();
    // Paused past the session timeout of 10 s, then some time to hear of it.
    std::thread::sleep(Duration::from_secs(12).saturating_sub(stopped.elapsed()));
    signal(&a, "CONT");
    std::thread::sleep(Duration::from_secs(10));

    for (partition, written) in manifests(&broker) {
        let since_claims = &written[claims[&partition]..];
        assert!(
            !since_claims
                .iter()
                .any(|m| m.handed_over && m.owner != claimant),
            "partition {partition}: a handover by the paused owner after the claims"
        );
    }
    let a = scrape(&a).expect("the paused owner answers again");
    assert_eq!(
        value(&a, "rankwatch_kafka_partitions_lost_total"),
        f64::from(PARTITIONS)
    );
}

/// The manifests of each partition of the state topic, in the order written.
fn manifests(broker: &Broker) -> BTreeMap<i32, Vec<Manifest>> {
    broker
        .records(STATE_TOPIC)
        .into_iter()
        .map(|(partition, records)| {
            let written = records
                .iter()
                .filter(|(key, _)| key == b"manifest")
                .map(|(_, value)| postcard::take_from_bytes::<Manifest>(value).unwrap().0)
                .collect();
            (partition, written)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_broker_restart_while_a_partition_is_taken_loses_no_open_list() {
    let mut broker = Broker::on_disk();
    broker.create_topic(TOPIC).await;
    let (first, second) = log_in_halves();
    let first = &first[..];
    let producer = broker.producer();

    // The first owner checkpoints every partition at the end of the first
    // half, then stops answering: still a member of the group, it is
    // waited for by the next owner, which is assigned every partition.
    let mut a = instance(&broker, &[]);
    produce(&producer, first).await;
    let received = "rankwatch_events_received_total";
    wait_for(&[&a], "the first half", |m| {
        total(m, received) == first.len() as f64
    });
    wait_until_committed(&broker);
    let a_last = scrape(&a).expect("the first owner answers");
    signal(&a, "STOP");
    let b = instance_waiting(&broker, "20s", &[]);
    wait_for_line(&b, "partitions assigned");
    // The broker goes away while the new owner waits for the handover, and
    // comes back: reading the state topic fails meanwhile.
    broker.kill();
    std::thread::sleep(Duration::from_secs(5));
    broker.run();
    signal(&a, "KILL");
    a.child.wait().unwrap();

    wait_for(&[&b], "every partition to be taken", |m| {
        total(m, "rankwatch_kafka_partitions") == f64::from(PARTITIONS)
    });
    produce(&producer, &second).await;
    wait_until_committed(&broker);
    let live = wait_for(&[&b], "the figures", |_| true);
    assert_eq!(
        value(&live[0], "rankwatch_kafka_restore_failures_total"),
        0.0,
        "every partition's state was restored"
    );
    assert_eq!(
        value(&live[0], "rankwatch_open_impressions"),
        f64::from(PARTITIONS),
        "only the closing lists are open: none was lost"
    );
    let all: Vec<Produced> = first.iter().chain(&second).cloned().collect();
    let expected = replayed(&broker, &lines_by_value(&all));
    let mut fleet = a_last;
    add(&mut fleet, &live[0]);
    assert_counts_less_recounted_match(&fleet, &expected);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_relay_acknowledges_only_what_the_broker_stored() {
    use tokio_stream::wrappers::ReceiverStream;
    let mut broker = Broker::on_disk();
    broker.create_topic(TOPIC).await;
    let brokers = broker.address();
    let relay = Server::start(&[
        "--kafka-mode",
        "relay",
        "--kafka-brokers",
        &brokers,
        "--kafka-delivery-timeout",
        "3s",
    ]);
    let log = log_records();
    let batches: Vec<EventBatch> = log
        .chunks(50)
        .enumerate()
        .map(|(i, chunk)| EventBatch {
            sequence: i as u64,
            events: chunk
                .iter()
                .map(|r| event_from_json(r.line.as_deref().unwrap()).unwrap())
                .collect(),
        })
        .collect();
    let kill_after = batches.len() / 3;
    let (mut acked, mut unavailable, mut attempts) = (0, 0, 0);
    let mut accepted: Vec<Vec<u8>> = Vec::new();
    while acked < batches.len() {
        attempts += 1;
        if attempts == 120 {
            for line in relay.log.try_iter() {
                eprintln!("relay: {line}");
            }
            panic!(
                "the relay never took the rest: {acked} of {} batches",
                batches.len()
            );
        }
        let mut client = relay.collector().await;
        let (send, requests) = tokio::sync::mpsc::channel(1);
        let mut acks = match client.ingest(ReceiverStream::new(requests)).await {
            Ok(response) => response.into_inner(),
            Err(status) => panic!("ingest refused: {status}"),
        };
        while acked < batches.len() {
            if acked == kill_after && unavailable == 0 {
                broker.kill();
            }
            send.send(batches[acked].clone()).await.unwrap();
            match acks.message().await {
                Ok(Some(ack)) => {
                    assert_eq!(ack.sequence, batches[acked].sequence);
                    let rejected: Vec<u32> = ack.rejections.iter().map(|r| r.index).collect();
                    accepted.extend(
                        batches[acked]
                            .events
                            .iter()
                            .enumerate()
                            .filter(|(i, _)| !rejected.contains(&(*i as u32)))
                            .map(|(_, event)| event.encode_to_vec()),
                    );
                    acked += 1;
                }
                Ok(None) => break,
                Err(status) => {
                    assert_eq!(status.code(), tonic::Code::Unavailable, "{status}");
                    unavailable += 1;
                    if broker.child.is_none() {
                        broker.run();
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    break;
                }
            }
        }
    }
    assert!(
        unavailable > 0,
        "the stream failed while the broker was down"
    );

    // Every acknowledged event is in the topic; resent batches may be there twice.
    let records = broker.records(TOPIC);
    let stored: std::collections::BTreeSet<&Vec<u8>> =
        records.values().flatten().map(|(_, value)| value).collect();
    let missing = accepted.iter().filter(|v| !stored.contains(v)).count();
    assert_eq!(missing, 0, "every acknowledged event is in the topic");
    assert!(accepted.len() > log.len() / 2);
    let sent = lines_by_value(&log);

    // The relay counts what it took, as `serve` does: the accepted events
    // the broker stored and the client was told of, once each (a batch that
    // failed counts when it is sent again and stored).
    let relayed = scrape(&relay).expect("the relay answers");
    let taken = value(&relayed, "rankwatch_events_accepted_total");
    assert_eq!(
        taken,
        accepted.len() as f64,
        "accepted against acknowledged"
    );
    assert_eq!(
        value(&relayed, "rankwatch_events_received_total"),
        taken + prefixed(&relayed, "rankwatch_events_rejected_total")
    );

    // The fleet's figures of what was stored are those of replay by partition.
    produce(&broker.producer(), &closing_records()).await;
    let consumer = instance(&broker, &[]);
    wait_until_committed(&broker);
    let fleet = wait_for(&[&consumer], "the figures", |_| true).remove(0);
    let mut lines = sent;
    lines.extend(lines_by_value(&closing_records()));
    assert_fleet_matches(&fleet, &replayed(&broker, &lines));
}

/// A snapshot of more chunks than librdkafka's queue holds at once (here 2
/// records; by default a gigabyte) is written all the same: a full queue is
/// waited out, not taken for a failed snapshot.
#[tokio::test(flavor = "multi_thread")]
async fn a_snapshot_larger_than_the_producer_queue_is_written_whole() {
    let broker = Broker::in_memory();
    broker.create_topic("snapshots.state").await;
    let mut client = broker.client();
    client.set("queue.buffering.max.messages", "2");
    let runtime = tokio::runtime::Handle::current();
    let payload_bytes = 5 * CHUNK_BYTES + 1;
    let (written, last) = tokio::task::spawn_blocking(move || {
        let state = StateTopic::connect(&client, "snapshots.state", "snapshots", runtime).unwrap();
        let mut payload = Chunks::default();
        payload.try_extend(&vec![7; payload_bytes]).unwrap();
        let manifest = Manifest {
            version: 0,
            fingerprint: "fp".to_owned(),
            id: 9,
            slot: 1,
            chunks: 0,
            first_chunk: 0,
            checksum: 0,
            next_offset: 42,
            handed_over: true,
            owner: "rankwatch-test".to_owned(),
            generation: Some(4),
            join_rules: Some(rankwatch::state::JoinRules::default()),
        };
        let written = state.write_all(vec![Pending::new(3, Some(payload), manifest)]);
        (written, state.last_manifest(3).unwrap())
    })
    .await
    .unwrap();
    let [(3, Ok((manifest, bytes)))] = written.as_slice() else {
        panic!(
            "the snapshot was not written: {:?}",
            written
                .iter()
                .map(|(p, w)| (p, w.as_ref().err().map(ToString::to_string)))
                .collect::<Vec<_>>()
        );
    };
    assert_eq!(*bytes, payload_bytes);
    assert_eq!(manifest.chunks, 6);
    assert_eq!(manifest.next_offset, 42);
    let stored = last.expect("a manifest in the state topic").manifest;
    assert_eq!(&stored, manifest);
}

const STATE_TOPIC: &str = "rankwatch.events.state";

/// `topic`'s partition count (0: it does not exist) and `cleanup.policy`, as the broker reports them.
async fn topic_facts(broker: &Broker, topic: &str) -> (usize, Option<String>) {
    use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
    use rdkafka::client::DefaultClientContext;
    let admin: AdminClient<DefaultClientContext> = broker
        .client()
        .set("allow.auto.create.topics", "false")
        .create()
        .unwrap();
    let metadata = admin
        .inner()
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .unwrap();
    let partitions = metadata
        .topics()
        .iter()
        .find(|t| t.name() == topic && t.error().is_none())
        .map_or(0, |t| t.partitions().len());
    if partitions == 0 {
        return (0, None);
    }
    let configs = admin
        .describe_configs([&ResourceSpecifier::Topic(topic)], &AdminOptions::new())
        .await
        .unwrap();
    let policy = configs
        .into_iter()
        .flatten()
        .flat_map(|resource| resource.entries)
        .find(|entry| entry.name == "cleanup.policy")
        .and_then(|entry| entry.value);
    (partitions, policy)
}

/// Creates `topic` with `partitions` and `configs`, as an operator or a
/// broker's auto-creation would have.
async fn create_topic_with(
    broker: &Broker,
    topic: &str,
    partitions: i32,
    configs: &[(&str, &str)],
) {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    use rdkafka::client::DefaultClientContext;
    let admin: AdminClient<DefaultClientContext> = broker.client().create().unwrap();
    let mut new = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
    for (key, value) in configs {
        new = new.set(key, value);
    }
    let results = admin
        .create_topics([&new], &AdminOptions::new())
        .await
        .unwrap();
    assert!(results.iter().all(Result::is_ok), "{results:?}");
}

/// Asserts that no client of rankwatch asked `broker` to auto-create a topic.
fn assert_no_auto_creation_asked(broker: &Broker) {
    let proxy = broker.proxy.as_ref().expect("an auto-creating broker");
    assert_eq!(
        proxy.asks_of_rankwatch(),
        [],
        "topics named with auto-creation allowed"
    );
}

/// `/readyz` of `server`: its status and body.
fn readiness(server: &Server) -> (u16, String) {
    server.get("/readyz")
}

#[tokio::test(flavor = "multi_thread")]
async fn the_auto_creating_broker_creates_a_missing_topic_that_a_metadata_request_names() {
    let broker = Broker::auto_creating();
    let producer: rdkafka::producer::FutureProducer = broker.client().create().unwrap();
    let record = FutureRecord::to("named.by.a.producer")
        .key("k")
        .payload("v");
    producer
        .send(record, Duration::from_secs(30))
        .await
        .map_err(|(e, _)| e)
        .unwrap();
    assert_eq!(topic_facts(&broker, "named.by.a.producer").await, (4, None));
}

#[tokio::test(flavor = "multi_thread")]
async fn instances_started_at_once_on_an_auto_creating_broker_hand_over_exactly() {
    let broker = Broker::auto_creating();
    broker.create_topic(TOPIC).await;
    let instances = vec![
        instance(&broker, &[]),
        instance(&broker, &[]),
        instance(&broker, &[]),
    ];
    hand_over_exactly(&broker, instances).await;
    assert_eq!(
        topic_facts(&broker, STATE_TOPIC).await,
        (PARTITIONS as usize, Some("compact".to_owned())),
        "the state topic is created compacted, with the event topic's partitions"
    );
    assert_no_auto_creation_asked(&broker);
}

/// Starts an instance on `broker` whose state topic is unusable; asserts
/// that it refuses to consume, says so on /readyz, in its gauge and in its
/// log, naming `problem`, and evaluates nothing of what is produced.
async fn assert_refuses_to_consume(broker: &Broker, problem: &str) {
    let server = instance(broker, &[]);
    let mut refused = None;
    for _ in 0..POLLS {
        let (status, body) = readiness(&server);
        if status == 503 && body.contains(STATE_TOPIC) {
            refused = Some(body);
            break;
        }
        std::thread::sleep(POLL);
    }
    let body = refused.expect("/readyz says the state topic is unusable");
    assert!(body.contains(problem), "{body}");
    let producer = broker.producer();
    produce(&producer, &log_records()[..20]).await;
    for _ in 0..20 {
        let metrics = scrape(&server).unwrap();
        assert_eq!(value(&metrics, "rankwatch_kafka_topics_usable"), 0.0);
        assert_eq!(
            value(&metrics, "rankwatch_events_received_total"),
            0.0,
            "nothing is evaluated"
        );
        assert_eq!(value(&metrics, "rankwatch_kafka_partitions"), 0.0);
        std::thread::sleep(POLL);
    }
    let logged: Vec<String> = server.log.try_iter().collect();
    assert!(
        logged
            .iter()
            .any(|line| line.contains("NOT READY") && line.contains(STATE_TOPIC)),
        "{logged:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_state_topic_with_fewer_partitions_than_the_event_topic_is_refused() {
    let broker = Broker::auto_creating();
    broker.create_topic(TOPIC).await;
    // As a broker auto-creates it: its default partition count.
    create_topic_with(&broker, STATE_TOPIC, 4, &[("cleanup.policy", "compact")]).await;
    assert_refuses_to_consume(&broker, "kafka-topics.sh").await;
    assert_no_auto_creation_asked(&broker);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_state_topic_without_compaction_is_refused() {
    let broker = Broker::auto_creating();
    broker.create_topic(TOPIC).await;
    create_topic_with(&broker, STATE_TOPIC, PARTITIONS, &[]).await;
    assert_refuses_to_consume(&broker, "cleanup.policy=compact").await;
    assert_no_auto_creation_asked(&broker);
}

#[tokio::test(flavor = "multi_thread")]
async fn instances_started_before_the_event_topic_exists_wait_for_it_and_hand_over_exactly() {
    let broker = Broker::auto_creating();
    let instances = vec![instance(&broker, &[]), instance(&broker, &[])];
    for server in &instances {
        let mut waiting = false;
        for _ in 0..POLLS {
            let (status, body) = readiness(server);
            if status == 503 && body.contains("does not exist") {
                waiting = true;
                break;
            }
            std::thread::sleep(POLL);
        }
        assert!(waiting, "/readyz says the event topic does not exist");
    }
    assert_eq!(
        topic_facts(&broker, TOPIC).await,
        (0, None),
        "not auto-created"
    );
    broker.create_topic(TOPIC).await;
    let mut instances = instances;
    instances.push(instance(&broker, &[]));
    wait_for(
        &instances.iter().collect::<Vec<_>>(),
        "the partitions to be taken",
        |m| total(m, "rankwatch_kafka_partitions") == f64::from(PARTITIONS),
    );
    hand_over_exactly(&broker, instances).await;
    assert_eq!(
        topic_facts(&broker, STATE_TOPIC).await,
        (PARTITIONS as usize, Some("compact".to_owned()))
    );
    assert_no_auto_creation_asked(&broker);
}

#[tokio::test(flavor = "multi_thread")]
async fn five_joins_and_leaves_while_events_stream_keep_the_totals_exact() {
    let broker = Broker::auto_creating();
    broker.create_topic(TOPIC).await;
    let producer = broker.producer();
    let log = log_records();
    let chunks: Vec<&[Produced]> = log.chunks(log.len().div_ceil(6)).collect();
    let mut live = vec![instance(&broker, &[]), instance(&broker, &[])];
    let mut departed: Vec<BTreeMap<String, f64>> = Vec::new();
    let received = "rankwatch_events_received_total";
    let mut sent = 0;
    for chunk in &chunks[..5] {
        produce(&producer, chunk).await;
        sent += chunk.len();
        // One joins while the chunk is read, then the oldest leaves.
        live.push(instance(&broker, &[]));
        let gone: f64 = departed.iter().map(|m| value(m, received)).sum();
        wait_for(&live.iter().collect::<Vec<_>>(), "the chunk, shared", |m| {
            total(m, received) + gone == sent as f64
                && total(m, "rankwatch_kafka_partitions") == f64::from(PARTITIONS)
        });
        departed.push(terminate(&mut live[0]));
        live.remove(0);
    }
    let mut rest = chunks[5].to_vec();
    rest.extend(closing_records());
    produce(&producer, &rest).await;
    sent += rest.len();
    let gone: f64 = departed.iter().map(|m| value(m, received)).sum();
    let scraped = wait_for(&live.iter().collect::<Vec<_>>(), "the rest", |m| {
        total(m, received) + gone == sent as f64
    });
    let mut fleet = BTreeMap::new();
    for metrics in departed.iter().chain(&scraped) {
        add(&mut fleet, metrics);
    }
    let all: Vec<Produced> = log.iter().cloned().chain(closing_records()).collect();
    assert_fleet_matches(&fleet, &replayed(&broker, &lines_by_value(&all)));
    assert_eq!(
        value(&fleet, "rankwatch_kafka_handover_timeouts_total"),
        0.0
    );
    assert_eq!(
        prefixed(&fleet, "rankwatch_lists_recounted_total"),
        0.0,
        "no list was counted twice"
    );
    assert_no_auto_creation_asked(&broker);
}

/// The instances, as [`wait_for`] takes them.
fn live(instances: &[Server]) -> Vec<&Server> {
    instances.iter().collect()
}

/// Runs `rankwatch kafka-check` against `broker`: its exit code and output.
fn kafka_check_of(broker: &Broker) -> (Option<i32>, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_rankwatch"))
        .args(["kafka-check", "--kafka-brokers", &broker.address()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    (output.status.code(), text)
}

#[tokio::test(flavor = "multi_thread")]
async fn kafka_check_says_what_is_wrong_with_the_topics_and_how_to_fix_it() {
    let broker = Broker::auto_creating();
    let (code, text) = kafka_check_of(&broker);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("PROBLEM") && text.contains("kafka-topics.sh --bootstrap-server"),
        "{text}"
    );
    broker.create_topic(TOPIC).await;
    let (code, text) = kafka_check_of(&broker);
    assert_eq!(
        code,
        Some(0),
        "a missing state topic is created by the first instance: {text}"
    );
    assert!(text.contains("12 partitions, replication 1,"), "{text}");
    create_topic_with(&broker, STATE_TOPIC, 4, &[]).await;
    let (code, text) = kafka_check_of(&broker);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("has 4 partitions") && text.contains("cleanup.policy=compact"),
        "{text}"
    );
    assert_eq!(
        topic_facts(&broker, STATE_TOPIC).await,
        (4, None),
        "kafka-check changes nothing"
    );
    assert_no_auto_creation_asked(&broker);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_broker_restarted_while_instances_consume_leaves_the_totals_exact() {
    let mut broker = Broker::on_disk();
    broker.create_topic(TOPIC).await;
    let (first, second) = log_in_halves();
    let first = &first[..];
    let mut instances = vec![instance(&broker, &[]), instance(&broker, &[])];
    wait_for(&live(&instances), "the partitions to be taken", |m| {
        total(m, "rankwatch_kafka_partitions") == f64::from(PARTITIONS)
    });
    produce(&broker.producer(), first).await;
    let received = "rankwatch_events_received_total";
    wait_for(&live(&instances), "the first half", |m| {
        total(m, received) == first.len() as f64
    });
    broker.kill();
    std::thread::sleep(std::time::Duration::from_secs(3));
    broker.run();
    produce(&broker.producer(), &second).await;
    let sent = (first.len() + second.len()) as f64;
    wait_for(&live(&instances), "the second half", |m| {
        total(m, received) == sent
    });
    let mut fleet = BTreeMap::new();
    for server in &mut instances {
        add(&mut fleet, &terminate(server));
    }
    let all: Vec<Produced> = first.iter().cloned().chain(second).collect();
    assert_fleet_matches(&fleet, &replayed(&broker, &lines_by_value(&all)));
    assert_eq!(
        prefixed(&fleet, "rankwatch_lists_recounted_total"),
        0.0,
        "no list was counted twice"
    );
}

/// The owner that [`claim`] writes claims for: an instance that the test
/// plays.
const CLAIMANT: &str = "rankwatch-claimant";

/// Writes a manifest in which [`CLAIMANT`] claims `partition` in group
/// generation `generation`, as an instance assigned it does; returns its
/// offset in the state topic.
async fn claim(broker: &Broker, partition: i32, generation: i32) -> i64 {
    let claim = Manifest {
        owner: CLAIMANT.to_owned(),
        generation: Some(generation),
        ..written_manifest()
    };
    write_manifest(broker, partition, claim).await
}

/// A manifest of no snapshot, not handed over, owned by no one, as the
/// tests write them.
fn written_manifest() -> Manifest {
    Manifest {
        version: 0,
        fingerprint: "fp".to_owned(),
        id: 1,
        slot: 1,
        chunks: 0,
        first_chunk: 0,
        checksum: 0,
        next_offset: 0,
        handed_over: false,
        owner: String::new(),
        generation: None,
        join_rules: None,
    }
}

/// Writes `manifest` as the last of `partition` in the state topic;
/// returns its offset there.
async fn write_manifest(broker: &Broker, partition: i32, manifest: Manifest) -> i64 {
    let client = broker.client();
    let runtime = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        let state = StateTopic::connect(&client, STATE_TOPIC, "claims", runtime).unwrap();
        state.write_manifest(partition, &manifest).unwrap();
        state.last_manifest(partition).unwrap().unwrap().offset
    })
    .await
    .unwrap()
}

/// The last manifests of partitions 5 and 6 in the state topic.
async fn last_manifests_of_5_and_6(broker: &Broker) -> (LastManifest, LastManifest) {
    let client = broker.client();
    let runtime = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        let state = StateTopic::connect(&client, STATE_TOPIC, "claims", runtime).unwrap();
        let last = |partition| state.last_manifest(partition).unwrap().unwrap();
        (last(5), last(6))
    })
    .await
    .unwrap()
}

/// An instance takes its assigned partitions one after the other. When a
/// rebalance forms without it meanwhile (a broker that does not wait for
/// every member, a slow network), another instance may be assigned and
/// claim a partition that this one has not reached yet; that owner hands
/// it over only in a rebalance that this instance's rejoining starts. The
/// instance leaves it to that owner, rather than wait for it and then
/// consume it too.
#[tokio::test(flavor = "multi_thread")]
async fn a_partition_claimed_in_a_later_generation_is_left_to_its_new_owner() {
    let broker = Broker::auto_creating();
    broker.create_topic(TOPIC).await;
    create_topic_with(
        &broker,
        STATE_TOPIC,
        PARTITIONS,
        &[("cleanup.policy", "compact")],
    )
    .await;
    // Each partition then takes the instance about a second to take.
    let proxy = broker.proxy.as_ref().expect("an auto-creating broker");
    proxy.slow_offset_requests(Duration::from_millis(300));
    let server = instance(&broker, &[]);
    let mut assigned = None;
    for _ in 0..POLLS {
        assigned = server
            .log
            .try_iter()
            .find(|line| line.contains("partitions assigned"));
        if assigned.is_some() {
            break;
        }
        std::thread::sleep(POLL);
    }
    let assigned = assigned.expect("the instance is assigned the partitions");
    let generation: i32 = assigned
        .split_once("generation=")
        .and_then(|(_, rest)| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no generation in {assigned}"));
    let claimed_at = claim(&broker, 5, generation + 1).await;
    let metrics = wait_for(&[&server], "the partitions to be taken", |m| {
        total(m, "rankwatch_kafka_partitions") > 0.0
    });
    let metrics = &metrics[0];
    assert_eq!(
        value(metrics, "rankwatch_kafka_partitions_superseded_total"),
        1.0
    );
    assert_eq!(
        value(metrics, "rankwatch_kafka_partitions"),
        f64::from(PARTITIONS - 1),
        "every partition but the one claimed since"
    );
    assert_eq!(
        value(metrics, "rankwatch_kafka_handover_timeouts_total"),
        0.0
    );
    let (last_of_5, last_of_6) = last_manifests_of_5_and_6(&broker).await;
    assert_eq!(
        last_of_5.offset, claimed_at,
        "partition 5 was not claimed again"
    );
    assert_eq!(last_of_6.manifest.generation, Some(generation));
    assert_ne!(last_of_6.manifest.owner, CLAIMANT);
}

/// A relay keeps looking at its event topic: deleted while the relay runs,
/// the relay turns not ready with the problem named, where it had said
/// ready for good once it had seen the topic at start.
#[tokio::test(flavor = "multi_thread")]
async fn a_relay_whose_event_topic_is_deleted_turns_not_ready() {
    use rdkafka::admin::{AdminClient, AdminOptions};
    use rdkafka::client::DefaultClientContext;
    let broker = Broker::in_memory();
    broker.create_topic(TOPIC).await;
    let brokers = broker.address();
    let relay = Server::start(&["--kafka-mode", "relay", "--kafka-brokers", &brokers]);
    let became = |status: u16| {
        (0..POLLS).find_map(|_| {
            let (got, body) = readiness(&relay);
            if got == status {
                return Some(body);
            }
            std::thread::sleep(POLL);
            None
        })
    };
    assert!(became(200).is_some(), "the relay is ready");
    let admin: AdminClient<DefaultClientContext> = broker.client().create().unwrap();
    let deleted = admin
        .delete_topics(&[TOPIC], &AdminOptions::new())
        .await
        .unwrap();
    assert!(deleted.iter().all(Result::is_ok), "{deleted:?}");
    let body = became(503).expect("the relay turns not ready once its topic is gone");
    assert!(
        body.contains(TOPIC) && body.contains("does not exist"),
        "{body}"
    );
}
