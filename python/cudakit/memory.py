"""Memory management with ``torch.cuda.memory``'s names and signatures.

Device arguments accept an int, ``"cuda:N"``, an object with ``.type``/``.index`` (e.g.
``torch.device``) or ``None`` (current device). Streams accept a ``cudakit.Stream``, any
object with ``__cuda_stream__`` / ``cuda_stream`` (torch) / ``ptr`` (CuPy), or a raw handle
int. Arguments are passed to cudakit._C as given: its argument layer (python/src/args.hpp)
converts and checks them, naming this module's function in its errors.
"""
from __future__ import annotations

import collections
import contextlib
import os

# typing (~8 ms: re, enum), json and pickle are imported where used, not at import.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

from . import _C

__all__ = [
    "CUDAPluggableAllocator", "MemPool", "caching_allocator_alloc", "caching_allocator_delete",
    "caching_allocator_disabled", "caching_allocator_enable", "change_current_allocator",
    "empty_cache", "get_allocator_backend", "get_per_process_memory_fraction",
    "graph_pool_handle", "host_memory_stats", "host_memory_stats_as_nested_dict",
    "ipc_collect", "list_gpu_processes", "max_memory_allocated", "max_memory_cached",
    "max_memory_reserved", "mem_get_info", "memory_allocated", "memory_cached",
    "memory_reserved", "memory_snapshot", "memory_stats", "memory_stats_as_nested_dict",
    "memory_summary", "reset_accumulated_host_memory_stats", "reset_accumulated_memory_stats",
    "reset_max_memory_allocated", "reset_max_memory_cached", "reset_peak_host_memory_stats",
    "reset_peak_memory_stats", "set_per_process_memory_fraction", "use_mem_pool",
    "plugin_path", "torch_allocator", "use_with_torch", "stop_using_with_torch",
    "torch_interop_state", "cupy_allocator", "use_with_cupy", "memory_stats_by_framework",
    "memory_allocated_by", "use_sleep_pool", "sleep", "wake_up", "sleep_state", "export_pool",
    "import_pool", "pool_view", "PoolView",
]


def _nest(flat: dict[str, int]) -> dict[str, Any]:
    # torch's flat statistics keys ("allocated_bytes.all.current") as nested dicts; also
    # torch's memory API patch (_torch_interop.py).
    out: dict[str, Any] = {}
    for key, value in flat.items():
        node = out
        parts = key.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = value
    return out


# ---- statistics ----

def memory_stats(device: Any = None) -> dict[str, int]:
    """Caching allocator statistics of ``device`` with torch's flat keys, sorted (an
    OrderedDict as torch's; _C builds it in order)."""
    return _C._mem_stats(device)


def memory_stats_as_nested_dict(device: Any = None) -> dict[str, Any]:
    return _nest(_C._mem_stats(device))


def reset_accumulated_memory_stats(device: Any = None) -> None:
    _C._mem_reset_accumulated(device)


def reset_peak_memory_stats(device: Any = None) -> None:
    _C._mem_reset_peak(device)


def reset_max_memory_allocated(device: Any = None) -> None:
    reset_peak_memory_stats(device)


def reset_max_memory_cached(device: Any = None) -> None:
    reset_peak_memory_stats(device)


def memory_allocated(device: Any = None) -> int:
    return _C._mem_allocated(device)


def max_memory_allocated(device: Any = None) -> int:
    return _C._mem_max_allocated(device)


def memory_reserved(device: Any = None) -> int:
    return _C._mem_reserved(device)


def max_memory_reserved(device: Any = None) -> int:
    return _C._mem_max_reserved(device)


def memory_cached(device: Any = None) -> int:
    """Deprecated alias of :func:`memory_reserved`."""
    return memory_reserved(device)


def max_memory_cached(device: Any = None) -> int:
    """Deprecated alias of :func:`max_memory_reserved`."""
    return max_memory_reserved(device)


def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
    return _C._mem_summary(device, abbreviated)


