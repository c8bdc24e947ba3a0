"""Sleep and wake of tagged memory (issue 29): use_sleep_pool / sleep / wake_up / sleep_state,
errors, statistics and snapshots, torch's allocations through the plug-in's C ABI, a CUDA
graph replayed after sleep + wake, threads, and the weight hand-off to another process
(export_pool / import_pool). Runs on the emulated backend in CI and on the GPU as is."""
import ctypes
import itertools
import json
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

_ids = itertools.count()


def tag(base):
    return f"{base}_{os.getpid()}_{next(_ids)}"


def vals(t):
    return np.asarray(t.cpu().numpy())


def test_offload_round_trip_keeps_addresses_and_contents(ck):
    m = ck.memory
    t = tag("weights")
    with m.use_sleep_pool(t):
        a = ck.arange(0, 1000, 1, dtype=ck.float32, device="cuda")
        b = ck.full((512, 1024), 7.0, device="cuda")
    ptrs = (a.data_ptr(), b.data_ptr())
    view = m.pool_view(t)
    assert all(view.base <= p < view.base + view.size for p in ptrs)
    reserved = m.memory_reserved()
    state = m.sleep_state()[t]
    assert state == {"bytes": state["bytes"], "allocated_bytes": state["allocated_bytes"],
                     "asleep": False, "offloaded": False}
    released = m.sleep([t], offload=[t])
    assert released == state["bytes"] >= 2 << 20
    assert m.memory_reserved() == reserved - released
    assert m.sleep_state()[t]["asleep"] and m.sleep_state()[t]["offloaded"]
    stats = m.memory_stats()
    assert stats["sleep.asleep_bytes"] >= released and stats["sleep.offloaded_bytes"] > 0
    m.wake_up([t])
    assert m.memory_reserved() == reserved
    assert (a.data_ptr(), b.data_ptr()) == ptrs
    assert np.array_equal(vals(a), np.arange(1000, dtype=np.float32))
    assert np.all(vals(b) == 7.0)
    assert not m.sleep_state()[t]["asleep"]


def test_discard_repeated_calls_and_single_str_tags(ck):
    m = ck.memory
    t = tag("kv")
    with m.use_sleep_pool(t):
        kv = ck.zeros((4 << 20,), dtype=ck.uint8, device="cuda")
    assert m.sleep(t) > 0  # a single str is one tag
    assert m.sleep(t) == 0  # already asleep: no-op
    assert not m.sleep_state()[t]["offloaded"]
    m.wake_up(t)
    m.wake_up(t)  # already awake: no-op
    kv.fill_(3)  # discarded contents are undefined, but the memory is usable again
    assert np.all(vals(kv) == 3)


def test_errors(ck):
    m = ck.memory
    with pytest.raises(KeyError, match="no-such"):
        m.sleep(["no-such"])
    with pytest.raises(ValueError):  # KeyError that is also a ValueError
        m.wake_up("no-such")
    with pytest.raises(ck.KeyNotFoundError):
        m.sleep(["no-such"])
    with pytest.raises(ck.ArgumentTypeError):
        m.sleep(3)
    with pytest.raises(ValueError, match="empty"):
        with m.use_sleep_pool(""):
            pass
    t, other = tag("err"), tag("err_other")
    with m.use_sleep_pool(t):
        x = ck.ones(100, device="cuda")
    with m.use_sleep_pool(other):
        y = ck.ones(100, device="cuda")
    with pytest.raises(ValueError, match="offload tag"):
        m.sleep([t], offload=[other])
    assert not m.sleep_state()[t]["asleep"]
    m.sleep([t])
    with m.use_sleep_pool(t):
        with pytest.raises(RuntimeError, match=f"'{t}'.*wake_up"):
            ck.empty(10, device="cuda")
    z = ck.ones(10, device="cuda")  # outside the scope: the default pool
    del x  # freeing while asleep is allowed
    m.wake_up()
    assert np.all(vals(y) == 1) and np.all(vals(z) == 1)


