"""Issue 30 from Python: the capability query, raw-pointer copies, checked stream priorities,
CUDAGraph.update, and the newcomer's import error."""
import os
import pathlib
import subprocess
import sys

import pytest

import cudakit

ROOT = pathlib.Path(__file__).resolve().parents[2]
needs_device = pytest.mark.skipif(not cudakit.is_available(), reason="no device")


def test_backend_capabilities():
    c = cudakit.backend_capabilities()
    assert c.backend == cudakit.backend_name()
    d = c._asdict()
    assert set(d) == {"backend", "runs_kernels", "host_addressable_device_memory",
                      "vendor_math_handles", "cross_process_ipc", "hardware_telemetry",
                      "graph_tools_ids"}
    assert all(isinstance(v, bool) for k, v in d.items() if k != "backend")
    assert repr(c).startswith("BackendCapabilities(backend=")
    # What the capability promises holds: device memory reads on the host only when it says so.
    if c.host_addressable_device_memory and cudakit.is_available():
        import ctypes
        x = cudakit.full((4,), 7, dtype=cudakit.int32)
        cudakit.synchronize()
        assert ctypes.c_int32.from_address(x.data_ptr()).value == 7


@needs_device
def test_memcpy_and_memset_async_on_tensors():
    a = cudakit.zeros(256, dtype=cudakit.uint8)
    b = cudakit.zeros(256, dtype=cudakit.uint8)
    s = cudakit.Stream()
    s.wait_stream(cudakit.current_stream())  # a and b were zeroed there
    cudakit.memset_async(a.data_ptr(), 0x2A, 128, stream=s)
    cudakit.memcpy_async(b.data_ptr(), a.data_ptr(), 256, stream=s)
    s.synchronize()
    assert b[:128].sum().item() == 0x2A * 128
    assert b[128:].sum().item() == 0
    with pytest.raises(ValueError, match="-128..255"):
        cudakit.memset_async(a.data_ptr(), 1000, 4)
    with pytest.raises(ValueError, match="dst is a null pointer"):
        cudakit.memcpy_async(0, a.data_ptr(), 4)
    host = cudakit.zeros(4, dtype=cudakit.uint8, device="cpu")
    with pytest.raises(ValueError, match="src is host memory, not device 0"):
        cudakit.memcpy_peer_async(b.data_ptr(), 0, host.data_ptr(), 0, 4)


@needs_device
def test_stream_priority_range_and_torchs_clamping():
    least, greatest = cudakit.Stream.priority_range()
    assert least >= greatest
    assert cudakit.Stream(priority=greatest).priority == greatest
    # As torch's getStreamFromPool: asking for more than the highest priority gets the
    # highest, silently; a priority below the lowest does not exist and is refused.
    assert cudakit.Stream(priority=-100).priority == greatest
    with pytest.raises(ValueError, match=rf"stream priority 100 is lower than the lowest "
                                         rf"priority of device 0 \({least}; the range is "
                                         rf"{greatest} \(highest\) \.\. {least}"):
        cudakit.Stream(priority=100)
    assert cudakit.Stream(priority=least).priority == least


@needs_device
def test_stream_on_a_missing_device_names_the_valid_range():
    with pytest.raises(ValueError, match=r"Invalid device index 99: .*valid indices are 0\.\."):
        cudakit.Stream(99)


@needs_device
def test_cuda_graph_update_from_a_new_capture():
    a = cudakit.full((8,), 1.0)
    b = cudakit.full((8,), 4.0)
    g = cudakit.CUDAGraph(keep_graph=True)
    with cudakit.graph(g):
        ya = a * 3 + 1
    g.replay()
    g2 = cudakit.CUDAGraph(keep_graph=True)
    with cudakit.graph(g2):
        yb = b * 3 + 1
    g.update(g2)
    g.replay()
    cudakit.synchronize()
    assert yb.sum().item() == 8 * 13.0
    assert ya.sum().item() == 8 * 4.0
    g3 = cudakit.CUDAGraph(keep_graph=True)
    with cudakit.graph(g3):
        (a * 3 + 1) * 2
    with pytest.raises(ValueError, match="topology"):
        g.update(g3)
    with pytest.raises(TypeError, match="must be a cudakit.CUDAGraph"):
        g.update(object())


def test_import_from_the_source_tree_says_how_to_build():
    # `import cudakit` from python/ finds the sources, which have no compiled extension.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-c", "import cudakit"], cwd=ROOT / "python", env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "PYTHONPATH=build/python" in proc.stderr, proc.stderr
    assert "circular import" not in proc.stderr.splitlines()[-1], proc.stderr


@needs_device
@pytest.mark.parametrize("shape, dtype", [((1 << 50,), "uint8"), ((1 << 61,), "float32")],
                         ids=["larger-than-device", "more-than-2**63-bytes"])
def test_impossible_allocation_reports_the_devices_free_memory(shape, dtype):
    free, total = cudakit.mem_get_info(0)
    with pytest.raises(cudakit.OutOfMemoryError) as info:
        cudakit.empty(shape, dtype=getattr(cudakit, dtype), device="cuda:0")
    e = info.value
    # The free memory the driver reports, not 0: "0 bytes free" sends one hunting for a leak.
    assert e.free_bytes > 0 and e.total_bytes == total, (e.free_bytes, e.total_bytes)
    assert "0 bytes free" not in str(e) and "of which 0" not in str(e), str(e)
