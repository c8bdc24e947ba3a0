#!/usr/bin/env python3
"""Counts SASS instructions in the loops of one kernel of an sm_90 cubin, without cuobjdump.

The development machine has nvcc but no cuobjdump/nvdisasm, so this reads the ELF directly:
every sm_90 instruction is 16 bytes, the low 9 bits are the opcode, and a backward BRA marks
a loop (target <= branch). Loop bodies are printed with an opcode histogram (hex codes, not
mnemonics); pass START:END ranges (instruction indices, END exclusive) to count a region,
e.g. a loop body minus its rarely taken inner loops.

  nvcc -std=c++17 -O3 --fmad=false --expt-relaxed-constexpr -cubin -arch=sm_90 \
       -Isrc -Iinclude -o /tmp/random.cubin src/kernels/random.cu
  python3 bench/tensor/sass_count.py /tmp/random.cubin ck_normal_f32 [START:END ...]

A backward branch from out-of-line code placed after the loop (cold paths jumping back)
also shows as a "loop" spanning most of the kernel: read the spans, not just the list.
"""
import collections
import struct
import sys


def sections(path):
    data = open(path, "rb").read()
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    raw = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    strtab = raw[shstrndx][4]
    out = {}
    for name, _typ, _flags, _addr, off, size in raw:
        end = data.index(b"\0", strtab + name)
        out[data[strtab + name:end].decode()] = data[off:off + size]
    return out


def branch_target(k, w0, w1):
    """Target index of the BRA at index k (sm_90 encoding: signed offset in 4-byte units,
    bits [81:34] high part and [23:16] low byte, relative to the next instruction)."""
    hi = ((w1 & 0x3FFFF) << 30) | (w0 >> 34)
    if hi & (1 << 47):
        hi -= 1 << 48
    off = ((hi << 8) | ((w0 >> 16) & 0xFF)) * 4
    return (k * 16 + 16 + off) // 16


def histogram(ins, ranges):
    h = collections.Counter()
    for a, b in ranges:
        for j in range(a, b):
            h["%03x" % (ins[j][0] & 0x1FF)] += 1
    return sum(h.values()), sorted(h.items(), key=lambda kv: -kv[1])


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    code = sections(sys.argv[1])[".text." + sys.argv[2]]
    ins = [struct.unpack_from("<QQ", code, i) for i in range(0, len(code), 16)]
    print(len(ins), "instructions")
    if len(sys.argv) > 3:
        ranges = [tuple(int(x) for x in r.split(":")) for r in sys.argv[3:]]
        n, h = histogram(ins, ranges)
        print("region", ranges, n, h)
        return
    for k, (w0, w1) in enumerate(ins):
        if (w0 & 0x1FF) == 0x147:  # BRA
            t = branch_target(k, w0, w1)
            if t <= k:
                n, h = histogram(ins, [(t, k + 1)])
                print(f"loop {t}..{k} len {n}", h[:8])


if __name__ == "__main__":
    main()
