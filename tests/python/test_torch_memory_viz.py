"""torch's own snapshot tools (torch/cuda/_memory_viz.py: pure Python over the snapshot dict:
segsum, trace, the flame-graph inputs, trace_plot / segment_plot) on cudakit's snapshots.
The module is torch's and not part of this repository: it is taken from an installed torch
(found without importing torch), else from .device-carry/torch/cuda/_memory_viz.py (a copy
put there by hand: that folder is git-ignored); the test is skipped when neither exists."""
import importlib.util
import inspect
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _memory_viz():
    candidates = []
    spec = importlib.util.find_spec("torch")
    if spec is not None and spec.submodule_search_locations:
        candidates += [os.path.join(p, "cuda", "_memory_viz.py")
                       for p in spec.submodule_search_locations]
    candidates.append(os.path.join(ROOT, ".device-carry", "torch", "cuda", "_memory_viz.py"))
    for path in candidates:
        if os.path.exists(path):
            s = importlib.util.spec_from_file_location("torch_memory_viz_under_test", path)
            module = importlib.util.module_from_spec(s)
            s.loader.exec_module(module)
            return module
    pytest.skip("torch's torch/cuda/_memory_viz.py is not available here")


def test_torch_memory_viz_reads_cudakit_snapshots(ck):
    viz = _memory_viz()
    m = ck.memory
    m.empty_cache()
    m._record_memory_history("all", context="all", stacks="python")
    try:
        before = m.memory_snapshot()
        a = m.caching_allocator_alloc(128 * 128 * 4)
        b = m.caching_allocator_alloc(30 << 20)
        m.caching_allocator_delete(a)
        with pytest.raises(ck.OutOfMemoryError):
            m.caching_allocator_alloc(1 << 61)
        snap = m._snapshot()
    finally:
        m._record_memory_history(None)
    summary = viz.segsum(snap)  # asserts every segment's blocks add up
    assert "segments:" in summary and "total_reserved" in summary
    text = viz.trace(snap)
    assert "raise OutOfMemoryError" in text and "del " in text
    # The 30 MiB block's segment: a plain segment is torch's "cudaMalloc(" line; an expandable
    # one (the large pool's default where the backend has virtual memory, as on the GPU) is a
    # segment_map event, which torch's trace() prints as the raw entry.
    assert "cudaMalloc(" in text or "'action': 'segment_map'" in text
    flame = viz.segments(snap, format_flamegraph=lambda lines: lines)
    assert "active_allocated" in flame and "stream_" in flame
    assert "stream_" in viz.memory(snap, format_flamegraph=lambda lines: lines)
    assert "only_after" in viz.compare(before, m.memory_snapshot(),
                                       format_flamegraph=lambda lines: lines)
    for html in (viz.trace_plot(snap), viz.trace_plot(snap, plot_segments=True),
                 viz.segment_plot(snap)):
        assert "snapshot.pickle" in html
    if "filter_freed" in inspect.signature(viz.trace_plot).parameters:
        assert "snapshot.pickle" in viz.trace_plot(snap, filter_freed=True)
    m.caching_allocator_delete(b)
