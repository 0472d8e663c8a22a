//! What `rankwatch query` keeps of a report: the groups and comparisons of
//! some models, surfaces and segment values, and some metrics at some
//! cutoffs, in the order the report has them. An interleaving experiment
//! is kept when either of its rankers is a kept model; a split check by its
//! surface and segment values.

use crate::event::group_name;
use crate::export::{printable, Report, TABLE_METRICS};
use crate::metrics::{Metric, R_PRECISION};

/// The parts of a report to keep; an empty list keeps everything.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct ReportFilter {
    /// Keep only these models (repeatable, or comma-separated).
    #[arg(long = "model", value_delimiter = ',', value_parser = filed_under)]
    pub models: Vec<String>,
    /// Keep only these surfaces (repeatable, or comma-separated).
    #[arg(long = "surface", value_delimiter = ',', value_parser = filed_under)]
    pub surfaces: Vec<String>,
    /// Keep only these metrics, e.g. ndcg,mrr (repeatable, or comma-separated).
    #[arg(long = "metric", value_delimiter = ',')]
    pub metrics: Vec<String>,
    /// Keep only these cutoffs, e.g. 10 (repeatable, or comma-separated).
    #[arg(long = "k", value_delimiter = ',')]
    pub ks: Vec<usize>,
    /// Keep only groups with this segment value, LABEL=VALUE (repeatable).
    #[arg(long = "segment", value_parser = parse_segment)]
    pub segments: Vec<(String, String)>,
}

fn parse_segment(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(label, value)| {
            let Ok(value) = filed_under(value);
            (label.to_owned(), value)
        })
        .ok_or_else(|| format!("{text:?} is not LABEL=VALUE, e.g. country=de"))
}

/// A model, surface or segment value asked for, as the server files it:
/// an empty name is that of the events that sent none (`default`).
fn filed_under(name: &str) -> Result<String, std::convert::Infallible> {
    Ok(group_name(name.into()).into_owned())
}

/// Whether `value` is among `kept`, or `kept` keeps everything.
fn keeps<T: PartialEq>(kept: &[T], value: &T) -> bool {
    kept.is_empty() || kept.contains(value)
}

impl ReportFilter {
    /// Whether a metric key (`ndcg@10`, or `r_precision`) is kept.
    fn keeps_metric(&self, key: &str) -> bool {
        let (metric, k) = match key.split_once('@') {
            Some((metric, k)) => (metric, k.parse().ok()),
            None => (key, None),
        };
        keeps(&self.metrics, &metric.to_owned())
            && (self.ks.is_empty() || k.is_some_and(|k| self.ks.contains(&k)) || k.is_none())
    }

    fn keeps_segments(&self, segments: &std::collections::BTreeMap<String, String>) -> bool {
        self.segments
            .iter()
            .all(|(label, value)| segments.get(label) == Some(value))
    }

    /// An error naming what the filter could match, when it asks for a
    /// metric that rankwatch does not compute or a cutoff that `report`'s
    /// server does not evaluate: those can never match.
    pub fn check(&self, report: &Report) -> Result<(), String> {
        let names: Vec<&str> = Metric::ALL
            .iter()
            .map(|metric| metric.name())
            .chain([R_PRECISION])
            .collect();
        if let Some(unknown) = self.metrics.iter().find(|m| !names.contains(&m.as_str())) {
            return Err(format!(
                "--metric {unknown:?} is not a metric rankwatch computes; the metrics are {}",
                names.join(", ")
            ));
        }
        let configured = &report.config.k;
        if let Some(k) = self.ks.iter().find(|k| !configured.contains(k)) {
            let ks: Vec<String> = configured.iter().map(usize::to_string).collect();
            return Err(format!(
                "--k {k} is not a cutoff the server evaluates; its cutoffs are {} (its `k` setting)",
                ks.join(", ")
            ));
        }
        Ok(())
    }

