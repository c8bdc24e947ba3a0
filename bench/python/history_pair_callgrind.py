"""Instructions per caching_allocator_alloc + caching_allocator_delete pair from Python, under
callgrind: bench_history.py's loop at bench_history.py's Python depth (<module> -> main ->
suite -> pair_us -> caching_allocator_alloc, 5 frames), with only the measured loop
instrumented. Wall-clock runs on the shared 2-core machine are too noisy to see a 5 % change;
instruction counts are exact, and the per-function split says where a recorded pair's extra
instructions go (issue 31).

    CUDAKIT_BACKEND=emulated PYTHONPATH=build/python valgrind --tool=callgrind \
      --instr-atstart=no --callgrind-out-file=/tmp/cg.out \
      /usr/bin/python3 bench/python/history_pair_callgrind.py python 20000
    callgrind_annotate /tmp/cg.out | head     (total Ir / 20000 = instructions per pair)

Modes: off, nostacks (enabled="all", no context: the trace ring only), python, all, cpp
(context "all" with those stacks; ring of 100000 entries, filled first, as bench_history.py).
Run the interpreter itself under valgrind, not a shim (pyenv's python3 is a shell script, and
valgrind would measure nothing). The instrumentation switch is a 3-line C library built here
with `cc` on first use (valgrind's client requests are inline assembly: Python cannot issue
them itself); it needs valgrind's headers (Debian: valgrind).
"""
import ctypes
import os
import subprocess
import sys
import tempfile

TOGGLE_C = r"""
#include <valgrind/callgrind.h>
void cg_start(void) { CALLGRIND_ZERO_STATS; CALLGRIND_START_INSTRUMENTATION; }
void cg_stop(void) { CALLGRIND_STOP_INSTRUMENTATION; }
"""


def toggle_library():
    d = os.path.join(tempfile.gettempdir(), "cudakit-cgtoggle")
    lib = os.path.join(d, "libcgtoggle.so")
    if not os.path.exists(lib):
        os.makedirs(d, exist_ok=True)
        src = os.path.join(d, "cgtoggle.c")
        with open(src, "w") as f:
            f.write(TOGGLE_C)
        subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", lib, src], check=True)
    return ctypes.CDLL(lib)


mode = sys.argv[1] if len(sys.argv) > 1 else "python"
n = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
if mode not in ("off", "nostacks", "python", "all", "cpp"):
    sys.exit(f"usage: {sys.argv[0]} off|nostacks|python|all|cpp [pairs]")
cg = toggle_library()

import cudakit  # noqa: E402
import cudakit.memory as mem  # noqa: E402


def pair_us(k, measure):
    alloc, delete = mem.caching_allocator_alloc, mem.caching_allocator_delete
    if measure:
        cg.cg_start()
    for _ in range(k):
        delete(alloc(512))
    if measure:
        cg.cg_stop()


def suite():
    if mode == "nostacks":
        mem._record_memory_history(enabled="all", context=None, stacks="python", max_entries=100000)
    elif mode != "off":
        mem._record_memory_history(enabled="all", context="all", stacks=mode, max_entries=100000)
    pair_us(60000, False)  # warm: caches, the known-stack table, a full ring
    pair_us(n, True)
    mem._record_memory_history(enabled=None)


def main():
    cudakit.synchronize()
    suite()
    print(f"{mode}: {n} pairs")


main()
