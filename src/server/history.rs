//! The status page's history kept by the server, so that a page opened
//! later draws the last hour (`status_history`) at once: samples of
//! `/api/status` as it answered them, oldest first, bounded by count and
//! by bytes (`max_status_history_bytes`), the oldest going first.

use std::collections::VecDeque;
use std::sync::Mutex;

/// A bounded ring of serialized samples.
pub struct History {
    ring: Mutex<Ring>,
    max_samples: usize,
    max_bytes: usize,
}

#[derive(Default)]
struct Ring {
    samples: VecDeque<String>,
    bytes: usize,
}

impl History {
    /// An empty history of at most `max_samples` samples and `max_bytes` bytes.
    pub fn new(max_samples: usize, max_bytes: usize) -> Self {
        Self {
            ring: Mutex::new(Ring::default()),
            max_samples,
            max_bytes,
        }
    }

    /// Adds the newest sample, dropping the oldest past either bound;
    /// returns whether it was kept. A sample larger than the byte bound is
    /// not, and leaves the others as they were.
    pub fn push(&self, sample: String) -> bool {
        if sample.len() > self.max_bytes {
            return false;
        }
        let Ok(mut ring) = self.ring.lock() else {
            return false;
        };
        ring.bytes += sample.len();
        ring.samples.push_back(sample);
        while ring.samples.len() > self.max_samples || ring.bytes > self.max_bytes {
            let Some(oldest) = ring.samples.pop_front() else {
                break;
            };
            ring.bytes -= oldest.len();
        }
        true
    }

    /// The samples as one JSON array, oldest first.
    pub fn to_json(&self) -> String {
        let Ok(ring) = self.ring.lock() else {
            return "[]".to_owned();
        };
        let mut json = String::with_capacity(ring.bytes + ring.samples.len() + 2);
        json.push('[');
        for (index, sample) in ring.samples.iter().enumerate() {
            if index > 0 {
                json.push(',');
            }
            json.push_str(sample);
        }
        json.push(']');
        json
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_samples_go_past_either_bound() {
        let history = History::new(3, 10);
        assert_eq!(history.to_json(), "[]");
        for sample in ["1", "22", "333", "4444"] {
            history.push(sample.to_owned());
        }
        assert_eq!(history.to_json(), "[22,333,4444]", "3 samples, 9 bytes");
        history.push("55555".to_owned());
        assert_eq!(history.to_json(), "[4444,55555]", "past 10 bytes");
        assert!(!history.push("x".repeat(11)));
        assert_eq!(
            history.to_json(),
            "[4444,55555]",
            "a sample past the byte bound is not kept, and the others stay"
        );
    }
}
