#!/usr/bin/env bash
# ptdecode -j: stats, folded and calls with 2 threads against 1, side by side in one run, and
# peak RSS at -j1 and -j8 (issue 16 part 2's targets: >= 1.8x at -j2 on 2 cores; memory
# bounded with N threads). Not part of CI.
#
#   bench/parallel_decode.sh [--build DIR] [--insns N] [--runs R] [--commands "stats calls folded"]
#                            [--program NAME] [--timing] [--keep DIR] [--emulate ROUNDS]
#                            [--trace FILE ARGS...]
#
# Input: a synthesized raw trace (swpt_synth over record/swpt/programs' NAME, default
# interp_O0_pie, whose walks recurse thousands of frames deep and return past chunk starts;
# N instructions, default 50,000,000; with --timing, TSC and MTC packets), or --trace FILE
# followed by ptdecode's image arguments (e.g. --pages DIR), or --trace RECORDING alone (a
# trace.pt or perf.data), or with --emulate ROUNDS a long emulated recording:
# bench/programs/cpu_bound.c (-O2 -g) on 1 thread under `ptrecord --emulate=qemu`, ROUNDS
# rounds (30000: 1.13 G instructions, 56 MB of trace; 150000: 5.6 G, 270 MB, ~10 s to record;
# --insns, --program and --timing are the synthesizer's and do not apply).
# stats, folded and calls are given chunk summaries made on the worker threads
# (decoder/parallel_decode.h); stats and folded summarise a chunk with time records only where
# they do not read the time (not stats --json, folded --weight=time), calls with its time.
# Each command runs R times (default 3) alternating -j1 and -j2, output to
# /dev/null; the best wall and CPU (user + sys) seconds of each, the ratio -j1 wall / -j2 wall,
# and each run's peak RSS (GNU time's maximum resident set size); and two -j1 runs at once (the
# ceiling: what the machine's two CPUs give this work). The machine's load average is
# printed first and last: on a shared machine compare the ratios, not the seconds. The outputs
# of -j1, -j2 and -j8 are compared byte for byte once (cmp). The synthesizer's random walks nest
# calls deeply (folded of 3 M instructions writes gigabytes): leave folded out of --commands for
# them.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build/ci
insns=50000000
runs=3
keep=""
trace=""
commands="stats calls folded"
program=interp_O0_pie
timing=""
rounds=""
declare -a image_args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --insns) insns="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --keep) keep="$2"; shift 2 ;;
    --commands) commands="$2"; shift 2 ;;
    --program) program="$2"; shift 2 ;;
    --timing) timing="--tsc --mtc"; shift ;;
    --emulate) rounds="$2"; shift 2 ;;
    --trace) trace="$2"; shift 2; image_args=("$@"); break ;;
    *) echo "usage: $0 [--build DIR] [--insns N] [--runs R] [--commands LIST] [--program NAME] [--timing] [--keep DIR] [--emulate ROUNDS] [--trace FILE ARGS...]" >&2; exit 2 ;;
  esac
done
ptdecode="$build/src/tools/ptdecode"
synth="$build/record/swpt/tools/swpt_synth"
interp="$build/record/swpt/programs/$program"
for f in "$ptdecode" /usr/bin/time; do
  [[ -x "$f" ]] || { echo "$0: $f missing: build ptdecode" >&2; exit 1; }
done
work="${keep:-$(mktemp -d)}"
mkdir -p "$work"
[[ -n "$keep" ]] || trap 'rm -rf "$work"' EXIT

if [[ -n "$rounds" && -z "$trace" ]]; then
  trace="$work/emu$rounds.pt"
  if [[ ! -s "$trace" ]]; then
    [[ -x "$build/src/tools/ptrecord" ]] || { echo "$0: $build/src/tools/ptrecord missing" >&2; exit 1; }
    cc -O2 -g -pthread -o "$work/cpu_bound" bench/programs/cpu_bound.c
    echo "recording cpu_bound $rounds rounds under qemu..."
    # (To another name first: an interrupted recording is not taken for one by a later --keep.)
    "$build/src/tools/ptrecord" --emulate=qemu -q -o "$trace.part" -- "$work/cpu_bound" \
      "$rounds" 1 >/dev/null
    mv "$trace.part" "$trace"
  fi
