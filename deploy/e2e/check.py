#!/usr/bin/env python3
"""The checks of deploy/e2e.sh, against a live Prometheus that scrapes
`rankwatch demo` with the deploy kit's rules. Standard library only.

Timeline (t = seconds since the demo started, D = --degrade-after):
  t ~ 15-45  the recording rules first hold nDCG@10 for both models
             (a) every dashboard query returns a series
             (b) every recording rule (and every alert) of the files is loaded,
                 every recording rule has a series
  ... D + 10 (c) RankwatchNdcgBelowControl never fires for candidate while both
                 models rank alike (polled every 2 s; lists shown after the
                 degradation are finalized 12 s later at the earliest)
             (b) nDCG@10 per model: recording rule = direct rate query (1e-9),
                 = rolling gauges (0.02), gauges = since-start summary (1e-9)
  ... D + 150 (c) RankwatchNdcgBelowControl fires for candidate, and
                 RankwatchInterleavingCandidateLoses in the interleaved lists
             (b) the same three nDCG@10 comparisons on the degraded data
             (d) every rule evaluates without error; no other alert fires

Prints one `ok`/`FAIL` line per check, then `e2e: N passed, M failed` last.
Exits 1 if a check failed.
"""
import argparse
import calendar
import json
import math
import re
import signal
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

ALERT = "RankwatchNdcgBelowControl"
# The demo interleaves a share of its lists: this alert reads the same degradation.
INTERLEAVING_ALERT = "RankwatchInterleavingCandidateLoses"
RECORDED = "model_k:rankwatch_list_ndcg:mean_rate5m"
MODELS = ("control", "candidate")

# The recording rule's definition, written out independently of the rule file.
DIRECT = ('sum by (model) (rate(rankwatch_list_ndcg_sum{k="10"}[5m]))'
          ' / sum by (model) (rate(rankwatch_list_ndcg_count{k="10"}[5m]))')
# rankwatch's own 5m rolling means of one instance, combined over surfaces
# weighting each by its number of lists (what the dashboard does).
GAUGES = ('sum by (model) (rankwatch_ndcg{k="10", window="5m", scope="all"}'
          ' * on (job, instance, model, surface, window, scope) group_left'
          ' rankwatch_window_lists{window="5m", scope="all"})'
          ' / sum by (model) (rankwatch_window_lists{window="5m", scope="all"})')
# The mean over every list finalized since the start.
SINCE_START = ('sum by (model) (rankwatch_list_ndcg_sum{k="10"})'
               ' / sum by (model) (rankwatch_list_ndcg_count{k="10"})')

# Recording rule vs rolling gauges. Both are the mean nDCG@10 of (nearly) the
# same lists while the demo is younger than 5 minutes, but rate() leaves out
# the lists already counted in a series' first scraped sample (~1 s of lists)
# and extrapolates _sum and _count to the range edges with slightly different
# factors. Measured: <= 0.005 with ~20 s of lists, <= 0.0015 with 60 s or more
# (these checks run at >= 60 s), including right after the degradation, when
# the mean moves. 0.02 is > 10x that, yet below the 0.03-0.04 gap between the
# "all" and "engaged" scopes, and far below the 0.1-0.2 the degradation moves.
GAUGE_TOLERANCE = 0.02
EXACT = 1e-9


class Timeout(Exception):
    pass


class ApiError(Exception):
    pass


results = []


def check(name, ok, detail=""):
    results.append(bool(ok))
    print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}", flush=True)


def api(path, **params):
    url = f"{ARGS.prometheus}/api/v1/{path}"
    if params:
        url += "?" + urllib.parse.urlencode(params)
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            body = json.load(response)
    except urllib.error.HTTPError as e:
        try:
            body = json.load(e)
        except ValueError:
            raise ApiError(f"GET {url}: HTTP {e.code}") from None
    except (urllib.error.URLError, OSError) as e:
        raise ApiError(f"GET {url}: {e}") from None
    if body.get("status") != "success":
        raise ApiError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
    return body["data"]


def query(expr, at=None):
    params = {"query": expr}
    if at is not None:
        params["time"] = at
    return api("query", **params)["result"]


def by_model(result):
    return {s["metric"].get("model"): float(s["value"][1]) for s in result}


def since_demo(t=None):
    return (time.time() if t is None else t) - ARGS.demo_started


