"""`Collector` against a real `rankwatch serve`: figures equal the replay of the same events."""

from __future__ import annotations

import datetime
import logging
import signal
import time
from typing import Callable, List

import pytest

from conftest import Server, by_label, replay, sample
from traffic import (START, assert_groups_match, assert_report_matches, batches_of, closing_event, lists,
                     unchecked, write_log)
from proxy import Proxy
from unfinished import UnfinishedMessage

from rankwatch import Collector, Evaluation, RejectedEvent, events

#: A linger no test waits for: batches leave by size, or on flush.
NEVER_S = 3600.0
#: How long a test waits at most for the server or the client to get somewhere.
PATIENCE_S = 60.0


def wait_until(condition: Callable[[], bool], what: str) -> None:
    """Polls `condition` until it holds; fails after `PATIENCE_S` (a hang, not a timing check)."""
    deadline = time.monotonic() + PATIENCE_S
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.02)


def received(server: Server) -> float:
    """Events the server has received since it started."""
    return sample(server.scrape(), "rankwatch_events_received_total")


def test_a_log_streamed_in_batches_gives_the_replay_figures(server: Server, tmp_path) -> None:
    log = lists(seed=1, n_lists=600)
    write_log(str(tmp_path / "log.jsonl"), log)
    expected = replay(str(tmp_path / "log.jsonl"))
    sent = log + [closing_event(log)]

    with Collector(server.grpc_addr, batch_size=64, linger=NEVER_S) as client:
        assert all(client.send(event) for event in sent)
        assert client.flush(timeout=PATIENCE_S)
        stats = client.stats()

    assert (stats.queued, stats.sent, stats.accepted, stats.dropped, stats.rejected, stats.pending) == \
        (len(sent), len(sent), len(sent), 0, {}, 0)
    assert stats.batches == batches_of(len(sent), 64)
    assert (stats.resent_batches, stats.stream_failures) == (0, 0)
    with Evaluation(server.grpc_addr) as evaluation:
        assert_report_matches(evaluation.get_metrics(), expected)
    assert expected["counters"]["credited"] > 100 and len(expected["groups"]) == 4
    scraped = server.scrape()
    assert sample(scraped, "rankwatch_events_received_total") == len(sent)
    assert sample(scraped, "rankwatch_events_accepted_total") == len(sent)
    for group in expected["groups"]:
        labels = {"model": group["model"], "surface": group["surface"]}
        assert sample(scraped, "rankwatch_lists_finalized_total", **labels) == group["lists"]
        assert sample(scraped, "rankwatch_list_ndcg_count", k="10", **labels) == group["lists"]


def test_batches_leave_after_linger_without_a_flush(server: Server) -> None:
    client = Collector(server.grpc_addr, batch_size=1000, linger=0.05)
    for user in ("u1", "u2", "u3"):
        client.impression(user_id=user, items=["a", "b"])
    wait_until(lambda: client.stats().accepted == 3, "the lingering batches' acks")
    assert 1 <= client.stats().batches <= 3  # one, unless a pause of the machine split them
    assert received(server) == 3
    assert client.close(timeout=PATIENCE_S)


def test_rejected_events_reach_the_callback_with_their_reason(server: Server, tmp_path) -> None:
    heard: List[RejectedEvent] = []
    bad = {
        "unknown_type": events.interaction(user_id="u1", item_id="a", type="clik", time=START),
        "empty_item_ids": unchecked(events.impression(user_id="u1", items=["a"], request_id="r-empty", time=START),
                                    item_ids=[]),
        "duplicate_item_id": events.impression(user_id="u1", items=["a", "b", "a"], time=START),
        "invalid_grade": unchecked(events.interaction(user_id="u1", item_id="a", time=START), grade=-1.0),
        "missing_user_id": events.impression(user_id="", items=["a"], time=START),
    }
    good = lists(seed=2, n_lists=40)
    sent = good[:20] + list(bad.values()) + good[20:]
    write_log(str(tmp_path / "log.jsonl"), sent)
    expected = replay(str(tmp_path / "log.jsonl"))

    with Collector(server.grpc_addr, batch_size=7, linger=NEVER_S, on_rejection=heard.append) as client:
        for event in sent + [closing_event(sent)]:
            client.send(event)
    stats = client.stats()

    assert sorted(r.reason for r in heard) == sorted(bad)
    for rejection in heard:
        assert rejection.event == bad[rejection.reason]
        assert rejection.message
    assert [r.message for r in heard if r.reason == "unknown_type"][0].startswith('unknown interaction type "clik"')
    assert stats.rejected == {reason: 1 for reason in bad}
    assert stats.accepted == len(sent) + 1 - len(bad) and stats.pending == 0
    assert by_label(server.scrape(), "rankwatch_events_rejected_total", "reason") == {reason: 1 for reason in bad}
    with Evaluation(server.grpc_addr) as evaluation:
        assert_report_matches(evaluation.get_metrics(), expected)


