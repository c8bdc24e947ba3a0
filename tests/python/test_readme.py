"""The README's Python snippets run as written (each in a fresh process, in a temporary
directory), so the documentation cannot rot. A snippet that imports torch runs only where
torch with CUDA and the cuda backend are present (the GPU check)."""
import os
import pathlib
import re
import subprocess
import sys

import pytest

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def _torch_cuda_usable() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    import cudakit

    return torch.cuda.is_available() and cudakit.backend_name() == "cuda" \
        and cudakit.is_available()


def test_readme_has_python_snippets():
    assert len(_python_blocks()) >= 3


@pytest.mark.parametrize("index", range(len(_python_blocks())))
def test_readme_python_snippet_runs(index, tmp_path):
    code = _python_blocks()[index]
    if re.search(r"^import .*\btorch\b", code, flags=re.M) and not _torch_cuda_usable():
        pytest.skip("snippet needs torch with CUDA on the cuda backend")
    import cudakit

    env = dict(os.environ)  # the cudakit under test, whatever PYTHONPATH form found it
    env["PYTHONPATH"] = os.pathsep.join(
        [str(pathlib.Path(cudakit.__file__).resolve().parents[1]), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"README snippet {index} failed:\n{code}\n--- stderr:\n" \
                                 f"{proc.stderr}"
    if "_dump_snapshot(" in code:  # the memory snippet: its snapshot must not be empty
        import pickle

        snap = pickle.loads((tmp_path / "s.pickle").read_bytes())
        traces = [e for t in snap["device_traces"] for e in t]
        assert any(e["action"] == "alloc" for e in traces), "history recorded no allocation"
