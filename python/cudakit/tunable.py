"""torch.cuda.tunable: GEMMs tuned across every implementation the backend offers.

When TunableOp is enabled, every matrix product cudakit runs (``cudakit.matmul`` and the C++
``cudakit::tunable::gemm`` / ``gemm_strided_batched``) looks its problem up by signature: the
operator (``GemmTunableOp_BFloat16_NN``: element type and BLAS transposes) and the parameters
(``nn_4096_16_4096_ld_4096_4096_4096``: BLAS m, n, k and leading dimensions). A matmul of
N-D operands that runs as one strided batched GEMM has torch.bmm's signatures
(``GemmStridedBatchedTunableOp_BFloat16_NN``, ``nn_128_128_64_B_96_ld_128_64_128``: the batch
count after k; batch strides are not part of them, as in torch). A known problem
runs its recorded solution; an unknown one is tuned (when tuning is enabled), recorded in the
untuned file (when ``record_untuned_enable()`` and tuning is off), or runs ``Default``, the
backend's own GEMM (cuBLAS on cuda, CBLAS on the emulated backend).

Candidates are ``Default``, every cuBLASLt heuristic algorithm (asked for many, under two
workspace limits) and split-K variants of the best ones for products that leave the GPU
underfilled; on the emulated backend a few CPU loops stand in for them. Timing runs on
rotating copies of the operands (the L2 size by default, so no run reads from L2): every
candidate is probed briefly, then the few closest to the best get the full budget
(``set_max_tuning_duration`` / ``set_max_tuning_iterations``). With
``set_numerical_check_tolerances(True, atol, rtol)`` a candidate whose result differs from
Default's is never chosen.

Results are appended to the results file as they are found (default
``tunableop_results<device>.csv``), in torch's format::

    Validator,CUDAKIT_VERSION,0.1.0
    Validator,CUBLASLT_VERSION,13.1.0
    GemmTunableOp_BFloat16_NN,nn_4096_16_4096_ld_4096_4096_4096,Gemm_Cublaslt_id_...,0.0089

A file whose validators differ is rejected (``read_file`` returns False and warns); a file
written by torch (validator ``PT_VERSION``) is read, and any solution that cannot run here
falls back to Default. ``write_file(name, torch_version=torch.__version__)`` writes a file
torch reads. Offline tuning: record with ``PYTORCH_TUNABLEOP_RECORD_UNTUNED=1`` and
``PYTORCH_TUNABLEOP_TUNING=0``, then ``tune_gemm_in_file("tunableop_untuned0.csv")`` or, over
several GPUs, ``mgpu_tune_gemm_in_file("tunableop_untuned?.csv", num_gpus)`` (call it under
``if __name__ == "__main__":``: it starts worker processes).

Environment variables (each ``PYTORCH_TUNABLEOP_<X>`` also as ``CUDAKIT_TUNABLEOP_<X>``,
which wins): ENABLED, TUNING, RECORD_UNTUNED, FILENAME, UNTUNED_FILENAME, NUMERICAL_CHECK,
MAX_TUNING_DURATION_MS, MAX_TUNING_ITERATIONS, MAX_WARMUP_DURATION_MS, MAX_WARMUP_ITERATIONS,
ROTATING_BUFFER_SIZE, CUBLASLT_ENABLED, VERBOSE, VERBOSE_FILENAME. They are read once, at first
use, and take precedence over the functions below (as torch's).
"""
from __future__ import annotations

import concurrent.futures
import glob
import multiprocessing as mp
import os
import shutil
from typing import Optional

from . import _C

__all__ = [
    "enable",
    "is_enabled",
    "tuning_enable",
    "tuning_is_enabled",
    "record_untuned_enable",
    "record_untuned_is_enabled",
    "set_max_tuning_duration",
    "get_max_tuning_duration",
    "set_max_tuning_iterations",
    "get_max_tuning_iterations",
    "set_max_warmup_duration",
    "get_max_warmup_duration",
    "set_max_warmup_iterations",
    "get_max_warmup_iterations",
    "set_filename",
    "get_filename",
    "get_results",
    "get_validators",
    "write_file_on_exit",
    "write_file",
    "read_file",
    "tune_gemm_in_file",
    "mgpu_tune_gemm_in_file",
    "set_rotating_buffer_size",
    "get_rotating_buffer_size",
    "set_numerical_check_tolerances",
]

# What set_filename received, for the per-device files of mgpu_tune_gemm_in_file.
_filename_template: Optional[str] = None


def enable(val: bool = True) -> None:
    """Turns TunableOp on or off for every product (``PYTORCH_TUNABLEOP_ENABLED=1`` forces on)."""
    _C._tunable_enable(val)


def is_enabled() -> bool:
    """Whether products go through TunableOp."""
    return _C._tunable_is_enabled()


def tuning_enable(val: bool = True) -> None:
    """Lets unknown problems be tuned (default True; ``PYTORCH_TUNABLEOP_TUNING=0`` forces off)."""
    _C._tunable_tuning_enable(val)


