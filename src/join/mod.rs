//! The join: attribution of interactions to impressions under the watermark
//! and window rules of docs/SPEC.md §3, and finalization of each list into its
//! group's aggregates.
//!
//! Events are applied one at a time in arrival order. Per-user state lives in
//! shards picked by the user's hash, and no rule ever looks across users.
//! The engine is pure: it knows nothing of gRPC, HTTP or files, so `serve`
//! and `replay` run the same rules.

mod counted_before;
mod counters;
mod due;
mod experiments;
mod figures;
mod finalized;
mod finite;
mod groups;
mod items;
mod open;
mod packed;
mod persist;
mod sharded;
mod user;

pub use counted_before::{CountedBefore, EngineBefore, GroupBefore};
pub use counters::{Counters, Unattributed};
pub use experiments::{ExperimentAggregates, ExperimentName};
pub use groups::{GroupName, SegmentSettings, OTHER_SEGMENT_VALUE};
pub use persist::{EncodedState, EngineState, LaterCounters, Pieces, StatePieces};
pub use sharded::{Batch, EventAt, Parsed, Router, ShardedEngine, SHARDS};

use crate::event::hashed::KeyedIdHash;
use crate::event::{Event, Impression, Interaction, Nanos, Reason};
use crate::metrics::{
    Coverage, CoverageMode, GroupTotals, ListEvaluator, PositionCurve, ShownList, Slot,
};
use crate::window::{CoverageWindows, RollingWindows};
use due::DueQueue;
use experiments::Experiments;
use groups::{GroupId, Groups};
use items::ItemTable;
use open::{OpenImpression, NOT_INTERLEAVED};
use std::collections::HashMap;
use user::{Attributed, CreditLimits, UserState, Waiting};

/// What one check for idle groups retired.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Retired {
    /// Groups.
    pub groups: usize,
    /// Interleaving experiments.
    pub experiments: usize,
}

/// Join timing and bounds.
#[derive(Clone, Debug, PartialEq)]
pub struct JoinSettings {
    /// `A`: how long after an impression its interactions count.
    pub attribution_window: Nanos,
    /// `L`: how far the watermark trails the largest event time.
    pub allowed_lateness: Nanos,
    /// User-state shards.
    pub shards: usize,
    /// Most groups before new ones fold into the overflow group.
    pub max_groups: usize,
    /// The segment labels that are dimensions of a group, and the bound on their values.
    pub segments: SegmentSettings,
    /// Most open impressions; a new one past it is shed.
    pub max_open_impressions: usize,
    /// Most items of all open impressions; a new one whose items would
    /// take them past it is shed.
    pub max_open_items: usize,
    /// Most waiting interactions; a new one that would wait past it is shed.
    pub max_waiting_interactions: usize,
    /// Most interactions credited to all open impressions together, a
    /// waiting one counted as the credit it becomes when its list opens;
    /// a new one that would be credited, or wait, past it is shed.
    pub max_open_credits: usize,
    /// Most open impressions of one user; a new one past it is shed.
    pub max_open_impressions_per_user: usize,
    /// Most waiting interactions of one user; a new one that would wait past it is shed.
    pub max_waiting_interactions_per_user: usize,
    /// Most interactions credited to one impression as they arrive; more are shed.
    pub max_interactions_per_impression: usize,
    /// Spans of the rolling windows kept per group (none in replay).
    pub windows: Vec<Nanos>,
    /// Deepest rank of the position curves; 0 keeps none.
    pub position_curve_depth: usize,
    /// Interaction type names, sorted: an interaction's `kind` indexes them.
    pub interaction_types: Vec<String>,
    /// How coverage and exposure are kept (docs/SPEC.md §11).
    pub coverage: CoverageMode,
    /// Whether open lists keep their items as numbers of the engine's item
    /// table (1 to 4 bytes each, a lookup per item as a list opens) or as
    /// their 8-byte hashes; the figures are the same.
    pub number_items: bool,
}

/// The limit under which a valid event was shed: counted, not evaluated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shed {
    /// `max_open_impressions` was reached.
    MaxOpenImpressions,
    /// The impression's items would have taken open lists past `max_open_items`.
    MaxOpenItems,
    /// `max_waiting_interactions` was reached.
    MaxWaitingInteractions,
    /// The user had `max_open_impressions_per_user` open.
    MaxOpenImpressionsPerUser,
    /// The user had `max_waiting_interactions_per_user` waiting.
    MaxWaitingInteractionsPerUser,
    /// The impression held `max_interactions_per_impression` credits.
    MaxInteractionsPerImpression,
    /// The open lists' credits and the waiting interactions together were
    /// `max_open_credits`.
    MaxOpenCredits,
}

impl Shed {
    /// The stable reason an ack gives for a shed event.
    pub fn reason(self) -> &'static str {
        match self {
            Shed::MaxOpenImpressions => "shed_max_open_impressions",
            Shed::MaxOpenItems => "shed_max_open_items",
            Shed::MaxWaitingInteractions => "shed_max_waiting_interactions",
            Shed::MaxOpenImpressionsPerUser => "shed_max_open_impressions_per_user",
            Shed::MaxWaitingInteractionsPerUser => "shed_max_waiting_interactions_per_user",
            Shed::MaxInteractionsPerImpression => "shed_max_interactions_per_impression",
            Shed::MaxOpenCredits => "shed_max_open_credits",
        }
    }

    /// What the ack says of a shed event.
    pub fn message(self) -> &'static str {
        match self {
            Shed::MaxOpenImpressions => "valid, but not evaluated: max_open_impressions was reached; it is counted in rankwatch_events_shed_total",
            Shed::MaxOpenItems => "valid, but not evaluated: its items would take the open lists past max_open_items; it is counted in rankwatch_events_shed_total",
            Shed::MaxWaitingInteractions => "valid, but not evaluated: max_waiting_interactions was reached; it is counted in rankwatch_events_shed_total",
            Shed::MaxOpenImpressionsPerUser => "valid, but not evaluated: its user has max_open_impressions_per_user lists open (a user id shared by many people?); it is counted in rankwatch_events_shed_total",
            Shed::MaxWaitingInteractionsPerUser => "valid, but not evaluated: its user has max_waiting_interactions_per_user interactions waiting for their impressions; it is counted in rankwatch_events_shed_total",
            Shed::MaxInteractionsPerImpression => "valid, but not evaluated: its impression holds max_interactions_per_impression credited interactions; it is counted in rankwatch_events_shed_total",
            Shed::MaxOpenCredits => "valid, but not evaluated: the open lists' credited interactions and those waiting for their lists are max_open_credits together; it is counted in rankwatch_events_shed_total",
        }
    }
}

