"""Turn a memory snapshot (pickle or JSON from cudakit.memory._dump_snapshot, or PyTorch's)
into one self-contained HTML page: a timeline of allocated memory stacked by allocation, and
a map of every segment with its blocks. No network, no JavaScript libraries: plain SVG with
hover titles.

    python -m cudakit.memory_viz snapshot.pickle -o out.html
"""
from __future__ import annotations

import argparse
import html
import json
import pickle
import sys
from typing import Any

_PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
            "#ff9da7", "#9c755f", "#bab0ac"]


def _fmt(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return str(n)


def load(path: str) -> dict[str, Any]:
    with open(path, "rb") as f:
        data = f.read()
    if data[:1] in (b"{", b"["):
        snap = json.loads(data)
    else:
        snap = pickle.loads(data)
    if isinstance(snap, list):  # memory_snapshot() output: segments only
        snap = {"segments": snap, "device_traces": []}
    return snap


def _frames_text(frames: list[dict[str, Any]], limit: int = 8) -> str:
    out = []
    for fr in frames[:limit]:
        out.append(f"{fr.get('name', '?')} ({fr.get('filename', '?')}:{fr.get('line', 0)})")
    return "\n".join(out)


def timeline_svg(trace: list[dict[str, Any]], width: int = 1100, height: int = 360,
                 buckets: int = 400) -> str:
    """Allocated memory over time, each live allocation a band stacked in allocation order."""
    allocs: dict[int, dict[str, Any]] = {}
    events = []
    for i, e in enumerate(trace):
        a = e.get("action")
        if a == "alloc":
            events.append((i, "alloc", e))
        elif a in ("free_completed",):
            events.append((i, "free", e))
    if not events:
        return "<p>No allocation trace (record with cudakit.memory._record_memory_history()).</p>"
    n = len(trace)
    lifetimes = []  # (start_idx, end_idx, size, addr, frames)
    open_by_addr: dict[int, int] = {}
    for i, kind, e in events:
        if kind == "alloc":
            open_by_addr[e["addr"]] = len(lifetimes)
            lifetimes.append([i, n, e["size"], e["addr"], e.get("frames", [])])
        else:
            k = open_by_addr.pop(e["addr"], None)
            if k is not None:
                lifetimes[k][1] = i
    nb = min(buckets, n)
    step = n / nb
    bucket_of = lambda idx: min(nb - 1, int(idx / step))  # noqa: E731
    # Live allocations per bucket, in allocation order → lower/upper bounds per allocation.
    live_at: list[list[int]] = [[] for _ in range(nb)]
    for k, (s, t, *_rest) in enumerate(lifetimes):
        for b in range(bucket_of(s), bucket_of(max(s, t - 1)) + 1 if t < n else nb):
            live_at[b].append(k)
    totals = [sum(lifetimes[k][2] for k in ks) for ks in live_at]
    peak = max(totals) or 1
    bounds: dict[int, list[tuple[int, float, float]]] = {}
    for b, ks in enumerate(live_at):
        acc = 0
        for k in ks:
            lo = acc
            acc += lifetimes[k][2]
            bounds.setdefault(k, []).append((b, lo, acc))
    x = lambda b: 60 + (width - 70) * b / max(1, nb - 1)  # noqa: E731
    y = lambda v: 10 + (height - 40) * (1 - v / peak)  # noqa: E731
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'class="timeline">']
    for k, pts in bounds.items():
        size, addr, frames = lifetimes[k][2], lifetimes[k][3], lifetimes[k][4]
        if len(pts) == 1:
            b, lo, hi = pts[0]
            pts = [(b, lo, hi), (b + 0.9, lo, hi)]
        upper = " ".join(f"{x(b):.1f},{y(hi):.1f}" for b, lo, hi in pts)
        lower = " ".join(f"{x(b):.1f},{y(lo):.1f}" for b, lo, hi in reversed(pts))
        title = html.escape(f"{_fmt(size)} at {addr:#x}\n{_frames_text(frames)}")
        parts.append(f'<polygon points="{upper} {lower}" fill="{_PALETTE[k % len(_PALETTE)]}" '
                     f'stroke="none"><title>{title}</title></polygon>')
    for frac in (0, 0.25, 0.5, 0.75, 1.0):
        yy = y(peak * frac)
        parts.append(f'<line x1="58" x2="{width - 10}" y1="{yy:.1f}" y2="{yy:.1f}" '
                     f'stroke="#ccc" stroke-width="0.5"/>')
        parts.append(f'<text x="2" y="{yy + 4:.1f}" font-size="10">{_fmt(peak * frac)}</text>')
    parts.append(f'<text x="60" y="{height - 8}" font-size="11">trace events 0 … {n} '
                 f'(peak {_fmt(peak)})</text></svg>')
    return "".join(parts)


