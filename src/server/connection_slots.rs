//! The connections one listener holds, so that a full listener makes room
//! for a new connection instead of turning it away: it closes, of the
//! connections with no call open (a request being answered or its response
//! sent, an RPC open), the one on which no byte moved for the longest.
//! Silent, idle or chatty connections that fill every slot thus cannot
//! keep probes, scrapes or ingest out, nor push out a client at work. When
//! every connection has a call open, the new one is refused: closing one
//! at work would let connections that hold a call open and keep busy (with
//! pings) cut a client's stream each time they open another. Unless the
//! new connection's client address holds less than its share of the slots
//! and another address holds more: then that one closes its connection
//! quiet the longest, call or not, so that one host holding calls open on
//! every connection keeps no other out. Below the listener's cap no share
//! applies: a sidecar's one client may hold every slot.

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// Up to `max` open connections of one listener.
#[derive(Debug)]
pub struct Slots {
    open: Mutex<Vec<Arc<Slot>>>,
    max: usize,
    /// Most of them one client address keeps once all are at work.
    per_client: usize,
    /// Times are kept as microseconds since this instant.
    epoch: Instant,
}

/// How a new connection got its slot.
#[derive(Debug, PartialEq, Eq)]
pub enum Taken {
    /// A slot was free.
    Free,
    /// Another connection was closed to make room, past this limit.
    Evicted(Limit),
}

/// The limit a new connection met.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    /// Every slot is held.
    All,
    /// Every slot is held at work, and a client address's share counted:
    /// the new connection's address holds its share (it is refused), or
    /// another holds more (one of its connections is closed).
    Client,
}

/// One connection's slot, shared by the connection, its calls and the listener.
#[derive(Debug)]
pub struct Slot {
    /// Calls open on the connection.
    calls: AtomicUsize,
    /// When a byte last moved on the connection, or it was accepted.
    quiet_since: AtomicU64,
    evicted: CancellationToken,
    /// Whether the connection was told to close.
    closed: AtomicBool,
    epoch: Instant,
    /// The connection's client address, when known.
    client: Option<IpAddr>,
}

/// A connection's hold on its slot, given back when dropped.
pub struct Held {
    slot: Arc<Slot>,
    slots: Arc<Slots>,
    evicted: Pin<Box<WaitForCancellationFutureOwned>>,
}

/// A call open on a connection, until dropped.
#[derive(Debug)]
pub struct Call(Arc<Slot>);

impl Slots {
    /// Room for `max` connections, `per_client` of them kept for one client
    /// address once all are at work.
    pub fn new(max: usize, per_client: usize) -> Arc<Self> {
        Arc::new(Self {
            open: Mutex::new(Vec::with_capacity(max.min(4096))),
            max,
            per_client,
            epoch: Instant::now(),
        })
    }

    /// A slot for a connection from `client` accepted now: a free one, or
    /// that of the connection with no call open quiet the longest, which is
    /// told to close; with every connection at work, that of the address
    /// holding the most, when it holds more than its share and `client`
    /// less. The limit met when there is none.
    pub fn take(self: &Arc<Self>, client: Option<IpAddr>) -> Result<(Held, Taken), Limit> {
        let client = client.map(|client| client.to_canonical());
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let taken = if open.len() < self.max {
            Taken::Free
        } else if let Some(index) = quietest(&open, |slot| !slot.at_work()) {
            open.swap_remove(index).close();
            Taken::Evicted(Limit::All)
        } else {
            let index = self.over_share(&open, client)?;
            open.swap_remove(index).close();
            Taken::Evicted(Limit::Client)
        };
        let slot = Arc::new(Slot {
            calls: AtomicUsize::new(0),
            quiet_since: AtomicU64::new(0),
            evicted: CancellationToken::new(),
            closed: AtomicBool::new(false),
            epoch: self.epoch,
            client,
        });
        slot.moved();
        open.push(slot.clone());
        let evicted = Box::pin(slot.evicted.clone().cancelled_owned());
        let held = Held {
            slot,
            slots: self.clone(),
            evicted,
        };
        Ok((held, taken))
    }

    /// Of the connections of the address holding the most of `open`, all
    /// at work, the one quiet the longest, when that address holds more
    /// than its share and `client` less; else the limit `client` met.
    fn over_share(&self, open: &[Arc<Slot>], client: Option<IpAddr>) -> Result<usize, Limit> {
        let Some(client) = client else {
            return Err(Limit::All);
        };
        let mut held: HashMap<IpAddr, usize> = HashMap::new();
        for address in open.iter().filter_map(|slot| slot.client) {
            *held.entry(address).or_default() += 1;
        }
        if held.get(&client).is_some_and(|&own| own >= self.per_client) {
            return Err(Limit::Client);
        }
        let (most, _) = held
            .into_iter()
            .filter(|&(_, count)| count > self.per_client)
            .max_by_key(|&(_, count)| count)
            .ok_or(Limit::All)?;
        quietest(open, |slot| slot.client == Some(most)).ok_or(Limit::All)
    }
}

