//! `rankwatch loadgen`'s flags, and the generator each stream gets from them.

use super::source::BatchSource;
use super::{
    LabelSpec, LoadError, ModelSpec, Traffic, TrafficConfig, TrafficError, DEFAULT_MODELS,
};
use crate::config::parse_duration;
use crate::event::NANOS_PER_SECOND;
use std::time::Duration;

/// `rankwatch loadgen`: synthetic traffic against a running server.
#[derive(clap::Args, Clone, Debug)]
pub struct LoadgenArgs {
    /// gRPC address of the server: a URL, or HOST:PORT (read as http://HOST:PORT).
    #[arg(
        long,
        env = "RANKWATCH_LOADGEN_TARGET",
        default_value = "http://127.0.0.1:50051"
    )]
    pub target: String,
    /// Events per second across all streams; 0 sends as fast as acks allow.
    #[arg(long, env = "RANKWATCH_LOADGEN_RATE", default_value_t = 10_000.0)]
    pub rate: f64,
    /// Events per batch.
    #[arg(long, env = "RANKWATCH_LOADGEN_BATCH_SIZE", default_value_t = 100)]
    pub batch_size: usize,
    /// Concurrent `Ingest` streams, each on its own connection with its own
    /// users (at most 10,000).
    #[arg(long, env = "RANKWATCH_LOADGEN_STREAMS", default_value_t = 1)]
    pub streams: usize,
    /// How long to send; outstanding acks are then awaited.
    #[arg(long, env = "RANKWATCH_LOADGEN_DURATION", default_value = "10s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Distinct users across all streams.
    #[arg(long, env = "RANKWATCH_LOADGEN_USERS", default_value_t = 100_000)]
    pub users: u32,
    /// Items in the catalogue.
    #[arg(long, env = "RANKWATCH_LOADGEN_CATALOGUE", default_value_t = 10_000)]
    pub catalogue: u32,
    /// Items in every impression.
    #[arg(long, env = "RANKWATCH_LOADGEN_ITEMS_PER_LIST", default_value_t = 20)]
    pub items_per_list: usize,
    /// Share of interactions among all events, in [0, 1).
    #[arg(
        long,
        env = "RANKWATCH_LOADGEN_INTERACTION_SHARE",
        default_value_t = 0.8
    )]
    pub interaction_share: f64,
    /// Share of interactions that carry their impression's request id.
    #[arg(
        long,
        env = "RANKWATCH_LOADGEN_REQUEST_ID_SHARE",
        default_value_t = 0.9
    )]
    pub request_id_share: f64,
    /// Mean delay from an impression to its interactions, in event time. Short
    /// by default so that a short run reaches the interaction share quickly.
    #[arg(long, env = "RANKWATCH_LOADGEN_FEEDBACK_DELAY", default_value = "200ms", value_parser = parse_duration)]
    pub feedback_delay: Duration,
    /// Seed of the generators (stream n uses a seed derived from this and n).
    #[arg(long, env = "RANKWATCH_LOADGEN_SEED", default_value_t = 1)]
    pub seed: u64,
    /// Models and their ranking quality in [0, 1], as NAME=QUALITY.
    #[arg(long, env = "RANKWATCH_LOADGEN_MODELS", value_delimiter = ',', default_value = DEFAULT_MODELS)]
    pub models: Vec<ModelSpec>,
    /// Surfaces the lists are shown on.
    #[arg(
        long,
        env = "RANKWATCH_LOADGEN_SURFACES",
        value_delimiter = ',',
        default_value = "home,search"
    )]
    pub surfaces: Vec<String>,
    /// Labels on every impression, as KEY=V1,V2,... separated by `;`; a
    /// user always takes the same value of each (for `segment_labels`).
    #[arg(long, env = "RANKWATCH_LOADGEN_LABELS", value_delimiter = ';')]
    pub labels: Vec<LabelSpec>,
    /// Share of lists, in [0, 1], merged from every model's ranking by team
    /// draft (model `interleaved`, with the `interleaving` field).
    #[arg(long, env = "RANKWATCH_LOADGEN_INTERLEAVE", default_value_t = 0.0)]
    pub interleave: f64,
    /// Most batches a stream leaves unacknowledged before it waits.
    #[arg(long, env = "RANKWATCH_LOADGEN_MAX_INFLIGHT", default_value_t = 8)]
    pub max_inflight: usize,
    /// Generate and encode every batch before the run, event times advancing
    /// at this many events per second from when generation starts; the run
    /// then spends the loadgen's core on sending only, and ends at
    /// --duration or when the batches run out. Generating takes a while:
    /// keep the server's wall-clock advance off, or its watermark passes the
    /// first events. At most 100,000,000 events (rate × duration).
    #[arg(
        long,
        env = "RANKWATCH_LOADGEN_PREGENERATE",
        value_name = "EVENTS_PER_SECOND"
    )]
    pub pregenerate: Option<f64>,
    /// Produce to fleet mode's event topic on these Kafka brokers
    /// (comma-separated) instead of sending to --target: one record per
    /// event, keyed by user_id, its value the serialized rankwatch.v1.Event.
    #[arg(long, env = "RANKWATCH_LOADGEN_KAFKA_BROKERS")]
    pub kafka_brokers: Option<String>,
    /// The event topic, with --kafka-brokers.
    #[arg(
        long,
        env = "RANKWATCH_LOADGEN_KAFKA_TOPIC",
        default_value = "rankwatch.events"
    )]
    pub kafka_topic: String,
    /// Most records of one Kafka record batch, with --kafka-brokers. 1 by
    /// default: tansu 0.6.0, the broker of the tests, acknowledged and then
    /// lost some records of multi-record batches; with a real Kafka, or
    /// when a few lost records do not matter (benchmarks), give hundreds.
    #[arg(
        long,
        env = "RANKWATCH_LOADGEN_KAFKA_BATCH_RECORDS",
        default_value_t = 1
    )]
    pub kafka_batch_records: usize,
}

