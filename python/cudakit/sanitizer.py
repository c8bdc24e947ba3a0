"""The stream sanitizer (torch.cuda._sanitizer, "CSAN"): finds device memory two streams use
without synchronisation between them.

Enable it with :func:`enable_cuda_sanitizer` (torch's name), :func:`enable`, or the environment:
``CUDAKIT_CUDA_SANITIZER=1`` (or ``raise``; ``warn`` reports without raising) or torch's
``TORCH_CUDA_SANITIZER``, read when cudakit is loaded. Enable it before the work to check.

What it sees: every cudakit op, copy and fill (each operand's bytes, on the stream the work goes
to), allocations (memory handed out on stream A must be ordered after A before another stream
uses it) and frees (a free while another stream may still use the memory, without
``record_stream``, is reported as a warning), ``record_stream``, event record / wait /
synchronize / a query that returned True, stream wait / synchronize / query, device
synchronisation, and CUDA graph replays (a replay makes the accesses its capture recorded).
Kernels cudakit does not launch — your own, CuPy's, another library's — are declared with
:class:`access`, so they are checked too (torch's CSAN sees torch operators only)::

    with cudakit.sanitizer.access(reads=[x], writes={"out": y}):
        my_cupy_kernel(x, y)              # enqueued on the current stream

    @cudakit.sanitizer.access(reads=["x"], writes=["out"])   # parameter names
    def launch(x, out): ...

On a race, :class:`CUDASanitizerErrors` (raise mode: the racing op is not enqueued) or a
:class:`SanitizerWarning` (warn mode: it runs), with torch's CSAN report: the tensor (data
pointer, allocation, size, allocation stack), both streams and both accesses' stacks (Python
frames, then C++ frames). Tracking takes no global lock and costs a fraction of an op
(bench/sanitizer).
"""
from __future__ import annotations

import enum as _enum
import functools as _functools
import inspect as _inspect
from dataclasses import dataclass as _dataclass
from typing import Any, Optional

from . import _C

__all__ = [
    "enable_cuda_sanitizer", "enable", "disable", "is_enabled", "on_race", "stats", "access",
    "AccessType", "Access", "SynchronizationError", "UnsynchronizedAccessError",
    "CUDASanitizerErrors", "SanitizerWarning",
]


class SanitizerWarning(UserWarning):
    """A race reported in warn mode, or a free while another stream may use the memory."""


class AccessType(_enum.Enum):
    READ = _enum.auto()
    WRITE = _enum.auto()

    def __str__(self):
        return "reading from" if self is AccessType.READ else "writing to"


@_dataclass
class Access:
    """One access of a report (torch's fields; ``stack_trace`` is the formatted stack)."""

    type: AccessType
    stream: int
    device: int
    operator: str
    aliases: list
    is_output: bool
    stack_trace: str


class SynchronizationError(Exception):
    """Base class for errors detected by the sanitizer."""


class UnsynchronizedAccessError(SynchronizationError):
    """Two unsynchronised accesses to overlapping bytes of one allocation."""

    def __init__(self, data_ptr: int, allocation_stack_trace: Optional[str], current_access: Access,
                 previous_access: Access, *, allocation: int = 0, allocation_size: int = 0,
                 overlap: tuple = (0, 0), message: str = ""):
        super().__init__(message)
        self.data_ptr = data_ptr
        self.allocation_stack_trace = allocation_stack_trace
        self.current_access = current_access
        self.previous_access = previous_access
        self.allocation = allocation
        self.allocation_size = allocation_size
        self.overlap = overlap
        self._message = message

    def __str__(self):
        return self._message


class CUDASanitizerErrors(RuntimeError):
    """Raised on races in raise mode; ``errors`` holds one UnsynchronizedAccessError each.
    (torch's class derives from Exception; cudakit's from RuntimeError, as every cudakit
    error, which is an Exception too.)"""

    def __init__(self, errors: list):
        self.errors = errors
        super().__init__(self._text())

    def _text(self):
        n = len(self.errors)
        return f"detected {n} error{'s' if n != 1 else ''}\n" + "".join(str(e) for e in self.errors)

    def __str__(self):
        return self._text()


def _access(d: dict) -> Access:
    return Access(AccessType.WRITE if d["type"] == "write" else AccessType.READ, d["stream"],
                  d["device"], d["operator"], list(d["aliases"]), d["is_output"], d["stack_trace"])


def _errors_from_native(errors: list) -> CUDASanitizerErrors:
    """Builds the exception the bindings raise for a C++ CUDASanitizerErrors."""
    return CUDASanitizerErrors([
        UnsynchronizedAccessError(e["data_ptr"], e["allocation_stack_trace"], _access(e["current_access"]),
                                  _access(e["previous_access"]), allocation=e["allocation"],
                                  allocation_size=e["allocation_size"], overlap=tuple(e["overlap"]),
                                  message=e["message"])
        for e in errors])