/// One group's aggregates: since start, and per rolling window.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct GroupAggregates {
    /// Since start.
    pub totals: GroupTotals,
    /// Per configured window.
    pub windows: RollingWindows,
    /// Lists and credited interactions by rank, since start.
    #[serde(default)]
    pub positions: PositionCurve,
    /// Items shown and engaged and their exposure, since start, but for the
    /// lists that the panes of the longest window still hold.
    pub coverage: Coverage,
    /// The same per configured window.
    pub coverage_windows: CoverageWindows,
    /// The figures since start when `/metrics`' counters were last reset,
    /// if since this group was registered (saved apart, after the state).
    #[serde(skip)]
    pub before: Option<Box<GroupBefore>>,
}

impl GroupAggregates {
    /// Empty aggregates for rows of `width` values.
    fn new(settings: &JoinSettings, width: usize) -> Self {
        Self {
            totals: GroupTotals::new(width),
            windows: RollingWindows::new(&settings.windows),
            positions: PositionCurve::new(
                settings.position_curve_depth,
                settings.interaction_types.len(),
            ),
            coverage: Coverage::default(),
            coverage_windows: match settings.coverage {
                CoverageMode::Off => CoverageWindows::default(),
                _ => CoverageWindows::new(&settings.windows),
            },
            before: None,
        }
    }
}

/// The shard of a user. It takes the hash's high bits: the maps inside a
/// shard index by the low ones.
fn shard_index(user: u64, shards: usize) -> usize {
    ((user >> 40) % shards as u64) as usize
}

/// The users of one shard, by id.
type Shard = HashMap<u64, UserState, KeyedIdHash>;

/// Lists finalized between two prefetches of the lists that close next.
const CLOSING_PREFETCH_EVERY: u32 = 16;
/// How many of the lists that close next one such prefetch starts loading:
/// twice as many as are finalized in between, so that each is loaded about
/// 16 lists (some 80 events, in a typical mix) before it closes.
const CLOSING_PREFETCH_AHEAD: usize = 32;

/// The most one user holds ([`Engine::most_held_by_one_user`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct HeldByOneUser {
    /// Open impressions of one user.
    pub open_impressions: usize,
    /// Waiting interactions of one user.
    pub waiting_interactions: usize,
    /// Interactions credited to one open impression.
    pub credited_to_one_impression: usize,
}

/// The attribution engine.
pub struct Engine {
    settings: JoinSettings,
    /// `T`: the largest time of the accepted events so far.
    max_time: Option<Nanos>,
    shards: Vec<Shard>,
    /// The numbers of the items that open lists show.
    items: ItemTable,
    /// Open impressions by `t + A`.
    deadlines: DueQueue,
    /// Waiting interactions by `u`.
    give_ups: DueQueue,
    next_seq: u64,
    groups: Groups,
    aggregates: Vec<GroupAggregates>,
    experiments: Experiments,
    evaluator: ListEvaluator,
    grades: Vec<f64>,
    values: Vec<f64>,
    /// `1 / discount(j)` for rank `j + 1`, as deep as the longest list finalized.
    exposure_weights: Vec<f64>,
    /// `exposure_sums[n]`: the first `n` weights summed, a list of `n` items' exposure.
    exposure_sums: Vec<f64>,
    /// Per ranker, the credit of the interleaved list being finalized.
    credits: Vec<f64>,
    /// The teams of the interleaved list being finalized.
    teams: Vec<u8>,
    /// The item hashes of the list being finalized.
    shown_items: Vec<u64>,
    /// The items engaged in the list being finalized.
    engaged_items: Vec<u64>,
    /// The sketch slots of the list being finalized.
    slots: Vec<Slot>,
    counters: Counters,
    /// The open lists, their items and credits, and the waiting interactions.
    held: Held,
    /// Lists finalized since the last prefetch of those that close next.
    closed_since_prefetch: u32,
    /// In a view of several engines ([`Engine::absorb`]), their item numbers.
    absorbed_item_numbers: usize,
    /// When the events being applied were received (wall clock), for the
    /// groups' idle times; 0 unless the server sets it.
    received_at: Nanos,
    /// Whether `T` rises at most to `received_at` (see [`Engine::cap_time_at_wall_clock`]).
    time_capped: bool,
    /// What the other shards of a [`ShardedEngine`] hold, counted against
    /// the limits on all open lists and waiting interactions.
    elsewhere: Held,
    /// In a shard of a [`ShardedEngine`], the outcome of each list
    /// finalized, logged instead of added to this engine's figures (but
    /// for its position curve, a count).
    finalized_log: Option<finalized::FinalizedLog>,
    /// The engine's own counts when `/metrics`' counters were last reset.
    counted_before: Option<Box<EngineBefore>>,
}

/// Open lists, their items and credits, and waiting interactions, counted
/// against the limits on all of them.
#[derive(Clone, Copy, Debug, Default)]
struct Held {
    open: usize,
    items: usize,
    credits: usize,
    waiting: usize,
}

impl std::ops::Add for Held {
    type Output = Held;

    fn add(self, other: Held) -> Held {
        Held {
            open: self.open + other.open,
            items: self.items + other.items,
            credits: self.credits + other.credits,
            waiting: self.waiting + other.waiting,
        }
    }
}

impl std::ops::Sub for Held {
    type Output = Held;

    fn sub(self, other: Held) -> Held {
        Held {
            open: self.open - other.open,
            items: self.items - other.items,
            credits: self.credits - other.credits,
            waiting: self.waiting - other.waiting,
        }
    }
}

/// Where an impression's figures go: its group and its interleaving lineup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    group: GroupId,
    lineup: u32,
}

/// What the events before an event handed to one shard of a
/// [`ShardedEngine`], of every shard, decided of it.
#[derive(Clone, Copy, Debug)]
pub struct Routed {
    /// Its place in arrival order, among every shard's events.
    pub seq: u64,
    /// `T` before it: the largest time of the events applied before it.
    pub before: Option<Nanos>,
    /// The group of an impression that was not late when it arrived.
    pub placement: Option<Placement>,
}

