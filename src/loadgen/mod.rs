//! Synthetic traffic: a position-based click model over several models of
//! different quality, sent to a running server (loadgen, demo, benchmarks).
//!
//! [`Traffic`] is a deterministic generator of wire [`Event`](crate::proto::Event)s: users see
//! ranked lists from a catalogue of items with a latent relevance, ranked by
//! models that are better or worse at ordering by that relevance, and give
//! feedback under a position-based click model. [`run`] drives `--streams`
//! `Collector.Ingest` streams against a server and measures throughput and ack
//! latency, generating each batch as it sends it or, with `--pregenerate`,
//! sending batches encoded before the run so that the server's capacity
//! rather than the generator's is measured; [`feed`] pushes traffic into a
//! server until shutdown, for the demo. With `--kafka-brokers` the same
//! traffic is produced to fleet mode's event topic instead ([`kafka`]).
//! This module only speaks the public gRPC API and the topic's format: it knows nothing of the join,
//! the metrics or the server's internals, exactly like an external client.

mod args;
mod click_model;
mod error;
#[cfg(feature = "kafka")]
mod kafka;
mod label_spec;
mod model_spec;
mod pacer;
mod quality;
mod report;
mod sender;
mod source;
mod stats;
mod stream;
mod team_draft;
mod traffic;
mod traffic_config;

pub use args::LoadgenArgs;
pub use error::LoadError;
pub use label_spec::LabelSpec;
pub use model_spec::{ModelSpec, DEFAULT_MODELS};
pub use quality::QualityHandle;
pub use report::{LatencySummary, LoadReport};
pub use team_draft::team_draft;
pub use traffic::{Traffic, INTERLEAVED_MODEL};
pub use traffic_config::{TrafficConfig, TrafficError};

use crate::clock::wall_clock;
use anyhow::Context;
use report::process_cpu;
use source::BatchSource;
use stats::StreamStats;
use stream::{drive, StreamPlan};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tonic::transport::{Channel, Endpoint};

/// Batches a stream may leave unacknowledged when [`feed`] drives it.
const FEED_MAX_INFLIGHT: usize = 8;

/// Runs `rankwatch loadgen` for `--duration`, then reports what it achieved.
pub async fn run(args: &LoadgenArgs) -> anyhow::Result<LoadReport> {
    run_until(args, CancellationToken::new()).await
}

/// Like [`run`], but also stops early, with a report, when `shutdown` is cancelled (Ctrl-C).
pub async fn run_until(
    args: &LoadgenArgs,
    shutdown: CancellationToken,
) -> anyhow::Result<LoadReport> {
    args.validate()?;
    // Distinct ids per run, so that a second run is not taken for retries of the first.
    let run_id = u64::try_from(wall_clock() / 1_000_000).unwrap_or_default();
    let plan = StreamPlan {
        rate: args.rate / args.streams as f64,
        batch_size: args.batch_size,
        max_inflight: args.max_inflight,
    };
    #[cfg(feature = "kafka")]
    if let Some(destination) = args.kafka_destination() {
        return produce(args, destination, run_id, plan, shutdown).await;
    }
    #[cfg(not(feature = "kafka"))]
    if args.kafka_brokers.is_some() {
        anyhow::bail!("--kafka-brokers: {}", crate::fleet::settings::NO_KAFKA);
    }
    let endpoint = Endpoint::from_shared(crate::address::url(&args.target, "http"))
        .map_err(|source| LoadError::Target {
            target: args.target.clone(),
            source,
        })?
        .tcp_nodelay(true);
    let mut streams = Vec::with_capacity(args.streams);
    for stream in 0..args.streams {
        let source = args.source(run_id, stream)?;
        // One connection per stream, so that the server can spread them over its cores.
        let channel = endpoint
            .connect()
            .await
            .map_err(|source| LoadError::Connect {
                target: args.target.clone(),
                source,
            })?;
        streams.push((channel, source));
    }
    let stop = shutdown.child_token();
    let started = Instant::now();
    let cpu_before = process_cpu();
    let mut tasks = tokio::task::JoinSet::new();
    for (channel, source) in streams {
        tasks.spawn(drive(channel, source, plan, stop.clone()));
    }
    finish(args, tasks, stop, started, cpu_before).await
}

/// Produces `--streams` streams of traffic to the event topic of fleet mode.
#[cfg(feature = "kafka")]
async fn produce(
    args: &LoadgenArgs,
    destination: kafka::Destination,
    run_id: u64,
    plan: StreamPlan,
    shutdown: CancellationToken,
) -> anyhow::Result<LoadReport> {
    let producer = destination.producer()?;
    let sources = (0..args.streams)
        .map(|stream| args.source(run_id, stream))
        .collect::<Result<Vec<_>, _>>()?;
    let stop = shutdown.child_token();
    let started = Instant::now();
    let cpu_before = process_cpu();
    let mut tasks = tokio::task::JoinSet::new();
    for source in sources {
        let (producer, destination) = (producer.clone(), destination.clone());
        tasks.spawn(kafka::drive(
            producer,
            destination,
            source,
            plan,
            stop.clone(),
        ));
    }
    finish(args, tasks, stop, started, cpu_before).await
}

/// Stops the streams after `--duration` (or at `stop`), and reports on them.
async fn finish(
    args: &LoadgenArgs,
    mut tasks: tokio::task::JoinSet<Result<StreamStats, LoadError>>,
    stop: CancellationToken,
    started: Instant,
    cpu_before: std::time::Duration,
) -> anyhow::Result<LoadReport> {
    let timer = tokio::spawn({
        let stop = stop.clone();
        let duration = args.duration;
        async move {
            tokio::time::sleep(duration).await;
            stop.cancel();
        }
    });
    let mut total = StreamStats::default();
    let outcome = async {
        while let Some(joined) = tasks.join_next().await {
            total.merge(joined.context("a load stream panicked")??);
        }
        anyhow::Ok(())
    }
    .await;
    timer.abort();
    stop.cancel();
    outcome?;
    let cpu = process_cpu().saturating_sub(cpu_before);
    Ok(total.report(args.streams, started.elapsed(), cpu))
}

/// Sends `traffic` to `channel` at `rate` events per second (0: as fast as acks
/// allow) in batches of `batch_size`, on one `Ingest` stream, until `shutdown`;
/// then waits briefly for outstanding acks. Rejections are logged once per
/// reason. A stream that breaks after `shutdown` (the server stopping too) is
/// not an error.
pub async fn feed(
    channel: Channel,
    traffic: Traffic,
    rate: f64,
    batch_size: usize,
    shutdown: CancellationToken,
) -> Result<(), LoadError> {
    let plan = StreamPlan {
        rate: rate.max(0.0),
        batch_size: batch_size.max(1),
        max_inflight: FEED_MAX_INFLIGHT,
    };
    match drive(
        channel,
        BatchSource::Live(Box::new(traffic)),
        plan,
        shutdown.clone(),
    )
    .await
    {
        Ok(_) => Ok(()),
        Err(_) if shutdown.is_cancelled() => Ok(()),
        Err(error) => Err(error),
    }
}
