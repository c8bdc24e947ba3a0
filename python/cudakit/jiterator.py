"""Elementwise kernels compiled at run time from a C++ function template (``torch.cuda.jiterator``).

    code = "template <typename T> T my_kernel(T x, T y, T alpha) { return -x + alpha * y; }"
    fn = cudakit.jiterator._create_jit_fn(code, alpha=1.0)
    out = fn(a, b, alpha=3.14)

The contract is torch's: the last function template of ``code_string`` is the entry, called per
element with ``T`` = the computation type of the inputs' common dtype (float for float16 /
bfloat16); keyword arguments given at creation are scalar parameters with defaults, overridable
per call (an undeclared one raises KeyError); inputs (1 to 8) broadcast and type-promote like
the built-in ops, and outputs have the broadcast shape and the common dtype.
``_create_multi_output_jit_fn(code_string, num_outputs, **kwargs)`` takes a ``void`` function
whose ``T&`` outputs come last and returns a tuple (one tensor when ``num_outputs`` is 1).

Inputs may be cudakit tensors or any device array with ``__dlpack__`` or
``__cuda_array_interface__`` (torch, CuPy, JAX, Numba), used in place on the current stream;
the outputs come back as the first input's kind (``torch.Tensor`` for torch inputs, and so on).

Kernels are compiled per input dtypes, scalar types and layout — with NVRTC for the device's
exact architecture on the cuda backend, with the host C++ compiler on the emulated backend —
and cached in memory and on disk (:func:`cache_dir`). Compile errors raise RuntimeError with the
compiler's message and the offending line of ``code_string``.
"""
from __future__ import annotations

from typing import Any, Callable

from . import _C

__all__: list[str] = []  # torch's names are private (beta): _create_jit_fn, _create_multi_output_jit_fn


def _converter(kind: type) -> Callable[[Any], Any] | None:
    """How to hand a cudakit tensor back as an array of `kind`'s library (zero-copy DLPack)."""
    root = (getattr(kind, "__module__", "") or "").split(".")[0]
    try:
        if root == "torch":
            import torch
            return torch.from_dlpack
        if root == "cupy":
            import cupy
            return cupy.from_dlpack
        if root in ("jax", "jaxlib"):
            import jax.dlpack
            return jax.dlpack.from_dlpack
    except ImportError:  # the library went away: hand back cudakit tensors
        return None
    return None


_converters: dict[type, Callable[[Any], Any] | None] = {}


class _JittedFunction:
    """The callable returned by _create_jit_fn / _create_multi_output_jit_fn."""

    __slots__ = ("_fn",)

    def __init__(self, code_string: str, return_by_ref: bool, num_outputs: Any, kwargs: dict):
        self._fn = _C._JitFunction(code_string, num_outputs, return_by_ref, **kwargs)

    def __call__(self, *tensors: Any, **kwargs: Any) -> Any:
        out = self._fn(*tensors, **kwargs)
        if tensors and not isinstance(tensors[0], _C.Tensor):
            kind = type(tensors[0])
            if kind not in _converters:
                _converters[kind] = _converter(kind)
            conv = _converters[kind]
            if conv is not None:
                return tuple(conv(o) for o in out) if isinstance(out, tuple) else conv(out)
        return out

    # torch's attribute names
    code_string = property(lambda self: self._fn.code_string)
    kernel_name = property(lambda self: self._fn.kernel_name)
    num_outputs = property(lambda self: self._fn.num_outputs)
    return_by_ref = property(lambda self: self._fn.return_by_ref)
    kwargs_dict = property(lambda self: self._fn.kwargs_dict)

    @property
    def num_kernels(self) -> int:
        """Specialisations compiled or loaded for this function so far."""
        return self._fn.num_kernels

    def __repr__(self) -> str:
        return (f"<jitted function {self.kernel_name!r}: {self.num_outputs} output(s), "
                f"parameters {self.kwargs_dict}>")


def _create_jit_fn(code_string: str, **kwargs: Any) -> Callable:
    """A function applying the last function template of `code_string` elementwise; `kwargs`
    are its scalar parameters with their defaults (torch.cuda.jiterator._create_jit_fn)."""
    return _JittedFunction(code_string, False, 1, kwargs)


def _create_multi_output_jit_fn(code_string: str, num_outputs: int, **kwargs: Any) -> Callable:
    """As _create_jit_fn for a ``void`` function writing `num_outputs` ``T&`` outputs, which
    follow the inputs and the scalar parameters (torch.cuda.jiterator._create_multi_output_jit_fn)."""
    return _JittedFunction(code_string, True, num_outputs, kwargs)


def cache_dir() -> str | None:
    """Directory of the disk cache of compiled kernels ($CUDAKIT_CACHE_DIR/jiterator, else under
    $XDG_CACHE_HOME or ~/.cache), or None when it is off (CUDAKIT_JITERATOR_DISK_CACHE=0, or a
    directory other users could write to)."""
    return _C._jiterator_cache_dir()


def cache_stats() -> dict:
    """Process-wide counters: memory_hits, disk_hits, compiles, disk_writes, disk_rejected
    (corrupt or foreign entries, rewritten), compile_ms."""
    return _C._jiterator_cache_stats()
