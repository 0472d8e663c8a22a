"""`replay`: evaluates recorded events offline with the server's own engine, by
running `rankwatch replay --format json` on them, so that offline and online
figures cannot drift apart.

The events are written to a temporary JSON Lines file (the proto3 JSON
mapping, as the server's logs hold) and the binary's report is returned as
a dict, the shape `Evaluation.get_metrics` returns (without `window`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from typing import IO, Any, Dict, Iterable, Optional, Sequence, Union

from google.protobuf import json_format

from rankwatch import rows
from rankwatch.v1 import rankwatch_pb2 as pb

#: The environment variable naming the binary when `binary` is not given.
BINARY_ENV = "RANKWATCH_BINARY"
#: How much of the binary's standard error an error carries.
STDERR_TAIL_CHARS = 4000

#: Events: `rankwatch.v1.Event` messages, dicts in the JSON Lines form, or a pandas DataFrame.
Events = Union[Iterable[pb.Event], Iterable[Dict[str, Any]], Any]


class ReplayError(RuntimeError):
    """`rankwatch replay` failed; the message carries its exit code and standard error."""


def replay(events: Events, *, binary: Optional[str] = None, args: Sequence[str] = ()) -> Dict[str, Any]:
    """The report of `rankwatch replay --format json` on `events`, in order.

    `events` is a sequence of `rankwatch.v1.Event` (e.g. from the builders of
    `rankwatch.events`), of dicts in the JSON Lines form (`{"impression":
    {"requestId": ..., ...}}`), or a pandas DataFrame with one row per event
    (columns in `rankwatch.rows`). `args` are more flags of `rankwatch replay`
    (such as `["--k", "1,5,10"]` or `["--config", "rankwatch.toml"]`). The
    binary is `binary`, else the `RANKWATCH_BINARY` environment variable,
    else `rankwatch` on the PATH. Raises `FileNotFoundError` without a
    binary, `ValueError` for an event that cannot be built (such as a naive
    time), and `ReplayError` when the command fails. Events the engine
    rejects do not fail the call: they are counted in `counters.rejected`.
    """
    command = find_binary(binary)
    with tempfile.TemporaryDirectory(prefix="rankwatch-replay-") as directory:
        path = os.path.join(directory, "events.jsonl")
        with open(path, "w", encoding="utf-8") as log:
            write_lines(log, events)
        done = subprocess.run(
            [command, "replay", path, "--format", "json", *args],
            stdin=subprocess.DEVNULL, capture_output=True, text=True,
        )
    if done.returncode != 0:
        raise ReplayError(f"{command} replay exited with {done.returncode}: {done.stderr[-STDERR_TAIL_CHARS:]}")
    try:
        return json.loads(done.stdout)
    except json.JSONDecodeError as error:
        raise ReplayError(f"{command} replay printed no JSON report: {error}") from error


def find_binary(binary: Optional[str] = None) -> str:
    """The `rankwatch` binary to run: `binary`, `$RANKWATCH_BINARY`, or `rankwatch` on the PATH."""
    chosen = binary or os.environ.get(BINARY_ENV) or shutil.which("rankwatch")
    if not chosen:
        raise FileNotFoundError(
            f"no rankwatch binary: pass binary=..., set {BINARY_ENV}, or put rankwatch on the PATH "
            "(cargo build --release --locked --bins builds target/release/rankwatch)"
        )
    if not (os.path.isfile(chosen) and os.access(chosen, os.X_OK)):
        raise FileNotFoundError(f"rankwatch binary {chosen!r} is not an executable file")
    return chosen


def write_lines(log: IO[str], events: Events) -> None:
    """Writes `events` to `log` as JSON Lines, one event per line."""
    if _is_data_frame(events):
        rows.check_columns(events.columns)
        for number, row in enumerate(events.to_dict("records")):
            try:
                event = rows.event_of(row)
            except ValueError as error:
                raise ValueError(f"row {number}: {error}") from error
            log.write(json_format.MessageToJson(event, indent=None) + "\n")
        return
    for number, event in enumerate(events):
        if isinstance(event, pb.Event):
            log.write(json_format.MessageToJson(event, indent=None) + "\n")
        elif isinstance(event, dict):
            try:
                log.write(json.dumps(event, separators=(",", ":")) + "\n")
            except TypeError as error:
                raise TypeError(f"event {number} is not JSON ({error}); give times as RFC 3339 strings") from error
        else:
            raise TypeError(f"event {number} is a {type(event).__name__}, not a rankwatch.v1.Event nor a dict")


def _is_data_frame(events: Events) -> bool:
    """Whether `events` is a pandas DataFrame, without importing pandas for anything else."""
    module = type(events).__module__
    if not module.startswith("pandas"):
        return False
    import pandas

    return isinstance(events, pandas.DataFrame)
