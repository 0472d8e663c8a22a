"""`KafkaCollector`: produces events straight to the Kafka topic of fleet mode
(docs/SPEC.md §10), for serving systems that already run Kafka.

Each event becomes one record: key = its `user_id` in UTF-8, value = the
serialized `rankwatch.v1.Event`. librdkafka batches, retries and keeps order
per partition (with idempotence on); this module counts what it was given and
what the broker took. Needs the `kafka` extra (confluent-kafka).

Records the broker did not take and brokers that cannot be reached are
logged to the `rankwatch.kafka` logger at WARNING, at most once per error per
`log_interval`; librdkafka's own log goes to `rankwatch.kafka.librdkafka`.
A collector dropped without `close` flushes its records and stops in the
background, with a warning.
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import Any, Dict, Mapping, Optional

try:
    from confluent_kafka import KafkaError, KafkaException, Message, Producer
except ImportError as missing:  # pragma: no cover - depends on the installed extras
    raise ImportError("KafkaCollector needs confluent-kafka: pip install 'rankwatch[kafka]'") from missing

from rankwatch.events import user_of
from rankwatch.sink import EXIT_TIMEOUT_S, CallbackGuard, EventSink, require_event, watch_exit, weakly
from rankwatch.stats import RejectedEvent, RejectionCallback, SinkStats
from rankwatch.throttle import DEFAULT_INTERVAL_S, Throttle
from rankwatch.v1 import rankwatch_pb2 as pb

logger = logging.getLogger(__name__)

#: The topic rankwatch consumes by default (setting `kafka_topic`).
DEFAULT_TOPIC = "rankwatch.events"
#: How often the background thread serves delivery reports.
POLL_INTERVAL_S = 0.1


class KafkaCollector(EventSink, CallbackGuard):
    """Produces events to a Kafka topic keyed by user, in the background.

    ```
    with KafkaCollector("broker-1:9092") as rankwatch:
        rankwatch.impression(user_id="u1", items=["a", "b"], model="v7", surface="home")
    ```
    """

    def __init__(
        self,
        brokers: str,
        topic: str = DEFAULT_TOPIC,
        *,
        queue_size: int = 100_000,
        linger: float = 0.05,
        on_rejection: Optional[RejectionCallback] = None,
        config: Optional[Mapping[str, Any]] = None,
        log_interval: float = DEFAULT_INTERVAL_S,
    ) -> None:
        """A producer to `topic` on `brokers` (`host:port,…`).

        At most `queue_size` records wait in the producer (past that an event
        is dropped and counted); a batch leaves at the latest `linger` seconds
        after its first record. `on_rejection` hears every record the broker
        did not take (reason `delivery_failed`). `config` adds or overrides
        librdkafka settings (TLS, SASL, acks, …; `compression.type=zstd` is
        refused: rankwatch cannot read it). Warnings of one error are
        logged at most once per `log_interval` seconds.
        """
        settings: Dict[str, Any] = {
            "bootstrap.servers": brokers,
            # The Java client's default: a user's events land on the same
            # partition whichever client produced them.
            "partitioner": "murmur2_random",
            "enable.idempotence": True,
            "linger.ms": linger * 1000,
            "queue.buffering.max.messages": queue_size,
            "client.id": "rankwatch-python",
            # A misspelled topic must fail, not be created by a broker that
            # auto-creates topics with its default partition count.
            "allow.auto.create.topics": False,
            "error_cb": weakly(self._error),
            "logger": logging.getLogger(f"{__name__}.librdkafka"),
        }
        settings.update(config or {})
        for key in ("compression.type", "compression.codec"):
            if str(settings.get(key, "")).lower() == "zstd":
                raise ValueError(f"{key}=zstd: rankwatch reads records compressed with gzip, snappy or lz4, or not at "
                                 "all, and a zstd batch stops its partition; choose one of those")
        self._topic = topic
        self._on_rejection = on_rejection
        self._throttle = Throttle(log_interval)
        self._producer = Producer(settings)
        self._counts = threading.Lock()
        self._queued = 0
        self._dropped = 0
        self._accepted = 0
        self._failed = 0
        self._closed = threading.Event()
        # The producer and the poller hold the collector weakly, so that one
        # dropped without close can be collected and its records flushed.
        self._on_delivery = weakly(self._delivered)
        self._poller = threading.Thread(target=_serve_reports, args=(self._producer, self._closed),
                                        name="rankwatch-kafka", daemon=True)
        self._poller.start()
        weakref.finalize(self, _abandon, self._producer, self._closed).atexit = False
        watch_exit(self)

    def send(self, event: pb.Event) -> bool:
        """Queues one event as a record; never blocks. Returns `False` when the
        producer's queue is full (or the client closed) and it was dropped.
        Anything but a `rankwatch.v1.Event` raises `TypeError`."""
        require_event(event)
        if self._closed.is_set():
            return self._drop()
        try:
            self._producer.produce(
                self._topic,
                key=user_of(event).encode("utf-8"),
                value=event.SerializeToString(),
                on_delivery=self._on_delivery,
            )
        except (BufferError, KafkaException):
            return self._drop()
        with self._counts:
            self._queued += 1
        return True

    def flush(self, timeout: Optional[float] = None) -> bool:
        """Waits until the broker has taken (or refused) every queued record;
        returns `False` if `timeout` seconds passed first. Called from
        `on_rejection`, which runs while delivery reports are served, it
        raises `RuntimeError` (librdkafka would abort the process)."""
        self._refuse_in_callback("flush")
        left = self._producer.flush(-1 if timeout is None else timeout)
        return left == 0

    def close(self, timeout: Optional[float] = None) -> bool:
        """Flushes, then stops the background thread. Returns `False` if
        records were still undelivered after `timeout` seconds, and logs
        them. Called from `on_rejection`, it raises `RuntimeError`."""
        self._refuse_in_callback("close")
        watch_exit(self, False)
        self._closed.set()
        done = self.flush(timeout)
        self._poller.join()
        if not done:
            logger.warning("rankwatch gave up %d record(s) not delivered within close(timeout=%s)",
                           self.stats().pending, timeout)
        self._throttle.warn_left(logger)
        return done

    def stats(self) -> SinkStats:
        """A snapshot of the counters (`accepted`: records the broker took)."""
        with self._counts:
            return SinkStats(
                queued=self._queued,
                dropped=self._dropped,
                sent=self._queued,
                accepted=self._accepted,
                failed=self._failed,
            )

    def _error(self, error: KafkaError) -> None:
        """Logs an error of the producer itself, such as no broker reachable."""
        self._throttle.warn(logger, f"producer errors ({error.name()})", "rankwatch Kafka producer: %s", error.str())

    def _drop(self) -> bool:
        """Counts and logs (throttled) an event that was not queued; returns `False` for `send`."""
        with self._counts:
            self._dropped += 1
        reason = "sent after close()" if self._closed.is_set() else "the producer's queue is full (queue_size)"
        self._throttle.warn(logger, "drops", "rankwatch dropped an event: %s", reason)
        return False

    def _delivered(self, error: Optional[KafkaError], message: Message) -> None:
        """Counts one delivery report, and hands a failure to the callback."""
        with self._counts:
            if error is None:
                self._accepted += 1
                return
            self._failed += 1
        self._throttle.warn(logger, f"undelivered records ({error.name()})",
                            "rankwatch record not delivered to %s: %s", self._topic, error.str())
        if self._on_rejection is not None:
            self._call_back(RejectedEvent(pb.Event.FromString(message.value()), "delivery_failed", str(error)), logger)


def _serve_reports(producer: Producer, closed: threading.Event) -> None:
    """Serves delivery reports until the client closes."""
    while not closed.is_set():
        producer.poll(POLL_INTERVAL_S)


def _abandon(producer: Producer, closed: threading.Event) -> None:
    """Flushes in the background what a `KafkaCollector` dropped without
    `close` leaves, for up to `EXIT_TIMEOUT_S`, then stops its poller (this
    runs wherever the garbage collector found it)."""
    if closed.is_set():
        return
    logger.warning("rankwatch: a KafkaCollector was dropped without close(); its %d undelivered record(s) are "
                   "flushed in the background, then it stops. Keep one per process, and close it at shutdown",
                   len(producer))

    def finish() -> None:
        producer.flush(EXIT_TIMEOUT_S)
        closed.set()

    threading.Thread(target=finish, name="rankwatch-kafka-close", daemon=True).start()
