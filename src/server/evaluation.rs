//! `rankwatch.v1.Evaluation`: the report of SPEC §6 over gRPC, since start
//! or for one rolling window.

use crate::engine::EngineHandle;
use crate::export::{Comparison, Report};
use crate::proto::{self, evaluation_server::Evaluation};
use std::time::Duration;
use tonic::{Request, Response, Status};

/// The evaluation query service.
pub struct EvaluationService {
    engine: EngineHandle,
    windows: Vec<Duration>,
}

impl EvaluationService {
    /// A service answering from `engine`, whose rolling windows are `windows`.
    pub fn new(engine: EngineHandle, windows: Vec<Duration>) -> Self {
        Self { engine, windows }
    }

    fn window_index(&self, window: &str) -> Result<Option<usize>, Status> {
        if window.is_empty() {
            return Ok(None);
        }
        let wanted = humantime::parse_duration(window).ok();
        self.windows
            .iter()
            .position(|w| Some(*w) == wanted)
            .map(Some)
            .ok_or_else(|| {
                let configured: Vec<String> = self
                    .windows
                    .iter()
                    .map(|w| humantime::format_duration(*w).to_string())
                    .collect();
                Status::invalid_argument(format!(
                    "window {} is not configured; configured: {} (or empty for since start)",
                    crate::event::quoted(window),
                    configured.join(", ")
                ))
            })
    }
}

#[tonic::async_trait]
impl Evaluation for EvaluationService {
    async fn get_metrics(
        &self,
        request: Request<proto::GetMetricsRequest>,
    ) -> Result<Response<proto::Report>, Status> {
        let window = request.into_inner().window;
        let index = self.window_index(&window)?;
        let report = self
            .engine
            .report(index)
            .await
            .map_err(|e| Status::unavailable(e.to_string()))?;
        Ok(Response::new(to_proto(report, window)))
    }
}

fn to_proto(report: Report, window: String) -> proto::Report {
    let config = report.config;
    let counters = report.counters;
    proto::Report {
        config: Some(proto::ReportConfig {
            k: config.k.iter().map(|&k| k as u32).collect(),
            attribution_window_s: config.attribution_window_s,
            allowed_lateness_s: config.allowed_lateness_s,
            gain: config.gain,
            control_model: config.control_model.clone().unwrap_or_default(),
        }),
        counters: Some(proto::Counters {
            impressions: counters.impressions,
            interactions: counters.interactions,
            credited: counters.credited,
            unattributed: counters.unattributed.into_iter().collect(),
            late_impressions: counters.late["impressions"],
            duplicate_impressions: counters.duplicates["impressions"],
            duplicate_interactions: counters.duplicates["interactions"],
            rejected: counters.rejected.into_iter().collect(),
            shed: counters.shed.into_iter().collect(),
        }),
        groups: report
            .groups
            .into_iter()
            .map(|group| proto::GroupReport {
                model: group.model,
                surface: group.surface,
                segments: group.segments.into_iter().collect(),
                lists: group.lists,
                engaged_lists: group.engaged_lists,
                metrics: group
                    .metrics
                    .into_iter()
                    .map(|(key, mean)| {
                        (
                            key,
                            proto::MetricMean {
                                all: mean.all,
                                engaged: mean.engaged,
                                se_all: mean.se_all,
                                se_engaged: mean.se_engaged,
                            },
                        )
                    })
                    .collect(),
                positions: group
                    .positions
                    .into_iter()
                    .map(|point| proto::PositionPoint {
                        rank: point.rank as u32,
                        lists: point.lists,
                        interactions: point.interactions.into_iter().collect(),
                    })
                    .collect(),
                coverage: group.coverage.map(|c| proto::Coverage {
                    items_shown: c.items_shown,
                    items_engaged: c.items_engaged,
                    exposure_gini: c.exposure_gini,
                    exposure_entropy: c.exposure_entropy,
                    exact: c.exact,
                }),
            })
            .collect(),
        comparisons: report
            .comparisons
            .unwrap_or_default()
            .into_iter()
            .map(comparison_to_proto)
            .collect(),
        window,
    }
}

fn comparison_to_proto(c: Comparison) -> proto::Comparison {
    proto::Comparison {
        surface: c.surface,
        segments: c.segments.into_iter().collect(),
        model: c.model,
        control: c.control,
        metric: c.metric,
        diff: c.diff,
        se: c.se,
        ci95_lower: c.ci95[0],
        ci95_upper: c.ci95[1],
        cs95_lower: c.cs95[0],
        cs95_upper: c.cs95[1],
    }
}
