"""cudakit.memory: torch.cuda.memory's names and behaviour on the current backend."""
import gc
import os
import pickle
import subprocess
import sys

import pytest

import cudakit
import cudakit.memory as mem


@pytest.fixture(autouse=True)
def _need_device():
    if not cudakit.is_available():
        pytest.skip(f"no device on backend {cudakit.backend_name()}")
    yield
    mem._record_memory_history(None)


def test_alloc_delete_and_stats():
    base = mem.memory_allocated()
    p = mem.caching_allocator_alloc(1000)
    assert isinstance(p, int) and p != 0
    assert mem.memory_allocated() == base + 1024
    assert mem.memory_allocated("cuda:0") == mem.memory_allocated(0)
    s = mem.memory_stats()
    assert list(s) == sorted(s)
    assert s["allocated_bytes.all.current"] == base + 1024
    assert s["requested_bytes.all.current"] >= 1000
    nested = mem.memory_stats_as_nested_dict()
    assert nested["allocated_bytes"]["all"]["current"] == base + 1024
    assert nested["num_ooms"] == s["num_ooms"]
    mem.caching_allocator_delete(p)
    assert mem.memory_allocated() == base
    assert mem.max_memory_allocated() >= base + 1024
    assert mem.memory_reserved() >= mem.memory_allocated()
    assert mem.memory_cached() == mem.memory_reserved()
    mem.reset_peak_memory_stats()
    assert mem.max_memory_allocated() == mem.memory_allocated()
    mem.reset_accumulated_memory_stats()
    assert mem.memory_stats()["allocated_bytes.all.allocated"] == 0


def test_device_argument_forms():
    class Dev:
        type = "cuda"
        index = 0

    assert mem.memory_reserved(Dev()) == mem.memory_reserved(None) == mem.memory_reserved(0)
    with pytest.raises(Exception):
        mem.memory_allocated("cuda:99")


def test_bad_input_errors():
    with pytest.raises(ValueError):
        mem.caching_allocator_delete(12345)
    p = mem.caching_allocator_alloc(64)
    mem.caching_allocator_delete(p)
    with pytest.raises(ValueError, match="double free"):
        mem.caching_allocator_delete(p)
    with pytest.raises(ValueError):
        mem.caching_allocator_alloc(-1)
    with pytest.raises(ValueError):
        mem.set_per_process_memory_fraction(2.0)
    with pytest.raises(ValueError, match="does not export"):
        mem.CUDAPluggableAllocator("libc.so.6", "no_such_alloc", "free")
    with pytest.raises(ValueError, match="cannot load"):
        mem.CUDAPluggableAllocator("/nonexistent.so", "a", "b")


def test_oom_is_torch_named_error():
    with pytest.raises(cudakit.OutOfMemoryError, match="Tried to allocate"):
        mem.caching_allocator_alloc(1 << 60)
    assert mem.memory_stats()["num_ooms"] >= 1


def test_fraction_summary_backend_info():
    mem.set_per_process_memory_fraction(0.5)
    assert mem.get_per_process_memory_fraction() == 0.5
    mem.set_per_process_memory_fraction(1.0)
    assert "Allocated memory" in mem.memory_summary()
    assert "from small pool" not in mem.memory_summary(abbreviated=True)
    assert mem.get_allocator_backend() == "native"
    free, total = mem.mem_get_info()
    assert 0 < free <= total
    assert mem.list_gpu_processes().startswith("GPU:0")
    mem.ipc_collect()


def test_caching_disabled_and_empty_cache():
    mem.empty_cache()
    # Long-lived allocations of earlier tests (e.g. the RNG's graph offset word, allocated at
    # the first graph capture as in torch) may pin a segment: compare the cached surplus.
    surplus = mem.memory_reserved() - mem.memory_allocated()
    before = mem.memory_stats()["num_device_alloc"]
    with mem.caching_allocator_disabled():
        p = mem.caching_allocator_alloc(4096)
        mem.caching_allocator_delete(p)
    assert mem.memory_stats()["num_device_alloc"] == before + 1
    assert mem.memory_reserved() - mem.memory_allocated() == surplus


def test_stream_argument_and_record_stream():
    s = cudakit.Stream()
    p = mem.caching_allocator_alloc(2048, stream=s)
    mem._record_stream(p, cudakit.current_stream())
    mem.caching_allocator_delete(p)
    p2 = mem.caching_allocator_alloc(2048, stream=s.cuda_stream)
    mem.caching_allocator_delete(p2)


