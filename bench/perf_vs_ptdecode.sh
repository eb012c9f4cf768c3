#!/usr/bin/env bash
# ptdecode against perf 6.1's own Intel PT decoder on the same perf.data files, side by side in
# one run (issue 13's targets: >= 10x for each pair). Not part of CI.
#
#   bench/perf_vs_ptdecode.sh [--build DIR] [--insns N] [--big-insns N] [--runs R] [--callgrind] [--keep DIR]
#                             [--inputs "skylake synth big fib"] [--pairs "insn branches calls stats"]
#
# Inputs (each a perf.data both tools read):
#   skylake  ../shared/testdata/perf-data/perf.data.intel_pt-4.14 (real hardware; no binaries,
#            so both mostly report gaps), when present;
#   synth    a synthesized recording (swpt_synth --container over tests/programs' interp_O2_pie,
#            N instructions, default 2,000,000; no timing packets: perf 6.1 decodes nothing
#            of a synthesized trace whose TSC starts at 0) exported with `ptdecode export`;
#   big      the same with M instructions (default 50,000,000): branches and stats only;
#   fib      an emulated recording (ptrecord --emulate) of emulate_fib, exported.
# Pairs (output to /dev/null; lines counted in a separate run):
#   insn      ptdecode insn F            perf script --itrace=i0ns -F tid,ip,sym
#   branches  ptdecode branches F        perf script --itrace=b
#   calls     ptdecode calls F           perf script --call-trace
#   stats     ptdecode stats F           perf report --itrace=i100ns --stdio (i100i, every 100
#                                        instructions, for a trace without timing: synth)
# For each: the best of R runs (default 3) of wall and CPU (user + sys) seconds, and the ratio
# perf / ptdecode of CPU seconds (the machine may be shared: CPU time moves less than wall time);
# also ptdecode's CPU seconds with --decoder libipt (libipt's pt_blk_* / pt_insn_*) and perf's
# ratio to that, the same measure before the fast path.
# --callgrind also counts instructions (valgrind --tool=callgrind, Ir of the whole process) of
# insn, branches and stats (ptdecode on one thread, -j 1, fast and --decoder libipt) on a
# 500,000-instruction synth, a ratio that does not move with the machine's
# load, and prints each tool's top functions by self Ir (where the time goes).
set -euo pipefail
cd "$(dirname "$0")/.."
build=build/ci
insns=2000000
big_insns=50000000
runs=3
callgrind=0
keep=""
only_inputs="skylake synth big fib"
only_pairs="insn branches calls stats"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --insns) insns="$2"; shift 2 ;;
    --big-insns) big_insns="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --callgrind) callgrind=1; shift ;;
    --keep) keep="$2"; shift 2 ;;
    --inputs) only_inputs="$2"; shift 2 ;;
    --pairs) only_pairs="$2"; shift 2 ;;
    *) echo "usage: $0 [--build DIR] [--insns N] [--big-insns N] [--runs R] [--callgrind] [--keep DIR] [--inputs LIST] [--pairs LIST]" >&2; exit 2 ;;
  esac
done
ptdecode="$build/src/tools/ptdecode"
ptrecord="$build/src/tools/ptrecord"
synth="$build/record/swpt/tools/swpt_synth"
interp="$build/record/swpt/programs/interp_O2_pie"
fib="$build/examples/emulate_fib"
[[ -x "$fib" ]] || fib="$(find "$build" -name emulate_fib -type f -perm -u+x | head -1)"
for f in "$ptdecode" "$ptrecord" "$synth" "$interp" "$fib" /usr/bin/perf; do
  [[ -x "$f" ]] || { echo "$0: $f missing: build ptdecode ptrecord swpt_synth ptkit_swpt_programs emulate_fib" >&2; exit 1; }
done
work="${keep:-$(mktemp -d)}"
mkdir -p "$work"
[[ -n "$keep" ]] || trap 'rm -rf "$work"' EXIT

declare -A data debug
if [[ -f ../shared/testdata/perf-data/perf.data.intel_pt-4.14 ]]; then
  data[skylake]=../shared/testdata/perf-data/perf.data.intel_pt-4.14
  debug[skylake]="$work/none.debug"
fi
# make_synth NAME N: $work/NAME.data, a synthesized walk of N instructions exported to perf.data.
make_synth() {
  if [[ ! -f "$work/$1.data" ]]; then
    "$synth" --elf "$interp" --insns "$2" --seed 7 --out "$work/$1.raw" \
      --container "$work/$1.pt" >/dev/null
    "$ptdecode" export --to perf.data "$work/$1.pt" -o "$work/$1.data" 2>/dev/null
  fi
  data[$1]="$work/$1.data"
  debug[$1]="$work/$1.data.debug"
}
wanted() { [[ " $1 " == *" $2 "* ]]; }
wanted "$only_inputs" synth && make_synth synth "$insns"
wanted "$only_inputs" big && make_synth big "$big_insns"
if wanted "$only_inputs" fib && [[ ! -f "$work/fib.data" ]]; then
  "$ptrecord" --emulate -o "$work/fib.pt" -- "$fib" >/dev/null 2>&1
  "$ptdecode" export --to perf.data "$work/fib.pt" -o "$work/fib.data" 2>/dev/null
fi
data[fib]="$work/fib.data"
debug[fib]="$work/fib.data.debug"

