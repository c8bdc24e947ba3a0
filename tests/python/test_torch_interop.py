"""use_with_torch / use_with_cupy without torch or CuPy: the patching layer against a stand-in
torch module (fake_torch.py, shaped as torch 2.x's call structure), the hook table handed to
torch, and the per-framework breakdown through libcudakit_alloc.so's C ABI called via ctypes.
Runs on the emulated backend in CI; the real thing runs on the GPU host
(test_torch_interop_gpu.py)."""
import ctypes
import logging
import os
import pickle
import sys
import types
import warnings

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import fake_torch  # noqa: E402


@pytest.fixture
def interop(ck, monkeypatch):
    """cudakit.memory with a fresh interop state, undone after the test."""
    from cudakit import _torch_interop

    saved = dict(_torch_interop._state)
    saved_history = dict(_torch_interop._history)
    _torch_interop._state.update(allocator=None, torch=None, patches=[])
    _torch_interop._history.update(enabled=False, skip_actions=frozenset(), metadata=[],
                                   cleared_before_us=0)
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    monkeypatch.delenv("PYTORCH_ALLOC_CONF", raising=False)
    yield ck.memory
    _torch_interop.unpatch()
    _torch_interop._state.clear()
    _torch_interop._state.update(saved)
    _torch_interop._history.update(saved_history)


@pytest.fixture
def torch(monkeypatch):
    t = fake_torch.make()
    monkeypatch.setitem(sys.modules, "torch", t)
    return t


def test_install_hands_torch_every_hook(interop, torch):
    with pytest.warns(UserWarning, match="pluggable-allocator errors"):
        interop.use_with_torch(patch_torch_memory_api=False)
    raw = torch.current_allocator
    assert isinstance(raw, fake_torch.FakeRawAllocator)
    from cudakit import _C
    hooks = _C._mem_torch_hooks()
    assert raw.addresses["malloc"] == hooks["malloc"] and raw.addresses["free"] == hooks["free"]
    for setter, key in (("set_reset_fn", "reset"), ("set_record_stream_fn", "record_stream"),
                        ("set_begin_allocate_to_pool", "begin_allocate_to_pool"),
                        ("set_end_allocate_to_pool_fn", "end_allocate_to_pool"),
                        ("set_release_pool", "release_pool"),
                        ("set_memory_fraction_fn", "memory_fraction"),
                        ("set_base_alloc_fn", "base_alloc"), ("set_init_fn", "init")):
        assert raw.addresses[setter] == hooks[key], setter
    assert len(set(hooks.values())) == len(hooks), "one distinct function per hook"
    state = interop.torch_interop_state()
    assert state["allocator_installed"] and not state["memory_api_patched"]
    # a torch without libc10's profiler entry points: the state says why its profiler sees
    # no allocations
    assert state["profiler_reporter"].startswith("libc10's reporting functions not found")
    # not patched: torch's own errors remain (the warning said so)
    with pytest.raises(RuntimeError, match="does not yet support getDeviceStats"):
        torch.cuda.memory_allocated()


def test_install_refuses_a_torch_without_pool_hooks(interop, monkeypatch):
    t = fake_torch.make(without_setters=("set_begin_allocate_to_pool",))
    monkeypatch.setitem(sys.modules, "torch", t)
    with pytest.raises(RuntimeError, match="no pool hooks.*CUDA graph capture"):
        interop.use_with_torch()
    assert t.current_allocator is None
    assert not interop.torch_interop_state()["allocator_installed"]


def test_install_refuses_a_cpu_only_torch(interop, monkeypatch):
    t = fake_torch.make()
    del t._C._cuda_customAllocator
    monkeypatch.setitem(sys.modules, "torch", t)
    with pytest.raises(RuntimeError, match="built without CUDA"):
        interop.use_with_torch()


def test_install_after_first_allocation_says_when_to_call(interop, monkeypatch):
    t = fake_torch.make(swap_error="Can't swap an already initialized allocator")
    monkeypatch.setitem(sys.modules, "torch", t)
    with pytest.raises(RuntimeError, match="must run before torch's first CUDA allocation"):
        interop.use_with_torch()
    assert not interop.torch_interop_state()["memory_api_patched"]