def host_memory_stats() -> dict[str, int]:
    return collections.OrderedDict(sorted(_C._mem_host_stats().items()))


def host_memory_stats_as_nested_dict() -> dict[str, Any]:
    return _nest(_C._mem_host_stats())


def reset_accumulated_host_memory_stats() -> None:
    _C._mem_host_reset_accumulated()


def reset_peak_host_memory_stats() -> None:
    _C._mem_host_reset_peak()


# ---- controls ----

def empty_cache() -> None:
    """Release all unoccupied cached device memory (torch.cuda.empty_cache)."""
    _C._mem_empty_cache()


def _host_empty_cache() -> None:
    """Release the pinned host cache (torch._C._host_emptyCache)."""
    _C._mem_host_empty_cache()


def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
    if not isinstance(fraction, (int, float)) or isinstance(fraction, bool):
        raise TypeError("Invalid type for fraction argument, must be `float`")  # torch's message
    _C._mem_set_fraction(fraction, device)


def get_per_process_memory_fraction(device: Any = None) -> float:
    return _C._mem_get_fraction(device)


def mem_get_info(device: Any = None) -> tuple[int, int]:
    """(free, total) device memory in bytes."""
    return _C._mem_get_info(device)


def list_gpu_processes(device: Any = None) -> str:
    return _C._mem_list_gpu_processes(device)


def get_allocator_backend() -> str:
    return _C._mem_backend()


def _set_allocator_settings(env: str) -> None:
    """Change allocator settings at run time (torch.cuda.memory._set_allocator_settings).

    ``env`` has CUDAKIT_ALLOC_CONF's syntax; keys given replace their values, the others keep
    theirs. Live keys (garbage_collection_threshold, roundup_power2_divisions, pinned_*, ...)
    apply to existing allocators at once; backend, expandable_segments and max_split_size_mb
    are fixed by the first device allocation and raise ValueError when changed afterwards;
    keys accepted only for torch compatibility warn (UserWarning).
    """
    _C._mem_set_settings(env)


def caching_allocator_alloc(size: int, device: Any = None, stream: Any = None) -> int:
    """Raw device memory (an int address) from the caching allocator."""
    return _C._mem_alloc(size, device, stream)


def caching_allocator_delete(mem_ptr: int) -> None:
    _C._mem_delete(mem_ptr)


def caching_allocator_enable(value: bool = True) -> None:
    _C._mem_caching_enable(bool(value))


@contextlib.contextmanager
def caching_allocator_disabled():
    """Allocations in this context go straight to the device and are freed straight back."""
    prev = _C._mem_caching_enabled()
    _C._mem_caching_enable(False)
    try:
        yield
    finally:
        _C._mem_caching_enable(prev)


def _record_stream(mem_ptr: int, stream: Any, device: Any = None) -> None:
    _C._mem_record_stream(mem_ptr, stream, device)


# ---- IPC ----

def ipc_collect() -> None:
    _C._mem_ipc_collect()


def _ipc_export(mem_ptr: int) -> tuple[bytes, int, int, int]:
    """(handle, device, offset, size) for another process's :func:`_ipc_import`.

    The handle is 64 bytes for memory of ordinary segments; for memory of an expandable
    segment it is longer (a header, then one record per physical chunk): the importer then
    fetches the chunks' file descriptors from this process with ``pidfd_getfd`` (Linux >= 5.6
    and ptrace access to this process needed). Keep the memory alive until it is imported."""
    return _C._mem_ipc_export(mem_ptr)


def _ipc_import(handle: tuple[bytes, int, int, int]) -> int:
    return _C._mem_ipc_import(*handle)


def _ipc_close(mem_ptr: int) -> None:
    _C._mem_ipc_close(mem_ptr)


# ---- history / snapshots ----

