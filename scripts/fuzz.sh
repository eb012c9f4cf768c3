#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (preset `fuzz`) and runs them on their seed corpora
# (tests/fuzz/corpus/NAME/; the working corpus grows in build/fuzz/corpus/NAME/).
#   scripts/fuzz.sh all SECONDS      every target, SECONDS each (a long run: 3600 and more)
#   scripts/fuzz.sh NAME SECONDS     one target (NAME: container_reader, decode, raw_pt, ...)
#   scripts/fuzz.sh smoke [SECONDS]  every target, SECONDS shared among them (default 60), seed 1,
#                                    one target per CPU at once: CI
#   scripts/fuzz.sh list             the target names
#   scripts/fuzz.sh keep NAME        NAME's working corpus, merged to the inputs that give its
#                                    coverage, into tests/fuzz/kept/NAME.tar.zst (commit it)
# A long run (all, NAME) starts from tests/fuzz/kept/NAME.tar.zst where build/fuzz/corpus/NAME is
# empty: a campaign of many sessions' runs on one corpus, whose machines do not keep build/.
# Limits of every run: -rss_limit_mb=2048 -malloc_limit_mb=600 -timeout=10 (PTKIT_FUZZ_TIMEOUT
# seconds instead: libFuzzer's timeout is wall time, and a long run shares the machine). New
# crashes, hangs and OOMs are written to build/fuzz/artifacts/ and fail the run (non-zero exit).
# Dictionaries: tests/fuzz/*.dict, per target below. The trace.pt targets (container_reader,
# decode) mutate records, not bytes (tests/fuzz/container_mutator.h; PTKIT_FUZZ_MUTATOR=bytes
# turns that off). PTKIT_FUZZ_PRESET=fuzz-fast runs the fuzz-fast preset's targets (libFuzzer
# alone at -O2, no ASan/UBSan: decode made 3.7x the executions) on the same working corpus and
# artifacts; `keep` merges with the ASan/UBSan build whatever it is, so every input kept is run
# under the sanitizers. Long runs and their figures: tests/fuzz/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
targets=(container_reader perf_data decode raw_pt bts elf_image event_spec sideband sysfs)
# Extra seed folders per target.
declare -A extra=([decode]=tests/fuzz/corpus/perf_data)
# Dictionaries per target (tests/fuzz/NAME.dict, joined into one).
declare -A dicts=([container_reader]=container [decode]="container pt" [raw_pt]=pt
                  [sideband]=sideband [sysfs]=sysfs [event_spec]=sysfs)
# libFuzzer options per target. decode: libFuzzer's entropic schedule (its rare-feature
# bookkeeping, linear in the ~25 k features an input touches) was half of decode's CPU; without
# it, in equal CPU time, 2.9x the executions and more coverage (tests/fuzz/README.md).
declare -A options=([decode]=-entropic=0)
# ASAN_OPTIONS per target. decode: no allocation stacks kept (malloc_context_size=0): taking
# each allocation's stack (unwinding and storing it) was about 15 % of its time; 1.3x the
# executions without. A finding's report then lacks the allocation and free stacks: replay
# its artifact without it for those.
declare -A asan=([decode]=malloc_context_size=0)

usage() {
  sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}
mode="${1:-}"
preset="${PTKIT_FUZZ_PRESET:-fuzz}"
[[ "$preset" == fuzz || "$preset" == fuzz-fast ]] ||
  { echo "fuzz: PTKIT_FUZZ_PRESET is fuzz or fuzz-fast, not $preset" >&2; exit 2; }
