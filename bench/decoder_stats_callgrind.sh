#!/bin/sh
# Instruction counts (callgrind) of decoder_stats_bench's measurements, one iteration each, side
# by side: the bare libipt block-decoder loop and ptdecode's stats/folded/calls through libipt,
# through the fast decoder over libipt's query decoder, through the fast decoder with its own
# packet loop without its walk (fast_blocks), walking one block at a time (fast_no_runs) and
# with runs of walked blocks (fast). Counts are stable where wall
# time on a shared machine is not; the ratio to the bare loop is issue 16's target (stats >= 5x).
#
#   bench/decoder_stats_callgrind.sh BUILD_DIR [COPIES [TRACES [VARIANTS]]]
# COPIES of each trace: 64 by default; TRACES: "Unzip foo"; VARIANTS: all of them (the first
# one is the reference; each run of libipt's takes minutes under callgrind).
set -eu
build=${1:?usage: $0 BUILD_DIR [COPIES]}
copies=${2:-64}
traces=${3:-Unzip foo}
variants=${4:-bare_libipt_loop stats_libipt stats_fast_libipt_packets stats_fast_blocks \
stats_fast_no_runs stats_fast folded_libipt folded_fast_blocks folded_fast_no_runs folded_fast \
calls_libipt calls_fast_blocks calls_fast_no_runs calls_fast}
bench=$build/bench/decoder_stats_bench
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for trace in $traces; do
  bare=
  for variant in $variants; do
    name="$trace/$variant/$copies/real_time"
    # libipt's block loop runs on a thread of its own (decode.cc: RunWithStack), which starts
    # with collection off: its function is toggled too, or libipt's work is not counted.
    valgrind --tool=callgrind --callgrind-out-file="$tmp/out" \
      --toggle-collect='ptkit::decoder::(anonymous namespace)::Run(*' \
      --toggle-collect='ptkit::decoder::(anonymous namespace)::RunWithStack(*)::{lambda(void*)#1}::_FUN(*' \
      "$bench" --benchmark_filter="^$name\$" --benchmark_min_time=0 \
      --benchmark_format=json >"$tmp/json" 2>/dev/null
    iterations=$(sed -n 's/.*"iterations": \([0-9]*\).*/\1/p' "$tmp/json" | head -1)
    ir=$(sed -n 's/^summary: \([0-9]*\).*/\1/p' "$tmp/out")
    per=$((ir / iterations))
    [ -n "$bare" ] || bare=$per
    awk -v n="$name" -v per="$per" -v bare="$bare" \
      'BEGIN { printf "%-40s %14.0f Ir  %6.2fx the bare loop\n", n, per, bare / per }'
  done
done
