"""A cudakit memory snapshot must be readable by PyTorch's own memory visualizer
(torch.cuda._memory_viz), so users keep their tooling. Runs wherever torch is importable
(the H200 machine); skipped elsewhere."""
import pickle

import pytest


def test_snapshot_pickle_loads_in_torch_memory_viz(ck, tmp_path):
    viz = pytest.importorskip("torch.cuda._memory_viz")
    ck.memory._record_memory_history("all", context="all", stacks="python", max_entries=10000)
    try:
        keep = [ck.caching_allocator_alloc(n) for n in (512, 1 << 20, 3 << 20, 25 << 20)]
        ck.caching_allocator_delete(keep.pop(1))
        path = tmp_path / "snap.pickle"
        ck.memory._dump_snapshot(str(path))
    finally:
        ck.memory._record_memory_history(None)
        for p in keep:
            ck.caching_allocator_delete(p)
    with open(path, "rb") as f:
        snapshot = pickle.load(f)
    assert snapshot["segments"] and snapshot["device_traces"]
    html = viz.segment_plot(snapshot)
    assert "<html" in html.lower() or "<!doctype" in html.lower() or len(html) > 1000
    trace = viz.trace_plot(snapshot)
    assert len(trace) > 1000
    # the textual summary walks every segment and block: proves field names and types match
    text = viz.segsum(snapshot)
    assert "segment" in text.lower() or len(text) > 0
