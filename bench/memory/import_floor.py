"""The driver's floor under import_pool (issue 29's "opening it in another process <= 1 ms").

    python bench/memory/import_floor.py [--gb 14] [--chunk-mib 2048 1024 256] [--reps 5]

cudakit's import_pool does, for a pool of N physical chunks exported by another process:
N x (pidfd_getfd + cuMemImportFromShareableHandle), one cuMemAddressReserve of the pool's
extent, and one cuMemMap per chunk with one cuMemSetAccess per run of adjacent chunks. This
probe makes the same driver calls with nothing of cudakit in between (ctypes on libcuda, a
child process that creates and exports the chunks), times each phase, and prints the medians
over --reps imports, per chunk size, and the first import's total apart (the first of the
process pays for the driver's first use of these calls, as the first import_pool of a
consumer does). The sum is the least any import of that pool can cost on this driver: what
import_pool adds above it is cudakit's.

No cudakit, no torch: it needs only libcuda.so.1 and a GPU.
"""
from __future__ import annotations

import argparse
import ctypes as C
import multiprocessing as mp
import os
import statistics
import time

SYS_pidfd_getfd = 438      # no os.pidfd_getfd in Python
POSIX_FD = 1          # CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
PINNED = 1            # CU_MEM_ALLOCATION_TYPE_PINNED
LOC_DEVICE = 1        # CU_MEM_LOCATION_TYPE_DEVICE
READWRITE = 3         # CU_MEM_ACCESS_FLAGS_PROT_READWRITE


class Location(C.Structure):
    _fields_ = [("type", C.c_int), ("id", C.c_int)]


class AllocFlags(C.Structure):
    _fields_ = [("compressionType", C.c_ubyte), ("gpuDirectRDMACapable", C.c_ubyte),
                ("usage", C.c_ushort), ("reserved", C.c_ubyte * 4)]


class AllocProp(C.Structure):  # CUmemAllocationProp
    _fields_ = [("type", C.c_int), ("requestedHandleTypes", C.c_int), ("location", Location),
                ("win32HandleMetaData", C.c_void_p), ("allocFlags", AllocFlags)]


class AccessDesc(C.Structure):  # CUmemAccessDesc
    _fields_ = [("location", Location), ("flags", C.c_int)]


def driver():
    cu = C.CDLL("libcuda.so.1")

    def call(name, *args):
        rc = getattr(cu, name)(*args)
        if rc != 0:
            raise RuntimeError(f"{name} failed: CUresult {rc}")

    call("cuInit", 0)
    ctx = C.c_void_p()
    call("cuDevicePrimaryCtxRetain", C.byref(ctx), 0)
    call("cuCtxSetCurrent", ctx)
    return cu, call


def producer(conn, total: int, chunk: int) -> None:
    _, call = driver()
    prop = AllocProp(type=PINNED, requestedHandleTypes=POSIX_FD,
                     location=Location(LOC_DEVICE, 0))
    fds, handles = [], []
    for at in range(0, total, chunk):
        h = C.c_ulonglong()
        call("cuMemCreate", C.byref(h), C.c_size_t(min(chunk, total - at)), C.byref(prop),
             C.c_ulonglong(0))
        fd = C.c_int()
        call("cuMemExportToShareableHandle", C.byref(fd), h, POSIX_FD, C.c_ulonglong(0))
        handles.append(h)
        fds.append((fd.value, min(chunk, total - at)))
    conn.send((os.getpid(), fds))
    conn.recv()  # keep the chunks until the importer is done


def import_once(cu, call, pid: int, fds, phases: dict) -> None:
    t0 = time.perf_counter()
    pidfd = os.pidfd_open(pid)
    libc = C.CDLL(None, use_errno=True)
    local = [libc.syscall(SYS_pidfd_getfd, pidfd, fd, 0) for fd, _ in fds]
    if min(local) < 0:
        raise OSError(C.get_errno(), "pidfd_getfd")
    t1 = time.perf_counter()
    handles = []
    for fd in local:
        h = C.c_ulonglong()
        call("cuMemImportFromShareableHandle", C.byref(h), C.c_void_p(fd), POSIX_FD)
        handles.append(h)
        os.close(fd)
    os.close(pidfd)
    t2 = time.perf_counter()
    total = sum(b for _, b in fds)
    va = C.c_ulonglong()
    call("cuMemAddressReserve", C.byref(va), C.c_size_t(total), C.c_size_t(0),
         C.c_ulonglong(0), C.c_ulonglong(0))
    t3 = time.perf_counter()
    at = va.value
    for h, (_, b) in zip(handles, fds):
        call("cuMemMap", C.c_ulonglong(at), C.c_size_t(b), C.c_size_t(0), h, C.c_ulonglong(0))
        at += b
    t4 = time.perf_counter()
    desc = AccessDesc(location=Location(LOC_DEVICE, 0), flags=READWRITE)
    call("cuMemSetAccess", va, C.c_size_t(total), C.byref(desc), C.c_size_t(1))
    t5 = time.perf_counter()
    for k, v in (("getfd", t1 - t0), ("import", t2 - t1), ("reserve", t3 - t2),
                 ("map", t4 - t3), ("set_access", t5 - t4), ("total", t5 - t0)):
        phases.setdefault(k, []).append(v * 1e3)
    call("cuMemUnmap", va, C.c_size_t(total))
    for h in handles:
        call("cuMemRelease", h)
    call("cuMemAddressFree", va, C.c_size_t(total))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gb", type=float, default=14.0)
    ap.add_argument("--chunk-mib", type=int, nargs="+", default=[2048, 1024, 256])
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    cu, call = driver()
    gran = 2 << 20
    total = int(a.gb * 1e9) // gran * gran
    ctx = mp.get_context("spawn")
    print(f"| chunks | chunk MiB | getfd ms | import ms | reserve ms | map ms | set_access ms "
          f"| total ms (median of {a.reps}) | first import ms |")
    print("|---|---|---|---|---|---|---|---|---|")
    for mib in a.chunk_mib:
        parent, child = ctx.Pipe()
        p = ctx.Process(target=producer, args=(child, total, mib << 20))
        p.start()
        pid, fds = parent.recv()
        phases: dict = {}
        for _ in range(a.reps):
            import_once(cu, call, pid, fds, phases)
        parent.send("done")
        p.join()
        med = {k: statistics.median(v) for k, v in phases.items()}
        print(f"| {len(fds)} | {mib} | {med['getfd']:.3f} | {med['import']:.3f} | "
              f"{med['reserve']:.3f} | {med['map']:.3f} | {med['set_access']:.3f} | "
              f"{med['total']:.3f} | {phases['total'][0]:.3f} |", flush=True)


if __name__ == "__main__":
    main()
