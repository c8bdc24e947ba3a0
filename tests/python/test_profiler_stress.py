"""Tracing beside graph threads (issue 28 item 2): 16 threads capture, replay and drop CUDA
graphs (annotated, some kept as templates, some dropped through reference cycles by the
garbage collector on whichever thread runs it) while another thread starts and stops traces
and reads their events. Every thread must finish without an error, every trace must be
readable, and the process must not crash (the issue saw pybind11's "Tried to deallocate
unregistered instance" or a crash in the garbage collector within seconds on the H200).

Duration: CUDAKIT_STRESS_SECONDS (shared with the memory stress tests), default 3 s here:
CI has 2 cores and a 30-minute budget. The GPU run sets 60 (the issue's duration). On the
emulated backend the crash did not reproduce in 5 x 20 s runs before or after the fixes of
this issue (see docs/performance.md), so the CI default is what keeps this test cheap, not a
measured time-to-crash."""
import gc
import os
import threading
import time

import pytest

STRESS_SECONDS = float(os.environ.get("CUDAKIT_STRESS_SECONDS", "3"))
GRAPH_THREADS = 16


def test_traces_beside_16_graph_threads(ck):
    import cudakit.graph_annotations as ga
    stop = threading.Event()
    errors = []
    replays = [0] * GRAPH_THREADS
    traces = []

    def graph_thread(i):
        try:
            s = ck.Stream()
            with ck.stream(s):
                x = ck.zeros(16, device="cuda")
                one = ck.ones(16, device="cuda")
            s.synchronize()
            kept = []
            while not stop.is_set():
                g = ck.CUDAGraph(keep_graph=(i % 2 == 0))
                # thread_local: the other threads' captures and the tracer's synchronize at
                # stop() must not invalidate this one (what an engine with capture threads
                # uses; "global" forbids any synchronize in the process while capturing)
                with ck.graph(g, stream=s, capture_error_mode="thread_local",
                              enable_annotations=True):
                    with ga.mark_kernels({"thread": i, "v": float("nan")}):
                        x.add_(one)
                        x.add_(one)
                with ck.stream(s):
                    for _ in range(3):
                        g.replay()
                if i % 2 == 0:
                    g.get_graph_data()
                if i % 4 == 1:
                    g.self = g  # a cycle: only the garbage collector frees this graph
                kept.append(g)
                if len(kept) > 2:
                    kept.pop(0)
                replays[i] += 3
                if replays[i] % 60 == 0:
                    gc.collect()
            s.synchronize()
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(f"graph thread {i}: {e!r}")
            stop.set()

    def tracing_thread():
        seen = []
        try:
            while not stop.is_set():
                # Python graph hooks for the trace's lifetime too (each call hands the hook
                # the graph's own Python object, from the graph threads)
                hooks = [ck.graphs.register_graph_instantiate_hook(
                             lambda g: seen.append(g._capture_id) if len(seen) < 64 else seen.clear()),
                         ck.graphs.register_graph_destroy_hook(lambda ids: len(ids))]
                with ck.profiler.trace() as t:
                    time.sleep(0.005)
                for h in hooks:
                    h.remove()
                ev = t.events()
                traces.append(sum(1 for e in ev if e.get("cat") == "kernel"))
        except BaseException as e:  # noqa: BLE001
            errors.append(f"tracing thread: {e!r}")
            stop.set()

    threads = [threading.Thread(target=graph_thread, args=(i,)) for i in range(GRAPH_THREADS)]
    threads.append(threading.Thread(target=tracing_thread))
    for t in threads:
        t.start()
    deadline = time.monotonic() + STRESS_SECONDS
    while time.monotonic() < deadline and not stop.is_set():
        time.sleep(0.05)
    stop.set()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert errors == []
    assert all(n > 0 for n in replays)
    assert traces, "no trace completed"
    gc.collect()
    ga.clear_kernel_annotations()
