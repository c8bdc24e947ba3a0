"""cudakit's caching allocator inside PyTorch (cudakit.memory.use_with_torch).

Two layers, both documented in README ("PyTorch and CuPy on cudakit's pool"):

1. The allocator. torch's pluggable allocator (``torch._C._cuda_customAllocator``) gets
   cudakit's function pointers (cudakit/plugin.hpp) for malloc/free and for every optional
   hook torch's allocator object accepts: empty_cache (reset), memory fraction, base
   allocation, record_stream and the three pool hooks that CUDA graph capture and
   ``torch.cuda.use_mem_pool`` call. torch only lets a process swap allocators before its first
   CUDA allocation, and never back from a pluggable one (torch marks it initialised when it is
   created), so this layer is one-way.

2. torch's memory API (``patch_torch_memory_api=True``, the default). torch's pluggable
   allocator answers its statistics/snapshot/history calls with "does not yet support ...".
   The patch replaces the ``torch._C`` entry points ``torch.cuda.memory`` calls at call time
   (``_cuda_memoryStats``, ``_cuda_memorySnapshot``, ``_cuda_record_memory_history``, ...) and
   the few Python functions that guard them, so every function of ``torch.cuda`` that reads
   them (``memory_allocated``, ``memory_summary``, ``_dump_snapshot``, ...) answers from
   cudakit with torch's keys and formats, including references taken before the patch.
   Features the pluggable interface cannot carry fail with a message that names the
   limitation (``torch.multiprocessing`` sharing of CUDA tensors); ``torch.cuda.MemPool`` is
   replaced by a cudakit-backed class with torch's interface. Every replaced attribute is
   recorded with its original: :func:`unpatch` (``stop_using_with_torch``) restores them
   exactly. Patching is never silent: it logs at INFO level, ``patched_names()`` lists what is
   replaced, and each replacement's docstring says it is cudakit's.

Why the torch._C layer and not only torch.cuda.memory's functions: user code and libraries
often hold ``from torch.cuda import memory_allocated``; those references still go through
``torch._C._cuda_memoryStats`` at call time. The Python functions replaced besides are those
whose own logic would be wrong for a shared pool (an ``is_initialized()`` guard that answers
``{}`` before torch's first CUDA call, although CuPy or cudakit may already hold memory).

Thread-safety: install/patch/unpatch are meant for start-up (they hold a lock, but other
threads calling torch's memory API meanwhile may see either version of a function).
"""
from __future__ import annotations

import bisect
import json
import logging
import os
import threading
import time
import warnings
import weakref
from typing import Any

from . import _C
from .memory import _nest
from ._torch_settings import SETTINGS_ENTRY_POINTS as _SETTINGS_ENTRY_POINTS
from ._torch_settings import make_caching_enable_forward as _make_caching_enable_forward
from ._torch_settings import make_settings_forward as _make_settings_forward

_log = logging.getLogger("cudakit.memory")
_lock = threading.RLock()

# torch's hook setters on its allocator object -> key of cudakit's hook table.
HOOK_SETTERS = (
    ("set_init_fn", "init"),
    ("set_reset_fn", "reset"),
    ("set_memory_fraction_fn", "memory_fraction"),
    ("set_base_alloc_fn", "base_alloc"),
    ("set_record_stream_fn", "record_stream"),
    ("set_begin_allocate_to_pool", "begin_allocate_to_pool"),
    ("set_end_allocate_to_pool_fn", "end_allocate_to_pool"),
    ("set_release_pool", "release_pool"),
)
# Without these, graph capture would allocate from the shared pool and reuse memory a graph
# still replays into: refuse rather than corrupt silently.
_POOL_SETTERS = {"set_begin_allocate_to_pool", "set_end_allocate_to_pool_fn", "set_release_pool"}

_state: dict[str, Any] = {
    "allocator": None,   # torch's allocator object wrapping cudakit's hooks (once installed)
    "torch": None,       # the torch module it was installed into
    "patches": [],       # [(owner, name, original or _MISSING)] in patch order
}
_MISSING = object()

# The top bit cudakit sets on torch's pool ids (cudakit/plugin.hpp: torch_pool_id).
_TORCH_POOL_BIT = None


def _pool_bit() -> int:
    global _TORCH_POOL_BIT
    if _TORCH_POOL_BIT is None:
        _TORCH_POOL_BIT = _C._mem_torch_pool_id((0, 0))[0]
    return _TORCH_POOL_BIT


def to_cudakit_pool(torch_id: Any) -> tuple[int, int]:
    return tuple(_C._mem_torch_pool_id(tuple(torch_id)))