impl Engine {
    /// An empty engine.
    pub fn new(settings: JoinSettings, evaluator: ListEvaluator) -> Self {
        let shards = (0..settings.shards.max(1))
            .map(|_| HashMap::default())
            .collect();
        let width = evaluator.width();
        let number_items = settings.number_items;
        Self {
            groups: Groups::new(settings.max_groups, &settings.segments),
            settings,
            max_time: None,
            shards,
            items: ItemTable::new(number_items),
            deadlines: DueQueue::default(),
            give_ups: DueQueue::default(),
            next_seq: 0,
            aggregates: Vec::new(),
            experiments: Experiments::default(),
            evaluator,
            grades: Vec::new(),
            values: vec![0.0; width],
            exposure_weights: Vec::new(),
            exposure_sums: vec![0.0],
            credits: Vec::new(),
            teams: Vec::new(),
            shown_items: Vec::new(),
            engaged_items: Vec::new(),
            slots: Vec::new(),
            counters: Counters::default(),
            held: Held::default(),
            closed_since_prefetch: 0,
            absorbed_item_numbers: 0,
            received_at: 0,
            time_capped: false,
            elsewhere: Held::default(),
            finalized_log: None,
            counted_before: None,
        }
    }

    /// Sets when the events applied next were received (wall clock).
    pub fn received_at(&mut self, now: Nanos) {
        self.received_at = now;
    }

    /// From now on an event raises `T` at most to the wall clock it was
    /// received at ([`Self::received_at`]): one applied ahead of the clock
    /// (within the allowed skew) is joined at its own time, but cannot
    /// finalize the other clients' lists early (docs/SPEC.md §3). For an
    /// engine whose watermark also advances with the wall clock; not saved.
    pub fn cap_time_at_wall_clock(&mut self) {
        self.time_capped = true;
    }

    /// Retires every group that received no impression during `idle` up
    /// to `now` and has no open impression: its figures go, its slot under
    /// `max_groups` is freed, the counters since start keep what it counted.
    /// Interleaving lineups and experiments idle as long go the same way.
    pub fn retire_idle_groups(&mut self, now: Nanos, idle: Nanos) -> Retired {
        let before = now.saturating_sub(idle);
        let experiments = self.retire_idle_lineups(now, before);
        let groups = self.retire_groups_idle_since(now, before);
        Retired {
            groups,
            experiments,
        }
    }

    /// Retires the groups that received no impression after `before` and
    /// have no open impression; returns how many.
    fn retire_groups_idle_since(&mut self, now: Nanos, before: Nanos) -> usize {
        let mut retired = self.groups.idle(now, before);
        if !retired.contains(&true) {
            return 0;
        }
        for open in self.open_lists() {
            retired[open.group as usize] = false;
        }
        let count = retired.iter().filter(|&&gone| gone).count();
        if count == 0 {
            return 0;
        }
        let new_ids = self.groups.retire(&retired);
        groups::keep_unmarked(&mut self.aggregates, &retired);
        for user in self.shards.iter_mut().flat_map(|s| s.values_mut()) {
            for open in &mut user.open {
                open.group = new_ids[open.group as usize]
                    .expect("a group with an open impression is never retired");
            }
        }
        count
    }

    /// Every open list, user by user.
    fn open_lists(&self) -> impl Iterator<Item = &OpenImpression> {
        self.shards
            .iter()
            .flat_map(|s| s.values())
            .flat_map(|u| &u.open)
    }

    /// Retires the lineups that took no list after `before` and that no
    /// open list names, and the experiments left without a lineup; open
    /// lists take their lineups' new ids. Returns how many experiments went.
    fn retire_idle_lineups(&mut self, now: Nanos, before: Nanos) -> usize {
        let mut retired = self.experiments.idle(now, before);
        if !retired.contains(&true) {
            return 0;
        }
        for open in self.open_lists() {
            if let Some(named) = retired.get_mut(open.lineup() as usize) {
                *named = false;
            }
        }
        if !retired.contains(&true) {
            return 0;
        }
        let (new_ids, experiments) = self.experiments.retire(&retired);
        for user in self.shards.iter_mut().flat_map(|s| s.values_mut()) {
            for open in &mut user.open {
                if let Some(Some(id)) = new_ids.get(open.lineup() as usize) {
                    open.set_lineup(*id);
                }
            }
        }
        experiments
    }

    /// The watermark `W = T − L`, once an event has been accepted.
    pub fn watermark(&self) -> Option<Nanos> {
        self.max_time
            .map(|t| t.saturating_sub(self.settings.allowed_lateness))
    }

    /// The finalization frontier `W − A`: every list shown at or before it is final.
    pub fn frontier(&self) -> Option<Nanos> {
        self.watermark()
            .map(|w| w.saturating_sub(self.settings.attribution_window))
    }

    /// Applies one accepted event, then moves the watermark past its time.
    /// Returns the limit that shed it, if one did.
    pub fn apply(&mut self, event: Event<'_>) -> Option<Shed> {
        let time = match self.time_capped {
            true => event.time().min(self.received_at),
            false => event.time(),
        };
        let shed = self.apply_placed(&event, None);
        self.advance_to(time);
        shed
    }

    /// Applies an event routed to this shard: first what `T` reached
    /// before it finalizes, then the event as one engine applies it, its
    /// arrival order and group given. `T` stays where it was before the
    /// event: what the event's time makes final is finalized by the next
    /// event's `before`, or as the batch ends, before anything else is
    /// applied, as one engine would have. Returns the limit that shed it.
    pub fn apply_routed(&mut self, event: &Event<'_>, routed: Routed) -> Option<Shed> {
        if let Some(before) = routed.before {
            self.advance_to(before);
        }
        // Lists finalize in (deadline, seq) order: numbers rising in
        // arrival order keep the order of one engine's.
        self.next_seq = self.next_seq.max(routed.seq.saturating_sub(1));
        self.apply_placed(event, routed.placement)
    }

    /// Applies `event`, an impression placed here unless `placed` says where.
    fn apply_placed(&mut self, event: &Event<'_>, placed: Option<Placement>) -> Option<Shed> {
        match event {
            Event::Impression(impression) => self.impression(impression, placed),
            Event::Interaction(interaction) => self.interaction(*interaction),
        }
    }

    /// `T`, the largest time of the events applied so far.
    pub fn max_time(&self) -> Option<Nanos> {
        self.max_time
    }

    /// Starts loading what applying an event of `user` reads: the user's
    /// entry, and the items and credits of its latest open lists. Called for
    /// every event of a batch before the batch is applied, it lets the
    /// batch's cache misses overlap instead of following one another. A
    /// hint only: it changes nothing.
    pub fn prefetch(&self, user: u64) {
        let shard = &self.shards[shard_index(user, self.shards.len())];
        if let Some(state) = shard.get(&user) {
            state.prefetch();
        }
    }

