"""Typed builders of `rankwatch.v1.Event` messages: impressions and interactions.

Ids that make retries idempotent are generated when the caller gives none: an
impression's `request_id` and an interaction's `event_id` (uuid4). Times
default to now; a `datetime` must carry its time zone, and a number is taken
as seconds since 1970 (what `time.time()` returns). Every check runs in the
builder, so a bad argument raises at the caller's own call, never later in
the client's background thread: `TypeError` for the wrong kind of value (an
id that is not a string), naming the field, and `ValueError` for a bad one.
"""

from __future__ import annotations

import collections.abc
import datetime
import math
import numbers
import time as clock
import uuid
from typing import Mapping, Optional, Sequence, Union

from google.protobuf.timestamp_pb2 import Timestamp

from rankwatch.interleave import Interleaved
from rankwatch.v1 import rankwatch_pb2 as pb

#: An event time: an aware `datetime` (a pandas `Timestamp` keeps its
#: nanoseconds), seconds since 1970, a protobuf `Timestamp`, or `None` for now.
EventTime = Union[datetime.datetime, float, int, Timestamp, None]
#: Who contributed each item of an interleaved list: the result of
#: `rankwatch.interleave.team_draft`, the protobuf message, or a mapping
#: `{"rankers": [...], "teams": [...]}` (the JSON form).
InterleavingSpec = Union[Interleaved, pb.Interleaving, Mapping[str, Sequence]]


#: The seconds since 1970 of 0001-01-01T00:00:00Z and 9999-12-31T23:59:59Z,
#: the range of a protobuf `Timestamp`.
_FIRST_SECOND, _LAST_SECOND = -62_135_596_800, 253_402_300_799


def new_id() -> str:
    """A fresh random id (uuid4), for `request_id` and `event_id`."""
    return str(uuid.uuid4())


def set_time(target: Timestamp, time: EventTime) -> None:
    """Writes `time` (now when `None`) into the Timestamp `target`; a time
    outside the years 1 to 9999 raises `ValueError`."""
    try:
        _write_time(target, time)
    except OverflowError:
        raise _outside(time) from None


def _outside(time: object) -> ValueError:
    """The error of a time outside what a protobuf `Timestamp` holds; for a
    number that is a time of these years in smaller units than seconds, it
    names the unit (`time.time() * 1000` is the usual slip)."""
    hint = ""
    if isinstance(time, numbers.Real) and not isinstance(time, bool):
        for unit, per_second in (("milliseconds", 10**3), ("microseconds", 10**6), ("nanoseconds", 10**9)):
            if 10**9 * per_second <= time < 10**10 * per_second:
                hint = f": it looks like {unit} since 1970; give seconds (time / {per_second}) or an aware datetime"
                break
    return ValueError(f"event time {time!r} is outside the years 1 to 9999 that an event's Timestamp holds{hint}")


def _write_time(target: Timestamp, time: EventTime) -> None:
    """Writes `time` (now when `None`) into the Timestamp `target`."""
    if time is None:
        target.FromNanoseconds(clock.time_ns())
    elif isinstance(time, datetime.datetime):
        if time.tzinfo is None or time.utcoffset() is None:
            raise ValueError(
                f"naive datetime {time.isoformat()}: pass an aware datetime, one with a time zone, "
                "e.g. datetime.now(timezone.utc) or dt.replace(tzinfo=timezone.utc)"
            )
        nanos = getattr(time, "value", None)  # a pandas Timestamp: nanoseconds since 1970
        if isinstance(nanos, int):
            target.FromNanoseconds(nanos)
        else:
            target.FromDatetime(time)
    elif isinstance(time, Timestamp):
        if not 0 <= time.nanos < 1_000_000_000 or not _FIRST_SECOND <= time.seconds <= _LAST_SECOND:
            raise ValueError(f"Timestamp(seconds={time.seconds}, nanos={time.nanos}) is not a valid time: "
                             "nanos from 0 to 999999999, between the years 1 and 9999")
        target.CopyFrom(time)
    elif isinstance(time, numbers.Integral) and not isinstance(time, bool):
        if not _FIRST_SECOND <= int(time) <= _LAST_SECOND:
            raise _outside(time)
        target.FromNanoseconds(int(time) * 1_000_000_000)
    elif isinstance(time, numbers.Real) and not isinstance(time, bool) and math.isfinite(time):
        if not _FIRST_SECOND <= float(time) < _LAST_SECOND + 1:
            raise _outside(time)
        target.FromNanoseconds(round(float(time) * 1_000_000_000))
    else:
        raise ValueError(f"event time {time!r} is neither an aware datetime nor finite seconds since 1970")


def _text(field: str, value: object) -> str:
    """`value` if it is a string; else `TypeError` naming `field`."""
    if not isinstance(value, str):
        raise TypeError(f"{field} is {type(value).__name__} {value!r}; give a str")
    return value


