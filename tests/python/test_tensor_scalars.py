"""Python numbers as operands (issue 24 §1, §3): a scalar is a kernel argument, as in torch —
no tensor is made for it, nothing is copied, nothing waits for the device — with torch's
type promotion for every dtype, and torch's overflow errors when the number does not fit the
dtype the op computes in (full, fill_, and binary/in-place operands)."""
import time

import numpy as np
import pytest

ALL_DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32",
              "float64", "complex64", "complex128"]


def vals(t):
    if t.dtype.name == "bfloat16":
        t = t.to(dtype="float32")
    return np.asarray(t.cpu().numpy())


def sample(dtype, n=6):
    rng = np.random.default_rng(1)
    if dtype == "bool":
        return rng.random(n) < 0.5
    if dtype.startswith(("int", "uint")):
        return rng.integers(0 if dtype == "uint8" else -4, 5, size=n).astype(dtype)
    if dtype.startswith("complex"):
        return (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(dtype)
    v = rng.uniform(-2, 2, size=n)
    return v.astype(np.float32 if dtype == "bfloat16" else dtype)


def device_tensor(ck, a, dtype):
    t = ck.asarray(a, device="cuda")
    return t.to(dtype=dtype) if dtype == "bfloat16" else t


# ---- no synchronisation, no copy ----
def test_scalar_ops_factories_and_fills_never_synchronise(ck):
    x = ck.zeros(8)
    h = ck.tensor(3.0, device="cpu")  # a host 0-d tensor next to a device tensor: a scalar too
    d0 = ck.full((), 4.0)
    ck.synchronize()
    ck.set_sync_debug_mode("error")
    try:
        x += 1
        x.add_(1)
        x.mul_(3)
        x.sub_(0.5)
        x.div_(2)
        y = (x + 1) * 2 - 0.5
        y = 1 - y
        y = 2 / (y - 10)
        z = 2 ** x + x ** 2 + x.pow(1)
        c = (x < 3.0, x >= 1, x == 2.75, x != 0)
        i = ck.arange(8)
        i += 2
        i *= True
        w = ck.full((8,), 7, dtype=ck.int16) + ck.zeros(8, dtype=ck.int16) + ck.ones(8, dtype=ck.int16)
        f = ck.empty(8).fill_(2.5)
        f2 = ck.empty(8).fill_(d0)  # a device value: a copy kernel, not item()
        hh = x * h + (h - x)
    finally:
        ck.set_sync_debug_mode("default")
    want = ((np.zeros(8) + 2) * 3 - 0.5) / 2
    np.testing.assert_allclose(vals(x), want)
    yw = 2 / ((1 - ((want + 1) * 2 - 0.5)) - 10)
    np.testing.assert_allclose(vals(y), yw, rtol=1e-6)
    np.testing.assert_allclose(vals(z), 2 ** want + want ** 2 + want, rtol=1e-6)
    assert [vals(t).tolist() for t in c] == [(want < 3).tolist(), (want >= 1).tolist(),
                                             (want == 2.75).tolist(), (want != 0).tolist()]
    assert vals(i).tolist() == list(range(2, 10))
    assert vals(w).tolist() == [8] * 8 and w.dtype == ck.int16
    assert vals(f).tolist() == [2.5] * 8 and vals(f2).tolist() == [4.0] * 8
    np.testing.assert_allclose(vals(hh), want * 3 + (3 - want))


def test_inplace_scalar_does_not_wait_behind_queued_work(ck):
    """Before: `x += 1` copied the number to the device and waited for the stream, 0.5 s
    behind the queued task (issue 24: 510 ms)."""
    x = ck.zeros(4)
    ck.synchronize()
    ck._C._launch_host_sleep(ck.current_stream(), 0.5)
    t0 = time.perf_counter()
    x += 1
    x.mul_(2)
    y = x - 0.5
    elapsed = time.perf_counter() - t0
    ck.synchronize()
    assert elapsed < 0.25, f"scalar ops waited {elapsed:.3f} s for the stream"
    assert vals(y).tolist() == [1.5] * 4


def test_readbacks_are_reported_as_torch_reports_them(ck):
    """torch's sync debug mode errors on item(), blocking copies to or from host memory and
    Stream.synchronize(); not on the device-wide synchronize() or Event.synchronize()."""
    x = ck.ones(3)
    ck.synchronize()
    ck.set_sync_debug_mode("error")
    try:
        for readback in (lambda: x.item() if x.numel() == 1 else x[0].item(), lambda: x.cpu(),
                         lambda: x.tolist(), lambda: ck.tensor([1.0, 2.0]),
                         lambda: x.copy_(ck.zeros(3, device="cpu")), lambda: ck.current_stream().synchronize()):
            with pytest.raises(RuntimeError, match="synchronizing CUDA operation"):
                readback()
        ck.synchronize()
        x.to("cpu", non_blocking=True)  # asynchronous: not reported (torch neither)
        ck.synchronize()
    finally:
        ck.set_sync_debug_mode("default")
    assert vals(x).tolist() == [1.0, 1.0, 1.0]  # state intact: the refused copy never ran


# ---- promotion, every dtype ----
@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("scalar", [True, 3, -2.5, 1 + 2j], ids=["bool", "int", "float", "complex"])
def test_scalar_promotion_and_values_for_every_dtype(ck, dtype, scalar):
    t = device_tensor(ck, sample(dtype), dtype)
    a = vals(t)  # the values as stored (bfloat16 rounds)
    want_dtype = ck.result_type(t, scalar)
    # torch's rule: a number changes the dtype only when it is of a higher category, and then
    # to the default dtype of that category (float32 / complex64, or complex128 for float64).
    cat = lambda n: 0 if n == "bool" else 1 if n.startswith(("int", "uint")) else 2 if n.startswith(("float", "bfloat")) else 3
    scat = 0 if isinstance(scalar, bool) else 1 if isinstance(scalar, int) else 2 if isinstance(scalar, float) else 3
    if scat <= cat(dtype):
        assert want_dtype == getattr(ck, dtype)
    else:
        assert want_dtype.name == {1: "int64", 2: "float32", 3: "complex128" if dtype == "float64" else "complex64"}[scat]
    ops = [("add", lambda x, s: x + s, np.add), ("mul", lambda x, s: x * s, np.multiply),
           ("rsub", lambda x, s: s - x, lambda u, s: s - u)]
    for name, op, ref in ops:
        if name == "rsub" and want_dtype == ck.bool:
            with pytest.raises(ValueError, match="bool"):
                op(t, scalar)
            continue
        got = op(t, scalar)
        assert got.dtype == want_dtype, name
        wide = a.astype(np.complex128 if np.iscomplexobj(a) or isinstance(scalar, complex) else np.float64)
        want = ref(wide, scalar)
        if want_dtype.name == "bool":
            want = want != 0
        elif not want_dtype.is_floating_point and not want_dtype.is_complex:
            want = np.asarray(want).real.astype(np.int64).astype(want_dtype.name)
        tol = 1e-2 if want_dtype.name in ("float16", "bfloat16") else 1e-5
        np.testing.assert_allclose(vals(got).astype(want.dtype if want.dtype != np.bool_ else np.bool_), want,
                                   rtol=tol, atol=tol, err_msg=name)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_inplace_scalar_every_dtype(ck, dtype):
    a = sample(dtype)
    t = device_tensor(ck, a, dtype)
    if dtype == "bool":
        t.mul_(True)
        t.add_(False)
        assert vals(t).tolist() == a.tolist()
        with pytest.raises(ValueError, match="can't be cast"):
            t.add_(1)  # int result into a bool tensor, as torch
        return
    t += 2
    t *= 3
    t -= 1
    want = (a.astype(np.complex128 if np.iscomplexobj(a) else np.float64) + 2) * 3 - 1
    if dtype.startswith(("int", "uint")):
        np.testing.assert_array_equal(vals(t), want.astype(dtype))
        with pytest.raises(ValueError, match="can't be cast to the desired output type"):
            t.div_(2)  # true division gives float: refused in place, as torch
        with pytest.raises(ValueError, match="can't be cast"):
            t += 0.5
        np.testing.assert_array_equal(vals(t), want.astype(dtype))  # state intact
        return
    t /= 2
    tol = 2e-2 if dtype in ("float16", "bfloat16") else 1e-5
    np.testing.assert_allclose(vals(t), want / 2, rtol=tol, atol=tol)


def test_half_keeps_its_dtype_and_computes_in_float(ck):
    x = ck.full((2,), 1000.0, dtype=ck.float16)
    y = x * 100  # 1e5 is not a float16, but the op computes in float (torch's opmath)
    assert y.dtype == ck.float16 and np.isinf(vals(y)).all()
    z = x + 0.1  # 0.1 is not rounded to float16 before the add
    assert z.dtype == ck.float16 and vals(z).tolist() == [1000.0, 1000.0]
    i = ck.arange(3, dtype=ck.int32) + 2.5
    assert i.dtype == ck.float32 and vals(i).tolist() == [2.5, 3.5, 4.5]
    assert (ck.ones(2, dtype=ck.bool) + 1).dtype == ck.int64


def test_strided_and_broadcast_views_inplace(ck):
    base = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = ck.asarray(base, device="cuda")
    x[:, ::2] += 10
    x.t()[1].mul_(-1)
    want = base.copy()
    want[:, ::2] += 10
    want.T[1] *= -1
    np.testing.assert_array_equal(vals(x), want)


# ---- overflow: torch raises ----
@pytest.mark.parametrize("make, text", [
    (lambda ck: ck.full((3,), 300, dtype=ck.uint8), "uint8_t"),
    (lambda ck: ck.full((2,), 2 ** 40, dtype=ck.int32), "type int "),
    (lambda ck: ck.zeros(2, dtype=ck.uint8).fill_(256), "uint8_t"),
    (lambda ck: ck.zeros(2, dtype=ck.uint8).add_(300), "uint8_t"),
    (lambda ck: ck.zeros(2, dtype=ck.int8) + 128, "int8_t"),
    (lambda ck: ck.zeros(2, dtype=ck.uint8) - (-256), "uint8_t"),
    (lambda ck: ck.full((2,), 1e300, dtype=ck.float32), "float"),
    (lambda ck: ck.full((2,), 70000.0, dtype=ck.float16), "Half"),
    (lambda ck: ck.full((2,), float("nan"), dtype=ck.int32), "type int "),
    (lambda ck: ck.full((2,), -1.0, dtype=ck.uint8), "uint8_t"),
    (lambda ck: ck.full((2,), 1 + 2j, dtype=ck.float32), "float"),
    (lambda ck: ck.zeros(2, dtype=ck.int16).mul_(1 << 20), "int16_t"),
])
def test_values_that_do_not_fit_raise_as_torch(ck, make, text):
    with pytest.raises(RuntimeError, match="cannot be converted to type .*without overflow") as info:
        make(ck)
    assert text in str(info.value)
    assert "wider dtype" in str(info.value)  # the fix


def test_values_that_fit_or_wrap_as_torch(ck):
    assert vals(ck.full((2,), -1, dtype=ck.uint8)).tolist() == [255, 255]  # negative ints wrap
    assert vals(ck.zeros(2, dtype=ck.uint8).sub_(1)).tolist() == [255, 255]
    assert vals(ck.full((2,), 255, dtype=ck.uint8)).tolist() == [255, 255]
    assert vals(ck.full((1,), 2 ** 31 - 1, dtype=ck.int32)).tolist() == [2 ** 31 - 1]
    assert vals(ck.full((1,), 2.9, dtype=ck.int32)).tolist() == [2]
    assert vals(ck.full((1,), 5, dtype=ck.bool)).tolist() == [True]  # nothing overflows bool
    assert np.isinf(vals(ck.full((1,), float("inf"), dtype=ck.float16))).all()
    assert np.isnan(vals(ck.full((1,), float("nan"), dtype=ck.float32))).all()
    x = ck.zeros(2, dtype=ck.uint8)
    with pytest.raises(RuntimeError):
        x.add_(300)
    assert vals(x).tolist() == [0, 0]  # state intact after the error


def test_integer_comparisons_with_numbers_out_of_range_are_exact(ck):
    """u8 < 256 is True for every u8 (NumPy's answer). torch wraps the number to the tensor's
    dtype there (256 -> 0, -19 -> 237: pytorch issues 101653, 178716); cudakit compares in
    int64 instead, and never raises for a comparison."""
    u = ck.asarray(np.array([0, 7, 255], dtype=np.uint8), device="cuda")
    assert vals(u < 256).tolist() == [True, True, True]
    assert vals(u > -19).tolist() == [True, True, True]
    assert vals(u == 263).tolist() == [False, False, False]  # 263 wraps to 7 in uint8
    i8 = ck.asarray(np.array([-128, 0, 127], dtype=np.int8), device="cuda")
    assert vals(i8 >= -129).tolist() == [True, True, True]
    assert vals(i8 < 1000).tolist() == [True, True, True]
    assert vals(u < 200).tolist() == [True, True, False]  # in range: compared in uint8 as before
    assert (u < 200).dtype == ck.bool
