//! The join in shards by user, applied on several threads with the figures
//! of one engine.
//!
//! No rule of the join looks across users (docs/SPEC.md §3), so each shard
//! holds the users whose hash falls to it and applies their events in
//! arrival order. What does cross users is decided once, in arrival order,
//! before the events are handed out: `T` before each event, its sequence
//! number, and the group and lineup of each impression (by a registry that
//! numbers them as one engine does). A shard brings its `T` up to an
//! event's before applying it, so it finalizes its lists exactly when one
//! engine would. The limits on all open lists and waiting interactions are
//! the only rules that count across shards: a run of events that could
//! reach one is applied one event at a time, in arrival order, each shard
//! told what the others hold.
//!
//! The shards log the outcome of each list they finalize, and the logs are
//! added to one set of figures in one engine's finalization order after
//! each batch ([`super::finalized`]), while the next events are routed
//! ([`ShardedEngine::routing`]): the report is one engine's to the last
//! digit, on one thread as on many. There are always [`SHARDS`]
//! shards, whatever the thread count; each keeps only counts of its own
//! (outcome counters and position curves), added at the end.

use super::due::DueQueue;
use super::finalized::{in_finalization_order, CoverageParts, FinalizedLog, ShardLog};
use super::{Engine, Held, JoinSettings, Routed};
use crate::event::{Event, Nanos, Reason, Rejection};
use crate::metrics::CoverageMode;
use crate::metrics::ListEvaluator;

/// Shards of a [`ShardedEngine`]: as many threads as this can share the
/// work. More shards cost memory (each keeps its own counts per group,
/// about 2 KB: a replay of 200k events in 1,000 groups held 138 MB with 8
/// shards, 153 MB with 16); fewer leave a thread that is done with its
/// shards idle longer while another applies its last (two threads
/// replayed 1M events in 0.43 s with 8 shards, 0.40 s with 16).
pub const SHARDS: usize = 16;

/// Lists all shards finalize, at most (but for lists of equal deadlines),
/// between two additions of their logs to the figures when a batch makes
/// many final, or a replay finishes: about as many as a batch of events
/// finalizes.
const FINALIZED_AT_ONCE: usize = 8_192;

/// Lists a batch makes final past which it is applied before it takes
/// more events.
const DUE_PER_BATCH: usize = 16_384;

/// The shard of a user.
fn shard_of(user: u64) -> usize {
    ((user >> 40) % SHARDS as u64) as usize
}

/// The logs of the lists `shards` finalized, one per shard.
fn shard_logs(shards: &[Engine]) -> Vec<ShardLog<'_>> {
    shards.iter().filter_map(Engine::shard_log).collect()
}

/// An engine in [`SHARDS`] shards by user, fed a batch of events at a time.
pub struct ShardedEngine {
    /// Places impressions in groups and counts rejected events; holds `T`.
    registry: Engine,
    shards: Vec<Engine>,
    /// The coverage of the lists the shards finalize, which log them.
    coverage: CoverageParts,
    /// The threads it is applied on.
    threads: usize,
    /// The sequence number of the last event routed.
    seq: u64,
    /// The deadline of every impression routed that was not late and is
    /// not yet due: what tells how many lists a rise of `T` makes final.
    deadlines: DueQueue,
    /// The lists the shards logged whose figures or coverage are not yet added.
    pending: Pending,
}

/// The lists in the shards' logs whose figures or coverage are not yet
/// added: after a batch is applied they are added while the next events
/// are parsed and routed ([`ShardedEngine::routing`]), and the logs are
/// emptied before the shards log more.
#[derive(Debug, Default)]
struct Pending {
    /// The lists of the logs, in finalization order.
    order: Vec<(usize, usize)>,
    /// Their metric values and interleaving outcomes are not yet added.
    figures: bool,
    /// Their coverage is not yet added.
    coverage: bool,
}

/// Routes events to the shards' batches in arrival order: what decides
/// `T`, sequence numbers and placements, apart from the shards.
pub struct Router<'e> {
    registry: &'e mut Engine,
    deadlines: &'e mut DueQueue,
    seq: &'e mut u64,
    /// The lists whose figures are pending, added before the first event
    /// is routed (or when the router is dropped).
    figures: Option<Logged<'e>>,
}

/// The lists of the shards' logs, in finalization order.
struct Logged<'e> {
    logs: Vec<ShardLog<'e>>,
    order: &'e [(usize, usize)],
}

