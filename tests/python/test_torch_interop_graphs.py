"""torch's allocator entry points that CUDA graph trees (torch.compile(mode="reduce-overhead"))
and torch's memory tools call, answered by cudakit under use_with_torch(): a pool's live
allocations, checkpointing a pool's state and putting it back, the out-of-memory type and
observers, history metadata. Against fake_torch.py (allocating for real through cudakit, as
torch's plug-in does), written as torch's own tests (TestBlockStateAbsorption) use them."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import fake_torch  # noqa: E402
from test_torch_interop import interop  # noqa: E402,F401  (fixture)


@pytest.fixture
def torch(monkeypatch):
    t = fake_torch.make()
    monkeypatch.setitem(sys.modules, "torch", t)
    return t


def pool_blocks(torch, pool):
    return [(b["size"], b["state"]) for s in torch.cuda.memory_snapshot()
            if s["segment_pool_id"] == pool for b in s["blocks"]]


def test_check_pool_live_allocations(interop, torch):
    interop.use_with_torch()
    pool = torch.cuda.graph_pool_handle()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, pool=pool):
        out = torch.empty(16, device="cuda")

    def check(live):
        return torch._C._cuda_checkPoolLiveAllocations(0, pool, live)

    assert check({out.data_ptr()})
    assert not check({out.data_ptr(), 0})
    assert not check(set())
    del out
    assert check(set())
    g.reset()


def test_checkpoint_state_is_put_back_and_gives_storages_their_deleters(interop, torch):
    # test_assigning_back_deleter_fns_to_tensor's sequence: state after the recording, the
    # outputs die, replay outputs are rebuilt from data pointers (no deleter), the state is
    # put back: the blocks are allocated again and the storages passed free them when they die.
    interop.use_with_torch()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        outputs = [torch.empty(2 << 20, device="cuda"), torch.empty(512, device="cuda"),
                   torch.empty(512, device="cuda")]
        tmp = torch.empty(4096, device="cuda")
        del tmp
    pool = g.pool()
    ptrs = [t.data_ptr() for t in outputs]
    before = pool_blocks(torch, pool)
    state = torch._C._cuda_getCheckpointState(0, pool)
    assert "AllocatorState" in repr(state)

    del outputs
    assert torch._C._cuda_checkPoolLiveAllocations(0, pool, set())
    rebuilt = [torch._C._construct_storage_from_data_pointer(p, 0, 512) for p in ptrs]
    assert not torch._C._has_Standard_Deleter(rebuilt[0]._cdata)
    torch._C._cuda_setCheckpointPoolState(0, state, [], [rebuilt[0]._cdata, rebuilt[1]._cdata])
    assert torch._C._cuda_checkPoolLiveAllocations(0, pool, set(ptrs))
    assert pool_blocks(torch, pool) == before  # the same layout and states
    assert torch._C._has_Standard_Deleter(rebuilt[0]._cdata)
    rebuilt[0] = None
    assert torch._C._cuda_checkPoolLiveAllocations(0, pool, set(ptrs[1:]))
    rebuilt[1] = None
    assert torch._C._cuda_checkPoolLiveAllocations(0, pool, {ptrs[2]})
    rebuilt[2] = None  # not passed: no deleter, the block stays allocated
    assert torch._C._cuda_checkPoolLiveAllocations(0, pool, {ptrs[2]})
    torch._C._cuda_cudaCachingAllocator_raw_delete(ptrs[2])  # cudagraph trees' dead outputs
    assert torch._C._cuda_checkPoolLiveAllocations(0, pool, set())
    with pytest.raises(RuntimeError, match="not allocated here"):
        torch._C._cuda_cudaCachingAllocator_raw_delete(ptrs[2])  # freed twice
    g.reset()


def test_checkpoint_frees_stale_storages_only_when_given(interop, torch, capfd):
    # test_additional_free_following_checkpoint: a tensor of a later recording into the same
    # pool is freed by putting the state back; it must be passed as stale, and then loses its
    # deleter (its death frees nothing that may be someone else's by then).
    interop.use_with_torch()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        first = torch.empty(512, device="cuda")
    pool = g.pool()
    state = torch._C._cuda_getCheckpointState(0, pool)
    g2 = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g2, pool=pool):
        second = torch.empty(512, device="cuda")
    with pytest.raises(RuntimeError, match="stale tensors"):
        torch._C._cuda_setCheckpointPoolState(0, state, [], [])
    assert torch._C._cuda_checkPoolLiveAllocations(0, pool, {first.data_ptr(), second.data_ptr()})
    torch._C._cuda_setCheckpointPoolState(0, state, [second.untyped_storage()._cdata], [])
    assert torch._C._cuda_checkPoolLiveAllocations(0, pool, {first.data_ptr()})
    assert not torch._C._has_Standard_Deleter(second.untyped_storage()._cdata)
    del second
    assert torch._C._cuda_checkPoolLiveAllocations(0, pool, {first.data_ptr()})
    assert "not a live cudakit allocation" not in capfd.readouterr().err
    del first
    g.reset()
    g2.reset()


def test_checkpoint_state_of_a_released_pool_is_refused(interop, torch):
    interop.use_with_torch()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = torch.empty(512, device="cuda")
    pool = g.pool()
    state = torch._C._cuda_getCheckpointState(0, pool)
    del out
    g.reset()
    torch.cuda.empty_cache()
    with pytest.raises(ValueError, match="no pool"):
        torch._C._cuda_setCheckpointPoolState(0, state, [], [])
    with pytest.raises(TypeError, match="getCheckpointState"):
        torch._C._cuda_setCheckpointPoolState(0, object(), [], [])


def test_out_of_memory_is_torchs_type(interop, torch):
    interop.use_with_torch()
    from cudakit import _C
    calls = []
    torch._C._cuda_attach_out_of_memory_observer(lambda *a: calls.append(a))
    with pytest.raises(TypeError, match="callable"):
        torch._C._cuda_attach_out_of_memory_observer(42)
    # the hook raises it (tests/cpp/test_memory_plugin.cpp); here: it was handed to cudakit
    with pytest.raises(TypeError, match="exception class"):
        _C._mem_torch_set_oom_type(int)


def test_history_metadata_and_skip_actions(interop, torch):
    interop.use_with_torch()
    mem = torch.cuda.memory
    assert not torch._C._cuda_isHistoryEnabled()
    mem._set_memory_metadata("step 1")
    assert mem._get_memory_metadata() == "step 1"
    try:
        mem._record_memory_history(context="all", stacks="python",
                                   skip_actions=["free_requested"])
        assert torch._C._cuda_isHistoryEnabled()
        x = torch.empty(128 * 128 * 4, device="cuda")
        del x
        mem._set_memory_metadata("")
        y = torch.empty(4096, device="cuda")
        del y
        trace = mem._snapshot()["device_traces"][0]
        actions = {e["action"] for e in trace}
        assert "free_requested" not in actions and {"alloc", "free_completed"} <= actions
        assert all(e["compile_context"] == "N/A" for e in trace)
        sized = [e for e in trace if e["action"] == "alloc"]
        assert sized[-2]["user_metadata"] == "step 1" and sized[-1]["user_metadata"] == ""
    finally:
        mem._record_memory_history(None, clear_history=True)
    assert not torch._C._cuda_isHistoryEnabled()
    mem._record_memory_history(context="all", stacks="python")
    try:
        z = torch.empty(8192, device="cuda")
        trace = mem._snapshot()["device_traces"][0]
        assert trace and all(e["size"] >= 8192 or e["action"].startswith("segment")
                             for e in trace), "events before clear_history are gone"
        del z
    finally:
        mem._record_memory_history(None)


def test_mempool_with_torchs_pluggable_allocator(interop, torch):
    # torch.cuda.MemPool(allocator=torch.cuda.memory.CUDAPluggableAllocator(...)): the pool's
    # segments come from the user's functions, and go back to them when the pool is released.
    import ctypes
    interop.use_with_torch()
    ALLOC = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p)
    FREE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p)
    buffers, calls = {}, []

    @ALLOC
    def dummy_alloc(size, device, stream):
        buf = ctypes.create_string_buffer(size)
        buffers[ctypes.addressof(buf)] = buf
        calls.append(("alloc", size))
        return ctypes.addressof(buf)

    @FREE
    def dummy_free(ptr, size, device, stream):
        calls.append(("free", size))
        buffers.pop(ptr)

    # what torch.cuda.memory.CUDAPluggableAllocator(path, "dummy_alloc", "dummy_free") does
    address = lambda f: ctypes.cast(f, ctypes.c_void_p).value  # noqa: E731
    allocator = torch.cuda.memory._CUDAAllocator(
        torch._C._cuda_customAllocator(address(dummy_alloc), address(dummy_free)))
    pool = torch.cuda.MemPool(allocator=allocator)
    assert pool.allocator is allocator and pool.use_count() == 1
    with torch.cuda.use_mem_pool(pool):
        x = torch.empty(4096, device="cuda")
    assert calls == [("alloc", 2 << 20)]
    assert any(b["address"] == x.data_ptr() for s in pool.snapshot() for b in s["blocks"])
    del x
    assert calls == [("alloc", 2 << 20)], "cached while the pool lives"
    del pool
    assert calls == [("alloc", 2 << 20), ("free", 2 << 20)]
    assert not buffers
    with pytest.raises(NotImplementedError, match="created before use_with_torch"):
        torch.cuda.MemPool(allocator=torch.cuda.memory._CUDAAllocator(object()))


def test_torch_profiler_sees_allocations_through_the_hooks(interop):
    # torch.profiler(profile_memory=True) (test_memory_profiler_viz): torch's own allocator
    # calls c10::reportMemoryUsageToProfiler; under use_with_torch() the hook table does.
    # Stand-ins with c10's signatures, called as torch's pluggable allocator calls the hooks.
    import ctypes

    from cudakit import _C
    hooks = _C._mem_torch_hooks()
    malloc = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                              ctypes.c_void_p)(hooks["malloc"])
    free = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                            ctypes.c_void_p)(hooks["free"])
    wanted = [True]
    seen = []
    enabled = ctypes.CFUNCTYPE(ctypes.c_bool)(lambda: wanted[0])
    # c10::Device is two bytes (type, index), passed in one register
    report = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_size_t,
                              ctypes.c_size_t, ctypes.c_uint16)(
        lambda p, n, alloc, res, dev: seen.append((p, n, alloc, res, dev & 0xFF, dev >> 8)))
    addr = lambda f: ctypes.cast(f, ctypes.c_void_p).value  # noqa: E731
    _C._mem_torch_set_memory_reporter(addr(enabled), addr(report))
    try:
        p = malloc(1000, 0, None)
        allocated = interop.memory_stats()["allocated_bytes.all.current"]
        free(p, 1000, 0, None)
        wanted[0] = False  # the profiler stopped: nothing more is reported
        free(malloc(1000, 0, None), 1000, 0, None)
    finally:
        _C._mem_torch_set_memory_reporter(0, 0)
    assert [(a[0], a[1], a[4], a[5]) for a in seen] == [(p, 1024, 1, 0), (p, -1024, 1, 0)]
    assert seen[0][2] == allocated and seen[1][2] == allocated - 1024  # totals after the change
    assert seen[0][3] >= allocated
    with pytest.raises(ValueError, match="both"):
        _C._mem_torch_set_memory_reporter(addr(enabled), 0)


# A stand-in libc10 with c10's declarations (compiled here, so the compiler mangles the names):
# its report function counts the calls and keeps the last one's arguments.
_STAND_IN_LIBC10 = r"""
#include <cstddef>
#include <cstdint>
namespace c10 {
struct Device { std::int8_t type; std::int8_t index; };
bool memoryProfilingEnabled() { return true; }
static int g_reports = 0;
static std::int64_t g_last_size = 0;
static int g_last_type = -1;
void reportMemoryUsageToProfiler(void*, std::int64_t alloc_size, std::size_t, std::size_t,
                                 Device device) {
  ++g_reports; g_last_size = alloc_size; g_last_type = device.type;
}
}  // namespace c10
extern "C" int reports() { return c10::g_reports; }
extern "C" long long last_size() { return c10::g_last_size; }
extern "C" int last_type() { return c10::g_last_type; }
"""


def test_use_with_torch_finds_libc10s_profiler_functions_by_their_compiled_names(
        interop, tmp_path):
    # The symbol names _install_profiler_reporter looks up must be what a C++ compiler makes of
    # c10's declarations (a hand-mangled name once had a wrong length and matched nothing on
    # any torch, so torch.profiler saw no allocation on cudakit's pool).
    import ctypes
    import shutil
    import subprocess

    from cudakit import _C, _torch_interop
    cxx = shutil.which("g++") or shutil.which("c++")
    if not cxx:
        pytest.skip("needs a C++ compiler to build the stand-in libc10")
    lib_dir = tmp_path / "torch" / "lib"
    lib_dir.mkdir(parents=True)
    (tmp_path / "torch" / "__init__.py").write_text("")
    src = tmp_path / "c10.cpp"
    src.write_text(_STAND_IN_LIBC10)
    so = lib_dir / "libc10.so"
    subprocess.run([cxx, "-shared", "-fPIC", "-O1", "-o", str(so), str(src)], check=True)
    lib = ctypes.CDLL(str(so))  # loaded, as torch has loaded its libc10 before cudakit looks
    fake = type(sys)("torch")
    fake.__file__ = str(tmp_path / "torch" / "__init__.py")
    hooks = _C._mem_torch_hooks()
    malloc = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                              ctypes.c_void_p)(hooks["malloc"])
    free = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                            ctypes.c_void_p)(hooks["free"])
    try:
        assert _torch_interop._install_profiler_reporter(fake), \
            _torch_interop._state.get("profiler_reporter")
        assert _torch_interop._state["profiler_reporter"] == f"installed from {so}"
        p = malloc(3000, 0, None)
        assert (lib.reports(), lib.last_size(), lib.last_type()) == (1, 3072, 1)  # CUDA = 1
        free(p, 3000, 0, None)
        assert (lib.reports(), lib.last_size()) == (2, -3072)
    finally:
        _C._mem_torch_set_memory_reporter(0, 0)
