"""cudakit.green_contexts (torch.cuda.green_contexts): creation and its errors, green streams
as ordinary cudakit streams (ops, events, wait_stream, allocator, graphs), the deprecated
set_context/pop_context, and on the GPU the SM scaling check (a bf16 8192^3 GEMM is several
times slower on 16 SMs than on the whole device)."""
import warnings

import numpy as np
import pytest


def rounded(rules, n):
    c = max(n, rules["min_partition_sms"])
    a = rules["sm_alignment"]
    return (c + a - 1) // a * a


def test_create_rounds_to_the_device_rules(ck):
    from cudakit.green_contexts import GreenContext

    rules = GreenContext.sm_resource()
    assert rules["sm_count"] == ck.get_device_properties(0).multi_processor_count
    for n in (1, 16, 66):
        g = GreenContext.create(n)
        assert g.sm_count == rounded(rules, n)
        assert g.device_id == ck.current_device()
        assert "GreenContext" in repr(g)
    g = GreenContext(num_sms=8, device_id=0)
    assert g.device_id == 0


def test_impossible_counts_and_bad_arguments(ck):
    from cudakit.green_contexts import GreenContext

    rules = GreenContext.sm_resource()
    for n in (0, -3, rules["sm_count"] + 1):
        with pytest.raises(ValueError, match=f"num_sms={n}.*accepted 1\\.\\."):
            GreenContext.create(n)
    with pytest.raises(TypeError):
        GreenContext.create("8")
    with pytest.raises(ValueError, match="device"):
        GreenContext.create(8, device_id=ck.device_count())


def test_green_streams_are_ordinary_streams(ck):
    from cudakit.green_contexts import GreenContext

    g = GreenContext.create(16)
    s = g.Stream()
    assert isinstance(s, ck.Stream)
    assert s.device_index == g.device_id
    with ck.stream(s):
        assert ck.current_stream() == s
        a = ck.full((64, 32), 2.0, device="cuda")
        b = ck.full((32, 16), 0.5, device="cuda")
        c = a @ b + 1.0  # the caching allocator serves the green stream
    other = ck.Stream()
    other.wait_stream(s)
    with ck.stream(other):
        d = c * 2.0
    e = ck.Event()
    e.record(other)
    s.wait_event(e)
    with ck.stream(s):
        f = d - 1.0
    s.synchronize()
    assert np.array_equal(f.cpu().numpy(), np.full((64, 16), 65.0, dtype=np.float32))


def test_streams_keep_their_context_alive(ck):
    from cudakit.green_contexts import GreenContext

    s = GreenContext.create(8).Stream()  # the context object is otherwise unreferenced
    with ck.stream(s):
        x = ck.ones(1000, device="cuda") * 5
    s.synchronize()
    assert (x.cpu().numpy() == 5).all()


def test_graphs_on_a_green_stream(ck):
    from cudakit.green_contexts import GreenContext

    g = GreenContext.create(8)
    s = g.Stream()
    x = ck.ones(256, device="cuda")
    graph = ck.CUDAGraph()
    with ck.graph(graph, stream=s):
        y = x * 3.0 + 1.0
    x.fill_(2.0)
    ck.synchronize()
    graph.replay()
    ck.synchronize()
    assert (y.cpu().numpy() == 7.0).all()


def test_set_and_pop_context_are_deprecated_and_switch_the_stream(ck):
    from cudakit.green_contexts import GreenContext

    g = GreenContext.create(8)
    before = ck.current_stream()
    x = ck.full((1024,), 5.0, device="cuda")
    with pytest.warns(DeprecationWarning, match="deprecated"):
        g.set_context()
    assert ck.current_stream() != before
    y = x + 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with pytest.raises(RuntimeError, match="twice"):
            g.set_context()
    with pytest.warns(DeprecationWarning):
        g.pop_context()
    assert ck.current_stream() == before
    assert (y.cpu().numpy() == 6.0).all()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with pytest.raises(RuntimeError, match="without a matching"):
            g.pop_context()


@pytest.mark.gpu
def test_sm_scaling_of_a_bf16_gemm(ck):
    """The partition really confines kernels: torch measured 1.38 ms (whole H200), 9.88 ms
    (16 SMs) and 2.27 ms (66 SMs) for this GEMM; bench/green_contexts has the full table."""
    from cudakit.green_contexts import GreenContext

    n = 8192
    a = ck.ones(n, n, dtype=ck.bfloat16, device="cuda")
    b = ck.ones(n, n, dtype=ck.bfloat16, device="cuda")
    # a and b are written on the current stream and read on others: wait for them (the
    # stream sanitizer, which the python.pytest.sanitizer suite turns on, reports the race)
    ck.synchronize()

    def gemm_ms(stream):
        with ck.stream(stream):
            for _ in range(3):
                a @ b
            start, end = ck.Event(enable_timing=True), ck.Event(enable_timing=True)
            start.record()
            for _ in range(10):
                a @ b
            end.record()
        end.synchronize()
        return start.elapsed_time(end) / 10

    whole = gemm_ms(ck.Stream())
    small = gemm_ms(GreenContext.create(16).Stream())
    medium = gemm_ms(GreenContext.create(66).Stream())
    assert small > 4 * whole, (whole, small, medium)
    assert 1.2 * whole < medium < small / 2, (whole, small, medium)
