"""A stand-in for the parts of PyTorch that cudakit.memory.use_with_torch touches, shaped as
torch 2.x is: torch.cuda.memory's Python functions look up the ``torch._C`` entry points at
call time and call each other through their module's globals; torch.cuda re-exports them;
with a pluggable allocator installed, the statistics/snapshot/history entry points raise
"CUDAPluggableAllocator does not yet support ...". Lets CI test the patching layer without
torch (the real thing is tested on the GPU host: test_torch_interop_gpu.py)."""
from __future__ import annotations

import collections
import contextlib
import itertools
import sys
import types
import weakref


def _unsupported(what: str):
    def fn(*args, **kwargs):
        raise RuntimeError(f"CUDAPluggableAllocator does not yet support {what}. If you need it, "
                           "please file an issue describing your use case.")
    fn.__name__ = f"unsupported_{what}"
    return fn


class FakeRawAllocator:
    """torch._C._cuda_CUDAAllocator from _cuda_customAllocator: records the hook addresses."""

    SETTERS = ("set_init_fn", "set_reset_fn", "set_memory_fraction_fn", "set_base_alloc_fn",
               "set_record_stream_fn", "set_begin_allocate_to_pool",
               "set_end_allocate_to_pool_fn", "set_release_pool")

    def __init__(self, malloc: int, free: int, without: tuple[str, ...] = ()):
        self.addresses = {"malloc": malloc, "free": free}
        for setter in self.SETTERS:
            if setter not in without:
                setattr(self, setter, self._setter(setter))

    def _setter(self, name):
        def set_fn(address: int) -> None:
            assert isinstance(address, int) and address > 0, (name, address)
            self.addresses[name] = address
        return set_fn


def make(initialized: bool = True, without_setters: tuple[str, ...] = (),
         swap_error: str | None = None) -> types.ModuleType:
    torch = types.ModuleType("torch")
    torch.__version__ = "0.0+fake"
    C = types.ModuleType("torch._C")
    torch._C = C
    C._cuda_memoryStats = _unsupported("getDeviceStats")
    C._cuda_resetAccumulatedMemoryStats = _unsupported("resetAccumulatedStats")
    C._cuda_resetPeakMemoryStats = _unsupported("resetPeakStats")
    C._cuda_memorySnapshot = _unsupported("snapshot")
    C._cuda_record_memory_history = _unsupported("recordHistory")
    C._cuda_record_memory_history_legacy = _unsupported("recordHistory")
    C._cuda_getMemoryFraction = _unsupported("getMemoryFraction")
    C._accelerator_getDeviceStats = _unsupported("getDeviceStats")
    # torch 2.11 asks its own caching allocator, which stays uninitialised under a plug-in
    C._accelerator_isAllocatorInitialized = lambda: False
    torch.settings_calls = []
    C._cuda_cudaCachingAllocator_set_allocator_settings = torch.settings_calls.append
    torch.caching_enable_calls = []  # torch's own flag (its native allocator reads it)
    C._cuda_cudaCachingAllocator_enable = torch.caching_enable_calls.append
    torch.empty_cache_calls = []
    C._cuda_emptyCache = lambda: torch.empty_cache_calls.append(1)
    C._cuda_customAllocator = lambda m, f: FakeRawAllocator(m, f, without_setters)
    torch.current_allocator = None

    def change(raw):
        if swap_error:
            raise RuntimeError(swap_error)
        torch.current_allocator = raw
    C._cuda_changeCurrentAllocator = change
    # Pool routing as torch's allocator does it through the plug-in's hooks: begin creates the
    # pool or adds a use and routes this thread's allocations, end stops routing, release
    # drops the use.
    torch.pool_calls = []
    routes: dict = {}

    def begin(d, p):
        from cudakit import _C as ck
        torch.pool_calls.append(("begin", d, p))
        ref = ck._MemPool(id=tuple(ck._mem_torch_pool_id(p)), device=d)
        routes.setdefault((d, tuple(p)), []).append([ref, ck._UseMemPool(ref, d)])

    def end(d, p):
        torch.pool_calls.append(("end", d, p))
        entry = routes[(d, tuple(p))][-1]
        entry[1].close()

    def release(d, p):
        torch.pool_calls.append(("release", d, p))
        routes[(d, tuple(p))].pop()

    C._cuda_beginAllocateCurrentThreadToPool = begin
    C._cuda_endAllocateToPool = end
    C._cuda_releasePool = release

    cuda = types.ModuleType("torch.cuda")
    memory = types.ModuleType("torch.cuda.memory")
    torch.cuda = cuda
    cuda.memory = memory
    state = {"initialized": initialized}
    handles = itertools.count(1)
    cuda.is_initialized = lambda: state["initialized"]
    cuda.current_device = lambda: 0
    cuda._get_device_index = lambda d, optional=False: 0 if d is None else int(getattr(d, "index", d) or 0)
    cuda.graph_pool_handle = lambda: (0, 1_000_000 + next(handles))
    cuda.is_current_stream_capturing = lambda: False
    g = memory.__dict__
    g.update(torch=torch, collections=collections, sys=sys, is_initialized=cuda.is_initialized,
             _get_device_index=cuda._get_device_index)
    exec(_MEMORY_SOURCE, g)
    for name in _MEMORY_EXPORTS:
        setattr(cuda, name, g[name])

    _add_storages_and_graphs(torch, C, cuda, memory, handles)
    return torch


