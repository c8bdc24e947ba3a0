"""cudakit.profiler.trace and `python -m cudakit trace merge`: event kinds, Kineto's required
args, flows, graph node ids, annotations merged into kernel args (equal to
get_kernel_annotations()), NVTX ranges, allocator events, the JSON schema Perfetto reads,
the offline merge on a torch.profiler-format trace, and errors. GPU-marked tests run on the
H200 (scripts/gpu-check.sh)."""
import ctypes
import gzip
import json
import os
import pathlib
import pickle
import subprocess
import sys
import warnings

import pytest

DATA = pathlib.Path(__file__).resolve().parent / "data"
KERNEL_ARGS = ["device", "stream", "correlation", "registers per thread", "shared memory",
               "blocks per SM", "warps per SM", "grid", "block", "est. achieved occupancy %",
               "graph id", "graph node id"]


@pytest.fixture
def ga(ck):
    import cudakit.graph_annotations as ga
    ga.clear_kernel_annotations()
    yield ga
    ga.clear_kernel_annotations()


def _device_part(t):
    """Skips when the device part is missing (cuda without CUPTI / CUPTI held elsewhere)."""
    import cudakit
    if t.warnings and cudakit.backend_name() != "emulated":
        pytest.skip(f"no device activity: {t.warnings[0]}")


def _by_cat(events, cat, ph="X"):
    return [e for e in events if e.get("cat") == cat and e["ph"] == ph]


def test_eager_kernels_args_and_flows(ck):
    x = ck.zeros(64, device="cuda")
    one = ck.ones(64, device="cuda")
    ck.synchronize()
    with ck.profiler.trace() as t:
        assert t.recording
        for _ in range(3):
            x = x + one
    assert not t.recording
    _device_part(t)
    ev = t.events()
    kernels = _by_cat(ev, "kernel")
    assert len(kernels) >= 3
    for k in kernels:
        assert set(KERNEL_ARGS) <= set(k["args"]), k
        assert k["pid"] == k["args"]["device"] and k["tid"] == k["args"]["stream"]
        assert k["args"]["graph node id"] == 0
        assert len(k["args"]["grid"]) == 3 and len(k["args"]["block"]) == 3
    starts = {e["id"]: e for e in ev if e["ph"] == "s"}
    ends = {e["id"]: e for e in ev if e["ph"] == "f"}
    launches = {e["args"]["correlation"]: e for e in _by_cat(ev, "cuda_driver")}
    for k in kernels:
        c = k["args"]["correlation"]
        assert c in starts and c in ends and c in launches
        assert starts[c]["ts"] == launches[c]["ts"] and starts[c]["tid"] == launches[c]["tid"]
        assert ends[c]["pid"] == k["pid"] and ends[c]["bp"] == "e"
        assert starts[c]["cat"] == ends[c]["cat"] == "ac2g"
    if ck.backend_name() == "emulated":
        assert {k["name"] for k in kernels} == {"ck_binary"}
        assert {launches[k["args"]["correlation"]]["name"] for k in kernels} == {"cuLaunchKernel"}


