//! The Prometheus text format, written once for every renderer of
//! `export`: families with their `# HELP` and `# TYPE` lines, label sets
//! escaped once and shared by many samples.

use bytes::Bytes;
use std::fmt::{Display, Write as _};

/// The `window` label of figures since start.
pub const SINCE_START: &str = "since_start";

/// A family's type, as `# TYPE` names it.
#[derive(Clone, Copy)]
pub(super) enum Kind {
    Counter,
    Gauge,
    Summary,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Summary => "summary",
        }
    }
}

/// Labels escaped once and shared by many samples, e.g. `model="m",surface="s"`.
#[derive(Default)]
pub(super) struct LabelSet(String);

impl LabelSet {
    pub(super) fn of(pairs: &[(&str, &str)]) -> Self {
        let mut labels = String::new();
        write_labels(&mut labels, pairs);
        Self(labels)
    }

    /// An interleaving experiment's labels: `surface`, each segment label,
    /// then `ranker_a` and `ranker_b`.
    pub(super) fn of_experiment(name: &crate::join::ExperimentName) -> Self {
        let mut labels = Self::of(&[("surface", &name.surface)]);
        for (label, value) in &name.segments {
            labels.0.push(',');
            write_labels(&mut labels.0, &[(label, value)]);
        }
        labels.0.push(',');
        write_labels(
            &mut labels.0,
            &[("ranker_a", &name.a), ("ranker_b", &name.b)],
        );
        labels
    }

    /// A surface's labels: `surface`, then each segment label.
    pub(super) fn of_surface(surface: &str, segments: &[(String, String)]) -> Self {
        let mut labels = Self::of(&[("surface", surface)]);
        for (label, value) in segments {
            labels.0.push(',');
            write_labels(&mut labels.0, &[(label, value)]);
        }
        labels
    }

    /// A group's labels: `model`, `surface`, then each segment label.
    pub(super) fn of_group(model: &str, surface: &str, segments: &[(String, String)]) -> Self {
        let mut labels = Self::of(&[("model", model), ("surface", surface)]);
        for (label, value) in segments {
            labels.0.push(',');
            write_labels(&mut labels.0, &[(label, value)]);
        }
        labels
    }
}

/// Text written in pieces of about [`PIECE`] bytes. A large exposition is
/// thus never one buffer that doubles as it grows, which held up to twice
/// its length (three times while it moved). Its pieces are kept in order,
/// or each handed on as it is sealed ([`Text::streamed`]): then a reader
/// that takes them slowly holds back the writer, not the whole text.
#[derive(Default)]
pub struct Text {
    /// The pieces written whole, when they are kept.
    pieces: Vec<Bytes>,
    /// The piece being written.
    current: String,
    /// Where each piece goes once written whole, when they are handed on;
    /// false when no one takes them any more.
    sink: Option<Box<dyn FnMut(Bytes) -> bool + Send>>,
    /// Whether the sink said no one takes the pieces: the rest of the text
    /// is not written.
    abandoned: bool,
}

/// The length past which a piece of [`Text`] is sealed, at the end of a
/// line: as long as a piece kept, and as a quarter of it handed on.
const PIECE: usize = 1 << 20;

impl Text {
    /// A text whose pieces each go to `sink` as they are written whole;
    /// [`Text::end`] hands on the last. Once `sink` returns false, no
    /// more of the text is written.
    pub fn streamed(sink: impl FnMut(Bytes) -> bool + Send + 'static) -> Self {
        Self {
            sink: Some(Box::new(sink)),
            ..Self::default()
        }
    }

    /// Keeps `piece`, or hands it on; an empty one is dropped, and so is
    /// every one once the text is abandoned.
    fn seal(&mut self, piece: String) {
        if piece.is_empty() || self.abandoned {
            return;
        }
        match &mut self.sink {
            Some(sink) => self.abandoned = !sink(Bytes::from(piece)),
            None => self.pieces.push(Bytes::from(piece)),
        }
    }

