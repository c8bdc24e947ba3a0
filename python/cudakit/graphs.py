"""CUDA graphs with ``torch.cuda.graphs``' names (seed: "Graphs (beta)" and "CUDA graph
lifecycle hooks"). The machinery is native (``include/cudakit/graphs.hpp``); this module
adds torch's Python surface on top.

* :class:`CUDAGraph` -- capture/replay. ``replay()`` is a native call (GIL released, no
  Python code unless hooks are registered).
* :class:`graph` -- the capture context manager (side stream, synchronize first).
* :func:`make_graphed_callables` -- forward-only graphed callables (see its docstring for
  what torch does with autograd and what cudakit does instead).
* Lifecycle hooks: ``register_graph_{capture_start,capture_end,instantiate,replay_start,
  replay_end,destroy}_hook`` (global) and the per-graph ``CUDAGraph.register_*_hook``.
  Global hooks run before the graph's own, in registration order; exceptions from global
  hooks are swallowed, from per-graph hooks they propagate.
* :func:`export_dot` / :func:`export_graph_data` -- hooks that write DOT / pickle.

Work captured is what runs on cudakit's current stream: cudakit ops, kernels launched on
``cudakit.current_stream()``, copies through cudakit. Other libraries' work (torch, CuPy) is
issued on their own streams and is not captured by a cudakit graph.
"""
from __future__ import annotations

import pickle
from typing import Any, Callable

from . import _C
from .memory import _host_empty_cache, empty_cache, graph_pool_handle

__all__ = [
    "is_current_stream_capturing", "graph_pool_handle", "CUDAGraph", "graph",
    "make_graphed_callables", "export_dot", "export_graph_data",
    "register_graph_capture_start_hook", "register_graph_capture_end_hook",
    "register_graph_instantiate_hook", "register_graph_replay_start_hook",
    "register_graph_replay_end_hook", "register_graph_destroy_hook",
]

HookHandle = _C._HookHandle


def is_current_stream_capturing() -> bool:
    """True when graph capture is under way on the current stream of the current device.

    Never initialises the backend: False before any device use, as torch's.
    """
    return _C._is_current_stream_capturing()


class CUDAGraph(_C._CUDAGraph):
    r"""Wrapper around a CUDA graph (``torch.cuda.CUDAGraph(keep_graph=False)``).

    ``keep_graph=False``: ``capture_end`` instantiates the graph and destroys the captured
    template. ``keep_graph=True``: the template stays (``raw_cuda_graph``, ``debug_dump``,
    ``get_graph_data``) and is instantiated by ``instantiate()`` or on the first
    ``replay()``; after editing the raw graph, call ``instantiate()`` again.

    Methods: ``capture_begin(pool=None, capture_error_mode="global")``, ``capture_end()``,
    ``capture_end_pre()`` / ``capture_end_post()``, ``instantiate()``, ``replay()``,
    ``reset()``, ``pool()``, ``pools()``, ``raw_cuda_graph()``, ``raw_cuda_graph_exec()``,
    ``enable_debug_mode()``, ``debug_dump(path, *, verbose=True)``, ``get_graph_data()``,
    ``retain_object(obj, *, synchronize_before_release=False)``,
    ``register_destroy_callback(cb, *, synchronize_before_release=False)`` and the per-graph
    hooks ``register_{capture_start,capture_end,post_instantiate,replay_start,replay_end}_hook``.
    Each registration returns a handle with ``remove()``.

    Destroy callbacks and retained objects belong to one capture cycle: they fire / are
    released on ``reset()`` or when the graph is destroyed, exceptions swallowed. As in
    torch, they (and hooks) must not reference the graph itself, or the graph is kept alive.
    """