    /// What the filter asks for that no group of `report` has (yet): one
    /// sentence per model (not a ranker of an interleaving experiment
    /// either), surface and segment value; else, when it keeps no group of
    /// the many `report` has (`kept` holds neither a group nor an
    /// experiment), that no group has all of them at once.
    /// A group appears with its first finalized list, so a name not seen
    /// yet may still come while lists are open: each sentence says so then.
    /// A segment asked of a server whose groups have no segment labels
    /// says that instead.
    pub fn unmatched(&self, report: &Report, kept: &Report) -> Vec<String> {
        let groups = &report.groups;
        let yet = match report.pending {
            Some(pending) if pending.open_impressions > 0 => format!(
                " yet: a group appears when its first list is finalized (open lists: {})",
                pending.open_impressions
            ),
            _ => String::new(),
        };
        let ranks = |m: &String| report.interleaving.iter().any(|e| &e.a == m || &e.b == m);
        let models = self
            .models
            .iter()
            .filter(|m| !groups.iter().any(|g| &g.model == *m) && !ranks(m))
            .map(|m| format!("no group has model {m:?}{yet}"));
        let surfaces = self
            .surfaces
            .iter()
            .filter(|s| !groups.iter().any(|g| &g.surface == *s))
            .map(|s| format!("no group has surface {s:?}{yet}"));
        let unsegmented = !groups.is_empty() && groups.iter().all(|g| g.segments.is_empty());
        let segments = self
            .segments
            .iter()
            .filter(|(label, value)| !groups.iter().any(|g| g.segments.get(label) == Some(value)))
            .map(|(label, value)| match unsegmented {
                true => format!(
                    "no group has segment {}={value:?}: the server's groups have no segment labels (its segment_labels setting names none)",
                    printable(label)
                ),
                false => format!("no group has segment {}={value:?}{yet}", printable(label)),
            });
        let mut said: Vec<String> = models.chain(surfaces).chain(segments).collect();
        let nothing_kept = kept.groups.is_empty() && kept.interleaving.is_empty();
        if said.is_empty() && !groups.is_empty() && nothing_kept {
            said.push("no group has all of the models, surfaces and segment values asked for at once (every --segment must hold; a repeated --model or --surface needs one of them)".to_owned());
        }
        said
    }

    /// The metrics asked for that the table does not show, with where to
    /// find them.
    pub fn beyond_the_table(&self) -> Option<String> {
        let shown: Vec<&str> = TABLE_METRICS.iter().map(|m| m.name()).collect();
        let beyond: Vec<&str> = self
            .metrics
            .iter()
            .map(String::as_str)
            .filter(|m| !shown.contains(m))
            .collect();
        (!beyond.is_empty()).then(|| {
            format!(
                "the table shows {}; --format json gives {}",
                shown.join(", "),
                beyond.join(", ")
            )
        })
    }

    /// `report` with only what is kept.
    pub fn apply(&self, mut report: Report) -> Report {
        report.config.k.retain(|k| keeps(&self.ks, k));
        report.groups.retain(|group| {
            keeps(&self.models, &group.model)
                && keeps(&self.surfaces, &group.surface)
                && self.keeps_segments(&group.segments)
        });
        for group in &mut report.groups {
            group.metrics.retain(|key, _| self.keeps_metric(key));
        }
        if let Some(comparisons) = &mut report.comparisons {
            comparisons.retain(|c| {
                keeps(&self.models, &c.model)
                    && keeps(&self.surfaces, &c.surface)
                    && self.keeps_segments(&c.segments)
                    && self.keeps_metric(&c.metric)
            });
        }
        report.interleaving.retain(|e| {
            (self.models.is_empty() || self.models.contains(&e.a) || self.models.contains(&e.b))
                && keeps(&self.surfaces, &e.surface)
                && self.keeps_segments(&e.segments)
        });
        report.splits.retain(|check| {
            keeps(&self.surfaces, &check.surface) && self.keeps_segments(&check.segments)
        });
        report
    }
}