def test_mempool_routing():
    pool = mem.MemPool()
    assert pool.use_count() == 1
    assert isinstance(pool.id, tuple) and len(pool.id) == 2
    with mem.use_mem_pool(pool):
        p = mem.caching_allocator_alloc(1 << 20)
    segs = pool.snapshot()
    assert any(b["address"] == p and b["state"] == "active_allocated"
               for seg in segs for b in seg["blocks"])
    assert all(seg["segment_pool_id"] == pool.id for seg in segs)
    mem.caching_allocator_delete(p)
    h = mem.graph_pool_handle()
    assert h != mem.graph_pool_handle()


def test_mempool_snapshot_leaves_out_expandable_segments():
    # With expandable segments, a pool's snapshot showed the default pools' expandable
    # segments too (they were not filtered by pool).
    code = """
import cudakit.memory as mem
p = mem.caching_allocator_alloc(1000)
pool = mem.MemPool()
with mem.use_mem_pool(pool):
    q = mem.caching_allocator_alloc(1 << 20)
segs = pool.snapshot()
assert segs and all(s["segment_pool_id"] == pool.id for s in segs), segs
assert any(s["is_expandable"] for s in mem.memory_snapshot()), "the default pool's segment"
mem.caching_allocator_delete(q)
mem.caching_allocator_delete(p)
"""
    env = dict(os.environ, CUDAKIT_ALLOC_CONF="expandable_segments:True")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr

def test_snapshot_history_and_pickle(tmp_path):
    mem._record_memory_history(max_entries=1000)
    p = mem.caching_allocator_alloc(3 << 20)
    mem.caching_allocator_delete(p)
    snap = mem._snapshot()
    actions = [e["action"] for e in snap["device_traces"][0]]
    assert "alloc" in actions and "free_requested" in actions and "free_completed" in actions
    alloc = next(e for e in snap["device_traces"][0] if e["action"] == "alloc" and e["addr"] == p)
    assert alloc["size"] == 3 << 20
    names = [f["name"] for f in alloc["frames"]]
    assert "test_snapshot_history_and_pickle" in names, names
    # Python frames are recorded raw and symbolised at snapshot time: file and line are right.
    me = next(f for f in alloc["frames"] if f["name"] == "test_snapshot_history_and_pickle")
    assert me["filename"].endswith("test_memory.py")
    src = open(me["filename"]).read().splitlines()
    assert "caching_allocator_alloc(3 << 20)" in src[me["line"] - 1], me
    segs = mem.memory_snapshot()
    for seg in segs:
        assert {"address", "total_size", "allocated_size", "blocks", "stream",
                "segment_type", "device", "is_expandable"} <= set(seg)
        assert seg["total_size"] == sum(b["size"] for b in seg["blocks"])
    out = tmp_path / "snap.pickle"
    mem._dump_snapshot(str(out))
    loaded = pickle.loads(out.read_bytes())
    assert "segments" in loaded and "device_traces" in loaded
    mem._dump_snapshot(str(tmp_path / "snap.json"))
    assert (tmp_path / "snap.json").stat().st_size > 10


def test_host_stats():
    mem.reset_accumulated_host_memory_stats()
    s = mem.host_memory_stats()
    for k in ("allocations.current", "allocated_bytes.peak", "segment.current",
              "reserved_bytes.current", "num_host_alloc", "num_host_free", "host_alloc_time.avg"):
        assert k in s, k
    assert "allocations" in mem.host_memory_stats_as_nested_dict()
    mem.reset_peak_host_memory_stats()


def test_fast_empty_matches_the_pybind11_function():
    # cudakit.empty is a vectorcall function in front of the pybind11 one (issue 15.5): every
    # argument form gives the same tensor, and every error the same exception and message.
    fast, slow = cudakit.empty, cudakit._C._empty_pybind11
    assert fast is not slow and fast.__doc__ == slow.__doc__
    before = mem.host_memory_stats()["allocations.current"]
    forms = [((4096,), dict(dtype=cudakit.uint8, device="cpu", pin_memory=True)),
             ((2, 3), dict(dtype=cudakit.float16, device="cpu", pin_memory=True)),
             ((2, 3), dict(device="cpu")), ((5,), {}), (((2, 3),), {}), (([4],), dict(device="cpu")),
             ((0,), dict(device="cpu", pin_memory=False)), ((3,), dict(device=cudakit.Device("cpu")))]
    for args, kwargs in forms:
        a, b = fast(*args, **kwargs), slow(*args, **kwargs)
        assert (a.shape, a.dtype, str(a.device), a.is_pinned()) == \
            (b.shape, b.dtype, str(b.device), b.is_pinned()), (args, kwargs)
        del a, b
    assert mem.host_memory_stats()["allocations.current"] == before, "pinned blocks freed"
    bad = [((-1,), {}), ((2,), dict(dtyp=cudakit.uint8)), ((2,), dict(dtype="x")),
           ((2,), dict(device="cuda", pin_memory=True)), ((2**70,), {}), ((2,), dict(pin_memory="yes")),
           ((1.5,), {}), ((2**40,), dict(device="cpu", pin_memory=True)), ((), dict(dtype=object()))]
    for args, kwargs in bad:
        errors = []
        for fn in (fast, slow):
            with pytest.raises(Exception) as e:
                fn(*args, **kwargs)
            errors.append((type(e.value), str(e.value)))
        assert errors[0] == errors[1], (args, kwargs)


