#!/usr/bin/env bash
# `rankwatch replay` against the peer a data engineer would reach for: one
# page of DuckDB SQL (benches/duckdb/ndcg_at_10.sql) computing mean nDCG@10
# per model over the same JSON Lines log. Per log size (SIZES events, default
# "1000000 5000000", logs from benches/gen_log.py cached under LOG_DIR), RUNS
# interleaved rounds (default 3) of: replay with its default threads, replay
# with --threads 1, and the DuckDB query from Python (the duckdb package on
# every core, interpreter start and import included), each under
# /usr/bin/time, each round starting with the next of the three. Prints one table of medians (wall, CPU = user + sys, max RSS)
# and both tools' nDCG@10 per group; exits 1 if they differ by over 1e-12.
# LOAD=1 runs one busy loop per core beside them, as on a busy machine.
# DuckDB comes from PyPI, pinned, into a venv made once under the target dir.
# Not part of the tests: figures, not assertions (but for the agreement).
# Needs python3 with venv, /usr/bin/time (GNU).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
SIZES=${SIZES:-"1000000 5000000"}
LOAD=${LOAD:-0}
DUCKDB_VERSION=2.0.1
TARGET=${CARGO_TARGET_DIR:-target}
# BIN=path measures another build (for interleaved before/after runs).
BIN=${BIN:-$TARGET/release/rankwatch}
LOG_DIR=${LOG_DIR:-$TARGET/bench-logs}
VENV=$TARGET/bench-venv
work=$(mktemp -d)
spinner_pids=()
cleanup() {
  [ ${#spinner_pids[@]} -gt 0 ] && kill "${spinner_pids[@]}" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

[ "$BIN" = "$TARGET/release/rankwatch" ] && cargo build --release --locked --bins >/dev/null 2>&1

if ! "$VENV/bin/python" -c "import duckdb, sys; sys.exit(duckdb.__version__ != '$DUCKDB_VERSION')" 2>/dev/null; then
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet "duckdb==$DUCKDB_VERSION"
fi

mkdir -p "$LOG_DIR"
for n in $SIZES; do
  if [ ! -f "$LOG_DIR/$n.jsonl" ]; then
    python3 benches/gen_log.py "$n" "$LOG_DIR/$n.jsonl.part"
    mv "$LOG_DIR/$n.jsonl.part" "$LOG_DIR/$n.jsonl"
  fi
done

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
median_of() { cut -d' ' -f"$2" "$work/$1" | median; }
# The CPU seconds all of the machine's processes have run (user, nice, system, irq, softirq).
busy() { awk -v hz="$(getconf CLK_TCK)" '/^cpu / {print ($2 + $3 + $4 + $7 + $8) / hz}' /proc/stat; }
# Runs the rest of the line under /usr/bin/time, its output to $work/$2.out,
# and appends "wall cpu rss_kib others" to $work/$1: others is the CPU that
# the rest of the machine took meanwhile (LOAD's busy loops, a build).
measure() {
  local file=$1 out=$2 before; shift 2
  before=$(busy)
  /usr/bin/time -f '%e %U %S %M' -o "$work/time" "$@" >"$work/$out.out"
  awk -v busy="$(busy)" -v before="$before" '{cpu = $2 + $3; others = busy - before - cpu; printf "%s %.2f %s %.2f\n", $1, cpu, $4, (others > 0 ? others : 0)}' "$work/time" >>"$work/$file"
}

if [ "$LOAD" = 1 ]; then
  for _ in $(seq "$(nproc)"); do
    nice -n 0 sh -c 'while :; do :; done' &
    spinner_pids+=($!)
  done
fi

# What the Python interpreter and `import duckdb` alone take, inside the DuckDB rows.
for _ in $(seq "$RUNS"); do measure startup startup "$VENV/bin/python" -c 'import duckdb'; done

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
rows=
status=0
for n in $SIZES; do
  log=$LOG_DIR/$n.jsonl
  cat "$log" >/dev/null  # into the page cache, for the first round's sake
  for round in $(seq "$RUNS"); do
    # Each round starts with the next tool: the run after DuckDB's meets
    # the memory it just freed, and no tool should always be that one.
    for turn in 0 1 2; do
      case $(( (round + turn) % 3 )) in
        0) measure "replay-$n" "replay-$n" "$BIN" replay "$log" --format json ;;
        1) measure "replay1-$n" "replay1-$n" "$BIN" replay "$log" --format json --threads 1 ;;
        2) measure "duckdb-$n" "duckdb-$n" "$VENV/bin/python" benches/duckdb/run.py benches/duckdb/ndcg_at_10.sql "$log" ;;
      esac
    done
  done
  for tool in replay replay1 duckdb; do
    case $tool in
      replay) name='`rankwatch replay`' ;;
      replay1) name='`rankwatch replay --threads 1`' ;;
      duckdb) name="DuckDB $DUCKDB_VERSION SQL" ;;
    esac
    wall=$(median_of "$tool-$n" 1)
    rows+="| $name | $n | $wall | $(median_of "$tool-$n" 2) | $(( $(median_of "$tool-$n" 3) / 1024 )) | $(python3 -c "print(f'{$n / $wall:,.0f}')") | $(median_of "$tool-$n" 4) |"$'\n'
  done
  echo "nDCG@10 (scope all), $n events:"
  python3 - "$work/replay-$n.out" "$work/replay1-$n.out" "$work/duckdb-$n.out" <<'PY' || status=1
import json, sys
def rankwatch(path):
    return {(g["model"], g["surface"]): (g["lists"], g["metrics"]["ndcg@10"]["all"])
            for g in json.load(open(path))["groups"]}
replay, replay1 = rankwatch(sys.argv[1]), rankwatch(sys.argv[2])
duck = {}
for line in open(sys.argv[3]):
    model, surface, lists, ndcg = line.split()
    duck[(model, surface)] = (int(lists), float(ndcg))
print("| model | surface | lists | rankwatch replay | DuckDB | difference |")
print("|---|---|---|---|---|---|")
ok = replay == replay1 and replay.keys() == duck.keys()
for key in sorted(replay.keys() | duck.keys()):
    (lists, ours), (their_lists, theirs) = replay.get(key, (0, float("nan"))), duck.get(key, (0, float("nan")))
    diff = abs(ours - theirs)
    ok = ok and lists == their_lists and diff <= 1e-12
    print(f"| {key[0]} | {key[1]} | {lists} | {ours!r} | {theirs!r} | {diff:.1e} |")
if replay != replay1:
    print("replay with --threads 1 differs from replay with the default threads")
print("agree within 1e-12" if ok else "DISAGREE")
sys.exit(0 if ok else 1)
PY
  echo
done

if [ ${#spinner_pids[@]} -gt 0 ]; then
  kill "${spinner_pids[@]}"; wait "${spinner_pids[@]}" 2>/dev/null || true; spinner_pids=()
fi

load_note=
[ "$LOAD" = 1 ] && load_note=", with $(nproc) busy loops beside them (LOAD=1)"
cat <<TABLE
replay against DuckDB: $(nproc) cores, $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo), median of $RUNS interleaved runs$load_note
(load average $load_before before the runs, $(cut -d' ' -f1-3 /proc/loadavg) after; the last column is the CPU the rest of the machine took during each run)

| tool | events | wall s | CPU s | max RSS MB | events/s (wall) | others' CPU s |
|---|---|---|---|---|---|---|
$rows
Python start and \`import duckdb\` alone, inside the DuckDB rows: $(median_of startup 1) s wall, $(median_of startup 2) s CPU.
TABLE
exit "$status"
