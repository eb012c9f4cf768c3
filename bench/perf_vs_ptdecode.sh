#!/usr/bin/env bash
# ptdecode against perf 6.1's own Intel PT decoder on the same perf.data files, side by side in
# one run (issue 13's targets: >= 10x for each pair). Not part of CI. Figures: bench/README.md.
#
#   bench/perf_vs_ptdecode.sh [--build DIR] [--rounds R] [--synth-insns N] [--runs K]
#                             [--callgrind] [--callgrind-rounds R] [--callgrind-synth-insns N]
#                             [--perf PATH] [--keep DIR]
#                             [--inputs "emu synth skylake"] [--pairs "insn branches calls stats"]
#
# Inputs (each a perf.data both tools read, written by `ptdecode export --to perf.data`):
#   emu      bench/programs/cpu_bound.c (-O2 -g), R rounds (default 1000) on 2 threads, recorded
#            with `ptrecord --emulate=qemu` (about 37,700 instructions a round and thread:
#            75 M instructions at 1000 rounds; timing packets, libc and ld.so mapped);
#   synth    a synthesized walk (swpt_synth --container) over tests/programs' interp_O2_pie, N
#            instructions (default 60,000,000). No timing packets, so perf report samples
#            every 100 instructions (i100i) instead of every 100 ns;
#   skylake  ../shared/testdata/perf-data/perf.data.intel_pt-4.14 (real hardware, no binaries:
#            both tools mostly report gaps), when present.
# Pairs (output to /dev/null):
#   insn      ptdecode insn F          perf script --itrace=i0ns -F tid,ip,sym
#   branches  ptdecode branches F      perf script --itrace=b
#   calls     ptdecode calls F         perf script --call-trace (perf: the calls only, with
#                                      their indentation; ptdecode: calls and returns, with
#                                      each call's instruction count)
#   stats     ptdecode stats F         perf report --itrace=i100ns --stdio (i100i for synth)
# For each: CPU seconds (user + sys, /usr/bin/time; the best of K runs, default 1: the machine
# may be shared, and CPU time moves less than wall time with the load) of perf, of ptdecode -j1
# and of ptdecode at its default -j, and the ratios perf / ptdecode.
# --callgrind also counts the instructions (valgrind --tool=callgrind, Ir of the whole process)
# of every pair on small inputs that perf finishes under valgrind in minutes (emu at 50 rounds
# on 1 thread and synth at 2,000,000 instructions: about 2 M each; --callgrind-rounds and
# --callgrind-synth-insns make them larger, e.g. 1000 and 60000000 for the stable Ir ratio of
# stats and calls at the timed inputs' size, minutes under valgrind), perf and ptdecode -j1,
# the ratio, and each tool's top functions by self Ir (where the time goes), for the --inputs
# among emu and synth. Debian's perf has
# no symbols (its callgrind profile is addresses); --perf PATH runs another perf for every
# measure, e.g. one built with symbols from Debian's linux-source-6.1 (tar xJf
# /usr/src/linux-source-6.1.tar.xz; make -C tools/perf NO_LIBPYTHON=1 NO_LIBPERL=1
# NO_LIBTRACEEVENT=1 NO_JEVENTS=1 NO_LIBBPF=1 EXTRA_CFLAGS="-g -O2" O=DIR: perf 6.1.192,
# the same output as Debian's 6.1.187 on these files).
set -euo pipefail
cd "$(dirname "$0")/.."
build=build/ci
rounds=1000
synth_insns=60000000
runs=1
callgrind=0
callgrind_rounds=50
callgrind_synth_insns=2000000
keep=""
perf=/usr/bin/perf
only_inputs="emu synth skylake"
only_pairs="insn branches calls stats"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --synth-insns) synth_insns="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --callgrind) callgrind=1; shift ;;
    --callgrind-rounds) callgrind_rounds="$2"; shift 2 ;;
    --callgrind-synth-insns) callgrind_synth_insns="$2"; shift 2 ;;
    --perf) perf="$2"; shift 2 ;;
    --keep) keep="$2"; shift 2 ;;
    --inputs) only_inputs="$2"; shift 2 ;;
    --pairs) only_pairs="$2"; shift 2 ;;
    *) echo "usage: $0 [--build DIR] [--rounds R] [--synth-insns N] [--runs K] [--callgrind] [--callgrind-rounds R] [--callgrind-synth-insns N] [--perf PATH] [--keep DIR] [--inputs LIST] [--pairs LIST]" >&2; exit 2 ;;
  esac
done
ptdecode="$build/src/tools/ptdecode"
ptrecord="$build/src/tools/ptrecord"
synth="$build/record/swpt/tools/swpt_synth"
interp="$build/record/swpt/programs/interp_O2_pie"
for f in "$ptdecode" "$ptrecord" "$synth" "$interp" "$perf"; do
  [[ -x "$f" ]] || { echo "$0: $f missing: build ptdecode ptrecord ptkit_qemu swpt_synth ptkit_swpt_programs" >&2; exit 1; }
done
work="${keep:-$(mktemp -d)}"
mkdir -p "$work"
[[ -n "$keep" ]] || trap 'rm -rf "$work"' EXIT
wanted() { [[ " $1 " == *" $2 "* ]]; }

