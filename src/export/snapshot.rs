//! One moment's figures of the engine, as `/metrics` shows them.

use crate::event::Nanos;
use crate::join::{Counters, Engine, EngineBefore, ExperimentName, GroupBefore};
use crate::metrics::{Coverage, CoverageFigures, CoverageMode, GroupTotals, PositionCurve};

/// One group's figures at a moment.
#[derive(Clone, Debug)]
pub struct GroupSnapshot {
    /// The group's model.
    pub model: String,
    /// The group's surface.
    pub surface: String,
    /// `(label, value)` of each segment label, in the configured order.
    pub segments: Vec<(String, String)>,
    /// Since start.
    pub totals: GroupTotals,
    /// Per configured window, over the lists in the window.
    pub windows: Vec<GroupTotals>,
    /// Lists and credited interactions by rank, since start.
    pub positions: PositionCurve,
    /// Coverage and exposure since start; `None` when coverage is off.
    pub coverage: Option<CoverageFigures>,
    /// The same per configured window (empty when coverage is off).
    pub window_coverage: Vec<CoverageFigures>,
    /// The figures since start when the exported counters were last reset.
    pub before: Option<GroupBefore>,
}

/// One interleaving experiment's figures at a moment.
#[derive(Clone, Debug)]
pub struct ExperimentSnapshot {
    /// Its surface, segment values and pair of rankers.
    pub name: ExperimentName,
    /// Since start.
    pub totals: GroupTotals,
    /// Per configured window, over the lists in the window.
    pub windows: Vec<GroupTotals>,
    /// The totals when the exported counters were last reset.
    pub before: Option<GroupTotals>,
}

/// Everything `/metrics` shows of the engine, taken at one moment.
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// The join's event counters since start.
    pub counters: Counters,
    /// Every group, in the engine's order.
    pub groups: Vec<GroupSnapshot>,
    /// The cutoffs, as evaluated.
    pub ks: Vec<usize>,
    /// Interaction type names, the columns of the position curves.
    pub interaction_types: Vec<String>,
    /// Impressions open for attribution.
    pub open_impressions: usize,
    /// Their items.
    pub open_items: usize,
    /// The interactions credited to them.
    pub open_credits: usize,
    /// Interactions waiting for their impression.
    pub waiting_interactions: usize,
    /// Items numbered in the engine's item table.
    pub item_numbers: usize,
    /// Impressions folded into the overflow group.
    pub overflowed_impressions: u64,
    /// Per segment label, in order: impressions whose value folded into `__other__`.
    pub folded_segment_values: Vec<(String, u64)>,
    /// The event-time watermark, once an event has set it.
    pub watermark: Option<Nanos>,
    /// The finalization frontier, once there is a watermark.
    pub frontier: Option<Nanos>,
    /// The model the others are compared against, if any (docs/SPEC.md §9).
    pub control_model: Option<String>,
    /// Every interleaving experiment (docs/SPEC.md §12).
    pub experiments: Vec<ExperimentSnapshot>,
    /// Interleaved lists that found no room for their experiments, since start.
    pub unregistered_interleavings: u64,
    /// The intended share of lists of each model; empty for no check.
    pub expected_split: Vec<(String, f64)>,
    /// How far event time must still advance until the earliest open list
    /// is finalized, in seconds; `None` when none is open.
    pub seconds_to_first_finalization: Option<f64>,
    /// The engine's own counts when the exported counters were last reset.
    pub before: Option<EngineBefore>,
}

/// The totals of each of `count` rolling windows up to `frontier` (empty
/// totals before there is one).
fn window_totals(
    windows: &crate::window::RollingWindows,
    count: usize,
    frontier: Option<Nanos>,
) -> Vec<GroupTotals> {
    (0..count)
        .map(|index| {
            frontier
                .map(|f| windows.totals(index, f))
                .unwrap_or_default()
        })
        .collect()
}

impl Snapshot {
    /// The figures of `engine` now, with comparisons against `control_model` if set.
    pub fn of(engine: &Engine, control_model: Option<String>) -> Self {
        let frontier = engine.frontier();
        let window_count = engine.window_count();
        let coverage_on = engine.coverage_mode() != CoverageMode::Off;
        let groups = engine
            .aggregates()
            .iter()
            .zip(engine.group_names())
            .map(|(aggregates, name)| GroupSnapshot {
                model: name.model.clone(),
                surface: name.surface.clone(),
                segments: name.segments.clone(),
                totals: aggregates.totals.clone(),
                windows: window_totals(&aggregates.windows, window_count, frontier),
                positions: aggregates.positions.clone(),
                coverage: coverage_on.then(|| aggregates.coverage.figures()),
                window_coverage: match (coverage_on, frontier) {
                    (true, Some(f)) => (0..window_count)
                        .map(|index| aggregates.coverage_windows.figures(index, f))
                        .collect(),
                    (true, None) => vec![Coverage::default().figures(); window_count],
                    (false, _) => Vec::new(),
                },
                before: aggregates.before.as_deref().cloned(),
            })
            .collect();
        Snapshot {
            counters: engine.counters().clone(),
            groups,
            ks: engine.evaluator().ks().to_vec(),
            interaction_types: engine.interaction_types().to_vec(),
            open_impressions: engine.open_impressions(),
            open_items: engine.open_items(),
            open_credits: engine.open_credits(),
            waiting_interactions: engine.waiting_interactions(),
            item_numbers: engine.item_numbers(),
            overflowed_impressions: engine.overflowed_impressions(),
            folded_segment_values: engine
                .folded_segment_values()
                .map(|(label, n)| (label.to_owned(), n))
                .collect(),
            watermark: engine.watermark(),
            frontier,
            control_model,
            experiments: engine
                .experiment_names()
                .iter()
                .zip(engine.experiment_aggregates())
                .map(|(name, aggregates)| ExperimentSnapshot {
                    name: name.clone(),
                    totals: aggregates.totals.clone(),
                    windows: window_totals(&aggregates.windows, window_count, frontier),
                    before: aggregates.before.as_deref().cloned(),
                })
                .collect(),
            unregistered_interleavings: engine.unregistered_interleavings(),
            expected_split: Vec::new(),
            seconds_to_first_finalization: engine.seconds_to_first_finalization(),
            before: engine.engine_before().cloned(),
        }
    }

    /// The snapshot as `/metrics` exports it: its figures since start less
    /// those counted before the exported counters were last reset (a
    /// restart after `kill -9`), so that every counter grew from 0 in
    /// this process.
    pub fn since_counters_reset(mut self) -> Self {
        if let Some(before) = self.before.take() {
            self.counters.less(&before.counters);
            self.overflowed_impressions = self
                .overflowed_impressions
                .saturating_sub(before.overflowed);
            for ((_, folded), earlier) in self.folded_segment_values.iter_mut().zip(before.folded) {
                *folded = folded.saturating_sub(earlier);
            }
            self.unregistered_interleavings = self
                .unregistered_interleavings
                .saturating_sub(before.unregistered);
        }
        for group in &mut self.groups {
            if let Some(before) = group.before.take() {
                group.totals.less(&before.totals);
                group.positions.less(&before.positions);
            }
        }
        for experiment in &mut self.experiments {
            if let Some(before) = experiment.before.take() {
                experiment.totals.less(&before);
            }
        }
        self
    }

    /// The snapshot with the sample ratio check against `split`.
    pub fn with_expected_split(mut self, split: &[(String, f64)]) -> Self {
        self.expected_split = split.to_vec();
        self
    }
}
