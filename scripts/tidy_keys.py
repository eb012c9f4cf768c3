#!/usr/bin/env python3
"""The content key of each C++ source for scripts/tidy.sh: one line "KEY FILE" per file.

  scripts/tidy_keys.py BUILD_DIR CLANG_TIDY FILE...

KEY is the sha256 of everything a clang-tidy run on FILE depends on in this repository:
  - the version of CLANG_TIDY (`CLANG_TIDY --version` but its host CPU line);
  - every .clang-tidy from FILE's folder up to the top folder;
  - FILE's compile command in BUILD_DIR/compile_commands.json, with the build and top folders
    replaced by placeholders (so a clone elsewhere gets the same key);
  - the path and content of FILE and of every file of the repository it includes, transitively.
An include is followed into every folder it could come from (the includer's folder, then each
-iquote, -I, -isystem folder of the command), whether or not an #if leaves it out, so the set is
never smaller than what the compiler reads. Files outside the repository (Debian's headers:
the C++ library, Abseil, gtest...) are not in the key: they change only with the packages.
"""
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys

INCLUDE = re.compile(rb'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.MULTILINE)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    build, tidy, files = sys.argv[1], sys.argv[2], sys.argv[3:]
    top = os.path.realpath(os.getcwd())
    build_abs = os.path.realpath(build)
    # Not its "Host CPU" line: the same clang-tidy on another machine checks the same.
    version = b'\n'.join(line for line in subprocess.run(
        [tidy, '--version'], check=True, capture_output=True).stdout.splitlines()
                          if not line.strip().startswith(b'Host CPU'))
    with open(os.path.join(build, 'compile_commands.json'), encoding='utf-8') as f:
        commands = {os.path.realpath(os.path.join(e['directory'], e['file'])): e
                    for e in json.load(f)}
    digests = {}  # real path -> sha256 of its content
    includes = {}  # path as found -> the paths of the repository it may include

    def digest(real):
        if real not in digests:
            with open(real, 'rb') as f:
                digests[real] = hashlib.sha256(f.read()).hexdigest()
        return digests[real]

    def inside(path):
        return path == top or path.startswith(top + os.sep)

    for name in files:
        path = os.path.realpath(name)
        entry = commands.get(path)
        if entry is None:
            sys.exit(f'tidy_keys.py: {name}: not in {build}/compile_commands.json')
        args = entry['arguments'] if 'arguments' in entry else shlex.split(entry['command'])
        search = []
        for i, a in enumerate(args):
            for flag in ('-iquote', '-I', '-isystem'):
                if a == flag and i + 1 < len(args):
                    search.append(args[i + 1])
                elif a.startswith(flag) and len(a) > len(flag):
                    search.append(a[len(flag):])
        search = [os.path.join(entry['directory'], d) for d in search]

        def normal(s):
            return s.replace(build_abs, '@BUILD@').replace(top, '@TOP@')

        material = [b'clang-tidy ' + version,
                    b'command ' + normal(json.dumps(args) + ' in ' + entry['directory']).encode()]
        folder = os.path.dirname(path)
        while inside(folder):
            config = os.path.join(folder, '.clang-tidy')
            if os.path.isfile(config):
                material.append(f'config {normal(config)} {digest(config)}'.encode())
            if folder == top:
                break
            folder = os.path.dirname(folder)
        seen = set()
        todo = [os.path.abspath(name)]
        while todo:
            found = todo.pop()
            real = os.path.realpath(found)
            if (found, real) in seen:
                continue
            seen.add((found, real))
            if found not in includes:
                with open(real, 'rb') as f:
                    text = f.read()
                targets = []
                for inc in INCLUDE.findall(text):
                    inc = inc.decode()
                    for d in [os.path.dirname(found), os.path.dirname(real)] + search:
                        candidate = os.path.normpath(os.path.join(d, inc))
                        if os.path.isfile(candidate) and inside(os.path.realpath(candidate)):
                            targets.append(candidate)
                includes[found] = targets
            todo.extend(includes[found])
        reals = sorted({real for _, real in seen})
        material += [f'file {normal(r)} {digest(r)}'.encode() for r in reals]
        key = hashlib.sha256(b'\n'.join(material)).hexdigest()
        print(key, os.path.relpath(path, top))


if __name__ == '__main__':
    main()