def test_seed_example_kernels_carry_node_ids_and_annotations(ck, ga, tmp_path):
    # The seed's workflow with cudakit.profiler.trace in place of torch.profiler.profile: the
    # annotation fields are already in the exported trace, no post-processing.
    if not ga.is_available():
        pytest.skip("graph tools ids unavailable")
    import cudakit
    from cudakit.graph_annotations import get_kernel_annotations, mark_kernels
    n = 1024 if ck.backend_name() == "cuda" else 48
    x = cudakit.randn(n, n, device="cuda")
    y = x @ x.t()
    z = cudakit.relu(y) @ x
    cudakit.synchronize()
    g = cudakit.CUDAGraph()
    with cudakit.graph(g, enable_annotations=True):
        with mark_kernels("attention"):
            y = x @ x.t()
        with mark_kernels({"name": "mlp", "layer": 3}):
            z = cudakit.relu(y) @ x
    with cudakit.profiler.trace() as prof:
        g.replay()
        cudakit.synchronize()
    prof.export_chrome_trace(str(tmp_path / "trace.json"))
    _device_part(prof)
    annotations = get_kernel_annotations()
    with open(tmp_path / "trace.json") as f:
        trace = json.load(f)
    in_graph = [e for e in trace["traceEvents"] if e.get("cat") == "kernel"
                and e["args"].get("graph node id", 0) != 0]
    assert len(in_graph) >= 3  # matmul, relu, matmul
    exec_ids = {e["args"]["graph id"] for e in in_graph}
    assert len(exec_ids) == 1
    names = set()
    for e in in_graph:
        node = e["args"]["graph node id"]
        assert node >> 32 == e["args"]["graph id"]
        assert node in annotations, e
        (ann,) = annotations[node]
        assert {k: e["args"][k] for k in ann} == ann  # the merge equals the registry
        names.add(ann["name"])
    assert names == {"attention", "mlp"}
    # One graph launch on the host, flowing to every kernel of the replay.
    launches = [e for e in trace["traceEvents"] if e.get("name") in ("cuGraphLaunch", "cudaGraphLaunch")]
    assert len(launches) == 1
    corr = launches[0]["args"]["correlation"]
    assert all(e["args"]["correlation"] == corr for e in in_graph)
    assert {e["id"] for e in trace["traceEvents"] if e["ph"] == "f"} >= {corr}
    replay = [e for e in trace["traceEvents"] if e.get("name") == "graph replay"]
    assert replay and replay[0]["args"]["graph id"] in exec_ids


def test_json_schema_perfetto_reads(ck, tmp_path):
    x = ck.ones(256, device="cuda")
    with ck.profiler.trace() as t:
        with ck.nvtx.range("step {}", 1):
            y = (x * 2).cpu()
    path = tmp_path / "t.json"
    t.export_chrome_trace(path)
    doc = json.loads(path.read_text())
    assert doc["schemaVersion"] == 1 and doc["displayTimeUnit"] == "ms"
    assert isinstance(doc["baseTimeNanoseconds"], int) and doc["baseTimeNanoseconds"] == t.base_time_ns
    assert isinstance(doc["deviceProperties"], list)
    events = doc["traceEvents"]
    assert isinstance(events, list) and events
    for e in events:
        assert e["ph"] in "XiCsfM", e
        assert isinstance(e["name"], str)
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
        assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0
        if e["ph"] == "X":
            assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0
        if e["ph"] in "sf":
            assert isinstance(e["id"], int)
    # ts / dur in microseconds: events() is the same list, in nanoseconds / 1000.
    api = t.events()
    assert len(api) == len(events)
    for a, b in zip(api, events):
        assert a["name"] == b["name"] and a["ph"] == b["ph"]
        assert a["ts"] == pytest.approx(b["ts"], abs=1e-3)
        if a["ph"] == "X":
            assert a["dur"] == pytest.approx(b["dur"], abs=1e-3)
    step = [e for e in events if e["name"] == "step 1" and e.get("cat") == "user_annotation"]
    assert len(step) == 1 and step[0]["dur"] > 0
    # the wall-clock span is microseconds, not nanoseconds or seconds
    total_us = max(e["ts"] + e.get("dur", 0) for e in events)
    assert 0 < total_us < 60e6
    assert json.loads(t.chrome_trace())["traceEvents"] == events  # same bytes as the file
    # gzip, as torch's export_chrome_trace
    t.export_chrome_trace(str(tmp_path / "t.json.gz"))
    with gzip.open(tmp_path / "t.json.gz", "rt") as f:
        assert len(json.load(f)["traceEvents"]) == len(events)


