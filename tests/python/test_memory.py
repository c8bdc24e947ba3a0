"""cudakit.memory: torch.cuda.memory's names and behaviour on the current backend."""
import gc
import json
import multiprocessing
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


def test_memory_stats_is_a_fresh_ordered_dict_per_call():
    # torch returns a new collections.OrderedDict each call; the fast binding builds one with
    # cached key strings, so a caller's edits must not leak into the next call.
    import collections
    p = mem.caching_allocator_alloc(3 << 20)
    try:
        a = mem.memory_stats()
        assert type(a) is collections.OrderedDict
        a["allocated_bytes.all.current"] = -1
        a.move_to_end("allocation.all.current")
        b = mem.memory_stats()
        assert b is not a and list(b) == sorted(b)
        assert b["allocated_bytes.all.current"] == mem.memory_allocated() > 0
        assert b["allocated_bytes.large_pool.current"] >= 3 << 20
        assert b["framework.cudakit.allocation.current"] >= 1
    finally:
        mem.caching_allocator_delete(p)


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


# ---- IPC of memory in expandable segments (issue 15 item 1) ----
# The exporter is a spawned child; this process (its parent) imports: a parent may always take
# a child's descriptors with pidfd_getfd, whatever Yama's ptrace_scope says.
_EXP_N = (19 << 20) // 8  # float64 elements: several 8 MiB chunks


def _expandable_exporter(conn, n):
    import cudakit
    import cudakit.memory as mem
    mem._set_allocator_settings("expandable_segments:True")
    lead = cudakit.empty(5 << 20, dtype=cudakit.uint8)  # the tensor then starts inside a chunk
    t = cudakit.arange(n, dtype=cudakit.float64)
    cudakit.synchronize()
    try:
        conn.send(mem._ipc_export(t.data_ptr()))
    except NotImplementedError as e:  # cuda: the driver refused shareable chunks
        conn.send(str(e))
        return
    if conn.recv() == "check":
        conn.send(float(t.sum()))  # sees what the importer wrote
    conn.recv()  # the importer is done
    del lead, t


class _DeviceView:
    """A DLPack producer (legacy capsule) of n float64 at a raw device address, for
    cudakit.from_dlpack. Must outlive the tensor made from it (it owns the DLPack struct)."""

    def __init__(self, ptr, n, device):
        import ctypes as c

        class DLDevice(c.Structure):
            _fields_ = [("device_type", c.c_int32), ("device_id", c.c_int32)]

        class DLDataType(c.Structure):
            _fields_ = [("code", c.c_uint8), ("bits", c.c_uint8), ("lanes", c.c_uint16)]

        class DLTensor(c.Structure):
            _fields_ = [("data", c.c_void_p), ("device", DLDevice), ("ndim", c.c_int32),
                        ("dtype", DLDataType), ("shape", c.POINTER(c.c_int64)),
                        ("strides", c.POINTER(c.c_int64)), ("byte_offset", c.c_uint64)]

        class DLManagedTensor(c.Structure):
            _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", c.c_void_p),
                        ("deleter", c.c_void_p)]

        self._c = c
        self._device = device
        self._shape = (c.c_int64 * 1)(n)
        tensor = DLTensor(ptr, DLDevice(2, device), 1, DLDataType(2, 64, 1), self._shape, None, 0)
        self._managed = DLManagedTensor(tensor, None, None)  # kDLCUDA, kDLFloat 64

    def __dlpack_device__(self):
        return (2, self._device)

    def __dlpack__(self, stream=None, **kwargs):
        new = self._c.pythonapi.PyCapsule_New
        new.restype = self._c.py_object
        new.argtypes = [self._c.c_void_p, self._c.c_char_p, self._c.c_void_p]
        return new(self._c.addressof(self._managed), b"dltensor", None)


def _share_expandable_with_child(strict):
    ctx = multiprocessing.get_context("spawn")
    conn, child_conn = ctx.Pipe()
    proc = ctx.Process(target=_expandable_exporter, args=(child_conn, _EXP_N))
    proc.start()
    n = _EXP_N
    try:
        handle = conn.recv()
        if isinstance(handle, str):
            assert not strict, handle
            pytest.skip(handle)
        data, device, offset, size = handle
        assert len(data) > 64 and (len(data) - 64) % 32 == 0 and offset > 0 and size == 8 * n
        with pytest.raises(ValueError, match="chunk table"):
            mem._ipc_import((data[:64], device, offset, size))
        with pytest.raises(ValueError, match="at least 64 bytes"):
            mem._ipc_import((data[:10], device, offset, size))
        ptr = mem._ipc_import(handle)
        producer = _DeviceView(ptr, n, device)
        view = cudakit.from_dlpack(producer)
        assert float(view.sum()) == n * (n - 1) / 2, "the importer does not see the exporter's data"
        view.fill_(7.0)
        cudakit.synchronize()
        conn.send("check")
        assert conn.recv() == 7.0 * n, "the exporter does not see the importer's data"
        conn.send("done")
        proc.join(60)
        assert proc.exitcode == 0
        assert float(view.sum()) == 7.0 * n  # still mapped here after the exporter exited
        del view, producer
        mem._ipc_close(ptr)
        mem.ipc_collect()
        # The exporter is gone: its handle is stale, and says so.
        with pytest.raises((RuntimeError, OSError), match="stale"):
            mem._ipc_import(handle)
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(60)


