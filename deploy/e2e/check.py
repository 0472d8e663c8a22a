#!/usr/bin/env python3
"""Checks a live Prometheus that scrapes `rankwatch demo` against the deploy
kit: dashboard queries, recording rules, alert rules. Stdlib only.

Usage: check.py PROMETHEUS_URL DASHBOARD_QUERIES_FILE DEGRADE_AFTER_SECONDS DEMO_START_UNIX_TIME
Prints one line per check and a closing `e2e: N passed, M failed` line."""
import json
import sys
import time
import urllib.parse
import urllib.request

PROM, QUERIES, DEGRADE_AFTER, DEMO_STARTED = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
results = []


def api(path, **params):
    """GETs a Prometheus API path and returns its `data`."""
    url = f"{PROM}/api/v1/{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=10) as response:
        body = json.load(response)
    if body.get("status") != "success":
        raise RuntimeError(f"{path} {params}: {body}")
    return body["data"]


def query(expr, at=None):
    """Instant query; returns the result vector."""
    params = {"query": expr}
    if at is not None:
        params["time"] = repr(at)
    return api("query", **params)["result"]


def check(name, ok, detail=""):
    """Records and prints one check."""
    results.append(ok)
    print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}", flush=True)


def wait_for(description, predicate, deadline_s):
    """Polls `predicate` every 2 s until true or the deadline; returns its last value."""
    end = time.time() + deadline_s
    while True:
        value = predicate()
        if value or time.time() > end:
            return value
        time.sleep(2)


def firing(model, since=0.0):
    """Whether RankwatchNdcgBelowControl fires for `model`, active since `since` (Unix time) or later."""
    alerts = api("alerts")["alerts"]
    return any(a["labels"].get("alertname") == "RankwatchNdcgBelowControl" and a["labels"].get("model") == model
               and a["state"] == "firing" and active_at(a) >= since for a in alerts)


def active_at(alert):
    """An alert's activeAt as Unix time."""
    stamp = alert["activeAt"].rstrip("Z").split(".")[0]
    return time.mktime(time.strptime(stamp, "%Y-%m-%dT%H:%M:%S")) - time.timezone


def main():
    # Wait until the recording rules have data for both models.
    have_data = wait_for("recorded nDCG for both models",
                         lambda: len(query('model_k:rankwatch_list_ndcg:mean_rate5m{k="10"}')) >= 2, 90)
    check("recording rules produce nDCG@10 for both models", bool(have_data))

    # (a) every dashboard expression returns data.
    with open(QUERIES) as f:
        expressions = [line.strip() for line in f if line.strip()]
    empty = [e for e in expressions if not query(e)]
    check(f"all {len(expressions)} dashboard queries return series", not empty, "; ".join(empty[:3]))

    # (b) every recording rule has series; the nDCG rule equals its expression and agrees with the gauges.
    groups = api("rules")["groups"]
    records = [r for g in groups for r in g["rules"] if r["type"] == "recording"]
    missing = [r["name"] for r in records if not query(r["name"])]
    check(f"all {len(records)} recording rules have series", not missing, ", ".join(missing))
    name = "model_k:rankwatch_list_ndcg:mean_rate5m"
    rule = next(r for r in records if r["name"] == name)
    recorded = query(f'{name}{{k="10"}}')
    evaluated_at = {s["metric"]["model"]: float(s["value"][1]) for s in query(f'timestamp({name}{{k="10"}})')}
    gauges = ('sum by (model) (rankwatch_ndcg{k="10", window="5m", scope="all"}'
              ' * on (job, instance, model, surface, window, scope) group_left rankwatch_window_lists{window="5m", scope="all"})'
              ' / sum by (model) (rankwatch_window_lists{window="5m", scope="all"})')
    for sample in recorded:
        model = sample["metric"]["model"]
        at, value = evaluated_at[model], float(sample["value"][1])
        same = [float(s["value"][1]) for s in query(rule["query"], at)
                if s["metric"].get("model") == model and s["metric"].get("k") == "10"]
        check(f"recorded nDCG@10 of {model} equals its rule's expression at its evaluation time",
              bool(same) and abs(same[0] - value) <= 1e-9, f"{value} vs {same}")
        gauge = [float(s["value"][1]) for s in query(gauges, at) if s["metric"]["model"] == model]
        # Both cover every list finalized so far while the demo is younger than 5 minutes; they differ only
        # in where a scrape cuts (the window's edge buckets versus rate's extrapolation): 0.05 is generous.
        check(f"recorded nDCG@10 of {model} agrees with the rolling gauges", bool(gauge) and abs(gauge[0] - value) <= 0.05,
              f"{value} vs {gauge}")

    # (d) every rule evaluates without error.
    unhealthy = [r["name"] for g in groups for r in g["rules"] if r.get("health") not in ("ok", "unknown")]
    check("every rule evaluates without error", not unhealthy, ", ".join(unhealthy))

    # (c) silent while both models rank alike (after a warm-up, so that a mean of a few lists is not noise),
    # then firing, newly, once the candidate is degraded.
    time.sleep(max(0.0, DEGRADE_AFTER - 15 - (time.time() - DEMO_STARTED)))
    check("RankwatchNdcgBelowControl silent while the models rank alike", not firing("candidate"))
    degraded_at = DEMO_STARTED + DEGRADE_AFTER
    fired = wait_for("the alert fires", lambda: firing("candidate", since=degraded_at),
                     degraded_at - time.time() + 150)
    check("RankwatchNdcgBelowControl fires for the degraded candidate, after the degradation", bool(fired))
    check("RankwatchNdcgBelowControl does not fire for control", not firing("control"))

    failed = results.count(False)
    print(f"e2e: {len(results) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
