#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# ptrecord --emulate=qemu against the tools people use for deterministic CI numbers, in one
# run on the same CPU-bound program (bench/programs/cpu_bound.c, built here with -O2):
# native, plain qemu-x86_64 (no plugin), `ptrecord --emulate=qemu` (trace written and drained
# into trace.pt), `valgrind --tool=callgrind`, and the step backend (`--emulate=step` on a
# prefix of the same run: --max-steps). For each: wall seconds and CPU seconds (user + sys of
# the tool and its children) and instructions per second of both; the container's bytes per
# instruction and the drain loss; 1 vs 2 worker threads under qemu. On a loaded machine the
# CPU figures are the comparable ones. Not part of CI.
#
#   bench/qemu_emulate_bench.sh [BUILD_DIR (default build/default)] [ROUNDS (default 20000)]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build/default}
rounds=${2:-20000}
ptrecord=$build/src/tools/ptrecord
[ -x "$ptrecord" ] || { echo "no $ptrecord: build ptrecord and ptkit_qemu first" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cc -O2 -pthread -o "$out/cpu_bound" "$here/programs/cpu_bound.c"
prog=$out/cpu_bound

# measure NAME CMD...: runs CMD, leaves "WALL CPU" in $out/NAME.time, stderr in $out/NAME.log.
measure() {
  local name=$1
  shift
  /usr/bin/time -f "%e %U %S" -o "$out/$name.rusage" "$@" > /dev/null 2> "$out/$name.log" || true
  # (A first line "Command exited with non-zero status N" may precede the figures.)
  tail -1 "$out/$name.rusage" | awk '{ printf "%s %.3f\n", $1, $2 + $3 }' > "$out/$name.time"
}
# line LABEL NAME INSNS: "LABEL  wall s (rate)  cpu s (rate)".
line() {
  read -r wall cpu < "$out/$2.time"
  awk -v l="$1" -v w="$wall" -v c="$cpu" -v n="$3" 'BEGIN {
    printf "%-18s %8.2f s wall %9.1f M/s   %8.2f s cpu %9.1f M/s\n", l, w, n / w / 1e6, c,
           n / c / 1e6 }'
}
summary_insns() {  # ptrecord's summary line: instructions
  sed -n 's/.* thread[s]*, \([0-9]*\) instructions in .*/\1/p' "$out/$1.log"
}

measure native "$prog" "$rounds" 1
measure qemu_plain qemu-x86_64 "$prog" "$rounds" 1
measure qemu1 "$ptrecord" --emulate=qemu -o "$out/trace1.pt" -- "$prog" "$rounds" 1
insns=$(summary_insns qemu1)
bytes=$(stat -c %s "$out/trace1.pt")
lost=$(sed -n 's/.* \([0-9]*\) lost records.*/\1/p' "$out/qemu1.log")
measure callgrind valgrind --tool=callgrind --callgrind-out-file="$out/callgrind.out" \
  "$prog" "$rounds" 1
cg_insns=$(sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$out/callgrind.log")
steps=200000
measure step "$ptrecord" --emulate=step --max-steps "$steps" -o "$out/step.pt" -- \
  "$prog" "$rounds" 1
measure qemu2 "$ptrecord" --emulate=qemu -o "$out/trace2.pt" -- "$prog" "$rounds" 2
insns2=$(summary_insns qemu2)

echo "cpu_bound $rounds rounds, 1 worker: $insns instructions (callgrind counts $cg_insns)"
line native native "$insns"
line "qemu, no plugin" qemu_plain "$insns"
line "ptrecord qemu" qemu1 "$insns"
line callgrind callgrind "$cg_insns"
line "ptrecord step" step "$steps"
line "qemu, 2 workers" qemu2 "$insns2"
awk -v b="$bytes" -v n="$insns" -v l="$lost" 'BEGIN {
  printf "trace.pt: %d bytes, %.4f bytes/instruction, %d lost records\n", b, b / n, l }'
read -r qw qc < "$out/qemu1.time"
read -r cw cc < "$out/callgrind.time"
read -r sw sc < "$out/step.time"
read -r q2w q2c < "$out/qemu2.time"
awk -v n="$insns" -v qw="$qw" -v qc="$qc" -v cn="$cg_insns" -v cw="$cw" -v cc="$cc" \
    -v sn="$steps" -v sw="$sw" -v n2="$insns2" -v q2w="$q2w" 'BEGIN {
  printf "qemu / callgrind: %.2fx wall, %.2fx cpu;  qemu / step: %.0fx wall;  2 workers / 1: %.2fx wall\n",
         (n / qw) / (cn / cw), (n / qc) / (cn / cc), (n / qw) / (sn / sw), (n2 / q2w) / (n / qw) }'
