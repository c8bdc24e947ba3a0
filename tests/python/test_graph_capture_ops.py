"""Every built-in op and factory captured in a CUDA graph, as a user writes it: inputs are
allocated before capture, the op runs inside `with cudakit.graph(g):`, the inputs are then
changed and the graph replayed, and the replay's results are compared with NumPy on the new
inputs. Tensor and scalar operands, out-of-place and in-place, a few dtypes.

The names come from cudakit.Tensor and cudakit.tensor.__all__: every one is either captured
here or listed in NO_KERNEL with the reason it has nothing to capture, so an op added to the
bindings fails test_every_name_is_classified until it gets a case."""
import operator

import numpy as np
import pytest

DTYPES = ["float32", "float16", "int32"]

# ---- names that launch no kernel (or may not run under capture), and why ----
METADATA = {"T", "data_ptr", "device", "dim", "dtype", "element_size", "get_device", "is_contiguous",
            "is_cuda", "is_pinned", "itemsize", "nbytes", "ndim", "numel", "shape", "size",
            "storage_offset", "stride", "__len__", "__hash__", "__cuda_array_interface__",
            "__dlpack_device__", "__reduce__", "__getstate__", "__init__", "__new__", "__doc__",
            "__module__", "__dict__", "__weakref__"}
VIEWS = {"view", "reshape", "t", "transpose", "permute", "unsqueeze", "squeeze", "expand", "flatten",
         "__getitem__"}  # views: no kernel (view_cases checks they compose with captured ops)
HOST_READBACK = {"item", "tolist", "cpu", "numpy", "__array__", "__bool__", "__float__", "__int__",
                 "__index__", "__complex__", "__repr__", "__str__", "__dlpack__", "pin_memory",
                 "cuda", "record_stream",
                 # module level: types, dtype queries and settings, host-data constructors (a
                 # copy from pageable host memory synchronises: not capturable, as in torch)
                 "Tensor", "dtype", "Generator", "promote_types", "result_type", "matmul_allow_tf32",
                 "set_matmul_allow_tf32", "asarray", "from_dlpack"}
NO_KERNEL = METADATA | VIEWS | HOST_READBACK


def to_np(t):
    return np.asarray(t.cpu().numpy())


def np_dtype(name):
    return np.float32 if name == "bfloat16" else np.dtype(name)


def inputs(rng, dtype, shape=(3, 4), positive=False):
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype.startswith("int"):
        lo = 1 if positive else -5
        return rng.integers(lo, 6, size=shape).astype(dtype)
    if dtype.startswith("complex"):
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    v = rng.uniform(0.5, 2.0, size=shape) if positive else rng.uniform(-2.0, 2.0, size=shape)
    return v.astype(dtype)


def check(got, want, dtype):
    got = np.asarray(got)
    want = np.asarray(want)
    assert got.shape == want.shape
    if want.dtype == np.bool_ or np.issubdtype(want.dtype, np.integer):
        np.testing.assert_array_equal(got, want)
    else:
        tol = 2e-3 if dtype in ("float16", "bfloat16") else 1e-5
        np.testing.assert_allclose(got.astype(np.complex128 if np.iscomplexobj(want) else np.float64),
                                   want, rtol=tol, atol=tol)


def capture_and_replay(ck, make_inputs, run, reference, dtype, replays=2):
    """Inputs (device tensors) made before capture; `run(*tensors)` captured; for each replay
    the inputs get new values, the graph replays, and `run`'s results must match
    `reference(*arrays)` computed by NumPy on those values."""
    rng = np.random.default_rng(0)
    arrays = make_inputs(rng)
    tensors = [ck.asarray(a, device="cuda") for a in arrays]
    ck.synchronize()
    g = ck.CUDAGraph()
    with ck.graph(g):
        out = run(*tensors)
    outs = out if isinstance(out, tuple) else (out,)
    for _ in range(replays):
        arrays = make_inputs(rng)
        for t, a in zip(tensors, arrays):
            t.copy_(ck.asarray(a, device="cpu"))
        want = reference(*[a.copy() for a in arrays])
        wants = want if isinstance(want, tuple) else (want,)
        g.replay()
        ck.synchronize()
        for o, w in zip(outs, wants):
            check(to_np(o), w, dtype)
    return g


