//! The deterministic generator of wire events: ranked lists from models of
//! different quality, and the feedback the click model gives them.

use super::click_model::{engagement_depth, examination_probability, Feedback};
use super::quality::QualityHandle;
use super::team_draft::team_draft;
use super::{LabelSpec, TrafficConfig, TrafficError};
use crate::event::{Nanos, NANOS_PER_SECOND};
use crate::proto::{event::Kind, Event, Impression, Interaction, Interleaving};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Candidates a model scores per shown item: a better model also picks better items.
const CANDIDATES_PER_SLOT: usize = 2;
/// Standard deviation of a quality-0 model's scoring noise (relevance is in [0, 1]).
const NOISE_SCALE: f64 = 1.0;
/// Feedback delays are exponential, cut at this multiple of their mean.
const MAX_DELAY_FACTOR: f64 = 5.0;
/// Scheduled interactions held before the earliest is sent early: bounds memory at any rate.
const MAX_PENDING: usize = 1 << 18;
/// The model name of an interleaved list.
pub const INTERLEAVED_MODEL: &str = "interleaved";
/// Fixed seed of the catalogue, so that every generator agrees on item relevance.
const CATALOGUE_SEED: u64 = 0x7261_6e6b_7761_7463;

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
    labels: Vec<LabelSpec>,
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
    /// Share of lists interleaved from every model's ranking.
    interleave_share: f64,
    /// Each model's ranking of an interleaved list's candidates.
    rankings: Vec<Vec<u32>>,
    /// The team of each shown item of an interleaved list.
    teams: Vec<u32>,
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
            .map(examination_probability)
            .collect();
        let candidates =
            (config.items_per_list * CANDIDATES_PER_SLOT).min(config.catalogue as usize);
        Ok(Self {
            rng: fastrand::Rng::with_seed(config.seed),
            models: QualityHandle::new(&config.models),
            surfaces: config.surfaces,
            labels: config.labels,
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
            interleave_share: config.interleave_share,
            rankings: Vec::new(),
            teams: Vec::new(),
        })
    }

    /// The grades a user gives one list of a model of `quality` under the
    /// click model, rank by rank (the deepest feedback: click 1, cart 2,
    /// purchase 3; 0 for none), without making events: for simulations.
    pub fn list_grades(&mut self, quality: f64) -> Vec<f64> {
        self.list_grades_of(quality, 1.0)
    }

    /// [`Self::list_grades`] for a user whose `activity` scales every
    /// examination probability (1: the click model's user; capped at 1).
    pub fn list_grades_of(&mut self, quality: f64, activity: f64) -> Vec<f64> {
        self.rank(quality);
        self.shown_grades(activity)
    }

    /// The grades a user of `activity` gives a team-draft interleaving of
    /// every model's ranking of the same candidates; the team of each item
    /// goes into `teams`. For simulations.
    pub fn interleaved_grades(&mut self, activity: f64, teams: &mut Vec<u32>) -> Vec<f64> {
        self.interleave();
        teams.clone_from(&self.teams);
        self.shown_grades(activity)
    }

    /// The grades the click model gives the list in `shown`.
    fn shown_grades(&mut self, activity: f64) -> Vec<f64> {
        let shown = std::mem::take(&mut self.shown);
        let grades = shown
            .iter()
            .enumerate()
            .map(|(rank, &item)| {
                let relevance = self.relevance[item as usize];
                let examination = (self.examination[rank] * activity).min(1.0);
                engagement_depth(&mut self.rng, examination, relevance)
                    .map_or(0.0, |depth| depth as f64)
            })
            .collect();
        self.shown = shown;
        grades
    }

    /// A handle on the models' qualities, to change them while the generator
    /// runs elsewhere (e.g. inside [`feed`](super::feed)).
    pub fn quality_handle(&self) -> QualityHandle {
        self.models.clone()
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
        // No draw at all without interleaving: the traffic stays as it was.
        let interleaved = self.interleave_share > 0.0
            && self.models.len() >= 2
            && self.rng.f64() < self.interleave_share;
        let interleaving = if interleaved {
            self.interleave();
            Some(Interleaving {
                rankers: (0..self.models.len())
                    .map(|m| self.models.name(m).to_owned())
                    .collect(),
                teams: self.teams.clone(),
            })
        } else {
            self.rank(self.models.quality(model));
            None
        };
        let list = self.lists;
        self.lists += 1;
        self.schedule_feedback(user, list, time);
        Event {
            kind: Some(Kind::Impression(Impression {
                request_id: self.request_id(list),
                user_id: self.user_id(user),
                item_ids: self.shown.iter().map(|&item| item_id(item)).collect(),
                time: Some(timestamp(time)),
                model: match interleaved {
                    true => INTERLEAVED_MODEL.to_owned(),
                    false => self.models.name(model).to_owned(),
                },
                surface: self.surfaces[surface].clone(),
                labels: self
                    .labels
                    .iter()
                    .map(|label| (label.key.clone(), label.value_of(user).to_owned()))
                    .collect(),
                interleaving,
            })),
        }
    }

    /// Fills `shown` and `teams` with a team-draft interleaving of every
    /// model's ranking of the same candidates.
    fn interleave(&mut self) {
        for slot in 0..self.candidates {
            let pick = self.rng.usize(slot..self.catalogue.len());
            self.catalogue.swap(slot, pick);
        }
        let mut rankings = std::mem::take(&mut self.rankings);
        rankings.resize(self.models.len(), Vec::new());
        for (model, ranking) in rankings.iter_mut().enumerate() {
            let noise = NOISE_SCALE * (1.0 - self.models.quality(model));
            self.scored.clear();
            for slot in 0..self.candidates {
                let item = self.catalogue[slot];
                let score = self.relevance[item as usize] + noise * self.gaussian();
                self.scored.push((score, item));
            }
            self.scored.sort_unstable_by(|a, b| b.0.total_cmp(&a.0));
            ranking.clear();
            ranking.extend(self.scored.iter().map(|&(_, item)| item));
        }
        team_draft(
            &rankings,
            self.items_per_list,
            &mut self.rng,
            &mut self.shown,
            &mut self.teams,
        );
        self.rankings = rankings;
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
            let examination = self.examination[rank];
            let Some(depth) = engagement_depth(&mut self.rng, examination, relevance) else {
                continue;
            };
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

fn timestamp(time: Nanos) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: time.div_euclid(NANOS_PER_SECOND),
        nanos: time.rem_euclid(NANOS_PER_SECOND) as i32,
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::loadgen::TrafficConfig;
    use std::collections::{HashMap, HashSet};
    use std::time::Duration;

    /// 2026-11-01T10:00:00Z.
    const START: Nanos = 1_793_527_200 * NANOS_PER_SECOND;

    /// The default traffic with seed `seed` and feedback 20 ms after its impression.
    pub(in crate::loadgen) fn config(seed: u64) -> TrafficConfig {
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

    /// `count` events of a new generator for `config`, 0.1 ms apart, then the rest of the feedback.
    fn events_of(config: TrafficConfig, count: usize) -> Vec<Event> {
        let mut traffic = Traffic::new(config).expect("valid config");
        generate(&mut traffic, count, 100_000)
    }

    /// The event time of `event`.
    pub(in crate::loadgen) fn time(event: &Event) -> Nanos {
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
    fn impressions_carry_the_labels_a_user_always_has() {
        let labels = vec![
            "country=de,fr,us".parse().unwrap(),
            "app=ios".parse().unwrap(),
        ];
        let events = events_of(
            TrafficConfig {
                labels,
                ..config(5)
            },
            5_000,
        );
        let mut by_user: HashMap<&str, &HashMap<String, String>> = HashMap::new();
        let mut countries = HashSet::new();
        for event in &events {
            let Some(Kind::Impression(m)) = &event.kind else {
                continue;
            };
            assert_eq!(m.labels.len(), 2);
            assert_eq!(m.labels["app"], "ios");
            countries.insert(m.labels["country"].as_str());
            assert_eq!(*by_user.entry(&m.user_id).or_insert(&m.labels), &m.labels);
        }
        assert_eq!(countries.len(), 3);
        assert!(by_user.len() > 100);
    }

    #[test]
    fn the_same_seed_gives_the_same_events() {
        let first = events_of(config(7), 5_000);
        let second = events_of(config(7), 5_000);
        let other = events_of(config(8), 5_000);
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
        let events = events_of(config(5), 50_000);
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
}