def _record_memory_history(enabled: str | None = "all", context: str | None = "all",
                           stacks: str = "all", max_entries: int = 2**63 - 1, device: Any = None,
                           clear_history: bool = False, **_ignored: Any) -> None:
    """Record allocation history (torch.cuda.memory._record_memory_history). As torch:
    ``enabled=None`` stops recording and drops the trace; enabling again, or changing
    ``context`` / ``stacks`` while recording, keeps the trace unless ``clear_history``."""
    if enabled is True:
        enabled = "all"
    elif enabled is False:
        enabled = None
    _C._mem_record_history(enabled, context, stacks, max_entries, clear_history)


def _snapshot(device: Any = None, mempool_id: tuple[int, int] | None = None) -> dict[str, Any]:
    import json

    snap = json.loads(_C._mem_snapshot_json(mempool_id))
    for seg in snap["segments"]:
        seg["segment_pool_id"] = tuple(seg["segment_pool_id"])
    return snap


def memory_snapshot(mempool_id: tuple[int, int] | None = None) -> list[dict[str, Any]]:
    """Segments of every device allocator (torch's format)."""
    return _snapshot(mempool_id=mempool_id)["segments"]


def _dump_snapshot(filename: str = "dump_snapshot.pickle") -> None:
    """Pickle the snapshot (loadable by PyTorch's memory visualizer); ``.json`` writes JSON."""
    if not isinstance(filename, (str, os.PathLike)):
        raise _C.ArgumentTypeError(
            f"_dump_snapshot(): argument 'filename' must be a str or os.PathLike, not "
            f"{type(filename).__name__} ({filename!r})")
    filename = os.fspath(filename)
    import json
    import pickle

    snap = _snapshot()
    if filename.endswith(".json"):
        with open(filename, "w") as f:
            json.dump(snap, f)
    else:
        with open(filename, "wb") as f:
            pickle.dump(snap, f)


# ---- pools ----

def graph_pool_handle() -> tuple[int, int]:
    """A fresh pool id for graph capture (torch.cuda.graph_pool_handle)."""
    return _C._mem_graph_pool_handle()


class MemPool:
    """A private pool of the caching allocator (torch.cuda.MemPool)."""

    def __init__(self, allocator: Any = None, use_on_oom: bool = False, no_split: bool = False):
        if allocator is None:
            self._pool = _C._MemPool(use_on_oom=use_on_oom, no_split=no_split)
        elif not isinstance(allocator, (_CUDAAllocator, _C._PluggableAllocator)):
            raise _C.ArgumentTypeError(
                "MemPool(): argument 'allocator' must be a cudakit.memory.CUDAPluggableAllocator "
                f"or None, not {type(allocator).__name__} ({allocator!r})")
        else:
            # The pool's segments come from `allocator` (a CUDAPluggableAllocator); it must not
            # allocate from cudakit's own caching allocator of the same device.
            raw = allocator.allocator() if isinstance(allocator, _CUDAAllocator) else allocator
            self._pool = _C._MemPool(raw, use_on_oom=use_on_oom, no_split=no_split)
        self.allocator = allocator

    @property
    def id(self) -> tuple[int, int]:
        return self._pool.id

    def use_count(self) -> int:
        return self._pool.use_count()

    def snapshot(self) -> list[dict[str, Any]]:
        return memory_snapshot(mempool_id=self.id)


@contextlib.contextmanager
def use_mem_pool(pool: MemPool, device: Any = None):
    """Route the current thread's allocations on ``device`` to ``pool``."""
    if not isinstance(pool, MemPool):
        raise _C.ArgumentTypeError(
            f"use_mem_pool(): argument 'pool' must be a cudakit.memory.MemPool, not "
            f"{type(pool).__name__} ({pool!r})")
    guard = _C._UseMemPool(pool._pool, device)
    try:
        yield
    finally:
        guard.close()


# ---- sleep and wake of tagged memory ----

