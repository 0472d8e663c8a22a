"""The bounded queue between serving code and the sender thread, and how it cuts batches.

Serving code only ever calls `EventBuffer.offer`, which never blocks: when the
buffer is full (in events or in bytes) the event is dropped and counted. The
sender thread calls `EventBuffer.take`, which hands out the oldest events as
one batch once there are `max_events` of them, once the oldest has waited
`linger` seconds, when a flush asks for everything offered so far, or when
the buffer is closed.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Deque, List, Optional, Tuple

from rankwatch.v1 import rankwatch_pb2 as pb


class EventBuffer:
    """A bounded FIFO of events that cuts batches by size, by bytes and by time."""

    def __init__(
        self, capacity: int, max_events: int, max_bytes: int, linger: float, capacity_bytes: int = 64 << 20
    ) -> None:
        """A buffer of at most `capacity` events holding `capacity_bytes`
        serialized bytes (past its first event); batches of at most
        `max_events` events and (past their first event) `max_bytes` bytes,
        sent at the latest `linger` seconds after their oldest event arrived."""
        if capacity < 1 or capacity_bytes < 1 or max_events < 1 or max_bytes < 1 or linger < 0:
            raise ValueError("capacity, capacity_bytes, max_events and max_bytes must be positive, linger not negative")
        self._capacity = capacity
        self._capacity_bytes = capacity_bytes
        self._bytes = 0
        self._max_events = max_events
        self._max_bytes = max_bytes
        self._linger = linger
        self._events: Deque[Tuple[float, int, pb.Event]] = collections.deque()
        self._changed = threading.Condition()
        self._offered = 0
        self._taken = 0
        self._flush_through = 0
        self._dropped = 0
        self._closed = False

    def offer(self, event: pb.Event) -> bool:
        """Queues `event` unless the buffer is full or closed; never blocks.

        Returns whether it was queued; a refused event is counted as dropped.
        """
        size = event.ByteSize()
        with self._changed:
            over_bytes = bool(self._events) and self._bytes + size > self._capacity_bytes
            if self._closed or len(self._events) >= self._capacity or over_bytes:
                self._dropped += 1
                return False
            self._events.append((time.monotonic(), size, event))
            self._bytes += size
            self._offered += 1
            if len(self._events) == 1 or len(self._events) >= self._max_events:
                self._changed.notify_all()
            return True

    def flush(self) -> int:
        """Asks for every event offered so far to be taken without waiting for
        `linger`; returns how many events have been offered in all."""
        with self._changed:
            self._flush_through = self._offered
            self._changed.notify_all()
            return self._offered

    def close(self) -> None:
        """Refuses further events; what is queued is still handed out, at once."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def take(self, timeout: Optional[float] = None) -> List[pb.Event]:
        """The next batch, oldest first, once one is due; `[]` after `timeout`
        seconds without one, or when the buffer is closed and empty."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while True:
                wait = self._until_due()
                if wait <= 0:
                    return self._cut()
                if self._closed:
                    return []
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return []
                    wait = min(wait, left)
                self._changed.wait(None if wait == float("inf") else wait)

    def _until_due(self) -> float:
        """Seconds until a batch is due: 0 or less when one is, infinity when empty."""
        if not self._events:
            return float("inf")
        full = len(self._events) >= self._max_events
        if full or self._closed or self._taken < self._flush_through:
            return 0.0
        oldest, _, _ = self._events[0]
        return oldest + self._linger - time.monotonic()

    def _cut(self) -> List[pb.Event]:
        """Removes and returns the oldest events that fit in one batch."""
        batch: List[pb.Event] = []
        size = 0
        while self._events and len(batch) < self._max_events:
            _, event_size, event = self._events[0]
            size += event_size
            if batch and size > self._max_bytes:
                break
            batch.append(event)
            self._events.popleft()
            self._bytes -= event_size
        self._taken += len(batch)
        return batch

    @property
    def closed(self) -> bool:
        """Whether the buffer refuses further events."""
        with self._changed:
            return self._closed

    @property
    def dropped(self) -> int:
        """Events refused because the buffer was full or closed."""
        with self._changed:
            return self._dropped

    @property
    def offered(self) -> int:
        """Events queued in all."""
        with self._changed:
            return self._offered

    def __len__(self) -> int:
        with self._changed:
            return len(self._events)