    /// Starts loading the state of the users whose lists close next. A
    /// list closes a whole window after it opened, when its user's state
    /// has long left the cache; loading several at once, ahead of time,
    /// lets their cache misses overlap, where finalizing each list as it
    /// comes due would wait for them one after another.
    fn prefetch_closing(&mut self) {
        self.closed_since_prefetch = 0;
        for &(_, _, user) in self.deadlines.upcoming().take(CLOSING_PREFETCH_AHEAD) {
            self.prefetch(user);
        }
    }

    /// Counts a rejected event; it does not move the watermark.
    pub fn reject(&mut self, reason: Reason) {
        self.counters.reject(reason);
    }

    /// Sets the valid events a relay produced to the topic, all told.
    pub fn set_relayed(&mut self, events: u64) {
        self.counters.relayed = events;
    }

    /// Raises `T` to `time` if it is later, finalizing what the new watermark closes.
    pub fn advance_to(&mut self, time: Nanos) {
        if self.max_time.is_some_and(|t| t >= time) {
            return;
        }
        self.max_time = Some(time);
        let Some(watermark) = self.watermark() else {
            return;
        };
        while let Some((_, seq, user)) = self.deadlines.pop_due_by(watermark) {
            self.finalize(user, seq);
            self.closed_since_prefetch += 1;
            if self.closed_since_prefetch == CLOSING_PREFETCH_EVERY {
                self.prefetch_closing();
            }
        }
        while let Some((_, seq, user)) = self.give_ups.pop_due_by(watermark) {
            self.give_up(user, seq);
        }
    }

    /// Finalizes every open impression and gives up every waiting
    /// interaction, as at the end of a replay.
    pub fn finish(&mut self) {
        self.finalize_due_by(Nanos::MAX);
        while let Some((_, seq, user)) = self.give_ups.pop() {
            self.give_up(user, seq);
        }
    }

    /// Finalizes the open lists due by `deadline` (their time plus `A`),
    /// whatever the watermark, in the order [`Engine::finish`] does.
    pub fn finalize_due_by(&mut self, deadline: Nanos) {
        while let Some((_, seq, user)) = self.deadlines.pop_due_by(deadline) {
            self.finalize(user, seq);
        }
    }

    /// Outcome counters since start.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The name of every group, indexed by group id.
    pub fn group_names(&self) -> &[GroupName] {
        self.groups.names()
    }

    /// Per segment label, in order: the label and the impressions whose
    /// value of it folded into `__other__`, since start.
    pub fn folded_segment_values(&self) -> impl Iterator<Item = (&str, u64)> {
        self.groups.folded()
    }

    /// Per segment label, in order: the label and the distinct values of
    /// it kept, at most `max_segment_values` (but in a restored state
    /// saved under a higher one).
    pub fn kept_segment_values(&self) -> impl Iterator<Item = (&str, usize)> {
        self.groups.kept()
    }

    /// Aggregates of every group, indexed by group id.
    pub fn aggregates(&self) -> &[GroupAggregates] {
        &self.aggregates
    }

    /// Impressions folded into the overflow group since start.
    pub fn overflowed_impressions(&self) -> u64 {
        self.groups.overflowed
    }

    /// Interaction type names, sorted: the columns of the position curves.
    pub fn interaction_types(&self) -> &[String] {
        &self.settings.interaction_types
    }

    /// The list evaluator, which fixes the cutoffs and the value layout.
    pub fn evaluator(&self) -> &ListEvaluator {
        &self.evaluator
    }

    /// Number of rolling windows kept per group.
    pub fn window_count(&self) -> usize {
        self.settings.windows.len()
    }

    /// The largest event time `T` must reach for the earliest open list
    /// to be finalized (its time plus window plus lateness); `None` when no
    /// list is open.
    pub fn first_finalization(&self) -> Option<Nanos> {
        let earliest = self.deadlines.peek()?.0;
        Some(earliest.saturating_add(self.settings.allowed_lateness))
    }

    /// How far event time must still advance for the earliest open list to
    /// be finalized, in seconds; `None` when no list is open.
    pub fn seconds_to_first_finalization(&self) -> Option<f64> {
        let due = self.first_finalization()?;
        let now = self.max_time.unwrap_or(Nanos::MIN);
        Some(due.saturating_sub(now).max(0) as f64 / crate::event::NANOS_PER_SECOND as f64)
    }

    /// Impressions still open.
    pub fn open_impressions(&self) -> usize {
        self.held.open
    }

    /// Items of the impressions still open.
    pub fn open_items(&self) -> usize {
        self.held.items
    }

    /// Interactions credited to the impressions still open.
    pub fn open_credits(&self) -> usize {
        self.held.credits
    }

    /// Interactions waiting for their impression.
    pub fn waiting_interactions(&self) -> usize {
        self.held.waiting
    }

    /// The most that one user holds: open impressions, waiting
    /// interactions, and interactions credited to one of its open lists.
    /// Looks at every user: for a state just restored, which may hold more
    /// than the per-user limits in force.
    pub fn most_held_by_one_user(&self) -> HeldByOneUser {
        let mut most = HeldByOneUser::default();
        for user in self.shards.iter().flat_map(|shard| shard.values()) {
            most.open_impressions = most.open_impressions.max(user.open.len());
            most.waiting_interactions = most.waiting_interactions.max(user.waiting().len());
            let credited = user.open.iter().map(OpenImpression::credit_count).max();
            most.credited_to_one_impression =
                most.credited_to_one_impression.max(credited.unwrap_or(0));
        }
        most
    }

    /// Items numbered in the item table: about 24 to 40 bytes each beside
    /// the open lists (docs/settings.md#sizing).
    pub fn item_numbers(&self) -> usize {
        self.items.in_use() + self.absorbed_item_numbers
    }

    /// A copy of the state a restart must not lose, in a deterministic order.
    pub fn to_state(&self) -> EngineState {
        EngineState {
            max_time: self.max_time,
            next_seq: self.next_seq,
            groups: self.groups.clone(),
            aggregates: self.aggregates.clone(),
            experiments: self.experiments.clone(),
            counters: self.counters.clone(),
            users: persist::sorted_users(&self.shards, &self.items),
            coverage_passed_on: false,
            counted_before: self.counted_before(),
        }
    }

