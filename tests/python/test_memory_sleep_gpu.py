"""GPU-only (issue 29): tagged pools serving torch (use_with_torch) and CuPy (use_with_cupy):
a model's weights offloaded and restored, its KV cache discarded, a torch CUDA graph replayed
after sleep + wake with every data_ptr() unchanged, and a pool of torch tensors handed to
another process. Each check runs in a fresh interpreter (torch can switch allocators only
before its first CUDA allocation); skipped without torch (or CuPy) with CUDA."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from torch_child import run_torch_child  # noqa: E402

pytestmark = pytest.mark.gpu

_run = run_torch_child


def test_torch_weights_kv_cache_and_graph_survive_sleep():
    _run("""
        m.use_with_torch()
        torch.manual_seed(0)
        with m.use_sleep_pool("weights"):
            model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(),
                                        torch.nn.Linear(4096, 1024)).cuda().half()
        with m.use_sleep_pool("kv"):
            kv = torch.zeros(64 << 20, dtype=torch.uint8, device="cuda")
        x = torch.randn(32, 1024, device="cuda", dtype=torch.half)
        ptrs = [p.data_ptr() for p in model.parameters()] + [kv.data_ptr()]
        ref = model(x)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                model(x)  # warm-up before capture, as torch.cuda.graph asks
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            y = model(x)
        reserved = torch.cuda.memory_reserved()
        freed = m.sleep(offload=["weights"])
        assert freed >= 64 << 20 and torch.cuda.memory_reserved() == reserved - freed
        assert m.sleep_state()["weights"]["offloaded"] and not m.sleep_state()["kv"]["offloaded"]
        free_asleep = torch.cuda.mem_get_info()[0]
        m.wake_up()
        assert torch.cuda.mem_get_info()[0] <= free_asleep - freed * 99 // 100
        assert [p.data_ptr() for p in model.parameters()] + [kv.data_ptr()] == ptrs
        g.replay()
        torch.cuda.synchronize()
        # Restored weights give the eager result (discarded ones would give garbage).
        assert torch.allclose(y, ref, atol=1e-2, rtol=1e-2), (y - ref).abs().max()
        kv.fill_(7)
        assert int(kv.sum()) == 7 * (64 << 20)
    """)


def test_cupy_arrays_in_a_tagged_pool():
    _run("""
        import cupy
        m.use_with_cupy()
        with m.use_sleep_pool("cupy_w"):
            a = cupy.arange(1 << 20, dtype=cupy.float32)
        p = a.data.ptr
        m.sleep(["cupy_w"], offload=["cupy_w"])
        m.wake_up(["cupy_w"])
        assert a.data.ptr == p and float(a[12345]) == 12345.0
    """)


def test_torch_tensors_handed_to_another_process():
    _run("""
        import json
        m.use_with_torch()
        import textwrap
        child = textwrap.dedent('''
        import json, sys, torch, cudakit.memory as m
        m.use_with_torch()
        with m.use_sleep_pool("w"):
            ts = [torch.full((1000 * (i + 1),), float(i), device="cuda", dtype=torch.half) for i in range(300)]
        torch.cuda.synchronize()
        v = m.pool_view("w")
        print(json.dumps({"h": m.export_pool("w").hex(), "t": [[v.offset_of(t), t.numel()] for t in ts]}), flush=True)
        sys.stdin.readline()
        ''')
        import subprocess, sys, time
        p = subprocess.Popen([sys.executable, "-c", child], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
        info = json.loads(p.stdout.readline())
        t0 = time.perf_counter()
        view = m.import_pool(bytes.fromhex(info["h"]))
        opened = time.perf_counter() - t0
        got = [torch.from_dlpack(view.tensor(off, (n,), torch.float16)) for off, n in info["t"]]
        assert all(float(t[-1]) == float(i) for i, t in enumerate(got))
        print("import_pool ms", opened * 1e3)
        del got
        view.close()
        p.stdin.write("\\n"); p.stdin.close(); p.wait(timeout=60)
        assert p.returncode == 0
    """)
