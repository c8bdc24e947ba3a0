"""`python -m cudakit info`: the bug-report environment dump."""
import json
import os
import pathlib
import subprocess
import sys


def _run(*args, backend=None):
    import cudakit

    env = dict(os.environ)
    env["PYTHONPATH"] = str(pathlib.Path(cudakit.__file__).resolve().parents[1])
    if backend:
        env["CUDAKIT_BACKEND"] = backend
    return subprocess.run([sys.executable, "-m", "cudakit", *args], env=env,
                          capture_output=True, text=True, timeout=120)


def test_info_json_reports_backend_devices_and_settings():
    import cudakit

    proc = _run("info", "--json", backend=os.environ.get("CUDAKIT_BACKEND"))
    assert proc.returncode == 0, proc.stderr
    rep = json.loads(proc.stdout)
    assert rep["backend"] == cudakit.backend_name()
    assert rep["cudakit"] == cudakit.__version__
    assert rep["device_count"] == cudakit.device_count()
    assert len(rep["devices"]) == cudakit.device_count()
    for dev in rep["devices"]:
        assert dev["total_memory"] > 0 and dev["name"]
    assert "allocator" in rep and "backend" in rep["allocator"]
    assert "optional_libraries" in rep


def test_info_reports_what_the_backend_can_do(ck):
    proc = _run("info", "--json", backend=os.environ.get("CUDAKIT_BACKEND"))
    assert proc.returncode == 0, proc.stderr
    caps = json.loads(proc.stdout)["capabilities"]
    assert set(caps) == {"host_addressable_device_memory", "runs_kernels", "vendor_math_handles",
                         "cross_process_ipc", "hardware_telemetry", "graph_tools_ids"}
    assert all(isinstance(v, bool) for v in caps.values())
    # The flags say what the calls do: without vendor handles the handle call refuses.
    if not caps["vendor_math_handles"]:
        import pytest
        with pytest.raises(NotImplementedError):
            ck.current_blas_handle()
    else:
        assert ck.current_blas_handle() != 0
    if ck.backend_name() == "emulated":  # its telemetry is a documented model
        assert not caps["hardware_telemetry"] and caps["host_addressable_device_memory"]


def test_info_text_form_names_the_backend():
    proc = _run("info")
    assert proc.returncode == 0, proc.stderr
    assert "backend:" in proc.stdout and "devices" in proc.stdout


def test_info_works_without_a_device():
    # The cuda backend on a machine without a driver must still produce a report.
    proc = _run("info", "--json", backend="cuda")
    assert proc.returncode == 0, proc.stderr
    rep = json.loads(proc.stdout)
    assert rep["backend"] == "cuda"
    assert isinstance(rep["is_available"], bool)


def test_unknown_command_exits_nonzero():
    proc = _run("frobnicate")
    assert proc.returncode != 0
