#!/usr/bin/env bash
# Installs what the tests need beyond cargo, from Debian's packages and PyPI:
# promtool and prometheus (Debian's `prometheus`) for the metrics and rules
# checks and the end-to-end run, Debian's `chromium` for the status page's
# browser test, and a Python virtualenv with grpcio for the independent client
# test, websocket-client to drive Chromium and ir_measures (with its trec_eval
# and trectools providers) for the metric check, then the Python client
# (clients/python, rebuilt from the working tree every time) with its test and
# Kafka extras. Safe to run again: it installs only what is missing, and the
# client.
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1; then
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null
fi

# Pinned to the major version Debian 12 ships (bookworm-security), the
# newest build of it: the mirror keeps only the latest security build, so a
# pin to one build breaks the day the next comes out. The browser test
# speaks the DevTools protocol, stable across builds. Should the major
# version itself be gone, the newest Debian offers is taken, and said.
chromium_major=156
if [[ "$(dpkg-query -W -f='${Version}' chromium 2>/dev/null || true)" != "$chromium_major".* ]]; then
  as_root apt-get update -qq
  chromium_version=$(apt-cache madison chromium | awk -v major="$chromium_major." 'index($3, major) == 1 {print $3; exit}')
  if [ -z "$chromium_version" ]; then
    chromium_version=$(apt-cache policy chromium | awk '/Candidate:/ {print $2}')
    echo "chromium $chromium_major is no longer offered; installing $chromium_version" >&2
  fi
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "chromium=$chromium_version" >/dev/null
fi

venv=target/python
if ! "$venv/bin/python" -c 'import grpc, grpc_tools' >/dev/null 2>&1; then
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check 'grpcio==1.85.1' 'grpcio-tools==1.85.1'
fi
if ! "$venv/bin/python" -c 'import websocket' >/dev/null 2>&1; then
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check 'websocket-client==1.9.2'
fi
if ! "$venv/bin/python" -c 'import ir_measures, pytrec_eval, trectools' >/dev/null 2>&1; then
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    'ir-measures==0.4.3' 'pytrec-eval-terrier==0.5.11' 'trectools==0.0.50'
fi
# `python -m pip` rather than bin/pip, whose first line names the path where the
# venv was made (wrong in a copy). pip always rebuilds a project given as a
# directory, so the client is current.
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check './clients/python[test,kafka]'
