"""cudakit.tunable (torch.cuda.tunable): API, matmul through TunableOp, results files in
torch's format both ways, environment variables, untuned recording and offline tuning
(single and multi-GPU). Runs on the emulated backend in CI (its candidates are CPU loops);
the @gpu test checks a results file written by torch on the H200.

TunableOp's settings are process-wide: in-process tests use shapes of their own and restore
what they change; tests of the environment (read once per process) run in subprocesses.
"""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import cudakit
import cudakit.tunable as tunable

pytestmark = pytest.mark.usefixtures("ck")

TORCH_NAMES = [
    "enable", "is_enabled", "tuning_enable", "tuning_is_enabled", "record_untuned_enable",
    "record_untuned_is_enabled", "set_max_tuning_duration", "get_max_tuning_duration",
    "set_max_tuning_iterations", "get_max_tuning_iterations", "set_filename", "get_filename",
    "get_results", "get_validators", "write_file_on_exit", "write_file", "read_file",
    "tune_gemm_in_file", "mgpu_tune_gemm_in_file", "set_rotating_buffer_size",
    "get_rotating_buffer_size", "set_numerical_check_tolerances",
]


@pytest.fixture
def tuned(tmp_path):
    """TunableOp on, results in tmp_path, a small budget; everything restored afterwards."""
    saved = (tunable.is_enabled(), tunable.tuning_is_enabled(), tunable.record_untuned_is_enabled(),
             tunable.get_max_tuning_iterations(), tunable.get_filename())
    tunable.set_filename(str(tmp_path / "results.csv"))
    tunable.set_max_tuning_iterations(3)
    tunable.enable(True)
    tunable.tuning_enable(True)
    tunable.record_untuned_enable(False)
    yield tmp_path / "results.csv"
    tunable.enable(saved[0])
    tunable.tuning_enable(saved[1])
    tunable.record_untuned_enable(saved[2])
    tunable.set_max_tuning_iterations(saved[3])
    tunable.set_filename(saved[4])


def result_for(params: str):
    return [r for r in tunable.get_results() if r[1] == params]


def rand(*shape, dtype="float32"):
    return cudakit.tensor(np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32),
                          device="cuda").to(dtype)


def to_np(t):
    return np.asarray(t.to("float32").cpu())


def run_py(code: str, env: dict | None = None, cwd=None) -> subprocess.CompletedProcess:
    full = dict(os.environ)
    full.pop("PYTORCH_TUNABLEOP_ENABLED", None)
    package_root = str(pathlib.Path(cudakit.__file__).resolve().parents[1])
    full["PYTHONPATH"] = os.pathsep.join([package_root, full.get("PYTHONPATH", "")])
    full.update(env or {})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full, cwd=cwd,
                          capture_output=True, text=True, timeout=600)


# ---- API ----

def test_every_torch_name_exists():
    for name in TORCH_NAMES:
        assert callable(getattr(tunable, name)), name
        assert name in tunable.__all__
    assert cudakit.tunable is tunable


def test_settings_round_trip(tmp_path):
    saved = (tunable.get_max_tuning_duration(), tunable.get_max_tuning_iterations(),
             tunable.get_rotating_buffer_size(), tunable.get_filename())
    try:
        tunable.set_max_tuning_duration(12)
        tunable.set_max_tuning_iterations(7)
        assert (tunable.get_max_tuning_duration(), tunable.get_max_tuning_iterations()) == (12, 7)
        tunable.set_rotating_buffer_size(0)
        assert tunable.get_rotating_buffer_size() == 0
        tunable.set_rotating_buffer_size(3)
        assert tunable.get_rotating_buffer_size() == 3 << 20  # bytes, as torch's value
        tunable.set_rotating_buffer_size(-1)
        assert tunable.get_rotating_buffer_size() == cudakit.get_device_properties().L2_cache_size
        tunable.set_numerical_check_tolerances(True, 1e-3, 2e-3)
        assert cudakit._C._tunable_numerical_check() == (True, 1e-3, 2e-3)
        tunable.set_numerical_check_tolerances(False)
        assert cudakit._C._tunable_numerical_check()[0] is False
        tunable.set_filename(str(tmp_path / "r%d_x.csv"), insert_device_ordinal=True)
        assert tunable.get_filename() == str(tmp_path / f"r{cudakit.current_device()}_x.csv")
        tunable.set_filename(str(tmp_path / "plain.csv"))
        assert tunable.get_filename() == str(tmp_path / "plain.csv")
        tunable.write_file_on_exit(True)
        assert dict(tunable.get_validators())["CUDAKIT_VERSION"] == cudakit.__version__
    finally:
        tunable.set_max_tuning_duration(saved[0])
        tunable.set_max_tuning_iterations(saved[1])
        tunable.set_rotating_buffer_size(-1)
        tunable.set_filename(saved[3])