elif [[ -z "$trace" ]]; then
  for f in "$synth" "$interp"; do
    [[ -x "$f" ]] || { echo "$0: $f missing: build swpt_synth ptkit_swpt_programs" >&2; exit 1; }
  done
  trace="$work/synth.pt"
  if [[ ! -s "$trace" ]]; then
    echo "synthesizing $insns instructions..."
    # shellcheck disable=SC2086
    "$synth" --elf "$interp" --insns "$insns" --seed 1 $timing --out "$trace" >/dev/null
  fi
  read -r -a image_args <"$trace.args"
  image_args=("${image_args[@]:2}")  # after "--pt FILE"
fi
# A raw trace with its images, or a recording (trace.pt, perf.data: --trace FILE alone).
if ((${#image_args[@]} == 0)); then input=("$trace"); else input=(--pt "$trace" "${image_args[@]}"); fi
echo "trace: $trace ($(stat -c %s "$trace") bytes), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"

# run COMMAND JOBS: "wall cpu rss_kb" of one run.
run() {
  /usr/bin/time -o "$work/time" -f '%e %U %S %M' "$ptdecode" "$1" -j "$2" "${input[@]}" \
    >/dev/null 2>"$work/err" ||
    { echo "$0: ptdecode $1 -j $2 failed: $(head -1 "$work/err")" >&2; exit 1; }
  read -r wall user sys rss < <(tail -1 "$work/time")
  echo "$wall $(echo "$user + $sys" | bc) $rss"
}

# pair COMMAND: the wall seconds of two -j1 runs at once (the later one to end): what the
# machine's two CPUs give this work. On a VM whose CPUs share a core's caches (or a busy host),
# two at once each run slower than one alone: 2 x j1 / pair is the most -j2 can reach here.
pair() {
  local i
  for i in a b; do
    /usr/bin/time -o "$work/time.$i" -f '%e' "$ptdecode" "$1" -j 1 "${input[@]}" \
      >/dev/null 2>"$work/err.$i" &
  done
  wait
  sort -n "$work/time.a" "$work/time.b" | tail -1
}

printf '%-7s %9s %9s %9s %9s %7s %9s %8s %10s %10s\n' command j1_wall j1_cpu j2_wall j2_cpu ratio \
  pair_wall ceiling j1_rss_MB j2_rss_MB
for command in $commands; do
  best1=999999 best2=999999 bestp=999999 cpu1=0 cpu2=0 rss1=0 rss2=0
  for ((r = 0; r < runs; r++)); do
    read -r w c m <<<"$(run "$command" 1)"
    if (($(echo "$w < $best1" | bc))); then best1=$w cpu1=$c; fi
    ((m > rss1)) && rss1=$m
    read -r w c m <<<"$(run "$command" 2)"
    if (($(echo "$w < $best2" | bc))); then best2=$w cpu2=$c; fi
    ((m > rss2)) && rss2=$m
    w=$(pair "$command")
    if (($(echo "$w < $bestp" | bc))); then bestp=$w; fi
  done
  printf '%-7s %9s %9s %9s %9s %7.2f %9s %8.2f %10d %10d\n' "$command" "$best1" "$cpu1" "$best2" \
    "$cpu2" "$(echo "$best1 / $best2" | bc -l)" "$bestp" "$(echo "2 * $best1 / $bestp" | bc -l)" \
    $((rss1 / 1024)) $((rss2 / 1024))
done
echo "ratio: -j1 wall / -j2 wall; ceiling: 2 x -j1 wall / pair_wall, two -j1 runs at once (best of"
echo "$runs each): the speedup two CPUs give this work here, which -j2 cannot pass"


# Peak RSS with 8 threads, and the outputs of -j1, -j2 and -j8 byte for byte.
for command in $commands; do
  for jobs in 1 2 8; do
    "$ptdecode" "$command" -j "$jobs" "${input[@]}" >"$work/$command.j$jobs" 2>&1
  done
  cmp "$work/$command.j1" "$work/$command.j2"
  cmp "$work/$command.j1" "$work/$command.j8"
done
read -r w c m <<<"$(run stats 8)"
echo "stats -j8: wall $w s, cpu $c s, peak RSS $((m / 1024)) MB; outputs of -j1, -j2, -j8 identical"
echo "load average $(cut -d' ' -f1-3 /proc/loadavg)"
