"""`KafkaCollector`: records keyed by user carrying serialized events, read back
from a real Kafka-compatible broker (tansu) when one is installed."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import time
from typing import Dict, List

import pytest

kafka = pytest.importorskip("confluent_kafka", reason="the kafka extra is not installed: pip install './clients/python[kafka]'")

from conftest import create_topic, free_port  # noqa: E402
from traffic import lists  # noqa: E402

from rankwatch import KafkaCollector, RejectedEvent  # noqa: E402
from rankwatch.v1 import rankwatch_pb2 as pb  # noqa: E402

PATIENCE_S = 60.0


def test_records_that_no_broker_takes_are_counted_reported_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="rankwatch")
    heard: List[RejectedEvent] = []
    client = KafkaCollector(f"127.0.0.1:{free_port()}", queue_size=3, on_rejection=heard.append,
                            config={"message.timeout.ms": 500, "enable.idempotence": False})
    sent = [client.impression(user_id=f"u{i}", items=["a"]) for i in range(5)]
    stats = client.stats()
    assert (stats.queued, stats.dropped) == (3, 2)
    client.close(timeout=PATIENCE_S)
    stats = client.stats()
    assert (stats.accepted, stats.failed, stats.pending) == (0, 3, 0)
    assert sorted(r.event.impression.request_id for r in heard) == sorted(sent[:3])
    assert {r.reason for r in heard} == {"delivery_failed"}
    assert client.send(pb.Event()) is False
    # One line for the first record not delivered, the two others counted at close.
    messages = [r.getMessage() for r in caplog.records if r.name == "rankwatch.kafka"]
    undelivered = [m for m in messages if "not delivered" in m or "undelivered" in m]
    assert undelivered[0].startswith("rankwatch record not delivered to rankwatch.events: ")
    assert undelivered[1:] == [
        "rankwatch: 2 more undelivered records (_MSG_TIMED_OUT) not logged since the last such warning"]
    assert all(r.levelno == logging.WARNING for r in caplog.records if r.name == "rankwatch.kafka")


def test_records_are_keyed_by_user_and_carry_the_event(broker: str) -> None:
    topic, partitions = "rankwatch.events", 3
    create_topic(broker, topic, partitions)
    log = lists(seed=5, n_lists=100)

    with KafkaCollector(broker, topic) as client:
        assert all(client.send(event) for event in log)
        assert client.flush(timeout=PATIENCE_S)
        stats = client.stats()
    assert (stats.queued, stats.accepted, stats.failed, stats.dropped) == (len(log), len(log), 0, 0)

    consumer = kafka.Consumer({"bootstrap.servers": broker, "group.id": "rankwatch-test",
                               "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    records: Dict[int, List[kafka.Message]] = {}
    deadline = time.monotonic() + PATIENCE_S
    while sum(map(len, records.values())) < len(log):
        assert time.monotonic() < deadline, f"read {sum(map(len, records.values()))} of {len(log)} records"
        message = consumer.poll(1.0)
        if message is None:
            continue
        assert message.error() is None, message.error()
        records.setdefault(message.partition(), []).append(message)
    consumer.close()

    users = {}
    for partition, messages in records.items():
        for message in messages:
            event = pb.Event.FromString(message.value())
            user = getattr(event, event.WhichOneof("kind")).user_id
            assert message.key() == user.encode("utf-8")
            assert users.setdefault(user, partition) == partition  # one user, one partition
            assert partition == murmur2_partition(message.key(), partitions)
    # Per partition, records keep the order the events were sent in.
    for messages in records.values():
        got = [pb.Event.FromString(m.value()) for m in messages]
        assert got == [e for e in log if murmur2_partition(user_key(e), partitions) == messages[0].partition()]


def user_key(event: pb.Event) -> bytes:
    """The record key of `event`."""
    return getattr(event, event.WhichOneof("kind")).user_id.encode("utf-8")


def murmur2_partition(key: bytes, partitions: int) -> int:
    """The partition the Java client's default partitioner picks for `key`."""
    seed, m, mask = 0x9747B28C, 0x5BD1E995, 0xFFFFFFFF
    h = (seed ^ len(key)) & mask
    whole = len(key) - len(key) % 4
    for i in range(0, whole, 4):
        k = int.from_bytes(key[i:i + 4], "little")
        k = (k * m) & mask
        k ^= k >> 24
        k = (k * m) & mask
        h = ((h * m) & mask) ^ k
    tail = key[whole:]
    if len(tail) >= 3:
        h ^= tail[2] << 16
    if len(tail) >= 2:
        h ^= tail[1] << 8
    if tail:
        h ^= tail[0]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return (h & 0x7FFFFFFF) % partitions