def test_bad_argument_is_named(interop, torch):
    with pytest.raises(TypeError, match="patch_torch_memory_api.*bool.*'yes'"):
        interop.use_with_torch(patch_torch_memory_api="yes")
    assert torch.current_allocator is None


def test_torch_memory_api_answers_from_cudakit(interop, torch, caplog):
    # A reference taken before the patch (as `from torch.cuda import memory_allocated` does)
    held = torch.cuda.memory_allocated
    with pytest.raises(RuntimeError, match="does not yet support"):
        held()
    with caplog.at_level(logging.INFO, logger="cudakit.memory"):
        interop.use_with_torch()
    assert any("answers from cudakit" in r.getMessage() for r in caplog.records), "never silent"
    p = interop.caching_allocator_alloc(5 << 20)
    try:
        assert held() == interop.memory_allocated() >= 5 << 20
        assert torch.cuda.max_memory_allocated() == interop.max_memory_allocated()
        assert torch.cuda.memory_reserved() == interop.memory_reserved()
        assert torch.cuda.max_memory_reserved() == interop.max_memory_reserved()
        stats = torch.cuda.memory_stats()
        mine = interop.memory_stats()
        for key in ("allocated_bytes.all.current", "reserved_bytes.large_pool.peak",
                    "active.small_pool.current", "num_ooms", "num_alloc_retries",
                    "requested_bytes.all.allocated", "segment.all.current"):
            assert stats[key] == mine[key], key
        nested = torch.cuda.memory_stats_as_nested_dict()
        assert nested["allocated_bytes"]["all"]["current"] == mine["allocated_bytes.all.current"]
        assert "framework" in nested  # cudakit's extra breakdown rides along
        assert "allocated_bytes" in torch.cuda.memory_summary()
        assert torch._C._accelerator_getDeviceStats(0) == nested  # torch.accelerator.memory_*
        assert torch._C._accelerator_isAllocatorInitialized() is True
        torch.cuda.reset_peak_memory_stats()
        assert torch.cuda.max_memory_allocated() == interop.memory_allocated()
        torch.cuda.reset_accumulated_memory_stats()
        assert torch.cuda.memory_stats()["allocation.all.allocated"] == 0
    finally:
        interop.caching_allocator_delete(p)
    assert held() == interop.memory_allocated()
    # empty_cache reaches cudakit, also "before torch's first CUDA call" (the pool is shared)
    torch.cuda.memory.is_initialized = lambda: False
    interop.empty_cache()
    held_before = interop.memory_reserved()  # what earlier tests keep (matmuls' workspaces)
    q = interop.caching_allocator_alloc(30 << 20)
    interop.caching_allocator_delete(q)
    assert interop.memory_reserved() >= held_before + (30 << 20)
    torch.cuda.empty_cache()
    assert interop.memory_reserved() <= held_before
    assert torch.cuda.memory_stats_as_nested_dict() != {}
    assert "cudakit" in torch.cuda.empty_cache.__doc__
    assert torch.cuda.get_per_process_memory_fraction() == interop.get_per_process_memory_fraction()


