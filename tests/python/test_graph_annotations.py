"""cudakit.graph_annotations: the seed's example, scopes, merging, ids matching
get_graph_data, remapping, purging, bad input."""
import gc
import json
import pickle

import pytest


@pytest.fixture
def ga(ck):
    import cudakit.graph_annotations as ga
    if not ga.is_available():
        pytest.skip("graph tools ids unavailable on this driver")
    ga.clear_kernel_annotations()
    yield ga
    ga.clear_kernel_annotations()


@pytest.mark.gpu
def test_available_on_the_gpu_driver(ck):
    # The H200 runs a CUDA 13.0 driver: ids come from CUPTI there (torch records nothing).
    # If this fails, CUPTI was not found: set CUDAKIT_CUPTI_PATH to libcupti.so.
    import cudakit.graph_annotations as ga
    assert ga.is_available(), f"driver {ck.driver_version()}: no tools ids (CUPTI missing?)"


def test_is_available_on_this_project(ck):
    import cudakit.graph_annotations as ga
    if ck.backend_name() == "emulated":
        assert ga.is_available()
    assert isinstance(ga.is_available(), bool)


def test_seed_example_verbatim(ck, ga, tmp_path):
    # The seed's example with cudakit in place of torch / torch.cuda (the profiler part is
    # the profiler's; the ids are checked against get_graph_data instead). 1024 x 1024 on a
    # GPU; smaller on the emulated backend, whose matmul runs on the host.
    import cudakit
    from cudakit.graph_annotations import mark_kernels, get_kernel_annotations
    n = 1024 if ck.backend_name() == "cuda" else 96
    x = cudakit.randn(n, n, device="cuda")

    # Warmup: run the workload once outside capture so lazy initialization
    # (e.g. cuBLAS handles) does not end up in -- or invalidate -- the capture.
    y = x @ x.t()
    z = cudakit.relu(y) @ x
    cudakit.synchronize()
    g = cudakit.CUDAGraph()
    g.register_post_instantiate_hook(cudakit.export_graph_data(str(tmp_path / "g.pkl")))
    with cudakit.graph(g, enable_annotations=True):
        with mark_kernels("attention"):
            y = x @ x.t()
        with mark_kernels({"name": "mlp", "layer": 3}):
            z = cudakit.relu(y) @ x
    g.replay()
    cudakit.synchronize()

    annotations = get_kernel_annotations()
    with open(tmp_path / "g.pkl", "rb") as f:
        data = pickle.load(f)
    work = {nd["tools_id"] for nd in data["nodes"]
            if nd["node_type"] in ("kernel", "memcpy", "memset")}
    assert annotations and set(annotations) <= work
    names = {}
    for node_id, anns in annotations.items():
        assert node_id >> 32 == data["exec_graph_id"]
        assert len(anns) == 1
        names.setdefault(anns[0]["name"], []).append(anns[0])
    assert set(names) == {"attention", "mlp"}
    assert all(a == {"name": "mlp", "layer": 3} for a in names["mlp"])
    assert len(names["mlp"]) >= 2  # relu + matmul

    # The join from the seed: a trace event's "graph node id" -> annotation fields.
    trace = {"traceEvents": [{"name": "k", "args": {"graph node id": nid}} for nid in work]
             + [{"name": "cpu op", "args": {}}]}
    for event in trace["traceEvents"]:
        node_id = event.get("args", {}).get("graph node id")
        for ann in annotations.get(node_id, []):
            event["args"].update(ann)
    tagged = [e for e in trace["traceEvents"] if "name" in e["args"]]
    assert len(tagged) == len(annotations)
    json.dumps(trace)
    assert pickle.loads(pickle.dumps(dict(get_kernel_annotations()))) == dict(annotations)


def one_kernel_ops(ck, n=64):
    return ck.zeros(n, device="cuda"), ck.ones(n, device="cuda")


def test_nested_scopes_merge_inner_wins(ck, ga):
    x, one = one_kernel_ops(ck)
    g = ck.CUDAGraph()
    with ck.graph(g, enable_annotations=True):
        with ga.mark_kernels({"name": "outer", "shared": "outer", "only_outer": 1}):
            x = x + one
            with ga.mark_kernels({"name": "inner", "shared": "inner"}):
                x = x + one
            x = x + one
    ann = sorted(ga.get_kernel_annotations().items())
    assert [a[0]["name"] for _, a in ann] == ["outer", "inner", "outer"]
    assert ann[0][1] == [{"name": "outer", "shared": "outer", "only_outer": 1}]
    assert ann[1][1] == [{"name": "inner", "shared": "inner", "only_outer": 1}]


