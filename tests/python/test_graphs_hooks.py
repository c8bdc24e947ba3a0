"""Graph lifecycle hooks from Python: global and per graph, fire points and order, state
seen by hooks, raising hooks, destroy hooks/callbacks, retained objects."""
import gc
import os
import weakref

import numpy as np
import pytest

KINDS = ["capture_start", "capture_end", "instantiate", "replay_start", "replay_end"]


@pytest.fixture
def handles():
    hs = []
    yield hs
    for h in hs:
        h.remove()


def test_fire_points_global_then_per_graph(ck, handles):
    seen = []
    for kind in KINDS:
        handles.append(getattr(ck.graphs, f"register_graph_{kind}_hook")(
            lambda g, kind=kind: seen.append(("global", kind, g))))
    x = ck.zeros(4, device="cuda")
    g = ck.CUDAGraph()
    g.register_capture_start_hook(lambda gr: seen.append(("graph", "capture_start", gr)))
    g.register_capture_end_hook(lambda gr: seen.append(("graph", "capture_end", gr)))
    g.register_post_instantiate_hook(lambda gr: seen.append(("graph", "instantiate", gr)))
    g.register_replay_start_hook(lambda gr: seen.append(("graph", "replay_start", gr)))
    g.register_replay_end_hook(lambda gr: seen.append(("graph", "replay_end", gr)))
    with ck.graph(g):
        _ = x + 1
    assert [(w, k) for w, k, _ in seen] == [
        ("global", "capture_start"), ("graph", "capture_start"),
        ("global", "capture_end"), ("graph", "capture_end"),
        ("global", "instantiate"), ("graph", "instantiate")]
    assert all(gr is g for _, _, gr in seen)  # hooks get the graph object itself
    seen.clear()
    for _ in range(2):
        g.replay()
    ck.synchronize()
    assert [(w, k) for w, k, _ in seen] == [
        ("global", "replay_start"), ("graph", "replay_start"),
        ("global", "replay_end"), ("graph", "replay_end")] * 2
    g.reset()


def test_registration_order_and_remove(ck, handles):
    order = []
    x = ck.zeros(4, device="cuda")
    g = ck.CUDAGraph()
    with ck.graph(g):
        _ = x + 1
    h1 = g.register_replay_start_hook(lambda gr: order.append(1))
    h2 = g.register_replay_start_hook(lambda gr: order.append(2))
    g.replay()
    assert order == [1, 2]
    assert h1.registered
    h1.remove()
    h1.remove()
    assert not h1.registered
    g.replay()
    assert order == [1, 2, 2]
    with h2:  # handles are context managers: removed on exit
        pass
    g.replay()
    assert order == [1, 2, 2]
    ck.synchronize()


def test_hooks_see_live_capture_and_template(ck, handles):
    capturing, template = [], []
    handles.append(ck.graphs.register_graph_capture_start_hook(
        lambda g: capturing.append(ck.is_current_stream_capturing())))
    handles.append(ck.graphs.register_graph_capture_end_hook(
        lambda g: template.append(g.raw_cuda_graph() != 0)))
    x = ck.zeros(4, device="cuda")
    for keep in (False, True):
        g = ck.CUDAGraph(keep_graph=keep)
        with ck.graph(g):
            _ = x + 1
    assert capturing == [True, True]
    assert template == [True, True]


def test_raising_replay_start_hook_aborts_replay(ck, handles):
    x = ck.ones(4, device="cuda")
    g = ck.CUDAGraph()
    with ck.graph(g):
        y = x * 2
    g.replay()
    ck.synchronize()
    ends = []
    handles.append(ck.graphs.register_graph_replay_end_hook(lambda gr: ends.append("g")))
    g.register_replay_end_hook(lambda gr: ends.append("p"))

    def bad(gr):
        raise ValueError("no replay today")
    h = g.register_replay_start_hook(bad)
    x.fill_(5)
    with pytest.raises(ValueError, match="no replay today"):
        g.replay()
    ck.synchronize()
    assert ends == []
    assert np.all(y.cpu().numpy() == 2)  # nothing was launched
    h.remove()
    g.replay()
    ck.synchronize()
    assert ends == ["g", "p"]
    assert np.all(y.cpu().numpy() == 10)


def test_global_hook_errors_swallowed(ck, handles):
    ran = []

    def boom(g):
        raise RuntimeError("boom")
    for kind in KINDS:
        handles.append(getattr(ck.graphs, f"register_graph_{kind}_hook")(boom))
        handles.append(getattr(ck.graphs, f"register_graph_{kind}_hook")(
            lambda g, kind=kind: ran.append(kind)))
    x = ck.zeros(4, device="cuda")
    g = ck.CUDAGraph()
    with ck.graph(g):
        _ = x + 1
    g.replay()
    ck.synchronize()
    assert ran == KINDS


