"""torch.cuda.gds: GPUDirect Storage (seed section "GPUDirect Storage").

``GdsFile(filename, flags)`` with ``load_storage`` / ``save_storage`` (torch's API),
``gds_register_buffer`` / ``gds_deregister_buffer`` and ``is_available()``. cuFile is loaded
at run time. Where GPUDirect Storage cannot be used (no cuFile, no nvidia-fs, a file system
without GDS support, the emulated backend) or ``CUDAKIT_GDS=compat``, the same calls take
cudakit's compat path: O_DIRECT where the file system allows it, pinned staging buffers, and
several threads and copy streams pipelining read -> H2D and D2H -> write. ``GdsFile.io_path``
says which path a file uses and ``GdsFile.compat_reason`` why.

Beyond torch: ``GdsFile.read_into(tensor, offset, stream=None)`` and
``write_from(tensor, offset, stream=None)`` are stream-ordered and return a
:class:`GdsRequest`. ``write_from`` copies the bytes into pinned staging on ``stream`` and
returns at once (compat path; the staging is as large as the transfer, taken from the pinned
cache and given back chunk by chunk as it is written); ``read_into`` returns once the data is
on the device (the device-side waits tried for an asynchronous read hung on the H200).

Buffers: where torch takes a ``Storage``, cudakit takes a contiguous cuda
:class:`cudakit.Tensor` (its bytes) or any object with ``__dlpack__`` in device memory (a
torch tensor, a CuPy array), imported without a copy.
"""
from __future__ import annotations

import os
from typing import Any, Optional

from . import _C
from ._C import Tensor

__all__ = [
    "is_available",
    "unavailable_reason",
    "gds_register_buffer",
    "gds_deregister_buffer",
    "GdsFile",
    "GdsRequest",
]

GdsRequest = _C._GdsRequest


def is_available() -> bool:
    """Whether GPUDirect Storage moves data by DMA here (cuFile loaded, its driver open, the
    nvidia-fs kernel driver present). False on the emulated backend. GdsFile works either way:
    without GDS it takes the compat path."""
    return _C._gds_is_available()


def unavailable_reason() -> str:
    """Why :func:`is_available` is False ("" when it is True)."""
    return _C._gds_unavailable_reason()


def _as_tensor(obj: Any, fn: str, arg: str) -> Tensor:
    if isinstance(obj, Tensor):
        return obj
    if hasattr(obj, "__dlpack__"):
        from . import from_dlpack

        return from_dlpack(obj)
    raise _C.ArgumentTypeError(
        f"{fn}(): argument '{arg}' must be a cudakit.Tensor or an object with __dlpack__ "
        f"(torch tensor, CuPy array), got {type(obj).__name__}")


def gds_register_buffer(s: Any) -> None:
    """Registers a buffer's device memory for GDS transfers (cuFileBufRegister when GDS is in
    use). The memory stays alive until :func:`gds_deregister_buffer`.

    Args:
        s: a contiguous cuda Tensor, or an object with ``__dlpack__`` in device memory.
    """
    _C._gds_register_buffer(_as_tensor(s, "gds_register_buffer", "s"))


def gds_deregister_buffer(s: Any) -> None:
    """Deregisters a buffer registered with :func:`gds_register_buffer`.

    Args:
        s: the tensor (or DLPack object) that was registered, or one with the same data pointer.
    """
    _C._gds_deregister_buffer(_as_tensor(s, "gds_deregister_buffer", "s"))


class GdsFile:
    r"""A file for GPUDirect Storage transfers (torch.cuda.gds.GdsFile).

    Args:
        filename (str or os.PathLike): Name of the file to open.
        flags (int): Flags for ``os.open`` (``os.O_RDWR | os.O_CREAT`` ...). ``os.O_DIRECT``
            is added where the file system supports it.

    Example::

        >>> f = cudakit.gds.GdsFile(path, os.O_CREAT | os.O_RDWR)
        >>> f.save_storage(src1, offset=0)
        >>> f.save_storage(src2, offset=src1.nbytes)
        >>> f.load_storage(dst1, offset=0)
    """

    def __init__(self, filename: Any, flags: int):
        self._file = None
        self.filename = os.fspath(filename) if isinstance(filename, os.PathLike) else filename
        self.flags = flags
        self._file = _C._GdsFile(filename, flags)

    def __del__(self) -> None:
        f = getattr(self, "_file", None)
        if f is not None:
            try:
                f.close()
            except Exception:
                pass

    def __enter__(self) -> "GdsFile":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Deregisters the handle (if registered) and closes the file. Transfers in flight
        finish first; later calls raise."""
        self._file.close()

    @property
    def fd(self) -> int:
        """The file descriptor (opened with O_DIRECT where the file system supports it)."""
        return self._file.fd()

    @property
    def handle(self) -> Optional[int]:
        """The registered handle (cuFile's on the gds path, the file descriptor on the compat
        path), or None when not registered."""
        return self._file.handle() if self._file.is_registered() else None

    @property
    def io_path(self) -> str:
        """``"gds"`` (cuFile DMA) or ``"compat"`` (cudakit's engine)."""
        return self._file.io_path()

    @property
    def compat_reason(self) -> str:
        """Why the compat path was taken ("" on the gds path)."""
        return self._file.compat_reason()

    def size(self) -> int:
        """Current size of the file in bytes."""
        return self._file.size()

    def register_handle(self) -> None:
        """Registers the file with cuFile (``cuFileHandleRegister``), or selects the compat
        path when GDS cannot be used for it. Done by the constructor."""
        self._file.register_handle()

    def deregister_handle(self) -> None:
        """Deregisters the file (``cuFileHandleDeregister``)."""
        self._file.deregister_handle()

    def load_storage(self, storage: Any, offset: int = 0) -> None:
        """Loads ``storage.nbytes`` bytes from the file at ``offset`` into ``storage`` (a
        contiguous cuda Tensor or a DLPack object), after the work already on the current
        stream. Raises ValueError for a read past the end of the file."""
        self._file.load(_as_tensor(storage, "GdsFile.load_storage", "storage"), offset)

    def save_storage(self, storage: Any, offset: int = 0) -> None:
        """Saves all bytes of ``storage`` into the file at ``offset``."""
        self._file.save(_as_tensor(storage, "GdsFile.save_storage", "storage"), offset)

    def read_into(self, tensor: Any, offset: int = 0, stream: Any = None) -> GdsRequest:
        """Stream-ordered load: starts after the work enqueued on ``stream`` (default: the
        current stream) and returns once the data is on the device, so work enqueued there
        afterwards sees it. ``GdsRequest.wait()`` reports errors."""
        return self._file.read_into(_as_tensor(tensor, "GdsFile.read_into", "tensor"), offset,
                                    stream)

    def write_from(self, tensor: Any, offset: int = 0, stream: Any = None) -> GdsRequest:
        """Stream-ordered save of the tensor's contents as of this point in ``stream``: the bytes
        are copied into pinned staging on ``stream`` and the call returns at once (on the GDS
        path, once the file holds them). ``GdsRequest.wait()`` waits and reports errors."""
        return self._file.write_from(_as_tensor(tensor, "GdsFile.write_from", "tensor"), offset,
                                     stream)
