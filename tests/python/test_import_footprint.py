"""What `import cudakit` loads (issue 15.6): no numpy, no BLAS, no driver, no thread, and the
lazily imported sections (graphs, profiler, graph annotations) only on first use. Each check
runs in a fresh interpreter, since this test process has long imported everything."""
import ctypes.util
import json
import os
import subprocess
import sys

import pytest

PROBE = r"""
import sys
# What the interpreter loaded at startup (site hooks and .pth files differ between hosts:
# the H200's Python 3.12 loads typing before any user code) is not cudakit's doing.
preloaded = set(sys.modules)
import cudakit
modules = sorted(sys.modules)  # before the probe's own json import
added = sorted(set(modules) - preloaded)
maps = open("/proc/self/maps").read()
status = open("/proc/self/status").read()
import json
print(json.dumps({
    "modules": modules,
    "added": added,
    "blas": [l.split()[-1] for l in maps.splitlines() if "blas" in l.rsplit("/", 1)[-1]],
    "libcuda": [l.split()[-1] for l in maps.splitlines() if "libcuda.so" in l],
    "threads": int(status.split("Threads:")[1].split()[0]),
}))
"""


def probe(code, backend):
    env = dict(os.environ, CUDAKIT_BACKEND=backend)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("backend", ["emulated", "cuda"])
def test_import_loads_no_numpy_blas_driver_or_thread(backend):
    r = probe(PROBE, backend)
    mods = set(r["modules"])
    assert "numpy" not in mods
    assert r["blas"] == [], r["blas"]
    assert r["libcuda"] == [], r["libcuda"]
    # No thread pool started by import (OpenBLAS used to start one per core).
    assert r["threads"] == 1
    # Imported on first use only; so are the heavy standard modules they need (unless the
    # interpreter itself had loaded them before `import cudakit`).
    for lazy in ("cudakit.graphs", "cudakit.profiler", "cudakit.graph_annotations",
                 "cudakit._graph_annotations", "cudakit.memory_viz", "cudakit.tunable",
                 "cudakit.jiterator", "cudakit.gds", "cudakit.green_contexts",
                 "cudakit.sanitizer", "cudakit._sanitizer", "cudakit.comm", "cudakit.nccl"):
        assert lazy not in mods, lazy
    added = set(r["added"])
    for heavy in ("ctypes", "typing", "json", "pickle", "gzip"):
        assert heavy not in added, heavy


def test_lazy_names_resolve_on_first_use():
    r = probe(PROBE.replace("import cudakit\n", """import cudakit
assert "graph" in dir(cudakit) and "profiler" in dir(cudakit)
from cudakit import CUDAGraph, make_graphed_callables
import cudakit.graphs
assert CUDAGraph is cudakit.graphs.CUDAGraph and cudakit.graph is cudakit.graphs.graph
assert callable(cudakit.profiler.start) and callable(cudakit.graph_annotations.mark_kernels)
assert cudakit.is_current_stream_capturing() is False
try:
    cudakit.no_such_name
    raise SystemExit("no AttributeError")
except AttributeError as e:
    assert "no_such_name" in str(e)
"""), "emulated")
    assert "cudakit.graphs" in r["modules"] and "cudakit.profiler" in r["modules"]


@pytest.mark.skipif(not ctypes.util.find_library("openblas"), reason="OpenBLAS not installed")
def test_emulated_matmul_opens_blas_on_first_use():
    r = probe(PROBE.replace("import cudakit\n", """import cudakit
a = cudakit.ones((32, 32))
assert float((a @ a).sum().item()) == 32.0 * 32 * 32
cudakit.synchronize()
"""), "emulated")
    assert any("openblas" in p for p in r["blas"]), r["blas"]
