#!/usr/bin/env python3
"""The real-program corpus: ptdecode's outputs checked against oracles that are not ptkit.

Each program is built (or taken from Debian), recorded once with `ptrecord --emulate
--ground-truth` (ASLR off, so gdb sees the same layout), and its oracle data is written next to
the recording. Every check then decodes the recording with ptdecode and compares one output
with one oracle:

  insn          `ptdecode insn` addresses, per thread   = the recorder's ground truth
  symbols       symbol+offset of every executed address = nm (sized symbols), objdump (x@plt)
  srcline       `insn --srcline` of the program's code  = addr2line
  call-targets  `branches` calls: the target's symbol   = nm / objdump
  calls         `stats --json` calls per function       = call instructions (objdump) whose
                                                          next ground-truth instruction is the
                                                          function's entry
  self          `stats --json` self per function        = ground-truth instructions per symbol
  calls-tree    `calls`: per thread each call's callee  = the ground truth's calls (objdump) and
                and its instruction count                 returns (a shadow stack), nm names
  stacks        `folded` stack at sampled instructions  = `gdb -batch` break there + `bt`
  timeline      `timeline` B per frame, each E named    = the ground truth's calls, jumps into
                                                          other functions, returns to callers
                                                          entered before tracing, nm names
  time          `folded --weight=time` and insn times   = a clock that advances (not all 0)
  perf          `insn`, `branches` per thread           = perf 6.1's own decoder: `perf script
                                                          --itrace=i0ns` / `--itrace=b` of
                                                          `ptdecode export --to perf.data`

Usage (ctest runs it; see tests/corpus/CMakeLists.txt):
  corpus.py --work DIR --ptrecord P --ptdecode D --source S record PROGRAM
  corpus.py --work DIR --ptrecord P --ptdecode D --source S check PROGRAM CHECK
  corpus.py list            (PROGRAM CHECKS LABEL LONG_CHECKS lines for CMake)
Exit status: 0 pass, 1 mismatch (printed), 2 harness or oracle failure, 77 skipped.
Only the Python 3 standard library, gcc/g++, binutils, gdb, setarch and perf are used.
"""

import argparse
import bisect
import collections
import fcntl
import functools
import itertools
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time

SKIP = 77
# How many mismatches a check prints before it summarises the rest.
SHOWN = int(os.environ.get("CORPUS_SHOWN", "12"))


class HarnessError(Exception):
    """The oracle itself could not be established (a tool failed, a mapping is unknown)."""


# ---------------------------------------------------------------------------------------------
# The programs. `cmd` and `build` may use {w} (this program's work dir), {src} (tests/corpus/
# programs) and {ex} (examples/programs). `own` lists the files that are the user's program
# (srcline and stacks are checked there). `execs` are programs the workload exec()s.

CFLAGS = "-O1 -g -fno-inline"


def built(name, compile_line, extra_steps=(), args=(), **spec):
    """A program built in the test: `compile_line` makes {w}/NAME (as -o), then extra_steps."""
    return dict(build=[f"{compile_line} -o {{w}}/{name}"] + list(extra_steps),
                cmd=[f"{{w}}/{name}"] + list(args), own=[f"{{w}}/{name}"], **spec)


PROGRAMS = {
    # Debian's own binaries (stripped; symbols from .dynsym and libc6-dbg).
    "basename": dict(cmd=["/usr/bin/basename", "a/b"], own=[]),
    "expr": dict(cmd=["/usr/bin/expr", "1", "+", "2"], own=[], long=True),
    "true": dict(cmd=["/bin/true"], own=[], long=True),
    # Small projects built here.
    "sort_pie": built("sort_pie", f"gcc {CFLAGS} -fPIE -pie {{src}}/sort.c",
                      stack_points=["report"]),
    "sort_nopie": built("sort_nopie", f"gcc {CFLAGS} -fno-pie -no-pie {{src}}/sort.c",
                        stack_points=["report"]),
    # -O2 as distributions build: a recursive function's cold part jumps back into it.
    "cold": built("cold", "gcc -O2 -g {src}/cold.c", stack_points=["note_unusual"]),
    "static": built("static", f"gcc {CFLAGS} -static {{src}}/static.c", stack_points=["say"]),
    "stripped": built("stripped.full", f"gcc {CFLAGS} -static {{src}}/static.c",
                      ["objcopy --only-keep-debug {w}/stripped.full {w}/stripped.debug",
                       "objcopy --strip-all --add-gnu-debuglink={w}/stripped.debug "
                       "{w}/stripped.full {w}/stripped", "rm {w}/stripped.full"],
                      stack_points=["say"]),
    "static_bts": built("static", f"gcc {CFLAGS} -static {{src}}/static.c", record=["--bts"]),
    "cxx": built("cxx", f"g++ {CFLAGS} -static-libstdc++ -static-libgcc {{src}}/cxx.cc",
                 stack_points=["Check(int)", "__cxa_begin_catch"]),
    # -O2: Check's throw in its cold part, `Check(int) [clone .cold]`.
    "cxx_o2": built("cxx_o2", "g++ -O2 -g -static-libstdc++ -static-libgcc {src}/cxx.cc",
                    stack_points=["Check(int)", "__cxa_begin_catch"]),
    "cxx_shared": built("cxx_shared", f"g++ {CFLAGS} {{src}}/cxx.cc",
                        stack_points=["Check(int)"], long=True),
    "vdso": built("vdso", f"gcc {CFLAGS} -static {{src}}/vdso.c", stack_points=["after_clock"]),
    "forkexec": built("forkexec", f"gcc {CFLAGS} -static {{src}}/forkexec.c",
                      [f"gcc {CFLAGS} -static {{src}}/static.c -o {{w}}/child"],
                      args=["{w}/child"], stack_points=["after_wait"], execs=[["{w}/child"]]),
    "threads": built("threads", f"gcc {CFLAGS} -static -pthread {{ex}}/threads.c",
                     stack_points=["work"]),
    "dlopen": built("dlopen", f"gcc {CFLAGS} {{ex}}/dlopen.c -ldl",
                    [f"gcc {CFLAGS} -shared -fPIC {{ex}}/plugin.c -o {{w}}/libplugin.so"],
                    args=["{w}/libplugin.so"], stack_points=["main"]),
    # Rust (rustup's toolchain, where installed: its standard library's symbols are in Rust's
    # v0 mangling, the program's own too with -C symbol-mangling-version=v0): trait objects,
    # generics, closures, panics caught by catch_unwind (unwinding through frames).
    "rust": built("rust", "rustc -C opt-level=1 -g -C symbol-mangling-version=v0 "
                  "{src}/traits.rs", stack_points=["traits::checked"], needs="rustc",
                  stacks_by_symbol=True),
}
# The stripped program runs as {w}/stripped; the exec'd child and the plugin are the program's
# own code too.
PROGRAMS["stripped"].update(cmd=["{w}/stripped"], own=["{w}/stripped"])
PROGRAMS["forkexec"]["own"].append("{w}/child")
PROGRAMS["dlopen"]["own"].append("{w}/libplugin.so")
CHECKS = ["insn", "symbols", "srcline", "call-targets", "calls", "calls-tree", "self", "stacks",
          "timeline", "time", "perf"]
# Checks that do not apply to a program (and why).
NOT_APPLICABLE = {
    "basename": {"srcline", "stacks"},  # no DWARF and no own functions to break in
    "expr": {"srcline", "stacks"},
    "true": {"srcline", "stacks"},
    # perf's BTS decoder drops a thread's last branch record (tests/e2e/perf_export_cli_test.cc
    # checks BTS exports).
    "static_bts": {"srcline", "stacks", "time", "perf"},
}


# Known bugs the corpus found and that are not fixed yet (issue 10 notes): the check still runs
# and must fail exactly this way (the mismatch contains the text given), so it passes as a known
# failure; a check that then passes, or fails some other way, fails the test. Remove an entry
# with its fix.
KNOWN_BUGS = {}


# The perf check (perf 6.1's decoder on the export; perf script costs about 20 us per
# instruction) runs by default on these programs only: one thread, threads, fork + exec, a
# stripped program, the vDSO (about 1 s). On the others it is a long variant (label
# corpus-long, PTKIT_CORPUS_LONG=1). The vDSO one found that perf 6.1 keeps the last IP from
# before a PSB: a PSB+ FUP with a 32-bit update (valid against the last IP a PSB resets to 0)
# after an IP in the vDSO decoded as 0x7fff0040161f for 0x40161f ("Trace doesn't match
# instruction"). The emulation now sends whole IPs after a PSB, as hardware does.
PERF_BY_DEFAULT = {"static", "threads", "forkexec", "stripped", "vdso"}


def checks_of(name):
    return [c for c in CHECKS if c not in NOT_APPLICABLE.get(name, set())]


def long_checks_of(name):
    """The checks of a program that are long variants although the program is not."""
    return {"perf"} & set(checks_of(name)) if name not in PERF_BY_DEFAULT else set()


# ---------------------------------------------------------------------------------------------
# Small helpers.

def run(cmd, cwd=None, check=True, env=None, timeout=600):
    """Runs cmd (a list, or a string for the shell); returns the CompletedProcess."""
    p = subprocess.run(cmd, cwd=cwd, shell=isinstance(cmd, str), env=env, timeout=timeout,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       errors="replace")
    if check and p.returncode != 0:
        raise HarnessError(f"{cmd if isinstance(cmd, str) else ' '.join(cmd)} exited "
                           f"{p.returncode}:\n{p.stderr[-2000:]}")
    return p


