"""The issue-27 table: fragmentation and device calls of cudakit's settings on the recorded
traces, the design half and the holdout half separately (split: SPLIT in
record_torch_trace.py; traces it does not name, like the repository's older ones, count as
design data).

    python bench/memory/replay_table.py DIR_OR_TRACE... [--conf SETTINGS]... [--half design|holdout|all]
        [--replay build/bench/memory/memory_replay] [--time] [--markdown]

Columns per setting: peak reserved / peak allocated; the device memory calls of the C++
replay (cudaMalloc + cudaFree of plain segments, plus cuMemCreate + cuMemMap + cuMemSetAccess
+ cuMemUnmap + cuMemRelease of expandable ones) as a multiple of the calls of
"expandable_segments:False" (cudakit's torch-compatible mode, which mirrors c10's default and
so estimates torch's own count); and "ops", the device operations as torch counts them
(num_device_alloc + num_device_free: one per cudaMalloc / cudaFree, or per map / unmap of a
contiguous range), with the same multiple. "torch" is the ratio torch's default allocator reported
while recording (header; "-" for synthetic traces).

Settings (default): "" (cudakit's defaults), "expandable_segments:False",
"expandable_segments:True". The replay runs on the backend CUDAKIT_BACKEND names (emulated if
unset, with 80 GiB of emulated memory): footprint and calls are the same on both.

--time (GPU, torch importable): also the Python-entry-point replay time of cudakit's defaults
and of torch's default mode, each in a fresh process (bench/memory/replay_py.py's child), and
their ratio (the goal: <= 1).
"""
from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from record_torch_trace import SPLIT  # noqa: E402  (no torch import at module level)

DEFAULT_CONFS = ["", "expandable_segments:False", "expandable_segments:True"]
TORCH_LIKE = "expandable_segments:False"


def traces_of(args):
    out = []
    for a in args:
        out += sorted(glob.glob(os.path.join(a, "*.trace.gz"))) if os.path.isdir(a) else [a]
    return out


def name_of(path):
    return os.path.basename(path).replace(".trace.gz", "")


def half_of(path):
    return SPLIT.get(name_of(path), "design")


def header_of(path):
    import gzip

    with gzip.open(path, "rt") as f:
        line = f.readline()
    return dict(kv.split("=", 1) for kv in line[1:].split() if "=" in kv) if line.startswith("#") else {}


def replay(tool, path, confs):
    env = dict(os.environ, REPLAY_CALLS="1")
    env.setdefault("CUDAKIT_BACKEND", "emulated")
    env.setdefault("CUDAKIT_EMULATED_MEMORY", "80GiB")
    cmd = [tool, path]
    for c in confs:
        cmd += ["--conf", c]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout.splitlines()
    rows, i = [], 0
    for i, line in enumerate(out):
        m = re.match(r"\S+\s+(\S+)\s+(\d+)\s+(\d+)\s+([\d.]+)\s+(\d+)", line)
        if m and i + 1 < len(out) and "total" in out[i + 1]:
            calls = int(re.search(r"total (\d+)", out[i + 1]).group(1))
            rows.append({"alloc": int(m.group(2)), "reserved": int(m.group(3)), "calls": calls,
                         "dev_ops": int(m.group(5))})
    if len(rows) != len(confs):
        raise RuntimeError(f"{tool} printed {len(rows)} results for {len(confs)} settings")
    return rows


def py_time(path, lib, conf):
    env = dict(os.environ)
    for k in ("CUDAKIT_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        env.pop(k, None)
    if conf:
        env["CUDAKIT_ALLOC_CONF" if lib == "cudakit" else "PYTORCH_CUDA_ALLOC_CONF"] = conf
    r = subprocess.run([sys.executable, os.path.join(HERE, "replay_py.py"), "--child", lib, path],
                       env=env, capture_output=True, text=True)
    if r.returncode != 0:
        return None
    return json.loads(r.stdout.strip().splitlines()[-1])["ms"]


def main(argv):
    confs, paths, half, tool, timed, md = [], [], "all", None, False, False
    it = iter(argv)
    for a in it:
        if a == "--conf":
            confs.append(next(it))
        elif a == "--half":
            half = next(it)
        elif a == "--replay":
            tool = next(it)
        elif a == "--time":
            timed = True
        elif a == "--markdown":
            md = True
        else:
            paths.append(a)
    if not paths:
        print(__doc__)
        return 2
    confs = confs or DEFAULT_CONFS
    run_confs = confs + ([TORCH_LIKE] if TORCH_LIKE not in confs else [])
    tool = tool or os.path.join(HERE, "..", "..", "build", "bench", "memory", "memory_replay")
    traces = traces_of(paths)
    halves = ["design", "holdout"] if half == "all" else [half]
    for h in halves:
        sel = [t for t in traces if half_of(t) == h]
        if not sel:
            continue
        # Two directories may hold traces of the same workload (the repository's older
        # recordings beside issue 27's): their rows name the directory, so neither reads as
        # a repeat of the other.
        names = [name_of(t) for t in sel]
        label = {t: (f"{name_of(t)} [{os.path.basename(os.path.dirname(t))}]"
                     if names.count(name_of(t)) > 1 else name_of(t)) for t in sel}
        cols = ["trace", "torch"] + [f"{c or '(defaults)'}: ratio / calls / ops" for c in confs]
        if timed:
            cols += ["ms cudakit / torch"]
        print(f"\n{h} half ({len(sel)} traces)")
        if md:
            print("| " + " | ".join(cols) + " |")
            print("|" + "---|" * len(cols))
        else:
            print("  ".join(cols))
        worst = {c: 0.0 for c in confs}
        for t in sel:
            rows = replay(tool, t, run_confs)
            base = rows[run_confs.index(TORCH_LIKE)]["calls"] or 1
            hdr = header_of(t)
            torch_ratio = "-" if hdr.get("synthetic") or not int(hdr.get("peak_reserved", 0)) else \
                f"{int(hdr['peak_reserved']) / int(hdr['peak_allocated']):.3f}"
            cells = [label[t], torch_ratio]
            for c in confs:
                r = rows[run_confs.index(c)]
                ratio = r["reserved"] / max(1, r["alloc"])
                worst[c] = max(worst[c], ratio)
                ops = rows[run_confs.index(TORCH_LIKE)]["dev_ops"] or 1
                cells.append(f"{ratio:.3f} / {r['calls']} ({r['calls'] / base:.1f}×) / "
                             f"{r['dev_ops']} ({r['dev_ops'] / ops:.1f}×)")
            if timed:
                a, b = py_time(t, "cudakit", ""), py_time(t, "torch", "")
                cells.append("unavailable" if a is None or b is None else f"{a:.1f} / {b:.1f} ({a / b:.2f})")
            print(("| " + " | ".join(cells) + " |") if md else "  ".join(cells), flush=True)
        print("worst ratio: " + ", ".join(f"{c or '(defaults)'} {w:.3f}" for c, w in worst.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