def test_nvtx_ranges_marks_and_gpu_projection(ck):
    x = ck.zeros(64, device="cuda")
    ck.synchronize()

    @ck.nvtx.range("decorated")
    def step():
        return x + 1

    with ck.profiler.trace() as t:
        ck.nvtx.range_push("outer")
        step()
        ck.nvtx.mark("checkpoint")
        ck.nvtx.range_pop()
    ev = t.events()
    ranges = {e["name"]: e for e in _by_cat(ev, "user_annotation")}
    assert {"outer", "decorated"} <= set(ranges)
    outer, dec = ranges["outer"], ranges["decorated"]
    assert outer["ts"] <= dec["ts"] and dec["ts"] + dec["dur"] <= outer["ts"] + outer["dur"]
    assert [e["name"] for e in _by_cat(ev, "user_annotation", "i")] == ["checkpoint"]
    _device_part(t)
    gpu = {e["name"] for e in _by_cat(ev, "gpu_user_annotation")}
    assert {"outer", "decorated"} <= gpu


def test_memory_events(ck):
    ck.synchronize()
    ck.empty_cache()
    with ck.profiler.trace(device=False, api=False) as t:
        a = ck.empty(1 << 16, device="cuda")  # 256 KiB
        del a
    ev = t.events()
    mem = [e for e in ev if e["name"] == "[memory]"]
    assert sum(e["args"]["Bytes"] for e in mem if e["args"]["Bytes"] > 0) >= 1 << 18
    assert sum(e["args"]["Bytes"] for e in mem) == 0
    for e in mem:
        assert e["cat"] == "cpu_instant_event" and e["ph"] == "i"
        assert {"Device Type", "Device Id", "Addr", "Bytes", "Total Allocated", "Total Reserved"} <= set(e["args"])
    assert any(e["name"].startswith("[memory] segment_") for e in ev)
    assert not _by_cat(ev, "kernel")  # device=False


def test_one_trace_at_a_time_and_results_after_stop(ck):
    t = ck.profiler.trace()
    with pytest.raises(RuntimeError, match="nothing recorded yet"):
        t.events()
    with t:
        with pytest.raises(RuntimeError, match="already recording"):
            ck.profiler.trace().start()
        with pytest.raises(RuntimeError, match="still recording"):
            t.events()
        with pytest.raises(RuntimeError, match="already recording"):
            t.start()
    assert isinstance(t.events(), list)
    with ck.profiler.trace():  # free again
        pass


def test_bad_arguments_and_paths(ck, tmp_path):
    with pytest.raises(TypeError, match="device"):
        ck.profiler.trace(device="yes").start()
    with ck.profiler.trace() as t:
        pass
    with pytest.raises(ValueError, match="path is empty"):
        t.export_chrome_trace("")
    missing = str(tmp_path / "no-such-dir" / "t.json")
    with pytest.raises(RuntimeError, match="No such file") as e:
        t.export_chrome_trace(missing)
    assert missing in str(e.value)
    with pytest.raises(RuntimeError, match="No such file"):  # gzip: written by cudakit too
        t.export_chrome_trace(missing + ".gz")
    with pytest.raises(TypeError):
        t.export_chrome_trace(12)


# ---- offline merge (python -m cudakit trace merge) ----

@pytest.fixture
def ckm():
    """cudakit for the offline merge: no device needed."""
    import cudakit
    return cudakit


def _fixture_annotations():
    g = 5 << 32  # the fixture's exec graph id is 5
    return {g | 1: [{"name": "attention"}], g | 3: [{"name": "mlp", "layer": 3}],
            g | 4: [{"name": "mlp", "layer": 3}], g | 6: [{"name": "copy out", "stream": "kept"}]}