    /// An engine that carries on from `state`, with its due-time queues
    /// rebuilt. The caller checks that the state was saved under the same
    /// cutoffs, metric settings and windows.
    pub fn from_state(
        settings: JoinSettings,
        evaluator: ListEvaluator,
        state: EngineState,
    ) -> Self {
        let mut engine = Engine::new(settings, evaluator);
        engine.max_time = state.max_time;
        engine.next_seq = state.next_seq;
        engine.groups = state.groups;
        engine.groups.restored(
            engine.settings.max_groups,
            engine.settings.segments.max_values,
        );
        engine.aggregates = state.aggregates;
        if state.coverage_passed_on {
            let cap = engine.settings.coverage.cap();
            for aggregates in &mut engine.aggregates {
                let windows = &aggregates.coverage_windows;
                windows.fold_newest_panes_into(&mut aggregates.coverage, cap);
            }
        }
        engine.experiments = state.experiments;
        engine.experiments.restored();
        engine.counters = state.counters;
        for (id, user) in state.users {
            engine.restore_user(id, user);
        }
        engine
    }

    /// Puts back a saved user, with the due times of its open impressions
    /// and waiting interactions.
    fn restore_user(&mut self, id: u64, user: user::SavedUser) {
        let window = self.settings.attribution_window;
        let user = UserState::restore(user, window, &mut self.items);
        for open in &user.open {
            self.deadlines
                .push((open.time.saturating_add(window), open.seq, id));
        }
        for waiting in user.waiting() {
            self.give_ups
                .push((waiting.interaction.time, waiting.seq, id));
        }
        self.held.open += user.open.len();
        self.held.items += user.open.iter().map(OpenImpression::shown).sum::<usize>();
        self.held.credits += user
            .open
            .iter()
            .map(OpenImpression::credit_count)
            .sum::<usize>();
        self.held.waiting += user.waiting().len();
        self.shard(id).insert(id, user);
    }

    fn shard(&mut self, user: u64) -> &mut Shard {
        let index = shard_index(user, self.shards.len());
        &mut self.shards[index]
    }

    /// Whether an impression shown at `time` is late: its window closed
    /// before it arrived, the watermark having passed `time + A`.
    pub fn is_late(&self, time: Nanos) -> bool {
        let deadline = time.saturating_add(self.settings.attribution_window);
        self.watermark().is_some_and(|w| deadline <= w)
    }

    /// Registers the group of an impression that is not late, and its
    /// interleaving lineup: where its figures go. Every impression that is
    /// not late is placed, in arrival order, before it is checked against
    /// the open lists and the limits, so that a registry apart from the
    /// users' state numbers the groups as one engine does.
    pub fn place(&mut self, impression: &Impression<'_>) -> Placement {
        let group = self.groups.id(
            &impression.model,
            &impression.surface,
            &impression.segments,
            self.received_at,
        );
        let lineup = match &impression.interleaving {
            None => NOT_INTERLEAVED,
            Some(interleaving) => {
                let name = &self.groups.names()[group as usize];
                // An experiment is its surface's and segment values', not
                // the overflow group's (whose names are `__overflow__`).
                let own;
                let name = match name.is_overflow() {
                    true => {
                        own = self
                            .groups
                            .last_placed_name(&impression.model, &impression.surface);
                        &own
                    }
                    false => name,
                };
                self.experiments
                    .lineup(
                        name,
                        &interleaving.rankers,
                        self.settings.max_groups,
                        &self.settings.windows,
                        self.received_at,
                    )
                    .unwrap_or(NOT_INTERLEAVED)
            }
        };
        Placement { group, lineup }
    }

    /// Opens an impression, placed here unless `placed` says where.
    fn impression(
        &mut self,
        impression: &Impression<'_>,
        placed: Option<Placement>,
    ) -> Option<Shed> {
        if self.is_late(impression.time) {
            self.counters.late_impressions += 1;
            return None;
        }
        let placement = match placed {
            Some(placement) => placement,
            None => self.place(impression),
        };
        let user_id = impression.user;
        if self
            .shard(user_id)
            .get(&user_id)
            .is_some_and(|user| user.has_open_request(impression.request))
        {
            self.counters.duplicate_impressions += 1;
            return None;
        }
        let all = self.held + self.elsewhere;
        if all.open >= self.settings.max_open_impressions {
            self.counters.shed_impressions += 1;
            return Some(Shed::MaxOpenImpressions);
        }
        if all.items + impression.items.len() > self.settings.max_open_items {
            self.counters.shed_open_items += 1;
            return Some(Shed::MaxOpenItems);
        }
        let max_per_user = self.settings.max_open_impressions_per_user;
        if self
            .shard(user_id)
            .get(&user_id)
            .is_some_and(|user| user.open.len() >= max_per_user)
        {
            self.counters.shed_open_per_user += 1;
            return Some(Shed::MaxOpenImpressionsPerUser);
        }
        let window = self.settings.attribution_window;
        let deadline = impression.time.saturating_add(window);
        let seq = self.seq();
        let mut open = OpenImpression::new(
            seq,
            (placement.group, placement.lineup),
            impression,
            deadline,
            &mut self.items,
        );
        let index = shard_index(user_id, self.shards.len());
        let user = self.shards[index].entry(user_id).or_default();
        let claimed = user.claim_waiting(&mut open, window, &mut self.counters, &self.items);
        // Counted as finalizing gives them back.
        self.held.items += open.shown();
        self.held.credits += open.credit_count();
        user.insert_open(open);
        self.counters.impressions += 1;
        self.held.open += 1;
        self.held.waiting -= claimed;
        self.deadlines.push((deadline, seq, user_id));
        None
    }

