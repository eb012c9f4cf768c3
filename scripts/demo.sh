#!/usr/bin/env bash
# The main job on a fresh machine: install, build, write a small trace.pt with the bundled
# example and show it with `ptdecode info`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake --preset default >/dev/null
cmake --build --preset default --target ptdecode write_container
out=build/default/demo.pt
trace=../shared/testdata/libxdc-experiments/Unzip/trace
if [ -f "$trace" ]; then
  build/default/examples/write_container "$out" "$trace"
else
  build/default/examples/write_container "$out"
fi
build/default/src/tools/ptdecode info "$out"
