//! The replay log format: one `Event` per line in the proto3 JSON mapping
//! (lowerCamelCase or original field names, RFC 3339 timestamps).
//!
//! Most lines are read by `scan`, a reader of their plain shape that is
//! several times faster than serde_json; serde_json reads the rest and is
//! the reference for every rule of the format.

mod scan;

use super::raw::{LabelText, RawImpression, RawInteraction, RawInterleaving, RawTime};
use super::{parse_rfc3339, Event, Reason, Rejection, Validator};
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

impl<'m> LabelText<'m> for Text<'m> {
    fn text(&self) -> &str {
        &self.0
    }

    fn to_cow(&self) -> Cow<'m, str> {
        self.0.clone()
    }
}

/// An impression's `labels`, a JSON object of strings, as `(key, value)`
/// pairs in line order: a repeated key is kept, and its last pair wins, as
/// in a protobuf map.
#[derive(Default)]
struct Labels<'a>(Vec<(Text<'a>, Text<'a>)>);

impl<'de: 'a, 'a> Deserialize<'de> for Labels<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Pairs<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Pairs<'a> {
            type Value = Labels<'a>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object of string labels")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Self::Value, A::Error> {
                let mut pairs = Vec::new();
                while let Some(pair) = map.next_entry::<Text<'a>, Text<'a>>()? {
                    pairs.push(pair);
                }
                Ok(Labels(pairs))
            }
        }
        deserializer.deserialize_map(Pairs(std::marker::PhantomData))
    }
}

/// Reads a `T` from a JSON object only, and `null` as `None`. serde's
/// derived structs also read an array of their fields in order, which the
/// proto3 JSON mapping does not allow: `{"impression": ["r", "u", …]}` had
/// been taken for an impression.
fn object<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct Object<T>(std::marker::PhantomData<T>);
    impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for Object<T> {
        type Value = Option<T>;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON object")
        }

        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
            T::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(Some)
        }
    }
    deserializer.deserialize_any(Object(std::marker::PhantomData))
}

#[derive(Default, Deserialize)]
struct Line<'a> {
    #[serde(borrow, default, deserialize_with = "object")]
    impression: Option<JsonImpression<'a>>,
    #[serde(borrow, default, deserialize_with = "object")]
    interaction: Option<JsonInteraction<'a>>,
}

#[derive(Default, Deserialize)]
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
    #[serde(borrow, default)]
    labels: Option<Labels<'a>>,
    #[serde(borrow, default, deserialize_with = "object")]
    interleaving: Option<JsonInterleaving<'a>>,
}

/// `"interleaving": {"rankers": ["a", "b"], "teams": [0, 1]}`; a team index
/// may be a number or a string of one, as proto3 JSON allows for `uint32`,
/// and `null` leaves a list empty, as it leaves any field not set.
#[derive(Default, Deserialize)]
struct JsonInterleaving<'a> {
    #[serde(borrow, default)]
    rankers: Option<Vec<Text<'a>>>,
    #[serde(borrow, default)]
    teams: Option<Vec<Number<'a>>>,
}

impl<'a> JsonInterleaving<'a> {
    /// As read, with a team index that is not a whole `uint32` as `u64::MAX`.
    fn raw(&self) -> RawInterleaving<'a> {
        let index = |team: &Number<'_>| {
            let value = team.value().unwrap_or(f64::NAN);
            if value.fract() == 0.0 && (0.0..=f64::from(u32::MAX)).contains(&value) {
                value as u64
            } else {
                u64::MAX
            }
        };
        RawInterleaving {
            rankers: self.rankers.iter().flatten().map(|r| r.0.clone()).collect(),
            teams: self.teams.iter().flatten().map(index).collect(),
        }
    }
}

#[derive(Default, Deserialize)]
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
    /// The number; `None` for a string that holds none.
    fn value(&self) -> Option<f64> {
        match self {
            Number::Value(value) => Some(*value),
            Number::Text(text) => text.parse().ok(),
        }
    }

    /// The number as a grade, or a rejection quoting a string that holds none.
    fn grade(&self) -> Result<f64, Rejection> {
        match self {
            Number::Value(value) => Ok(*value),
            Number::Text(text) => text.parse().map_err(|_| {
                Rejection::new(
                    Reason::InvalidGrade,
                    format!(
                        "grade {} is not a number; give a JSON number or a string holding one, such as 2 or \"2.5\"",
                        super::quoted(text)
                    ),
                )
            }),
        }
    }
}