/// Where in `open` the connection `among` picks quiet the longest is.
fn quietest(open: &[Arc<Slot>], among: impl Fn(&Arc<Slot>) -> bool) -> Option<usize> {
    let (_, index) = open
        .iter()
        .enumerate()
        .filter(|(_, slot)| among(slot))
        .map(|(index, slot)| (slot.quiet_since(), index))
        .min()?;
    Some(index)
}

impl Slot {
    /// Bytes moved on the connection just now.
    pub fn moved(&self) {
        let now = u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.quiet_since.store(now, Ordering::Release);
    }

    /// Whether a call is open on the connection.
    pub fn at_work(&self) -> bool {
        self.calls.load(Ordering::Acquire) > 0
    }

    fn quiet_since(&self) -> u64 {
        self.quiet_since.load(Ordering::Acquire)
    }

    /// The connection's client address, when known.
    pub fn client(&self) -> Option<IpAddr> {
        self.client
    }

    /// Tells the connection to close, as one closed to make room is told;
    /// whether it had not been told before.
    pub fn close(&self) -> bool {
        let first = !self.closed.swap(true, Ordering::AcqRel);
        self.evicted.cancel();
        first
    }

    /// A call begins on the connection; it ends when the [`Call`] is dropped.
    pub fn call(self: &Arc<Self>) -> Call {
        self.calls.fetch_add(1, Ordering::AcqRel);
        Call(self.clone())
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        self.0.calls.fetch_sub(1, Ordering::AcqRel);
        self.0.moved();
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

/// A response body that keeps its call open until it is dropped.
pub struct WithCall<B> {
    body: B,
    _call: Call,
}

impl<B> WithCall<B> {
    /// `body`, keeping `call` open.
    pub fn new(body: B, call: Call) -> Self {
        Self { body, _call: call }
    }
}

impl<B: Body<Data = Bytes> + Unpin> Body for WithCall<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::Waker;

    fn evicted(held: &mut Held) -> bool {
        held.evicted(&mut Context::from_waker(Waker::noop()))
    }

    async fn a_moment() {
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }

    #[tokio::test]
    async fn a_full_listener_closes_the_connection_quiet_the_longest_and_not_one_at_work() {
        let slots = Slots::new(3, 3);
        let (mut first, taken) = slots.take(None).unwrap();
        assert_eq!(taken, Taken::Free);
        let (mut second, _) = slots.take(None).unwrap();
        let (mut third, _) = slots.take(None).unwrap();
        let first_call = first.slot().call();
        a_moment().await;
        third.slot().moved();
        // The second has been quiet the longest; the first is at work.
        let (mut fourth, taken) = slots.take(None).unwrap();
        assert_eq!(taken, Taken::Evicted(Limit::All));
        assert!(!evicted(&mut first) && evicted(&mut second) && !evicted(&mut third));
        drop(second);
        let _calls = (fourth.slot().call(), third.slot().call());
        assert!(slots.take(None).is_err());
        assert!(!evicted(&mut fourth));
        // A call that ends leaves its connection quiet from then on.
        drop(first_call);
        let (_fifth, taken) = slots.take(None).unwrap();
        assert_eq!(taken, Taken::Evicted(Limit::All));
        assert!(evicted(&mut first));
        // A connection that goes away frees its slot.
        drop(third);
        assert_eq!(slots.take(None).unwrap().1, Taken::Free);
    }

    #[test]
    fn an_eviction_wakes_the_connection() {
        struct Flag(std::sync::atomic::AtomicBool);
        impl std::task::Wake for Flag {
            fn wake(self: Arc<Self>) {
                self.0.store(true, Ordering::Release);
            }
        }
        let slots = Slots::new(1, 1);
        let (mut held, _) = slots.take(None).unwrap();
        let flag = Arc::new(Flag(false.into()));
        let waker = Waker::from(flag.clone());
        assert!(!held.evicted(&mut Context::from_waker(&waker)));
        let _room = slots.take(None).unwrap();
        assert!(flag.0.load(Ordering::Acquire));
        assert!(held.evicted(&mut Context::from_waker(&waker)));
    }

    #[test]
    fn a_full_listener_at_work_takes_a_slot_from_an_address_over_its_share_for_one_under_it() {
        let slots = Slots::new(4, 2);
        let one = Some(IpAddr::from([10, 0, 0, 1]));
        let other = Some(IpAddr::from([10, 0, 0, 2]));
        // Below the cap no share applies.
        let mut hog: Vec<_> = (0..4).map(|_| slots.take(one).unwrap().0).collect();
        let _calls: Vec<_> = hog.iter().map(|held| held.slot().call()).collect();
        hog[1].slot().moved();
        let (theirs, taken) = slots.take(other).unwrap();
        assert_eq!(taken, Taken::Evicted(Limit::Client));
        let closed: Vec<bool> = hog.iter_mut().map(evicted).collect();
        assert_eq!(closed, [true, false, false, false], "its quiet one");
        let _their_call = theirs.slot().call();
        // Past its share, the hog is refused; at its share it gives up no more.
        assert_eq!(slots.take(one).err(), Some(Limit::Client));
        drop(hog.remove(0));
        let (second, _) = slots.take(other).unwrap();
        let _second_call = second.slot().call();
        assert_eq!(slots.take(other).err(), Some(Limit::Client));
        assert_eq!(slots.take(None).err(), Some(Limit::All));
    }
}
