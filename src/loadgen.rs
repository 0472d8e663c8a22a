//! Synthetic traffic: a position-based click model over several models of
//! different quality, sent to a running server (loadgen, demo, benchmarks).
//!
//! [`Traffic`] is a deterministic generator of wire [`Event`]s: users see
//! ranked lists from a catalogue of items with a latent relevance, ranked by
//! models that are better or worse at ordering by that relevance, and give
//! feedback under a position-based click model. [`run`] drives `--streams`
//! `Collector.Ingest` streams against a server and measures throughput and ack
//! latency, generating each batch as it sends it or, with `--pregenerate`,
//! sending batches encoded before the run so that the server's capacity
//! rather than the generator's is measured; [`feed`] pushes traffic into a
//! server until shutdown, for the demo.
//! This module only speaks the public gRPC API: it knows nothing of the join,
//! the metrics or the server's internals, exactly like an external client.

mod sender;

use crate::config::parse_duration;
use crate::event::{Nanos, NANOS_PER_SECOND};
use crate::proto::{event::Kind, Event, Impression, IngestAck, Interaction};
use anyhow::Context;
use bytes::Bytes;
use sender::{EncodedBatch, IngestClient};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::transport::{Channel, Endpoint};

/// P(examine rank j) = j^-EXAMINATION_EXPONENT.
const EXAMINATION_EXPONENT: f64 = 0.8;
/// Candidates a model scores per shown item: a better model also picks better items.
const CANDIDATES_PER_SLOT: usize = 2;
/// Standard deviation of a quality-0 model's scoring noise (relevance is in [0, 1]).
const NOISE_SCALE: f64 = 1.0;
/// Feedback delays are exponential, cut at this multiple of their mean.
const MAX_DELAY_FACTOR: f64 = 5.0;
/// Scheduled interactions held before the earliest is sent early: bounds memory at any rate.
const MAX_PENDING: usize = 1 << 18;
/// Fixed seed of the catalogue, so that every generator agrees on item relevance.
const CATALOGUE_SEED: u64 = 0x7261_6e6b_7761_7463;
/// Batches a stream may leave unacknowledged when [`feed`] drives it.
const FEED_MAX_INFLIGHT: usize = 8;
/// How long a stopping stream waits for its outstanding acks.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// How far a paced stream may fall behind before it stops catching up, in batches.
const MAX_CATCH_UP: u32 = 8;

/// Why a traffic or load setting is unusable.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum TrafficError {
    /// No model to rank lists.
    #[error("no models: give at least one, e.g. control=0.9,candidate=0.4")]
    NoModels,
    /// No surface to show lists on.
    #[error("no surfaces: give at least one, e.g. home,search")]
    NoSurfaces,
    /// A model specification is not `NAME=QUALITY`.
    #[error("model {0:?} is not NAME=QUALITY, e.g. control=0.9")]
    ModelSpec(String),
    /// Two models share a name.
    #[error("model {0:?} is given twice")]
    DuplicateModel(String),
    /// A quality outside [0, 1].
    #[error("quality of model {model:?} is {quality}; give a number from 0 (random order) to 1 (ideal order)")]
    Quality {
        /// The model.
        model: String,
        /// The rejected quality.
        quality: f64,
    },
    /// `set_quality` named a model the generator does not have.
    #[error("unknown model {model:?}; models: {known}")]
    UnknownModel {
        /// The unknown name.
        model: String,
        /// The generator's models, comma-separated.
        known: String,
    },
    /// No users.
    #[error("users must be at least 1")]
    NoUsers,
    /// A list longer than the catalogue, or empty.
    #[error("items per list is {items}; give 1 to the catalogue size ({catalogue})")]
    ItemsPerList {
        /// Items per list asked for.
        items: usize,
        /// Items in the catalogue.
        catalogue: u32,
    },
    /// An interaction share outside [0, 1).
    #[error("interaction share is {0}; give a fraction of events from 0 up to (not including) 1, e.g. 0.8")]
    InteractionShare(f64),
    /// A request-id share outside [0, 1].
    #[error("request id share is {0}; give a fraction from 0 to 1, e.g. 0.9")]
    RequestIdShare(f64),
}

/// A named model and how well it ranks: 1 orders by latent relevance, 0 almost at random.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelSpec {
    /// The model name, sent as `Impression.model`.
    pub name: String,
    /// Ranking quality in [0, 1].
    pub quality: f64,
}

impl ModelSpec {
    /// A model `name` of `quality`.
    pub fn new(name: impl Into<String>, quality: f64) -> Self {
        Self {
            name: name.into(),
            quality,
        }
    }
}

impl FromStr for ModelSpec {
    type Err = TrafficError;

    /// Parses `NAME=QUALITY`, e.g. `control=0.9`.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (name, quality) = text
            .split_once('=')
            .ok_or_else(|| TrafficError::ModelSpec(text.to_owned()))?;
        let name = name.trim();
        let quality: f64 = quality
            .trim()
            .parse()
            .map_err(|_| TrafficError::ModelSpec(text.to_owned()))?;
        if name.is_empty() {
            return Err(TrafficError::ModelSpec(text.to_owned()));
        }
        check_quality(name, quality)?;
        Ok(Self::new(name, quality))
    }
}

impl fmt::Display for ModelSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.name, self.quality)
    }
}

fn check_quality(model: &str, quality: f64) -> Result<(), TrafficError> {
    if (0.0..=1.0).contains(&quality) {
        Ok(())
    } else {
        Err(TrafficError::Quality {
            model: model.to_owned(),
            quality,
        })
    }
}