def test_flush_or_close_from_on_rejection_raises_and_the_process_lives() -> None:
    script = textwrap.dedent(f"""
        import sys
        from rankwatch import KafkaCollector
        raised = []

        def on_rejection(_rejected):
            for method in (client.flush, client.close):
                try:
                    method(timeout=1)
                except RuntimeError as error:
                    raised.append("on_rejection" in str(error))

        client = KafkaCollector("127.0.0.1:{free_port()}", on_rejection=on_rejection,
                                config={{"message.timeout.ms": 300, "enable.idempotence": False}})
        client.impression(user_id="u", items=["a"])
        client.close(timeout=30)
        print("raised", raised, flush=True)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=PATIENCE_S)
    assert done.returncode == 0 and "raised [True, True]" in done.stdout, done.stdout + done.stderr


def test_a_partition_stopped_by_a_record_it_cannot_read_is_said_and_exported(broker: str) -> None:
    # zstd, which this build's librdkafka cannot decompress: the partition
    # stops at the batch, and had stopped with no log line and no series.
    from conftest import Server, sample

    create_topic(broker, "rankwatch.events", 1)
    server = Server(["--kafka-mode", "consume", "--kafka-brokers", broker, "--kafka-stall-timeout", "2s",
                     "--shutdown-linger", "0s"])
    try:
        producer = kafka.Producer({"bootstrap.servers": broker, "compression.type": "zstd"})
        for event in lists(seed=3, n_lists=20):
            producer.produce("rankwatch.events", key=b"u", value=event.SerializeToString())
        assert producer.flush(PATIENCE_S) == 0
        deadline = time.monotonic() + PATIENCE_S
        while sample(server.scrape(), "rankwatch_kafka_stalled_partitions") < 1:
            assert time.monotonic() < deadline, server.tail()
            time.sleep(0.2)
        metrics = server.scrape()
        assert sample(metrics, "rankwatch_kafka_lag_records") > 0
        assert sample(metrics, "rankwatch_events_received_total") == 0
        assert "PARTITION STALLED" in server.tail() and "zstd" in server.tail()
    finally:
        server.kill()


def test_zstd_compression_is_refused_at_construction() -> None:
    for key in ("compression.type", "compression.codec"):
        with pytest.raises(ValueError, match="zstd.*gzip, snappy or lz4"):
            KafkaCollector("127.0.0.1:9", config={key: "zstd"})


def test_a_kafka_collector_dropped_without_close_delivers_its_records_and_stops(
    broker: str, caplog: pytest.LogCaptureFixture
) -> None:
    import gc
    import threading

    create_topic(broker, "rankwatch.events", 1)
    with caplog.at_level(logging.WARNING, logger="rankwatch"):
        client = KafkaCollector(broker, linger=5.0)  # the records wait in the producer
        for i in range(10):
            client.impression(user_id=f"u{i}", items=["a"])
        del client
        gc.collect()
        deadline = time.monotonic() + PATIENCE_S
        while any(t.name.startswith("rankwatch-kafka") for t in threading.enumerate()):
            assert time.monotonic() < deadline, [t.name for t in threading.enumerate()]
            time.sleep(0.05)
    assert any("dropped without close()" in r.getMessage() for r in caplog.records), caplog.text
    consumer = kafka.Consumer({"bootstrap.servers": broker, "group.id": "rankwatch-test",
                               "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe(["rankwatch.events"])
    read = 0
    deadline = time.monotonic() + PATIENCE_S
    while read < 10:
        assert time.monotonic() < deadline, f"read {read} of 10 records"
        message = consumer.poll(1.0)
        read += message is not None and message.error() is None
    consumer.close()
