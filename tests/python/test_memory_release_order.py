"""Memory of an op result returns to the allocator at `del`, before the stream ran the op
(torch's semantics: the block is reused only in stream order), on both backends; and
releasing segments while queued work still uses them is safe (the emulated backend defers
the host free until the streams ran what was queued before it, as cuMemFree synchronises)."""
import numpy as np
import pytest


@pytest.fixture
def busy_stream(ck):
    """The current stream, blocked for a moment by a sleeping host task, so that the ops
    enqueued after it are still queued while the test inspects the allocator."""
    s = ck.current_stream()
    # A 0.3 s device-side delay without a kernel: a host function that sleeps (emulated: a
    # host task; cuda: cuLaunchHostFunc).
    from cudakit import _C

    if not hasattr(_C, "_launch_host_sleep"):
        pytest.skip("needs _C._launch_host_sleep")
    _C._launch_host_sleep(s, 0.3)
    return s


def test_del_of_an_op_result_frees_before_the_stream_ran_it(ck, busy_stream):
    x = ck.ones(1 << 18)
    base = ck.memory_allocated()
    y = x * 2  # queued behind the sleep
    assert ck.memory_allocated() > base
    del y
    assert ck.memory_allocated() == base  # at del, not when the stream catches up
    ck.synchronize()


def test_releasing_segments_under_queued_work_is_safe(ck, busy_stream):
    base = ck.memory_allocated()
    x = ck.full((1 << 18,), 3.0)
    outs = []
    for i in range(8):
        t = x * float(i)  # an intermediate freed before its op ran
        outs.append((t + 1.0).sum())
        del t
    ck.empty_cache()  # the intermediates' segments go while their ops are still queued
    ck.synchronize()
    got = [float(o.cpu().numpy()) for o in outs]
    want = [float((3.0 * i + 1.0) * (1 << 18)) for i in range(8)]
    assert np.allclose(got, want)
    del outs, x
    ck.empty_cache()
    assert ck.memory_allocated() == base  # nothing leaked
