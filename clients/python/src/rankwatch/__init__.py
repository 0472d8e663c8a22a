"""Python client of rankwatch, the evaluation sidecar for online recommenders.

`Collector` streams impressions and interactions to `rankwatch serve` over
gRPC without ever blocking the caller; `KafkaCollector` (extra `kafka`)
produces them to the Kafka topic of fleet mode instead; `Evaluation` reads the
server's report; `replay` evaluates recorded events offline with the same
engine. Events can also be built on their own with `rankwatch.events`, and
lists merged from several rankers with `rankwatch.interleave.team_draft`.

The client logs under the `rankwatch` logger (`rankwatch.client`,
`rankwatch.kafka`) and adds no handler of its own beyond a `NullHandler`:
its warnings appear wherever the application's logging sends them.
"""

import logging

from rankwatch import interleave
from rankwatch.client import Collector
from rankwatch.evaluation import Evaluation
from rankwatch.offline import ReplayError, replay
from rankwatch.sink import EventSink
from rankwatch.stats import RejectedEvent, SinkStats

logging.getLogger(__name__).addHandler(logging.NullHandler())

__all__ = [
    "Collector",
    "Evaluation",
    "EventSink",
    "KafkaCollector",
    "RejectedEvent",
    "ReplayError",
    "SinkStats",
    "interleave",
    "replay",
]


def __getattr__(name: str) -> object:
    """Loads `KafkaCollector` on first use, so that confluent-kafka stays optional."""
    if name == "KafkaCollector":
        from rankwatch.kafka import KafkaCollector

        return KafkaCollector
    raise AttributeError(f"module 'rankwatch' has no attribute {name!r}")
