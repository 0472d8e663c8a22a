#!/usr/bin/env bash
# Installs the Kafka-compatible broker of the fleet tests: tansu, a broker
# written in Rust, built from crates.io at a pinned version with the in-memory
# and SQLite storage engines only. The build takes minutes, so the binary is
# cached outside the work tree (RANKWATCH_TOOLS, default ~/.cache/rankwatch)
# and built again only when the pinned version changes. Prints the binary's path.
set -euo pipefail

version=0.6.0
tools="${RANKWATCH_TOOLS:-$HOME/.cache/rankwatch}/tansu-$version"
binary="$tools/bin/tansu"

if [ ! -x "$binary" ]; then
  echo "building tansu $version into $tools (once; takes several minutes)" >&2
  nice -n 10 cargo install tansu --version "$version" --locked --quiet \
    --no-default-features --features dynostore,libsql --root "$tools" >&2
fi
echo "$binary"