def tool_runs(tool):
    """Whether `tool --version` runs (rustup's rustc is there but fails without a toolchain)."""
    if shutil.which(tool) is None:
        return False
    try:
        return subprocess.run([tool, "--version"], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def hexint(text):
    return int(text, 16)


def elf_has_section(path, name):
    out = run(["readelf", "-SW", path]).stdout
    return re.search(r"\]\s+" + re.escape(name) + r"\s", out) is not None


def build_id(path):
    out = run(["readelf", "-n", path], check=False).stdout
    m = re.search(r"Build ID:\s*([0-9a-f]+)", out)
    return m.group(1) if m else None


def debug_file(path):
    """The separate debug file of `path` as gdb finds it (build-id, then .gnu_debuglink)."""
    bid = build_id(path)
    if bid:
        candidate = f"/usr/lib/debug/.build-id/{bid[:2]}/{bid[2:]}.debug"
        if os.path.exists(candidate):
            return candidate
    p = run(["readelf", "--string-dump=.gnu_debuglink", path], check=False)
    m = re.search(r"\]\s+(\S+)", p.stdout)
    if m:
        name = m.group(1)
        d = os.path.dirname(path)
        for c in (name, os.path.join(d, name), os.path.join(d, ".debug", name),
                  "/usr/lib/debug" + os.path.join(d, name)):
            if os.path.isabs(c) and os.path.exists(c):
                return c
    return None


def load_segments(path):
    """PT_LOAD (offset, vaddr, filesz) of an ELF file, from readelf."""
    segs = []
    for line in run(["readelf", "-lW", path]).stdout.splitlines():
        f = line.split()
        if f and f[0] == "LOAD":
            segs.append((hexint(f[1]), hexint(f[2]), hexint(f[4])))
    return segs


# ---------------------------------------------------------------------------------------------
# Per-file oracle data (cached across programs: libc is disassembled once per run).

def file_oracle(path, cache_dir):
    """Symbols (nm), PLT labels and calls (objdump -d) of one ELF file."""
    st = os.stat(path)
    key = re.sub(r"[^A-Za-z0-9_.-]", "_", path) + f".{st.st_size}.{int(st.st_mtime)}.v8.json"
    cached = os.path.join(cache_dir, key)
    os.makedirs(cache_dir, exist_ok=True)
    with open(cached + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(cached):
            with open(cached) as f:
                return json.load(f)
        data = compute_file_oracle(path)
        with open(cached + ".tmp", "w") as f:
            json.dump(data, f)
        os.rename(cached + ".tmp", cached)
        return data


# Prefixes objdump prints before the mnemonic.
PREFIXES = {"bnd", "notrack", "addr32", "data16", "rex", "rex.W", "cs", "ds", "lock", "rep",
            "repz", "repnz", "repe", "repne"}


def entry_main(path):
    """[[start, size, "main", "T"]] for an executable with no main symbol whose entry code (glibc's
    _start) loads main's address into %rdi before its first call (objdump -d from the entry), as
    long as the .eh_frame FDE that starts there (readelf --debug-dump=frames); else []."""
    m = re.search(r"Type:\s+(EXEC|DYN).*?Entry point address:\s+0x([0-9a-f]+)",
                  run(["readelf", "-hW", path]).stdout, re.S)
    if not m or hexint(m.group(2)) == 0:
        return []
    entry = hexint(m.group(2))
    text = run(["objdump", "-d", "-w", "--no-show-raw-insn", f"--start-address={entry:#x}",
                f"--stop-address={entry + 128:#x}", path], check=False).stdout
    main = None
    for line in text.splitlines():
        m = re.match(r"^\s+[0-9a-f]+:\s+(.*)$", line)
        if not m:
            continue
        insn = m.group(1)
        if re.match(r"(addr32 )?call", insn):
            break
        if re.search(r",%(rdi|edi)\b", insn):
            lea = re.match(r"lea\s+-?0x[0-9a-f]+\(%rip\),%rdi\s+# ([0-9a-f]+)", insn)
            mov = re.match(r"mov\s+\$0x([0-9a-f]+),%(rdi|edi)$", insn.strip())
            main = hexint(lea.group(1)) if lea else hexint(mov.group(1)) if mov else None
    else:
        return []  # no call: not glibc's entry
    if main is None:
        return []
    frames = run(["readelf", "--debug-dump=frames", path], check=False).stdout
    m = re.search(rf"FDE cie=[0-9a-f]+ pc=0*{main:x}\.\.([0-9a-f]+)", frames)
    return [[main, hexint(m.group(1)) - main, "main", "T"]] if m else []


def compute_file_oracle(path):
    symfile = path
    if not elf_has_section(path, ".symtab"):
        symfile = debug_file(path) or path
    nm_args = ["nm", "-S", "--defined-only", "-C"]
    if symfile == path and not elf_has_section(path, ".symtab"):
        nm_args.append("-D")
    syms = []  # [start, size, name, type]; names without nm's symbol version (foo@@GLIBC_2.2.5)
    for line in run(nm_args + [symfile], check=False).stdout.splitlines():
        line = re.sub(r"@@?[A-Z][A-Za-z0-9_.]*$", "", line)
        f = line.split(" ", 3)
        if len(f) == 4 and f[2] in "TtWwi":
            syms.append([hexint(f[0]), hexint(f[1]), f[3], f[2]])
        elif len(f) == 3 and f[1] in "TtWwi":  # size-0 symbol (no size column)
            syms.append([hexint(f[0]), 0, f[2], f[1]])
    if not any(s[2] == "main" for s in syms):
        syms += entry_main(path)
    syms.sort()
    # objdump -d: instruction starts, calls with their direct target, syscalls, x@plt labels.
    starts, calls, syscalls, rets, labels = [], {}, [], [], []
    # -C: labels demangled as nm -C names (and ptdecode): <std::get_terminate()@plt>.
    proc = subprocess.Popen(["objdump", "-d", "-C", "-w", "--no-show-raw-insn", path],
                            stdout=subprocess.PIPE, text=True, errors="replace")
    insn_re = re.compile(r"^\s+([0-9a-f]+):\s+(\S+)\s*(.*)$")
    label_re = re.compile(r"^([0-9a-f]+) <(.*)>:$")
    for line in proc.stdout:
        m = insn_re.match(line)
        if m:
            addr = hexint(m.group(1))
            words = (m.group(2) + " " + m.group(3)).split()
            while len(words) > 1 and words[0] in PREFIXES:
                words.pop(0)
            mnem = words[0]
            starts.append(addr)
            if mnem.startswith("call"):
                direct = len(words) > 1 and re.fullmatch(r"[0-9a-f]+", words[1])
                calls[str(addr)] = hexint(words[1]) if direct else None
            elif mnem == "syscall":
                syscalls.append(addr)
            elif mnem.startswith("ret"):
                rets.append(addr)
            continue
        m = label_re.match(line)
        if m:
            labels.append([hexint(m.group(1)), m.group(2)])
    if proc.wait() != 0:
        raise HarnessError(f"objdump -d {path} failed")
    starts.sort()
    plt = []
    ifuncs = None
    for i, (start, name) in enumerate(labels):
        if name.endswith("@plt"):
            end = labels[i + 1][0] if i + 1 < len(labels) else start + 16
            m = re.fullmatch(r"\*ABS\*\+0x([0-9a-f]+)@plt", name)
            if m:  # objdump's name of an IRELATIVE entry (libc's)
                ifuncs = readelf_ifuncs(path) if ifuncs is None else ifuncs
                name = iplt_name(hexint(m.group(1)), ifuncs)
            plt.append([start, min(end, start + 16), name])
    sections = []  # [name, address, size] of the sections with code
    for line in run(["readelf", "-SW", path]).stdout.splitlines():
        m = re.match(r"^\s*\[\s*\d+\]\s+(\S+)\s+\S+\s+([0-9a-f]+)\s+[0-9a-f]+\s+([0-9a-f]+)"
                     r"\s+\S+\s+(\S*X\S*)\s", line)
        if m:
            sections.append([m.group(1), hexint(m.group(2)), hexint(m.group(3))])
    plt += iplt_names(path, plt)
    return dict(path=path, symfile=symfile, syms=syms, starts=starts, calls=calls,
                syscalls=syscalls, rets=rets, plt=plt, segments=load_segments(path),
                sections=sections)


def readelf_ifuncs(path):
    """{address: name} of the IFUNC symbols of `path` (readelf -sW, .symtab and .dynsym), the
    one perf prefers among several at an address (tools/perf/util/symbol.c choose_best_symbol:
    sized, not weak, global, fewer leading underscores, the longer name)."""
    best = {}
    for line in run(["readelf", "-sW", path], check=False).stdout.splitlines():
        f = line.split()
        if len(f) < 8 or f[3] != "IFUNC":
            continue
        name = f[7].split("@")[0]
        key = (f[2] == "0", f[4] == "WEAK", f[4] != "GLOBAL",
               len(name) - len(name.lstrip("_")), -len(name))
        address = hexint(f[1])
        if address not in best or key < best[address][0]:
            best[address] = (key, name)
    return {address: name for address, (key, name) in best.items()}


def iplt_name(addend, ifuncs):
    """An IRELATIVE PLT entry's name: the IFUNC symbol at the relocation's addend (the
    resolver), as perf names it since 6.3; objdump's *ABS*+0xADDEND@plt without one."""
    return f"{ifuncs[addend]}@plt" if addend in ifuncs else f"*ABS*+{hex(addend)}@plt"


def iplt_names(path, plt):
    """[start, end, name] of the .plt entries objdump gives no label (a static program's
    IRELATIVE entries, 8 bytes each): the GOT slot an entry's `jmp *...(%rip)` reads (objdump)
    has an R_X86_64_IRELATIVE relocation (readelf -r) whose addend names it (iplt_name)."""
    addends = {}
    for line in run(["readelf", "-rW", path], check=False).stdout.splitlines():
        f = line.split()
        if len(f) == 4 and f[2] == "R_X86_64_IRELATIVE":
            addends[hexint(f[0])] = hexint(f[3])
    ifuncs = readelf_ifuncs(path) if addends else {}
    out = run(["objdump", "-d", "-w", "--no-show-raw-insn", "-j", ".plt", path],
              check=False).stdout
    insns = [(hexint(m.group(1)), m.group(2)) for m in
             re.finditer(r"^\s+([0-9a-f]+):\s+(.*)$", out, re.M)]
    names = []
    for k, (addr, text) in enumerate(insns):
        m = re.match(r"^jmp\s+\*0x[0-9a-f]+\(%rip\)\s+# (?:0x)?([0-9a-f]+)", text)
        if not m or hexint(m.group(1)) not in addends:
            continue
        end = insns[k + 1][0] if k + 1 < len(insns) else addr + 8
        while k + 1 < len(insns) and insns[k + 1][1].startswith(("xchg", "nop")):
            k += 1
            end = insns[k + 1][0] if k + 1 < len(insns) else insns[k][0] + 2
        if not any(start <= addr < e for start, e, _ in plt):
            names.append([addr, end, iplt_name(addends[hexint(m.group(1))], ifuncs)])
    return names


class FileInfo:
    """Lookups over one file's oracle data, by ELF virtual address."""

    def __init__(self, data):
        self.path = data["path"]
        self.symfile = data["symfile"]
        self.syms = data["syms"]
        self.sym_starts = [s[0] for s in self.syms]
        self.starts = data["starts"]
        self.calls = {int(k): v for k, v in data["calls"].items()}
        self.syscalls = set(data["syscalls"])
        self.rets = set(data["rets"])
        self.plt = data["plt"]
        self.segments = data["segments"]
        self.sized_names = {s[2] for s in self.syms if s[1] > 0}
        self.sections = data["sections"]
        self.by_name = collections.defaultdict(list)
        for start, size, name, _ in self.syms:
            self.by_name[name].append((start, size))
        # symbol() is asked once per executed instruction (300 k for basename) about a few
        # thousand addresses: its answers are kept (the data never changes).
        self.symbol_of = {}

    def section(self, vaddr):
        for name, addr, size in self.sections:
            if addr <= vaddr < addr + size:
                return name
        return None

    def cannot_name(self, name, off, vaddr):
        """Why ptdecode's `name`+off cannot name vaddr, which no sized symbol or PLT label
        covers, or None. Allowed: no name ([image], sub_ADDRESS), or a size-0 symbol of this
        file in the same section that is at vaddr - off. Not allowed: a sized symbol stretched
        past its end, a size-0 symbol stretched into another section, a symbol of another
        file, or an offset that does not lead to vaddr."""
        base = os.path.basename(self.path)
        if name.startswith("[") or name.startswith("sub_"):
            return None
        places = self.by_name.get(name)
        if not places:
            return f"{base} has no symbol {name}"
        for start, size in places:
            if off is not None and start + off != vaddr:
                continue
            if size > 0:
                return f"{name} is {size} bytes at {hex(start)}"
            if self.section(start) != self.section(vaddr):
                return (f"{name} is in {self.section(start)}, the address in "
                        f"{self.section(vaddr)}")
            return None
        return f"{name} of {base} is at {', '.join(hex(p[0]) for p in places)}"

    def vaddr_of_offset(self, offset):
        for off, vaddr, filesz in self.segments:
            if off <= offset < off + filesz:
                return vaddr + offset - off
        return None

    def is_insn(self, vaddr):
        i = bisect.bisect_left(self.starts, vaddr)
        return i < len(self.starts) and self.starts[i] == vaddr

    def symbol(self, vaddr):
        """(names, start) of the sized symbols containing vaddr, else a x@plt label, else None."""
        if vaddr not in self.symbol_of:
            self.symbol_of[vaddr] = self.find_symbol(vaddr)
        return self.symbol_of[vaddr]

    def find_symbol(self, vaddr):
        i = bisect.bisect_right(self.sym_starts, vaddr)
        best = None
        for j in range(i - 1, max(-1, i - 64), -1):
            start, size, name, _ = self.syms[j]
            if start <= vaddr < start + size and (best is None or start == best[1]):
                best = ((best[0] if best else []) + [name], start)
        if best:
            return best
        for start, end, name in self.plt:
            if start <= vaddr < end:
                return [name], start
        return None

    def label(self, vaddr):
        """(names, start) of the size-0 symbols nearest below vaddr in its section (objdump's
        label there), or None."""
        i = bisect.bisect_right(self.sym_starts, vaddr)
        for j in range(i - 1, -1, -1):
            start, size, _, _ = self.syms[j]
            if size == 0:
                if self.section(start) != self.section(vaddr):
                    return None
                return [s[2] for s in self.syms[j:i] if s[0] == start and s[1] == 0], start
        return None

    def function_at(self, vaddr):
        """Names of the sized symbols that start exactly at vaddr (a function entry)."""
        i = bisect.bisect_left(self.sym_starts, vaddr)
        names = []
        while i < len(self.syms) and self.syms[i][0] == vaddr:
            names.append(self.syms[i][2])
            i += 1
        if not names:
            for start, _, name in self.plt:
                if start == vaddr:
                    names.append(name)
        return names


# ---------------------------------------------------------------------------------------------
# Address spaces from gdb (ASLR off, like the recording), and the ground truth.

# gdb Python both scripts start with: resume() continues, and says whether the program lives.
GDB_PRELUDE = r"""
python
import gdb


def resume():
    try:
        gdb.execute("continue")
    except gdb.error:
        return False
    return bool(gdb.selected_inferior().pid)
end
"""

GDB_MAPS = GDB_PRELUDE + r"""
python
gdb.execute("set pagination off")
gdb.execute("catch syscall exit_group")
gdb.execute("catch load")
gdb.execute("run")
dumped = False
while True:
    try:
        out = gdb.execute("info proc mappings", to_string=True)
    except gdb.error:
        break
    print("MAPS-BEGIN")
    print(out)
    print("MAPS-END")
    if not dumped:
        for line in out.splitlines():
            f = line.split()
            if f and f[-1] == "[vdso]":
                gdb.execute("dump binary memory %s %s %s" % (VDSO, f[0], f[1]))
                dumped = True
    if not resume():
        break
end
"""


def gdb_mappings(argv, vdso_path, cwd):
    """[start, end, offset, path] of every code mapping the program had (after each library
    load and at exit_group), and the vdso dumped to vdso_path."""
    script = os.path.join(cwd, "maps.gdb")
    with open(script, "w") as f:
        f.write(GDB_MAPS.replace("VDSO", repr(vdso_path).replace("'", '"')))
    p = run(["gdb", "-batch", "-nx", "-x", script, "--args"] + argv, cwd=cwd, check=False)
    maps = {}
    inside = False
    for line in p.stdout.splitlines():
        if line == "MAPS-BEGIN":
            inside = True
            continue
        if line == "MAPS-END":
            inside = False
            continue
        f = line.split()
        # Start End Size Offset Perms objfile: the mappings with code.
        if inside and len(f) == 6 and f[0].startswith("0x") and "x" in f[4]:
            path = f[5]
            if path.startswith("[") and path != "[vdso]":
                continue
            start, end, offset = hexint(f[0]), hexint(f[1]), hexint(f[3])
            if path == "[vdso]":
                path = vdso_path
            maps[(start, end)] = [start, end, offset, path]
    if not maps or not os.path.exists(vdso_path):
        raise HarnessError(f"gdb gave no mappings for {' '.join(argv)}:\n{p.stdout[-1500:]}"
                           f"\n{p.stderr[-1500:]}")
    return sorted(maps.values())


def read_truth(path):
    """{tid: [ip, ...]} in order, from `ptrecord --ground-truth`."""
    truth = collections.OrderedDict()
    with open(path) as f:
        for line in f:
            tid, ip = line.split()
            truth.setdefault(int(tid), []).append(int(ip, 16))
    return truth


class Space:
    """One program's address space: runtime address -> (FileInfo, vaddr)."""

    def __init__(self, maps, files):
        self.maps = maps
        self.starts = [m[0] for m in maps]
        self.files = files
        self.found = {}  # lookup's answers, by ip: it is asked once per executed instruction

    def lookup(self, ip):
        if ip not in self.found:
            self.found[ip] = self.find(ip)
        return self.found[ip]

    def find(self, ip):
        i = bisect.bisect_right(self.starts, ip) - 1
        if i < 0 or ip >= self.maps[i][1]:
            return None, None
        start, _, offset, path = self.maps[i]
        info = self.files[path]
        vaddr = info.vaddr_of_offset(ip - start + offset)
        return (info, vaddr) if vaddr is not None else (None, None)


# ---------------------------------------------------------------------------------------------
# The corpus run: where everything is.

class Corpus:
    def __init__(self, args, name):
        if name not in PROGRAMS:
            raise HarnessError(f"unknown program {name}; known: {' '.join(PROGRAMS)}")
        self.args = args
        self.name = name
        self.spec = PROGRAMS[name]
        self.work = os.path.join(args.work, name)
        self.cache = os.path.join(args.work, "cache")
        source = os.path.abspath(args.source)
        self.subst = dict(w=self.work, src=os.path.join(source, "tests/corpus/programs"),
                          ex=os.path.join(source, "examples/programs"))

    def fmt(self, s):
        return s.format(**self.subst)

    def path(self, f):
        return os.path.join(self.work, f)

    # -- recording (the fixture) ---------------------------------------------------------------

    def record(self):
        if os.path.isdir(self.work):
            shutil.rmtree(self.work)
        os.makedirs(self.work)
        if self.spec.get("needs") and not tool_runs(self.spec["needs"]):
            reason = f"{self.spec['needs']} not installed (or `{self.spec['needs']} --version` fails)"
            with open(self.path("skipped"), "w") as f:
                f.write(reason)
            print(f"skipped: {reason}")
            return SKIP
        for step in self.spec.get("build", []):
            run(self.fmt(step), cwd=self.work)
        argv = [self.fmt(a) for a in self.spec["cmd"]]
        t0 = time.time()
        p = run(["setarch", "x86_64", "-R", self.args.ptrecord, "--emulate=step",
                 "--ground-truth", self.path("truth.txt"), "-o", self.path("trace.pt"),
                 "--overwrite-existing"] + self.spec.get("record", []) + ["--"] + argv,
                cwd=self.work, check=False)
        seconds = time.time() - t0
        if "Operation not permitted" in p.stderr:
            reason = f"ptrace or perf_event_open denied: {p.stderr.strip()}"
            with open(self.path("skipped"), "w") as f:
                f.write(reason)
            print(f"skipped: {reason}")
            return SKIP
        if p.returncode != 0 or not os.path.exists(self.path("trace.pt")):
            raise HarnessError(f"ptrecord exited {p.returncode} for {' '.join(argv)}:\n"
                               f"{p.stderr[-2000:]}")
        truth = read_truth(self.path("truth.txt"))
        spaces = [gdb_mappings(argv, self.path("vdso0.so"), self.work)]
        for i, ex in enumerate(self.spec.get("execs", [])):
            spaces.append(gdb_mappings([self.fmt(a) for a in ex],
                                       self.path(f"vdso{i + 1}.so"), self.work))
        meta = dict(argv=argv, record_seconds=round(seconds, 2), spaces=spaces,
                    instructions=sum(len(v) for v in truth.values()),
                    threads=len(truth), ptrecord_stderr=p.stderr[-2000:])
        with open(self.path("oracle.json"), "w") as f:
            json.dump(meta, f)
        # Build the per-file oracle now (so checks running in parallel find it cached), and
        # validate the mapping: every ground-truth address is an instruction of its file.
        self.load()
        bad = collections.Counter()
        for tid, ips in self.truth.items():
            for i, ip in enumerate(ips):
                info, vaddr = self.where(tid, i)
                if info is None or not (info.is_insn(vaddr) or info.path.endswith(".so")
                                        and "vdso" in info.path):
                    bad[hex(ip)] += 1
        if bad:
            raise HarnessError(f"{len(bad)} ground-truth addresses are not instructions of the "
                               f"files gdb mapped there (oracle unusable): "
                               f"{list(bad.items())[:10]}")
        print(f"recorded {self.name}: {meta['instructions']} instructions, {meta['threads']} "
              f"threads, {seconds:.1f} s")
        return 0

    # -- the oracle, loaded for checks ---------------------------------------------------------

    def load(self):
        if os.path.exists(self.path("skipped")):
            with open(self.path("skipped")) as f:
                raise Skipped(f.read())
        if not os.path.exists(self.path("oracle.json")):
            raise HarnessError(f"{self.name} was not recorded (run the record step first)")
        with open(self.path("oracle.json")) as f:
            self.meta = json.load(f)
        self.truth = read_truth(self.path("truth.txt"))
        files = {}
        self.spaces = []
        for maps in self.meta["spaces"]:
            for m in maps:
                if m[3] not in files:
                    files[m[3]] = FileInfo(file_oracle(m[3], self.cache))
            self.spaces.append(Space(maps, files))
        self.files = files
        self._split_execs()

    def _split_execs(self):
        """Which address space each ground-truth instruction ran in: a thread moves to the next
        exec'd program where a syscall instruction is followed by that program's entry."""
        self.space_of = {}  # tid -> list of (first index, space number)
        entries = {}
        for n, space in enumerate(self.spaces[1:], 1):
            exe = self.fmt(self.spec["execs"][n - 1][0])
            e = re.search(r"Entry point address:\s+0x([0-9a-f]+)",
                          run(["readelf", "-h", exe]).stdout)
            entries[hexint(e.group(1))] = n  # static non-PIE targets: entry is the address
        for tid, ips in self.truth.items():
            runs = [(0, 0)]
            for i in range(1, len(ips)):
                if ips[i] in entries:
                    info, vaddr = self.spaces[runs[-1][1]].lookup(ips[i - 1])
                    if info is not None and vaddr in info.syscalls:
                        runs.append((i, entries[ips[i]]))
            self.space_of[tid] = runs

    def space_at(self, tid, index):
        runs = self.space_of[tid]
        n = runs[0][1]
        for first, space in runs:
            if first <= index:
                n = space
        return self.spaces[n]

    def where(self, tid, index):
        return self.space_at(tid, index).lookup(self.truth[tid][index])

    def locate(self, tid, index, ip):
        """(FileInfo, vaddr) of a decoded instruction: the index-th of thread tid in ptdecode's
        output, at ip. Every decoded row is checked, also where the decoded stream differs
        from the ground truth (the insn check reports that): the address space is the one
        the ground truth's thread was in at that index (the last one past its end)."""
        if tid not in self.space_of:
            return self.spaces[0].lookup(ip)
        return self.space_at(tid, min(index, len(self.truth[tid]) - 1)).lookup(ip)

    def own(self, info):
        return info is not None and info.path in {self.fmt(f) for f in self.spec["own"]}

    # -- ptdecode ------------------------------------------------------------------------------

    def ptdecode(self, *args, check=True):
        p = run([self.args.ptdecode] + list(args) + [self.path("trace.pt")], check=False)
        if check and p.returncode != 0:
            raise Mismatch([f"ptdecode {' '.join(args)} exited {p.returncode}: "
                            f"{p.stderr.strip()[-1000:]}"])
        return p


class Skipped(Exception):
    """The recording was skipped (no permission): so is every check of it."""


class Mismatch(Exception):
    def __init__(self, lines):
        super().__init__("\n".join(lines))
        self.lines = lines


# ---------------------------------------------------------------------------------------------
# Parsing ptdecode's text outputs.

INSN_RE = re.compile(r"^(?:\s*(\S+)\s+)?tid (\d+)\s+([0-9a-f]{16}) (.*)$")
SYM_RE = re.compile(r"^(.*)\+0x([0-9a-f]+)$")


def split_srcline(rest):
    m = re.match(r"^(.*) \(([^()]*:\d+)\)$", rest)
    return (m.group(1), m.group(2)) if m else (rest, None)


def parse_insn(text, srcline=False):
    """[(tid, ip, symbol text, time or None, srcline or None)] of `ptdecode insn`."""
    rows = []
    for line in text.splitlines():
        if not line or line.startswith("["):
            continue
        m = INSN_RE.match(line)
        if not m:
            continue
        rest, src = split_srcline(m.group(4)) if srcline else (m.group(4), None)
        rows.append((int(m.group(2)), hexint(m.group(3)), rest.strip(), m.group(1), src))
    return rows


def split_sym(text):
    m = SYM_RE.match(text)
    return (m.group(1), hexint(m.group(2))) if m else (text, None)


# ---------------------------------------------------------------------------------------------
# The checks. Each raises Mismatch with what differs, or returns a one-line summary.

def check_insn(c):
    got = collections.OrderedDict()
    for tid, ip, _, _, _ in parse_insn(c.ptdecode("insn").stdout):
        got.setdefault(tid, []).append(ip)
    errors = []
    if set(got) != set(c.truth):
        errors.append(f"threads: ground truth {sorted(c.truth)}, ptdecode {sorted(got)}")
    for tid, want in c.truth.items():
        have = got.get(tid, [])
        if have == want:
            continue
        i = next((k for k, (a, b) in enumerate(zip(have, want)) if a != b), min(len(have),
                                                                                 len(want)))
        errors.append(f"tid {tid}: ground truth {len(want)} instructions, ptdecode {len(have)}; "
                      f"first difference at instruction {i}: truth "
                      f"{hex(want[i]) if i < len(want) else 'end'}, ptdecode "
                      f"{hex(have[i]) if i < len(have) else 'end'}"
                      + (f" (last decoded before: {hex(have[i - 1])})" if 0 < i <= len(have)
                         else ""))
    if errors:
        raise Mismatch(errors)
    return f"{sum(map(len, c.truth.values()))} instructions in {len(c.truth)} threads equal"


def expected_symbol(info, vaddr):
    """The oracle's accepted names and offset for vaddr, or None (no sized symbol, no PLT)."""
    s = info.symbol(vaddr) if info else None
    return (s[0], vaddr - s[1]) if s else None


def check_symbols(c):
    rows = parse_insn(c.ptdecode("insn").stdout)
    index = collections.Counter()
    wrong = collections.Counter()
    checked = unnamed = 0
    for tid, ip, text, _, _ in rows:
        info, vaddr = c.locate(tid, index[tid], ip)
        index[tid] += 1
        name, off = split_sym(text)
        exp = expected_symbol(info, vaddr)
        where = f"{os.path.basename(info.path) if info else '?'}:{hex(vaddr or 0)}"
        if exp is None:
            unnamed += 1
            # No sized symbol and no PLT entry: ptdecode must not stretch a sized symbol here.
            why = info.cannot_name(name, off, vaddr) if info else None
            if why:
                wrong[(where, f"no symbol (nm, objdump) covers it, and {why}", text)] += 1
            continue
        checked += 1
        if name not in exp[0] or off != exp[1]:
            want = " or ".join(f"{n}+{hex(exp[1])}" for n in exp[0][:3])
            wrong[(where, want, text)] += 1
    if not rows:
        wrong[("-", "names for the ground truth's instructions", "no instruction decoded")] += 1
    if wrong:
        lines = [f"{len(wrong)} addresses misnamed ({sum(wrong.values())} instructions):"]
        for (where, want, got), n in sorted(wrong.items(), key=lambda kv: -kv[1])[:SHOWN]:
            lines.append(f"  {where}: expected {want}, ptdecode '{got}' ({n}x)")
        raise Mismatch(lines)
    return f"{checked} instructions named as nm/objdump name them ({unnamed} have no symbol)"


def addr2line(path, vaddrs):
    """{vaddr: (function, 'file:line')} from addr2line -f (file basename, line number)."""
    vaddrs = sorted(set(vaddrs))
    out = subprocess.run(["addr2line", "-f", "-C", "-e", path],
                         input="\n".join(hex(v) for v in vaddrs) + "\n", stdout=subprocess.PIPE,
                         text=True, check=True).stdout.splitlines()
    result = {}
    for k, v in enumerate(vaddrs):
        fn, loc = out[2 * k], out[2 * k + 1]
        loc = loc.split(" (discriminator")[0]
        file, _, line = loc.rpartition(":")
        result[v] = (fn, f"{os.path.basename(file)}:{line}" if line.isdigit() and line != "0"
                     else None)
    return result


def check_srcline(c):
    rows = parse_insn(c.ptdecode("insn", "--srcline").stdout, srcline=True)
    index = collections.Counter()
    per_file = collections.defaultdict(set)
    seen = []
    for tid, ip, text, _, src in rows:
        info, vaddr = c.locate(tid, index[tid], ip)
        index[tid] += 1
        if c.own(info):
            per_file[info.symfile].add(vaddr)
            seen.append((info, vaddr, src))
    if not seen:
        raise Mismatch(["no instruction of the program's own files was decoded"])
    lines = {f: addr2line(f, v) for f, v in per_file.items()}
    wrong = collections.Counter()
    checked = 0
    for info, vaddr, src in seen:
        want = lines[info.symfile][vaddr][1]
        if want is None:
            continue
        checked += 1
        have = None
        if src:
            file, _, line = src.rpartition(":")
            have = f"{os.path.basename(file)}:{line}"
        if have != want:
            wrong[(os.path.basename(info.path), hex(vaddr), want, src)] += 1
    if wrong:
        lines_out = [f"{len(wrong)} addresses of the program with a wrong or missing srcline "
                     f"({sum(wrong.values())} of {checked} instructions):"]
        for (f, a, want, got), n in sorted(wrong.items(), key=lambda kv: -kv[1])[:SHOWN]:
            lines_out.append(f"  {f}:{a}: addr2line {want}, ptdecode {got or 'nothing'} ({n}x)")
        raise Mismatch(lines_out)
    return f"{checked} instructions of the program have addr2line's file:line"


def truth_calls(c):
    """[(tid, index of the call, target ip)] : call instructions (objdump) in the ground truth,
    each with the next instruction its thread executed (the callee's first)."""
    calls = []
    for tid, ips in c.truth.items():
        for i in range(len(ips) - 1):
            info, vaddr = c.where(tid, i)
            if info is not None and vaddr in info.calls:
                calls.append((tid, i, ips[i + 1]))
    return calls


BRANCH_RE = re.compile(r"^(?:.*?\s)?([0-9a-f]{16}) (.*) -> (?:([0-9a-f]{16}) (.*)|\? (.*)) "
                       r"(\w+)$")


def check_call_targets(c):
    out = c.ptdecode("branches").stdout
    got = []
    for line in out.splitlines():
        if line.startswith("["):
            continue
        m = BRANCH_RE.match(line)
        if m and m.group(6) == "call":
            got.append((hexint(m.group(1)), hexint(m.group(3)) if m.group(3) else None,
                        (m.group(4) or m.group(5) or "").strip()))
    want = truth_calls(c)
    errors = []
    if len(got) != len(want):
        errors.append(f"ground truth has {len(want)} calls, `branches` shows {len(got)}")
    wrong = collections.Counter()
    checked = 0
    for (tid, i, target), (g_from, g_to, g_sym) in zip(want, got):
        if g_from != c.truth[tid][i] or g_to != target:
            errors.append(f"call {checked}: truth {hex(c.truth[tid][i])} -> {hex(target)}, "
                          f"branches {hex(g_from)} -> {hex(g_to) if g_to else '?'}")
            break
        checked += 1
        info, vaddr = c.space_at(tid, i + 1).lookup(target)
        exp = expected_symbol(info, vaddr)
        name, off = split_sym(g_sym)
        if exp is None:
            why = info.cannot_name(name, off, vaddr) if info else None
            if why:
                wrong[(f"{os.path.basename(info.path)}:{hex(vaddr)}",
                       f"no symbol (nm, objdump) covers it, and {why}", g_sym)] += 1
            continue
        if name not in exp[0] or off not in (exp[1], None if exp[1] == 0 else -1):
            wrong[(f"{os.path.basename(info.path)}:{hex(vaddr)}",
                   " or ".join(exp[0][:3]) + (f"+{hex(exp[1])}" if exp[1] else ""), g_sym)] += 1
    if wrong:
        errors.append(f"{len(wrong)} call targets misnamed ({sum(wrong.values())} calls):")
        for (where, want_name, g), n in sorted(wrong.items(), key=lambda kv: -kv[1])[:SHOWN]:
            errors.append(f"  {where}: expected {want_name}, branches '{g}' ({n}x)")
    if errors:
        raise Mismatch(errors)
    if checked == 0:
        raise Mismatch(["no call decoded"])
    return f"{checked} calls: source, target and target symbol as in the ground truth/nm/objdump"


def stats_functions(c):
    doc = json.loads(c.ptdecode("stats", "--json").stdout)
    funcs = collections.defaultdict(lambda: dict(self=0, calls=0, address=None))
    for f in doc["functions"]:
        key = (os.path.realpath(f["image"]) if f.get("image") else "", f["function"])
        funcs[key]["self"] += f["self"]
        funcs[key]["calls"] += f["calls"]
        funcs[key]["address"] = f.get("address")
    return doc, funcs


@functools.lru_cache(maxsize=None)
def real(path):
    return os.path.realpath(path)


def oracle_key(c, info, vaddr):
    """(image, function name) as the oracle names the function containing vaddr, or None."""
    exp = expected_symbol(info, vaddr)
    if exp is None:
        return None
    return real(info.path), exp[0]


def image_of(c, info):
    return real(info.path)


def same_image(img, image):
    """Whether ptdecode's image name img is the oracle's file image: the same path or file
    name; the oracle's dump of the vDSO (vdsoN.so, from gdb) is what ptdecode calls [vdso]."""
    base = os.path.basename(image)
    return (img == image or os.path.basename(img) == base or
            (os.path.basename(img) == "[vdso]" and re.fullmatch(r"vdso\d+\.so", base) is not None))


def match_key(funcs, image, names):
    """ptdecode's entry for one of the names (aliases) of a function in image."""
    for n in names:
        for (img, fn) in funcs:
            if fn == n and same_image(img, image):
                return (img, fn)
    return None


def compare_counts(want, names, funcs, member, unit, what):
    """Lines for the functions whose `stats --json` member differs from the ground truth's
    count (want: {(image, name): n}, names: the aliases of each)."""
    wrong = []
    for k, n in sorted(want.items(), key=lambda kv: -kv[1]):
        mk = match_key(funcs, k[0], names[k])
        have = funcs[mk][member] if mk else 0
        if have != n:
            wrong.append(f"  {os.path.basename(k[0])} {k[1]}: ground truth {n} {unit}, "
                         f"{what} {have}" + ("" if mk else " (function not listed)"))
    return wrong


def check_calls(c):
    _, funcs = stats_functions(c)
    want = collections.Counter()
    names = {}
    for tid, i, target in truth_calls(c):
        info, vaddr = c.space_at(tid, i + 1).lookup(target)
        if info is None:
            continue
        entry = info.function_at(vaddr)
        if not entry and info.symbol(vaddr) is None:
            # Code without a symbol entered by a call: its address in the ELF file (man page).
            entry = [f"sub_{vaddr:x}"]
        if not entry:
            continue  # a call into the middle of a function
        k = (image_of(c, info), entry[0])
        want[k] += 1
        names[k] = entry
    # A function the frame on top goes on into at its first instruction (a tail call, a PLT
    # entry jumping to its function) is counted a call too.
    for tid, (_, _, entered) in truth_frames(c).items():
        for _, info, vaddr in entered:
            entry = info.function_at(vaddr) if info else []
            if not entry:
                continue
            k = (image_of(c, info), entry[0])
            want[k] += 1
            names[k] = entry
    if not want:
        raise Mismatch(["the ground truth has no call to a function entry (nothing to check)"])
    wrong = compare_counts(want, names, funcs, "calls", "calls", "stats")
    # Functions stats says were called that no call instruction in the truth entered.
    matched = {match_key(funcs, k[0], names[k]) for k in want}
    extra = [f"  {os.path.basename(img)} {fn}: ground truth 0 calls to its entry, stats "
             f"{v['calls']}" for (img, fn), v in funcs.items()
             if v["calls"] and (img, fn) not in matched]
    if wrong or extra:
        raise Mismatch([f"{len(wrong)} functions with a wrong call count, {len(extra)} with "
                        f"calls the ground truth does not have:"] + wrong[:SHOWN] + extra[:SHOWN])
    return f"{sum(want.values())} calls to {len(want)} functions counted as in the ground truth"


def check_self(c):
    doc, funcs = stats_functions(c)
    want = collections.Counter()
    names = {}
    total = 0
    for tid, ips in c.truth.items():
        for i in range(len(ips)):
            total += 1
            info, vaddr = c.where(tid, i)
            k = oracle_key(c, info, vaddr)
            if k:
                want[(k[0], k[1][0])] += 1
                names[(k[0], k[1][0])] = k[1]
    errors = []
    if doc["totals"]["instructions"] != total:
        errors.append(f"totals.instructions {doc['totals']['instructions']}, ground truth {total}")
    wrong = compare_counts(want, names, funcs, "self", "instructions", "stats self")
    if wrong:
        errors.append(f"{len(wrong)} of {len(want)} functions with a wrong self count:")
        errors += wrong[:SHOWN]
    if errors:
        raise Mismatch(errors)
    return f"self of {len(want)} functions and the total ({total}) as in the ground truth"


def running(info, vaddr):
    """(names, key) of the function running at vaddr of info: its sized symbols (or x@plt
    label), else objdump's label there (a size-0 symbol of the section), else no names (code
    of the file no symbol names); key tells one function from another (None: unmapped)."""
    if info is None:
        return [], None
    sym = info.symbol(vaddr) or info.label(vaddr)
    return (sym[0], (info.path, sym[1])) if sym else ([], (info.path, None))


def truth_frames(c):
    """{tid: (calls, slices)} from the ground truth, with a shadow stack of return addresses
    (a ret (objdump) to the return address of a frame ends it and the frames above it):
    calls: the calls in order, each [(callee names, info, vaddr), instructions from the
    callee's first through its return (callees included), or None for a frame left without a
    return, by longjmp or an exception];
    slices: (names, info, vaddr) of each frame begun, in order, as a call stack that names a
    frame after the function running in it begins them (the timeline's B events): the
    function the thread's trace starts in, each callee, the function a jump goes on to from
    another one (not a call, return or syscall: a tail call, a PLT entry jumping to its target;
    it renames the frame on top, as a return to a call that was its function's last instruction
    does where the flow goes on into the next function; unless it jumps into the middle of a
    function that has a
    frame below: then the frames above that one end; but a jump back into the function the
    frame on top ran before it was renamed, a cold part `f.cold` going back into f, renames it
    back), the caller a return that matches no
    frame reaches (entered before tracing began: the frame below), and the program an exec
    starts; entered: (names, info, vaddr) of each of those renames that goes on at a function's
    first instruction (stats counts them as calls of it: a tail call, a PLT entry's jump)."""
    result = {}
    for tid, ips in c.truth.items():
        calls, slices, entered = [], [], []
        stack = []  # (return address, index of the callee's first, call no.)
        tops = []   # function_key of the function running in each frame, outermost first
        before = []  # per frame: the function_key it ran before its last rename (or None)
        after_ret = after_flow = False
        space = prev_key = None
        for i, ip in enumerate(ips):
            info, vaddr = c.where(tid, i)
            names, key = running(info, vaddr)
            begins = False
            if c.space_at(tid, i) is not space:  # the thread's first instruction, or an exec
                space = c.space_at(tid, i)
                stack, begins = [], True
            elif after_ret:
                for depth in range(len(stack) - 1, -1, -1):
                    if stack[depth][0] == ip:
                        _, first, n = stack[depth]
                        calls[n][1] = i - first
                        del stack[depth:]
                        del tops[depth + 1:]
                        del before[depth + 1:]
                        if key[1] is not None and key[1] == vaddr and tops[-1] != key:
                            # The call was its function's last instruction (ld.so's _start
                            # calling _dl_start): the flow goes on in sequence into the next
                            # function, which renames the frame as any fall-through does.
                            before[-1] = tops[-1]
                            tops[-1] = key
                            slices.append((names, info, vaddr))
                            entered.append((names, info, vaddr))
                        break
                else:
                    begins = not stack  # the outermost function returned to its caller
            elif after_flow and key != prev_key and tops and tops[-1] != key:
                if key in tops and key[1] not in (None, vaddr) and before[-1] != key:
                    # Into the middle of a function with a frame below (an exception's landing
                    # pad, longjmp): the frames above it end without a return. (Code no symbol
                    # names has no entry to tell its middle by.)
                    depth = len(tops) - 1 - tops[::-1].index(key)
                    del tops[depth + 1:]
                    del before[depth + 1:]
                    del stack[depth:]
                else:
                    before[-1] = tops[-1]
                    tops[-1] = key
                    slices.append((names, info, vaddr))
                    if key[1] == vaddr:
                        entered.append((names, info, vaddr))
            if begins:
                tops = [key]
                before = [None]
                slices.append((names, info, vaddr))
            prev_key = key
            after_ret = info is not None and vaddr in info.rets
            is_call = info is not None and vaddr in info.calls
            after_flow = not after_ret and not is_call and not (info is not None
                                                                and vaddr in info.syscalls)
            if not is_call or i + 1 == len(ips):
                continue
            k = bisect.bisect_right(info.starts, vaddr)
            ret = ip + (info.starts[k] - vaddr if k < len(info.starts) else 0)
            t_info, t_vaddr = c.space_at(tid, i + 1).lookup(ips[i + 1])
            names = t_info.function_at(t_vaddr) if t_info else []
            if not names and t_info:
                named = t_info.symbol(t_vaddr)
                names = named[0] if named else []
            stack.append((ret, i + 1, len(calls)))
            tops.append(running(t_info, t_vaddr)[1])
            before.append(None)
            calls.append([(names, t_info, t_vaddr), None])
            slices.append((names, t_info, t_vaddr))
        result[tid] = (calls, slices, entered)
    return result


def names_match(name, want):
    """Whether ptdecode's `name` names the function `want` = (oracle names, info, vaddr): one of
    the names, or when the oracle has none, a name FileInfo.cannot_name accepts."""
    names, info, vaddr = want
    if names:
        return normalize(name) in {normalize(n) for n in names}
    return info is not None and info.cannot_name(name, None, vaddr) is None


def describe(want):
    names, info, vaddr = want
    return " or ".join(names[:3]) if names else (
        f"no symbol ({os.path.basename(info.path)}:{hex(vaddr)})" if info else "unmapped code")


# Past 100 levels a line says its depth ("[depth 101] > f") instead of indenting further.
CALL_RE = re.compile(r"^\s*\d+ (\s*)(?:\[depth \d+\] )?([<>]) (.*?)(?: \((\d+) insns(?:, [^)]*)?\))?$")


def check_calls_tree(c):
    """`calls`: per thread, the calls in order, each named as nm/objdump name the callee,
    with the instruction count of the ground truth at its return."""
    got = collections.defaultdict(list)
    tid = None
    open_calls = []
    for line in c.ptdecode("calls").stdout.splitlines():
        m = re.match(r"^\[(?:stream|switch) .*?tid (\d+)", line)
        if m or line.startswith("[stream"):
            tid = int(m.group(1)) if m else None
            open_calls = []
            continue
        m = CALL_RE.match(line)
        if not m or tid is None:
            continue
        if m.group(2) == ">":
            open_calls.append(len(got[tid]))
            got[tid].append([m.group(3), None])
        elif open_calls:
            n = open_calls.pop()
            got[tid][n][1] = int(m.group(4)) if m.group(4) else None
    errors, named, counted = [], [], []
    total = 0
    for tid, (want, _, _) in truth_frames(c).items():
        have = got.get(tid, [])
        total += len(want)
        if len(have) != len(want):
            errors.append(f"tid {tid}: ground truth {len(want)} calls, `calls` {len(have)}")
        for n, ((callee, insns), (g_name, g_insns)) in enumerate(zip(want, have)):
            line = (f"  tid {tid} call {n}: ground truth {describe(callee)} ({insns} insns), "
                    f"`calls` {g_name} ({g_insns} insns)")
            if not names_match(g_name, callee):
                named.append(line)
            elif insns is not None and g_insns != insns:
                counted.append(line)
    if counted:
        errors += [f"{len(counted)} calls with another instruction count:"] + counted[:SHOWN]
    if named:
        errors += [f"{len(named)} calls with another callee name:"] + named[:SHOWN]
    if errors:
        raise Mismatch(errors)
    return f"{total} calls with their names and instruction counts as in the ground truth"


def check_timeline(c):
    """`timeline`: per thread, one B per frame begun (truth_frames' slices: the function the
    trace starts in, each call, each jump on into another function, each caller returned to),
    named as nm/objdump name the function, and every E names the B it ends."""
    doc = json.loads(c.ptdecode("timeline").stdout)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    began = collections.defaultdict(list)
    open_b = collections.defaultdict(list)
    errors = []
    unnamed_e = 0
    for e in events:
        if e.get("ph") == "B":
            began[e["tid"]].append(e.get("name", ""))
            open_b[e["tid"]].append(e.get("name", ""))
        elif e.get("ph") == "E":
            b = open_b[e["tid"]].pop() if open_b[e["tid"]] else None
            if e.get("name") != b:
                unnamed_e += 1
                if unnamed_e <= 3:
                    errors.append(f"tid {e['tid']}: E {json.dumps(e)} ends B '{b}'")
    if unnamed_e > 3:
        errors.append(f"... {unnamed_e} E events in all without the name of their B")
    for tid, (_, want, _) in truth_frames(c).items():
        have = began.get(tid, [])
        if len(have) != len(want):
            errors.append(f"tid {tid}: ground truth {len(want)} frames begun (the trace's "
                          f"first function, calls, jumps on into another function, callers "
                          f"returned to), timeline {len(have)} B")
        for n, (w, g) in enumerate(zip(want, have)):
            if not names_match(g, w):
                errors.append(f"tid {tid} B {n}: ground truth {describe(w)}, timeline B {g}")
                break
    if errors:
        raise Mismatch(errors[:SHOWN])
    return f"B/E events of {sum(map(len, began.values()))} frames as in the ground truth"


def normalize(name):
    """A function name as gdb's bt prints it: no parameter list, no return type, no [..]."""
    name = name.strip()
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    name = re.sub(r"\s+const$", "", name)
    name = re.sub(r"@@?[A-Z][A-Za-z0-9_.]*$", "", name)  # symbol versions
    # GCC clones (foo.part.0): gdb shows foo.part from the symbol table, foo from DWARF; and
    # demangled, `Check(int) [clone .cold]`.
    name = re.sub(r"(?:\.(?:part|isra|constprop|cold|lto_priv)(?:\.\d+)*)+$", "", name)
    name = re.sub(r"(?:\s*\[clone \.[^\]]*\])+$", "", name)
    if name.endswith(")"):
        depth = 0
        for k in range(len(name) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(name[k], 0)
            if depth == 0:
                name = name[:k]
                break
    depth = 0
    cut = 0
    for k, ch in enumerate(name):
        depth += {"<": 1, ">": -1}.get(ch, 0)
        if ch == " " and depth == 0:
            cut = k + 1
    return name[cut:].strip()


GDB_STACKS = GDB_PRELUDE + r"""
python
gdb.execute("set pagination off")
gdb.execute("set backtrace past-main on")
gdb.execute("starti")
# One list, named once: the placeholder is replaced by a list literal, a new list at each use.
addresses = ADDRESSES
for a in addresses:
    gdb.execute("break *%d" % a)
while addresses and resume():
    pc = int(gdb.parse_and_eval("$pc"))
    print("STACK-AT %d" % pc)
    # Real frames only: gdb's DWARF inline frames and the tail-call frames it infers from
    # call-site entries (libc6-dbg) are no calls.
    frame, n = gdb.newest_frame(), 0
    while frame is not None:
        if frame.type() not in (gdb.INLINE_FRAME, gdb.TAILCALL_FRAME):
            lib = gdb.solib_name(frame.pc())
            name = frame.name() or "??"
            if BY_SYMBOL:
                # The ELF symbol's name (gdb's minimal symbol, demangled) of the frame's code:
                # a caller's return address less one (a call at a function's end).
                code = frame.pc() - (0 if n == 0 else 1)
                sym = gdb.execute("info symbol %d" % code, to_string=True)
                name = sym.split(" + ")[0].split(" in section ")[0].strip() \
                    if not sym.startswith("No symbol") else "??"
            print("#%d  %s (%s" % (n, name, " from " + lib if lib else ""))
            n += 1
        frame = frame.older()
    gdb.execute("delete")
    if pc in addresses:
        addresses.remove(pc)
    for a in addresses:
        gdb.execute("break *%d" % a)
end
"""


def gdb_stacks(argv, addresses, cwd, by_symbol=False):
    """{address: [(function, in a shared library)] outermost first}: gdb's bt the first time
    the program executes each address (one gdb run, a breakpoint at each). `by_symbol`: each
    frame named by the ELF symbol of its code (gdb's `info symbol`), not by its DWARF name (Rust's
    DWARF names differ in form from its symbols': `f::{closure#0}<T>` for `f::<T>::{closure#0}`)."""
    script = os.path.join(cwd, "stacks.gdb")
    with open(script, "w") as f:
        f.write(GDB_STACKS.replace("ADDRESSES", repr(list(addresses)))
                .replace("BY_SYMBOL", repr(by_symbol)))
    p = run(["gdb", "-batch", "-nx", "-x", script, "--args"] + argv, cwd=cwd, check=False)
    stacks = {}
    at = None
    for line in p.stdout.splitlines():
        if line.startswith("STACK-AT "):
            # The first time only (the script breaks at each address once).
            at = int(line.split()[1])
            if at in stacks:
                raise HarnessError(f"gdb stopped at {hex(at)} twice:\n{p.stdout[-1500:]}")
            stacks[at] = []
            continue
        # The last " (": a Rust name has its own (`<fn(), ()>`).
        m = re.match(r"^#(\d+)\s+(?:0x[0-9a-f]+ in )?(.+) \(", line)
        if m and at is not None:
            # gdb's minimal symbols keep Rust's crate disambiguators (std[e28293b1aa0f68bd]::),
            # which c++filt -i and nm -C leave out.
            name = re.sub(r"\[[0-9a-f]{16}\]", "", m.group(2)) if by_symbol else m.group(2)
            stacks[at].insert(0, (normalize(name), " from /" in line))
    missing = [hex(a) for a in addresses if not stacks.get(a)]
    if missing:
        raise HarnessError(f"gdb gave no backtrace at {missing}:\n{p.stdout[-1500:]}"
                           f"\n{p.stderr[-1000:]}")
    return stacks


def alias_map(c):
    """normalized name -> one name for all aliases of that function (same file and start)."""
    canon = {}
    for info in c.files.values():
        at = collections.defaultdict(set)
        for start, size, name, _ in info.syms:
            at[start].add(normalize(name))
        for names in at.values():
            first = min(names)
            for n in names:
                canon.setdefault(n, first)
    return canon


def check_stacks(c):
    folded = c.ptdecode("folded").stdout
    canon = alias_map(c)
    stacks = []
    total = 0
    for line in folded.splitlines():
        stack, _, weight = line.rpartition(" ")
        if stack and weight.isdigit():
            stacks.append([canon.get(normalize(f), normalize(f)) for f in stack.split(";")])
            total += int(weight)
    errors = []
    truth_total = sum(len(v) for v in c.truth.values())
    if total != truth_total:
        errors.append(f"folded weights sum to {total}, ground truth has {truth_total} "
                      f"instructions")
    # Points: instructions in the program's own functions (the first process's main
    # executable), chosen at random with a fixed seed.
    exe = c.fmt(c.spec["cmd"][0])
    calls = collections.Counter()
    for tid, i, target in truth_calls(c):
        calls[target] += 1
    candidates = collections.defaultdict(list)
    for tid, ips in c.truth.items():
        for i, ip in enumerate(ips):
            info, vaddr = c.where(tid, i)
            if (info is None or real(info.path) != real(exe)
                    or c.space_at(tid, i) is not c.spaces[0]):
                continue
            s = info.symbol(vaddr)
            # Not a PLT entry: gdb unwinds a static program's IRELATIVE entries wrongly.
            if s and not s[0][0].endswith("@plt") and (calls[ip - vaddr + s[1]] >= 1
                                                       or s[0][0] == "main"):
                candidates[s[0][0]].append(ip)
    # The program's own functions named in its spec (e.g. a thread's function, the code after
    # a vDSO call), then three more chosen at random with a fixed seed.
    rng = random.Random(10)
    points = [f for f in c.spec.get("stack_points", []) if f in candidates]
    missing = [f for f in c.spec.get("stack_points", []) if f not in candidates]
    if missing:
        errors.append(f"the ground truth never runs {', '.join(missing)} (called)")
    rest = sorted(set(candidates) - set(points))
    points += rng.sample(rest, min(3, len(rest)))
    if not points:
        raise HarnessError("no function of the program to sample")
    checked = []
    ips = {fn: rng.choice(candidates[fn]) for fn in points}
    bts = gdb_stacks(c.meta["argv"], sorted(set(ips.values())), c.work,
                     c.spec.get("stacks_by_symbol", False))
    for fn in points:
        ip = ips[fn]
        # gdb names a frame it cannot place '??' (e.g. between call_fini and a destructor it
        # found by scanning): not a frame of the program, left out.
        frames = [(canon.get(n, n), shared) for n, shared in bts[ip] if n != "??"]
        want = [n for n, _ in frames]
        # The whole stack must agree: a dynamic program's trace starts in ld.so, whose frame
        # is the program's _start once ld.so jumps there.
        target = canon.get(normalize(fn), normalize(fn))
        prefixes = {tuple(s[:j + 1]) for s in stacks for j, f in enumerate(s) if f == target}
        ok = any(list(p) == want for p in prefixes)
        if not ok:
            errors.append(f"at {hex(ip)} in {fn}: gdb bt {';'.join(want)}; folded has "
                          + (" | ".join(";".join(p) for p in sorted(prefixes)[:4])
                             or f"no stack with {target}"))
        checked.append(fn)
    if errors:
        raise Mismatch(errors)
    return f"stacks at {len(checked)} points ({', '.join(checked)}) as gdb's bt; folded total " \
           f"{total}"


def check_time(c):
    errors = []
    rows = parse_insn(c.ptdecode("insn").stdout)
    times = {r[3] for r in rows}
    if len(times) < 2:
        errors.append(f"insn: {len(rows)} instructions, distinct time values: "
                      f"{sorted(t or 'none' for t in times)[:5]}")
    p = c.ptdecode("folded", "--weight=time", check=False)
    weight = sum(int(l.rpartition(" ")[2]) for l in p.stdout.splitlines()
                 if l.rpartition(" ")[2].isdigit())
    if p.returncode != 0 or weight == 0:
        errors.append(f"folded --weight=time: exit {p.returncode}, total weight {weight}: "
                      f"{p.stderr.strip()[-300:]}")
    if errors:
        raise Mismatch(errors)
    return f"{len(times)} distinct times; folded --weight=time total {weight}"


PERF = "/usr/bin/perf"
TID_IP_RE = re.compile(r"^\s*(\d+)\s+([0-9a-f]+)\s*$")
TID_BRANCH_RE = re.compile(r"^\s*(\d+)\s+([0-9a-f]+)\s+=>\s+([0-9a-f]+)\s*$")
# The thread of the branches that follow: a stream's, or the one a switch names.
STREAM_TID_RE = re.compile(r"^\[(?:stream|switch) .*?\btid (\d+)")


def first_difference(what, tid, want, have):
    """Where perf's list `have` (addresses, or (from, to) branches) first differs from `want`."""
    i = next((k for k, (a, b) in enumerate(zip(have, want)) if a != b), min(len(have), len(want)))

    def show(v):
        if i >= len(v):
            return "end"
        return f"{v[i][0]:#x} -> {v[i][1]:#x}" if isinstance(v[i], tuple) else hex(v[i])

    return (f"tid {tid}: {what}: ptdecode {len(want)}, perf {len(have)}; first difference at "
            f"{i}: ptdecode {show(want)}, perf {show(have)}")


def check_perf(c):
    """perf 6.1's own Intel PT decoder as the oracle: the recording exported with `ptdecode
    export --to perf.data`, `perf script --itrace=i0ns` gives each thread the instructions
    `ptdecode insn` gives, `--itrace=b` the taken branches `ptdecode branches` gives (perf's
    pseudo-branches from 0, trace begin and back from the kernel, aside), and perf reports no
    decode error where ptdecode reports none."""
    if not os.access(PERF, os.X_OK):
        raise Skipped(f"{PERF} not installed (Debian package linux-perf): no oracle")
    data = c.path("perf.data")
    p = run([c.args.ptdecode, "export", "--to", "perf.data", c.path("trace.pt"), "-o", data],
            check=False)
    if p.returncode != 0:
        raise Mismatch([f"ptdecode export exited {p.returncode}: {p.stderr.strip()[-1000:]}"])

    def perf(*args):
        q = run([PERF, "--buildid-dir", data + ".debug", "script", "-i", data] + list(args),
                check=False)
        if q.returncode != 0:
            raise Mismatch([f"perf script {' '.join(args)} exited {q.returncode}: "
                            f"{q.stderr.strip()[-1000:]}"])
        return q.stdout

    errors = []
    perf_insn, perf_errors = collections.OrderedDict(), []
    for line in perf("--itrace=i0nse", "-F", "tid,ip").splitlines():
        m = TID_IP_RE.match(line)
        if m:
            perf_insn.setdefault(int(m.group(1)), []).append(hexint(m.group(2)))
        elif "instruction trace error" in line:
            perf_errors.append(line.strip())
    ours = collections.OrderedDict()
    decoded = c.ptdecode("insn").stdout
    for tid, ip, _, _, _ in parse_insn(decoded):
        ours.setdefault(tid, []).append(ip)
    our_errors = [l for l in decoded.splitlines() if l.startswith(("[error", "[gap"))]
    if set(ours) != set(perf_insn):
        errors.append(f"threads: ptdecode {sorted(ours)}, perf {sorted(perf_insn)}")
    for tid, want in ours.items():
        if perf_insn.get(tid, []) != want:
            errors.append(first_difference("instructions", tid, want, perf_insn.get(tid, [])))
    if not our_errors and perf_errors:
        errors.append(f"perf reports {len(perf_errors)} decode errors where ptdecode reports "
                      f"none: {perf_errors[:3]}")

    perf_branches = collections.OrderedDict()
    for line in perf("--itrace=b", "-F", "tid,ip,addr").splitlines():
        m = TID_BRANCH_RE.match(line)
        if m and hexint(m.group(2)) != 0:
            perf_branches.setdefault(int(m.group(1)), []).append(
                (hexint(m.group(2)), hexint(m.group(3))))
    our_branches, tid = collections.OrderedDict(), None
    for line in c.ptdecode("branches").stdout.splitlines():
        t = STREAM_TID_RE.match(line)
        if t:
            tid = int(t.group(1))
            continue
        m = BRANCH_RE.match(line)
        if m and tid is not None and not line.startswith("["):
            our_branches.setdefault(tid, []).append(
                (hexint(m.group(1)), hexint(m.group(3)) if m.group(3) else 0))
    for tid, want in our_branches.items():
        if perf_branches.get(tid, []) != want:
            errors.append(first_difference("taken branches", tid, want,
                                           perf_branches.get(tid, [])))
    if set(perf_branches) - set(our_branches):
        errors.append(f"perf has branches of threads {sorted(set(perf_branches) - set(our_branches))}"
                      f" ptdecode has none of")
    if errors:
        raise Mismatch(errors)
    n = sum(map(len, ours.values()))
    b = sum(map(len, our_branches.values()))
    if n == 0:
        raise Mismatch(["no instruction decoded"])
    return f"perf 6.1 decodes the export to the same {n} instructions and {b} taken branches"


CHECK_FUNCS = {"perf": check_perf, "insn": check_insn, "symbols": check_symbols, "srcline": check_srcline,
               "call-targets": check_call_targets, "calls": check_calls, "self": check_self,
               "stacks": check_stacks, "time": check_time, "calls-tree": check_calls_tree,
               "timeline": check_timeline}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", default="corpus-work")
    ap.add_argument("--ptrecord", default="ptrecord")
    ap.add_argument("--ptdecode", default="ptdecode")
    ap.add_argument("--source", default=os.path.join(os.path.dirname(__file__), "../.."))
    ap.add_argument("command", choices=["record", "check", "list"])
    ap.add_argument("program", nargs="?")
    ap.add_argument("check", nargs="?")
    a = ap.parse_args()
    if a.command == "list":
        for name, spec in PROGRAMS.items():
            label = "corpus-long" if spec.get("long") else "corpus"
            print(f"{name} {','.join(checks_of(name))} {label} "
                  f"{','.join(sorted(long_checks_of(name))) or '-'}")
        return 0
    long_run = PROGRAMS.get(a.program, {}).get("long") or (
        a.command == "check" and a.check in long_checks_of(a.program))
    if long_run and os.environ.get("PTKIT_CORPUS_LONG") != "1":
        print("skipped: long corpus variant; run with PTKIT_CORPUS_LONG=1")
        return SKIP
    try:
        c = Corpus(a, a.program)
        if a.command == "record":
            return c.record()
        c.load()
        t0 = time.time()
        summary = CHECK_FUNCS[a.check](c)
        if (a.program, a.check) in KNOWN_BUGS:
            print(f"FAIL {a.program} {a.check}: passes, but KNOWN_BUGS says it fails "
                  f"({KNOWN_BUGS[(a.program, a.check)][0]}): remove the entry. {summary}")
            return 1
        print(f"PASS {a.program} {a.check}: {summary} ({time.time() - t0:.1f} s)")
        return 0
    except Mismatch as m:
        known = KNOWN_BUGS.get((a.program, a.check))
        text = "\n".join(m.lines)
        if known and known[1] in text:
            print(f"KNOWN BUG {a.program} {a.check}: {known[0]} (tests/corpus/corpus.py "
                  f"KNOWN_BUGS):")
            print(text)
            return 0
        print(f"FAIL {a.program} {a.check}:")
        print(text)
        return 1
    except Skipped as e:
        print(f"skipped: {e}")
        return SKIP
    except HarnessError as e:
        print(f"harness error ({a.program} {a.check or a.command}): {e}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
