"""`rankwatch.replay`: events built in Python, evaluated by the binary's `replay`."""

from __future__ import annotations

import datetime
import io
import json
import math
import os
import subprocess
import sys
from typing import Any, Dict, List

import pytest
from conftest import BINARY
from google.protobuf import json_format

import rankwatch
from rankwatch import events, offline
from rankwatch.v1 import rankwatch_pb2 as pb

T0 = datetime.datetime(2026, 11, 1, 10, 0, tzinfo=datetime.timezone.utc)
K_ARGS = ["--k", "1,5,10"]


def seconds(n: float) -> datetime.datetime:
    """`n` seconds after T0."""
    return T0 + datetime.timedelta(seconds=n)


def small_log() -> List[pb.Event]:
    """Three lists of two models and four interactions, one of them on no list."""
    return [
        events.impression(user_id="u1", items=["a", "b", "c", "d"], model="v7", surface="home", request_id="r1",
                          time=seconds(0)),
        events.impression(user_id="u2", items=["x", "y"], model="v7", surface="home", request_id="r2", time=seconds(1)),
        events.impression(user_id="u3", items=["p", "q", "r"], model="v8", surface="home", request_id="r3",
                          time=seconds(2)),
        events.interaction(user_id="u3", item_id="p", type="click", request_id="r3", event_id="e1", time=seconds(3)),
        events.interaction(user_id="u1", item_id="b", type="click", request_id="r1", event_id="e2", time=seconds(5)),
        events.interaction(user_id="u1", item_id="d", type="purchase", request_id="r1", event_id="e3",
                           time=seconds(10)),
        events.interaction(user_id="u4", item_id="z", type="click", event_id="e4", time=seconds(11)),
    ]


def group(report: Dict[str, Any], model: str) -> Dict[str, Any]:
    """The report's group of `model` on the surface `home`."""
    [found] = [g for g in report["groups"] if (g["model"], g["surface"]) == (model, "home")]
    return found


def test_replay_of_built_events_gives_the_counts_and_metrics_computed_by_hand() -> None:
    report = rankwatch.replay(small_log(), binary=BINARY, args=K_ARGS)

    counters = report["counters"]
    assert (counters["impressions"], counters["interactions"], counters["credited"]) == (3, 4, 3)
    assert counters["unattributed"] == {"no_impression": 1, "outside_window": 0, "not_in_list": 0}
    assert counters["rejected"] == {}
    assert report["config"]["k"] == [1, 5, 10]
    v7, v8 = group(report, "v7"), group(report, "v8")
    assert (v7["lists"], v7["engaged_lists"], v8["lists"], v8["engaged_lists"]) == (2, 1, 1, 1)
    # r1 shows b (click, grade 1) at rank 2 and d (purchase, grade 3) at rank 4; r2 nothing.
    dcg = 1 / math.log2(3) + 3 / math.log2(5)
    ideal = 3 / math.log2(2) + 1 / math.log2(3)
    assert v7["metrics"]["ndcg@10"]["all"] == pytest.approx((dcg / ideal + 0) / 2, rel=1e-12)
    assert v7["metrics"]["ndcg@10"]["engaged"] == pytest.approx(dcg / ideal, rel=1e-12)
    assert v7["metrics"]["mrr@10"]["all"] == pytest.approx((1 / 2 + 0) / 2, rel=1e-12)
    assert v7["metrics"]["precision@5"]["all"] == pytest.approx((2 / 5 + 0) / 2, rel=1e-12)
    # r3: its first item clicked.
    assert (v8["metrics"]["ndcg@10"]["all"], v8["metrics"]["mrr@10"]["all"]) == (1.0, 1.0)


def test_dicts_and_a_data_frame_give_the_same_report_as_messages() -> None:
    pandas = pytest.importorskip("pandas")
    log = small_log()
    expected = rankwatch.replay(log, binary=BINARY, args=K_ARGS)

    as_dicts = [json_format.MessageToDict(event) for event in log]
    assert rankwatch.replay(as_dicts, binary=BINARY, args=K_ARGS) == expected

    rows = []
    for event in log:
        kind = event.WhichOneof("kind")
        body = getattr(event, kind)
        row = {"kind": kind, "user_id": body.user_id, "request_id": body.request_id or None,
               "time": pandas.Timestamp(body.time.ToDatetime(tzinfo=datetime.timezone.utc))}
        if kind == "impression":
            row.update(items=list(body.item_ids), model=body.model, surface=body.surface)
        else:
            row.update(item_id=body.item_id, type=body.type, event_id=body.event_id)
        rows.append(row)
    frame = pandas.DataFrame(rows)
    assert frame["time"].dtype.kind == "M" and frame["items"].isna().sum() == 4  # typed times, empty cells
    assert rankwatch.replay(frame, binary=BINARY, args=K_ARGS) == expected


