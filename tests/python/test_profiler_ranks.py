"""`python -m cudakit trace merge-ranks` (issue 28 item 6): two ranks started by
`python -m cudakit.launch` (the emulated multi-process communicator in CI, NCCL on GPUs) each
trace a step with an all_reduce and write their trace; the merge puts both on one timeline:
one group of processes per rank, every event kept at its absolute time (exact on one host:
same CLOCK_REALTIME), unique pids and flow ids, and the bad inputs refused with exit 2."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

WORKER = textwrap.dedent("""
    import os, sys, time
    import cudakit as ck
    from cudakit import nccl
    out = sys.argv[1]
    rank = int(os.environ["RANK"])
    c = nccl.Communicator.from_env(timeout=60)
    dev = c.device.index
    x = ck.full((1000,), float(rank + 1), device=f"cuda:{dev}")
    one = ck.ones(1000, device=f"cuda:{dev}")
    ck.synchronize()
    with ck.profiler.trace() as t:
        if rank == 1:
            time.sleep(0.05)  # rank 1 starts later: its base time differs
        for _ in range(5):
            x.add_(one)
        c.all_reduce(x)
        c.synchronize()
        ck.nvtx.mark("after all_reduce")  # both ranks pass here within the collective's skew
    t.export_chrome_trace(os.path.join(out, f"rank{rank}.json"))
""")


def _cli(*args):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    return subprocess.run([sys.executable, "-m", "cudakit", "trace", *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=120)


@pytest.fixture
def two_rank_traces(ck, tmp_path):
    from cudakit import nccl
    try:
        nccl.version()
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"no communicator: {e}")
    if ck.device_count() < 2 and ck.backend_name() != "emulated":
        pytest.skip("needs 2 devices")
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    r = subprocess.run([sys.executable, "-m", "cudakit.launch", "--nproc-per-node", "2",
                        str(script), str(tmp_path)], capture_output=True, text=True, env=env,
                       timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    return [tmp_path / "rank0.json", tmp_path / "rank1.json"]


def test_merge_ranks_one_timeline(two_rank_traces, tmp_path):
    r0, r1 = two_rank_traces
    out = tmp_path / "all.json"
    # files in the wrong order: the ranks come from the traces' distributedInfo
    r = _cli("merge-ranks", r1, r0, "-o", out)
    assert r.returncode == 0, r.stderr
    assert "merged 2 ranks" in r.stdout
    merged = json.loads(out.read_text())
    src = [json.loads(p.read_text()) for p in (r0, r1)]
    assert [s["distributedInfo"]["rank"] for s in src] == [0, 1]
    assert merged["baseTimeNanoseconds"] == min(s["baseTimeNanoseconds"] for s in src)
    assert "error_bound" in merged["cudakit"]["merge_ranks"]
    assert len(merged["traceEvents"]) == sum(len(s["traceEvents"]) for s in src)
    # one group of processes per rank, named by rank, disjoint pids
    names = {e["pid"]: e["args"]["name"] for e in merged["traceEvents"]
             if e["ph"] == "M" and e["name"] == "process_name"}
    by_rank = {rk: {p for p, n in names.items() if n.startswith(f"rank {rk}: ")} for rk in (0, 1)}
    assert by_rank[0] and by_rank[1] and not by_rank[0] & by_rank[1]
    assert set(names) == by_rank[0] | by_rank[1]
    assert any("GPU" in names[p] for p in by_rank[0]) and any("GPU" in names[p] for p in by_rank[1])
    # every event keeps its absolute time, to the nanosecond
    info = {x["rank"]: x for x in merged["cudakit"]["merge_ranks"]["ranks"]}
    base = merged["baseTimeNanoseconds"]
    for rk, s in enumerate(src):
        pids = set(info[rk]["pids"].values())
        mine = [e for e in merged["traceEvents"] if e.get("pid") in pids and e["ph"] != "M"]
        theirs = [e for e in s["traceEvents"] if e["ph"] != "M"]
        assert len(mine) == len(theirs)
        for a, b in zip(mine, theirs):
            assert base + round(a["ts"] * 1000) == s["baseTimeNanoseconds"] + round(b["ts"] * 1000)
            assert a["name"] == b["name"]
    # the ranks' marks after the collective line up (one host: one clock)
    marks = [e["ts"] for e in merged["traceEvents"] if e.get("name") == "after all_reduce"]
    assert len(marks) == 2 and abs(marks[0] - marks[1]) < 50_000  # us; rank 1 started 50 ms late
    # flow ids unique per rank: each 's' has its own 'f' in the same rank
    flows = {}
    for e in merged["traceEvents"]:
        if e["ph"] in ("s", "f"):
            flows.setdefault(e["id"], []).append(e["pid"] // (1 << 23))
    assert flows and all(len(set(v)) == 1 for v in flows.values())


def test_merge_ranks_bad_inputs(ck, tmp_path):
    a = tmp_path / "a.json"
    a.write_text(json.dumps({"traceEvents": [], "baseTimeNanoseconds": 1_700_000_000 * 10**9,
                             "distributedInfo": {"rank": 0}}))
    no_base = tmp_path / "nobase.json"
    no_base.write_text(json.dumps({"traceEvents": []}))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    for args, msg in [((a, a), "rank 0 again"), ((a, no_base), "baseTimeNanoseconds"),
                      ((a, bad), "not a JSON trace"), ((a, tmp_path / "missing.json"), "cannot read")]:
        r = _cli("merge-ranks", *args, "-o", tmp_path / "o.json")
        assert r.returncode == 2 and msg in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    # one trace alone is fine (a 1-rank job), and gzip output works
    r = _cli("merge-ranks", a, "-o", tmp_path / "o.json.gz", "-q")
    assert r.returncode == 0 and r.stdout == ""
