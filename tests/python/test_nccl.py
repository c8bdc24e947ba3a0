"""cudakit.nccl: torch.cuda.nccl's single-process collectives, Communicator ranks in threads
and in processes (started by `python -m cudakit.launch` and by hand), the environment and
file rendezvous, failures (a killed rank, abort, timeouts) and the launcher's own behaviour.
GPU tests compare with torch.cuda.nccl."""
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import cudakit as ck

nccl = ck.nccl


@pytest.fixture
def engine(ck):
    try:
        ck.nccl.version()
    except NotImplementedError as e:
        pytest.skip(f"no collectives engine: {e}")
    return ck


@pytest.fixture
def two(engine):
    if engine.device_count() < 2:
        pytest.skip("needs 2 devices")
    return engine


def host(t):
    return t.cpu().numpy()


def per_device(fill):
    return [ck.tensor(fill(d), device=f"cuda:{d}") for d in range(ck.device_count())]


# ---------------------------------------------------------------- torch.cuda.nccl's API

def test_version_and_ids(engine):
    v = nccl.version()
    assert isinstance(v, tuple) and len(v) in (3, 4) and v[0] == 2
    uid = nccl.unique_id()
    assert isinstance(uid, bytes) and len(uid) == 128 and uid != nccl.unique_id()
    assert (nccl.SUM, nccl.PROD, nccl.MAX, nccl.MIN, nccl.AVG) == (0, 1, 2, 3, 4)


def test_is_available(two):
    a, b = ck.zeros(4, device="cuda:0"), ck.zeros(4, device="cuda:1")
    assert nccl.is_available([a, b])
    assert not nccl.is_available([a, a])
    assert not nccl.is_available([ck.zeros(4, device="cpu")])
    assert not nccl.is_available([ck.zeros(4, 4, device="cuda:0").t()])
    assert not nccl.is_available([a, "x"])


@pytest.mark.parametrize("op,fn", [(nccl.SUM, np.sum), (nccl.PROD, np.prod), (nccl.MAX, np.max),
                                   (nccl.MIN, np.min), (nccl.AVG, np.mean)])
def test_all_reduce_ops(two, op, fn):
    rng = np.random.default_rng(op)
    arrays = [rng.integers(1, 5, size=100).astype(np.float64) for _ in range(ck.device_count())]
    ins = [ck.tensor(a, device=f"cuda:{d}") for d, a in enumerate(arrays)]
    nccl.all_reduce(ins, op=op)
    want = fn(np.stack(arrays), axis=0)
    for t in ins:
        np.testing.assert_allclose(host(t), want)