fn text<'a, 'b>(field: &'b Option<Text<'a>>) -> &'b str {
    field.as_ref().map_or("", |t| &t.0)
}

/// A model or surface name: borrowed from the line unless it had escapes.
fn group_name<'a>(field: &Option<Text<'a>>) -> Cow<'a, str> {
    field.as_ref().map_or(Cow::Borrowed(""), |t| t.0.clone())
}

/// Why a line's `time` was not taken.
const INVALID_TIME: &str = "time is not an RFC 3339 timestamp between the years 1678 and 2262, \
     such as \"2026-11-01T10:00:04.250Z\" or \"2026-11-01T11:00:04+01:00\"";

/// Why a line's `time` with a leap second was not taken.
const LEAP_SECOND: &str = "time has second 60, a leap second, which a protobuf Timestamp \
     does not hold (it counts time without leap seconds); give the next second, such as \
     \"2027-01-01T00:00:00Z\" for \"2026-12-31T23:59:60Z\"";

fn raw_time(field: &Option<Text<'_>>) -> RawTime {
    match field {
        None => RawTime::Missing,
        Some(text) => match parse_rfc3339(&text.0) {
            Some(time) => RawTime::At(time),
            None if is_leap_second(&text.0) => RawTime::Invalid(LEAP_SECOND),
            None => RawTime::Invalid(INVALID_TIME),
        },
    }
}

/// Whether `text` is a timestamp but for its second being 60.
fn is_leap_second(text: &str) -> bool {
    match (text.get(..17), text.get(17..19), text.get(19..)) {
        (Some(head), Some("60"), Some(tail)) => parse_rfc3339(&format!("{head}59{tail}")).is_some(),
        _ => false,
    }
}

/// Parses and validates one line of a log, given as bytes or as text (bytes
/// that are not UTF-8 are rejected). Group names borrow from `line` where
/// they can; the replay has no wall clock, so times are not checked
/// against one.
pub fn parse_line<'a, L>(line: &'a L, validator: &Validator) -> Result<Event<'a>, Rejection>
where
    L: AsRef<[u8]> + ?Sized,
{
    let line = line.as_ref();
    let mut read = Line::default();
    if scan::line(line, &mut read).is_some() {
        return event(&read, validator);
    }
    let text = super::utf8(line)
        .ok_or_else(|| Rejection::new(Reason::InvalidJson, "line is not valid UTF-8"))?;
    event(&read_with_serde(text)?, validator)
}

fn read_with_serde(line: &str) -> Result<Line<'_>, Rejection> {
    let mut reader = serde_json::Deserializer::from_str(line);
    let read = object(&mut reader).and_then(|read| reader.end().map(|()| read));
    read.and_then(|read| read.ok_or_else(|| serde::de::Error::custom("null is not an Event")))
        .map_err(|e: serde_json::Error| {
            Rejection::new(
                Reason::InvalidJson,
                format!(
                    "not an Event in the proto3 JSON mapping: {}",
                    super::cut_message(&e.to_string())
                ),
            )
        })
}

