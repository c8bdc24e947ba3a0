import threading
import time

import pytest


def test_current_and_default_stream(ck):
    s = ck.current_stream()
    assert s == ck.default_stream()
    assert s.cuda_stream == 0
    assert s.device == "cuda:0"
    assert s.device_index == 0
    s.synchronize()  # an earlier test may have left work queued on the default stream
    assert s.query()
    assert s.__cuda_stream__() == (0, 0)


def test_stream_pool_and_context(ck):
    s = ck.Stream()
    assert s != ck.default_stream()
    assert isinstance(hash(s), int)
    with ck.stream(s):
        assert ck.current_stream() == s
        with ck.stream(None):  # no-op
            assert ck.current_stream() == s
    assert ck.current_stream() == ck.default_stream()
    ctx = ck.StreamContext(s)
    with ctx:
        assert ck.current_stream() == s
    hi = ck.Stream(priority=-1)
    assert hi.priority < 0
    assert ck.Stream(priority=0).priority == 0


def test_current_stream_is_per_thread(ck):
    s = ck.Stream()
    seen = {}
    with ck.stream(s):
        t = threading.Thread(target=lambda: seen.setdefault("other", ck.current_stream()))
        t.start()
        t.join()
        assert ck.current_stream() == s
    assert seen["other"] == ck.default_stream()


def test_set_stream(ck):
    s = ck.Stream()
    ck.set_stream(s)
    try:
        assert ck.current_stream() == s
    finally:
        ck.set_stream(ck.default_stream())


def test_external_stream(ck):
    s = ck.Stream()
    ext = ck.ExternalStream(s.cuda_stream)
    assert ext.cuda_stream == s.cuda_stream
    assert isinstance(ext, ck.Stream)
    assert ck.get_stream_from_external(s.cuda_stream, 0) == s


def test_events_and_timing(ck):
    s = ck.Stream()
    start = ck.Event(enable_timing=True)
    end = ck.Event(enable_timing=True)
    start.record(s)
    end.record(s)
    end.synchronize()
    assert start.query() and end.query()
    assert start.elapsed_time(end) >= 0.0
    assert start.device == "cuda:0"
    e = s.record_event()
    assert isinstance(e, ck.Event)
    e.wait(ck.current_stream())
    e.synchronize()
    ck.current_stream().wait_event(e)
    ck.current_stream().wait_stream(s)


def test_event_errors(ck):
    a, b = ck.Event(), ck.Event(enable_timing=True)
    assert a.query()  # never recorded
    a.synchronize()
    with pytest.raises(ValueError, match="enable_timing"):
        a.elapsed_time(b)
    c = ck.Event(enable_timing=True)
    with pytest.raises(ValueError, match="recorded"):
        b.elapsed_time(c)
    with pytest.raises(ValueError, match="timing"):
        ck.Event(enable_timing=True, interprocess=True)
    with pytest.raises(ValueError, match="interprocess"):
        a.ipc_handle()
    with pytest.raises(ValueError):
        ck.Event.from_ipc_handle(0, b"short")
    with pytest.raises(ValueError, match="cudakit.Stream"):
        a.record(object())


def test_ipc_event_roundtrip_in_process(ck):
    e = ck.Event(interprocess=True)
    e.record()
    h = e.ipc_handle()
    assert isinstance(h, bytes) and len(h) == 64
    if ck.backend_name() == "emulated":
        other = ck.Event.from_ipc_handle(0, h)
        other.synchronize()
        assert other.query()


def test_streams_from_many_threads(ck):
    errors = []

    def worker():
        try:
            s = ck.Stream()
            with ck.stream(s):
                for _ in range(50):
                    e = ck.Event()
                    e.record()
                    ck.current_stream().wait_event(e)
                ck.current_stream().synchronize()
        except Exception as ex:  # pragma: no cover - reported below
            errors.append(ex)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_stream_on_second_device(ck):
    if ck.device_count() < 2:
        pytest.skip("needs 2 devices")
    s1 = ck.Stream(device=1)
    assert s1.device_index == 1
    with ck.stream(s1):
        assert ck.current_device() == 1
        assert ck.current_stream() == s1
    assert ck.current_device() == 0
    e = ck.Event()
    e.record(ck.Stream(device=0))
    with pytest.raises(ValueError, match="device"):
        e.record(s1)


def test_foreign_stream_protocol(ck):
    s = ck.Stream()

    class Foreign:
        def __cuda_stream__(self):
            return (0, s.cuda_stream)

    with ck.stream(Foreign()):
        assert ck.current_stream().cuda_stream == s.cuda_stream


def test_foreign_stream_handle_is_a_clean_error(ck, emulated_only):
    # On the emulated backend a made-up handle is detected; on cuda the driver would crash.
    with pytest.raises(ck.AcceleratorError, match="not a live stream handle"):
        ck.ExternalStream(0xDEADBEEF0)
    ext = ck.ExternalStream(0xDEADBEEF0, device=0)  # device given: no lookup yet
    with pytest.raises(ck.AcceleratorError, match="not a live stream handle"):
        ext.query()