def test_bad_arguments_are_clear_errors(tmp_path):
    with pytest.raises(cudakit.ArgumentTypeError, match=r"set_max_tuning_duration\(\): argument 'duration'"):
        tunable.set_max_tuning_duration("10")
    with pytest.raises(ValueError, match=r"argument 'duration' must be >= 0.*got -1"):
        tunable.set_max_tuning_duration(-1)
    with pytest.raises(ValueError, match=r"argument 'iterations' must be >= 0"):
        tunable.set_max_tuning_iterations(-3)
    with pytest.raises(ValueError, match=r"argument 'atol' must be a positive finite number"):
        tunable.set_numerical_check_tolerances(True, 0.0)
    with pytest.raises(cudakit.ArgumentTypeError, match=r"enable\(\): argument 'val'"):
        tunable.enable("yes")
    with pytest.raises(cudakit.ArgumentTypeError, match=r"set_filename\(\): argument 'filename'"):
        tunable.set_filename(5)
    with pytest.raises(ValueError, match=r"argument 'torch_version'"):
        tunable.write_file(str(tmp_path / "t.csv"), torch_version="")
    with pytest.raises(ValueError, match=r"tune_gemm_in_file\(\).*(not enabled|cannot open)"):
        tunable.tune_gemm_in_file(str(tmp_path / "missing.csv"))
    with pytest.raises(ValueError, match=r"argument 'num_gpus' must be between 1 and"):
        tunable.mgpu_tune_gemm_in_file(str(tmp_path / "u?.csv"), 0)
    # Nothing changed.
    assert tunable.get_max_tuning_duration() >= 0


# ---- matmul through TunableOp ----

def test_matmul_is_tuned_recorded_and_appended(tuned):
    a, b = rand(16, 32), rand(32, 24)
    c = a @ b
    np.testing.assert_allclose(to_np(c), to_np(a) @ to_np(b), rtol=1e-5, atol=1e-5)
    # torch's signature for torch.mm(a, b): the BLAS product b^T a^T.
    (row,) = result_for("nn_24_16_32_ld_24_32_24")
    assert row[0] == "GemmTunableOp_float_NN" and row[3] > 0
    text = tuned.read_text()
    assert text.startswith("Validator,")
    assert f"GemmTunableOp_float_NN,nn_24_16_32_ld_24_32_24,{row[2]}," in text
    # Known now: the same solution, no new line.
    np.testing.assert_allclose(to_np(a @ b), to_np(c), rtol=1e-6)
    assert tuned.read_text().count("nn_24_16_32_ld_24_32_24") == 1


def test_dtypes_and_transposes_have_torchs_signatures(tuned):
    x, w = rand(40, 8, dtype="bfloat16"), rand(24, 40, dtype="bfloat16")
    out = x.t() @ w.t()  # both operands transposed views: BLAS transposes, no copies
    np.testing.assert_allclose(to_np(out), to_np(x).T @ to_np(w).T, rtol=2e-2, atol=2e-2)
    (row,) = result_for("tt_24_8_40_ld_40_8_24")
    assert row[0] == "GemmTunableOp_BFloat16_TT"
    h = rand(12, 20, dtype="float16")
    out = h @ rand(20, 6, dtype="float16").t().contiguous().t()
    assert result_for("tn_6_12_20_ld_20_20_6")[0][0] == "GemmTunableOp_Half_TN"
    d = rand(5, 7, dtype="float64")
    _ = d @ rand(7, 9, dtype="float64")
    assert result_for("nn_9_5_7_ld_9_7_9")[0][0] == "GemmTunableOp_double_NN"