seed=()
case "$mode" in
  list) printf '%s\n' "${targets[@]}"; exit 0 ;;
  keep)
    [[ $# -eq 2 && " ${targets[*]} " == *" $2 "* ]] || usage
    name="$2"
    [[ -n "$(ls -A "build/fuzz/corpus/$name" 2>/dev/null)" ]] ||
      { echo "fuzz: build/fuzz/corpus/$name is empty: nothing to keep" >&2; exit 1; }
    cmake --preset fuzz >/dev/null
    cmake --build --preset fuzz --target "${name}_fuzz"
    merged=$(mktemp -d build/fuzz/merge.XXXXXX)
    mkdir "$merged/$name"
    # -merge=1: the inputs of the corpus that give all its features, smallest first.
    ASAN_OPTIONS="${asan[$name]:-${ASAN_OPTIONS:-}}" "build/fuzz/tests/fuzz/${name}_fuzz" \
      -merge=1 -rss_limit_mb=2048 -malloc_limit_mb=600 -timeout=120 \
      "$merged/$name" "build/fuzz/corpus/$name" >"build/fuzz/$name.merge.log" 2>&1 ||
      { echo "fuzz: merging $name's corpus failed: build/fuzz/$name.merge.log" >&2; exit 1; }
    mkdir -p tests/fuzz/kept
    tar -C "$merged" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf - "$name" |
      zstd -19 --long=27 -q -c >"tests/fuzz/kept/$name.tar.zst"
    echo "fuzz: kept $(ls "$merged/$name" | wc -l) of $(ls "build/fuzz/corpus/$name" | wc -l)" \
      "inputs of $name in tests/fuzz/kept/$name.tar.zst ($(stat -c %s "tests/fuzz/kept/$name.tar.zst") bytes)"
    rm -rf "$merged"
    exit 0
    ;;
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

cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" --target "${run[@]/%/_fuzz}"
mkdir -p build/fuzz/artifacts

# One target's run; its output goes to build/fuzz/NAME.log, its exit status to NAME.status.
run_one() {
  local name="$1" work="build/fuzz/corpus/$1" dict=() status=0
  mkdir -p "$work"
  # A long run goes on with the kept corpus of the campaign (not the smoke: CI explores from the
  # seeds, in seconds).
  if [[ "$mode" != smoke && -z "$(ls -A "$work")" && -f "tests/fuzz/kept/$name.tar.zst" ]]; then
    zstd -d --long=27 -q -c "tests/fuzz/kept/$name.tar.zst" | tar -C build/fuzz/corpus -xf -
  fi
  if [[ -n "${dicts[$name]:-}" ]]; then
    for d in ${dicts[$name]}; do cat "tests/fuzz/$d.dict"; done >"build/fuzz/$name.dict"
    dict=(-dict="build/fuzz/$name.dict")
  fi
  # shellcheck disable=SC2086
  ASAN_OPTIONS="${asan[$name]:-${ASAN_OPTIONS:-}}" \
    "build/$preset/tests/fuzz/${name}_fuzz" "$work" "tests/fuzz/corpus/$name" ${extra[$name]:-} \
    "${dict[@]}" "${seed[@]}" ${options[$name]:-} -max_total_time="$seconds" -rss_limit_mb=2048 -malloc_limit_mb=600 -timeout="${PTKIT_FUZZ_TIMEOUT:-10}" \
    -artifact_prefix=build/fuzz/artifacts/ -print_final_stats=1 >"build/fuzz/$name.log" 2>&1 || status=$?
  echo "$status" >"build/fuzz/$name.status"
}

# The smoke runs one target per CPU at once (each fuzzer is one process); other modes one at a
# time. Each target's last lines are shown in order; any failure fails the run.
parallel=1
[[ "$mode" == smoke ]] && parallel=$(nproc)
for name in "${run[@]}"; do
  while (( $(jobs -rp | wc -l) >= parallel )); do wait -n || true; done
  echo "fuzz: ${name}_fuzz for ${seconds}s"
  rm -f "build/fuzz/$name.status"
  run_one "$name" &
done
wait
failed=0
for name in "${run[@]}"; do
  echo "== ${name}_fuzz"
  tail -n 12 "build/fuzz/$name.log"
  status=$(cat "build/fuzz/$name.status" 2>/dev/null || echo "no status")
  if [[ "$status" != 0 ]]; then
    echo "fuzz: ${name}_fuzz failed (exit status $status): build/fuzz/$name.log" >&2
    failed=1
  fi
done
exit "$failed"