def test_ipc_of_expandable_segments_across_processes():
    _share_expandable_with_child(strict=False)


@pytest.mark.gpu
def test_ipc_of_expandable_segments_on_the_gpu():
    # The cuda path (cuMemCreate chunks with POSIX descriptors, cuMemExportToShareableHandle,
    # cuMemImportFromShareableHandle): on a GPU the driver must share them, no skip.
    _share_expandable_with_child(strict=True)


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
p = mem.caching_allocator_alloc(4 << 20)  # large pool: small blocks keep plain segments
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

def test_a_freed_blocks_snapshot_keeps_the_size_last_requested_of_it(ck):
    # As torch's snapshots: the inactive block a freed tensor leaves shows the size that was
    # requested of it (torch's test_memory_plots looks for it there once
    # trace_plot(filter_freed=True) has dropped the frees from the trace).
    m = ck.memory
    m.empty_cache()
    requested_before = m.memory_stats()["requested_bytes.all.current"]
    x = ck.rand(128, 128, device="cuda")
    addr = x.data_ptr()
    del x
    blocks = [b for s in m.memory_snapshot() for b in s["blocks"]
              if b["address"] <= addr < b["address"] + b["size"]]
    assert len(blocks) == 1 and blocks[0]["state"] == "inactive", blocks
    assert blocks[0]["requested_size"] == 128 * 128 * 4
    # the statistics count allocated blocks only
    assert m.memory_stats()["requested_bytes.all.current"] == requested_before


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


# The bindings' known-stack table (issue 31) hands out a cached stack when the frame records
# match: every entry must still show exactly the frames of its own call. Repeated call sites,
# two call paths through one wrapper (one table entry, missing in turn), two calls differing
# only in one frame's offset, a generator, a call back from C (sorted's key: a shim record on
# 3.12) and another thread.
def test_history_python_frames_are_each_calls_own():
    import threading
    import traceback

    calls = []

    def alloc_here():
        callers = traceback.extract_stack()[:-1]
        p = mem.caching_allocator_alloc(512)  # ALLOC-LINE
        calls.append((p, callers))
        mem.caching_allocator_delete(p)

    def path_a():
        alloc_here()

    def path_b():
        alloc_here()

    def gen():
        for _ in range(2):
            alloc_here()
            yield

    mem._record_memory_history(context="all", stacks="python", max_entries=100000)
    try:
        for _ in range(3):
            path_a()
            path_b()
            alloc_here()
            alloc_here()  # the same frames as the line above but for this one's offset
        list(gen())
        sorted([3, 1, 2], key=lambda v: (alloc_here(), v)[1])
        t = threading.Thread(target=path_a)
        t.start()
        t.join()
        traces = mem._snapshot()["device_traces"][0]
    finally:
        mem._record_memory_history(None)
    alloc_line = next(i for i, line in enumerate(open(__file__).read().splitlines(), 1)
                      if line.endswith("# ALLOC-LINE"))
    allocs = [e for e in traces if e["action"] == "alloc" and e["size"] == 512]
    assert [e["addr"] for e in allocs] == [p for p, _ in calls]  # one entry per call, in order
    for e, (p, callers) in zip(allocs, calls):
        got = [(f["name"], f["line"]) for f in e["frames"]]
        want = [("alloc_here", alloc_line)] + [(c.name, c.lineno) for c in reversed(callers)]
        assert got[0][0] == "caching_allocator_alloc", got
        assert got[1:] == want[:len(got) - 1], (got, want)