def test_batched_matmul_is_tuned_under_torchs_bmm_signature(tuned):
    a, b = rand(6, 10, 12), rand(6, 12, 14)
    c = a @ b
    np.testing.assert_allclose(to_np(c), to_np(a) @ to_np(b), rtol=1e-5, atol=1e-5)
    # torch.bmm(a, b)'s signatures: the BLAS product b^T a^T of each pair, 6 of them.
    (row,) = result_for("nn_14_10_12_B_6_ld_14_12_14")
    assert row[0] == "GemmStridedBatchedTunableOp_float_NN" and row[3] > 0
    assert f"GemmStridedBatchedTunableOp_float_NN,nn_14_10_12_B_6_ld_14_12_14,{row[2]}," in tuned.read_text()
    # One matrix against the batch (read in place, batch stride 0): the same signature, as the
    # strides are not in torch's, so the recorded solution runs and nothing is tuned again.
    w = rand(10, 12)
    n_before = len(tunable.get_results())
    np.testing.assert_allclose(to_np(w @ b), to_np(w) @ to_np(b), rtol=1e-5, atol=1e-5)
    assert len(tunable.get_results()) == n_before
    assert tuned.read_text().count("nn_14_10_12_B_6_ld_14_12_14") == 1


def test_disabled_records_nothing(tmp_path):
    assert not tunable.is_enabled()
    before = len(tunable.get_results())
    a, b = rand(11, 13), rand(13, 17)
    np.testing.assert_allclose(to_np(a @ b), to_np(a) @ to_np(b), rtol=1e-5, atol=1e-5)
    assert len(tunable.get_results()) == before


# ---- results files ----

TORCH_CUDA_FILE = """\
Validator,PT_VERSION,2.11.0+cu130
GemmTunableOp_float_NN,nn_28_12_36_ld_28_36_28,Default,0.0041
GemmTunableOp_BFloat16_NT,nt_4096_4096_4096_ld_4096_4096_4096,Gemm_Cublaslt_id_66_tile_37_stages_23_splitk_1_red_0_swizzle_0_custom_0_inner_0_cluster_0,0.159
GemmStridedBatchedTunableOp_Half_NN,nn_64_64_64_B_8_ld_64_64_64,Default,0.01
"""


def test_reads_torchs_format_and_writes_both_ways(tuned, tmp_path):
    torch_file = tmp_path / "torch0.csv"
    torch_file.write_text(TORCH_CUDA_FILE)
    assert tunable.read_file(str(torch_file)) is True
    rows = {(r[0], r[1]): (r[2], r[3]) for r in tunable.get_results()}
    assert rows[("GemmTunableOp_float_NN", "nn_28_12_36_ld_28_36_28")] == ("Default", 0.0041)
    assert ("GemmStridedBatchedTunableOp_Half_NN", "nn_64_64_64_B_8_ld_64_64_64") in rows
    # The recorded problem runs its solution: nothing tuned, nothing appended.
    a, b = rand(12, 36), rand(36, 28)
    np.testing.assert_allclose(to_np(a @ b), to_np(a) @ to_np(b), rtol=1e-5, atol=1e-5)
    assert result_for("nn_28_12_36_ld_28_36_28") == [("GemmTunableOp_float_NN", "nn_28_12_36_ld_28_36_28", "Default", 0.0041)]
    # cudakit's own file: its validators, every entry (torch's batched one included).
    mine = tmp_path / "mine.csv"
    assert tunable.write_file(str(mine)) is True
    lines = mine.read_text().splitlines()
    validators = [l for l in lines if l.startswith("Validator,")]
    assert validators == [f"Validator,{k},{v}" for k, v in tunable.get_validators()]
    for line in TORCH_CUDA_FILE.splitlines()[1:]:
        assert line in lines
    assert tunable.read_file(str(mine)) is True
    # For torch: its validator only.
    for_torch = tmp_path / "for_torch.csv"
    with warnings.catch_warnings():  # earlier tests' emulated solutions are left out
        warnings.simplefilter("ignore")
        assert tunable.write_file(str(for_torch), torch_version="2.11.0+cu130") is True
    text = for_torch.read_text()
    # torch checks its C++ TORCH_VERSION: major.minor.patch, no local part
    assert text.splitlines()[0] == "Validator,PT_VERSION,2.11.0"
    assert text.count("Validator,") == 1
    assert "GemmTunableOp_float_NN,nn_28_12_36_ld_28_36_28,Default,0.0041" in text