/// Validates a line that was read.
fn event<'a>(parsed: &Line<'a>, validator: &Validator) -> Result<Event<'a>, Rejection> {
    match (&parsed.impression, &parsed.interaction) {
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
                model: group_name(&m.model),
                surface: group_name(&m.surface),
                labels: m.labels.as_ref().map_or(&[], |labels| &labels.0),
                interleaving: m.interleaving.as_ref().map(JsonInterleaving::raw),
            };
            validator
                .impression(raw, None)
                .map(|m| Event::Impression(Box::new(m)))
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
                    grade: x.grade.as_ref().map(Number::grade).transpose()?,
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
            max_label_bytes: 256,
            max_grade: 64.0,
            max_interleaved_rankers: 8,
            segment_labels: vec!["country".to_owned()],
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
        for text in [r#""0x10""#, r#"" 1""#, r#""""#] {
            let rejection = parse_line(&line(text), &v).unwrap_err();
            assert_eq!(rejection.reason, Reason::InvalidGrade);
            let said = format!("grade {text} is not a number");
            assert!(rejection.message.contains(&said), "{}", rejection.message);
        }
    }

    #[test]
    fn a_leap_second_is_named_as_such() {
        let line = r#"{"interaction":{"userId":"u","itemId":"a","type":"click","time":"2026-12-31T23:59:60Z"}}"#;
        let rejection = parse_line(line, &validator()).unwrap_err();
        assert_eq!(rejection.reason, Reason::InvalidTime);
        assert!(
            rejection.message.contains("leap second"),
            "{}",
            rejection.message
        );
        let not_leap = line.replace("23:59:60", "23:59:61");
        let rejection = parse_line(&not_leap, &validator()).unwrap_err();
        assert!(
            !rejection.message.contains("leap second"),
            "{}",
            rejection.message
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
        let rejection = parse_line(bad_time, &v).unwrap_err();
        assert_eq!(rejection.reason, Reason::InvalidTime);
        assert!(
            rejection.message.contains("RFC 3339") && rejection.message.contains("2026-11-01T"),
            "{}",
            rejection.message
        );
    }

    #[test]
    fn an_event_is_an_object_not_an_array_of_its_fields() {
        // serde reads a struct from an array of its fields in order; the
        // proto3 JSON mapping has objects only.
        let v = validator();
        for line in [
            r#"[{"requestId":"r","userId":"u","itemIds":["a"],"time":"2026-11-01T10:00:00Z"}]"#,
            r#"{"impression":["r","u",["a","b"],"2026-11-01T10:00:00Z","m","s"]}"#,
            r#"{"interaction":["e","u","a","r","click","2026-11-01T10:00:00Z"]}"#,
            r#"{"impression":{"requestId":"r","userId":"u","itemIds":["a","b"],"time":"2026-11-01T10:00:00Z","interleaving":[["x","y"],[0,1]]}}"#,
        ] {
            let rejection = parse_line(line, &v).unwrap_err();
            assert_eq!(rejection.reason, Reason::InvalidJson, "{line}");
            assert!(
                rejection.message.contains("expected a JSON object"),
                "{line}: {}",
                rejection.message
            );
        }
        // null stays "not set", as the mapping reads it.
        let unset = r#"{"impression":null,"interaction":{"userId":"u","itemId":"a","type":"click","time":"2026-11-01T10:00:00Z"}}"#;
        assert!(matches!(parse_line(unset, &v), Ok(Event::Interaction(_))));
    }

    #[test]
    fn null_rankers_and_teams_are_not_set_as_any_other_null_field() {
        let v = validator();
        let with = |interleaving: &str| {
            format!(
                r#"{{"impression":{{"requestId":"r","userId":"u","itemIds":["a","b"],"time":"2026-11-01T10:00:00Z","interleaving":{interleaving}}}}}"#
            )
        };
        let empty = with("{}");
        let unset = parse_line(&empty, &v);
        assert_eq!(
            unset.as_ref().unwrap_err().reason,
            Reason::InvalidInterleaving
        );
        for nulls in [
            r#"{"rankers":null,"teams":null}"#,
            r#"{"rankers":null}"#,
            r#"{"teams":null}"#,
        ] {
            let line = with(nulls);
            assert_eq!(parse_line(&line, &v), unset, "{nulls}");
        }
        let (set, with_null) = (
            with(r#"{"rankers":["x","y"],"teams":[0,1]}"#),
            with(r#"{"rankers":["x","y"],"teams":[0,1],"x":null}"#),
        );
        assert!(parse_line(&set, &v).is_ok());
        assert_eq!(parse_line(&set, &v), parse_line(&with_null, &v));
    }

    /// Whether the fast reader takes `line`.
    fn reads_fast(line: &str) -> bool {
        scan::line(line.as_bytes(), &mut Line::default()).is_some()
    }

    /// What serde_json alone makes of a line: the reference.
    fn with_serde<'a>(line: &'a str, v: &Validator) -> Result<Event<'a>, Rejection> {
        event(&read_with_serde(line)?, v)
    }

    #[test]
    fn the_fast_reader_takes_every_plain_line_of_the_conformance_log() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/conformance/replay_small.jsonl"
        );
        let log = std::fs::read_to_string(path).expect("the conformance log is in tests/data");
        let v = validator();
        let mut fast = 0;
        for line in log.lines() {
            assert_eq!(parse_line(line, &v), with_serde(line, &v), "{line}");
            fast += usize::from(reads_fast(line));
        }
        assert!(
            fast * 10 > log.lines().count() * 9,
            "only {fast} lines read fast"
        );
    }

    #[test]
    fn the_fast_reader_leaves_every_unusual_line_to_serde_json() {
        let v = validator();
        let plain = r#"{"interaction":{"userId":"u","itemId":"a","type":"click","time":"2026-11-01T10:00:00Z"}}"#;
        assert!(reads_fast(plain));
        let spaced = r#" {"impression" : { "requestId":"r" , "itemIds" : [ "a" , "b" ] } } "#;
        assert!(reads_fast(spaced));
        let unusual = [
            r#"{"interaction":{"userId":"u\u0041","itemId":"a","type":"click","time":"2026-11-01T10:00:00Z"}}"#,
            r#"{"interaction":{"userId":"u","itemId":"a","type":"click","time":"2026-11-01T10:00:00Z","grade":2}}"#,
            r#"{"interaction":{"userId":"u","userId":"v","itemId":"a","type":"click"}}"#,
            r#"{"interaction":{"userId":"u","user_id":"v","itemId":"a","type":"click"}}"#,
            r#"{"interaction":{"userId":"u","itemId":"a","type":"click","extra":1}}"#,
            r#"{"interaction":{"userId":null,"itemId":"a","type":"click"}}"#,
            r#"{"interaction":{"userId":7,"itemId":"a","type":"click"}}"#,
            r#"{"impression":{"requestId":"r","itemIds":["a"]},"interaction":{"userId":"u"}}"#,
            r#"{"impression":{"requestId":"r","itemIds":["a",]}}"#,
            r#"{"impression":{"requestId":"r","itemIds":null}}"#,
            r#"{"impression":{"requestId":"r"}} trailing"#,
            r#"{"impression":{"requestId":"r"}"#,
            r#"{"impression":{"requestId":"r",}}"#,
            "{\"impression\":{\"requestId\":\"r\tx\"}}",
            "{\"impression\":{\"requestId\":\"r\",\t\"itemIds\":[\"a\"]}}\r",
            r#"{"impression":null}"#,
            r#"{"other":{}}"#,
            r#"[]"#,
            "",
        ];
        for line in unusual {
            assert!(!reads_fast(line), "{line}");
            assert_eq!(parse_line(line, &v), with_serde(line, &v), "{line}");
        }
    }

    /// The pass that finds quotes also tells an ASCII line from one that
    /// needs the full UTF-8 check: a valid one still reads fast, past 64
    /// bytes too, and an invalid one is rejected for what it is.
    #[test]
    fn the_fast_reader_checks_utf8_only_where_a_byte_is_past_ascii() {
        let v = validator();
        let padding = "p".repeat(60);
        for item in ["caf\u{e9}", "\u{1f600}", &format!("{padding}\u{e9}")] {
            let line = format!(
                r#"{{"interaction":{{"userId":"u","itemId":"{item}","type":"click","time":"2026-11-01T10:00:00Z"}}}}"#
            );
            assert!(reads_fast(&line), "{line}");
            assert_eq!(parse_line(&line, &v), with_serde(&line, &v), "{line}");
        }
        let mut invalid = br#"{"interaction":{"userId":"u","itemId":"a","type":"click","time":"2026-11-01T10:00:00Z"}}"#.to_vec();
        invalid[26] = 0xe9; // the user id, "u"
        let rejection = parse_line(&invalid[..], &v).unwrap_err();
        assert_eq!(
            (rejection.reason, rejection.message.as_str()),
            (Reason::InvalidJson, "line is not valid UTF-8")
        );
    }

    #[test]
    fn the_fast_reader_finds_quotes_anywhere_in_lines_short_and_long() {
        let v = validator();
        // Item ids of every length from 1 to 70 put quotes at every offset
        // of a 64-byte block; the longer lines index their quotes on the heap.
        for count in [1, 5, 20, 100] {
            for shift in 0..70 {
                let items: Vec<String> = (0..count)
                    .map(|i| format!("\"{}\"", "x".repeat(1 + (i * 7 + shift) % 70)))
                    .collect();
                let line = format!(
                    r#"{{"impression":{{"requestId":"r{shift}","userId":"u","itemIds":[{}],"time":"2026-11-01T10:00:00Z"}}}}"#,
                    items.join(",")
                );
                assert!(reads_fast(&line), "{line}");
                assert_eq!(parse_line(&line, &v), with_serde(&line, &v), "{line}");
            }
        }
    }

    /// A field of a generated line: both spellings of its key and a valid value.
    type Field = (&'static str, &'static str, &'static str);

    const INTERACTION_FIELDS: [Field; 8] = [
        ("eventId", "event_id", r#""e1""#),
        ("userId", "user_id", r#""u1""#),
        ("itemId", "item_id", r#""a""#),
        ("requestId", "request_id", r#""r1""#),
        ("type", "type", r#""click""#),
        ("time", "time", r#""2026-11-01T10:00:04.250Z""#),
        ("grade", "grade", "2.5"),
        ("extra", "extra", r#""x""#),
    ];

    const IMPRESSION_FIELDS: [Field; 8] = [
        ("requestId", "request_id", r#""r1""#),
        ("userId", "user_id", r#""u1""#),
        ("itemIds", "item_ids", r#"["a", "b"]"#),
        ("time", "time", r#""2026-11-01T10:00:00Z""#),
        ("model", "model", r#""v7""#),
        ("surface", "surface", r#""home""#),
        ("extra", "extra", r#""x""#),
        ("labels", "labels", r#"{"country": "de", "app": "ios"}"#),
    ];

    use proptest::strategy::Strategy as _;

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config::with_cases(4096))]

        /// Lines of every shape the format allows, valid or not, in any field
        /// order and spelling, with escapes, unusual characters, `null`s,
        /// repeats and spacing: the fast reader either declines or reads
        /// exactly what serde_json reads.
        #[test]
        fn the_fast_reader_agrees_with_serde_json(
            interaction in proptest::bool::ANY,
            order in proptest::strategy::Just((0..8).collect::<Vec<usize>>()).prop_shuffle(),
            forms in proptest::collection::vec(0usize..14, 8),
            texts in proptest::collection::vec("[a-z\\\\\"\u{e9} \t\u{1}]{0,4}", 8),
            snake in proptest::collection::vec(proptest::bool::ANY, 8),
            space in "[ \t]{0,2}",
            repeat in proptest::bool::ANY,
        ) {
            let (fields, kind) = if interaction {
                (INTERACTION_FIELDS, "interaction")
            } else {
                (IMPRESSION_FIELDS, "impression")
            };
            let mut body = Vec::new();
            for &i in &order {
                let (camel, snake_key, valid) = fields[i];
                let key = if snake[i] { snake_key } else { camel };
                let text = serde_json::to_string(&texts[i]).unwrap();
                let value = match forms[i] {
                    0..=7 => valid.to_owned(),
                    8 if key.starts_with("item") && !interaction => format!("[{text}, \"b\"]"),
                    8 | 12 if key == "labels" => format!("{{{text}: {text}, \"country\": {text}}}"),
                    8 => text,
                    9 => "null".to_owned(),
                    10 => "7".to_owned(),
                    _ => continue,
                };
                body.push(format!("{space}\"{key}\"{space}:{space}{value}{space}"));
            }
            if repeat && !body.is_empty() {
                body.push(body[0].clone());
            }
            let line = format!("{{\"{kind}\":{space}{{{}}}}}", body.join(","));
            let v = validator();
            proptest::prop_assert_eq!(parse_line(&line, &v), with_serde(&line, &v), "{}", line);
        }
    }
}
