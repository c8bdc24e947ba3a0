"""cudakit: torch.cuda's runtime services without libtorch.

The names below mirror ``torch.cuda`` (same signatures and semantics). Importing cudakit
never touches the driver: the backend initialises lazily on the first device call.
Backends: ``cuda`` (default) or ``emulated`` (host threads/memory, for CI and GPU-less
development), chosen with ``CUDAKIT_BACKEND`` or :func:`set_backend` before first use.
"""
from __future__ import annotations

import warnings as _warnings

try:
    from . import _C
except ImportError as _e:  # the extension is built by CMake, not found next to the sources
    import os as _os

    _here = _os.path.dirname(_os.path.abspath(__file__))
    raise ImportError(
        f"cudakit's compiled extension (cudakit._C) was not found next to {_here}: this is "
        "the source tree, which has no extension in it. Build it and put the build's python "
        "directory first on the path: `cmake -S . -B build -G Ninja && cmake --build build "
        "--target cudakit_python`, then `PYTHONPATH=build/python python3 ...` (run from the "
        "repository root, not from python/). An installed cudakit lives in "
        "<prefix>/lib/python3/dist-packages.") from _e  # the cause is chained, not repeated
from ._C import (  # noqa: F401  (re-exported API)
    AcceleratorError,
    ArgumentTypeError,
    Device,
    Event,
    ExternalStream,
    KeyNotFoundError,
    OutOfMemoryError,
    Stream,
    StreamContext,
    backend_capabilities,
    backend_name,
    can_device_access_peer,
    check_error,
    clock_rate,
    current_device,
    current_stream,
    default_stream,
    device_count,
    device_memory_used,
    driver_version,
    get_arch_list,
    get_device_capability,
    get_device_name,
    get_device_properties,
    get_gencode_flags,
    get_stream_from_external,
    init,
    is_available,
    is_bf16_supported,
    is_initialized,
    is_tf32_supported,
    memcpy_async,
    memcpy_peer_async,
    memory_usage,
    memset_async,
    power_draw,
    set_backend,
    set_device,
    set_stream,
    stream,
    synchronize,
    temperature,
    utilization,
)
from ._device import (  # noqa: F401
    _get_device_index,
    cudart,
    current_blas_handle,
    current_solver_handle,
    device,
    device_of,
    get_sync_debug_mode,
    set_sync_debug_mode,
)

_C._set_sync_warning_handler(lambda msg: _warnings.warn(msg, UserWarning, stacklevel=3))


def _dtype_from_name(name: str):
    # What dtype.__reduce__ names to unpickle a dtype: a Python function, because pickle
    # cannot store a reference to a pybind11 function (its __self__ is a capsule).
    return _C._dtype_from_name(name)


# ---- sections in their own modules (torch.cuda re-exports memory's names too) ----
from . import memory  # noqa: E402,F401  (memory_viz: imported on use; `python -m cudakit.memory_viz` warns otherwise)
from .memory import *  # noqa: E402,F401,F403
from .memory import use_mem_pool  # noqa: E402,F401
from . import random  # noqa: E402,F401
from .random import (  # noqa: E402,F401
    get_rng_state, get_rng_state_all, initial_seed, manual_seed, manual_seed_all, seed,
    seed_all, set_rng_state, set_rng_state_all,
)
from . import nvtx  # noqa: E402,F401  (cudakit.nvtx.*, as torch.cuda)
# Arrays and built-in ops (dtype names such as cudakit.float32 / cudakit.bool, as torch).
from .tensor import *  # noqa: E402,F401,F403

# ---- imported on first use (issue 15.6: import <= 50 ms) ----
# profiler (gzip, json, pickle for traces), graphs (pickle), the graph annotations and the
# modules of the later seed sections (tunable, jiterator, gds, green contexts, the stream
# sanitizer, comm, nccl) are loaded by the first access to one of their names, as
# `cudakit.profiler`, `cudakit.graph` or `from cudakit import CUDAGraph`; `import
# cudakit.graphs` works as usual. The first four were ~7 ms of every import;
# tests/python/test_import_footprint.py keeps them out. None of them registers anything with
# _C when imported (the sanitizer's environment switch acts when libcudakit loads).
_LAZY_MODULES = ("profiler", "graphs", "graph_annotations", "_graph_annotations", "tunable",
                 "jiterator", "gds", "green_contexts", "sanitizer", "_sanitizer", "comm",
                 "nccl")
# torch.cuda re-exports these names from torch.cuda.graphs.
_LAZY_NAMES = {
    name: "graphs"
    for name in ("CUDAGraph", "export_dot", "export_graph_data", "graph",
                 "is_current_stream_capturing", "make_graphed_callables")
}


def __getattr__(name: str):
    module = _LAZY_NAMES.get(name, name if name in _LAZY_MODULES else None)
    if module is None:
        raise AttributeError(f"module 'cudakit' has no attribute '{name}'")
    import importlib

    mod = importlib.import_module(f".{module}", __name__)  # also sets cudakit.<module>
    value = mod if module == name else getattr(mod, name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY_MODULES) | set(_LAZY_NAMES))


__version__ = "0.1.0"