def wait_until(predicate, until):
    """Calls predicate every second until it returns a true value or the Unix time `until`."""
    while True:
        try:
            value = predicate()
        except ApiError:
            value = None
        if value or time.time() >= until:
            return value
        time.sleep(1)


def alerts():
    return api("alerts")["alerts"]


def below_control(alert_list, model, state):
    return [a for a in alert_list if a["labels"].get("alertname") == ALERT
            and a["labels"].get("model") == model and a["state"] == state]


def candidate_loses(alert_list, state):
    return [a for a in alert_list if a["labels"].get("alertname") == INTERLEAVING_ALERT
            and a["labels"].get("candidate") == "candidate" and a["state"] == state]


def unix(stamp):
    """RFC 3339 (as Prometheus writes it, UTC) to Unix time."""
    whole, _, frac = stamp.rstrip("Z").partition(".")
    return calendar.timegm(time.strptime(whole, "%Y-%m-%dT%H:%M:%S")) + (float("0." + frac) if frac else 0.0)


def file_names(path, key):
    with open(path, encoding="utf-8") as f:
        return re.findall(rf"^\s*-\s*{key}:\s*(\S+)\s*$", f.read(), re.M)


# ---------------------------------------------------------------------------

def check_scraped():
    up = wait_until(lambda: [s for s in query('up{job="rankwatch"}') if s["value"][1] == "1"],
                    time.time() + 20)
    check("Prometheus scrapes the demo's /metrics (up == 1)", up)


def check_recorded_data():
    until = ARGS.demo_started + ARGS.degrade_after - 5
    have = wait_until(lambda: set(MODELS) <= set(by_model(query(f'{RECORDED}{{k="10"}}'))), until)
    check(f"{RECORDED}{{k=\"10\"}} has both models before the degradation",
          have, "" if have else f"not by t={since_demo():.0f}s")


def check_dashboard():
    with open(ARGS.queries, encoding="utf-8") as f:
        expressions = [line.strip() for line in f if line.strip()]
    check("deploy/grafana/queries.py prints expressions", expressions, f"{len(expressions)}")
    for i, expr in enumerate(expressions, 1):
        try:
            result = query(expr)
            finite = [s for s in result if math.isfinite(float(s["value"][1]))]
            ok = bool(finite)
            detail = (f"{len(result)} series" if ok else
                      f"{'only NaN/Inf values' if result else 'no series'} for: {expr}")
        except ApiError as e:
            ok, detail = False, f"{e} for: {expr}"
        check(f"dashboard query {i}/{len(expressions)} returns a series", ok, detail)


def rules():
    return [r for g in api("rules")["groups"] for r in g["rules"]]


def check_rules_loaded():
    loaded = rules()
    recording = {r["name"] for r in loaded if r["type"] == "recording"}
    alerting = {r["name"]: r for r in loaded if r["type"] == "alerting"}
    wanted = file_names(ARGS.recording_rules, "record")
    missing = [n for n in wanted if n not in recording]
    check(f"Prometheus loaded the {len(wanted)} recording rules of recording_rules.yml",
          wanted and not missing, ", ".join(missing))
    wanted = file_names(ARGS.alert_rules, "alert")
    missing = [n for n in wanted if n not in alerting]
    slow = [f"{n} for {alerting[n]['duration']}s" for n in wanted
            if n in alerting and alerting[n]["duration"] > ARGS.for_seconds]
    check(f"Prometheus loaded the {len(wanted)} alerts of alert_rules.yml, every `for` <= {ARGS.for_seconds}s",
          wanted and not missing and not slow, ", ".join(missing + slow))
    for name in file_names(ARGS.recording_rules, "record"):
        try:
            result = query(name)
            detail = f"{len(result)} series" if result else "no series"
        except ApiError as e:
            result, detail = [], str(e)
        check(f"recording rule {name} has series", result, detail)


