import os
import subprocess
import sys
import textwrap
import warnings

import pytest


def test_import_does_not_initialise():
    code = "import cudakit; print(cudakit.is_initialized())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=os.environ.copy(), check=True)
    assert out.stdout.strip() == "False"


def test_device_queries(ck):
    assert ck.device_count() >= 1
    ck.init()
    assert ck.is_initialized()
    assert ck.current_device() == 0
    props = ck.get_device_properties(0)
    assert props.name == ck.get_device_name(0) == ck.get_device_name("cuda:0")
    assert (props.major, props.minor) == ck.get_device_capability()
    assert props.total_memory > 0 and props.multi_processor_count > 0
    assert len(props.uuid) == 36
    assert "total_memory" in repr(props)
    assert isinstance(ck.is_bf16_supported(), bool)
    assert isinstance(ck.is_tf32_supported(), bool)
    assert isinstance(ck.get_arch_list(), list)
    ck.synchronize()
    ck.synchronize(0)


def test_device_arguments(ck):
    assert ck._get_device_index("cuda:0") == 0
    assert ck._get_device_index(0) == 0
    assert ck._get_device_index(None) == ck.current_device()
    assert ck._get_device_index(ck.Device("cuda", 0)) == 0
    assert ck.Device("cuda:0") == "cuda:0"
    assert repr(ck.Device("cuda:0")) == "device(type='cuda', index=0)"

    class TorchLike:
        type = "cuda"
        index = 0

    assert ck._get_device_index(TorchLike()) == 0
    with pytest.raises(ValueError, match="Invalid device index"):
        ck.get_device_properties(99)
    with pytest.raises(ValueError, match="Invalid device string"):
        ck.get_device_name("gpu:0")

    class CpuLike:
        type = "cpu"
        index = None

    with pytest.raises(ValueError, match="cuda device"):
        ck.get_device_name(CpuLike())


def test_every_entry_point_reports_a_bad_device_index_alike(ck):
    n = ck.device_count()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    expected = (f"Invalid device index 99: this process sees {n} device(s) on the "
                f"'{ck.backend_name()}' backend, so valid indices are 0..{n - 1}; CUDA_VISIBLE_DEVICES="
                + ("unset" if visible is None else f"'{visible}'"))
    calls = {
        "set_device": lambda: ck.set_device(99),
        "synchronize": lambda: ck.synchronize("cuda:99"),
        "memory_stats": lambda: ck.memory.memory_stats(99),
        "memory_allocated": lambda: ck.memory.memory_allocated(99),
        "caching_allocator_alloc": lambda: ck.memory.caching_allocator_alloc(16, 99),
        "empty": lambda: ck.empty(4, device=99),
        "Stream": lambda: ck.Stream(device=99),
    }
    for name, call in calls.items():
        with pytest.raises(ValueError) as e:
            call()
        assert expected in str(e.value), (name, str(e.value))
    # An index past what the argument layer accepts reads the same.
    with pytest.raises(ValueError, match=r"Invalid device index 4096: this process sees"):
        ck.empty(4, device=4096)


def test_device_context_manager(ck):
    if ck.device_count() < 2:
        pytest.skip("needs 2 devices")
    ck.set_device(0)
    with ck.device(1) as d:
        assert ck.current_device() == 1
        assert d.prev_idx == 0
    assert ck.current_device() == 0
    with ck.device(None):
        assert ck.current_device() == 0
    with ck.device("cuda:1"):
        assert ck.current_device() == 1
    assert ck.current_device() == 0


def test_device_of(ck):
    class Arr:
        def __init__(self, dev):
            self.dev = dev

        def __dlpack_device__(self):
            return self.dev

    if ck.device_count() >= 2:
        with ck.device_of(Arr((2, 1))):
            assert ck.current_device() == 1
    with ck.device_of(Arr((1, 0))):  # host array: no-op
        assert ck.current_device() == 0


def test_peer_access(ck):
    assert ck.can_device_access_peer(0, 0) is False
    if ck.device_count() >= 2:
        assert isinstance(ck.can_device_access_peer(0, 1), bool)


def test_sync_debug_mode(ck):
    ck.set_sync_debug_mode("default")  # also under CUDAKIT_TEST_SYNC_DEBUG (conftest.py)
    assert ck.get_sync_debug_mode() == 0
    ck.set_sync_debug_mode("warn")
    try:
        assert ck.get_sync_debug_mode() == 1
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            ck.current_stream().synchronize()
        assert any("synchronizing" in str(x.message) for x in w)
        ck.set_sync_debug_mode(2)
        with pytest.raises(RuntimeError, match="synchronizing"):
            ck.current_stream().synchronize()
        # As torch: the device-wide synchronize() and Event.synchronize() are not reported
        # (graph capture itself begins with a device synchronize).
        ck.synchronize()
        e = ck.Event()
        e.record()
        e.synchronize()
    finally:
        ck.set_sync_debug_mode("default")
    with pytest.raises(RuntimeError, match="invalid value of debug_mode"):
        ck.set_sync_debug_mode("loud")


def test_check_error_and_exceptions(ck):
    with pytest.raises(ck.AcceleratorError) as info:
        ck.check_error(101)
    assert info.value.code == 101
    assert "CUDA_ERROR_INVALID_DEVICE" in str(info.value)
    with pytest.raises(ck.OutOfMemoryError):
        ck.check_error(2)
    assert issubclass(ck.OutOfMemoryError, RuntimeError)
    assert issubclass(ck.AcceleratorError, RuntimeError)
    ck.check_error(0)


def test_telemetry(ck):
    used = ck.device_memory_used()
    assert used >= 0
    util = ck.utilization()
    assert 0 <= util <= 100
    # Every backend answers every call (the emulated one from its documented model).
    assert 0 < ck.temperature() < 120
    assert ck.power_draw() > 0
    assert ck.clock_rate() > 0
    assert 0 <= ck.memory_usage() <= 100


def test_fork_after_init_raises(ck):
    code = textwrap.dedent("""
        import os, cudakit
        cudakit.init()
        pid = os.fork()
        if pid == 0:
            try:
                cudakit.current_device()
                os._exit(1)
            except RuntimeError as e:
                os._exit(0 if "forked subprocess" in str(e) else 2)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=os.environ.copy(), check=True)
    assert out.stdout.strip() == "0"


def test_unknown_backend_is_a_clear_error():
    env = dict(os.environ, CUDAKIT_BACKEND="opencl")
    code = "import cudakit\ntry:\n  cudakit.init()\nexcept ValueError as e:\n  print(e)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert "unknown cudakit backend 'opencl'" in out.stdout


def test_cuda_backend_without_driver_reports_unavailable():
    env = dict(os.environ, CUDAKIT_BACKEND="cuda")
    code = ("import cudakit\n"
            "if cudakit.is_available(): print('available')\n"
            "else:\n"
            "  try:\n    cudakit.init()\n  except RuntimeError as e: print('unavailable:', e)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(("available", "unavailable: "))