/// What a [`Traffic`] generator produces.
#[derive(Clone, Debug, PartialEq)]
pub struct TrafficConfig {
    /// Seed of every random choice: equal configs and clocks give equal events.
    pub seed: u64,
    /// Distinct users, `u0` to `u{users-1}`; a user always sees the same model (A/B split by user).
    pub users: u32,
    /// Items in the catalogue, `i0` to `i{catalogue-1}`.
    pub catalogue: u32,
    /// Items in every impression.
    pub items_per_list: usize,
    /// Target share of interactions among all events, in [0, 1); 0 sends
    /// impressions only. The click
    /// model's own feedback is topped up with repeat clicks on engaged items or
    /// thinned by sending only the deepest step of a click → cart → purchase
    /// chain; neither changes a list's grades. A share below what one event per
    /// engaged item gives (about 0.68 with the defaults) is not reached.
    pub interaction_share: f64,
    /// Share of interactions that carry their impression's `request_id`.
    pub request_id_share: f64,
    /// Mean delay from an impression to each of its interactions (exponential,
    /// cut at 5 times the mean). Keep it well below the server's attribution window.
    pub feedback_delay: Duration,
    /// Models, assigned to users round-robin by user number.
    pub models: Vec<ModelSpec>,
    /// Surfaces, chosen uniformly per impression.
    pub surfaces: Vec<String>,
    /// Prefix of user, request and event ids. Give each generator feeding the
    /// same server its own prefix, so their users and requests never collide.
    pub id_prefix: String,
}

impl Default for TrafficConfig {
    /// The demo: `control` (0.9) against `candidate` (0.4) on `home` and `search`.
    fn default() -> Self {
        Self {
            seed: 1,
            users: 1_000,
            catalogue: 5_000,
            items_per_list: 20,
            interaction_share: 0.8,
            request_id_share: 0.9,
            feedback_delay: Duration::from_secs(2),
            models: vec![
                ModelSpec::new("control", 0.9),
                ModelSpec::new("candidate", 0.4),
            ],
            surfaces: vec!["home".to_owned(), "search".to_owned()],
            id_prefix: String::new(),
        }
    }
}

impl TrafficConfig {
    fn validate(&self) -> Result<(), TrafficError> {
        if self.models.is_empty() {
            return Err(TrafficError::NoModels);
        }
        for (index, model) in self.models.iter().enumerate() {
            check_quality(&model.name, model.quality)?;
            if self.models[..index]
                .iter()
                .any(|earlier| earlier.name == model.name)
            {
                return Err(TrafficError::DuplicateModel(model.name.clone()));
            }
        }
        if self.surfaces.is_empty() {
            return Err(TrafficError::NoSurfaces);
        }
        if self.users == 0 {
            return Err(TrafficError::NoUsers);
        }
        if self.items_per_list == 0 || self.items_per_list > self.catalogue as usize {
            return Err(TrafficError::ItemsPerList {
                items: self.items_per_list,
                catalogue: self.catalogue,
            });
        }
        if !(0.0..1.0).contains(&self.interaction_share) {
            return Err(TrafficError::InteractionShare(self.interaction_share));
        }
        if !(0.0..=1.0).contains(&self.request_id_share) {
            return Err(TrafficError::RequestIdShare(self.request_id_share));
        }
        Ok(())
    }
}

/// The models' names and current qualities, shared between a generator and
/// whoever degrades a model while it runs (an alerting test, the demo).
#[derive(Clone, Debug)]
pub struct QualityHandle {
    models: Arc<[(String, AtomicU64)]>,
}

impl QualityHandle {
    fn new(models: &[ModelSpec]) -> Self {
        Self {
            models: models
                .iter()
                .map(|m| (m.name.clone(), AtomicU64::new(m.quality.to_bits())))
                .collect(),
        }
    }

    /// Sets `model`'s quality from the next impression on.
    pub fn set(&self, model: &str, quality: f64) -> Result<(), TrafficError> {
        check_quality(model, quality)?;
        let (_, bits) = self
            .models
            .iter()
            .find(|(name, _)| name == model)
            .ok_or_else(|| TrafficError::UnknownModel {
                model: model.to_owned(),
                known: self
                    .models
                    .iter()
                    .map(|(name, _)| name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })?;
        bits.store(quality.to_bits(), Ordering::Relaxed);
        Ok(())
    }

    /// `model`'s current quality, if there is such a model.
    pub fn get(&self, model: &str) -> Option<f64> {
        self.models
            .iter()
            .find(|(name, _)| name == model)
            .map(|(_, bits)| f64::from_bits(bits.load(Ordering::Relaxed)))
    }

    fn len(&self) -> usize {
        self.models.len()
    }

    fn name(&self, index: usize) -> &str {
        &self.models[index].0
    }

    fn quality(&self, index: usize) -> f64 {
        f64::from_bits(self.models[index].1.load(Ordering::Relaxed))
    }
}

/// Interaction types of the default grade table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Feedback {
    Click,
    AddToCart,
    Purchase,
}

impl Feedback {
    const CHAIN: [Feedback; 3] = [Feedback::Click, Feedback::AddToCart, Feedback::Purchase];

    fn as_str(self) -> &'static str {
        match self {
            Feedback::Click => "click",
            Feedback::AddToCart => "add_to_cart",
            Feedback::Purchase => "purchase",
        }
    }
}

/// An interaction waiting for its time, stored compactly until it is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Scheduled {
    time: Nanos,
    order: u64,
    list: u64,
    user: u32,
    item: u32,
    feedback: Feedback,
    with_request: bool,
}

/// An item a user engaged with: how deep down click → cart → purchase they went,
/// and from which step on the chain is sent.
#[derive(Clone, Copy, Debug)]
struct Engagement {
    item: u32,
    depth: usize,
    first: usize,
}

/// A deterministic generator of impressions and interactions in event-time
/// order. Each event's time is the later of the previous event's time and the
/// `now` passed in; an interaction is sent once its time (a few seconds after
/// its impression) has come, so a generator fed the wall clock stays on it.
/// The same config and the same sequence of `now` values give the same events.
pub struct Traffic {
    rng: fastrand::Rng,
    models: QualityHandle,
    surfaces: Vec<String>,
    prefix: String,
    users: u32,
    items_per_list: usize,
    candidates: usize,
    request_id_share: f64,
    mean_delay: f64,
    /// Interactions owed per impression to reach the interaction share.
    per_list_target: f64,
    relevance: Vec<f64>,
    examination: Vec<f64>,
    /// The catalogue, partially shuffled to draw each list's candidates.
    catalogue: Vec<u32>,
    scored: Vec<(f64, u32)>,
    /// The second normal of the last Box–Muller draw, not used yet.
    spare_normal: Option<f64>,
    shown: Vec<u32>,
    engaged: Vec<Engagement>,
    pending: BinaryHeap<Reverse<Scheduled>>,
    clock: Nanos,
    lists: u64,
    events: u64,
    scheduled: u64,
    /// Interactions owed to the share, carried from list to list.
    owed: f64,
}

