"""GPU-only (issue 16): with cudakit's pool serving torch (use_with_torch), torch's own memory
API, its viewer, CUDA graphs, MemPool, record_stream and CuPy sharing the pool behave as with
torch's allocator. Each check runs in a fresh interpreter: torch can switch allocators only
before its first CUDA allocation. Needs torch with CUDA (and CuPy for the last one); skipped
when they are missing."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from torch_child import run_torch_child  # noqa: E402

pytestmark = pytest.mark.gpu

_run = run_torch_child


def test_training_step_with_torch_memory_logging():
    out = _run("""
        m.use_with_torch()
        assert m.torch_interop_state()["memory_api_patched"]
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(),
                                    torch.nn.Linear(1024, 10)).cuda()
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        x = torch.randn(128, 512, device="cuda"); y = torch.randint(0, 10, (128,), device="cuda")
        torch.cuda.reset_peak_memory_stats()
        log = []
        for step in range(5):
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward(); opt.step()
            log.append((torch.cuda.memory_allocated(), torch.cuda.max_memory_allocated(),
                        torch.cuda.memory_reserved(), torch.cuda.max_memory_reserved()))
        torch.cuda.synchronize()
        params = sum(p.numel() * p.element_size() for p in model.parameters())
        alloc, peak, reserved, max_reserved = log[-1]
        assert alloc == m.memory_allocated() and reserved == m.memory_reserved(), (log, m.memory_stats())
        assert params * 3 <= alloc <= peak <= max_reserved, log  # params + grads + Adam state
        assert reserved <= max_reserved and peak >= log[0][0]
        assert m.memory_allocated_by("torch") >= params * 3
        stats = torch.cuda.memory_stats()
        assert stats["allocated_bytes.all.current"] == alloc
        accel = getattr(torch, "accelerator", None)
        if hasattr(accel, "memory_allocated"):  # torch >= 2.9
            assert accel.memory_allocated() == alloc, (accel.memory_stats(), alloc)
        assert stats["num_ooms"] == 0 and stats["segment.all.current"] >= 1
        assert torch.cuda.memory_stats_as_nested_dict()["allocation"]["all"]["current"] >= 6
        summary = torch.cuda.memory_summary()
        assert "PyTorch CUDA memory summary" in summary and "Allocated memory" in summary
        del opt, model, x, y, loss
        frees = torch.cuda.memory_stats()["num_device_free"]
        torch.cuda.empty_cache()  # reaches cudakit: cached segments go back to the driver
        assert torch.cuda.memory_reserved() == m.memory_reserved() <= reserved
        assert torch.cuda.memory_stats()["num_device_free"] > frees
        torch.cuda.reset_accumulated_memory_stats()
        assert torch.cuda.memory_stats()["allocation.all.allocated"] == 0
        print("OK", log)
    """)
    assert "OK" in out


def test_history_snapshot_loads_in_torchs_viewer(tmp_path):
    path = tmp_path / "snap.pickle"
    out = _run(f"""
        import pickle
        from torch.cuda import _memory_viz
        m.use_with_torch()
        torch.cuda.memory._record_memory_history(max_entries=100000)
        model = torch.nn.Linear(256, 256).cuda()
        for _ in range(3):
            model(torch.randn(64, 256, device="cuda")).sum().backward()
        keep = torch.empty(3 << 20, dtype=torch.uint8, device="cuda")
        torch.cuda.memory._dump_snapshot({str(path)!r})
        snap = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        with open({str(path)!r}, "rb") as f:
            dumped = pickle.load(f)
        for s in (snap, dumped):
            assert s["segments"] and s["device_traces"]
            blocks = [b for seg in s["segments"] for b in seg["blocks"]]
            assert any(b["address"] == keep.data_ptr() and b["state"] == "active_allocated"
                       for b in blocks)
            actions = {{e["action"] for t in s["device_traces"] for e in t}}
            assert "alloc" in actions and "free_requested" in actions, actions
        assert torch.cuda.memory_snapshot()  # the segments list
        html = _memory_viz.trace_plot(dumped)
        assert len(html) > 1000
        assert len(_memory_viz.segment_plot(dumped)) > 1000
        text = _memory_viz.segsum(dumped)
        assert text
        print("OK", len(dumped["segments"]), sum(len(t) for t in dumped["device_traces"]))
    """)
    assert "OK" in out


def test_cuda_graph_on_cudakits_pool_replays():
    out = _run("""
        m.use_with_torch()
        x = torch.zeros(1 << 16, device="cuda")
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):  # warm-up outside capture, as torch asks
            for _ in range(3):
                y = x * 2 + 1
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            y = x * 2 + 1
            z = y.sum()
        pool = tuple(g.pool())
        for k in range(3):
            x.copy_(torch.full_like(x, float(k)))
            g.replay()
        torch.cuda.synchronize()
        assert torch.equal(y, torch.full_like(x, 5.0)), y[:4]
        assert z.item() == 5.0 * x.numel()
        # the graph's memory lives in a private pool, reported with torch's pool id
        segs = torch.cuda.memory_snapshot()
        owner = [seg["segment_pool_id"] for seg in segs for b in seg["blocks"]
                 if b["address"] == y.data_ptr()]
        assert owner and tuple(owner[0]) == pool, (owner, pool)
        assert tuple(owner[0]) != (0, 0)
        # a second graph sharing the pool, then release both
        g2 = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g2, pool=pool):
            w = y + 1
        g2.replay(); torch.cuda.synchronize()
        assert torch.equal(w, torch.full_like(x, 6.0))
        del g, g2, y, z, w
        import gc; gc.collect()
        torch.cuda.synchronize(); torch.cuda.empty_cache()
        assert not any(tuple(seg["segment_pool_id"]) == pool for seg in torch.cuda.memory_snapshot())
        print("OK", pool)
    """)
    assert "OK" in out


def test_mempool_record_stream_ipc_and_settings():
    out = _run("""
        m.use_with_torch()
        pool = torch.cuda.MemPool()
        with torch.cuda.use_mem_pool(pool):
            a = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
        b = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
        inside = {blk["address"] for seg in pool.snapshot() for blk in seg["blocks"]}
        assert a.data_ptr() in inside and b.data_ptr() not in inside
        assert pool.use_count() >= 1
        # record_stream: the block is not reused while the other stream may use it
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            torch.cuda._sleep(100_000_000)
        c = torch.empty(4 << 20, dtype=torch.uint8, device="cuda")
        c.record_stream(side)
        addr = c.data_ptr(); del c
        d = torch.empty(4 << 20, dtype=torch.uint8, device="cuda")
        assert d.data_ptr() != addr, "reused while a recorded stream still runs"
        torch.cuda.synchronize()
        # IPC: refused with the reason
        import torch.multiprocessing.reductions as red
        try:
            red.reduce_tensor(b)
        except RuntimeError as e:
            assert "no IPC hooks" in str(e), e
        else:
            raise AssertionError("sharing a CUDA tensor did not fail")
        # allocator settings reach cudakit
        torch.cuda.memory._set_allocator_settings("roundup_power2_divisions:4")
        try:
            torch.cuda.memory._set_allocator_settings("expandable_segments:True")
        except ValueError as e:
            assert "expandable_segments" in str(e)
        del a, pool
        with __import__("warnings").catch_warnings(record=True) as w:
            __import__("warnings").simplefilter("always")
            m.stop_using_with_torch()
        assert any("keeps allocating from cudakit" in str(x.message) for x in w)
        try:
            torch.cuda.memory_allocated()
        except RuntimeError as e:
            assert "does not yet support" in str(e)
        print("OK")
    """)
    assert "OK" in out


def test_cupy_and_torch_share_one_pool_with_breakdown():
    out = _run("""
        import cupy
        m.use_with_torch()
        m.use_with_cupy()
        own0 = m.memory_allocated_by("cudakit")
        t = torch.ones(8 << 20, dtype=torch.uint8, device="cuda")
        c = cupy.ones(3 << 20, dtype=cupy.uint8)
        own = cudakit.caching_allocator_alloc(5 << 20)
        by = m.memory_stats_by_framework()
        assert by["torch"]["allocated_bytes"]["current"] >= 8 << 20
        assert by["cupy"]["allocated_bytes"]["current"] >= 3 << 20
        assert by["cudakit"]["allocated_bytes"]["current"] >= 5 << 20
        total = sum(f["allocated_bytes"]["current"] for f in by.values())
        assert total == m.memory_allocated() == torch.cuda.memory_allocated(), by
        assert cupy.get_default_memory_pool().used_bytes() == 0  # CuPy's own pool unused
        # data flows between them
        tc = torch.from_dlpack(c)
        assert int(tc.sum().item()) == 3 << 20
        assert m.memory_allocated_by("cupy") >= 3 << 20
        del c, tc
        cudakit.caching_allocator_delete(own)
        assert m.memory_allocated_by("cudakit") == own0
        print("OK", {k: v["allocated_bytes"]["current"] for k, v in by.items()})
    """)
    assert "OK" in out


def test_graph_pool_memory_outlives_empty_cache_and_the_graph():
    # torch's test_graph_memory_stats_and_use_result_after_destroy_graph: empty_cache() between
    # replays used to give the graph's freed intermediates back to the device (an illegal
    # memory access on the next replay); the result stays usable after the graph is gone.
    out = _run("""
        import gc
        m.use_with_torch()
        for numel in (512 // 4, (10 << 20) // 4 + 128):
            s = torch.cuda.Stream()
            g = torch.cuda.CUDAGraph()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                a = torch.ones((numel,), device="cuda")
                g.capture_begin()
                b = a.clone()
                for _ in range(5):
                    b = b.clone() + 1
                g.capture_end()
            torch.cuda.current_stream().wait_stream(s)
            for i in range(2):
                g.replay()
                assert b.sum().item() == 6 * numel
                if i == 0:
                    torch.cuda.empty_cache()
            del g
            gc.collect()
            torch.cuda.empty_cache()
            junk = [torch.full((numel,), 7.0, device="cuda") for _ in range(8)]
            assert b.sum().item() == 6 * numel
        # a block used on a second stream and freed during capture (test_graph_record_stream)
        s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
        g = torch.cuda.CUDAGraph()
        x = torch.zeros(3, device="cuda")
        with torch.cuda.stream(s1):
            g.capture_begin()
            y = x.clone()
            s2.wait_stream(s1)
            with torch.cuda.stream(s2):
                y.fill_(1.0)
                y.record_stream(s2)
                del y
            s1.wait_stream(s2)
            g.capture_end()
        torch.cuda.synchronize()
        torch.zeros(3, device="cuda")  # processes the deferred free's events
        print("ok")
    """)
    assert "ok" in out


def test_compile_reduce_overhead_and_torchs_oom_type():
    out = _run("""
        m.use_with_torch()
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                                    torch.nn.Linear(128, 8)).cuda()
        x = torch.randn(16, 64, device="cuda")
        with torch.no_grad():
            ref = model(x)
            f = torch.compile(model, mode="reduce-overhead")
            for _ in range(4):  # warm-up, recording, replays (CUDA graph trees)
                torch.compiler.cudagraph_mark_step_begin()
                got = f(x).clone()
        torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-5)
        seen = []
        torch._C._cuda_attach_out_of_memory_observer(lambda *a: seen.append(a))
        try:
            torch.empty(1024 * 1024 * 1024 * 800000000, dtype=torch.int8, device="cuda")
        except torch.cuda.OutOfMemoryError as e:
            assert "Tried to allocate 800000000.00 GiB. GPU 0 has a total capacity of" in str(e), e
            assert seen and seen[-1][1] == 1024 * 1024 * 1024 * 800000000, seen
            print("oom-type-ok")
        x.fill_(1)  # the device still works after the error
        assert (x == 1).all()
        print("ok")
    """)
    assert "oom-type-ok" in out and "ok" in out