def check_not_firing_before():
    """(c) Polls the alerts from now until 10 s after the degradation."""
    until = ARGS.demo_started + ARGS.degrade_after + 10
    polls, pending, firing, errors = 0, set(), [], []
    first = time.time()
    while time.time() < until:
        try:
            current = alerts()
            polls += 1
            pending |= {a["labels"].get("surface") for a in below_control(current, "candidate", "pending")}
            firing += [(since_demo(), a["labels"].get("surface")) for a in below_control(current, "candidate", "firing")]
            firing += [(since_demo(), "interleaved " + a["labels"].get("surface", "")) for a in candidate_loses(current, "firing")]
        except ApiError as e:
            errors.append(str(e))
        time.sleep(2)
    # The check means something only if the alert had recorded data long
    # enough to go through `for` before the window ended.
    samples = query(f'{RECORDED}{{k="10", model="candidate"}}[5m]')
    first_record = min((float(v[0]) for s in samples for v in s["values"]), default=math.inf)
    ratio = query(f'model_surface_k:rankwatch_list_ndcg:mean_rate5m{{k="10", model="candidate"}}'
                  f' / on (surface, k) group_left model_surface_k:rankwatch_list_ndcg:mean_rate5m{{k="10", model="control"}}')
    ratios = ", ".join(f"{s['metric']['surface']} {float(s['value'][1]):.3f}" for s in ratio)
    meaningful = first_record <= until - ARGS.for_seconds - 2 and polls >= 5 and ratio
    detail = (f"polled {polls} times from t={since_demo(first):.0f}s to t={since_demo():.0f}s;"
              f" candidate/control nDCG@10 {ratios or 'absent'}")
    if firing:
        detail += f"; FIRING at {', '.join(f't={t:.0f}s ({s})' for t, s in firing[:4])}"
    if pending:
        detail += f"; pending at times on {sorted(pending)}"
    if not meaningful:
        detail += f"; recorded data first at t={since_demo(first_record):.0f}s: too late to tell"
    if errors:
        detail += f"; {len(errors)} failed polls, e.g. {errors[0]}"
    check(f"{ALERT} and {INTERLEAVING_ALERT} not firing for candidate before the degradation",
          meaningful and not firing and not errors, detail)


def check_consistency(when):
    """(b) nDCG@10 per model: the recording rule against the direct query,
    the rolling gauges and the since-start summary, at the rule's evaluation times."""
    samples = {s["metric"]["model"]: s["values"] for s in query(f'{RECORDED}{{k="10"}}[95s]', repr(time.time()))}
    for model in MODELS:
        values = samples.get(model, [])
        if not values:
            for what in ("equals the direct rate query", "agrees with the rolling gauges",
                         "rolling gauges equal the since-start mean"):
                check(f"{when}: nDCG@10 of {model}: {what}", False, f"no recorded sample of {RECORDED}")
            continue
        # Exact: the latest evaluation, else one of the two before it. (The
        # rule may have missed a scrape whose sample has an earlier timestamp
        # but was still being appended when the rule ran; an instant query
        # afterwards sees it. e2e.sh's scrape interval keeps that from
        # happening at every evaluation. A wrong rule would differ at every
        # evaluation.)
        tried = []
        for ts, value in reversed(values[-3:]):
            direct = by_model(query(DIRECT, repr(ts))).get(model)
            tried.append(f"t={since_demo(ts):.0f}s {float(value):.12g} vs {direct!r}")
            if direct is not None and abs(direct - float(value)) <= EXACT:
                break
        else:
            check(f"{when}: nDCG@10 of {model}: recording rule equals the direct rate query", False, "; ".join(tried))
            ts = None
        if ts is not None:
            check(f"{when}: nDCG@10 of {model}: recording rule equals the direct rate query", True, tried[-1])
        ts, value = values[-1][0], float(values[-1][1])
        gauges = by_model(query(GAUGES, repr(ts))).get(model)
        check(f"{when}: nDCG@10 of {model}: recording rule agrees with the rolling 5m gauges (±{GAUGE_TOLERANCE})",
              gauges is not None and abs(gauges - value) <= GAUGE_TOLERANCE,
              f"t={since_demo(ts):.0f}s rule {value:.6f}, gauges {gauges!r}")
        # While the demo is younger than 5 minutes, the 5m window holds every
        # finalized list, so the gauges' mean is the since-start mean.
        since_start = by_model(query(SINCE_START, repr(ts))).get(model)
        young = since_demo(ts) < 290
        check(f"{when}: nDCG@10 of {model}: rolling 5m gauges equal the since-start _sum/_count mean",
              young and gauges is not None and since_start is not None and abs(gauges - since_start) <= EXACT,
              f"gauges {gauges!r}, _sum/_count {since_start!r}" + ("" if young else "; demo older than 5m"))