def tuning_is_enabled() -> bool:
    """Whether unknown problems are tuned."""
    return _C._tunable_tuning_is_enabled()


def record_untuned_enable(val: bool = True) -> None:
    """Records unknown problems in the untuned file (when tuning is off), for offline tuning.

    The file is ``PYTORCH_TUNABLEOP_UNTUNED_FILENAME`` (default ``tunableop_untuned.csv``) with
    the device ordinal inserted before the extension.
    """
    _C._tunable_record_untuned_enable(val)


def record_untuned_is_enabled() -> bool:
    """Whether unknown problems are recorded for offline tuning."""
    return _C._tunable_record_untuned_is_enabled()


def set_max_tuning_duration(duration: int) -> None:
    """Milliseconds to time each finalist for (default 30; 0: no time bound).

    With an iteration bound too, the smaller wins; at least one timed run always happens.
    """
    _C._tunable_set_max_tuning_duration(duration)


def get_max_tuning_duration() -> int:
    """Milliseconds each finalist is timed for at most."""
    return _C._tunable_get_max_tuning_duration()


def set_max_tuning_iterations(iterations: int) -> None:
    """Timed runs per finalist (default 100; 0: no iteration bound)."""
    _C._tunable_set_max_tuning_iterations(iterations)


def get_max_tuning_iterations() -> int:
    """Timed runs per finalist at most."""
    return _C._tunable_get_max_tuning_iterations()


def set_max_warmup_duration(duration: int) -> None:
    """Milliseconds of warm-up runs before timing each finalist (default 0)."""
    _C._tunable_set_max_warmup_duration(duration)


def get_max_warmup_duration() -> int:
    """Milliseconds of warm-up runs before timing each finalist."""
    return _C._tunable_get_max_warmup_duration()


def set_max_warmup_iterations(iterations: int) -> None:
    """Warm-up runs before timing each finalist (default 0)."""
    _C._tunable_set_max_warmup_iterations(iterations)


def get_max_warmup_iterations() -> int:
    """Warm-up runs before timing each finalist."""
    return _C._tunable_get_max_warmup_iterations()


def set_filename(filename: str, insert_device_ordinal: bool = False) -> None:
    """Sets the results file.

    With ``insert_device_ordinal`` the current device's ordinal goes at ``%d`` or before the
    last ``.`` (one file per process and GPU).
    """
    global _filename_template
    _C._tunable_set_filename(filename, insert_device_ordinal)
    _filename_template = os.fspath(filename)


def get_filename() -> str:
    """The results file ("" until set or until TunableOp's first use resolves the default)."""
    return _C._tunable_get_filename()


def get_results() -> tuple[tuple[str, str, str, float], ...]:
    """Every known result: (op signature, params signature, solution, milliseconds)."""
    return _C._tunable_get_results()


def get_validators() -> tuple[tuple[str, str], ...]:
    """The validators this process writes and checks: (key, value) pairs."""
    return _C._tunable_get_validators()


def write_file_on_exit(val: bool) -> None:
    """Rewrites the results file at exit when some results could not be appended (default True)."""
    _C._tunable_write_file_on_exit(val)


def write_file(filename: Optional[str] = None, torch_version: Optional[str] = None) -> bool:
    """Writes every result to ``filename`` (default: ``get_filename()``).

    With ``torch_version`` (the ``torch.__version__`` of the torch that will read it), the file
    carries torch's validator instead of cudakit's (``PT_VERSION``, cut to major.minor.patch as
    torch writes it: "2.11.0+cu130" gives "2.11.0") and only the results torch can run, so
    ``torch.cuda.tunable.read_file`` accepts it. Returns False (with a warning) when the file
    cannot be written.
    """
    if torch_version is not None:
        if filename is None:
            filename = get_filename()
        return _C._tunable_write_file_for_torch(filename, torch_version)
    return _C._tunable_write_file(filename)


def read_file(filename: Optional[str] = None) -> bool:
    """Merges a results file (default: ``get_filename()``); results already known win.

    Returns False when the file cannot be opened or its validators do not match (with a
    warning); raises ValueError naming the line when it is malformed.
    """
    return _C._tunable_read_file(filename)


def set_rotating_buffer_size(buffer_size: int) -> None:
    """MiB of operand copies timing runs cycle through (0: none; negative: the L2 size, the default)."""
    _C._tunable_set_rotating_buffer_size(buffer_size)


def get_rotating_buffer_size() -> int:
    """The rotating buffer's size in bytes (torch's docstring says kilobytes; its value is bytes too)."""
    return _C._tunable_get_rotating_buffer_size()


def set_numerical_check_tolerances(enable: bool, atol: float = 1e-5, rtol: float = 1e-5) -> None:
    """Turns the numerical check on or off: a candidate whose result is not within
    ``atol + rtol * |Default's result|`` everywhere is never chosen. Tolerances must be > 0."""
    _C._tunable_set_numerical_check_tolerances(enable, atol, rtol)


