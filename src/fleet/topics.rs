//! The topics of fleet mode as the handoff guarantees need them
//! (docs/SPEC.md §10): the event topic exists and keeps its records for at
//! least attribution window + lateness + commit interval; the state topic
//! has at least as many partitions as the event topic and is compacted.
//!
//! Everything is asked through the admin API with auto-creation off, so no
//! request of ours makes a broker create a topic with its defaults. A
//! consuming instance creates a missing state topic as it must be, adds
//! partitions to one that has too few (where the broker allows it), and
//! otherwise refuses to consume until the topics are fixed: `/readyz`
//! answers 503, `rankwatch_kafka_topics_usable` is 0, and the log says what
//! to run. `rankwatch kafka-check` prints the same findings without changing
//! anything.

use super::FleetSettings;
use crate::engine::Readiness;
use rdkafka::admin::{
    AdminClient, AdminOptions, NewPartitions, NewTopic, ResourceSpecifier, TopicReplication,
};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Gauge: 1 when the topics give the handoff guarantees, else 0.
pub const TOPICS_USABLE: &str = "rankwatch_kafka_topics_usable";
/// Gauge: the event topic's partitions, as a consuming instance last looked.
pub const EVENT_TOPIC_PARTITIONS: &str = "rankwatch_kafka_event_topic_partitions";
/// The part of readiness that the topics set.
const TOPICS: &str = "kafka topics";
/// How long a request to the broker may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How often unusable topics are looked at again.
const RECHECK_EVERY: Duration = Duration::from_secs(2);
/// How often a relay looks again at topics found usable: a deleted event
/// topic makes it not ready.
const WATCH_EVERY: Duration = Duration::from_secs(5);

/// What the broker says of one topic.
#[derive(Clone, Debug, PartialEq)]
pub struct TopicFacts {
    /// Its partition count.
    pub partitions: usize,
    /// The fewest replicas any of its partitions has.
    pub replication: usize,
    /// The configuration entries the broker reports (some brokers report
    /// only those set on the topic, not the defaults).
    pub configs: BTreeMap<String, String>,
}

impl TopicFacts {
    /// `cleanup.policy`, or `None` where the broker does not report it.
    fn cleanup_policy(&self) -> Option<&str> {
        self.configs.get("cleanup.policy").map(String::as_str)
    }

    /// `retention.ms` (-1: forever), or `None` where the broker does not report it.
    fn retention_ms(&self) -> Option<i64> {
        self.configs.get("retention.ms")?.trim().parse().ok()
    }
}

/// The event topic and the state topic, each `None` where it does not exist.
#[derive(Clone, Debug, PartialEq)]
pub struct Topics {
    /// The event topic.
    pub event: Option<TopicFacts>,
    /// The state topic.
    pub state: Option<TopicFacts>,
}

/// What keeps the topics from giving the handoff guarantees.
#[derive(Clone, Debug, PartialEq)]
pub enum Problem {
    /// The event topic does not exist.
    EventTopicMissing,
    /// The event topic drops records before a new owner could need them.
    RetentionTooShort {
        /// The topic's `retention.ms`.
        retention_ms: i64,
        /// Attribution window + lateness + commit interval, in milliseconds.
        needed_ms: i64,
    },
    /// The event topic is compacted: only each user's last record is kept.
    EventTopicCompacted {
        /// Its `cleanup.policy`, as the broker reports it.
        policy: String,
    },
    /// The state topic has fewer partitions than the event topic.
    TooFewStatePartitions {
        /// The state topic's partitions.
        has: usize,
        /// The event topic's.
        needs: usize,
    },
    /// The state topic is not compacted.
    StateNotCompacted {
        /// Its `cleanup.policy`, as the broker reports it (`delete` when it reports none).
        policy: String,
    },
}

/// A problem, with what to run about it.
pub struct Explained<'a> {
    problem: &'a Problem,
    settings: &'a FleetSettings,
}

impl Problem {
    /// The problem in words, with the command that fixes it.
    pub fn explained<'a>(&'a self, settings: &'a FleetSettings) -> Explained<'a> {
        Explained {
            problem: self,
            settings,
        }
    }
}