def _run_merge(*args):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    return subprocess.run([sys.executable, "-m", "cudakit", "trace", "merge", *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=120)


def test_merge_torch_profiler_trace(ckm, tmp_path):
    pkl = tmp_path / "ann.pkl"
    ckm.profiler.save_annotations(pkl, annotations=_fixture_annotations())
    out = tmp_path / "merged.json"
    r = _run_merge(DATA / "kineto_graph_replay.json", pkl, "-o", out)
    assert r.returncode == 0, r.stderr
    assert "merged annotations into 4 events" in r.stdout
    merged = json.loads(out.read_text())
    original = json.loads((DATA / "kineto_graph_replay.json").read_text())
    assert len(merged["traceEvents"]) == len(original["traceEvents"])
    ann = _fixture_annotations()
    seen = 0
    for before, after in zip(original["traceEvents"], merged["traceEvents"]):
        node = before.get("args", {}).get("graph node id", 0)
        if node in ann:
            expected = dict(before["args"])
            expected.update(ann[node][0])  # the seed's args.update(ann)
            assert after["args"] == expected
            seen += 1
        else:
            assert after == before
    assert seen == 4
    (copy,) = [e for e in merged["traceEvents"] if e.get("cat") == "gpu_memcpy"]
    assert copy["args"]["stream"] == "kept"  # the annotation wins, as with update()


def test_merge_accepts_the_seed_pickle_and_gzip(ckm, tmp_path):
    # The seed: "the pickle of dict(get_kernel_annotations()) can be saved next to a trace".
    pkl = tmp_path / "plain.pkl"
    pkl.write_bytes(pickle.dumps(dict(_fixture_annotations())))
    src = tmp_path / "in.json.gz"
    with gzip.open(src, "wt") as f:
        f.write((DATA / "kineto_graph_replay.json").read_text())
    r = _run_merge(src, pkl, "-o", tmp_path / "out.json.gz")
    assert r.returncode == 0, r.stderr
    with gzip.open(tmp_path / "out.json.gz", "rt") as f:
        merged = json.load(f)
    names = [e["args"].get("name") for e in merged["traceEvents"] if e.get("cat") == "kernel"]
    assert names.count("mlp") == 2 and names.count("attention") == 1


def test_merge_reports_annotations_from_another_run(ckm, tmp_path):
    pkl = tmp_path / "other.pkl"
    ckm.profiler.save_annotations(pkl, annotations={(9 << 32) | 1: [{"name": "x"}]})
    r = _run_merge(DATA / "kineto_graph_replay.json", pkl, "-o", tmp_path / "o.json")
    assert r.returncode == 0
    assert "merged annotations into 0 events" in r.stdout
    assert "graph ids [9]" in r.stderr


class _Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


@pytest.mark.parametrize("case", ["missing_trace", "missing_pkl", "not_json", "no_events",
                                  "evil_pickle", "bad_keys", "bad_version", "unwritable"])
def test_merge_bad_inputs_exit_2_with_one_line(ckm, tmp_path, case):
    trace = DATA / "kineto_graph_replay.json"
    pkl = tmp_path / "a.pkl"
    ckm.profiler.save_annotations(pkl, annotations=_fixture_annotations())
    out = tmp_path / "o.json"
    expect = {"missing_trace": "cannot read the trace", "missing_pkl": "cannot read the annotations",
              "not_json": "not a JSON trace", "no_events": "no 'traceEvents' list",
              "evil_pickle": "references", "bad_keys": "not a graph node id",
              "bad_version": "version 7", "unwritable": "cannot write"}[case]
    if case == "missing_trace":
        trace = tmp_path / "nope.json"
    elif case == "missing_pkl":
        pkl = tmp_path / "nope.pkl"
    elif case == "not_json":
        trace = tmp_path / "bad.json"
        trace.write_text("{not json")
    elif case == "no_events":
        trace = tmp_path / "empty.json"
        trace.write_text('{"events": []}')
    elif case == "evil_pickle":
        pkl.write_bytes(pickle.dumps(_Evil()))
    elif case == "bad_keys":
        pkl.write_bytes(pickle.dumps({"node": [{"name": "x"}]}))
    elif case == "bad_version":
        pkl.write_bytes(pickle.dumps({"format": "cudakit.kernel_annotations", "version": 7}))
    elif case == "unwritable":
        out = tmp_path / "no-dir" / "o.json"
    r = _run_merge(trace, pkl, "-o", out)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert expect in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1  # one line, no traceback
    assert "pwned" not in r.stdout


def test_save_annotations_with_graph_data(ck, ga, tmp_path):
    if not ga.is_available():
        pytest.skip("graph tools ids unavailable")
    x = ck.zeros(16, device="cuda")
    one = ck.ones(16, device="cuda")
    ck.synchronize()
    g = ck.CUDAGraph(keep_graph=True)
    with ck.graph(g, enable_annotations=True):
        with ga.mark_kernels("inc"):
            x += one
    g.instantiate()
    path = tmp_path / "ann.pkl"
    ck.profiler.save_annotations(path, graphs=[g])
    data = pickle.loads(path.read_bytes())
    assert data["format"] == "cudakit.kernel_annotations" and data["version"] == 1
    assert data["annotations"] == dict(ga.get_kernel_annotations())
    assert data["graphs"][0]["exec_graph_id"] == g.get_graph_data()["exec_graph_id"]
    # In-process merge of a loaded trace: the same join.
    trace = {"traceEvents": [{"name": "k", "args": {"graph node id": nid}} for nid in data["annotations"]]}
    assert ck.profiler.merge_annotations(trace) == len(data["annotations"])
    assert all(e["args"]["name"] == "inc" for e in trace["traceEvents"])
    with pytest.raises(ValueError, match="traceEvents"):
        ck.profiler.merge_annotations({"events": []})


# ---- GPU: CUPTI ----

@pytest.mark.gpu
def test_gpu_device_records_come_from_cupti(ck):
    x = ck.ones(1 << 20, device="cuda")
    with ck.profiler.trace() as t:
        y = x * 2
    assert t.warnings == [], t.warnings
    assert "CUPTI" in t.device_source
    kernels = _by_cat(t.events(), "kernel")
    assert kernels and all(k["args"]["registers per thread"] > 0 for k in kernels)
    assert all(k["args"]["grid"][0] >= 1 and k["args"]["block"][0] >= 32 for k in kernels)


def _load_cupti():
    import ctypes.util
    names = [os.environ.get("CUDAKIT_CUPTI_PATH", ""), "libcupti.so.13", "libcupti.so.12",
             "libcupti.so", "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so",
             "/usr/local/cuda/lib64/libcupti.so"]
    for n in names:
        if not n:
            continue
        try:
            return ctypes.CDLL(n)
        except OSError:
            continue
    pytest.skip("libcupti not found for the foreign-subscriber test")


@pytest.mark.gpu
def test_gpu_foreign_cupti_subscriber_degrades_with_a_clear_message(ck):
    lib = _load_cupti()
    callback_t = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint, ctypes.c_void_p)
    callback = callback_t(lambda *a: None)
    handle = ctypes.c_void_p()
    rc = lib.cuptiSubscribe(ctypes.byref(handle), callback, None)
    assert rc == 0, f"could not play the foreign tool (cuptiSubscribe -> {rc})"
    try:
        x = ck.ones(1024, device="cuda")
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            with ck.profiler.trace() as t:
                ck.nvtx.range_push("still recorded")
                y = x + 1
                ck.nvtx.range_pop()
        assert t.warnings and "already in use" in t.warnings[0], t.warnings
        assert any("CUPTI" in str(m.message) for m in w)
        ev = t.events()
        assert not _by_cat(ev, "kernel")  # no device part...
        assert [e["name"] for e in _by_cat(ev, "user_annotation")] == ["still recorded"]  # ...but ours
    finally:
        lib.cuptiUnsubscribe(handle)
    with ck.profiler.trace() as t2:  # the subscription is free again: full trace
        y = x + 1
    assert t2.warnings == [] and _by_cat(t2.events(), "kernel")