def test_history_and_snapshot_in_torchs_format(interop, torch, tmp_path):
    from cudakit import memory_viz

    interop.use_with_torch()
    torch.cuda.memory._record_memory_history(max_entries=1000)
    try:
        keep = [interop.caching_allocator_alloc(n) for n in (4096, 3 << 20)]
        interop.caching_allocator_delete(keep.pop())
        segs = torch.cuda.memory_snapshot()
        assert any(b["address"] == keep[0] and b["state"] == "active_allocated"
                   for s in segs for b in s["blocks"])
        assert all(isinstance(s["segment_pool_id"], tuple) for s in segs)
        path = tmp_path / "snap.pickle"
        torch.cuda.memory._dump_snapshot(str(path))
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
        for p in keep:
            interop.caching_allocator_delete(p)
    with open(path, "rb") as f:
        snap = pickle.load(f)
    memory_viz.validate(snap)  # the fields and types torch's _memory_viz reads
    actions = [e["action"] for t in snap["device_traces"] for e in t]
    assert "alloc" in actions and "free_completed" in actions
    assert "<svg" in memory_viz.to_html(snap)
    # legacy bool form and the newer keyword arguments
    torch.cuda.memory._record_memory_history(True, max_entries=10)
    torch.cuda.memory._record_memory_history(False)
    with pytest.warns(UserWarning, match="global_record_annotations"):
        torch.cuda.memory._record_memory_history("all", global_record_annotations=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # applied (snapshots hide earlier events): no warning
        torch.cuda.memory._record_memory_history("all", clear_history=True)
    torch.cuda.memory._record_memory_history(None)


def test_torch_pool_snapshot_uses_torchs_ids(interop, torch):
    # torch's pool ids live in their own space inside cudakit; snapshots give torch's back.
    from cudakit import _C

    interop.use_with_torch()
    pool = torch.cuda.MemPool()
    assert pool.use_count() == 1
    shared = _C._MemPool(id=tuple(_C._mem_torch_pool_id(pool.id)), device=0)  # what torch's hooks route to
    route = _C._UseMemPool(shared, 0)
    p = interop.caching_allocator_alloc(1 << 20)
    route.close()
    try:
        segs = pool.snapshot()
        assert any(b["address"] == p for s in segs for b in s["blocks"])
        assert all(s["segment_pool_id"] == pool.id for s in segs)
        every = torch.cuda.memory_snapshot()
        assert any(s["segment_pool_id"] == pool.id for s in every)
        assert torch.cuda.memory_snapshot(pool.id) == segs
    finally:
        interop.caching_allocator_delete(p)
        del shared


def test_mempool_and_use_mem_pool(interop, torch):
    interop.use_with_torch()
    assert torch.cuda.MemPool is torch.cuda.memory.MemPool
    pool = torch.cuda.MemPool(no_split=True)
    assert "cudakit" in type(pool).__doc__
    assert pool.id != torch.cuda.MemPool().id, "a fresh id of torch's (graph_pool_handle)"
    assert pool.use_count() == 1
    with torch.cuda.use_mem_pool(pool):
        pass
    assert torch.pool_calls == [("begin", 0, pool.id), ("end", 0, pool.id),
                                ("release", 0, pool.id)]
    with pytest.raises(NotImplementedError, match="allocator=.*cudakit"):
        torch.cuda.MemPool(allocator=object())
    pid = pool.id
    del pool
    from cudakit import _C
    assert _C._mem_torch_pool_use_count(0, pid) == 0


def test_ipc_sharing_fails_naming_the_limitation(interop, torch):
    interop.use_with_torch()
    with pytest.raises(RuntimeError, match="torch.multiprocessing.*no IPC hooks"):
        torch.UntypedStorage()._share_cuda_()
    with pytest.raises(RuntimeError, match="no IPC hooks"):
        torch.UntypedStorage._new_shared_cuda(1, 2)


def test_stop_using_restores_every_attribute(interop, torch):
    before = {n: getattr(torch._C, n) for n in fake_torch.C_NAMES}
    before_mem = {n: getattr(torch.cuda.memory, n) for n in fake_torch._MEMORY_EXPORTS}
    before_cuda = {n: getattr(torch.cuda, n) for n in fake_torch._MEMORY_EXPORTS}
    share = torch.UntypedStorage.__dict__.get("_share_cuda_")
    interop.use_with_torch()
    patched = interop.torch_interop_state()["patched"]
    assert "torch._C._cuda_memoryStats" in patched and "torch.cuda.memory.MemPool" in patched
    assert torch._C._cuda_memoryStats is not before["_cuda_memoryStats"]
    with pytest.warns(UserWarning, match="keeps allocating from cudakit's pool"):
        interop.stop_using_with_torch()
    for n, f in before.items():
        assert getattr(torch._C, n) is f, n
    for n, f in before_mem.items():
        assert getattr(torch.cuda.memory, n) is f, n
    for n, f in before_cuda.items():
        assert getattr(torch.cuda, n) is f, n
    assert "_share_cuda_" not in torch.UntypedStorage.__dict__ and share is None
    assert not interop.torch_interop_state()["memory_api_patched"]
    with pytest.raises(RuntimeError, match="does not yet support"):
        torch.cuda.memory_allocated()
    # patching again works (idempotent install, fresh patch)
    interop.use_with_torch()
    assert torch.cuda.memory_allocated() == interop.memory_allocated()


def test_torch_alloc_conf_applies_to_cudakit(interop, torch, monkeypatch):
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "garbage_collection_threshold:0.7")
    monkeypatch.setenv("CUDAKIT_ALLOC_CONF", "max_split_size_mb:512")
    with pytest.warns(UserWarning, match="CUDAKIT_ALLOC_CONF"):
        interop.use_with_torch()


