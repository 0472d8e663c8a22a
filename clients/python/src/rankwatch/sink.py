"""The public methods every client shares, whatever carries its events:
typed `impression` and `interaction`, `send`, `flush`, `close`, `stats` and
use as a context manager (`with`), which closes the client at the end."""

from __future__ import annotations

import abc
import atexit
import logging
import threading
import weakref
from types import TracebackType
from typing import Any, Callable, Mapping, Optional, Protocol, Sequence, Type, TypeVar

from rankwatch import events
from rankwatch.events import EventTime, InterleavingSpec
from rankwatch.stats import RejectedEvent, RejectionCallback, SinkStats
from rankwatch.v1 import rankwatch_pb2 as pb

Self = TypeVar("Self", bound="EventSink")

#: How long leaving a `with` block waits for the last acks before giving up.
EXIT_TIMEOUT_S = 30.0


logger = logging.getLogger("rankwatch")


class Counted(Protocol):
    """Something that holds events on their way and counts them."""

    def stats(self) -> SinkStats:
        """A snapshot of the counters."""


#: The sinks of this process that were never closed, for the exit warning.
_UNCLOSED: "weakref.WeakSet[Counted]" = weakref.WeakSet()


def _warn_unsent_at_exit() -> None:
    """At interpreter exit: says how many events each sink that was never
    closed leaves unsent (its threads are daemons, ended with the process)."""
    for sink in list(_UNCLOSED):
        pending = sink.stats().pending
        if pending:
            logger.warning("rankwatch: %d event(s) were never sent: the process exits without close(); call "
                           "close(timeout) at shutdown, or use `with ... as collector:`", pending)


atexit.register(_warn_unsent_at_exit)


def require_event(event: object) -> None:
    """Raises `TypeError` unless `event` is a `rankwatch.v1.Event`: what a
    sink's `send` takes, checked at the caller's call rather than failing
    later on the client's own thread."""
    if not isinstance(event, pb.Event):
        raise TypeError(
            f"send() takes a rankwatch.v1.Event, not {type(event).__name__}: build one with "
            "rankwatch.events.impression(...) or .interaction(...), or call impression(...) on the client"
        )


def watch_exit(sink: Counted, watched: bool = True) -> None:
    """Has the exit warning count the unsent events of `sink` (from its
    start), or not any more (once it is closed)."""
    if watched:
        _UNCLOSED.add(sink)
    else:
        _UNCLOSED.discard(sink)


def weakly(method: Callable[..., None]) -> Callable[..., None]:
    """`method`, called only while its object lives: for what a client's own
    threads or librdkafka hold for their lifetime, which must not keep the
    client alive once serving code has dropped it."""
    bound = weakref.WeakMethod(method)

    def call(*args: Any) -> None:
        target = bound()
        if target is not None:
            target(*args)

    return call


class CallbackGuard:
    """Runs `on_rejection`, noting the thread it runs on, so that `flush` or
    `close` called from it raise rather than wait for that very thread."""

    #: What hears each event the sink could not deliver.
    _on_rejection: Optional[RejectionCallback] = None
    #: The thread `_on_rejection` runs on while it runs.
    _callback_thread: Optional[int] = None

    def _call_back(self, rejected: RejectedEvent, log: logging.Logger) -> None:
        """Hands `rejected` to `on_rejection`, if there is one, noting the
        thread it runs on; logs to `log` what it raises."""
        callback = self._on_rejection
        if callback is None:
            return
        self._callback_thread = threading.get_ident()
        try:
            callback(rejected)
        except Exception:
            log.exception("the rejection callback failed on %s", rejected.reason)
        finally:
            self._callback_thread = None

    def _refuse_in_callback(self, method: str) -> None:
        """Raises `RuntimeError` when `method` (`flush`, `close`) is called
        from `on_rejection`: it would wait for the thread running the callback."""
        if threading.get_ident() == self._callback_thread:
            raise RuntimeError(
                f"{method}() called from on_rejection, which runs on the thread that settles what {method}() "
                f"waits for; call {method}() from another thread"
            )


class EventSink(abc.ABC):
    """Somewhere to send impressions and interactions without blocking the caller."""

    @abc.abstractmethod
    def send(self, event: pb.Event) -> bool:
        """Queues one `rankwatch.v1.Event`; never blocks. Returns whether it was
        queued (when not, it is counted as dropped)."""

    def _send_built(self, event: pb.Event) -> bool:
        """Queues an event that `impression` or `interaction` just built, which
        no caller holds; a sink that copies in `send` skips the copy here."""
        return self.send(event)

    @abc.abstractmethod
    def flush(self, timeout: Optional[float] = None) -> bool:
        """Sends everything queued so far and waits until it is settled;
        returns `False` if `timeout` seconds passed first."""

    @abc.abstractmethod
    def close(self, timeout: Optional[float] = None) -> bool:
        """Flushes, then stops the client; returns `False` if events were
        still pending after `timeout` seconds (they are given up)."""

    @abc.abstractmethod
    def stats(self) -> SinkStats:
        """A snapshot of the counters."""

    def impression(
        self,
        *,
        user_id: str,
        items: Sequence[str],
        model: str = "",
        surface: str = "",
        request_id: Optional[str] = None,
        time: EventTime = None,
        labels: Optional[Mapping[str, str]] = None,
        interleaving: Optional[InterleavingSpec] = None,
    ) -> str:
        """Sends the ranked list `items` (rank 1 first) shown to `user_id`.

        Returns its `request_id` (a generated uuid4 when `None` was given), to
        pass along with the interactions on this list. `interleaving`: see
        `rankwatch.events.impression`. A bad argument (such as a naive
        `datetime`) raises `ValueError` here, and nothing is queued.
        """
        event = events.impression(
            user_id=user_id,
            items=items,
            model=model,
            surface=surface,
            request_id=request_id,
            time=time,
            labels=labels,
            interleaving=interleaving,
        )
        self._send_built(event)
        return event.impression.request_id

    def interaction(
        self,
        *,
        user_id: str,
        item_id: str,
        type: str = "click",
        request_id: Optional[str] = None,
        event_id: Optional[str] = None,
        grade: Optional[float] = None,
        time: EventTime = None,
    ) -> str:
        """Sends one interaction of `user_id` with `item_id`; returns its
        `event_id` (a generated uuid4 when `None` was given). A bad argument
        raises `ValueError` here, and nothing is queued."""
        event = events.interaction(
            user_id=user_id,
            item_id=item_id,
            type=type,
            request_id=request_id,
            event_id=event_id,
            grade=grade,
            time=time,
        )
        self._send_built(event)
        return event.interaction.event_id

    def __enter__(self: Self) -> Self:
        """The client itself; leaving the block closes it."""
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        """Closes the client, waiting at most `EXIT_TIMEOUT_S` for the last acks."""
        self.close(timeout=EXIT_TIMEOUT_S)
