#!/usr/bin/env bash
# Memory per open impression alone: section 3 of benches/e2e.sh, to rerun
# quickly. A server with a 1 h attribution window takes 8 s of unpaced
# impressions of 20 items from 1,000,000 users over 4 streams (no
# interactions); the default max_open_impressions sheds past 1,000,000 open
# lists. Prints (RSS after - RSS before) / rankwatch_open_impressions of each
# run, then the median of RUNS runs (default 3). Needs taskset, curl, python3.
# BIN=path measures another build (for interleaved before/after runs);
# CATALOGUE=n draws the items from n (default 10,000, the loadgen's).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
BIN=${BIN:-target/release/rankwatch}
CATALOGUE=${CATALOGUE:-10000}
GRPC=${GRPC:-127.0.0.1:50081}
HTTP=${HTTP:-127.0.0.1:19581}
work=$(mktemp -d)
server_pid=
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

[ "$BIN" = target/release/rankwatch ] && cargo build --release --locked --bins >/dev/null 2>&1

# The same server, load and arithmetic as benches/e2e.sh.
source benches/server.sh

for _ in $(seq "$RUNS"); do
  start_server --attribution-window 1h
  base=$(rss_kib)
  loadgen --rate 0 --streams 4 --users 1000000 --interaction-share 0 --catalogue "$CATALOGUE" --duration 8s >/dev/null
  open=$(metric rankwatch_open_impressions)
  bytes=$(python3 -c "print(round(($(rss_kib) - $base) * 1024 / $open, 1))")
  echo "$bytes bytes per open impression ($open open)"
  echo "$bytes" >>"$work/memory"
  stop_server
done
echo "median of $RUNS: $(median <"$work/memory") bytes per open impression of 20 items"
