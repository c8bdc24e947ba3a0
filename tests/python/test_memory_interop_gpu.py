"""GPU-only: PyTorch and CuPy drawing from cudakit's pool through libcudakit_alloc.so.
Each check runs in a fresh interpreter (torch's allocator can only be swapped before its
first CUDA allocation)."""
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.gpu


def _run(code: str) -> str:
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                       text=True, env=dict(os.environ), timeout=600)
    if r.returncode != 0 and "ModuleNotFoundError" in r.stderr:
        pytest.skip(r.stderr.strip().splitlines()[-1])
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_torch_model_step_through_cudakit_pool():
    out = _run("""
        import torch, cudakit, cudakit.memory as m
        m.use_with_torch()
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).cuda()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        x = torch.randn(64, 256, device="cuda"); y = torch.randint(0, 10, (64,), device="cuda")
        loss0 = torch.nn.functional.cross_entropy(model(x), y)
        for _ in range(20):
            opt.zero_grad(); loss = torch.nn.functional.cross_entropy(model(x), y); loss.backward(); opt.step()
        torch.cuda.synchronize()
        params = sum(p.numel() * 4 for p in model.parameters())
        assert m.memory_allocated() >= params, (m.memory_allocated(), params)
        assert loss.item() < loss0.item()
        segs = m.memory_snapshot()
        assert any(b["state"] == "active_allocated" for s in segs for b in s["blocks"])
        print("OK", m.memory_allocated(), loss0.item(), loss.item())
    """)
    assert out.startswith("OK")


def test_cupy_arrays_through_cudakit_pool():
    out = _run("""
        import cupy, numpy, cudakit.memory as m
        m.use_with_cupy()
        base = m.memory_allocated()
        a = cupy.arange(1 << 20, dtype=cupy.float32)
        b = (a * 2 + 1).sum()
        assert m.memory_allocated() >= base + (4 << 20)
        expect = float(numpy.arange(1 << 20, dtype=numpy.float64).sum() * 2 + (1 << 20))
        assert abs(float(b) - expect) / expect < 1e-5
        del a
        print("OK", m.memory_allocated())
    """)
    assert out.startswith("OK")


def test_cupy_streams_created_and_dropped_while_pages_move():
    # CuPy destroys a Stream when its last reference goes; cudakit's page moves ask every
    # stream that allocated whether it is idle. The hook keeps and retires CuPy's streams
    # (_cupy_interop.py), so the driver is never asked about a destroyed handle (it crashed).
    out = _run("""
        import cupy, cudakit.memory as m
        m.use_with_cupy()
        keep = []
        for i in range(200):
            s = cupy.cuda.Stream(non_blocking=True)
            with s:
                a = cupy.ones((8 + (i % 7) * 3) << 18, dtype=cupy.float32)  # 8-26 MiB
                keep.append(float(a[:4].sum()))
                del a
            del s
            b = cupy.empty((32 + (i % 5) * 16) << 18, dtype=cupy.float32)  # pages move here
            del b
        cupy.cuda.Device().synchronize()
        assert keep == [4.0] * 200
        print("OK", m.memory_reserved())
    """)
    assert out.startswith("OK")
