#!/usr/bin/env bash
# End to end: the deploy kit against the real binary and a real Prometheus.
#
# Runs `rankwatch demo` with `control` and `candidate` at equal quality
# (30% of its lists interleaving both, the split checked against 50/50) and
# degrades `candidate` to 0.05 after 60 s, has Debian's prometheus scrape it
# every second (rules evaluated every second) with recording_rules.yml as
# shipped and a copy of alert_rules.yml whose `for:` durations are cut to 10s,
# and checks through the HTTP API (deploy/e2e/check.py):
#   (a) every expression of deploy/grafana/queries.py returns a series;
#   (b) every recording rule has series; nDCG@10 per model of
#       model_k:rankwatch_list_ndcg:mean_rate5m equals
#       sum(rate(_sum[5m])) / sum(rate(_count[5m])) (1e-9) and agrees with the
#       rolling 5m gauges weighted by rankwatch_window_lists (0.02);
#   (c) RankwatchNdcgBelowControl and RankwatchInterleavingCandidateLoses do
#       not fire for candidate before the degradation and fire after it;
#   (d) every rule evaluates without error (/api/v1/rules health "ok").
# Ends with the line `e2e: N passed, M failed`; exits 1 if a check failed.
# About 2.5 minutes plus the build. Listens on 127.0.0.1 only: ports 19577
# (demo HTTP; gRPC on a free port) and 19590 (Prometheus), or
# E2E_DEMO_PORT / E2E_PROMETHEUS_PORT.
set -euo pipefail
cd "$(dirname "$0")/.."

started=$(date +%s.%N)
demo_http=127.0.0.1:${E2E_DEMO_PORT:-19577}
prom_http=127.0.0.1:${E2E_PROMETHEUS_PORT:-19590}
degrade_after=60   # seconds; time enough for the "not firing" check (lists finalize ~12 s after they are shown)
for_seconds=10
checks_timeout=270 # the checks' own deadlines end them by ~230 s after the demo starts

work=$(mktemp -d "${TMPDIR:-/tmp}/rankwatch-e2e.XXXXXX")
pids=()
alive() { [ -n "$(ps -o stat= -p "$1" 2>/dev/null | grep -v '^Z')" ]; }
cleanup() {
  local pid deadline=$((SECONDS + 10))
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do
    while alive "$pid" && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.2; done
    kill -KILL "$pid" 2>/dev/null || true
  done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# A failure before the checks run: the reason, the logs, the closing line.
setup_failed() {
  echo "e2e: FAIL $1"
  shift
  local log
  for log in "$@"; do echo "--- last lines of $log"; tail -n 30 "$log"; done
  echo "e2e: 0 passed, 1 failed"
  exit 1
}

# Prometheus and promtool from Debian, as tests/install-deps.sh installs them.
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1; then
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null
fi

# Waits when another build holds the lock.
cargo build --release --locked --bins >"$work/build.log" 2>&1 ||
  setup_failed "cargo build --release --locked --bins failed" "$work/build.log"

port_busy() { (exec 3<>"/dev/tcp/${1%:*}/${1##*:}") 2>/dev/null; }
for addr in "$demo_http" "$prom_http"; do
  if port_busy "$addr"; then
    setup_failed "$addr is in use; choose other ports with E2E_DEMO_PORT and E2E_PROMETHEUS_PORT"
  fi
done

# The rules. recording_rules.yml is loaded as shipped (its group keeps its own
# 30s interval). The alert rules are copied with every `for:` cut to 10s and
# nothing else changed: the [5m] rates work from the second sample on, and
# while the demo is younger than 5 minutes they cover everything since its
# start; the day-over-day alerts compare with `offset 1d`, which is empty in a
# fresh TSDB, so they evaluate (health "ok") but cannot fire, which is right.
cp deploy/prometheus/recording_rules.yml "$work/recording_rules.yml"
sed -E "s/^([[:space:]]+for:[[:space:]]*).*/\1${for_seconds}s/" deploy/prometheus/alert_rules.yml >"$work/alert_rules.yml"
fors=$(grep -cE '^[[:space:]]+for:' deploy/prometheus/alert_rules.yml || true)
if [ "$fors" -eq 0 ] || [ "$(grep -cE "^[[:space:]]+for: ${for_seconds}s\$" "$work/alert_rules.yml")" -ne "$fors" ] ||
  ! diff <(grep -vE '^[[:space:]]+for:' deploy/prometheus/alert_rules.yml) \
    <(grep -vE '^[[:space:]]+for:' "$work/alert_rules.yml") >/dev/null; then
  setup_failed "could not shorten the $fors 'for:' lines of deploy/prometheus/alert_rules.yml"
fi
# Scrapes every 1.1 s, not 1 s: the recording rules' 30 s is then no
# multiple of it, so each evaluation falls 0.3 s later in the scrape cycle
# than the one before. Every 1 s, an evaluation that fell within a scrape
# (~20 ms; the rules group's place in the cycle comes from a hash of its
# file's path, which lies in a fresh temporary directory) fell within one
# at each evaluation, and missed its sample every time.
cat >"$work/prometheus.yml" <<YAML
global:
  scrape_interval: 1100ms
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files: [recording_rules.yml, alert_rules.yml]
scrape_configs:
  - job_name: rankwatch
    static_configs: [{targets: ["$demo_http"]}]
YAML
promtool check config "$work/prometheus.yml" >"$work/promtool.log" 2>&1 ||
  setup_failed "promtool check config rejects the Prometheus configuration or the rules" "$work/promtool.log"
python3 deploy/grafana/queries.py >"$work/queries.txt" 2>"$work/queries.log" ||
  setup_failed "deploy/grafana/queries.py failed" "$work/queries.log"

# Waits up to $2 seconds for URL $1 to answer 200 while process $3 lives.
wait_http() {
  local deadline=$((SECONDS + $2))
  while [ "$SECONDS" -lt "$deadline" ]; do
    curl -sf --max-time 2 -o /dev/null "$1" && return 0
    alive "$3" || return 1
    sleep 0.25
  done
  return 1
}

demo_started=$(date +%s.%N)
"${CARGO_TARGET_DIR:-target}/release/rankwatch" demo --grpc-addr 127.0.0.1:0 --http-addr "$demo_http" --rate 5000 \
  --models control=0.9,candidate=0.9 --degrade "candidate=0.05@${degrade_after}s" --interleave 0.3 \
  --expected-split control=0.5,candidate=0.5 >"$work/demo.log" 2>&1 &
demo_pid=$!
pids+=("$demo_pid")
wait_http "http://$demo_http/metrics" 20 "$demo_pid" ||
  setup_failed "rankwatch demo does not serve http://$demo_http/metrics" "$work/demo.log"

prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/data" \
  --web.listen-address="$prom_http" >"$work/prometheus.log" 2>&1 &
prom_pid=$!
pids+=("$prom_pid")
wait_http "http://$prom_http/-/ready" 30 "$prom_pid" ||
  setup_failed "prometheus is not ready at http://$prom_http" "$work/prometheus.log"

timeout "$checks_timeout" python3 deploy/e2e/check.py --prometheus "http://$prom_http" \
  --queries "$work/queries.txt" --recording-rules deploy/prometheus/recording_rules.yml \
  --alert-rules deploy/prometheus/alert_rules.yml --for-seconds "$for_seconds" \
  --demo-started "$demo_started" --degrade-after "$degrade_after" --started "$started" \
  --log "$work/demo.log" --log "$work/prometheus.log" &
pids+=("$!")
status=0
wait "$!" || status=$?
exit "$status"
