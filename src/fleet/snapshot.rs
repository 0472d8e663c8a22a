//! Handoff snapshots in the state topic: how a partition's open state
//! travels from one instance to the next.
//!
//! Partition `p` of the event topic keeps its snapshots in partition `p` of
//! the state topic (compacted). A snapshot is its chunks (key
//! `chunk/<slot>/<index>`, at most [`CHUNK_BYTES`] each) followed by a
//! manifest (key `manifest`) that names them, the offset of the first event
//! record the snapshot has not seen, its owner, and whether the owner
//! handed the partition over (a graceful revocation) or may go on
//! evaluating past it (a periodic snapshot, or the claim written on
//! assignment). Successive snapshots alternate between two slots, so the
//! chunks of the last complete snapshot are never overwritten by the next
//! one, and compaction keeps the last manifest and the chunks it names. The
//! offsets committed to the consumer group follow the manifests, for lag
//! monitoring; the manifest is what a new owner reads (the offset commit's
//! metadata would do, but not every broker returns it).

use crate::join::{EngineState, Pieces};
use crate::state::JoinRules;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// Largest chunk of a snapshot: well under the 1 MiB a broker takes by default.
pub const CHUNK_BYTES: usize = 512 * 1024;

/// Bytes before each chunk's share of the payload: the snapshot's id and
/// the chunk's index.
const CHUNK_HEADER: usize = 8 + 4;

/// Records read back from the end of a state partition per step while
/// looking for its last manifest.
const SCAN_STEP: i64 = 64;

/// How long one read from the state topic may take.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// How long librdkafka tries to deliver a record of the state topic, in
/// milliseconds. Its report is awaited without a timeout of our own: a
/// record reported as failed is then no longer on its way, so a manifest
/// given up on cannot land after the next snapshot has reused its slot.
const DELIVERY_TIMEOUT_MS: &str = "10000";

/// How long a record waits for room in librdkafka's queue before its
/// snapshot fails, and how often it looks for room meanwhile.
const QUEUE_FULL_TIMEOUT: Duration = Duration::from_secs(10);
const QUEUE_FULL_PAUSE: Duration = Duration::from_millis(10);

/// How long the broker may hold a fetch of the state topic, in milliseconds.
const READ_WAIT_MS: &str = "10";

const MANIFEST_KEY: &str = "manifest";
/// Version 2: the engine state carries the sums of squares of per-list values (docs/SPEC.md §9);
/// version 4, the segment values of each group and their registries, and
/// each group's coverage and exposure (docs/SPEC.md §11); version 5, coverage
/// panes that cascade; version 6, open impressions in fixed-width fields.
/// Snapshots of another version are not restored (the partition starts
/// empty, loudly).
const FORMAT_VERSION: u32 = 8;

/// What a snapshot is and where its chunks are.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Format of the chunks' payload.
    pub version: u32,
    /// Settings the state was computed under (the state file's fingerprint).
    pub fingerprint: String,
    /// Tells this snapshot's chunks from older ones of the same slot.
    pub id: u64,
    /// Which of the two chunk slots holds it.
    pub slot: u8,
    /// Number of chunks; 0 for an empty state.
    pub chunks: u32,
    /// Offset of the first chunk in the state partition.
    pub first_chunk: i64,
    /// xxh3 of the whole payload.
    pub checksum: u64,
    /// The first event record the state has not seen.
    pub next_offset: i64,
    /// The owner stopped at `next_offset` and handed the partition over;
    /// otherwise it may have evaluated records past it before it died.
    pub handed_over: bool,
    /// The client id of the owner's consumer: while it is a member of the
    /// group, a snapshot it has not handed over may still be followed by one
    /// that is.
    pub owner: String,
    /// The consumer group's generation in which the owner was assigned the
    /// partition; `None` when unknown. Stored after the other fields, which
    /// builds before it read without it.
    #[serde(skip)]
    pub generation: Option<i32>,
    /// The join rules the state was computed under; `None` when unknown.
    /// Stored after the generation, and only with one, which builds before
    /// it read without it.
    #[serde(skip)]
    pub join_rules: Option<JoinRules>,
}

