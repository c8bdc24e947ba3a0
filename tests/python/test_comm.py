"""cudakit.comm (torch.cuda.comm): every function through every transport, on every device
of the backend (2 emulated devices in CI, 4 in the 4-device job), DLPack inputs, stream
ordering and bad input. GPU tests compare with torch.cuda.comm on the same data."""
import threading

import numpy as np
import pytest

import cudakit as ck

TRANSPORTS = ["auto", "peer", "nccl", "copy"]


@pytest.fixture
def two(ck):
    if ck.device_count() < 2:
        pytest.skip("needs 2 devices")
    return ck


@pytest.fixture(params=TRANSPORTS)
def transport(request, two):
    if request.param == "nccl":
        try:
            two.nccl.version()
        except NotImplementedError:
            pytest.skip("no NCCL")
    two.comm.set_transport(request.param)
    yield request.param
    two.comm.set_transport("auto")


def host(t):
    return t.cpu().numpy()


def devices():
    return list(range(ck.device_count()))


def test_broadcast(transport):
    x = ck.tensor(np.arange(24, dtype=np.float32).reshape(4, 6), device="cuda:0")
    out = ck.comm.broadcast(x, devices())
    assert isinstance(out, list) and len(out) == ck.device_count()
    assert out[0].data_ptr() == x.data_ptr()  # the source itself
    for d, t in enumerate(out):
        assert t.device == ck.Device(d)
        np.testing.assert_array_equal(host(t), host(x))
    # devices as strings / Device objects, from the last device
    last = ck.device_count() - 1
    y = ck.tensor([1, 2, 3], device=f"cuda:{last}")
    out = ck.comm.broadcast(y, [f"cuda:{last}", ck.Device(0)])
    np.testing.assert_array_equal(host(out[1]), [1, 2, 3])


def test_broadcast_out_and_from_dlpack(transport):
    src = np.arange(5, dtype=np.int64)  # a NumPy array: imported through DLPack
    out = [ck.zeros(5, dtype=ck.int64, device=f"cuda:{d}") for d in devices()]
    res = ck.comm.broadcast(src, out=out)
    assert res[0] is out[0]
    for t in out:
        np.testing.assert_array_equal(host(t), src)
    with pytest.raises(ValueError, match="exactly one"):
        ck.comm.broadcast(src, devices(), out=out)
    with pytest.raises(ValueError, match="exactly one"):
        ck.comm.broadcast(src)


def test_broadcast_coalesced(transport):
    ts = [ck.tensor(np.arange(n, dtype=dt), device="cuda:0")
          for n, dt in [(10, np.float32), (300, np.int64), (7, np.float16), (2000, np.float32), (1, np.int64)]]
    out = ck.comm.broadcast_coalesced(ts, devices(), buffer_size=1024)
    assert len(out) == ck.device_count()
    assert all(a is b or a.data_ptr() == b.data_ptr() for a, b in zip(out[0], ts))
    for d in range(1, ck.device_count()):
        for a, b in zip(out[d], ts):
            assert a.device == ck.Device(d) and a.dtype == b.dtype and a.shape == b.shape
            np.testing.assert_array_equal(host(a), host(b))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64", "int32", "int64", "uint8",
                                   "bool", "complex64"])
def test_reduce_add(transport, dtype):
    n = ck.device_count()
    rng = np.random.default_rng(0)
    arrays = [rng.integers(0, 3, size=(37, 5)) for _ in range(n)]
    ins = [ck.tensor(a, device=f"cuda:{d}").to(getattr(ck, dtype)) for d, a in enumerate(arrays)]
    got = ck.comm.reduce_add(ins, destination=n - 1)
    assert got.device == ck.Device(n - 1) and got.dtype == getattr(ck, dtype)
    want = sum(arrays)
    if dtype == "bool":
        want = want > 0
    values = host(got.to(ck.float64)) if dtype not in ("complex64",) else host(got).real
    np.testing.assert_array_equal(values, want)


def test_reduce_add_defaults_and_single_input(two):
    a = two.ones(3, device="cuda:0")
    assert two.comm.reduce_add([a]).data_ptr() == a.data_ptr()
    b = two.ones(3, device="cuda:1")
    with two.device(1):
        r = two.comm.reduce_add([a, b])
    assert r.device == two.Device(1)
    np.testing.assert_array_equal(host(r), [2, 2, 2])