    fn interaction(&mut self, interaction: Interaction) -> Option<Shed> {
        let window = self.settings.attribution_window;
        let seq = self.seq();
        let user_id = interaction.user;
        let index = shard_index(user_id, self.shards.len());
        // A user without an entry holds nothing that the interaction could
        // match; it gets an entry only if the interaction waits.
        let all = self.held + self.elsewhere;
        let limits = CreditLimits {
            per_list: self.settings.max_interactions_per_impression,
            // A waiting interaction holds the place of the credit it becomes.
            all_full: all.credits + all.waiting >= self.settings.max_open_credits,
        };
        if let Some(user) = self.shards[index].get_mut(&user_id) {
            let item = self.items.number(interaction.item);
            match user.attribute(interaction, item, window, limits, &mut self.counters) {
                Attributed::Credited => {
                    self.held.credits += 1;
                    return None;
                }
                Attributed::Settled => return None,
                Attributed::ListFull => {
                    self.counters.shed_interactions_per_impression += 1;
                    return Some(Shed::MaxInteractionsPerImpression);
                }
                Attributed::AllFull => {
                    self.counters.shed_open_credits += 1;
                    return Some(Shed::MaxOpenCredits);
                }
                Attributed::Waits => {}
            }
        }
        // One that finds nothing when the watermark has passed it gives up at once.
        let gives_up = self
            .max_time
            .is_some_and(|t| interaction.time <= t.saturating_sub(self.settings.allowed_lateness));
        if gives_up || all.waiting >= self.settings.max_waiting_interactions {
            if gives_up {
                self.counters.interactions += 1;
                self.counters.unattributed(Unattributed::NoImpression);
                return None;
            }
            self.counters.shed_interactions += 1;
            return Some(Shed::MaxWaitingInteractions);
        }
        if limits.all_full {
            self.counters.shed_open_credits += 1;
            return Some(Shed::MaxOpenCredits);
        }
        let user = self.shards[index].entry(user_id).or_default();
        if user.waiting().len() >= self.settings.max_waiting_interactions_per_user {
            self.counters.shed_waiting_per_user += 1;
            return Some(Shed::MaxWaitingInteractionsPerUser);
        }
        self.counters.interactions += 1;
        user.push_waiting(Waiting { seq, interaction });
        self.held.waiting += 1;
        self.give_ups.push((interaction.time, seq, user_id));
        None
    }

    fn seq(&mut self) -> u64 {
        self.next_seq += 1;
        self.next_seq
    }

    /// What `take` removes from the state of `user_id`, if the user and
    /// the entry are still there; a user left holding nothing is dropped.
    fn take_from_user<T>(
        &mut self,
        user_id: u64,
        take: impl FnOnce(&mut UserState) -> Option<T>,
    ) -> Option<T> {
        let shard = self.shard(user_id);
        let user = shard.get_mut(&user_id)?;
        let taken = take(user)?;
        if user.is_empty() {
            shard.remove(&user_id);
        }
        Some(taken)
    }

    fn give_up(&mut self, user_id: u64, seq: u64) {
        if self
            .take_from_user(user_id, |user| user.take_waiting(seq))
            .is_none()
        {
            return;
        }
        self.held.waiting -= 1;
        self.counters.unattributed(Unattributed::NoImpression);
    }

    fn finalize(&mut self, user_id: u64, seq: u64) {
        let Some(list) = self.take_from_user(user_id, |user| user.take_open(seq)) else {
            return;
        };
        self.held.open -= 1;
        self.held.items -= list.shown();
        self.held.credits -= list.credit_count();
        let deadline = list.time.saturating_add(self.settings.attribution_window);
        // Lists close in deadline order: the table frees the numbers of
        // items that only lists due before this one showed.
        self.items.closed(deadline);
        let engaged = list.is_engaged();
        if engaged {
            list.grades_into(&mut self.grades);
            self.evaluator.evaluate(&self.grades, &mut self.values);
        } else {
            // Every metric of a list with no item of grade > 0 is 0 (docs/SPEC.md §4).
            self.values.fill(0.0);
        }
        let group = list.group as usize;
        self.group_aggregates(group);
        let aggregates = &mut self.aggregates[group];
        if let Some(log) = &mut self.finalized_log {
            let values = engaged.then_some(&self.values[..]);
            log.start((deadline, list.seq), group, list.time, values);
        } else {
            aggregates.totals.add(&self.values, engaged);
            aggregates.windows.add(list.time, &self.values, engaged);
        }
        aggregates.positions.add(list.shown(), list.credited());
        self.add_coverage(group, &list);
        if list.lineup() != NOT_INTERLEAVED {
            self.credit_rankers(&list);
        }
    }

    /// Credits each ranker of a finalized interleaved list with the gain of
    /// its items, and adds the outcome of each pair to its experiment (or logs it).
    fn credit_rankers(&mut self, list: &OpenImpression) {
        list.grades_into(&mut self.grades);
        list.teams_into(&mut self.teams);
        let lineup = list.lineup();
        let rankers = self.experiments.rankers(lineup);
        crate::metrics::interleaving::credits_into(
            &self.grades,
            &self.teams,
            self.evaluator.gain(),
            rankers,
            &mut self.credits,
        );
        let first = self.teams.first().copied().unwrap_or(0);
        match &mut self.finalized_log {
            Some(log) => log.interleaved(lineup, &self.credits, first),
            None => self
                .experiments
                .add(lineup, &self.credits, first, list.time),
        }
    }

    /// The name of every interleaving experiment, indexed by id.
    pub fn experiment_names(&self) -> &[ExperimentName] {
        self.experiments.names()
    }

    /// Aggregates of every interleaving experiment, indexed by id.
    pub fn experiment_aggregates(&self) -> &[ExperimentAggregates] {
        self.experiments.aggregates()
    }

    /// Interleaved lists that found no room for their lineup under
    /// `max_groups`: counted in their group only, since start.
    pub fn unregistered_interleavings(&self) -> u64 {
        self.experiments.unregistered
    }

    /// Adds a finalized list's items to its group's coverage, since start and per window.
    fn add_coverage(&mut self, group: usize, list: &OpenImpression) {
        let cap = match self.settings.coverage {
            CoverageMode::Off => return,
            mode => mode.cap(),
        };
        let discount = self.evaluator.discount();
        while self.exposure_weights.len() < list.shown() {
            let rank = self.exposure_weights.len() + 1;
            let weight = 1.0 / discount.at_rank(rank);
            self.exposure_weights.push(weight);
            self.exposure_sums
                .push(self.exposure_sums[rank - 1] + weight);
        }
        let table = &self.items;
        table.hashes_into(list.numbers(), &mut self.shown_items);
        table.hashes_into(list.engaged_items(), &mut self.engaged_items);
        let exposure = self.exposure_sums[list.shown()];
        if let Some(log) = &mut self.finalized_log {
            log.shown(&self.shown_items, exposure, &self.engaged_items);
            return;
        }
        ShownList::slots_into(&self.shown_items, &mut self.slots);
        let shown = ShownList {
            items: &self.shown_items,
            slots: &self.slots,
            weights: &self.exposure_weights,
            exposure,
            engaged: &self.engaged_items,
        };
        let aggregates = &mut self.aggregates[group];
        aggregates
            .coverage_windows
            .add(list.time, &shown, cap, &mut aggregates.coverage);
    }