/// A partition's last manifest and where it lies in the state partition.
pub struct LastManifest {
    /// The manifest.
    pub manifest: Manifest,
    /// Its offset in the state partition.
    pub offset: i64,
    /// The end of the state partition when it was read.
    pub end: i64,
}

/// A manifest as stored: its fields, then its generation if known, then
/// its join rules if known.
fn encode_manifest(manifest: &Manifest) -> postcard::Result<Vec<u8>> {
    let mut encoded = postcard::to_stdvec(manifest)?;
    if let Some(generation) = manifest.generation {
        encoded.extend(postcard::to_stdvec(&generation)?);
        if let Some(join_rules) = &manifest.join_rules {
            encoded.extend(postcard::to_stdvec(join_rules)?);
        }
    }
    Ok(encoded)
}

/// A stored manifest, with or without its generation and join rules.
fn decode_manifest(bytes: &[u8]) -> postcard::Result<Manifest> {
    let (mut manifest, rest): (Manifest, _) = postcard::take_from_bytes(bytes)?;
    if !rest.is_empty() {
        let (generation, rest) = postcard::take_from_bytes(rest)?;
        manifest.generation = Some(generation);
        // Unknown when unreadable: they only ever add a warning.
        manifest.join_rules = postcard::from_bytes(rest).ok();
    }
    Ok(manifest)
}

/// The state topic went wrong.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// The broker did not take or return a record.
    #[error("state topic {topic} partition {partition}: {source}")]
    Kafka {
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// Why.
        source: KafkaError,
    },
    /// A record or the state in it cannot be read.
    #[error("state topic {topic} partition {partition}: {reason}")]
    Corrupt {
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// What is wrong.
        reason: String,
    },
}

impl SnapshotError {
    /// Whether reading again may succeed: the broker did not answer, where
    /// a corrupt record stays corrupt.
    pub fn is_transient(&self) -> bool {
        matches!(self, SnapshotError::Kafka { .. })
    }
}

/// An encoded open state, written straight into the values of its
/// snapshot's chunk records: each is [`CHUNK_HEADER`] bytes (the snapshot's
/// id and the chunk's index, filled in by [`Pending::new`]) and up to
/// [`CHUNK_BYTES`] of the payload. A state of megabytes is thus neither
/// copied into chunks nor moved as its buffer grows.
pub type Chunks = Pieces<CHUNK_HEADER, CHUNK_BYTES>;

/// A snapshot to write: a partition's encoded open state (`None`: the
/// manifest alone) and its manifest.
pub struct Pending {
    /// The partition of the event topic, and of the state topic.
    pub partition: i32,
    /// The encoded open state.
    pub payload: Option<Chunks>,
    /// Names the chunks; its version, checksum, chunk count and first chunk are filled in.
    pub manifest: Manifest,
}

impl Pending {
    /// A snapshot of `payload` under `manifest`, its chunks marked with the manifest's id.
    pub fn new(partition: i32, mut payload: Option<Chunks>, mut manifest: Manifest) -> Self {
        if let Some(payload) = &mut payload {
            let mut checksum = xxhash_rust::xxh3::Xxh3::new();
            for (index, chunk) in payload.iter_mut().enumerate() {
                chunk[..8].copy_from_slice(&manifest.id.to_le_bytes());
                chunk[8..CHUNK_HEADER].copy_from_slice(&(index as u32).to_le_bytes());
                checksum.update(&chunk[CHUNK_HEADER..]);
            }
            manifest.version = FORMAT_VERSION;
            manifest.checksum = checksum.digest();
            manifest.chunks = payload.count() as u32;
        }
        Self {
            partition,
            payload,
            manifest,
        }
    }
}

/// A snapshot written: its manifest and payload bytes as stored, or why it was not.
pub type Written = Result<(Manifest, usize), SnapshotError>;

/// A snapshot read back: its manifest and the open state it holds.
pub struct Restored {
    /// The snapshot's manifest.
    pub manifest: Manifest,
    /// The open state, if the snapshot held any.
    pub state: Option<EngineState>,
}

