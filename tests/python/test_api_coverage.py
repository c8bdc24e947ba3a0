"""docs/api-coverage.md must stay true: every name marked implemented must exist."""
import pathlib
import re

import cudakit

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "api-coverage.md"


def rows():
    for line in DOC.read_text().splitlines():
        m = re.match(r"\|\s*`([^`]+)`[^|]*\|\s*`([^`]+)`\s*\|[^|]*\|\s*([\w+]+)\s*\|", line)
        if m:
            yield m.group(1), m.group(2), m.group(3)


def resolve(path):
    import importlib

    parts = path.split(".")
    obj = importlib.import_module(parts[0])
    for i, p in enumerate(parts[1:], 1):
        if hasattr(obj, p):
            obj = getattr(obj, p)
        else:
            obj = importlib.import_module(".".join(parts[: i + 1]))
    return obj


def test_every_seed_name_is_listed():
    listed = [r[0] for r in rows()]
    assert len(listed) >= 120
    assert len(set(listed)) == len(listed)


def test_implemented_names_exist():
    statuses = {"missing", "emulated", "emulated+H200", "partial"}
    for seed, py, status in rows():
        assert status in statuses, (seed, status)
        if status != "missing":
            assert resolve(py) is not None, f"{seed}: {py} marked {status} but absent"
