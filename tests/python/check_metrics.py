#!/usr/bin/env python3
"""`err@K`, `rbp@K` and `r_precision` of `rankwatch replay`, checked against ir_measures.

For each seed, random lists of graded items (integer grades 0 to 4, the range
gdeval accepts) are written twice: as TREC qrels and a run for ir_measures
(query = list, document = item, score falling with rank), and as a replay log
in the proto3 JSON mapping of docs/SPEC.md §2, one impression per list with one
interaction carrying an explicit grade per relevant item. Each list is its own
model, so that the report's group means are per-list values.

ir_measures computes ERR@K with gdeval (g_max fixed at 4, printed to 5
decimals), graded RBP@K with trectools ((1 - p)·Σ g_j·p^(j-1), the raw grade
as utility, no residual) and Rprec with trec_eval (pytrec_eval), each
provider named. trectools is asked for one RBP measure per call: given
several at once, ir_measures 0.4.3 reports the last one's values for all.
Providers leave out queries without a relevant document; rankwatch scores
those 0. Query ids are numbers, as gdeval requires.

Run: target/python/bin/python tests/python/check_metrics.py --binary target/release/rankwatch
"""

import argparse
import json
import random
import subprocess
import sys
import tempfile

import ir_measures
from ir_measures import ERR, RBP, Rprec, Qrel, ScoredDoc

K = [1, 3, 5, 10, 20]
G_MAX = 4  # gdeval's $MAX_JUDGMENT
DEFAULT_SEEDS = [20261124, 4_711, 99_991]
LISTS_PER_SEED = 150
PERSISTENCES = [0.8, 0.55]
# gdeval prints ERR with 5 decimals; the others are exact up to float rounding.
TOLERANCE = {"err": 5.1e-6, "rbp": 1e-9, "r_precision": 1e-9}


def random_lists(seed):
    """`LISTS_PER_SEED` lists of 1 to 30 grades, mostly 0, as served lists often are."""
    rng = random.Random(seed)
    choices = [0, 0, 0, 0, 1, 1, 2, 3, 4]
    return [[rng.choice(choices) for _ in range(rng.randint(1, 30))] for _ in range(LISTS_PER_SEED)]


def replay_log(lists):
    """The lists as a replay log: one impression each, then one graded interaction per relevant item."""
    lines = []
    for index, grades in enumerate(lists):
        request = f"r{index}"
        user = f"u{index}"
        items = [f"q{index}d{rank}" for rank in range(len(grades))]
        lines.append({"impression": {"requestId": request, "userId": user, "itemIds": items,
                                     "time": "2026-11-01T10:00:00Z", "model": f"q{index:04d}"}})
        for item, grade in zip(items, grades):
            if grade > 0:
                lines.append({"interaction": {"userId": user, "itemId": item, "requestId": request,
                                              "type": "click", "grade": grade,
                                              "time": "2026-11-01T10:00:01Z"}})
    return "".join(json.dumps(line) + "\n" for line in lines)


def replay(binary, log, persistence):
    """Per-list values `{(list index, key): value}` from `rankwatch replay --format json`."""
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl") as file:
        file.write(log)
        file.flush()
        args = [binary, "replay", file.name, "--format", "json", "--k", ",".join(map(str, K)),
                "--g-max", str(G_MAX), "--rbp-p", str(persistence)]
        report = json.loads(subprocess.run(args, check=True, capture_output=True).stdout)
    values = {}
    for group in report["groups"]:
        assert group["lists"] == 1, f"group {group['model']} has {group['lists']} lists"
        index = int(group["model"][1:])
        for key, means in group["metrics"].items():
            values[(index, key)] = means["all"]
    return values


def reference(lists, persistence):
    """The same values from ir_measures, keyed like `replay`'s; absent queries score 0."""
    qrels = [Qrel(str(i), f"q{i}d{rank}", grade) for i, grades in enumerate(lists) for rank, grade in enumerate(grades)]
    # Scores fall with rank and differ across queries too: trectools averages
    # the weights of equal scores that follow each other, even across queries.
    pairs = [(i, rank) for i, grades in enumerate(lists) for rank in range(len(grades))]
    run = [ScoredDoc(str(i), f"q{i}d{rank}", float(len(pairs) - n)) for n, (i, rank) in enumerate(pairs)]
    calls = [("pytrec_eval", {Rprec: "r_precision"}), ("gdeval", {ERR @ k: f"err@{k}" for k in K})]
    calls += [("trectools", {RBP(p=persistence) @ k: f"rbp@{k}"}) for k in K]
    values = {}
    for provider, measures in calls:
        values.update({(i, key): 0.0 for i in range(len(lists)) for key in measures.values()})
        for metric in ir_measures.providers.registry[provider].iter_calc(list(measures), qrels, run):
            values[(int(metric.query_id), measures[metric.measure])] = metric.value
    return values


def check(binary, seed, persistence):
    """Compares every list's values; returns how many were compared."""
    lists = random_lists(seed)
    expected = reference(lists, persistence)
    got = replay(binary, replay_log(lists), persistence)
    for (index, key), want in sorted(expected.items()):
        value = got.get((index, key))
        tolerance = TOLERANCE[key.split("@")[0]]
        if value is None or abs(value - want) > tolerance:
            raise SystemExit(f"seed {seed}, p {persistence}, list {index} {lists[index]}: "
                             f"{key} = {value}, ir_measures says {want}")
    return len(expected)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", required=True)
    parser.add_argument("--seed", type=int, action="append")
    args = parser.parse_args()
    for seed in args.seed or DEFAULT_SEEDS:
        for persistence in PERSISTENCES:
            compared = check(args.binary, seed, persistence)
            print(f"seed {seed}, rbp_p {persistence}: {compared} values agree with ir_measures")
    return 0


if __name__ == "__main__":
    sys.exit(main())