impl fmt::Display for Explained<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let brokers = &self.settings.brokers;
        let (event, state) = (&self.settings.topic, &self.settings.state_topic);
        let alter = |topic: &str, config: String| {
            format!("kafka-configs.sh --bootstrap-server {brokers} --alter --entity-type topics --entity-name {topic} --add-config {config}")
        };
        match self.problem {
            Problem::EventTopicMissing => write!(
                f,
                "the event topic {event} does not exist; create it, keyed by user, e.g. kafka-topics.sh --bootstrap-server {brokers} --create --topic {event} --partitions 12"
            ),
            Problem::RetentionTooShort { retention_ms, needed_ms } => write!(
                f,
                "the event topic {event} keeps records {retention_ms} ms, less than attribution window + lateness + commit interval ({needed_ms} ms), so a new owner could not read back a partition's open lists; run {}",
                alter(event, format!("retention.ms={}", (*needed_ms).max(7 * 24 * 3_600_000)))
            ),
            Problem::EventTopicCompacted { policy } => write!(
                f,
                "the event topic {event} is compacted (cleanup.policy={policy}): the broker keeps only each user's last event, so a new owner could not read back a partition's open lists; run {}",
                alter(event, "cleanup.policy=delete".to_owned())
            ),
            Problem::TooFewStatePartitions { has, needs } => write!(
                f,
                "the state topic {state} has {has} partitions, fewer than the event topic's {needs}: partitions past {has} could not hand over their open lists (a consuming instance adds the missing ones where the broker allows it); run kafka-topics.sh --bootstrap-server {brokers} --alter --topic {state} --partitions {needs}"
            ),
            Problem::StateNotCompacted { policy } => write!(
                f,
                "the state topic {state} is not compacted (cleanup.policy={policy}), so its snapshots could be deleted; run {}",
                alter(state, "cleanup.policy=compact".to_owned())
            ),
        }
    }
}

/// What a consuming instance needs of `topics`; `needed_retention` is
/// attribution window + lateness + commit interval. A state topic that
/// does not exist yet is no problem: it is created as it must be.
pub fn problems(topics: &Topics, needed_retention: Duration) -> Vec<Problem> {
    let Some(event) = &topics.event else {
        return vec![Problem::EventTopicMissing];
    };
    let mut problems = Vec::new();
    let needed_ms = i64::try_from(needed_retention.as_millis()).unwrap_or(i64::MAX);
    if let Some(retention_ms) = event.retention_ms() {
        if retention_ms >= 0 && retention_ms < needed_ms {
            problems.push(Problem::RetentionTooShort {
                retention_ms,
                needed_ms,
            });
        }
    }
    if let Some(policy) = event.cleanup_policy() {
        if policy.split(',').any(|part| part.trim() == "compact") {
            problems.push(Problem::EventTopicCompacted {
                policy: policy.to_owned(),
            });
        }
    }
    if let Some(state) = &topics.state {
        if state.partitions < event.partitions {
            problems.push(Problem::TooFewStatePartitions {
                has: state.partitions,
                needs: event.partitions,
            });
        }
        let policy = state.cleanup_policy().unwrap_or("delete");
        if policy.trim() != "compact" {
            problems.push(Problem::StateNotCompacted {
                policy: policy.to_owned(),
            });
        }
    }
    problems
}

/// The admin client of the topic checks: auto-creation off, as every
/// client of ours.
pub fn admin(settings: &FleetSettings) -> Result<AdminClient<DefaultClientContext>, KafkaError> {
    settings.client().create()
}

/// What the broker says of the event and state topics of `settings`.
pub async fn inspect(
    admin: &AdminClient<DefaultClientContext>,
    settings: &FleetSettings,
) -> Result<Topics, KafkaError> {
    Ok(Topics {
        event: describe(admin, &settings.topic).await?,
        state: describe(admin, &settings.state_topic).await?,
    })
}

