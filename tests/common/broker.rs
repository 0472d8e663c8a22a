//! A real Kafka-compatible broker for the fleet tests: tansu, built once by
//! `tests/install-broker.sh`, on a free loopback port; or, to behave as
//! Apache Kafka does with its default settings, tansu behind a proxy that
//! auto-creates the topics a metadata request names (`kafka_proxy.rs`).
//! Each fleet test binary includes both (not every test needs a broker).
#![allow(dead_code)]

use crate::kafka_proxy::AutoCreatingProxy;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message as _;
use rdkafka::producer::FutureProducer;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Partitions of every topic the tests create.
pub const PARTITIONS: i32 = 12;
/// Bounded waits: each poll sleeps this long…
pub const POLL: Duration = Duration::from_millis(250);
/// …at most this many times (two minutes).
pub const POLLS: u32 = 480;

/// A record read back: its key and value.
pub type Record = (Vec<u8>, Vec<u8>);

/// The tansu binary, built once by `tests/install-broker.sh`.
fn tansu() -> PathBuf {
    let output = Command::new("bash")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/install-broker.sh"))
        .stderr(Stdio::inherit())
        .output()
        .expect("bash runs tests/install-broker.sh");
    assert!(output.status.success(), "tests/install-broker.sh failed");
    PathBuf::from(String::from_utf8(output.stdout).unwrap().trim())
}

/// A broker on a free loopback port; killed when dropped.
pub struct Broker {
    /// The broker process, while it runs.
    pub child: Option<Child>,
    port: u16,
    storage: String,
    dir: tempfile::TempDir,
    /// The auto-creating proxy clients talk to, if the broker auto-creates.
    pub proxy: Option<AutoCreatingProxy>,
}

impl Broker {
    /// A broker keeping its data in memory.
    pub fn in_memory() -> Broker {
        Broker::start("memory://tansu/".into())
    }

    /// A broker keeping its data in SQLite, so that it survives a restart.
    pub fn on_disk() -> Broker {
        Broker::start("sqlite://tansu.db".into())
    }

    /// A broker keeping its data in memory that auto-creates, as Apache
    /// Kafka does by default, every missing topic a metadata request names
    /// while allowing it, with 4 partitions and no compaction.
    pub fn auto_creating() -> Broker {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut broker = Broker::unstarted("memory://tansu/".into());
        broker.proxy = Some(AutoCreatingProxy::start(
            listener,
            format!("127.0.0.1:{}", broker.port),
        ));
        broker.run();
        broker
    }

    fn start(storage: String) -> Broker {
        let mut broker = Broker::unstarted(storage);
        broker.run();
        broker
    }

    fn unstarted(storage: String) -> Broker {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        Broker {
            child: None,
            port,
            storage,
            dir: tempfile::tempdir().unwrap(),
            proxy: None,
        }
    }

    /// Starts (or restarts) the broker process and waits until it listens.
    pub fn run(&mut self) {
        let url = format!("tcp://127.0.0.1:{}", self.port);
        let advertised = format!("tcp://{}", self.address());
        let child = Command::new(tansu())
            .args([
                "broker",
                "--listener-url",
                &url,
                "--advertised-listener-url",
                &advertised,
            ])
            .args(["--storage-engine", &self.storage])
            .current_dir(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("tansu starts");
        self.child = Some(child);
        for _ in 0..POLLS {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            std::thread::sleep(POLL);
        }
        panic!("the broker did not listen");
    }

    /// Kills the broker process, if it runs.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// `host:port` of the broker, as clients reach it.
    pub fn address(&self) -> String {
        match &self.proxy {
            Some(proxy) => proxy.address(),
            None => format!("127.0.0.1:{}", self.port),
        }
    }

    /// A client configuration for the broker.
    pub fn client(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", self.address());
        config
    }

    /// Creates `topic` with [`PARTITIONS`] partitions.
    pub async fn create_topic(&self, topic: &str) {
        let admin: AdminClient<DefaultClientContext> = self.client().create().unwrap();
        let topic = NewTopic::new(topic, PARTITIONS, TopicReplication::Fixed(1));
        let results = admin
            .create_topics([&topic], &AdminOptions::new())
            .await
            .unwrap();
        assert!(results.iter().all(Result::is_ok), "{results:?}");
    }

    /// A producer that waits for every replica (idempotent).
    pub fn producer(&self) -> FutureProducer {
        self.client()
            .set("acks", "all")
            .set("enable.idempotence", "true")
            .create()
            .unwrap()
    }

    /// Every record of every partition of `topic`, in offset order: `(key, value)`.
    pub fn records(&self, topic: &str) -> BTreeMap<i32, Vec<Record>> {
        let consumer: BaseConsumer = self
            .client()
            .set("group.id", "rankwatch-tests-reader")
            .set("enable.auto.commit", "false")
            .create()
            .unwrap();
        let mut records = BTreeMap::new();
        for partition in 0..PARTITIONS {
            let (_, high) = consumer
                .fetch_watermarks(topic, partition, Duration::from_secs(10))
                .unwrap();
            let mut list = TopicPartitionList::new();
            list.add_partition_offset(topic, partition, Offset::Beginning)
                .unwrap();
            consumer.assign(&list).unwrap();
            let mut read: Vec<Record> = Vec::new();
            let (mut next, mut empty_polls) = (0, 0);
            while next < high && empty_polls < POLLS {
                let Some(message) = consumer.poll(POLL) else {
                    empty_polls += 1;
                    continue;
                };
                let message = message.unwrap();
                if message.partition() != partition {
                    continue;
                }
                next = message.offset() + 1;
                read.push((
                    message.key().unwrap_or_default().to_vec(),
                    message.payload().unwrap_or_default().to_vec(),
                ));
            }
            assert!(next >= high, "partition {partition} read back in full");
            records.insert(partition, read);
        }
        records
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.kill();
    }
}