def to_torch_pool(cudakit_id: Any) -> tuple[int, int]:
    """torch's id for a pool of torch's space; cudakit's own pools keep their ids."""
    a, b = cudakit_id
    bit = _pool_bit()
    return (a & ~bit, b) if a & bit else (a, b)


# ---------------------------------------------------------------- layer 1: the allocator

def make_allocator(torch: Any) -> tuple[Any, list[str]]:
    """torch's allocator object (a ``torch.cuda.memory._CUDAAllocator``) with cudakit's hooks,
    and the hook setters this torch lacks."""
    hooks = _C._mem_torch_hooks()
    raw = torch._C._cuda_customAllocator(hooks["malloc"], hooks["free"])
    missing = []
    for setter, key in HOOK_SETTERS:
        fn = getattr(raw, setter, None)
        if fn is None:
            missing.append(setter)
        else:
            fn(hooks[key])
    return torch.cuda.memory._CUDAAllocator(raw), missing


def install(torch: Any) -> None:
    """Makes cudakit's pool torch's CUDA allocator (idempotent)."""
    with _lock:
        if _state["allocator"] is not None:
            return
        if not hasattr(torch._C, "_cuda_customAllocator"):
            raise RuntimeError(
                "use_with_torch(): this torch (" + str(getattr(torch, "__version__", "?")) +
                ") is built without CUDA (no pluggable CUDA allocator); install a CUDA build "
                "of torch")
        _apply_torch_alloc_conf()
        allocator, missing = make_allocator(torch)
        if _POOL_SETTERS & set(missing):
            raise RuntimeError(
                "use_with_torch(): this torch (" + str(getattr(torch, "__version__", "?")) +
                ") has no pool hooks on its pluggable allocator (" +
                ", ".join(sorted(_POOL_SETTERS & set(missing))) + "): CUDA graph capture "
                "would reuse memory a graph replays into. Use torch >= 2.3.")
        try:
            torch.cuda.memory.change_current_allocator(allocator)
        except RuntimeError as e:
            raise RuntimeError(
                "use_with_torch() must run before torch's first CUDA allocation (torch can only "
                "switch allocators before it allocates on the GPU; call it at start-up, before "
                f"any tensor is created on a CUDA device): {e}") from e
        _state["allocator"] = allocator
        _state["torch"] = torch
        # Out of memory in torch's allocations raises torch's own type (torch_hooks.cpp says how).
        oom = getattr(torch, "OutOfMemoryError", None) or \
            getattr(getattr(torch, "cuda", None), "OutOfMemoryError", None)
        if isinstance(oom, type) and issubclass(oom, BaseException):
            _C._mem_torch_set_oom_type(oom)
        _install_profiler_reporter(torch)
        if missing:
            _log.info("cudakit.memory.use_with_torch: this torch lacks %s; the corresponding "
                      "torch features keep torch's default behaviour", ", ".join(missing))


# libc10's functions torch's own allocator calls so that torch.profiler(profile_memory=True)
# sees its allocations (the pluggable interface calls neither): bool memoryProfilingEnabled()
# and void reportMemoryUsageToProfiler(void*, int64_t, size_t, size_t, c10::Device).
# The names are built from their parts: a hand-written length prefix was once one short
# (26 for the 27 letters of reportMemoryUsageToProfiler), so the lookup failed on every torch.
def _c10_symbol(name: str, params: str) -> str:
    """The Itanium C++ ABI name of ``c10::<name>(params)``; ``params`` is already mangled."""
    return f"_ZN3c10{len(name)}{name}E{params}"


_PROFILER_SYMBOLS = (_c10_symbol("memoryProfilingEnabled", "v"),
                     # (void*, int64_t, size_t, size_t, c10::Device) on LP64
                     _c10_symbol("reportMemoryUsageToProfiler", "PvlmmNS_6DeviceE"))


def _install_profiler_reporter(torch: Any) -> bool:
    """Hands cudakit's torch hooks the addresses of libc10's profiler entry points (found by
    their symbols in the libc10 torch has loaded), so torch's memory profiler sees the
    allocations torch makes on cudakit's pool. A torch without them (another ABI, a static
    build) keeps the profiler's memory view empty, as before; that is logged."""
    import ctypes

    lib_dir = os.path.join(os.path.dirname(getattr(torch, "__file__", "") or ""), "lib")
    path = os.path.join(lib_dir, "libc10.so")
    try:
        # RTLD_NOLOAD: only the copy torch already loaded, never a second one
        lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        enabled, report = (ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
                           for name in _PROFILER_SYMBOLS)
    except (OSError, AttributeError) as e:
        _state["profiler_reporter"] = f"libc10's reporting functions not found in {path}: {e}"
        _log.info("cudakit.memory.use_with_torch: torch.profiler's memory events stay empty "
                  "(%s)", _state["profiler_reporter"])
        return False
    _C._mem_torch_set_memory_reporter(enabled, report)
    _state["profiler_reporter"] = f"installed from {path}"
    return True


