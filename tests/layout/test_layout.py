"""Structure rules of the source tree (docs/architecture.md, "Rules the layout test enforces").

The driver seam (src/backend/backend.hpp) is the only place that knows which backend runs:
  1. outside src/backend/, no code compares a backend's name ("cuda" / "emulated"); it asks
     detail::backend().capabilities() instead;
  2. outside src/backend/, no code loads libraries (dlopen / dlsym / dlmopen / dlvsym);
  3. outside src/backend/, no code includes cuda.h or a CUDA library's headers;
  4. python/src/ includes no private header of src/backend/;
and the walls around it:
  5. public headers (include/cudakit/) include only public headers, mention no detail::
     namespace, and open `namespace CUDAKIT_API cudakit` (exported symbols);
  6. src/kernels/ (host/device-portable code) includes nothing else from src/, and src/ops/
     nothing from src/random/ (the ops <-> random include cycle stays broken);
  7. no header of src/backend/ reaches cudakit/tensor.hpp, directly or through the headers it
     includes (the seam speaks pointers and value types: every file that includes it would
     compile the tensor API);
  8. the floors: src/core/ and src/instrument/ include only their own and public headers, and
     no module of src/ outside src/sanitizer/ includes the sanitizer (private headers or
     cudakit/sanitizer.hpp): modules report to it through src/instrument/observers.hpp;
  9. no source file of src/ or python/ is over 800 lines;
 10. the seam is split by topic: outside src/backend/, src/ includes the topic headers it uses
     (backend/*_ops.hpp, types.hpp, lifetime.hpp), never the whole seam (backend/backend.hpp);
     and a topic header includes neither backend.hpp nor another topic header (types.hpp and
     its record header, activity.hpp / collectives.hpp, are its only seam includes).

Rules look at code only: comments and string literals are stripped first, so prose that
explains a rule ("never dlopen here") never trips it. Deliberate exceptions go in ALLOWED
with the reason. The model is cuda.core's tests/test_rt_layout.py.
"""
from __future__ import annotations

import io
import pathlib
import re
import tokenize

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CPP_SUFFIXES = {".cpp", ".hpp", ".cc", ".h", ".cu", ".cuh"}

# (rule, path relative to ROOT) -> why the exception is acceptable.
ALLOWED: dict[tuple[str, str], str] = {
    ("library-loading", "src/memory/pluggable.cpp"):
        "CUDAPluggableAllocator(path, alloc_fn, free_fn) opens the user's own allocator library "
        "by path, as torch does; it is no CUDA library and has nothing to do with the backend",
    ("backend-name", "python/cudakit/_device.py"):
        "torch.cuda.cudart() loads libcudart through ctypes and needs the cuda backend; it moves "
        "behind the seam with the binding rework (issue 8 item 3)",
    ("backend-name", "python/cudakit/_memory_replay.py"):
        "`python -m cudakit memory replay` picks the backend of the child process it starts "
        "(CUDAKIT_BACKEND, as a user would on the command line): the replay needs no GPU; "
        "nothing in this process branches on the backend",
    ("library-loading", "python/cudakit/_torch_interop.py"):
        "use_with_torch() finds libc10's profiler entry points in the copy torch has already "
        "loaded (RTLD_NOLOAD, never a new load): torch's library, no CUDA library, the same "
        "on every backend",
    ("library-loading", "python/cudakit/_device.py"):
        "same: cudart() is torch's ctypes handle to the CUDA runtime",
    ("cuda-headers", "src/nvtx/nvtx_c.hpp"):
        "NVTX3 is header-only and backend-neutral: annotations reach an attached tool whatever "
        "the backend, nothing is loaded, and without the headers src/nvtx builds a no-op path",
}


# ---------------------------------------------------------------- lexing

