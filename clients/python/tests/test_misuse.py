"""What serving code gets wrong with a `Collector`, against a real `rankwatch serve`:
events sent while it closes, an object that is not an event, a fork after it
was made, a server that stops answering, a process that exits without
closing, arguments of the wrong type. None of it may lose an accepted event
silently, block the caller or stop the client."""

from __future__ import annotations

import gc
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from conftest import Server, sample

from rankwatch import Collector, events

PATIENCE_S = 60.0


def received(server: Server) -> float:
    """Events the server has received since it started."""
    return sample(server.scrape(), "rankwatch_events_received_total")


def test_events_sent_while_closing_are_delivered_or_refused_never_lost(server: Server) -> None:
    client = Collector(server.grpc_addr, batch_size=5)
    accepted = [0, 0]
    stop = threading.Event()

    def send(slot: int) -> None:
        while not stop.is_set():
            user = f"u{slot}-{accepted[slot]}"  # one list per user, none shed
            accepted[slot] += client.send(events.impression(user_id=user, items=["a"]))

    senders = [threading.Thread(target=send, args=(slot,)) for slot in range(2)]
    for sender in senders:
        sender.start()
    time.sleep(0.3)
    assert client.close(timeout=PATIENCE_S)
    stop.set()
    for sender in senders:
        sender.join()
    stats = client.stats()
    assert stats.queued == sum(accepted) and stats.pending == 0, stats
    assert stats.accepted == sum(accepted) == received(server), stats
    assert stats.dropped > 0  # the sends after close began were refused, and counted


def test_an_object_that_is_not_an_event_raises_at_the_call_and_the_client_goes_on(server: Server) -> None:
    with Collector(server.grpc_addr) as client:
        impression = events.impression(user_id="u1", items=["a"])
        for wrong in (impression.impression, {"impression": {"userId": "u1", "itemIds": ["a"]}}, None):
            with pytest.raises(TypeError, match="rankwatch.v1.Event"):
                client.send(wrong)  # type: ignore[arg-type]
        assert client.send(impression)
        assert client.flush(timeout=PATIENCE_S)
    assert client.stats().accepted == 1 == received(server)


