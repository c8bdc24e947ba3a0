"""`import cudakit` in fresh processes (issue 15.6 goals: <= 50 ms, numpy / OpenBLAS / the
driver not loaded by import; <= 30 MB installed), side by side with `import torch` when torch
is importable.

    PYTHONPATH=build/python python3 bench/python/bench_import.py [--runs 21] [--build build]

Per run a new interpreter imports the module and reports the import's own time (perf_counter
around the import statement); the parent also times the whole process and its CPU time, and
`python -c pass` gives the interpreter's start-up for reference. Medians over the runs; on a
busy machine CPU time is the steadier column. The installed size is measured by
`cmake --install <build> --prefix <tmp>` (the build is found next to cudakit's package or
given with --build); skipped when neither is there.
"""
import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import sys, time
t0 = time.perf_counter()
import {module}
t1 = time.perf_counter()
maps = open("/proc/self/maps").read()
status = open("/proc/self/status").read()
threads = int(status.split("Threads:")[1].split()[0])
import json
print(json.dumps({{
    "import_ms": (t1 - t0) * 1e3,
    "numpy": "numpy" in sys.modules,
    "openblas": "openblas" in maps or "libblas" in maps,
    "libcuda": "libcuda.so" in maps,
    "threads": threads,
    "modules": len(sys.modules),
}}))
"""


def cpu_s():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_once(code):
    import time

    c0 = cpu_s()
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    wall = (time.perf_counter() - t0) * 1e3
    cpu = (cpu_s() - c0) * 1e3
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip().splitlines()[-1] if out.stderr else "child failed")
    line = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else "{}"
    return wall, cpu, json.loads(line)


def measure(module, runs):
    code = CHILD.format(module=module) if module else "pass"
    run_once(code)  # warm the page cache and the .pyc files
    walls, cpus, imports, last = [], [], [], {}
    for _ in range(runs):
        wall, cpu, info = run_once(code)
        walls.append(wall)
        cpus.append(cpu)
        if info:
            imports.append(info["import_ms"])
            last = info
    med = statistics.median
    return {"wall_ms": med(walls), "cpu_ms": med(cpus), "import_ms": med(imports) if imports else 0.0,
            "min_import_ms": min(imports) if imports else 0.0, **last}


def importtime_top(module, n=8):
    """The n largest cumulative entries of `python -X importtime -c 'import module'`."""
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {module}"],
                         capture_output=True, text=True).stderr
    rows = []
    for line in out.splitlines():
        if not line.startswith("import time:") or "|" not in line[12:]:
            continue
        parts = [p.strip() for p in line[12:].split("|")]
        if parts[0].isdigit():
            rows.append((int(parts[1]), int(parts[0]), parts[2]))
    start = max((i for i, r in enumerate(rows) if r[2].strip() == "site"), default=-1)
    rows = rows[start + 1:]  # what import cudakit added, after interpreter start-up
    return sorted(rows, reverse=True)[:n]


def installed_size(build):
    if not build or not os.path.exists(os.path.join(build, "CMakeCache.txt")) or not shutil.which("cmake"):
        return None
    prefix = tempfile.mkdtemp(prefix="cudakit-install-")
    try:
        subprocess.run(["cmake", "--install", build, "--prefix", prefix], check=True,
                       capture_output=True, text=True)
        files = []
        for root, _dirs, names in os.walk(prefix):
            for name in names:
                p = os.path.join(root, name)
                if not os.path.islink(p):
                    files.append((os.path.getsize(p), os.path.relpath(p, prefix)))
        return sum(s for s, _ in files), sorted(files, reverse=True)[:4]
    finally:
        shutil.rmtree(prefix, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=21)
    ap.add_argument("--build", help="CMake build directory for the installed-size check")
    ap.add_argument("--json", help="also write the numbers to this file")
    args = ap.parse_args()

    results = {"python -c pass": measure(None, args.runs), "cudakit": measure("cudakit", args.runs)}
    try:
        subprocess.run([sys.executable, "-c", "import torch"], check=True, capture_output=True)
        results["torch"] = measure("torch", max(5, args.runs // 4))
    except subprocess.CalledProcessError:
        pass

    backend = os.environ.get("CUDAKIT_BACKEND", "cuda")
    print(f"## import in a fresh process (median of {args.runs}; CUDAKIT_BACKEND={backend})\n")
    print("| what | import ms | process wall ms | process CPU ms | numpy loaded | BLAS loaded | libcuda loaded | threads |")
    print("|---|---:|---:|---:|---|---|---|---:|")
    for name, r in results.items():
        flags = ("", "", "", "") if name.startswith("python") else (
            r["numpy"], r["openblas"], r["libcuda"], r["threads"])
        imp = "" if name.startswith("python") else f"{r['import_ms']:.1f} (min {r['min_import_ms']:.1f})"
        print(f"| {name} | {imp} | {r['wall_ms']:.1f} | {r['cpu_ms']:.1f} | {flags[0]} | {flags[1]} | {flags[2]} | {flags[3]} |")
    c = results["cudakit"]
    print(f"\ngoal: import <= 50 ms: {'met' if c['import_ms'] <= 50 else 'MISSED'}; "
          f"numpy/BLAS/libcuda not loaded: {'met' if not (c['numpy'] or c['openblas'] or c['libcuda']) else 'MISSED'}")

    print("\nlargest entries of python -X importtime (cumulative us, self us):")
    for cum, self_us, name in importtime_top("cudakit"):
        print(f"  {cum:7d} {self_us:7d}  {name.strip()}")

    build = args.build
    if not build:
        import importlib.util

        spec = importlib.util.find_spec("cudakit")
        if spec and spec.origin:
            build = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(spec.origin))))
    size = installed_size(build)
    if size:
        total, largest = size
        print(f"\n| installed (cmake --install {build}) | {total / 1e6:.1f} MB | goal <= 30 MB: "
              f"{'met' if total <= 30e6 else 'MISSED'} |")
        for s, p in largest:
            print(f"  {s / 1e6:6.2f} MB  {p}")
        results["installed_bytes"] = total
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
