#!/bin/bash
# clang-tidy with the project's .clang-tidy on the project's C++ sources, as BUILD_DIR's
# compile_commands.json compiles them, one file at a time under `nice -n 19`.
#   scripts/tidy.sh [-p BUILD_DIR] [-j N] --unlisted       what CI runs: every file whose content
#                                                          key is not in scripts/tidy_clean.txt
#   scripts/tidy.sh [-p BUILD_DIR] [-j N] --update         the same, then rewrites the list
#   scripts/tidy.sh [-p BUILD_DIR] [-j N] --changed BASE   the files that differ from BASE
#   scripts/tidy.sh [-p BUILD_DIR] [-j N] [FILE...]        these files; none: every project file
#   --list: print the files that would be checked, and stop.
# BUILD_DIR: build/default by default (configure it first: cmake --preset default; nothing
# needs building). Not a unity build (the ci and fuzz presets): its compile_commands.json names
# the batches, not the library sources, which would go unchecked.
# The files: every .cc of src, record, decoder, completion, tests, bench and examples in the
# build; a header is checked through the sources that include it (.clang-tidy's
# HeaderFilterRegex reports findings in project headers). The C workload programs
# (examples/programs, tests/*/programs) are left out: their exact code is what the tests
# record, and the QEMU plugin is built against QEMU's plugin API with other flags.
# Content keys: clang-tidy 14 costs 0.3-28 s of CPU per file (it matches its checks through all
# of Abseil, CLI11, nlohmann/json and gtest too), ~30 min for the tree: more than CI can spend.
# scripts/tidy_keys.py gives each source a key, the sha256 of the clang-tidy version, the
# .clang-tidy files, the file's compile command and the content of the file and of every project
# file it includes, transitively. scripts/tidy_clean.txt lists the keys for which clang-tidy
# found nothing; --unlisted runs clang-tidy on every file whose current key is not listed, so a
# change to a file, to a header it includes, to .clang-tidy, to its flags or to the clang-tidy
# version always gets it checked; a stale or wrong list costs time, never skips a changed file.
# --update also runs the unlisted files, then writes the list: the still-current keys it had and
# the key of each file just found clean (computed before and after its run, and equal). Commit
# the list with the change, or CI checks the unlisted files again on each run (~10 s each).
# --changed BASE takes every .cc/.h that `git diff BASE` names (commits since BASE, uncommitted
# edits) and every new one not yet added; a header is checked through one source that includes
# it (its own .cc or _test.cc first). -j N: N files at once.
# Prints each finding; exits 1 if any file has one (WarningsAsErrors), 2 on a usage error.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build/default
jobs=1
base=
list=
mode=
files=()
while (($#)); do
  case $1 in
    -p) build=${2:?-p needs a build directory}; shift 2 ;;
    -j) jobs=${2:?-j needs a number}; shift 2 ;;
    -j[0-9]*) jobs=${1#-j}; shift ;;
    --changed) base=${2:?--changed needs a git revision}; shift 2 ;;
    --list) list=1; shift ;;
    --unlisted | --update) mode=${1#--}; shift ;;
    -h | --help) sed -n '2,33s/^# \{0,1\}//p' "$0"; exit 0 ;;
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

if [[ -n $mode ]]; then
  if [[ -n $base ]] || ((${#files[@]})); then
    echo "tidy.sh: --$mode checks every file; it takes no --changed or FILE" >&2
    exit 2
  fi
  clean_list=scripts/tidy_clean.txt
  # "KEY FILE" of every source now; those the list has are proven clean as they are.
  mapfile -t keyed < <(python3 scripts/tidy_keys.py "$build" clang-tidy "${sources[@]}")
  ((${#keyed[@]} == ${#sources[@]})) || { echo "tidy.sh: tidy_keys.py failed" >&2; exit 2; }
  listed=()
  unlisted=()
  for line in "${keyed[@]}"; do
    if [[ -f $clean_list ]] && grep -qxF "$line" "$clean_list"; then
      listed+=("$line")
    else
      unlisted+=("$line")
    fi
  done
  echo "tidy.sh: ${#keyed[@]} sources; ${#listed[@]} listed in $clean_list as clean for their" \
    "current content; ${#unlisted[@]} to check, $jobs at a time" >&2
  if [[ -n $list ]]; then
    printf '%s\n' "${unlisted[@]}" | sed 's/^[^ ]* //'
    exit 0
  fi
  if ((${#unlisted[@]})); then
    echo "tidy.sh: unlisted: $(printf '%s\n' "${unlisted[@]}" | sed 's/^[^ ]* //' | xargs)" >&2
  fi
  passed=$(mktemp)
  trap 'rm -f "$passed"' EXIT
  # Each unlisted file: clang-tidy, then its key again; "KEY FILE" goes to $passed only when
  # clang-tidy found nothing and the key is what it was before the run.
  status=0
  if ((${#unlisted[@]})); then
    printf '%s\n' "${unlisted[@]}" |
      xargs -P "$jobs" -L 1 bash -c 'nice -n 19 clang-tidy -p "$0" --quiet "$3" || exit 1
        now=$(python3 scripts/tidy_keys.py "$0" clang-tidy "$3")
        if [[ $now == "$2 $3" ]]; then echo "$now" >>"$1"; fi' "$build" "$passed" ||
      status=$?
  fi
  if [[ $mode == update ]]; then
    {
      echo "# scripts/tidy.sh --update: the content keys (scripts/tidy_keys.py) of the sources"
      echo "# on which clang-tidy found nothing. scripts/tidy.sh --unlisted (CI) checks the rest."
      printf '%s\n' "${listed[@]}" | cat - "$passed" | sed '/^$/d' | sort -k2 -u
    } >"$clean_list.tmp"
    mv "$clean_list.tmp" "$clean_list"
    echo "tidy.sh: $clean_list: $(grep -vc '^#' "$clean_list") of ${#keyed[@]} sources" >&2
  fi
  case $status in
    0) echo "tidy.sh: clean" >&2 ;;
    123) echo "tidy.sh: findings above" >&2; exit 1 ;;
    *) echo "tidy.sh: clang-tidy was killed or could not run (xargs status $status)" >&2; exit 1 ;;
  esac
  exit 0
fi

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
