//! A broker that behaves as Apache Kafka does with its default settings
//! (`auto.create.topics.enable=true`), for the fleet tests: a proxy in front
//! of tansu that reads every Metadata request on its way, and when one that
//! allows auto-creation names a topic that does not exist, creates it first
//! with the broker's default partition count and no configuration (so not
//! compacted), as Kafka would. It also records every topic named with
//! auto-creation allowed, by client id, so a test can check that no client
//! of rankwatch ever asks for it. tansu advertises the proxy's address, so
//! clients that bootstrap through it keep talking through it.
#![allow(dead_code)]

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::ClientConfig;
use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Partitions of a topic the proxy auto-creates (Kafka's `num.partitions`
/// is 1; 4 is what the broker of the report that found the bug used).
pub const AUTO_CREATED_PARTITIONS: i32 = 4;

/// A topic named in a Metadata request that allowed auto-creation.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct AutoCreateAsk {
    /// The client's `client.id`.
    pub client: String,
    /// The topic named.
    pub topic: String,
    /// Whether the proxy created it for that request.
    pub created: bool,
}

/// What the proxy has seen and done, shared by its connections.
#[derive(Default)]
struct Seen {
    asks: Vec<AutoCreateAsk>,
    existing: BTreeSet<String>,
    /// How long each ListOffsets request is held before it is forwarded.
    offsets_delay: Duration,
}

/// Kafka's API key of ListOffsets (a partition's watermarks).
const LIST_OFFSETS: i16 = 2;

/// The proxy: listens on its own loopback port, forwards to `upstream`.
pub struct AutoCreatingProxy {
    port: u16,
    seen: Arc<Mutex<Seen>>,
}

impl AutoCreatingProxy {
    /// A proxy on `listener` in front of the broker at `upstream`.
    pub fn start(listener: TcpListener, upstream: String) -> AutoCreatingProxy {
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let shared = seen.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().map_while(Result::ok) {
                let (seen, upstream) = (shared.clone(), upstream.clone());
                std::thread::spawn(move || relay(client, &upstream, &seen));
            }
        });
        AutoCreatingProxy { port, seen }
    }

    /// `host:port` of the proxy.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Every topic named with auto-creation allowed, so far.
    pub fn asks(&self) -> Vec<AutoCreateAsk> {
        self.seen.lock().unwrap().asks.clone()
    }

    /// Holds every ListOffsets request for `delay` from now on, as a slow
    /// network or a busy broker would: reading a partition's watermarks then
    /// takes that long.
    pub fn slow_offset_requests(&self, delay: Duration) {
        self.seen.lock().unwrap().offsets_delay = delay;
    }

    /// The topics named with auto-creation allowed by clients of rankwatch
    /// (client ids `rankwatch` and `rankwatch-…`).
    pub fn asks_of_rankwatch(&self) -> Vec<AutoCreateAsk> {
        self.asks()
            .into_iter()
            .filter(|ask| ask.client == "rankwatch" || ask.client.starts_with("rankwatch-"))
            .collect()
    }
}

/// Forwards one client connection, reading its requests on the way.
fn relay(mut client: TcpStream, upstream: &str, seen: &Mutex<Seen>) {
    let Ok(mut broker) = TcpStream::connect(upstream) else {
        return;
    };
    // Requests and answers are small and awaited one by one: without this,
    // Nagle's algorithm held each for a delayed acknowledgement (a produce
    // awaited record by record took about 100 ms a record).
    if client.set_nodelay(true).is_err() || broker.set_nodelay(true).is_err() {
        return;
    }
    let (Ok(mut back), Ok(mut answers)) = (client.try_clone(), broker.try_clone()) else {
        return;
    };
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut answers, &mut back);
        let _ = back.shutdown(std::net::Shutdown::Both);
    });
    loop {
        let mut size = [0u8; 4];
        if client.read_exact(&mut size).is_err() {
            break;
        }
        let mut request = vec![0u8; i32::from_be_bytes(size).max(0) as usize];
        if client.read_exact(&mut request).is_err() {
            break;
        }
        if request.get(..2) == Some(&LIST_OFFSETS.to_be_bytes()) {
            let delay = seen.lock().unwrap().offsets_delay;
            std::thread::sleep(delay);
        }
        if let Some((client_id, topics, allow)) = metadata_request(&request) {
            if allow {
                auto_create(&client_id, &topics, upstream, seen);
            }
        }
        if broker.write_all(&size).is_err() || broker.write_all(&request).is_err() {
            break;
        }
    }
    let _ = broker.shutdown(std::net::Shutdown::Both);
}