impl Traffic {
    /// A generator for `config`.
    pub fn new(config: TrafficConfig) -> Result<Self, TrafficError> {
        config.validate()?;
        let share = config.interaction_share;
        let mut catalogue_rng = fastrand::Rng::with_seed(CATALOGUE_SEED);
        // Most items are weak, a few are very relevant.
        let relevance = (0..config.catalogue)
            .map(|_| catalogue_rng.f64().powi(2))
            .collect();
        let examination = (1..=config.items_per_list)
            .map(|rank| (rank as f64).powf(-EXAMINATION_EXPONENT))
            .collect();
        let candidates =
            (config.items_per_list * CANDIDATES_PER_SLOT).min(config.catalogue as usize);
        Ok(Self {
            rng: fastrand::Rng::with_seed(config.seed),
            models: QualityHandle::new(&config.models),
            surfaces: config.surfaces,
            prefix: config.id_prefix,
            users: config.users,
            items_per_list: config.items_per_list,
            candidates,
            request_id_share: config.request_id_share,
            mean_delay: config.feedback_delay.as_nanos() as f64,
            per_list_target: share / (1.0 - share),
            relevance,
            examination,
            catalogue: (0..config.catalogue).collect(),
            scored: Vec::with_capacity(candidates),
            spare_normal: None,
            shown: Vec::with_capacity(config.items_per_list),
            engaged: Vec::with_capacity(config.items_per_list),
            pending: BinaryHeap::new(),
            clock: Nanos::MIN,
            lists: 0,
            events: 0,
            scheduled: 0,
            owed: 0.0,
        })
    }

    /// A handle on the models' qualities, to change them while the generator
    /// runs elsewhere (e.g. inside [`feed`]).
    pub fn quality_handle(&self) -> QualityHandle {
        self.models.clone()
    }

    /// Sets `model`'s quality from the next impression on: a drop from 0.9 to
    /// 0.1 is a bad deploy that the server's metrics and alerts should show.
    pub fn set_quality(&self, model: &str, quality: f64) -> Result<(), TrafficError> {
        self.models.set(model, quality)
    }

    /// The next event, at or after `now` (nanoseconds since the Unix epoch) and
    /// at or after every event before it.
    pub fn next_event(&mut self, now: Nanos) -> Event {
        let clock = self.clock.max(now);
        let due = self
            .pending
            .peek()
            .is_some_and(|Reverse(next)| next.time <= clock);
        if due || self.pending.len() >= MAX_PENDING {
            if let Some(Reverse(next)) = self.pending.pop() {
                // Early only when too many wait: then it goes out now, still after its impression.
                self.clock = next.time.clamp(self.clock, clock);
                return self.interaction(next);
            }
        }
        self.clock = clock;
        self.impression(clock)
    }

    /// The next `len` events, all at or after `now`.
    pub fn next_batch(&mut self, now: Nanos, len: usize) -> Vec<Event> {
        (0..len).map(|_| self.next_event(now)).collect()
    }

    fn impression(&mut self, time: Nanos) -> Event {
        let user = self.rng.u32(0..self.users);
        let model = user as usize % self.models.len();
        let surface = self.rng.usize(0..self.surfaces.len());
        self.rank(self.models.quality(model));
        let list = self.lists;
        self.lists += 1;
        self.schedule_feedback(user, list, time);
        Event {
            kind: Some(Kind::Impression(Impression {
                request_id: self.request_id(list),
                user_id: self.user_id(user),
                item_ids: self.shown.iter().map(|&item| item_id(item)).collect(),
                time: Some(timestamp(time)),
                model: self.models.name(model).to_owned(),
                surface: self.surfaces[surface].clone(),
            })),
        }
    }

    fn interaction(&mut self, scheduled: Scheduled) -> Event {
        let event = self.events;
        self.events += 1;
        let request_id = if scheduled.with_request {
            self.request_id(scheduled.list)
        } else {
            String::new()
        };
        Event {
            kind: Some(Kind::Interaction(Interaction {
                event_id: id(&self.prefix, 'e', event),
                user_id: self.user_id(scheduled.user),
                item_id: item_id(scheduled.item),
                request_id,
                r#type: scheduled.feedback.as_str().to_owned(),
                time: Some(timestamp(self.clock)),
                grade: None,
            })),
        }
    }

    /// Fills `shown` with a model's list: candidates drawn from the catalogue,
    /// ordered by relevance plus noise that shrinks as quality grows.
    fn rank(&mut self, quality: f64) {
        let noise = NOISE_SCALE * (1.0 - quality);
        self.scored.clear();
        for slot in 0..self.candidates {
            let pick = self.rng.usize(slot..self.catalogue.len());
            self.catalogue.swap(slot, pick);
            let item = self.catalogue[slot];
            let score = self.relevance[item as usize] + noise * self.gaussian();
            self.scored.push((score, item));
        }
        // The best `items_per_list` first, in order; the rest left unsorted.
        let by_score = |a: &(f64, u32), b: &(f64, u32)| b.0.total_cmp(&a.0);
        let shown = self.items_per_list.min(self.scored.len());
        if shown < self.scored.len() {
            self.scored.select_nth_unstable_by(shown, by_score);
        }
        self.scored[..shown].sort_unstable_by(by_score);
        self.shown.clear();
        self.shown
            .extend(self.scored[..shown].iter().map(|&(_, item)| item));
    }

