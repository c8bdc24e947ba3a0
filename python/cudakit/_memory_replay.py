"""``python -m cudakit memory replay FILE [--conf SETTINGS ...]``: "will it fit with these
settings?" without running the model.

FILE is an allocation history: a snapshot pickle from ``torch.cuda.memory._snapshot()`` or
``cudakit.memory._snapshot()`` taken with history recording on
(``_record_memory_history()``), or a trace file in the shared/traces format (``a ID BYTES
STREAM`` / ``f ID`` lines, gzip or plain; bench/memory/record_torch_trace.py writes them).
Each setting (a CUDAKIT_ALLOC_CONF string; "" = the defaults) replays the allocations and
frees through cudakit's own caching allocator in a fresh process, on the emulated backend by
default (no GPU needed: footprint and device calls do not depend on the backend), and the
table gives peak allocated, peak reserved, their ratio (fragmentation: 1.0 is none) and the
device memory calls as torch counts them (num_device_alloc + num_device_free).

From a snapshot, a block is taken as allocated at its ``alloc`` entry and freed at its
``free_completed`` entry (``free_requested`` when the history has no completions); blocks that
were live before recording started (freed in the history without an allocation, or live in
the snapshot's segments) are allocated first, so the replay starts from the same live set.
"""
from __future__ import annotations

import gzip
import io
import json
import os
import pickle
import subprocess
import sys
import tempfile
from array import array

DEFAULT_CONFS = ("", "expandable_segments:False", "expandable_segments:True")
# The child process's CUDAKIT_BACKEND: by default the backend that needs no GPU (footprint and
# device calls do not depend on the backend), or the GPU's.
NO_GPU_BACKEND = "emulated"
BACKENDS = (NO_GPU_BACKEND, "cuda")


class ReplayInputError(ValueError):
    pass


class _SnapshotUnpickler(pickle.Unpickler):
    # Snapshots hold only dicts, lists, strings and numbers: refuse anything that would run
    # code on load (a pickle from elsewhere must not execute).
    def find_class(self, module, name):
        raise ReplayInputError(
            f"the snapshot pickle refers to {module}.{name}: not a memory snapshot (snapshots "
            "hold only plain dicts, lists, strings and numbers)")


def _open(path: str) -> bytes:
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return data


def _trace_events(text: str):
    header, events = "", []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if line.startswith("#"):
            header = line.strip()
            continue
        parts = line.split()
        try:
            if parts[0] == "a":
                events.append((1, int(parts[1]), int(parts[2]), int(parts[3]) if len(parts) > 3 else 0))
            elif parts[0] == "f":
                events.append((0, int(parts[1]), 0, 0))
            else:
                raise ValueError
        except (ValueError, IndexError):
            raise ReplayInputError(f"line {n}: {line[:60]!r} is not 'a ID BYTES [STREAM]' or "
                                   "'f ID' (trace format: shared/traces/README.md)") from None
    return header, events


def snapshot_events(snap, device: int | None = None):
    """(events, device) from a snapshot dict: events as (is_alloc, id, bytes, stream)."""
    traces = snap.get("device_traces") if isinstance(snap, dict) else None
    if not isinstance(traces, list):
        raise ReplayInputError("the pickle is not a memory snapshot: no 'device_traces' list "
                               "(take it with _snapshot() after _record_memory_history())")
    if device is None:
        device = max(range(len(traces)), key=lambda d: len(traces[d] or []), default=0)
    if device >= len(traces) or not traces[device]:
        raise ReplayInputError(
            f"the snapshot has no history for device {device}: record it with "
            "_record_memory_history() before the workload, then take _snapshot()")
    trace = traces[device]
    free_action = "free_completed" if any(e.get("action") == "free_completed" for e in trace) \
        else "free_requested"
    # Blocks live before recording began: freed in the history without an allocation there,
    # or live in the snapshot's segments without one.
    seen, before = set(), {}
    for e in trace:
        a = e.get("action")
        if a == "alloc":
            seen.add(e["addr"])
        elif a == free_action and e["addr"] not in seen and e["addr"] not in before:
            before[e["addr"]] = (e.get("size", 0), e.get("stream", 0))
    allocated_in_trace = {e["addr"] for e in trace if e.get("action") == "alloc"}
    for seg in snap.get("segments", []) or []:
        if seg.get("device", device) != device:
            continue
        addr = seg.get("address", 0)
        for blk in seg.get("blocks", []):
            if blk.get("state") == "active_allocated" and addr not in allocated_in_trace \
                    and addr not in before:
                before[addr] = (blk.get("requested_size") or blk.get("size", 0), seg.get("stream", 0))
            addr += blk.get("size", 0)
    ids, events, next_id = {}, [], 0
    for addr in sorted(before):
        size, stream = before[addr]
        ids[addr] = next_id
        events.append((1, next_id, int(size), int(stream or 0)))
        next_id += 1
    for e in trace:
        a = e.get("action")
        if a == "alloc":
            ids[e["addr"]] = next_id
            events.append((1, next_id, int(e["size"]), int(e.get("stream") or 0)))
            next_id += 1
        elif a == free_action and e["addr"] in ids:
            events.append((0, ids.pop(e["addr"]), 0, 0))
    return events, device


