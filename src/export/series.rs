//! The Prometheus text format, written once for every renderer of
//! `export`: families with their `# HELP` and `# TYPE` lines, label sets
//! escaped once and shared by many samples.

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

/// Writes the text format: each family's `# HELP` and `# TYPE` once, then its samples.
pub(super) struct SeriesWriter<'a> {
    out: &'a mut String,
}

impl<'a> SeriesWriter<'a> {
    /// A writer appending to `out`.
    pub(super) fn new(out: &'a mut String) -> Self {
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
        let kind = kind.as_str();
        let _ = writeln!(self.out, "# HELP {name} {help}\n# TYPE {name} {kind}");
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
    out: &'a mut String,
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
        self.out.push_str(&self.name);
        self.out.push_str(suffix);
        if !shared.0.is_empty() || !labels.is_empty() {
            self.out.push('{');
            self.out.push_str(&shared.0);
            if !shared.0.is_empty() && !labels.is_empty() {
                self.out.push(',');
            }
            write_labels(self.out, labels);
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {value}");
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
    fn writes_the_header_once_and_escapes_label_values() {
        let mut out = String::new();
        let mut writer = SeriesWriter::new(&mut out);
        let shared = LabelSet::of(&[("model", "a\\b\"c\nd")]);
        let mut family = writer.family(WINDOW_LISTS, Kind::Gauge, "Lists.");
        family.sample(&shared, &[("scope", "all")], 3);
        family.sample(&LabelSet::default(), &[], 0.5);
        writer.single(GROUPS, Kind::Gauge, "Groups.", 2);
        assert_eq!(
            out,
            "# HELP rankwatch_window_lists Lists.\n# TYPE rankwatch_window_lists gauge\n\
             rankwatch_window_lists{model=\"a\\\\b\\\"c\\nd\",scope=\"all\"} 3\n\
             rankwatch_window_lists 0.5\n\
             # HELP rankwatch_groups Groups.\n# TYPE rankwatch_groups gauge\nrankwatch_groups 2\n"
        );
    }
}