declare -A data insns
# make_synth NAME N: $work/NAME.data, a synthesized walk of N instructions exported to perf.data.
make_synth() {
  if [[ ! -f "$work/$1.data" ]]; then
    "$synth" --elf "$interp" --insns "$2" --seed 7 --out "$work/$1.raw" \
      --container "$work/$1.pt" >/dev/null
    "$ptdecode" export --to perf.data "$work/$1.pt" -o "$work/$1.data" 2>/dev/null
  fi
  data[$1]="$work/$1.data"
  insns[$1]=$2
}
# make_emu NAME ROUNDS THREADS: $work/NAME.data, cpu_bound under ptrecord --emulate=qemu.
make_emu() {
  [[ -x "$work/cpu_bound" ]] || cc -O2 -g -pthread -o "$work/cpu_bound" bench/programs/cpu_bound.c
  if [[ ! -f "$work/$1.data" ]]; then
    "$ptrecord" --emulate=qemu -o "$work/$1.pt" -- "$work/cpu_bound" "$2" "$3" \
      >/dev/null 2>"$work/$1.log"
    "$ptdecode" export --to perf.data "$work/$1.pt" -o "$work/$1.data" 2>/dev/null
  fi
  data[$1]="$work/$1.data"
  insns[$1]=$(sed -n 's/.* \([0-9]*\) instructions in .*/\1/p' "$work/$1.log")
}
if [[ -f ../shared/testdata/perf-data/perf.data.intel_pt-4.14 ]]; then
  data[skylake]=../shared/testdata/perf-data/perf.data.intel_pt-4.14
  insns[skylake]=-
fi
wanted "$only_inputs" emu && make_emu emu "$rounds" 2
wanted "$only_inputs" synth && make_synth synth "$synth_insns"

# commands INPUT PAIR: sets pt=(...) and pf=(...), ptdecode's and perf's command lines.
commands() {
  local f="${data[$1]}" d="${data[$1]}.debug" period=i100ns
  [[ $1 == synth* ]] && period=i100i  # no timing packets
  case "$2" in
    insn) pt=("$ptdecode" insn --buildid-dir "$d" "$f")
          pf=("$perf" --buildid-dir "$d" script -i "$f" --itrace=i0ns -F tid,ip,sym) ;;
    branches) pt=("$ptdecode" branches --buildid-dir "$d" "$f")
              pf=("$perf" --buildid-dir "$d" script -i "$f" --itrace=b) ;;
    calls) pt=("$ptdecode" calls --buildid-dir "$d" "$f")
           pf=("$perf" --buildid-dir "$d" script -i "$f" --call-trace) ;;
    stats) pt=("$ptdecode" stats --buildid-dir "$d" "$f")
           pf=("$perf" --buildid-dir "$d" report -i "$f" --itrace=$period --stdio) ;;
  esac
}

# cpu_of CMD...: the best CPU seconds (user + sys) of $runs runs.
cpu_of() {
  local best=""
  for ((i = 0; i < runs; i++)); do
    /usr/bin/time -o "$work/time" -f "%U %S" "$@" >/dev/null 2>&1 || true
    local cpu
    cpu=$(tail -1 "$work/time" | awk '{ printf "%.2f", $1 + $2 }')
    if [[ -z "$best" ]] || (($(echo "$cpu < $best" | bc -l))); then best=$cpu; fi
  done
  echo "$best"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b < 0.01) print "-"; else printf "%.1fx", a / b }'; }

printf "%-8s %-9s %12s %9s %9s %9s %8s %8s\n" input pair instructions perf_cpu pt_j1 pt_j \
  ratio_j1 ratio_j
for input in $only_inputs; do
  [[ -n "${data[$input]:-}" && -f "${data[$input]}" ]] || continue
  export PERF_BUILDID_DIR="${data[$input]}.debug"
  for pair in $only_pairs; do
    commands "$input" "$pair"
    pfc=$(cpu_of "${pf[@]}")
    pt1=$(cpu_of "${pt[@]}" -j 1)
    ptj=$(cpu_of "${pt[@]}")
    printf "%-8s %-9s %12s %9s %9s %9s %8s %8s\n" "$input" "$pair" "${insns[$input]}" "$pfc" \
      "$pt1" "$ptj" "$(ratio "$pfc" "$pt1")" "$(ratio "$pfc" "$ptj")"
  done
done

if ((callgrind)); then
  command -v valgrind >/dev/null || { echo "$0: valgrind not installed" >&2; exit 1; }
  wanted "$only_inputs" emu && make_emu "emu_small$callgrind_rounds" "$callgrind_rounds" 1
  wanted "$only_inputs" synth && make_synth "synth_small$callgrind_synth_insns" "$callgrind_synth_insns"
  echo
  echo "callgrind: instructions (Ir) of the whole process, perf and ptdecode -j1, and each"
  echo "tool's top functions by self Ir"
  for input in "emu_small$callgrind_rounds" "synth_small$callgrind_synth_insns"; do
    wanted "$only_inputs" "${input%%_small*}" || continue
    export PERF_BUILDID_DIR="${data[$input]}.debug"
    for pair in $only_pairs; do
      commands "$input" "$pair"
      for tool in ptdecode perf; do
        if [[ $tool == ptdecode ]]; then cmd=("${pt[@]}" -j 1); else cmd=("${pf[@]}"); fi
        out="$work/callgrind.$input.$pair.$tool"
        valgrind --tool=callgrind --dump-instr=no --callgrind-out-file="$out" "${cmd[@]}" \
          >/dev/null 2>&1 || true
        ir=$(grep -m1 '^summary:' "$out" | awk '{print $2}')
        eval "ir_$tool=$ir"
        echo "$input ($(printf "%'d" "${insns[$input]}") instructions) $pair $tool: Ir=$ir"
        callgrind_annotate "$out" 2>/dev/null | grep -E '^ *[0-9,]+ \(' | sed -n 2,9p | cut -c1-150
      done
      echo "$input $pair: perf / ptdecode (Ir) $(ratio "$ir_perf" "$ir_ptdecode")"
    done
  done
fi