/// The largest `--batch-size`.
const MAX_BATCH_SIZE: usize = 100_000;
/// The most `--streams`: each is a connection of its own.
const MAX_STREAMS: usize = 10_000;
/// The most events `--pregenerate` holds in memory (some 50 bytes each).
const MAX_PREGENERATED_EVENTS: f64 = 1e8;
/// The most catalogue items all streams hold together: each stream draws
/// from a catalogue of its own, 12 bytes an item.
const MAX_CATALOGUE_ITEMS: u64 = 400_000_000;

impl LoadgenArgs {
    pub(super) fn validate(&self) -> Result<(), LoadError> {
        let positive = [
            ("batch-size", self.batch_size),
            ("streams", self.streams),
            ("max-inflight", self.max_inflight),
            ("users", self.users as usize),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, value)| *value == 0) {
            return Err(LoadError::Setting(format!("--{name} must be at least 1")));
        }
        if self.batch_size > MAX_BATCH_SIZE {
            return Err(LoadError::Setting(format!(
                "--batch-size {} is more than {MAX_BATCH_SIZE} events: a batch goes in one gRPC message, which at 40 bytes an event would pass 4 MiB (the server's default max_message_size); send more batches",
                self.batch_size
            )));
        }
        if !self.rate.is_finite() || self.rate < 0.0 {
            return Err(LoadError::Setting(format!(
                "--rate is {}; give events per second, 0 for unpaced",
                self.rate
            )));
        }
        if self.streams > MAX_STREAMS {
            return Err(LoadError::Setting(format!(
                "--streams {} is more than {MAX_STREAMS}: each stream is a connection of its own; run more load generators",
                self.streams
            )));
        }
        let items = u64::from(self.catalogue) * self.streams as u64;
        if items > MAX_CATALOGUE_ITEMS {
            return Err(LoadError::Setting(format!(
                "--catalogue {} on {} streams is {items} items held in memory, each stream a catalogue of its own: {MAX_CATALOGUE_ITEMS} at most (some 5 GB); lower the catalogue or the streams",
                self.catalogue, self.streams
            )));
        }
        if let Some(rate) = self.pregenerate.filter(|r| !r.is_finite() || *r <= 0.0) {
            return Err(LoadError::Setting(format!(
                "--pregenerate is {rate}; give the events per second of event time, e.g. 1000000"
            )));
        }
        if let Some(rate) = self.pregenerate {
            let events = rate * self.duration.as_secs_f64();
            if events > MAX_PREGENERATED_EVENTS {
                return Err(LoadError::Setting(format!(
                    "--pregenerate {rate} for --duration {} is {events:.0} events, held in memory before the run: {MAX_PREGENERATED_EVENTS:.0} events at most (some 5 GB); lower the rate or the duration",
                    humantime::format_duration(self.duration)
                )));
            }
        }
        Ok(())
    }

    /// Where to produce records, when --kafka-brokers is given.
    #[cfg(feature = "kafka")]
    pub(super) fn kafka_destination(&self) -> Option<super::kafka::Destination> {
        let brokers = self.kafka_brokers.clone()?;
        Some(super::kafka::Destination {
            brokers,
            topic: self.kafka_topic.clone(),
            batch_records: self.kafka_batch_records.max(1),
        })
    }

    /// Stream `stream`'s batches, generated now if `--pregenerate` asks for it.
    pub(super) fn source(&self, run: u64, stream: usize) -> Result<BatchSource, TrafficError> {
        let traffic = Traffic::new(self.traffic(run, stream))?;
        let Some(rate) = self.pregenerate else {
            return Ok(BatchSource::Live(Box::new(traffic)));
        };
        let stream_rate = rate / self.streams as f64;
        let count = (self.duration.as_secs_f64() * stream_rate / self.batch_size as f64).ceil();
        let period = self.batch_size as f64 / stream_rate * NANOS_PER_SECOND as f64;
        Ok(BatchSource::pregenerate(
            traffic,
            count as u64,
            self.batch_size,
            period,
        ))
    }

    /// The generator of stream `stream` of run `run`: its own seed and ids.
    fn traffic(&self, run: u64, stream: usize) -> TrafficConfig {
        let streams = self.streams.max(1) as u32;
        TrafficConfig {
            seed: self.seed ^ (stream as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15),
            users: (self.users / streams).max(1),
            catalogue: self.catalogue,
            items_per_list: self.items_per_list,
            interaction_share: self.interaction_share,
            request_id_share: self.request_id_share,
            feedback_delay: self.feedback_delay,
            models: self.models.clone(),
            surfaces: self.surfaces.clone(),
            labels: self.labels.clone(),
            id_prefix: format!("{run:x}-{stream}-"),
            interleave_share: self.interleave,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loadgen::traffic::tests::time;
    use clap::Parser;
    use prost::Message;

    #[derive(Parser)]
    struct Command {
        #[command(flatten)]
        args: LoadgenArgs,
    }

    /// `rankwatch loadgen FLAGS`, parsed.
    fn parsed(flags: &[&str]) -> LoadgenArgs {
        Command::try_parse_from(std::iter::once("loadgen").chain(flags.iter().copied()))
            .expect("flags parse")
            .args
    }

    #[test]
    fn flags_have_the_documented_defaults() {
        let args = parsed(&[]);
        assert_eq!(args.target, "http://127.0.0.1:50051");
        assert_eq!(
            (args.rate, args.batch_size, args.streams, args.max_inflight),
            (10_000.0, 100, 1, 8)
        );
        assert_eq!(args.duration, Duration::from_secs(10));
        assert_eq!(
            args.models,
            vec![
                ModelSpec::new("control", 0.9),
                ModelSpec::new("candidate", 0.4)
            ]
        );
        assert_eq!(args.surfaces, ["home", "search"]);
        assert!(args.labels.is_empty());
        let args = parsed(&[
            "--models",
            "a=1,b=0",
            "--duration",
            "1m",
            "--rate",
            "0",
            "--labels",
            "country=de,fr;app=ios",
        ]);
        assert_eq!(
            args.models,
            vec![ModelSpec::new("a", 1.0), ModelSpec::new("b", 0.0)]
        );
        assert_eq!(args.duration, Duration::from_secs(60));
        let labels: Vec<(&str, usize)> = args
            .labels
            .iter()
            .map(|l| (l.key.as_str(), l.values.len()))
            .collect();
        assert_eq!(labels, [("country", 2), ("app", 1)]);
        assert!(args.validate().is_ok());
        assert!(Command::try_parse_from(["loadgen", "--models", "a=2"]).is_err());
    }

    #[test]
    fn zero_of_a_count_is_refused_naming_the_flag() {
        for flag in ["--batch-size", "--streams", "--max-inflight", "--users"] {
            let args = parsed(&[flag, "0"]);
            let error = args.validate().expect_err(flag).to_string();
            assert!(
                error.contains(&format!("{flag} must be at least 1")),
                "{error}"
            );
        }
    }

    #[test]
    fn a_batch_too_large_for_any_message_is_refused_before_it_is_built() {
        // 4,294,967,296 events were reserved at once: 24 GB, then the OOM killer.
        let args = parsed(&["--batch-size", "4294967296"]);
        let error = args.validate().expect_err("refused").to_string();
        assert!(
            error.contains("--batch-size 4294967296 is more than"),
            "{error}"
        );
    }

    #[test]
    fn more_streams_pregenerated_events_or_catalogue_items_than_memory_holds_are_refused() {
        // Both had panicked with "capacity overflow" reserving their vectors.
        let streams = parsed(&["--streams", "18446744073709551615"]);
        let error = streams.validate().expect_err("refused").to_string();
        assert!(
            error.contains("--streams 18446744073709551615 is more than 10000"),
            "{error}"
        );
        let pregenerated = parsed(&["--pregenerate", "1e308", "--duration", "10s"]);
        let error = pregenerated.validate().expect_err("refused").to_string();
        assert!(error.contains("100000000 events at most"), "{error}");
        let just = parsed(&["--pregenerate", "10000000"]);
        assert!(just.validate().is_ok(), "10 s at 10 M/s: 100 M events");
        // A catalogue of a billion items on 4 streams had been killed for
        // want of memory at 24 GB.
        let catalogue = parsed(&["--catalogue", "1000000000", "--streams", "4"]);
        let error = catalogue.validate().expect_err("refused").to_string();
        assert!(
            error.contains("--catalogue 1000000000 on 4 streams is 4000000000 items"),
            "{error}"
        );
        let just = parsed(&["--catalogue", "100000000", "--streams", "4"]);
        assert!(just.validate().is_ok(), "400 M items");
    }

    #[test]
    fn pregenerated_batches_cover_the_duration_at_the_given_rate() {
        let args = parsed(&[
            "--streams",
            "2",
            "--duration",
            "1s",
            "--batch-size",
            "10",
            "--pregenerate",
            "1000",
        ]);
        assert!(args.validate().is_ok());
        let BatchSource::Ready(batches) = args.source(7, 1).expect("a source") else {
            panic!("--pregenerate gives ready batches");
        };
        let batches: Vec<_> = batches.collect();
        // 500 events/s per stream for 1 s, in batches of 10.
        assert_eq!(batches.len(), 50);
        let sequences: Vec<_> = batches.iter().map(|b| b.sequence).collect();
        assert_eq!(sequences, (1..=50).collect::<Vec<_>>());
        let times: Vec<_> = batches
            .iter()
            .map(|b| {
                let batch = crate::proto::EventBatch::decode(b.bytes.clone()).expect("decodes");
                assert_eq!(batch.sequence, b.sequence);
                assert_eq!(batch.events.len() as u64, b.impressions + b.interactions);
                batch.events.iter().map(time).min().expect("events")
            })
            .collect();
        // One batch every 20 ms of event time.
        let span = times[49] - times[0];
        assert!((span - 49 * 20_000_000).abs() < 20_000_000, "{span}");
        for bad in ["0", "-5", "inf"] {
            let mut args = args.clone();
            args.pregenerate = bad.parse().ok();
            assert!(args.validate().is_err(), "{bad}");
        }
    }
}
