# Helpers of the benchmarks that run a server and the load generator, for
# `source`: the server pinned to core 0, the loadgen to core 1, over loopback.
# The sourcing script sets BIN, GRPC, HTTP, work (a temporary directory) and
# server_pid (empty), and kills "$server_pid" on exit.

start_server() {
  taskset -c 0 "$BIN" serve --grpc-addr "$GRPC" --http-addr "$HTTP" --wall-clock-advance false "$@" >"$work/server.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 50); do curl -sf "http://$HTTP/readyz" >/dev/null && return; sleep 0.1; done
  echo "server did not start" >&2; exit 1
}
stop_server() { kill "$server_pid"; wait "$server_pid" 2>/dev/null || true; server_pid=; }
rss_kib() { awk '/VmRSS/ {print $2}' "/proc/$server_pid/status"; }
metric() { curl -s "http://$HTTP/metrics" | awk -v name="$1" '$1 == name {print $2}'; }
# Batches of 100 events unless told otherwise (the loadgen's default).
loadgen() { taskset -c 1 "$BIN" loadgen --target "http://$GRPC" "$@"; }
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
