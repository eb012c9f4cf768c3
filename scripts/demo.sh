#!/usr/bin/env bash
# The main job on a fresh machine: install, build, record a bundled example program that
# dlopen()s a library, and decode it. With Intel PT hardware ptrecord traces it for real;
# without (AMD, most VMs) it records with --emulate (software Intel PT of a single-stepped run).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake --preset default >/dev/null
cmake --build --preset default --target ptrecord ptdecode emulate_dlopen emulate_plugin
bin=build/default/src/tools
ex=build/default/examples
out=build/default/demo.pt
mode=()
if [ ! -d /sys/bus/event_source/devices/intel_pt ]; then
  echo "demo: no intel_pt PMU on this machine: recording with --emulate"
  mode=(--emulate --event intel_pt//u)
fi
"$bin/ptrecord" "${mode[@]}" --overwrite-existing -o "$out" -- \
  "$ex/emulate_dlopen" "$PWD/$ex/libemulate_plugin.so"
"$bin/ptdecode" info "$out"
"$bin/ptdecode" stats "$out" | head -n 20