def tune_gemm_in_file(filename: str) -> None:
    """Tunes every GEMM of an untuned (or results) file on the current device.

    Needs ``is_enabled()`` and ``tuning_is_enabled()``. Plain (``GemmTunableOp``) and strided
    batched (``GemmStridedBatchedTunableOp``, run with packed batches as torch.bmm's contiguous
    operands) lines are tuned; GEMMs cudakit does not run (GemmAndBias, scaled, complex) are
    skipped with a warning naming the op; a malformed line raises ValueError.
    """
    _C._tunable_tune_gemm_in_file(filename)


# ---- several GPUs ----

def _results_template() -> str:
    if _filename_template:
        return _filename_template
    for var in ("CUDAKIT_TUNABLEOP_FILENAME", "PYTORCH_TUNABLEOP_FILENAME"):
        if os.environ.get(var):
            return os.environ[var]
    return "tunableop_results.csv"


def _with_ordinal(template: str, ordinal) -> str:
    """The filename for `ordinal` (an int or text such as "_full0"): at "%d", before the last
    '.', else appended, as set_filename(..., insert_device_ordinal=True)."""
    if "%d" in template:
        return template.replace("%d", str(ordinal), 1)
    dot = template.rfind(".")
    if dot > template.rfind("/"):
        return template[:dot] + str(ordinal) + template[dot:]
    return template + str(ordinal)


def _gather_unique_untuned_gemms(filename_pattern: str) -> list[str]:
    lines: dict[str, None] = {}  # ordered set
    for path in sorted(glob.glob(filename_pattern)):
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith(("Gemm", "ScaledGemm")):
                    lines[line] = None
    return list(lines)


def _mgpu_worker_init(devices, template: str, budget: tuple[int, int]) -> None:
    # One device per worker process, for its whole life: its results go to its own file.
    from . import set_device

    device = devices.get(timeout=120)
    set_device(device)
    enable(True)
    tuning_enable(True)
    record_untuned_enable(False)
    set_max_tuning_duration(budget[0])
    set_max_tuning_iterations(budget[1])
    set_filename(template, insert_device_ordinal=True)


def _mgpu_tune_line(line: str) -> bool:
    return _C._tunable_tune_gemm_line(line)


def _gather_results(template: str, num_gpus: int) -> str:
    validators: list[str] = []  # the first file's (every worker ran the same build)
    results: dict[str, str] = {}  # "op,params" -> line; the first file that has it wins
    for d in range(num_gpus):
        path = _with_ordinal(template, d)
        if not os.path.exists(path):
            continue
        first = not validators
        with open(path) as f:
            for line in f:
                line = line.rstrip("\r\n")
                if not line:
                    continue
                if line.startswith("Validator,"):
                    if first:
                        validators.append(line)
                    continue
                results.setdefault(",".join(line.split(",")[:2]), line)
    output = _with_ordinal(template, "_full0")
    with open(output, "w") as out:
        for line in validators + list(results.values()):
            out.write(line + "\n")
    for d in range(1, num_gpus):
        shutil.copyfile(output, _with_ordinal(template, f"_full{d}"))
    return output


def mgpu_tune_gemm_in_file(filename_pattern: str, num_gpus: int) -> None:
    """Tunes the GEMMs of every file matching ``filename_pattern`` (a glob: ``?`` or ``*``)
    over ``num_gpus`` GPUs, one worker process per GPU.

    Duplicates are tuned once. Each worker appends to its own results file (the results file
    name with its device ordinal); the union is then written to the results file name with
    ``_full0`` inserted, and copied to ``_full1`` ... ``_full<num_gpus-1>`` for a workload
    that runs on that many GPUs. Call it under ``if __name__ == "__main__":`` (the workers
    are spawned processes that import the caller's module).
    """
    from . import device_count

    if not isinstance(num_gpus, int) or isinstance(num_gpus, bool):
        raise _C.ArgumentTypeError(
            f"mgpu_tune_gemm_in_file(): argument 'num_gpus' must be int, got {type(num_gpus).__name__}")
    total = device_count()
    if not 1 <= num_gpus <= total:
        raise ValueError(f"mgpu_tune_gemm_in_file(): argument 'num_gpus' must be between 1 and "
                         f"{total} (the visible devices), got {num_gpus}")
    lines = _gather_unique_untuned_gemms(os.fspath(filename_pattern))
    if not lines:
        raise ValueError(f"mgpu_tune_gemm_in_file(): no GEMM lines in files matching "
                         f"'{filename_pattern}'")
    template = _results_template()
    ctx = mp.get_context("spawn")
    devices = ctx.Queue()
    for d in range(num_gpus):
        devices.put(d)
    budget = (get_max_tuning_duration(), get_max_tuning_iterations())
    with concurrent.futures.ProcessPoolExecutor(
            max_workers=num_gpus, mp_context=ctx, initializer=_mgpu_worker_init,
            initargs=(devices, template, budget)) as pool:
        futures = [pool.submit(_mgpu_tune_line, line) for line in lines]
        for f in concurrent.futures.as_completed(futures):
            f.result()
    _gather_results(template, num_gpus)
