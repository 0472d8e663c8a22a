#!/usr/bin/env bash
# Fleet-mode benchmarks (docs/SPEC.md §10) against a local tansu broker (built by
# tests/install-broker.sh), in memory, on 127.0.0.1 only. Prints one table of
# medians over RUNS runs (default 3), the scenarios interleaved within each
# run so that a busy spell of the shared machine falls on all of them.
#
# 1. Consume throughput of one instance: `rankwatch loadgen --kafka-brokers`
#    first produces for PRODUCE_SECONDS (default 20; 80% interactions, lists
#    of 20 items, keyed by user over 1,000,000 users) to a topic of 12
#    partitions; then a consuming instance in a group of its own reads the
#    topic from the start, pinned to core 0 (one core) or to cores 0-1 (two
#    cores), while the broker runs on core 1. From the instance's own
#    counters (/metrics, sampled every 0.1 s) and /proc: events/s from its
#    first counted event to its last, its CPU seconds per million events,
#    and the broker's CPU share over the same span. The broker is the limit
#    when the instance's cores are not busy; 1e6 / (CPU s per million) is
#    what the instance would do on a core of its own.
# 2. The relay's cost: the server's CPU per million events, pinned to core
#    0, for the same loadgen traffic (RELAY_RATE events/s, default 200,000,
#    for 10 s, batches encoded beforehand, up to 32 batches in flight per
#    stream so that the relay's 10 ms of linger does not hold the rate back)
#    sent over gRPC to a plain `rankwatch serve` and to one with
#    `--kafka-mode relay`; loadgen and broker on core 1.
# Not part of the tests: figures, not assertions. Needs 2 cores, taskset, curl, python3.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
PRODUCE_SECONDS=${PRODUCE_SECONDS:-20}
RELAY_RATE=${RELAY_RATE:-200000}
BIN=target/release/rankwatch
GRPC=127.0.0.1:50072
HTTP=127.0.0.1:19572
BROKER=127.0.0.1:19672
TOPIC=bench.events
work=$(mktemp -d)
server_pid=
broker_pid=
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null
  [ -n "$broker_pid" ] && kill "$broker_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

cargo build --release --locked --bins >/dev/null 2>&1
TANSU=$(bash tests/install-broker.sh)

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
metric() { curl -s "http://$HTTP/metrics" | awk -v name="$1" '$1 == name {print $2}'; }
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
median_of() { cut -d' ' -f"$2" "$work/$1" | median; }
wait_ready() {
  for _ in $(seq 100); do curl -sf "http://$HTTP/readyz" >/dev/null && return; sleep 0.1; done
  echo "the server did not become ready" >&2; cat "$work/server.log" >&2; exit 1
}
stop_server() { kill "$server_pid"; wait "$server_pid" 2>/dev/null || true; server_pid=; }

taskset -c 1 "$TANSU" broker --listener-url "tcp://$BROKER" --advertised-listener-url "tcp://$BROKER" \
  --storage-engine memory://tansu/ >"$work/broker.log" 2>&1 &
broker_pid=$!
for _ in $(seq 100); do (exec 3<>"/dev/tcp/${BROKER%:*}/${BROKER##*:}") 2>/dev/null && break; sleep 0.1; done
for topic in "$TOPIC" bench.relay; do
  "$TANSU" topic create --broker "tcp://$BROKER" --partitions 12 "$topic" >/dev/null
done

# The log: what the loadgen produces in PRODUCE_SECONDS, generated as it
# goes, in record batches of up to 500 (tansu may lose a few of those: the
# consumer's count is what was stored).
taskset -c 0 "$BIN" loadgen --kafka-brokers "$BROKER" --kafka-topic "$TOPIC" --kafka-batch-records 500 \
  --rate 0 --streams 4 --max-inflight 8 --batch-size 500 --users 1000000 \
  --duration "${PRODUCE_SECONDS}s" >"$work/produce.txt"
produced=$(awk '$1 == "acked" {print $2}' "$work/produce.txt")
produce_rate=$(awk '/throughput/ {print $2}' "$work/produce.txt")

