"""Shared pytest setup. Tests run on whatever CUDAKIT_BACKEND selects (ctest sets
'emulated' in CI). Mark GPU-only tests with @pytest.mark.gpu: they skip without a GPU."""
import os

import pytest

# An emulated run must not inherit the host's GPU mask (CUDA_VISIBLE_DEVICES=3 on a GPU box
# would hide every emulated device); tests of the variable set it in subprocesses.
if os.environ.get("CUDAKIT_BACKEND") == "emulated":
    os.environ.pop("CUDA_VISIBLE_DEVICES", None)


def pytest_addoption(parser):
    parser.addoption(
        "--sync-debug", choices=("default", "warn", "error"),
        # An empty variable (CUDAKIT_TEST_SYNC_DEBUG= in a script) means the default mode.
        default=os.environ.get("CUDAKIT_TEST_SYNC_DEBUG") or "default",
        help="run every test under cudakit.set_sync_debug_mode(MODE) (env CUDAKIT_TEST_SYNC_DEBUG)")


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs the cuda backend and a real GPU")
    config.addinivalue_line(
        "markers", "syncs(reason): synchronises the host with a device on purpose, somewhere the "
                   "sync-debug pass cannot tell from a test's own read-back (runs without "
                   "set_sync_debug_mode there; the reason says why)")
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


# ---- the sync-debug pass (CUDAKIT_TEST_SYNC_DEBUG=error, scripts/dev.sh test) ----
# Every test runs under set_sync_debug_mode(MODE), so a built-in op or library call that
# waits for the device where torch does not (a hidden host<->device copy, a stream
# synchronize) fails the test. The synchronising calls a test itself makes to set up inputs
# and read results (cudakit.tensor(list), .cpu(), .item(), numpy(), Stream.synchronize(),
# ...) are reported by the mode exactly as torch reports them; the harness lets the ones
# written in a test file through: each of these entry points runs with the mode at
# "default" when its caller's frame is in tests/, and under the mode otherwise (a call from
# cudakit's own Python code is still checked). Tests that synchronise some other way are
# marked @pytest.mark.syncs("why").
_TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
_harness = {"mode": 0, "active": False}
_READBACK_METHODS = ("item", "tolist", "cpu", "numpy", "to", "copy_", "__array__", "__bool__",
                     "__float__", "__int__", "__index__", "__complex__", "__repr__", "__str__",
                     "__setitem__", "__dlpack__", "pin_memory")
_READBACK_FUNCTIONS = ("asarray", "from_dlpack")


def _exempt_from_test(fn, depth=1):
    import functools
    import sys

    import cudakit

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if not _harness["active"]:
            return fn(*args, **kwargs)
        caller = sys._getframe(depth).f_code.co_filename
        if not os.path.abspath(caller).startswith(_TESTS_DIR):
            return fn(*args, **kwargs)
        cudakit.set_sync_debug_mode("default")
        try:
            return fn(*args, **kwargs)
        finally:
            if _harness["active"]:
                cudakit.set_sync_debug_mode(_harness["mode"])

    return wrapper


def _install_sync_debug_exemptions():
    import cudakit
    import cudakit.tensor as ck_tensor

    for name in _READBACK_METHODS:
        if hasattr(cudakit.Tensor, name):
            setattr(cudakit.Tensor, name, _exempt_from_test(getattr(cudakit.Tensor, name)))
    for cls, name in ((cudakit.Stream, "synchronize"), (cudakit.Event, "synchronize")):
        setattr(cls, name, _exempt_from_test(getattr(cls, name)))
    for name in _READBACK_FUNCTIONS:
        wrapped = _exempt_from_test(getattr(cudakit, name))
        setattr(cudakit, name, wrapped)
        setattr(ck_tensor, name, wrapped)
    # cudakit.tensor(data) is the callable module's __call__ (python/cudakit/tensor.py).
    cls = type(ck_tensor)
    cls.__call__ = _exempt_from_test(cls.__call__)
    # A test taking control of the mode ends the harness's for that test.
    original = cudakit.set_sync_debug_mode

    def set_sync_debug_mode(mode):
        original(mode)  # a rejected mode leaves the harness's in place
        _harness["active"] = False

    cudakit.set_sync_debug_mode = set_sync_debug_mode
    cudakit._device.set_sync_debug_mode = set_sync_debug_mode
    return original


@pytest.fixture(autouse=True)
def _sync_debug_mode(request):
    mode = request.config.getoption("--sync-debug")
    if mode == "default" or request.node.get_closest_marker("syncs"):
        yield
        return
    import cudakit

    if not hasattr(request.config, "_ck_set_sync_debug_mode"):
        request.config._ck_set_sync_debug_mode = _install_sync_debug_exemptions()
    set_mode = request.config._ck_set_sync_debug_mode
    _harness.update(mode=mode, active=True)
    set_mode(mode)
    try:
        yield
    finally:
        _harness["active"] = False
        set_mode("default")
