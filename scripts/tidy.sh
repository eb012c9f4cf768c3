#!/bin/bash
# clang-tidy with the project's .clang-tidy on the project's C++ sources, as BUILD_DIR's
# compile_commands.json compiles them, one file at a time under `nice -n 19`.
#   scripts/tidy.sh [-p BUILD_DIR] [-j N] --changed BASE   the files that differ from BASE
#   scripts/tidy.sh [-p BUILD_DIR] [-j N] [FILE...]        these files; none: every project file
#   --list: print the files that would be checked, and stop.
# BUILD_DIR: build/default by default (configure it first: cmake --preset default; nothing
# needs building). Not a unity build (the ci and fuzz presets): its compile_commands.json names
# the batches, not the library sources, which would go unchecked.
# --changed BASE takes every .cc/.h that `git diff BASE` names (commits since BASE, uncommitted
# edits) and every new one not yet added; a header is checked through one source that includes
# it (its own .cc or _test.cc first), as .clang-tidy's HeaderFilterRegex reports findings in
# project headers. -j N: N files at once.
# Not part of scripts/test.sh: each file costs ~20 s of CPU (the checks parse Abseil, CLI11,
# nlohmann/json, gtest), ~1 h for the ~160 sources. The C workload programs (examples/programs,
# tests/*/programs) are left out: their exact code is what the tests record, and the QEMU plugin
# is built against QEMU's plugin API with other flags.
# Prints each finding; exits 1 if any file has one (WarningsAsErrors), 2 on a usage error.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build/default
jobs=1
base=
list=
files=()
while (($#)); do
  case $1 in
    -p) build=${2:?-p needs a build directory}; shift 2 ;;
    -j) jobs=${2:?-j needs a number}; shift 2 ;;
    --changed) base=${2:?--changed needs a git revision}; shift 2 ;;
    --list) list=1; shift ;;
    -h | --help) sed -n '2,18s/^# \{0,1\}//p' "$0"; exit 0 ;;
    -*) echo "tidy.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) files+=("$1"); shift ;;
  esac
done
db=$build/compile_commands.json
if [[ ! -f $db ]]; then
  echo "tidy.sh: no $db: configure first (cmake --preset default)" >&2
  exit 2
fi
if grep -q '"file": ".*/Unity/unity_[0-9]*_cxx\.cxx"' "$db"; then
  echo "tidy.sh: $build is a unity build (PTKIT_UNITY_BUILD): its compile_commands.json names" \
    "the batches, not the library sources; use one without (cmake --preset default; -p" \
    "build/default)" >&2
  exit 2
fi
# The project's C++ sources in the build, relative to the top directory.
mapfile -t sources < <(sed -n 's/^ *"file": "\(.*\)",\{0,1\}$/\1/p' "$db" |
  sed "s|^$PWD/||" | grep -E '^(src|record|decoder|completion|tests|bench|examples)/.*\.cc$' |
  sort -u)

# One source of `sources` that includes header $1: its own .cc or _test.cc, else the first
# that names it in an #include (as "ptkit/x.h", "decoder/x.h", or "x.h" from its own folder).
# Empty when none does.
includer() {
  local h=$1 stem=${1%.h} name s
  for s in "$stem.cc" "$stem"_test.cc; do
    if printf '%s\n' "${sources[@]}" | grep -qxF "$s"; then echo "$s"; return; fi
  done
  name=${h#include/}
  name=${name#tests/support/}
  s=$(grep -lsF "#include \"$name\"" "${sources[@]}" | head -1 || true)
  if [[ -z $s ]]; then
    s=$(printf '%s\n' "${sources[@]}" | grep "^$(dirname "$h")/" |
      xargs -r grep -lsF "#include \"$(basename "$h")\"" | head -1 || true)
  fi
  echo "$s"
}

if [[ -n $base ]]; then
  git rev-parse --verify -q "$base^{commit}" >/dev/null ||
    { echo "tidy.sh: --changed $base: not a git revision" >&2; exit 2; }
  mapfile -t changed < <(git diff --name-only --diff-filter=d "$base" -- '*.cc' '*.h'
    git ls-files --others --exclude-standard -- '*.cc' '*.h')
  for f in "${changed[@]}"; do
    if [[ $f == *.h ]]; then
      s=$(includer "$f")
      if [[ -z $s ]]; then echo "tidy.sh: $f: no source in $db includes it: not checked" >&2; fi
      f=$s
    fi
    if [[ -n $f ]] && printf '%s\n' "${sources[@]}" | grep -qxF "$f"; then files+=("$f"); fi
  done
  mapfile -t files < <(printf '%s\n' "${files[@]}" | sed '/^$/d' | sort -u)
  if ((${#files[@]} == 0)); then
    echo "tidy.sh: no C++ source of the build differs from $base" >&2
    exit 0
  fi
elif ((${#files[@]} == 0)); then
  files=("${sources[@]}")
fi

if [[ -n $list ]]; then
  printf '%s\n' "${files[@]}"
  exit 0
fi
echo "tidy.sh: ${#files[@]} file(s), $jobs at a time" >&2
# xargs exits 123 when a clang-tidy run failed (a finding, or a file it could not parse), and
# 125 when one was killed by a signal (a crash, e.g. when a file changed while it was read).
status=0
printf '%s\n' "${files[@]}" |
  xargs -P "$jobs" -I{} nice -n 19 clang-tidy -p "$build" --quiet {} || status=$?
case $status in
  0) echo "tidy.sh: clean" >&2 ;;
  123) echo "tidy.sh: findings above" >&2; exit 1 ;;
  *) echo "tidy.sh: clang-tidy was killed or could not run (xargs status $status)" >&2; exit 1 ;;
esac