# best_of CMD...: "WALL CPU" (seconds), the best of $runs runs.
best_of() {
  local best_wall="" best_cpu=""
  for ((i = 0; i < runs; i++)); do
    /usr/bin/time -o "$work/time" -f "%e %U %S" "$@" >/dev/null 2>&1 || true
    read -r wall user sys < <(tail -1 "$work/time")
    local cpu
    cpu=$(awk -v u="$user" -v s="$sys" 'BEGIN { printf "%.2f", u + s }')
    if [[ -z "$best_cpu" ]] || (($(echo "$cpu < $best_cpu" | bc -l))); then best_cpu=$cpu; fi
    if [[ -z "$best_wall" ]] || (($(echo "$wall < $best_wall" | bc -l))); then best_wall=$wall; fi
  done
  echo "$best_wall $best_cpu"
}

lines() { "$@" 2>/dev/null | wc -l; }

printf "%-8s %-9s %12s %12s %9s %9s %9s %9s %8s %9s %8s\n" input pair ptdecode_lines perf_lines \
  pt_wall perf_wall pt_cpu perf_cpu ratio lib_cpu lib_ratio
for input in $only_inputs; do
  [[ -n "${data[$input]:-}" && -f "${data[$input]}" ]] || continue
  f="${data[$input]}"
  d="${debug[$input]}"
  export PERF_BUILDID_DIR="$d"
  pairs="insn branches calls stats"
  [[ $input == big ]] && pairs="branches stats"  # perf script --call-trace: minutes
  for pair in $pairs; do
    wanted "$only_pairs" "$pair" || continue
    case "$pair" in
      insn) pt=("$ptdecode" insn --buildid-dir "$d" "$f")
            pf=(perf --buildid-dir "$d" script -i "$f" --itrace=i0ns -F tid,ip,sym) ;;
      branches) pt=("$ptdecode" branches --buildid-dir "$d" "$f")
                pf=(perf --buildid-dir "$d" script -i "$f" --itrace=b) ;;
      calls) pt=("$ptdecode" calls --buildid-dir "$d" "$f")
             pf=(perf --buildid-dir "$d" script -i "$f" --call-trace) ;;
      stats) pt=("$ptdecode" stats --buildid-dir "$d" "$f")
             period=i100ns
             [[ $input == synth || $input == big ]] && period=i100i
             pf=(perf --buildid-dir "$d" report -i "$f" --itrace=$period --stdio) ;;
    esac
    read -r ptw ptc <<<"$(best_of "${pt[@]}")"
    read -r pfw pfc <<<"$(best_of "${pf[@]}")"
    read -r _ plc <<<"$(best_of "${pt[@]}" --decoder libipt)"
    # Below 10 ms of CPU the ratio says nothing.
    ratio=$(awk -v a="$pfc" -v b="$ptc" 'BEGIN { if (b < 0.01) print "-"; else printf "%.1fx", a / b }')
    lib_ratio=$(awk -v a="$pfc" -v b="$plc" 'BEGIN { if (b < 0.01) print "-"; else printf "%.1fx", a / b }')
    printf "%-8s %-9s %12s %12s %9s %9s %9s %9s %8s %9s %8s\n" "$input" "$pair" \
      "$(lines "${pt[@]}")" "$(lines "${pf[@]}")" "$ptw" "$pfw" "$ptc" "$pfc" "$ratio" "$plc" \
      "$lib_ratio"
  done
done

if ((callgrind)); then
  command -v valgrind >/dev/null || { echo "$0: valgrind not installed" >&2; exit 1; }
  make_synth small 500000
  f="${data[small]}"
  d="${debug[small]}"
  echo
  echo "callgrind (synth, 500,000 instructions): instructions (Ir) of the whole process, and"
  echo "each tool's top functions by self Ir"
  for pair in insn branches stats; do
    wanted "$only_pairs" "$pair" || continue
    case "$pair" in
      insn) pt=("$ptdecode" insn --buildid-dir "$d" "$f")
            pf=(perf --buildid-dir "$d" script -i "$f" --itrace=i0ns -F tid,ip,sym) ;;
      branches) pt=("$ptdecode" branches --buildid-dir "$d" "$f")
                pf=(perf --buildid-dir "$d" script -i "$f" --itrace=b) ;;
      stats) pt=("$ptdecode" stats --buildid-dir "$d" "$f")
             pf=(perf --buildid-dir "$d" report -i "$f" --itrace=i100i --stdio) ;;
    esac
    for tool in ptdecode libipt perf; do
      case $tool in
        ptdecode) cmd=("${pt[@]}" -j 1) ;;
        libipt) cmd=("${pt[@]}" -j 1 --decoder libipt) ;;
        perf) cmd=("${pf[@]}") ;;
      esac
      out="$work/callgrind.$pair.$tool"
      valgrind --tool=callgrind --callgrind-out-file="$out" "${cmd[@]}" >/dev/null 2>&1 || true
      ir=$(grep -m1 '^summary:' "$out" | awk '{print $2}')
      echo "$pair $tool Ir=$ir"
      eval "ir_$tool=$ir"
      callgrind_annotate "$out" 2>/dev/null | grep -E '^ *[0-9,]+ \(' | sed -n 2,9p | cut -c1-150
    done
    echo "$pair ratio perf/ptdecode (Ir): $(awk -v a="$ir_perf" -v b="$ir_ptdecode" 'BEGIN { printf "%.1f", a / b }')x," \
      "libipt/fast: $(awk -v a="$ir_libipt" -v b="$ir_ptdecode" 'BEGIN { printf "%.2f", a / b }')x"
  done
fi