/// Reads and writes the state topic.
pub struct StateTopic {
    topic: String,
    producer: FutureProducer,
    reader: BaseConsumer,
    runtime: tokio::runtime::Handle,
}

impl StateTopic {
    /// Connects with `client` (the instance's connection settings).
    pub fn connect(
        client: &ClientConfig,
        topic: &str,
        group: &str,
        runtime: tokio::runtime::Handle,
    ) -> Result<Self, KafkaError> {
        let producer = client
            .clone()
            .set("acks", "all")
            .set("linger.ms", "0")
            .set("message.timeout.ms", DELIVERY_TIMEOUT_MS)
            .set("message.max.bytes", (2 * CHUNK_BYTES).to_string())
            .create()?;
        let reader = client
            .clone()
            .set("group.id", format!("{group}.state-reader"))
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", "false")
            // It reads what a partition holds up to its end: a broker that
            // holds a fetch for librdkafka's 500 ms (tansu does) made every
            // read of a snapshot take seconds, and an assignment of several
            // partitions outlast the group's session.
            .set("fetch.wait.max.ms", READ_WAIT_MS)
            .create()?;
        Ok(Self {
            topic: topic.to_owned(),
            producer,
            reader,
            runtime,
        })
    }

    fn kafka(&self, partition: i32) -> impl Fn(KafkaError) -> SnapshotError + '_ {
        move |source| SnapshotError::Kafka {
            topic: self.topic.clone(),
            partition,
            source,
        }
    }

    fn corrupt(&self, partition: i32, reason: impl Into<String>) -> SnapshotError {
        SnapshotError::Corrupt {
            topic: self.topic.clone(),
            partition,
            reason: reason.into(),
        }
    }

    /// Writes snapshots of several partitions at once and returns, for each
    /// partition, its stored manifest and payload bytes, or why it was not
    /// stored. Every chunk
    /// is queued before any is awaited, then every manifest, so that a
    /// checkpoint of all partitions takes two round trips to the broker, not
    /// two per partition.
    pub fn write_all(&self, snapshots: Vec<Pending>) -> Vec<(i32, Written)> {
        let chunked: Vec<_> = snapshots
            .into_iter()
            .map(|pending| {
                let chunks = self.queue_chunks(&pending);
                let bytes = pending.payload.as_ref().map_or(0, Chunks::written);
                (pending, bytes, chunks)
            })
            .collect();
        let runtime = self.runtime.clone();
        runtime.block_on(async {
            let mut manifests = Vec::with_capacity(chunked.len());
            for (pending, bytes, chunks) in chunked {
                let stored = match chunks {
                    Ok(chunks) => self.first_offset(pending.partition, chunks).await,
                    Err(error) => Err(error),
                };
                let manifest = stored.and_then(|first_chunk| {
                    let mut manifest = pending.manifest;
                    if let Some(first_chunk) = first_chunk {
                        manifest.first_chunk = first_chunk;
                    }
                    let encoded = encode_manifest(&manifest).map_err(|e| {
                        self.corrupt(pending.partition, format!("encoding a manifest: {e}"))
                    })?;
                    let delivery = self.queue(pending.partition, MANIFEST_KEY, &encoded)?;
                    Ok((manifest, delivery))
                });
                manifests.push((pending.partition, bytes, manifest));
            }
            let mut written = Vec::with_capacity(manifests.len());
            for (partition, bytes, queued) in manifests {
                let stored = match queued {
                    Ok((manifest, delivery)) => self
                        .delivered(partition, delivery)
                        .await
                        .map(|_| (manifest, bytes)),
                    Err(error) => Err(error),
                };
                written.push((partition, stored));
            }
            written
        })
    }

    /// Writes a manifest alone (a claim naming chunks already stored).
    pub fn write_manifest(&self, partition: i32, manifest: &Manifest) -> Result<(), SnapshotError> {
        let pending = Pending {
            partition,
            payload: None,
            manifest: manifest.clone(),
        };
        let mut written = self.write_all(vec![pending]);
        written
            .pop()
            .map_or(Ok(()), |(_, stored)| stored.map(|_| ()))
    }

    /// Queues the chunks of a snapshot, its manifest filled in for them.
    fn queue_chunks(&self, pending: &Pending) -> Result<Vec<DeliveryFuture>, SnapshotError> {
        let Some(payload) = &pending.payload else {
            return Ok(Vec::new());
        };
        let slot = pending.manifest.slot;
        payload
            .iter()
            .enumerate()
            .map(|(index, chunk)| {
                self.queue(pending.partition, &format!("chunk/{slot}/{index}"), chunk)
            })
            .collect()
    }

    /// Waits for every chunk; the offset of the first, if any.
    async fn first_offset(
        &self,
        partition: i32,
        chunks: Vec<DeliveryFuture>,
    ) -> Result<Option<i64>, SnapshotError> {
        let mut first = None;
        for chunk in chunks {
            let offset = self.delivered(partition, chunk).await?;
            first.get_or_insert(offset);
        }
        Ok(first)
    }

    /// Queues one record without waiting for the broker. When librdkafka's
    /// queue is full (a state of more than a gigabyte in flight), it waits
    /// for the queue to drain, up to [`QUEUE_FULL_TIMEOUT`].
    fn queue(
        &self,
        partition: i32,
        key: &str,
        value: &[u8],
    ) -> Result<DeliveryFuture, SnapshotError> {
        let deadline = Instant::now() + QUEUE_FULL_TIMEOUT;
        loop {
            let record = FutureRecord::to(&self.topic)
                .partition(partition)
                .key(key)
                .payload(value);
            match self.producer.send_result(record) {
                Ok(delivery) => return Ok(delivery),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _))
                    if Instant::now() < deadline =>
                {
                    std::thread::sleep(QUEUE_FULL_PAUSE);
                }
                Err((error, _)) => return Err(self.kafka(partition)(error)),
            }
        }
    }

    /// The offset the broker stored a queued record at, by librdkafka's
    /// report (within [`DELIVERY_TIMEOUT_MS`]).
    async fn delivered(
        &self,
        partition: i32,
        delivery: DeliveryFuture,
    ) -> Result<i64, SnapshotError> {
        match delivery.await {
            Ok(Ok(delivery)) => Ok(delivery.offset),
            Ok(Err((error, _))) => Err(self.kafka(partition)(error)),
            Err(_) => Err(self.kafka(partition)(KafkaError::Canceled)),
        }
    }

    /// The last snapshot of `partition` and its state; `None` when the
    /// partition has never had an owner.
    pub fn read_last(&self, partition: i32) -> Result<Option<Restored>, SnapshotError> {
        let Some(LastManifest { manifest, end, .. }) = self.last_manifest(partition)? else {
            return Ok(None);
        };
        let state = self.read_state(partition, &manifest, end)?;
        Ok(Some(Restored { manifest, state }))
    }

    /// The end of `partition` of the state topic: the offset its next record takes.
    pub fn end(&self, partition: i32) -> Result<i64, SnapshotError> {
        self.watermarks(partition).map(|(_, high)| high)
    }

    fn watermarks(&self, partition: i32) -> Result<(i64, i64), SnapshotError> {
        self.reader
            .fetch_watermarks(&self.topic, partition, READ_TIMEOUT)
            .map_err(self.kafka(partition))
    }

    /// The last manifest of `partition`; `None` when the partition has
    /// never had an owner.
    pub fn last_manifest(&self, partition: i32) -> Result<Option<LastManifest>, SnapshotError> {
        let (low, high) = self.watermarks(partition)?;
        let mut start = high;
        while start > low {
            let end = start;
            start = (start - SCAN_STEP).max(low);
            let mut last = None;
            self.scan(partition, start, end, |offset, key, value| {
                if key == MANIFEST_KEY.as_bytes() {
                    last = Some((offset, value.to_vec()));
                }
                true
            })?;
            if let Some((offset, bytes)) = last {
                let manifest = decode_manifest(&bytes)
                    .map_err(|e| self.corrupt(partition, format!("manifest: {e}")))?;
                return Ok(Some(LastManifest {
                    manifest,
                    offset,
                    end: high,
                }));
            }
        }
        Ok(None)
    }

    /// Reads the chunks that `manifest` names and decodes its state.
    fn read_state(
        &self,
        partition: i32,
        manifest: &Manifest,
        high: i64,
    ) -> Result<Option<EngineState>, SnapshotError> {
        if manifest.chunks == 0 {
            return Ok(None);
        }
        if manifest.version != FORMAT_VERSION {
            return Err(self.corrupt(
                partition,
                format!(
                    "snapshot format {} (this build reads {FORMAT_VERSION})",
                    manifest.version
                ),
            ));
        }
        let mut chunks: Vec<Option<Vec<u8>>> = vec![None; manifest.chunks as usize];
        let prefix = format!("chunk/{}/", manifest.slot);
        let mut missing = chunks.len();
        self.scan(partition, manifest.first_chunk, high, |_, key, value| {
            let Some(index) = std::str::from_utf8(key)
                .ok()
                .and_then(|k| k.strip_prefix(&prefix))
                .and_then(|i| i.parse::<usize>().ok())
            else {
                return true;
            };
            if value.len() < CHUNK_HEADER || value[..8] != manifest.id.to_le_bytes() {
                return true;
            }
            if let Some(slot) = chunks.get_mut(index) {
                if slot.is_none() {
                    missing -= 1;
                }
                *slot = Some(value[CHUNK_HEADER..].to_vec());
            }
            missing > 0
        })?;
        let payload: Vec<u8> = chunks
            .into_iter()
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| self.corrupt(partition, "a chunk of the last snapshot is missing"))?
            .concat();
        if xxhash_rust::xxh3::xxh3_64(&payload) != manifest.checksum {
            return Err(self.corrupt(partition, "checksum mismatch"));
        }
        let state: EngineState = postcard::from_bytes(&payload)
            .map_err(|e| self.corrupt(partition, format!("state: {e}")))?;
        if let Some(inconsistency) = state.inconsistency() {
            return Err(self.corrupt(partition, format!("state: inconsistent: {inconsistency}")));
        }
        Ok(Some(state))
    }

    /// Reads records `[from, to)` of `partition` (compaction may have left
    /// gaps), handing each to `visit` until it returns `false`.
    fn scan(
        &self,
        partition: i32,
        from: i64,
        to: i64,
        mut visit: impl FnMut(i64, &[u8], &[u8]) -> bool,
    ) -> Result<(), SnapshotError> {
        let mut assignment = TopicPartitionList::new();
        assignment
            .add_partition_offset(&self.topic, partition, Offset::Offset(from))
            .map_err(self.kafka(partition))?;
        self.reader
            .assign(&assignment)
            .map_err(self.kafka(partition))?;
        let deadline = Instant::now() + READ_TIMEOUT;
        loop {
            if Instant::now() > deadline {
                return Err(self.kafka(partition)(KafkaError::MessageConsumption(
                    RDKafkaErrorCode::OperationTimedOut,
                )));
            }
            let message = match self.reader.poll(Duration::from_millis(100)) {
                None => continue,
                // The client's reports of lost connections, queued while the
                // broker was away: it reconnects on its own, and reading on
                // finds the records once it has (the deadline bounds it).
                // Taken for failures, they had made every read after a
                // broker restart fail until the queue was drained.
                Some(Err(KafkaError::MessageConsumption(code))) if is_connection(code) => continue,
                Some(message) => message.map_err(self.kafka(partition))?,
            };
            let offset = message.offset();
            if offset >= to {
                return Ok(());
            }
            let more = visit(
                offset,
                message.key().unwrap_or_default(),
                message.payload().unwrap_or_default(),
            );
            if !more || offset + 1 >= to {
                return Ok(());
            }
        }
    }
}

