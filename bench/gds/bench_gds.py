"""GPUDirect Storage: 1 GiB save/load with cudakit.gds, side by side with the plain paths.

Rows (GiB/s, best of --repeat):
  save  python write (host bytes)   open().write() of bytes already on the host (issue 13's
                                    anchor: 1.53 GiB/s on the H200 host)
  save  python D2H + write          tensor.cpu() then write
  save  cudakit save_storage        cudakit.gds (gds or compat path, as the machine allows)
  load  read + pinned + H2D         readinto() a pinned buffer, then one H2D copy (anchor:
                                    5.6 GiB/s from the page cache)
  load  cudakit load_storage
and the same with torch where it is installed (torch.cuda.gds.GdsFile fails where
cuFileHandleRegister does; the row then says why). Loads run from the page cache and cold
(posix_fadvise DONTNEED after fsync). Saves are timed to return (page cache for buffered
writes) and to durability (+ fsync). cudakit rows run again in subprocesses with
CUDAKIT_GDS_DIRECT=never / always (the compat engine's O_DIRECT policy).

  python bench/gds/bench_gds.py [--size-mib 1024] [--dir DIR] [--repeat 3]
DIR defaults to $CUDAKIT_BENCH_DIR or the current directory (use a real disk, not tmpfs).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def gib_s(nbytes, seconds):
    return nbytes / seconds / 2**30


def drop_cache(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def warm_cache(path):
    with open(path, "rb", buffering=0) as f:
        while f.read(64 << 20):
            pass


def best(fn, repeat, before=None):
    times = []
    for _ in range(repeat):
        if before:
            before()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def cudakit_rows(path, size, repeat):
    import cudakit as ck
    from cudakit import gds

    src = ck.ones(size, dtype=ck.uint8, device="cuda")
    dst = ck.empty(size, dtype=ck.uint8, device="cuda")
    rows = {}
    f = gds.GdsFile(path, os.O_CREAT | os.O_RDWR)
    rows["path"] = f.io_path + ("" if f.io_path == "gds" else f" ({f.compat_reason[:60]})")

    def save():
        f.save_storage(src)

    def save_sync():
        f.save_storage(src)
        os.fsync(f.fd)

    rows["save"] = best(save, repeat)
    rows["save+fsync"] = best(save_sync, repeat)
    rows["load cached"] = best(lambda: f.load_storage(dst), repeat, lambda: warm_cache(path))
    rows["load cold"] = best(lambda: f.load_storage(dst), repeat, lambda: drop_cache(path))
    ck.synchronize()
    f.close()
    return rows


def plain_rows(path, size, repeat, lib):
    """The plain paths with cudakit (lib='cudakit') or torch (lib='torch') tensors."""
    if lib == "torch":
        import torch

        src = torch.ones(size, dtype=torch.uint8, device="cuda")
        pinned = torch.empty(size, dtype=torch.uint8, pin_memory=True)
        dst = torch.empty(size, dtype=torch.uint8, device="cuda")
        host_bytes = src.cpu().numpy()
        d2h = lambda: src.cpu().numpy()  # noqa: E731
        h2d = lambda: (dst.copy_(pinned, non_blocking=True), torch.cuda.synchronize())  # noqa: E731
        pinned_view = pinned.numpy()
    else:
        import cudakit as ck

        src = ck.ones(size, dtype=ck.uint8, device="cuda")
        pinned = ck.empty(size, dtype=ck.uint8, device="cpu", pin_memory=True)
        dst = ck.empty(size, dtype=ck.uint8, device="cuda")
        host_bytes = src.cpu().numpy()
        d2h = lambda: src.cpu().numpy()  # noqa: E731
        h2d = lambda: (dst.copy_(pinned, non_blocking=True), ck.synchronize())  # noqa: E731
        pinned_view = pinned.numpy()

    def write(data):
        with open(path, "wb") as f:
            f.write(memoryview(data))

    def write_sync(data):
        with open(path, "wb") as f:
            f.write(memoryview(data))
            f.flush()
            os.fsync(f.fileno())

    def load():
        with open(path, "rb", buffering=0) as f:
            f.readinto(memoryview(pinned_view))
        h2d()

    rows = {
        "python write (host bytes)": (best(lambda: write(host_bytes), repeat),
                                      best(lambda: write_sync(host_bytes), repeat)),
        "python D2H + write": (best(lambda: write(d2h()), repeat),
                               best(lambda: write_sync(d2h()), repeat)),
        "read + pinned + H2D": (best(load, repeat, lambda: warm_cache(path)),
                                best(load, repeat, lambda: drop_cache(path))),
    }
    return rows


def torch_gds_rows(path, size, repeat):
    try:
        import torch

        if not torch.cuda.is_available():
            return "torch has no GPU here"
        src = torch.ones(size, dtype=torch.uint8, device="cuda")
        dst = torch.empty(size, dtype=torch.uint8, device="cuda")
        f = torch.cuda.gds.GdsFile(path, os.O_CREAT | os.O_RDWR)
        save = best(lambda: f.save_storage(src.untyped_storage()), repeat)
        cached = best(lambda: f.load_storage(dst.untyped_storage()), repeat,
                      lambda: warm_cache(path))
        cold = best(lambda: f.load_storage(dst.untyped_storage()), repeat,
                    lambda: drop_cache(path))
        return {"save": save, "load cached": cached, "load cold": cold}
    except Exception as e:  # noqa: BLE001 (report whatever torch raises)
        return f"{type(e).__name__}: {str(e).splitlines()[0][:80]}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--dir", default=os.environ.get("CUDAKIT_BENCH_DIR", os.getcwd()))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    size = args.size_mib << 20
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="cudakit_gds_bench_") as d:
        path = os.path.join(d, "data.bin")
        if args.child:
            print(json.dumps(cudakit_rows(path, size, args.repeat)))
            return
        import cudakit as ck

        print(f"GDS benchmark: {args.size_mib} MiB in {args.dir}, backend {ck.backend_name()}, "
              f"gds.is_available()={ck.gds.is_available()} ({ck.gds.unavailable_reason()[:80]})")
        print()
        print("| op | path | GiB/s | GiB/s (+fsync / cold) |")
        print("|---|---|---|---|")
        for lib in ("cudakit", "torch"):
            if lib == "torch":
                try:
                    import torch

                    if not torch.cuda.is_available():
                        continue
                except ImportError:
                    continue
            for name, (a, b) in plain_rows(path, size, args.repeat, lib).items():
                print(f"| {'load' if 'read' in name else 'save'} | {lib}: {name} | "
                      f"{gib_s(size, a):.2f} | {gib_s(size, b):.2f} |")
        variants = [("auto", None), ("never", "never"), ("always", "always")]
        for label, direct in variants:
            if direct is None:
                r = cudakit_rows(path, size, args.repeat)
            else:
                env = dict(os.environ, CUDAKIT_GDS_DIRECT=direct)
                out = subprocess.run([sys.executable, __file__, "--child", "--size-mib",
                                      str(args.size_mib), "--dir", args.dir, "--repeat",
                                      str(args.repeat)], env=env, capture_output=True, text=True)
                if out.returncode != 0:
                    print(f"| - | cudakit direct={label} | failed: {out.stderr.strip()[-80:]} | |")
                    continue
                r = json.loads(out.stdout.strip().splitlines()[-1])
            tag = f"cudakit.gds ({r['path'].split(' ')[0]} path), O_DIRECT {label}"
            print(f"| save | {tag} | {gib_s(size, r['save']):.2f} | "
                  f"{gib_s(size, r['save+fsync']):.2f} |")
            print(f"| load | {tag} | {gib_s(size, r['load cached']):.2f} | "
                  f"{gib_s(size, r['load cold']):.2f} |")
        t = torch_gds_rows(path, size, args.repeat)
        if isinstance(t, dict):
            print(f"| save | torch.cuda.gds.GdsFile | {gib_s(size, t['save']):.2f} | |")
            print(f"| load | torch.cuda.gds.GdsFile | {gib_s(size, t['load cached']):.2f} | "
                  f"{gib_s(size, t['load cold']):.2f} |")
        else:
            print(f"| - | torch.cuda.gds.GdsFile | n/a: {t} | |")


if __name__ == "__main__":
    main()