def test_a_sender_that_fails_on_a_batch_logs_it_gives_it_up_and_goes_on(
    server: Server, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = Collector(server.grpc_addr, batch_size=1)
    numbered = client._streamer._numbered
    failed_once = []

    def fail_once(batch):  # a bug of the client's own, or a broken protobuf install
        if not failed_once:
            failed_once.append(True)
            raise RuntimeError("broken")
        return numbered(batch)

    monkeypatch.setattr(client._streamer, "_numbered", fail_once)
    with caplog.at_level(logging.WARNING, logger="rankwatch"):
        client.send(events.impression(user_id="u1", items=["a"]))
        client.send(events.impression(user_id="u2", items=["a"]))
        assert client.flush(timeout=PATIENCE_S)
        assert client.close(timeout=PATIENCE_S)
    stats = client.stats()
    assert (stats.accepted, stats.failed, stats.pending) == (1, 1, 0), stats
    assert any("given up" in r.getMessage() and r.exc_info for r in caplog.records), caplog.text


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_forked_child_refuses_events_saying_why_and_closes_at_once(server: Server) -> None:
    script = textwrap.dedent(f"""
        import logging, os, sys, time
        logging.basicConfig(level=logging.WARNING, stream=sys.stdout, format="%(message)s")
        from rankwatch import Collector, events
        client = Collector({server.grpc_addr!r})
        client.send(events.impression(user_id="parent", items=["a"]))
        pid = os.fork()
        if pid == 0:
            sent = [client.send(events.impression(user_id="child", items=["a"])) for _ in range(3)]
            began = time.monotonic()
            closed = client.close(timeout=5)
            print("child", sent, closed, round(time.monotonic() - began), client.stats().dropped, flush=True)
            os._exit(0)
        os.waitpid(pid, 0)
        print("parent", client.close(timeout=30), client.stats().accepted, flush=True)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=PATIENCE_S)
    lines = done.stdout.splitlines()
    assert "child [False, False, False] True 0 3" in lines, done.stdout + done.stderr
    assert "parent True 1" in lines, done.stdout + done.stderr
    assert any("fork" in line and "create the Collector" in line for line in lines), done.stdout


def test_drops_of_a_full_queue_are_logged(server: Server, caplog: pytest.LogCaptureFixture) -> None:
    os.kill(server.process.pid, signal.SIGSTOP)  # a server that stops answering
    try:
        client = Collector(server.grpc_addr, queue_size=10, batch_size=1000, linger=3600)
        with caplog.at_level(logging.WARNING, logger="rankwatch"):
            for i in range(30):
                client.impression(user_id=f"u{i}", items=["a"])
            assert client.stats().dropped > 0
            assert any("dropped" in r.getMessage() and "queue" in r.getMessage() for r in caplog.records), caplog.text
            assert not client.close(timeout=0.5)
            assert any("gave up 10 event(s)" in r.getMessage() for r in caplog.records), caplog.text
    finally:
        os.kill(server.process.pid, signal.SIGCONT)


def test_a_server_that_stops_acknowledging_is_warned_of_and_then_delivered_to(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    """A server that takes the stream and then answers nothing (stopped, or
    behind a network that drops packets) had been waited for in silence,
    every event counted as sent, until TCP gave up some 15 minutes later."""
    with Collector(server.grpc_addr, stall_after=1.0) as client:
        client.impression(user_id="u0", items=["a"])
        assert client.flush(timeout=10)
        os.kill(server.process.pid, signal.SIGSTOP)
        try:
            with caplog.at_level(logging.WARNING, logger="rankwatch"):
                for i in range(1, 6):
                    client.impression(user_id=f"u{i}", items=["a"])
                assert not client.flush(timeout=2.5)
            stalled = [r.getMessage() for r in caplog.records if "acknowledged nothing" in r.getMessage()]
            assert stalled and "5 event(s) wait" in stalled[0], caplog.text
        finally:
            os.kill(server.process.pid, signal.SIGCONT)
        assert client.flush(timeout=10)
    assert client.stats().accepted == 6, client.stats()


def test_the_queue_is_bounded_in_bytes_too(server: Server) -> None:
    os.kill(server.process.pid, signal.SIGSTOP)
    try:
        client = Collector(server.grpc_addr, queue_bytes=100_000)
        items = [f"item-{i:030d}" for i in range(1000)]  # some 40 kB per impression
        sent = [client.impression(user_id="u", items=items) for _ in range(10)]
        assert len(sent) == 10
        stats = client.stats()
        assert 1 <= stats.queued <= 3 and stats.dropped == 10 - stats.queued, stats
        client.close(timeout=0.5)
    finally:
        os.kill(server.process.pid, signal.SIGCONT)


@pytest.mark.parametrize("last", ["", "del client"], ids=["kept", "dropped just before the exit"])
def test_a_process_that_exits_without_close_says_what_it_left_unsent(last: str) -> None:
    script = textwrap.dedent(f"""
        import logging, sys
        logging.basicConfig(level=logging.WARNING, stream=sys.stdout, format="%(message)s")
        from rankwatch import Collector, events
        client = Collector("127.0.0.1:9")  # nothing listens there
        for i in range(5):
            client.send(events.impression(user_id="u", items=["a"]))
        {last}
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=PATIENCE_S)
    assert done.returncode == 0, done.stderr
    assert "5 event(s) were never sent" in done.stdout and "close(" in done.stdout, done.stdout + done.stderr


def test_a_collector_dropped_without_close_delivers_its_events_and_frees_its_stream(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    # A Collector made per request and dropped: each held a thread and one of
    # the server's max_streams for the life of the process.
    with caplog.at_level(logging.WARNING, logger="rankwatch"):
        for round in range(3):
            if round == 1:  # a callback that refers to the collector, as many do
                held: list = []
                client = Collector(server.grpc_addr, linger=3600, on_rejection=lambda _, held=held: held[0].stats())
                held.append(client)
                del held
            else:
                client = Collector(server.grpc_addr, linger=3600)  # the events wait in the queue
            for i in range(10):
                client.impression(user_id=f"u{round}-{i}", items=["a"])
            del client
            gc.collect()
        deadline = time.monotonic() + PATIENCE_S
        while time.monotonic() < deadline:
            senders = [t for t in threading.enumerate() if t.name.startswith("rankwatch-")]
            streams = sample(server.scrape(), "rankwatch_ingest_streams")
            if received(server) == 30 and streams == 0 and not senders:
                break
            time.sleep(0.05)
        assert (received(server), streams, senders) == (30, 0, []), server.tail()
    dropped = [r.getMessage() for r in caplog.records if "without close()" in r.getMessage()]
    assert len(dropped) == 3 and "its 10 unsent event(s)" in dropped[0], caplog.text


def test_arguments_of_the_wrong_kind_raise_at_the_call_naming_the_field() -> None:
    with pytest.raises(TypeError, match="user_id"):
        events.impression(user_id=7, items=["a"])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="item_ids\\[1\\]"):
        events.impression(user_id="u", items=["a", 2])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="one string"):
        events.impression(user_id="u", items="abc")
    with pytest.raises(ValueError, match="no item"):
        events.impression(user_id="u", items=[])
    with pytest.raises(TypeError, match="event_id"):
        events.interaction(user_id="u", item_id="a", event_id=3)  # type: ignore[arg-type]
    for grade in (float("nan"), float("inf"), -1.0):
        with pytest.raises(ValueError, match="grade"):
            events.interaction(user_id="u", item_id="a", grade=grade)


