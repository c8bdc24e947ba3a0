"""cudakit.profiler.trace at scale (issue 28): every kernel of long loops timestamped, records
of work still running left out with a warning, non-finite annotation values in valid JSON,
compressed output, Perfetto's protobuf format, and tracing beside graph threads. The same
tests run on the H200 through the GPU suite (scripts/gpu-check.sh)."""
import gzip
import json
import os
import threading
import time

import pytest


def _device_part(t):
    import cudakit
    if t.warnings and cudakit.backend_name() != "emulated":
        pytest.skip(f"no device activity: {t.warnings[0]}")


def _strict_json(data):
    """json.loads refusing NaN / Infinity (Python's default accepts them; Perfetto does not)."""
    def refuse(name):
        raise ValueError(f"non-JSON constant {name}")
    return json.loads(data, parse_constant=refuse)


def _assert_every_kernel_timed(t, launched):
    assert t.warnings == []
    assert t.base_time_ns > 1_600_000_000 * 10**9  # not 1970
    kernels = [e for e in t.events() if e.get("cat") == "kernel" and e["ph"] == "X"]
    assert len(kernels) == launched
    assert all(k["ts"] > 0 and k["dur"] >= 0 for k in kernels)
    rows = {}
    for k in kernels:
        rows.setdefault((k["pid"], k["tid"]), []).append(k)
    for ks in rows.values():  # launch order is time order, without overlap, on each stream
        ks.sort(key=lambda k: k["args"]["correlation"])  # stable: a replay's nodes in order
        for a, b in zip(ks, ks[1:]):
            assert b["ts"] >= a["ts"] + a["dur"] - 1e-3, (a, b)


def test_every_kernel_of_a_1000_replay_graph_loop_is_timestamped(ck):
    x = ck.zeros(16, device="cuda")
    one = ck.ones(16, device="cuda")
    g = ck.CUDAGraph()
    with ck.graph(g):
        for _ in range(5):
            x.add_(one)
    ck.synchronize()
    with ck.profiler.trace() as t:
        for _ in range(1000):
            g.replay()
    _device_part(t)
    _assert_every_kernel_timed(t, 5000)
    # graph node ids are kept: 5 distinct nodes, each replayed 1000 times
    kernels = [e for e in t.events() if e.get("cat") == "kernel"]
    assert len({k["args"]["graph node id"] for k in kernels}) == 5


def test_every_kernel_of_a_20k_eager_loop_is_timestamped(ck):
    x = ck.zeros(16, device="cuda")
    one = ck.ones(16, device="cuda")
    ck.synchronize()
    with ck.profiler.trace() as t:
        for _ in range(20000):
            x.add_(one)
    _device_part(t)
    _assert_every_kernel_timed(t, 20000)


def test_work_still_running_at_stop_is_left_out_with_a_warning(ck, emulated_only):
    from cudakit import _C
    s = ck.Stream()
    x = ck.zeros(16, device="cuda")
    one = ck.ones(16, device="cuda")
    ck.synchronize()
    with ck.profiler.trace(synchronize=False) as t:
        with ck.stream(s):
            _C._launch_host_sleep(s, 0.3)  # the kernel below waits behind it
            x.add_(one)
    kernels = [e for e in t.events() if e.get("cat") == "kernel"]
    assert kernels == []  # never a kernel at ts 0 / 1970
    assert any("no timestamps" in w for w in t.warnings), t.warnings
    s.synchronize()


@pytest.mark.parametrize("value,text", [(float("nan"), "NaN"), (float("inf"), "Infinity"),
                                        (float("-inf"), "-Infinity")])
def test_non_finite_annotation_values_are_exported_as_strings(ck, tmp_path, value, text):
    import cudakit.graph_annotations as ga
    if not ga.is_available():
        pytest.skip("graph annotations unavailable")
    ga.clear_kernel_annotations()
    x = ck.zeros(16, device="cuda")
    one = ck.ones(16, device="cuda")
    g = ck.CUDAGraph()
    with ck.graph(g, enable_annotations=True):
        with ga.mark_kernels({"v": value, "ok": 1.5}):
            x.add_(one)
    ck.synchronize()
    with ck.profiler.trace() as t:
        g.replay()
    _device_part(t)
    path = tmp_path / "t.json"
    t.export_chrome_trace(path)
    doc = _strict_json(path.read_text())
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    assert kernels and all(k["args"]["v"] == text and k["args"]["ok"] == 1.5 for k in kernels)
    # events() agrees with the file
    ev = [e for e in t.events() if e.get("cat") == "kernel"]
    assert [e["args"]["v"] for e in ev] == [text] * len(ev)
    ga.clear_kernel_annotations()