@contextlib.contextmanager
def use_sleep_pool(tag: str, device: Any = None):
    """Allocations of the current thread on ``device`` (cudakit's, and torch's / CuPy's
    through ``use_with_torch()`` / ``use_with_cupy()``) come from the pool of ``tag``.

    The pool's memory can then be released with :func:`sleep` and brought back at the same
    addresses with :func:`wake_up` (tensors, ``data_ptr()`` and captured CUDA graphs stay
    valid). Nests with :func:`use_mem_pool` and graph capture: the innermost scope wins.
    """
    guard = _C._UseSleepPool(tag, device)
    try:
        yield
    finally:
        guard.close()


def sleep(tags: Any = None, *, offload: Any = ()) -> int:
    """Release the device memory of the tagged pools (``None``: every tag); returns the bytes
    released. Pools whose tag is in ``offload`` first copy their allocated blocks to pinned
    host memory; the others are discarded. Addresses stay reserved. Waits for the device.
    A pool already asleep is left as it is. Unknown tag: ``KeyError``."""
    return _C._mem_sleep(tags, offload)


def wake_up(tags: Any = None) -> None:
    """Map the tagged pools' memory again at the same addresses and copy offloaded contents
    back (discarded contents are undefined). Returns once the copies are done."""
    _C._mem_wake_up(tags)


def sleep_state() -> dict[str, dict[str, Any]]:
    """``{tag: {"bytes", "allocated_bytes", "asleep", "offloaded"}}`` of every tagged pool
    (all devices together): ``bytes`` is the device memory the pool holds when awake."""
    return _C._mem_sleep_state()


class _Mapping:
    """An imported pool's mapping: unmapped when the last reference (the view, or a tensor /
    array made from it) goes."""

    __slots__ = ("base", "size", "device")

    def __init__(self, base: int, size: int, device: int):
        self.base, self.size, self.device = base, size, device

    def __del__(self):
        try:
            _C._mem_close_pool(self.base, self.size, self.device)
        except Exception:  # noqa: BLE001  (interpreter shutdown, device gone)
            pass


class PoolView:
    """A tagged pool's memory as one address range: ``base``, ``size``, ``device``.

    ``offset_of(ptr)`` gives a pointer's (or tensor's) offset from ``base`` (in the exporting
    process, from :func:`pool_view`); ``tensor(offset, shape, dtype)`` makes a cudakit tensor
    there (``torch.from_dlpack`` takes it) and ``array(offset, shape, typestr)`` an object with
    ``__cuda_array_interface__`` (``torch.as_tensor`` / ``cupy.asarray``). An imported view
    stays mapped until :meth:`close` (or the view's end) *and* the end of every tensor and
    array made from it.
    """

    def __init__(self, info: dict[str, int], imported: bool):
        self.base = info["base"]
        self.size = info["size"]
        self.device = info["device"]
        self._mapping = _Mapping(self.base, self.size, self.device) if imported else None
        self._imported = imported
        self._closed = False

    def offset_of(self, ptr: Any) -> int:
        p = ptr.data_ptr() if hasattr(ptr, "data_ptr") else int(ptr)
        if not self.base <= p < self.base + self.size:
            raise ValueError(f"PoolView.offset_of(): address {p:#x} is outside the pool "
                             f"[{self.base:#x}, {self.base + self.size:#x})")
        return p - self.base

    def _owner(self, fn: str) -> Any:
        if self._closed:
            raise RuntimeError(f"PoolView.{fn}(): the view is closed")
        return self._mapping if self._imported else self

    def tensor(self, offset: int, shape: Any, dtype: Any) -> Any:
        owner = self._owner("tensor")
        return _C._mem_pool_tensor(self.base, self.size, offset, shape, dtype, self.device, owner)

    def tensors(self, layout: Any) -> list:
        """Cudakit tensors for a whole layout of ``(offset, shape, dtype)`` items, made in one
        call (a hand-off of hundreds of tensors pays no Python work per tensor)."""
        owner = self._owner("tensors")
        return _C._mem_pool_tensors(self.base, self.size, layout, self.device, owner, False)

    def dlpack(self, layout: Any) -> list:
        """DLPack capsules for a layout of ``(offset, shape, dtype)`` items, made in one call:
        ``[torch.from_dlpack(c) for c in view.dlpack(layout)]`` skips the per-tensor
        ``__dlpack__`` protocol. Each capsule keeps the mapping alive until its consumer's
        tensor is gone; a capsule can be consumed once."""
        owner = self._owner("dlpack")
        return _C._mem_pool_tensors(self.base, self.size, layout, self.device, owner, True)

    def array(self, offset: int, shape: Any, typestr: str) -> Any:
        """``typestr``: a ``__cuda_array_interface__`` type string such as ``"<f2"``."""
        import numpy as np

        owner = self._owner("array")
        shape = tuple(int(n) for n in (shape if isinstance(shape, (tuple, list)) else (shape,)))
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(typestr).itemsize
        if not isinstance(offset, int) or offset < 0 or offset + nbytes > self.size:
            raise ValueError(f"PoolView.array(): offset {offset!r} + {nbytes} bytes runs past "
                             f"the pool's {self.size} bytes")
        return _PoolArray(owner, {"shape": shape, "typestr": typestr,
                                  "data": (self.base + offset, False), "strides": None,
                                  "version": 3, "stream": None})

    def close(self) -> None:
        """Drop the view's mapping (unmapped once no tensor made from it is left). Views of
        this process's own pool have nothing to close."""
        self._closed = True
        self._mapping = None

    def __enter__(self) -> "PoolView":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"PoolView(base={self.base:#x}, size={self.size}, device={self.device}, "
                f"imported={self._imported})")