def _add_storages_and_graphs(torch, C, cuda, memory, handles) -> None:
    """Storages, tensors, CUDA graphs and the storage/deleter entry points cudagraph trees use,
    allocating for real through cudakit as torch's plug-in does: a storage's standard deleter is
    torch's raw_delete, which frees only pointers torch's plug-in bookkeeping saw allocated
    ("Trying to free a pointer not allocated here" otherwise)."""
    from cudakit import _C as ck

    torch.OutOfMemoryError = type("OutOfMemoryError", (RuntimeError,), {})
    cuda.OutOfMemoryError = torch.OutOfMemoryError
    torch.plugged = {}  # CUDAPluggableAllocator's allocation_metadata_: data ptr -> size

    def raw_delete(ptr):
        if ptr not in torch.plugged:
            raise RuntimeError("Trying to free a pointer not allocated here")
        del torch.plugged[ptr]
        ck._mem_delete(ptr)

    class StorageBase:
        def _share_cuda_(self):
            return ("handle", 0)

        @staticmethod
        def _new_shared_cuda(*args):
            return "storage"

    class UntypedStorage(StorageBase):
        _impls: "weakref.WeakValueDictionary[int, UntypedStorage]" = weakref.WeakValueDictionary()

        def __init__(self, ptr=0, nbytes=0, deleter=None):
            self._ptr, self._nbytes, self._deleter = ptr, nbytes, deleter
            self._cdata = id(self)  # the StorageImpl's address in torch
            UntypedStorage._impls[self._cdata] = self

        def data_ptr(self):
            return self._ptr

        def nbytes(self):
            return self._nbytes

        def __del__(self):
            if self._deleter is not None:
                self._deleter(self._ptr)

        @classmethod
        def _new_with_weak_ptr(cls, cdata):
            return cls._impls.get(cdata)

    torch.UntypedStorage = UntypedStorage

    class Tensor:
        def __init__(self, storage):
            self._storage = storage

        def untyped_storage(self):
            return self._storage

        def data_ptr(self):
            return self._storage.data_ptr()

    def empty(nbytes, device=None):
        """torch.empty(nbytes, dtype=torch.uint8, device="cuda") through the plug-in."""
        ptr = ck._mem_alloc_for("torch", nbytes, None, None)
        torch.plugged[ptr] = nbytes
        return Tensor(UntypedStorage(ptr, nbytes, raw_delete))

    torch.empty = empty
    C._cuda_cudaCachingAllocator_raw_delete = raw_delete
    C._construct_storage_from_data_pointer = lambda ptr, device, nbytes: UntypedStorage(ptr, nbytes)
    C._has_Standard_Deleter = lambda cdata: UntypedStorage._impls[cdata]._deleter is raw_delete

    def free_and_remove_deleter(cdata):
        s = UntypedStorage._impls[cdata]
        if s._deleter is not raw_delete:
            raise RuntimeError("Unable to remove deleter")
        s._deleter = None
        raw_delete(s._ptr)

    C._free_And_Remove_DeleterFn = free_and_remove_deleter
    C._cuda_checkPoolLiveAllocations = _unsupported("checkPoolLiveAllocations")
    C._cuda_getCheckpointState = _unsupported("getCheckpointState")
    C._cuda_setCheckpointPoolState = _unsupported("setCheckpointPoolState")
    C._cuda_attach_out_of_memory_observer = _unsupported("attachOutOfMemoryObserver")
    C._cuda_isHistoryEnabled = lambda: False
    metadata = {"value": ""}
    C._cuda_setMemoryMetadata = lambda m: metadata.update(value=m)
    C._cuda_getMemoryMetadata = lambda: metadata["value"]

    class CUDAGraph:
        def __init__(self):
            self._pool = None
            self._ref = None

        def pool(self):
            return self._pool

        def reset(self):  # torch: releasePool
            self._ref = None

    @contextlib.contextmanager
    def graph(g, pool=None, stream=None):
        # torch's capture_begin: the pool is created or gains a use (the graph's), and the
        # capture's allocations are routed to it until capture_end.
        g._pool = tuple(pool) if pool is not None else cuda.graph_pool_handle()
        g._ref = ck._MemPool(id=tuple(ck._mem_torch_pool_id(g._pool)), device=0)
        route = ck._UseMemPool(g._ref, 0)
        try:
            yield g
        finally:
            route.close()

    cuda.CUDAGraph = CUDAGraph
    cuda.graph = graph