def installed() -> bool:
    return _state["allocator"] is not None


def _apply_torch_alloc_conf() -> None:
    """PYTORCH_CUDA_ALLOC_CONF / PYTORCH_ALLOC_CONF configure torch's own allocator, which no
    longer serves torch: their keys (same syntax as CUDAKIT_ALLOC_CONF) go to cudakit's, unless
    CUDAKIT_ALLOC_CONF is set (it wins; the torch variable is then reported as unused)."""
    for var in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        conf = os.environ.get(var)
        if not conf:
            continue
        if os.environ.get("CUDAKIT_ALLOC_CONF"):
            warnings.warn(f"use_with_torch(): {var}={conf!r} configures torch's own allocator, "
                          "which no longer serves torch; cudakit's pool follows "
                          "CUDAKIT_ALLOC_CONF (set there what you need)", UserWarning, stacklevel=4)
            return
        try:
            _C._mem_set_settings(conf)
        except Exception as e:
            raise ValueError(
                f"use_with_torch(): {var}={conf!r} applies to the allocator serving torch, now "
                f"cudakit's, and cudakit cannot apply it: {e} (set CUDAKIT_ALLOC_CONF instead, or "
                "call use_with_torch() before cudakit allocates anything)") from e
        _log.info("cudakit.memory.use_with_torch: %s=%r applied to cudakit's allocator", var, conf)
        return


# ---------------------------------------------------------------- layer 2: torch's memory API

def _device_index(device: Any) -> Any:
    # torch passes an int (or None for the current device) to its _C functions.
    return device


def memory_stats_nested(device: Any = None) -> dict[str, Any]:
    """torch._C._cuda_memoryStats: the nested statistics of ``device`` (torch's keys, plus
    cudakit's "framework" breakdown)."""
    return _nest(_C._mem_stats(_device_index(device)))


def reset_accumulated(device: Any = None) -> None:
    """torch._C._cuda_resetAccumulatedMemoryStats, served by cudakit."""
    _C._mem_reset_accumulated(_device_index(device))


def reset_peak(device: Any = None) -> None:
    """torch._C._cuda_resetPeakMemoryStats, served by cudakit."""
    _C._mem_reset_peak(_device_index(device))


def empty_cache_c() -> None:
    """torch._C._cuda_emptyCache, served by cudakit (releases the shared pool's cache)."""
    _C._mem_empty_cache()


def allocator_initialized() -> bool:
    """torch._C._accelerator_isAllocatorInitialized: torch.accelerator.memory_stats returns {}
    when it is False, and torch asks its own (never used) caching allocator, which is still
    uninitialised while cudakit serves torch's memory (torch 2.11 on the H200: 0 bytes)."""
    return True


def snapshot_torch(pool: Any = None) -> dict[str, Any]:
    """torch._C._cuda_memorySnapshot: ``pool`` is None, torch's (a, b) or (a, b,
    include_traces); (0, 0) means every pool. Pool ids come back in torch's space."""
    include_traces = True
    cudakit_pool = None
    if pool is not None:
        pool = tuple(pool)
        if len(pool) == 3:
            include_traces = bool(pool[2])
        if len(pool) < 2 or len(pool) > 3:
            raise ValueError(f"memory snapshot: pool must be (int, int) or (int, int, bool), "
                             f"not {pool!r}")
        if tuple(pool[:2]) != (0, 0):
            cudakit_pool = to_cudakit_pool(pool[:2])
    snap = json.loads(_C._mem_snapshot_json(cudakit_pool))
    for seg in snap["segments"]:
        seg["segment_pool_id"] = to_torch_pool(seg["segment_pool_id"])
    if not include_traces:
        snap["device_traces"] = [[] for _ in snap["device_traces"]]
    else:
        _annotate_traces(snap)
    return snap


def _annotate_traces(snap: dict[str, Any]) -> None:
    """The per-event fields torch's snapshot has and cudakit's C++ snapshot leaves to this
    layer: user_metadata (torch.cuda.memory._set_memory_metadata, in force when the event was
    recorded), compile_context ("N/A": cudakit records no torch.compile context), and
    skip_actions (events of those kinds are left out)."""
    skip = _history["skip_actions"]
    cleared = _history["cleared_before_us"]
    changes = _history["metadata"]
    times = [t for t, _ in changes]
    for i, trace in enumerate(snap["device_traces"]):
        if skip or cleared:
            trace = [e for e in trace if e.get("action") not in skip and
                     e.get("time_us", 0) >= cleared]
            snap["device_traces"][i] = trace
        for e in trace:
            k = bisect.bisect_right(times, e.get("time_us", 0)) - 1
            e.setdefault("user_metadata", changes[k][1] if k >= 0 else "")
            e.setdefault("compile_context", "N/A")