    /// Runs the click model on the list in `shown` and schedules its
    /// interactions, shaped to the interaction share without changing grades.
    fn schedule_feedback(&mut self, user: u32, list: u64, time: Nanos) {
        self.engaged.clear();
        if self.per_list_target == 0.0 {
            return; // an interaction share of 0: impressions only, for memory benchmarks
        }
        for (rank, &item) in self.shown.iter().enumerate() {
            let relevance = self.relevance[item as usize];
            if self.rng.f64() >= self.examination[rank]
                || self.rng.f64() >= click_probability(relevance)
            {
                continue;
            }
            let mut depth = 1;
            if self.rng.f64() < cart_probability(relevance) {
                depth = 2;
                if self.rng.f64() < purchase_probability(relevance) {
                    depth = 3;
                }
            }
            self.engaged.push(Engagement {
                item,
                depth,
                first: 0,
            });
        }
        let limit = 2.0 * self.per_list_target.ceil() + 4.0;
        self.owed = (self.owed + self.per_list_target).clamp(-limit, limit);
        if self.engaged.is_empty() {
            return;
        }
        let full: usize = self.engaged.iter().map(|e| e.depth).sum();
        let wanted =
            (self.owed.round().max(0.0) as usize).clamp(self.engaged.len(), full + limit as usize);
        // Too many: send only the deeper steps of a chain, which keeps its grade.
        let mut total = full;
        for engagement in &mut self.engaged {
            while total > wanted && engagement.first + 1 < engagement.depth {
                engagement.first += 1;
                total -= 1;
            }
        }
        let engaged = std::mem::take(&mut self.engaged);
        for engagement in &engaged {
            let mut delays = [self.delay(), self.delay(), self.delay()];
            delays.sort_unstable();
            let chain = Feedback::CHAIN
                .iter()
                .zip(delays)
                .take(engagement.depth)
                .skip(engagement.first);
            for (&feedback, delay) in chain {
                self.schedule(time + delay, user, engagement.item, list, feedback);
            }
        }
        self.engaged = engaged;
        // Too few: repeat clicks on engaged items, which keep their grades too.
        for _ in total..wanted {
            let engagement = self.engaged[self.rng.usize(0..self.engaged.len())];
            let delay = self.delay();
            self.schedule(time + delay, user, engagement.item, list, Feedback::Click);
        }
        self.owed -= wanted.max(total) as f64;
    }

    fn schedule(&mut self, time: Nanos, user: u32, item: u32, list: u64, feedback: Feedback) {
        let with_request = self.rng.f64() < self.request_id_share;
        let order = self.scheduled;
        self.scheduled += 1;
        self.pending.push(Reverse(Scheduled {
            time,
            order,
            list,
            user,
            item,
            feedback,
            with_request,
        }));
    }

    fn delay(&mut self) -> Nanos {
        let exponential = -(1.0 - self.rng.f64()).ln();
        (exponential.min(MAX_DELAY_FACTOR) * self.mean_delay) as Nanos
    }

    fn request_id(&self, list: u64) -> String {
        id(&self.prefix, 'r', list)
    }

    fn user_id(&self, user: u32) -> String {
        id(&self.prefix, 'u', user.into())
    }

    /// A standard normal draw (Box–Muller, which draws two at a time).
    fn gaussian(&mut self) -> f64 {
        if let Some(normal) = self.spare_normal.take() {
            return normal;
        }
        let radius = (-2.0 * (1.0 - self.rng.f64()).ln()).sqrt();
        let (sin, cos) = (std::f64::consts::TAU * self.rng.f64()).sin_cos();
        self.spare_normal = Some(radius * sin);
        radius * cos
    }
}

fn item_id(item: u32) -> String {
    id("", 'i', item.into())
}

/// `prefix`, `tag` and `number` as one id, like `1a2b-0-u42`; without the
/// machinery of `format!`, which took a tenth of the loadgen's time.
fn id(prefix: &str, tag: char, number: u64) -> String {
    let mut digits = itoa::Buffer::new();
    let digits = digits.format(number);
    let mut id = String::with_capacity(prefix.len() + 1 + digits.len());
    id.push_str(prefix);
    id.push(tag);
    id.push_str(digits);
    id
}

/// P(click | examined) of an item of latent relevance `r` in [0, 1].
fn click_probability(r: f64) -> f64 {
    0.02 + 0.7 * r
}

/// P(add_to_cart | click).
fn cart_probability(r: f64) -> f64 {
    0.1 + 0.3 * r
}

/// P(purchase | add_to_cart).
fn purchase_probability(r: f64) -> f64 {
    0.2 + 0.4 * r
}

fn timestamp(time: Nanos) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: time.div_euclid(NANOS_PER_SECOND),
        nanos: time.rem_euclid(NANOS_PER_SECOND) as i32,
    }
}

/// `time` as nanoseconds since the Unix epoch (0 before it), the clock [`Traffic`] takes.
pub fn unix_nanos(time: SystemTime) -> Nanos {
    time.duration_since(UNIX_EPOCH).map_or(0, |since| {
        Nanos::try_from(since.as_nanos()).unwrap_or(Nanos::MAX)
    })
}

/// `rankwatch loadgen`: synthetic traffic against a running server.
#[derive(clap::Args, Clone, Debug)]
pub struct LoadgenArgs {
    /// gRPC address of the server.
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
    /// Concurrent `Ingest` streams, each on its own connection with its own users.
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
    #[arg(
        long,
        env = "RANKWATCH_LOADGEN_MODELS",
        value_delimiter = ',',
        default_value = "control=0.9,candidate=0.4"
    )]
    pub models: Vec<ModelSpec>,
    /// Surfaces the lists are shown on.
    #[arg(
        long,
        env = "RANKWATCH_LOADGEN_SURFACES",
        value_delimiter = ',',
        default_value = "home,search"
    )]
    pub surfaces: Vec<String>,
    /// Most batches a stream leaves unacknowledged before it waits.
    #[arg(long, env = "RANKWATCH_LOADGEN_MAX_INFLIGHT", default_value_t = 8)]
    pub max_inflight: usize,
    /// Generate and encode every batch before the run, event times advancing
    /// at this many events per second from when generation starts; the run
    /// then spends the loadgen's core on sending only, and ends at
    /// --duration or when the batches run out. Generating takes a while:
    /// keep the server's wall-clock advance off, or its watermark passes the
    /// first events.
    #[arg(
        long,
        env = "RANKWATCH_LOADGEN_PREGENERATE",
        value_name = "EVENTS_PER_SECOND"
    )]
    pub pregenerate: Option<f64>,
}

