"""torch.cuda.profiler: start/stop the profiler around a region (seed section "profiler"),
and cudakit's own tracer.

``start()`` / ``stop()`` are cuProfilerStart / cuProfilerStop: the capture-range switches of
Nsight Systems (``nsys profile --capture-range=cudaProfilerApi``) and Nsight Compute
(``ncu --profile-from-start off``); without such a tool they have no visible effect. They act
on the calling thread's current device (device 0 on a thread that has not chosen one). On the
emulated backend they record the state; ``_C._profiler_state()`` reports what start/stop did.

:class:`trace` records a Chrome / Perfetto trace in Kineto's layout (what torch.profiler
writes) without torch: device activity (kernels, copies, memsets, synchronization and the
driver/runtime calls that launched them, through CUPTI on the cuda backend), cudakit.nvtx
ranges, caching-allocator events and graph lifecycle. Kernels replayed from a CUDA graph carry
``graph id`` / ``graph node id`` and their :mod:`cudakit.graph_annotations` merged into
``args``::

    with cudakit.profiler.trace() as t:
        g.replay()
    t.export_chrome_trace("trace.json")   # open in https://ui.perfetto.dev

For a trace recorded by torch.profiler (or another tool), :func:`save_annotations` writes the
annotations and ``python -m cudakit trace merge TRACE.json ANNOTATIONS.pkl -o OUT.json`` joins
them offline.
"""
from __future__ import annotations

import contextlib
import os
import warnings as _warnings

from . import _C
from ._trace_merge import merge as _merge
from ._trace_merge import normalize_annotations as _normalize
from ._trace_merge import save_annotations

__all__ = ["start", "stop", "profile", "trace", "save_annotations", "merge_annotations"]


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


class trace:
    """Records a trace while the ``with`` block runs (or between :meth:`start` and
    :meth:`stop`).

    Keyword arguments select the sources (all on by default): ``device`` (kernels, copies,
    memsets, synchronization, stream lifecycle), ``api`` (runtime/driver calls; the launch ->
    kernel flow arrows need them), ``nvtx`` (cudakit.nvtx ranges and marks), ``memory``
    (caching-allocator events), ``graphs`` (graph lifecycle and annotations).
    ``synchronize``: :meth:`stop` first synchronizes the devices the trace used, so work
    launched inside the block is in the trace (as torch.profiler).

    One trace records at a time (RuntimeError otherwise). When the device part cannot be
    recorded (cuda backend without CUPTI, or CUPTI held by another tool such as Nsight Systems
    or torch.profiler), the trace still records cudakit's own events; :attr:`warnings` says why
    and a ``RuntimeWarning`` is issued at start.
    """

    def __init__(self, *, device: bool = True, api: bool = True, nvtx: bool = True,
                 memory: bool = True, graphs: bool = True, synchronize: bool = True) -> None:
        self._options = dict(device=device, api=api, nvtx=nvtx, memory=memory, graphs=graphs,
                             synchronize=synchronize)
        self._trace = None

    def start(self) -> "trace":
        if self._trace is not None and self._trace.recording:
            raise RuntimeError("trace.start(): this trace is already recording")
        self._trace = _C._Trace(**self._options)
        for w in self._trace.warnings:
            _warnings.warn(f"cudakit.profiler.trace: {w}", RuntimeWarning, stacklevel=2)
        return self

    def stop(self) -> None:
        if self._trace is not None:
            self._trace.stop()

    def __enter__(self) -> "trace":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _done(self, what: str):
        if self._trace is None:
            raise RuntimeError(f"trace.{what}(): nothing recorded yet (use `with "
                               "cudakit.profiler.trace() as t:` or call start() and stop())")
        return self._trace

    @property
    def recording(self) -> bool:
        return self._trace is not None and self._trace.recording

    def events(self) -> list:
        """The trace events as dicts, as ``json.load`` of the exported file lists them
        (``ts`` / ``dur`` in microseconds since ``base_time_ns``)."""
        return self._done("events").events()

    def export_chrome_trace(self, path) -> None:
        """Writes Chrome / Perfetto JSON to ``path`` (gzip-compressed, streamed, when it ends in
        ``.gz``)."""
        self._done("export_chrome_trace").export_chrome_trace(self._path(path, "export_chrome_trace"))

    def export_perfetto(self, path) -> None:
        """Writes Perfetto's native protobuf trace to ``path`` (``.pftrace``; gzip when it ends
        in ``.gz``): the same events as the JSON, about a quarter of its size, for
        https://ui.perfetto.dev and trace_processor."""
        self._done("export_perfetto").export_perfetto(self._path(path, "export_perfetto"))

    @staticmethod
    def _path(path, what: str) -> str:
        p = os.fspath(path)
        if not isinstance(p, str):
            raise TypeError(f"{what}(): path must be a str or os.PathLike, got "
                            f"{type(path).__name__}")
        return p

    def chrome_trace(self) -> bytes:
        """The Chrome / Perfetto JSON as bytes."""
        return self._done("chrome_trace").chrome_trace_json()

    @property
    def warnings(self) -> list:
        """Why parts of the trace are missing (empty when everything asked for is there)."""
        return [] if self._trace is None else list(self._trace.warnings)

    @property
    def base_time_ns(self) -> int:
        """CLOCK_REALTIME nanoseconds of ``ts == 0`` (the file's ``baseTimeNanoseconds``)."""
        return self._done("base_time_ns").base_time_ns

    @property
    def device_source(self) -> str:
        """Where device records come from (e.g. ``"CUPTI 13.0 (libcupti.so.13)"``)."""
        return "" if self._trace is None else self._trace.device_source


def merge_annotations(trace_json: dict, annotations=None) -> int:
    """Merges kernel annotations into a loaded Chrome trace (a dict with ``traceEvents``) in
    place, as ``python -m cudakit trace merge`` does; returns the number of events changed.
    ``annotations``: ``get_kernel_annotations()`` (the default: the current registry)."""
    if annotations is None:
        from . import graph_annotations

        annotations = graph_annotations.get_kernel_annotations()
    if not isinstance(trace_json, dict) or not isinstance(trace_json.get("traceEvents"), list):
        raise ValueError("merge_annotations(): trace_json must be a dict with a 'traceEvents' "
                         "list (json.load of a Chrome trace)")
    return _merge(trace_json, _normalize(dict(annotations)))["merged_events"]
