#!/usr/bin/env bash
# The whole test suite: installs what it needs, then runs the Rust tests
# (unit, conformance, properties, real server over loopback), the Prometheus
# rule tests, the independent Python client and the end-to-end deploy check.
set -euo pipefail
cd "$(dirname "$0")/.."

bash tests/install-deps.sh
cargo fmt --check
cargo build --release --locked --bins
cargo test --release --locked
target/python/bin/python tests/python/check_server.py --binary target/release/rankwatch
bash deploy/prometheus/check.sh
bash deploy/e2e.sh
