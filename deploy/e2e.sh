#!/usr/bin/env bash
# End to end: `rankwatch demo` scraped by a real Prometheus on 127.0.0.1 with
# the deploy kit's rules; checks that every dashboard query and recording rule
# returns data, that the nDCG recording rule agrees with its expression and
# with the rolling gauges, that every rule evaluates, and that a deliberately
# degraded model makes RankwatchNdcgBelowControl fire. About 3 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v prometheus >/dev/null 2>&1; then
  if [ "$(id -u)" -eq 0 ]; then sudo=; else sudo=sudo; fi
  $sudo apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null
fi
cargo build --release --locked --bins >/dev/null 2>&1

work=$(mktemp -d)
pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

DEMO_HTTP=127.0.0.1:19577
PROM=127.0.0.1:19590
DEGRADE_AFTER=75

# The alert rules as shipped, with every `for:` cut to 10s so that a firing alert shows within the run.
sed -E 's/^( +for: ).*/\110s/' deploy/prometheus/alert_rules.yml >"$work/alert_rules.yml"
cp deploy/prometheus/recording_rules.yml "$work/recording_rules.yml"
cat >"$work/prometheus.yml" <<YAML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [recording_rules.yml, alert_rules.yml]
scrape_configs:
  - job_name: rankwatch
    static_configs: [{targets: ["$DEMO_HTTP"]}]
YAML

demo_started=$(date +%s.%N)
target/release/rankwatch demo --grpc-addr 127.0.0.1:0 --http-addr "$DEMO_HTTP" --rate 5000 \
  --models control=0.9,candidate=0.9 --degrade "candidate=0.0@${DEGRADE_AFTER}s" >"$work/demo.log" 2>&1 &
pids+=($!)
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/data" \
  --web.listen-address="$PROM" >"$work/prometheus.log" 2>&1 &
pids+=($!)
for _ in $(seq 60); do curl -sf "http://$PROM/-/ready" >/dev/null && break; sleep 0.5; done

python3 deploy/grafana/queries.py >"$work/queries.txt"
if ! python3 deploy/e2e/check.py "http://$PROM" "$work/queries.txt" "$DEGRADE_AFTER" "$demo_started"; then
  tail -n 20 "$work/demo.log" "$work/prometheus.log"
  exit 1
fi
