"""Shared pytest setup. Tests run on whatever CUDAKIT_BACKEND selects (ctest sets
'emulated' in CI). Mark GPU-only tests with @pytest.mark.gpu: they skip without a GPU."""
import os

import pytest

# An emulated run must not inherit the host's GPU mask (CUDA_VISIBLE_DEVICES=3 on a GPU box
# would hide every emulated device); tests of the variable set it in subprocesses.
if os.environ.get("CUDAKIT_BACKEND") == "emulated":
    os.environ.pop("CUDA_VISIBLE_DEVICES", None)


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs the cuda backend and a real GPU")
    config.addinivalue_line(
        "markers", "races: issues unsynchronised work on purpose (deselected where the stream "
                   "sanitizer checks the whole suite, ctest python.pytest.sanitizer)")


def pytest_collection_modifyitems(config, items):
    import cudakit

    on_gpu = cudakit.backend_name() == "cuda" and cudakit.is_available()
    skip = pytest.mark.skip(reason="needs a GPU on the cuda backend")
    for item in items:
        if "gpu" in item.keywords and not on_gpu:
            item.add_marker(skip)


@pytest.fixture
def ck():
    import cudakit

    if not cudakit.is_available():
        pytest.skip(f"no device on backend {cudakit.backend_name()}")
    return cudakit


@pytest.fixture
def emulated_only():
    if os.environ.get("CUDAKIT_BACKEND") != "emulated":
        pytest.skip("emulated-backend specific")