class graph:
    r"""Context manager capturing the work of its body into ``cuda_graph``
    (``torch.cuda.graph``).

    It synchronizes the device (only this thread's current stream while another thread
    captures: a device synchronize would invalidate that capture) and empties the allocator
    caches, makes the capture stream
    current (``stream``, or one side stream per device shared by all captures, as torch),
    begins the capture and ends it on exit. ``pool`` shares memory with another graph
    (``other.pool()``, :func:`graph_pool_handle`, a :class:`~cudakit.MemPool`).
    ``capture_error_mode``: ``"global"``, ``"thread_local"`` or ``"relaxed"``.
    ``enable_annotations``: record :func:`cudakit.graph_annotations.mark_kernels` scopes.

    If the body raises (for example an operation illegal during capture), the capture is
    aborted cleanly -- the graph stays empty and reusable -- and the body's exception
    propagates unchanged.
    """

    default_capture_stream: Any = None  # the side stream of the last device used (torch's name)
    _side_streams: dict[int, Any] = {}

    def __init__(self, cuda_graph: CUDAGraph, pool: Any = None, stream: Any = None,
                 capture_error_mode: str = "global", enable_annotations: bool = False,
                 check_input_liveness: bool = False):
        if not isinstance(cuda_graph, _C._CUDAGraph):
            raise TypeError(f"graph: cuda_graph must be a cudakit.CUDAGraph, got "
                            f"{type(cuda_graph).__name__}")
        _C._parse_capture_error_mode(capture_error_mode)  # bad values fail here, clearly
        if check_input_liveness:
            raise NotImplementedError("graph: check_input_liveness=True is not implemented "
                                      "by cudakit")
        self.cuda_graph = cuda_graph
        self.pool = pool
        self.capture_stream = stream
        self.capture_error_mode = capture_error_mode
        self.enable_annotations = bool(enable_annotations)
        self.stream_ctx = None

    @classmethod
    def _side_stream(cls) -> Any:
        device = _C.current_device()
        s = cls._side_streams.get(device)
        if s is None:
            s = cls._side_streams[device] = _C.Stream()
        cls.default_capture_stream = s
        return s

    def __enter__(self) -> None:
        # torch synchronizes the device here; while another thread captures, that would
        # invalidate its capture, so then only this thread's current stream is synchronized
        # (cudakit/graphs.hpp, synchronize_for_capture)
        _C._synchronize_for_capture()
        empty_cache()
        _host_empty_cache()
        stream = self.capture_stream if self.capture_stream is not None else self._side_stream()
        self.stream_ctx = _C.stream(stream)
        self.stream_ctx.__enter__()
        try:
            self.cuda_graph.capture_begin(self.pool, capture_error_mode=self.capture_error_mode,
                                          enable_annotations=self.enable_annotations)
        except BaseException:
            self.stream_ctx.__exit__(None, None, None)
            raise

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            if exc_type is None:
                self.cuda_graph.capture_end()
            else:
                self.cuda_graph._abort_capture()
        finally:
            self.stream_ctx.__exit__(exc_type, exc, tb)
        return None  # propagate the body's exception, if any


# ---- global lifecycle hooks ----

def register_graph_capture_start_hook(fn: Callable[[CUDAGraph], None]) -> HookHandle:
    """Run ``fn(graph)`` as every graph's capture begins (capture already live: ``fn`` must
    not issue device work, it would be captured). Returns a handle with ``remove()``."""
    return _C._register_graph_capture_start_hook(fn)


def register_graph_capture_end_hook(fn: Callable[[CUDAGraph], None]) -> HookHandle:
    """Run ``fn(graph)`` when every graph's capture ends, with the captured template live
    (both ``keep_graph`` modes)."""
    return _C._register_graph_capture_end_hook(fn)


def register_graph_instantiate_hook(fn: Callable[[CUDAGraph], None]) -> HookHandle:
    """Run ``fn(graph)`` right after every instantiation (including re-instantiation)."""
    return _C._register_graph_instantiate_hook(fn)


def register_graph_replay_start_hook(fn: Callable[[CUDAGraph], None]) -> HookHandle:
    """Run ``fn(graph)`` before every replay of every graph (hot path: keep it cheap; with
    nothing registered the cost is an atomic load)."""
    return _C._register_graph_replay_start_hook(fn)


