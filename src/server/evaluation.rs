//! `rankwatch.v1.Evaluation`: the report of docs/SPEC.md §6 over gRPC, since start
//! or for one rolling window.

use crate::engine::EngineHandle;
use crate::export::to_proto;
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
        let index = self.window_index(&request.into_inner().window)?;
        let report = self
            .engine
            .report(index)
            .await
            .map_err(|e| Status::unavailable(e.to_string()))?;
        // Under its configured name however it was spelled ("60s" for "1m"),
        // as /api/status and /metrics name it.
        let window = index.map_or_else(String::new, |i| {
            humantime::format_duration(self.windows[i]).to_string()
        });
        Ok(Response::new(to_proto(report, window)))
    }
}