def test_a_full_queue_drops_and_counts_instead_of_blocking(server: Server) -> None:
    client = Collector(server.grpc_addr, queue_size=10, batch_size=1000, linger=NEVER_S)
    queued = [client.impression(user_id=f"u{i}", items=["a"], time=START) for i in range(25)]
    assert len(set(queued)) == 25  # every call returns its own generated request_id
    stats = client.stats()
    assert (stats.queued, stats.dropped, stats.pending) == (10, 15, 10)
    assert client.flush(timeout=PATIENCE_S)
    assert client.stats().accepted == 10
    assert received(server) == 10
    assert client.close(timeout=PATIENCE_S)


def test_close_sends_what_is_queued_and_refuses_more(server: Server) -> None:
    with Collector(server.grpc_addr, batch_size=1000, linger=NEVER_S) as client:
        request_id = client.impression(user_id="u1", items=["a", "b", "c"], model="v7", surface="home")
        event_id = client.interaction(user_id="u1", item_id="b", request_id=request_id)
    assert client.stats().accepted == 2 and client.stats().pending == 0
    assert received(server) == 2
    assert client.send(events.impression(user_id="u1", items=["a"])) is False
    assert client.stats().dropped == 1
    assert client.close(timeout=PATIENCE_S)  # a second close is harmless
    assert request_id != event_id


def test_a_stream_broken_before_its_acks_is_resent_and_counted_once(server: Server, tmp_path) -> None:
    log = lists(seed=3, n_lists=300)
    first, second = log[:-200], log[-200:]  # the second part fits in HTTP/2's first flow-control window
    proxy = Proxy(server.grpc_addr)
    client = Collector(proxy.address, batch_size=25, linger=NEVER_S, max_inflight_batches=64)
    for event in first:
        client.send(event)
    assert client.flush(timeout=PATIENCE_S)

    proxy.swallow_replies()
    for event in second:
        client.send(event)
    assert not client.flush(timeout=0)  # the last partial batch leaves too; no ack comes back
    wait_until(lambda: received(server) == len(log), "the server to receive every batch")
    assert client.stats().accepted == len(first)
    proxy.cut()
    wait_until(lambda: client.stats().stream_failures == 1, "the client to see the broken stream")
    closing = closing_event(log)
    client.send(closing)
    assert client.flush(timeout=PATIENCE_S)
    stats = client.stats()
    client.close(timeout=PATIENCE_S)
    proxy.close()

    assert stats.stream_failures >= 1
    assert (stats.resent_events, stats.resent_batches) == (len(second), batches_of(len(second), 25))
    assert stats.accepted == len(log) + 1 and stats.pending == 0
    # The server saw the second part twice: the replay of exactly that is its report,
    write_log(str(tmp_path / "seen.jsonl"), first + second + second)
    with Evaluation(server.grpc_addr) as evaluation:
        report = evaluation.get_metrics()
    assert_report_matches(report, replay(str(tmp_path / "seen.jsonl")))
    assert received(server) == len(log) + len(second) + 1
    # and the resend changed no list: the metrics are those of the log sent once.
    write_log(str(tmp_path / "log.jsonl"), log)
    once = replay(str(tmp_path / "log.jsonl"))
    assert_groups_match(report["groups"], once["groups"])
    assert report["counters"]["duplicates"]["impressions"] > once["counters"]["duplicates"]["impressions"]


