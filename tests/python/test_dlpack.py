"""DLPack and __cuda_array_interface__: capsules, round trips, stream semantics, errors."""
import numpy as np
import pytest

import cudakit
import cudakit.tensor as T

kDLCPU, kDLCUDA, kDLCUDAHost = 1, 2, 3


@pytest.fixture
def dev():
    if not cudakit.is_available():
        pytest.skip(f"no device on backend {cudakit.backend_name()}")
    return "cuda:0"


def test_device_reporting(dev):
    assert T.zeros(2, device=dev).__dlpack_device__() == (kDLCUDA, 0)
    assert T.zeros(2, device="cpu").__dlpack_device__() == (kDLCPU, 0)
    assert T.zeros(2, device="cpu", pin_memory=True).__dlpack_device__() == (kDLCUDAHost, 0)


def test_capsule_names_and_versioning(dev):
    t = T.arange(6, device=dev)
    legacy = t.__dlpack__()
    versioned = t.__dlpack__(max_version=(1, 0))
    assert "dltensor" in repr(legacy) and "dltensor_versioned" not in repr(legacy)
    assert "dltensor_versioned" in repr(versioned)
    r1, r2 = T.from_dlpack(legacy), T.from_dlpack(versioned)
    assert r1.data_ptr() == t.data_ptr() == r2.data_ptr()  # zero-copy
    assert r1.tolist() == r2.tolist() == list(range(6))
    assert "used_dltensor" in repr(legacy)


def test_capsule_consumed_twice_is_an_error(dev):
    cap = T.arange(3, device=dev).__dlpack__()
    T.from_dlpack(cap)
    with pytest.raises(ValueError, match="already consumed"):
        T.from_dlpack(cap)


def test_invalid_inputs():
    with pytest.raises(ValueError, match="__dlpack__"):
        T.from_dlpack(42)


def test_round_trip_cudakit_keeps_strides_and_storage(dev):
    a = T.arange(12, dtype=T.float32, device=dev).view(3, 4)
    v = a.t()[1:]
    r = T.from_dlpack(v)
    assert r.shape == v.shape and r.stride() == v.stride() and r.data_ptr() == v.data_ptr()
    del a, v
    assert r.tolist() == [[1, 5, 9], [2, 6, 10], [3, 7, 11]]  # storage kept alive


def test_numpy_round_trips_via_host(dev):
    x = np.arange(20, dtype=np.int16).reshape(4, 5)[:, ::2]
    t = T.from_dlpack(x)  # numpy producer, zero-copy, strided
    assert t.data_ptr() == x.ctypes.data and t.shape == (4, 3)
    y = np.from_dlpack(t)  # host tensor to numpy
    assert np.shares_memory(x, y) and np.array_equal(x, y)
    d = t.to(dev)
    with pytest.raises((BufferError, RuntimeError, TypeError, ValueError)):
        np.from_dlpack(d)  # kDLCUDA: NumPy refuses device memory, also emulated
    back = np.from_dlpack(d.cpu())
    assert np.array_equal(back, x)


def test_dl_device_and_copy_arguments(dev):
    d = T.arange(4, device=dev)
    cap = d.__dlpack__(max_version=(1, 0), dl_device=(kDLCPU, 0))
    h = T.from_dlpack(cap)
    assert not h.is_cuda and h.tolist() == [0, 1, 2, 3]
    c = T.from_dlpack(d.__dlpack__(max_version=(1, 0), copy=True))
    assert c.data_ptr() != d.data_ptr()
    with pytest.raises(BufferError):
        d.__dlpack__(dl_device=(kDLCPU, 0), copy=False)
    with pytest.raises(ValueError, match="stream=0"):
        d.__dlpack__(stream=0)


def test_stream_synchronization_between_producer_and_consumer(dev):
    s = cudakit.Stream()
    with cudakit.stream(s):
        t = T.zeros(1 << 16, device=dev)
        t.fill_(3)
        # Producer's current stream is s; the consumer uses the legacy default stream (1):
        # __dlpack__ must make the consumer's stream wait for s.
        cap = t.__dlpack__(stream=1)
    r = T.from_dlpack(cap)
    assert r.sum().item() == 3 * (1 << 16)


def test_cuda_array_interface(dev):
    a = T.arange(6, dtype=T.float32, device=dev).view(2, 3)
    cai = a.__cuda_array_interface__
    assert cai["version"] == 3 and cai["shape"] == (2, 3) and cai["typestr"] == "<f4"
    assert cai["data"] == (a.data_ptr(), False) and cai["strides"] is None
    assert cai["stream"] in (1,) or cai["stream"] > 2
    assert a.t().__cuda_array_interface__["strides"] == (4, 12)
    with pytest.raises(AttributeError):
        T.zeros(2, device="cpu").__cuda_array_interface__


@pytest.mark.gpu
def test_torch_cupy_interop_zero_copy():
    """On the H200: zero-copy both ways with whichever of torch/CuPy/JAX is installed."""
    tested = 0
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and torch.cuda.is_available():
        x = torch.arange(10, device="cuda", dtype=torch.float32)
        c = T.from_dlpack(x)
        assert c.data_ptr() == x.data_ptr() and c.tolist() == x.tolist()
        back = torch.from_dlpack(c)
        assert back.data_ptr() == x.data_ptr()
        tested += 1
    try:
        import cupy
        y = cupy.arange(10, dtype=cupy.float32)
        c = T.from_dlpack(y)
        assert c.data_ptr() == y.data.ptr
        z = cupy.from_dlpack(c)
        assert z.data.ptr == y.data.ptr
        w = cupy.asarray(c)  # __cuda_array_interface__
        assert w.data.ptr == y.data.ptr
        tested += 1
    except ImportError:
        pass
    import os
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # share the GPU politely
    try:
        import jax
        import jax.numpy as jnp
        j = jnp.arange(10, dtype=jnp.float32)
        if j.devices().pop().platform == "gpu":
            ptr = j.unsafe_buffer_pointer()
            c = T.from_dlpack(j)
            assert c.data_ptr() == ptr and c.tolist() == list(range(10))
            back = jnp.from_dlpack(c)  # and back into JAX without a copy
            assert back.unsafe_buffer_pointer() == ptr
            assert back.tolist() == list(range(10))
            tested += 1
    except ImportError:
        pass
    if not tested:
        pytest.skip("none of torch/cupy/jax with CUDA installed")