    /// How coverage is kept.
    pub fn coverage_mode(&self) -> CoverageMode {
        self.settings.coverage
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{id_hash, Impression, Interaction, NANOS_PER_SECOND};
    use crate::metrics::{Metric, MetricSettings};
    use proptest::prelude::*;
    use std::borrow::Cow;

    const S: Nanos = NANOS_PER_SECOND;

    fn engine(max_open: usize, max_waiting: usize) -> Engine {
        let settings = JoinSettings {
            attribution_window: 300 * S,
            allowed_lateness: 30 * S,
            shards: 4,
            max_groups: 10,
            segments: SegmentSettings::default(),
            max_open_impressions: max_open,
            max_open_items: usize::MAX,
            max_open_credits: usize::MAX,
            max_waiting_interactions: max_waiting,
            max_open_impressions_per_user: usize::MAX,
            max_waiting_interactions_per_user: usize::MAX,
            max_interactions_per_impression: usize::MAX,
            windows: vec![],
            position_curve_depth: 20,
            interaction_types: vec!["click".to_owned()],
            coverage: CoverageMode::Exact,
            number_items: true,
        };
        Engine::new(
            settings,
            ListEvaluator::new(MetricSettings::default(), &[1, 5]),
        )
    }

    /// How many users have an entry.
    fn users(engine: &Engine) -> usize {
        engine.shards.iter().map(HashMap::len).sum()
    }

    fn impression(user: &str, request: &str, items: &[&str], time: Nanos) -> Event<'static> {
        Event::Impression(Box::new(Impression {
            request: id_hash(request),
            user: id_hash(user),
            items: items.iter().map(|i| id_hash(i)).collect(),
            time,
            model: Cow::Borrowed("m"),
            surface: Cow::Borrowed("s"),
            segments: Vec::new(),
            interleaving: None,
        }))
    }

    #[test]
    fn idle_experiments_are_retired_and_free_their_slots_for_new_ones() {
        // Room for 10 lineups and experiments: ten pairs of rankers fill it.
        let mut engine = engine(100, 100);
        let interleaved = |user: &str, rankers: [&'static str; 2], time: Nanos| {
            let Event::Impression(mut m) = impression(user, user, &["a", "b"], time) else {
                unreachable!("an impression")
            };
            m.interleaving = Some(crate::event::Interleaving {
                rankers: rankers.map(Cow::Borrowed).to_vec(),
                teams: vec![0, 1],
            });
            Event::Impression(m)
        };
        const RANKERS: [&str; 11] = [
            "r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8", "r9", "r10",
        ];
        engine.received_at(10);
        for (i, pair) in RANKERS.windows(2).take(10).enumerate() {
            engine.apply(interleaved(&format!("u{i}"), [pair[0], pair[1]], 0));
        }
        // One of them, which an open list names, is kept however idle.
        engine.apply(interleaved("late", ["r0", "r1"], 400 * S));
        assert_eq!(engine.experiment_names().len(), 10);
        let retired = engine.retire_idle_groups(100, 85);
        assert_eq!(
            retired,
            Retired {
                groups: 0,
                experiments: 9
            },
            "the group is busy"
        );
        let names: Vec<(&str, &str)> = engine
            .experiment_names()
            .iter()
            .map(|n| (n.a.as_str(), n.b.as_str()))
            .collect();
        assert_eq!(names, [("r0", "r1")]);
        assert_eq!(engine.experiment_aggregates()[0].totals.lists, 1);
        // A new pair finds room, and the open list counts in its experiment.
        engine.received_at(110);
        engine.apply(interleaved("new", ["x", "y"], 401 * S));
        engine.finish();
        let lists: Vec<(&str, u64)> = engine
            .experiment_names()
            .iter()
            .zip(engine.experiment_aggregates())
            .map(|(n, a)| (n.a.as_str(), a.totals.lists))
            .collect();
        assert_eq!(lists, [("r0", 2), ("x", 1)]);
        assert_eq!(engine.unregistered_interleavings(), 0);
    }

