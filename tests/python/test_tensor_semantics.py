"""torch semantics of cudakit.Tensor (issue 14.4) and checked sizes (issue 14.2), on any
backend: elementwise comparisons and pow, Python scalars from one-element tensors, identity
hashing, the cudakit.tensor() factory, the one Device type, and sizes that cannot exist."""
from __future__ import annotations

import ctypes
import math
import pickle

import numpy as np
import pytest

import cudakit as ck


@pytest.fixture(params=["cuda", "cpu"])
def dev(request):
    if request.param == "cuda" and not ck.is_available():
        pytest.skip(f"no device on backend {ck.backend_name()}")
    return request.param


# ---- comparisons ----
@pytest.mark.parametrize("op", ["==", "!=", "<", "<=", ">", ">="])
@pytest.mark.parametrize("a_dt,b_dt", [("int32", "int64"), ("float32", "float64"), ("uint8", "int16"),
                                       ("bool", "bool"), ("float16", "int8")])
def test_comparisons_broadcast_vs_numpy(dev, op, a_dt, b_dt):
    rng = np.random.default_rng(3)
    a = rng.integers(0, 4, (3, 1, 4)).astype(a_dt)
    b = rng.integers(0, 4, (5, 1)).astype(b_dt)
    ta, tb = ck.asarray(a, device=dev), ck.asarray(b, device=dev)
    r = eval(f"ta {op} tb")
    assert r.dtype == ck.bool and r.shape == (3, 5, 4) and r.device.type == dev
    np.testing.assert_array_equal(r.cpu().numpy(), eval(f"a {op} b"))


def test_comparisons_with_scalars_both_orders(dev):
    t = ck.tensor([1, 2, 3], device=dev)
    assert (t < 2).tolist() == [True, False, False]
    assert (2 < t).tolist() == [False, False, True]  # reflected: t.__gt__(2)
    assert (t == 2).tolist() == [False, True, False]
    assert (2 == t).tolist() == [False, True, False]
    assert (t >= 2.5).tolist() == [False, False, True]  # compared in float (promotion)
    assert (t != 2).tolist() == [True, False, True]
    nan = ck.tensor([float("nan"), 1.0], device=dev)
    assert (nan != nan).tolist() == [True, False] and (nan == nan).tolist() == [False, True]
    c = ck.tensor([1 + 2j, 3j], device=dev)
    assert (c == 1 + 2j).tolist() == [True, False]
    assert isinstance(ck.ones(3, device=dev) == ck.ones(3, device=dev), ck.Tensor)  # elementwise
    assert (ck.ones(3, device=dev) == ck.ones(3, device=dev)).tolist() == [True] * 3
    assert (t == "x") is False and (t != None) is True  # noqa: E711  (not comparable: identity)
    assert t.eq(2).tolist() == [False, True, False] and t.ge(ck.tensor([3], device=dev)).tolist() == [False, False, True]


# ---- pow ----
def test_pow_matches_numpy(dev):
    a = np.array([[0.5, 1.0, 2.0], [3.0, 4.0, 9.0]], dtype=np.float32)
    t = ck.asarray(a, device=dev)
    np.testing.assert_allclose((t ** 2).cpu().numpy(), a ** 2, rtol=1e-6)
    np.testing.assert_allclose((t ** 0.5).cpu().numpy(), a ** 0.5, rtol=1e-6)
    np.testing.assert_allclose((2 ** t).cpu().numpy(), 2 ** a, rtol=1e-6)  # __rpow__
    np.testing.assert_allclose((t ** t).cpu().numpy(), a ** a, rtol=1e-5)
    np.testing.assert_allclose(ck.pow(t, 3).cpu().numpy(), a ** 3, rtol=1e-6)
    np.testing.assert_allclose(t.pow(ck.tensor([1.0, 2.0, 0.5], device=dev)).cpu().numpy(),
                               a ** np.array([1.0, 2.0, 0.5], dtype=np.float32), rtol=1e-6)
    i = ck.tensor([-3, -1, 0, 2, 5], device=dev)
    assert (i ** 3).tolist() == [-27, -1, 0, 8, 125] and (i ** 3).dtype == ck.int64
    assert (i ** 0.5).dtype == ck.float32  # promoted like torch
    assert (2 ** ck.tensor([0, 10], dtype=ck.int32, device=dev)).tolist() == [1, 1024]
    assert (ck.tensor([1 + 1j, 2j], device=dev) ** 2).tolist() == [2j, -4 + 0j]
    with pytest.raises(ValueError, match="Integers to negative integer powers"):
        i ** -2


