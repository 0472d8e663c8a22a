"""What the client logs through `logging`: rejections with their reasons, a
server that cannot be reached, a stream that failed and the reconnection; at
most one line per subject per interval, the rest counted."""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
import textwrap
from typing import List

import pytest
from conftest import Server, free_port
from test_collector import NEVER_S, PATIENCE_S, wait_until
from traffic import START, lists, unchecked

from rankwatch import Collector, events
from rankwatch.throttle import Throttle


def warnings_of(caplog: pytest.LogCaptureFixture, logger: str = "rankwatch.client") -> List[str]:
    """The messages `logger` logged at WARNING, in order."""
    return [r.getMessage() for r in caplog.records if r.name == logger and r.levelno == logging.WARNING]


def clicks_of_unknown_type(n: int) -> List[object]:
    """`n` interactions the server rejects with reason `unknown_type`."""
    return [events.interaction(user_id="u1", item_id="a", type="clik", time=START) for _ in range(n)]


def test_rejections_are_logged_once_per_reason_per_interval_with_the_rest_counted(
        server: Server, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="rankwatch")
    client = Collector(server.grpc_addr, batch_size=1000, linger=NEVER_S, log_interval=3600)
    empty = unchecked(events.impression(user_id="u1", items=["a"], time=START), item_ids=[])
    first = clicks_of_unknown_type(2) + [empty] + lists(1, 3)
    for event in first:
        client.send(event)
    assert client.flush(timeout=PATIENCE_S)
    assert warnings_of(caplog) == [
        "rankwatch rejected 1 event(s) with reason empty_item_ids: "
        "impression has no item_ids; send the ranked list that was shown",
        "rankwatch rejected 2 event(s) with reason unknown_type: "
        'unknown interaction type "clik"; configured: add_to_cart, click, purchase',
    ]
    for _ in range(3):  # three batches, three more rejections of the same reason: not logged, counted
        for event in clicks_of_unknown_type(1):
            client.send(event)
        assert client.flush(timeout=PATIENCE_S)
    assert len(warnings_of(caplog)) == 2
    assert client.close(timeout=PATIENCE_S)
    assert warnings_of(caplog)[2:] == [
        "rankwatch: 3 more rejections (unknown_type) not logged since the last such warning"]
    assert client.stats().rejected == {"unknown_type": 5, "empty_item_ids": 1}


def test_with_no_interval_every_batchs_rejections_are_logged(server: Server, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="rankwatch")
    with Collector(server.grpc_addr, batch_size=1000, linger=NEVER_S, log_interval=0) as client:
        for _ in range(3):
            for event in clicks_of_unknown_type(2):
                client.send(event)
            assert client.flush(timeout=PATIENCE_S)
    assert [m.split(":")[0] for m in warnings_of(caplog)] == [
        "rankwatch rejected 2 event(s) with reason unknown_type"] * 3


def test_a_throttled_subject_reports_its_count_in_the_next_warning(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="rankwatch")
    now = [100.0]
    throttle = Throttle(10.0, clock=lambda: now[0])
    log = logging.getLogger("rankwatch.client")
    for step in range(12):  # one occurrence a second; the second and third lines each count nine
        throttle.warn(log, "stream failures", "down (%s)", step)
        throttle.warn(log, "rejections (unknown_type)", "rejected %d", 3, count=3)
        now[0] += 1.0
    throttle.warn_left(log)
    assert warnings_of(caplog) == [
        "down (0)", "rejected 3",
        "down (10) (and 9 more stream failures since the last such warning)",
        "rejected 3 (and 27 more rejections (unknown_type) since the last such warning)",
        "rankwatch: 3 more rejections (unknown_type) not logged since the last such warning",
        "rankwatch: 1 more stream failures not logged since the last such warning",
    ]


def test_a_server_that_is_down_is_counted_and_logged_as_unreachable(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="rankwatch")
    address = f"127.0.0.1:{free_port()}"
    client = Collector(address, linger=0, retry_backoff=0.05, max_retry_backoff=0.2)
    client.impression(user_id="u1", items=["a", "b"])
    wait_until(lambda: client.stats().stream_failures >= 3, "failed attempts to be counted")
    lines = warnings_of(caplog)
    assert len(lines) == 1, lines  # one line per interval, however many attempts
    assert lines[0].startswith(f"rankwatch server at {address} unreachable (UNAVAILABLE: ")
    # The first attempt may come before the event is queued; its backoff is the first.
    assert re.search(r"\); [01] event\(s\) wait, retrying in 0.05 s$", lines[0]), lines[0]
    assert client.close(timeout=0.5) is False
    stats = client.stats()
    assert (stats.queued, stats.accepted, stats.sent, stats.pending) == (1, 0, 0, 1)
    # At close, the event given up is said, and the attempts not logged are
    # counted: every failure is in the log once.
    assert warnings_of(caplog)[1:] == [
        "rankwatch gave up 1 event(s) not acknowledged within close(timeout=0.5)",
        f"rankwatch: {stats.stream_failures - 1} more stream failures not logged since the last such warning"]


def test_a_stream_that_fails_is_logged_then_the_reconnection(state_server: Server,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="rankwatch")
    server = state_server
    client = Collector(server.grpc_addr, batch_size=10, linger=NEVER_S, retry_backoff=0.05, max_retry_backoff=0.2)
    log = lists(seed=8, n_lists=40)
    for event in log[:20]:
        client.send(event)
    assert client.flush(timeout=PATIENCE_S)
    assert warnings_of(caplog) == []

    server.signal(signal.SIGTERM)
    assert server.process is not None and server.process.wait(timeout=PATIENCE_S) == 0
    # While the server is down, every attempt counts, not only the stream that broke.
    wait_until(lambda: client.stats().stream_failures >= 3, "failed attempts while the server is down")
    server.restart()
    for event in log[20:]:
        client.send(event)
    assert client.flush(timeout=PATIENCE_S)
    stats = client.stats()
    client.close(timeout=PATIENCE_S)

    assert stats.accepted == len(log) and stats.pending == 0
    lines = warnings_of(caplog)
    assert lines[0].startswith(f"rankwatch stream to {server.grpc_addr} ended (")
    reconnected = [line for line in lines if line.startswith(f"rankwatch reconnected to {server.grpc_addr} after ")]
    assert len(reconnected) == 1, lines
    failed_streams = int(reconnected[0].split(" after ")[1].split(" ")[0])
    assert 3 <= failed_streams == stats.stream_failures


def test_the_library_adds_no_handler_and_prints_nothing_unconfigured() -> None:
    package = logging.getLogger("rankwatch")
    assert [type(handler) for handler in package.handlers] == [logging.NullHandler]
    assert logging.getLogger("rankwatch.client").handlers == []
    # A process that configures no logging sees nothing from a client whose server is down
    # (without the NullHandler, Python's last-resort handler would print the warnings).
    script = textwrap.dedent(f"""
        import time, rankwatch
        client = rankwatch.Collector("127.0.0.1:{free_port()}", linger=0, retry_backoff=0.05, log_interval=0)
        client.impression(user_id="u1", items=["a"])
        while client.stats().stream_failures < 2:
            time.sleep(0.02)
        client.close(timeout=0.2)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=PATIENCE_S,
                          env=dict(os.environ))
    assert (done.returncode, done.stderr, done.stdout) == (0, "", "")
