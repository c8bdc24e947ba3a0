"""Forwards of torch's allocator switches to cudakit's pool (used by _torch_interop.patch):
torch applies each one to its own allocator, cudakit to the pool that serves torch's memory."""
from __future__ import annotations

from typing import Any

from . import _C


def make_settings_forward(original: Any) -> Any:
    def set_allocator_settings(conf: str) -> None:
        """cudakit (use_with_torch): torch.cuda.memory._set_allocator_settings also configures
        cudakit's pool, which serves torch's CUDA memory (expandable_segments,
        max_split_size_mb, ...); torch applies it too (its pinned-memory keys still matter)."""
        if not isinstance(conf, str):
            raise TypeError(f"_set_allocator_settings(): argument 'env' must be a str, not "
                            f"{type(conf).__name__} ({conf!r})")
        _C._mem_set_settings(conf)  # first: a value cudakit rejects leaves both unchanged
        original(conf)

    set_allocator_settings.__wrapped__ = original
    return set_allocator_settings


# torch._C entry points of torch's allocator settings (older and newer torch).
SETTINGS_ENTRY_POINTS = ("_cuda_cudaCachingAllocator_set_allocator_settings",
                         "_accelerator_setAllocatorSettings")


def make_caching_enable_forward(original: Any) -> Any:
    def caching_allocator_enable(value: Any) -> None:
        """cudakit (use_with_torch): torch.cuda.caching_allocator_enable also reaches the
        allocations torch makes from cudakit: while disabled they come straight from the device
        and go straight back, outside the pool and its statistics, as torch's uncached ones."""
        original(value)
        _C._mem_torch_set_caching_enabled(bool(value))

    caching_allocator_enable.__wrapped__ = original
    return caching_allocator_enable
