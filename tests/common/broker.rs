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

    /// Appends to `topic`'s `partition` the commit marker that ends a
    /// transaction: a control batch of one record, an offset no consumer is
    /// handed. tansu cannot end a transaction itself (it has no EndTxn), so
    /// this writes the batch a transaction coordinator writes, with a
    /// Produce request of version 3.
    pub fn append_commit_marker(&self, topic: &str, partition: i32) {
        use std::io::{Read, Write};
        let batch = commit_marker_batch();
        let mut body = Vec::new();
        body.extend(0i16.to_be_bytes()); // Produce
        body.extend(3i16.to_be_bytes()); // version
        body.extend(7i32.to_be_bytes()); // correlation id
        body.extend(kafka_string("rankwatch-tests"));
        body.extend((-1i16).to_be_bytes()); // no transactional id
        body.extend((-1i16).to_be_bytes()); // acks: all
        body.extend(30_000i32.to_be_bytes());
        body.extend(1i32.to_be_bytes());
        body.extend(kafka_string(topic));
        body.extend(1i32.to_be_bytes());
        body.extend(partition.to_be_bytes());
        body.extend((batch.len() as i32).to_be_bytes());
        body.extend(batch);
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        stream
            .write_all(&(body.len() as i32).to_be_bytes())
            .unwrap();
        stream.write_all(&body).unwrap();
        let mut size = [0; 4];
        stream.read_exact(&mut size).unwrap();
        let mut response = vec![0; i32::from_be_bytes(size) as usize];
        stream.read_exact(&mut response).unwrap();
        // correlation id, responses (1), topic, partitions (1), partition, error code
        let at = 4 + 4 + 2 + topic.len() + 4 + 4;
        let error = i16::from_be_bytes([response[at], response[at + 1]]);
        assert_eq!(error, 0, "the broker took the commit marker");
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
                    // Past a transaction's marker, which is never handed over.
                    next = next.max(position(&consumer, topic, partition));
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

/// A string as Kafka's requests spell it: an `i16` length, then its bytes.
fn kafka_string(text: &str) -> Vec<u8> {
    let mut bytes = (text.len() as i16).to_be_bytes().to_vec();
    bytes.extend(text.as_bytes());
    bytes
}

/// A record batch (magic 2) holding a transaction's commit marker: the
/// control and transactional attributes, one record whose key is the
/// control type (version 0, commit) and whose value is the marker (version
/// 0, coordinator epoch 0).
fn commit_marker_batch() -> Vec<u8> {
    let record = [
        0x16, // length 11, zigzag
        0,    // attributes
        0,    // timestamp delta
        0,    // offset delta
        0x08, // key length 4
        0, 0, 0, 1,    // control key: version 0, type 1 (commit)
        0x0c, // value length 6
        0, 0, 0, 0, 0, 0, // marker: version 0, coordinator epoch 0
        0, // headers
    ];
    let mut after_crc = Vec::new();
    after_crc.extend(0x30i16.to_be_bytes()); // transactional | control
    after_crc.extend(0i32.to_be_bytes()); // last offset delta
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    after_crc.extend(now.to_be_bytes());
    after_crc.extend(now.to_be_bytes());
    after_crc.extend((-1i64).to_be_bytes()); // producer id
    after_crc.extend((-1i16).to_be_bytes()); // producer epoch
    after_crc.extend((-1i32).to_be_bytes()); // base sequence
    after_crc.extend(1i32.to_be_bytes()); // records
    after_crc.extend(record);
    let mut batch = 0i64.to_be_bytes().to_vec(); // base offset
    let length = 4 + 1 + 4 + after_crc.len();
    batch.extend((length as i32).to_be_bytes());
    batch.extend((-1i32).to_be_bytes()); // partition leader epoch
    batch.push(2); // magic
    batch.extend(crc32c(&after_crc).to_be_bytes());
    batch.extend(after_crc);
    batch
}

/// CRC-32C (Castagnoli), as record batches carry it.
fn crc32c(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in bytes {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0x82f6_3b78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// Where `consumer` reads `topic`'s `partition` next (`-1` if unknown).
fn position(consumer: &BaseConsumer, topic: &str, partition: i32) -> i64 {
    let Ok(positions) = consumer.position() else {
        return -1;
    };
    match positions
        .find_partition(topic, partition)
        .map(|p| p.offset())
    {
        Some(Offset::Offset(offset)) => offset,
        _ => -1,
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.kill();
    }
}
