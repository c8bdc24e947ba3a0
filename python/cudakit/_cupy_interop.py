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

Thread-safety: the allocator is thread-safe (CuPy calls it from any thread holding the GIL).
"""
from __future__ import annotations

from typing import Any

from . import _C


def allocator(cupy: Any) -> Any:
    """The ``malloc`` of a ``cupy.cuda.memory.PythonFunctionAllocator`` over cudakit's pool."""
    current_stream = cupy.cuda.get_current_stream
    alloc = _C._mem_alloc_for
    free = _C._mem_delete

    def _malloc(size: int, device_id: int) -> int:
        # A raw handle with an explicit device: no driver query per allocation.
        return alloc("cupy", size, device_id, current_stream().ptr)

    def _free(ptr: int, device_id: int) -> None:
        free(ptr)

    return cupy.cuda.memory.PythonFunctionAllocator(_malloc, _free).malloc


def install(cupy: Any) -> None:
    cupy.cuda.set_allocator(allocator(cupy))