def test_bad_file_contents_are_reported(tuned, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("Validator,PT_VERSION,2.11.0\nGemmTunableOp_float_NN,nn_1_1_1_ld_1_1_1,Default,soon\n")
    with pytest.raises(ValueError, match=r"bad.csv', line 2: the time 'soon'"):
        tunable.read_file(str(bad))
    bad.write_text("Validator,PT_VERSION,2.11.0\nGemmTunableOp_float_NN,nn_1_1\n")
    with pytest.raises(ValueError, match=r"line 2: a result line is"):
        tunable.read_file(str(bad))
    other = tmp_path / "rocm.csv"
    other.write_text("Validator,PT_VERSION,2.4.0\nValidator,ROCM_VERSION,6.1.0\n"
                     "GemmTunableOp_float_NN,nn_3_3_3,Gemm_Rocblas_1,0.1\n")
    with pytest.warns(UserWarning, match=r"rocm.csv' is rejected: validator ROCM_VERSION"):
        assert tunable.read_file(str(other)) is False
    assert not result_for("nn_3_3_3")
    # torch's return value (False) for a file that cannot be read, but never silently
    with pytest.warns(UserWarning, match=r"absent.csv': No such file or directory; nothing was read"):
        assert tunable.read_file(str(tmp_path / "absent.csv")) is False
    binary = tmp_path / "binary.csv"
    binary.write_bytes(b"\xff" * 16)
    with pytest.raises(ValueError, match=r"binary.csv', line 1: byte 0xff at column 1 is not UTF-8 text"):
        tunable.read_file(str(binary))


def test_tune_gemm_in_file_reports_a_file_that_is_not_tunableops(tuned, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("Validator,PT_VERSION,2.11.0\n\nsome notes\n")
    with pytest.raises(ValueError, match=r"notes.txt', line 3: not a TunableOp line.*'some notes'"):
        tunable.tune_gemm_in_file(str(notes))
    binary = tmp_path / "binary.csv"
    binary.write_bytes(b"\xff" * 16)
    with pytest.raises(ValueError, match=r"binary.csv', line 1: byte 0xff at column 1 is not UTF-8"):
        tunable.tune_gemm_in_file(str(binary))
    header_only = tmp_path / "header.csv"
    header_only.write_text("Validator,PT_VERSION,2.11.0\n")
    with pytest.warns(UserWarning, match=r"header.csv' has no GEMM lines .*nothing was tuned"):
        tunable.tune_gemm_in_file(str(header_only))
    with pytest.raises(ValueError, match=r"cannot open '.*absent.csv': No such file or directory"):
        tunable.tune_gemm_in_file(str(tmp_path / "absent.csv"))


# ---- environment, untuned recording, offline tuning (fresh processes) ----

def test_environment_variables(tmp_path):
    r = run_py("""
        import numpy as np, cudakit, cudakit.tunable as t
        a = cudakit.ones(8, 8, device='cuda'); b = cudakit.ones(8, 8, device='cuda')
        c = a @ b; cudakit.synchronize()
        print(t.is_enabled(), t.get_max_tuning_iterations(), t.get_filename())
        t.enable(False); print(t.is_enabled())
    """, env={"PYTORCH_TUNABLEOP_ENABLED": "1",
              "PYTORCH_TUNABLEOP_FILENAME": str(tmp_path / "env_%d_results.csv"),
              "PYTORCH_TUNABLEOP_MAX_TUNING_ITERATIONS": "50",
              "CUDAKIT_TUNABLEOP_MAX_TUNING_ITERATIONS": "2"})
    assert r.returncode == 0, r.stderr
    first, second = r.stdout.splitlines()
    assert first == f"True 2 {tmp_path}/env_0_results.csv"
    assert second == "True"  # the environment wins, as in torch
    assert "GemmTunableOp_float_NN,nn_8_8_8_ld_8_8_8," in (tmp_path / "env_0_results.csv").read_text()

    r = run_py("""
        import cudakit
        a = cudakit.ones(4, 4, device='cuda')
        a @ a
    """, env={"PYTORCH_TUNABLEOP_ENABLED": "on"})
    assert r.returncode != 0
    assert "PYTORCH_TUNABLEOP_ENABLED='on' is not valid: expected 0 or 1" in r.stderr


def test_untuned_recording_then_offline_tuning(tmp_path):
    r = run_py("""
        import cudakit, cudakit.tunable as t
        for shape in [(6, 10, 14), (6, 10, 14), (3, 5, 7)]:
            m, k, n = shape
            cudakit.ones(m, k, device='cuda') @ cudakit.ones(k, n, device='cuda')
        cudakit.synchronize()
        print(t.record_untuned_is_enabled(), t.tuning_is_enabled(), len(t.get_results()))
    """, env={"PYTORCH_TUNABLEOP_ENABLED": "1", "PYTORCH_TUNABLEOP_TUNING": "0",
              "PYTORCH_TUNABLEOP_RECORD_UNTUNED": "1",
              "PYTORCH_TUNABLEOP_UNTUNED_FILENAME": str(tmp_path / "untuned.csv")}, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "False", "0"]
    untuned = tmp_path / "untuned0.csv"
    assert untuned.read_text().splitlines() == [
        "GemmTunableOp_float_NN,nn_14_6_10_ld_14_10_14", "GemmTunableOp_float_NN,nn_7_3_5_ld_7_5_7"]
    assert not list(tmp_path.glob("tunableop_results*.csv"))  # nothing tuned, nothing written

    r = run_py(f"""
        import cudakit.tunable as t
        t.enable(); t.set_max_tuning_iterations(2)
        t.set_filename({str(tmp_path / 'offline.csv')!r})
        t.tune_gemm_in_file({str(untuned)!r})
        print(sorted(r[1] for r in t.get_results()))
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "['nn_14_6_10_ld_14_10_14', 'nn_7_3_5_ld_7_5_7']"
    text = (tmp_path / "offline.csv").read_text()
    assert text.count("GemmTunableOp_float_NN,") == 2


def _mgpu_tune_two_files(tmp_path, num_gpus):
    """Runs mgpu_tune_gemm_in_file over two untuned files (one GEMM in both) in a fresh
    process, as a user must (spawned workers import the caller's module); returns the
    gathered results file's rows (fields split), after checking its validator header."""
    (tmp_path / "untuned0.csv").write_text(
        "GemmTunableOp_float_NN,nn_8_8_8_ld_8_8_8\nGemmTunableOp_float_NT,nt_16_8_8_ld_16_8_16\n")
    (tmp_path / "untuned1.csv").write_text(
        "GemmTunableOp_float_NN,nn_8_8_8_ld_8_8_8\nGemmTunableOp_Half_TN,tn_8_8_16_ld_16_16_8\n")
    script = tmp_path / "mgpu.py"
    script.write_text(textwrap.dedent(f"""
        import cudakit.tunable as t
        if __name__ == "__main__":
            t.enable(); t.set_max_tuning_iterations(2)
            t.set_filename({str(tmp_path / 'res.csv')!r})
            t.mgpu_tune_gemm_in_file({str(tmp_path / 'untuned?.csv')!r}, {num_gpus})
    """))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(pathlib.Path(cudakit.__file__).resolve().parents[1]),
                                         env.get("PYTHONPATH", "")])
    r = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                       timeout=600, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    full0 = (tmp_path / "res_full0.csv").read_text().splitlines()
    assert full0[0].startswith("Validator,")
    rows = [l.split(",") for l in full0 if not l.startswith("Validator,")]
    # duplicates across the files tuned once; each row has a solution and a time in ms
    assert sorted(r[1] for r in rows) == ["nn_8_8_8_ld_8_8_8", "nt_16_8_8_ld_16_8_16",
                                          "tn_8_8_16_ld_16_16_8"]
    assert all(len(r) == 4 and r[2] and float(r[3]) >= 0 for r in rows)
    return full0


def test_mgpu_tuning_gathers_per_device_files(tmp_path):
    if cudakit.device_count() < 2:
        pytest.skip("needs two devices")
    full0 = _mgpu_tune_two_files(tmp_path, 2)
    assert (tmp_path / "res_full1.csv").read_text().splitlines() == full0
    per_device = [tmp_path / "res0.csv", tmp_path / "res1.csv"]
    assert any(p.exists() for p in per_device)


def test_mgpu_tuning_on_one_device_gathers_every_file(tmp_path):
    """num_gpus=1: the worker-process path on a machine with one device (the H200 is lent
    alone; the test above needs two)."""
    _mgpu_tune_two_files(tmp_path, 1)
    assert not (tmp_path / "res_full1.csv").exists()


# ---- torch interoperability on the H200 ----

def torch_tunes(path, product: str) -> str:
    """Runs `product` (code using torch tensors) under torch.cuda.tunable with its results in
    `path`; returns torch's version."""
    r = run_py(f"""
        import torch
        torch.cuda.tunable.enable(True)
        torch.cuda.tunable.set_max_tuning_iterations(10)
        torch.cuda.tunable.set_filename({str(path)!r})
        {product}
        if hasattr(torch.cuda.tunable, 'write_file'):
            torch.cuda.tunable.write_file()
        print(torch.__version__)
    """)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().splitlines()[-1]


def torch_reads(path) -> str:
    """torch.cuda.tunable.read_file(path) in a fresh torch: "<ok> [<op>,<params>, ...]"."""
    r = run_py(f"""
        import torch
        torch.cuda.tunable.enable(True)
        ok = torch.cuda.tunable.read_file({str(path)!r})
        print(ok, [r[0] + ',' + r[1] for r in torch.cuda.tunable.get_results()])
    """)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.fixture
def torch_cuda():
    """torch with a CUDA device (the round trips run torch.cuda.tunable), else a skip."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    return torch


@pytest.mark.gpu
def test_reads_a_results_file_written_by_torch(tmp_path, torch_cuda):
    torch_version = torch_tunes(tmp_path / "torch.csv",
                                "a = torch.randn(96, 160, device='cuda', dtype=torch.bfloat16); "
                                "b = torch.randn(160, 224, device='cuda', dtype=torch.bfloat16); "
                                "(a @ b).sum().item()")
    text = (tmp_path / "torch.csv").read_text()
    assert "Validator,PT_VERSION," in text
    assert "GemmTunableOp_BFloat16_NN,nn_224_96_160_ld_224_160_224," in text
    saved = tunable.get_filename()
    try:
        tunable.enable(True)
        assert tunable.read_file(str(tmp_path / "torch.csv")) is True
        (row,) = result_for("nn_224_96_160_ld_224_160_224")
        n_before = len(tunable.get_results())
        a = rand(96, 160, dtype="bfloat16")
        b = rand(160, 224, dtype="bfloat16")
        np.testing.assert_allclose(to_np(a @ b), to_np(a) @ to_np(b), rtol=3e-2, atol=3e-1)
        assert len(tunable.get_results()) == n_before  # torch's choice ran, nothing retuned
        # ...and the reverse: a cudakit-tuned product in a file torch reads.
        tunable.set_filename(str(tmp_path / "ck.csv"))
        x, y = rand(64, 128, dtype="bfloat16"), rand(128, 192, dtype="bfloat16")
        _ = x @ y
        cudakit.synchronize()
        assert tunable.write_file(str(tmp_path / "for_torch.csv"), torch_version=torch_version)
    finally:
        tunable.enable(False)
        tunable.set_filename(saved)
    out = torch_reads(tmp_path / "for_torch.csv")
    assert out.startswith("True")
    assert "nn_192_64_128_ld_192_128_192" in out


@pytest.mark.gpu
def test_batched_results_files_work_both_ways_with_torch(tmp_path, torch_cuda):
    """torch.bmm tuned by torch.cuda.tunable, its file read by cudakit (the batched product
    then runs torch's choice, nothing is tuned again), and a batched product tuned by cudakit,
    written for torch and read by torch.cuda.tunable."""
    torch_version = torch_tunes(tmp_path / "torch.csv",
                                "a = torch.randn(4, 96, 160, device='cuda', dtype=torch.bfloat16); "
                                "b = torch.randn(4, 160, 224, device='cuda', dtype=torch.bfloat16); "
                                "torch.bmm(a, b).sum().item()")
    lines = [l for l in (tmp_path / "torch.csv").read_text().splitlines()
             if l.startswith("GemmStridedBatchedTunableOp_BFloat16_NN,")]
    assert len(lines) == 1, (tmp_path / "torch.csv").read_text()
    params = lines[0].split(",")[1]
    assert params.startswith("nn_224_96_160_B_4"), params  # the BLAS product b^T a^T, batch 4
    saved = tunable.get_filename()
    try:
        tunable.enable(True)
        tunable.tuning_enable(True)
        assert tunable.read_file(str(tmp_path / "torch.csv")) is True
        assert result_for(params), tunable.get_results()
        n_before = len(tunable.get_results())
        a, b = rand(4, 96, 160, dtype="bfloat16"), rand(4, 160, 224, dtype="bfloat16")
        np.testing.assert_allclose(to_np(a @ b), to_np(a) @ to_np(b), rtol=3e-2, atol=3e-1)
        assert len(tunable.get_results()) == n_before  # torch's choice ran, nothing retuned
        # The reverse: a batched product cudakit tunes, in a file torch reads.
        tunable.set_filename(str(tmp_path / "ck.csv"))
        x, y = rand(3, 64, 128, dtype="bfloat16"), rand(3, 128, 192, dtype="bfloat16")
        _ = x @ y
        cudakit.synchronize()
        assert tunable.write_file(str(tmp_path / "for_torch.csv"), torch_version=torch_version)
    finally:
        tunable.enable(False)
        tunable.set_filename(saved)
    out = torch_reads(tmp_path / "for_torch.csv")
    assert out.startswith("True"), out
    assert "GemmStridedBatchedTunableOp_BFloat16_NN,nn_192_64_128_B_3" in out, out
