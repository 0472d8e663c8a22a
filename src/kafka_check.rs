//! `rankwatch kafka-check`: what fleet mode needs of the broker, checked
//! before a rollout or in a deployment's CI. It prints the topics, their
//! partitions, replication, compaction and retention, and the consumer
//! group, then each problem with the command that fixes it. It changes
//! nothing: a missing state topic is reported as one the first consuming
//! instance creates.

use crate::fleet::topics::{self, TopicFacts, Topics};
use crate::fleet::FleetSettings;
use rdkafka::consumer::{BaseConsumer, Consumer};
use std::fmt::Write as _;
use std::time::Duration;

/// How long the broker may take to answer about the consumer group.
const GROUP_TIMEOUT: Duration = Duration::from_secs(10);

/// The findings of a check: the text to print and whether everything holds.
pub struct Checked {
    /// What was found, one line each.
    pub text: String,
    /// Every requirement holds.
    pub ok: bool,
}

/// Checks the topics and group of `settings` for a consuming instance of
/// `attribution_window` and `allowed_lateness`.
pub async fn check(
    settings: &FleetSettings,
    attribution_window: Duration,
    allowed_lateness: Duration,
) -> anyhow::Result<Checked> {
    let retention = attribution_window + allowed_lateness + settings.commit_interval;
    let admin = topics::admin(settings)?;
    let found = topics::inspect(&admin, settings).await?;
    let problems = topics::problems(&found, retention);
    let mut text = String::new();
    let _ = writeln!(text, "brokers        {}  reachable", settings.brokers);
    let _ = writeln!(
        text,
        "event topic    {}  {}",
        settings.topic,
        facts(found.event.as_ref(), "retention.ms")
    );
    let state = match &found.state {
        Some(_) => facts(found.state.as_ref(), "cleanup.policy"),
        None if found.event.is_some() => {
            "missing: the first consuming instance creates it, compacted, with the event topic's partitions and replication".to_owned()
        }
        None => "missing".to_owned(),
    };
    let _ = writeln!(text, "state topic    {}  {state}", settings.state_topic);
    let _ = writeln!(
        text,
        "needs          retention.ms of the event topic at least {} (attribution window + lateness + commit interval)",
        retention.as_millis()
    );
    let _ = writeln!(
        text,
        "consumer group {}  {}",
        settings.group,
        group(settings)
    );
    if let Some(replication) = topics::state_less_replicated(&found) {
        let _ = writeln!(
            text,
            "note: {}",
            topics::replication_advice(settings, replication)
        );
    }
    write_verdict(&mut text, &found, &problems, settings);
    Ok(Checked {
        text,
        ok: problems.is_empty(),
    })
}

/// A topic's partitions and one of its configuration entries.
fn facts(topic: Option<&TopicFacts>, config: &str) -> String {
    let Some(topic) = topic else {
        return "missing".to_owned();
    };
    let value = topic
        .configs
        .get(config)
        .map_or("not reported (the broker's default)", String::as_str);
    format!(
        "{} partitions, replication {}, {config} {value}",
        topic.partitions, topic.replication
    )
}

/// The consumer group's state and members, as the broker reports them.
/// A group that cannot be described is not a problem of the check: some
/// brokers (tansu) fail to describe a group while it has members, which a
/// consuming instance allows for (it then waits for a previous owner).
fn group(settings: &FleetSettings) -> String {
    let consumer: BaseConsumer = match settings.client().create() {
        Ok(consumer) => consumer,
        Err(error) => return format!("cannot be asked: {error}"),
    };
    let groups = tokio::task::block_in_place(|| {
        consumer.fetch_group_list(Some(&settings.group), GROUP_TIMEOUT)
    });
    match groups {
        Ok(list) => match list.groups().first() {
            Some(group) if !group.members().is_empty() => {
                format!("{}, {} members", group.state(), group.members().len())
            }
            _ => "no members yet".to_owned(),
        },
        Err(error) => format!("cannot be asked now ({error}); not needed for the verdict"),
    }
}

/// Each problem with what to run, or the word that all holds.
fn write_verdict(
    text: &mut String,
    topics: &Topics,
    problems: &[topics::Problem],
    settings: &FleetSettings,
) {
    if problems.is_empty() {
        let _ = writeln!(
            text,
            "ok: the topics give fleet mode's handoff guarantees{}",
            if topics.state.is_none() {
                " once the state topic is created"
            } else {
                ""
            }
        );
        return;
    }
    for problem in problems {
        let _ = writeln!(text, "PROBLEM: {}", problem.explained(settings));
    }
}