class _PoolArray:
    """``__cuda_array_interface__`` over pool memory; keeps the mapping alive."""

    __slots__ = ("_owner", "__cuda_array_interface__")

    def __init__(self, owner: Any, cai: dict[str, Any]):
        self._owner = owner
        self.__cuda_array_interface__ = cai


def pool_view(tag: str, device: Any = None) -> PoolView:
    """This process's view of its own pool of ``tag`` (offsets as in :func:`import_pool`)."""
    return PoolView(_C._mem_pool_view(tag, device), imported=False)


def export_pool(tag: str, device: Any = None) -> bytes:
    """A handle to the whole pool of ``tag`` for another process (:func:`import_pool`).
    Keep the pool awake and its memory allocated until the importer has opened it."""
    return _C._mem_export_pool(tag, device)


def import_pool(handle: bytes) -> PoolView:
    """Open a handle of :func:`export_pool` made by another process: the pool's memory at
    the same offsets from a new ``base``."""
    return PoolView(_C._mem_import_pool(handle), imported=True)


# ---- pluggable allocators ----

class _CUDAAllocator:
    def __init__(self, allocator: Any):
        self._allocator = allocator

    def allocator(self) -> Any:
        return self._allocator


class CUDAPluggableAllocator(_CUDAAllocator):
    """Device memory from a shared library exporting torch's allocator C ABI."""

    def __init__(self, path_to_so_file: str, alloc_fn_name: str, free_fn_name: str):
        super().__init__(_C._PluggableAllocator(path_to_so_file, alloc_fn_name, free_fn_name))


def change_current_allocator(allocator: _CUDAAllocator) -> None:
    if not isinstance(allocator, _CUDAAllocator):
        raise _C.ArgumentTypeError(
            "change_current_allocator(): argument 'allocator' must be a "
            f"cudakit.memory.CUDAPluggableAllocator, not {type(allocator).__name__} ({allocator!r})")
    # torch refuses once its allocator is initialized ("Can't swap an already initialized
    # allocator"): memory handed out by one allocator must not be returned to another.
    for d in range(_C.device_count()):
        st = memory_stats(d)
        made = max(st.get("allocation.all.allocated", 0), st.get("allocation.all.current", 0))
        if made or st.get("segment.all.current", 0):
            raise RuntimeError(
                f"change_current_allocator(): can't swap an already initialized allocator: the "
                f"current one made {made} allocation(s) on cuda:{d}; change the allocator before "
                f"the first device allocation of the process")
    _C._mem_change_allocator(allocator.allocator())