def test_stats_and_snapshot_show_tagged_pools(ck):
    m = ck.memory
    t = tag("snap")
    with m.use_sleep_pool(t):
        x = ck.empty((3 << 20,), dtype=ck.uint8, device="cuda")
    m.sleep([t])
    segs = [s for s in m.memory_snapshot() if s.get("sleep_tag") == t]
    assert segs and all(s["asleep"] for s in segs)
    assert any(b["state"] == "active_allocated" and b["address"] == x.data_ptr()
               for s in segs for b in s["blocks"])
    nested = m.memory_stats_as_nested_dict()["sleep"]
    assert nested["num_sleeps"] >= 1 and nested["asleep_bytes"] > 0
    m.wake_up([t])
    assert not any(s["asleep"] for s in m.memory_snapshot() if s.get("sleep_tag") == t)


def test_graph_replays_after_offload_and_wake(ck):
    m = ck.memory
    t = tag("graph")
    with m.use_sleep_pool(t):
        x = ck.arange(0, 64, 1, dtype=ck.float32, device="cuda")
        out = ck.zeros(64, device="cuda")
    g = ck.CUDAGraph()
    with ck.graph(g):
        out.copy_(x * 2 + 1)  # reads and writes tagged memory
    ptrs = (x.data_ptr(), out.data_ptr())
    m.sleep([t], offload=[t])
    m.wake_up([t])
    assert (x.data_ptr(), out.data_ptr()) == ptrs
    out.zero_()
    g.replay()
    ck.synchronize()
    assert np.array_equal(vals(out), np.arange(64, dtype=np.float32) * 2 + 1)
    x.fill_(1)
    g.replay()
    ck.synchronize()
    assert np.all(vals(out) == 3)


def test_use_sleep_pool_inside_a_capture_keeps_the_graphs_intermediates(ck):
    """use_sleep_pool entered inside a capture routes the capture's intermediates to the
    tagged pool; a later empty_cache must not give their segments back while the graph
    replays into them (it did: the replay wrote into unmapped memory, a segfault on the
    emulated backend). Run in a child: before the fix the interpreter died."""
    code = textwrap.dedent(f"""
        import numpy as np, cudakit as ck, cudakit.memory as m
        x = ck.ones(16 << 20, device="cuda")
        y = ck.empty(16 << 20, device="cuda")
        g = ck.CUDAGraph()
        with ck.graph(g):
            with m.use_sleep_pool({tag("incapture")!r}):
                t = x * 2  # a 64 MiB intermediate from the tagged pool
            y.copy_(t + 1)
            del t
        m.empty_cache()
        g.replay()
        ck.synchronize()
        assert float(y[0].item()) == 3.0 and float(y[-1].item()) == 3.0
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env=dict(os.environ))
    assert out.returncode == 0 and out.stdout.strip() == "ok", (out.returncode, out.stderr[-2000:])


def _plugin(m):
    try:
        lib = ctypes.CDLL(m.plugin_path())
    except (RuntimeError, OSError) as e:
        pytest.skip(str(e))
    lib.cudakit_malloc.restype = ctypes.c_void_p
    lib.cudakit_malloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
    lib.cudakit_free.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
    return lib


def test_torch_allocations_through_the_plugin_land_in_the_pool(ck):
    # What torch's pluggable allocator calls (use_with_torch installs these hooks).
    m = ck.memory
    lib = _plugin(m)
    t = tag("torch")
    torch0 = m.memory_allocated_by("torch")
    with m.use_sleep_pool(t):
        p = lib.cudakit_malloc(6 << 20, ck.current_device(), None)
    assert p
    view = m.pool_view(t)
    assert view.base <= p < view.base + view.size
    assert m.memory_allocated_by("torch") == torch0 + (6 << 20)
    assert m.sleep([t]) >= 6 << 20
    lib.cudakit_free(p, 6 << 20, ck.current_device(), None)  # freed by torch while asleep
    assert m.memory_allocated_by("torch") == torch0
    m.wake_up([t])


def test_threads_allocate_while_another_sleeps_and_wakes(ck):
    m = ck.memory
    t = tag("threads")
    with m.use_sleep_pool(t):
        keep = ck.full((1 << 20,), 5.0, device="cuda")
    stop = threading.Event()
    errors, refused = [], []

    def worker(i):
        own = f"{t}_own{i}"
        try:
            while not stop.is_set():
                with m.use_sleep_pool(t):
                    try:
                        ck.empty(1000 * (i + 1), device="cuda")
                    except RuntimeError as e:
                        assert t in str(e)
                        refused.append(1)
                with m.use_sleep_pool(own):
                    ck.ones(5000, device="cuda")
        except Exception as e:  # noqa: BLE001  (reported by the main thread)
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(3)]
    for th in threads:
        th.start()
    for _ in range(10):
        m.sleep([t], offload=[t])
        m.sleep_state()
        m.wake_up([t])
    stop.set()
    for th in threads:
        th.join()
    assert not errors, errors
    assert np.all(vals(keep) == 5.0)


_CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    import cudakit as ck
    m = ck.memory
    with m.use_sleep_pool("handoff"):
        ts = [ck.arange(0, 1000 * (i + 1), 1, dtype=ck.float32, device="cuda") * (i + 1)
              for i in range(5)]
        big = ck.full((3 << 20,), 9, dtype=ck.uint8, device="cuda")
    ck.synchronize()
    view = m.pool_view("handoff")
    layout = [[view.offset_of(x), x.numel()] for x in ts]
    print(json.dumps({"handle": m.export_pool("handoff").hex(), "layout": layout,
                      "big": view.offset_of(big), "size": view.size}), flush=True)
    sys.stdin.readline()  # keep the memory alive until the parent has imported it
    m.sleep("handoff")    # the importer's mapping keeps its memory valid
    print("slept", flush=True)
    sys.stdin.readline()
""")


