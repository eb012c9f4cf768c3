#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (preset `fuzz`) and runs them on their seed corpora
# (tests/fuzz/corpus/NAME/; the working corpus grows in build/fuzz/corpus/NAME/).
#   scripts/fuzz.sh all SECONDS      every target, SECONDS each (a long run: 3600 and more)
#   scripts/fuzz.sh NAME SECONDS     one target (NAME: container_reader, decode, raw_pt, ...)
#   scripts/fuzz.sh smoke [SECONDS]  every target, SECONDS shared among them (default 60), seed 1: CI
#   scripts/fuzz.sh list             the target names
# Limits of every run: -rss_limit_mb=2048 -malloc_limit_mb=600 -timeout=10. New crashes,
# hangs and OOMs are written to build/fuzz/artifacts/ and fail the run (non-zero exit).
# Dictionaries: tests/fuzz/*.dict, per target below. The trace.pt targets (container_reader,
# decode) mutate records, not bytes (tests/fuzz/container_mutator.h; PTKIT_FUZZ_MUTATOR=bytes
# turns that off). Long runs and their figures: tests/fuzz/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
targets=(container_reader perf_data decode raw_pt bts elf_image event_spec sideband sysfs)
# Extra seed folders per target.
declare -A extra=([decode]=tests/fuzz/corpus/perf_data)
# Dictionaries per target (tests/fuzz/NAME.dict, joined into one).
declare -A dicts=([container_reader]=container [decode]="container pt" [raw_pt]=pt
                  [sideband]=sideband [sysfs]=sysfs [event_spec]=sysfs)

usage() {
  sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}
mode="${1:-}"
seed=()
case "$mode" in
  list) printf '%s\n' "${targets[@]}"; exit 0 ;;
  all) [[ $# -eq 2 ]] || usage; run=("${targets[@]}"); seconds="$2" ;;
  smoke)
    run=("${targets[@]}")
    seconds=$(( ${2:-60} / ${#targets[@]} ))
    (( seconds > 0 )) || seconds=1
    seed=(-seed=1)  # CI's smoke explores the same way each run; long runs use random seeds
    ;;
  *)
    [[ $# -eq 2 && " ${targets[*]} " == *" $mode "* ]] || usage
    run=("$mode"); seconds="$2"
    ;;
esac
[[ "$seconds" =~ ^[0-9]+$ ]] || usage

cmake --preset fuzz >/dev/null
cmake --build --preset fuzz --target "${run[@]/%/_fuzz}"
mkdir -p build/fuzz/artifacts
for name in "${run[@]}"; do
  work="build/fuzz/corpus/$name"
  mkdir -p "$work"
  dict=()
  if [[ -n "${dicts[$name]:-}" ]]; then
    for d in ${dicts[$name]}; do cat "tests/fuzz/$d.dict"; done >"build/fuzz/$name.dict"
    dict=(-dict="build/fuzz/$name.dict")
  fi
  echo "fuzz: ${name}_fuzz for ${seconds}s"
  # shellcheck disable=SC2086
  "build/fuzz/tests/fuzz/${name}_fuzz" "$work" "tests/fuzz/corpus/$name" ${extra[$name]:-} \
    "${dict[@]}" "${seed[@]}" -max_total_time="$seconds" -rss_limit_mb=2048 -malloc_limit_mb=600 -timeout=10 \
    -artifact_prefix=build/fuzz/artifacts/ -print_final_stats=1 2>&1 | tail -n 12
done
