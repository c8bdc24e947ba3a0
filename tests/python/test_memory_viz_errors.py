"""`python -m cudakit.memory_viz` on files that are not usable snapshots: one clear line on
stderr, exit status 2, no traceback, and nothing written (issue 14.5)."""
from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys

import pytest

from cudakit import memory_viz

GOOD_SEGMENT = {"address": 4096, "total_size": 2048, "allocated_size": 512, "device": 0, "stream": 0,
                "segment_pool_id": (0, 0), "blocks": [
                    {"address": 4096, "size": 512, "requested_size": 500, "state": "active_allocated"},
                    {"address": 4608, "size": 1536, "state": "inactive"}]}


class NotPlainData:
    """Pickles as a reference to this class: a snapshot must never need one."""


def _write(path, data):
    path.write_bytes(data)
    return str(path)


def _bad(**seg_changes):
    seg = dict(GOOD_SEGMENT)
    seg.update(seg_changes)
    return pickle.dumps({"segments": [seg], "device_traces": []})


CASES = {
    "not-a-pickle": (lambda p: _write(p, b"\x00\x01garbage that is not a pickle"), "not a pickle or JSON"),
    "truncated-pickle": (lambda p: _write(p, pickle.dumps({"segments": [GOOD_SEGMENT]})[:25]), "not a pickle"),
    "wrong-top-level-type": (lambda p: _write(p, pickle.dumps(42)), "expected a dict with 'segments'"),
    "missing-segments": (lambda p: _write(p, pickle.dumps({"device_traces": []})), "missing key 'segments'"),
    "segments-not-a-list": (lambda p: _write(p, pickle.dumps({"segments": "abc"})), "segments: must be a list"),
    "segment-not-a-dict": (lambda p: _write(p, pickle.dumps({"segments": [1, 2]})), "segments[0]: must be a dict"),
    "address-is-str": (lambda p: _write(p, _bad(address="0x10")), "'address' must be an int"),
    "missing-total-size": (lambda p: _write(p, pickle.dumps({"segments": [{"address": 1}]})),
                           "missing key 'total_size'"),
    "bad-pool-id": (lambda p: _write(p, _bad(segment_pool_id="x")), "'segment_pool_id'"),
    "blocks-not-a-list": (lambda p: _write(p, _bad(blocks=5)), "'blocks' must be a list"),
    "block-without-state": (lambda p: _write(p, _bad(blocks=[{"address": 1, "size": 2}])), "'state'"),
    "block-size-none": (lambda p: _write(p, _bad(blocks=[{"address": 1, "size": None, "state": "inactive"}])),
                        "'size' must be an int"),
    "frames-not-list": (lambda p: _write(p, _bad(blocks=[{"address": 1, "size": 2, "state": "inactive",
                                                          "frames": "x"}])), "'frames' must be a list"),
    "trace-entry-bad-size": (lambda p: _write(p, pickle.dumps({"segments": [], "device_traces": [[
        {"action": "alloc", "addr": 1, "size": "big"}]]})), "device_traces[0][0]: 'size' must be an int"),
    "trace-not-list": (lambda p: _write(p, pickle.dumps({"segments": [], "device_traces": {"a": 1}})),
                       "device_traces: must be a list"),
    "trace-without-action": (lambda p: _write(p, pickle.dumps({"segments": [], "device_traces": [[{"addr": 1}]]})),
                             "'action'"),
    "settings-not-dict": (lambda p: _write(p, pickle.dumps({"segments": [], "allocator_settings": [1]})),
                          "allocator_settings"),
    "empty-file": (lambda p: _write(p, b""), "empty file"),
    "whitespace-file": (lambda p: _write(p, b"  \n "), "empty file"),
    "truncated-json": (lambda p: _write(p, json.dumps({"segments": []}).encode()[:7]), "not valid JSON"),
    "json-list-of-numbers": (lambda p: _write(p, b"[1, 2, 3]"), "segments[0]: must be a dict"),
    "pickle-with-a-class": (lambda p: _write(p, pickle.dumps({"segments": [], "x": NotPlainData()})),
                            "only plain data"),
    "directory": (lambda p: (p.mkdir(), str(p))[1], "cannot read"),
    "missing-file": (lambda p: str(p), "cannot read"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_malformed_snapshot_is_one_line_and_exit_2(tmp_path, capsys, name):
    make, fragment = CASES[name]
    path = make(tmp_path / "snap.pickle")
    out = tmp_path / "out.html"
    rc = memory_viz.main([path, "-o", str(out)])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert fragment in err, err
    assert "Traceback" not in err
    assert not out.exists()


def test_unwritable_output_is_one_line(tmp_path, capsys):
    snap = tmp_path / "s.json"
    snap.write_text(json.dumps({"segments": [GOOD_SEGMENT], "device_traces": []}))
    rc = memory_viz.main([str(snap), "-o", str(tmp_path / "no" / "such" / "dir.html")])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("error: cannot write") and err.count("\n") == 1


def test_valid_snapshot_still_renders(tmp_path, capsys):
    snap = tmp_path / "s.pickle"
    snap.write_bytes(pickle.dumps({"segments": [GOOD_SEGMENT], "device_traces": [[
        {"action": "alloc", "addr": 4096, "size": 512, "stream": 0, "time_us": 1,
         "frames": [{"name": "f", "filename": "x.py", "line": 3}]}]]}))
    out = tmp_path / "s.html"
    assert memory_viz.main([str(snap), "-o", str(out)]) == 0
    assert out.read_text().startswith("<!DOCTYPE html>")
    assert memory_viz.main([str(snap.with_suffix(".json"))]) == 2  # missing: clean error too


@pytest.mark.parametrize("content", [b"\x80\x04garbage", b"{\"segments\": 3}"])
def test_command_line(tmp_path, content):
    snap = tmp_path / "bad.pickle"
    snap.write_bytes(content)
    r = subprocess.run([sys.executable, "-m", "cudakit.memory_viz", str(snap)], capture_output=True,
                       text=True, env=dict(os.environ))
    assert r.returncode == 2
    assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
