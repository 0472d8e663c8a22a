//! The replay log format: one `Event` per line in the proto3 JSON mapping
//! (lowerCamelCase or original field names, RFC 3339 timestamps).

use super::{
    parse_rfc3339, Event, RawImpression, RawInteraction, RawTime, Reason, Rejection, Validator,
};
use serde::Deserialize;
use std::borrow::Cow;

/// A string borrowed from the line when it has no escapes.
#[derive(Deserialize)]
struct Text<'a>(#[serde(borrow)] Cow<'a, str>);

impl AsRef<str> for Text<'_> {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

#[derive(Deserialize)]
struct Line<'a> {
    #[serde(borrow)]
    impression: Option<JsonImpression<'a>>,
    #[serde(borrow)]
    interaction: Option<JsonInteraction<'a>>,
}

#[derive(Deserialize)]
struct JsonImpression<'a> {
    #[serde(borrow, default, rename = "requestId", alias = "request_id")]
    request_id: Option<Text<'a>>,
    #[serde(borrow, default, rename = "userId", alias = "user_id")]
    user_id: Option<Text<'a>>,
    #[serde(borrow, default, rename = "itemIds", alias = "item_ids")]
    item_ids: Option<Vec<Text<'a>>>,
    #[serde(borrow, default)]
    time: Option<Text<'a>>,
    #[serde(borrow, default)]
    model: Option<Text<'a>>,
    #[serde(borrow, default)]
    surface: Option<Text<'a>>,
}

#[derive(Deserialize)]
struct JsonInteraction<'a> {
    #[serde(borrow, default, rename = "eventId", alias = "event_id")]
    event_id: Option<Text<'a>>,
    #[serde(borrow, default, rename = "userId", alias = "user_id")]
    user_id: Option<Text<'a>>,
    #[serde(borrow, default, rename = "itemId", alias = "item_id")]
    item_id: Option<Text<'a>>,
    #[serde(borrow, default, rename = "requestId", alias = "request_id")]
    request_id: Option<Text<'a>>,
    #[serde(borrow, default, rename = "type")]
    kind: Option<Text<'a>>,
    #[serde(borrow, default)]
    time: Option<Text<'a>>,
    #[serde(borrow, default)]
    grade: Option<Number<'a>>,
}

/// A proto3 JSON double: a number, or a string such as `"1.5"` or `"NaN"`.
#[derive(Deserialize)]
#[serde(untagged)]
enum Number<'a> {
    Value(f64),
    #[serde(borrow)]
    Text(Cow<'a, str>),
}

impl Number<'_> {
    fn value(&self) -> f64 {
        match self {
            Number::Value(value) => *value,
            Number::Text(text) => text.parse().unwrap_or(f64::NAN),
        }
    }
}

fn text<'a, 'b>(field: &'b Option<Text<'a>>) -> &'b str {
    field.as_ref().map_or("", |t| &t.0)
}

fn raw_time(field: &Option<Text<'_>>) -> RawTime {
    match field {
        None => RawTime::Missing,
        Some(text) => parse_rfc3339(&text.0).map_or(RawTime::Invalid, RawTime::At),
    }
}

/// Parses and validates one line of a log. Group names borrow from `line`
/// where they can; the replay has no wall clock, so times are not checked
/// against one.
pub fn parse_line<'a>(line: &'a str, validator: &Validator) -> Result<Event<'a>, Rejection> {
    let parsed: Line<'a> = serde_json::from_str(line).map_err(|e| {
        Rejection::new(
            Reason::InvalidJson,
            format!("not an Event in the proto3 JSON mapping: {e}"),
        )
    })?;
    match (parsed.impression, parsed.interaction) {
        (Some(_), Some(_)) => Err(Rejection::new(
            Reason::InvalidJson,
            "an Event holds either an impression or an interaction, not both",
        )),
        (None, None) => Err(Rejection::new(
            Reason::EmptyEvent,
            "event has neither an impression nor an interaction",
        )),
        (Some(m), None) => {
            let raw = RawImpression {
                request_id: text(&m.request_id),
                user_id: text(&m.user_id),
                item_ids: m.item_ids.as_deref().unwrap_or_default(),
                time: raw_time(&m.time),
                model: m.model.map_or(Cow::Borrowed(""), |t| t.0),
                surface: m.surface.map_or(Cow::Borrowed(""), |t| t.0),
            };
            validator.impression(raw, None).map(Event::Impression)
        }
        (None, Some(x)) => validator
            .interaction(
                RawInteraction {
                    event_id: text(&x.event_id),
                    user_id: text(&x.user_id),
                    item_id: text(&x.item_id),
                    request_id: text(&x.request_id),
                    kind: text(&x.kind),
                    time: raw_time(&x.time),
                    grade: x.grade.as_ref().map(Number::value),
                },
                None,
            )
            .map(Event::Interaction),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::GradeTable;

    fn validator() -> Validator {
        Validator {
            grades: GradeTable::default(),
            max_items: 100,
            max_future_skew: None,
        }
    }

    #[test]
    fn parses_both_field_spellings() {
        let camel = r#"{"impression":{"requestId":"r1","userId":"u1","itemIds":["a","b"],"time":"2026-11-01T10:00:00Z","model":"v7"}}"#;
        let snake = r#"{"impression":{"request_id":"r1","user_id":"u1","item_ids":["a","b"],"time":"2026-11-01T10:00:00Z","model":"v7"}}"#;
        let v = validator();
        let (Event::Impression(a), Event::Impression(b)) = (
            parse_line(camel, &v).unwrap(),
            parse_line(snake, &v).unwrap(),
        ) else {
            panic!("expected impressions");
        };
        assert_eq!(a, b);
        assert_eq!((&*a.model, &*a.surface), ("v7", "default"));
    }

    #[test]
    fn reads_grades_as_numbers_or_strings() {
        let v = validator();
        let line = |grade: &str| {
            format!(
                r#"{{"interaction":{{"userId":"u","itemId":"a","type":"click","time":"2026-11-01T10:00:00Z","grade":{grade}}}}}"#
            )
        };
        let Ok(Event::Interaction(x)) = parse_line(&line("2.5"), &v) else {
            panic!("expected an interaction")
        };
        assert_eq!(x.grade, 2.5);
        let Ok(Event::Interaction(x)) = parse_line(&line("\"4\""), &v) else {
            panic!("expected an interaction")
        };
        assert_eq!(x.grade, 4.0);
        assert_eq!(
            parse_line(&line("\"NaN\""), &v).unwrap_err().reason,
            Reason::InvalidGrade
        );
    }

    #[test]
    fn names_what_is_wrong() {
        let v = validator();
        assert_eq!(
            parse_line("this is not json {", &v).unwrap_err().reason,
            Reason::InvalidJson
        );
        assert_eq!(parse_line("{}", &v).unwrap_err().reason, Reason::EmptyEvent);
        let bad_time =
            r#"{"interaction":{"userId":"u","itemId":"a","type":"click","time":"yesterday"}}"#;
        assert_eq!(
            parse_line(bad_time, &v).unwrap_err().reason,
            Reason::InvalidTime
        );
    }
}