# Consumes the whole topic with a fresh group on cores $1; appends
# "events/s cpu-s-per-million broker-share% instance-share%" to $work/$2.
consume() {
  local cores=$1 file=$2 group="bench-$RANDOM$RANDOM"
  taskset -c "$cores" "$BIN" serve --grpc-addr 127.0.0.1:0 --http-addr "$HTTP" --wall-clock-advance false \
    --attribution-window 2s --allowed-lateness 1s --kafka-mode consume --kafka-brokers "$BROKER" \
    --kafka-topic "$TOPIC" --kafka-group "$group" --kafka-state-topic "$group.state" \
    --shutdown-linger 0s >"$work/server.log" 2>&1 &
  server_pid=$!
  wait_ready
  local received=0 start first_ticks first_broker first_count
  while [ "${received%.*}" -eq 0 ]; do received=$(metric rankwatch_events_received_total); received=${received:-0}; sleep 0.02; done
  start=$(date +%s.%N); first_ticks=$(ticks "$server_pid"); first_broker=$(ticks "$broker_pid"); first_count=$received
  # Caught up: the count has not moved for 2 s. The span ends at its last move.
  local end=$start now_ticks=$first_ticks now_broker=$first_broker last=$received still=0 sample
  while [ "$still" -lt 20 ]; do
    sleep 0.1; sample=$(metric rankwatch_events_received_total)
    if [ "$sample" = "$last" ]; then still=$((still + 1)); continue; fi
    still=0; last=$sample; received=$sample
    end=$(date +%s.%N); now_ticks=$(ticks "$server_pid"); now_broker=$(ticks "$broker_pid")
  done
  stop_server
  python3 -c "
events = $received - $first_count; secs = $end - $start
cpu = ($now_ticks - $first_ticks) / 100; broker = ($now_broker - $first_broker) / 100
print(round(events / secs), round(cpu / events * 1e6, 3), round(100 * broker / secs), round(100 * cpu / secs))" >>"$work/$file"
}

# Sends RELAY_RATE events/s for 10 s over gRPC to a server started with the
# arguments; appends "events cpu-s-per-million" to $work/$1.
ingest() {
  local file=$1; shift
  taskset -c 0 "$BIN" serve --grpc-addr "$GRPC" --http-addr "$HTTP" --wall-clock-advance false "$@" >"$work/server.log" 2>&1 &
  server_pid=$!
  wait_ready
  local before after
  before=$(ticks "$server_pid")
  taskset -c 1 "$BIN" loadgen --target "http://$GRPC" --rate "$RELAY_RATE" --streams 2 --users 1000000 \
    --max-inflight 32 --duration 10s --pregenerate "$RELAY_RATE" >"$work/load.txt"
  after=$(ticks "$server_pid")
  stop_server
  local accepted
  accepted=$(awk '$1 == "acked" {print $2}' "$work/load.txt")
  python3 -c "print($accepted, round(($after - $before) / 100 / $accepted * 1e6, 3))" >>"$work/$file"
}

for _ in $(seq "$RUNS"); do
  consume 0 one
  consume 0,1 two
  ingest direct
  ingest relay --kafka-mode relay --kafka-brokers "$BROKER" --kafka-topic bench.relay
done

python3 - "$work" <<'PY' >"$work/derived"
import sys
w = sys.argv[1]
def col(f, i):
    xs = sorted(float(l.split()[i]) for l in open(f"{w}/{f}"))
    return xs[(len(xs) - 1) // 2]
direct, relay = col("direct", 1), col("relay", 1)
print(round(1e6 / col("one", 1)), round(1e6 / col("two", 1)), round((relay - direct), 3))
PY
read -r one_capacity two_capacity relay_extra <"$work/derived"

cat <<TABLE

rankwatch fleet benchmarks: $(nproc) cores, $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo), median of $RUNS interleaved runs
log: $produced events acknowledged in 12 partitions, produced by the loadgen at $produce_rate events/s

| scenario | result | target |
|---|---|---|
| consume, instance on core 0, broker on core 1 | $(median_of one 1) events/s, $(median_of one 2) s CPU per million (instance $(median_of one 4)% of a core, broker $(median_of one 3)%) | >= 1,000,000 per core |
| the same, rankwatch alone on a core (1e6 / CPU per million) | $one_capacity events/s | |
| consume, instance on cores 0-1, broker on core 1 | $(median_of two 1) events/s, $(median_of two 2) s CPU per million (instance $(median_of two 4)% of a core, broker $(median_of two 3)%) | >= 1.8x one core |
| direct gRPC ingest at $RELAY_RATE events/s, server CPU per million | $(median_of direct 2) s | |
| relay (kafka_mode = relay) at $RELAY_RATE events/s, server CPU per million | $(median_of relay 2) s | |
| relay's CPU per event minus direct ingest's | $relay_extra us | <= 1 us |
TABLE
