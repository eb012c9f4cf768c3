#!/usr/bin/env bash
# Installs every build and test dependency of ptkit from Debian 12 packages.
# Idempotent: packages already installed are skipped; apt-get runs only when
# something is missing. Needs root (or sudo).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  clang libclang-rt-14-dev clang-format clang-tidy
  libipt-dev libpfm4-dev libelf-dev libdw-dev libzstd-dev zstd zlib1g-dev
  # MiniDebugInfo (.gnu_debugdata) in the decoder; xz makes it in its test
  liblzma-dev xz-utils
  libabsl-dev libgtest-dev libgmock-dev libbenchmark-dev
  libzydis-dev libxxhash-dev libcli11-dev libfmt-dev nlohmann-json3-dev
  # Rust's v0 symbol names (cplus_demangle): libstdc++'s __cxa_demangle reads C++ only
  libiberty-dev
  linux-perf
  # ptrecord --emulate=qemu: qemu-x86_64 with TCG plugin support (not qemu-user-static)
  qemu-user
  # tests/corpus: its oracles (objdump, nm, addr2line, gdb; libc's symbols) and harness
  binutils gdb libc6-dbg python3
  # tests/e2e: a Go program (goroutines switching stacks); i386 programs (gcc -m32) for
  # --emulate=step on 32-bit code
  golang-go gcc-multilib
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
