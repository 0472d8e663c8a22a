#!/usr/bin/env python3
"""Writes a synthetic replay log for the replay benchmark: N events, 20% impressions
of 20 items and 80% clicks credited by request id, in the proto3 JSON mapping.
Usage: gen_log.py N OUT.jsonl"""
import datetime as dt
import json
import random
import sys


def main(n: int, path: str) -> None:
    """Writes `n` events to `path`, deterministically."""
    rng = random.Random(1)
    start = dt.datetime(2026, 11, 1, 10, tzinfo=dt.timezone.utc).timestamp()
    recent, request = [], 0
    with open(path, "w") as out:
        for i in range(n):
            time = dt.datetime.fromtimestamp(start + i / 1000, dt.timezone.utc)
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
            if i % 5 == 0 or not recent:
                request += 1
                user = f"u{rng.randrange(100_000)}"
                items = list(dict.fromkeys(f"item-{rng.randrange(50_000)}" for _ in range(20)))
                event = {"impression": {"requestId": f"r{request}", "userId": user, "itemIds": items,
                                        "time": stamp, "model": rng.choice(["a", "b"]), "surface": "home"}}
                recent = (recent + [(user, f"r{request}", items)])[-50:]
            else:
                user, rid, items = rng.choice(recent)
                event = {"interaction": {"eventId": f"e{i}", "userId": user, "itemId": rng.choice(items),
                                         "requestId": rid, "type": "click", "time": stamp}}
            out.write(json.dumps(event, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])
