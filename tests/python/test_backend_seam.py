"""What the seam changes look like from Python: the emulated backend's GEMM (OpenBLAS) and
TF32 semantics, CUDA_VISIBLE_DEVICES on the emulated backend, vendor handles, stream ids."""
import ctypes.util
import json
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest


def run_emulated(code: str, **env) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh interpreter on the emulated backend with extra environment."""
    full = dict(os.environ, CUDAKIT_BACKEND="emulated")
    full.pop("CUDA_VISIBLE_DEVICES", None)
    full.update({k: v for k, v in env.items()})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full,
                          capture_output=True, text=True, timeout=120)


DEVICES_JSON = """
    import json, cudakit
    n = cudakit.device_count()
    print(json.dumps({"count": n,
                      "uuids": [cudakit.get_device_properties(i).uuid for i in range(n)],
                      "available": cudakit.is_available()}))
"""


def visible(value, machine="4"):
    env = {"CUDAKIT_EMULATED_DEVICES": machine}
    if value is not None:
        env["CUDA_VISIBLE_DEVICES"] = value
    r = run_emulated(DEVICES_JSON, **env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def machine_uuids():
    if os.environ.get("CUDAKIT_BACKEND") != "emulated":
        pytest.skip("emulated-backend specific")
    return visible(None)["uuids"]


# ---------------------------------------------------------------- CUDA_VISIBLE_DEVICES

@pytest.mark.parametrize("value,expected", [
    ("2,0", [2, 0]),            # order is the list's
    ("3", [3]),
    (" 1 , 2 ", [1, 2]),        # blanks around entries are ignored
    ("1gpu,2", [1, 2]),         # read like strtoul: leading digits count
    ("0,-1,1", [0]),            # a negative entry ends the list
    ("0,x,1", [0]),             # so does anything that is not a number
    ("1,7,2", [1]),             # and an index the machine does not have
    ("1,1", []),                # a repeated device empties the list
    ("", []),                   # empty: no devices
    ("-1", []),
])
def test_cuda_visible_devices_selects_and_orders_emulated_devices(machine_uuids, value, expected):
    got = visible(value)
    assert got["count"] == len(expected)
    assert got["uuids"] == [machine_uuids[i] for i in expected]
    assert got["available"] == bool(expected)


def test_cuda_visible_devices_accepts_uuid_prefixes(machine_uuids):
    got = visible(f"GPU-{machine_uuids[3][:8]},GPU-{machine_uuids[1]}")
    assert got["uuids"] == [machine_uuids[3], machine_uuids[1]]
    got = visible(f"GPU-{machine_uuids[2][:6]},3")  # a non-UUID entry ends a UUID list
    assert got["uuids"] == [machine_uuids[2]]
    assert visible("GPU-zzzz")["count"] == 0


def test_hidden_devices_are_reported_with_the_variable(emulated_only):
    r = run_emulated("""
        import cudakit
        try:
            cudakit.set_device(1)
        except ValueError as e:
            print(e)
    """, CUDAKIT_EMULATED_DEVICES="4", CUDA_VISIBLE_DEVICES="2")
    assert r.returncode == 0, r.stderr
    assert "1 device(s)" in r.stdout and "CUDA_VISIBLE_DEVICES" in r.stdout


# ---------------------------------------------------------------- matmul on emulated

def test_emulated_matmul_is_fast_and_right(ck, emulated_only):
    import cudakit.tensor as T
    rng = np.random.default_rng(0)
    a = rng.standard_normal((1024, 1024), dtype=np.float32)
    b = rng.standard_normal((1024, 1024), dtype=np.float32)
    ta, tb = T.asarray(a, device=0), T.asarray(b, device=0)
    (ta @ tb).cpu()  # warm-up (BLAS threads, allocator)
    t0 = time.perf_counter()
    got = (ta @ tb).cpu().numpy()
    elapsed = time.perf_counter() - t0
    np.testing.assert_allclose(got, a @ b, rtol=1e-3, atol=1e-3)
    # 4.6 s with the hand-written loop on 2 cores; OpenBLAS takes ~0.05 s. A wide margin for
    # loaded CI machines, still far below the loop. (A build without CBLAS falls back to a
    # plain loop and warns at configure time; dev.sh installs libopenblas-dev.)
    if ctypes.util.find_library("openblas"):
        assert elapsed < 1.5, f"1024^2 float32 matmul took {elapsed:.2f} s"
    # Transposed and strided operands go through BLAS's transpose flags / a copy.
    np.testing.assert_allclose((tb.t() @ ta[::2].t()).cpu().numpy(), b.T @ a[::2].T,
                               rtol=1e-3, atol=1e-3)


def test_tf32_is_supported_and_honoured_on_an_emulated_sm90(ck, emulated_only):
    import cudakit.tensor as T
    assert ck.get_device_capability() >= (8, 0)
    assert ck.is_tf32_supported()
    x = np.array([[1.0 + 2.0 ** -20]], dtype=np.float32)  # not representable in TF32
    one = np.ones((1, 1), dtype=np.float32)
    tx, tone = T.asarray(x, device=0), T.asarray(one, device=0)
    prev = T.matmul_allow_tf32()
    try:
        T.set_matmul_allow_tf32(False)
        assert (tx @ tone).cpu().numpy()[0, 0] == x[0, 0]
        T.set_matmul_allow_tf32(True)
        assert (tx @ tone).cpu().numpy()[0, 0] == 1.0  # inputs rounded as tensor cores do
    finally:
        T.set_matmul_allow_tf32(prev)


def test_tf32_and_bf16_follow_the_emulated_capability(emulated_only):
    r = run_emulated("""
        import cudakit
        print(cudakit.is_tf32_supported(), cudakit.is_bf16_supported(False),
              cudakit.is_bf16_supported())
    """, CUDAKIT_EMULATED_CAPABILITY="7.5")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "False", "True"]


# ---------------------------------------------------------------- handles, streams

def test_vendor_handles_are_refused_clearly_on_emulated(ck, emulated_only):
    for call in (ck.current_blas_handle, ck.current_solver_handle):
        with pytest.raises(NotImplementedError, match="emulated") as info:
            call()
        assert "current_" in str(info.value)


def test_stream_ids_are_unique(ck):
    streams = [ck.Stream() for _ in range(8)]
    ids = {s.stream_id for s in streams}
    assert len(ids) == len({s.cuda_stream for s in streams})
    assert ck.default_stream().stream_id not in ids
    assert all(isinstance(i, int) for i in ids)
