#!/usr/bin/env bash
# The rebalance pause of fleet mode (docs/SPEC.md §10): how long partitions
# go unevaluated when an instance joins a consuming group, as a function of
# the open state the partitions hand over. Against a local tansu broker (built
# by tests/install-broker.sh), in memory, on 127.0.0.1 only.
#
# For each size in SIZES (seconds of loadgen traffic, default "1 4 16"):
# 1. `rankwatch loadgen --kafka-brokers` produces that many seconds of traffic
#    (lists of 20 items over 1,000,000 users) to a topic of 12 partitions.
# 2. Instance A consumes all of it with a 1 h attribution window and the
#    wall-clock advance off, so every list stays open: the open state of the
#    handoff is every list of the log.
# 3. Instance B joins. Eager rebalancing hands every partition over: A
#    checkpoints and hands over its 12 partitions, then A and B each restore
#    theirs from the state topic. The pause is read from the two instances'
#    logs: from A's first "partition handed over" to the last "partition
#    taken" after it (its partitions evaluate nothing in between).
# Prints "open_lists snapshot_bytes pause_ms" per size, RUNS times (default 3).
# Not part of the tests: figures, not assertions. Needs curl and python3.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
SIZES=${SIZES:-"1 4 16"}
BIN=target/release/rankwatch
BROKER=127.0.0.1:19673
work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

cargo build --release --locked --bins >/dev/null 2>&1
TANSU=$(bash tests/install-broker.sh)

metric() { { curl -s "http://$1/metrics" || true; } | awk -v name="$2" '$1 == name {print $2}'; }
# Milliseconds since the epoch of a log line's RFC 3339 timestamp.
millis() { python3 -c 'import sys,datetime; print(int(datetime.datetime.fromisoformat(sys.argv[1].replace("Z","+00:00")).timestamp()*1000))' "$1"; }
strip() { sed 's/\x1b\[[0-9;]*m//g' "$1"; }

instance() { # $1: http port, $2: group, $3: log
  "$BIN" serve --grpc-addr 127.0.0.1:0 --http-addr "127.0.0.1:$1" --wall-clock-advance false \
    --attribution-window 1h --allowed-lateness 1s --shutdown-linger 1s \
    --kafka-mode consume --kafka-brokers "$BROKER" --kafka-topic "$TOPIC" --kafka-group "$2" \
    --kafka-state-topic "$TOPIC.$2.state" >/dev/null 2>"$3" &
  pids+=($!)
}

"$TANSU" broker --listener-url "tcp://$BROKER" --advertised-listener-url "tcp://$BROKER" \
  --storage-engine memory://tansu/ >"$work/broker.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do (exec 3<>"/dev/tcp/${BROKER%:*}/${BROKER##*:}") 2>/dev/null && break; sleep 0.1; done

echo "open_lists snapshot_bytes pause_ms"
for run in $(seq "$RUNS"); do
  for size in $SIZES; do
    TOPIC="rebalance.$run.$size"
    group="g$run$size$RANDOM"
    "$TANSU" topic create --broker "tcp://$BROKER" --partitions 12 "$TOPIC" >/dev/null
    "$BIN" loadgen --kafka-brokers "$BROKER" --kafka-topic "$TOPIC" --kafka-batch-records 500 \
      --rate 0 --streams 2 --max-inflight 8 --batch-size 500 --users 1000000 \
      --duration "${size}s" >"$work/produce.txt"
    produced=$(awk '$1 == "acked" {print $2}' "$work/produce.txt")
    instance 19581 "$group" "$work/a.log"
    a=${pids[-1]}
    # A has read the whole log once its received count stops at the produced count.
    for _ in $(seq 1200); do
      got=$(metric 127.0.0.1:19581 rankwatch_events_received_total)
      [ "${got:-0}" = "$produced" ] && break
      sleep 0.1
    done
    sleep 2 # a commit with its snapshots
    open=$(metric 127.0.0.1:19581 rankwatch_open_impressions)
    bytes=$(metric 127.0.0.1:19581 rankwatch_kafka_snapshot_bytes)
    instance 19582 "$group" "$work/b.log"
    b=${pids[-1]}
    # Both own partitions, and together all 12.
    for _ in $(seq 1200); do
      pa=$(metric 127.0.0.1:19581 rankwatch_kafka_partitions); pb=$(metric 127.0.0.1:19582 rankwatch_kafka_partitions)
      [ "${pa:-0}" != 0 ] && [ "${pb:-0}" != 0 ] && [ $((${pa%.*} + ${pb%.*})) = 12 ] && break
      sleep 0.1
    done
    first=$(strip "$work/a.log" | awk '/partition handed over/ {print $1; exit}')
    last=$(cat <(strip "$work/a.log") <(strip "$work/b.log") | grep 'partition taken' | awk '{print $1}' | sort | tail -1)
    echo "$open $bytes $(( $(millis "$last") - $(millis "$first") ))"
    kill "$a" "$b"; wait "$a" "$b" 2>/dev/null || true
  done
done
