//! What happened to every event the engine saw.

use crate::event::Reason;
use std::collections::BTreeMap;

/// Why an accepted interaction was credited to no impression.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Unattributed {
    /// It waited for a matching impression until the watermark passed it.
    NoImpression,
    /// Its `request_id` named an open impression that does not list its item.
    NotInList,
    /// Its `request_id` named an open impression whose window does not hold its time.
    OutsideWindow,
}

impl Unattributed {
    /// Every reason, in report order.
    pub const ALL: [Unattributed; 3] = [
        Unattributed::NoImpression,
        Unattributed::NotInList,
        Unattributed::OutsideWindow,
    ];

    /// The stable name in reports and series.
    pub fn as_str(self) -> &'static str {
        match self {
            Unattributed::NoImpression => "no_impression",
            Unattributed::NotInList => "not_in_list",
            Unattributed::OutsideWindow => "outside_window",
        }
    }
}

/// Event outcomes since start.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Counters {
    /// Accepted impressions (valid, not late, not duplicates).
    pub impressions: u64,
    /// Accepted interactions (valid, not duplicates).
    pub interactions: u64,
    /// Interactions credited to an impression.
    pub credited: u64,
    /// Interactions credited to none, by reason (indexed like [`Unattributed::ALL`]).
    pub unattributed: [u64; 3],
    /// Impressions whose window had closed when they arrived.
    pub late_impressions: u64,
    /// Retried impressions.
    pub duplicate_impressions: u64,
    /// Retried interactions.
    pub duplicate_interactions: u64,
    /// Impressions shed because `max_open_impressions` were open.
    pub shed_impressions: u64,
    /// Interactions shed because `max_waiting_interactions` were waiting.
    pub shed_interactions: u64,
    /// Impressions shed because their user had `max_open_impressions_per_user` open.
    pub shed_open_per_user: u64,
    /// Interactions shed because their user had `max_waiting_interactions_per_user` waiting.
    pub shed_waiting_per_user: u64,
    /// Interactions shed because their impression held `max_interactions_per_impression`.
    pub shed_interactions_per_impression: u64,
    /// Rejected events by reason.
    pub rejected: BTreeMap<Reason, u64>,
    /// Impressions shed because their items would have taken the open
    /// lists past `max_open_items`. Saved after the rest of the state
    /// file ([`crate::state`]), so that files of the builds before it are
    /// read as they were; fleet snapshots carry no counters.
    #[serde(skip)]
    pub shed_open_items: u64,
    /// Interactions shed because the open lists held `max_open_credits`;
    /// saved as `shed_open_items` is.
    #[serde(skip)]
    pub shed_open_credits: u64,
    /// Valid events a relay produced to the topic (the broker stored them)
    /// rather than applied (fleet mode). Not saved: a relay keeps no state.
    #[serde(skip)]
    pub relayed: u64,
}

impl Counters {
    /// Valid events applied to the join: opened, credited or not, late, duplicates; by a relay, produced to the topic.
    pub fn accepted(&self) -> u64 {
        self.relayed
            + self.impressions
            + self.interactions
            + self.late_impressions
            + self.duplicate_impressions
            + self.duplicate_interactions
    }

    /// Events received in batches, valid or not: accepted + rejected + shed.
    pub fn received(&self) -> u64 {
        self.accepted() + self.rejected.values().sum::<u64>() + self.shed()
    }

    /// Events shed under every limit.
    pub fn shed(&self) -> u64 {
        self.shed_impressions
            + self.shed_open_items
            + self.shed_interactions
            + self.shed_open_per_user
            + self.shed_waiting_per_user
            + self.shed_interactions_per_impression
            + self.shed_open_credits
    }

    /// Counts one unattributed interaction.
    pub(super) fn unattributed(&mut self, reason: Unattributed) {
        self.unattributed[reason as usize] += 1;
    }

    /// Unattributed interactions for `reason`.
    pub fn unattributed_count(&self, reason: Unattributed) -> u64 {
        self.unattributed[reason as usize]
    }

    /// Adds every counter of `other`.
    pub fn add(&mut self, other: &Counters) {
        self.combine(other, |mine, theirs| mine + theirs);
    }

    /// Takes out `before`, counters these grew from: what was counted since.
    pub fn less(&mut self, before: &Counters) {
        self.combine(before, u64::saturating_sub);
    }

    /// Whether these counters could have grown from `before`: none lower.
    pub fn grew_from(&self, before: &Counters) -> bool {
        let mut again = self.clone();
        again.less(before);
        again.add(before);
        again == *self
    }

    /// Sets each counter to `op` of it and the same counter of `other`.
    fn combine(&mut self, other: &Counters, op: fn(u64, u64) -> u64) {
        let pairs = [
            (&mut self.impressions, other.impressions),
            (&mut self.interactions, other.interactions),
            (&mut self.credited, other.credited),
            (&mut self.late_impressions, other.late_impressions),
            (&mut self.duplicate_impressions, other.duplicate_impressions),
            (
                &mut self.duplicate_interactions,
                other.duplicate_interactions,
            ),
            (&mut self.shed_impressions, other.shed_impressions),
            (&mut self.shed_open_items, other.shed_open_items),
            (&mut self.shed_interactions, other.shed_interactions),
            (&mut self.shed_open_per_user, other.shed_open_per_user),
            (&mut self.shed_waiting_per_user, other.shed_waiting_per_user),
            (
                &mut self.shed_interactions_per_impression,
                other.shed_interactions_per_impression,
            ),
            (&mut self.shed_open_credits, other.shed_open_credits),
            (&mut self.relayed, other.relayed),
        ];
        for (mine, theirs) in pairs {
            *mine = op(*mine, theirs);
        }
        for (mine, theirs) in self.unattributed.iter_mut().zip(other.unattributed) {
            *mine = op(*mine, theirs);
        }
        for (reason, count) in &other.rejected {
            let mine = self.rejected.entry(*reason).or_default();
            *mine = op(*mine, *count);
        }
    }

    /// Counts one rejected event.
    pub(super) fn reject(&mut self, reason: Reason) {
        *self.rejected.entry(reason).or_default() += 1;
    }
}