def check_fires():
    degraded_at = ARGS.demo_started + ARGS.degrade_after
    fired = wait_until(lambda: [a for a in below_control(alerts(), "candidate", "firing")
                                if unix(a["activeAt"]) >= degraded_at], degraded_at + 150)
    if fired:
        detail = (f"on {sorted(a['labels'].get('surface') for a in fired)}, {since_demo() - ARGS.degrade_after:.0f}s"
                  f" after the degradation, value {float(fired[0]['value']):.3f}")
    else:
        detail = f"not firing {since_demo() - ARGS.degrade_after:.0f}s after the degradation"
    check(f"{ALERT} fires for candidate after the degradation", fired, detail)
    lost = wait_until(lambda: [a for a in candidate_loses(alerts(), "firing")
                               if unix(a["activeAt"]) >= degraded_at], degraded_at + 150)
    detail = (f"on {sorted(a['labels'].get('surface') for a in lost)}, value {float(lost[0]['value']):.3f}" if lost
              else f"not firing {since_demo() - ARGS.degrade_after:.0f}s after the degradation")
    check(f"{INTERLEAVING_ALERT} fires for candidate in interleaved lists after the degradation", lost, detail)


def check_end():
    up = [s["value"][1] for s in query('up{job="rankwatch"}')]
    check("the demo still serves /metrics at the end (up == 1)", up == ["1"], f"up {up}")
    current = alerts()
    control = [a["state"] for a in current if a["labels"].get("alertname") == ALERT
               and a["labels"].get("model") == "control"]
    check(f"{ALERT} neither pending nor firing for control", not control, ", ".join(control))
    expected = {(ALERT, "candidate"), (INTERLEAVING_ALERT, "candidate")}
    others = [f"{a['labels'].get('alertname')}{{model={a['labels'].get('model')}}}" for a in current
              if a["state"] == "firing" and (a["labels"].get("alertname"),
                                             a["labels"].get("model") or a["labels"].get("candidate")) not in expected]
    check("no other alert fires on the demo's healthy pipeline", not others, ", ".join(others))
    loaded = rules()
    for rule in loaded:
        if rule["type"] == "alerting":
            check(f"alert {rule['name']} evaluates without error",
                  rule.get("health") == "ok" and not rule.get("lastError"),
                  f"health {rule.get('health')!r}" + (f", {rule.get('lastError')}" if rule.get("lastError") else ""))
    bad = [f"{r['name']}: {r.get('health')} {r.get('lastError', '')}".strip() for r in loaded
           if r["type"] == "recording" and (r.get("health") != "ok" or r.get("lastError"))]
    check(f"all {sum(r['type'] == 'recording' for r in loaded)} recording rules evaluate without error",
          not bad, "; ".join(bad))


def main():
    def on_term(*_):
        raise Timeout()
    signal.signal(signal.SIGTERM, on_term)
    try:
        check_scraped()
        check_recorded_data()
        check_dashboard()
        check_rules_loaded()
        check_not_firing_before()
        check_consistency("before the degradation")
        check_fires()
        check_consistency("after the degradation")
        check_end()
    except Timeout:
        check("the checks ran to the end", False, f"stopped by a signal (the {ARGS.prometheus} run hit its time limit?) at t={since_demo():.0f}s")
    except ApiError as e:
        check("the Prometheus API answered", False, str(e))
    failed = results.count(False)
    if failed:
        for path in ARGS.log:
            print(f"--- last lines of {path}")
            with open(path, encoding="utf-8", errors="replace") as f:
                print("".join(f.readlines()[-20:]), end="")
    print(f"e2e: took {time.time() - ARGS.started:.0f}s")
    print(f"e2e: {len(results) - failed} passed, {failed} failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prometheus", required=True, help="base URL, e.g. http://127.0.0.1:19590")
    parser.add_argument("--queries", required=True, help="output of deploy/grafana/queries.py")
    parser.add_argument("--recording-rules", required=True)
    parser.add_argument("--alert-rules", required=True, help="the shipped alert_rules.yml")
    parser.add_argument("--for-seconds", type=float, required=True, help="the shortened `for` of the loaded alerts")
    parser.add_argument("--demo-started", type=float, required=True, help="Unix time the demo was started")
    parser.add_argument("--degrade-after", type=float, required=True, help="the demo's --degrade delay, seconds")
    parser.add_argument("--started", type=float, default=time.time(), help="Unix time the e2e run started")
    parser.add_argument("--log", action="append", default=[], help="log to show on failure (repeatable)")
    ARGS = parser.parse_args()
    sys.exit(main())
