"""torch.cuda.green_contexts: partitions of a device's SMs (seed section "Green Contexts").

``GreenContext.create(num_sms, device_id=None)`` builds a green context on the driver's SM
resource split; ``ctx.Stream()`` returns a :class:`cudakit.Stream` whose kernels run on the
partition only. These are ordinary cudakit streams: events, ``wait_stream``, the caching
allocator and graphs work on them. ``ctx.sm_count`` is the number of SMs granted (the driver
rounds up: at least 8 SMs in multiples of 8 on compute capability 9.0+, so 66 gives 72 on an
H200). ``set_context()`` / ``pop_context()`` are kept as in torch, deprecated there (use
``with cudakit.stream(ctx.Stream()):``).

The emulated backend models partitions of its 132-SM devices with the same rules.
"""
from __future__ import annotations

import warnings
from typing import Optional

from . import _C

__all__ = ["GreenContext"]

_CONTEXT_STACK_DEPRECATION = (
    "GreenContext.set_context and GreenContext.pop_context are deprecated (as in torch): "
    "create a stream with GreenContext.Stream() and use cudakit.stream(stream) instead."
)


class GreenContext:
    r"""A CUDA green context: a partition of a device's SMs.

    Create with :meth:`create` (torch's spelling) or ``GreenContext(num_sms=..., device_id=...)``.
    """

    def __init__(self, *, num_sms: int, device_id: Optional[int] = None) -> None:
        self._ctx = _C._GreenContext.create(num_sms, device_id)

    @staticmethod
    def create(num_sms: int, device_id: Optional[int] = None) -> "GreenContext":
        r"""Create a green context with ``num_sms`` SMs (rounded up to the device's partition
        rules; see :attr:`sm_count`).

        Arguments:
            num_sms (int): The number of SMs to use in the green context.
            device_id (int, optional): The device index of the green context (default: the
                current device).

        Raises ValueError for a count the device cannot provide (naming the accepted range),
        NotImplementedError on a driver without green contexts.
        """
        return GreenContext(num_sms=num_sms, device_id=device_id)

    @staticmethod
    def sm_resource(device_id: Optional[int] = None) -> dict:
        """How the device's SMs partition: ``{'sm_count', 'min_partition_sms', 'sm_alignment'}``."""
        return _C._GreenContext.sm_resource(device_id)

    @property
    def sm_count(self) -> int:
        """The number of SMs of the partition (after the driver's rounding)."""
        return self._ctx.sm_count

    @property
    def device_id(self) -> int:
        """The device index of this green context."""
        return self._ctx.device_id

    def Stream(self):  # noqa: N802 (torch's name)
        r"""A stream of this green context (drawn round-robin from a pool of 32, as torch).

        Synchronisation with other streams is the caller's, with events or ``wait_stream``, as
        for any stream. The stream keeps the context alive.
        """
        s = self._ctx.Stream()
        s._green_context = self  # the context owns the stream: keep it alive while s lives
        return s

    def set_context(self) -> None:
        r"""Make the green context current: its own stream (and its device) become current on
        this thread, ordered after the work already on the previous current stream.

        Deprecated (as in torch 2.11). Unlike torch, the driver's context stack is not changed.
        """
        warnings.warn(_CONTEXT_STACK_DEPRECATION, DeprecationWarning, stacklevel=2)
        self._ctx.set_context()

    def pop_context(self) -> None:
        r"""Restore the stream and device current before :meth:`set_context`, ordered after the
        work enqueued on the green context meanwhile. Deprecated (as in torch 2.11)."""
        warnings.warn(_CONTEXT_STACK_DEPRECATION, DeprecationWarning, stacklevel=2)
        self._ctx.pop_context()

    def __repr__(self) -> str:
        return (f"<cudakit.green_contexts.GreenContext device={self.device_id} "
                f"sm_count={self.sm_count}>")
