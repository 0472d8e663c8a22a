#!/usr/bin/env python3
"""An independent client of `rankwatch serve`, checked against `rankwatch replay`.

For each of several seeded random event logs (written here, in the proto3 JSON
mapping of docs/SPEC.md §2), the expected figures come from `rankwatch replay LOG
--format json`. The same log is then streamed through one `Collector.Ingest`
stream of a fresh `rankwatch serve --wall-clock-advance false` in batches of
random sizes, followed by one closing interaction a day later that moves the
watermark past every list. The acks' rejections, `Evaluation.GetMetrics` and
the `/metrics` scrape must all agree with the replay.

The Python stubs are generated at run time from proto/rankwatch/v1/rankwatch.proto
with grpc_tools.protoc, so this client shares no code with the server.

Run: target/python/bin/python tests/python/check_server.py --binary target/release/rankwatch
"""

import argparse
import collections
import datetime
import importlib
import json
import os
import queue
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import urllib.request

import grpc
from google.protobuf import json_format

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROTO_ROOT = os.path.join(REPO, "proto")
PROTO_FILE = "rankwatch/v1/rankwatch.proto"

K = "3,7,50"
SECOND = 1_000_000_000  # times are held in nanoseconds since 1970
MILLISECOND = 1_000_000
ATTRIBUTION_WINDOW = 300 * SECOND  # the default attribution window A
ALLOWED_LATENESS = 30 * SECOND  # the default allowed lateness L
DAY = 86_400 * SECOND
LOG_START = int(datetime.datetime(2026, 11, 1, 1, 0, tzinfo=datetime.timezone.utc).timestamp()) * SECOND
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
TOLERANCE = 1e-9

# (seed, number of lines) of the logs checked by default.
DEFAULT_LOGS = [(20261101, 3_000), (7_919, 9_000), (424_242, 20_000)]

SERVER_START_TIMEOUT_S = 30
RPC_TIMEOUT_S = 300


class Mismatch(Exception):
    """The server disagrees with the replay (or misbehaves)."""


# --------------------------------------------------------------------------
# Stubs generated from the .proto at run time
# --------------------------------------------------------------------------


def generate_stubs(out_dir):
    """Compiles the rankwatch proto into `out_dir` and returns (pb2, pb2_grpc)."""
    import grpc_tools
    from grpc_tools import protoc

    well_known = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    status = protoc.main([
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{well_known}",
        f"--python_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        os.path.join(PROTO_ROOT, PROTO_FILE),
    ])
    if status != 0:
        raise SystemExit(f"grpc_tools.protoc failed on {PROTO_FILE} (exit {status})")
    # Regular packages, so that these stubs come first even where the rankwatch
    # Python client (a package of the same name) is installed.
    for package in ("rankwatch", os.path.join("rankwatch", "v1")):
        open(os.path.join(out_dir, package, "__init__.py"), "a").close()
    sys.path.insert(0, out_dir)
    return (importlib.import_module("rankwatch.v1.rankwatch_pb2"),
            importlib.import_module("rankwatch.v1.rankwatch_pb2_grpc"))


# --------------------------------------------------------------------------
# The random log generator
# --------------------------------------------------------------------------


SNAKE_CASE = {"requestId": "request_id", "userId": "user_id", "itemIds": "item_ids",
              "eventId": "event_id", "itemId": "item_id"}


