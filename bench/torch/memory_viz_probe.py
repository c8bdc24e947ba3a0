"""Diagnosis of the two torch test_cuda.py tests that still fail on cudakit's pool (issue 26),
natively and on cudakit side by side (GPU only; not a test):

    python3 bench/torch/memory_viz_probe.py plots  native|cudakit   # test_memory_plots' snapshot
    python3 bench/torch/memory_viz_probe.py viz    native|cudakit   # test_memory_profiler_viz
    python3 bench/torch/memory_viz_probe.py expandable native|cudakit  # test_mempool_expandable

plots: for each (context, stacks) of torch's test, the trace's actions and sizes before and
after torch's trace_plot(filter_freed=True), which filters the snapshot in place (the test then
looks for the allocation's size, 65536, in what is left), and the segments' block sizes.
viz: the profiler's allocation events, their ids and Python parents, and whether the
snapshot built from them (_profile_to_snapshot) names this file.
expandable: test_mempool_expandable's default-pool half (its MemPool needs a compiled
allocator): after empty_cache and expandable_segments:True, one 1 MiB tensor, then every
segment of the snapshot (the test wants exactly its two; cudakit's pool showed 4 on the H200).
"""
import json
import sys


def _paths_with(obj, needle, path="", out=None):
    """Where a value's text holds needle (key paths, first few): which snapshot field carries
    the allocation's size after trace_plot(filter_freed=True) natively."""
    out = [] if out is None else out
    if len(out) >= 6:
        return out
    if isinstance(obj, dict):
        for k, v in obj.items():
            if needle in str(k):
                out.append(f"{path}/{k} (key)")
            _paths_with(v, needle, f"{path}/{k}", out)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _paths_with(v, needle, f"{path}[{i}]", out)
    elif needle in json.dumps(obj):
        out.append(f"{path} = {json.dumps(obj)[:60]}")
    return out


def _torch(mode):
    if mode == "cudakit":
        import cudakit.memory as m
        m.use_with_torch()
    import torch
    return torch


def plots(torch):
    from torch.cuda._memory_viz import trace_plot
    for context, stacks in (("all", "all"), ("all", "python"), (None, "python")):
        torch.cuda.memory.empty_cache()
        torch.cuda.memory._record_memory_history("all", context=context, stacks=stacks)
        try:
            def run():
                x = torch.rand(128, 128, device="cuda")
                x * x + x * x

            run()
            ss = torch.cuda.memory._snapshot()
            before = [(e["action"], e["size"]) for t in ss["device_traces"] for e in t]
            trace_plot(ss, filter_freed=True)
            after = [(e["action"], e["size"]) for t in ss["device_traces"] for e in t]
            blocks = [[(b["state"], b["size"]) for b in s["blocks"]] for s in ss["segments"]]
            print(context, stacks, "| trace:", before, "| after filter_freed:", after,
                  "| blocks:", blocks[:4], "| 65536 in text:", "65536" in json.dumps(ss),
                  "| where:", _paths_with(ss, "65536"))
        finally:
            torch.cuda.memory._record_memory_history(None)


def viz(torch):
    from torch._C._profiler import _EventType
    from torch.cuda._memory_viz import _profile_to_snapshot
    from torch.profiler._memory_profiler import TensorKey
    torch.zeros(1, device="cuda")
    with torch.profiler.profile(with_stack=True, profile_memory=True, record_shapes=True) as prof:
        x = torch.rand(128, 128, device="cuda")
        x * x + x * x
    allocs = [e for e in prof._memory_profile()._op_tree.sorted_nodes
              if e.tag == _EventType.Allocation]
    print("allocation events:", len(allocs))
    if "cudakit" in sys.modules:
        import cudakit.memory as m
        print("profiler reporter:", m.torch_interop_state()["profiler_reporter"])
    for e in allocs[:6]:
        f = e.extra_fields
        chain, p = [], e.parent
        while p:
            chain.append((str(p.tag).split(".")[-1], p.name[:40]))
            p = p.parent
        print("  size", f.alloc_size, "device", f.device, "id", f.id,
              "key", TensorKey.from_allocation(f) is not None, "parents", chain[:5])
    print("this file in the snapshot:", "memory_viz_probe.py" in json.dumps(_profile_to_snapshot(prof)))


def expandable(torch):
    torch.cuda.empty_cache()
    before = torch.cuda.memory.memory_snapshot()
    torch.cuda.memory._set_allocator_settings("expandable_segments:True")
    x = torch.empty(1024 * 1024 // 4, device="cuda")
    segs = torch.cuda.memory.memory_snapshot()
    print(f"segments before the tensor: {len(before)}; after: {len(segs)}")
    for s in segs:
        live = [b["size"] for b in s["blocks"] if b["state"] == "active_allocated"]
        print(f"  {s['segment_type']:<5} pool={s.get('segment_pool_id')} stream={s['stream']} "
              f"total={s['total_size']} expandable={s['is_expandable']} live={live[:6]}")
    torch.cuda.memory._set_allocator_settings("expandable_segments:False")
    del x


if __name__ == "__main__":
    what, mode = sys.argv[1], sys.argv[2]
    print(f"== {what} ({mode})")
    {"plots": plots, "viz": viz, "expandable": expandable}[what](_torch(mode))