def test_noop_outside_capture_and_when_disabled(ck, ga):
    x, one = one_kernel_ops(ck)
    with ga.mark_kernels("outside"):
        x = x + one
    g = ck.CUDAGraph()
    with ck.graph(g):  # enable_annotations=False
        with ga.mark_kernels("off"):
            x = x + one
    assert len(ga.get_kernel_annotations()) == 0


def test_bad_annotations(ck, ga):
    with pytest.raises(TypeError, match="str or a dict"):
        ga.mark_kernels(42)
    with pytest.raises(TypeError, match="keys must be str"):
        ga.mark_kernels({1: "x"})
    with pytest.raises(TypeError, match="JSON scalar"):
        ga.mark_kernels({"name": object()})
    with pytest.raises(ValueError, match="64-bit"):
        ga.mark_kernels({"big": 2**80})
    # Accepted scalar kinds round-trip.
    x, one = one_kernel_ops(ck)
    g = ck.CUDAGraph()
    ann = {"name": "k", "i": -3, "f": 0.5, "b": True, "none": None}
    with ck.graph(g, enable_annotations=True):
        with ga.mark_kernels(ann):
            x = x + one
    (got,) = ga.get_kernel_annotations().values()
    assert got == [ann]
    m = ga.get_kernel_annotations()
    assert m.get(None, []) == [] and m.get(-1, []) == [] and m.get("x", []) == []
    with pytest.raises(TypeError):
        m[1] = 2  # read-only view


def test_remap_on_reinstantiate_and_purge(ck, ga):
    x, one = one_kernel_ops(ck)
    g = ck.CUDAGraph(keep_graph=True)
    with ck.graph(g, enable_annotations=True):
        with ga.mark_kernels("a"):
            x = x + one
    assert len(ga.get_kernel_annotations()) == 0  # keyed at instantiation
    g.instantiate()
    first = g._exec_graph_id
    assert [k >> 32 for k in ga.get_kernel_annotations()] == [first]
    g.instantiate()
    second = g._exec_graph_id
    assert second != first
    assert [k >> 32 for k in ga.get_kernel_annotations()] == [second]
    if hasattr(g, "get_graph_data"):
        data = g.get_graph_data()
        assert set(ga.get_kernel_annotations()) <= {n["tools_id"] for n in data["nodes"]}
    other = ck.CUDAGraph()
    with ck.graph(other, enable_annotations=True):
        with ga.mark_kernels("b"):
            x = x * one
    assert len(ga.get_kernel_annotations()) == 2
    g.reset()
    assert [a[0]["name"] for a in ga.get_kernel_annotations().values()] == ["b"]
    del other
    gc.collect()
    assert len(ga.get_kernel_annotations()) == 0
    kept = ck.CUDAGraph(keep_graph=True)
    with ck.graph(kept, enable_annotations=True):
        with ga.mark_kernels("c"):
            x = x + one
    kept.instantiate()
    ga.clear_kernel_annotations()
    kept.instantiate()
    assert len(ga.get_kernel_annotations()) == 0


def test_scopes_exited_twice_or_out_of_order_are_errors(ck, ga):
    outer, inner = ga.mark_kernels("outer"), ga.mark_kernels({"name": "inner"})
    outer.__enter__()
    inner.__enter__()
    with pytest.raises(RuntimeError, match=r"mark_kernels\('outer'\): exited while the inner scope "
                                           r"mark_kernels\(\{'name': 'inner'\}\) is still open"):
        outer.__exit__(None, None, None)
    inner.__exit__(None, None, None)  # the right order still works after the error
    outer.__exit__(None, None, None)
    with pytest.raises(RuntimeError, match=r"mark_kernels\('outer'\): __exit__ without a matching "
                                           r"__enter__ \(the scope was exited twice"):
        outer.__exit__(None, None, None)
    with ga.mark_kernels("again"):  # scopes still nest normally
        with ga.mark_kernels("inside"):
            pass
