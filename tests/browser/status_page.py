"""The status page in a real headless Chromium, against `rankwatch demo`.

Starts the demo on free loopback ports, opens `/` in Debian's Chromium driven
over the DevTools protocol, and checks that every surface's chart holds both
demo models with numeric values (the better model ahead), that a phone-sized
screen needs no sideways scrolling, and that the console logged no error and
no script threw. Then, against `rankwatch serve` given one list of each model,
that the page calls no comparison settled from so few lists; and that
models named as a JavaScript object's own properties ("constructor") chart
like any other, and a name hiding a zero-width space is shown escaped. Screenshots are kept in target/artifacts/ (status.png for a
laptop, status-phone.png for a phone).

Usage: python tests/browser/status_page.py --binary target/release/rankwatch
"""

from __future__ import annotations

import argparse
import base64
import json
import math
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable, TypeVar

import rankwatch
import websocket

# What a wait looks at.
T = TypeVar("T")

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",
]
DEMO_MODELS = ("candidate", "control")
# The demo's interleaved lists (--interleave) chart as a model of their own.
INTERLEAVED = "interleaved"
SURFACES = ("home", "search")


class Failure(Exception):
    """A check of the page that did not hold."""


def start_demo(binary: str) -> tuple[subprocess.Popen[str], str]:
    """Starts the demo on free loopback ports; returns it and its HTTP address."""
    demo, addresses = start(binary, "demo", "--interleave")
    return demo, addresses["http_addr"]


def start(binary: str, command: str, *args: str) -> tuple[subprocess.Popen[str], dict[str, str]]:
    """Starts `rankwatch COMMAND ARGS` on free loopback ports; returns it and
    the addresses it logged (`grpc_addr`, `http_addr`)."""
    process = subprocess.Popen(
        [binary, command, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "RANKWATCH_LOG": "info"},
    )
    assert process.stderr is not None
    for line in process.stderr:
        addresses = dict(word.partition("=")[::2] for word in line.split())
        if "http_addr" in addresses:
            threading.Thread(target=drain, args=(process.stderr,), daemon=True).start()
            return process, addresses
    process.kill()
    raise Failure(f"rankwatch {command} exited before logging its addresses")


def drain(stream: Any) -> None:
    """Reads a child's output to its end, so that it never blocks on a full pipe."""
    for _ in stream:
        pass