    /// Seals the current piece if it is full.
    fn seal_if_full(&mut self) {
        let piece = match self.sink {
            Some(_) => PIECE / 4,
            None => PIECE,
        };
        if self.current.len() >= piece {
            let full =
                std::mem::replace(&mut self.current, String::with_capacity(piece + piece / 8));
            self.seal(full);
        }
    }

    /// Appends `text`, written elsewhere, as pieces of its own.
    pub fn push_piece(&mut self, text: String) {
        let current = std::mem::take(&mut self.current);
        self.seal(current);
        self.seal(text);
    }

    /// Seals the piece being written: the text is whole.
    pub fn end(&mut self) {
        let current = std::mem::take(&mut self.current);
        self.seal(current);
    }

    /// The text's pieces, in order (none when they were handed on).
    pub fn into_pieces(mut self) -> Vec<Bytes> {
        self.end();
        self.pieces
    }

    /// The whole text, in one string.
    #[cfg(test)]
    pub fn joined(self) -> String {
        String::from_utf8(self.into_pieces().concat()).unwrap()
    }
}

/// Writes the text format: each family's `# HELP` and `# TYPE` once, then its samples.
pub(super) struct SeriesWriter<'a> {
    out: &'a mut Text,
}

impl<'a> SeriesWriter<'a> {
    /// A writer appending to `out`.
    pub(super) fn new(out: &'a mut Text) -> Self {
        Self { out }
    }
}

impl SeriesWriter<'_> {
    /// Opens family `name`, writing its header; its samples follow through the returned handle.
    pub(super) fn family(
        &mut self,
        name: impl Display,
        kind: Kind,
        help: impl Display,
    ) -> Family<'_> {
        let name = name.to_string();
        if !self.out.abandoned {
            let kind = kind.as_str();
            let _ = writeln!(
                self.out.current,
                "# HELP {name} {help}\n# TYPE {name} {kind}"
            );
            self.out.seal_if_full();
        }
        Family {
            out: self.out,
            name,
        }
    }

    /// A family of one unlabelled sample.
    pub(super) fn single(&mut self, name: &str, kind: Kind, help: &str, value: impl Display) {
        self.family(name, kind, help)
            .sample(&LabelSet::default(), &[], value);
    }
}

/// One open family of a [`SeriesWriter`].
pub(super) struct Family<'a> {
    out: &'a mut Text,
    name: String,
}

impl Family<'_> {
    /// Writes a sample labelled by `shared`, then by `labels`.
    pub(super) fn sample(
        &mut self,
        shared: &LabelSet,
        labels: &[(&str, &str)],
        value: impl Display,
    ) {
        self.sample_suffixed("", shared, labels, value);
    }

    /// Writes a sample of the family's name plus `suffix` (`_sum`, `_count`).
    pub(super) fn sample_suffixed(
        &mut self,
        suffix: &str,
        shared: &LabelSet,
        labels: &[(&str, &str)],
        value: impl Display,
    ) {
        if self.out.abandoned {
            return;
        }
        let out = &mut self.out.current;
        out.push_str(&self.name);
        out.push_str(suffix);
        if !shared.0.is_empty() || !labels.is_empty() {
            out.push('{');
            out.push_str(&shared.0);
            if !shared.0.is_empty() && !labels.is_empty() {
                out.push(',');
            }
            write_labels(out, labels);
            out.push('}');
        }
        let _ = writeln!(out, " {value}");
        self.out.seal_if_full();
    }
}

/// Writes `name="value"` pairs, comma-separated, escaping the values.
fn write_labels(out: &mut String, pairs: &[(&str, &str)]) {
    for (index, (name, value)) in pairs.iter().enumerate() {
        if index > 0 {
            out.push(',');
        }
        out.push_str(name);
        out.push_str("=\"");
        push_escaped(out, value);
        out.push('"');
    }
}