def test_reduce_add_coalesced(transport):
    n = ck.device_count()
    ins = [[ck.full((k + 1, 3), float(d + 1), device=f"cuda:{d}") for k in range(5)] +
           [ck.tensor(np.arange(100), device=f"cuda:{d}")] for d in range(n)]
    out = ck.comm.reduce_add_coalesced(ins, destination=0, buffer_size=64)
    assert isinstance(out, tuple) and len(out) == 6
    total = n * (n + 1) / 2
    for k in range(5):
        assert out[k].shape == (k + 1, 3) and out[k].device == ck.Device(0)
        np.testing.assert_array_equal(host(out[k]), np.full((k + 1, 3), total))
    np.testing.assert_array_equal(host(out[5]), np.arange(100) * n)


def test_scatter_and_gather(two):
    n = two.device_count()
    x = two.tensor(np.arange(30.0, dtype=np.float32).reshape(10, 3), device="cuda:0")
    parts = two.comm.scatter(x, devices())
    assert isinstance(parts, tuple) and sum(p.shape[0] for p in parts) == 10
    assert parts[0].data_ptr() == x.data_ptr()
    back = two.comm.gather(parts, destination=n - 1)
    assert back.device == two.Device(n - 1)
    np.testing.assert_array_equal(host(back), host(x))
    cpu = two.comm.gather(parts, destination="cpu")
    assert cpu.device.type == "cpu"
    with pytest.warns(FutureWarning):
        assert two.comm.gather(parts, destination=-1).device.type == "cpu"
    s = [two.Stream(device=1), two.Stream(device=0)]
    cols = two.comm.scatter(x, [1, 0], chunk_sizes=[2, 1], dim=1, streams=s)
    for st in s:
        st.synchronize()
    assert cols[0].shape == (10, 2) and cols[0].device == two.Device(1)
    np.testing.assert_array_equal(host(two.comm.gather(cols, dim=1, destination=0)), host(x))
    outs = [two.zeros(4, 3, device="cuda:1"), two.zeros(6, 3, device="cuda:0")]
    assert two.comm.scatter(x, out=outs)[0] is outs[0]
    np.testing.assert_array_equal(host(outs[1])[0], [12, 13, 14])
    dst = two.zeros(10, 3, device="cuda:1")
    assert two.comm.gather(outs, out=dst) is dst
    np.testing.assert_array_equal(host(dst), host(x))


def test_results_follow_current_streams(transport):
    """The source is written by work on device 0's current stream (a side stream) and the
    results are read after synchronizing only device 1's current stream (another side
    stream): the calls must order themselves with events (the C++ suite also checks that
    they return before the source's work ran)."""
    s0, s1 = ck.Stream(device=0), ck.Stream(device=1)
    with ck.stream(s1):
        other = ck.ones(1 << 20, device="cuda:1")
    with ck.stream(s0):
        src = ck.zeros(1 << 20, device="cuda:0")
        for _ in range(3):
            src.add_(ck.ones(1 << 20, device="cuda:0"))  # several ops queued on s0
        with ck.stream(s1):
            out = ck.comm.broadcast(src, [0, 1])
            total = ck.comm.reduce_add([src, other], destination=1)
    s1.synchronize()
    with ck.stream(s1):
        assert host(out[1])[-1] == 3.0
        assert host(total)[0] == 4.0


def test_bad_input_changes_nothing(two):
    n = two.device_count()
    a = two.ones(4, device="cuda:0")
    b = two.full((4,), 2.0, device="cuda:1")
    keep = [two.full((4,), 7.0, device=f"cuda:{d}") for d in (0, 1)]
    bad = [
        lambda: two.comm.broadcast(a, [0, 0]),
        lambda: two.comm.broadcast(a, [0, n]),
        lambda: two.comm.broadcast(a, out=[keep[1], two.zeros(4, device="cpu")]),
        lambda: two.comm.broadcast(a, out=[keep[1], two.zeros(5, device="cuda:0")]),
        lambda: two.comm.broadcast(a, out=[keep[1], two.zeros(4, dtype=two.int32, device="cuda:0")]),
        lambda: two.comm.broadcast_coalesced([a, b], [0, 1]),
        lambda: two.comm.reduce_add([a, two.zeros(5, device="cuda:1")]),
        lambda: two.comm.reduce_add([a, two.zeros(4, dtype=two.int32, device="cuda:1")]),
        lambda: two.comm.reduce_add([a, keep[0]]),
        lambda: two.comm.reduce_add([a, b], destination=n),
        lambda: two.comm.scatter(a, [0, 1], chunk_sizes=[1, 2]),
        lambda: two.comm.scatter(a, [0, 1], chunk_sizes=[5, -1]),
        lambda: two.comm.scatter(a, [0, 1], streams=[two.Stream(device=1), None]),
        lambda: two.comm.scatter(a, out=[keep[0], two.zeros(3, device="cuda:1")]),
        lambda: two.comm.scatter(a, [0, 1], out=[keep[0]]),
        lambda: two.comm.gather([a, two.zeros(4, 1, device="cuda:1")]),
        lambda: two.comm.gather([a, b], out=keep[1]),
        lambda: two.comm.gather([a, b], destination=n),
        lambda: two.comm.gather([a, b], destination=0, out=keep[0]),
    ]
    for i, f in enumerate(bad):
        with pytest.raises(ValueError):
            f()
    for k in keep:
        np.testing.assert_array_equal(host(k), [7, 7, 7, 7])
    with pytest.raises(TypeError):
        two.comm.broadcast(a, "cuda:0")  # a string is not a device list
    with pytest.raises(TypeError):
        two.comm.reduce_add(a)