impl LoadgenArgs {
    fn validate(&self) -> Result<(), LoadError> {
        let positive = [
            ("batch-size", self.batch_size),
            ("streams", self.streams),
            ("max-inflight", self.max_inflight),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, value)| *value == 0) {
            return Err(LoadError::Setting(format!("--{name} must be at least 1")));
        }
        if !self.rate.is_finite() || self.rate < 0.0 {
            return Err(LoadError::Setting(format!(
                "--rate is {}; give events per second, 0 for unpaced",
                self.rate
            )));
        }
        if let Some(rate) = self.pregenerate.filter(|r| !r.is_finite() || *r <= 0.0) {
            return Err(LoadError::Setting(format!(
                "--pregenerate is {rate}; give the events per second of event time, e.g. 1000000"
            )));
        }
        Ok(())
    }

    /// Stream `stream`'s batches, generated now if `--pregenerate` asks for it.
    fn source(&self, run: u64, stream: usize) -> Result<BatchSource, TrafficError> {
        let mut traffic = Traffic::new(self.traffic(run, stream))?;
        let Some(rate) = self.pregenerate else {
            return Ok(BatchSource::Live(Box::new(traffic)));
        };
        let stream_rate = rate / self.streams as f64;
        let count = (self.duration.as_secs_f64() * stream_rate / self.batch_size as f64).ceil();
        let period = self.batch_size as f64 / stream_rate * NANOS_PER_SECOND as f64;
        let start = unix_nanos(SystemTime::now());
        let batches: Vec<_> = (0..count as u64)
            .map(|index| {
                let now = start + (index as f64 * period) as Nanos;
                EncodedBatch::new(index + 1, traffic.next_batch(now, self.batch_size))
            })
            .collect();
        Ok(BatchSource::Ready(batches.into_iter()))
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
            id_prefix: format!("{run:x}-{stream}-"),
        }
    }
}

/// Why a load run or a feed stopped.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// A load setting is unusable.
    #[error("{0}")]
    Setting(String),
    /// A traffic setting is unusable.
    #[error(transparent)]
    Traffic(#[from] TrafficError),
    /// The target is not a URI.
    #[error("invalid target {target:?}; give a URI like http://127.0.0.1:50051")]
    Target {
        /// The target given.
        target: String,
        /// Why it does not parse.
        #[source]
        source: tonic::transport::Error,
    },
    /// The server cannot be reached.
    #[error("cannot connect to {target}")]
    Connect {
        /// The target given.
        target: String,
        /// The transport's reason.
        #[source]
        source: tonic::transport::Error,
    },
    /// The server ended the stream with a status.
    #[error("ingest stream failed: {0}")]
    Rpc(Box<tonic::Status>),
    /// An ack for another batch than the oldest unacknowledged one.
    #[error("the server acknowledged batch {got} while batch {expected} was the oldest unacknowledged one")]
    AckOutOfOrder {
        /// The oldest unacknowledged sequence.
        expected: u64,
        /// The acknowledged sequence.
        got: u64,
    },
    /// The server closed the stream early.
    #[error("the server closed the ingest stream with {unacked} batches unacknowledged")]
    Closed {
        /// Batches sent and never acknowledged.
        unacked: usize,
    },
}

impl From<tonic::Status> for LoadError {
    fn from(status: tonic::Status) -> Self {
        LoadError::Rpc(Box::new(status))
    }
}

/// Ack latency percentiles over a run's batches.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LatencySummary {
    /// Median.
    pub p50: Duration,
    /// 90th percentile.
    pub p90: Duration,
    /// 99th percentile.
    pub p99: Duration,
    /// Slowest batch.
    pub max: Duration,
}

impl LatencySummary {
    /// Nearest-rank percentiles of `samples`; all zero when there are none.
    fn of(mut samples: Vec<Duration>) -> Self {
        samples.sort_unstable();
        let at = |p: f64| {
            let rank = (p * samples.len() as f64).ceil() as usize;
            samples
                .get(rank.saturating_sub(1))
                .copied()
                .unwrap_or_default()
        };
        Self {
            p50: at(0.50),
            p90: at(0.90),
            p99: at(0.99),
            max: samples.last().copied().unwrap_or_default(),
        }
    }
}

/// What a load run achieved.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LoadReport {
    /// Streams used.
    pub streams: usize,
    /// Batches sent.
    pub batches: u64,
    /// Events sent.
    pub events_sent: u64,
    /// Impressions among the events sent.
    pub impressions_sent: u64,
    /// Interactions among the events sent.
    pub interactions_sent: u64,
    /// Events the server accepted.
    pub accepted: u64,
    /// Events the server rejected.
    pub rejected: u64,
    /// Rejected events by reason.
    pub rejected_by_reason: BTreeMap<String, u64>,
    /// Batches still unacknowledged when the drain timed out.
    pub unacked_batches: u64,
    /// From the first batch to the last ack.
    pub elapsed: Duration,
    /// Acknowledged events per second of `elapsed`.
    pub events_per_second: f64,
    /// Time from sending a batch to receiving its ack.
    pub ack_latency: LatencySummary,
    /// CPU time the loadgen process used over `elapsed` (not generating
    /// batches beforehand): what sending cost it.
    pub cpu: Duration,
}

impl fmt::Display for LoadReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let share = |part: u64| {
            if self.events_sent == 0 {
                0.0
            } else {
                100.0 * part as f64 / self.events_sent as f64
            }
        };
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        writeln!(
            f,
            "rankwatch loadgen: {} stream(s), {:.2} s",
            self.streams,
            self.elapsed.as_secs_f64()
        )?;
        writeln!(
            f,
            "  sent         {} events in {} batches ({:.1}% impressions, {:.1}% interactions)",
            self.events_sent,
            self.batches,
            share(self.impressions_sent),
            share(self.interactions_sent)
        )?;
        writeln!(
            f,
            "  acked        {} accepted, {} rejected",
            self.accepted, self.rejected
        )?;
        writeln!(f, "  throughput   {:.0} events/s", self.events_per_second)?;
        writeln!(
            f,
            "  ack latency  p50 {:.2} ms  p90 {:.2} ms  p99 {:.2} ms  max {:.2} ms",
            ms(self.ack_latency.p50),
            ms(self.ack_latency.p90),
            ms(self.ack_latency.p99),
            ms(self.ack_latency.max)
        )?;
        let elapsed = self.elapsed.as_secs_f64();
        writeln!(
            f,
            "  loadgen cpu  {:.2} s ({:.0}% of one core)",
            self.cpu.as_secs_f64(),
            if elapsed > 0.0 {
                100.0 * self.cpu.as_secs_f64() / elapsed
            } else {
                0.0
            }
        )?;
        for (reason, count) in &self.rejected_by_reason {
            writeln!(f, "  rejected     {reason}: {count}")?;
        }
        if self.unacked_batches > 0 {
            writeln!(
                f,
                "  unacked      {} batches (no ack within {:?})",
                self.unacked_batches, DRAIN_TIMEOUT
            )?;
        }
        Ok(())
    }
}