# ---- binary ops: (name, tensor op, NumPy op) ----
def np_true_div(a, b):
    return np.true_divide(a, b).astype(np.result_type(a, b, np.float32) if np.issubdtype(np.result_type(a, b), np.integer) else np.result_type(a, b))


BINARY = {
    "add": (lambda x, y: x.add(y), np.add),
    "sub": (lambda x, y: x.sub(y), np.subtract),
    "mul": (lambda x, y: x.mul(y), np.multiply),
    "div": (lambda x, y: x.div(y), np.true_divide),
    "pow": (lambda x, y: x.pow(y), np.power),
    "eq": (lambda x, y: x.eq(y), np.equal),
    "ne": (lambda x, y: x.ne(y), np.not_equal),
    "lt": (lambda x, y: x.lt(y), np.less),
    "le": (lambda x, y: x.le(y), np.less_equal),
    "gt": (lambda x, y: x.gt(y), np.greater),
    "ge": (lambda x, y: x.ge(y), np.greater_equal),
    "__add__": (operator.add, np.add),
    "__sub__": (operator.sub, np.subtract),
    "__mul__": (operator.mul, np.multiply),
    "__truediv__": (operator.truediv, np.true_divide),
    "__pow__": (operator.pow, np.power),
    "__eq__": (operator.eq, np.equal),
    "__ne__": (operator.ne, np.not_equal),
    "__lt__": (operator.lt, np.less),
    "__le__": (operator.le, np.less_equal),
    "__gt__": (operator.gt, np.greater),
    "__ge__": (operator.ge, np.greater_equal),
}
# Reflected operators: scalar OP tensor.
REFLECTED = {
    "__radd__": (lambda s, x: s + x, lambda s, a: s + a),
    "__rsub__": (lambda s, x: s - x, lambda s, a: s - a),
    "__rmul__": (lambda s, x: s * x, lambda s, a: s * a),
    "__rtruediv__": (lambda s, x: s / x, lambda s, a: s / a),
    "__rpow__": (lambda s, x: s ** x, lambda s, a: s ** a),
}
INPLACE = {
    "add_": (lambda x, y: x.add_(y), np.add),
    "sub_": (lambda x, y: x.sub_(y), np.subtract),
    "mul_": (lambda x, y: x.mul_(y), np.multiply),
    "div_": (lambda x, y: x.div_(y), np.true_divide),
    "__iadd__": (operator.iadd, np.add),
    "__isub__": (operator.isub, np.subtract),
    "__imul__": (operator.imul, np.multiply),
    "__itruediv__": (operator.itruediv, np.true_divide),
}
SCALARS = {"int": 2, "float": 0.5}


def expected_dtype(ck, dtype, other):
    """torch's result dtype for a `dtype` tensor and `other` (a dtype name or a Python number)."""
    if isinstance(other, str):
        return ck.promote_types(getattr(ck, dtype), getattr(ck, other))
    return ck.result_type(ck.zeros(1, dtype=getattr(ck, dtype)), other)


