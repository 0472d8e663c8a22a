"""One `Collector.Ingest` bidirectional stream: batches go out through a queue
that grpc reads on its own thread, acks come back on a receiver thread of ours.

The stream knows nothing of resending: it reports when the server has taken
the call (its response headers arrived), each ack and, once, how it ended;
the client decides what to send, and what to send again on the next stream.
The call fails at once when the server cannot be reached, rather than wait
for it, so that an outage is seen, counted and logged.
"""

from __future__ import annotations

import queue
import threading
from typing import Callable, Iterator, Optional

import grpc

from rankwatch.v1 import rankwatch_pb2 as pb
from rankwatch.v1 import rankwatch_pb2_grpc as pb_grpc

#: Called once when the server has taken the call, on the receiver thread.
OpenHandler = Callable[["IngestStream"], None]
#: Called with each ack, in order, on the receiver thread.
AckHandler = Callable[[pb.IngestAck], None]
#: Called once when the stream has ended, with its status code and details.
EndHandler = Callable[["IngestStream", grpc.StatusCode, str], None]


class IngestStream:
    """A live `Ingest` call on `channel`."""

    def __init__(self, channel: grpc.Channel, on_open: OpenHandler, on_ack: AckHandler, on_end: EndHandler) -> None:
        """Opens the call; it ends (UNAVAILABLE) at once if the server cannot be reached."""
        self._outgoing: "queue.SimpleQueue[Optional[pb.EventBatch]]" = queue.SimpleQueue()
        self._on_open = on_open
        self._on_ack = on_ack
        self._on_end = on_end
        self._opened = False
        self._ended = threading.Event()
        stub = pb_grpc.CollectorStub(channel)
        self._call = stub.Ingest(self._requests())
        self._receiver = threading.Thread(target=self._receive, name="rankwatch-acks", daemon=True)
        self._receiver.start()

    def send(self, batch: pb.EventBatch) -> None:
        """Queues `batch` for sending; a batch sent after the end is simply lost
        (the client resends every unacknowledged batch on the next stream)."""
        self._outgoing.put(batch)

    def finish(self) -> None:
        """Half-closes the stream: no more batches; the server acks what it has, then ends."""
        self._outgoing.put(None)

    def cancel(self) -> None:
        """Ends the call at once, acknowledged or not."""
        self._call.cancel()
        self._outgoing.put(None)

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Waits for the stream to end; returns whether it has."""
        return self._ended.wait(timeout)

    @property
    def opened(self) -> bool:
        """Whether the server took the call (its end may since have come)."""
        return self._opened

    @property
    def ended(self) -> bool:
        """Whether the stream has ended (and its end was reported)."""
        return self._ended.is_set()

    def _requests(self) -> Iterator[pb.EventBatch]:
        """What grpc sends: queued batches until `finish`."""
        while True:
            batch = self._outgoing.get()
            if batch is None:
                return
            yield batch

    def _receive(self) -> None:
        """Reports the opening, hands on every ack, then how the stream ended."""
        code, details = grpc.StatusCode.OK, ""
        try:
            # Returns once the server's headers arrived, or the call ended without them.
            self._call.initial_metadata()
            if not self._call.done():
                self._opened = True
                self._on_open(self)
            for ack in self._call:
                self._on_ack(ack)
        except grpc.RpcError as error:
            code, details = error.code(), error.details() or ""
        except Exception as error:  # an ack the client cannot match ends the stream
            self._call.cancel()
            code, details = grpc.StatusCode.INTERNAL, f"ack not handled: {error}"
        finally:
            # Releases grpc's thread that waits on `_requests`, if it still does.
            self._outgoing.put(None)
        self._on_end(self, code, details)
        self._ended.set()