def _items(items: Sequence[str]) -> list:
    """The item ids of a list, checked: strings in rank order, at least one."""
    if isinstance(items, (str, bytes)):
        raise ValueError(f"items is one string {items!r}; give a list of item ids, e.g. [\"a\", \"b\"]")
    if isinstance(items, (collections.abc.Set, collections.abc.Mapping)):
        raise ValueError(f"items is a {type(items).__name__}, which has no rank order; give a list, rank 1 first")
    if not isinstance(items, collections.abc.Iterable):
        raise TypeError(f"items is {type(items).__name__} {items!r}; give a list of item ids, rank 1 first")
    checked = [_text(f"item_ids[{rank}]", item) for rank, item in enumerate(items)]
    if not checked:
        raise ValueError("items holds no item; an impression shows at least one")
    return checked


def _labels(labels: Optional[Mapping[str, str]]) -> dict:
    """The labels, checked: a mapping of strings to strings."""
    if labels is None:
        return {}
    if not isinstance(labels, collections.abc.Mapping):
        raise TypeError(f"labels is {type(labels).__name__} {labels!r}; give a dict, e.g. {{\"country\": \"de\"}}")
    return {_text("labels key", key): _text(f"labels[{key!r}]", value) for key, value in labels.items()}


def _grade(grade: object) -> float:
    """An explicit grade, checked: a finite number of at least 0."""
    try:
        value = float(grade) if isinstance(grade, numbers.Real) and not isinstance(grade, bool) else math.nan
    except OverflowError:
        value = math.inf
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"grade {grade!r} is not a finite number of at least 0")
    return value


def impression(
    *,
    user_id: str,
    items: Sequence[str],
    model: str = "",
    surface: str = "",
    request_id: Optional[str] = None,
    time: EventTime = None,
    labels: Optional[Mapping[str, str]] = None,
    interleaving: Optional[InterleavingSpec] = None,
) -> pb.Event:
    """An impression event: the ranked list `items` (rank 1 first) shown to `user_id`.

    `request_id` identifies the list; a uuid4 is generated when it is `None`.
    Pass the same id with the interactions on this list for exact attribution.
    `labels` (such as `{"country": "de"}`) are read by a server whose
    `segment_labels` names their keys, and ignored otherwise.
    `interleaving` says which ranker contributed each item of a list merged
    by `rankwatch.interleave.team_draft` (pass its result, whose `items` are
    then `items`), or by your own interleaver (`{"rankers": [...], "teams":
    [...]}`, one team per item).
    """
    shown = pb.Impression(
        request_id=new_id() if request_id is None else _text("request_id", request_id),
        user_id=_text("user_id", user_id),
        item_ids=_items(items),
        model=_text("model", model),
        surface=_text("surface", surface),
        labels=_labels(labels),
    )
    if interleaving is not None:
        shown.interleaving.CopyFrom(interleaving_of(interleaving, shown.item_ids))
    set_time(shown.time, time)
    return pb.Event(impression=shown)


def interleaving_of(spec: InterleavingSpec, items: Sequence[str]) -> pb.Interleaving:
    """The `Interleaving` field of a list of `items`, checked for its shape:
    one team per item, each an index of `rankers`. (The server checks the
    rankers' names against its own settings.)"""
    if isinstance(spec, Interleaved):
        if list(spec.items) != list(items):
            raise ValueError("items differ from the interleaved list's: pass items=interleaved.items")
        rankers, teams = spec.rankers, spec.teams
    elif isinstance(spec, pb.Interleaving):
        rankers, teams = spec.rankers, spec.teams
    elif isinstance(spec, Mapping) and {"rankers", "teams"} <= set(spec):
        rankers, teams = spec["rankers"], spec["teams"]
    else:
        raise ValueError(f"interleaving {spec!r} is not team_draft's result nor {{'rankers': [...], 'teams': [...]}}")
    if len(teams) != len(items):
        raise ValueError(f"interleaving has {len(teams)} teams for {len(items)} items; give one per item")
    for rank, team in enumerate(teams, start=1):
        if isinstance(team, bool) or not isinstance(team, numbers.Integral) or not 0 <= team < len(rankers):
            raise ValueError(f"interleaving team {team!r} at rank {rank} is not an index of the {len(rankers)} rankers")
    return pb.Interleaving(rankers=list(rankers), teams=[int(team) for team in teams])


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
        event_id=new_id() if event_id is None else _text("event_id", event_id),
        user_id=_text("user_id", user_id),
        item_id=_text("item_id", item_id),
        request_id="" if request_id is None else _text("request_id", request_id),
        type=_text("type", type),
    )
    if grade is not None:
        feedback.grade = _grade(grade)
    set_time(feedback.time, time)
    return pb.Event(interaction=feedback)


def user_of(event: pb.Event) -> str:
    """The `user_id` of an impression or interaction event ("" for an empty event)."""
    kind = event.WhichOneof("kind")
    return getattr(event, kind).user_id if kind else ""
