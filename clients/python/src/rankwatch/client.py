"""`Collector`: the gRPC client that serving code keeps for its lifetime.

Serving code hands events to a bounded buffer and returns at once. One sender
thread cuts batches from it and writes them to a long-lived `Ingest` stream,
keeping every batch until its ack arrives (acks come one per batch, in order).
When the stream breaks (the server restarts, the network drops, a SIGTERM
drain ends it), the sender opens a new stream after a backoff and sends the
unacknowledged batches again, in order, before anything new: a resend is
idempotent because impressions carry `request_id` and interactions `event_id`.

A stream the server ends because of a message it cannot take (oversize or
undecodable) may end before the acks of the batches before it, so the batch
at fault is found by sending the suspects one at a time; it is split in two
and sent again, down to the single event at fault, which is given up.

What goes wrong is logged to the `rankwatch.client` logger at WARNING: the
rejections from acks with their reasons, a server that cannot be reached, a
stream that failed and the reconnection after it, events dropped and events
given up; each subject at most once per `log_interval`, with the number of
those not logged in the next line.

A collector belongs to the process that made it: after `fork()` the sender
thread and the channel stay with the parent, so in the child it refuses
events, saying so, and closes at once. A collector dropped without `close`
sends what it holds and closes in the background, with a warning; a process
that exits without `close` is told at exit how many events it never sent.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import math
import numbers
import os
import threading
import time
import weakref
from typing import Deque, Dict, List, Optional, Sequence, Tuple

import grpc

from rankwatch.batching import EventBuffer
from rankwatch.ingest import IngestStream
from rankwatch.sink import EXIT_TIMEOUT_S, CallbackGuard, EventSink, require_event, watch_exit, weakly
from rankwatch.stats import RejectedEvent, RejectionCallback, SinkStats
from rankwatch.throttle import DEFAULT_INTERVAL_S, Throttle
from rankwatch.v1 import rankwatch_pb2 as pb

logger = logging.getLogger(__name__)

#: How long the sender sleeps at most before it looks at its state again.
IDLE_WAKEUP_S = 0.2

#: The server's reason for refusing a stream outright (retried, unlike an oversize message).
TOO_MANY_STREAMS = "too many concurrent ingest streams"

#: The setting a server names when the messages begun on all its calls fill
#: their shared budget: a moment's refusal, retried (earlier servers said so
#: with RESOURCE_EXHAUSTED, as for a message too large; now with UNAVAILABLE).
PARTIAL_BUDGET = "max_partial_message_bytes"

#: The setting a server names when it closes a stream that sent nothing for a while.
IDLE_TIMEOUT = "ingest_idle_timeout"

#: grpc's own reconnection backoff, short enough to find a restarted server within seconds.
CHANNEL_OPTIONS: Tuple[Tuple[str, int], ...] = (
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2000),
)


@dataclasses.dataclass
class _Unacked:
    """A batch waiting for its ack."""

    batch: pb.EventBatch
    generation: int = 0
    """The stream it was last given to (streams are numbered from 1; 0: none yet)."""
    suspect: bool = False
    """In the window when a stream was refused; suspects are sent one at a time."""
    sent_at: float = 0.0
    """When it was last given to a stream (`time.monotonic()`)."""
    stall_told: bool = False
    """Whether a warning said that its ack is late."""


@dataclasses.dataclass
class _Outage:
    """Streams that failed in a row, since the last one the server took."""

    since: float
    """When the first of them failed (`time.monotonic()`)."""
    failures: int = 0


class Collector(EventSink):
    """Streams events to `rankwatch serve` over gRPC, in the background.

    ```
    with Collector("127.0.0.1:50051") as rankwatch:
        request_id = rankwatch.impression(user_id="u1", items=["a", "b"], model="v7", surface="home")
        rankwatch.interaction(user_id="u1", item_id="b", type="click", request_id=request_id)
    ```
    """

    def __init__(
        self,
        target: str = "127.0.0.1:50051",
        *,
        credentials: Optional[grpc.ChannelCredentials] = None,
        batch_size: int = 500,
        max_batch_bytes: int = 1 << 20,
        linger: float = 0.05,
        queue_size: int = 100_000,
        queue_bytes: int = 64 << 20,
        max_inflight_batches: int = 32,
        on_rejection: Optional[RejectionCallback] = None,
        retry_backoff: float = 0.1,
        max_retry_backoff: float = 5.0,
        channel_options: Sequence[Tuple[str, object]] = (),
        log_interval: float = DEFAULT_INTERVAL_S,
        stall_after: float = 10.0,
    ) -> None:
        """A client of the server at `target` (`host:port`), TLS when `credentials` are given.

        Batches hold at most `batch_size` events and `max_batch_bytes` bytes
        (keep it under the server's `max_message_size`), and leave at the
        latest `linger` seconds after their first event. At most `queue_size`
        events holding `queue_bytes` serialized bytes wait in the queue (past
        that they are dropped, counted and logged) and at most
        `max_inflight_batches` batches wait for their ack.
        `on_rejection` hears every event the server rejected with its reason,
        up to the server's `max_ack_rejections` per batch (100 by default);
        rejections past that come without the event: they are counted in
        `stats().rejected` and logged, and the callback does not hear them
        (keep `batch_size` at or under that setting to hear every one).
        A broken stream is opened again after `retry_backoff` seconds, doubling
        up to `max_retry_backoff` while it keeps failing. Warnings of one
        subject (a rejection reason, the connection) are logged at most once
        per `log_interval` seconds. A warning says when the server has
        acknowledged nothing for `stall_after` seconds while batches wait (a
        stopped server, or a network that drops packets); they stay queued.
        """
        if max_inflight_batches < 1:
            raise ValueError("max_inflight_batches must be at least 1")
        for name, seconds in (
            ("linger", linger),
            ("retry_backoff", retry_backoff),
            ("max_retry_backoff", max_retry_backoff),
            ("log_interval", log_interval),
            ("stall_after", stall_after),
        ):
            # NaN passes every comparison: a NaN linger had kept the sender spinning.
            if isinstance(seconds, bool) or not isinstance(seconds, numbers.Real) or not 0 <= seconds < math.inf:
                raise ValueError(f"{name} is {seconds!r}; give a finite number of seconds, 0 or more")
        options = list(CHANNEL_OPTIONS) + list(channel_options)
        if credentials is None:
            channel = grpc.insecure_channel(target, options=options)
        else:
            channel = grpc.secure_channel(target, credentials, options=options)
        self._on_rejection_callback = on_rejection
        self._streamer = _Streamer(
            EventBuffer(queue_size, batch_size, max_batch_bytes, linger, queue_bytes),
            channel,
            target,
            None if on_rejection is None else weakly(self._rejected),
            max_inflight_batches,
            (retry_backoff, max_retry_backoff),
            Throttle(log_interval),
            stall_after,
        )
        # Dropped without close: the streamer, which its threads hold, sends
        # what it holds and closes on its own. It reaches the callback through
        # this collector, weakly: a callback that refers to the collector (a
        # closure, a method of its owner) would otherwise keep it alive.
        weakref.finalize(self, self._streamer.abandon).atexit = False

    def send(self, event: pb.Event) -> bool:
        """Queues a copy of one event (the caller may change or reuse it);
        never blocks. Returns `False` when the queue is full (or the client
        closed) and the event was dropped. Anything but a `rankwatch.v1.Event`
        raises `TypeError`."""
        require_event(event)
        owned = pb.Event()
        owned.CopyFrom(event)
        return self._streamer.offer(owned)

    def _send_built(self, event: pb.Event) -> bool:
        """Queues an event that no caller holds (built by `impression` or
        `interaction`)."""
        return self._streamer.offer(event)

    def flush(self, timeout: Optional[float] = None) -> bool:
        """Sends what is queued without waiting for `linger`, and waits until
        every event queued before the call is acknowledged (or given up).
        Returns `False` if `timeout` seconds passed first, or at once once the
        client has stopped (a `close` whose time ran out). Called from
        `on_rejection`, which runs on the thread that handles the acks, it
        raises `RuntimeError`: it would wait for itself."""
        return self._streamer.flush(timeout)

    def close(self, timeout: Optional[float] = None) -> bool:
        """Flushes, then closes the stream and the channel. Returns `False` if
        events were still unacknowledged after `timeout` seconds; they are
        given up (see `stats().pending`, and the log). Events sent once
        `close` has begun are dropped. Safe to call more than once, and from
        several threads: a later call returns whether nothing is left pending.
        Called from `on_rejection`, it raises `RuntimeError`, as `flush` does.
        A collector dropped without `close` is closed in the background, with
        a warning."""
        return self._streamer.close(timeout)

    def stats(self) -> SinkStats:
        """A snapshot of the counters."""
        return self._streamer.stats()

    def _rejected(self, rejected: RejectedEvent) -> None:
        """Hands a rejection to `on_rejection`, which the streamer reaches
        through this, weakly."""
        callback = self._on_rejection_callback
        if callback is not None:
            callback(rejected)


class _Streamer(CallbackGuard):
    """What a `Collector` runs on: its queue, the window of batches waiting
    for an ack, the stream and the channel, the sender thread and the
    counters. Its threads hold it, not the `Collector`, so that a
    `Collector` dropped without `close` can be collected and this closed."""

    def __init__(
        self,
        buffer: EventBuffer,
        channel: grpc.Channel,
        target: str,
        on_rejection: Optional[RejectionCallback],
        max_inflight: int,
        backoff: Tuple[float, float],
        throttle: Throttle,
        stall_after: float,
    ) -> None:
        """Starts sending what `buffer` is given over `channel` to `target`,
        with `max_inflight` batches waiting for their ack at most, a broken
        stream opened again after the first of `backoff`, doubling up to the
        second, and a warning once an ack is `stall_after` seconds late."""
        self._buffer = buffer
        self._channel = channel
        self._target = target
        self._on_rejection = on_rejection
        self._max_inflight = max_inflight
        self._first_backoff, self._max_backoff = backoff
        self._throttle = throttle
        self._stall_after = stall_after

        self._state = threading.Condition()
        self._window: Deque[_Unacked] = collections.deque()
        self._next_sequence = 1
        self._stream: Optional[IngestStream] = None
        self._open = False
        self._generation = 0
        self._outage: Optional[_Outage] = None
        self._retry_at = 0.0
        self._backoff = self._first_backoff
        self._stopping = False
        self._settled = 0
        self._sent = 0
        self._accepted = 0
        self._rejected: Dict[str, int] = collections.Counter()
        self._failed = 0
        self._batches = 0
        self._resent_batches = 0
        self._resent_events = 0
        self._stream_failures = 0
        self._idle = False
        self._closed = False
        self._closing = threading.Lock()
        self._forked = False
        self._sender = threading.Thread(target=self._run, name="rankwatch-sender", daemon=True)
        self._sender.start()
        _LIVE.add(self)
        watch_exit(self)

    # ---- the Collector's side -----------------------------------------------

    def offer(self, event: pb.Event) -> bool:
        """Queues an event that no caller holds; logs (throttled) and returns
        `False` when it is dropped."""
        if self._buffer.offer(event):
            return True
        self._warn_dropped()
        return False

    def _warn_dropped(self) -> None:
        """Logs (throttled) why an event was just dropped."""
        if self._forked:
            self._throttle.warn(
                logger, "drops", "rankwatch dropped an event: this Collector was made before fork(), and its "
                "sender stayed with the parent process; create the Collector after the fork, in each worker "
                "process (for gunicorn, in its post_fork hook)")
        elif self._buffer.closed:
            self._throttle.warn(logger, "drops", "rankwatch dropped an event sent after close()")
        else:
            self._throttle.warn(
                logger, "drops", "rankwatch dropped an event: its queue is full (queue_size and queue_bytes) "
                "while the server at %s is slow or unreachable", self._target)

    def flush(self, timeout: Optional[float]) -> bool:
        """`Collector.flush`."""
        self._refuse_in_callback("flush")
        target = self._buffer.flush()
        with self._state:
            self._state.wait_for(lambda: self._settled >= target or self._stopping, timeout)
            return self._settled >= target

    def close(self, timeout: Optional[float]) -> bool:
        """`Collector.close`."""
        self._refuse_in_callback("close")
        if self._forked:
            watch_exit(self, False)
            self._closed = True
            return True  # what the parent queued before the fork is the parent's to send
        if not self._closing.acquire(timeout=-1 if timeout is None else timeout):
            return False  # another thread is closing, and did not finish in time
        try:
            if not self._closed:
                self._close(timeout)
                self._closed = True
            # Only now: a process that exits while a close (in the background,
            # say) is under way still hears what it leaves unsent.
            watch_exit(self, False)
            return self.stats().pending == 0
        finally:
            self._closing.release()

    def _close(self, timeout: Optional[float]) -> None:
        """Closes once: refuses new events, flushes, stops the sender, ends
        the stream and the channel; logs what it gave up."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self._buffer.close()
        done = self.flush(timeout)
        with self._state:
            self._stopping = True
            self._state.notify_all()
        self._sender.join(_left(deadline))
        with self._state:
            stream = self._stream
        if stream is not None:
            if done:
                stream.finish()
                done = stream.wait(_left(deadline))
            if not done:
                stream.cancel()
        self._channel.close()
        pending = self.stats().pending
        if pending:
            logger.warning("rankwatch gave up %d event(s) not acknowledged within close(timeout=%s)", pending, timeout)
        self._throttle.warn_left(logger)

    def abandon(self) -> None:
        """Closes in the background what a `Collector` dropped without
        `close` leaves (this runs wherever the garbage collector found it):
        what it holds is sent first, for up to `EXIT_TIMEOUT_S`."""
        if self._closed or self._forked:
            return
        logger.warning("rankwatch: a Collector was dropped without close(); its %d unsent event(s) are sent in the "
                       "background, then its stream is closed. Keep one Collector per process, and close it at "
                       "shutdown", self.stats().pending)
        closing = threading.Thread(target=self.close, args=(EXIT_TIMEOUT_S,), name="rankwatch-close", daemon=True)
        closing.start()

    def _after_fork(self) -> None:
        """Leaves the parent's sender, channel and queue alone in a child
        process (their locks may be held by threads that do not exist here):
        a closed queue, and counters of the child's own."""
        self._forked = True
        watch_exit(self, False)
        self._state = threading.Condition()
        self._closing = threading.Lock()
        self._callback_thread = None
        self._throttle = Throttle(self._throttle.interval)
        self._buffer = EventBuffer(1, 1, 1, 0.0)
        self._buffer.close()
        self._window = collections.deque()
        self._settled = self._sent = self._accepted = self._failed = 0
        self._batches = self._resent_batches = self._resent_events = self._stream_failures = 0
        self._rejected = collections.Counter()

    def stats(self) -> SinkStats:
        """`Collector.stats`."""
        with self._state:
            return SinkStats(
                queued=self._buffer.offered,
                dropped=self._buffer.dropped,
                sent=self._sent,
                accepted=self._accepted,
                rejected=dict(self._rejected),
                failed=self._failed,
                batches=self._batches,
                resent_batches=self._resent_batches,
                resent_events=self._resent_events,
                stream_failures=self._stream_failures,
            )

    # ---- the sender thread ---------------------------------------------------

    def _run(self) -> None:
        """Cuts batches and sends them, over a new stream whenever the last one broke."""
        while True:
            self._warn_if_stalled()
            with self._state:
                if self._stopping:
                    return
                # A stream the server closed as idle is opened again once there is something to send.
                if not (self._idle and not self._window):
                    self._idle = False
                    stream = self._live_stream()
                    if stream is None or len(self._window) >= self._max_inflight:
                        self._state.wait(self._pause())
                        continue
            events = self._buffer.take(timeout=IDLE_WAKEUP_S)
            if events:
                self._dispatch(events)

    def _warn_if_stalled(self) -> None:
        """Warns, once per batch, when the oldest batch given to the stream
        has waited `stall_after` seconds for its ack."""
        with self._state:
            oldest = self._window[0] if self._window else None
            if oldest is None or not oldest.generation or oldest.stall_told:
                return
            waited = time.monotonic() - oldest.sent_at
            if waited < self._stall_after:
                return
            oldest.stall_told = True
            waiting = sum(len(unacked.batch.events) for unacked in self._window)
            batches = len(self._window)
        self._throttle.warn(
            logger, "stalls",
            "rankwatch: the server at %s has acknowledged nothing for %.1f s; %d event(s) wait in %d batch(es) "
            "(a stopped or overloaded server, or a network that drops packets); they stay queued",
            self._target, waited, waiting, batches,
        )

    def _pause(self) -> float:
        """How long to wait for a stream or for room in the window."""
        backoff_left = self._retry_at - time.monotonic()
        return min(IDLE_WAKEUP_S, backoff_left) if backoff_left > 0 else IDLE_WAKEUP_S

    def _live_stream(self) -> Optional[IngestStream]:
        """The current stream, or a new one once the backoff has passed; holds `_state`.

        A new stream first carries every unacknowledged batch, in order (only
        the oldest while suspects are left).
        """
        if self._stream is not None:
            return self._stream
        if time.monotonic() < self._retry_at:
            return None
        self._stream = IngestStream(self._channel, self._on_open, self._on_ack, self._on_end)
        self._open = False
        self._generation += 1
        return self._stream

    def _dispatch(self, events: List[pb.Event]) -> None:
        """Numbers a batch, keeps it until its ack, and sends it if it is due;
        a batch that cannot be made is given up, logged, and the thread goes on."""
        with self._state:
            try:
                batch = self._numbered(events)
            except Exception:
                logger.exception("rankwatch could not make a batch of %d event(s); they are given up", len(events))
                self._failed += len(events)
                self._settled += len(events)
                self._state.notify_all()
                return
            self._window.append(_Unacked(batch))
            self._send_due()

    def _numbered(self, events: Sequence[pb.Event]) -> pb.EventBatch:
        """A batch of `events` with the next sequence number; holds `_state`."""
        batch = pb.EventBatch(sequence=self._next_sequence, events=events)
        self._next_sequence += 1
        return batch

    def _send_due(self) -> None:
        """Gives the current stream, once the server took it, in order, the
        batches it has not had: all of them, or only the oldest while it is a
        suspect; holds `_state`."""
        if self._stream is None or not self._open:
            return
        for unacked in list(self._window)[:1] if self._suspects() else self._window:
            if unacked.generation == self._generation:
                continue
            if unacked.generation:
                self._resent_batches += 1
                self._resent_events += len(unacked.batch.events)
            else:
                self._sent += len(unacked.batch.events)
            unacked.generation = self._generation
            unacked.sent_at = time.monotonic()
            self._stream.send(unacked.batch)

    def _suspects(self) -> bool:
        """Whether suspects are left (they lead the window); holds `_state`."""
        return bool(self._window) and self._window[0].suspect

    # ---- the receiver thread -------------------------------------------------

    def _on_open(self, stream: IngestStream) -> None:
        """The server took the stream: sends it the batches waiting for an ack."""
        with self._state:
            if self._stream is not stream:
                return
            self._open = True
            self._send_due()
            self._state.notify_all()

    def _on_ack(self, ack: pb.IngestAck) -> None:
        """Settles the oldest unacknowledged batch and reports its rejections
        (logged first, so that a flush that returns has seen them logged)."""
        self._warn_rejections(ack)
        with self._state:
            if not self._window or self._window[0].batch.sequence != ack.sequence:
                expected = self._window[0].batch.sequence if self._window else None
                raise ValueError(f"ack of batch {ack.sequence}, expected batch {expected}")
            batch = self._window.popleft().batch
            self._accepted += ack.accepted
            self._batches += 1
            self._settled += len(batch.events)
            for rejection in ack.rejections:
                self._rejected[rejection.reason] += 1
            # Past the server's max_ack_rejections, rejections are only counted.
            for counted in ack.more_rejections:
                self._rejected[counted.reason] += counted.count
            self._backoff = self._first_backoff
            # An outage ends at the first ack: a server may take streams and refuse every message on them.
            outage, self._outage = self._outage, None
            self._send_due()
            self._state.notify_all()
        if outage is not None:
            self._throttle.warn(
                logger, "reconnections",
                "rankwatch reconnected to %s after %d failed stream(s) over %.1f s; it acknowledges batches again",
                self._target, outage.failures, time.monotonic() - outage.since,
            )
        if ack.rejections:
            self._report(batch, ack.rejections)

    def _warn_rejections(self, ack: pb.IngestAck) -> None:
        """Logs the rejections of an ack, one line per reason (throttled per reason)."""
        counts: Dict[str, int] = collections.Counter()
        first_message: Dict[str, str] = {}
        for rejection in ack.rejections:
            counts[rejection.reason] += 1
            first_message.setdefault(rejection.reason, rejection.message)
        for counted in ack.more_rejections:
            counts[counted.reason] += counted.count
        for reason, count in sorted(counts.items()):
            message = first_message.get(reason, "(counted by the server, without details)")
            self._throttle.warn(logger, f"rejections ({reason})", "rankwatch rejected %d event(s) with reason %s: %s",
                                count, reason, message, count=count)

    def _report(self, batch: pb.EventBatch, rejections: Sequence[pb.Rejection]) -> None:
        """Hands each rejected event to the callback, if there is one."""
        if self._on_rejection is None:
            return
        for rejection in rejections:
            if rejection.index >= len(batch.events):
                logger.warning("rejection of event %d in a batch of %d", rejection.index, len(batch.events))
                continue
            rejected = RejectedEvent(batch.events[rejection.index], rejection.reason, rejection.message)
            self._call_back(rejected, logger)

    def _on_end(self, stream: IngestStream, code: grpc.StatusCode, details: str) -> None:
        """Forgets an ended stream; unless the client is closing, counts it as
        a failure, deals with a refused message and schedules the next stream
        after the backoff."""
        given_up: Optional[pb.Event] = None
        refused = False
        with self._state:
            current = self._stream is stream
            if current:
                self._stream = None
                self._open = False
            if self._stopping:
                self._state.notify_all()
                return
            if current and _closed_as_idle(stream, code, details) and not self._window:
                # Not a failure: the server frees the stream of a client with nothing to send.
                self._idle = True
                self._state.notify_all()
                logger.debug("rankwatch stream to %s closed by the server as idle (%s)", self._target, details)
                return
            self._stream_failures += 1
            retry_in = self._backoff
            waiting = self._buffer.offered - self._settled
            if current and _refused(code, details):
                # Not an outage: the next stream may start at once.
                refused = True
                given_up = self._narrow_down()
            else:
                self._retry_at = time.monotonic() + self._backoff
                self._backoff = min(self._backoff * 2, self._max_backoff)
                self._outage = self._outage or _Outage(since=time.monotonic())
                self._outage.failures += 1
            self._state.notify_all()
        if refused:
            self._throttle.warn(logger, "refused messages", "rankwatch server at %s refused a message (%s: %s); "
                                "sending the batches in doubt one at a time", self._target, code.name, details)
        elif TOO_MANY_STREAMS in details:
            self._throttle.warn(logger, "stream failures", "rankwatch server at %s refused the stream (%s: %s); "
                                "%d event(s) wait, retrying in %.2g s",
                                self._target, code.name, details, waiting, retry_in)
        elif stream.opened:
            self._throttle.warn(logger, "stream failures", "rankwatch stream to %s ended (%s: %s); "
                                "%d event(s) wait, reconnecting in %.2g s",
                                self._target, code.name, details, waiting, retry_in)
        else:
            self._throttle.warn(logger, "stream failures", "rankwatch server at %s unreachable (%s: %s); "
                                "%d event(s) wait, retrying in %.2g s",
                                self._target, code.name, details, waiting, retry_in)
        if given_up is not None:
            logger.error("rankwatch refused an event on its own; given up (%s: %s)", code.name, details)
            self._report_refused(given_up, code, details)

    def _narrow_down(self) -> Optional[pb.Event]:
        """After a refused message: when the oldest batch was the only one in
        flight, it is at fault: it is split in two, or given up (and returned)
        if it holds one event. Every batch in the window becomes a suspect;
        holds `_state`."""
        at_fault = self._suspects() and self._window[0].generation == self._generation
        given_up = None
        if at_fault:
            refused = self._window.popleft()
            events = refused.batch.events
            if len(events) == 1:
                self._failed += 1
                self._settled += 1
                given_up = events[0]
            else:
                half = len(events) // 2
                halves = [
                    _Unacked(self._numbered(part), refused.generation, sent_at=refused.sent_at)
                    for part in (events[:half], events[half:])
                ]
                self._window.extendleft(reversed(halves))
        for unacked in self._window:
            unacked.suspect = True
        return given_up

    def _report_refused(self, event: pb.Event, code: grpc.StatusCode, details: str) -> None:
        """Hands an event given up to the callback, with the status as its reason."""
        self._call_back(RejectedEvent(event, code.name.lower(), details), logger)


def _refused(code: grpc.StatusCode, details: str) -> bool:
    """Whether a stream ended on a message the server cannot take: undecodable
    (INVALID_ARGUMENT) or over its size limit (RESOURCE_EXHAUSTED unless it
    refused the stream itself or its budget of messages begun was full for
    the moment; OUT_OF_RANGE from older servers)."""
    if code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.OUT_OF_RANGE):
        return True
    momentary = TOO_MANY_STREAMS in details or PARTIAL_BUDGET in details
    return code == grpc.StatusCode.RESOURCE_EXHAUSTED and not momentary


def _closed_as_idle(stream: IngestStream, code: grpc.StatusCode, details: str) -> bool:
    """Whether the server closed a stream it had taken because nothing came on it."""
    return stream.opened and code == grpc.StatusCode.UNAVAILABLE and IDLE_TIMEOUT in details


#: What the collectors of this process run on, for the fork hook below.
_LIVE: "weakref.WeakSet[_Streamer]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """In a child process just forked: every collector stops there."""
    for streamer in list(_LIVE):
        streamer._after_fork()


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork()
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _left(deadline: Optional[float]) -> Optional[float]:
    """Seconds left until `deadline` (`None`: no deadline)."""
    return None if deadline is None else max(0.0, deadline - time.monotonic())
