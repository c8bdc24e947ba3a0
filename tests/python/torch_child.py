"""Runs a snippet in a fresh Python process with torch on CUDA and cudakit imported (the GPU
tests of the torch plug-in and of tagged pools): `import torch`, `import cudakit`,
`cudakit.memory as m` are in scope. Skips when torch or its CUDA device is missing."""
import os
import subprocess
import sys
import textwrap

import pytest

_PRELUDE = """
import torch
if not torch.cuda.is_available():
    print("SKIP torch has no CUDA device"); raise SystemExit(0)
import cudakit, cudakit.memory as m
"""


def run_torch_child(code: str) -> str:
    r = subprocess.run([sys.executable, "-c", _PRELUDE + textwrap.dedent(code)],
                       capture_output=True, text=True, env=dict(os.environ), timeout=600)
    if r.returncode != 0 and "ModuleNotFoundError" in r.stderr:
        pytest.skip(r.stderr.strip().splitlines()[-1])
    assert r.returncode == 0, r.stdout + r.stderr
    if r.stdout.startswith("SKIP"):
        pytest.skip(r.stdout.strip())
    return r.stdout
