"""python -m cudakit memory replay: snapshot pickles and trace files replayed under settings."""
import gzip
import json
import os
import pickle
import subprocess
import sys

import pytest

from cudakit import _memory_replay as replay

MiB = 1 << 20


def fragmenting_events():
    """A live set that grows while ever larger temporaries come and go: torch's default mode
    cannot reuse the freed (smaller) temporaries and grows a segment each round."""
    ev, live, ident = [], [], 0
    for i in range(24):
        tmp = ident
        ev.append(("alloc", tmp, (30 + 2 * i) * MiB))
        ident += 1
        ev.append(("alloc", ident, 24 * MiB))
        live.append(ident)
        ident += 1
        ev.append(("free", tmp, 0))
    return ev


def as_snapshot(events, before=()):
    """A torch-style snapshot dict: the history of device 0, addresses made up."""
    addr = {}
    trace = []
    base = 0x7F0000000000
    for kind, ident, size in events:
        if kind == "alloc":
            addr[ident] = base + ident * 1024 * MiB
            trace.append({"action": "alloc", "addr": addr[ident], "size": size, "stream": 0})
        else:
            for action in ("free_requested", "free_completed"):
                trace.append({"action": action, "addr": addr[ident], "size": 0, "stream": 0})
    # Blocks live before recording began: one freed during the history, one still live (in the
    # segments only).
    for i, (size, freed) in enumerate(before):
        a = 0x100000000 + i * 1024 * MiB
        if freed:
            trace.insert(1, {"action": "free_completed", "addr": a, "size": size, "stream": 0})
    segments = [{"device": 0, "address": 0x100000000 + i * 1024 * MiB, "stream": 0,
                 "total_size": size, "blocks": [{"size": size, "state": "active_allocated"}]}
                for i, (size, freed) in enumerate(before) if not freed]
    return {"segments": segments, "device_traces": [trace]}


def as_trace(events):
    lines = ["# workload=test events=%d" % len(events)]
    for kind, ident, size in events:
        lines.append(f"a {ident} {size} 0" if kind == "alloc" else f"f {ident}")
    return "\n".join(lines) + "\n"


def cli(*args):
    env = dict(os.environ)
    return subprocess.run([sys.executable, "-m", "cudakit", "memory", "replay", *args],
                          capture_output=True, text=True, env=env, timeout=300)


def test_snapshot_and_trace_replay_alike(tmp_path):
    ev = fragmenting_events()
    snap = tmp_path / "snap.pickle"
    snap.write_bytes(pickle.dumps(as_snapshot(ev)))
    trace = tmp_path / "t.trace.gz"
    with gzip.open(trace, "wt") as f:
        f.write(as_trace(ev))
    confs = ["--conf", "expandable_segments:False", "--conf", "expandable_segments:True"]
    r1 = cli(str(snap), "--json", *confs)
    r2 = cli(str(trace), "--json", *confs)
    assert r1.returncode == 0, r1.stderr
    assert r2.returncode == 0, r2.stderr
    a, b = json.loads(r1.stdout)[0], json.loads(r2.stdout)[0]
    assert a["events"] == b["events"] == len(ev)
    live = replay.live_peak(replay.load(str(trace))[1])
    for x, y in zip(a["results"], b["results"]):
        assert x["peak_allocated"] == y["peak_allocated"] == live
        assert x["peak_reserved"] == y["peak_reserved"]
    plain, expandable = a["results"]
    assert plain["peak_reserved"] / plain["peak_allocated"] > 1.3, plain
    assert expandable["peak_reserved"] < plain["peak_reserved"], (plain, expandable)


def test_table_names_every_setting(tmp_path):
    trace = tmp_path / "t.trace"
    trace.write_text(as_trace(fragmenting_events()))
    r = cli(str(trace), "--conf", "", "--conf", "expandable_segments:True")
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    assert out[0] == str(trace)
    assert "72 events" in out[1], out[1]
    assert out[2].split()[:2] == ["settings", "peak"]
    rows = {line.split()[0]: line.split() for line in out[3:]}
    assert set(rows) == {"(defaults)", "expandable_segments:True"}
    for cols in rows.values():
        # peak allocated / reserved in GiB, the ratio, the device calls
        assert float(cols[5]) == pytest.approx(float(cols[3]) / float(cols[1]), abs=2e-3)
        assert int(cols[6]) > 0


def test_snapshot_blocks_live_before_recording_are_allocated_first():
    ev = fragmenting_events()
    snap = as_snapshot(ev, before=[(100 * MiB, True), (50 * MiB, False)])
    events, device = replay.snapshot_events(snap)
    assert device == 0
    assert events[0] == (1, 0, 100 * MiB, 0) or events[1] == (1, 1, 100 * MiB, 0)
    sizes = sorted(e[2] for e in events[:2])
    assert sizes == [50 * MiB, 100 * MiB]
    assert replay.live_peak(events) >= replay.live_peak(
        replay.snapshot_events(as_snapshot(ev))[0]) + 50 * MiB


def test_unusable_inputs_are_refused(tmp_path):
    bad = tmp_path / "code.pickle"  # loading it would import os and reference a function
    bad.write_bytes(pickle.dumps({"device_traces": [[]], "x": os.getcwd}))
    r = cli(str(bad))
    assert r.returncode == 2
    assert "not a memory snapshot" in r.stderr
    empty = tmp_path / "nohistory.pickle"
    empty.write_bytes(pickle.dumps({"segments": [], "device_traces": [[]]}))
    r = cli(str(empty))
    assert r.returncode == 2
    assert "_record_memory_history()" in r.stderr
    junk = tmp_path / "junk.trace"
    junk.write_text("a 1 100 0\nhello\n")
    r = cli(str(junk))
    assert r.returncode == 2
    assert "line 2" in r.stderr and "trace format" in r.stderr


def test_real_trace_in_repository():
    path = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "memory", "traces",
                        "mlp_train.trace.gz")
    title, events = replay.load(path)
    assert title.startswith("# workload=mlp_train")
    res = replay.replay(events, ["expandable_segments:False"])[0]
    assert "error" not in res, res
    assert res["peak_allocated"] == 2760507392  # the C++ replay's figure (docs/performance.md)
    assert res["device_allocs"] + res["device_frees"] == 49