    #[test]
    fn retiring_idle_groups_spares_those_with_open_impressions_and_renumbers_the_rest() {
        let mut engine = engine(100, 100);
        let shown = |model: &'static str, user: &str, time: Nanos| {
            let Event::Impression(mut m) = impression(user, user, &["a"], time) else {
                unreachable!("an impression")
            };
            m.model = Cow::Borrowed(model);
            Event::Impression(m)
        };
        engine.received_at(10);
        engine.apply(shown("old", "u1", 0));
        engine.apply(shown("busy", "u2", 0));
        engine.apply(click("w", "a", None, 400 * S));
        engine.received_at(20);
        engine.apply(shown("busy", "u3", 400 * S));
        engine.apply(shown("new", "u4", 400 * S));
        engine.apply(click("u3", "a", None, 401 * S));
        // "old" and "busy" have finalized lists; "busy" still has one open.
        assert_eq!(engine.retire_idle_groups(100, 85).groups, 1);
        let names: Vec<&str> = engine
            .group_names()
            .iter()
            .map(|name| name.model.as_str())
            .collect();
        assert_eq!(names, ["busy", "new"]);
        assert_eq!(engine.aggregates().len(), 1);
        assert_eq!(engine.aggregates()[0].totals.lists, 1);
        engine.finish();
        assert_eq!(
            engine.aggregates()[0].totals.lists,
            2,
            "its open list came back to it"
        );
        assert_eq!(engine.aggregates()[0].totals.engaged, 1);
        assert_eq!(engine.counters().impressions, 4, "since start, all of them");
    }

    fn click(user: &str, item: &str, request: Option<&str>, time: Nanos) -> Event<'static> {
        Event::Interaction(Interaction {
            event: None,
            user: id_hash(user),
            item: id_hash(item),
            request: request.map(id_hash),
            time,
            grade: 1.0,
            kind: 0,
        })
    }

    #[test]
    fn a_waiting_interaction_is_settled_by_its_named_impression() {
        let mut engine = engine(10, 10);
        engine.apply(click("u", "b", Some("r1"), 5 * S));
        engine.apply(click("u", "z", Some("r1"), 6 * S));
        assert_eq!(engine.waiting_interactions(), 2);
        engine.apply(impression("u", "r1", &["a", "b"], 4 * S));
        let counters = engine.counters();
        assert_eq!(
            (
                counters.credited,
                counters.unattributed_count(Unattributed::NotInList)
            ),
            (1, 1)
        );
        assert_eq!(engine.waiting_interactions(), 0);
    }

    #[test]
    fn the_latest_matching_impression_gets_an_unnamed_interaction() {
        let mut engine = engine(10, 10);
        engine.apply(impression("u", "r1", &["a", "b"], 0));
        engine.apply(impression("u", "r2", &["b", "a"], S));
        engine.apply(click("u", "a", None, 2 * S));
        engine.finish();
        let mrr_at_1 = Metric::Mrr as usize;
        let totals = &engine.aggregates()[0].totals;
        assert_eq!((totals.lists, totals.engaged), (2, 1));
        assert_eq!(totals.sums[mrr_at_1], 0.0, "r2 got the click, at rank 2");
    }

    /// An event among few users, requests and items, so that lists share
    /// items and interactions find, miss and wait for their lists.
    fn small_world_event() -> impl Strategy<Value = Event<'static>> {
        let shown = (
            0u8..4,
            0u8..6,
            prop::collection::vec(0u8..8, 1..5),
            0i64..900,
        );
        let clicked = (0u8..4, 0u8..9, prop::option::of(0u8..6), 0i64..900);
        prop_oneof![
            shown.prop_map(|(user, request, mut items, time)| {
                items.sort_unstable();
                items.dedup();
                let items: Vec<String> = items.iter().map(|i| format!("i{i}")).collect();
                let items: Vec<&str> = items.iter().map(String::as_str).collect();
                let (user, request) = (format!("u{user}"), format!("r{user}{request}"));
                impression(&user, &request, &items, time * S / 2)
            }),
            clicked.prop_map(|(user, item, request, time)| {
                let request = request.map(|r| format!("r{user}{r}"));
                click(
                    &format!("u{user}"),
                    &format!("i{item}"),
                    request.as_deref(),
                    time * S / 2,
                )
            }),
        ]
    }

    proptest::proptest! {
        /// An engine saved and restored between any two events ends with
        /// the figures, to the bit, of one that ran straight through; the
        /// restored one saves the bytes it was restored from, although it
        /// numbers the items anew; both give back every item number; and
        /// an engine that keeps item hashes instead of numbers saves the
        /// same bytes at every step. The straight engine's table numbers
        /// 250 other items first, so that its lists hold numbers of one
        /// byte and of two side by side.
        #[test]
        fn saving_and_restoring_midway_changes_no_figure(
            events in prop::collection::vec(small_world_event(), 1..120),
            cut in any::<prop::sample::Index>(),
        ) {
            let cut = cut.index(events.len() + 1);
            let mut straight = engine(usize::MAX, usize::MAX);
            let mut others: Vec<u64> = (0..250).map(|i| id_hash(&format!("other{i}"))).collect();
            straight.items.hold_all(&mut others, Nanos::MIN);
            let mut first = engine(usize::MAX, usize::MAX);
            let mut hashed = engine(usize::MAX, usize::MAX);
            hashed.items = ItemTable::new(false);
            let bytes = |engine: &Engine| postcard::to_stdvec(&engine.to_state()).unwrap();
            for event in &events[..cut] {
                straight.apply(event.clone());
                first.apply(event.clone());
                hashed.apply(event.clone());
                prop_assert_eq!(bytes(&hashed), bytes(&straight));
            }
            let saved = bytes(&first);
            let state = postcard::from_bytes(&saved).unwrap();
            let mut restored =
                Engine::from_state(first.settings.clone(), first.evaluator.clone(), state);
            prop_assert_eq!(bytes(&restored), saved);
            for event in &events[cut..] {
                straight.apply(event.clone());
                restored.apply(event.clone());
                hashed.apply(event.clone());
                prop_assert_eq!(bytes(&hashed), bytes(&straight));
            }
            straight.finish();
            restored.finish();
            hashed.finish();
            prop_assert_eq!(bytes(&hashed), bytes(&straight));
            prop_assert_eq!(bytes(&restored), bytes(&straight));
            let held = (straight.items.held(), restored.items.held());
            prop_assert_eq!(held, (0, 0), "no item outlives the last list closed");
        }
    }

    #[test]
    fn open_state_stays_compact() {
        assert_eq!(std::mem::size_of::<OpenImpression>(), 56);
        assert_eq!(std::mem::size_of::<UserState>(), 24);
    }

    #[test]
    fn limits_shed_new_state_and_count_it() {
        let mut engine = engine(1, 1);
        engine.apply(impression("u", "r1", &["a"], 0));
        engine.apply(impression("v", "r2", &["a"], 0));
        engine.apply(click("w", "a", None, S));
        engine.apply(click("x", "a", None, S));
        let counters = engine.counters();
        assert_eq!((counters.impressions, counters.shed_impressions), (1, 1));
        assert_eq!((counters.interactions, counters.shed_interactions), (1, 1));
        assert_eq!(
            (engine.open_impressions(), engine.waiting_interactions()),
            (1, 1)
        );
        assert_eq!(users(&engine), 2, "u and w; v and x were shed");
    }

    #[test]
    fn an_interaction_behind_the_watermark_that_finds_nothing_gives_up_at_once() {
        let mut engine = engine(10, 10);
        engine.apply(impression("w", "r9", &["x"], 1000 * S));
        engine.apply(click("u", "a", None, 900 * S));
        assert_eq!(engine.waiting_interactions(), 0);
        assert_eq!(users(&engine), 1, "only w holds state");
        engine.apply(impression("u", "r1", &["a", "b"], 800 * S));
        assert_eq!(
            engine.counters().credited,
            0,
            "the click gave up before r1 arrived"
        );
        assert_eq!(
            engine
                .counters()
                .unattributed_count(Unattributed::NoImpression),
            1
        );
    }

    #[test]
    fn the_watermark_finalizes_and_gives_up() {
        let mut engine = engine(10, 10);
        engine.apply(impression("u", "r1", &["a"], 0));
        engine.apply(click("v", "a", None, S));
        engine.apply(impression("w", "r2", &["a"], 330 * S));
        assert_eq!(
            engine.open_impressions(),
            1,
            "r1 closed at 0 + 300 <= 330 - 30"
        );
        assert_eq!(
            engine
                .counters()
                .unattributed_count(Unattributed::NoImpression),
            1
        );
        engine.apply(impression("u", "r3", &["a"], 0));
        assert_eq!(engine.counters().late_impressions, 1);
    }
}
