"""Joins kernel annotations (``cudakit.graph_annotations``) with a Chrome trace offline:
``python -m cudakit trace merge TRACE.json ANNOTATIONS.pkl -o OUT.json``.

The same join ``cudakit.profiler.trace`` does in-process, for traces made elsewhere
(``torch.profiler`` / Kineto, or an Nsight Systems export converted to Chrome JSON): for every
event whose ``args`` carry a non-zero ``graph node id``, ``args.update(annotation)`` (the
seed's join: annotation keys win over the event's own args of the same name).

ANNOTATIONS.pkl (written by :func:`cudakit.profiler.save_annotations`) is a pickle of::

    {"format": "cudakit.kernel_annotations", "version": 1,
     "annotations": {graph_node_id: [annotation_dict, ...]},   # dict(get_kernel_annotations())
     "graphs": [get_graph_data() dict, ...]}                    # optional

A bare ``dict(get_kernel_annotations())`` pickle (what the seed suggests saving) is accepted
too. Graph node ids are ``(exec graph id << 32) | node id``: they are only meaningful for a
trace of the same process run, so the merge reports annotated graph ids the trace does not
contain. The pickle is read with an unpickler that refuses every class: it holds plain data,
and a hostile file cannot run code.
"""
from __future__ import annotations

import gzip
import json
import os
import pickle
from typing import Any

from . import _plain_data

FORMAT = "cudakit.kernel_annotations"
VERSION = 1


class MergeError(ValueError):
    """An input that cannot be merged (the message names the file and the problem)."""


def _open_maybe_gz(path: str, mode: str):
    return gzip.open(path, mode) if str(path).endswith(".gz") else open(path, mode)


def _scalar(v: Any) -> bool:
    return v is None or isinstance(v, (bool, int, float, str))


def normalize_annotations(obj: Any, where: str = "annotations") -> dict[int, list[dict]]:
    """{node id: [annotation dict, ...]} from either accepted form; MergeError otherwise."""
    if isinstance(obj, dict) and obj.get("format") == FORMAT:
        version = obj.get("version")
        if version != VERSION:
            raise MergeError(f"{where}: format version {version!r} is not supported "
                             f"(this cudakit reads version {VERSION})")
        obj = obj.get("annotations")
        where = f"{where}['annotations']"
    if not isinstance(obj, dict):
        raise MergeError(f"{where}: expected a dict {{graph node id: [annotation, ...]}} "
                         f"(dict(get_kernel_annotations())), got {type(obj).__name__}")
    out: dict[int, list[dict]] = {}
    for key, anns in obj.items():
        if isinstance(key, bool) or not isinstance(key, int) or key < 0:
            raise MergeError(f"{where}: key {key!r} is not a graph node id (a non-negative int)")
        if isinstance(anns, dict):
            anns = [anns]
        if not isinstance(anns, (list, tuple)) or not all(isinstance(a, dict) for a in anns):
            raise MergeError(f"{where}[{key}]: expected a list of annotation dicts, "
                             f"got {type(anns).__name__}")
        for a in anns:
            for k, v in a.items():
                if not isinstance(k, str) or not _scalar(v):
                    raise MergeError(f"{where}[{key}]: annotation entry {k!r}: {v!r} is not "
                                     "a string key with a JSON scalar value")
        out[key] = [dict(a) for a in anns]
    return out


def load_annotations(path: str) -> dict[int, list[dict]]:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise MergeError(f"{path}: cannot read the annotations ({e.strerror or e})") from None
    try:
        obj = _plain_data.loads(data, "annotations hold")
    except Exception as e:  # a corrupt pickle can raise almost anything
        raise MergeError(f"{path}: not an annotations pickle ({type(e).__name__}: {e})") from None
    return normalize_annotations(obj, path)


def load_trace(path: str) -> dict:
    try:
        with _open_maybe_gz(path, "rt") as f:
            trace = json.load(f)
    except OSError as e:
        raise MergeError(f"{path}: cannot read the trace ({e.strerror or e})") from None
    except (ValueError, EOFError) as e:
        raise MergeError(f"{path}: not a JSON trace ({e})") from None
    if isinstance(trace, list):  # the bare-array form of the Chrome trace format
        trace = {"traceEvents": trace}
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        raise MergeError(f"{path}: no 'traceEvents' list: not a Chrome / Perfetto JSON trace")
    return trace


def merge(trace: dict, annotations: dict[int, list[dict]]) -> dict:
    """Merges in place; returns a summary: events merged, graph ids seen in the trace, and the
    annotated graph ids that matched no event."""
    merged = 0
    trace_graphs: set[int] = set()
    used_graphs: set[int] = set()
    for event in trace["traceEvents"]:
        if not isinstance(event, dict):
            continue
        args = event.get("args")
        if not isinstance(args, dict):
            continue
        node = args.get("graph node id")
        if isinstance(node, bool) or not isinstance(node, int) or node == 0:
            continue
        trace_graphs.add(node >> 32)
        anns = annotations.get(node)
        if not anns:
            continue
        for a in anns:
            args.update(a)
        used_graphs.add(node >> 32)
        merged += 1
    annotated_graphs = {k >> 32 for k in annotations}
    return {"merged_events": merged, "trace_graph_ids": sorted(trace_graphs),
            "unmatched_graph_ids": sorted(annotated_graphs - used_graphs)}


def write_trace(trace: dict, path: str) -> None:
    try:
        with _open_maybe_gz(path, "wt") as f:
            json.dump(trace, f, separators=(",", ":"))
    except OSError as e:
        raise MergeError(f"{path}: cannot write the merged trace ({e.strerror or e})") from None


def save_annotations(path: str | os.PathLike, graphs=(), annotations=None) -> None:
    """Writes ANNOTATIONS.pkl: ``annotations`` (default: ``get_kernel_annotations()`` now) and
    the ``get_graph_data()`` of ``graphs`` (CUDAGraph objects or graph-data dicts)."""
    from . import graph_annotations

    if annotations is None:
        annotations = graph_annotations.get_kernel_annotations()
    ann = normalize_annotations(dict(annotations))
    data = []
    for g in graphs:
        data.append(g if isinstance(g, dict) else g.get_graph_data())
    payload = {"format": FORMAT, "version": VERSION, "annotations": ann, "graphs": data}
    with open(os.fspath(path), "wb") as f:
        pickle.dump(payload, f, protocol=4)


def main(trace_path: str, annotations_path: str, out_path: str, quiet: bool = False) -> int:
    """The CLI: 0 on success, 2 with a one-line error on bad input."""
    import sys

    try:
        annotations = load_annotations(annotations_path)
        trace = load_trace(trace_path)
        summary = merge(trace, annotations)
        write_trace(trace, out_path)
    except MergeError as e:
        print(f"cudakit trace merge: {e}", file=sys.stderr)
        return 2
    if not quiet:
        print(f"merged annotations into {summary['merged_events']} events "
              f"(graph ids in the trace: {summary['trace_graph_ids'] or 'none'}) -> {out_path}")
        if summary["unmatched_graph_ids"]:
            print(f"warning: annotations of graph ids {summary['unmatched_graph_ids']} match no "
                  "event: graph node ids are per process run; was the trace recorded in the run "
                  "that saved the annotations?", file=sys.stderr)
    return 0