def test_allocator_settings_reach_cudakit(interop, torch):
    interop.use_with_torch()
    interop.caching_allocator_delete(interop.caching_allocator_alloc(4096))  # pool in use
    torch.cuda.memory._set_allocator_settings("roundup_power2_divisions:4")
    assert torch.settings_calls == ["roundup_power2_divisions:4"]  # torch's copy too
    with pytest.raises(ValueError, match="roundup_power2_divisions.*power of two"):
        torch.cuda.memory._set_allocator_settings("roundup_power2_divisions:3")
    # fixed once the pool allocated: refused with cudakit's reason, torch's copy unchanged
    with pytest.raises(ValueError, match="backend"):
        torch.cuda.memory._set_allocator_settings("backend:cudaMallocAsync")
    assert torch.settings_calls == ["roundup_power2_divisions:4"]
    # applied live, as torch does: later segments have the new kind, the old ones stay
    flip = "False" if _expandable() else "True"
    interop.empty_cache()
    try:
        keep = interop.caching_allocator_alloc(3 << 20)  # a segment of the kind in force
        torch.cuda.memory._set_allocator_settings("expandable_segments:" + flip)
        # Larger than any chunk (expandable_segments_max_chunk_mb, 32): fits no cached block,
        # whatever chunk size the pool's earlier use chose for `keep` (after a test that had
        # 40 MiB live, keep's chunk had room for 30 MiB: the order-dependent failure).
        p = interop.caching_allocator_alloc(64 << 20)
        interop.caching_allocator_delete(keep)
        kinds = {s["is_expandable"] for s in torch.cuda.memory.memory_snapshot()}
        interop.caching_allocator_delete(p)
        assert kinds == {True, False}
    finally:
        torch.cuda.memory._set_allocator_settings(
            "expandable_segments:" + ("False" if flip == "True" else "True"))
    torch.cuda.memory._set_allocator_settings("roundup_power2_divisions:0")  # the default


def _expandable() -> bool:
    import os

    # Expandable segments are cudakit's default (issue 27) unless the settings say otherwise.
    conf = os.environ.get("CUDAKIT_ALLOC_CONF", os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""))
    return "expandable_segments:False" not in conf and "backend:cudaMallocAsync" not in conf


# ---- per-framework breakdown ----

def _plugin():
    from cudakit import memory

    try:
        lib = ctypes.CDLL(memory.plugin_path())
    except (RuntimeError, OSError) as e:
        pytest.skip(str(e))
    lib.cudakit_malloc.restype = ctypes.c_void_p
    lib.cudakit_malloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
    lib.cudakit_free.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
    lib.cudakit_last_error.restype = ctypes.c_char_p
    lib.cudakit_empty_cache.argtypes = []
    lib.cudakit_record_stream.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    return lib


def test_plugin_c_abi_counts_as_torch(ck):
    lib = _plugin()
    m = ck.memory
    t0 = m.memory_allocated_by("torch")
    own0 = m.memory_allocated_by("cudakit")
    p = lib.cudakit_malloc(3 << 20, 0, None)
    assert p
    try:
        assert m.memory_allocated_by("torch") == t0 + (3 << 20)
        assert m.memory_allocated_by("cudakit") == own0
        by = m.memory_stats_by_framework()
        assert set(by) == {"cudakit", "torch", "cupy"}
        assert sum(f["allocated_bytes"]["current"] for f in by.values()) == m.memory_allocated()
        assert by["torch"]["allocation"]["current"] >= 1
        assert by["torch"]["requested_bytes"]["peak"] >= 3 << 20
        s = ck.Stream()
        lib.cudakit_record_stream(p, s.cuda_stream)
    finally:
        lib.cudakit_free(p, 3 << 20, 0, None)
    assert m.memory_allocated_by("torch") == t0
    assert not lib.cudakit_malloc(1 << 62, 0, None)  # OOM: nullptr across the C ABI
    assert b"malloc" in lib.cudakit_last_error() and b"memory" in lib.cudakit_last_error().lower()
    lib.cudakit_empty_cache()


def test_memory_allocated_by_rejects_unknown_framework(ck):
    with pytest.raises(ValueError, match="'framework' must be one of 'cudakit', 'torch', 'cupy', "
                                         "not 'jax'"):
        ck.memory.memory_allocated_by("jax")