def test_flush_or_close_from_on_rejection_raises_instead_of_waiting_for_itself(server: Server) -> None:
    raised: list = []

    def on_rejection(_rejected) -> None:
        for method in (client.flush, client.close):
            try:
                method()
            except RuntimeError as error:
                raised.append(str(error))

    client = Collector(server.grpc_addr, batch_size=1, on_rejection=on_rejection)
    client.send(events.interaction(user_id="u1", item_id="a", type="clik"))  # rejected: unknown type
    for i in range(5):
        client.impression(user_id=f"u{i}", items=["a"])
    assert client.close(timeout=PATIENCE_S)
    assert len(raised) == 2 and all("on_rejection" in message for message in raised), raised
    stats = client.stats()
    assert (stats.accepted, stats.rejected_total, stats.pending) == (5, 1, 0), stats


def test_a_second_close_or_a_flush_after_close_returns_at_once() -> None:
    client = Collector("127.0.0.1:9")  # nothing listens there
    client.impression(user_id="u", items=["a"])
    assert not client.close(timeout=0)
    began = time.monotonic()
    assert not client.flush()  # no timeout: it must not wait for a sender that has stopped
    assert not client.close()
    assert time.monotonic() - began < 5
    assert client.stats().pending == 1


def test_an_event_changed_after_send_is_sent_as_it_was(server: Server) -> None:
    event = events.impression(user_id="u0", items=["a", "b"], request_id="r0")
    with Collector(server.grpc_addr, batch_size=1000, linger=3600) as client:
        for i in range(5):
            event.impression.user_id, event.impression.request_id = f"u{i}", f"r{i}"
            assert client.send(event)
        event.impression.ClearField("item_ids")
    assert client.stats().accepted == 5, client.stats()


def test_items_without_a_rank_order_or_of_the_wrong_kind_raise_naming_them() -> None:
    from google.protobuf.timestamp_pb2 import Timestamp

    for unordered in ({"b", "a"}, {"a": 1, "b": 2}):
        with pytest.raises(ValueError, match="no rank order"):
            events.impression(user_id="u", items=unordered)
    with pytest.raises(TypeError, match="items"):
        events.impression(user_id="u", items=None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="labels"):
        events.impression(user_id="u", items=["a"], labels=[("country", "de")])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="request_id"):
        events.interaction(user_id="u", item_id="a", request_id=0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="grade"):
        events.interaction(user_id="u", item_id="a", grade=10**400)
    for seconds, nanos in ((0, -5), (0, 2_000_000_000), (10**12, 0)):
        with pytest.raises(ValueError, match="not a valid time"):
            events.interaction(user_id="u", item_id="a", time=Timestamp(seconds=seconds, nanos=nanos))


def test_times_out_of_a_timestamps_range_raise_value_error_whatever_their_kind() -> None:
    """Times past the years 1 to 9999 raise the documented ValueError,
    not OverflowError, as a float, a Fraction or a datetime: a caller that
    catches ValueError would have crashed."""
    import datetime
    import fractions

    early = datetime.datetime(1, 1, 1, tzinfo=datetime.timezone(datetime.timedelta(hours=1)))
    for time in (1e300, -1e300, fractions.Fraction(10**400), early, 10**30):
        with pytest.raises(ValueError, match="time"):
            events.interaction(user_id="u", item_id="a", time=time)


def test_a_time_in_milliseconds_is_told_to_be_given_in_seconds() -> None:
    """`time.time() * 1000`, the usual slip, had been told only that it is
    outside the years 1 to 9999."""
    for time, unit, per_second in ((1795966131530.8967, "milliseconds", 1000),
                                   (1795966131530896, "microseconds", 1000000),
                                   (1795966131530896700, "nanoseconds", 1000000000)):
        said = f"it looks like {unit} since 1970; give seconds \\(time / {per_second}\\)"
        with pytest.raises(ValueError, match=said):
            events.interaction(user_id="u", item_id="a", time=time)
    with pytest.raises(ValueError) as far:
        events.interaction(user_id="u", item_id="a", time=1e300)
    assert "looks like" not in str(far.value)


def test_settings_that_are_not_finite_numbers_raise_at_construction() -> None:
    """A NaN linger had been taken: the sender thread spun a whole core and
    sent nothing until close."""
    for setting in ("linger", "retry_backoff", "max_retry_backoff", "log_interval"):
        for value in (float("nan"), float("inf"), -1.0):
            with pytest.raises(ValueError, match=setting):
                Collector("127.0.0.1:1", **{setting: value})


def test_rfc_3339_spellings_with_a_lowercase_t_z_or_a_space_are_read() -> None:
    from rankwatch import rows

    for text in ("2026-11-01t10:00:00.5z", "2026-11-01 10:00:00.5Z"):
        event = rows.event_of({"kind": "interaction", "user_id": "u", "item_id": "a", "time": text})
        assert event.interaction.time.ToJsonString() == "2026-11-01T10:00:00.500Z"
