#!/usr/bin/env bash
# The whole test suite: installs what it needs, then runs the Rust tests
# (unit, conformance, properties, real server over loopback), the Prometheus
# rule tests, the independent Python check, the metrics against ir_measures,
# the Python client's tests, the status page in a headless Chromium and the
# end-to-end deploy check.
set -euo pipefail
cd "$(dirname "$0")/.."

bash tests/install-deps.sh
cargo fmt --check
# The sidecar build without Kafka (no librdkafka): it evaluates, and it
# refuses fleet settings saying what to do. Built first, as the default
# build below replaces its binary.
target_dir="${CARGO_TARGET_DIR:-target}"
no_kafka="$(mktemp -d)"
cargo build --release --locked --no-default-features --bin rankwatch
cp "$target_dir/release/rankwatch" "$no_kafka/rankwatch"
"$no_kafka/rankwatch" replay --format json tests/data/conformance/replay_small.jsonl 2>/dev/null | grep -q '"groups"' ||
  { echo "run.sh: the build without Kafka does not replay" >&2; exit 1; }
if "$no_kafka/rankwatch" serve --kafka-mode consume --kafka-brokers 127.0.0.1:9 2>"$no_kafka/err"; then
  echo "run.sh: the build without Kafka accepted fleet settings" >&2; exit 1
fi
grep -q 'built without Kafka' "$no_kafka/err" ||
  { echo "run.sh: the build without Kafka refused fleet settings without saying why:" >&2; cat "$no_kafka/err" >&2; exit 1; }
rm -rf "$no_kafka"
cargo build --release --locked --bins
bin="$target_dir/release/rankwatch"
# `cargo install --path .` as the README says, into a throwaway root; the
# release build above is reused, so this only copies the binary.
install_root="$(mktemp -d)"
cargo install --quiet --locked --path . --root "$install_root" --target-dir "${CARGO_TARGET_DIR:-target}"
"$install_root/bin/rankwatch" --version | grep -q '^rankwatch ' || { echo "run.sh: the installed rankwatch does not run" >&2; exit 1; }
rm -rf "$install_root"
bash tests/install-broker.sh >/dev/null
cargo test --release --locked
target/python/bin/python tests/python/check_server.py --binary "$bin"
target/python/bin/python tests/python/check_metrics.py --binary "$bin"
# The Python client against the real server; pytest exits non-zero (5) when it collects no test.
RANKWATCH_BINARY="$bin" target/python/bin/python -m pytest -q clients/python/tests
# The status page against `rankwatch demo`; screenshots in target/artifacts/.
target/python/bin/python tests/browser/status_page.py --binary "$bin"
bash deploy/prometheus/check.sh
bash deploy/e2e.sh