def segments_svg(segments: list[dict[str, Any]], width: int = 1100) -> str:
    """One row per segment: blocks as rectangles, width proportional to size in the row."""
    if not segments:
        return "<p>No segments.</p>"
    colors = {"active_allocated": "#e15759", "active_pending_free": "#f28e2b", "inactive": "#d9d9d9"}
    row_h, gap = 18, 4
    height = len(segments) * (row_h + gap) + 10
    biggest = max(s["total_size"] for s in segments) or 1
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" class="segments">']
    for i, seg in enumerate(sorted(segments, key=lambda s: (s.get("device", 0), s["address"]))):
        y0 = 5 + i * (row_h + gap)
        seg_w = max(4.0, (width - 240) * seg["total_size"] / biggest)
        label = (f'{seg["address"]:#x} {_fmt(seg["total_size"])} {seg.get("segment_type", "")}'
                 f'{" exp" if seg.get("is_expandable") else ""}')
        parts.append(f'<text x="2" y="{y0 + 13}" font-size="10">{html.escape(label)}</text>')
        xpos = 230.0
        for b in seg["blocks"]:
            w = seg_w * b["size"] / max(1, seg["total_size"])
            title = html.escape(f'{b["state"]} {_fmt(b["size"])} at {b["address"]:#x}\n'
                                f'{_frames_text(b.get("frames", []))}')
            parts.append(f'<rect x="{xpos:.2f}" y="{y0}" width="{max(w, 0.5):.2f}" height="{row_h}" '
                         f'fill="{colors.get(b["state"], "#999")}" stroke="#fff" stroke-width="0.3">'
                         f'<title>{title}</title></rect>')
            xpos += w
    parts.append("</svg>")
    return "".join(parts)


def to_html(snap: dict[str, Any], title: str = "cudakit memory snapshot") -> str:
    segs = snap.get("segments", [])
    traces = snap.get("device_traces", [])
    allocated = sum(s.get("allocated_size", 0) for s in segs)
    reserved = sum(s.get("total_size", 0) for s in segs)
    body = [f"<h1>{html.escape(title)}</h1>",
            f"<p>{len(segs)} segments, reserved {_fmt(reserved)}, allocated {_fmt(allocated)}</p>"]
    for dev, trace in enumerate(traces):
        if trace:
            body.append(f"<h2>Device {dev}: allocated memory over time</h2>")
            body.append(timeline_svg(trace))
    body.append("<h2>Segments</h2><p><span style='color:#e15759'>■</span> allocated "
                "<span style='color:#f28e2b'>■</span> pending free (stream events) "
                "<span style='color:#999'>■</span> free (cached)</p>")
    body.append(segments_svg(segs))
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>" + html.escape(title) +
            "</title><style>body{font-family:sans-serif;margin:16px} svg{display:block;"
            "border:1px solid #eee;margin-bottom:16px}</style></head><body>" + "".join(body) +
            "</body></html>")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cudakit.memory_viz", description=__doc__.split("\n\n")[0])
    ap.add_argument("snapshot", help="snapshot .pickle or .json")
    ap.add_argument("-o", "--output", default=None, help="output HTML (default: <snapshot>.html)")
    args = ap.parse_args(argv)
    snap = load(args.snapshot)
    out = args.output or args.snapshot.rsplit(".", 1)[0] + ".html"
    with open(out, "w", encoding="utf-8") as f:
        f.write(to_html(snap, title=args.snapshot))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
