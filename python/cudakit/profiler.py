"""torch.cuda.profiler: start/stop the profiler around a region (seed section "profiler").

``start()`` / ``stop()`` are cuProfilerStart / cuProfilerStop: the capture-range switches of
Nsight Systems (``nsys profile --capture-range=cudaProfilerApi``) and Nsight Compute
(``ncu --profile-from-start off``); without such a tool they have no visible effect. They act
on the calling thread's current device (device 0 on a thread that has not chosen one). On the
emulated backend they record the state; ``_C._profiler_state()`` reports what start/stop did.
"""
from __future__ import annotations

import contextlib

from . import _C

__all__ = ["start", "stop", "profile"]


def start() -> None:
    """Starts profiler data collection (cuProfilerStart)."""
    _C._profiler_start()


def stop() -> None:
    """Stops profiler data collection (cuProfilerStop)."""
    _C._profiler_stop()


@contextlib.contextmanager
def profile():
    """Context manager: profiling on inside the block.

    Unlike torch, ``start()`` runs before the ``try``: when it fails (no device), its error is
    reported alone instead of being followed by a failing ``stop()``.
    """
    start()
    try:
        yield
    finally:
        stop()
