"""The event builders and the batch cutter; a builder's error surfaces at the caller's own call."""

from __future__ import annotations

import datetime
import time
import uuid

import pytest
from conftest import Server

from rankwatch import Collector, events, rows
from rankwatch.batching import EventBuffer


def test_an_impression_gets_a_uuid4_request_id_and_now_as_its_time() -> None:
    before = time.time_ns()
    event = events.impression(user_id="u1", items=["a", "b"], model="v7", surface="home")
    after = time.time_ns()
    shown = event.impression
    assert uuid.UUID(shown.request_id).version == 4
    assert (shown.user_id, list(shown.item_ids), shown.model, shown.surface) == ("u1", ["a", "b"], "v7", "home")
    assert before <= shown.time.ToNanoseconds() <= after


def test_an_interaction_keeps_given_ids_grade_and_time() -> None:
    at = datetime.datetime(2026, 11, 1, 10, 0, 4, 250_000, tzinfo=datetime.timezone.utc)
    event = events.interaction(user_id="u1", item_id="b", type="purchase", request_id="r1", event_id="e1",
                               grade=2.5, time=at)
    feedback = event.interaction
    assert (feedback.event_id, feedback.request_id, feedback.type, feedback.grade) == ("e1", "r1", "purchase", 2.5)
    assert feedback.time.ToJsonString() == "2026-11-01T10:00:04.250Z"
    assert not events.interaction(user_id="u1", item_id="b").interaction.HasField("grade")
    assert events.user_of(event) == "u1"


def test_times_are_aware_datetimes_or_seconds_since_1970() -> None:
    numpy = pytest.importorskip("numpy")
    event = events.interaction(user_id="u1", item_id="b", time=1_793_527_425.5)
    assert event.interaction.time.ToJsonString() == "2026-11-01T10:03:45.500Z"
    paris = datetime.timezone(datetime.timedelta(hours=1))
    event = events.interaction(user_id="u1", item_id="b", time=datetime.datetime(2026, 11, 1, 11, 3, 45, tzinfo=paris))
    assert event.interaction.time.ToJsonString() == "2026-11-01T10:03:45Z"
    assert events.interaction(user_id="u1", item_id="b", time=numpy.int64(1_793_527_425)).interaction.time.seconds \
        == 1_793_527_425
    with pytest.raises(ValueError, match="naive datetime"):
        events.impression(user_id="u1", items=["a"], time=datetime.datetime(2026, 11, 1))
    for bad in (float("nan"), float("inf"), True, "2026-11-01T10:00:00Z"):
        with pytest.raises(ValueError, match="neither an aware datetime nor finite seconds"):
            events.impression(user_id="u1", items=["a"], time=bad)


def test_times_keep_their_nanoseconds() -> None:
    pandas = pytest.importorskip("pandas")
    text = "2026-11-01T10:00:04.123456789Z"
    assert rows.event_of({"kind": "interaction", "user_id": "u1", "item_id": "b", "time": text}) \
        .interaction.time.ToJsonString() == text
    stamp = pandas.Timestamp(text)
    assert events.impression(user_id="u1", items=["a"], time=stamp).impression.time.ToJsonString() == text


def test_a_naive_datetime_raises_at_the_callers_call_and_nothing_is_queued(server: Server) -> None:
    pandas = pytest.importorskip("pandas")
    naive = datetime.datetime(2026, 11, 1, 10, 0)
    with Collector(server.grpc_addr) as client:
        with pytest.raises(ValueError, match="naive datetime 2026-11-01T10:00:00: pass an aware datetime"):
            client.impression(user_id="u1", items=["a"], time=naive)
        with pytest.raises(ValueError, match="pass an aware datetime"):
            client.interaction(user_id="u1", item_id="a", time=naive)
        with pytest.raises(ValueError, match="pass an aware datetime"):  # a pandas Timestamp is a datetime too
            client.impression(user_id="u1", items=["a"], time=pandas.Timestamp("2026-11-01 10:00"))
        client.impression(user_id="u1", items=["a"], time=naive.replace(tzinfo=datetime.timezone.utc))
        assert client.flush(timeout=60)
        stats = client.stats()
    assert (stats.queued, stats.accepted, stats.rejected) == (1, 1, {})


def test_batches_are_cut_by_count_then_by_bytes() -> None:
    buffer = EventBuffer(capacity=100, max_events=3, max_bytes=10_000, linger=3600)
    for i in range(7):
        assert buffer.offer(events.impression(user_id=f"u{i}", items=["a"]))
    assert [len(buffer.take(timeout=0)) for _ in range(3)] == [3, 3, 0]
    buffer.flush()
    assert len(buffer.take(timeout=0)) == 1

    one = events.impression(user_id="u", items=["x" * 100])
    small = EventBuffer(capacity=100, max_events=100, max_bytes=2 * one.ByteSize() + 1, linger=0)
    for _ in range(5):
        small.offer(one)
    assert [len(small.take(timeout=0)) for _ in range(4)] == [2, 2, 1, 0]


def test_a_batch_short_of_its_size_leaves_after_linger() -> None:
    buffer = EventBuffer(capacity=100, max_events=10, max_bytes=10_000, linger=0.05)
    for i in range(4):
        buffer.offer(events.impression(user_id=f"u{i}", items=["a"]))
    assert len(buffer.take(timeout=None)) == 4  # without a flush, once the oldest has waited
    assert buffer.take(timeout=0.01) == []


def test_a_closed_buffer_hands_out_what_it_holds_and_refuses_more() -> None:
    buffer = EventBuffer(capacity=2, max_events=10, max_bytes=10_000, linger=3600)
    event = events.impression(user_id="u", items=["a"])
    assert [buffer.offer(event) for _ in range(3)] == [True, True, False]
    buffer.close()
    assert buffer.offer(event) is False
    assert (len(buffer.take()), buffer.take(), buffer.dropped, buffer.offered) == (2, [], 2, 2)