def test_raising_per_graph_capture_hooks_leave_no_capture(ck):
    x = ck.zeros(4, device="cuda")
    g = ck.CUDAGraph()
    g.register_capture_start_hook(lambda gr: (_ for _ in ()).throw(KeyError("start")))
    with pytest.raises(KeyError, match="start"):
        with ck.graph(g):
            _ = x + 1
    assert not ck.is_current_stream_capturing()
    assert not g._is_capturing
    g2 = ck.CUDAGraph()
    g2.register_capture_end_hook(lambda gr: (_ for _ in ()).throw(KeyError("end")))
    with pytest.raises(KeyError, match="end"):
        with ck.graph(g2):
            _ = x + 1
    assert not ck.is_current_stream_capturing()
    assert not g2._has_graph_exec  # capture ended, not instantiated (torch semantics)
    g2.reset()


def test_replay_end_fires_when_launch_raises(ck, handles, emulated_only):
    # A launch that fails cleanly needs the emulated backend (a made-up stream handle).
    x = ck.zeros(4, device="cuda")
    g = ck.CUDAGraph()
    with ck.graph(g):
        _ = x + 1
    seen = []
    handles.append(ck.graphs.register_graph_replay_start_hook(lambda gr: seen.append("start")))
    handles.append(ck.graphs.register_graph_replay_end_hook(lambda gr: seen.append("end")))
    g.register_replay_end_hook(lambda gr: seen.append("graph end"))
    bogus = ck.ExternalStream(0xDEAD0, device=0)
    with ck.stream(bogus):
        with pytest.raises(ck.AcceleratorError, match="INVALID_HANDLE"):
            g.replay()
    assert seen == ["start", "end", "graph end"]


def test_destroy_hooks_once_per_cycle_with_exec_ids(ck, handles):
    gc.collect()  # graphs of earlier tests must not end their cycles inside this test
    destroyed = []
    handles.append(ck.graphs.register_graph_destroy_hook(lambda ids: destroyed.append(ids)))
    x = ck.zeros(4, device="cuda")
    g = ck.CUDAGraph()
    g.reset()  # nothing captured: no destroy hook
    assert destroyed == []
    with ck.graph(g):
        _ = x + 1
    for _ in range(3):
        g.replay()
    ck.synchronize()
    exec_id = g._exec_graph_id
    assert destroyed == []
    g.reset()
    assert len(destroyed) == 1
    assert isinstance(destroyed[0], set)
    if exec_id is not None:
        assert destroyed[0] == {exec_id}
    g.reset()
    assert len(destroyed) == 1
    with ck.graph(g):
        _ = x + 2
    second = g._exec_graph_id
    del g
    gc.collect()
    assert len(destroyed) == 2, destroyed  # the last reference going ends the cycle
    if second is not None:
        assert destroyed[1] == {second}


def test_destroy_callbacks_and_retained_objects(ck):
    x = ck.zeros(4, device="cuda")
    order = []

    class Obj:
        pass
    obj = Obj()
    ref = weakref.ref(obj)
    g = ck.CUDAGraph()
    g.register_destroy_callback(lambda: order.append(1))
    g.register_destroy_callback(lambda: 1 / 0)  # swallowed
    removed = g.register_destroy_callback(lambda: order.append(99))
    g.register_destroy_callback(lambda: order.append(2), synchronize_before_release=True)
    removed.remove()
    g.retain_object(obj)
    del obj
    gc.collect()
    assert ref() is not None
    with ck.graph(g):
        _ = x + 1
    g.replay()
    g.reset()
    assert order == [1, 2]
    gc.collect()
    assert ref() is None
    g.register_destroy_callback(lambda: order.append(3))
    del g
    gc.collect()
    assert order == [1, 2, 3]
    # remove() drops a retained object early.
    g = ck.CUDAGraph()
    o2 = Obj()
    r2 = weakref.ref(o2)
    h = g.retain_object(o2, synchronize_before_release=False)
    del o2
    gc.collect()
    assert r2() is not None
    h.remove()
    gc.collect()
    assert r2() is None
    with pytest.raises(TypeError):
        g.register_destroy_callback("not callable")


def test_zero_cost_path_has_no_hook_objects(ck):
    # Replay without hooks goes straight to the native launch; hooks only change that
    # while registered (timing is the benchmark's job: bench/graphs).
    x = ck.zeros(4, device="cuda")
    g = ck.CUDAGraph()
    with ck.graph(g):
        y = x + 1
    for _ in range(100):
        g.replay()
    ck.synchronize()
    assert np.all(y.cpu().numpy() == 1)


def test_export_and_hooks_from_cpp_graphs_see_python_objects(ck, tmp_path):
    # The exporters are plain hooks: registered globally they fire for every graph.
    x = ck.zeros(16, device="cuda")
    path = tmp_path / "all.dot"
    h = ck.graphs.register_graph_capture_end_hook(ck.export_dot(str(path)))
    try:
        g = ck.CUDAGraph()
        with ck.graph(g):
            _ = x + 1
    finally:
        h.remove()
    assert os.path.getsize(path) > 0
