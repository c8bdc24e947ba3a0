"""The rules of python/src (see python/src/args.hpp and registry.hpp), checked mechanically:

* bindings include public headers only (include/cudakit/...) or their own python/src headers;
* every public function and method of cudakit._C takes its user-supplied arguments as Python
  objects (pybind11 `handle`/`object`) and converts them in the argument layer, so a wrong type
  or an out-of-range int can never produce a pybind11 signature dump;
* fuzzing every public callable with a wrong-typed and an out-of-range argument yields clean
  errors.
"""
from __future__ import annotations

import pathlib
import re

import pytest

import cudakit as ck
from cudakit import _C

SRC = pathlib.Path(__file__).resolve().parents[2] / "python" / "src"
PUBLIC_CLASSES = ["Tensor", "Stream", "ExternalStream", "Event", "StreamContext", "Device", "Generator", "dtype",
                  "Communicator"]
UNTYPED = {"handle", "object", "*args", "**kwargs"}
FORBIDDEN = ("incompatible function arguments", "Invoked with", "Unable to cast", "cudakit::", "std::")


def test_bindings_include_only_public_headers():
    local = {p.name for p in SRC.glob("*.hpp")}
    for f in sorted(SRC.glob("*.[ch]pp")):
        for line in f.read_text().splitlines():
            m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
            if m:
                inc = m.group(1)
                assert inc.startswith("cudakit/") or inc in local, f"{f.name} includes private header {inc}"


def _public_callables():
    for name in sorted(dir(_C)):
        obj = getattr(_C, name)
        if name.startswith("_") or isinstance(obj, type) or not callable(obj):
            continue
        if type(obj).__name__ == "builtin_function_or_method":
            yield name, obj
    for cname in PUBLIC_CLASSES:
        cls = getattr(_C, cname)
        for name, obj in vars(cls).items():
            if name.startswith("_") and name not in ("__init__", "__getitem__", "__setitem__") and not (
                    name.startswith("__") and name.endswith("__") and name[2:-2] in _OPERATORS):
                continue
            if type(obj).__name__ in ("instancemethod", "builtin_function_or_method", "staticmethod"):
                yield f"{cname}.{name}", getattr(cls, name)


_OPERATORS = {"add", "radd", "sub", "rsub", "mul", "rmul", "truediv", "rtruediv", "pow", "rpow", "eq", "ne",
              "lt", "le", "gt", "ge", "matmul", "iadd", "isub", "imul", "itruediv", "dlpack"}


def _signatures(fn):
    doc = fn.__doc__ or ""
    name = fn.__name__
    return [line for line in doc.splitlines() if re.match(rf"^(\d+\. )?{re.escape(name)}\(", line)]


def _params(sig):
    """(name, type, required, keyword_only) of each parameter but self, from a pybind11
    signature line."""
    inner = sig[sig.index("(") + 1: sig.rindex(") ->")]
    kwonly = False
    for part in re.split(r", (?![^\[\]]*\])", inner):
        part = part.strip()
        if part == "*":
            kwonly = True
        if not part or part == "*" or part.startswith("self"):
            continue
        if part.startswith("*"):
            yield part.split(":")[0], part.split(":")[0], False, False
            continue
        name, rest = part.split(":", 1)
        yield name, rest.split("=")[0].strip(), "=" not in part, kwonly


def _param_types(sig):
    return [t for _, t, _, _ in _params(sig)]


def test_public_bindings_take_python_objects():
    typed = []
    checked = 0
    for qual, fn in _public_callables():
        for sig in _signatures(fn):
            checked += 1
            for t in _param_types(sig):
                if t not in UNTYPED:
                    typed.append(f"{qual}: {sig}")
    assert checked > 100
    assert not typed, "public bindings with typed parameters (convert them in args.hpp):\n" + "\n".join(typed)


def _communicator(ck):
    """A one-rank communicator when the collectives engine loads (else its methods are skipped:
    an instance cannot be made)."""
    try:
        return ck.nccl.Communicator(1, ck.nccl.unique_id(), 0, device=0)
    except NotImplementedError:
        return None


@pytest.mark.parametrize("bad", [object(), 2**70, -(2**70), "cuda:zz", 1.5e300], ids=["object", "huge", "-huge",
                                                                                        "str", "float"])
def test_fuzz_public_callables_give_clean_errors(ck, bad):
    t = ck.ones(2)
    s = ck.Stream()
    instances = {"Tensor": t, "Stream": s, "ExternalStream": s, "Event": ck.Event(), "Device": ck.Device(0),
                 "Generator": ck.Generator("cuda:0"), "dtype": ck.float32, "StreamContext": ck.StreamContext(None),
                 "Communicator": _communicator(ck)}
    skip = {"set_backend", "init", "synchronize"}  # global switches; covered elsewhere
    for qual, fn in _public_callables():
        if qual in skip or qual.endswith("__init__"):
            continue
        cname, _, mname = qual.rpartition(".")
        if cname and instances[cname] is None:
            continue
        target = getattr(instances[cname], mname) if cname else fn
        sigs = _signatures(fn)
        if not sigs or not any(_param_types(sg) for sg in sigs):
            continue
        params = list(_params(sigs[0]))
        positional = [p for p in params if not p[3]]
        # Every required parameter gets `bad`; a keyword-only function gets it by keyword.
        args = [bad] * max(1, sum(p[2] for p in positional)) if positional else []
        kwargs = {} if positional else {params[0][0]: bad}
        try:
            target(*args, **kwargs)
        except Exception as e:  # any clean error is fine; a dump or an internal name is not
            msg = str(e)
            assert not any(f in msg for f in FORBIDDEN), f"{qual}({bad!r:.20}): {msg}"
    ck.synchronize()
