#!/usr/bin/env bash
# Builds (preset default) and runs every benchmark under bench/. Not part of CI.
#   scripts/bench.sh [BENCH_NAME_REGEX] [extra Google Benchmark flags]
set -euo pipefail
cd "$(dirname "$0")/.."
filter="${1:-.}"; shift || true
cmake --preset default >/dev/null
cmake --build --preset default
export PTKIT_BENCH_DIR="${PTKIT_BENCH_DIR:-$PWD/build/default/bench-out}"
for b in build/default/bench/*_bench; do
  [[ "$(basename "$b")" =~ $filter ]] || continue
  echo "== $(basename "$b")"
  "$b" "$@"
done