def test_reduce_broadcast_gather_scatter(two):
    n = ck.device_count()
    ins = per_device(lambda d: np.full(6, d + 1, dtype=np.int64))
    out = ck.zeros(6, dtype=ck.int64, device=f"cuda:{n - 1}")
    nccl.reduce(ins, output=out, root=n - 1)
    np.testing.assert_array_equal(host(out), np.full(6, n * (n + 1) // 2))
    with pytest.warns(FutureWarning):
        nccl.reduce(ins, outputs=[ck.zeros(6, dtype=ck.int64, device=f"cuda:{d}") for d in range(n)], root=0)
    bs = per_device(lambda d: np.arange(5, dtype=np.float32) * (d + 1))
    nccl.broadcast(bs, root=1)
    for t in bs:
        np.testing.assert_array_equal(host(t), np.arange(5) * 2)
    gs = per_device(lambda d: np.full(3, d, dtype=np.int32))
    outs = [ck.zeros(3 * n, dtype=ck.int32, device=f"cuda:{d}") for d in range(n)]
    nccl.all_gather(gs, outs)
    for t in outs:
        np.testing.assert_array_equal(host(t), np.repeat(np.arange(n), 3))
    rs = per_device(lambda d: np.arange(2 * n, dtype=np.float32))
    routs = [ck.zeros(2, device=f"cuda:{d}") for d in range(n)]
    nccl.reduce_scatter(rs, routs, op=nccl.SUM)
    for d, t in enumerate(routs):
        np.testing.assert_array_equal(host(t), n * np.arange(2 * d, 2 * d + 2))


def test_streams_argument(two):
    n = ck.device_count()
    streams = [ck.Stream(device=d) for d in range(n)]
    ins = []
    for d in range(n):
        with ck.stream(streams[d]):
            x = ck.zeros(1 << 18, device=f"cuda:{d}")
            for _ in range(d + 1):
                x.add_(ck.ones(1 << 18, device=f"cuda:{d}"))  # queued on the side stream
            ins.append(x)
    nccl.all_reduce(ins, streams=streams)
    for s in streams:
        s.synchronize()
    for d, t in enumerate(ins):
        with ck.stream(streams[d]):
            assert host(t)[-1] == n * (n + 1) / 2
    with pytest.raises(ValueError):
        nccl.all_reduce(ins, streams=[streams[1]] + [None] * (n - 1))


def test_bad_inputs(two):
    a, b = ck.ones(4, device="cuda:0"), ck.ones(4, device="cuda:1")
    with pytest.raises(TypeError, match="collection of tensors"):
        nccl.all_reduce(a)
    for f in [lambda: nccl.all_reduce([a, ck.ones(5, device="cuda:1")]),
              lambda: nccl.all_reduce([a, b.to(ck.int32)]),
              lambda: nccl.all_reduce([a, a]),
              lambda: nccl.all_reduce([a, b], [a]),
              lambda: nccl.all_reduce([a, b], op=7),
              lambda: nccl.reduce([a, b], root=2),
              lambda: nccl.broadcast([a, b], root=-1),
              lambda: nccl.all_gather([a, b], [a, b]),
              lambda: nccl.all_reduce([a.to(ck.int16), b.to(ck.int16)])]:
        with pytest.raises(ValueError):
            f()
    np.testing.assert_array_equal(host(a), [1, 1, 1, 1])


def test_init_rank_and_comms_in_threads(two):
    """torch.cuda.nccl.init_rank in one thread per device, then the single-process
    functions driven with those communicators (comms=...)."""
    n = ck.device_count()
    uid = nccl.unique_id()
    comms = [None] * n

    def make(r):
        with ck.device(r):
            comms[r] = nccl.init_rank(n, uid, r)

    threads = [threading.Thread(target=make, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [c.rank for c in comms] == list(range(n))
    ins = per_device(lambda d: np.full(3, float(d)))
    nccl.all_reduce(ins, comms=comms)
    np.testing.assert_array_equal(host(ins[0]), np.full(3, n * (n - 1) / 2))
    with pytest.raises(ValueError):
        nccl.all_reduce(ins, comms=comms[::-1])


# ---------------------------------------------------------------- Communicator in threads

def run_ranks(n, fn):
    errors = []

    def body(r):
        try:
            dev = r % ck.device_count()
            with ck.stream(ck.Stream(device=dev)):  # ranks sharing a device need their own stream
                fn(r, dev)
        except BaseException as e:  # noqa: BLE001
            errors.append((r, e))

    threads = [threading.Thread(target=body, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors


# Ranks in threads (and processes) take a device each: NCCL refuses two ranks of one
# communicator on a GPU.
def test_communicator_collectives_in_threads(two):
    n = ck.device_count()
    uid = nccl.unique_id()

    def rank(r, dev):
        c = nccl.Communicator(n, uid, r, device=dev, timeout=60)
        assert (c.rank, c.size, c.device) == (r, n, ck.Device(dev))
        x = ck.full((1000,), float(r + 1), device=f"cuda:{dev}")
        c.all_reduce(x)
        g = ck.zeros(1000 * n, device=f"cuda:{dev}")
        c.all_gather(x, g)
        y = ck.full((4,), float(r), device=f"cuda:{dev}")
        c.broadcast(y, root=n - 1)
        z = ck.full((2 * n,), float(r), device=f"cuda:{dev}")
        out = ck.zeros(2, device=f"cuda:{dev}")
        c.reduce_scatter(z, out, op=nccl.MAX)
        red = ck.full((3,), 1.0, device=f"cuda:{dev}")
        c.reduce(red, root=0)
        with nccl.group():
            c.send(x, (r + 1) % n)
            got = ck.zeros(1000, device=f"cuda:{dev}")
            c.recv(got, (r - 1) % n)
        c.synchronize()
        k = n * (n + 1) / 2
        assert host(x)[0] == k and host(g)[-1] == k and host(y)[0] == n - 1
        assert host(out)[1] == n - 1 and host(got)[0] == k
        if r == 0:
            assert host(red)[0] == n
        assert c.error() is None

    run_ranks(n, rank)


def test_communicator_nonblocking_abort_and_timeout(two):
    uid = nccl.unique_id()
    seen = {}

    def rank(r, dev):
        if r == 1:
            time.sleep(0.3)
        c = nccl.Communicator(2, uid, r, device=dev, blocking=False, timeout=30)
        if r == 0:
            seen["ready_at_once"] = c.is_ready()
        c.wait_ready()
        x = ck.ones(8, device=f"cuda:{dev}")
        c.all_reduce(x)
        c.synchronize()
        assert host(x)[0] == 2
        if r == 0:
            time.sleep(0.2)
            c.abort()
            with pytest.raises(nccl.NcclError):
                c.check()
            return
        t0 = time.monotonic()
        c.all_reduce(x)  # rank 0 aborts instead of joining
        with pytest.raises(nccl.NcclError, match="abort") as info:
            c.synchronize()
        assert info.value.code == 6 and info.value.code_name == "ncclRemoteError"
        assert time.monotonic() - t0 < 10

    run_ranks(2, rank)
    assert seen["ready_at_once"] is False
    with pytest.raises(nccl.NcclError) as info:
        nccl.Communicator(2, nccl.unique_id(), 0, timeout=0.3)  # nobody else comes
    assert info.value.timed_out


def test_communicator_bad_arguments(engine):
    uid = nccl.unique_id()
    with pytest.raises(ValueError):
        nccl.Communicator(2, uid, 5)
    with pytest.raises(ValueError):
        nccl.Communicator(2, b"short", 0)
    with pytest.raises(TypeError):
        nccl.Communicator(2, "not bytes", 0)
    with pytest.raises(ValueError):
        nccl.Communicator(1, uid, 0, timeout=-1)
    c = nccl.Communicator(1, nccl.unique_id(), 0, device=0)
    x = ck.ones(4, device="cuda:0")
    with pytest.raises(ValueError):
        c.all_reduce(x, ck.ones(5, device="cuda:0"))
    with pytest.raises(ValueError):
        c.send(x, peer=1)
    with pytest.raises(ValueError):
        c.all_reduce(x, op=9)
    c.all_reduce(x)
    c.synchronize()
    c.destroy()
    with pytest.raises(ValueError, match="empty"):
        c.all_reduce(x)


# ---------------------------------------------------------------- separate processes

WORKER = textwrap.dedent("""
    import os, sys, signal, time
    import numpy as np
    import cudakit as ck
    from cudakit import nccl

    def say(text):  # one write: ranks share the launcher's pipe
        os.write(1, (text + "\\n").encode())

    mode = sys.argv[1]
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if mode == "file":
        c = nccl.Communicator.from_file(sys.argv[2], world, rank, device=rank % ck.device_count(), timeout=60)
    else:
        c = nccl.Communicator.from_env(timeout=float(os.environ.get("TEST_TIMEOUT", "60")))
    dev = c.device.index
    x = ck.full((100_000,), float(rank + 1), device=f"cuda:{dev}")
    c.all_reduce(x)
    c.synchronize()
    assert x.cpu().numpy()[-1] == world * (world + 1) / 2, x
    if mode in ("env", "file"):
        g = ck.zeros(4 * world, device=f"cuda:{dev}")
        c.all_gather(ck.full((4,), float(rank), device=f"cuda:{dev}"), g)
        with nccl.group():
            c.send(x, (rank + 1) % world)
            c.recv(x, (rank - 1) % world)
        c.synchronize()
        assert list(g.cpu().numpy()[::4]) == list(range(world))
        say(f"rank {rank} ok")
        sys.exit(0)
    if mode == "kill":
        if rank == 1:
            time.sleep(0.3)
            os.kill(os.getpid(), signal.SIGKILL)
        t0 = time.monotonic()
        c.all_reduce(x)
        try:
            c.synchronize()
        except nccl.NcclError as e:
            say(f"rank 0 got NcclError after {time.monotonic() - t0:.2f}s: {e}")
        else:
            sys.exit(3)
        # The communicator's failure is its own: the survivor's default stream still works,
        # before and after abort().
        for when in ("after the peer died", "after abort()"):
            y = ck.full((4,), 2.0, device=f"cuda:{dev}")
            y += y
            ck.synchronize(dev)
            assert y.cpu().numpy().tolist() == [4.0] * 4, (when, y)
            say(f"rank 0 default stream works {when}")
            c.abort()
        sys.exit(0)
    if mode == "fail":
        if rank == 1:
            sys.exit(7)
        time.sleep(60)
""")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_env(**extra):
    env = dict(os.environ)
    env.update({k: str(v) for k, v in extra.items()})
    return env


@pytest.fixture
def worker(tmp_path, two):
    path = tmp_path / "worker.py"
    path.write_text(WORKER)
    return str(path)


def launch(worker_path, *args, nproc=2, timeout=120, **env):
    cmd = [sys.executable, "-m", "cudakit.launch", "--nproc-per-node", str(nproc), worker_path, *args]
    return subprocess.run(cmd, env=child_env(**env), capture_output=True, text=True, timeout=timeout)


def test_launch_env_rendezvous(worker):
    n = min(4, ck.device_count())
    r = launch(worker, "env", nproc=n)
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted(line for line in r.stdout.splitlines() if line.endswith("ok")) == [f"rank {i} ok" for i in range(n)]


def test_file_rendezvous_between_processes(worker, tmp_path):
    idfile = tmp_path / "id"
    procs = [subprocess.Popen([sys.executable, worker, "file", str(idfile)], env=child_env(RANK=r, WORLD_SIZE=2),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(2)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    # the ranks' whole output (a list's repr would be cut short)
    assert [p.returncode for p in procs] == [0, 0], "\n".join(f"--- rank {r}:\n{o}" for r, o in enumerate(outs))
    assert not idfile.exists()


def test_killed_rank_gives_the_survivor_an_error(worker):
    """SIGKILL one rank while the other waits in a collective: the survivor must get
    NcclError within its timeout (here at once: the engine notices the dead process), and its
    default stream keeps working (before and after abort())."""
    port = free_port()
    env = dict(WORLD_SIZE=2, MASTER_ADDR="127.0.0.1", MASTER_PORT=port, TEST_TIMEOUT=30)
    procs = [subprocess.Popen([sys.executable, worker, "kill"], env=child_env(RANK=r, LOCAL_RANK=r, **env),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(2)]
    t0 = time.monotonic()
    out0 = procs[0].communicate(timeout=120)[0]
    procs[1].communicate(timeout=120)
    assert procs[0].returncode == 0, out0
    assert procs[1].returncode == -signal.SIGKILL
    assert "NcclError" in out0
    assert "default stream works after the peer died" in out0
    assert "default stream works after abort()" in out0
    assert time.monotonic() - t0 < 60


def test_launcher_stops_the_job_when_a_rank_fails(worker):
    t0 = time.monotonic()
    r = launch(worker, "fail", timeout=120)
    assert r.returncode == 7, r.stderr
    assert "rank 1" in r.stderr and "exited with code 7" in r.stderr
    assert time.monotonic() - t0 < 50  # rank 0 (sleeping 60 s) was stopped


def test_launcher_arguments(tmp_path):
    script = tmp_path / "env.py"
    # One write per line: the ranks share the pipe and `python -u` would split print()'s.
    script.write_text("import os\nos.write(1, (' '.join(os.environ[k] for k in ('RANK', 'LOCAL_RANK', 'WORLD_SIZE', "
                      "'LOCAL_WORLD_SIZE', 'GROUP_RANK', 'MASTER_ADDR', 'MASTER_PORT')) + '\\n').encode())\n")
    r = subprocess.run([sys.executable, "-m", "cudakit.launch", "--nnodes", "2", "--node-rank", "1",
                        "--master-port", "29999", "--nproc_per_node", "2", str(script)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert sorted(line for line in r.stdout.splitlines() if line) == ["2 0 4 2 1 127.0.0.1 29999",
                                                                      "3 1 4 2 1 127.0.0.1 29999"]
    r = subprocess.run([sys.executable, "-m", "cudakit.launch", "--nnodes", "2", str(script)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "--master-port is required" in r.stderr


def test_from_env_errors(engine, monkeypatch):
    for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK"):
        monkeypatch.delenv(k, raising=False)
    with pytest.raises(ValueError, match="RANK"):
        nccl.Communicator.from_env()
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "two")
    with pytest.raises(ValueError, match="WORLD_SIZE='two'"):
        nccl.Communicator.from_env()
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "70000")
    with pytest.raises(ValueError, match="MASTER_PORT"):
        nccl.Communicator.from_env()
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    c = nccl.Communicator.from_env(device=0)
    assert c.size == 1


# ---------------------------------------------------------------- GPU: torch as reference

def _torch_two():
    torch = pytest.importorskip("torch")
    if torch.cuda.device_count() < 2 or ck.device_count() < 2:
        pytest.skip("needs 2 GPUs and torch")
    return torch


@pytest.mark.gpu
def test_gpu_single_process_matches_torch():
    torch = _torch_two()
    g = torch.Generator().manual_seed(1)
    for op, name in [(0, "sum"), (1, "prod"), (2, "max"), (3, "min"), (4, "avg")]:
        base = [torch.rand(4097, generator=g) + 0.5 for _ in range(2)]
        ref = [b.cuda(d) for d, b in enumerate(base)]
        mine = [b.cuda(d) for d, b in enumerate(base)]
        torch.cuda.nccl.all_reduce(ref, op=op)
        nccl.all_reduce(mine, op=op)
        for r, m in zip(ref, mine):
            torch.testing.assert_close(m, r, msg=name)
    ins = [torch.arange(12.0, device=f"cuda:{d}") * (d + 1) for d in range(2)]
    ref_out = [torch.empty(24, device=f"cuda:{d}") for d in range(2)]
    my_out = [torch.empty(24, device=f"cuda:{d}") for d in range(2)]
    torch.cuda.nccl.all_gather(ins, ref_out)
    nccl.all_gather(ins, my_out)
    for r, m in zip(ref_out, my_out):
        assert torch.equal(r, m)
    ref_rs = [torch.empty(6, device=f"cuda:{d}") for d in range(2)]
    my_rs = [torch.empty(6, device=f"cuda:{d}") for d in range(2)]
    torch.cuda.nccl.reduce_scatter(ins, ref_rs)
    nccl.reduce_scatter(ins, my_rs)
    for r, m in zip(ref_rs, my_rs):
        assert torch.equal(r, m)
    b_ref = [torch.arange(5.0, device=f"cuda:{d}") + d for d in range(2)]
    b_mine = [t.clone() for t in b_ref]
    torch.cuda.nccl.broadcast(b_ref, root=1)
    nccl.broadcast(b_mine, root=1)
    for r, m in zip(b_ref, b_mine):
        assert torch.equal(r, m)
    out_ref, out_mine = torch.empty(12, device="cuda:0"), torch.empty(12, device="cuda:0")
    torch.cuda.nccl.reduce(ins, output=out_ref, root=0)
    nccl.reduce(ins, output=out_mine, root=0)
    assert torch.equal(out_ref, out_mine)
