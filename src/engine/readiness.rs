//! Whether the engine can take work: set by whoever runs it (fleet mode
//! while the broker or its topics are not usable), read by `/readyz`.

use std::sync::{Arc, Mutex};

/// Why the engine is not ready, if it is not; cheap to clone and share.
#[derive(Clone, Debug, Default)]
pub struct Readiness(Arc<Mutex<Vec<(&'static str, String)>>>);

impl Readiness {
    /// Marks `part` (say `kafka broker`) as not ready, for `reason`.
    pub fn not_ready(&self, part: &'static str, reason: impl Into<String>) {
        let mut problems = self.lock();
        let reason = reason.into();
        match problems.iter_mut().find(|(name, _)| *name == part) {
            Some(problem) => problem.1 = reason,
            None => problems.push((part, reason)),
        }
    }

    /// Marks `part` as ready again.
    pub fn ready(&self, part: &'static str) {
        self.lock().retain(|(name, _)| *name != part);
    }

    /// `None` when every part is ready, else what is not, one line each.
    pub fn problems(&self) -> Option<String> {
        let problems = self.lock();
        if problems.is_empty() {
            return None;
        }
        Some(
            problems
                .iter()
                .map(|(part, reason)| format!("{part}: {reason}\n"))
                .collect(),
        )
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(&'static str, String)>> {
        // A panic elsewhere while holding the lock leaves a list that is still whole.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_once_every_part_is() {
        let readiness = Readiness::default();
        assert_eq!(readiness.problems(), None);
        readiness.not_ready("kafka broker", "unreachable");
        readiness.not_ready("kafka topics", "state topic has 4 partitions");
        readiness.not_ready("kafka broker", "still unreachable");
        assert_eq!(
            readiness.problems().as_deref(),
            Some("kafka broker: still unreachable\nkafka topics: state topic has 4 partitions\n")
        );
        readiness.ready("kafka broker");
        readiness.ready("kafka topics");
        assert_eq!(readiness.problems(), None);
    }
}
