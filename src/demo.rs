//! `rankwatch demo`: the server plus built-in synthetic traffic from a good
//! and a worse model, so a new user sees live, differing metrics on the
//! status page at `/` and at `/metrics` within a minute.

use crate::config::parse_duration;
use crate::engine::EngineSettings;
use crate::fleet::FleetSettings;
use crate::loadgen::{self, ModelSpec, Traffic, TrafficConfig, DEFAULT_MODELS};
use crate::serve::serve;
use crate::server::ServerSettings;
use anyhow::Context;
use std::str::FromStr;
use std::time::Duration;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

/// The label on the demo's impressions: `--segment-labels country` makes it a segment.
const DEMO_LABEL: &str = "country=de,fr,us";

/// Settings of the demo's traffic.
#[derive(clap::Args, Clone, Debug)]
pub struct DemoArgs {
    /// Events per second of built-in traffic.
    #[arg(long, env = "RANKWATCH_DEMO_RATE", default_value_t = 2_000.0, value_parser = parse_rate)]
    pub rate: f64,
    /// Models and their ranking quality in [0, 1], as NAME=QUALITY.
    #[arg(long, env = "RANKWATCH_DEMO_MODELS", value_delimiter = ',', default_value = DEFAULT_MODELS)]
    pub models: Vec<ModelSpec>,
    /// Degrade a model after a while, as NAME=QUALITY@DELAY (e.g. candidate=0.05@2m), to watch an alert fire.
    #[arg(long, env = "RANKWATCH_DEMO_DEGRADE", value_parser = parse_degrade)]
    pub degrade: Option<(ModelSpec, Duration)>,
    /// Interleave the models by team draft for this share of lists (0.2
    /// when given without a value), so that the page shows their preference
    /// beside the A/B comparison.
    #[arg(long, env = "RANKWATCH_DEMO_INTERLEAVE", num_args = 0..=1, default_missing_value = "0.2")]
    pub interleave: Option<f64>,
}

/// The most events per second the demo sends.
const MAX_RATE: f64 = 1_000_000.0;

/// A rate of demo traffic: more than 0 and at most [`MAX_RATE`] (0 or
/// NaN had sent as fast as the cores allowed).
fn parse_rate(text: &str) -> Result<f64, String> {
    let rate: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number"))?;
    if !(rate > 0.0 && rate <= MAX_RATE) {
        return Err(format!(
            "{rate:?} is out of range: give events per second above 0 and at most {MAX_RATE:?}"
        ));
    }
    Ok(rate)
}

fn parse_degrade(text: &str) -> Result<(ModelSpec, Duration), String> {
    let Some((model, delay)) = text.split_once('@') else {
        return Err(format!("{text:?} is not NAME=QUALITY@DELAY"));
    };
    let model = ModelSpec::from_str(model).map_err(|e| e.to_string())?;
    let delay = parse_duration(delay).map_err(|e| format!("delay {delay:?}: {e}"))?;
    Ok((model, delay))
}

/// Serves and feeds the server its own traffic until `shutdown`.
///
/// Unless a control model is set, the first model is the control, so the
/// comparisons and their bounds show from the start.
pub async fn run(
    args: DemoArgs,
    mut engine: EngineSettings,
    server: ServerSettings,
    fleet: Option<FleetSettings>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    if engine.control_model.is_none() {
        engine.control_model = args.models.first().map(|model| model.name.clone());
    }
    let (bound_sender, bound) = oneshot::channel();
    let serving = tokio::spawn(serve(
        engine,
        server,
        fleet,
        shutdown.clone(),
        move |bound| {
            let _ = bound_sender.send(bound);
        },
    ));
    let Ok(bound) = bound.await else {
        return serving.await.context("the server task failed")?;
    };
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", bound.grpc))
        .context("the demo server's address")?
        .connect()
        .await
        .context("connecting to the demo server")?;
    let traffic = Traffic::new(TrafficConfig {
        models: args.models.clone(),
        labels: vec![DEMO_LABEL.parse()?],
        interleave_share: args.interleave.unwrap_or(0.0),
        ..TrafficConfig::default()
    })?;
    if let Some((model, delay)) = args.degrade {
        let qualities = traffic.quality_handle();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = shutdown.cancelled() => {}
                _ = tokio::time::sleep(delay) => match qualities.set(&model.name, model.quality) {
                    Ok(()) => tracing::info!(model = %model.name, quality = model.quality, "model degraded"),
                    Err(error) => tracing::warn!(%error, "cannot degrade"),
                },
            }
        });
    }
    tracing::info!(
        "demo traffic at {} events/s; within a minute the models part at http://{}/ (and in curl -s http://{}/metrics | grep 'rankwatch_ndcg{{.*k=\"10\",window=\"1m\",scope=\"all\"')",
        args.rate,
        bound.http,
        bound.http
    );
    let feeding = tokio::spawn(loadgen::feed(
        channel,
        traffic,
        args.rate,
        100,
        shutdown.clone(),
    ));
    let served = serving.await.context("the server task failed")?;
    shutdown.cancel();
    feeding.await.context("the traffic task failed")??;
    served
}

#[cfg(test)]
mod tests {
    use super::parse_rate;

    #[test]
    fn a_rate_is_a_positive_number_of_events_per_second() {
        assert_eq!(parse_rate("2000"), Ok(2000.0));
        for bad in ["0", "-1", "NaN", "inf", "1e9", "fast"] {
            assert!(parse_rate(bad).is_err(), "{bad}");
        }
    }
}
