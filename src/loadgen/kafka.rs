//! `rankwatch loadgen --kafka-brokers`: the same traffic as over gRPC,
//! produced to the event topic of fleet mode (docs/SPEC.md §10) instead: one record
//! per event, keyed by its `user_id`, its value the serialized
//! `rankwatch.v1.Event`, partitioned by murmur2 of the key as the relay's
//! records are (Java's default, which all producers of a topic must share). A batch counts as acknowledged
//! once the broker has stored all its records, so the report's `accepted`
//! is what the topic holds. It knows nothing of the fleet's consumers.

use super::pacer::Pacer;
use super::source::BatchSource;
use super::stats::{Sent, StreamStats};
use super::stream::StreamPlan;
use super::LoadError;
use crate::proto::{event::Kind, Event, EventBatch, IngestAck};
use prost::Message;
use rdkafka::error::KafkaError;
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientConfig;
use std::collections::VecDeque;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How long the broker may take to store a record before the run fails.
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(30);

/// Where the records go.
#[derive(Clone, Debug)]
pub(super) struct Destination {
    /// Bootstrap brokers, comma-separated.
    pub(super) brokers: String,
    /// The event topic.
    pub(super) topic: String,
    /// Most records of one record batch.
    pub(super) batch_records: usize,
}

impl Destination {
    /// A producer that waits for every replica (`acks=all`), with at most
    /// `batch_records` records per record batch: tansu 0.6.0, the broker of
    /// the tests, acknowledged and then lost some records of multi-record
    /// batches (about 0.3% of 40,000 at 20,000 events/s), while it kept
    /// every one sent alone.
    pub(super) fn producer(&self) -> Result<FutureProducer, LoadError> {
        ClientConfig::new()
            .set("bootstrap.servers", &self.brokers)
            .set("client.id", "rankwatch-loadgen")
            // A missing topic fails, rather than being created by a broker
            // that auto-creates topics with its default partition count.
            .set("allow.auto.create.topics", "false")
            .set("acks", "all")
            .set("partitioner", "murmur2_random")
            .set("linger.ms", "1")
            .set("compression.type", "none")
            .set("batch.num.messages", self.batch_records.to_string())
            .set(
                "message.timeout.ms",
                DELIVERY_TIMEOUT.as_millis().to_string(),
            )
            .create()
            .map_err(|source| LoadError::Kafka {
                brokers: self.brokers.clone(),
                source,
            })
    }
}

/// A batch whose records are produced, and their deliveries.
struct Producing {
    sent: Sent,
    deliveries: Vec<DeliveryFuture>,
}

impl Producing {
    /// Waits until the broker has stored every record; an ack of them all.
    async fn stored(self, brokers: &str) -> Result<(IngestAck, Sent), LoadError> {
        let records = self.deliveries.len() as u32;
        for delivery in self.deliveries {
            let stored = match delivery.await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err((source, _))) => Err(source),
                Err(_) => Err(KafkaError::Canceled),
            };
            stored.map_err(|source| LoadError::Kafka {
                brokers: brokers.to_owned(),
                source,
            })?;
        }
        let ack = IngestAck {
            sequence: self.sent.sequence,
            accepted: records,
            ..IngestAck::default()
        };
        Ok((ack, self.sent))
    }
}

/// Produces `source`'s batches, paced as a gRPC stream is and with at most
/// `plan.max_inflight` batches not yet stored, until `stop` or until they
/// run out; then waits for the rest to be stored.
pub(super) async fn drive(
    producer: FutureProducer,
    destination: Destination,
    mut source: BatchSource,
    plan: StreamPlan,
    stop: CancellationToken,
) -> Result<StreamStats, LoadError> {
    let mut pacer = Pacer::new(plan.rate, plan.batch_size);
    let mut inflight: VecDeque<Producing> = VecDeque::with_capacity(plan.max_inflight);
    let mut stats = StreamStats::default();
    let mut sequence = 0u64;
    loop {
        if inflight.len() >= plan.max_inflight {
            if let Some(oldest) = inflight.pop_front() {
                let (ack, sent) = oldest.stored(&destination.brokers).await?;
                stats.acked(ack, sent)?;
            }
            continue;
        }
        tokio::select! {
            biased;
            () = stop.cancelled() => break,
            () = pacer.ready() => {}
        }
        let Some(batch) = source.next(sequence + 1, plan.batch_size) else {
            break;
        };
        sequence = batch.sequence;
        stats.sent(&batch);
        let events = EventBatch::decode(batch.bytes)
            .expect("the generator's own batches decode")
            .events;
        let mut deliveries = Vec::with_capacity(events.len());
        for event in &events {
            deliveries.push(produce(&producer, &destination, event).await?);
        }
        inflight.push_back(Producing {
            sent: Sent {
                sequence,
                at: Instant::now(),
            },
            deliveries,
        });
        pacer.sent();
        // Producing never waits while the broker keeps up, and deliveries
        // done by the time they are awaited do not either: without this, a
        // stream would keep its worker to itself, and the timer that ends
        // the run (`--duration`) would not fire until the broker fell behind.
        tokio::task::yield_now().await;
    }
    for batch in inflight {
        let (ack, sent) = batch.stored(&destination.brokers).await?;
        stats.acked(ack, sent)?;
    }
    Ok(stats)
}

/// Queues one event's record, waiting while the client's queue is full.
async fn produce(
    producer: &FutureProducer,
    destination: &Destination,
    event: &Event,
) -> Result<DeliveryFuture, LoadError> {
    let key = user_id(event);
    let value = event.encode_to_vec();
    loop {
        let record = FutureRecord::to(&destination.topic)
            .key(key)
            .payload(&value);
        match producer.send_result(record) {
            Ok(delivery) => return Ok(delivery),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            Err((source, _)) => {
                return Err(LoadError::Kafka {
                    brokers: destination.brokers.clone(),
                    source,
                })
            }
        }
    }
}

/// The record key of docs/SPEC.md §10: the event's `user_id`.
fn user_id(event: &Event) -> &str {
    match &event.kind {
        Some(Kind::Impression(m)) => &m.user_id,
        Some(Kind::Interaction(x)) => &x.user_id,
        None => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{Impression, Interaction};

    #[test]
    fn records_are_keyed_by_the_events_user() {
        let impression = Event {
            kind: Some(Kind::Impression(Impression {
                user_id: "u-1".into(),
                ..Impression::default()
            })),
        };
        let interaction = Event {
            kind: Some(Kind::Interaction(Interaction {
                user_id: "u-2".into(),
                ..Interaction::default()
            })),
        };
        assert_eq!(user_id(&impression), "u-1");
        assert_eq!(user_id(&interaction), "u-2");
        assert_eq!(user_id(&Event { kind: None }), "");
    }
}
