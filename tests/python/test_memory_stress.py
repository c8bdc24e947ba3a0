"""Lock discipline of the allocators, from Python (issue 14.1).

Each scenario runs in its own interpreter with ``faulthandler.dump_traceback_later``: a hang
becomes a failure showing every Python thread's stack instead of a frozen test run.
``CUDAKIT_STRESS_SECONDS`` scales the stress (default 3 s; longer on the GPU run).
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

STRESS_SECONDS = float(os.environ.get("CUDAKIT_STRESS_SECONDS", "3"))


def _run(script: str, limit: float) -> str:
    prologue = f"import faulthandler\nfaulthandler.dump_traceback_later({limit}, exit=True)\n"
    try:
        proc = subprocess.run([sys.executable, "-c", prologue + textwrap.dedent(script)],
                              capture_output=True, text=True, timeout=limit + 60)
    except subprocess.TimeoutExpired as e:  # faulthandler could not even run
        pytest.fail(f"hung past {limit + 60} s without a stack dump: {e.stderr}")
    if proc.returncode != 0:
        pytest.fail(f"exit status {proc.returncode} (a hang prints 'Timeout' and every "
                    f"thread's stack)\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-20000:]}")
    return proc.stdout


def test_empty_cache_behind_a_stream_whose_queued_op_frees_memory():
    # The ten lines of the issue: queued ops own their operands and free them when they
    # finish; the event empty_cache() waits for is queued behind those ops.
    out = _run("""
        import cudakit
        side = cudakit.Stream()
        for _ in range(20):
            with cudakit.stream(side):
                x = cudakit.ones(1 << 10)
            x.record_stream(cudakit.current_stream())
            y = cudakit.ones(1 << 22)
            for _ in range(4):
                y = y * 2 + 1      # queued ops owning their operands, freed as they finish
            del y
            del x                  # its event is recorded after that work
            cudakit.empty_cache()  # waits for the event
        cudakit.synchronize()
        print("ok", cudakit.memory_allocated())
    """, limit=60)
    assert out.split() == ["ok", "0"]


@pytest.mark.races  # random streams, no ordering: the point is the allocator's locks
def test_sixteen_threads_with_gc_finalisers_and_empty_cache():
    out = _run(f"""
        import gc, random, sys, threading, time
        import cudakit
        sys.setswitchinterval(1e-4)
        streams = [cudakit.Stream() for _ in range(3)]
        stop = threading.Event()
        errors = []

        class Cycle:  # freed only by the garbage collector, on whichever thread runs it
            def __init__(self, t):
                self.t = t
                self.me = self

        def pick(rng):
            return rng.choice(streams + [cudakit.current_stream()])

        def worker(seed):
            rng = random.Random(seed)
            live = []
            try:
                while not stop.is_set():
                    op = rng.randrange(100)
                    s = pick(rng)
                    if op < 25 or not live:
                        with cudakit.stream(s):
                            live.append(cudakit.ones(rng.choice([16, 1000, 1 << 16, 300000])))
                    elif op < 40:
                        live.pop(rng.randrange(len(live)))
                    elif op < 52:  # queued work owning its operands
                        t = live[rng.randrange(len(live))]
                        with cudakit.stream(s):
                            live.append(t * 2 + 1)
                    elif op < 58:
                        live[rng.randrange(len(live))].record_stream(s)
                    elif op < 64:
                        Cycle(live.pop(rng.randrange(len(live))))
                    elif op < 66:
                        gc.collect()
                    elif op < 72:
                        e = cudakit.Event()
                        e.record(s)
                        pick(rng).wait_event(e)
                        if rng.randrange(4) == 0:
                            e.synchronize()
                    elif op < 75:
                        s.synchronize()
                    elif op < 76:
                        cudakit.synchronize()
                    elif op < 79:
                        cudakit.empty_cache()
                    elif op < 83:
                        p = cudakit.caching_allocator_alloc(rng.randrange(1, 1 << 20), stream=s)
                        cudakit.caching_allocator_delete(p)
                    elif op < 87:
                        h = cudakit.ones(rng.randrange(1, 4096), device="cpu", pin_memory=True)
                        with cudakit.stream(s):
                            live.append(h.to("cuda", non_blocking=True))
                    elif op < 88:
                        cudakit.memory.host_memory_stats()
                        cudakit.memory._host_empty_cache()
                    elif op < 92:
                        cudakit.memory_stats()
                        cudakit.memory_allocated()
                    if len(live) > 40:
                        del live[:20]
            except Exception as e:  # noqa: BLE001 - reported by the parent
                errors.append(repr(e))

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
        for t in threads:
            t.start()
        time.sleep({STRESS_SECONDS})
        stop.set()
        for t in threads:
            t.join()
        gc.collect()
        cudakit.synchronize()
        assert not errors, errors[:5]
        cudakit.empty_cache()
        print("allocated", cudakit.memory_allocated())
    """, limit=max(120.0, STRESS_SECONDS * 20))
    assert out.split() == ["allocated", "0"]