/// Appends `value` escaped as the text format requires of a label value.
fn push_escaped(out: &mut String, value: &str) {
    let mut rest = value;
    while let Some(at) = rest.find(['\\', '"', '\n']) {
        out.push_str(&rest[..at]);
        out.push_str(match rest.as_bytes()[at] {
            b'\\' => "\\\\",
            b'"' => "\\\"",
            _ => "\\n",
        });
        rest = &rest[at + 1..];
    }
    out.push_str(rest);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::prometheus::{GROUPS, WINDOW_LISTS};

    #[test]
    fn a_long_text_is_written_in_pieces_that_end_at_a_line() {
        let mut out = Text::default();
        let mut writer = SeriesWriter::new(&mut out);
        let shared = LabelSet::of(&[("model", &"m".repeat(200))]);
        let mut family = writer.family(WINDOW_LISTS, Kind::Gauge, "Lists.");
        let samples = 3 * PIECE / 200;
        for sample in 0..samples {
            family.sample(&shared, &[("scope", "all")], sample);
        }
        let pieces = out.into_pieces();
        assert!(pieces.len() >= 3, "{} pieces", pieces.len());
        for piece in &pieces {
            assert!(piece.ends_with(b"\n"));
            assert!(piece.len() < PIECE + 1024, "{}", piece.len());
        }
        let text = String::from_utf8(pieces.concat()).unwrap();
        assert_eq!(text.lines().count(), samples + 2);
        assert!(text.ends_with(&format!("all\"}} {}\n", samples - 1)));
    }

    #[test]
    fn a_streamed_text_hands_on_smaller_pieces_of_the_same_text() {
        let write = |out: &mut Text| {
            let mut writer = SeriesWriter::new(out);
            let shared = LabelSet::of(&[("model", &"m".repeat(200))]);
            let mut family = writer.family(WINDOW_LISTS, Kind::Gauge, "Lists.");
            for sample in 0..3 * PIECE / 200 {
                family.sample(&shared, &[("scope", "all")], sample);
            }
            out.push_piece("# written elsewhere\n".to_owned());
        };
        let mut kept = Text::default();
        write(&mut kept);
        let handed = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = handed.clone();
        let mut streamed = Text::streamed(move |piece| {
            sink.lock().unwrap().push(piece);
            true
        });
        write(&mut streamed);
        streamed.end();
        assert!(streamed.into_pieces().is_empty());
        let handed = handed.lock().unwrap();
        assert!(handed.len() >= 12, "{} pieces", handed.len());
        for piece in handed.iter() {
            assert!(piece.ends_with(b"\n"));
            assert!(piece.len() < PIECE / 4 + 1024, "{}", piece.len());
        }
        assert_eq!(handed.concat(), kept.into_pieces().concat());
        drop(handed);

        // Abandoned after its third piece: nothing more is written.
        let mut taken = 0;
        let mut abandoned = Text::streamed(move |_| {
            taken += 1;
            taken < 3
        });
        write(&mut abandoned);
        assert!(abandoned.abandoned);
        assert!(abandoned.current.is_empty());
    }

    #[test]
    fn writes_the_header_once_and_escapes_label_values() {
        let mut out = Text::default();
        let mut writer = SeriesWriter::new(&mut out);
        let shared = LabelSet::of(&[("model", "a\\b\"c\nd")]);
        let mut family = writer.family(WINDOW_LISTS, Kind::Gauge, "Lists.");
        family.sample(&shared, &[("scope", "all")], 3);
        family.sample(&LabelSet::default(), &[], 0.5);
        writer.single(GROUPS, Kind::Gauge, "Groups.", 2);
        assert_eq!(
            out.joined(),
            "# HELP rankwatch_window_lists Lists.\n# TYPE rankwatch_window_lists gauge\n\
             rankwatch_window_lists{model=\"a\\\\b\\\"c\\nd\",scope=\"all\"} 3\n\
             rankwatch_window_lists 0.5\n\
             # HELP rankwatch_groups Groups.\n# TYPE rankwatch_groups gauge\nrankwatch_groups 2\n"
        );
    }
}
