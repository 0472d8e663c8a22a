"""Typed builders of `rankwatch.v1.Event` messages: impressions and interactions.

Ids that make retries idempotent are generated when the caller gives none: an
impression's `request_id` and an interaction's `event_id` (uuid4). Times
default to now; a `datetime` must carry its time zone, and a number is taken
as seconds since 1970 (what `time.time()` returns).
"""

from __future__ import annotations

import datetime
import math
import time as clock
import uuid
from typing import Mapping, Optional, Sequence, Union

from google.protobuf.timestamp_pb2 import Timestamp

from rankwatch.v1 import rankwatch_pb2 as pb

#: An event time: an aware `datetime`, seconds since 1970, or `None` for now.
EventTime = Union[datetime.datetime, float, int, None]


def new_id() -> str:
    """A fresh random id (uuid4), for `request_id` and `event_id`."""
    return str(uuid.uuid4())


def set_time(target: Timestamp, time: EventTime) -> None:
    """Writes `time` (now when `None`) into the Timestamp `target`."""
    if time is None:
        target.FromNanoseconds(clock.time_ns())
    elif isinstance(time, datetime.datetime):
        if time.tzinfo is None or time.utcoffset() is None:
            raise ValueError(
                f"naive datetime {time.isoformat()}: give it a time zone, e.g. datetime.now(timezone.utc)"
            )
        target.FromDatetime(time)
    elif isinstance(time, (int, float)) and not isinstance(time, bool) and math.isfinite(time):
        target.FromNanoseconds(round(time * 1_000_000_000))
    else:
        raise ValueError(f"event time {time!r} is neither an aware datetime nor finite seconds since 1970")


def impression(
    *,
    user_id: str,
    items: Sequence[str],
    model: str = "",
    surface: str = "",
    request_id: Optional[str] = None,
    time: EventTime = None,
    labels: Optional[Mapping[str, str]] = None,
) -> pb.Event:
    """An impression event: the ranked list `items` (rank 1 first) shown to `user_id`.

    `request_id` identifies the list; a uuid4 is generated when it is `None`.
    Pass the same id with the interactions on this list for exact attribution.
    `labels` (such as `{"country": "de"}`) are read by a server whose
    `segment_labels` names their keys, and ignored otherwise.
    """
    shown = pb.Impression(
        request_id=new_id() if request_id is None else request_id,
        user_id=user_id,
        item_ids=list(items),
        model=model,
        surface=surface,
        labels=dict(labels or {}),
    )
    set_time(shown.time, time)
    return pb.Event(impression=shown)


def interaction(
    *,
    user_id: str,
    item_id: str,
    type: str = "click",
    request_id: Optional[str] = None,
    event_id: Optional[str] = None,
    grade: Optional[float] = None,
    time: EventTime = None,
) -> pb.Event:
    """An interaction event: `user_id` did `type` (a configured type name) on `item_id`.

    `request_id` names the impression it belongs to (exact attribution);
    `event_id` makes a resend count once and is generated when `None`;
    `grade` overrides the grade of the type.
    """
    feedback = pb.Interaction(
        event_id=new_id() if event_id is None else event_id,
        user_id=user_id,
        item_id=item_id,
        request_id=request_id or "",
        type=type,
    )
    if grade is not None:
        feedback.grade = grade
    set_time(feedback.time, time)
    return pb.Event(interaction=feedback)


def user_of(event: pb.Event) -> str:
    """The `user_id` of an impression or interaction event ("" for an empty event)."""
    kind = event.WhichOneof("kind")
    return getattr(event, kind).user_id if kind else ""
