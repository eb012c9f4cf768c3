#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (preset `fuzz`) and runs the container reader, the
# perf.data reader and the end-to-end decode fuzzers, SECONDS each.
#   scripts/fuzz.sh [SECONDS]     default 600; the test command runs it for a short smoke
# New crashes are written to build/fuzz/artifacts/. The seed corpora are tests/fuzz/corpus/*/.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-600}"
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz --target container_reader_fuzz perf_data_fuzz decode_fuzz
mkdir -p build/fuzz/artifacts
# fuzz NAME [SEEDS...]: runs build/fuzz/tests/fuzz/NAME_fuzz on tests/fuzz/corpus/NAME (and
# the seed folders given).
fuzz() {
  local name="$1" work="build/fuzz/corpus/$1"
  shift
  mkdir -p "$work"
  echo "fuzz: ${name}_fuzz for ${seconds}s"
  "build/fuzz/tests/fuzz/${name}_fuzz" "$work" "tests/fuzz/corpus/$name" "$@" \
    -max_total_time="$seconds" -rss_limit_mb=2048 -malloc_limit_mb=600 -timeout=10 \
    -artifact_prefix=build/fuzz/artifacts/ -print_final_stats=1 2>&1 | tail -n 12
}
fuzz container_reader
fuzz perf_data
fuzz decode tests/fuzz/corpus/perf_data