# ---- cudakit's allocator inside other frameworks ----

def plugin_path() -> str:
    """Path of libcudakit_alloc.so: cudakit's caching allocator behind torch's pluggable
    allocator C ABI, by name (``cudakit_malloc`` / ``cudakit_free``, and ``cudakit_empty_cache``,
    ``cudakit_record_stream``, ``cudakit_begin_allocate_to_pool``, ... for torch's hook
    setters). :func:`use_with_torch` needs no path: it hands torch the same functions by
    address."""
    import os

    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, "libcudakit_alloc.so")
    if not os.path.exists(path):
        raise RuntimeError(f"{path} was not built (CMake target cudakit_alloc)")
    return path


def torch_allocator():
    """A torch allocator object (``torch.cuda.memory._CUDAAllocator``) drawing from cudakit's
    pool, with every hook torch's pluggable allocator accepts (empty_cache, memory fraction,
    record_stream, base allocation, and the pool hooks of CUDA graph capture and
    ``torch.cuda.use_mem_pool``). Install it with ``torch.cuda.memory.change_current_allocator``
    before torch allocates on the GPU, or call :func:`use_with_torch`, which also makes
    torch's memory API answer from cudakit."""
    import torch

    from . import _torch_interop

    return _torch_interop.make_allocator(torch)[0]


def use_with_torch(patch_torch_memory_api: bool = True) -> None:
    """Make cudakit's pool torch's CUDA allocator; call before torch's first CUDA allocation.

    torch's allocations then come from cudakit's pool (shared with CuPy and cudakit) and count
    as "torch" in :func:`memory_stats_by_framework`. torch features that rely on the allocator
    go through its pluggable interface: ``torch.cuda.empty_cache``,
    ``set_per_process_memory_fraction``, ``Tensor.record_stream``, CUDA graph capture with
    private pools, ``torch.cuda.use_mem_pool``. Out of memory in a torch operation raises
    torch.cuda.OutOfMemoryError with torch's wording, then cudakit's diagnosis.
    PYTORCH_CUDA_ALLOC_CONF / PYTORCH_ALLOC_CONF apply
    to cudakit's allocator (same syntax) unless CUDAKIT_ALLOC_CONF is set.

    With ``patch_torch_memory_api=True`` (default) torch's own memory API (memory_allocated,
    max_memory_allocated, memory_reserved, max_memory_reserved, memory_stats,
    memory_stats_as_nested_dict, memory_summary, memory_snapshot, reset_peak_memory_stats,
    reset_accumulated_memory_stats, empty_cache, _record_memory_history, _snapshot,
    _dump_snapshot, get_per_process_memory_fraction) answers from cudakit with torch's keys and
    formats, so torch.cuda._memory_viz and memory loggers keep working;
    torch.cuda.memory._set_allocator_settings also configures cudakit's pool; torch.cuda.MemPool
    becomes a cudakit-backed pool with torch's interface (``allocator=`` included); the entry
    points of CUDA graph trees (torch.compile(mode="reduce-overhead"): pool live allocations,
    checkpointed pool state) and the out-of-memory observers answer from cudakit;
    torch.multiprocessing sharing of CUDA
    tensors raises a RuntimeError naming the limitation (the pluggable interface has no IPC
    hooks). The patch is logged (logger "cudakit.memory", INFO), listed by
    :func:`torch_interop_state`, and undone by :func:`stop_using_with_torch`. Without it,
    torch's memory API raises torch's "CUDAPluggableAllocator does not yet support ..." errors
    (a UserWarning says so).
    """
    import torch

    from . import _torch_interop

    if not isinstance(patch_torch_memory_api, bool):
        raise _C.ArgumentTypeError(
            "use_with_torch(): argument 'patch_torch_memory_api' must be a bool, not "
            f"{type(patch_torch_memory_api).__name__} ({patch_torch_memory_api!r})")
    _torch_interop.install(torch)
    if patch_torch_memory_api:
        _torch_interop.patch(torch)
    else:
        import warnings

        warnings.warn("use_with_torch(patch_torch_memory_api=False): torch.cuda.memory_allocated, "
                      "memory_stats, memory_summary, memory_snapshot and _record_memory_history "
                      "raise torch's pluggable-allocator errors; read cudakit.memory's instead",
                      UserWarning, stacklevel=2)


