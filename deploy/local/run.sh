#!/usr/bin/env bash
# Local monitoring in one command: `rankwatch demo` with a candidate that
# degrades, and Debian's Prometheus scraping it with the shipped recording
# and alert rules. Watch the alerts at http://127.0.0.1:9090/alerts and the
# status page at http://127.0.0.1:9477/. Ctrl-C stops both.
#
#   bash deploy/local/run.sh            # alerts fire within about two minutes
#   QUICK_ALERTS=0 bash deploy/local/run.sh   # the rules exactly as shipped (for: 5m and more)
#
# With QUICK_ALERTS=1 (the default) the alert rules are loaded with every
# `for:` cut to 15s, and the demo degrades `candidate` to 0.05 after 30 s:
# RankwatchNdcgBelowControl fires about two minutes after the start. The
# shipped rules wait 5 minutes or more before they page, which is right in
# production and slow for a first look. Listens on 127.0.0.1 only: 9477
# (demo HTTP), 50051 (demo gRPC) and 9090 (Prometheus), or DEMO_HTTP_PORT,
# DEMO_GRPC_PORT and PROMETHEUS_PORT.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
demo_http="127.0.0.1:${DEMO_HTTP_PORT:-9477}"
demo_grpc="127.0.0.1:${DEMO_GRPC_PORT:-50051}"
prom_http="127.0.0.1:${PROMETHEUS_PORT:-9090}"
quick="${QUICK_ALERTS:-1}"

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
if ! command -v prometheus >/dev/null 2>&1; then
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null
fi
bin="${RANKWATCH:-}"
if [ -z "$bin" ]; then
  (cd "$repo" && cargo build --release --locked --bin rankwatch)
  bin="${CARGO_TARGET_DIR:-$repo/target}/release/rankwatch"
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/rankwatch-local.XXXXXX")"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT

cp "$repo/deploy/prometheus/recording_rules.yml" "$work/"
if [ "$quick" = 1 ]; then
  sed -E 's/^([[:space:]]+for:[[:space:]]*).*/\115s/' "$repo/deploy/prometheus/alert_rules.yml" >"$work/alert_rules.yml"
  degrade=(--degrade "candidate=0.05@30s")
else
  cp "$repo/deploy/prometheus/alert_rules.yml" "$work/"
  degrade=(--degrade "candidate=0.05@2m")
fi
sed -e "s|../prometheus/||" -e "s|127.0.0.1:9477|$demo_http|" "$here/prometheus.yml" >"$work/prometheus.yml"
promtool check config "$work/prometheus.yml" >/dev/null

"$bin" demo --grpc-addr "$demo_grpc" --http-addr "$demo_http" "${degrade[@]}" >"$work/demo.log" 2>&1 &
pids+=("$!")
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/data" \
  --web.listen-address="$prom_http" >"$work/prometheus.log" 2>&1 &
pids+=("$!")
echo "status page: http://$demo_http/   alerts: http://$prom_http/alerts   (Ctrl-C stops both)"
wait -n "${pids[@]}"
echo "run.sh: the demo or Prometheus stopped; last lines of their logs:" >&2
tail -n 20 "$work/demo.log" "$work/prometheus.log" >&2
exit 1
