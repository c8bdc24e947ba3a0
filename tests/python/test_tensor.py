"""cudakit.Tensor: dtypes, shapes/strides, views, copies, ops, promotion vs NumPy, errors."""
import itertools

import numpy as np
import pytest

import cudakit
import cudakit.tensor as T


@pytest.fixture
def dev():
    if not cudakit.is_available():
        pytest.skip(f"no device on backend {cudakit.backend_name()}")
    return "cuda:0"


def test_dtype_objects():
    assert repr(T.float32) == "cudakit.float32"
    assert T.float32 == "float32" and T.float32 == np.float32
    assert T.float == T.float32 and T.long == T.int64 and T.half == T.float16
    assert T.bfloat16.itemsize == 2 and T.complex128.itemsize == 16
    assert T.float16.is_floating_point and not T.int8.is_floating_point
    assert {T.float32: 1}[T.float32] == 1


NUMPY_DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32",
                "float64", "complex64", "complex128"]


def test_dtypes_pickle_and_copy():
    import copy
    import pickle
    for dt in (T.float32, T.bfloat16, T.int64, T.bool, T.complex128):
        back = pickle.loads(pickle.dumps(dt))
        assert back == dt and type(back) is type(dt) and back.itemsize == dt.itemsize
        assert copy.deepcopy(dt) == dt
    assert pickle.loads(pickle.dumps({"dtype": T.float16}))["dtype"] == T.float16


def test_promotion_matches_numpy_within_categories():
    # torch and NumPy agree except int x float (torch keeps the float's width).
    for a, b in itertools.product(NUMPY_DTYPES, NUMPY_DTYPES):
        ka, kb = np.dtype(a).kind, np.dtype(b).kind
        if {ka, kb} & {"i", "u"} and {ka, kb} & {"f", "c"}:
            continue
        assert T.promote_types(a, b) == str(np.promote_types(a, b)), (a, b)
    assert T.promote_types("int64", "float16") == T.float16
    assert T.promote_types("float16", "bfloat16") == T.float32


def test_factories_and_metadata(dev):
    z = T.zeros(2, 3)
    assert z.shape == (2, 3) and z.dtype == T.float32 and z.is_cuda
    assert z.device.type == "cuda" and z.device == dev
    assert z.stride() == (3, 1) and z.nbytes == 24 and z.element_size() == 4
    assert T.ones((4,), dtype=T.int32).tolist() == [1, 1, 1, 1]
    assert T.full((2,), 7).dtype == T.int64
    assert T.full((2,), 7.5).tolist() == [7.5, 7.5]
    assert T.arange(5).tolist() == [0, 1, 2, 3, 4]
    assert T.arange(0, 1, 0.25).tolist() == [0, 0.25, 0.5, 0.75]
    h = T.empty(3, device="cpu", pin_memory=True)
    assert not h.is_cuda and h.is_pinned()
    assert T.zeros_like(z).shape == (2, 3)
    assert T.empty_like(z, dtype=T.float64).dtype == T.float64


def test_views_share_storage(dev):
    a = T.arange(12, dtype=T.float32).view(3, 4)
    b = a.t()
    assert b.shape == (4, 3) and not b.is_contiguous()
    assert b.data_ptr() == a.data_ptr()
    col = a[:, 1]
    assert col.tolist() == [1, 5, 9]
    col.fill_(-1)
    assert a[:, 1].tolist() == [-1, -1, -1]
    a[0] = 100
    assert a[0].tolist() == [100] * 4
    assert a[1:, ::2].tolist() == [[4, 6], [8, 10]]
    assert a[None, ..., 0].shape == (1, 3)
    assert a.permute(1, 0).shape == (4, 3) and a.T.shape == (4, 3)
    assert a.reshape(-1).shape == (12,)
    with pytest.raises(ValueError, match="view"):
        b.view(12)
    assert b.reshape(12).tolist() == b.contiguous().view(12).tolist()
    with pytest.raises(IndexError):
        a[3]
    assert len(list(a)) == 3


def test_numpy_round_trip_host_zero_copy(dev):
    x = np.arange(10, dtype=np.float64)
    t = T.asarray(x)  # numpy stays on host, zero-copy
    assert not t.is_cuda and t.data_ptr() == x.ctypes.data
    x[0] = 42
    assert t[0].item() == 42
    n = t.numpy()
    assert np.shares_memory(n, x)
    d = T.asarray(x, device=dev)
    assert d.is_cuda and d.cpu().numpy().tolist() == x.tolist()
    with pytest.raises(TypeError, match="cpu"):
        d.numpy()
    s = T.asarray([[1.0, 2.0], [3.0, 4.0]])
    assert s.dtype == T.float32 and s.is_cuda
    assert T.asarray([1, 2]).dtype == T.int64