# torch's own test_memory_plots_* (test/test_cuda.py), written against cudakit's API: what is
# in the snapshot under each `context`, and which history switches keep the trace.
@pytest.mark.parametrize("context", ["alloc", "all", "state"])
def test_history_context_decides_which_functions_appear(context):
    mem.empty_cache()
    mem._record_memory_history(context=context)
    try:
        x = None

        def thealloc():
            nonlocal x
            x = cudakit.rand(3, 4, device="cuda")

        def thefree():
            nonlocal x
            del x

        thealloc()
        thefree()
        text = json.dumps(mem._snapshot())
        assert ("thefree" in text) == (context == "all")
        assert ("thealloc" in text) == (context != "state")
    finally:
        mem._record_memory_history(None)


@pytest.mark.parametrize("context", ["alloc", "all", "state"])
def test_the_releasing_calls_stack_is_on_segment_frees_with_context_all(context):
    mem.empty_cache()
    mem._record_memory_history(context=context)
    try:
        # Memory of its own to give back: a small tensor's 2 MiB segment (the GPU's sanitizer
        # pass), or a 4 MiB one carved from a cached segment (the whole emulated suite), may
        # share its segment with live blocks of earlier tests, and then empty_cache frees no
        # segment at all. 64 MiB is more than any cached block or expandable chunk (32 MiB):
        # at least a new segment or a whole chunk goes back.
        x = cudakit.empty(64 << 20, dtype=cudakit.uint8, device="cuda")
        del x
        mem.empty_cache()
        text = json.dumps(mem._snapshot())
        assert ("empty_cache" in text) == (context == "all")
    finally:
        mem._record_memory_history(None)


def test_history_settings_changed_while_recording_keep_the_trace():
    mem.empty_cache()
    x = None

    def should_capture1():
        nonlocal x
        x = cudakit.rand(4, 4, device="cuda")

    def should_not_capture():
        nonlocal x
        x = cudakit.rand(3, 4, device="cuda")

    def should_capture2():
        nonlocal x
        x = cudakit.rand(4, 4, device="cuda")

    try:
        mem._record_memory_history(context="all", stacks="python")
        should_capture1()
        mem._record_memory_history(context=None)
        should_not_capture()
        mem._record_memory_history(context="all", stacks="python")
        should_capture2()
        text = json.dumps(mem._snapshot())
        assert "should_capture1" in text
        assert "should_not_capture" not in text
        assert "should_capture2" in text
        mem._record_memory_history(context="all", stacks="python", clear_history=True)
        assert mem._snapshot()["device_traces"] in ([], [[]]) or \
            all(not t for t in mem._snapshot()["device_traces"])
    finally:
        mem._record_memory_history(None)
    assert all(not t for t in mem._snapshot()["device_traces"])  # off drops the trace


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

    # A history of this test's own events only: earlier tests of the session may have left
    # recording on, and the page draws the newest entries of a long history.
    mem._record_memory_history(enabled=None)
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
    mem._record_memory_history(enabled=None)
    # The 40 MiB allocation is in the page's data (its band's size), whatever segment it was
    # carved from (a cached expandable segment of an earlier test is larger than 40 MiB).
    assert str(40 << 20) in page, "the 40 MiB allocation is missing from the page"


def test_mempool_with_pluggable_allocator_binds(ck):
    # Behaviour (segments drawn from the allocator, returned on release) is covered by
    # tests/cpp/test_memory_pluggable.cpp; here: the torch signature reaches it.
    alloc = ck.memory.CUDAPluggableAllocator(ck.memory.plugin_path(), "cudakit_malloc",
                                             "cudakit_free")
    pool = ck.memory.MemPool(allocator=alloc, use_on_oom=False)
    assert pool.allocator is alloc
    assert pool.use_count() >= 1
    assert pool.id[0] > 0


def test_mempool_whose_allocator_is_cudakit_itself_is_refused_not_deadlocked(ck):
    # The natural first try of a user who read that cudakit ships a pluggable allocator: its
    # functions allocate from the very allocator the pool belongs to, under that allocator's
    # lock. It used to hang for good; now the allocation says what to do instead.
    alloc = ck.memory.CUDAPluggableAllocator(ck.memory.plugin_path(), "cudakit_malloc",
                                             "cudakit_free")
    pool = ck.memory.MemPool(allocator=alloc)
    before = ck.memory.memory_allocated()
    with ck.memory.use_mem_pool(pool):
        with pytest.raises(ValueError, match="would deadlock.*use MemPool\\(\\)"):
            ck.empty(1024, device="cuda")
    assert ck.memory.memory_allocated() == before  # nothing leaked by the refused call
    x = ck.ones(1024, device="cuda")  # the allocator still works
    assert float(x.sum().item()) == 1024.0
    with ck.memory.use_mem_pool(ck.memory.MemPool()):
        y = ck.ones(16, device="cuda")  # and so does a pool of its own
    assert float(y.sum().item()) == 16.0


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