def test_pool_hand_off_to_another_process(ck):
    m = ck.memory
    child = subprocess.Popen([sys.executable, "-c", _CHILD], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        info = json.loads(child.stdout.readline())
        try:
            view = m.import_pool(bytes.fromhex(info["handle"]))
        except PermissionError as e:
            pytest.skip(f"pidfd_getfd refused: {e}")
        assert view.size == info["size"]
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "slept"
        with view:
            for i, (off, n) in enumerate(info["layout"]):
                x = view.tensor(off, (n,), ck.float32)
                assert np.array_equal(vals(x), np.arange(n, dtype=np.float32) * (i + 1))
            # The batch forms: the whole layout in one call, as tensors and as capsules.
            layout = [(off, (n,), ck.float32) for off, n in info["layout"]]
            for i, (x, cap) in enumerate(zip(view.tensors(layout), view.dlpack(layout))):
                y = ck.from_dlpack(cap)
                want = np.arange(info["layout"][i][1], dtype=np.float32) * (i + 1)
                assert np.array_equal(vals(x), want) and np.array_equal(vals(y), want)
                assert y.data_ptr() == x.data_ptr() == view.base + info["layout"][i][0]
            with pytest.raises(ValueError, match="runs past"):
                view.tensors([(view.size - 4, (8,), ck.float32)])
            with pytest.raises(ValueError, match="offset, shape, dtype"):
                view.dlpack([(0, (1,))])
            del y, cap
            big = view.tensor(info["big"], (3 << 20,), ck.uint8)
            assert np.all(vals(big) == 9)
            cai = view.array(info["big"], (16,), "|u1").__cuda_array_interface__
            assert cai["data"][0] == view.base + info["big"] and cai["shape"] == (16,)
            with pytest.raises(ValueError):
                view.tensor(view.size - 4, (8,), ck.float32)
            del x
        with pytest.raises(RuntimeError, match="closed"):
            view.tensor(0, (1,), ck.float32)
        assert np.all(vals(big) == 9), "a tensor keeps its pool mapped after close"
        del big
    finally:
        child.stdin.write("\n")
        child.stdin.close()
        child.wait(timeout=60)
    assert child.returncode == 0


def test_hand_off_errors(ck):
    m = ck.memory
    t = tag("export")
    with pytest.raises(KeyError):
        m.export_pool(t)
    with m.use_sleep_pool(t):
        x = ck.ones(10, device="cuda")
    h = m.export_pool(t)
    with pytest.raises(ValueError, match="this process"):
        m.import_pool(h)
    with pytest.raises(ValueError, match="not a handle"):
        m.import_pool(b"\0" * 64)
    with pytest.raises(ck.ArgumentTypeError):
        m.import_pool("text")
    base = m.pool_view(t).base
    m.sleep([t], offload=[t])
    with pytest.raises(RuntimeError, match="asleep"):
        m.export_pool(t)
    assert m.pool_view(t).base == base  # the addresses stay while asleep
    m.wake_up([t])
    assert np.all(vals(x) == 1)
