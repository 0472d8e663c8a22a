#!/usr/bin/env bash
# Fuzzes rankwatch's input edges: every target for FUZZ_SECONDS seconds each
# (default 60), one after another, on one core. Not part of CI: too slow.
#
#   tests/fuzz/run.sh                 # every target, 60 s each
#   FUZZ_SECONDS=300 tests/fuzz/run.sh jsonl_line
#
# cargo-fuzz needs nightly flags; RUSTC_BOOTSTRAP=1 lets the stable toolchain
# accept them. Crashes land in tests/fuzz/artifacts/TARGET/; see README.md.
set -euo pipefail

fuzz_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$fuzz_dir/../.." && pwd)"
log="${REPLAY_LOG:-$repo/tests/data/conformance/replay_small.jsonl}"
seconds="${FUZZ_SECONDS:-60}"
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(jsonl_line proto_event state_file)
fi
export RUSTC_BOOTSTRAP=1

if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi

cd "$repo"
cargo fuzz build --fuzz-dir "$fuzz_dir"

# Seeds: one replay-log line per file for jsonl_line; proto batches and saved
# state files, made by the `seeds` helper, for the others. Regenerated on
# every run, never committed.
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
        cargo fuzz run --fuzz-dir "$fuzz_dir" "$target" "$regressions"/* -- -runs=0
    fi
done

# Longest input per target: room past max_items (1000) for a line or a
# batch, and for a state file saved after a few hundred events. One process
# each (no -jobs: with it libFuzzer forks workers and logs to fuzz-N.log).
declare -A max_len=([jsonl_line]=16384 [proto_event]=16384 [state_file]=65536)
for target in "${targets[@]}"; do
    echo "== $target: ${seconds}s"
    mkdir -p "$corpus/$target"
    cargo fuzz run --fuzz-dir "$fuzz_dir" "$target" "$corpus/$target" -- \
        -max_total_time="$seconds" -max_len="${max_len[$target]:-4096}" -print_final_stats=1
done

# state_file keeps one directory per process; drop those whose process is gone.
for dir in /tmp/rankwatch-fuzz-state-*; do
    if [ -d "$dir" ] && ! kill -0 "${dir##*-}" 2>/dev/null; then
        rm -rf "$dir"
    fi
done
