//! `rankwatch loadgen --kafka-brokers` against a real Kafka-compatible broker
//! (tansu, built by `tests/install-broker.sh`): what the loadgen says it
//! produced is what the topic holds, one record per event keyed by its
//! user, and what a consuming instance counts once it has read the topic.

mod common;

use clap::Parser;
use common::server::{parse_metrics, Server};
use prost::Message;
use rankwatch::loadgen::{self, LoadReport, LoadgenArgs};
use rankwatch::proto::{event::Kind, Event};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message as _;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const PARTITIONS: i32 = 12;
const TOPIC: &str = "loadgen.events";
/// Bounded waits: each poll sleeps this long…
const POLL: Duration = Duration::from_millis(250);
/// …at most this many times (two minutes).
const POLLS: u32 = 480;

/// A tansu broker on a free loopback port, in memory; killed when dropped.
struct Broker {
    child: Child,
    address: String,
    _dir: tempfile::TempDir,
}

impl Broker {
    fn start() -> Broker {
        let installed = Command::new("bash")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/install-broker.sh"))
            .stderr(Stdio::inherit())
            .output()
            .expect("bash runs tests/install-broker.sh");
        assert!(installed.status.success(), "tests/install-broker.sh failed");
        let tansu = String::from_utf8(installed.stdout).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let address = format!("127.0.0.1:{port}");
        let url = format!("tcp://{address}");
        let dir = tempfile::tempdir().unwrap();
        let child = Command::new(tansu.trim())
            .args(["broker", "--listener-url", &url])
            .args(["--advertised-listener-url", &url])
            .args(["--storage-engine", "memory://tansu/"])
            .current_dir(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("tansu starts");
        let broker = Broker {
            child,
            address,
            _dir: dir,
        };
        for _ in 0..POLLS {
            if std::net::TcpStream::connect(&broker.address).is_ok() {
                return broker;
            }
            std::thread::sleep(POLL);
        }
        panic!("the broker did not listen");
    }

    fn client(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", &self.address);
        config
    }

    async fn create_topic(&self) {
        let admin: AdminClient<DefaultClientContext> = self.client().create().unwrap();
        let topic = NewTopic::new(TOPIC, PARTITIONS, TopicReplication::Fixed(1));
        let results = admin
            .create_topics([&topic], &AdminOptions::new())
            .await
            .unwrap();
        assert!(results.iter().all(Result::is_ok), "{results:?}");
    }

    /// Every record of the topic, by partition: `(key, event)`.
    fn records(&self) -> BTreeMap<i32, Vec<(String, Event)>> {
        let consumer: BaseConsumer = self
            .client()
            .set("group.id", "loadgen-tests-reader")
            .set("enable.auto.commit", "false")
            .create()
            .unwrap();
        let mut records = BTreeMap::new();
        for partition in 0..PARTITIONS {
            let (_, high) = consumer
                .fetch_watermarks(TOPIC, partition, Duration::from_secs(10))
                .unwrap();
            let mut list = TopicPartitionList::new();
            list.add_partition_offset(TOPIC, partition, Offset::Beginning)
                .unwrap();
            consumer.assign(&list).unwrap();
            let mut read = Vec::new();
            let (mut next, mut empty_polls) = (0, 0);
            while next < high && empty_polls < POLLS {
                let Some(message) = consumer.poll(POLL) else {
                    empty_polls += 1;
                    continue;
                };
                let message = message.unwrap();
                // Fetched before the assignment moved on.
                if message.partition() != partition {
                    continue;
                }
                next = message.offset() + 1;
                let key = String::from_utf8(message.key().unwrap().to_vec()).unwrap();
                let event = Event::decode(message.payload().unwrap()).unwrap();
                read.push((key, event));
            }
            assert!(next >= high, "partition {partition} read back in full");
            records.insert(partition, read);
        }
        records
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Parser)]
struct Loadgen {
    #[command(flatten)]
    args: LoadgenArgs,
}

/// Runs the loadgen against the broker with `flags`.
async fn produce(broker: &Broker, flags: &[&str]) -> LoadReport {
    let mut argv = vec!["loadgen", "--kafka-brokers", &broker.address];
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
    let broker = Broker::start();
    broker.create_topic().await;
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
    assert!(report.events_sent > 10_000, "{report}");
    assert_eq!(report.accepted, report.events_sent, "{report}");
    assert_eq!(
        (report.rejected, report.unacked_batches),
        (0, 0),
        "{report}"
    );

    // The topic holds every event once, keyed by its user, each user's
    // events in one partition.
    let records = broker.records();
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
        &broker.address,
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