class LogGenerator:
    """A seeded generator of realistic, messy event logs.

    The traffic is a sequence of *episodes*: one impression (a ranked list
    shown to a user) and the interactions that follow it. Every line gets an
    arrival time (its event time plus network jitter, or much more for late
    events), and the log is written in arrival order, so events arrive out of
    order and interactions often arrive before their impression. Retries,
    interactions outside the window, for items not in the list or by other
    users, request ids shared by two users, explicit grades and invalid events
    are mixed in. Times are held in nanoseconds and spelled in several RFC 3339
    forms; ids and group names include non-ASCII text, quotes and backslashes.
    """

    MODELS = ["control", "candidate", "v7", 'ranker "β"\\2', ""]
    SURFACES = ["home", "search", "détail/page", ""]
    TYPES = [("click", 0.7), ("add_to_cart", 0.2), ("purchase", 0.1)]

    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.seed = seed
        self.users = [f"user-{seed}-{i}" for i in range(self.rng.randint(15, 50))]
        self.items = [f"item-{i}" for i in range(self.rng.randint(60, 400))] + ["é-item", "item \"q\"", "item-😀"]
        self.user_group = {user: (self.rng.choice(self.MODELS), self.rng.choice(self.SURFACES)) for user in self.users}
        self.mean_gap = self.rng.uniform(0.8, 3.0) * SECOND
        self.lines = []  # (arrival time, line number in creation order, event dict)
        self.recent_requests = collections.deque(maxlen=50)
        self.next_id = 0

    def fresh_id(self, prefix):
        """A new unique id."""
        self.next_id += 1
        return f"{prefix}-{self.seed}-{self.next_id}"

    def emit(self, arrival, event):
        """Queues `event` to arrive at `arrival`."""
        self.lines.append((arrival, len(self.lines), event))

    def event_time(self, t):
        """Rounds most times to whole seconds or milliseconds, so that ties happen."""
        unit = self.rng.choices([SECOND, MILLISECOND, 1], [0.3, 0.5, 0.2])[0]
        return t - t % unit

    def seconds(self, low, high):
        """A random duration between `low` and `high` seconds, in nanoseconds."""
        return self.rng.randint(int(low * SECOND), int(high * SECOND))

    def jitter(self):
        """Network delay between an event and its arrival: mostly seconds, up to tens of seconds."""
        return self.seconds(0, 3) if self.rng.random() < 0.5 else self.seconds(0, 45)

    def generate(self, n_lines):
        """Returns the first `n_lines` JSON lines in arrival order.

        Traffic goes on for half an hour (longer than any arrival delay) after
        `n_lines` events have been made, so the log is cut in mid-flight, with
        lists still open and interactions still on their way.
        """
        now, stop = LOG_START, None
        while stop is None or now < stop:
            if stop is None and len(self.lines) >= n_lines:
                stop = now + 1800 * SECOND
            now += int(self.rng.expovariate(1 / self.mean_gap))
            if self.rng.random() < 0.03:
                self.invalid_event(now)
            else:
                self.episode(self.event_time(now))
        self.lines.sort(key=lambda line: (line[0], line[1]))
        return [self.to_json(event) for _, _, event in self.lines[:n_lines]]

    def spell_time(self, t):
        """`t` (ns since 1970) in RFC 3339: in UTC or at an offset, with 0, 3, 6 or 9 fraction digits."""
        offset_minutes = self.rng.choice([0] * 8 + [60, -300, 330])
        seconds, nanos = divmod(t, SECOND)
        local = EPOCH + datetime.timedelta(seconds=seconds, minutes=offset_minutes)
        text = local.strftime("%Y-%m-%dT%H:%M:%S")
        needed = next(d for d in (0, 3, 6, 9) if nanos % 10 ** (9 - d) == 0)
        digits = max(self.rng.choice([0, 3, 6, 9]), needed)
        if digits:
            text += "." + f"{nanos:09d}"[:digits]
        if offset_minutes == 0:
            return text + "Z"
        sign, minutes = ("+" if offset_minutes > 0 else "-"), abs(offset_minutes)
        return f"{text}{sign}{minutes // 60:02d}:{minutes % 60:02d}"

    def to_json(self, event):
        """One line in the proto3 JSON mapping; some lines use the original field names."""
        snake = self.rng.random() < 0.05
        line = {}
        for kind, body in event.items():
            line[kind] = {SNAKE_CASE.get(key, key) if snake else key: value for key, value in body.items()}
            if isinstance(body.get("time"), int):
                line[kind]["time"] = self.spell_time(body["time"])
        return json.dumps(line, separators=(",", ":"))

    def episode(self, t):
        """One impression at time `t` and what follows it."""
        rng = self.rng
        user = rng.choice(self.users[: max(1, len(self.users) // 3)]) if rng.random() < 0.4 else rng.choice(self.users)
        model, surface = self.user_group[user] if rng.random() < 0.9 else (rng.choice(self.MODELS), rng.choice(self.SURFACES))
        if self.recent_requests and rng.random() < 0.02:  # another user's request id: ids are per user
            request_id = rng.choice(self.recent_requests)
        else:
            request_id = self.fresh_id("req")
        self.recent_requests.append(request_id)
        items = rng.sample(self.items, rng.randint(1, 30))
        impression = {"requestId": request_id, "userId": user, "itemIds": items, "time": t}
        if model or rng.random() < 0.5:
            impression["model"] = model
        if surface or rng.random() < 0.5:
            impression["surface"] = surface
        roll = rng.random()
        if roll < 0.04:  # late: its window closed before it arrived
            arrival = t + ATTRIBUTION_WINDOW + ALLOWED_LATENESS + self.seconds(0, 600)
        elif roll < 0.06:  # delayed, but (mostly) still in time
            arrival = t + self.seconds(60, (ATTRIBUTION_WINDOW + ALLOWED_LATENESS) / SECOND)
        else:
            arrival = t + self.jitter()
        self.emit(arrival, {"impression": impression})
        for _ in range(rng.choices([0, 1, 2], [0.93, 0.05, 0.02])[0]):  # a client's retries
            self.emit(arrival + self.seconds(0, 90), {"impression": dict(impression)})
        n_interactions = 0 if rng.random() < 0.35 else min(int(rng.expovariate(0.6)) + 1, 12)
        for _ in range(n_interactions):
            self.interaction(user, request_id, items, t)

    def interaction(self, user, request_id, items, t):
        """One interaction related to the impression (`user`, `request_id`, `items`, `t`)."""
        rng = self.rng
        rank = min(int(rng.expovariate(0.25)), len(items) - 1)  # position bias
        item, u = items[rank], self.event_time(t + rng.randint(0, ATTRIBUTION_WINDOW))
        with_request = rng.random() < 0.55
        roll = rng.random()
        if roll < 0.05:  # outside the window, after or before the impression
            u = t + ATTRIBUTION_WINDOW + self.seconds(1e-9, 120) if rng.random() < 0.7 else t - self.seconds(1e-9, 60)
            with_request = rng.random() < 0.8
        elif roll < 0.09:  # exactly on the window's edges
            u = rng.choice([t, t + ATTRIBUTION_WINDOW])
        elif roll < 0.14:  # an item that is not in the list
            item = rng.choice([i for i in rng.sample(self.items, 3) if i not in items] or ["item-elsewhere"])
            with_request = rng.random() < 0.8
        elif roll < 0.18:  # another user, on this list's item or its request id
            user = rng.choice(self.users)
        elif roll < 0.20:  # an impression id nobody sent
            request_id = self.fresh_id("req-missing")
            with_request = True
        kind = rng.choices([name for name, _ in self.TYPES], [w for _, w in self.TYPES])[0]
        body = {"userId": user, "itemId": item, "type": kind, "time": u}
        if rng.random() < 0.85:
            body["eventId"] = self.fresh_id("ev")
        if with_request:
            body["requestId"] = request_id
        if rng.random() < 0.1:  # an explicit grade, sometimes spelled as a JSON string
            body["grade"] = rng.choice([0, 0.5, 1, 2.5, 4, 7.25, "3", "0.75"])
        arrival = u + (self.jitter() if rng.random() < 0.97 else self.seconds(0, 900))
        self.emit(arrival, {"interaction": body})
        if rng.random() < 0.08:  # a client's retry, with or without an event id
            self.emit(arrival + self.seconds(0, 120), {"interaction": dict(body)})

    def invalid_event(self, now):
        """One event that validation must reject, arriving around `now`."""
        rng = self.rng
        t = now - self.seconds(0, 10)
        user = rng.choice(self.users)
        impression = {"requestId": self.fresh_id("req-bad"), "userId": user, "itemIds": rng.sample(self.items, 4), "time": t}
        interaction = {"eventId": self.fresh_id("ev-bad"), "userId": user, "itemId": rng.choice(self.items), "type": "click", "time": t}
        kind, field, value = rng.choice([
            ("impression", "userId", None), ("impression", "requestId", None), ("impression", "time", None),
            ("impression", "itemIds", []), ("impression", "itemIds", ["a", "b", "a"]), ("impression", "itemIds", ["a", ""]),
            ("interaction", "userId", None), ("interaction", "itemId", None), ("interaction", "time", None),
            ("interaction", "type", None), ("interaction", "type", "clik"), ("interaction", "grade", -1),
            ("interaction", "grade", "NaN"), ("event", None, None),
        ])
        if kind == "event":
            self.emit(now, {})
            return
        body = impression if kind == "impression" else interaction
        if value is None:
            del body[field]
        else:
            body[field] = value
        self.emit(now, {kind: body})


def write_log(path, seed, n_lines):
    """Writes a generated log of `n_lines` lines to `path`; returns the lines."""
    lines = LogGenerator(seed).generate(n_lines)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return lines


# --------------------------------------------------------------------------
# The binary: replay and serve
# --------------------------------------------------------------------------


def replay(binary, log_path):
    """The replay report of `log_path` as a dict."""
    done = subprocess.run([binary, "replay", log_path, "--format", "json", "--k", K],
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise Mismatch(f"rankwatch replay {log_path} exited {done.returncode}: {done.stderr[-2000:]}")
    return json.loads(done.stdout)


class Server:
    """A `rankwatch serve` subprocess on ephemeral loopback ports."""

    ADDRESS_LINE = re.compile(r"grpc_addr=(\S+).*http_addr=(\S+)")

    def __init__(self, binary):
        """Starts the server and waits for the log line with its addresses."""
        self.process = subprocess.Popen(
            [binary, "serve", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
             "--wall-clock-advance", "false", "--k", K],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "RANKWATCH_LOG": "info"},
        )
        self.log = collections.deque(maxlen=50)
        addresses = queue.Queue()
        threading.Thread(target=self._drain, args=(addresses,), daemon=True).start()
        try:
            found = addresses.get(timeout=SERVER_START_TIMEOUT_S)
        except queue.Empty:
            found = None
        if found is None:
            self.stop()
            raise Mismatch(f"rankwatch serve logged no addresses within {SERVER_START_TIMEOUT_S}s:\n{self.tail()}")
        self.grpc_addr, self.http_addr = found

    def _drain(self, addresses):
        """Reads the server's stderr to the end, passing on its addresses (then None at the end)."""
        for line in self.process.stderr:
            self.log.append(line.rstrip())
            match = self.ADDRESS_LINE.search(line)
            if match and "rankwatch serving" in line:
                addresses.put(match.groups())
        addresses.put(None)

    def tail(self):
        """The server's last log lines, for error messages."""
        return "\n".join(self.log) or "(no output)"

    def alive(self):
        """Fails with the server's log if it has exited."""
        if self.process.poll() is not None:
            raise Mismatch(f"rankwatch serve exited with {self.process.returncode}:\n{self.tail()}")

    def scrape(self):
        """The text of GET /metrics."""
        with urllib.request.urlopen(f"http://{self.http_addr}/metrics", timeout=30) as response:
            return response.read().decode()

    def stop(self):
        """Kills the server and waits for it."""
        self.process.kill()
        self.process.wait()


# --------------------------------------------------------------------------
# Talking to the server
# --------------------------------------------------------------------------


def parse_events(pb2, lines):
    """Each log line as a protobuf `Event` (the proto3 JSON mapping)."""
    return [json_format.Parse(line, pb2.Event()) for line in lines]


def closing_event(pb2, events):
    """A valid interaction by a fresh user one day after the latest time of `events`.

    It moves the watermark past every list of the log, then waits itself.
    """
    bodies = [getattr(event, event.WhichOneof("kind")) for event in events if event.WhichOneof("kind")]
    latest = max(body.time.ToNanoseconds() for body in bodies if body.HasField("time"))
    interaction = pb2.Interaction(user_id="python-closing-user", item_id="closing-item", type="click")
    interaction.time.FromNanoseconds(latest + DAY)
    return pb2.Event(interaction=interaction)


def random_batches(rng, events):
    """Splits `events` into batches of random sizes (1–200) with sequences 1, 2, …"""
    batches, start = [], 0
    while start < len(events):
        size = rng.randint(1, 200)
        batches.append(events[start:start + size])
        start += size
    return batches


def ingest(pb2, pb2_grpc, channel, batches):
    """Streams `batches` over one Ingest stream; checks the acks; returns rejections by reason."""
    requests = (pb2.EventBatch(sequence=i + 1, events=batch) for i, batch in enumerate(batches))
    acks = list(pb2_grpc.CollectorStub(channel).Ingest(requests, timeout=RPC_TIMEOUT_S))
    if len(acks) != len(batches):
        raise Mismatch(f"{len(batches)} batches sent on one Ingest stream but {len(acks)} acks received")
    rejected = collections.Counter()
    for i, (ack, batch) in enumerate(zip(acks, batches)):
        where = f"ack {i + 1} (batch of {len(batch)})"
        if ack.sequence != i + 1:
            raise Mismatch(f"{where}: sequence {ack.sequence}, expected {i + 1} (acks must come in order)")
        if ack.accepted + len(ack.rejections) != len(batch):
            raise Mismatch(f"{where}: accepted {ack.accepted} + {len(ack.rejections)} rejections != {len(batch)}")
        indices = [r.index for r in ack.rejections]
        if indices != sorted(set(indices)) or any(index >= len(batch) for index in indices):
            raise Mismatch(f"{where}: rejection indices {indices} are not distinct, ordered indices of the batch")
        for rejection in ack.rejections:
            if not rejection.message:
                raise Mismatch(f"{where}: rejection {rejection.reason} at index {rejection.index} has no message")
            rejected[rejection.reason] += 1
    return dict(rejected)


def parse_prometheus(text):
    """Parses the Prometheus text format into {(name, frozenset of label pairs): value}."""
    sample = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+-?\d+)?$')
    label = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?')
    escape = re.compile(r"\\(.)")
    series = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        match = sample.match(line)
        if not match:
            raise Mismatch(f"/metrics line {number} is not a Prometheus sample: {line!r}")
        name, labels, value = match.groups()
        pairs, position = [], 0
        while labels and position < len(labels):
            pair = label.match(labels, position)
            if not pair or pair.end() == position:
                raise Mismatch(f"/metrics line {number} has malformed labels: {line!r}")
            unescaped = escape.sub(lambda m: "\n" if m.group(1) == "n" else m.group(1), pair.group(2))
            pairs.append((pair.group(1), unescaped))
            position = pair.end()
        series[(name, frozenset(pairs))] = float(value)
    return series


# --------------------------------------------------------------------------
# Comparisons with the replay report
# --------------------------------------------------------------------------


def nonzero(counts):
    """A count map without zero entries (a proto map may leave them out)."""
    return {key: value for key, value in dict(counts).items() if value}


def expect_equal(what, got, want):
    """Fails unless `got == want`."""
    if got != want:
        raise Mismatch(f"{what}: server {got!r}, replay {want!r}")


def expect_close(what, got, want):
    """Fails unless `got` is within TOLERANCE of `want`."""
    if not abs(got - want) <= TOLERANCE:
        raise Mismatch(f"{what}: server {got!r}, replay {want!r} (difference {got - want:.3g})")


def compare_report(report, expected):
    """Compares `Evaluation.GetMetrics` with the replay report; returns the number of means compared."""
    config, want_config = report.config, expected["config"]
    expect_equal("config.k", list(config.k), want_config["k"])
    expect_equal("config.attribution_window_s", config.attribution_window_s, want_config["attribution_window_s"])
    expect_equal("config.allowed_lateness_s", config.allowed_lateness_s, want_config["allowed_lateness_s"])
    expect_equal("config.gain", config.gain, want_config["gain"])

    counters, want = report.counters, expected["counters"]
    expect_equal("counters.impressions", counters.impressions, want["impressions"])
    expect_equal("counters.interactions (the log's plus the closing one)", counters.interactions, want["interactions"] + 1)
    expect_equal("counters.credited", counters.credited, want["credited"])
    expect_equal("counters.unattributed", nonzero(counters.unattributed), nonzero(want["unattributed"]))
    expect_equal("counters.late_impressions", counters.late_impressions, want["late"]["impressions"])
    expect_equal("counters.duplicate_impressions", counters.duplicate_impressions, want["duplicates"]["impressions"])
    expect_equal("counters.duplicate_interactions", counters.duplicate_interactions, want["duplicates"]["interactions"])
    expect_equal("counters.rejected", nonzero(counters.rejected), nonzero(want["rejected"]))

    got_groups = [(g.model, g.surface) for g in report.groups]
    expect_equal("groups", got_groups, [(g["model"], g["surface"]) for g in expected["groups"]])
    means = 0
    for group, want_group in zip(report.groups, expected["groups"]):
        name = f"group {group.model}/{group.surface}"
        expect_equal(f"{name} lists", group.lists, want_group["lists"])
        expect_equal(f"{name} engaged_lists", group.engaged_lists, want_group["engaged_lists"])
        expect_equal(f"{name} metric keys", sorted(group.metrics), sorted(want_group["metrics"]))
        got_positions = [{"rank": p.rank, "lists": p.lists, "interactions": dict(p.interactions)}
                         for p in group.positions]
        expect_equal(f"{name} positions", got_positions, want_group.get("positions", []))
        for key, want_mean in want_group["metrics"].items():
            expect_close(f"{name} {key} all", group.metrics[key].all, want_mean["all"])
            expect_close(f"{name} {key} engaged", group.metrics[key].engaged, want_mean["engaged"])
            means += 2
    return means


def compare_scrape_counters(series, expected, n_events):
    """Checks the exported health counters and gauges against the replay's counters.

    `n_events` is the number of events sent, the closing one included; it
    waits, so it is the only interaction left waiting and no list stays open.
    """
    def value(name, **labels):
        """The sample `name{labels}`, which must exist."""
        found = series.get((name, frozenset(labels.items())))
        if found is None:
            raise Mismatch(f"/metrics has no {name}{labels or ''}")
        return found

    def by_label(name, label):
        """The non-zero samples of `name` keyed by the value of `label`."""
        return {dict(labels)[label]: v for (n, labels), v in series.items() if n == name and v}

    want = expected["counters"]
    expect_equal("rankwatch_events_received_total", value("rankwatch_events_received_total"), n_events)
    expect_equal("rankwatch_events_rejected_total by reason", by_label("rankwatch_events_rejected_total", "reason"),
                 nonzero(want["rejected"]))
    expect_equal("rankwatch_impressions_total", value("rankwatch_impressions_total"), want["impressions"])
    expect_equal("rankwatch_interactions_total", value("rankwatch_interactions_total"), want["interactions"] + 1)
    expect_equal("rankwatch_interactions_credited_total", value("rankwatch_interactions_credited_total"), want["credited"])
    expect_equal("rankwatch_interactions_unattributed_total by reason",
                 by_label("rankwatch_interactions_unattributed_total", "reason"), nonzero(want["unattributed"]))
    expect_equal("rankwatch_impressions_late_total", value("rankwatch_impressions_late_total"), want["late"]["impressions"])
    expect_equal("rankwatch_duplicates_total by kind", by_label("rankwatch_duplicates_total", "kind"),
                 nonzero({"impression": want["duplicates"]["impressions"], "interaction": want["duplicates"]["interactions"]}))
    expect_equal("rankwatch_open_impressions", value("rankwatch_open_impressions"), 0)
    expect_equal("rankwatch_waiting_interactions (the closing event)", value("rankwatch_waiting_interactions"), 1)
    for group in expected["groups"]:
        labels = {"model": group["model"], "surface": group["surface"]}
        expect_equal(f"rankwatch_lists_finalized_total{labels}", value("rankwatch_lists_finalized_total", **labels), group["lists"])
        expect_equal(f"rankwatch_lists_engaged_total{labels}", value("rankwatch_lists_engaged_total", **labels), group["engaged_lists"])


def compare_scrape_ndcg(series, expected):
    """Checks ndcg _sum/_count of every group and K against the replay; returns how many were checked."""
    checked = 0
    for group in expected["groups"]:
        for k in expected["config"]["k"]:
            labels = frozenset({("model", group["model"]), ("surface", group["surface"]), ("k", str(k))})
            name = f'rankwatch_list_ndcg{{model="{group["model"]}",surface="{group["surface"]}",k="{k}"}}'
            total = series.get(("rankwatch_list_ndcg_sum", labels))
            count = series.get(("rankwatch_list_ndcg_count", labels))
            if total is None or count is None:
                raise Mismatch(f"/metrics has no {name} _sum and _count")
            expect_equal(f"{name} _count", count, float(group["lists"]))
            expect_close(f"{name} _sum/_count", total / count if count else 0.0, group["metrics"][f"ndcg@{k}"]["all"])
            checked += 1
    return checked


# --------------------------------------------------------------------------
# One log, end to end
# --------------------------------------------------------------------------


def check_log(binary, stubs, work_dir, seed, n_lines):
    """Generates, replays and serves one log; returns a line saying what matched."""
    pb2, pb2_grpc = stubs
    log_path = os.path.join(work_dir, f"log-{seed}.jsonl")
    lines = write_log(log_path, seed, n_lines)
    expected = replay(binary, log_path)
    events = parse_events(pb2, lines)
    events.append(closing_event(pb2, events))
    batches = random_batches(random.Random(seed + 1), events)

    server = Server(binary)
    try:
        with grpc.insecure_channel(server.grpc_addr) as channel:
            try:
                rejected = ingest(pb2, pb2_grpc, channel, batches)
                report = pb2_grpc.EvaluationStub(channel).GetMetrics(pb2.GetMetricsRequest(window=""), timeout=RPC_TIMEOUT_S)
            except grpc.RpcError as error:
                server.alive()
                raise Mismatch(f"gRPC call failed: {error.code()}: {error.details()}\n{server.tail()}")
        expect_equal("rejections in the acks by reason", rejected, nonzero(expected["counters"]["rejected"]))
        means = compare_report(report, expected)
        series = parse_prometheus(server.scrape())
        scraped = compare_scrape_ndcg(series, expected)
        compare_scrape_counters(series, expected, len(events))
        server.alive()
    finally:
        server.stop()
    counters = expected["counters"]
    return (f"seed {seed}: {len(lines)} events in {len(batches)} batches; "
            f"{counters['impressions']} impressions, {counters['credited']} credited, "
            f"{sum(counters['unattributed'].values())} unattributed, {counters['late']['impressions']} late, "
            f"{sum(counters['duplicates'].values())} duplicates, {sum(counters['rejected'].values())} rejected "
            f"({len(counters['rejected'])} reasons); {len(expected['groups'])} groups, "
            f"{means} means, {scraped} ndcg series and the exported counters match the replay")


def main():
    """Checks every log; exits non-zero on the first mismatch."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default=os.path.join(REPO, "target/release/rankwatch"), help="the rankwatch binary")
    parser.add_argument("--seeds", help="comma-separated seeds (default: the built-in three logs)")
    parser.add_argument("--lines", type=int, default=10_000, help="lines per log with --seeds")
    args = parser.parse_args()
    logs = [(int(seed), args.lines) for seed in args.seeds.split(",")] if args.seeds else DEFAULT_LOGS
    binary = os.path.abspath(args.binary)

    work_dir = tempfile.mkdtemp(prefix="rankwatch-python-")
    passed = 0
    try:
        os.mkdir(os.path.join(work_dir, "stubs"))
        stubs = generate_stubs(os.path.join(work_dir, "stubs"))
        for seed, n_lines in logs:
            print(check_log(binary, stubs, work_dir, seed, n_lines), flush=True)
            passed += 1
    except Mismatch as mismatch:
        print(f"MISMATCH on log {logs[passed][0]} (kept in {work_dir}): {mismatch}", file=sys.stderr)
        print(f"python client: {passed} passed, 1 failed")
        sys.exit(1)
    shutil.rmtree(work_dir)
    print(f"python client: {passed} passed, 0 failed")


if __name__ == "__main__":
    main()
