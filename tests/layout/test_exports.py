"""What the shared libraries export (include/cudakit/export.hpp, src/libcudakit.map).

libcudakit.so exports only cudakit:: symbols: the public API (public headers declare it in
`namespace CUDAKIT_API cudakit`) plus the internal entry points listed in INTERNAL_EXPORTS,
which cudakit's own Python extension and allocator plug-in link against. No std:: template
instantiation, no helper of an anonymous namespace, no detail:: symbol by accident.
libcudakit_alloc.so exports its C ABI (and typeinfo of the cudakit exceptions it catches).
Both the extension and the plug-in must find every cudakit symbol they use.

Paths come from ctest (CUDAKIT_LIBRARY, CUDAKIT_ALLOC_PLUGIN, CUDAKIT_PYTHON_EXT); run alone,
the tests skip.
"""
from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess

import pytest

# Internal (not public) symbols exported on purpose, with their users. Keep this short: a
# new entry needs a reason, and most needs are better met by a public function.
INTERNAL_EXPORTS = {
    # These two were the allocator plug-in's; it now goes through the public hook table
    # (cudakit/plugin.hpp) and no in-tree dependent uses them: un-export with the seam's owner.
    "cudakit::detail::backend()": "formerly the allocator plug-in (current device)",
    "cudakit::detail::is_shutting_down()": "formerly the allocator plug-in (no frees at exit)",
    "cudakit::memory::raw_alloc(": "named in allocation-history stacks (first frame)",
    "cudakit::detail::emulated::run_host_node(": "emulated graphs' host-node function, named "
                                                 "by get_graph_data() (host_fn_name, dladdr)",
}
# Nested namespaces of the public API (symbols in them are public).
PUBLIC_NAMESPACES = ("cudakit::comm::", "cudakit::dlpack::", "cudakit::gds::",
                     "cudakit::graph_annotations::", "cudakit::jiterator::", "cudakit::nccl::",
                     "cudakit::nvtx::", "cudakit::profiler::", "cudakit::sanitizer::",
                     "cudakit::tunable::")
PLUGIN_C_ABI = {"cudakit_malloc", "cudakit_free", "cudakit_record_stream", "cudakit_last_error",
                "cudakit_init", "cudakit_empty_cache", "cudakit_memory_fraction",
                "cudakit_base_alloc", "cudakit_begin_allocate_to_pool",
                "cudakit_end_allocate_to_pool", "cudakit_release_pool"}

pytestmark = pytest.mark.skipif(shutil.which("nm") is None, reason="needs binutils' nm")


def library(var: str) -> pathlib.Path:
    path = os.environ.get(var)
    if not path:
        pytest.skip(f"{var} not set (run through ctest)")
    p = pathlib.Path(path)
    if not p.exists():
        pytest.skip(f"{p} not built")
    return p


def symbols(path: pathlib.Path, *flags: str) -> list[str]:
    """Mangled dynamic symbols (defined or undefined, per flags)."""
    out = subprocess.run(["nm", "-D", *flags, str(path)], check=True, capture_output=True,
                         text=True).stdout
    return [line.split()[-1] for line in out.splitlines() if line.strip()]


def demangle(names: list[str]) -> list[str]:
    if not names:
        return []
    out = subprocess.run(["c++filt"], input="\n".join(names), check=True, capture_output=True,
                         text=True).stdout
    return out.splitlines()


def classify(name: str) -> str | None:
    """Why an exported name is acceptable, or None."""
    m = re.match(r"(?:typeinfo name for |typeinfo for |vtable for |VTT for )?(cudakit::.*)", name)
    if not m:
        return None
    sym = m.group(1)
    nested = re.match(r"cudakit::([A-Za-z_]\w*)::", sym)
    if nested is None or nested.group(1)[0].isupper():  # cudakit::f() or cudakit::Class::f()
        return "public"
    if sym.startswith(PUBLIC_NAMESPACES):
        return "public"
    for prefix in INTERNAL_EXPORTS:
        if sym.startswith(prefix):
            return "internal"
    return None


@pytest.mark.skipif(shutil.which("readelf") is None, reason="needs binutils' readelf")
def test_libcudakit_is_not_static_tls():
    """An initial-exec thread_local marks the library STATIC_TLS: all of its thread_locals must
    then fit in the ~1.6 KB of static TLS glibc keeps for dlopen'ed libraries, shared with other
    extensions (`import cudakit` failed with "cannot allocate memory in static TLS block" once
    they grew past it). src/memory/alloc_trace.hpp says why the default model is used."""
    lib = library("CUDAKIT_LIBRARY")
    out = subprocess.run(["readelf", "-dW", str(lib)], check=True, capture_output=True,
                         text=True).stdout
    flags = [line for line in out.splitlines() if "(FLAGS)" in line]
    assert not any("STATIC_TLS" in line for line in flags), (
        "libcudakit.so is STATIC_TLS: a thread_local declared with "
        "__attribute__((tls_model(\"initial-exec\"))) (or built with -ftls-model=initial-exec); "
        "use the default model")


def test_libcudakit_exports_only_cudakit_symbols():
    lib = library("CUDAKIT_LIBRARY")
    names = demangle(symbols(lib, "--defined-only"))
    assert names, f"{lib} exports nothing?"
    bad = sorted(n for n in names if classify(n) is None)
    assert not bad, ("libcudakit.so exports symbols that are neither public API nor listed in "
                     "INTERNAL_EXPORTS:\n" + "\n".join(bad[:50]))
    # The public API is there (a sample across modules).
    for expected in ("cudakit::device_count()", "cudakit::StreamRef::is_done() const",
                     "cudakit::caching_allocator_alloc(", "cudakit::optional_libraries()",
                     "typeinfo for cudakit::OutOfMemoryError"):
        assert any(n.startswith(expected) for n in names), expected


def test_internal_exports_are_used_or_removed():
    lib = library("CUDAKIT_LIBRARY")
    names = demangle(symbols(lib, "--defined-only"))
    missing = [p for p in INTERNAL_EXPORTS if not any(p in n for n in names)]
    assert not missing, f"INTERNAL_EXPORTS lists symbols no longer exported: {missing}"


@pytest.mark.parametrize("var", ["CUDAKIT_ALLOC_PLUGIN", "CUDAKIT_PYTHON_EXT"])
def test_dependents_find_every_cudakit_symbol(var):
    dependent = library(var)
    lib = library("CUDAKIT_LIBRARY")
    defined = set(symbols(lib, "--defined-only"))
    used = [s for s in symbols(dependent, "--undefined-only") if "7cudakit" in s]
    missing = demangle(sorted(set(used) - defined))
    assert not missing, f"{dependent.name} needs symbols libcudakit.so does not export:\n" + \
        "\n".join(missing)


def test_alloc_plugin_exports_its_c_abi_only():
    plugin = library("CUDAKIT_ALLOC_PLUGIN")
    raw = symbols(plugin, "--defined-only")
    names = demangle(raw)
    assert PLUGIN_C_ABI <= set(raw), f"missing C ABI functions: {PLUGIN_C_ABI - set(raw)}"
    bad = [n for n in names if n not in PLUGIN_C_ABI and not re.match(
        r"typeinfo (name )?for cudakit::\w+$", n)]
    assert not bad, "libcudakit_alloc.so exports more than its C ABI:\n" + "\n".join(bad)