def stop_using_with_torch() -> None:
    """Undo :func:`use_with_torch`'s patch of torch's memory API (every replaced attribute gets
    its original back). torch keeps allocating from cudakit's pool: torch never switches away
    from a pluggable allocator once installed (it counts as initialised from its creation), so
    a UserWarning says that torch's memory API raises its pluggable-allocator errors again."""
    from . import _torch_interop

    was_patched = _torch_interop.is_patched()
    _torch_interop.unpatch()
    if _torch_interop.installed():
        import warnings

        warnings.warn("stop_using_with_torch(): "
                      + ("torch's memory API is torch's again, but" if was_patched else
                         "torch's memory API was not patched;") +
                      " torch keeps allocating from cudakit's pool (torch cannot switch back from "
                      "a pluggable allocator), so its statistics calls raise torch's "
                      "pluggable-allocator errors; use cudakit.memory's", UserWarning,
                      stacklevel=2)


def torch_interop_state() -> dict[str, Any]:
    """What :func:`use_with_torch` did in this process: ``allocator_installed``,
    ``torch_called_hooks`` (torch allocated or initialised through cudakit),
    ``memory_api_patched``, ``patched`` (qualified names of the replaced attributes) and
    ``profiler_reporter`` (whether torch.profiler(profile_memory=True) is told of torch's
    allocations: "installed from <libc10 path>", or why not)."""
    from . import _torch_interop

    return _torch_interop.state()


def cupy_allocator():
    """An allocator for ``cupy.cuda.set_allocator``: CuPy's arrays come from cudakit's pool,
    ordered on CuPy's current stream, counted as "cupy" in :func:`memory_stats_by_framework`."""
    import cupy

    from . import _cupy_interop

    return _cupy_interop.allocator(cupy)


def use_with_cupy() -> None:
    """``cupy.cuda.set_allocator(cupy_allocator())`` in one call. CuPy's own pool
    (``cupy.get_default_memory_pool()``) then stays empty: its statistics are replaced by
    :func:`memory_allocated_by` ("cupy"), :func:`memory_reserved` and :func:`empty_cache`
    (the table in cudakit/_cupy_interop.py and README)."""
    import cupy

    from . import _cupy_interop

    _cupy_interop.install(cupy)


# ---- per-framework breakdown ----

FRAMEWORKS = ("cudakit", "torch", "cupy")


def memory_stats_by_framework(device: Any = None) -> dict[str, dict[str, dict[str, int]]]:
    """The shared pool's allocations by the framework they were made for:
    ``{"cudakit"|"torch"|"cupy": {"allocation"|"allocated_bytes"|"requested_bytes":
    {"current", "peak", "allocated", "freed"}}}`` (the "framework.*" keys of
    :func:`memory_stats`). The three ``allocated_bytes.current`` add up to
    :func:`memory_allocated`; reserved memory is shared (segments are not per framework)."""
    return _nest(_C._mem_stats(device)).get("framework", {})


def memory_allocated_by(framework: str, device: Any = None) -> int:
    """Bytes currently allocated on ``device`` on behalf of ``framework`` ("cudakit",
    "torch" or "cupy"): cudakit.memory_allocated() per framework."""
    if not isinstance(framework, str) or framework not in FRAMEWORKS:
        raise ValueError(f"memory_allocated_by(): argument 'framework' must be one of "
                         f"{', '.join(repr(f) for f in FRAMEWORKS)}, not {framework!r}")
    return _C._mem_stats(device)[f"framework.{framework}.allocated_bytes.current"]
