//! `rankwatch loadgen --kafka-brokers` against a real Kafka-compatible broker
//! (tansu, built by `tests/install-broker.sh`): what the loadgen says it
//! produced is what the topic holds, one record per event keyed by its
//! user, and what a consuming instance counts once it has read the topic.

#[path = "common/broker.rs"]
mod broker;
mod common;
#[path = "common/kafka_proxy.rs"]
mod kafka_proxy;

use broker::{Broker, PARTITIONS, POLL, POLLS};

use clap::Parser;
use common::server::{parse_metrics, Server};
use prost::Message;
use rankwatch::loadgen::{self, LoadReport, LoadgenArgs};
use rankwatch::proto::{event::Kind, Event};
use std::collections::BTreeMap;

const TOPIC: &str = "loadgen.events";

/// Every record of the topic, by partition: `(key, event)`.
fn records(broker: &Broker) -> BTreeMap<i32, Vec<(String, Event)>> {
    broker
        .records(TOPIC)
        .into_iter()
        .map(|(partition, records)| {
            let decoded = records
                .into_iter()
                .map(|(key, value)| {
                    let key = String::from_utf8(key).unwrap();
                    (key, Event::decode(value.as_slice()).unwrap())
                })
                .collect();
            (partition, decoded)
        })
        .collect()
}

#[derive(Parser)]
struct Loadgen {
    #[command(flatten)]
    args: LoadgenArgs,
}

/// Runs the loadgen against the broker with `flags`.
async fn produce(broker: &Broker, flags: &[&str]) -> LoadReport {
    let address = broker.address();
    let mut argv = vec!["loadgen", "--kafka-brokers", &address];
    argv.extend_from_slice(&["--kafka-topic", TOPIC]);
    argv.extend_from_slice(flags);
    let args = Loadgen::try_parse_from(argv).unwrap().args;
    loadgen::run(&args).await.unwrap()
}

fn user_id(event: &Event) -> &str {
    match &event.kind {
        Some(Kind::Impression(m)) => &m.user_id,
        Some(Kind::Interaction(x)) => &x.user_id,
        None => "",
    }
}

fn value(metrics: &BTreeMap<String, f64>, key: &str) -> f64 {
    metrics.get(key).copied().unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_loadgen_produces_one_record_per_event_keyed_by_user_and_an_instance_counts_them_all() {
    let broker = Broker::in_memory();
    broker.create_topic(TOPIC).await;
    let report = produce(
        &broker,
        &[
            "--rate",
            "20000",
            "--duration",
            "2s",
            "--streams",
            "2",
            "--users",
            "500",
        ],
    )
    .await;
    // How many the 2 s give depends on how fast the broker acknowledges
    // (a busy machine's tansu took 0.6 s a batch); enough to check are sent.
    assert!(report.events_sent >= 1_000, "{report}");
    assert_eq!(report.accepted, report.events_sent, "{report}");
    assert_eq!(
        (report.rejected, report.unacked_batches),
        (0, 0),
        "{report}"
    );

    // The topic holds every event once, keyed by its user, each user's
    // events in one partition.
    let records = records(&broker);
    let stored: Vec<&(String, Event)> = records.values().flatten().collect();
    assert_eq!(stored.len() as u64, report.events_sent);
    let impressions = stored
        .iter()
        .filter(|(_, e)| matches!(e.kind, Some(Kind::Impression(_))))
        .count() as u64;
    assert_eq!(impressions, report.impressions_sent);
    let mut partition_of_user = BTreeMap::new();
    for (partition, partition_records) in &records {
        for (key, event) in partition_records {
            assert_eq!(key, user_id(event));
            let first = partition_of_user.entry(key.clone()).or_insert(*partition);
            assert_eq!(*first, *partition, "user {key} in one partition");
        }
    }
    assert!(partition_of_user.len() > 100);

    // A consuming instance counts exactly what the loadgen sent.
    let instance = Server::start(&[
        "--kafka-mode",
        "consume",
        "--kafka-brokers",
        &broker.address(),
        "--kafka-topic",
        TOPIC,
        "--wall-clock-advance",
        "false",
        "--shutdown-linger",
        "0s",
    ]);
    let mut metrics = BTreeMap::new();
    for _ in 0..POLLS {
        let (status, body) = instance.get("/metrics");
        if status == 200 {
            metrics = parse_metrics(&body);
            if value(&metrics, "rankwatch_events_received_total") >= report.events_sent as f64 {
                break;
            }
        }
        std::thread::sleep(POLL);
    }
    let sent = report.events_sent as f64;
    assert_eq!(value(&metrics, "rankwatch_events_received_total"), sent);
    assert_eq!(value(&metrics, "rankwatch_events_accepted_total"), sent);
    assert_eq!(
        value(&metrics, "rankwatch_impressions_total"),
        report.impressions_sent as f64
    );
    assert_eq!(
        value(&metrics, "rankwatch_interactions_total"),
        report.interactions_sent as f64
    );
    assert_eq!(value(&metrics, "rankwatch_kafka_key_mismatches_total"), 0.0);
    assert_eq!(
        value(&metrics, "rankwatch_kafka_partitions"),
        f64::from(PARTITIONS)
    );
}
