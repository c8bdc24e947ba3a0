"""cudakit's caching allocator inside CuPy (cudakit.memory.use_with_cupy).

CuPy's arrays come from cudakit's pool through ``cupy.cuda.set_allocator``; each allocation is
ordered on CuPy's current stream (a Python allocator hook: CuPy's C-function allocator has no
stream argument, and allocating on the wrong stream would let another stream reuse memory CuPy
still uses) and counted as the "cupy" framework in ``cudakit.memory.memory_stats()``.

What replaces ``cupy.get_default_memory_pool()`` once CuPy allocates from cudakit (CuPy's own
pool then holds nothing; its statistics stay at zero):

=============================================  ==============================================
CuPy's MemoryPool                              cudakit.memory
=============================================  ==============================================
``used_bytes()``                               ``memory_allocated_by("cupy")``
``total_bytes()``                              ``memory_reserved()`` (the shared pool's
                                               reservation: segments are not per framework)
``free_bytes()``                               ``memory_reserved() - memory_allocated()``
``free_all_blocks()``                          ``empty_cache()``
``set_limit(size=n)``                          ``set_per_process_memory_fraction(n / total)``
``get_limit()``                                ``get_per_process_memory_fraction() * total``
=============================================  ==============================================

Streams: cudakit asks the streams that allocated from it whether they are idle before it
moves free pages (asking the driver about a destroyed stream is undefined). CuPy destroys a
``cupy.cuda.Stream`` when its last reference goes, without telling cudakit, so the hook keeps
each stream it allocated on alive; when a new stream shows up it looks for kept streams nobody
else references any more, retires them in cudakit (``_C._stream_retiring``: an event fence
replaces the stream) and lets CuPy destroy them. A program that drops its only stream keeps
that one alive until the next new stream (or exit).

Thread-safety: the allocator is thread-safe (CuPy calls it from any thread holding the GIL).
"""
from __future__ import annotations

import sys
from typing import Any

from . import _C


def allocator(cupy: Any) -> Any:
    """The ``malloc`` of a ``cupy.cuda.memory.PythonFunctionAllocator`` over cudakit's pool."""
    current_stream = cupy.cuda.get_current_stream
    alloc = _C._mem_alloc_for
    free = _C._mem_delete
    retiring = _C._stream_retiring
    kept: dict = {}  # stream handle -> (cupy stream, device): see the module docstring

    def _keep(stream: Any, ptr: int, device_id: int) -> None:
        # References to a kept stream nobody else holds: kept's tuple, the loop's name and
        # getrefcount's argument.
        for h, (s, dev) in list(kept.items()):
            if sys.getrefcount(s) <= 3:
                retiring(h, dev)
                del kept[h]
            del s
        kept[ptr] = (stream, device_id)

    def _malloc(size: int, device_id: int) -> int:
        # A raw handle with an explicit device: no driver query per allocation.
        stream = current_stream()
        ptr = stream.ptr
        if ptr > 2 and ptr not in kept:  # 0, 1, 2: the null, legacy and per-thread streams
            _keep(stream, ptr, device_id)
        return alloc("cupy", size, device_id, ptr)

    def _free(ptr: int, device_id: int) -> None:
        free(ptr)

    return cupy.cuda.memory.PythonFunctionAllocator(_malloc, _free).malloc


def install(cupy: Any) -> None:
    cupy.cuda.set_allocator(allocator(cupy))