def test_transport_setting(two):
    assert two.comm.get_transport() == "auto"
    with pytest.raises(ValueError, match="'auto', 'peer', 'nccl' or 'copy'"):
        two.comm.set_transport("fast")
    two.comm.set_transport("nccl")
    try:
        a, b = (two.zeros(4, dtype=two.int16, device=f"cuda:{d}") for d in (0, 1))
        with pytest.raises(NotImplementedError, match="16-bit"):
            two.comm.reduce_add([a, b])
    finally:
        two.comm.set_transport("auto")


def test_concurrent_calls_from_threads(two):
    """comm.* is thread-safe: the cached communicators and peer state are shared."""
    errors = []

    def work(k):
        try:
            for _ in range(5):
                x = two.full((1000,), float(k), device="cuda:0")
                out = two.comm.broadcast(x, [0, 1])
                s = two.comm.reduce_add(out, destination=0)
                assert host(s)[0] == 2 * k
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


# ---------------------------------------------------------------- GPU: torch as reference

def _torch_two():
    torch = pytest.importorskip("torch")
    if torch.cuda.device_count() < 2 or ck.device_count() < 2:
        pytest.skip("needs 2 GPUs and torch")
    return torch


@pytest.mark.gpu
@pytest.mark.parametrize("transport_name", TRANSPORTS)
def test_gpu_matches_torch(transport_name):
    torch = _torch_two()
    ck.comm.set_transport(transport_name)
    try:
        g = torch.Generator(device="cpu").manual_seed(0)
        x = torch.randn(1000, 33, generator=g).cuda(0)
        ref = torch.cuda.comm.broadcast(x, [0, 1])
        got = ck.comm.broadcast(x, [0, 1])  # torch tensor in, through DLPack
        for r, c in zip(ref, got):
            assert torch.equal(r, torch.from_dlpack(c))
        ins = [torch.randn(513, 7, generator=g).to(torch.float16).cuda(d) for d in (0, 1)]
        ref = torch.cuda.comm.reduce_add(ins, destination=1)
        got = torch.from_dlpack(ck.comm.reduce_add(ins, destination=1))
        torch.testing.assert_close(got, ref, rtol=1e-3, atol=1e-3)
        ts = [torch.randn(k + 3, generator=g).cuda(0) for k in range(20)]
        ref = torch.cuda.comm.broadcast_coalesced(ts, [0, 1], buffer_size=256)
        got = ck.comm.broadcast_coalesced(ts, [0, 1], buffer_size=256)
        for r, c in zip(ref[1], got[1]):
            assert torch.equal(r, torch.from_dlpack(c))
        lists = [[t.to(f"cuda:{d}") for t in ts] for d in (0, 1)]
        ref = torch.cuda.comm.reduce_add_coalesced(lists, destination=0, buffer_size=256)
        got = ck.comm.reduce_add_coalesced(lists, destination=0, buffer_size=256)
        for r, c in zip(ref, got):
            torch.testing.assert_close(torch.from_dlpack(c), r)
        y = torch.randn(10, 6, generator=g).cuda(0)
        ref = torch.cuda.comm.scatter(y, [0, 1], chunk_sizes=[3, 7])
        got = ck.comm.scatter(y, [0, 1], chunk_sizes=[3, 7])
        for r, c in zip(ref, got):
            assert torch.equal(r, torch.from_dlpack(c))
        ref = torch.cuda.comm.gather(list(ref), dim=0, destination=1)
        got = torch.from_dlpack(ck.comm.gather(list(got), dim=0, destination=1))
        assert torch.equal(ref, got)
    finally:
        ck.comm.set_transport("auto")


@pytest.mark.gpu
def test_gpu_large_transfers_are_exact():
    torch = _torch_two()
    x = torch.arange(1 << 26, dtype=torch.float32, device="cuda:0")  # 256 MiB
    out = ck.comm.broadcast(x, [0, 1])
    assert torch.equal(torch.from_dlpack(out[1]).cpu(), x.cpu())
    y = torch.ones(1 << 26, device="cuda:1")
    s = torch.from_dlpack(ck.comm.reduce_add([x, y], destination=0))
    assert torch.equal(s, x + 1)
