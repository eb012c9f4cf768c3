#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (preset `fuzz`) and runs the container reader and the
# perf.data reader fuzzers, SECONDS each.
#   scripts/fuzz.sh [SECONDS]     default 600; the test command runs it for a short smoke
# New crashes are written to build/fuzz/artifacts/. The seed corpora are tests/fuzz/corpus/*/.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-600}"
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz --target container_reader_fuzz perf_data_fuzz
work=build/fuzz/corpus/container_reader
mkdir -p "$work" build/fuzz/artifacts
echo "fuzz: container_reader_fuzz for ${seconds}s"
build/fuzz/tests/fuzz/container_reader_fuzz "$work" tests/fuzz/corpus/container_reader \
  -max_total_time="$seconds" -rss_limit_mb=2048 -malloc_limit_mb=600 -timeout=10 \
  -artifact_prefix=build/fuzz/artifacts/ -print_final_stats=1 2>&1 | tail -n 12
work=build/fuzz/corpus/perf_data
mkdir -p "$work"
echo "fuzz: perf_data_fuzz for ${seconds}s"
build/fuzz/tests/fuzz/perf_data_fuzz "$work" tests/fuzz/corpus/perf_data \
  -max_total_time="$seconds" -rss_limit_mb=2048 -malloc_limit_mb=600 -timeout=10 \
  -artifact_prefix=build/fuzz/artifacts/ -print_final_stats=1 2>&1 | tail -n 12