def strip_cpp(text: str) -> tuple[str, str, str]:
    """(code, norm, bare) with comments turned into spaces (newlines kept, so line numbers
    stay right). In `norm` every string literal is emptied except the exact backend names
    "cuda" / "emulated"; in `bare` every string and character literal is emptied. `code`
    keeps literals (for #include paths)."""
    out, norm, bare = [], [], []

    def emit(raw: str, normalized: str, emptied: str):
        out.append(raw); norm.append(normalized); bare.append(emptied)

    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            emit(*[" " * (j - i)] * 3); i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            emit(*[re.sub(r"[^\n]", " ", text[i:j])] * 3); i = j
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(\s]{0,16})\(', text[i:])
            if not m:
                emit(c, c, c); i += 1; continue
            end = text.find(")" + m.group(1) + '"', i + m.end())
            end = n if end < 0 else end + len(m.group(1)) + 2
            lit = text[i:end]
            empty = '""' + re.sub(r"[^\n]", "", lit)
            emit(lit, empty, empty); i = end
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            lit = text[i:j]
            emit(lit, lit if lit in ('"cuda"', '"emulated"') else c + c, c + c); i = j
        else:
            emit(c, c, c); i += 1
    return "".join(out), "".join(norm), "".join(bare)


def python_code(text: str) -> tuple[str, list[tuple[int, str]]]:
    """(code without comments and docstrings, [(line, string value)])."""
    keep, strings = [], []
    prev = tokenize.INDENT
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            continue
        if tok.type == tokenize.STRING:
            is_docstring = prev in (tokenize.INDENT, tokenize.NEWLINE, tokenize.DEDENT, tokenize.NL)
            if not is_docstring:
                try:
                    strings.append((tok.start[0], eval(tok.string, {}, {})))  # literal only
                except Exception:
                    pass
            if is_docstring:
                prev = tok.type
                continue
        keep.append(tok)
        if tok.type not in (tokenize.NL, tokenize.COMMENT):
            prev = tok.type
    return tokenize.untokenize(keep), strings


def line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


# ---------------------------------------------------------------- rules

# A backend-name getter, and the two backend names as literals.
BACKEND_GETTER = r"(?:\bbackend_name\s*\(\s*\)|\bselected_backend_name\s*\(\s*\)|\bbackend\s*\(\s*\)\s*(?:\.|->)\s*name\s*\(\s*\))"
BACKEND_LITERAL = r'"(?:cuda|emulated)"'
COMPARISON = r"(?:==|!=|\bstrcmp\s*\(|\bstrncmp\s*\(|\.\s*compare\s*\()"
LOADER_CALL = r"\b(?:dlopen|dlmopen|dlsym|dlvsym)\s*\("
CUDA_HEADER = (r'#\s*include\s*[<"](?:cuda\.h|cudaTypedefs\.h|cuda_runtime\w*\.h|cuda/[\w/.]+|'
               r"cuda_fp16\.h|cuda_bf16\.h|library_types\.h|driver_types\.h|vector_types\.h|"
               r"cublas\w*\.h|cusolver\w*\.h|cusparse\w*\.h|cufft\w*\.h|curand\w*\.h|nvml\.h|"
               r'cupti\w*\.h|nccl\.h|nvrtc\.h|cufile\.h|nvtx3/[\w/.]+)[>"]')


def check_cpp(rel: str, text: str) -> list[tuple[str, int, str]]:
    code, norm, bare = strip_cpp(text)
    found = []
    above_seam = not rel.startswith("src/backend/")

    def hit(rule: str, source: str, pattern: str, why: str):
        for m in re.finditer(pattern, source):
            found.append((rule, line_of(source, m.start()), why))

    if above_seam:
        # A comparison (per line) involving a backend-name getter, or any `.name()` compared
        # with a backend name. `s == "cuda"` (a device type) involves neither.
        for number, line in enumerate(norm.split("\n"), 1):
            if not re.search(COMPARISON, line):
                continue
            if re.search(BACKEND_GETTER, line) or (
                    re.search(r"\.\s*name\s*\(\s*\)", line) and re.search(BACKEND_LITERAL, line)):
                found.append(("backend-name", number,
                              "compares a backend's name: ask detail::backend().capabilities()"))
        hit("backend-name", norm, r'"emulated"',
            "names the emulated backend: decide by capability, not by name")
        hit("library-loading", bare, LOADER_CALL,
            "loads a library above the seam: go through src/backend/library_loader.hpp")
        hit("cuda-headers", code, CUDA_HEADER,
            "includes a CUDA header above the seam: only src/backend/ sees CUDA types")
    if rel.startswith("python/src/"):
        hit("private-backend-header", code, r'#\s*include\s*"(?:src/)?backend/',
            "the bindings include a private backend header: use public headers")
    if rel.startswith("include/cudakit/"):
        hit("public-header", code, r'#\s*include\s*"(?!cudakit/)',
            "a public header includes a private header")
        hit("public-header", bare, r"\bdetail\s*::|\bnamespace\s+detail\b",
            "a public header mentions detail::")
        hit("public-header", bare, r"\bnamespace\s+cudakit\b",
            "opens namespace cudakit without CUDAKIT_API (its symbols would not be exported)")
    if rel.startswith("src/kernels/"):
        hit("kernels-layering", code, r'#\s*include\s*"(?!kernels/)',
            "src/kernels/ is portable code and includes only src/kernels/ headers")
    if rel.startswith("src/ops/"):
        hit("ops-random-cycle", code, r'#\s*include\s*"random/',
            "src/ops/ must not include src/random/ (shared code lives in src/kernels/)")
    for floor in ("core", "instrument"):
        if rel.startswith(f"src/{floor}/"):
            hit("floor-layering", code, rf'#\s*include\s*"(?!{floor}/|cudakit/)',
                f"src/{floor}/ is a floor below the modules: it includes only {floor}/ and "
                "public headers")
    if rel.startswith("src/") and not rel.startswith("src/sanitizer/"):
        hit("instrument-floor", code, r'#\s*include\s*"(?:sanitizer/|cudakit/sanitizer\.hpp")',
            "a module includes the sanitizer: report through src/instrument/observers.hpp, "
            "whose table the sanitizer installs")
    found += check_seam_topics(rel, code)
    return found


# The seam's topic headers (backend/backend.hpp combines them into detail::Backend).
SEAM_TOPIC_HEADERS = re.compile(r"src/backend/(?:\w+_ops|types|lifetime)\.hpp")
SEAM_FULL_INCLUDE = r'#\s*include\s*"backend/backend\.hpp"'
SEAM_TOPIC_INCLUDE = r'#\s*include\s*"backend/(?:backend|\w+_ops|lifetime)\.hpp"'


def check_seam_topics(rel: str, code: str) -> list[tuple[str, int, str]]:
    found = []
    if rel.startswith("src/") and not rel.startswith("src/backend/"):
        for m in re.finditer(SEAM_FULL_INCLUDE, code):
            found.append(("seam-topics", line_of(code, m.start()),
                          "includes the whole seam above it: include the topic headers it uses "
                          "(backend/*_ops.hpp, types.hpp, lifetime.hpp) and call their accessors"))
    if SEAM_TOPIC_HEADERS.fullmatch(rel):
        for m in re.finditer(SEAM_TOPIC_INCLUDE, code):
            found.append(("seam-topics", line_of(code, m.start()),
                          "a topic header of the seam includes backend.hpp or another topic: "
                          "shared types go in backend/types.hpp"))
    return found


MAX_LINES = 800
SIZE_SUFFIXES = CPP_SUFFIXES | {".py", ".js"}


def oversized_files() -> list[str]:
    out = []
    for top in ("src", "python"):
        for p in sorted((ROOT / top).rglob("*")):
            if p.suffix in SIZE_SUFFIXES and p.is_file():
                n = p.read_text(encoding="utf-8", errors="replace").count("\n")
                if n > MAX_LINES:
                    out.append(f"{p.relative_to(ROOT).as_posix()}: {n} lines")
    return out


def check_python(rel: str, text: str) -> list[tuple[str, int, str]]:
    code, strings = python_code(text)
    found = []
    for m in re.finditer(r"backend_name\s*\(\s*\)\s*(?:==|!=)|(?:==|!=)\s*\S*backend_name\s*\(", code):
        found.append(("backend-name", line_of(code, m.start()),
                      "compares the backend's name: decide by capability"))
    for line, value in strings:
        if value == "emulated":
            found.append(("backend-name", line, "names the emulated backend in code"))
    for m in re.finditer(r"\bctypes\s*\.\s*(?:CDLL|cdll|PyDLL|LibraryLoader)\b|\bCDLL\s*\(", code):
        found.append(("library-loading", line_of(code, m.start()),
                      "loads a library above the seam"))
    return found


def scanned_files():
    for top in ("src", "include", "python/src"):
        for p in sorted((ROOT / top).rglob("*")):
            if p.suffix in CPP_SUFFIXES and p.is_file():
                yield p.relative_to(ROOT).as_posix(), "cpp"
    for p in sorted((ROOT / "python/cudakit").rglob("*.py")):
        yield p.relative_to(ROOT).as_posix(), "python"


SEAM_FORBIDDEN = "include/cudakit/tensor.hpp"
INCLUDE_ROOTS = ("src", "include")  # the project's include path (quoted includes)


def read_tree(rel: str) -> str | None:
    path = ROOT / rel
    return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else None


def include_chain(start: str, target: str, read=read_tree) -> list[str] | None:
    """The chain of project headers from `start` to `target` (both relative to ROOT), following
    every quoted #include outside comments, or None when `target` is not reachable. `read`
    returns a file's text, or None when there is no such file."""
    parents: dict[str, str | None] = {start: None}
    todo = [start]
    while todo:
        rel = todo.pop()
        text = read(rel)
        if text is None:
            continue
        code, _, _ = strip_cpp(text)
        for name in re.findall(r'#\s*include\s*"([^"]+)"', code):
            for top in INCLUDE_ROOTS:
                cand = f"{top}/{name}"
                if read(cand) is not None:
                    break
            else:
                continue
            if cand in parents:
                continue
            parents[cand] = rel
            if cand == target:
                chain = [cand]
                while parents[chain[-1]] is not None:
                    chain.append(parents[chain[-1]])
                return chain[::-1]
            todo.append(cand)
    return None


def check_seam_includes(rel: str, read=read_tree) -> list[tuple[str, int, str]]:
    if not (rel.startswith("src/backend/") and rel.endswith(".hpp")):
        return []
    chain = include_chain(rel, SEAM_FORBIDDEN, read)
    if chain is None:
        return []
    return [("seam-tensor", 1, "reaches cudakit/tensor.hpp through " + " -> ".join(chain) +
             ": the seam passes pointers and value types (split the types it needs into their "
             "own header, as cudakit/nccl_types.hpp)")]


def violations():
    out = []
    for rel, kind in scanned_files():
        text = (ROOT / rel).read_text(encoding="utf-8", errors="replace")
        found = check_cpp(rel, text) if kind == "cpp" else check_python(rel, text)
        if kind == "cpp":
            found += check_seam_includes(rel)
        for rule, line, why in found:
            if (rule, rel) not in ALLOWED:
                out.append(f"{rel}:{line}: [{rule}] {why}")
    return out


# ---------------------------------------------------------------- tests

def test_tree_follows_the_layout_rules():
    bad = violations()
    assert not bad, "layout rules broken (docs/architecture.md):\n" + "\n".join(bad)


def test_no_file_over_800_lines():
    big = oversized_files()
    assert not big, (f"files over {MAX_LINES} lines (split them by layer, docs/architecture.md):\n"
                     + "\n".join(big))


def test_allowed_exceptions_are_still_needed():
    """An exception whose file no longer breaks its rule must be removed from ALLOWED."""
    stale = []
    for (rule, rel), _ in ALLOWED.items():
        path = ROOT / rel
        if not path.exists():
            stale.append(f"{rel} (gone)")
            continue
        text = path.read_text(encoding="utf-8")
        found = check_python(rel, text) if rel.endswith(".py") else check_cpp(rel, text)
        if not rel.endswith(".py"):
            found += check_seam_includes(rel)
        if not any(r == rule for r, _, _ in found):
            stale.append(f"{rel} [{rule}]")
    assert not stale, "remove stale ALLOWED entries: " + ", ".join(stale)


def rules_hit(rel: str, snippet: str) -> set[str]:
    found = check_python(rel, snippet) if rel.endswith(".py") else check_cpp(rel, snippet)
    return {rule for rule, _, _ in found}


@pytest.mark.parametrize("rel,snippet,rule", [
    ("src/ops/x.cpp", 'if (std::string(detail::backend().name()) != "cuda") {}', "backend-name"),
    ("src/ops/x.cpp", 'static const bool e = backend_name() == "emulated";', "backend-name"),
    ("src/ops/x.cpp", 'if (std::strcmp(be.name(), "cuda") == 0) {}', "backend-name"),
    ("src/ops/x.cpp", 'auto n = "emulated";', "backend-name"),
    ("src/memory/x.cpp", 'void* h = dlopen("libcublas.so.13", RTLD_NOW);', "library-loading"),
    ("src/devices/x.cpp", "auto f = dlsym (h, sym);", "library-loading"),
    ("src/ops/x.cpp", "#include <cuda.h>", "cuda-headers"),
    ("src/tensor/x.cpp", "#include <cublas_v2.h>", "cuda-headers"),
    ("src/ops/x.cpp", "#include <cuda/stream_ref>", "cuda-headers"),
    ("python/src/bind_x.cpp", '#include "backend/backend.hpp"', "private-backend-header"),
    ("include/cudakit/x.hpp", '#include "memory/config.hpp"', "public-header"),
    ("include/cudakit/x.hpp", "namespace cudakit::detail { using H = void*; }", "public-header"),
    ("include/cudakit/x.hpp", "namespace cudakit {\nint f();\n}", "public-header"),
    ("src/kernels/x.hpp", '#include "ops/dispatch.hpp"', "kernels-layering"),
    ("src/ops/x.hpp", '#include "random/philox.hpp"', "ops-random-cycle"),
    ("src/core/x.cpp", '#include "memory/history.hpp"', "floor-layering"),
    ("src/instrument/x.hpp", '#include "backend/backend.hpp"', "floor-layering"),
    ("src/streams/x.cpp", '#include "sanitizer/hooks.hpp"', "instrument-floor"),
    ("src/memory/x.cpp", '#include "cudakit/sanitizer.hpp"', "instrument-floor"),
    ("src/streams/x.cpp", '#include "backend/backend.hpp"', "seam-topics"),
    ("src/memory/x.hpp", '#include  "backend/backend.hpp"', "seam-topics"),
    ("src/backend/stream_ops.hpp", '#include "backend/memory_ops.hpp"', "seam-topics"),
    ("src/backend/types.hpp", '#include "backend/backend.hpp"', "seam-topics"),
    ("src/backend/graph_ops.hpp", '#include "backend/lifetime.hpp"', "seam-topics"),
    ("python/cudakit/x.py", 'if _C.backend_name() == "cuda":\n    pass\n', "backend-name"),
    ("python/cudakit/x.py", "lib = ctypes.CDLL('libnvrtc.so')\n", "library-loading"),
])
def test_rules_catch(rel, snippet, rule):
    assert rule in rules_hit(rel, snippet)


@pytest.mark.parametrize("rel,snippet", [
    # Prose in comments and messages is not code.
    ("src/ops/x.cpp", '// never dlopen here; "emulated" backends branch on capabilities\nint x;'),
    ("src/ops/x.cpp", "/* if (backend_name() == \"cuda\") was the old way */ int y;"),
    ("src/ops/x.cpp", 'throw Error("set CUDAKIT_BACKEND=emulated, or call dlopen( yourself");'),
    ("src/ops/x.cpp", 'const char* s = R"(backend().name() == "cuda")";'),
    # Device-type strings are not backend names.
    ("src/tensor/x.cpp", 'if (s == "cuda") return cuda(kCurrentDevice);'),
    ("python/src/bind_x.cpp", 'if (type != "cuda") throw ValueError("not a cuda device");'),
    # Display of the name is fine.
    ("src/devices/x.cpp", "p->backend = be.name();"),
    ("src/memory/x.cpp", 'msg = std::string(b.name()) + " backend has 2 devices";'),
    # dladdr (naming a code address) loads nothing.
    ("src/memory/x.cpp", "#include <dlfcn.h>\nDl_info i; dladdr(pc, &i);"),
    # The floors use their own and public headers; the sanitizer includes its own.
    ("src/instrument/x.hpp", '#include "instrument/observers.hpp"\n#include "cudakit/stream.hpp"'),
    ("src/core/x.cpp", '#include "core/files.hpp"'),
    ("src/sanitizer/x.cpp", '#include "sanitizer/hooks.hpp"\n#include "cudakit/sanitizer.hpp"'),
    ("src/streams/x.cpp", '#include "instrument/observers.hpp"'),
    # Modules include the seam's topics; the backends and their selection the whole seam.
    ("src/streams/x.cpp", '#include "backend/stream_ops.hpp"\n#include "backend/lifetime.hpp"'),
    ("src/memory/x.hpp", '// not #include "backend/backend.hpp"\n#include "backend/types.hpp"'),
    ("src/backend/emulated/x.cpp", '#include "backend/backend.hpp"'),
    ("src/backend/backend.cpp", '#include "backend/backend.hpp"'),
    ("src/backend/comm_ops.hpp", '#include "backend/collectives.hpp"\n#include "backend/types.hpp"'),
    # Inside the seam everything is allowed.
    ("src/backend/cuda/x.cpp", '#include <cuda.h>\nvoid* h = dlopen("libcuda.so.1", 0);'),
    ("include/cudakit/x.hpp", '#include "cudakit/export.hpp"\nnamespace CUDAKIT_API cudakit {\n}'),
    ("python/cudakit/x.py", '"""Backends: cuda or "emulated"."""\n# backend_name() == "cuda"\nx = 1\n'),
    ("python/cudakit/x.py", 'def f(device="cuda"):\n    return "the emulated backend"\n'),
])
def test_rules_ignore(rel, snippet):
    assert rules_hit(rel, snippet) == set()


def test_seam_rule_follows_includes():
    tree = {
        "src/backend/backend.hpp": '#include "backend/collectives.hpp"\n#include <vector>\n',
        "src/backend/collectives.hpp": '// #include "cudakit/tensor.hpp" (a comment)\n#include "cudakit/nccl.hpp"\n',
        "include/cudakit/nccl.hpp": '#include "cudakit/tensor.hpp"\n',
        "include/cudakit/tensor.hpp": "",
        "src/backend/activity.hpp": '#include "cudakit/stream.hpp"\n',
        "include/cudakit/stream.hpp": "",
    }
    read = tree.get
    assert include_chain("src/backend/backend.hpp", SEAM_FORBIDDEN, read) == [
        "src/backend/backend.hpp", "src/backend/collectives.hpp", "include/cudakit/nccl.hpp",
        "include/cudakit/tensor.hpp"]
    assert {r for r, _, _ in check_seam_includes("src/backend/backend.hpp", read)} == {"seam-tensor"}
    assert check_seam_includes("src/backend/activity.hpp", read) == []
    tree["include/cudakit/nccl.hpp"] = '#include "cudakit/stream.hpp"\n'  # the split
    assert check_seam_includes("src/backend/backend.hpp", read) == []
    assert check_seam_includes("src/ops/ops.hpp", read) == []  # only the seam's headers
