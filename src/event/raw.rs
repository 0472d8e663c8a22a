//! Events as they arrived, before validation: what the readers (`wire` for
//! protobuf, `json` for log lines) produce and `validate` consumes. Every
//! string is borrowed from the received bytes or line; nothing here is
//! checked yet, and nothing here checks.

use super::Nanos;
use std::borrow::Cow;

/// An event's time as it arrived.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum RawTime {
    /// Not set.
    #[default]
    Missing,
    /// Set, but not a valid timestamp in the supported range: what its
    /// reader says a valid one is, for the rejection's message.
    Invalid(&'static str),
    /// A valid time.
    At(Nanos),
}

/// A label key or value as a reader found it: text that a segment value
/// can keep, borrowed from the message or line where it can be.
pub trait LabelText<'m> {
    /// The text.
    fn text(&self) -> &str;
    /// The text, borrowed from the message or line unless it had escapes.
    fn to_cow(&self) -> Cow<'m, str>;
}

impl<'m> LabelText<'m> for &'m str {
    fn text(&self) -> &str {
        self
    }

    fn to_cow(&self) -> Cow<'m, str> {
        Cow::Borrowed(self)
    }
}

/// An impression's fields as they arrived, borrowed from a message or a line.
#[derive(Clone, Debug)]
pub struct RawImpression<'a, 'm, S, L> {
    /// `request_id`, empty when not set.
    pub request_id: &'a str,
    /// `user_id`, empty when not set.
    pub user_id: &'a str,
    /// `item_ids`, in rank order.
    pub item_ids: &'a [S],
    /// `time`.
    pub time: RawTime,
    /// `model`, empty when not set.
    pub model: Cow<'m, str>,
    /// `surface`, empty when not set.
    pub surface: Cow<'m, str>,
    /// `labels` as `(key, value)` pairs in the order they arrived; a
    /// repeated key's last pair wins.
    pub labels: &'a [(L, L)],
    /// `interleaving`, when set.
    pub interleaving: Option<RawInterleaving<'m>>,
}

/// An impression's `interleaving` as it arrived (docs/SPEC.md §12). Owned
/// lists, but only interleaved lists have one.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RawInterleaving<'m> {
    /// `rankers`, in the order sent.
    pub rankers: Vec<Cow<'m, str>>,
    /// `teams`: per item, the index of its ranker (values past `u32` as `u64::MAX`).
    pub teams: Vec<u64>,
}

/// An interaction's fields as they arrived.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RawInteraction<'a> {
    /// `event_id`, empty when not set.
    pub event_id: &'a str,
    /// `user_id`, empty when not set.
    pub user_id: &'a str,
    /// `item_id`, empty when not set.
    pub item_id: &'a str,
    /// `request_id`, empty when not set.
    pub request_id: &'a str,
    /// `type`, empty when not set.
    pub kind: &'a str,
    /// `time`.
    pub time: RawTime,
    /// `grade`, when set.
    pub grade: Option<f64>,
}

/// One event of a protobuf batch, borrowed from its bytes.
#[derive(Clone, Debug, PartialEq)]
pub enum EventView<'a> {
    /// Neither field of the `kind` oneof was set.
    Empty,
    /// An impression; its items are a range of its batch's item ids.
    Impression(ImpressionView<'a>),
    /// An interaction.
    Interaction(RawInteraction<'a>),
}

impl<'a> EventView<'a> {
    /// The user the event is of, unchecked; `None` for an empty event.
    pub fn user_id(&self) -> Option<&'a str> {
        match self {
            EventView::Empty => None,
            EventView::Impression(m) => Some(m.user_id),
            EventView::Interaction(x) => Some(x.user_id),
        }
    }
}

/// An `Impression`'s fields as the protobuf reader finds them: its item ids
/// stay in the batch's shared list, of which it keeps only the range.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ImpressionView<'a> {
    /// `request_id`, empty when not set.
    pub request_id: &'a str,
    /// `user_id`, empty when not set.
    pub user_id: &'a str,
    /// Range of this impression's ids in its batch's item ids.
    pub items: std::ops::Range<usize>,
    /// `time`, `None` when not set.
    pub time: Option<RawTime>,
    /// `model`, empty when not set.
    pub model: &'a str,
    /// `surface`, empty when not set.
    pub surface: &'a str,
    /// Range of this impression's labels in its batch's labels.
    pub labels: std::ops::Range<usize>,
    /// The encoded `Interleaving` message, when set; read at validation
    /// (see [`super::wire::parse_interleaving`]), as only interleaved lists have one.
    pub interleaving: Option<&'a [u8]>,
}
