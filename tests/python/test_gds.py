"""cudakit.gds (torch.cuda.gds): GdsFile round trips with offsets, errors (missing directory,
read past the end, flags, registration state), foreign buffers through DLPack, and the
stream-ordered read_into / write_from. Runs on the emulated backend (the compat path) and on
the GPU (gds or compat, whichever the machine allows)."""
import os

import numpy as np
import pytest


def pattern(ck, n, seed=0):
    host = ((np.arange(n, dtype=np.int64) * 7 + seed) % 251).astype(np.uint8)
    return ck.asarray(host, device="cuda"), host


def file_bytes(path, offset, n):
    with open(path, "rb") as f:
        f.seek(offset)
        return np.frombuffer(f.read(n), dtype=np.uint8)


class Foreign:
    """A buffer from "another library": only the DLPack protocol, no cudakit type."""

    def __init__(self, t):
        self._t = t

    def __dlpack__(self, stream=None):
        return self._t.__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return self._t.__dlpack_device__()


def test_torch_names_exist(ck):
    from cudakit import gds

    for name in ("is_available", "gds_register_buffer", "gds_deregister_buffer", "GdsFile"):
        assert hasattr(gds, name)
    assert isinstance(gds.is_available(), bool)
    if not gds.is_available():
        assert gds.unavailable_reason()
    if ck.backend_name() == "emulated":
        assert not gds.is_available()


@pytest.mark.parametrize("offset", [0, 17, 4096, 1 << 20])
def test_save_load_round_trip_with_offsets(ck, tmp_path, offset):
    from cudakit import gds

    path = tmp_path / "data.bin"
    f = gds.GdsFile(path, os.O_CREAT | os.O_RDWR)
    assert f.handle is not None
    assert f.io_path in ("gds", "compat")
    if f.io_path == "compat":
        assert f.compat_reason
    src1, host1 = pattern(ck, 10 * (1 << 20) + 3, 1)  # more than one 8 MiB chunk
    src2, host2 = pattern(ck, 4097, 2)
    f.save_storage(src1, offset=offset)
    f.save_storage(src2, offset=offset + src1.nbytes)
    assert f.size() == offset + src1.nbytes + src2.nbytes
    assert np.array_equal(file_bytes(path, offset, src1.nbytes), host1)
    dst1 = ck.zeros(src1.nbytes, dtype=ck.uint8, device="cuda")
    dst2 = ck.zeros(src2.nbytes, dtype=ck.uint8, device="cuda")
    f.load_storage(dst1, offset=offset)
    f.load_storage(dst2, offset=offset + src1.nbytes)
    assert np.array_equal(dst1.cpu().numpy(), host1)
    assert np.array_equal(dst2.cpu().numpy(), host2)
    f.close()


def test_float_tensors_and_context_manager(ck, tmp_path):
    from cudakit import gds

    a = ck.randn(1000, 33, device="cuda")
    with gds.GdsFile(str(tmp_path / "f.bin"), os.O_CREAT | os.O_RDWR) as f:
        f.save_storage(a)
        b = ck.empty(1000, 33, device="cuda")
        f.load_storage(b)
    assert np.array_equal(a.cpu().numpy(), b.cpu().numpy())
    with pytest.raises(RuntimeError, match="closed"):
        f.load_storage(b)


def test_missing_directory_is_file_not_found(ck, tmp_path):
    from cudakit import gds

    missing = tmp_path / "no" / "such" / "x.bin"
    with pytest.raises(FileNotFoundError) as info:
        gds.GdsFile(missing, os.O_CREAT | os.O_RDWR)
    assert info.value.filename == str(missing)


def test_read_past_the_end_is_a_clear_error_and_changes_nothing(ck, tmp_path):
    from cudakit import gds

    f = gds.GdsFile(tmp_path / "short.bin", os.O_CREAT | os.O_RDWR)
    src, host = pattern(ck, 5000, 3)
    f.save_storage(src)
    dst = ck.full((4096,), 9, dtype=ck.uint8, device="cuda")
    with pytest.raises(ValueError, match=r"needs 5096 bytes, but .* has 5000"):
        f.load_storage(dst, offset=1000)
    assert (dst.cpu().numpy() == 9).all()
    f.load_storage(dst, offset=904)
    assert np.array_equal(dst.cpu().numpy(), host[904:])


def test_flags_buffers_and_arguments_are_checked(ck, tmp_path):
    from cudakit import gds

    t, _ = pattern(ck, 4096)
    with pytest.raises(ValueError, match="O_APPEND"):
        gds.GdsFile(tmp_path / "a.bin", os.O_CREAT | os.O_RDWR | os.O_APPEND)
    w = gds.GdsFile(tmp_path / "w.bin", os.O_CREAT | os.O_WRONLY)
    w.save_storage(t)
    with pytest.raises(ValueError, match="O_WRONLY"):
        w.load_storage(t)
    r = gds.GdsFile(tmp_path / "w.bin", os.O_RDONLY)
    with pytest.raises(ValueError, match="O_RDONLY"):
        r.save_storage(t)
    with pytest.raises(ValueError, match="cpu"):
        r.load_storage(ck.zeros(4096, dtype=ck.uint8, device="cpu"))
    with pytest.raises(ValueError, match="contiguous"):
        r.load_storage(ck.zeros(64, 64, dtype=ck.uint8, device="cuda").t())
    with pytest.raises(TypeError, match="__dlpack__"):
        r.load_storage(b"bytes")
    with pytest.raises(ValueError, match="offset"):
        r.load_storage(t, offset=-1)
    with pytest.raises(TypeError):
        gds.GdsFile(tmp_path / "x.bin", "rw")