def register_graph_replay_end_hook(fn: Callable[[CUDAGraph], None]) -> HookHandle:
    """Run ``fn(graph)`` after every replay is enqueued, also when the launch raised."""
    return _C._register_graph_replay_end_hook(fn)


def register_graph_destroy_hook(fn: Callable[[set], None]) -> HookHandle:
    """Run ``fn(exec_graph_ids)`` when a graph's capture cycle ends (``reset()`` or
    destruction), with the exec graph ids (``tools_id >> 32``) being destroyed."""
    return _C._register_graph_destroy_hook(fn)


# ---- export hooks ----

def export_dot(path: str, *, verbose: bool = True) -> Callable[[CUDAGraph], None]:
    """A capture-end hook writing the captured graph to ``path`` as Graphviz DOT. Register
    it with ``CUDAGraph.register_capture_end_hook``; works in both ``keep_graph`` modes."""
    def _hook(cuda_graph: CUDAGraph) -> None:
        cuda_graph.debug_dump(path, verbose=verbose)
    return _hook


def export_graph_data(path: str) -> Callable[[CUDAGraph], None]:
    """A post-instantiate hook pickling ``CUDAGraph.get_graph_data()`` to ``path``. Register
    it with ``CUDAGraph.register_post_instantiate_hook`` (both ``keep_graph`` modes)."""
    def _hook(cuda_graph: CUDAGraph) -> None:
        with open(path, "wb") as f:
            pickle.dump(cuda_graph.get_graph_data(), f)
    return _hook


# ---- make_graphed_callables ----

def _is_array(x: Any) -> bool:
    return isinstance(x, _C.Tensor) or hasattr(x, "__dlpack__")


def _as_tensor(x: Any) -> Any:
    return x if isinstance(x, _C.Tensor) else _C.from_dlpack(x)


def _flatten(obj: Any, leaves: list) -> Any:
    """Splits nested tuples/lists/dicts into array leaves + a spec to rebuild them."""
    if isinstance(obj, (tuple, list)):
        return (type(obj), [_flatten(o, leaves) for o in obj])
    if isinstance(obj, dict):
        return (dict, [(k, _flatten(v, leaves)) for k, v in obj.items()])
    if _is_array(obj):
        leaves.append(obj)
        return (None, len(leaves) - 1)
    return ("const", obj)  # None, numbers...: returned as captured


def _unflatten(spec: Any, leaves: list) -> Any:
    kind, payload = spec
    if kind is None:
        return leaves[payload]
    if kind == "const":
        return payload
    if kind is dict:
        return {k: _unflatten(v, leaves) for k, v in payload}
    items = [_unflatten(s, leaves) for s in payload]
    return kind(items) if kind in (tuple, list) else kind(*items)


