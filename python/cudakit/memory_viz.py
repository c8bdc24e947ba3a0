"""Turn a memory snapshot (pickle or JSON from cudakit.memory._dump_snapshot, or PyTorch's)
into one self-contained HTML page: a timeline of allocated memory stacked by allocation, and
a map of every segment with its blocks. No network, no JavaScript libraries: the geometry is
plain SVG drawn here; a small inline script adds hover tooltips and click-to-pin stack frames.

    python -m cudakit.memory_viz snapshot.pickle -o out.html

When the inline script has wired everything up it marks ``<body data-rendered="ok"
data-allocations=N data-blocks=M>`` (``data-rendered="error"`` plus ``data-error`` on a
script error), so a headless browser can check the page.
"""
from __future__ import annotations

import argparse
import html
import json
import pathlib
import sys
from typing import Any

from . import _plain_data

_PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
            "#ff9da7", "#9c755f", "#86bcb6", "#8cd17d", "#d4a6c8", "#a0cbe8", "#ffbe7d"]
_BLOCK_COLORS = {"active_allocated": "#e15759", "active_pending_free": "#f28e2b",
                 "inactive": "#e4e4e4"}
# Bounds that keep the page small and fast for long traces (50k+ entries): the timeline is
# sampled into at most _BUCKETS columns and only the _MAX_DRAWN largest allocations get their
# own band (largest bytes x lifetime); the rest are one grey band on top of the stack.
_BUCKETS = 600
_MAX_DRAWN = 1500
_W, _LEFT, _RIGHT = 1300, 80, 20          # timeline geometry (px)
_H, _TOP, _BOTTOM = 380, 14, 46
_SEG_LABEL_W, _SEG_ROW, _SEG_GAP = 330, 16, 5


