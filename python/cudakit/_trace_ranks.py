"""Puts the traces of several ranks on one timeline:
``python -m cudakit trace merge-ranks rank0.json rank1.json ... -o all.json``.

Input: Chrome / Perfetto JSON traces (.json or .json.gz) written by cudakit.profiler.trace or
by torch.profiler (Kineto), one per rank. Each has ``baseTimeNanoseconds``: the
CLOCK_REALTIME nanoseconds its ``ts == 0`` stands for (both tools write it; a trace without it
is refused, since nothing else in the file says when it was recorded).

Rank of each file: its ``distributedInfo.rank`` (Kineto's field; cudakit writes it when the
process has RANK / WORLD_SIZE in its environment, as ``python -m cudakit.launch`` and torchrun
set), else its position on the command line. Two files of one rank are refused.

Layout: every process of a rank's trace (the host process, one per device) becomes a
process of the merged trace named ``rank R: <its name>`` and sorted rank by rank, so each rank
is one group of tracks; pids are renumbered so ranks never share one (device rows are pid 0,
1, ... in every rank's file), and flow ids (launch -> kernel arrows, per-process correlation
ids) are made unique per rank.

Clock alignment and its error bound: an event's absolute time is its trace's
``baseTimeNanoseconds`` + ``ts``; the merged trace's base is the earliest rank's, and every
event is shifted by (its rank's base - that base), computed in integer nanoseconds (the
3-decimal microsecond timestamps are exact, so the shift adds no rounding). What remains is
the difference between the ranks' CLOCK_REALTIME clocks: zero for ranks on one host (one
kernel clock), and the hosts' synchronization error across hosts -- with NTP typically
within 1 ms, with PTP within microseconds (``chronyc tracking`` shows a host's offset). GPU
timestamps add CUPTI's own mapping of the GPU clock onto CLOCK_REALTIME (microseconds).
The bound is written into the merged file (``cudakit.merge_ranks``).
"""
from __future__ import annotations

import sys
from typing import Any

from ._trace_merge import MergeError, load_trace, write_trace

# pid of a rank's process in the merged trace: disjoint per rank (host pids are < 2**22 on
# Linux, device rows are small ints); below 2**53 so JSON readers keep it exact.
_PID_STRIDE = 1 << 23
_FLOW_STRIDE = 1 << 32  # correlation ids are 32-bit
_SORT_STRIDE = 10_000_000  # Kineto's device sort offset (5,000,000 + device) fits below it
ERROR_BOUND = ("same host: exact (one CLOCK_REALTIME); across hosts: the hosts' CLOCK_REALTIME "
               "offset (NTP: typically <= 1 ms; PTP: microseconds); GPU events: plus CUPTI's "
               "GPU-to-host clock mapping (microseconds)")


def _rank_of(trace: dict, path: str, position: int) -> int:
    info = trace.get("distributedInfo")
    if isinstance(info, dict) and "rank" in info:
        r = info["rank"]
        if isinstance(r, bool) or not isinstance(r, int) or r < 0:
            raise MergeError(f"{path}: distributedInfo.rank is {r!r}, not a rank number")
        return r
    return position


def _base_ns(trace: dict, path: str) -> int:
    base = trace.get("baseTimeNanoseconds")
    if isinstance(base, bool) or not isinstance(base, int) or base <= 0:
        raise MergeError(f"{path}: no baseTimeNanoseconds (the CLOCK_REALTIME time of ts 0), so "
                         "its clock cannot be aligned with the other ranks; record it with "
                         "cudakit.profiler.trace or torch.profiler")
    return base


def _shift_ts(ts: Any, shift_ns: int) -> Any:
    if isinstance(ts, bool) or not isinstance(ts, (int, float)):
        return ts
    return round((round(ts * 1000) + shift_ns) / 1000, 3)