def test_a_server_restarted_mid_stream_loses_nothing(state_server: Server, tmp_path) -> None:
    log = lists(seed=4, n_lists=400)
    first, middle, last = log[:250], log[250:400], log[400:]
    client = Collector(state_server.grpc_addr, batch_size=20, linger=NEVER_S)
    for event in first:
        client.send(event)
    assert client.flush(timeout=PATIENCE_S)

    # Batches sent to a stopped server wait unacknowledged; SIGTERM then drains
    # and acks what the server applied, ends the stream and saves the state.
    state_server.signal(signal.SIGSTOP)
    for event in middle:
        client.send(event)
    assert not client.flush(timeout=0)
    wait_until(lambda: client.stats().sent == len(first) + len(middle), "the sender to send every batch")
    state_server.signal(signal.SIGTERM)
    state_server.signal(signal.SIGCONT)
    assert state_server.process is not None
    assert state_server.process.wait(timeout=PATIENCE_S) == 0
    state_server.restart()
    for event in last + [closing_event(log)]:
        client.send(event)
    assert client.flush(timeout=PATIENCE_S)
    stats = client.stats()
    client.close(timeout=PATIENCE_S)

    assert stats.stream_failures >= 1
    assert stats.accepted == len(log) + 1 and stats.pending == 0 and stats.resent_events <= len(middle)
    write_log(str(tmp_path / "log.jsonl"), log)
    expected = replay(str(tmp_path / "log.jsonl"))
    with Evaluation(state_server.grpc_addr) as evaluation:
        report = evaluation.get_metrics()
    # Only unacknowledged batches were resent: a resent batch the server had
    # applied before it stopped counts its events as duplicates, nothing else.
    duplicates = report["counters"]["duplicates"]
    resent_duplicates = duplicates["impressions"] + duplicates["interactions"] - sum(
        expected["counters"]["duplicates"].values())
    assert 0 <= resent_duplicates <= stats.resent_events
    report["counters"]["duplicates"] = expected["counters"]["duplicates"]
    assert_report_matches(report, expected)


def test_evaluation_reads_a_window(server: Server) -> None:
    with Collector(server.grpc_addr) as client:
        client.impression(user_id="u1", items=["a", "b"], model="v7", surface="home")
    with Evaluation(server.grpc_addr) as evaluation:
        report = evaluation.get_metrics(window="5m")
    assert report["window"] == "5m"
    assert report["counters"]["impressions"] == 1
    assert report["config"]["k"] == [1, 5, 10]


def test_a_batch_over_the_servers_limit_is_split_and_an_event_too_large_given_up(
        tmp_path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="rankwatch")
    server = Server(["--max-message-size", "4096"])
    try:
        log = lists(seed=6, n_lists=40)
        too_large = events.impression(user_id="u-big", items=[f"item-{i:06d}" for i in range(400)], time=START)
        assert too_large.ByteSize() > 4096 and sum(e.ByteSize() for e in log) > 2 * 4096
        heard: List[RejectedEvent] = []
        client = Collector(server.grpc_addr, batch_size=1000, linger=NEVER_S, on_rejection=heard.append)
        for event in log[:30] + [too_large] + log[30:] + [closing_event(log)]:
            client.send(event)
        flushed = client.flush(timeout=PATIENCE_S)
        stats = client.stats()
        client.close(timeout=0)
        assert flushed, stats

        assert (stats.failed, stats.accepted, stats.pending) == (1, len(log) + 1, 0)
        assert stats.stream_failures >= 2
        assert [(r.event, r.reason) for r in heard] == [(too_large, "resource_exhausted")]
        # The halves of a refused batch keep its time sent: they had been
        # taken for batches waiting since the machine started.
        assert not [r for r in caplog.records if "acknowledged nothing" in r.getMessage()]
        write_log(str(tmp_path / "log.jsonl"), log)
        with Evaluation(server.grpc_addr) as evaluation:
            assert_report_matches(evaluation.get_metrics(), replay(str(tmp_path / "log.jsonl")))
    finally:
        server.kill()