def test_handle_registration(ck, tmp_path):
    from cudakit import gds

    f = gds.GdsFile(tmp_path / "h.bin", os.O_CREAT | os.O_RDWR)
    t, _ = pattern(ck, 4096)
    with pytest.raises(RuntimeError, match="already registered"):
        f.register_handle()
    f.deregister_handle()
    assert f.handle is None
    with pytest.raises(RuntimeError, match="not registered"):
        f.deregister_handle()
    with pytest.raises(RuntimeError, match="not registered"):
        f.save_storage(t)
    f.register_handle()
    f.save_storage(t)


def test_compat_policy_variable(ck, tmp_path, monkeypatch):
    from cudakit import gds

    monkeypatch.setenv("CUDAKIT_GDS", "compat")
    f = gds.GdsFile(tmp_path / "c.bin", os.O_CREAT | os.O_RDWR)
    assert f.io_path == "compat" and f.compat_reason == "CUDAKIT_GDS=compat"
    monkeypatch.setenv("CUDAKIT_GDS", "nonsense")
    with pytest.raises(ValueError, match="CUDAKIT_GDS"):
        gds.GdsFile(tmp_path / "c.bin", os.O_RDWR)
    if not gds.is_available():
        monkeypatch.setenv("CUDAKIT_GDS", "gds")
        with pytest.raises(NotImplementedError, match="CUDAKIT_GDS=gds"):
            gds.GdsFile(tmp_path / "c.bin", os.O_RDWR)


def test_foreign_buffer_registration_and_transfer(ck, tmp_path):
    from cudakit import gds

    t, host = pattern(ck, 65536, 5)
    foreign = Foreign(t)
    gds.gds_register_buffer(foreign)
    assert ck._C._gds_is_buffer_registered(t)
    with pytest.raises(ValueError, match="already registered"):
        gds.gds_register_buffer(t)
    f = gds.GdsFile(tmp_path / "r.bin", os.O_CREAT | os.O_RDWR)
    f.save_storage(foreign)
    out = Foreign(ck.zeros(65536, dtype=ck.uint8, device="cuda"))
    f.load_storage(out)
    assert np.array_equal(out._t.cpu().numpy(), host)
    gds.gds_deregister_buffer(foreign)
    with pytest.raises(ValueError, match="not registered"):
        gds.gds_deregister_buffer(foreign)
    with pytest.raises(ValueError, match="device"):
        gds.gds_register_buffer(np.zeros(16, dtype=np.uint8))  # host memory via DLPack
    with pytest.raises(TypeError):
        gds.gds_register_buffer(object())


def test_stream_ordered_read_into_and_write_from(ck, tmp_path):
    from cudakit import gds

    f = gds.GdsFile(tmp_path / "async.bin", os.O_CREAT | os.O_RDWR)
    s = ck.Stream()
    n = 3 * (1 << 20) + 11
    with ck.stream(s):
        t = ck.full((n,), 1, dtype=ck.uint8, device="cuda")
        u = ck.zeros(n, dtype=ck.uint8, device="cuda")
    req = f.write_from(t, 5, stream=s)
    with ck.stream(s):
        t.fill_(2)  # after the write in stream order: must not reach the file
    assert req.wait() == n and req.done()
    assert (file_bytes(tmp_path / "async.bin", 5, n) == 1).all()
    req = f.read_into(u, 5, stream=s)
    with ck.stream(s):
        v = u + 3
    s.synchronize()
    assert req.done()
    assert (v.cpu().numpy() == 4).all()
    with pytest.raises(ValueError, match="needs"):
        f.read_into(u, f.size(), stream=s)


def test_gds_path_on_an_emulated_gds_machine(ck, tmp_path, emulated_only):
    """CUDAKIT_EMULATED_GDS=1 models cuFile with nvidia-fs: files on O_DIRECT file systems take
    the gds path (in a subprocess: the backend reads the variable once)."""
    import subprocess
    import sys

    script = f"""
import os, numpy as np, cudakit as ck
from cudakit import gds
assert gds.is_available(), gds.unavailable_reason()
f = gds.GdsFile({str(tmp_path / 'g.bin')!r}, os.O_CREAT | os.O_RDWR)
src = ck.asarray((np.arange(300000) % 251).astype(np.uint8), device="cuda")
gds.gds_register_buffer(src)
f.save_storage(src, offset=5)
dst = ck.zeros(300000, dtype=ck.uint8, device="cuda")
f.load_storage(dst, offset=5)
assert np.array_equal(dst.cpu().numpy(), src.cpu().numpy())
gds.gds_deregister_buffer(src)
print(f.io_path, repr(f.compat_reason))
"""
    env = dict(os.environ, CUDAKIT_BACKEND="emulated", CUDAKIT_EMULATED_GDS="1")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    path, reason = out.stdout.split(maxsplit=1)
    # gds where the file system takes O_DIRECT; otherwise cuFile's refusal is the reason.
    assert path == "gds" or "cuFileHandleRegister" in reason, out.stdout


@pytest.mark.gpu
def test_torch_tensors_through_dlpack(ck, tmp_path):
    """torch's own tensors (device memory from torch's allocator) register, save and load."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    from cudakit import gds

    src = torch.arange(1 << 20, dtype=torch.float32, device="cuda")
    dst = torch.zeros_like(src)
    torch.cuda.synchronize()
    gds.gds_register_buffer(src)
    f = gds.GdsFile(tmp_path / "torch.bin", os.O_CREAT | os.O_RDWR)
    f.save_storage(src, offset=4096)
    f.load_storage(dst, offset=4096)
    gds.gds_deregister_buffer(src)
    assert torch.equal(src, dst)
