"""What happened to the events a client was given: the counters of every sink,
and the rejections handed to a callback."""

from __future__ import annotations

import dataclasses
from typing import Callable, Dict

from rankwatch.v1 import rankwatch_pb2 as pb


@dataclasses.dataclass(frozen=True)
class RejectedEvent:
    """An event the server did not accept, with its stable snake_case reason
    (e.g. `unknown_type`) and a message a person can act on."""

    event: pb.Event
    reason: str
    message: str


#: Called with each rejected event, on the client's own thread.
RejectionCallback = Callable[[RejectedEvent], None]


@dataclasses.dataclass(frozen=True)
class SinkStats:
    """A snapshot of a client's counters, in events unless named otherwise.

    Every queued event ends up accepted, rejected or failed, or is still
    pending (queued, not yet acknowledged).
    """

    queued: int = 0
    """Events taken into the queue."""
    dropped: int = 0
    """Events refused because the queue was full (or the client closed)."""
    sent: int = 0
    """Events handed to a stream (or the producer) for the first time."""
    accepted: int = 0
    """Events the server acknowledged as accepted (or the broker stored)."""
    rejected: Dict[str, int] = dataclasses.field(default_factory=dict)
    """Events the server rejected, by reason."""
    failed: int = 0
    """Events given up on: a batch the server refused whole, or a failed delivery."""
    batches: int = 0
    """Batches acknowledged."""
    resent_batches: int = 0
    """Batches sent again on a new stream because the previous one broke before their ack."""
    resent_events: int = 0
    """Events in those batches."""
    stream_failures: int = 0
    """Streams that ended before the client closed them, or could not be opened:
    while the server cannot be reached, each attempt (one per backoff) counts."""

    @property
    def rejected_total(self) -> int:
        """Rejected events, all reasons together."""
        return sum(self.rejected.values())

    @property
    def pending(self) -> int:
        """Queued events not yet settled (accepted, rejected or failed)."""
        return self.queued - self.accepted - self.rejected_total - self.failed