/// One topic's partitions and configuration; `None` when it does not exist.
async fn describe(
    admin: &AdminClient<DefaultClientContext>,
    topic: &str,
) -> Result<Option<TopicFacts>, KafkaError> {
    let metadata = {
        let client = admin.inner();
        let topic = topic.to_owned();
        // The metadata request blocks; auto-creation is off in the client's configuration.
        tokio::task::block_in_place(|| client.fetch_metadata(Some(&topic), REQUEST_TIMEOUT))?
    };
    let Some(found) = metadata
        .topics()
        .iter()
        .find(|t| t.name() == topic && t.error().is_none())
        .filter(|t| !t.partitions().is_empty())
    else {
        return Ok(None);
    };
    let partitions = found.partitions().len();
    let replication = found
        .partitions()
        .iter()
        .map(|p| p.replicas().len())
        .min()
        .unwrap_or(0);
    let options = AdminOptions::new().request_timeout(Some(REQUEST_TIMEOUT));
    let described = admin
        .describe_configs([&ResourceSpecifier::Topic(topic)], &options)
        .await?;
    let configs = described
        .into_iter()
        .flatten()
        .flat_map(|resource| resource.entries)
        .filter_map(|entry| Some((entry.name, entry.value?)))
        .collect();
    Ok(Some(TopicFacts {
        partitions,
        replication,
        configs,
    }))
}

/// The state topic's replication and the event topic's, when the state
/// topic has fewer replicas: losing a broker can then lose snapshots whose
/// events the event topic still holds, and their partitions' open lists
/// start empty again. Not a problem that stops consuming: no list is
/// counted twice.
pub fn state_less_replicated(topics: &Topics) -> Option<(usize, usize)> {
    let (event, state) = (topics.event.as_ref()?, topics.state.as_ref()?);
    (state.replication < event.replication).then_some((state.replication, event.replication))
}

/// Advice on a state topic with fewer replicas than the event topic.
pub fn replication_advice(settings: &FleetSettings, (has, event): (usize, usize)) -> String {
    format!(
        "the state topic {} has {has} replicas of each partition at the fewest, fewer than the event topic's {event}: a broker lost can take partitions' snapshots with it, and their open lists start empty again; raise its replication (kafka-reassign-partitions.sh --bootstrap-server {} with a plan of {event} replicas a partition)",
        settings.state_topic, settings.brokers
    )
}

/// Describes the gauge of the event topic's partitions.
pub fn describe_gauges() {
    metrics::describe_gauge!(
        EVENT_TOPIC_PARTITIONS,
        "Partitions the event topic has, as this consuming instance last looked (0 before): more than the instances of a fleet own leaves events unevaluated."
    );
}

/// Makes the state topic what it must be where it can: creates it,
/// compacted, with the event topic's partition count and replication if it
/// is missing (the broker's default replication, 1 unless set, would keep
/// the snapshots of a well-replicated event topic on one broker), and adds
/// partitions to one that has too few. Returns the topics as they are then,
/// and what is still wrong with them.
pub async fn prepare(
    admin: &AdminClient<DefaultClientContext>,
    settings: &FleetSettings,
    needed_retention: Duration,
) -> Result<(Topics, Vec<Problem>), KafkaError> {
    let topics = inspect(admin, settings).await?;
    let Some(event) = &topics.event else {
        return Ok((topics.clone(), problems(&topics, needed_retention)));
    };
    metrics::gauge!(EVENT_TOPIC_PARTITIONS).set(event.partitions as f64);
    let options = AdminOptions::new().request_timeout(Some(REQUEST_TIMEOUT));
    let state_topic = settings.state_topic.as_str();
    match &topics.state {
        None => {
            let replication = i32::try_from(event.replication)
                .ok()
                .filter(|&r| r > 0)
                .unwrap_or(-1);
            let new = NewTopic::new(
                state_topic,
                event.partitions as i32,
                TopicReplication::Fixed(replication),
            )
            .set("cleanup.policy", "compact");
            for result in admin.create_topics([&new], &options).await? {
                match result {
                    Ok(_) => tracing::info!(
                        state_topic,
                        partitions = event.partitions,
                        replication = event.replication,
                        "state topic created, compacted"
                    ),
                    Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                    Err((_, code)) => return Err(KafkaError::AdminOp(code)),
                }
            }
        }
        Some(state) if state.partitions < event.partitions => {
            let more = NewPartitions::new(state_topic, event.partitions);
            match admin.create_partitions([&more], &options).await {
                Ok(results) => match results.into_iter().next() {
                    Some(Err((_, code))) => {
                        tracing::warn!(state_topic, error = %code, "cannot add partitions to the state topic")
                    }
                    _ => tracing::info!(
                        state_topic,
                        partitions = event.partitions,
                        "partitions added to the state topic"
                    ),
                },
                Err(error) => {
                    tracing::warn!(state_topic, %error, "cannot add partitions to the state topic")
                }
            }
        }
        Some(_) => {
            let found = problems(&topics, needed_retention);
            warn_if_less_replicated(settings, &topics, &found);
            return Ok((topics, found));
        }
    }
    let topics = inspect(admin, settings).await?;
    let found = problems(&topics, needed_retention);
    warn_if_less_replicated(settings, &topics, &found);
    Ok((topics, found))
}

