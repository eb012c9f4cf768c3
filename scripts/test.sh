#!/usr/bin/env bash
# The whole test suite from nothing: installs the Debian packages, checks that every C++ source is
# clang-formatted, builds with -Werror, runs every test, then the sanitizer build of the
# byte-parsing and decoder tests and a short fuzz smoke.
#   bash scripts/test.sh            (what .ci/run calls)
# Environment: PTKIT_FUZZ_SECONDS (default 60): the fuzz smoke's time, shared by all targets.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh

echo "== clang-format (check only)"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  git ls-files -z '*.cc' '*.h' ':!:third_party/*'
else
  find include src record decoder tests bench examples -name '*.cc' -print0 -o -name '*.h' -print0
fi | xargs -0 clang-format --dry-run -Werror

echo "== build (preset ci: RelWithDebInfo, -Werror)"
cmake --preset ci
cmake --build --preset ci

echo "== tests"
ctest --preset ci

echo "== ASan + UBSan (clang, preset fuzz): container, info, sideband, emulate stepper and decoder tests"
# One sanitizer build serves both the tests and the fuzz targets (their libraries are the same).
cmake --preset fuzz >/dev/null
asan_targets=(container_test info_test sideband_test step_events_test stepper_test
  decoder_container_test decoder_callstack_test decoder_synth_test decoder_bts_test
  decoder_parse_test)
mapfile -t fuzz_targets < <(bash scripts/fuzz.sh list | sed 's/$/_fuzz/')
cmake --build --preset fuzz --target "${asan_targets[@]}" "${fuzz_targets[@]}"
ctest --preset fuzz

echo "== fuzz smoke"
bash scripts/fuzz.sh smoke "${PTKIT_FUZZ_SECONDS:-60}"

echo "test.sh: all passed"
