#!/bin/sh
# Performance-regression check for CI: records a benchmark program of the base build and of the
# change with ptrecord, compares their per-function instruction counts with `ptdecode diff`,
# and exits as ptdecode diff does: 0 no regression, 3 regression beyond the limits, 1 error,
# 2 usage error.
#
#   examples/ci/perf-regression.sh BASE_PROGRAM NEW_PROGRAM [ptdecode diff options...]
#   examples/ci/perf-regression.sh ../base/build/bench build/bench --fail-function 2 \
#       --min-instructions 1000
#
# Hardware Intel PT when the machine has it, else `ptrecord --emulate` (under QEMU with ptkit's
# plugin where qemu-user is installed: exact and fast; else single-stepped under ptrace: exact,
# but about 17 k instructions a second, so keep the benchmark small or record only part of it
# with PTKIT_FILTER='filter bench_main @ ./bench', ptrecord's --filter: then main is not in
# the trace, so the diff counts everything recorded unless PTKIT_EXCLUDE_STARTUP=1).
# Counts must not depend on where and how each build runs: glibc's start-up walks the
# environment and copies the program's directory, and malloc aligns what the kernel's
# randomised break gives it. So each program is copied to a path of the same length,
# $PTKIT_OUT/run/a/NAME and run/b/NAME, and run as ./NAME from there with an empty environment
# (env -i) and without address-space randomisation (setarch -R, where the kernel allows it), and
# `ptdecode diff` counts only what runs under main() (its default, --exclude-startup;
# PTKIT_EXCLUDE_STARTUP=0 gives --include-startup, which counts everything; a program without a
# main symbol needs it). The markdown report goes to
# $GITHUB_STEP_SUMMARY when it is set (GitHub Actions), the text report to standard output; the
# recordings and reports stay in $PTKIT_OUT (default ./perf-regression).
#
# Environment: PTRECORD, PTDECODE (the tools; default from $PATH), PTRECORD_OPTIONS (more
# ptrecord options, split into words at spaces), PTKIT_FILTER (one --filter, spaces kept),
# PTKIT_OUT, PTKIT_BENCH_ARGS (the benchmark's arguments),
# PTKIT_EMULATE (1: emulate even where intel_pt exists, step or qemu: with that backend;
# 0: never), PTKIT_EXCLUDE_STARTUP.
# A benchmark that needs files next to it (plugins found through $ORIGIN) cannot be copied:
# record it in place yourself and rely on --exclude-startup (diff's default).
set -eu

if [ $# -lt 2 ]; then
  echo "usage: $0 BASE_PROGRAM NEW_PROGRAM [ptdecode diff options...]" >&2
  exit 2
fi
base=$1
new=$2
shift 2
# Absolute: ptrecord runs under env -i, without PATH.
ptrecord=$(command -v "${PTRECORD:-ptrecord}") || { echo "$0: ptrecord not found" >&2; exit 2; }
ptdecode=${PTDECODE:-ptdecode}
out=${PTKIT_OUT:-perf-regression}
mkdir -p "$out"
out=$(cd "$out" && pwd)

emulate=
case ${PTKIT_EMULATE:-} in
  1) emulate=--emulate ;;
  step | qemu) emulate=--emulate=$PTKIT_EMULATE ;;
  0) ;;
  *) [ -d /sys/bus/event_source/devices/intel_pt ] || emulate=--emulate ;;
esac

# No address-space randomisation where the kernel lets us (a container's seccomp may not).
norandom=
if setarch "$(uname -m)" -R true 2>/dev/null; then
  norandom="$(command -v setarch) $(uname -m) -R"  # absolute: env -i clears PATH
fi

# record SIDE PROGRAM a|b: $out/SIDE.pt, the program run as $out/run/a|b/NAME.
record() {
  if [ ! -f "$2" ] || [ ! -x "$2" ]; then
    echo "$0: $2: not an executable program" >&2
    exit 2
  fi
  # run/a and run/b: paths of the same length (what start-up copies), kept for decoding.
  name=$(basename "$2")
  dir=$out/run/$3
  mkdir -p "$dir"
  cp "$2" "$dir/$name"
  echo "recording $2 -> $out/$1.pt${emulate:+ (emulated)}${norandom:+ (ASLR off)}" >&2
  # shellcheck disable=SC2086  # the options and arguments are meant to split into words
  (cd "$dir" && env -i $norandom "$ptrecord" $emulate -q ${PTRECORD_OPTIONS:-} \
     ${PTKIT_FILTER:+--filter "$PTKIT_FILTER"} --overwrite-existing -o "$out/$1.pt" -- \
     "./$name" ${PTKIT_BENCH_ARGS:-})
}

record base "$base" a
record new "$new" b

# A filtered trace has no main unless the filter keeps it: everything recorded counts.
startup=--exclude-startup
if [ "${PTKIT_EXCLUDE_STARTUP:-${PTKIT_FILTER:+0}}" = 0 ]; then startup=--include-startup; fi
status=0
"$ptdecode" diff "$startup" "$out/base.pt" "$out/new.pt" "$@" --format markdown \
  > "$out/report.md" || status=$?
if [ "$status" -ne 0 ] && [ "$status" -ne 3 ]; then
  exit "$status"  # ptdecode said why on stderr
fi
"$ptdecode" diff "$startup" "$out/base.pt" "$out/new.pt" "$@" --format text > "$out/report.txt" \
  || true
cat "$out/report.txt"
if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then
  cat "$out/report.md" >> "$GITHUB_STEP_SUMMARY"
fi
exit "$status"
