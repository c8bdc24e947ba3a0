"""The stream sanitizer from Python (cudakit.sanitizer, torch.cuda._sanitizer): racy programs
are reported in torch's CSAN format with both Python stacks, properly synchronised ones are not
— eager ops on several streams, events, host synchronisation, graph replays and declared
foreign kernels (tensors, __cuda_array_interface__ objects, raw pointers). Runs on either
backend; the races here are provoked on purpose and caught."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

THIS = pathlib.Path(__file__).name


@pytest.fixture
def san(ck):
    from cudakit import sanitizer

    was, mode = sanitizer.is_enabled(), sanitizer.on_race()
    sanitizer.disable()
    sanitizer.enable("raise")
    yield sanitizer
    ck.synchronize()
    sanitizer.disable()
    if was:
        sanitizer.enable(mode)


def write_on(ck, stream, x):
    with ck.stream(stream):
        x.mul_(1)


def test_race_raises_with_both_python_stacks(ck, san):
    x = ck.ones(16, device="cuda")
    s = ck.Stream()
    with pytest.raises(san.CUDASanitizerErrors) as info:
        with ck.stream(s):
            x.add_(1)  # unordered after ones()' fill on the default stream
    err = info.value
    assert len(err.errors) == 1
    e = err.errors[0]
    assert isinstance(e, san.UnsynchronizedAccessError)
    assert e.data_ptr == x.data_ptr()
    assert e.allocation_size >= 64
    assert e.current_access.stream == s.cuda_stream
    assert e.previous_access.stream == 0
    assert e.current_access.type is san.AccessType.WRITE
    assert e.current_access.operator == "add_"
    assert e.previous_access.operator == "fill_"
    text = str(err)
    assert f"CSAN detected a possible data race on tensor with data pointer {x.data_ptr()}" in text
    assert f"Access by stream {s.cuda_stream}" in text
    assert "Previous access by stream 0" in text
    # Python frames of both accesses and of the allocation, with their source lines.
    assert text.count(f'{THIS}", line') >= 3, text
    assert "x.add_(1)" in text and "x = ck.ones(16, device=\"cuda\")" in text
    assert "Tensor was allocated with stack trace" in text
    # Raise mode: the racy op was not enqueued.
    ck.synchronize()
    assert x.sum().item() == 16


def test_synchronised_streams_are_quiet(ck, san):
    a, b = ck.Stream(), ck.Stream()
    x = ck.ones(64, device="cuda")
    a.wait_stream(ck.current_stream())
    write_on(ck, a, x)
    e = ck.Event()
    e.record(a)
    b.wait_event(e)
    write_on(ck, b, x)
    b.synchronize()
    y = x * 2  # default stream, after the host waited for b
    e2 = ck.current_stream().record_event()
    e2.synchronize()  # the host waited for y's writer
    write_on(ck, a, y)
    ck.synchronize()
    write_on(ck, b, y)
    with ck.stream(b):
        z = y + x  # same stream as y's last writer; x's last write was on b too
    ck.current_stream().wait_stream(b)
    assert np.all(z.cpu().numpy() == 3)
    stats = san.stats()
    assert stats["races"] == 0
    assert stats["accesses"] >= 8 and stats["streams"] >= 3


def test_reads_may_overlap_writes_may_not(ck, san):
    a, b = ck.Stream(), ck.Stream()
    x = ck.zeros(2, 64, device="cuda")
    ck.synchronize()
    with ck.stream(a):
        _ = x * 2
    with ck.stream(b):
        _ = x + 1  # read / read: fine
        with pytest.raises(san.CUDASanitizerErrors) as info:
            x[1].fill_(5)  # writes row 1 while a may still read all of x
    e = info.value.errors[0]
    assert e.previous_access.type is san.AccessType.READ
    assert e.previous_access.stream == a.cuda_stream
    assert e.overlap == (x.data_ptr() + 256, x.data_ptr() + 512)
    ck.synchronize()


def test_views_race_only_where_they_overlap(ck, san):
    a, b = ck.Stream(), ck.Stream()
    x = ck.zeros(2, 64, device="cuda")
    ck.synchronize()
    with ck.stream(a):
        x[0].fill_(1)
    with ck.stream(b):
        x[1].fill_(2)  # other bytes of the same allocation: fine
        with pytest.raises(san.CUDASanitizerErrors):
            x.fill_(3)  # overlaps row 0
    ck.synchronize()  # before x is freed: a and b used it


def test_warn_mode_warns_and_runs(ck, san):
    san.enable("warn")
    assert san.on_race() == "warn"
    x = ck.ones(8, device="cuda")
    ck.synchronize()
    y = x + 0  # a read of x on the current stream, still unordered with stream s
    s = ck.Stream()
    with pytest.warns(san.SanitizerWarning, match="CSAN detected a possible data race"):
        with ck.stream(s):
            x.mul_(3)  # writes what y's kernel reads: the race; x itself was ready
    ck.synchronize()
    # The racy op ran. (The check used to race too: x's fill ran on the current stream and
    # mul_ on s; a scalar operand hid that while it synchronized the stream, issue 24.)
    assert x.sum().item() == 24
    del y


def test_copy_without_the_gil_still_names_python_frames(ck, san):
    x = ck.ones(32, device="cuda")
    s = ck.Stream()
    with pytest.raises(san.CUDASanitizerErrors) as info:
        with ck.stream(s):
            x.copy_(ck.zeros(32, device="cuda"))  # copy_ releases the GIL
    text = str(info.value)
    assert "x.copy_(ck.zeros(32" in text, text
    assert info.value.errors[0].current_access.operator == "copy_"


def test_first_use_on_another_stream_follows_the_allocation(ck, san):
    warm = ck.ones(4, device="cuda")  # work on the default stream
    x = ck.empty(4, device="cuda")  # may be a block that work just freed
    s = ck.Stream()
    with pytest.raises(san.CUDASanitizerErrors, match="handed out by the caching allocator"):
        with ck.stream(s):
            x.fill_(1)
    s.wait_stream(ck.current_stream())
    with ck.stream(s):
        x.fill_(1)
    del warm


def test_graph_replay_racy_and_synchronised(ck, san):
    x = ck.ones(64, device="cuda")
    g = ck.CUDAGraph()
    with ck.graph(g):
        y = x * 2
    assert san.stats()["captured"] >= 2
    g.replay()
    reader = ck.Stream()
    with pytest.raises(san.CUDASanitizerErrors) as info:
        with ck.stream(reader):
            y.sum()
    assert info.value.errors[0].previous_access.operator == "CUDAGraph.replay"
    reader.wait_stream(ck.current_stream())
    with ck.stream(reader):
        total = y.sum()
    ck.current_stream().wait_stream(reader)
    assert total.item() == 128
    g.replay()  # after the reader, as ordered above


def test_declared_foreign_kernel_context_manager(ck, san):
    x = ck.ones(32, device="cuda")
    s = ck.Stream()
    # A kernel we "launch" on s that writes x: unordered after x's fill.
    with pytest.raises(san.CUDASanitizerErrors) as info:
        with san.access(writes={"out": x}, stream=s, name="my_kernel"):
            pass
    cur = info.value.errors[0].current_access
    assert cur.operator == "my_kernel" and cur.aliases == ["out"]
    s.wait_stream(ck.current_stream())
    with san.access(reads=[x], writes={"out": x}, stream=s, name="my_kernel"):
        pass
    # The default stream reads what the foreign kernel wrote, unordered.
    with pytest.raises(san.CUDASanitizerErrors) as info:
        _ = x + 1
    prev = info.value.errors[0].previous_access
    assert prev.operator == "my_kernel" and prev.aliases == ["out"]
    # Nothing is declared when the block raises.
    before = san.stats()["accesses"]
    with pytest.raises(KeyError):
        with san.access(writes=[x], stream=s):
            raise KeyError("launch failed")
    assert san.stats()["accesses"] == before


class FakeCupyArray:
    """What CuPy hands over: __cuda_array_interface__ (here over cudakit memory)."""

    def __init__(self, ptr, shape, typestr="<f4", strides=None):
        self.__cuda_array_interface__ = {"data": (ptr, False), "shape": shape, "typestr": typestr,
                                         "strides": strides, "version": 3}


def test_declared_buffers_by_array_interface_and_raw_pointer(ck, san):
    x = ck.zeros(256, device="cuda")
    ck.synchronize()
    s = ck.Stream()
    with ck.stream(s):
        x[:128].fill_(1)  # s writes the first half (bytes 0..511)
    # An array over the second half, declared on the default stream: disjoint, fine.
    with san.access(writes=FakeCupyArray(x.data_ptr() + 512, (128,))):
        pass
    # A raw (pointer, nbytes) range inside the first half: races with s's write.
    with pytest.raises(san.CUDASanitizerErrors):
        with san.access(reads=(x.data_ptr() + 16, 16)):
            pass
    # The real thing: a cudakit tensor's own __cuda_array_interface__.
    with pytest.raises(san.CUDASanitizerErrors):
        with san.access(reads=[FakeCupyArray(**_cai_args(x))]):
            pass
    # Host memory is ignored.
    host = np.zeros(16, dtype=np.float32)
    with san.access(writes=(host.ctypes.data, host.nbytes), stream=s):
        pass


def _cai_args(t):
    cai = t.__cuda_array_interface__
    return {"ptr": cai["data"][0], "shape": cai["shape"], "typestr": cai["typestr"],
            "strides": cai.get("strides")}


def test_declared_kernel_decorator_binds_parameter_names(ck, san):
    calls = []

    @san.access(reads=["src"], writes=["dst"], name="scale_kernel")
    def launch(src, dst, factor=2.0):
        calls.append(factor)
        return "launched"

    a = ck.ones(16, device="cuda")
    b = ck.zeros(16, device="cuda")
    s = ck.Stream()
    s.wait_stream(ck.current_stream())
    with ck.stream(s):
        assert launch(a, dst=b) == "launched"  # declared on s: ordered, fine
    with pytest.raises(san.CUDASanitizerErrors) as info:
        b.fill_(0)  # the default stream writes what scale_kernel wrote on s
    prev = info.value.errors[0].previous_access
    assert prev.operator == "scale_kernel" and prev.aliases == ["dst"]
    assert calls == [2.0]
    assert launch.__name__ == "launch"


def test_disabled_sanitizer_tracks_nothing(ck, san):
    san.disable()
    assert not san.is_enabled()
    x = ck.ones(4, device="cuda")
    write_on(ck, ck.Stream(), x)
    with san.access(writes=[x]):
        pass
    assert san.stats()["accesses"] == 0


def test_free_while_another_stream_uses_memory_warns(ck, san):
    s = ck.Stream()
    n = 1 << 12
    p = ck.caching_allocator_alloc(n, stream=ck.current_stream())
    with san.access(writes=(p, n), stream=s, name="writer"):
        pass
    with pytest.warns(san.SanitizerWarning, match="The memory is freed"):
        ck.caching_allocator_delete(p)
    q = ck.caching_allocator_alloc(n, stream=ck.current_stream())
    with san.access(writes=(q, n), stream=s, name="writer"):
        pass
    with warnings.catch_warnings():
        warnings.simplefilter("error", san.SanitizerWarning)
        ck.current_stream().wait_stream(s)
        ck.caching_allocator_delete(q)


def test_bad_inputs(ck, san):
    with pytest.raises(ValueError, match="on_race"):
        san.enable("sometimes")
    assert san.is_enabled() and san.on_race() == "raise"
    with pytest.raises(TypeError, match="reads"):
        with san.access(reads=[object()]):
            pass
    with pytest.raises(TypeError, match="parameter names"):
        with san.access(reads=["x"]):
            pass
    with pytest.raises(ValueError, match="no parameter 'nope'"):
        san.access(writes=["nope"])(lambda x: x)
    with pytest.raises(TypeError, match="name"):
        san.access(name=3)
    with pytest.raises(ValueError, match="typestr"):
        with san.access(reads=FakeCupyArray(1 << 40, (4,), typestr="<f")):
            pass


def test_torch_module_name_and_names(ck, san):
    from cudakit import _sanitizer

    san.disable()
    assert not _sanitizer.cuda_sanitizer.enabled
    _sanitizer.enable_cuda_sanitizer()
    assert _sanitizer.cuda_sanitizer.enabled and san.on_race() == "raise"
    assert issubclass(_sanitizer.UnsynchronizedAccessError, _sanitizer.SynchronizationError)
    assert str(_sanitizer.AccessType.READ) == "reading from"


@pytest.mark.parametrize("env,expected", [
    ({"CUDAKIT_CUDA_SANITIZER": "1"}, "raise"),
    ({"CUDAKIT_CUDA_SANITIZER": "warn"}, "warn"),
    ({"TORCH_CUDA_SANITIZER": "1"}, "raise"),
    ({"CUDAKIT_CUDA_SANITIZER": "0"}, "off"),
    ({"CUDAKIT_CUDA_SANITIZER": "", "TORCH_CUDA_SANITIZER": ""}, "off"),
])
def test_environment_switch(env, expected):
    script = textwrap.dedent("""
        import cudakit
        s = cudakit.sanitizer
        print(s.on_race() if s.is_enabled() else "off")
    """)
    base = {k: v for k, v in os.environ.items()
            if k not in ("CUDAKIT_CUDA_SANITIZER", "TORCH_CUDA_SANITIZER")}
    out = subprocess.run([sys.executable, "-c", script], env={**base, **env}, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == expected


def test_sanitized_suite_runs_with_the_sanitizer_on(ck):
    """ctest python.pytest.sanitizer sets CUDAKIT_CUDA_SANITIZER=1: the suite really is checked."""
    from cudakit import sanitizer

    if os.environ.get("CUDAKIT_CUDA_SANITIZER") not in ("1", "raise"):
        pytest.skip("only in the sanitized run")
    assert sanitizer.is_enabled() and sanitizer.on_race() == "raise"
    x = ck.ones(4, device="cuda")
    before = sanitizer.stats()["accesses"]
    _ = x + 1
    assert sanitizer.stats()["accesses"] > before