# What torch's history entry points were last told (cudakit's history has no notion of them):
# whether recording is on (torch._C._cuda_isHistoryEnabled), the actions to leave out, and the
# user metadata as (time in µs since the epoch, text) changes, oldest first (bounded: the
# oldest go once a trace could no longer hold events from before them).
# clear_history=True hides the events recorded before it (cleared_before_us; cudakit's ring
# itself is not emptied).
_history: dict[str, Any] = {"enabled": False, "skip_actions": frozenset(), "metadata": [],
                            "cleared_before_us": 0}
_METADATA_CHANGES_KEPT = 4096


def set_memory_metadata(metadata: str) -> None:
    """torch._C._cuda_setMemoryMetadata, served by cudakit: later trace events carry it as
    "user_metadata"."""
    if not isinstance(metadata, str):
        raise TypeError(f"_set_memory_metadata(): metadata must be a str, not "
                        f"{type(metadata).__name__}")
    with _lock:
        changes = _history["metadata"]
        changes.append((time.time_ns() // 1000, metadata))
        del changes[:-_METADATA_CHANGES_KEPT]


def get_memory_metadata() -> str:
    """torch._C._cuda_getMemoryMetadata, served by cudakit."""
    changes = _history["metadata"]
    return changes[-1][1] if changes else ""


def history_enabled() -> bool:
    """torch._C._cuda_isHistoryEnabled, served by cudakit."""
    return bool(_history["enabled"])


_HISTORY_EXTRAS_WARNED: set[str] = set()


def _warn_extra(name: str, value: Any) -> None:
    if name in _HISTORY_EXTRAS_WARNED:
        return
    _HISTORY_EXTRAS_WARNED.add(name)
    warnings.warn(f"torch.cuda.memory._record_memory_history({name}={value!r}) has no effect on "
                  "cudakit's allocator (served by cudakit since use_with_torch())",
                  UserWarning, stacklevel=4)


def record_history(enabled: Any = "all", context: Any = "all", stacks: str = "all",
                   max_entries: int = 2**63 - 1, *extras: Any) -> None:
    """torch._C._cuda_record_memory_history, served by cudakit. Later positional arguments of
    newer torch versions (clear_history, compile_context, global_record_annotations,
    skip_actions, record_pinned_host_memory, record_cuda) warn once when not their default."""
    names = ("clear_history", "compile_context", "global_record_annotations", "skip_actions",
             "record_pinned_host_memory", "record_cuda")
    defaults = (False, False, False, [], False, True)
    for name, default, value in zip(names, defaults, extras):
        # skip_actions and clear_history are applied (snapshots leave those events out)
        if value != default and name not in ("skip_actions", "clear_history"):
            _warn_extra(name, value)
    if extras and extras[0]:
        _history["cleared_before_us"] = time.time_ns() // 1000
    if len(extras) >= 6 and extras[5] is False:
        return  # record_cuda=False: device history not wanted
    _C._mem_record_history(enabled, context, stacks, min(int(max_entries), 2**63 - 1),
                           bool(extras and extras[0]))
    _history["enabled"] = enabled is not None
    if enabled is not None:
        skip = extras[3] if len(extras) >= 4 else None
        _history["skip_actions"] = frozenset(skip or ())


def record_history_legacy(enabled: bool, record_context: bool = True,
                          trace_alloc_max_entries: int = 1,
                          trace_alloc_record_context: bool = False,
                          record_context_cpp: bool = False, *extras: Any) -> None:
    """torch._C._cuda_record_memory_history_legacy (the bool form), served by cudakit."""
    _history["enabled"] = bool(enabled)
    if not enabled:
        _C._mem_record_history(None, None, "all", 1)
        return
    kind = "all" if trace_alloc_max_entries > 1 else "state"
    context = ("all" if trace_alloc_record_context else "state") if record_context else None
    _C._mem_record_history(kind, context, "all" if record_context_cpp else "python",
                           max(1, int(trace_alloc_max_entries)))


def allocator_backend() -> str:
    """torch._C._cuda_getAllocatorBackend, served by cudakit: the backend of the allocator that
    serves torch's memory ("native" or "cudaMallocAsync", torch's names), where torch's
    pluggable layer would answer "pluggable" (code that checks for "native" before using
    snapshots or graph-pool checkpoints finds them answered by cudakit)."""
    from . import memory as ck_memory

    return ck_memory.get_allocator_backend()


def get_memory_fraction(device: Any = None) -> float:
    """torch._C._cuda_getMemoryFraction, served by cudakit."""
    return _C._mem_get_fraction(_device_index(device))


# ---- CUDA graph trees (torch.compile(mode="reduce-overhead")): a private pool's live
# allocations and its checkpointed state. torch's own versions of these manipulate storages in
# C++; here torch's Python-visible entry points do the same (see set_checkpoint_pool_state).

def attach_oom_observer(observer: Any) -> None:
    """torch._C._cuda_attach_out_of_memory_observer, served by cudakit: observer(device,
    alloc, device_allocated, device_free) runs before torch's OutOfMemoryError is raised."""
    _C._mem_torch_add_oom_observer(observer)


def check_pool_live_allocations(device: Any, pool: Any, expected: Any) -> bool:
    """torch._C._cuda_checkPoolLiveAllocations, served by cudakit: whether the allocated blocks
    of torch's pool ``pool`` are exactly the data pointers ``expected``."""
    live = _C._mem_pool_live_allocations(device, to_cudakit_pool(pool))
    return set(live) == {int(p) for p in expected}


class AllocatorState:
    """torch._C._cuda_getCheckpointState's result under cudakit: the block layout of a private
    pool (which blocks were allocated, which free), for _cuda_setCheckpointPoolState."""

    __slots__ = ("_state", "__weakref__")

    def __init__(self, state: Any):
        self._state = state

    def __repr__(self) -> str:
        s = self._state
        return (f"<cudakit AllocatorState of pool {to_torch_pool(s.pool)} on device {s.device}: "
                f"{len(s.segments)} segment(s)>")


def get_checkpoint_state(device: Any, pool: Any) -> AllocatorState:
    """torch._C._cuda_getCheckpointState, served by cudakit."""
    return AllocatorState(_C._mem_pool_state(device, to_cudakit_pool(pool)))


# Storages given a deleter by set_checkpoint_pool_state: StorageImpl address -> (finalizer,
# data pointer). torch swaps a DataPtr with its allocator's deleter into such a storage; a
# storage's deleter cannot be set from outside libtorch, so a finalizer on the storage's
# Python object (which torch keeps alive exactly as long as the C++ storage: PyObject
# preservation) frees the block when the storage dies.
_restored: dict[int, tuple[Any, int]] = {}


def _free_restored(cdata: int, ptr: int) -> None:
    if _restored.pop(cdata, None) is not None:
        try:
            _C._mem_delete(ptr)
        except Exception:  # interpreter exit: the pool goes with the process
            pass


def set_checkpoint_pool_state(device: Any, state: Any, stale_storages: Any = (),
                              storages_to_add_deleters_to: Any = ()) -> None:
    """torch._C._cuda_setCheckpointPoolState, served by cudakit: resets the pool's blocks to
    ``state``. Blocks allocated now that the state has free are freed: each live storage of
    them must be in ``stale_storages`` (torch's rule), and loses its deleter. Storages in
    ``storages_to_add_deleters_to`` whose memory the state has allocated free their block when
    they die."""
    torch = _state["torch"]
    if not isinstance(state, AllocatorState):
        raise TypeError(f"_cuda_setCheckpointPoolState(): state must come from "
                        f"torch._C._cuda_getCheckpointState, not {type(state).__name__}")
    st = state._state
    stale = list(dict.fromkeys(int(c) for c in stale_storages))
    live_now = set(_C._mem_pool_live_allocations(st.device, st.pool))
    keep = {b["ptr"] for seg in st.segments for b in seg["blocks"] if b["allocated"]}
    if len(stale) < len(live_now - keep):
        raise RuntimeError("Any stale tensors which are being manually freed must be passed to "
                           "set checkpoint (cudakit: " + str(len(live_now - keep)) + " blocks of "
                           "the pool are freed by the state, " + str(len(stale)) + " storages "
                           "given)")
    storage_of = torch.UntypedStorage._new_with_weak_ptr
    for cdata in stale:
        s = storage_of(cdata)
        if s is None or s.data_ptr() not in live_now:
            continue
        if cdata in _restored:
            _restored.pop(cdata)[0].detach()
        elif torch._C._has_Standard_Deleter(cdata):
            # torch frees it through its own bookkeeping and drops the storage's deleter
            torch._C._free_And_Remove_DeleterFn(cdata)
    _freed, allocated = _C._mem_set_pool_state(st)
    allocated = set(allocated)
    for cdata in dict.fromkeys(int(c) for c in storages_to_add_deleters_to):
        s = storage_of(cdata)
        if s is None or s.data_ptr() not in allocated or cdata in _restored:
            continue
        if torch._C._has_Standard_Deleter(cdata):
            continue  # its own deleter frees the block through torch's hook
        ptr = s.data_ptr()
        _restored[cdata] = (weakref.finalize(s, _free_restored, cdata, ptr), ptr)


def _make_storage_deleter_wrappers(torch: Any) -> dict[str, Any]:
    """torch._C's deleter queries, aware of the storages set_checkpoint_pool_state gave a
    deleter (torch's cudagraph trees check and remove deleters with these)."""
    has_std = torch._C._has_Standard_Deleter
    free_remove = torch._C._free_And_Remove_DeleterFn
    raw_delete = torch._C._cuda_cudaCachingAllocator_raw_delete

    def has_standard_deleter(storage: int) -> bool:
        """cudakit (use_with_torch): also True for storages whose block cudakit frees when
        they die (set_checkpoint_pool_state)."""
        return int(storage) in _restored or has_std(storage)

    def free_and_remove_deleter(storage: int) -> None:
        """cudakit (use_with_torch): frees the storage's block and drops its deleter, also for
        storages given one by set_checkpoint_pool_state."""
        entry = _restored.pop(int(storage), None)
        if entry is None:
            return free_remove(storage)
        entry[0].detach()
        _C._mem_delete(entry[1])

    def cuda_raw_delete(ptr: int) -> None:
        """cudakit (use_with_torch): torch's raw_delete, which also frees blocks that
        set_checkpoint_pool_state allocated (torch's plug-in bookkeeping never saw them)."""
        try:
            raw_delete(ptr)
        except RuntimeError as e:
            if "not allocated here" not in str(e):
                raise
            try:
                _C._mem_delete(ptr)
            except ValueError:
                raise e from None

    return {"_has_Standard_Deleter": has_standard_deleter,
            "_free_And_Remove_DeleterFn": free_and_remove_deleter,
            "_cuda_cudaCachingAllocator_raw_delete": cuda_raw_delete}


def _ipc_refused(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError(
        "cudakit: sharing CUDA tensors between processes (torch.multiprocessing) is not "
        "available while torch allocates from cudakit's pool (use_with_torch()): torch's "
        "pluggable-allocator interface has no IPC hooks (shareIpcHandle / getIpcDevPtr). Send "
        "CPU tensors, or keep torch's own allocator in the processes that share CUDA tensors.")


def _make_python_replacements(torch: Any) -> dict[str, Any]:
    """The Python-level functions of torch.cuda.memory replaced besides the _C entry points."""

    def memory_stats_as_nested_dict(device: Any = None) -> dict[str, Any]:
        """cudakit (use_with_torch): the shared pool's statistics with torch's keys, also before
        torch's first CUDA call (torch answers {} then; the pool may serve CuPy already)."""
        return memory_stats_nested(torch.cuda._get_device_index(device, optional=True))

    def empty_cache() -> None:
        """cudakit (use_with_torch): releases the shared pool's unused cached memory."""
        _C._mem_empty_cache()

    return {"memory_stats_as_nested_dict": memory_stats_as_nested_dict,
            "empty_cache": empty_cache}


def _make_mempool_class(torch: Any) -> type:
    class MemPool:
        """torch.cuda.MemPool served by cudakit (use_with_torch): a private pool of cudakit's
        allocator, with an id in torch's space (from ``torch.cuda.graph_pool_handle()``), so
        ``torch.cuda.use_mem_pool(pool)`` and ``torch.cuda.graph(pool=pool.id)`` route to it
        through the pluggable allocator's pool hooks. With ``allocator=`` (a
        ``torch.cuda.memory.CUDAPluggableAllocator`` made after use_with_torch()), the pool's
        segments come from that allocator's functions, as torch's."""

        def __init__(self, allocator: Any = None, use_on_oom: bool = False,
                     no_split: bool = False):
            source = None if allocator is None else _pool_source(allocator)
            self._device = torch.cuda.current_device()
            self._id = tuple(torch.cuda.graph_pool_handle())
            _C._mem_torch_pool_create(self._device, self._id, use_on_oom, no_split, source)
            self.allocator = allocator

        @property
        def id(self) -> tuple[int, int]:
            return self._id

        def use_count(self) -> int:
            return _C._mem_torch_pool_use_count(self._device, self._id)

        def snapshot(self, include_traces: bool = True) -> list[dict[str, Any]]:
            return snapshot_torch((*self._id, include_traces))["segments"]

        def __del__(self) -> None:
            try:
                _C._mem_torch_pool_release(self._device, self._id)
            except Exception:
                pass  # interpreter exit: nothing to release

    MemPool.__module__ = "torch.cuda.memory"
    MemPool.__qualname__ = "MemPool"
    return MemPool


# torch._C._cuda_customAllocator(alloc_fn, free_fn) calls made since the patch: the raw
# allocator object's id -> (object, alloc address, free address). torch's allocator objects
# do not expose their functions again, and torch.cuda.MemPool(allocator=...) needs them.
_custom_allocators: dict[int, tuple[Any, int, int]] = {}


def _make_custom_allocator(original: Any) -> Any:
    def custom_allocator(alloc_fn: int, free_fn: int) -> Any:
        """cudakit (use_with_torch): torch's _cuda_customAllocator, remembering the functions
        so that torch.cuda.MemPool(allocator=...) can take its segments from them."""
        raw = original(alloc_fn, free_fn)
        with _lock:
            _custom_allocators[id(raw)] = (raw, int(alloc_fn), int(free_fn))
        return raw

    custom_allocator.__wrapped__ = original
    return custom_allocator


def _pool_source(allocator: Any) -> Any:
    """The cudakit allocator behind torch's ``allocator`` (a torch.cuda.memory
    _CUDAAllocator / CUDAPluggableAllocator, or cudakit's own)."""
    from . import memory as ck_memory

    if isinstance(allocator, ck_memory._CUDAAllocator):
        return allocator.allocator()
    if isinstance(allocator, _C._PluggableAllocator):
        return allocator
    raw = allocator.allocator() if hasattr(allocator, "allocator") else allocator
    entry = _custom_allocators.get(id(raw))
    if entry is None or entry[0] is not raw:
        raise NotImplementedError(
            "torch.cuda.MemPool(allocator=...): cudakit does not know this allocator's "
            "functions (it was created before use_with_torch(), or is not a "
            "torch.cuda.memory.CUDAPluggableAllocator). Create it after use_with_torch(), or "
            "pass cudakit.memory.CUDAPluggableAllocator(path, alloc_fn_name, free_fn_name).")
    return _C._mem_pluggable_from_addresses(entry[1], entry[2], "torch.cuda.MemPool allocator")


def _make_use_mem_pool(torch: Any, original: Any) -> Any:
    import contextlib

    @contextlib.contextmanager
    def use_mem_pool(pool: Any, device: Any = None):
        """torch.cuda.use_mem_pool for cudakit-served pools (use_with_torch): routes this
        thread's allocations to ``pool`` through the pluggable allocator's pool hooks; a graph
        being captured keeps the pool alive (torch's _retain_pool takes only its own class)."""
        idx = torch.cuda.current_device() if device is None else \
            torch.cuda._get_device_index(device)
        # torch >= 2.6 routes only this thread; older torch has the all-streams form only
        begin = getattr(torch._C, "_cuda_beginAllocateCurrentThreadToPool", None) or \
            torch._C._cuda_beginAllocateToPool
        begin(idx, pool.id)
        try:
            current = getattr(getattr(torch.cuda, "CUDAGraph", None), "get_currently_capturing_graph",
                              None)
            if current is not None and torch.cuda.is_current_stream_capturing():
                graph = current()
                kept = getattr(graph, "_cudakit_pools", None)
                if kept is None:
                    kept = []
                    setattr(graph, "_cudakit_pools", kept)
                kept.append(pool)
            yield
        finally:
            end = getattr(torch._C, "_cuda_endAllocateToPool", None) or \
                torch._C._cuda_endAllocateCurrentStreamToPool
            end(idx, pool.id)
            torch._C._cuda_releasePool(idx, pool.id)

    use_mem_pool.__wrapped__ = original
    return use_mem_pool


_C_REPLACEMENTS = {
    "_cuda_memoryStats": memory_stats_nested,
    "_cuda_resetAccumulatedMemoryStats": reset_accumulated,
    "_cuda_resetPeakMemoryStats": reset_peak,
    "_cuda_emptyCache": empty_cache_c,
    "_cuda_memorySnapshot": snapshot_torch,
    "_cuda_record_memory_history": record_history,
    "_cuda_record_memory_history_legacy": record_history_legacy,
    "_cuda_getMemoryFraction": get_memory_fraction,
    "_cuda_getAllocatorBackend": allocator_backend,
    # torch.accelerator.memory_* (torch >= 2.9) read the device allocator through these
    "_accelerator_isAllocatorInitialized": allocator_initialized,
    "_accelerator_getDeviceStats": memory_stats_nested,
    "_accelerator_resetPeakStats": reset_peak,
    "_accelerator_resetAccumulatedStats": reset_accumulated,
    "_accelerator_emptyCache": empty_cache_c,
    "_cuda_isHistoryEnabled": history_enabled,
    "_cuda_setMemoryMetadata": set_memory_metadata,
    "_cuda_getMemoryMetadata": get_memory_metadata,
    "_cuda_attach_out_of_memory_observer": attach_oom_observer,
    "_cuda_checkPoolLiveAllocations": check_pool_live_allocations,
    "_cuda_getCheckpointState": get_checkpoint_state,
    "_cuda_setCheckpointPoolState": set_checkpoint_pool_state,
}


def _set(owner: Any, name: str, value: Any) -> None:
    original = owner.__dict__.get(name, _MISSING) if hasattr(owner, "__dict__") else \
        getattr(owner, name, _MISSING)
    _state["patches"].append((owner, name, original))
    setattr(owner, name, value)


def patch(torch: Any) -> None:
    """Makes torch's memory API answer from cudakit (idempotent; see the module docstring)."""
    with _lock:
        if _state["patches"]:
            return
        for name, fn in _C_REPLACEMENTS.items():
            if hasattr(torch._C, name):
                _set(torch._C, name, fn)
        if all(hasattr(torch._C, n) for n in ("_has_Standard_Deleter", "_free_And_Remove_DeleterFn",
                                               "_cuda_cudaCachingAllocator_raw_delete")):
            for name, fn in _make_storage_deleter_wrappers(torch).items():
                _set(torch._C, name, fn)
        if hasattr(torch._C, "_cuda_customAllocator"):
            _set(torch._C, "_cuda_customAllocator", _make_custom_allocator(
                torch._C._cuda_customAllocator))
        for name in _SETTINGS_ENTRY_POINTS:
            original = getattr(torch._C, name, None)
            if original is not None:
                _set(torch._C, name, _make_settings_forward(original))
        original = getattr(torch._C, "_cuda_cudaCachingAllocator_enable", None)
        if original is not None:
            _set(torch._C, "_cuda_cudaCachingAllocator_enable",
                 _make_caching_enable_forward(original))
        mem = torch.cuda.memory
        for name, fn in _make_python_replacements(torch).items():
            original = getattr(mem, name, None)
            _set(mem, name, fn)
            # torch.cuda re-exports the function; a different object there is not torch's.
            if original is not None and getattr(torch.cuda, name, None) is original:
                _set(torch.cuda, name, fn)
        mempool = _make_mempool_class(torch)
        use_pool = _make_use_mem_pool(torch, getattr(mem, "use_mem_pool", None))
        for owner in (mem, torch.cuda):
            if hasattr(owner, "MemPool"):
                _set(owner, "MemPool", mempool)
            if hasattr(owner, "use_mem_pool"):
                _set(owner, "use_mem_pool", use_pool)
        storage = getattr(torch, "UntypedStorage", None)
        if storage is not None:
            for name in ("_share_cuda_", "_new_shared_cuda"):
                if hasattr(storage, name):
                    _set(storage, name, staticmethod(_ipc_refused) if name == "_new_shared_cuda"
                         else _ipc_refused)
        _log.info("cudakit.memory.use_with_torch: torch's memory API answers from cudakit (%s)",
                  ", ".join(patched_names()))


def patched_names() -> list[str]:
    """Qualified names of what the patch replaced, in patch order."""
    out = []
    for owner, name, _ in _state["patches"]:
        base = getattr(owner, "__name__", type(owner).__name__)
        out.append(f"{base}.{name}")
    return out


def unpatch() -> None:
    """Restores every attribute the patch replaced (no-op when not patched)."""
    with _lock:
        for owner, name, original in reversed(_state["patches"]):
            if original is _MISSING:
                try:
                    delattr(owner, name)
                except AttributeError:
                    pass
            else:
                setattr(owner, name, original)
        _state["patches"].clear()
        _C._mem_torch_set_caching_enabled(True)  # torch's own flag went back with its function


def is_patched() -> bool:
    return bool(_state["patches"])


def state() -> dict[str, Any]:
    """What use_with_torch did in this process (for logs and tests)."""
    return {"allocator_installed": _state["allocator"] is not None,
            "torch_called_hooks": bool(_C._mem_torch_hooks_used()),
            "memory_api_patched": bool(_state["patches"]),
            "patched": patched_names(),
            # how torch.profiler(profile_memory=True) learns of torch's allocations here
            "profiler_reporter": _state.get("profiler_reporter", "not installed")}