def start_chromium(profile: Path) -> tuple[subprocess.Popen[bytes], int]:
    """Starts headless Chromium on a blank page; returns it and its DevTools port."""
    browser = subprocess.Popen(
        ["chromium", *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "about:blank"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    port_file = profile / "DevToolsActivePort"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if port_file.exists() and port_file.read_text().strip():
            return browser, int(port_file.read_text().split()[0])
        if browser.poll() is not None:
            raise Failure(f"chromium exited with {browser.returncode}")
        time.sleep(0.2)
    browser.kill()
    raise Failure("chromium did not open its DevTools port within 60 s")


class DevTools:
    """One page's DevTools session: commands in order, events kept."""

    def __init__(self, port: int) -> None:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as response:
            targets = json.load(response)
        page = next(t for t in targets if t["type"] == "page")
        self.socket = websocket.create_connection(
            page["webSocketDebuggerUrl"], timeout=30, suppress_origin=True
        )
        self.next_id = 0
        self.events: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()
        self.seen: list[dict[str, Any]] = []

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """Sends a command and returns its result; events that arrive meanwhile are kept."""
        self.next_id += 1
        self.socket.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise Failure(f"{method}: {message['error']}")
                return message.get("result", {})
            if "method" in message:
                self.seen.append(message)

    def evaluate(self, expression: str) -> Any:
        """The value of a script expression in the page."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise Failure(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def console_errors(self) -> list[str]:
        """Errors and warnings the console logged, and exceptions the page's scripts threw."""
        errors = []
        for event in self.seen:
            method, params = event["method"], event.get("params", {})
            if method == "Runtime.exceptionThrown":
                errors.append(f"exception: {params['exceptionDetails']}")
            elif method == "Runtime.consoleAPICalled" and params["type"] in ("error", "warning", "assert"):
                errors.append(f"console.{params['type']}: {params['args']}")
            elif method == "Log.entryAdded" and params["entry"]["level"] in ("error", "warning"):
                errors.append(f"log {params['entry']['level']}: {params['entry']['text']}")
        return errors

    def screenshot(self, path: Path, width: int, mobile: bool) -> None:
        """A screenshot of the whole page at `width` CSS pixels."""
        height = self.evaluate("document.documentElement.scrollHeight")
        self.call(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=2 if mobile else 1,
            mobile=mobile,
        )
        shot = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path.write_bytes(base64.b64decode(shot["data"]))


LEGEND = """JSON.stringify([...document.querySelectorAll('#surfaces article')].map(card => ({
  surface: card.dataset.surface,
  lines: [...card.querySelectorAll('svg.chart polyline.line')].map(l => l.dataset.model),
  points: Math.min(...[...card.querySelectorAll('svg.chart polyline.line')]
    .map(l => l.getAttribute('points').trim().split(/\\s+/).length)),
  legend: [...card.querySelectorAll('li.series')].map(li => [li.dataset.model, li.dataset.value,
    li.querySelector('.value').textContent]),
})))"""


def wait_for(look: Callable[[], T], ready: Callable[[T], bool], seconds: float, every: float,
             failure: Callable[[T], str]) -> T:
    """What `look` returns once `ready` holds of it, looking every `every` s;
    past `seconds`, a Failure saying `failure` of the last look."""
    deadline = time.monotonic() + seconds
    while True:
        seen = look()
        if ready(seen):
            return seen
        if time.monotonic() > deadline:
            raise Failure(failure(seen))
        time.sleep(every)


def charts(page: DevTools) -> list[dict[str, Any]]:
    """What the charts hold, per surface."""
    return json.loads(page.evaluate(LEGEND))


def complete(cards: list[dict[str, Any]]) -> bool:
    """Every surface charts both demo models with at least three polled points each."""
    return sorted(card["surface"] for card in cards) == list(SURFACES) and all(
        sorted(set(card["lines"]) - {INTERLEAVED}) == list(DEMO_MODELS) and card["points"] >= 3 for card in cards
    )


def check_charts(cards: list[dict[str, Any]]) -> None:
    """Both models on every surface, with numeric values, the better model ahead."""
    for card in cards:
        values = {}
        for model, value, shown in card["legend"]:
            number = float(value)
            if not (math.isfinite(number) and 0.0 <= number <= 1.0):
                raise Failure(f"{card['surface']}/{model}: nDCG {value} is not in [0, 1]")
            if f"{number:.4f}" != shown:
                raise Failure(f"{card['surface']}/{model}: legend shows {shown!r} for {value}")
            values[model] = number
        values.pop(INTERLEAVED, None)
        if sorted(values) != list(DEMO_MODELS):
            raise Failure(f"{card['surface']}: legend holds {sorted(values)}")
        if not values["control"] > values["candidate"]:
            raise Failure(f"{card['surface']}: control {values['control']} is not ahead of candidate {values['candidate']}")


INTERLEAVING_ROWS = """JSON.stringify(Array.from(document.querySelectorAll('#interleaving tr')).slice(1)
  .map((row) => Array.from(row.cells).map((cell) => cell.textContent)))"""


def check_interleaving(page: DevTools) -> None:
    """The interleaving panel: one row per surface, control preferred, in a sentence, once settled."""
    def settled(rows: list[list[str]]) -> bool:
        settled = [row for row in rows if row[-1].startswith("Users prefer control to candidate")]
        return len(rows) == len(SURFACES) and len(settled) == len(SURFACES)

    rows = wait_for(lambda: json.loads(page.evaluate(INTERLEAVING_ROWS)), settled, 60, 1,
                    lambda rows: f"within 60 s more the interleaving panel held {rows}")
    for row in rows:
        surface, a, b = row[0].split(" ")[0], row[1], row[2]
        if (a, b) != ("candidate", "control") or surface not in SURFACES:
            raise Failure(f"an interleaving row names {surface} {a} {b}")
        if not float(row[5]) < 0:
            raise Failure(f"{surface}: preference {row[5]} does not favour control")


PANELS = """JSON.stringify({
  positions: document.querySelectorAll('#positions svg polyline').length,
  coverage: document.querySelectorAll('#coverage tr').length - 1,
  marks: Array.from(document.querySelectorAll('#surfaces .settled-label')).map((t) => t.textContent),
})"""


def check_panels(page: DevTools) -> None:
    """CTR by rank per model on every surface, a coverage row per group, and a
    marker where the candidate's comparison settled below the control."""
    def drawn(panels: dict[str, Any]) -> bool:
        settled = [mark for mark in panels["marks"] if mark == "candidate worse: settled"]
        return panels["positions"] >= 2 * len(SURFACES) and panels["coverage"] >= 2 * len(SURFACES) and bool(settled)

    wait_for(lambda: json.loads(page.evaluate(PANELS)), drawn, 30, 1,
             lambda panels: f"within 30 s more the panels held {panels}")


COMPARISON_ROWS = INTERLEAVING_ROWS.replace("#interleaving", "#comparisons")


def check_few_lists(binary: str, page: DevTools) -> None:
    """One list of each model, and one interleaved list that the control won:
    every bound is a point (a standard error of 0), and the page must say
    there are too few lists to tell, not that the comparison is settled. The
    lists are finalized as the server's clock passes their 1 s window."""
    server, addresses = start(
        binary, "serve", "--control-model", "control", "--attribution-window", "1s", "--allowed-lateness", "0s"
    )
    try:
        shown = time.time()
        with rankwatch.Collector(addresses["grpc_addr"]) as collector:
            for user, model in (("u1", "control"), ("u2", "candidate")):
                collector.impression(user_id=user, items=["x", "y"], model=model, surface="home",
                                     request_id=user, time=shown)
            interleaving = {"rankers": ["candidate", "control"], "teams": [1, 0]}
            collector.impression(user_id="u3", items=["x", "y"], model="interleaved", surface="home",
                                 request_id="u3", time=shown, interleaving=interleaving)
            for user in ("u1", "u3"):
                collector.interaction(user_id=user, item_id="x", type="click", request_id=user, time=shown)
            if not collector.flush(timeout=30):
                raise Failure("the server did not acknowledge the few lists within 30 s")
        page.call("Page.navigate", url=f"http://{addresses['http_addr']}/")
        comparisons, interleaved = wait_for(
            lambda: (json.loads(page.evaluate(COMPARISON_ROWS)), json.loads(page.evaluate(INTERLEAVING_ROWS))),
            lambda rows: bool(rows[0] and rows[1]), 30, 0.5,
            lambda rows: f"within 30 s the page showed comparisons {rows[0]} and interleaving {rows[1]}")
        sentences = [row[-1] for row in comparisons + interleaved]
        bounds = {row[1]: row[4] for row in comparisons}
        if bounds.get("candidate") != "[-1.0000, -1.0000]":
            raise Failure(f"one list against one: the anytime bounds shown are {bounds}")
        if not all("too few lists to tell" in sentence and "settled" not in sentence for sentence in sentences):
            raise Failure(f"one list of each model is called: {sentences}")
        marks = json.loads(page.evaluate(PANELS))["marks"]
        if marks:
            raise Failure(f"one list of each model is marked settled on the chart: {marks}")
    finally:
        server.terminate()
        server.wait(timeout=30)


def check_names_objects_have(binary: str, page: DevTools) -> None:
    """Models and a surface named as every JavaScript object's own
    properties chart like any other: a model called "constructor" had
    stopped the page from drawing anything, for every viewer. A model
    whose name hides a zero-width space is shown with it escaped, not as
    the model it passes for."""
    server, addresses = start(binary, "serve", "--attribution-window", "1s", "--allowed-lateness", "0s")
    models = ("constructor", "toString", "model", "mod\u200bel")
    try:
        shown = time.time()
        with rankwatch.Collector(addresses["grpc_addr"]) as collector:
            for user, model in zip(("u1", "u2", "u3", "u4"), models):
                collector.impression(user_id=user, items=["x", "y"], model=model, surface="hasOwnProperty",
                                     request_id=user, time=shown)
                collector.interaction(user_id=user, item_id="x", type="click", request_id=user, time=shown)
            if not collector.flush(timeout=30):
                raise Failure("the server did not acknowledge the lists within 30 s")
        page.call("Page.navigate", url=f"http://{addresses['http_addr']}/")
        def charted(cards: list[dict[str, Any]]) -> str:
            state = page.evaluate("document.getElementById('state').textContent")
            return f"within 30 s the page charted {cards} ({state!r})"

        wanted = [("hasOwnProperty", sorted(models))]
        wait_for(lambda: charts(page), lambda cards: [(c["surface"], sorted(c["lines"])) for c in cards] == wanted,
                 30, 0.5, charted)
        names = page.evaluate("JSON.stringify([...document.querySelectorAll('li.series .model')]"
                              ".map(s => s.textContent))")
        if sorted(json.loads(names)) != sorted(["constructor", "toString", "model", "mod\\u{200b}el"]):
            raise Failure(f"the legend names the models {names}")
    finally:
        server.terminate()
        server.wait(timeout=30)


def check_groups_kept_apart(binary: str, page: DevTools) -> None:
    """Two groups whose surface and segment values, joined with spaces, read
    alike get a chart each: surface "home country=de" in country "us", every
    list clicked, had been drawn as one line with surface "home" in country
    "de country=us", none clicked, and the page showed only one of them."""
    server, addresses = start(binary, "serve", "--segment-labels", "country", "--attribution-window", "1s",
                              "--allowed-lateness", "0s")
    try:
        shown = time.time()
        with rankwatch.Collector(addresses["grpc_addr"]) as collector:
            for user, surface, country, clicked in (("u1", "home country=de", "us", True),
                                                    ("u2", "home", "de country=us", False)):
                collector.impression(user_id=user, items=["x", "y"], model="m", surface=surface,
                                     request_id=user, time=shown, labels={"country": country})
                if clicked:
                    collector.interaction(user_id=user, item_id="x", type="click", request_id=user, time=shown)
            if not collector.flush(timeout=30):
                raise Failure("the server did not acknowledge the lists within 30 s")
        page.call("Page.navigate", url=f"http://{addresses['http_addr']}/")
        wanted = [('"home country=de" country=us', "1.0000"), ('home country="de country=us"', "0.0000")]
        wait_for(lambda: charts(page),
                 lambda cards: sorted((c["surface"], v) for c in cards for _, _, v in c["legend"]) == wanted,
                 30, 0.5, lambda cards: f"within 30 s the page charted {cards}, not {wanted}")
    finally:
        server.terminate()
        server.wait(timeout=30)


def check_history_on_reload(page: DevTools, http: str) -> None:
    """A page opened later starts with the history the server kept (a sample
    every 10 s), not with its first poll."""
    page.call("Page.navigate", url=f"http://{http}/")
    time.sleep(1.5)
    state = page.evaluate("document.getElementById('state').textContent")
    polls = int(state.split("·")[1].split()[0]) if "·" in state else 0
    if polls < 4:
        raise Failure(f"a reloaded page holds {polls} polls ({state!r}): the server's history did not seed it")


def run(binary: str, artifacts: Path) -> None:
    demo, http = start_demo(binary)
    profile = Path(tempfile.mkdtemp(prefix="rankwatch-chromium-"))
    browser = None
    try:
        browser, port = start_chromium(profile)
        page = DevTools(port)
        for domain in ("Runtime", "Log", "Page"):
            page.call(f"{domain}.enable")
        page.call("Emulation.setDeviceMetricsOverride", width=1280, height=900, deviceScaleFactor=1, mobile=False)
        page.call("Page.navigate", url=f"http://{http}/")
        cards = wait_for(lambda: charts(page), complete, 90, 1,
                         lambda cards: f"within 90 s the charts held only {cards}")
        check_charts(cards)
        check_interleaving(page)
        check_panels(page)
        title = page.evaluate("document.title")
        if title != "rankwatch":
            raise Failure(f"the page's title is {title!r}")
        settings = page.evaluate("document.querySelectorAll('#settings tr').length")
        health = page.evaluate("document.querySelectorAll('#health dd').length")
        if settings < 10 or health < 10:
            raise Failure(f"{settings} settings and {health} health figures shown")

        artifacts.mkdir(parents=True, exist_ok=True)
        page.screenshot(artifacts / "status.png", width=1280, mobile=False)
        page.call("Emulation.setDeviceMetricsOverride", width=390, height=844, deviceScaleFactor=2, mobile=True)
        time.sleep(2.5)  # one more poll, drawn at the phone's width
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        if overflow > 0:
            raise Failure(f"on a phone the page is {overflow} px wider than the screen")
        page.screenshot(artifacts / "status-phone.png", width=390, mobile=True)

        check_history_on_reload(page, http)
        check_few_lists(binary, page)
        check_names_objects_have(binary, page)
        check_groups_kept_apart(binary, page)
        errors = page.console_errors()
        if errors:
            raise Failure("the console logged:\n  " + "\n  ".join(errors))
        surfaces = ", ".join(
            f"{card['surface']}: " + " ".join(f"{m}={v}" for m, _, v in card["legend"]) for card in cards
        )
        print(f"status page ok ({surfaces}); screenshots in {artifacts}")
    finally:
        if browser is not None:
            browser.terminate()
            browser.wait(timeout=30)
        demo.terminate()
        demo.wait(timeout=30)
        shutil.rmtree(profile, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", required=True, help="the rankwatch binary")
    parser.add_argument("--artifacts", default="target/artifacts", type=Path, help="where screenshots go")
    args = parser.parse_args()
    try:
        run(args.binary, args.artifacts)
    except Failure as failure:
        print(f"status page: {failure}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