def make_graphed_callables(callables: Any, sample_args: Any, num_warmup_iters: int = 3,
                           allow_unused_input: bool = False, pool: Any = None,
                           capture_error_mode: str = "global") -> Any:
    r"""Graphed versions of ``callables`` (``torch.cuda.make_graphed_callables``), forward
    only.

    ``callables``: a callable, or a tuple of callables that will run in that order (their
    captures share one memory pool). ``sample_args``: a tuple of arrays for one callable, or
    a tuple of such tuples. Arrays are cudakit tensors or any DLPack device array; the
    callable's device work must be issued on cudakit's current stream (cudakit ops, or
    kernels launched on ``cudakit.current_stream()``).

    Each callable runs ``num_warmup_iters`` times on a side stream, then once under capture.
    The returned function copies each argument into the captured (static) input unless it
    already is that buffer (same data pointer), replays the graph, and returns the captured
    outputs -- the same static arrays every call, overwritten by the next call (clone them to
    keep a result).

    Autograd: torch wraps each callable in an ``autograd.Function`` and also captures its
    backward pass (a second graph replayed during ``backward``), so graphed callables are
    drop-in in a training loop. cudakit has no autograd: only the forward work is captured,
    outputs carry no gradient history, and ``allow_unused_input`` is accepted for signature
    compatibility only.
    """
    _C._parse_capture_error_mode(capture_error_mode)
    if isinstance(num_warmup_iters, bool) or not isinstance(num_warmup_iters, int) \
            or num_warmup_iters < 0:
        raise ValueError(f"make_graphed_callables: num_warmup_iters must be an int >= 0, "
                         f"got {num_warmup_iters!r}")
    just_one = not isinstance(callables, tuple)
    if just_one:
        callables = (callables,)
        sample_args = (sample_args,)
    if not isinstance(sample_args, tuple) or len(sample_args) != len(callables):
        raise ValueError(f"make_graphed_callables: expected {len(callables)} tuple(s) of sample "
                         f"arguments (one per callable), got {sample_args!r}")
    for i, (fn, args) in enumerate(zip(callables, sample_args)):
        if not callable(fn):
            raise TypeError(f"make_graphed_callables: callables[{i}] is not callable "
                            f"({type(fn).__name__})")
        if not isinstance(args, tuple):
            raise TypeError(f"make_graphed_callables: sample_args for callable {i} must be a "
                            f"tuple of arrays, got {type(args).__name__}")
        for j, a in enumerate(args):
            if not _is_array(a):
                raise TypeError(f"make_graphed_callables: sample_args[{i}][{j}] must be an "
                                f"array (cudakit.Tensor or a DLPack array), got "
                                f"{type(a).__name__}")
            if _as_tensor(a).device.type != "cuda":
                raise ValueError(f"make_graphed_callables: sample_args[{i}][{j}] is a host "
                                 f"array ({_as_tensor(a).device}); graphs capture device work, "
                                 f"so sample arguments must live on a cuda device")

    mempool = graph_pool_handle() if pool is None else pool
    _C.synchronize()
    stream = _C.Stream()
    with _C.stream(stream):
        for fn, args in zip(callables, sample_args):
            for _ in range(num_warmup_iters):
                out = fn(*args)
            out = None  # noqa: F841  (warmup outputs are dropped before capturing)
    _C.synchronize()

    graphed = []
    # Captured in the order they will run, so replays sharing the pool cannot corrupt each
    # other's live memory.
    for fn, args in zip(callables, sample_args):
        g = CUDAGraph()
        with graph(g, pool=mempool, stream=stream, capture_error_mode=capture_error_mode):
            out = fn(*args)
        leaves: list = []
        spec = _flatten(out, leaves)
        graphed.append(_make_graphed(fn, g, args, leaves, spec))
    return graphed[0] if just_one else tuple(graphed)


def _make_graphed(fn: Any, g: CUDAGraph, static_inputs: tuple, static_outputs: list,
                  spec: Any) -> Callable[..., Any]:
    static_views = [_as_tensor(a) for a in static_inputs]  # cudakit views for copy-in
    n = len(static_inputs)

    def graphed(*args: Any) -> Any:
        if len(args) != n:
            raise TypeError(f"graphed {getattr(fn, '__name__', 'callable')}: expected {n} "
                            f"argument(s) as in sample_args, got {len(args)}")
        for i in range(n):
            a = args[i]
            if a is static_inputs[i]:
                continue
            view = static_views[i]
            src = _as_tensor(a)
            if src.data_ptr() == view.data_ptr():
                continue
            if tuple(src.shape) != tuple(view.shape) or src.dtype != view.dtype:
                raise ValueError(f"graphed {getattr(fn, '__name__', 'callable')}: argument {i} "
                                 f"has shape {tuple(src.shape)} and dtype {src.dtype}, the "
                                 f"captured input has {tuple(view.shape)} and {view.dtype}")
            view.copy_(src)
        g.replay()
        return _unflatten(spec, static_outputs)

    graphed.__name__ = f"graphed_{getattr(fn, '__name__', 'callable')}"
    graphed.__doc__ = getattr(fn, "__doc__", None)
    graphed.cuda_graph = g  # for hooks, get_graph_data, reset
    return graphed
