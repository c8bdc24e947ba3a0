"""cudakit.matmul of N-D operands against NumPy (torch.matmul's rules): 1-D operands, batch
dims and their broadcasting, strided / transposed / broadcast (stride-0) operands, every
float dtype, device and host tensors, and the errors for shapes that do not multiply."""
import numpy as np
import pytest

import cudakit
import cudakit.tensor as T


@pytest.fixture(params=["cuda:0", "cpu"])
def where(request):
    if request.param != "cpu" and not cudakit.is_available():
        pytest.skip(f"no device on backend {cudakit.backend_name()}")
    return request.param


def values(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def on(x, where, dtype="float32"):
    return T.asarray(x, device=where).to(dtype)


def back(t):
    return np.asarray(t.to("float64").cpu())


SHAPES = [
    ((3,), (3,)),                 # dot product: 0-d
    ((2, 3), (3,)),               # matrix @ vector
    ((3,), (3, 4)),               # vector @ matrix
    ((5, 3), (3, 4)),             # plain product
    ((4, 3, 5), (4, 5, 2)),       # bmm
    ((4, 3, 5), (5, 2)),          # a batch against one matrix (folded into one GEMM)
    ((4, 3, 5), (5,)),            # a batch against a vector
    ((3, 5), (4, 5, 2)),          # one matrix against a batch (broadcast with stride 0)
    ((5,), (2, 4, 5, 3)),         # a vector against a batch
    ((2, 1, 3, 4), (5, 4, 6)),    # the batch dims broadcast: (2, 5, 3, 6)
    ((7, 1, 2, 3), (1, 6, 3, 2)), # both operands broadcast in different dims
    ((1, 3, 4), (6, 4, 2)),       # a batch of one broadcast to six
    ((2, 0, 3, 4), (4, 5)),       # an empty batch
    ((3, 0, 4), (3, 4, 2)),       # m == 0
    ((3, 2, 0), (3, 0, 4)),       # k == 0: zeros
]


@pytest.mark.parametrize("sa,sb", SHAPES, ids=[f"{a}@{b}" for a, b in SHAPES])
def test_shapes_match_numpy(where, sa, sb):
    a, b = values(sa, 1), values(sb, 2)
    r = on(a, where) @ on(b, where)
    expect = a @ b
    assert r.shape == expect.shape
    assert r.is_contiguous()
    np.testing.assert_allclose(back(r), expect, rtol=1e-5, atol=1e-5)
    # The function and the method are the same op.
    np.testing.assert_allclose(back(cudakit.matmul(on(a, where), on(b, where))), expect, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype,tol", [("float16", 2e-2), ("bfloat16", 5e-2), ("float64", 1e-12)])
def test_every_float_dtype(where, dtype, tol):
    a, b = values((3, 4, 6), 3), values((3, 6, 5), 4)
    ref = on(a, where, dtype).to("float64").cpu().numpy() @ on(b, where, dtype).to("float64").cpu().numpy()
    r = on(a, where, dtype) @ on(b, where, dtype)
    assert r.dtype == getattr(T, dtype) and r.shape == (3, 4, 5)
    np.testing.assert_allclose(back(r), ref, rtol=tol, atol=tol)


def test_strided_and_transposed_operands(where):
    """Views of every kind: BLAS reads row- and column-major matrices and a batch of one stride
    in place, and the rest is copied first; the values are NumPy's either way."""
    base = values((6, 5, 4), 5)
    a = on(base, where)
    y1, y2, y3 = values((6, 7, 5), 6), values((3, 4, 2), 7), values((5, 4, 2), 8)
    y4, y5, y6 = values((2, 3, 5, 1), 9), values((5, 3), 10), values((6, 2, 3), 11)
    x4, y7 = values((3, 2, 4, 5), 12), values((6, 3, 4), 13)
    cases = [
        # column-major matrices on both sides
        (a.transpose(1, 2), on(y1, where).transpose(1, 2), base.transpose(0, 2, 1), y1.transpose(0, 2, 1)),
        # every other matrix: a batch stride of two matrices
        (a[::2], on(y2, where), base[::2], y2),
        # batch and row dims swapped: rows 20 elements apart, matrices 4 apart
        (a.permute(1, 0, 2), on(y3, where), base.transpose(1, 0, 2), y3),
        # batch dims permuted: they do not flatten to one stride (copied)
        (on(x4, where).permute(1, 0, 2, 3), on(y4, where), x4.transpose(1, 0, 2, 3), y4),
        # column-major batch against one matrix: not foldable, the matrix broadcast (stride 0)
        (a.transpose(1, 2), on(y5, where), base.transpose(0, 2, 1), y5),
        # matrices neither row- nor column-major (copied)
        (a[:, ::2, ::2], on(y6, where), base[:, ::2, ::2], y6),
        # single-row matrices whose (unused) row stride is whatever the view left there
        (a[:, 1].unsqueeze(1), on(y7, where).transpose(1, 2), base[:, 1][:, None, :], y7.transpose(0, 2, 1)),
    ]
    for x, y, nx, ny in cases:
        r = x @ y
        assert r.is_contiguous()
        np.testing.assert_allclose(back(r), nx @ ny, rtol=1e-5, atol=1e-5)


def test_expanded_operand_is_not_copied(ck):
    """A stride-0 batch (an expanded matrix) runs as one strided batched GEMM in place: the
    product allocates its output only (no materialised copy of the broadcast operand)."""
    w = on(values((1, 16, 16), 8), "cuda:0").expand(32, 16, 16)
    x = on(values((32, 16, 8), 9), "cuda:0")
    _ = w @ x  # warm-up: the stream's cuBLAS workspace
    cudakit.synchronize()
    before = cudakit.memory_stats()["allocation.all.allocated"]
    r = w @ x
    cudakit.synchronize()
    made = cudakit.memory_stats()["allocation.all.allocated"] - before
    assert made == 1, f"{made} allocations for one broadcast product"
    np.testing.assert_allclose(back(r), values((1, 16, 16), 8) @ values((32, 16, 8), 9), rtol=1e-5, atol=1e-5)
    # A row expanded over the batch: stride 0 in the batch and in the (size-1) row dim.
    row = on(values((16,), 10), "cuda:0").expand(32, 1, 16)
    before = cudakit.memory_stats()["allocation.all.allocated"]
    r = row @ x
    cudakit.synchronize()
    assert cudakit.memory_stats()["allocation.all.allocated"] - before == 1
    np.testing.assert_allclose(back(r), values((16,), 10)[None, None, :] @ values((32, 16, 8), 9),
                               rtol=1e-5, atol=1e-5)


def test_mismatched_shapes_are_value_errors(where):
    f = lambda *s: on(np.ones(s, np.float32), where)
    with pytest.raises(ValueError, match=r"shapes \[2, 3, 4\] and \[2, 5, 6\] cannot be multiplied \(4 != 5\)"):
        f(2, 3, 4) @ f(2, 5, 6)
    with pytest.raises(ValueError, match=r"cannot be multiplied \(3 != 4\)"):
        f(3) @ f(2, 4, 5)
    with pytest.raises(ValueError, match=r"size of tensor a \(2\) must match the size of tensor b "
                                         r"\(3\) at non-singleton dimension 0"):
        f(2, 3, 4) @ f(3, 4, 5)
    with pytest.raises(ValueError, match=r"need at least 1 dimension, but they are 0-D and 1-D"):
        cudakit.matmul(f(), f(3))
    with pytest.raises(ValueError, match="same dtype"):
        f(2, 2, 2) @ f(2, 2).to("float64")
    with pytest.raises(ValueError, match="supports float16, bfloat16, float32 and float64"):
        f(2, 2, 2).to("int32") @ f(2, 2, 2).to("int32")


def _random_view(rng, shape, where):
    """A tensor of `shape` reached the way user code reaches one: a fresh array, a permuted
    stored layout viewed back, every other element of a larger one, or a broadcast (expand) of
    size-1 dims; with the NumPy array of the same values."""
    route = int(rng.integers(0, 4)) if shape else 0
    if route == 1:  # stored in another dim order, permuted back (a transpose-like view)
        perm = [int(p) for p in rng.permutation(len(shape))]
        stored = rng.standard_normal([shape[p] for p in perm]).astype(np.float32)
        inverse = [int(i) for i in np.argsort(perm)]
        return on(stored, where).permute(*inverse), stored.transpose(inverse)
    if route == 2:  # every other element along one dim
        d = int(rng.integers(0, len(shape)))
        big = list(shape)
        big[d] *= 2
        stored = rng.standard_normal(big).astype(np.float32)
        index = tuple(slice(None, None, 2) if i == d else slice(None) for i in range(len(shape)))
        return on(stored, where)[index], stored[index]
    if route == 3:  # size-1 dims expanded (stride 0)
        small = [1 if s > 1 and rng.random() < 0.5 else s for s in shape]
        stored = rng.standard_normal(small).astype(np.float32)
        return on(stored, where).expand(*shape), np.broadcast_to(stored, shape)
    x = rng.standard_normal(shape).astype(np.float32)
    return on(x, where), x


def test_random_shapes_and_views_match_numpy(where):
    """300 seeded products of random shapes (1-D operands, 0-3 batch dims, size-1 dims that
    broadcast, operands with fewer batch dims) over random views, against NumPy's matmul."""
    rng = np.random.default_rng(2026)
    for case in range(300):
        m, n, k = (int(v) for v in rng.integers(1, 6, size=3))
        batch = [int(v) for v in rng.integers(1, 4, size=int(rng.integers(0, 4)))]

        def batch_dims():  # a suffix of the batch, some dims 1 (broadcast)
            dims = batch[int(rng.integers(0, len(batch) + 1)):]
            return [1 if rng.random() < 0.3 else d for d in dims]

        sa = [k] if rng.random() < 0.15 else batch_dims() + [m, k]
        sb = [k] if rng.random() < 0.15 else batch_dims() + [k, n]
        x, nx = _random_view(rng, sa, where)
        y, ny = _random_view(rng, sb, where)
        expect = np.matmul(nx.astype(np.float64), ny.astype(np.float64))
        r = x @ y
        assert r.shape == expect.shape, (case, sa, sb)
        np.testing.assert_allclose(back(r), expect, rtol=1e-4, atol=1e-4, err_msg=f"case {case}: {sa} @ {sb}")


def test_batched_products_in_a_graph_replay_with_new_inputs(ck):
    """The way a model's attention runs under CUDA graphs: a batched product, a batch against
    one broadcast weight (stride 0) and a batch against a vector, captured once and replayed
    after the inputs were overwritten in place; every replay reads the new values."""
    q = on(values((8, 16, 32), 20), "cuda:0")
    k = on(values((8, 32, 24), 21), "cuda:0")
    w = on(values((1, 24, 12), 22), "cuda:0").expand(8, 24, 12)
    v = on(values((12,), 23), "cuda:0")
    q @ k  # warm-up outside the capture (the stream's workspace), as torch users do
    ck.synchronize()
    g = ck.CUDAGraph()
    with ck.graph(g):
        s = q @ k       # (8, 16, 24): strided batched
        h = s @ w       # (8, 16, 12): one weight broadcast over the batch
        o = h @ v       # (8, 16): a batch against a vector
    for seed in (30, 40):
        nq, nk = values((8, 16, 32), seed), values((8, 32, 24), seed + 1)
        q.copy_(on(nq, "cuda:0"))
        k.copy_(on(nk, "cuda:0"))
        g.replay()
        ck.synchronize()
        ns = nq.astype(np.float64) @ nk
        nh = ns @ values((1, 24, 12), 22)
        np.testing.assert_allclose(back(s), ns, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(back(h), nh, rtol=1e-4, atol=1e-3)
        np.testing.assert_allclose(back(o), nh @ values((12,), 23), rtol=1e-4, atol=1e-3)