# ---- Python scalars from one-element tensors ----
@pytest.mark.parametrize("shape", [(), (1,), (1, 1), (1, 1, 1)])
def test_scalar_conversions_of_any_one_element_shape(dev, shape):
    f = ck.full(shape, 2.75, device=dev)
    assert f.item() == 2.75 and float(f) == 2.75 and int(f) == 2 and bool(f) is True
    i = ck.full(shape, 7, device=dev)
    assert i.item() == 7 and isinstance(i.item(), int) and int(i) == 7 and float(i) == 7.0
    assert [10, 20, 30, 40, 50, 60, 70, 80][i] == 80  # __index__
    assert bool(ck.zeros(shape, device=dev)) is False
    assert complex(ck.full(shape, 1 + 2j, device=dev)) == 1 + 2j
    assert ck.full(shape, True, device=dev).item() is True


def test_int_of_non_finite_float_raises_like_python(dev):
    with pytest.raises(ValueError, match="NaN"):
        int(ck.tensor([float("nan")], device=dev))
    with pytest.raises(OverflowError):
        int(ck.tensor([float("inf")], device=dev))


def test_identity_hash():
    a, b = ck.ones(2, device="cpu"), ck.ones(2, device="cpu")
    assert hash(a) == id(a) and hash(a) != hash(b)
    d = {a: "a", b: "b"}
    assert d[a] == "a" and d[b] == "b" and a in {a} and b not in {a}


# ---- cudakit.tensor ----
def test_tensor_factory_infers_dtypes_like_torch(ck):
    assert ck.tensor(5).dtype == ck.int64 and ck.tensor(5).shape == ()
    assert ck.tensor(2.5).dtype == ck.float32
    assert ck.tensor(True).dtype == ck.bool
    assert ck.tensor(1j).dtype == ck.complex64
    assert ck.tensor([]).dtype == ck.float32 and ck.tensor([]).shape == (0,)
    assert ck.tensor([[], []]).shape == (2, 0)
    assert ck.tensor([1, 2.5]).dtype == ck.float32
    assert ck.tensor([True, 2]).tolist() == [1, 2]
    assert ck.tensor([[1, 2], [3, 4]]).tolist() == [[1, 2], [3, 4]]
    assert ck.tensor(((1, 2), (3, 4))).shape == (2, 2)
    assert ck.tensor(range(4)).tolist() == [0, 1, 2, 3]
    assert ck.tensor([np.float32(1.5), np.int64(2)]).dtype == ck.float32
    assert ck.tensor([ck.tensor(1), ck.tensor(2)]).tolist() == [1, 2]
    assert ck.tensor([2**63 - 1]).tolist() == [2**63 - 1]
    assert ck.tensor([1, 2], dtype=ck.float16).dtype == ck.float16
    assert ck.tensor([1.7, -1.7], dtype=ck.int32).tolist() == [1, -1]  # truncation, as torch


def test_tensor_factory_devices_and_copies():
    if not ck.is_available():
        pytest.skip("no device")
    t = ck.tensor([1, 2])
    assert t.is_cuda and t.device == ck.Device("cuda", ck.current_device())
    h = ck.tensor([1, 2], device="cpu")
    assert not h.is_cuda
    x = np.arange(3, dtype=np.float64)
    c = ck.tensor(x, device="cpu")
    assert c.dtype == ck.float64 and c.data_ptr() != x.ctypes.data  # always a copy
    x[0] = 42
    assert c.tolist() == [0.0, 1.0, 2.0]
    c2 = ck.tensor(c)
    assert c2.data_ptr() != c.data_ptr() and c2.tolist() == c.tolist()
    assert ck.tensor(np.arange(4).reshape(2, 2)[:, ::-1], device="cpu").tolist() == [[1, 0], [3, 2]]
    import cudakit.tensor as T  # the module stays importable and callable
    assert T.float32 == ck.float32 and T([1]).tolist() == [1]


# ---- one Device type ----
def test_one_device_type():
    assert ck.tensor.TensorDevice is ck.Device
    cpu = ck.Device("cpu")
    assert cpu.type == "cpu" and cpu.index is None and str(cpu) == "cpu" and repr(cpu) == "device(type='cpu')"
    assert ck.ones(1, device="cpu").device == cpu
    if not ck.is_available():
        return
    d = ck.Device("cuda:0")
    assert type(ck.ones(1).device) is ck.Device and type(ck.Stream().device) is ck.Device
    assert d == ck.Device("cuda", 0) == ck.Device(0) == "cuda:0" and d != "cpu" and d != 3.5
    assert hash(d) == hash(ck.Device(0)) and {d: 1}[ck.Device("cuda:0")] == 1
    assert pickle.loads(pickle.dumps(d)) == d
    assert ck.Event(enable_timing=False).device is None
    e = ck.Event()
    e.record()
    assert e.device == d