/// Whether `code` reports the client's connections to the brokers, not
/// the partition being read.
fn is_connection(code: RDKafkaErrorCode) -> bool {
    matches!(
        code,
        RDKafkaErrorCode::BrokerTransportFailure | RDKafkaErrorCode::AllBrokersDown
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use postcard::ser_flavors::Flavor;

    fn manifest() -> Manifest {
        Manifest {
            version: 0,
            fingerprint: "fp".to_owned(),
            id: 0x0102_0304_0506_0708,
            slot: 1,
            chunks: 0,
            first_chunk: 0,
            checksum: 0,
            next_offset: 42,
            handed_over: false,
            owner: "rankwatch-1".to_owned(),
            generation: None,
            join_rules: None,
        }
    }

    #[test]
    fn a_manifest_keeps_its_generation_and_reads_as_before_without_it() {
        let known = Manifest {
            generation: Some(7),
            ..manifest()
        };
        let encoded = encode_manifest(&known).unwrap();
        assert_eq!(decode_manifest(&encoded).unwrap(), known);
        // A build before generations reads the fields it knows.
        let mut old: Manifest = postcard::from_bytes(&encoded).unwrap();
        assert_eq!(old.generation, None);
        old.generation = Some(7);
        assert_eq!(old, known);
        // A manifest such a build wrote reads with its generation unknown.
        let written_before = postcard::to_stdvec(&manifest()).unwrap();
        assert_eq!(decode_manifest(&written_before).unwrap(), manifest());
    }

    #[test]
    fn a_manifest_keeps_its_join_rules_and_builds_before_them_read_the_rest() {
        let known = Manifest {
            generation: Some(7),
            join_rules: Some(JoinRules::default()),
            ..manifest()
        };
        let encoded = encode_manifest(&known).unwrap();
        assert_eq!(decode_manifest(&encoded).unwrap(), known);
        // What a build before join rules decodes: the fields, then the generation.
        let (mut old, rest): (Manifest, _) = postcard::take_from_bytes(&encoded).unwrap();
        old.generation = Some(postcard::from_bytes(rest).unwrap());
        assert_eq!(old.join_rules, None);
        old.join_rules = known.join_rules.clone();
        assert_eq!(old, known);
        // Without a generation the rules are not stored: a build before
        // would have read them as one.
        let unknown = Manifest {
            join_rules: Some(JoinRules::default()),
            ..manifest()
        };
        assert_eq!(
            decode_manifest(&encode_manifest(&unknown).unwrap()).unwrap(),
            manifest()
        );
    }

    #[test]
    fn a_payload_is_cut_into_chunks_marked_with_the_snapshot_and_their_index() {
        let payload: Vec<u8> = (0..2 * CHUNK_BYTES + 5).map(|i| (i % 251) as u8).collect();
        let mut chunks = Chunks::default();
        for piece in payload.chunks(1000) {
            chunks.try_extend(piece).unwrap();
        }
        chunks.try_push(7).unwrap();
        assert_eq!(chunks.written(), payload.len() + 1);
        let pending = Pending::new(3, Some(chunks), manifest());
        let stored = pending.payload.as_ref().unwrap();
        assert_eq!(pending.manifest.chunks, 3);
        assert_eq!(pending.manifest.version, FORMAT_VERSION);
        let mut joined = Vec::new();
        let stored: Vec<&[u8]> = stored.iter().collect();
        for (index, chunk) in stored.iter().enumerate() {
            assert_eq!(chunk[..8], manifest().id.to_le_bytes());
            assert_eq!(chunk[8..12], (index as u32).to_le_bytes());
            joined.extend_from_slice(&chunk[CHUNK_HEADER..]);
        }
        assert_eq!(stored[0].len(), CHUNK_HEADER + CHUNK_BYTES);
        assert_eq!(stored[2].len(), CHUNK_HEADER + 6);
        assert_eq!(joined[..payload.len()], payload);
        assert_eq!(
            pending.manifest.checksum,
            xxhash_rust::xxh3::xxh3_64(&joined)
        );
    }

    #[test]
    fn an_empty_payload_has_no_chunks() {
        let pending = Pending::new(0, Some(Chunks::default()), manifest());
        assert_eq!(pending.manifest.chunks, 0);
        assert_eq!(pending.manifest.checksum, xxhash_rust::xxh3::xxh3_64(&[]));
    }
}