def merge_ranks(paths: list[str]) -> dict:
    """The merged trace (a dict to write as JSON). MergeError on unusable input."""
    if len(paths) < 1:
        raise MergeError("no input traces")
    loaded = []
    seen: dict[int, str] = {}
    for i, p in enumerate(paths):
        t = load_trace(p)
        r = _rank_of(t, p, i)
        if r in seen:
            raise MergeError(f"{p}: rank {r} again (also {seen[r]}); pass one trace per rank")
        seen[r] = p
        loaded.append((r, p, t, _base_ns(t, p)))
    loaded.sort(key=lambda x: x[0])
    base = min(b for _, _, _, b in loaded)
    events: list[dict] = []
    ranks_info = []
    for r, p, t, b in loaded:
        shift = b - base
        pid_map: dict[Any, int] = {}
        names: dict[Any, str] = {}
        for e in t["traceEvents"]:
            if isinstance(e, dict) and e.get("ph") == "M" and e.get("name") == "process_name":
                names[e.get("pid")] = str((e.get("args") or {}).get("name", ""))
        labels = {e.get("pid"): str((e.get("args") or {}).get("labels", ""))
                  for e in t["traceEvents"]
                  if isinstance(e, dict) and e.get("ph") == "M" and e.get("name") == "process_labels"}

        def new_pid(pid: Any) -> int:
            if pid not in pid_map:
                pid_map[pid] = (r + 1) * _PID_STRIDE + len(pid_map)
            return pid_map[pid]

        for e in t["traceEvents"]:
            if not isinstance(e, dict):
                continue
            e = dict(e)
            if "pid" in e:
                old = e["pid"]
                e["pid"] = new_pid(old)
                if e.get("ph") == "M":
                    args = dict(e.get("args") or {})
                    if e.get("name") == "process_name":
                        label = labels.get(old, "")
                        shown = names.get(old, "") or f"process {old}"
                        args["name"] = f"rank {r}: {shown}" + (f" ({label})" if label else "")
                    elif e.get("name") == "process_sort_index":
                        idx = args.get("sort_index", 0)
                        idx = idx if isinstance(idx, int) and 0 <= idx < _SORT_STRIDE else 0
                        args["sort_index"] = r * _SORT_STRIDE + idx
                    e["args"] = args
            if "ts" in e:
                e["ts"] = _shift_ts(e["ts"], shift)
            if e.get("ph") in ("s", "f", "t") and isinstance(e.get("id"), int):
                e["id"] = (r + 1) * _FLOW_STRIDE + e["id"]
            events.append(e)
        for old in names.keys() - pid_map.keys():  # a named process without events
            new_pid(old)
        ranks_info.append({"rank": r, "file": p, "baseTimeNanoseconds": b,
                           "shift_us": shift / 1000, "events": len(t["traceEvents"]),
                           "pids": {str(k): v for k, v in pid_map.items()}})
    first = loaded[0][2]
    out: dict[str, Any] = {
        "schemaVersion": first.get("schemaVersion", 1),
        "deviceProperties": first.get("deviceProperties", []),
        "distributedInfo": {"world_size": len(loaded), "ranks": [x[0] for x in loaded]},
        "cudakit": {"merge_ranks": {"ranks": ranks_info, "clock": "CLOCK_REALTIME "
                                    "(each trace's baseTimeNanoseconds)",
                                    "error_bound": ERROR_BOUND}},
        "displayTimeUnit": first.get("displayTimeUnit", "ms"),
        "baseTimeNanoseconds": base,
        "traceEvents": events,
    }
    return out


def main(paths: list[str], out_path: str, quiet: bool = False) -> int:
    """The CLI: 0 on success, 2 with a one-line error on bad input."""
    try:
        merged = merge_ranks(paths)
        write_trace(merged, out_path)
    except MergeError as e:
        print(f"cudakit trace merge-ranks: {e}", file=sys.stderr)
        return 2
    if not quiet:
        info = merged["cudakit"]["merge_ranks"]["ranks"]
        shifts = ", ".join(f"rank {x['rank']} +{x['shift_us']:.3f} us" for x in info)
        print(f"merged {len(info)} ranks ({len(merged['traceEvents'])} events; clock shifts: "
              f"{shifts}) -> {out_path}")
    return 0
