#!/usr/bin/env bash
# Installs what the tests need beyond cargo, from Debian's packages and PyPI:
# promtool and prometheus (Debian's `prometheus`) for the metrics and rules
# checks and the end-to-end run, and a Python virtualenv with grpcio for the
# independent client test. Safe to run again: it installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1; then
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null
fi

venv=target/python
if ! "$venv/bin/python" -c 'import grpc, grpc_tools' >/dev/null 2>&1; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check 'grpcio>=1.60' 'grpcio-tools>=1.60'
fi