/// Work on the lists finalized in a batch, shared among threads.
enum Piece<'a> {
    /// The metric values and interleaving outcomes, into the registry's figures.
    Figures(&'a mut Engine),
    /// One part of the coverage.
    Coverage(super::finalized::CoveragePart<'a>),
}

/// A line of a log, parsed: `None` when blank, else an event or why it
/// was rejected.
pub type Parsed<'a> = Option<Result<Event<'a>, Rejection>>;

/// Where a routed event lies among the runs of parsed lines a batch was
/// routed from: the shards read it there, where it was parsed, rather than
/// from a copy of their own.
#[derive(Clone, Copy, Debug)]
pub struct EventAt {
    /// The run's index.
    pub run: u32,
    /// The line's index in its run.
    pub line: u32,
}

/// The event at `at` among `runs`, if there is one.
fn event_at<'r, 'a>(runs: &'r [Vec<Parsed<'a>>], at: EventAt) -> Option<&'r Event<'a>> {
    match runs.get(at.run as usize)?.get(at.line as usize)? {
        Some(Ok(event)) => Some(event),
        _ => None,
    }
}

/// A batch of events handed out to the shards, each shard's in arrival
/// order; the events themselves stay in the runs they were parsed in.
pub struct Batch {
    per_shard: Vec<Vec<(EventAt, Routed)>>,
    /// The shard of each event, in arrival order.
    order: Vec<u8>,
    impressions: usize,
    /// The items of its impressions.
    items: usize,
    interactions: usize,
    /// The deadlines of the lists that the rise of `T` over the batch
    /// makes final, ascending (an impression shed or duplicated is there
    /// too, though it opened no list).
    due: Vec<Nanos>,
}

impl Batch {
    /// An empty batch.
    pub fn new() -> Self {
        Self {
            per_shard: (0..SHARDS).map(|_| Vec::new()).collect(),
            order: Vec::new(),
            impressions: 0,
            items: 0,
            interactions: 0,
            due: Vec::new(),
        }
    }

    /// Whether the batch should be applied now, before more events join
    /// it: once it makes many lists final, which the shards log until the
    /// batch is applied (a day's gap in a log had made every open list
    /// final in one batch, their logs twice the lists' own memory).
    pub fn is_full(&self) -> bool {
        self.due.len() >= DUE_PER_BATCH
    }
}

impl Default for Batch {
    fn default() -> Self {
        Self::new()
    }
}

impl ShardedEngine {
    /// An empty engine, applied on up to `threads` threads (at least one).
    pub fn new(settings: JoinSettings, evaluator: ListEvaluator, threads: usize) -> Self {
        let settings = JoinSettings {
            shards: 1,
            ..settings
        };
        let threads = threads.max(1);
        let coverage = CoverageParts::new(settings.coverage, threads);
        let shard = || {
            let mut shard = Engine::new(settings.clone(), evaluator.clone());
            shard.finalized_log = Some(FinalizedLog::new(coverage.count()));
            shard
        };
        Self {
            shards: (0..SHARDS).map(|_| shard()).collect(),
            registry: Engine::new(settings.clone(), evaluator),
            coverage,
            threads,
            seq: 0,
            deadlines: DueQueue::default(),
            pending: Pending::default(),
        }
    }

    /// What routes events in arrival order, and the work of adding the
    /// coverage of the lists the shards logged in the batch applied last,
    /// for other threads to do meanwhile (each job must be run: the
    /// coverage is taken as added). Their figures are added by the router
    /// before the first event it routes.
    pub fn routing(&mut self) -> (Router<'_>, Vec<impl FnOnce() + Send + '_>) {
        let logs = shard_logs(&self.shards);
        let order = &self.pending.order[..];
        let figures = std::mem::take(&mut self.pending.figures).then(|| Logged {
            logs: logs.clone(),
            order,
        });
        let coverage = std::mem::take(&mut self.pending.coverage);
        let jobs = coverage
            .then(|| self.coverage.parts_mut())
            .into_iter()
            .flatten()
            .map(move |mut part| {
                let logs = logs.clone();
                move || part.add(&logs, order)
            })
            .collect();
        let router = Router {
            registry: &mut self.registry,
            deadlines: &mut self.deadlines,
            seq: &mut self.seq,
            figures,
        };
        (router, jobs)
    }