def np_binary(fn, name, a, b, out_dtype):
    if name in ("pow", "__pow__") and np.issubdtype(np.result_type(a, b), np.integer):
        r = np.power(a.astype(np.int64), np.asarray(b).astype(np.int64))
    else:
        wide = lambda v: v.astype(np.float64) if isinstance(v, np.ndarray) and v.dtype == np.float16 else v
        r = fn(wide(a), wide(b))
    return np.asarray(r).astype(np_dtype(out_dtype.name))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_tensor_operand(ck, name, dtype):
    op, ref = BINARY[name]
    positive = name in ("pow", "__pow__")
    rt = expected_dtype(ck, dtype, dtype)
    if name in ("div", "__truediv__") and dtype.startswith("int"):
        rt = ck.float32
    if name in ("eq", "ne", "lt", "le", "gt", "ge") or name in ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__"):
        rt = ck.bool
    shapes = ((3, 4), (1, 4))  # broadcasting operand
    capture_and_replay(
        ck, lambda rng: [inputs(rng, dtype, shapes[0], positive), inputs(rng, dtype, shapes[1], True)],
        op, lambda a, b: np_binary(ref, name, a, b, rt), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("scalar", sorted(SCALARS))
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_scalar_operand(ck, name, scalar, dtype):
    op, ref = BINARY[name]
    s = SCALARS[scalar]
    positive = name in ("pow", "__pow__")
    rt = expected_dtype(ck, dtype, s)
    if name in ("div", "__truediv__") and rt.name.startswith("int"):
        rt = ck.float32
    if name.strip("_") in ("eq", "ne", "lt", "le", "gt", "ge"):
        rt = ck.bool

    def run(x):
        out = op(x, s)
        assert out.dtype == rt
        return out

    def reference(a):
        base = a.astype(np.float64) if dtype == "float16" or isinstance(s, float) else a
        return np_binary(ref, name, base, s, rt)

    capture_and_replay(ck, lambda rng: [inputs(rng, dtype, positive=positive)], run, reference, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("scalar", sorted(SCALARS))
@pytest.mark.parametrize("name", sorted(REFLECTED))
def test_reflected_scalar_operand(ck, name, scalar, dtype):
    op, ref = REFLECTED[name]
    s = SCALARS[scalar]
    rt = expected_dtype(ck, dtype, s)
    if name == "__rtruediv__" and rt.name.startswith("int"):
        rt = ck.float32

    def reference(a):
        with np.errstate(divide="ignore"):
            return np.asarray(ref(s, a.astype(np.float64))).astype(np_dtype(rt.name))

    # positive, nonzero inputs: s / x and s ** x are finite for every dtype
    capture_and_replay(ck, lambda rng: [inputs(rng, dtype, positive=True)], lambda x: op(s, x), reference, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("operand", ["tensor", "int", "float"])
@pytest.mark.parametrize("name", sorted(INPLACE))
def test_inplace(ck, name, operand, dtype):
    op, ref = INPLACE[name]
    s = SCALARS.get(operand)
    is_div = name in ("div_", "__itruediv__")
    if dtype.startswith("int") and (is_div or operand == "float"):
        pytest.skip("int tensor with a float result: torch refuses the in-place op (tested in test_tensor)")

    def run(x, *y):
        r = op(x, y[0] if y else s)
        assert r is x or r.data_ptr() == x.data_ptr()
        return x

    def make(rng):
        xs = [inputs(rng, dtype)]
        if operand == "tensor":
            xs.append(inputs(rng, dtype, (4,), positive=True))
        return xs

    def reference(a, *b):
        other = b[0] if b else s
        wide = a.astype(np.float64) if dtype == "float16" else a
        return np.asarray(ref(wide, other)).astype(a.dtype)

    capture_and_replay(ck, make, run, reference, dtype)


@pytest.mark.parametrize("dtype", DTYPES + ["bool"])
def test_inplace_loop_of_scalar_updates(ck, dtype):
    """The issue's example: `x += 1` in a loop, captured once, replayed many times."""
    if dtype == "bool":
        x = ck.zeros(5, dtype=ck.bool)
        g = ck.CUDAGraph()
        with ck.graph(g):
            x.mul_(False)
            x.add_(True)
        g.replay()
        ck.synchronize()
        assert to_np(x).all()
        return
    x = ck.zeros(5, dtype=getattr(ck, dtype))
    ck.synchronize()
    g = ck.CUDAGraph()
    with ck.graph(g):
        for _ in range(3):
            x += 1
        x *= 2
    for _ in range(2):
        g.replay()
    ck.synchronize()
    np.testing.assert_array_equal(to_np(x).astype(np.float64), np.full(5, ((0 + 3) * 2 + 3) * 2))


# ---- unary ops, reductions, copies, matmul ----
UNARY = {
    "neg": (lambda x: x.neg(), np.negative),
    "__neg__": (operator.neg, np.negative),
    "relu": (lambda x: x.relu(), lambda a: np.maximum(a, 0).astype(a.dtype)),
    "sum": (lambda x: x.sum(), lambda a: np.asarray(a.astype(np.float64).sum()).astype(
        np.int64 if np.issubdtype(a.dtype, np.integer) else a.dtype)),
    "clone": (lambda x: x.clone(), lambda a: a),
    "contiguous": (lambda x: x.t().contiguous(), lambda a: np.ascontiguousarray(a.T)),
    "to": (lambda x: x.to(dtype="float64"), lambda a: a.astype(np.float64)),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(ck, name, dtype):
    op, ref = UNARY[name]
    capture_and_replay(ck, lambda rng: [inputs(rng, dtype)], op, ref, dtype)


@pytest.mark.parametrize("name", ["matmul", "__matmul__", "module-matmul"])
def test_matmul(ck, name):
    ops = {"matmul": lambda a, b: a.matmul(b), "__matmul__": operator.matmul,
           "module-matmul": lambda a, b: ck.tensor.matmul(a, b)}
    # Warm-up before capture, as torch.cuda.graphs' docs ask (a first GEMM inside a capture is
    # test_graph_first_gemm.py's case).
    ck.ones(2, 2, device="cuda") @ ck.ones(2, 2, device="cuda")
    ck.synchronize()
    capture_and_replay(ck, lambda rng: [inputs(rng, "float32", (3, 4)), inputs(rng, "float32", (4, 2))],
                       ops[name], lambda a, b: a.astype(np.float64) @ b, "float32")


@pytest.mark.parametrize("dtype", DTYPES)
def test_copy_and_setitem(ck, dtype):
    def run(x, y):
        z = ck.empty((3, 4), dtype=getattr(ck, dtype))
        z.copy_(x)         # device to device
        z[0] = y[0]        # a tensor value
        z[1] = 3           # a number: a fill kernel
        z[2, 1:3].fill_(1)
        return z

    def reference(a, b):
        z = a.copy()
        z[0] = b[0]
        z[1] = 3
        z[2, 1:3] = 1
        return z

    capture_and_replay(ck, lambda rng: [inputs(rng, dtype), inputs(rng, dtype)], run, reference, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_fill_zero_and_fill_from_device_value(ck, dtype):
    def run(x, v):
        a = x.clone().fill_(2)
        b = x.clone().zero_()
        c = x.clone().fill_(v.reshape(()))  # a 0-d device value: a copy kernel, not item()
        return a, b, c

    capture_and_replay(
        ck, lambda rng: [inputs(rng, dtype), inputs(rng, dtype, (1,))], run,
        lambda a, v: (np.full_like(a, 2), np.zeros_like(a), np.full_like(a, v[0])), dtype)


# ---- factories ----
FACTORIES = {
    "empty": lambda ck, dt: ck.empty((2, 3), dtype=dt).fill_(4),
    "zeros": lambda ck, dt: ck.zeros((2, 3), dtype=dt),
    "ones": lambda ck, dt: ck.ones(2, 3, dtype=dt),
    "full": lambda ck, dt: ck.full((2, 3), 7, dtype=dt),
    "arange": lambda ck, dt: ck.arange(1, 7, dtype=dt).reshape(2, 3),
    "empty_like": lambda ck, dt: ck.empty_like(ck.zeros((2, 3), dtype=dt)).fill_(4),
    "zeros_like": lambda ck, dt: ck.zeros_like(ck.ones((2, 3), dtype=dt)),
    "ones_like": lambda ck, dt: ck.ones_like(ck.zeros((2, 3), dtype=dt)),
}
FACTORY_VALUES = {"empty": 4, "zeros": 0, "ones": 1, "full": 7, "empty_like": 4, "zeros_like": 0,
                  "ones_like": 1, "arange": np.arange(1, 7).reshape(2, 3)}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_factory(ck, name, dtype):
    g = ck.CUDAGraph()
    with ck.graph(g):
        out = FACTORIES[name](ck, getattr(ck, dtype))
    out.fill_(-3)  # replay must write every element again
    g.replay()
    ck.synchronize()
    want = np.broadcast_to(np.asarray(FACTORY_VALUES[name]), (2, 3)).astype(dtype)
    check(to_np(out), want, dtype)


@pytest.mark.parametrize("name", ["rand", "randn", "randint", "uniform_", "normal_"])
def test_random_factories_and_fills(ck, name):
    x = ck.zeros(1000)
    make = {"rand": lambda: ck.rand(1000), "randn": lambda: ck.randn(1000),
            "randint": lambda: ck.randint(3, 9, (1000,)), "uniform_": lambda: x.uniform_(2.0, 3.0),
            "normal_": lambda: x.normal_(5.0, 0.5)}[name]
    g = ck.CUDAGraph()
    with ck.graph(g):
        out = make()
    draws = []
    for _ in range(2):
        g.replay()
        ck.synchronize()
        draws.append(to_np(out).astype(np.float64))
    assert not np.array_equal(draws[0], draws[1])  # each replay draws new numbers
    lo, hi = {"rand": (0, 1), "randn": (-10, 10), "randint": (3, 8), "uniform_": (2, 3),
              "normal_": (0, 10)}[name]
    for d in draws:
        assert d.min() >= lo and d.max() <= hi
    if name == "randint":
        assert set(np.unique(draws[0])) <= set(range(3, 9))


def test_module_functions(ck):
    def run(x, y):
        return ck.tensor.pow(x, 2), ck.tensor.pow(2, y), ck.tensor.relu(x), ck.tensor.pow(x, y)

    capture_and_replay(
        ck, lambda rng: [inputs(rng, "float32", positive=True), inputs(rng, "float32", positive=True)], run,
        lambda a, b: (a.astype(np.float64) ** 2, 2.0 ** b.astype(np.float64), np.maximum(a, 0),
                      a.astype(np.float64) ** b), "float32")


def view_cases(ck):
    """Views compose with captured ops: the replay reads and writes through them."""
    return [lambda x: (x.view(12) + 1), lambda x: x.reshape(4, 3) * 2, lambda x: x.t() - 1,
            lambda x: x.transpose(0, 1) + 0, lambda x: x.permute(1, 0) * 1, lambda x: x.unsqueeze(0) + 1,
            lambda x: x.unsqueeze(0).squeeze(0) + 1, lambda x: x[:1].expand(3, 4) + 1,
            lambda x: x.flatten() * 3, lambda x: x[1:, ::2] + 1]


def test_views_in_captured_ops(ck):
    refs = [lambda a: a.reshape(12) + 1, lambda a: a.reshape(4, 3) * 2, lambda a: a.T - 1, lambda a: a.T + 0,
            lambda a: a.T * 1, lambda a: a[None] + 1, lambda a: a + 1, lambda a: np.broadcast_to(a[:1], (3, 4)) + 1,
            lambda a: a.reshape(12) * 3, lambda a: a[1:, ::2] + 1]
    cases = view_cases(ck)
    capture_and_replay(ck, lambda rng: [inputs(rng, "float32")], lambda x: tuple(c(x) for c in cases),
                       lambda a: tuple(r(a) for r in refs), "float32")


# ---- every name is classified ----
CAPTURED = (set(BINARY) | set(REFLECTED) | set(INPLACE) | set(UNARY) | set(FACTORIES) |
            {"matmul", "__matmul__", "copy_", "__setitem__", "fill_", "zero_", "rand", "randn",
             "randint", "uniform_", "normal_", "pow", "relu"})


def test_every_name_is_classified(ck):
    # cudakit.Tensor's own attributes (object's slots only where Tensor defines an operator
    # or conversion of its own) and the module's functions; dtypes are values, not ops.
    own = {n for n in vars(ck.Tensor)
           if not n.startswith("_pybind11")  # pybind11's own (e.g. _pybind11_conduit_v1_)
           and (n not in dir(object) or n in {"__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__",
                                           "__repr__", "__str__", "__hash__"})}
    module_names = {n for n in ck.tensor.__all__ if not isinstance(getattr(ck.tensor, n), ck.dtype)}
    names = own | module_names
    unclassified = sorted(names - CAPTURED - NO_KERNEL)
    assert not unclassified, (f"{unclassified}: give each a capture case in this file or list it in "
                              "NO_KERNEL with the reason it launches nothing")
    # Entries of object's own slots listed in METADATA may be absent from vars(Tensor).
    stale = sorted((CAPTURED | NO_KERNEL) - names - set(dir(object)) - {"__dict__", "__weakref__"})
    assert not stale, f"{stale}: listed here but no longer in cudakit.Tensor / cudakit.tensor"
