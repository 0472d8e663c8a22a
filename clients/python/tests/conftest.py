"""Fixtures: a real `rankwatch serve` on ephemeral loopback ports, and its replay.

The binary is `RANKWATCH_BINARY`, or the repository's `target/release/rankwatch`
(`cargo build --release --locked --bins`). Servers run with
`--wall-clock-advance false`, so they follow the replay's rules exactly.
A Kafka-compatible broker (tansu, `tests/install-broker.sh`) runs for the
tests that need one, which are skipped without it.
"""

from __future__ import annotations

import collections
import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request
from typing import Deque, Dict, Iterator, List, Optional, Tuple

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
BINARY = os.environ.get("RANKWATCH_BINARY", os.path.join(REPO, "target", "release", "rankwatch"))
K = "1,5,10"
START_TIMEOUT_S = 30
STOP_TIMEOUT_S = 30
TANSU = os.environ.get("RANKWATCH_TANSU", os.path.expanduser("~/.cache/rankwatch/tansu-0.6.0/bin/tansu"))

#: A Prometheus sample: name and sorted label pairs.
Series = Tuple[str, Tuple[Tuple[str, str], ...]]


class Server:
    """A `rankwatch serve` process; `restart` brings it back on the same gRPC port."""

    ADDRESSES = re.compile(r"grpc_addr=(\S+).*http_addr=(\S+)")

    def __init__(self, extra_args: List[str]) -> None:
        """Starts the server on ports chosen by the system."""
        self.extra_args = extra_args
        self.log: Deque[str] = collections.deque(maxlen=200)
        self.process: Optional["subprocess.Popen[str]"] = None
        self.grpc_addr, self.http_addr = self._start("127.0.0.1:0")

    def _start(self, grpc_addr: str) -> Tuple[str, str]:
        """Runs the binary and waits for the log line with its addresses."""
        self.process = subprocess.Popen(
            [BINARY, "serve", "--grpc-addr", grpc_addr, "--http-addr", "127.0.0.1:0",
             "--wall-clock-advance", "false", "--k", K, *self.extra_args],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "RANKWATCH_LOG": "info"},
        )
        found: "queue.Queue[Optional[Tuple[str, str]]]" = queue.Queue()
        threading.Thread(target=self._drain, args=(self.process, found), daemon=True).start()
        try:
            addresses = found.get(timeout=START_TIMEOUT_S)
        except queue.Empty:
            addresses = None
        if addresses is None:
            self.kill()
            raise RuntimeError(f"rankwatch serve did not start:\n{self.tail()}")
        return addresses

    def _drain(self, process: "subprocess.Popen[str]", found: "queue.Queue[Optional[Tuple[str, str]]]") -> None:
        """Keeps the server's log, passing on its addresses."""
        assert process.stderr is not None
        for line in process.stderr:
            self.log.append(line.rstrip())
            match = self.ADDRESSES.search(line)
            if match and "rankwatch serving" in line:
                found.put((match.group(1), match.group(2)))
        found.put(None)

    def tail(self) -> str:
        """The last lines the server logged."""
        return "\n".join(self.log)

    def signal(self, number: int) -> None:
        """Sends a signal to the server."""
        assert self.process is not None
        self.process.send_signal(number)

    def terminate(self) -> int:
        """SIGTERM; waits for the exit and returns its code."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=STOP_TIMEOUT_S)

    def restart(self) -> None:
        """Starts the server again on the same gRPC port (a new HTTP port)."""
        self.grpc_addr, self.http_addr = self._start(self.grpc_addr)

    def kill(self) -> None:
        """Kills the server if it still runs."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def scrape(self) -> Dict[Series, float]:
        """GET /metrics, parsed."""
        with urllib.request.urlopen(f"http://{self.http_addr}/metrics", timeout=30) as response:
            return parse_prometheus(response.read().decode())


def parse_prometheus(text: str) -> Dict[Series, float]:
    """The samples of a Prometheus text exposition (labels without escapes suffice here)."""
    sample = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)$")
    series: Dict[Series, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = sample.match(line)
        assert match, f"not a Prometheus sample: {line!r}"
        name, labels, value = match.groups()
        pairs = tuple(sorted(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="([^"]*)"', labels or "")))
        series[(name, pairs)] = float(value)
    return series


def sample(series: Dict[Series, float], name: str, **labels: str) -> float:
    """One sample, 0 when absent (counters with a label appear on first use)."""
    return series.get((name, tuple(sorted(labels.items()))), 0.0)


def by_label(series: Dict[Series, float], name: str, label: str) -> Dict[str, float]:
    """The non-zero samples of `name`, keyed by the value of `label`."""
    return {dict(labels)[label]: value for (n, labels), value in series.items() if n == name and value}


@pytest.fixture
def server() -> Iterator[Server]:
    """A fresh server, killed at the end of the test."""
    started = Server([])
    yield started
    started.kill()


@pytest.fixture
def state_server() -> Iterator[Server]:
    """A fresh server that saves its state to a temporary directory on shutdown."""
    with tempfile.TemporaryDirectory(prefix="rankwatch-state-") as state_dir:
        started = Server(["--state-dir", state_dir])
        yield started
        started.kill()


def replay(events_path: str) -> dict:
    """`rankwatch replay --format json` of a JSON Lines log, with the servers' K."""
    done = subprocess.run([BINARY, "replay", events_path, "--format", "json", "--k", K],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def free_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def broker(tmp_path) -> Iterator[str]:
    """A tansu broker on a loopback port, its storage in memory."""
    kafka = pytest.importorskip("confluent_kafka", reason="the kafka extra is not installed")
    if not os.access(TANSU, os.X_OK) and shutil.which("tansu") is None:
        pytest.skip(f"no Kafka-compatible broker: tansu is not built at {TANSU} (set RANKWATCH_TANSU)")
    binary = TANSU if os.access(TANSU, os.X_OK) else str(shutil.which("tansu"))
    address = f"127.0.0.1:{free_port()}"
    log = tmp_path / "tansu.log"
    process = subprocess.Popen(
        [binary, "broker", "--listener-url", f"tcp://{address}", "--advertised-listener-url", f"tcp://{address}",
         "--storage-engine", "memory://tansu/"],
        stdin=subprocess.DEVNULL, stdout=log.open("w"), stderr=subprocess.STDOUT,
    )
    try:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": address})
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            assert process.poll() is None, f"tansu exited: {log.read_text()[-2000:]}"
            try:
                admin.list_topics(timeout=1)
                break
            except kafka.KafkaException:
                assert time.monotonic() < deadline, "tansu did not answer"
        yield address
    finally:
        process.kill()
        process.wait()


def create_topic(broker: str, topic: str, partitions: int) -> None:
    """Creates `topic` on `broker` with `partitions` partitions."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(timeout=START_TIMEOUT_S)