# ---- checked sizes ----
def test_impossible_sizes_raise_with_the_requested_size():
    if not ck.is_available():
        pytest.skip("no device")
    ck.synchronize()
    before = ck.memory_allocated()
    with pytest.raises(ck.OutOfMemoryError) as oom:
        ck.empty(2**62)
    assert "18446744073709551616 bytes" in str(oom.value)
    assert oom.value.requested_bytes == 2**64 - 1  # saturated; the exact size is in the message
    with pytest.raises(ck.OutOfMemoryError):
        ck.zeros(2**62)  # used to segfault
    with pytest.raises(ValueError, match="1208925819614629174706176 elements"):
        ck.empty(2**40, 2**40)  # used to return a 4-byte tensor
    with pytest.raises(ValueError, match="negative dimension"):
        ck.zeros(3, -2)
    assert ck.memory_allocated() == before
    assert ck.empty(0, 2**40).numel() == 0


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    pass


_Deleter = ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensor))
_DLManagedTensor._fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _Deleter)]


def _capsule(shape, strides, deleted):
    """A legacy DLPack capsule over a small host buffer with the given (lying) shape/strides."""
    buf = (ctypes.c_float * 8)()
    sh = (ctypes.c_int64 * len(shape))(*shape)
    st = (ctypes.c_int64 * len(strides))(*strides)
    deleter = _Deleter(lambda _p: deleted.append(1))
    m = _DLManagedTensor(_DLTensor(ctypes.cast(buf, ctypes.c_void_p), _DLDevice(1, 0), len(shape),
                                   _DLDataType(2, 32, 1), sh, st, 0), None, deleter)
    keep = (buf, sh, st, deleter, m)
    new = ctypes.pythonapi.PyCapsule_New
    new.restype = ctypes.py_object
    new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    return new(ctypes.addressof(m), b"dltensor", None), keep


@pytest.mark.parametrize("shape,strides,fragment", [
    ((2, 2), (2**62, 1), "18446744073709551624 bytes"),
    ((2, 2), (2**63 - 1, 2**63 - 1), "beyond 64 bits"),
    ((2, -3), (1, 1), "negative size -3"),
    ((2**40, 2**40), (0, 0), "elements"),
])
def test_dlpack_import_rejects_impossible_layouts(shape, strides, fragment):
    deleted = []
    cap, keep = _capsule(shape, strides, deleted)
    with pytest.raises(ValueError, match=fragment.replace("*", r"\*")):
        ck.from_dlpack(cap)
    assert deleted == [1]  # the producer's memory is released exactly once
    ok, keep2 = _capsule((2, 2), (2, 1), deleted)
    t = ck.from_dlpack(ok)
    assert t.shape == (2, 2)
    del t
    assert deleted == [1, 1]


def test_numpy_import_handles_byte_order_and_alignment():
    be = np.arange(6, dtype=">f4").reshape(2, 3)
    assert ck.asarray(be).tolist() == be.tolist()
    raw = np.zeros(17, dtype=np.uint8)
    unaligned = raw[1:].view(np.float32)  # 4 floats at an odd address
    unaligned[:] = [1, 2, 3, 4]
    assert ck.asarray(unaligned).tolist() == [1, 2, 3, 4]
    assert ck.asarray(np.arange(10)[::-3]).tolist() == [9, 6, 3, 0]


# ---- device checks ----
def test_cross_device_streams_and_events_raise(ck):
    if ck.device_count() < 2:
        pytest.skip("needs 2 devices")
    s1 = ck.Stream(device=1)
    with pytest.raises(ValueError, match="stream belongs to device 1"):
        ck.memory.caching_allocator_alloc(256, device=0, stream=s1)
    with pytest.raises(ValueError, match="stream is on cuda:1"):
        ck.ones(2, device="cuda:0").record_stream(s1)
    a, b = ck.Event(enable_timing=True), ck.Event(enable_timing=True)
    a.record(ck.Stream(device=0))
    b.record(s1)
    b.synchronize()
    with pytest.raises(ValueError, match="same device"):
        a.elapsed_time(b)
    # The same calls with matching devices work.
    p = ck.memory.caching_allocator_alloc(256, device=1, stream=s1)
    ck.memory.caching_allocator_delete(p)
    ck.ones(2, device="cuda:1").record_stream(s1)


def test_library_handles_need_the_cuda_backend(ck, emulated_only):
    with pytest.raises(NotImplementedError):
        ck.current_blas_handle()
    with pytest.raises(NotImplementedError):
        ck.current_solver_handle()


def test_math_sanity(dev):
    assert math.isclose(float(ck.tensor([2.0], device=dev) ** 0.5), math.sqrt(2), rel_tol=1e-6)