def test_a_report_past_grpcs_usual_4_mib_is_read_whole() -> None:
    # 1,000 groups of 16 cutoffs, each compared with a control: some 20 MB.
    server = Server(["--k", ",".join(str(k) for k in range(1, 17)), "--control-model", "model-0000"])
    try:
        log = [events.impression(user_id=f"u{i}", items=["a", "b"], model=f"model-{i:04d}", time=START)
               for i in range(1000)]
        with Collector(server.grpc_addr) as client:
            for event in log + [closing_event(log)]:
                client.send(event)
        with Evaluation(server.grpc_addr) as evaluation:
            report = evaluation.get_metrics()
        assert len(report["groups"]) == 1000
    finally:
        server.kill()


def test_events_met_by_a_full_budget_of_messages_begun_wait_and_are_sent_once_it_frees(
        tmp_path, caplog: pytest.LogCaptureFixture) -> None:
    # Another connection holds all but 5.5 KB of the budget every call
    # shares, and each event spans more than one 16 KB frame, so it is held
    # as it arrives: the client had taken the refusal for a message too large
    # and given every event up.
    caplog.set_level(logging.WARNING, logger="rankwatch")
    server = Server(["--max-message-size", "65536", "--max-partial-message-bytes", "65536"])
    held = UnfinishedMessage(server.grpc_addr, declared=65000, held=60000)
    try:
        items = [f"item-{j:05d}-of-a-long-catalogue" for j in range(1000)]  # the most a list holds
        log = [events.impression(user_id=f"u{i}", items=items, time=START + datetime.timedelta(seconds=i))
               for i in range(6)]
        assert min(e.ByteSize() for e in log) > 16384 + 65536 - 60000
        heard: List[RejectedEvent] = []
        client = Collector(server.grpc_addr, batch_size=1000, max_batch_bytes=50_000, linger=NEVER_S,
                           on_rejection=heard.append)
        for event in log + [closing_event(log)]:
            client.send(event)
        client.flush(timeout=0)
        # Enough refusals for the old reading to have given an event up.
        wait_until(lambda: client.stats().stream_failures >= 6, "the client to meet the full budget")
        assert sample(server.scrape(), "rankwatch_partial_messages_refused_total") >= 6
        assert (client.stats().failed, heard) == (0, [])
        held.close()
        flushed = client.flush(timeout=PATIENCE_S)
        stats = client.stats()
        client.close(timeout=0)
        assert flushed, stats
        assert (stats.failed, stats.accepted, stats.pending, heard) == (0, len(log) + 1, 0, [])
        # The server took each stream and refused its message: one outage, told
        # once it acknowledged again, not a reconnection per stream.
        reconnected = [r.getMessage() for r in caplog.records if "reconnected" in r.getMessage()]
        assert len(reconnected) == 1, reconnected
        assert int(reconnected[0].split(" after ")[1].split(" ")[0]) == stats.stream_failures >= 6
        write_log(str(tmp_path / "log.jsonl"), log)
        with Evaluation(server.grpc_addr) as evaluation:
            assert_report_matches(evaluation.get_metrics(), replay(str(tmp_path / "log.jsonl")))
    finally:
        held.close()
        server.kill()


def test_a_stream_the_server_closes_as_idle_is_no_failure_and_opens_again_when_needed(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="rankwatch")
    server = Server(["--ingest-idle-timeout", "1s"])
    try:
        client = Collector(server.grpc_addr, batch_size=1000, linger=NEVER_S)
        client.impression(user_id="u1", items=["a", "b"], time=START)
        assert client.flush(timeout=PATIENCE_S)
        wait_until(lambda: sample(server.scrape(), "rankwatch_ingest_streams") == 0, "the idle stream to close")
        time.sleep(2.5)  # two more idle timeouts, had the client opened a stream again at once
        assert sample(server.scrape(), "rankwatch_ingest_streams") == 0
        client.impression(user_id="u2", items=["a", "b"], time=START)
        assert client.flush(timeout=PATIENCE_S)
        stats = client.stats()
        client.close(timeout=PATIENCE_S)
        assert (stats.accepted, stats.stream_failures, stats.resent_batches) == (2, 0, 0)
        assert received(server) == 2
        assert [r.getMessage() for r in caplog.records] == []
    finally:
        server.kill()