def _fmt(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return str(n)


class SnapshotError(ValueError):
    """A file that is not a usable memory snapshot (the message says what is wrong where)."""


def _need(cond: bool, where: str, what: str) -> None:
    if not cond:
        raise SnapshotError(f"{where}: {what}")


def _is_int(v: Any) -> bool:
    return isinstance(v, int)  # bool included: harmless as a flag-like number


def _check_frames(frames: Any, where: str) -> None:
    if frames is None:
        return
    _need(isinstance(frames, list), where, f"'frames' must be a list, got {type(frames).__name__}")
    for k, fr in enumerate(frames):
        _need(isinstance(fr, dict), f"{where}.frames[{k}]", f"must be a dict, got {type(fr).__name__}")
        _need(_is_int(fr.get("line", 0)), f"{where}.frames[{k}]", "'line' must be an int")


def _check_int_keys(d: dict, where: str, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> None:
    for key in required:
        _need(key in d, where, f"missing key '{key}'")
    for key in required + optional:
        if key in d:
            _need(_is_int(d[key]), where, f"'{key}' must be an int, got {type(d[key]).__name__} "
                                          f"({d[key]!r:.40})")


def validate(snap: Any) -> dict[str, Any]:
    """Checks the structure to_html relies on; returns the snapshot as a dict with
    'segments' (memory_snapshot()'s bare segment list is accepted too)."""
    if isinstance(snap, list):  # memory_snapshot() output: segments only
        snap = {"segments": snap, "device_traces": []}
    _need(isinstance(snap, dict), "top level",
          f"expected a dict with 'segments' (or a list of segments), got {type(snap).__name__}")
    _need("segments" in snap, "top level", "missing key 'segments' (write snapshots with "
          "cudakit.memory._dump_snapshot())")
    segs = snap["segments"]
    _need(isinstance(segs, list), "segments", f"must be a list, got {type(segs).__name__}")
    for i, seg in enumerate(segs):
        w = f"segments[{i}]"
        _need(isinstance(seg, dict), w, f"must be a dict, got {type(seg).__name__}")
        _check_int_keys(seg, w, ("address", "total_size"), ("allocated_size", "device", "stream"))
        _need(0 <= seg.get("device", 0) < 4096, w, f"'device' out of range: {seg.get('device')}")
        pool = seg.get("segment_pool_id", (0, 0))
        _need(isinstance(pool, (list, tuple)) and len(pool) == 2 and all(map(_is_int, pool)), w,
              "'segment_pool_id' must be a pair of ints")
        blocks = seg.get("blocks", [])
        _need(isinstance(blocks, list), w, f"'blocks' must be a list, got {type(blocks).__name__}")
        for j, b in enumerate(blocks):
            bw = f"{w}.blocks[{j}]"
            _need(isinstance(b, dict), bw, f"must be a dict, got {type(b).__name__}")
            _check_int_keys(b, bw, ("address", "size"), ("requested_size",))
            _need(isinstance(b.get("state"), str), bw, "missing or non-string 'state'")
            _check_frames(b.get("frames"), bw)
    traces = snap.get("device_traces", []) or []
    _need(isinstance(traces, list), "device_traces", f"must be a list, got {type(traces).__name__}")
    for d, trace in enumerate(traces):
        _need(isinstance(trace, list), f"device_traces[{d}]", f"must be a list, got {type(trace).__name__}")
        for i, e in enumerate(trace):
            w = f"device_traces[{d}][{i}]"
            _need(isinstance(e, dict), w, f"must be a dict, got {type(e).__name__}")
            action = e.get("action")
            _need(isinstance(action, str), w, "missing or non-string 'action'")
            needs_addr = action in ("alloc", "free_requested", "free_completed")
            needs_size = needs_addr or action.startswith("segment_")
            required = (("addr",) if needs_addr else ()) + (("size",) if needs_size else ())
            _check_int_keys(e, w, required, ("stream",))
            _need(isinstance(e.get("time_us", 0), (int, float)), w, "'time_us' must be a number")
            _check_frames(e.get("frames"), w)
    settings = snap.get("allocator_settings")
    _need(settings is None or isinstance(settings, dict), "allocator_settings",
          f"must be a dict, got {type(settings).__name__}")
    return snap


def load(path: str) -> dict[str, Any]:
    """Reads a snapshot (pickle or JSON). OSError for an unreadable path, SnapshotError for
    anything that is not a valid snapshot."""
    with open(path, "rb") as f:
        data = f.read()
    if not data.strip():
        raise SnapshotError("empty file (expected a pickle or JSON memory snapshot)")
    if data.lstrip()[:1] in (b"{", b"["):
        try:
            snap = json.loads(data)
        except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
            raise SnapshotError(f"not valid JSON ({e})") from None
    else:
        try:
            snap = _plain_data.loads(data, "a memory snapshot holds")
        except Exception as e:  # a corrupt pickle can raise almost anything
            raise SnapshotError(f"not a pickle or JSON memory snapshot ({type(e).__name__}: {e})") from None
    return validate(snap)


class _Stacks:
    """Deduplicated stack table: frame strings and stacks (lists of frame ids) are stored once
    each, so 50k trace entries that share a few call sites cost a few kilobytes."""

    def __init__(self) -> None:
        self.frames: list[str] = []
        self.stacks: list[list[int]] = [[]]
        self._frame_id: dict[str, int] = {}
        self._stack_id: dict[tuple[int, ...], int] = {(): 0}

    def add(self, frames: list[dict[str, Any]] | None) -> int:
        ids = []
        for fr in frames or ():
            s = f"{fr.get('name', '?')}  ({fr.get('filename', '?')}:{fr.get('line', 0)})"
            i = self._frame_id.get(s)
            if i is None:
                i = self._frame_id[s] = len(self.frames)
                self.frames.append(s)
            ids.append(i)
        key = tuple(ids)
        sid = self._stack_id.get(key)
        if sid is None:
            sid = self._stack_id[key] = len(self.stacks)
            self.stacks.append(ids)
        return sid


def _nice_step(span: float, target: int = 5) -> float:
    raw = max(span, 1) / target
    mag = 1.0
    while mag * 10 <= raw:
        mag *= 10
    while mag > raw:
        mag /= 10
    for m in (1, 2, 2.5, 5, 10):
        if m * mag >= raw:
            return m * mag
    return 10 * mag


def _byte_ticks(peak: float) -> list[float]:
    """Y ticks at round values of the unit that fits `peak` (e.g. 0, 50, 100, 150 MiB)."""
    unit = 1
    while peak / unit >= 1024 and unit < 1024 ** 4:
        unit *= 1024
    step = _nice_step(peak / unit) * unit
    ticks, v = [], 0.0
    while v <= peak * 1.0001:
        ticks.append(v)
        v += step
    return ticks


def _trace_model(trace: list[dict[str, Any]], segs: list[dict[str, Any]],
                 stacks: _Stacks) -> dict[str, Any]:
    """Lifetimes of every allocation in `trace` plus the reserved-memory curve."""
    n = len(trace)
    allocs: list[list[Any]] = []  # [start, end, size, addr, stream, stack, pre_existing]
    open_by_addr: dict[int, int] = {}
    delta = [0] * (n + 1)          # allocated bytes change at event i
    rdelta = [0] * n               # reserved bytes change at event i
    ooms = []
    for i, e in enumerate(trace):
        a = e.get("action")
        if a == "alloc":
            open_by_addr[e["addr"]] = len(allocs)
            allocs.append([i, n, e["size"], e["addr"], e.get("stream", 0),
                           stacks.add(e.get("frames")), 0])
            delta[i] += e["size"]
        elif a == "free_completed":
            k = open_by_addr.pop(e["addr"], None)
            if k is None:  # allocated before recording started: alive since the beginning
                allocs.append([0, i, e["size"], e["addr"], e.get("stream", 0),
                               stacks.add(e.get("frames")), 1])
                delta[0] += e["size"]
                size = e["size"]
            else:
                allocs[k][1] = i
                size = allocs[k][2]
            delta[i] -= size
        elif a in ("segment_alloc", "segment_map"):
            rdelta[i] += e["size"]
        elif a in ("segment_free", "segment_unmap"):
            rdelta[i] -= e["size"]
        elif a == "oom":
            ooms.append((i, e.get("size", 0)))
    # Blocks still allocated whose alloc is not in the trace (recorded before, or the ring
    # buffer wrapped): alive over the whole window.
    still_open = set(open_by_addr)
    for s in segs:
        for b in s.get("blocks", ()):
            if b.get("state") == "active_allocated" and b["address"] not in still_open:
                size = b.get("requested_size") or b["size"]
                allocs.append([0, n, size, b["address"], s.get("stream", 0),
                               stacks.add(b.get("frames")), 1])
                delta[0] += size
    allocs.sort(key=lambda r: (r[0], -r[6]))  # stack order: allocation order
    total, acc = [0] * n, 0
    for i in range(n):
        acc += delta[i]
        total[i] = acc
    # Reserved memory is anchored at its known final value (the segments of the snapshot).
    reserved, acc = [0] * n, sum(s["total_size"] for s in segs)
    for i in range(n - 1, -1, -1):
        reserved[i] = max(0, acc)
        acc -= rdelta[i]
    return {"n": n, "allocs": allocs, "total": total, "reserved": reserved, "ooms": ooms}


def timeline_svg(trace: list[dict[str, Any]], segs: list[dict[str, Any]], stacks: _Stacks,
                 device: int = 0) -> tuple[str, dict[str, Any]]:
    """Allocated memory over the trace, each live allocation a band stacked in allocation
    order. Returns the SVG and the data the script needs for tooltips."""
    m = _trace_model(trace, segs, stacks)
    n, allocs, total, reserved = m["n"], m["allocs"], m["total"], m["reserved"]
    nb = max(1, min(_BUCKETS, n))
    # Each column shows the instant of its largest total, so the drawn peak is the real peak.
    samples = []
    for b in range(nb):
        lo, hi = b * n // nb, max(b * n // nb + 1, (b + 1) * n // nb)
        best = max(range(lo, hi), key=total.__getitem__)
        samples.append(best)
    peak_alloc = max(total) if total else 0
    ymax = max(peak_alloc, max(reserved) if reserved else 0, 1) * 1.05
    ticks = _byte_ticks(ymax)
    ymax = max(ymax, ticks[-1])
    pw, ph = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM
    xb = lambda b: _LEFT + pw * b / nb  # noqa: E731  left edge of column b
    y = lambda v: _TOP + ph * (1 - v / ymax)  # noqa: E731

    # Own bands for the allocations that cover the most of the chart (bytes x time alive).
    order = sorted(range(len(allocs)),
                   key=lambda k: (-allocs[k][2] * (allocs[k][1] - allocs[k][0]), allocs[k][0]))
    drawn = set(order[:_MAX_DRAWN])
    # Sweep the columns: the live drawn allocations in stack order give each its offset.
    runs: dict[int, list[list[float]]] = {}  # k -> [[b_first, b_last, lo], ...]
    events = sorted((allocs[k][0], k) for k in drawn)
    live: dict[int, None] = {}
    ei = 0
    drawn_total = [0] * nb
    half_px = ymax / ph / 2
    for b, s in enumerate(samples):
        while ei < len(events) and events[ei][0] <= s:
            live[events[ei][1]] = None
            ei += 1
        acc = 0
        dead = []
        for k in live:
            if allocs[k][1] <= s:
                dead.append(k)
                continue
            r = runs.setdefault(k, [])
            # A band only gets a new step where its offset moves by half a pixel or more:
            # long-lived bands under churn would otherwise step in every column.
            if r and r[-1][1] == b - 1 and abs(r[-1][2] - acc) < half_px:
                r[-1][1] = b
            else:
                r.append([b, b, acc])
            acc += allocs[k][2]
        for k in dead:
            del live[k]
        drawn_total[b] = acc

    p = [f'<svg width="{_W}" height="{_H}" class="timeline" '
         f'data-device="{device}" data-buckets="{nb}" data-events="{n}">',
         f'<rect class="plot" x="{_LEFT}" y="{_TOP}" width="{pw}" height="{ph}" fill="#fafafa"/>']
    for t in ticks:
        yy = y(t)
        p.append(f'<line x1="{_LEFT - 4}" x2="{_W - _RIGHT}" y1="{yy:.1f}" y2="{yy:.1f}" '
                 f'stroke="#ddd" stroke-width="0.6"/>'
                 f'<text x="{_LEFT - 6}" y="{yy + 3.5:.1f}" text-anchor="end" font-size="11">'
                 f'{_fmt(t).replace(".0 ", " ")}</text>')
    for k, rs in runs.items():
        size = allocs[k][2]
        up, down = [], []
        for b0, b1, lo in rs:
            x0, x1 = xb(b0), xb(b1 + 1)
            up += [f"{x0:.1f},{y(lo + size):.1f}", f"{x1:.1f},{y(lo + size):.1f}"]
            down += [f"{x0:.1f},{y(lo):.1f}", f"{x1:.1f},{y(lo):.1f}"]
        p.append(f'<polygon class="alloc" data-k="{k}" points="{" ".join(up + down[::-1])}" '
                 f'fill="{_PALETTE[k % len(_PALETTE)]}"/>')
    # Allocations too small to get their own band: one band on top of the stack.
    rest = [(b, drawn_total[b], total[s]) for b, s in enumerate(samples)
            if total[s] > drawn_total[b]]
    n_small = len(allocs) - len(drawn)
    if rest and n_small:
        up = " ".join(f"{xb(b):.1f},{y(t):.1f} {xb(b + 1):.1f},{y(t):.1f}" for b, _, t in rest)
        down = " ".join(f"{xb(b + 1):.1f},{y(d):.1f} {xb(b):.1f},{y(d):.1f}"
                        for b, d, _ in reversed(rest))
        p.append(f'<polygon class="small" points="{up} {down}" fill="#b5b5b5" opacity="0.85"/>')
    pts = " ".join(f"{xb(b):.1f},{y(reserved[s]):.1f} {xb(b + 1):.1f},{y(reserved[s]):.1f}"
                   for b, s in enumerate(samples))
    if pts:
        p.append(f'<polyline class="reserved" points="{pts}" fill="none" stroke="#222" '
                 f'stroke-width="1.2" stroke-dasharray="4 2"/>')
    for i, size in m["ooms"]:
        xx = _LEFT + pw * (i + 0.5) / max(1, n)
        left = xx > _LEFT + pw * 0.8  # label on the side with room
        p.append(f'<line class="oom" x1="{xx:.1f}" x2="{xx:.1f}" y1="{_TOP}" y2="{_TOP + ph}" '
                 f'stroke="#d00" stroke-width="1.5"/><text x="{xx + (-3 if left else 3):.1f}" '
                 f'y="{_TOP + 11}" font-size="11" fill="#d00" '
                 f'text-anchor="{"end" if left else "start"}">OOM ({_fmt(size)} requested)</text>')
    # X axis: event index, with the time since the first event where the trace has times
    # (a running maximum: an entry may carry the time its stack was captured, which for a
    # free can be the time of its allocation).
    times, tmax = [], None
    for e in trace:
        t = e.get("time_us")
        if t is not None:
            tmax = t if tmax is None else max(tmax, t)
        times.append(tmax)
    t0 = next((t for t in times if t is not None), None)
    step = _nice_step(n)
    v = 0.0
    while v < n:
        xx = _LEFT + pw * v / max(1, n)
        label = f"#{int(v)}"
        if t0 is not None and times[int(v)] is not None:
            label += f" (+{(times[int(v)] - t0) / 1000:.1f} ms)"
        p.append(f'<line x1="{xx:.1f}" x2="{xx:.1f}" y1="{_TOP + ph}" y2="{_TOP + ph + 4}" '
                 f'stroke="#555"/><text x="{xx:.1f}" y="{_TOP + ph + 16}" font-size="10" '
                 f'text-anchor="middle">{label}</text>')
        v += step
    p.append(f'<line x1="{_LEFT}" x2="{_W - _RIGHT}" y1="{_TOP + ph}" y2="{_TOP + ph}" stroke="#555"/>'
             f'<line x1="{_LEFT}" x2="{_LEFT}" y1="{_TOP}" y2="{_TOP + ph}" stroke="#555"/>'
             f'<text x="{_LEFT + pw / 2}" y="{_H - 8}" font-size="12" text-anchor="middle">'
             f'trace event # (time since the first recorded event)</text>'
             f'<text x="14" y="{_TOP + ph / 2}" font-size="12" text-anchor="middle" '
             f'transform="rotate(-90 14 {_TOP + ph / 2})">memory</text>'
             f'<line class="cursor" x1="0" x2="0" y1="{_TOP}" y2="{_TOP + ph}" stroke="#000" '
             f'stroke-width="0.6" visibility="hidden"/></svg>')
    t_first = t0 or 0
    data = {
        "device": device, "n": n, "drawn": len(runs), "small": n_small,
        "peak": peak_alloc, "ooms": len(m["ooms"]),
        # [start, end(-1: alive), size, addr, stream, stack, pre_existing, start_ms]
        "allocs": [[a[0], -1 if a[1] >= n else a[1], a[2], f"{a[3]:#x}", f"{a[4]:#x}", a[5],
                    a[6], round(((times[a[0]] or t_first) - t_first) / 1000, 3)] for a in allocs],
        "samples": samples, "total": [total[s] for s in samples],
        "reserved": [reserved[s] for s in samples],
    }
    return "".join(p), data


def segments_svg(segments: list[dict[str, Any]], stacks: _Stacks, device: int = 0
                 ) -> tuple[str, list[list[Any]]]:
    """One row per segment, full width: its blocks as rectangles proportional to their size
    within the segment (the label gives the segment's own size)."""
    segs = sorted(segments, key=lambda s: s["address"])
    height = len(segs) * (_SEG_ROW + _SEG_GAP) + 8
    bar_w = _W - _SEG_LABEL_W - _RIGHT
    blocks: list[list[Any]] = []  # [state, size, requested, addr, offset, stack, seg_row]
    rows: list[list[Any]] = []    # [addr, size, allocated, type, expandable, stream, pool]
    streams: dict[int, str] = {}
    p = [f'<svg width="{_W}" height="{height}" '
         f'class="segments" data-device="{device}">']
    for i, seg in enumerate(segs):
        y0 = 4 + i * (_SEG_ROW + _SEG_GAP)
        total = max(1, seg["total_size"])
        used = seg.get("allocated_size", 0)
        pool = tuple(seg.get("segment_pool_id", (0, 0)))
        stream = seg.get("stream", 0)
        tag = streams.setdefault(stream, f"s{len(streams)}")
        flags = ("exp " if seg.get("is_expandable") else "") + ("" if pool == (0, 0) else "pool")
        pct = f"{100 * used / total:3.0f}%" if used == 0 or used * 100 >= total else " <1%"
        label = (f'{seg["address"]:#x} {_fmt(seg["total_size"]):>10} {pct} '
                 f'{tag:<3} {flags}')
        rows.append([f'{seg["address"]:#x}', seg["total_size"], used,
                     seg.get("segment_type", ""), bool(seg.get("is_expandable")), f"{stream:#x}",
                     list(pool)])
        p.append(f'<g class="seg" data-row="{i}"><text class="seglabel" data-row="{i}" x="2" '
                 f'y="{y0 + 12}" font-size="11" font-family="monospace" xml:space="preserve">'
                 f'{html.escape(label)}</text>'
                 f'<rect x="{_SEG_LABEL_W}" y="{y0}" width="{bar_w}" height="{_SEG_ROW}" '
                 f'fill="none" stroke="#999" stroke-width="0.5"/>')
        off = 0
        for b in seg.get("blocks", ()):
            x0 = _SEG_LABEL_W + bar_w * off / total
            # used blocks stay visible (2 px) however small they are in their segment
            w = max(bar_w * b["size"] / total, 0.6 if b["state"] == "inactive" else 2.0)
            k = len(blocks)
            blocks.append([b["state"], b["size"], b.get("requested_size", b["size"]),
                           f'{b["address"]:#x}', off, stacks.add(b.get("frames")), i])
            p.append(f'<rect class="block" data-b="{k}" x="{x0:.2f}" y="{y0}" width="{w:.2f}" '
                     f'height="{_SEG_ROW}" fill="{_BLOCK_COLORS.get(b["state"], "#999")}" '
                     f'stroke="#fff" stroke-width="0.4"/>')
            off += b["size"]
        p.append("</g>")
    p.append("</svg>")
    legend = ", ".join(f"{tag} = stream {st:#x}" for st, tag in streams.items())
    return "".join(p), {"device": device, "blocks": blocks, "rows": rows, "streams": legend}


_CSS = """
body{font-family:system-ui,sans-serif;margin:16px;color:#222}
h2{margin:22px 0 6px;font-size:17px} .sub{color:#555;font-size:13px;margin:2px 0 8px}
svg{display:block;border:1px solid #e4e4e4;margin-bottom:6px;background:#fff}
.legend span{display:inline-block;margin-right:14px;font-size:13px}
.sw{display:inline-block;width:12px;height:12px;vertical-align:-1px;margin-right:4px}
#tip{position:fixed;pointer-events:none;background:#fffff0;border:1px solid #999;padding:6px 8px;
 font:12px monospace;white-space:pre;max-width:900px;overflow:hidden;display:none;z-index:9;
 box-shadow:2px 2px 6px rgba(0,0,0,.2)}
#detail{font:12px monospace;white-space:pre-wrap;background:#f6f6f6;border:1px solid #ddd;
 padding:8px;min-height:1.5em}
.status{font:12px monospace;color:#333;height:1.4em}
polygon.alloc:hover,rect.block:hover{stroke:#000;stroke-width:1}
#err{color:#b00;font-weight:bold}
"""

def _page_script() -> str:
    # A file of its own (memory_viz.js, next to this module and installed with it) so the
    # script can be read and linted as JavaScript; inlined into each page.
    return (pathlib.Path(__file__).with_name("memory_viz.js")).read_text(encoding="utf-8")


def to_html(snap: dict[str, Any], title: str = "cudakit memory snapshot") -> str:
    segs = snap.get("segments", []) or []
    traces = snap.get("device_traces", []) or []
    stacks = _Stacks()
    devices = sorted({s.get("device", 0) for s in segs} |
                     {d for d, t in enumerate(traces) if t})
    allocated = sum(s.get("allocated_size", 0) for s in segs)
    reserved = sum(s.get("total_size", 0) for s in segs)
    n_events = sum(len(t) for t in traces)
    settings = snap.get("allocator_settings") or {}
    body = [f"<h1>{html.escape(title)}</h1>",
            f'<p class="sub">{len(segs)} segments on {len(devices)} device(s): reserved '
            f"{_fmt(reserved)}, allocated {_fmt(allocated)}; {n_events} trace events"
            + (f"; settings {html.escape(json.dumps(settings))}" if settings else "")
            + '</p><p id="err"></p>']
    timelines, segmaps = [], []
    for dev in devices:
        dev_segs = [s for s in segs if s.get("device", 0) == dev]
        trace = traces[dev] if dev < len(traces) else []
        body.append(f"<h2>Device {dev}: allocated memory over time</h2>")
        if trace:
            svg, data = timeline_svg(trace, dev_segs, stacks, dev)
            body.append(
                '<div class="legend"><span>each coloured band is one allocation (hover: size '
                'and stack; click: full stack below)</span><span><i class="sw" '
                'style="background:#b5b5b5"></i>other allocations (smaller or short-lived), merged</span><span>'
                '<svg width="26" height="10" style="display:inline;border:0;margin:0">'
                '<line x1="0" x2="26" y1="5" y2="5" stroke="#222" stroke-dasharray="4 2"/>'
                '</svg> reserved (segments)</span>'
                + ('<span style="color:#d00">| out-of-memory error</span>' if data["ooms"] else '')
                + '</div>'
                f'<p class="sub">peak allocated {_fmt(data["peak"])}; {len(data["allocs"])} '
                f'allocations, {data["drawn"]} drawn as their own band</p>')
            body.append(svg + f'<div class="status" id="status{dev}"></div>')
            timelines.append(data)
        else:
            body.append('<p class="sub">No allocation trace for this device (record one with '
                        'cudakit.memory._record_memory_history()).</p>')
        body.append(f"<h2>Device {dev}: segments</h2>")
        if dev_segs:
            body.append('<div class="legend">' + "".join(
                f'<span><i class="sw" style="background:{c}"></i>{n}</span>' for n, c in (
                    ("allocated", _BLOCK_COLORS["active_allocated"]),
                    ("freed, pending stream use", _BLOCK_COLORS["active_pending_free"]),
                    ("free (cached)", _BLOCK_COLORS["inactive"])))
                + "<span>one row per segment, blocks to scale within it; hover a block for "
                "its stack</span></div>")
            svg, segmap = segments_svg(dev_segs, stacks, dev)
            body.append('<p class="sub">label: address, size, % allocated, stream '
                        f'({html.escape(segmap["streams"])}), exp = expandable segment, pool = '
                        'private MemPool; hover the label for details</p>' + svg)
            segmaps.append(segmap)
        else:
            body.append('<p class="sub">No segments (nothing reserved on this device).</p>')
    if not devices:
        body.append('<p class="sub">Empty snapshot: no segments and no trace. Record with '
                    "cudakit.memory._record_memory_history() before allocating.</p>")
    body.append('<h2>Selected allocation / block</h2><div id="detail">click a band or a '
                'block to see its full stack here</div><div id="tip"></div>')
    data = {"frames": stacks.frames, "stacks": stacks.stacks, "timelines": timelines,
            "segmaps": segmaps}
    # '<' escaped so no string in the data can close the <script> element.
    blob = json.dumps(data, separators=(",", ":")).replace("<", "\\u003c")
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>" + html.escape(title) +
            "</title><style>" + _CSS + "</style></head><body data-rendered='pending'>" +
            "".join(body) + '<script type="application/json" id="ckdata">' + blob +
            "</script><script>" + _page_script() + "</script></body></html>")


def main(argv: list[str] | None = None) -> int:
    """Exit status 0 on success; 2 with one line on stderr for a missing, unreadable or
    malformed snapshot, or an output that cannot be written."""
    ap = argparse.ArgumentParser(prog="python -m cudakit.memory_viz",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("snapshot", help="snapshot .pickle or .json (cudakit.memory._dump_snapshot)")
    ap.add_argument("-o", "--output", default=None, help="output HTML (default: <snapshot>.html)")
    args = ap.parse_args(argv)
    try:
        snap = load(args.snapshot)
        page = to_html(snap, title=args.snapshot)
    except OSError as e:
        print(f"error: cannot read {args.snapshot}: {e.strerror or e}", file=sys.stderr)
        return 2
    except SnapshotError as e:
        print(f"error: {args.snapshot}: not a usable memory snapshot: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # values validate() does not model (e.g. absurd sizes)
        print(f"error: {args.snapshot}: cannot render this snapshot ({type(e).__name__}: {e})",
              file=sys.stderr)
        return 2
    out = args.output or args.snapshot.rsplit(".", 1)[0] + ".html"
    try:
        with open(out, "w", encoding="utf-8") as f:
            f.write(page)
    except OSError as e:
        print(f"error: cannot write {out}: {e.strerror or e}", file=sys.stderr)
        return 2
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
