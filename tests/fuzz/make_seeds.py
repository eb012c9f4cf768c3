#!/usr/bin/env python3
"""Writes the seed corpora of the sideband and sysfs fuzzers (tests/fuzz/corpus/{sideband,sysfs}/).

  tests/fuzz/make_seeds.py        (from the source tree's root)

sideband: the sideband batches of the decode fuzzer's emulated recordings (tests/fuzz/corpus/
decode/*.pt), and one hand-made batch with a record of every kind the sideband model reads
(MMAP2, COMM with exec, FORK, EXIT, ITRACE_START, SWITCH, SWITCH_CPU_WIDE, LOST, AUX), in the
sideband_fuzz.cc input format. sysfs: tests/data/sysfs in the sysfs_fuzz.cc format, with event
strings, and a tree whose caps and formats are each odd in one way.
"""
import os
import struct

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = os.path.join(ROOT, 'tests/fuzz/corpus')

# sample_id_all trailer: TID, TIME, CPU, IDENTIFIER (ptrecord's kSampleIdType), as the
# fuzzer's first byte names it (bits: TID, TIME, ID, STREAM_ID, CPU, IDENTIFIER).
LAYOUT = bytes([0b110011, 1])
SAMPLE_TYPE = 0x2 | 0x4 | 0x80 | 0x10000


def frames(path):
    """(type, payload) of each frame of an uncompressed trace.pt."""
    data = open(path, 'rb').read()
    at = 16
    while at + 48 <= len(data):
        sync, kind, flags, _, stored, _, _, _, _ = struct.unpack_from('<IHHQQQQII', data, at)
        if sync != 0x52544b50 or flags != 0:
            break
        yield kind, data[at + 48:at + 48 + stored]
        at += 48 + stored


def batch(cpu, records):
    return struct.pack('<iI', cpu, len(records)) + records


def record(kind, misc, body, pid=300, tid=300, time=1, cpu=0):
    trailer = struct.pack('<IIQIIQ', pid, tid, time, cpu, 0, 7)
    size = 8 + len(body) + len(trailer)
    return struct.pack('<IHH', kind, misc, size) + body + trailer


def string(s):
    b = s.encode() + b'\0'
    return b + b'\0' * (-len(b) % 8)


def every_kind():
    r = b''
    r += record(12, 0, struct.pack('<II', 300, 300), time=1)  # ITRACE_START
    r += record(3, 0x2000, struct.pack('<II', 300, 300) + string('tiny'), time=2)  # COMM exec
    mmap2 = struct.pack('<IIQQQIIQQII', 300, 300, 0x401000, 0x1000, 0x1000, 8, 1, 1234, 0,
                        5, 2)  # prot r-x, MAP_PRIVATE
    r += record(10, 0x2, mmap2 + string('/tiny'), time=3)
    r += record(7, 0, struct.pack('<IIIIQ', 301, 300, 301, 300, 4), time=4)  # FORK
    r += record(15, 0x2000, struct.pack('<II', 301, 301), time=5)  # SWITCH_CPU_WIDE out
    r += record(14, 0, b'', pid=301, tid=301, time=6)  # SWITCH in
    r += record(2, 0, struct.pack('<QQ', 7, 3), time=7)  # LOST
    r += record(11, 0, struct.pack('<QQQ', 0, 4096, 1), time=8)  # AUX, truncated
    r += record(4, 0, struct.pack('<IIIIQ', 301, 300, 301, 300, 9), pid=301, tid=301,
                time=9)  # EXIT
    return r


def write(folder, name, data):
    os.makedirs(os.path.join(CORPUS, folder), exist_ok=True)
    with open(os.path.join(CORPUS, folder, name), 'wb') as f:
        f.write(data)


def sysfs_text(root):
    out = ''
    for dirpath, _, files in sorted(os.walk(root)):
        for name in sorted(files):
            path = os.path.join(dirpath, name)
            out += '@' + os.path.relpath(path, root) + '\n' + open(path).read()
            if not out.endswith('\n'):
                out += '\n'
    return out


def main():
    for name in ('pt', 'bts'):
        seed = LAYOUT
        for kind, payload in frames(os.path.join(CORPUS, 'decode', name + '.pt')):
            if kind == 2:
                seed += batch(struct.unpack_from('<i', payload)[0], payload[8:])
        write('sideband', name + '.bin', seed)
    write('sideband', 'every_kind.bin', LAYOUT + batch(0, every_kind()))

    tree = sysfs_text(os.path.join(ROOT, 'tests/data/sysfs'))
    write('sysfs', 'fixture.txt',
          ('intel_pt/cyc,mtc_period=3,psb_period=2,branch=0/u\n' + tree).encode())
    write('sysfs', 'bts.txt', b'intel_bts//\n@intel_bts/type\n9\n')
    odd = ('intel_pt/cyc_thresh=2,ptw,noretcomp/\n'
           '@intel_pt/type\n8\n'
           '@intel_pt/format/cyc\nconfig:1\n'
           '@intel_pt/format/cyc_thresh\nconfig:19-22\n'
           '@intel_pt/format/ptw\nconfig1:0-1,4\n'
           '@intel_pt/format/noretcomp\nconfig:11\n'
           '@intel_pt/caps/psb_cyc\n1\n'
           '@intel_pt/caps/cycle_thresholds\nffff\n'
           '@intel_pt/caps/ptwrite\nzz\n'
           '@intel_pt/tsc_art_ratio\n2:0\n'
           '@intel_pt/max_nonturbo_ratio\n4294967296\n')
    write('sysfs', 'odd.txt', odd.encode())


if __name__ == '__main__':
    main()