# The torch._C entry points torch.cuda.memory reads at call time.
C_NAMES = ("_cuda_memoryStats", "_cuda_resetAccumulatedMemoryStats", "_cuda_resetPeakMemoryStats",
           "_cuda_memorySnapshot", "_cuda_record_memory_history",
           "_cuda_record_memory_history_legacy", "_cuda_getMemoryFraction", "_cuda_emptyCache",
           "_cuda_cudaCachingAllocator_set_allocator_settings", "_accelerator_getDeviceStats",
           "_accelerator_isAllocatorInitialized")

_MEMORY_EXPORTS = ("memory_stats", "memory_stats_as_nested_dict", "memory_allocated",
                   "max_memory_allocated", "memory_reserved", "max_memory_reserved",
                   "reset_peak_memory_stats", "reset_accumulated_memory_stats", "empty_cache",
                   "memory_snapshot", "memory_summary", "MemPool", "use_mem_pool",
                   "get_per_process_memory_fraction")

# torch.cuda.memory's call structure (not its code): each function reaches torch._C through
# the module attribute at call time, and the others through this module's globals.
_MEMORY_SOURCE = r'''
def caching_allocator_enable(value=True):
    if is_initialized():
        torch._C._cuda_cudaCachingAllocator_enable(value)

def memory_stats_as_nested_dict(device=None):
    if not is_initialized():
        return {}
    return torch._C._cuda_memoryStats(_get_device_index(device, optional=True))

def memory_stats(device=None):
    flat = []
    def walk(prefix, node):
        if isinstance(node, dict):
            for key, value in node.items():
                walk(f"{prefix}.{key}" if prefix else str(key), value)
        else:
            flat.append((prefix, node))
    walk("", memory_stats_as_nested_dict(device=device))
    return collections.OrderedDict(sorted(flat))

def memory_allocated(device=None):
    return memory_stats(device=device).get("allocated_bytes.all.current", 0)

def max_memory_allocated(device=None):
    return memory_stats(device=device).get("allocated_bytes.all.peak", 0)

def memory_reserved(device=None):
    return memory_stats(device=device).get("reserved_bytes.all.current", 0)

def max_memory_reserved(device=None):
    return memory_stats(device=device).get("reserved_bytes.all.peak", 0)

def reset_peak_memory_stats(device=None):
    return torch._C._cuda_resetPeakMemoryStats(_get_device_index(device, optional=True))

def reset_accumulated_memory_stats(device=None):
    return torch._C._cuda_resetAccumulatedMemoryStats(_get_device_index(device, optional=True))

def empty_cache():
    if is_initialized():
        torch._C._cuda_emptyCache()

def _set_allocator_settings(env):
    return torch._C._cuda_cudaCachingAllocator_set_allocator_settings(env)

def get_per_process_memory_fraction(device=None):
    return torch._C._cuda_getMemoryFraction(_get_device_index(device))

def memory_snapshot(mempool_id=None, include_traces=True):
    pool = (0, 0) if mempool_id is None else tuple(mempool_id)
    return torch._C._cuda_memorySnapshot((*pool, include_traces))["segments"]

def memory_summary(device=None, abbreviated=False):
    stats = memory_stats(device=device)
    rows = [f"{k}: {stats[k + '.all.current']}" for k in ("allocated_bytes", "reserved_bytes")]
    return "PyTorch CUDA memory summary\n" + "\n".join(rows)

def _record_memory_history(enabled="all", context="all", stacks="all", max_entries=sys.maxsize,
                           device=None, clear_history=False, compile_context=False,
                           global_record_annotations=False, skip_actions=None):
    if isinstance(enabled, bool):
        return torch._C._cuda_record_memory_history_legacy(enabled, True, max_entries, True, False)
    torch._C._cuda_record_memory_history(enabled, context, stacks, max_entries, clear_history,
                                         compile_context, global_record_annotations,
                                         skip_actions if skip_actions is not None else [],
                                         False, True)

def _set_memory_metadata(metadata):
    torch._C._cuda_setMemoryMetadata(metadata)

def _get_memory_metadata():
    return torch._C._cuda_getMemoryMetadata()

def _snapshot(device=None):
    return torch._C._cuda_memorySnapshot(None)

def _dump_snapshot(filename="dump_snapshot.pickle"):
    import pickle
    with open(filename, "wb") as f:
        pickle.dump(_snapshot(), f)

class _CUDAAllocator:
    def __init__(self, allocator):
        self._allocator = allocator
    def allocator(self):
        return self._allocator

def change_current_allocator(allocator):
    torch._C._cuda_changeCurrentAllocator(allocator.allocator())

class MemPool:
    def __init__(self, allocator=None, use_on_oom=False, no_split=False):
        raise RuntimeError("pluggable does not yet support createOrIncrefPool")

def use_mem_pool(pool, device=None):
    raise RuntimeError("torch's use_mem_pool")
'''
