//! The connections one listener holds, so that a full listener makes room
//! for a new connection instead of turning it away: the connection quiet
//! the longest (no request being answered, no byte moved) is closed.
//! Silent or idle connections that fill every slot thus cannot keep probes,
//! scrapes or ingest out until their deadlines pass; only connections that
//! are all at work at once can, and then the new one is refused.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Context;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// What `quiet_since` holds while a connection is at work.
const BUSY: u64 = u64::MAX;

/// Up to `max` open connections of one listener.
#[derive(Debug)]
pub struct Slots {
    open: Mutex<Vec<Arc<Slot>>>,
    max: usize,
    /// Times are kept as microseconds since this instant.
    epoch: Instant,
}

/// How a new connection got its slot.
#[derive(Debug, PartialEq, Eq)]
pub enum Taken {
    /// A slot was free.
    Free,
    /// The connection quiet the longest was closed to make room.
    Evicted,
}

/// One connection's slot, shared by the connection and the listener.
#[derive(Debug)]
pub struct Slot {
    /// When the connection last did something, or [`BUSY`].
    quiet_since: AtomicU64,
    evicted: CancellationToken,
    epoch: Instant,
}

/// A connection's hold on its slot, given back when dropped.
pub struct Held {
    slot: Arc<Slot>,
    slots: Arc<Slots>,
    evicted: std::pin::Pin<Box<WaitForCancellationFutureOwned>>,
}

impl Slots {
    /// Room for `max` connections.
    pub fn new(max: usize) -> Arc<Self> {
        Arc::new(Self {
            open: Mutex::new(Vec::with_capacity(max.min(4096))),
            max,
            epoch: Instant::now(),
        })
    }

    /// A slot for a connection accepted now: a free one, or that of the
    /// connection quiet the longest, which is told to close; `None` when
    /// every connection is at work.
    pub fn take(self: &Arc<Self>) -> Option<(Held, Taken)> {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let taken = if open.len() < self.max {
            Taken::Free
        } else {
            let (index, _) = open
                .iter()
                .enumerate()
                .map(|(index, slot)| (index, slot.quiet_since.load(Ordering::Acquire)))
                .filter(|&(_, since)| since != BUSY)
                .min_by_key(|&(_, since)| since)?;
            open.swap_remove(index).evicted.cancel();
            Taken::Evicted
        };
        let slot = Arc::new(Slot {
            quiet_since: AtomicU64::new(0),
            evicted: CancellationToken::new(),
            epoch: self.epoch,
        });
        slot.quiet();
        open.push(slot.clone());
        let evicted = Box::pin(slot.evicted.clone().cancelled_owned());
        let held = Held {
            slot,
            slots: self.clone(),
            evicted,
        };
        Some((held, taken))
    }
}

impl Slot {
    /// The connection is at work: it is not to be closed to make room.
    pub fn busy(&self) {
        self.quiet_since.store(BUSY, Ordering::Release);
    }

    /// The connection did something just now and waits for more.
    pub fn quiet(&self) {
        let since = u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(BUSY - 1);
        self.quiet_since.store(since, Ordering::Release);
    }
}

impl Held {
    /// The connection's slot.
    pub fn slot(&self) -> &Arc<Slot> {
        &self.slot
    }

    /// Whether the connection was told to close to make room; registers a
    /// wake-up for that if not.
    pub fn evicted(&mut self, cx: &mut Context<'_>) -> bool {
        self.evicted.as_mut().poll(cx).is_ready()
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut open = self
            .slots
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // An evicted connection's slot is no longer among them.
        if let Some(index) = open.iter().position(|slot| Arc::ptr_eq(slot, &self.slot)) {
            open.swap_remove(index);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::Waker;

    fn evicted(held: &mut Held) -> bool {
        held.evicted(&mut Context::from_waker(Waker::noop()))
    }

    #[tokio::test]
    async fn a_full_listener_closes_the_connection_quiet_the_longest_and_never_a_busy_one() {
        let slots = Slots::new(3);
        let (mut first, taken) = slots.take().unwrap();
        assert_eq!(taken, Taken::Free);
        let (mut second, _) = slots.take().unwrap();
        let (mut third, _) = slots.take().unwrap();
        first.slot().busy();
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        third.slot().quiet();
        // The second has been quiet the longest; the first is at work.
        let (mut fourth, taken) = slots.take().unwrap();
        assert_eq!(taken, Taken::Evicted);
        assert!(!evicted(&mut first) && evicted(&mut second) && !evicted(&mut third));
        drop(second);
        fourth.slot().busy();
        third.slot().busy();
        assert!(slots.take().is_none());
        assert!(!evicted(&mut fourth));
        // A connection that goes away frees its slot.
        drop(third);
        assert_eq!(slots.take().unwrap().1, Taken::Free);
    }

    #[test]
    fn an_eviction_wakes_the_connection() {
        struct Flag(std::sync::atomic::AtomicBool);
        impl std::task::Wake for Flag {
            fn wake(self: Arc<Self>) {
                self.0.store(true, Ordering::Release);
            }
        }
        let slots = Slots::new(1);
        let (mut held, _) = slots.take().unwrap();
        let flag = Arc::new(Flag(false.into()));
        let waker = Waker::from(flag.clone());
        assert!(!held.evicted(&mut Context::from_waker(&waker)));
        let _room = slots.take().unwrap();
        assert!(flag.0.load(Ordering::Acquire));
        assert!(held.evicted(&mut Context::from_waker(&waker)));
    }
}
