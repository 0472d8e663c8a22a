"""Known event logs for the tests, built with the client's own helpers, and
how a server's report is held against `rankwatch replay` of the same events."""

from __future__ import annotations

import datetime
import math
import random
from typing import Any, Dict, List, Sequence

import pytest
from google.protobuf import json_format

from rankwatch import events
from rankwatch.v1 import rankwatch_pb2 as pb

#: The first event time of every log.
START = datetime.datetime(2026, 11, 1, 10, 0, tzinfo=datetime.timezone.utc)
MODELS = ("control", "candidate")
SURFACES = ("home", "search")
TYPES = ("click", "click", "click", "add_to_cart", "purchase")


def lists(seed: int, n_lists: int) -> List[pb.Event]:
    """`n_lists` impressions, each followed by 0–3 interactions on it within a
    minute; every interaction carries its list's `request_id` and its own
    `event_id`, as a serving system that may resend should."""
    rng = random.Random(seed)
    users = [f"user-{seed}-{i}" for i in range(25)]
    items = [f"item-{i}" for i in range(60)]
    log: List[pb.Event] = []
    time = START
    for number in range(n_lists):
        time += datetime.timedelta(milliseconds=rng.randint(100, 3000))
        user, shown = rng.choice(users), rng.sample(items, rng.randint(3, 15))
        request_id = f"req-{seed}-{number}"
        log.append(events.impression(user_id=user, items=shown, model=rng.choice(MODELS),
                                     surface=rng.choice(SURFACES), request_id=request_id, time=time))
        for click in range(rng.choice([0, 0, 1, 1, 2, 3])):
            rank = min(int(rng.expovariate(0.3)), len(shown) - 1)
            later = time + datetime.timedelta(milliseconds=rng.randint(0, 60_000))
            log.append(events.interaction(user_id=user, item_id=shown[rank], type=rng.choice(TYPES),
                                          request_id=request_id, event_id=f"ev-{seed}-{number}-{click}",
                                          time=later))
    return log


def unchecked(event: pb.Event, **fields: Any) -> pb.Event:
    """`event` with its impression's or interaction's `fields` set after the
    builder checked it (an empty `item_ids`, a negative `grade`): what
    another client could send, for the server to reject."""
    inner = getattr(event, event.WhichOneof("kind"))
    for name, value in fields.items():
        if name == "item_ids":
            del inner.item_ids[:]
            inner.item_ids.extend(value)
        else:
            setattr(inner, name, value)
    return event


def closing_event(log: Sequence[pb.Event]) -> pb.Event:
    """An interaction a day after the log, by a user of its own: it moves the
    watermark past every list, so that every list is finalized, then waits."""
    latest = max(getattr(e, e.WhichOneof("kind")).time.ToNanoseconds() for e in log if e.WhichOneof("kind"))
    return events.interaction(user_id="closing-user", item_id="closing-item", event_id="closing",
                              time=(latest + 86_400 * 10**9) / 10**9)


def write_log(path: str, log: Sequence[pb.Event]) -> None:
    """Writes `log` as JSON Lines in the proto3 JSON mapping, for `rankwatch replay`."""
    with open(path, "w") as out:
        for event in log:
            out.write(json_format.MessageToJson(event, indent=None) + "\n")


def assert_report_matches(report: Dict[str, Any], expected: Dict[str, Any], closing_events: int = 1) -> None:
    """The report of a server that got the replayed log plus `closing_events`
    closing interactions (each still waiting) equals the replay's."""
    want = expected["counters"]
    got = report["counters"]
    assert report["config"] == expected["config"]
    assert got["impressions"] == want["impressions"]
    assert got["interactions"] == want["interactions"] + closing_events
    for name in ("credited", "late", "duplicates"):
        assert got[name] == want[name], name
    for name in ("unattributed", "rejected"):
        assert nonzero(got[name]) == nonzero(want[name]), name
    assert_groups_match(report["groups"], expected["groups"])


def assert_groups_match(got: List[Dict[str, Any]], want: List[Dict[str, Any]]) -> None:
    """Same groups, list counts and every mean (to the last bits of a float)."""
    assert [(g["model"], g["surface"], g["lists"], g["engaged_lists"]) for g in got] == \
        [(g["model"], g["surface"], g["lists"], g["engaged_lists"]) for g in want]
    for group, want_group in zip(got, want):
        assert sorted(group["metrics"]) == sorted(want_group["metrics"])
        for key, mean in want_group["metrics"].items():
            for scope in ("all", "engaged", "se_all", "se_engaged"):
                assert group["metrics"][key][scope] == pytest.approx(mean[scope], rel=1e-12, abs=1e-12), key


def nonzero(counts: Dict[str, int]) -> Dict[str, int]:
    """A count map without its zero entries."""
    return {key: value for key, value in counts.items() if value}


def batches_of(n_events: int, batch_size: int) -> int:
    """How many batches of at most `batch_size` carry `n_events`."""
    return math.ceil(n_events / batch_size)
