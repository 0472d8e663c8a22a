"""Every `python` block of the client's README and of the repository's README
runs as pasted, against a real server (or broker) started for it: only the
address in the block is replaced.

A block that sends events makes each of its `collector.impression(` and
`collector.interaction(` calls once, so the server must have received and
accepted exactly that many events.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from typing import List, NamedTuple

import pytest
from conftest import BINARY, REPO, Server, create_topic, sample

CLIENT_README = os.path.join(REPO, "clients", "python", "README.md")
READMES = [CLIENT_README, os.path.join(REPO, "README.md")]
#: The addresses the blocks are written with.
SERVER_ADDRESS = "127.0.0.1:50051"
BROKER_ADDRESS = "broker-1:9092,broker-2:9092"
PATIENCE_S = 60.0


class Block(NamedTuple):
    """A `python` block of a README: where it is, and its code."""

    path: str
    line: int
    code: str

    @property
    def name(self) -> str:
        return f"{os.path.relpath(self.path, REPO)}:{self.line}"

    @property
    def calls(self) -> int:
        """The events the block sends: one per call site."""
        return len(re.findall(r"\bcollector\.(?:impression|interaction)\(", self.code))


def python_blocks(path: str) -> List[Block]:
    """The fenced `python` blocks of the Markdown file at `path`."""
    with open(path, encoding="utf-8") as readme:
        text = readme.read()
    return [Block(path, text.count("\n", 0, match.start()) + 1, match.group(1))
            for match in re.finditer(r"^```python\n(.*?)^```$", text, re.DOTALL | re.MULTILINE)]


BLOCKS = [block for path in READMES if os.path.exists(path) for block in python_blocks(path)]


def run(code: str) -> "subprocess.CompletedProcess[str]":
    """Runs `code` in a fresh interpreter, as a user would run the pasted block."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=PATIENCE_S,
                          env={**os.environ, "RANKWATCH_BINARY": BINARY})
    assert done.returncode == 0, f"exit {done.returncode}:\n{done.stderr[-3000:]}"
    return done


def test_the_readmes_have_the_blocks_this_test_expects() -> None:
    client_blocks = [block for block in BLOCKS if block.path == CLIENT_README]
    assert len(client_blocks) == 5
    assert sum(SERVER_ADDRESS in block.code for block in BLOCKS) >= 4
    assert sum(BROKER_ADDRESS in block.code for block in BLOCKS) == 1


@pytest.mark.parametrize("block", [b for b in BLOCKS if SERVER_ADDRESS in b.code], ids=lambda b: b.name)
def test_a_block_for_a_server_runs_and_the_server_gets_its_events(block: Block, server: Server) -> None:
    run(block.code.replace(SERVER_ADDRESS, server.grpc_addr))
    scraped = server.scrape()
    received = sample(scraped, "rankwatch_events_received_total")
    assert received == block.calls
    assert sample(scraped, "rankwatch_events_accepted_total") == received


@pytest.mark.parametrize("block", [b for b in BLOCKS if SERVER_ADDRESS not in b.code and BROKER_ADDRESS not in b.code],
                         ids=lambda b: b.name)
def test_a_block_on_its_own_runs(block: Block) -> None:
    done = run(block.code)
    if "rankwatch.replay(" in block.code:
        # The result the block announces in its last comment.
        announced = block.code.rstrip().rsplit("# ", 1)[1]
        assert done.stdout.strip() == announced


@pytest.mark.parametrize("block", [b for b in BLOCKS if BROKER_ADDRESS in b.code], ids=lambda b: b.name)
def test_a_block_for_a_broker_runs_and_the_topic_gets_its_events(block: Block, broker: str) -> None:
    kafka = pytest.importorskip("confluent_kafka")
    create_topic(broker, "rankwatch.events", 1)
    run(block.code.replace(BROKER_ADDRESS, broker))
    consumer = kafka.Consumer({"bootstrap.servers": broker, "group.id": "readme", "auto.offset.reset": "earliest"})
    consumer.subscribe(["rankwatch.events"])
    records = []
    deadline = time.monotonic() + PATIENCE_S
    while len(records) < block.calls:
        assert time.monotonic() < deadline, f"read {len(records)} of {block.calls} records"
        message = consumer.poll(1.0)
        if message is not None and message.error() is None:
            records.append(message)
    consumer.close()
    assert [record.key() for record in records] == [b"user-1"] * block.calls
