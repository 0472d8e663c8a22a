#!/usr/bin/env bash
# Validate the Prometheus rules and run their unit tests.
# Installs promtool (Debian package "prometheus") when it is missing.
set -euo pipefail
cd "$(dirname "$0")"

if ! command -v promtool >/dev/null 2>&1; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y prometheus
fi

promtool --version | head -n 1
promtool check rules *_rules.yml
promtool test rules *_test.yml
