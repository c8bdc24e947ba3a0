"""A matrix product as the very first GEMM of a process, inside a graph capture (issue 24).

On the cuda backend the first product of a thread creates its cuBLAS handle, and
cublasCreate allocates device memory: under a global-mode capture that failed with
CUBLAS_STATUS_NOT_INITIALIZED and invalidated the capture (torch fails the same way, its
issue 99397, and asks for a warm-up). cudakit creates handles in relaxed capture mode, so
the capture needs no warm-up. Each case runs in a fresh interpreter: no earlier test may have
created the handle. The same test runs on the emulated backend in CI and on the cuda backend
in scripts/gpu-check.sh.
"""
import os
import subprocess
import sys
import textwrap

import pytest

CHILD = textwrap.dedent("""
    import sys
    import numpy as np
    import cudakit as ck

    dtype = getattr(ck, sys.argv[1])
    a = ck.full((64, 32), 0.5, dtype=dtype)
    b = ck.full((32, 16), 2.0, dtype=dtype)
    ck.synchronize()            # the factories ran; no product has run in this process
    g = ck.CUDAGraph()
    with ck.graph(g):
        c = a @ b               # the process's first GEMM: handle and workspace created here
        d = ck.matmul(c, b.T)   # a second product in the same capture
    g.replay()
    ck.synchronize()
    assert np.all(c.cpu().numpy().astype(np.float64) == 32.0), c.cpu().numpy()
    assert np.all(d.cpu().numpy().astype(np.float64) == 32.0 * 2.0 * 16), d.cpu().numpy()
    a.fill_(1.0)                # new input values: the replay reads them
    g.replay()
    ck.synchronize()
    assert np.all(c.cpu().numpy().astype(np.float64) == 64.0), c.cpu().numpy()
    print("first-gemm capture ok")
""")


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_first_gemm_of_a_process_inside_a_capture(ck, dtype):
    env = dict(os.environ)
    env.pop("CUDAKIT_TEST_SYNC_DEBUG", None)
    r = subprocess.run([sys.executable, "-c", CHILD, dtype], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "first-gemm capture ok" in r.stdout