def load(path: str, device: int | None = None):
    """(title, events) of a trace file or a snapshot pickle."""
    data = _open(path)
    if data[:1] == b"\x80":  # pickle protocol 2+
        try:
            snap = _SnapshotUnpickler(io.BytesIO(data)).load()
        except ReplayInputError:
            raise
        except Exception as e:  # noqa: BLE001 - any unpickling failure: not a snapshot
            raise ReplayInputError(f"{path}: not a readable snapshot pickle ({e})") from None
        events, dev = snapshot_events(snap, device)
        return f"snapshot, device {dev}", events
    try:
        text = data.decode()
    except UnicodeDecodeError:
        raise ReplayInputError(f"{path}: neither a snapshot pickle nor a trace file") from None
    header, events = _trace_events(text)
    if not events:
        raise ReplayInputError(f"{path}: no allocation events")
    return header or "trace", events


def live_peak(events) -> int:
    live, peak, size = 0, 0, {}
    for is_alloc, ident, nbytes, _ in events:
        if is_alloc:
            size[ident] = nbytes
            live += nbytes
            peak = max(peak, live)
        else:
            live -= size.pop(ident, 0)
    return peak


def _worker(events_path: str) -> None:
    # Runs in the child: the allocator settings came in CUDAKIT_ALLOC_CONF.
    import time

    import cudakit
    import cudakit.memory as m

    flat = array("q")
    with open(events_path, "rb") as f:
        flat.frombytes(f.read())
    streams = {}
    for i in range(0, len(flat), 4):
        s = flat[i + 3]
        if flat[i] and s and s not in streams:
            streams[s] = cudakit.Stream()
    alloc, free = m.caching_allocator_alloc, m.caching_allocator_delete
    live = {}
    t0 = time.perf_counter()
    for i in range(0, len(flat), 4):
        if flat[i]:
            s = flat[i + 3]
            live[flat[i + 1]] = alloc(flat[i + 2], 0, streams[s]) if s else alloc(flat[i + 2], 0)
        else:
            p = live.pop(flat[i + 1], None)
            if p is not None:
                free(p)
    ms = (time.perf_counter() - t0) * 1e3
    st = m.memory_stats(0)
    for p in live.values():
        free(p)
    print(json.dumps({
        "peak_allocated": st["allocated_bytes.all.peak"],
        "peak_reserved": st["reserved_bytes.all.peak"],
        "device_allocs": st.get("num_device_alloc", 0), "device_frees": st.get("num_device_free", 0),
        "ooms": st.get("num_ooms", 0), "ms": ms}))


def replay(events, confs, backend: str = NO_GPU_BACKEND, memory: int | None = None):
    """One result dict per setting (or {"error": message} where the replay failed)."""
    flat = array("q")
    for e in events:
        flat.extend(e)
    if memory is None:
        # Room for the live peak plus what the worst setting might reserve on top.
        memory = max(8 << 30, 3 * live_peak(events) + (1 << 30))
    out = []
    with tempfile.NamedTemporaryFile(suffix=".events", delete=False) as f:
        f.write(flat.tobytes())
        path = f.name
    try:
        for conf in confs:
            env = dict(os.environ, CUDAKIT_ALLOC_CONF=conf, CUDAKIT_BACKEND=backend)
            if backend == NO_GPU_BACKEND:
                env["CUDAKIT_EMULATED_MEMORY"] = str(memory)
                env.pop("CUDA_VISIBLE_DEVICES", None)
            code = "import sys; from cudakit._memory_replay import _worker; _worker(sys.argv[1])"
            r = subprocess.run([sys.executable, "-c", code, path], env=env,
                               capture_output=True, text=True)
            if r.returncode != 0:
                lines = (r.stderr.strip() or r.stdout.strip()).splitlines()
                out.append({"conf": conf, "error": lines[-1] if lines else f"exit {r.returncode}"})
                continue
            res = json.loads(r.stdout.strip().splitlines()[-1])
            res["conf"] = conf
            out.append(res)
    finally:
        os.unlink(path)
    return out


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.3f} GiB"


def format_table(title: str, events, results) -> str:
    rows = [f"{title}: {len(events)} events, live peak {_gib(live_peak(events))}",
            f"{'settings':36s} {'peak allocated':>15s} {'peak reserved':>15s} {'ratio':>7s} "
            f"{'device calls':>13s}"]
    for r in results:
        name = r["conf"] or "(defaults)"
        if "error" in r:
            rows.append(f"{name:36s} failed: {r['error']}")
            continue
        ratio = r["peak_reserved"] / max(1, r["peak_allocated"])
        calls = r["device_allocs"] + r["device_frees"]
        note = f"  ({r['ooms']} out-of-memory retries)" if r.get("ooms") else ""
        rows.append(f"{name:36s} {_gib(r['peak_allocated']):>15s} {_gib(r['peak_reserved']):>15s} "
                    f"{ratio:7.3f} {calls:13d}{note}")
    return "\n".join(rows)


def main(files, confs, backend=NO_GPU_BACKEND, device=None, as_json=False) -> int:
    confs = list(confs) if confs else list(DEFAULT_CONFS)
    status = 0
    report = []
    for path in files:
        try:
            title, events = load(path, device)
        except (OSError, ReplayInputError) as e:
            print(f"{path}: {e}" if isinstance(e, OSError) else str(e), file=sys.stderr)
            status = 2
            continue
        results = replay(events, confs, backend)
        if as_json:
            report.append({"file": path, "title": title, "events": len(events), "results": results})
        else:
            print(f"{path}\n" + format_table(title, events, results))
        if any("error" in r for r in results):
            status = max(status, 1)
    if as_json:
        print(json.dumps(report, indent=2))
    return status