def test_copies_across_devices_and_dtypes(dev):
    x = np.random.default_rng(0).standard_normal((5, 7)).astype(np.float32)
    d = T.asarray(x, device=dev)
    assert np.array_equal(d.cpu().numpy(), x)
    assert np.array_equal(d.t().cpu().numpy(), x.T)
    assert np.array_equal(d.to(T.float64).cpu().numpy(), x.astype(np.float64))
    assert np.array_equal(d.to(T.int32).cpu().numpy(), x.astype(np.int32))
    assert np.array_equal(d.to(T.float16).cpu().numpy(), x.astype(np.float16))
    out = T.empty(7, 5, device="cpu", dtype=T.float64)
    out.copy_(d.t())
    assert np.array_equal(out.numpy(), x.T.astype(np.float64))
    if cudakit.device_count() > 1:
        d1 = d.to("cuda:1")
        assert d1.device.index == 1 and np.array_equal(d1.cpu().numpy(), x)
    p = T.asarray(x, device="cpu").pin_memory()
    assert p.is_pinned() and np.array_equal(p.numpy(), x)
    nb = d.to("cpu", non_blocking=True)
    cudakit.synchronize()
    assert np.array_equal(nb.numpy(), x)


BIN_OPS = [("+", np.add), ("-", np.subtract), ("*", np.multiply), ("/", np.true_divide)]


@pytest.mark.parametrize("a_dt,b_dt", [("float32", "float32"), ("int32", "int64"), ("uint8", "int8"),
                                       ("float64", "float32"), ("complex64", "float64"), ("int16", "int16")])
def test_elementwise_broadcast_vs_numpy(dev, a_dt, b_dt):
    rng = np.random.default_rng(1)
    a = (rng.integers(1, 9, (4, 1, 3))).astype(a_dt)
    b = (rng.integers(1, 9, (5, 1))).astype(b_dt)
    ta, tb = T.asarray(a, device=dev), T.asarray(b, device=dev)
    for sym, f in BIN_OPS:
        r = eval(f"ta {sym} tb")
        expect = f(a, b)
        if sym == "/" and np.dtype(a_dt).kind in "iu" and np.dtype(b_dt).kind in "iu":
            expect = expect.astype(np.float32)
        assert r.shape == expect.shape
        assert r.dtype == str(expect.dtype), (sym, r.dtype, expect.dtype)
        np.testing.assert_allclose(r.cpu().numpy(), expect, rtol=1e-6)


def test_scalars_unary_sum(dev):
    a = T.asarray(np.array([-2, -1, 0, 3], dtype=np.int32), device=dev)
    assert (a + 1).dtype == T.int32
    assert (a * 1.5).dtype == T.float32
    assert (2 - a).tolist() == [4, 3, 2, -1]
    assert (1 / T.asarray(np.array([2.0, 4.0]), device=dev)).tolist() == [0.5, 0.25]
    assert (-a).tolist() == [2, 1, 0, -3]
    assert a.relu().tolist() == [0, 0, 0, 3]
    assert a.sum().item() == 0 and a.sum().dtype == T.int64
    f = T.asarray(np.linspace(0, 1, 1001, dtype=np.float32), device=dev)
    assert abs(f.sum().item() - 500.5) < 1e-3
    a += 1
    assert a.tolist() == [-1, 0, 1, 4] and a.dtype == T.int32
    with pytest.raises(ValueError, match="can't be cast"):
        a += 0.5
    with pytest.raises(ValueError, match="bool"):
        -T.zeros(2, dtype=T.bool)


def test_matmul(dev):
    rng = np.random.default_rng(2)
    a = rng.standard_normal((17, 33)).astype(np.float32)
    b = rng.standard_normal((33, 9)).astype(np.float32)
    ta, tb = T.asarray(a, device=dev), T.asarray(b, device=dev)
    np.testing.assert_allclose((ta @ tb).cpu().numpy(), a @ b, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose((tb.t() @ ta.t()).cpu().numpy(), (a @ b).T, rtol=1e-4, atol=1e-4)
    for dt in (T.float16, T.bfloat16, T.float64):
        r = (ta.to(dt) @ tb.to(dt)).to(T.float32).cpu().numpy()
        np.testing.assert_allclose(r, a @ b, rtol=5e-2, atol=0.3)
    assert (ta[0] @ tb).shape == (9,)
    prev = T.matmul_allow_tf32()
    T.set_matmul_allow_tf32(True)
    assert T.matmul_allow_tf32()
    T.set_matmul_allow_tf32(prev)
    with pytest.raises(ValueError, match="cannot be multiplied"):
        ta @ ta
    with pytest.raises(ValueError, match="same dtype"):
        ta @ tb.to(T.float64)


def test_bad_input_errors(dev):
    a = T.zeros(3, device=dev)
    with pytest.raises(ValueError, match="broadcast"):
        a + T.zeros(4, device=dev)
    with pytest.raises(ValueError, match="same device"):
        a + T.zeros(3, device="cpu")
    with pytest.raises(ValueError, match="unsupported dtype"):
        T.zeros(2, dtype="float128")
    with pytest.raises(ValueError, match="device"):
        T.zeros(2, device="tpu")
    with pytest.raises(TypeError, match="bfloat16"):
        T.zeros(2, dtype=T.bfloat16, device="cpu").numpy()


def test_record_stream_and_repr(dev):
    a = T.ones(4, device=dev)
    s = cudakit.Stream()
    a.record_stream(s)
    assert "cuda:0" in repr(a) and "tensor(" in repr(a)