/// Creates each topic of `topics` that does not exist, as Kafka's
/// auto-creation does, and records the ask.
fn auto_create(client_id: &str, topics: &[String], upstream: &str, seen: &Mutex<Seen>) {
    for topic in topics {
        let known = seen.lock().unwrap().existing.contains(topic);
        let created = !known && create(topic, upstream);
        let mut seen = seen.lock().unwrap();
        seen.existing.insert(topic.clone());
        seen.asks.push(AutoCreateAsk {
            client: client_id.to_owned(),
            topic: topic.clone(),
            created,
        });
    }
}

/// Creates `topic` on the broker at `upstream` with the default partition
/// count and no configuration; `false` when it existed.
fn create(topic: &str, upstream: &str) -> bool {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", upstream)
            .set("client.id", "auto-creating-broker")
            .set("allow.auto.create.topics", "false")
            .create()
            .unwrap();
        let new = NewTopic::new(topic, AUTO_CREATED_PARTITIONS, TopicReplication::Fixed(1));
        let results = admin
            .create_topics([&new], &AdminOptions::new())
            .await
            .unwrap();
        match results.into_iter().next() {
            Some(Ok(_)) => true,
            Some(Err((_, RDKafkaErrorCode::TopicAlreadyExists))) => false,
            other => panic!("auto-creating {topic}: {other:?}"),
        }
    })
}

/// A reader of Kafka's request encodings.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let (taken, rest) = (self.bytes.get(..n)?, self.bytes.get(n..)?);
        self.bytes = rest;
        Some(taken)
    }

    fn i16(&mut self) -> Option<i16> {
        Some(i16::from_be_bytes(self.take(2)?.try_into().ok()?))
    }

    fn i32(&mut self) -> Option<i32> {
        Some(i32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }

    fn uvarint(&mut self) -> Option<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = *self.take(1)?.first()?;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Some(value);
            }
        }
        None
    }

    /// A string with an `i16` length (-1: null).
    fn string(&mut self) -> Option<Option<String>> {
        let len = self.i16()?;
        if len < 0 {
            return Some(None);
        }
        let bytes = self.take(len as usize)?;
        Some(Some(String::from_utf8_lossy(bytes).into_owned()))
    }

    /// A compact string (length + 1 as an unsigned varint; 0: null).
    fn compact_string(&mut self) -> Option<Option<String>> {
        let len = self.uvarint()?;
        if len == 0 {
            return Some(None);
        }
        let bytes = self.take(len as usize - 1)?;
        Some(Some(String::from_utf8_lossy(bytes).into_owned()))
    }

    fn tagged_fields(&mut self) -> Option<()> {
        for _ in 0..self.uvarint()? {
            self.uvarint()?;
            let size = self.uvarint()?;
            self.take(size as usize)?;
        }
        Some(())
    }
}

/// A Metadata request's client id, the topics it names and whether it
/// allows auto-creation; `None` for any other request.
fn metadata_request(request: &[u8]) -> Option<(String, Vec<String>, bool)> {
    let mut r = Reader { bytes: request };
    let (api_key, version) = (r.i16()?, r.i16()?);
    if api_key != 3 {
        return None;
    }
    r.i32()?;
    let client_id = r.string()?.unwrap_or_default();
    let flexible = version >= 9;
    if flexible {
        r.tagged_fields()?;
    }
    let mut topics = Vec::new();
    if flexible {
        let count = r.uvarint()?;
        for _ in 0..count.saturating_sub(1) {
            if version >= 10 {
                r.take(16)?;
            }
            topics.extend(r.compact_string()?);
            r.tagged_fields()?;
        }
    } else {
        let count = r.i32()?;
        for _ in 0..count.max(0) {
            topics.extend(r.string()?);
        }
    }
    // Before version 4 a broker auto-created every topic named.
    let allow = if version >= 4 {
        r.take(1)?[0] != 0
    } else {
        true
    };
    Some((client_id, topics, allow))
}
