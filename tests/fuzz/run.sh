#!/usr/bin/env bash
# Fuzzes rankwatch's input edges: every target for SECONDS seconds each
# (default 60), one after another, one process each, at low priority. Not
# part of CI: too slow.
#
#   bash tests/fuzz/run.sh                    # every target, 60 s each
#   bash tests/fuzz/run.sh 960                # every target, 16 min each
#   bash tests/fuzz/run.sh 300 proto_event    # one target
#
# Each target's libFuzzer output goes to tests/fuzz/target/logs/TARGET.log;
# a summary of the final figures is printed at the end. A crash does not
# stop the other targets, but the script then exits 1. Crashes land in
# tests/fuzz/artifacts/TARGET/; see README.md.
set -euo pipefail

fuzz_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$fuzz_dir/../.." && pwd)"
log="${REPLAY_LOG:-$repo/tests/data/conformance/replay_small.jsonl}"
seconds="${1:-${FUZZ_SECONDS:-60}}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(jsonl_line proto_event ingest_batch state_file)
fi

# cargo-fuzz passes nightly-only flags (-Zsanitizer=address): use the
# nightly toolchain when there is one, else let stable accept them.
cargo=(cargo)
if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    cargo=(cargo +nightly)
else
    export RUSTC_BOOTSTRAP=1
fi
if ! "${cargo[@]}" fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi

cd "$repo"
# -O: optimized, without debug assertions or overflow checks, as the
# server's release build runs.
nice -n 10 "${cargo[@]}" fuzz build -O --fuzz-dir "$fuzz_dir"

# Seeds: one replay-log line per file for jsonl_line; proto batches and saved
# state files, made by the `seeds` helper, for the others. Regenerated on
# every run, never committed: they come to some 900 KB.
corpus="$fuzz_dir/corpus"
if [ -f "$log" ]; then
    mkdir -p "$corpus/jsonl_line"
    split --lines=1 --suffix-length=5 --numeric-suffixes "$log" "$corpus/jsonl_line/seed-"
    host="$(rustc -vV | sed -n 's/^host: //p')"
    "$fuzz_dir/target/$host/release/seeds" "$log" "$corpus"
else
    echo "run.sh: no replay log at $log (set REPLAY_LOG); fuzzing without seeds" >&2
fi

# Reproducers of fixed bugs run first: each must pass before fuzzing starts.
for target in "${targets[@]}"; do
    regressions="$fuzz_dir/regressions/$target"
    if [ -d "$regressions" ] && [ -n "$(ls -A "$regressions")" ]; then
        nice -n 10 "${cargo[@]}" fuzz run -O --fuzz-dir "$fuzz_dir" "$target" "$regressions"/* -- -runs=0
    fi
done

# Longest input per target: room past max_items (1000) for a line or a
# batch, and for a state file saved after a few hundred events. One process
# each, which is one core; an input that runs for 10 s counts as a hang.
declare -A max_len=([jsonl_line]=16384 [proto_event]=16384 [ingest_batch]=16384 [state_file]=65536)
logs="$fuzz_dir/target/logs"
mkdir -p "$logs"
failed=()
for target in "${targets[@]}"; do
    echo "== $target: ${seconds}s, log in $logs/$target.log"
    mkdir -p "$corpus/$target"
    if ! nice -n 10 "${cargo[@]}" fuzz run -O --fuzz-dir "$fuzz_dir" "$target" "$corpus/$target" -- \
        -max_total_time="$seconds" -max_len="${max_len[$target]:-4096}" -timeout=10 \
        -print_final_stats=1 >"$logs/$target.log" 2>&1; then
        failed+=("$target")
    fi
done

# state_file keeps one directory per process; drop those whose process is gone.
for dir in /tmp/rankwatch-fuzz-state-*; do
    if [ -d "$dir" ] && ! kill -0 "${dir##*-}" 2>/dev/null; then
        rm -rf "$dir"
    fi
done

# The figures of each run: libFuzzer's last status line and final stats.
for target in "${targets[@]}"; do
    echo "== $target"
    grep -E '^#[0-9]+[[:space:]]+(DONE|pulse|NEW|REDUCE)' "$logs/$target.log" | tail -n 1 || true
    grep -E '^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)' "$logs/$target.log" || true
    echo "corpus: $(find "$corpus/$target" -type f | wc -l) files, $(du -sk --apparent-size "$corpus/$target" | cut -f1) KB"
    grep -E '^(==[0-9]+==ERROR|thread .* panicked|SUMMARY)' "$logs/$target.log" || true
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "run.sh: ${failed[*]} failed; see the logs and tests/fuzz/artifacts/" >&2
    exit 1
fi