/// Logs [`replication_advice`] once the topics are usable (the instance is
/// about to consume), when it applies.
fn warn_if_less_replicated(settings: &FleetSettings, topics: &Topics, found: &[Problem]) {
    if let Some(replication) = state_less_replicated(topics).filter(|_| found.is_empty()) {
        tracing::warn!("{}", replication_advice(settings, replication));
    }
}

/// What an instance needs of the topics.
#[derive(Clone, Copy, Debug)]
pub enum Need {
    /// A relay produces: the event topic must exist.
    Produce,
    /// A consuming instance hands partitions over: every guarantee, with
    /// attribution window + lateness + commit interval of retention.
    Consume {
        /// The event topic's shortest usable retention.
        retention: Duration,
    },
}

/// Looks at the topics every [`WATCH_EVERY`] for as long as they are
/// usable for `need`; returns once a look finds them unusable (the caller
/// waits for them again, not ready meanwhile) or at `shutdown`. A look
/// that cannot be taken (the broker unreachable, which the broker's own
/// probe reports) finds nothing. Each look takes a client of its own, with
/// no metadata kept from the look before.
pub async fn watch_while_usable(
    settings: &FleetSettings,
    need: Need,
    shutdown: &CancellationToken,
) {
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(WATCH_EVERY) => {}
        }
        let Ok(admin) = admin(settings) else { continue };
        if let Ok(found) = check(&admin, settings, need).await {
            if !found.is_empty() {
                return;
            }
        }
    }
}

/// What is still wrong with the topics for `need`, having prepared them
/// for a consuming instance.
async fn check(
    admin: &AdminClient<DefaultClientContext>,
    settings: &FleetSettings,
    need: Need,
) -> Result<Vec<Problem>, KafkaError> {
    match need {
        Need::Consume { retention } => Ok(prepare(admin, settings, retention).await?.1),
        Need::Produce => Ok(match describe(admin, &settings.topic).await? {
            Some(_) => Vec::new(),
            None => vec![Problem::EventTopicMissing],
        }),
    }
}

