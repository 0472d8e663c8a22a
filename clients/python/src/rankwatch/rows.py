"""Events from table rows: one mapping of column to value per event, as a row
of a pandas DataFrame reads (`DataFrame.to_dict("records")`). Each row is
built with `rankwatch.events`, so the same defaults and checks apply.

The columns (a missing value, None, NaN or NaT, takes the builder's default):

- `kind`: `"impression"` or `"interaction"`; `user_id`; `time`: an aware
  `datetime` (or pandas `Timestamp`), seconds since 1970, or an RFC 3339
  string with its offset (`"2026-11-01T10:00:00Z"`). A naive time raises
  `ValueError`, as in the builders.
- impressions: `items` (a list of item ids, rank 1 first), `request_id`,
  `model`, `surface`, `labels` (a dict), and for an interleaved list
  `rankers` and `teams` (lists).
- interactions: `item_id`, `type` (default `"click"`), `request_id`,
  `event_id`, `grade`.

A row may leave the other kind's columns empty. What the engine checks (such
as an empty `user_id`) is left to it: such an event is rejected and counted
in the report, as it would be online.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, Mapping

from google.protobuf.timestamp_pb2 import Timestamp

from rankwatch import events
from rankwatch.v1 import rankwatch_pb2 as pb

IMPRESSION_COLUMNS = ("user_id", "time", "items", "request_id", "model", "surface", "labels", "rankers", "teams")
INTERACTION_COLUMNS = ("user_id", "time", "item_id", "type", "request_id", "event_id", "grade")
#: Every column a row may have.
COLUMNS = frozenset(("kind",) + IMPRESSION_COLUMNS + INTERACTION_COLUMNS)


def check_columns(columns: Iterable[object]) -> None:
    """Raises `ValueError` naming the columns that are not event columns (a typo, most likely)."""
    unknown = sorted(str(column) for column in columns if column not in COLUMNS)
    if unknown:
        raise ValueError(f"unknown event columns {unknown}; the columns are {sorted(COLUMNS)}")


def event_of(row: Mapping[str, Any]) -> pb.Event:
    """The event of one row; `ValueError` when it has no kind or time, or a bad value."""
    present: Dict[str, Any] = {key: value for key, value in row.items() if not missing(value)}
    kind = present.get("kind")
    if "time" not in present:
        raise ValueError("an event row needs its time (an aware datetime, seconds since 1970 or RFC 3339)")
    time = parsed_time(present["time"])
    if kind == "impression":
        rankers, teams = present.get("rankers"), present.get("teams")
        if (rankers is None) != (teams is None):
            raise ValueError("an interleaved impression row needs both rankers and teams")
        return events.impression(
            user_id=present.get("user_id", ""),
            items=list(present.get("items", [])),
            model=present.get("model", ""),
            surface=present.get("surface", ""),
            request_id=present.get("request_id"),
            time=time,
            labels=present.get("labels"),
            interleaving=None if rankers is None else {"rankers": list(rankers), "teams": list(teams)},
        )
    if kind == "interaction":
        return events.interaction(
            user_id=present.get("user_id", ""),
            item_id=present.get("item_id", ""),
            type=present.get("type", "click"),
            request_id=present.get("request_id"),
            event_id=present.get("event_id"),
            grade=present.get("grade"),
            time=time,
        )
    raise ValueError(f"an event row's kind is 'impression' or 'interaction', not {kind!r}")


def parsed_time(value: Any) -> events.EventTime:
    """A row's time as the builders take it: an RFC 3339 string becomes a
    protobuf `Timestamp`, which keeps its nanoseconds."""
    if not isinstance(value, str):
        return value
    stamp = Timestamp()
    # RFC 3339 also allows a lowercase t and z, and a space between date and time.
    text = value[:10] + value[10:11].replace("t", "T").replace(" ", "T") + value[11:]
    text = text[:-1] + "Z" if text.endswith("z") else text
    try:
        stamp.FromJsonString(text)
    except ValueError as error:
        raise ValueError(f"time {value!r} is not RFC 3339 with an offset, such as 2026-11-01T10:00:00Z") from error
    return stamp


def missing(value: Any) -> bool:
    """Whether a cell is empty: None, NaN, pandas' NaT or NA (a list never is)."""
    if value is None or type(value).__name__ in ("NaTType", "NAType"):
        return True
    try:
        return bool(value != value)
    except (TypeError, ValueError):  # an array compares element by element
        return False
