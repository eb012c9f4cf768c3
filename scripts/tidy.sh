#!/bin/bash
# clang-tidy with the project's .clang-tidy over every C++ source of the build (libraries,
# tools, tests, benches, examples), as compile_commands.json of BUILD_DIR lists them.
# Not part of scripts/test.sh: it costs ~20 s of CPU per file (measured on decoder/cli_options.cc;
# the checks parse Abseil, CLI11, nlohmann/json, gtest), about an hour of CPU for the ~190
# files, so ~30 min on CI's 2 cores. A FILE_REGEX limits it to some files, e.g. those a change
# touches: bash scripts/tidy.sh build/ci "$PWD/decoder/(cli_options|progress)".
#   bash scripts/tidy.sh [BUILD_DIR [FILE_REGEX]]   (default build/ci, every project file)
# Exits non-zero on any finding (WarningsAsErrors).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/ci}
regex=${2:-"$PWD/(src|record|decoder|completion|tests|bench|examples)/"}
if [[ ! -f $build/compile_commands.json ]]; then
  echo "tidy.sh: no $build/compile_commands.json: configure first (cmake --preset ci)" >&2
  exit 2
fi
# The QEMU plugin (built against QEMU's plugin API, other flags) is left out by the regex.
exec run-clang-tidy -p "$build" -quiet -j "$(nproc)" "$regex"