/// Prepares the topics until they are what `need` asks (`true`) or
/// `shutdown` comes (`false`). Meanwhile `/readyz` and [`TOPICS_USABLE`]
/// say they are not, and each new finding is logged with what to run.
pub async fn wait_until_usable(
    settings: &FleetSettings,
    need: Need,
    readiness: &Readiness,
    shutdown: &CancellationToken,
) -> bool {
    metrics::describe_gauge!(
        TOPICS_USABLE,
        "1 when the event and state topics give the handoff guarantees (the state topic compacted with the event topic's partitions, the event topic's retention long enough), else 0: the instance does not consume."
    );
    metrics::gauge!(TOPICS_USABLE).set(0.0);
    let mut last_finding = String::new();
    loop {
        let finding = match admin(settings) {
            Ok(admin) => match check(&admin, settings, need).await {
                Ok(found) if found.is_empty() => {
                    readiness.ready(TOPICS);
                    metrics::gauge!(TOPICS_USABLE).set(1.0);
                    tracing::info!(
                        topic = %settings.topic,
                        state_topic = %settings.state_topic,
                        "the topics are usable"
                    );
                    return true;
                }
                Ok(found) => found
                    .iter()
                    .map(|problem| problem.explained(settings).to_string())
                    .collect::<Vec<_>>()
                    .join("; "),
                Err(error) => format!("cannot look at the topics: {error}"),
            },
            Err(error) => format!("cannot create an admin client: {error}"),
        };
        if shutdown.is_cancelled() {
            // The runtime may be shutting down: no more logging or timers.
            return false;
        }
        readiness.not_ready(TOPICS, finding.clone());
        if finding != last_finding {
            tracing::error!(
                "NOT READY: {finding}; looking again every {}s",
                RECHECK_EVERY.as_secs()
            );
            last_finding = finding;
        }
        tokio::select! {
            _ = shutdown.cancelled() => return false,
            _ = tokio::time::sleep(RECHECK_EVERY) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic(partitions: usize, configs: &[(&str, &str)]) -> Option<TopicFacts> {
        Some(TopicFacts {
            partitions,
            replication: 3,
            configs: configs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        })
    }

    const NEEDED: Duration = Duration::from_secs(331);

    #[test]
    fn a_missing_state_topic_is_no_problem_but_a_missing_event_topic_is() {
        let fresh = Topics {
            event: topic(12, &[]),
            state: None,
        };
        assert_eq!(problems(&fresh, NEEDED), []);
        let none = Topics {
            event: None,
            state: None,
        };
        assert_eq!(problems(&none, NEEDED), [Problem::EventTopicMissing]);
    }

    #[test]
    fn an_auto_created_state_topic_is_refused_on_both_counts() {
        let auto_created = Topics {
            event: topic(12, &[]),
            state: topic(4, &[("cleanup.policy", "delete")]),
        };
        assert_eq!(
            problems(&auto_created, NEEDED),
            [
                Problem::TooFewStatePartitions { has: 4, needs: 12 },
                Problem::StateNotCompacted {
                    policy: "delete".into()
                }
            ]
        );
        let unreported = Topics {
            event: topic(12, &[]),
            state: topic(12, &[]),
        };
        assert_eq!(
            problems(&unreported, NEEDED),
            [Problem::StateNotCompacted {
                policy: "delete".into()
            }]
        );
        let good = Topics {
            event: topic(12, &[("retention.ms", "-1")]),
            state: topic(16, &[("cleanup.policy", "compact")]),
        };
        assert_eq!(problems(&good, NEEDED), []);
    }

    #[test]
    fn a_retention_shorter_than_the_window_is_refused() {
        let short = Topics {
            event: topic(12, &[("retention.ms", "60000")]),
            state: topic(12, &[("cleanup.policy", "compact")]),
        };
        assert_eq!(
            problems(&short, NEEDED),
            [Problem::RetentionTooShort {
                retention_ms: 60_000,
                needed_ms: 331_000
            }]
        );
        let long_enough = Topics {
            event: topic(12, &[("retention.ms", "331000")]),
            state: topic(12, &[("cleanup.policy", "compact")]),
        };
        assert_eq!(problems(&long_enough, NEEDED), []);
    }

    #[test]
    fn a_compacted_event_topic_is_refused() {
        for policy in ["compact", "compact,delete", "delete, compact"] {
            let compacted = Topics {
                event: topic(12, &[("cleanup.policy", policy)]),
                state: topic(12, &[("cleanup.policy", "compact")]),
            };
            assert_eq!(
                problems(&compacted, NEEDED),
                [Problem::EventTopicCompacted {
                    policy: policy.into()
                }]
            );
        }
        let deleting = Topics {
            event: topic(12, &[("cleanup.policy", "delete")]),
            state: topic(12, &[("cleanup.policy", "compact")]),
        };
        assert_eq!(problems(&deleting, NEEDED), []);
    }

    #[test]
    fn a_state_topic_with_fewer_replicas_than_the_event_topic_is_advised_against() {
        let replicated = |event: usize, state: usize| Topics {
            event: topic(12, &[]).map(|t| TopicFacts {
                replication: event,
                ..t
            }),
            state: topic(12, &[("cleanup.policy", "compact")]).map(|t| TopicFacts {
                replication: state,
                ..t
            }),
        };
        assert_eq!(state_less_replicated(&replicated(3, 1)), Some((1, 3)));
        assert_eq!(state_less_replicated(&replicated(3, 3)), None);
        assert_eq!(state_less_replicated(&replicated(1, 3)), None);
        assert_eq!(
            problems(&replicated(3, 1), NEEDED),
            [],
            "advice, not a problem"
        );
        let missing = Topics {
            event: topic(12, &[]),
            state: None,
        };
        assert_eq!(state_less_replicated(&missing), None);
    }
}