def enable(on_race: str = "raise") -> None:
    """Starts tracking, with fresh state. ``on_race``: ``"raise"`` (CUDASanitizerErrors, the op
    is not enqueued) or ``"warn"`` (a SanitizerWarning, the op runs). Enabling again while
    enabled only changes ``on_race``."""
    _C._sanitizer_enable(on_race)


def enable_cuda_sanitizer() -> None:
    """torch.cuda._sanitizer.enable_cuda_sanitizer(): raise mode from now on."""
    _C._sanitizer_enable("raise")


def disable() -> None:
    """Stops tracking and forgets all state."""
    _C._sanitizer_disable()


def is_enabled() -> bool:
    return _C._sanitizer_is_enabled()


def on_race() -> str:
    """``"raise"`` or ``"warn"``."""
    return _C._sanitizer_on_race()


def stats() -> dict:
    """Counters since enable: ``accesses`` checked, ``races`` reported, ``allocations`` tracked,
    ``streams`` seen, accesses ``captured`` into graphs."""
    return _C._sanitizer_stats()


class access:
    """Declares what a kernel cudakit does not launch reads and writes, so the sanitizer checks
    it like a built-in op. A context manager (the kernel is launched inside the block) or a
    decorator (around a function that launches it).

    ``reads`` / ``writes``: one buffer, a list of buffers, or a dict ``{name: buffer}`` (names
    appear in reports as argument names). A buffer is a cudakit Tensor, an object with
    ``__cuda_array_interface__`` (CuPy, torch, Numba arrays) or a ``(pointer, nbytes)`` tuple;
    host memory is ignored. As a decorator, a string names a parameter of the function, bound
    at each call (its value is the buffer, and the name labels it).

    ``stream``: where the kernel runs; None: the current stream of the buffers' device when the
    block ends. The accesses are declared when the block ends (or the function returns), so
    stream waits the launch depends on, made inside the block, count; nothing is declared if
    it raises. ``name``: the kernel's name in reports (default "foreign kernel", or the
    decorated function's name). No-op while the sanitizer is disabled.
    """

    def __init__(self, reads: Any = (), writes: Any = (), stream: Any = None, name: Optional[str] = None):
        if name is not None and not isinstance(name, str):
            raise TypeError(f"sanitizer.access(): argument 'name' must be a str or None, got {type(name).__name__}")
        self.reads, self.writes, self.stream, self.name = reads, writes, stream, name

    # ---- context manager ----
    def __enter__(self):
        if _mentions_parameters(self.reads) or _mentions_parameters(self.writes):
            raise TypeError("sanitizer.access(): parameter names (strings) only work as a decorator; "
                            "pass the buffers themselves to the `with` form")
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            _C._sanitizer_declare(self.reads, self.writes, self.stream, self.name)
        return False

    # ---- decorator ----
    def __call__(self, fn):
        if not callable(fn):
            raise TypeError(f"sanitizer.access(...) decorates a function, got {type(fn).__name__}")
        signature = _inspect.signature(fn)
        for spec in (self.reads, self.writes):
            for pname in _parameter_names(spec):
                if pname not in signature.parameters:
                    raise ValueError(f"sanitizer.access(): {fn.__qualname__} has no parameter '{pname}' "
                                     f"(parameters: {', '.join(signature.parameters)})")
        kernel = self.name or getattr(fn, "__qualname__", "foreign kernel")

        @_functools.wraps(fn)
        def wrapper(*args, **kwargs):
            result = fn(*args, **kwargs)
            if _C._sanitizer_is_enabled():
                bound = signature.bind(*args, **kwargs)
                bound.apply_defaults()
                _C._sanitizer_declare(_resolve(self.reads, bound.arguments),
                                      _resolve(self.writes, bound.arguments), self.stream, kernel)
            return result

        return wrapper


def _parameter_names(spec) -> list:
    if isinstance(spec, str):
        return [spec]
    if isinstance(spec, (list, tuple)):
        return [s for s in spec if isinstance(s, str)]
    return []


def _mentions_parameters(spec) -> bool:
    return bool(_parameter_names(spec))


def _resolve(spec, arguments: dict):
    """Strings naming parameters -> {name: value} (None values skipped); buffers given directly
    alongside them are labelled by position."""
    if isinstance(spec, str):
        spec = [spec]
    if not isinstance(spec, (list, tuple)) or not any(isinstance(s, str) for s in spec):
        return spec
    out = {}
    for i, s in enumerate(spec):
        if isinstance(s, str):
            if arguments[s] is not None:
                out[s] = arguments[s]
        else:
            out[f"[{i}]"] = s
    return out