def test_bad_config_names_the_key():
    env = dict(os.environ, CUDAKIT_ALLOC_CONF="expandable_segment:True")
    r = subprocess.run([sys.executable, "-c", "import cudakit.memory as m; m.caching_allocator_alloc(8)"],
                       env=env, capture_output=True, text=True)
    assert r.returncode != 0
    assert "expandable_segment" in r.stderr and "unknown key" in r.stderr


def test_pytorch_conf_is_honoured():
    env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF="backend:cudaMallocAsync")
    env.pop("CUDAKIT_ALLOC_CONF", None)
    r = subprocess.run([sys.executable, "-c", "import cudakit.memory as m; print(m.get_allocator_backend())"],
                       env=env, capture_output=True, text=True)
    assert r.stdout.strip() == "cudaMallocAsync", r.stderr


def test_plugin_library_c_abi():
    import ctypes

    try:
        path = mem.plugin_path()
    except RuntimeError as e:
        pytest.skip(str(e))
    lib = ctypes.CDLL(path)
    lib.cudakit_malloc.restype = ctypes.c_void_p
    lib.cudakit_malloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
    lib.cudakit_free.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
    base = mem.memory_allocated(0)
    p = lib.cudakit_malloc(10 << 20, 0, None)
    assert p
    assert mem.memory_allocated(0) == base + (10 << 20), "plugin allocations show in cudakit stats"
    assert any(b["address"] == p for s in mem.memory_snapshot() for b in s["blocks"])
    lib.cudakit_free(p, 10 << 20, 0, None)
    assert mem.memory_allocated(0) == base
    assert not lib.cudakit_malloc(1 << 62, 0, None)  # OOM → nullptr across the C ABI


def test_memory_viz_html(tmp_path):
    from cudakit import memory_viz

    mem._record_memory_history(max_entries=10000)
    ptrs = [mem.caching_allocator_alloc(s) for s in (1 << 20, 3 << 20, 512, 40 << 20)]
    for p in ptrs[:2]:
        mem.caching_allocator_delete(p)
    snap_path = tmp_path / "s.pickle"
    mem._dump_snapshot(str(snap_path))
    for p in ptrs[2:]:
        mem.caching_allocator_delete(p)
    out = tmp_path / "s.html"
    r = subprocess.run([sys.executable, "-m", "cudakit.memory_viz", str(snap_path), "-o", str(out)],
                       capture_output=True, text=True, env=dict(os.environ))
    assert r.returncode == 0, r.stderr
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and "<polygon" in page and "<rect" in page
    assert "http" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "40.0 MiB" in page


def test_mempool_with_pluggable_allocator_binds(ck):
    # Behaviour (segments drawn from the allocator, returned on release) is covered by
    # tests/cpp/test_memory_pluggable.cpp; here: the torch signature reaches it.
    alloc = ck.memory.CUDAPluggableAllocator(ck.memory.plugin_path(), "cudakit_malloc",
                                             "cudakit_free")
    pool = ck.memory.MemPool(allocator=alloc, use_on_oom=False)
    assert pool.allocator is alloc
    assert pool.use_count() >= 1
    assert pool.id[0] > 0


def test_async_backend_stats_balance():
    # backend:cudaMallocAsync accounts requested bytes as the request (not the block size),
    # so alloc + free returns every counter to zero.
    env = dict(os.environ, CUDAKIT_ALLOC_CONF="backend:cudaMallocAsync")
    code = ("import cudakit.memory as m\n"
            "p = m.caching_allocator_alloc(1000)\n"
            "s = m.memory_stats(); print(s['requested_bytes.all.current'])\n"
            "m.caching_allocator_delete(p)\n"
            "s = m.memory_stats()\n"
            "print(s['requested_bytes.all.current'], s['allocated_bytes.all.current'],"
            " s['active_bytes.all.current'], s['requested_bytes.all.allocated'])\n")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["1000", "0", "0", "0", "1000"], r.stdout
