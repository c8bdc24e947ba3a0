"""Device helpers of torch.cuda that are simplest in Python: the ``device`` and
``device_of`` context managers, sync-debug mode names, and library handles."""
from __future__ import annotations

# typing costs ~8 ms of import (it pulls in re and enum); the annotations are strings here.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

from . import _C

_SYNC_MODES = {"default": 0, "warn": 1, "error": 2}


def _get_device_index(device: Any = None, optional: bool = True, allow_cpu: bool = False) -> int:
    """Index of ``device`` (int, 'cuda:N', torch.device, cudakit.Device, None=current)."""
    if allow_cpu and getattr(device, "type", device) == "cpu":
        return -1
    return _C._get_device_index(device, optional)


class device:
    """Context manager that changes the selected device (torch.cuda.device).

    ``device`` is an int, 'cuda:N', a device object or None; a negative index or None makes
    it a no-op.
    """

    def __init__(self, device: Any):
        self.idx = -1 if device is None else _get_device_index(device, optional=True)
        self.prev_idx = -1

    def __enter__(self):
        self.prev_idx = _C._exchange_device(self.idx)
        return self

    def __exit__(self, *exc):
        if self.idx >= 0 and self.prev_idx >= 0 and self.prev_idx != self.idx:
            _C.set_device(self.prev_idx)
        return False


class device_of(device):
    """Context manager that selects the device of an array (any object with
    ``__dlpack_device__``, e.g. a torch/CuPy/JAX/cudakit array). No-op for host arrays."""

    def __init__(self, obj: Any):
        idx = -1
        dev = getattr(obj, "__dlpack_device__", None)
        if dev is not None:
            dev_type, dev_id = dev()
            if int(dev_type) in (2, 13):  # kDLCUDA, kDLCUDAManaged
                idx = int(dev_id)
        elif getattr(obj, "is_cuda", False):
            idx = obj.get_device()
        super().__init__(idx)


def set_sync_debug_mode(debug_mode: int | str) -> None:
    """Warn ('warn'/1) or raise ('error'/2) on synchronizing calls; 'default'/0 turns it off."""
    if isinstance(debug_mode, str):
        if debug_mode not in _SYNC_MODES:
            raise RuntimeError(
                "invalid value of debug_mode, expected one of `default`, `warn`, `error`")
        debug_mode = _SYNC_MODES[debug_mode]
    elif isinstance(debug_mode, bool) or not isinstance(debug_mode, int):
        raise _C.ArgumentTypeError(
            "set_sync_debug_mode(): argument 'debug_mode' must be an int (0, 1, 2) or a str "
            f"('default', 'warn', 'error'), not {type(debug_mode).__name__} ({debug_mode!r})")
    elif debug_mode not in (0, 1, 2):
        raise RuntimeError("invalid value of debug_mode, expected one of 0,1, or 2")  # torch's text
    _C._set_sync_debug_mode(debug_mode)


def get_sync_debug_mode() -> int:
    return _C._get_sync_debug_mode()


class _LibraryModule:
    """Attribute access to a shared library's C functions through ctypes."""

    def __init__(self, names: list[str], what: str):
        self._lib = None
        import ctypes  # on first use: ~3 ms of import otherwise

        last = None
        for name in names:
            try:
                self._lib = ctypes.CDLL(name)
                break
            except OSError as e:  # try the next soname
                last = e
        if self._lib is None:
            raise RuntimeError(f"{what} could not be loaded (tried {names}): {last}")

    def __getattr__(self, name: str):
        return getattr(self._lib, name)


_cudart = None


def cudart():
    """The CUDA runtime library (ctypes handle), e.g. ``cudart().cudaProfilerStart()``."""
    global _cudart
    if _C.backend_name() != "cuda":
        raise NotImplementedError("cudart() needs the cuda backend (CUDAKIT_BACKEND=cuda)")
    if _cudart is None:
        _cudart = _LibraryModule(["libcudart.so.13", "libcudart.so.12", "libcudart.so"],
                                 "the CUDA runtime (libcudart)")
    return _cudart


def current_blas_handle() -> int:
    """cuBLAS handle (as an int) for the current device and stream."""
    return _C._current_blas_handle()


def current_solver_handle() -> int:
    """cuSOLVER dense handle (as an int) for the current device and stream."""
    return _C._current_solver_handle()
