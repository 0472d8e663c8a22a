//! The engine's settings, resolved and validated by the commands, and what
//! derives from them: join settings, the list evaluator, the validator, the
//! report's header and the fingerprint of saved state.

use crate::clock::nanos;
use crate::event::{GradeTable, Validator};
use crate::export::ReportConfig;
use crate::join::{JoinSettings, SegmentSettings};
use crate::metrics::{CoverageMode, ListEvaluator, MetricSettings};
use crate::state::JoinRules;
use std::time::Duration;

/// Join and metric settings, resolved and validated.
#[derive(Clone, Debug, PartialEq)]
pub struct EngineSettings {
    /// How long after an impression its interactions count.
    pub attribution_window: Duration,
    /// How far the watermark trails the latest event time.
    pub allowed_lateness: Duration,
    /// Cutoffs K.
    pub k: Vec<usize>,
    /// Gain, discount and half-life of the metrics.
    pub metrics: MetricSettings,
    /// Grade of each interaction type.
    pub grades: GradeTable,
    /// Deepest rank of the position curves; 0 keeps none.
    pub position_curve_depth: usize,
    /// Most items whose exposure one coverage keeps; 0 keeps no coverage.
    pub max_exposure_items: usize,
    /// Whether open lists keep their items as numbers of an item table.
    pub number_items: bool,
    /// Most items in one impression.
    pub max_items: usize,
    /// Longest model or surface name, in bytes.
    pub max_label_bytes: usize,
    /// Most rejections an ack details; the others are counted by reason.
    pub max_ack_rejections: usize,
    /// Largest grade of an interaction.
    pub max_grade: f64,
    /// Most groups.
    pub max_groups: usize,
    /// The segment labels and the bound on their values.
    pub segments: SegmentSettings,
    /// Most open impressions.
    pub max_open_impressions: usize,
    /// Most items of all open impressions together.
    pub max_open_items: usize,
    /// Most waiting interactions.
    pub max_waiting_interactions: usize,
    /// Most interactions credited to all open impressions together.
    pub max_open_credits: usize,
    /// Most open impressions of one user.
    pub max_open_impressions_per_user: usize,
    /// Most waiting interactions of one user.
    pub max_waiting_interactions_per_user: usize,
    /// Most interactions credited to one impression as they arrive.
    pub max_interactions_per_impression: usize,
    /// The model compared against; none means no comparisons.
    pub control_model: Option<String>,
    /// The intended share of lists of each model, sorted by model, summing
    /// to 1; empty means no sample ratio check.
    pub expected_split: Vec<(String, f64)>,
    /// Most rankers in one interleaved list.
    pub max_interleaved_rankers: usize,
}

impl EngineSettings {
    /// Join settings for an engine keeping rolling windows of `windows`.
    pub fn join(&self, windows: &[Duration]) -> JoinSettings {
        JoinSettings {
            attribution_window: nanos(self.attribution_window),
            allowed_lateness: nanos(self.allowed_lateness),
            shards: 16,
            max_groups: self.max_groups,
            segments: self.segments.clone(),
            max_open_impressions: self.max_open_impressions,
            max_open_items: self.max_open_items,
            max_waiting_interactions: self.max_waiting_interactions,
            max_open_credits: self.max_open_credits,
            max_open_impressions_per_user: self.max_open_impressions_per_user,
            max_waiting_interactions_per_user: self.max_waiting_interactions_per_user,
            max_interactions_per_impression: self.max_interactions_per_impression,
            windows: windows.iter().map(|&w| nanos(w)).collect(),
            position_curve_depth: self.position_curve_depth,
            interaction_types: self.grades.types(),
            coverage: self.coverage_mode(),
            number_items: self.number_items,
        }
    }

    /// How `serve` keeps coverage: from sketches past `max_exposure_items`.
    pub fn coverage_mode(&self) -> CoverageMode {
        match self.max_exposure_items {
            0 => CoverageMode::Off,
            max_items => CoverageMode::Sketch { max_items },
        }
    }

    /// What saved state must have been computed under to be restored:
    /// the cutoffs, the metric settings, the rolling windows and the
    /// segment labels (written only when there are some).
    pub fn fingerprint(&self, windows: &[Duration]) -> String {
        let mut fingerprint = format!(
            "k={:?} metrics={:?} windows={windows:?} positions={} types={:?} coverage={}",
            self.evaluator().ks(),
            self.metrics,
            self.position_curve_depth,
            self.grades.types(),
            self.max_exposure_items > 0
        );
        if !self.segments.labels.is_empty() {
            fingerprint.push_str(&format!(" segments={:?}", self.segments.labels));
        }
        fingerprint
    }

    /// The settings that decide what each list counts without changing
    /// what a state holds, saved beside it.
    pub fn join_rules(&self) -> JoinRules {
        JoinRules {
            attribution_window: self.attribution_window,
            allowed_lateness: self.allowed_lateness,
            grades: self.grades.pairs().to_vec(),
        }
    }

    /// The list evaluator for these settings.
    pub fn evaluator(&self) -> ListEvaluator {
        ListEvaluator::new(self.metrics.clone(), &self.k)
    }

    /// The settings a report prints: the engine's cutoffs (sorted, as evaluated) and windows.
    pub fn report_config(&self) -> ReportConfig {
        ReportConfig {
            k: self.evaluator().ks().to_vec(),
            attribution_window_s: self.attribution_window.as_secs_f64(),
            allowed_lateness_s: self.allowed_lateness.as_secs_f64(),
            gain: self.metrics.gain.name().to_owned(),
            control_model: self.control_model.clone(),
            expected_split: self.expected_split.clone(),
        }
    }

    /// A validator; `max_future_skew` is `None` where there is no wall clock.
    pub fn validator(&self, max_future_skew: Option<Duration>) -> Validator {
        Validator {
            grades: self.grades.clone(),
            max_items: self.max_items,
            max_future_skew: max_future_skew.map(nanos),
            max_label_bytes: self.max_label_bytes,
            max_grade: self.max_grade,
            max_interleaved_rankers: self.max_interleaved_rankers,
            segment_labels: self.segments.labels.clone(),
        }
    }
}