    /// Applies the events of `batch`, routed from `runs`, and empties it.
    pub fn apply(&mut self, batch: &mut Batch, runs: &[Vec<Parsed<'_>>]) {
        self.apply_beside(batch, runs, || {});
    }

    /// [`Self::apply`], with `beside` done on this thread while the
    /// others start on the shards (such as reading what comes next).
    pub fn apply_beside(
        &mut self,
        batch: &mut Batch,
        runs: &[Vec<Parsed<'_>>],
        beside: impl FnOnce(),
    ) {
        self.add_pending();
        let experiments = &self.registry.experiments;
        let windows = &self.registry.settings.windows;
        if self.shards[0].experiments.lineup_count() < experiments.lineup_count() {
            for shard in &mut self.shards {
                shard.experiments.follow(experiments, windows);
            }
        }
        // Every shard brought up to the batch's `T`: the lists it makes
        // final first, a few thousand at a time, then what gives up (no
        // list is left due by then).
        let watermark = self.registry.watermark().unwrap_or(Nanos::MIN);
        let end = self.registry.max_time();
        let within_limits = self.within_limits(batch);
        if within_limits && batch.due.len() <= FINALIZED_AT_ONCE {
            // One round: each shard does it all on its own, in one pass.
            let pass = (watermark, end);
            self.apply_and_finalize(&mut batch.per_shard, runs, pass, beside);
            self.log_pending();
        } else {
            beside();
            if within_limits {
                let pass = (Nanos::MIN, None);
                self.apply_and_finalize(&mut batch.per_shard, runs, pass, || {});
            } else {
                self.apply_in_order(batch, runs);
            }
            self.finalize_in_rounds(&batch.due, watermark);
            if let Some(end) = end {
                self.shards
                    .iter_mut()
                    .for_each(|shard| shard.advance_to(end));
            }
        }
        batch.order.clear();
        (batch.impressions, batch.items, batch.interactions) = (0, 0, 0);
        batch.due.clear();
    }

    /// Adds the lists the shards logged, in one engine's finalization
    /// order, to the figures (the registry's) and the coverage parts; and
    /// empties the logs.
    fn add_finalized(&mut self) {
        self.log_pending();
        self.add_pending();
    }

    /// Takes the lists the shards logged as pending, in one engine's
    /// finalization order. The logs hold none added before: they are
    /// emptied ([`Self::add_pending`]) before the shards apply or finalize.
    fn log_pending(&mut self) {
        let logs = shard_logs(&self.shards);
        self.pending.order = in_finalization_order(&logs);
        self.pending.figures = true;
        self.pending.coverage = self.registry.settings.coverage != CoverageMode::Off;
    }

    /// Adds what is still pending of the lists the shards logged, the
    /// coverage parts and the figures on several threads, and empties the
    /// logs.
    fn add_pending(&mut self) {
        let logs = shard_logs(&self.shards);
        let order = &self.pending.order[..];
        let mut pieces: Vec<Piece<'_>> = Vec::new();
        if std::mem::take(&mut self.pending.coverage) {
            pieces.extend(self.coverage.parts_mut().map(Piece::Coverage));
        }
        // Last, to whichever thread is done with a part first: a part
        // takes longer than the figures, and this thread takes its first
        // piece before the others have started.
        if std::mem::take(&mut self.pending.figures) {
            pieces.push(Piece::Figures(&mut self.registry));
        }
        crate::parallel::each(pieces, self.threads, |piece| match piece {
            Piece::Figures(engine) => engine.add_finalized(&logs, order),
            Piece::Coverage(mut part) => part.add(&logs, order),
        });
        self.pending.order.clear();
        for log in self
            .shards
            .iter_mut()
            .filter_map(|s| s.finalized_log.as_mut())
        {
            log.clear();
        }
    }

    /// Whether no event of `batch` can meet the limits on all open lists
    /// and all waiting interactions, whatever the shards finalize: then
    /// each shard may apply its events apart from the others. Credits and
    /// waiting interactions, which count as the credits they become,
    /// together grow by at most the batch's interactions.
    fn within_limits(&self, batch: &Batch) -> bool {
        let held = self.held();
        let settings = &self.registry.settings;
        held.open + batch.impressions <= settings.max_open_impressions
            && held.items + batch.items <= settings.max_open_items
            && held.waiting + batch.interactions <= settings.max_waiting_interactions
            && held.credits + held.waiting + batch.interactions <= settings.max_open_credits
    }

    /// Open lists, their items and credits, and waiting interactions, all
    /// shards together.
    fn held(&self) -> Held {
        self.shards
            .iter()
            .fold(Held::default(), |held, shard| held + shard.held)
    }

    /// Applies each shard's events, found in `runs`, on its own, the
    /// shards spread over the threads; then each finalizes its lists due by
    /// `due_by` and comes up to `T` = `end`, as `(due_by, end)` says;
    /// `beside` is done on this thread first.
    fn apply_and_finalize(
        &mut self,
        per_shard: &mut [Vec<(EventAt, Routed)>],
        runs: &[Vec<Parsed<'_>>],
        (due_by, end): (Nanos, Option<Nanos>),
        beside: impl FnOnce(),
    ) {
        let threads = self.threads;
        let pieces = self.shards.iter_mut().zip(per_shard).collect();
        let apply = |(shard, events): (&mut Engine, &mut Vec<(EventAt, Routed)>)| {
            for (at, routed) in events.drain(..) {
                if let Some(event) = event_at(runs, at) {
                    shard.apply_routed(event, routed);
                }
            }
            shard.finalize_due_by(due_by);
            if let Some(end) = end {
                shard.advance_to(end);
            }
        };
        crate::parallel::each_beside(pieces, threads, apply, beside);
    }

    /// Applies `batch` one event at a time in arrival order, every shard's
    /// `T` brought up first, and each shard told what the others hold.
    fn apply_in_order(&mut self, batch: &mut Batch, runs: &[Vec<Parsed<'_>>]) {
        let mut per_shard: Vec<_> = batch.per_shard.iter_mut().map(|e| e.drain(..)).collect();
        for &shard in &batch.order {
            let Some((at, routed)) = per_shard[shard as usize].next() else {
                continue;
            };
            let Some(event) = event_at(runs, at) else {
                continue;
            };
            if let Some(before) = routed.before {
                for other in &mut self.shards {
                    other.advance_to(before);
                }
            }
            let held = self.held();
            let target = &mut self.shards[shard as usize];
            target.elsewhere = held - target.held;
            target.apply_routed(event, routed);
            target.elsewhere = Default::default();
        }
    }

    /// Finalizes every open list and returns one engine holding the
    /// figures, the shards' counts added to them.
    pub fn finish(mut self) -> Engine {
        self.add_pending();
        let mut due = Vec::with_capacity(self.held().open);
        while let Some((deadline, _, _)) = self.deadlines.pop() {
            due.push(deadline);
        }
        self.finalize_in_rounds(&due, Nanos::MAX);
        let pieces = self.shards.iter_mut().collect();
        crate::parallel::each(pieces, self.threads, Engine::finish);
        let mut engine = self.registry;
        for shard in &self.shards {
            engine.absorb_shard(shard);
        }
        engine.absorb_coverage_parts(&self.coverage);
        engine
    }

    /// Finalizes the open lists due by `until`, whose deadlines are among
    /// `due` (ascending), a few thousand at a time so that the shards' logs
    /// stay small: each round's lists, all due before the next round's,
    /// are added to the figures (after those the shards logged before)
    /// before the next round is finalized.
    fn finalize_in_rounds(&mut self, due: &[Nanos], until: Nanos) {
        let cutoffs = due
            .iter()
            .skip(FINALIZED_AT_ONCE)
            .step_by(FINALIZED_AT_ONCE);
        for &cutoff in cutoffs.chain([&until]) {
            let pieces = self.shards.iter_mut().collect();
            let finalize = |shard: &mut Engine| shard.finalize_due_by(cutoff);
            crate::parallel::each(pieces, self.threads, finalize);
            self.add_finalized();
        }
    }
}

impl Router<'_> {
    /// Counts a rejected event; it does not move `T`.
    pub fn reject(&mut self, reason: Reason) {
        self.registry.reject(reason);
    }

    /// Adds the figures of the lists pending to the registry's, once.
    fn add_figures(&mut self) {
        if let Some(lists) = self.figures.take() {
            self.registry.add_finalized(&lists.logs, lists.order);
        }
    }

    /// Adds an accepted event, found `at` in the runs the batch will be
    /// applied with, to `batch`, with what arrival order decides of it, and
    /// moves `T` past its time. Returns `T` before it when it is an
    /// impression that came late (its window closed before it came).
    pub fn route(&mut self, batch: &mut Batch, event: &Event<'_>, at: EventAt) -> Option<Nanos> {
        self.add_figures();
        *self.seq += 1;
        let before = self.registry.max_time();
        let time = event.time();
        let mut late = None;
        let placement = match event {
            Event::Impression(impression) if !self.registry.is_late(impression.time) => {
                let window = self.registry.settings.attribution_window;
                let deadline = impression.time.saturating_add(window);
                self.deadlines.push((deadline, *self.seq, 0));
                Some(self.registry.place(impression))
            }
            Event::Impression(_) => {
                late = before;
                None
            }
            Event::Interaction(_) => None,
        };
        match event {
            Event::Impression(impression) => {
                batch.impressions += 1;
                batch.items += impression.items.len();
            }
            Event::Interaction(_) => batch.interactions += 1,
        }
        let shard = shard_of(event.user());
        batch.order.push(shard as u8);
        let routed = Routed {
            seq: *self.seq,
            before,
            placement,
        };
        batch.per_shard[shard].push((at, routed));
        self.registry.advance_to(time);
        if let Some(watermark) = self.registry.watermark() {
            while let Some((deadline, _, _)) = self.deadlines.pop_due_by(watermark) {
                batch.due.push(deadline);
            }
        }
        late
    }
}

impl Drop for Router<'_> {
    fn drop(&mut self) {
        self.add_figures();
    }
}