/// Counts of one stream, merged into the report.
#[derive(Debug, Default)]
struct StreamStats {
    batches: u64,
    impressions: u64,
    interactions: u64,
    accepted: u64,
    rejected: u64,
    rejected_by_reason: BTreeMap<String, u64>,
    unacked: u64,
    latencies: Vec<Duration>,
}

impl StreamStats {
    fn sent(&mut self, batch: &EncodedBatch) {
        self.batches += 1;
        self.impressions += batch.impressions;
        self.interactions += batch.interactions;
    }

    fn acked(&mut self, ack: IngestAck, sent: Sent) -> Result<(), LoadError> {
        if ack.sequence != sent.sequence {
            return Err(LoadError::AckOutOfOrder {
                expected: sent.sequence,
                got: ack.sequence,
            });
        }
        self.latencies.push(sent.at.elapsed());
        self.accepted += u64::from(ack.accepted);
        self.rejected += ack.rejections.len() as u64;
        for rejection in ack.rejections {
            let count = self.rejected_by_reason.entry(rejection.reason).or_default();
            if *count == 0 {
                tracing::warn!(index = rejection.index, message = %rejection.message, "the server rejected an event");
            }
            *count += 1;
        }
        Ok(())
    }

    fn merge(&mut self, other: StreamStats) {
        self.batches += other.batches;
        self.impressions += other.impressions;
        self.interactions += other.interactions;
        self.accepted += other.accepted;
        self.rejected += other.rejected;
        self.unacked += other.unacked;
        for (reason, count) in other.rejected_by_reason {
            *self.rejected_by_reason.entry(reason).or_default() += count;
        }
        self.latencies.extend(other.latencies);
    }

    fn report(self, streams: usize, elapsed: Duration, cpu: Duration) -> LoadReport {
        let acked = self.accepted + self.rejected;
        let seconds = elapsed.as_secs_f64();
        LoadReport {
            streams,
            batches: self.batches,
            events_sent: self.impressions + self.interactions,
            impressions_sent: self.impressions,
            interactions_sent: self.interactions,
            accepted: self.accepted,
            rejected: self.rejected,
            rejected_by_reason: self.rejected_by_reason,
            unacked_batches: self.unacked,
            elapsed,
            events_per_second: if seconds > 0.0 {
                acked as f64 / seconds
            } else {
                0.0
            },
            ack_latency: LatencySummary::of(self.latencies),
            cpu,
        }
    }
}

/// A batch sent and not yet acknowledged.
#[derive(Clone, Copy, Debug)]
struct Sent {
    sequence: u64,
    at: Instant,
}

/// Spaces batches to a rate; lets a stream that fell behind catch up a little, not without bound.
struct Pacer {
    period: Option<Duration>,
    next: Instant,
}

impl Pacer {
    /// `rate` events per second in batches of `batch_size`; 0 is unpaced.
    fn new(rate: f64, batch_size: usize) -> Self {
        let period =
            (rate > 0.0).then(|| Duration::from_secs_f64((batch_size as f64 / rate).min(3600.0)));
        Self {
            period,
            next: Instant::now(),
        }
    }

    /// Waits for the next batch's turn; cancel-safe.
    async fn ready(&self) {
        if self.period.is_some() {
            tokio::time::sleep_until(self.next).await;
        }
    }

    fn sent(&mut self) {
        let Some(period) = self.period else { return };
        let now = Instant::now();
        let floor = now.checked_sub(period * MAX_CATCH_UP).unwrap_or(now);
        self.next = (self.next + period).max(floor);
    }
}

/// Where a stream's batches come from.
enum BatchSource {
    /// Generated as they are sent, at the wall clock.
    Live(Box<Traffic>),
    /// Generated and encoded before the run.
    Ready(std::vec::IntoIter<EncodedBatch>),
}

impl BatchSource {
    /// The next batch, numbered `sequence` if generated now; `None` when a
    /// pregenerated source is used up.
    fn next(&mut self, sequence: u64, batch_size: usize) -> Option<EncodedBatch> {
        match self {
            BatchSource::Live(traffic) => {
                let events = traffic.next_batch(unix_nanos(SystemTime::now()), batch_size);
                Some(EncodedBatch::new(sequence, events))
            }
            BatchSource::Ready(batches) => batches.next(),
        }
    }
}

/// How one stream sends.
#[derive(Clone, Copy, Debug)]
struct StreamPlan {
    rate: f64,
    batch_size: usize,
    max_inflight: usize,
}

/// Sends `source`'s batches on one `Ingest` stream until `stop` or until
/// they run out, then waits for the outstanding acks (at most [`DRAIN_TIMEOUT`]).
async fn drive(
    channel: Channel,
    mut source: BatchSource,
    plan: StreamPlan,
    stop: CancellationToken,
) -> Result<StreamStats, LoadError> {
    let (batches, outbound) = mpsc::channel::<Bytes>(plan.max_inflight);
    let mut acks = IngestClient::new(channel)
        .ingest(ReceiverStream::new(outbound))
        .await?;
    let mut batches = Some(batches);
    let mut pacer = Pacer::new(plan.rate, plan.batch_size);
    let mut inflight: VecDeque<Sent> = VecDeque::with_capacity(plan.max_inflight);
    let mut stats = StreamStats::default();
    let mut sequence = 0u64;
    let drain = tokio::time::sleep(DRAIN_TIMEOUT);
    tokio::pin!(drain);
    loop {
        let sending = batches.is_some();
        if !sending && inflight.is_empty() {
            return Ok(stats);
        }
        tokio::select! {
            biased;
            message = acks.message(), if !inflight.is_empty() => {
                let ack = message?.ok_or(LoadError::Closed { unacked: inflight.len() })?;
                let sent = inflight.pop_front().ok_or(LoadError::AckOutOfOrder { expected: 0, got: ack.sequence })?;
                stats.acked(ack, sent)?;
            }
            () = stop.cancelled(), if sending => {
                batches = None;
                drain.as_mut().reset(Instant::now() + DRAIN_TIMEOUT);
            }
            () = &mut drain, if !sending => {
                tracing::warn!(unacked = inflight.len(), "no ack within {DRAIN_TIMEOUT:?}; giving up on them");
                stats.unacked = inflight.len() as u64;
                return Ok(stats);
            }
            () = pacer.ready(), if sending && inflight.len() < plan.max_inflight => {
                let Some(batch) = source.next(sequence + 1, plan.batch_size) else {
                    batches = None;
                    drain.as_mut().reset(Instant::now() + DRAIN_TIMEOUT);
                    continue;
                };
                sequence = batch.sequence;
                stats.sent(&batch);
                let Some(sender) = &batches else { continue };
                // The channel holds max_inflight batches and fewer are in flight: this never waits.
                if sender.send(batch.bytes).await.is_err() {
                    return Err(LoadError::Closed { unacked: inflight.len() });
                }
                inflight.push_back(Sent { sequence, at: Instant::now() });
                pacer.sent();
            }
        }
    }
}

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
    let endpoint = Endpoint::from_shared(args.target.clone())
        .map_err(|source| LoadError::Target {
            target: args.target.clone(),
            source,
        })?
        .tcp_nodelay(true);
    // Distinct ids per run, so that a second run is not taken for retries of the first.
    let run_id = u64::try_from(unix_nanos(SystemTime::now()) / 1_000_000).unwrap_or_default();
    let plan = StreamPlan {
        rate: args.rate / args.streams as f64,
        batch_size: args.batch_size,
        max_inflight: args.max_inflight,
    };
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

