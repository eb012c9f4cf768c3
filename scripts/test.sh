#!/usr/bin/env bash
# The whole test suite from nothing: installs the Debian packages, checks that every C++ source is
# clang-formatted and clang-tidy clean, builds with -Werror, runs every test, then the sanitizer
# build of the byte-parsing and decoder tests and a short fuzz smoke.
#   bash scripts/test.sh            (what .ci/run calls)
# Environment: PTKIT_FUZZ_SECONDS (default 36): the fuzz smoke's time, shared by all targets.
# Each step prints its start as "== [+SECONDS] step", so a slow CI run shows where the time went.
set -euo pipefail
cd "$(dirname "$0")/.."
step() { echo "== [+${SECONDS}s] $*"; }

bash scripts/install-deps.sh

step "clang-format (check only)"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  git ls-files -z '*.cc' '*.h' ':!:third_party/*'
else
  find include src record decoder tests bench examples -name '*.cc' -print0 -o -name '*.h' -print0
fi | xargs -0 clang-format --dry-run -Werror

step "clang-tidy (the sources whose content key scripts/tidy_clean.txt does not list)"
# clang-tidy 14 costs ~10 s of CPU per source, ~30 min for all of them, so only those whose
# content key (the source, every project header it includes, .clang-tidy, the compile command,
# the clang-tidy version) is not in the list of keys a full run found clean are checked, for
# real: a change is always checked, and an out-of-date list only costs time here (after a
# change: scripts/tidy.sh --update, and commit the list). It needs the per-source compile
# database of the default preset: configured only, nothing built.
cmake --preset default >/dev/null
bash scripts/tidy.sh -j "$(nproc)" --unlisted

step "build (preset ci: RelWithDebInfo, -Werror)"
cmake --preset ci
cmake --build --preset ci

step "tests"
ctest --preset ci

step "ASan + UBSan (clang, preset fuzz): the src, emulate and decoder unit tests"
# One sanitizer build serves both the tests and the fuzz targets (their libraries are the same).
# The targets are test groups (cmake/PtkitTest.cmake): one executable each, in unity batches.
cmake --preset fuzz >/dev/null
asan_targets=(common_unit_tests emulate_unit_tests decoder_unit_tests decoder_bounded_tests)
mapfile -t fuzz_targets < <(bash scripts/fuzz.sh list | sed 's/$/_fuzz/')
cmake --build --preset fuzz --target "${asan_targets[@]}" "${fuzz_targets[@]}"
ctest --preset fuzz

step "fuzz smoke"
bash scripts/fuzz.sh smoke "${PTKIT_FUZZ_SECONDS:-36}"

echo "test.sh: all passed in ${SECONDS} s"