def _fake_cupy():
    cupy = types.ModuleType("cupy")
    stream = types.SimpleNamespace(ptr=0)

    class PythonFunctionAllocator:
        def __init__(self, malloc, free):
            self._malloc, self._free = malloc, free

        def malloc(self, size):  # CuPy's MemoryPointer stand-in: (ptr, free)
            ptr = self._malloc(size, 0)
            return ptr, lambda: self._free(ptr, 0)

    cupy.cuda = types.SimpleNamespace(
        get_current_stream=lambda: stream,
        memory=types.SimpleNamespace(PythonFunctionAllocator=PythonFunctionAllocator),
        set_allocator=lambda a: setattr(cupy, "installed", a))
    return cupy


def test_cupy_allocations_count_as_cupy(ck, monkeypatch):
    cupy = _fake_cupy()
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    m = ck.memory
    m.use_with_cupy()
    c0 = m.memory_allocated_by("cupy")
    ptr, free = cupy.installed(1 << 20)
    assert ptr and m.memory_allocated_by("cupy") == c0 + (1 << 20)
    assert any(b["address"] == ptr for s in m.memory_snapshot() for b in s["blocks"])
    free()
    assert m.memory_allocated_by("cupy") == c0
    assert m.memory_stats_by_framework()["cupy"]["allocation"]["freed"] >= 1


def test_allocator_backend_is_cudakits(interop, torch):
    # torch.cuda.get_allocator_backend() reads torch._C._cuda_getAllocatorBackend at call time;
    # torch's pluggable layer answers "pluggable" there.
    torch._C._cuda_getAllocatorBackend = lambda: "pluggable"
    interop.use_with_torch()
    assert torch._C._cuda_getAllocatorBackend() == interop.get_allocator_backend()
    assert torch._C._cuda_getAllocatorBackend() in ("native", "cudaMallocAsync")


def test_plugin_allocation_with_the_gil_released_keeps_its_python_stack(ck):
    # torch's ops release the GIL before they allocate through the plug-in; torch's own
    # allocator still records their Python stacks (its traceback takes the GIL back), and
    # torch's test_memory_plots_* look for the allocating function's name in the snapshot.
    # ctypes releases the GIL around the call just as torch does.
    lib = _plugin()
    m = ck.memory
    m._record_memory_history("all", context="all", stacks="python")
    try:
        def the_allocating_function():
            return lib.cudakit_malloc(1 << 20, 0, None)

        p = the_allocating_function()
        assert p
        try:
            snap = m._snapshot()
        finally:
            lib.cudakit_free(p, 1 << 20, 0, None)
    finally:
        m._record_memory_history(None)
    names = [f.get("name") for seg in snap["segments"] for b in seg["blocks"]
             if b.get("state") == "active_allocated" for f in b.get("frames", [])]
    assert "the_allocating_function" in names, names[:20]


def test_caching_allocator_enable_reaches_the_allocations_torch_makes(interop, torch):
    # torch's test_cachingAllocator_raw_alloc: with caching disabled, torch's raw_alloc goes
    # straight to the device and torch's statistics do not see it; enabled again, they do.
    from cudakit import _C

    interop.use_with_torch()
    hooks = _C._mem_torch_hooks()
    malloc = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                              ctypes.c_void_p)(hooks["malloc"])
    free = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                            ctypes.c_void_p)(hooks["free"])

    def requested_by(nbytes):
        start = torch.cuda.memory.memory_stats()["requested_bytes.all.allocated"]
        p = malloc(nbytes, 0, None)
        assert p
        finish = torch.cuda.memory.memory_stats()["requested_bytes.all.allocated"]
        free(p, nbytes, 0, None)
        return finish - start

    torch.cuda.memory.caching_allocator_enable(False)
    try:
        assert requested_by(1 << 20) == 0
        assert torch.caching_enable_calls == [False]  # torch's own flag is set too
        reserved = torch.cuda.memory.memory_stats()["reserved_bytes.all.current"]
        assert requested_by(3 << 20) == 0
        assert torch.cuda.memory.memory_stats()["reserved_bytes.all.current"] == reserved
    finally:
        torch.cuda.memory.caching_allocator_enable(True)
    assert requested_by(1 << 20) == 1 << 20
