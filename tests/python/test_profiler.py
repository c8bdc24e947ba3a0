"""cudakit.profiler start/stop/profile: the emulated backend's recorded state in CI,
cuProfilerStart/Stop on a GPU, and a clear error on the cuda backend without a device."""
import os
import subprocess
import sys
import textwrap
import threading

import pytest

import cudakit
import cudakit.profiler as profiler


def state():
    return cudakit._C._profiler_state()


def test_torch_names_exist():
    assert cudakit.profiler is profiler
    assert profiler.__all__[:3] == ["start", "stop", "profile"]  # torch's, then the tracer's
    assert set(profiler.__all__[3:]) == {"trace", "save_annotations", "merge_annotations"}


def test_start_stop_toggle_the_state(ck):
    before = state()
    profiler.start()
    s = state()
    assert s["active"] is True and s["starts"] == before["starts"] + 1
    profiler.start()  # idempotent
    assert state()["active"] is True
    profiler.stop()
    s = state()
    assert s["active"] is False and s["stops"] == before["stops"] + 1
    profiler.stop()
    assert state()["active"] is False


def test_profile_context_manager(ck):
    with profiler.profile() as p:
        assert p is None
        assert state()["active"] is True
    assert state()["active"] is False
    with pytest.raises(KeyError):
        with profiler.profile():
            raise KeyError("inside")
    assert state()["active"] is False  # stopped on the way out of an exception


def test_start_from_another_thread_is_process_wide(ck):
    t = threading.Thread(target=profiler.start)
    t.start()
    t.join()
    assert state()["active"] is True
    profiler.stop()
    assert state()["active"] is False


@pytest.mark.gpu
def test_start_stop_on_the_gpu(ck):
    profiler.start()
    assert state()["active"] is True
    profiler.stop()
    with profiler.profile():
        pass
    t = threading.Thread(target=lambda: (profiler.start(), profiler.stop()))
    t.start()
    t.join()


def test_cuda_backend_without_a_device_is_a_clear_error():
    code = textwrap.dedent("""
        import cudakit, cudakit.profiler as profiler
        if cudakit.is_available():
            print("SKIP a CUDA device is present")
            raise SystemExit(0)
        try:
            profiler.start()
        except cudakit.AcceleratorError as e:
            assert "profiler_start" in str(e), str(e)
            assert isinstance(e, RuntimeError)
        else:
            raise AssertionError("start() did not raise without a device")
        try:
            with profiler.profile():
                raise AssertionError("the block ran")
        except cudakit.AcceleratorError:
            pass
        print("OK")
    """)
    env = dict(os.environ, CUDAKIT_BACKEND="cuda")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    if out.stdout.startswith("SKIP"):
        pytest.skip(out.stdout.strip())
    assert out.stdout.strip() == "OK"