def test_a_data_frame_row_becomes_the_json_line_of_its_event() -> None:
    pandas = pytest.importorskip("pandas")
    frame = pandas.DataFrame([
        {"kind": "impression", "user_id": "u1", "items": ["a", "b", "c"], "request_id": "r1",
         "time": "2026-11-01T10:00:00.250Z", "model": "mixed", "labels": {"country": "de"},
         "rankers": ["v7", "v8"], "teams": [1, 0, 0]},
        {"kind": "interaction", "user_id": "u1", "item_id": "b", "event_id": "e1", "grade": 2.5,
         "time": 1_793_527_205.0},
    ])
    out = io.StringIO()
    offline.write_lines(out, frame)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert lines == [
        {"impression": {"requestId": "r1", "userId": "u1", "itemIds": ["a", "b", "c"],
                        "time": "2026-11-01T10:00:00.250Z", "model": "mixed", "labels": {"country": "de"},
                        "interleaving": {"rankers": ["v7", "v8"], "teams": [1, 0, 0]}}},
        {"interaction": {"eventId": "e1", "userId": "u1", "itemId": "b", "type": "click", "grade": 2.5,
                         "time": "2026-11-01T10:00:05Z"}},
    ]


@pytest.mark.parametrize("row, message", [
    ({"kind": "impression", "user_id": "u1", "items": ["a"], "time": datetime.datetime(2026, 11, 1, 10)},
     "row 1: naive datetime 2026-11-01T10:00:00: pass an aware datetime"),
    ({"kind": "impression", "user_id": "u1", "items": ["a"], "time": "2026-11-01T10:00:00"},
     "row 1: time '2026-11-01T10:00:00' is not RFC 3339 with an offset"),
    ({"kind": "impression", "user_id": "u1", "items": ["a"]}, "row 1: an event row needs its time"),
    ({"kind": "click", "user_id": "u1", "time": 0}, "row 1: an event row's kind is 'impression' or 'interaction'"),
    ({"kind": "interaction", "user_id": "u1", "item": "a", "time": 0}, r"unknown event columns \['item'\]"),
])
def test_a_data_frame_row_that_cannot_be_an_event_raises_before_the_replay(row: Dict[str, Any], message: str) -> None:
    pandas = pytest.importorskip("pandas")
    good = {"kind": "interaction", "user_id": "u1", "item_id": "a", "time": 0}
    frame = pandas.DataFrame([good, row], dtype=object)
    with pytest.raises(ValueError, match=message):
        rankwatch.replay(frame, binary=BINARY)


def test_events_the_engine_rejects_are_counted_not_raised() -> None:
    log = [json_format.MessageToDict(event) for event in small_log()]
    log.append({"impression": {"requestId": "r9", "userId": "", "itemIds": ["a"], "time": "2026-11-01T10:00:00Z"}})
    report = rankwatch.replay(log, binary=BINARY, args=K_ARGS)
    assert report["counters"]["rejected"] == {"missing_user_id": 1}
    assert report["counters"]["impressions"] == 3


def test_the_binary_comes_from_the_argument_the_environment_or_the_path(tmp_path, monkeypatch) -> None:
    log = small_log()
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("RANKWATCH_BINARY", raising=False)
    with pytest.raises(FileNotFoundError, match="pass binary=..., set RANKWATCH_BINARY, or put rankwatch on the PATH"):
        rankwatch.replay(log)
    os.symlink(os.path.abspath(BINARY), tmp_path / "rankwatch")
    assert rankwatch.replay(log)["counters"]["impressions"] == 3
    monkeypatch.setenv("RANKWATCH_BINARY", str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError, match="is not an executable file"):
        rankwatch.replay(log)
    assert rankwatch.replay(log, binary=BINARY)["counters"]["impressions"] == 3


def test_a_failing_replay_raises_with_the_binarys_message() -> None:
    with pytest.raises(rankwatch.ReplayError, match="exited with 2: .*--no-such-flag"):
        rankwatch.replay(small_log(), binary=BINARY, args=["--no-such-flag"])
    with pytest.raises(TypeError, match="event 0 is a str"):
        rankwatch.replay(["not an event"], binary=BINARY)


def test_pandas_is_not_imported_unless_given_a_data_frame() -> None:
    script = (
        "import sys, rankwatch\n"
        "from rankwatch import events\n"
        f"report = rankwatch.replay([events.impression(user_id='u', items=['a'], time=0)], binary={BINARY!r})\n"
        "assert report['counters']['impressions'] == 1\n"
        "print('pandas' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout.strip()) == (0, "False"), done.stderr