/// User and system CPU time this process has used so far.
fn process_cpu() -> Duration {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage fills the rusage it points to, or leaves it zeroed
    // on failure (which only a bad `who` argument causes).
    let usage = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr());
        usage.assume_init()
    };
    let time = |t: libc::timeval| {
        Duration::new(t.tv_sec.max(0) as u64, 0) + Duration::from_micros(t.tv_usec.max(0) as u64)
    };
    time(usage.ru_utime) + time(usage.ru_stime)
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use prost::Message;
    use std::collections::{HashMap, HashSet};

    /// 2026-11-01T10:00:00Z.
    const START: Nanos = 1_793_527_200 * NANOS_PER_SECOND;

    fn config(seed: u64) -> TrafficConfig {
        TrafficConfig {
            seed,
            feedback_delay: Duration::from_millis(20),
            ..TrafficConfig::default()
        }
    }

    /// `count` events from a clock moving `step` per event, then the rest of the feedback.
    fn generate(traffic: &mut Traffic, count: usize, step: Nanos) -> Vec<Event> {
        let mut now = START;
        let mut events: Vec<Event> = (0..count)
            .map(|_| {
                now += step;
                traffic.next_event(now)
            })
            .collect();
        let later = now + 3600 * NANOS_PER_SECOND;
        while !traffic.pending.is_empty() {
            events.push(traffic.next_event(later));
        }
        events
    }

    fn time(event: &Event) -> Nanos {
        let time = match &event.kind {
            Some(Kind::Impression(m)) => m.time,
            Some(Kind::Interaction(x)) => x.time,
            None => None,
        };
        time.map(|t| t.seconds * NANOS_PER_SECOND + i64::from(t.nanos))
            .unwrap_or(Nanos::MIN)
    }

    /// Per model: the share of impressions whose rank-1 item gets any interaction.
    fn rank_one_engagement(events: &[Event]) -> HashMap<String, f64> {
        let mut lists: HashMap<&str, (&str, &str)> = HashMap::new();
        let mut engaged: HashSet<&str> = HashSet::new();
        for event in events {
            match &event.kind {
                Some(Kind::Impression(m)) => {
                    lists.insert(&m.request_id, (&m.model, &m.item_ids[0]));
                }
                Some(Kind::Interaction(x))
                    if lists
                        .get(x.request_id.as_str())
                        .is_some_and(|(_, first)| *first == x.item_id) =>
                {
                    engaged.insert(&x.request_id);
                }
                _ => {}
            }
        }
        let mut counts: HashMap<String, (u64, u64)> = HashMap::new();
        for (request, (model, _)) in &lists {
            let count = counts.entry((*model).to_owned()).or_default();
            count.0 += 1;
            count.1 += u64::from(engaged.contains(request));
        }
        counts
            .into_iter()
            .map(|(model, (lists, engaged))| (model, engaged as f64 / lists as f64))
            .collect()
    }

    fn interaction_share(events: &[Event]) -> f64 {
        let interactions = events
            .iter()
            .filter(|e| matches!(e.kind, Some(Kind::Interaction(_))))
            .count();
        interactions as f64 / events.len() as f64
    }

    #[test]
    fn the_same_seed_gives_the_same_events() {
        let first = generate(
            &mut Traffic::new(config(7)).expect("valid config"),
            5_000,
            100_000,
        );
        let second = generate(
            &mut Traffic::new(config(7)).expect("valid config"),
            5_000,
            100_000,
        );
        let other = generate(
            &mut Traffic::new(config(8)).expect("valid config"),
            5_000,
            100_000,
        );
        assert_eq!(first, second);
        assert_ne!(first, other);
    }

    #[test]
    fn events_are_in_time_order_and_interactions_follow_their_impression() {
        let mut traffic = Traffic::new(TrafficConfig {
            request_id_share: 1.0,
            ..config(3)
        })
        .expect("valid config");
        let events = generate(&mut traffic, 50_000, 100_000);
        let mut impressions: HashMap<&str, (&str, &[String], Nanos)> = HashMap::new();
        let mut previous = Nanos::MIN;
        for event in &events {
            let t = time(event);
            assert!(t >= previous, "event time went back from {previous} to {t}");
            previous = t;
            match &event.kind {
                Some(Kind::Impression(m)) => {
                    assert_eq!(m.item_ids.len(), 20);
                    assert_eq!(
                        m.item_ids.iter().collect::<HashSet<_>>().len(),
                        20,
                        "duplicate item"
                    );
                    assert!(impressions
                        .insert(&m.request_id, (&m.user_id, &m.item_ids, t))
                        .is_none());
                }
                Some(Kind::Interaction(x)) => {
                    let (user, items, shown) = impressions[x.request_id.as_str()];
                    assert_eq!(user, x.user_id);
                    assert!(items.contains(&x.item_id));
                    assert!(
                        t >= shown && t - shown <= 2 * NANOS_PER_SECOND,
                        "{} ns after its impression",
                        t - shown
                    );
                    assert!(!x.event_id.is_empty());
                }
                None => panic!("empty event"),
            }
        }
    }

    #[test]
    fn the_interaction_share_is_near_the_configured_one() {
        for share in [0.7, 0.8, 0.9] {
            let mut traffic = Traffic::new(TrafficConfig {
                interaction_share: share,
                ..config(11)
            })
            .expect("valid");
            let measured = interaction_share(&generate(&mut traffic, 100_000, 100_000));
            assert!(
                (measured - share).abs() < 0.01,
                "share {share}: measured {measured}"
            );
        }
    }

    #[test]
    fn most_interactions_carry_their_request_id() {
        let events = generate(
            &mut Traffic::new(config(5)).expect("valid config"),
            50_000,
            100_000,
        );
        let interactions: Vec<&Interaction> = events
            .iter()
            .filter_map(|e| match &e.kind {
                Some(Kind::Interaction(x)) => Some(x),
                _ => None,
            })
            .collect();
        let with_id = interactions
            .iter()
            .filter(|x| !x.request_id.is_empty())
            .count() as f64;
        let measured = with_id / interactions.len() as f64;
        assert!((measured - 0.9).abs() < 0.02, "measured {measured}");
    }

    #[test]
    fn a_better_model_gets_more_engagement_at_rank_one() {
        let mut traffic = Traffic::new(config(13)).expect("valid config");
        let measured = rank_one_engagement(&generate(&mut traffic, 100_000, 100_000));
        let (control, candidate) = (measured["control"], measured["candidate"]);
        assert!(
            control > candidate + 0.05,
            "control {control}, candidate {candidate}"
        );
    }

    #[test]
    fn a_degraded_model_loses_engagement() {
        let mut traffic = Traffic::new(config(17)).expect("valid config");
        let before = rank_one_engagement(&generate(&mut traffic, 50_000, 100_000))["control"];
        traffic
            .quality_handle()
            .set("control", 0.0)
            .expect("known model");
        let after = rank_one_engagement(&generate(&mut traffic, 50_000, 100_000))["control"];
        assert!(after < before - 0.1, "before {before}, after {after}");
    }

    #[test]
    fn events_never_precede_the_clock() {
        let mut traffic = Traffic::new(config(19)).expect("valid config");
        let now = START + 5 * NANOS_PER_SECOND;
        for event in traffic.next_batch(now, 1_000) {
            assert!(time(&event) >= now);
        }
    }

    #[test]
    fn bad_settings_are_explained() {
        assert_eq!(
            "control=0.9".parse::<ModelSpec>().expect("valid"),
            ModelSpec::new("control", 0.9)
        );
        assert!(matches!(
            "control".parse::<ModelSpec>(),
            Err(TrafficError::ModelSpec(_))
        ));
        assert!(matches!(
            "control=1.5".parse::<ModelSpec>(),
            Err(TrafficError::Quality { .. })
        ));
        let traffic = Traffic::new(config(1)).expect("valid config");
        assert!(matches!(
            traffic.set_quality("nope", 0.5),
            Err(TrafficError::UnknownModel { .. })
        ));
        let too_long = TrafficConfig {
            items_per_list: 6_000,
            ..config(1)
        };
        assert!(matches!(
            Traffic::new(too_long),
            Err(TrafficError::ItemsPerList { .. })
        ));
        let all = TrafficConfig {
            interaction_share: 1.0,
            ..config(1)
        };
        assert!(matches!(
            Traffic::new(all),
            Err(TrafficError::InteractionShare(_))
        ));
    }

    #[test]
    fn latency_percentiles_use_the_nearest_rank() {
        let samples = (1..=100).map(Duration::from_millis).collect();
        let summary = LatencySummary::of(samples);
        assert_eq!(summary.p50, Duration::from_millis(50));
        assert_eq!(summary.p90, Duration::from_millis(90));
        assert_eq!(summary.p99, Duration::from_millis(99));
        assert_eq!(summary.max, Duration::from_millis(100));
        assert_eq!(LatencySummary::of(Vec::new()), LatencySummary::default());
    }

    #[derive(Parser)]
    struct Command {
        #[command(flatten)]
        args: LoadgenArgs,
    }

    #[test]
    fn flags_have_the_documented_defaults() {
        let args = Command::try_parse_from(["loadgen"])
            .expect("defaults parse")
            .args;
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
        let args = Command::try_parse_from([
            "loadgen",
            "--models",
            "a=1,b=0",
            "--duration",
            "1m",
            "--rate",
            "0",
        ])
        .expect("flags parse")
        .args;
        assert_eq!(
            args.models,
            vec![ModelSpec::new("a", 1.0), ModelSpec::new("b", 0.0)]
        );
        assert_eq!(args.duration, Duration::from_secs(60));
        assert!(args.validate().is_ok());
        assert!(Command::try_parse_from(["loadgen", "--models", "a=2"]).is_err());
    }

    #[test]
    fn pregenerated_batches_cover_the_duration_at_the_given_rate() {
        let args = Command::try_parse_from([
            "loadgen",
            "--streams",
            "2",
            "--duration",
            "1s",
            "--batch-size",
            "10",
            "--pregenerate",
            "1000",
        ])
        .expect("flags parse")
        .args;
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

    #[test]
    fn the_report_reads_as_one_block() {
        let stats = StreamStats {
            batches: 10,
            impressions: 200,
            interactions: 800,
            accepted: 999,
            rejected: 1,
            rejected_by_reason: BTreeMap::from([("time_in_future".to_owned(), 1)]),
            latencies: vec![Duration::from_millis(2); 10],
            ..StreamStats::default()
        };
        let text = stats
            .report(1, Duration::from_secs(1), Duration::from_millis(250))
            .to_string();
        assert!(text.contains("1000 events/s"), "{text}");
        assert!(
            text.contains("loadgen cpu  0.25 s (25% of one core)"),
            "{text}"
        );
        assert!(
            text.contains("20.0% impressions, 80.0% interactions"),
            "{text}"
        );
        assert!(text.contains("p99 2.00 ms"), "{text}");
        assert!(text.contains("time_in_future: 1"), "{text}");
    }
}
