#!/usr/bin/env bash
# kvload benchmark: client CPU per request against a bare epoll client,
# memaslap (memcaslap) and redis-benchmark; open-loop rate accuracy and
# inter-arrival goodness of fit; recording overhead. Prints a Markdown table.
#
# Placement: the server is pinned to CPU 0, every client to CPU 1.
# Usage: bench/kvload/run.sh [--quick] [--reps N] [--out FILE]
# Needs: cargo, python3, memcached, redis-server, memcaslap, redis-benchmark, taskset.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cargo build --release --quiet --manifest-path "$repo/kvload/Cargo.toml" --bin kvload --examples
exec python3 "$here/bench.py" --target "$repo/kvload/target/release" "$@"
