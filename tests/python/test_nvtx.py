"""cudakit.nvtx: torch.cuda.nvtx's semantics, the attributes torch lacks, and what an NVTX tool
receives (a recording injection library, tests/cpp/nvtx_recorder, run in a subprocess)."""
import json
import os
import pathlib
import subprocess
import sys
import textwrap
import threading

import pytest

import cudakit
import cudakit.nvtx as nvtx


@pytest.fixture(autouse=True)
def balanced():
    """Every test starts and ends with no range open on this thread."""
    while nvtx.depth() > 0:
        nvtx.range_pop()
    yield
    assert nvtx.depth() == 0
    assert nvtx.depth(nvtx.cudakit_domain) == 0


def test_torch_names_exist_and_module_is_an_attribute():
    assert cudakit.nvtx is nvtx
    for name in ["range_push", "range_pop", "range_start", "range_end", "mark", "range"]:
        assert name in nvtx.__all__ and callable(getattr(nvtx, name))


def test_push_returns_depth_started_pop_returns_depth_ended():
    assert nvtx.range_push("a") == 0
    assert nvtx.range_push("b") == 1
    assert nvtx.range_push(msg="c") == 2  # msg by keyword, as torch's Python signature
    assert nvtx.depth() == 3
    assert [nvtx.range_pop() for _ in range(3)] == [2, 1, 0]


def test_pop_with_nothing_pushed_returns_minus_one():
    assert nvtx.range_pop() == -1
    assert nvtx.range_pop() == -1
    assert nvtx.range_push("x") == 0  # the count never went negative
    assert nvtx.range_pop() == 0


def test_bytes_and_non_ascii_messages():
    assert nvtx.range_push(b"bytes") == 0
    assert nvtx.range_push("größe ✓") == 1
    nvtx.mark("émoji 🚀")
    assert nvtx.range_pop() == 1
    assert nvtx.range_pop() == 0


def test_each_thread_has_its_own_depth():
    nvtx.range_push("main")
    seen = []

    def worker():
        seen.append((nvtx.range_push("w"), nvtx.range_push("w2"), nvtx.range_pop(),
                     nvtx.range_pop(), nvtx.range_pop()))

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == [(0, 1, 1, 0, -1)] * 4
    assert nvtx.range_pop() == 0


def test_domains_have_separate_stacks():
    d = nvtx.Domain("cudakit.pytest")
    assert nvtx.range_push("g") == 0
    assert nvtx.range_push("d0", domain=d) == 0
    assert nvtx.range_push("d1", domain="cudakit.pytest") == 1  # by name: the same domain
    assert nvtx.depth(d) == 2 and nvtx.depth() == 1
    assert nvtx.range_pop(domain=d) == 1
    assert nvtx.range_pop(domain=d) == 0
    assert nvtx.range_pop(domain=d) == -1
    assert nvtx.range_pop() == 0


def test_range_start_end_ids_are_unique_and_cross_threads():
    ids = []
    lock = threading.Lock()

    def start_many():
        mine = [nvtx.range_start("r") for _ in range(500)]
        with lock:
            ids.extend(mine)

    threads = [threading.Thread(target=start_many) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(ids)) == len(ids) == 2000
    assert all(isinstance(i, int) and i > 0 for i in ids)
    ender = threading.Thread(target=lambda: [nvtx.range_end(i) for i in ids])
    ender.start()
    ender.join()
    assert nvtx.depth() == 0  # start/end do not touch the push/pop stack


def test_mark_returns_none():
    assert nvtx.mark("event") is None
    assert nvtx.mark("event", color="red", payload=1, category=2) is None


def test_range_context_manager_formats_like_torch():
    with nvtx.range("step {} of {total}", 3, total=10) as r:
        assert r is None  # torch's contextmanager yields nothing
        assert nvtx.depth() == 1
    assert nvtx.depth() == 0
    assert nvtx.range("step {} of {total}", 3, total=10).message == "step 3 of 10"
    # torch always calls msg.format(*args, **kwargs): escaped braces collapse, extra args
    # are ignored, and missing ones raise.
    assert nvtx.range("{{literal}}").message == "{literal}"
    assert nvtx.range("no fields", 1, 2, k=3).message == "no fields"
    assert nvtx.range("{0:>5}|{x!r}", "a", x="b").message == "    a|'b'"
    with pytest.raises(IndexError):
        nvtx.range("{}")
    with pytest.raises(KeyError):
        nvtx.range("{missing}")
    with pytest.raises(TypeError, match=r"range\(\): argument 'msg' must be a str, not int \(42\)"):
        nvtx.range(42)
    with pytest.raises(TypeError, match="missing required argument 'msg'"):
        nvtx.range()


def test_range_attribute_keywords_are_also_format_arguments():
    r = nvtx.range("colour {color}", color="red")
    assert r.message == "colour red"
    with r:
        assert nvtx.depth() == 1
    with nvtx.range("in {domain}", domain="cudakit.pytest"):
        assert nvtx.depth(nvtx.Domain("cudakit.pytest")) == 1
        assert nvtx.depth() == 0
    assert nvtx.depth(nvtx.Domain("cudakit.pytest")) == 0


def test_range_pops_when_the_block_raises():
    with pytest.raises(ZeroDivisionError):
        with nvtx.range("boom"):
            assert nvtx.depth() == 1
            1 / 0
    assert nvtx.depth() == 0


def test_range_as_decorator_keeps_metadata_binds_methods_and_recurses():
    depths = []

    @nvtx.range("fib {}", "x")
    def fib(n):
        """doc of fib"""
        depths.append(nvtx.depth())
        return n if n < 2 else fib(n - 1) + fib(n - 2)

    assert fib(6) == 8
    assert max(depths) == 6 and min(depths) == 1  # one level per nested call
    assert fib.__name__ == "fib" and fib.__doc__ == "doc of fib"
    assert fib.__wrapped__ is not None

    class Model:
        @nvtx.range("forward", color="blue")
        def forward(self, x):
            return (self, x, nvtx.depth())

    m = Model()
    assert m.forward(5) == (m, 5, 1)

    @nvtx.range("raises")
    def bad():
        raise ValueError("inner")

    with pytest.raises(ValueError, match="inner"):
        bad()
    with pytest.raises(TypeError, match="decorate a function"):
        nvtx.range("x")(1)


def test_decorated_function_is_per_thread():
    @nvtx.range("worker")
    def work():
        return nvtx.depth()

    out = []
    threads = [threading.Thread(target=lambda: out.append(work())) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out == [1] * 4


def test_color_forms():
    for color in [0xFF0000, 0x80FF0000, "red", "Navy", "#00ff00", "#8000ff00", (1, 2, 3),
                  (1, 2, 3, 4), None]:
        assert nvtx.range_push("c", color=color) == 0
        assert nvtx.range_pop() == 0


@pytest.mark.parametrize("color,exc,match", [
    ("nope", ValueError, r"invalid NVTX color 'nope'.*#RRGGBB"),
    (1 << 32, ValueError, "out of range"),
    (-1, ValueError, "out of range"),
    ((1, 2), TypeError, r"\(r, g, b\[, a\]\) tuple"),
    ((1, 2, 300), ValueError, "0..255"),
    (True, TypeError, r"argument 'color' must be an int 0xRRGGBB.*not bool \(True\)"),
    (1.5, TypeError, r"range_push\(\): argument 'color' must be .*tuple, not float"),
])
def test_bad_color_is_a_clear_error(color, exc, match):
    with pytest.raises(exc, match=match):
        nvtx.range_push("c", color=color)
    assert nvtx.depth() == 0  # nothing was pushed


def test_categories_by_id_and_name():
    d = nvtx.Domain("cudakit.pytest.cat")
    io = d.category("io")
    assert io >= 1 and d.category("io") == io
    d.name_category(77, "gpu")
    assert d.category("gpu") == 77
    nvtx.name_category(5, "five")  # default domain
    nvtx.name_category(6, "six", domain=d)
    assert d.category("six") == 6
    assert nvtx.range_push("c", category="io", domain=d) == 0  # registered by name, in d
    assert nvtx.range_pop(domain=d) == 0
    nvtx.mark("m", category=12)
    with pytest.raises(ValueError, match="out of range"):
        nvtx.mark("m", category=-1)
    with pytest.raises(TypeError, match=r"mark\(\): argument 'category' must be an int id or a str name, not float"):
        nvtx.mark("m", category=1.0)
    with pytest.raises(ValueError, match="non-empty"):
        d.category("")
    with pytest.raises(ValueError, match="id 0"):
        d.name_category(0, "zero")
    with pytest.raises(TypeError, match=r"name_category\(\): argument 'domain' must be a "
                                        r"cudakit.nvtx.Domain, a str or None, not int"):
        nvtx.name_category(1, "x", domain=3)
    nvtx.name_category(category=8, name="eight", domain=d)  # keywords, as the Python def took
    assert d.category("eight") == 8
    with pytest.raises(TypeError, match="missing required argument 'name'"):
        nvtx.name_category(9)


def test_payload_forms():
    for payload in [0, -5, 2**63 - 1, 2**64 - 1, -2**63, 0.5, float("inf")]:
        nvtx.mark("p", payload=payload)
    with pytest.raises(ValueError, match="64 bits"):
        nvtx.mark("p", payload=2**64)
    with pytest.raises(ValueError, match="64 bits"):
        nvtx.mark("p", payload=-2**63 - 1)
    with pytest.raises(TypeError, match=r"mark\(\): argument 'payload' must be an int or a float, not str"):
        nvtx.mark("p", payload="3")
    with pytest.raises(TypeError):
        nvtx.mark("p", payload=True)


def test_domains():
    assert nvtx.Domain("cudakit") == nvtx.cudakit_domain
    assert nvtx.Domain("a.b") == nvtx.Domain("a.b") and nvtx.Domain("a.b") != nvtx.Domain("a.c")
    assert hash(nvtx.Domain("a.b")) == hash(nvtx.Domain("a.b"))
    assert nvtx.cudakit_domain.name == "cudakit" and nvtx.global_domain.name == ""
    assert repr(nvtx.cudakit_domain) == "cudakit.nvtx.Domain('cudakit')"
    with pytest.raises(ValueError, match="non-empty"):
        nvtx.Domain("")
    with pytest.raises(TypeError, match=r"Domain\(\): argument 'name' must be a str, not int"):
        nvtx.Domain(3)
    with pytest.raises(ValueError, match="global_domain"):  # the fix for wanting the default
        nvtx.range_push("x", domain="")
    with pytest.raises(TypeError, match=r"argument 'domain' must be a cudakit.nvtx.Domain, a str or None, not int \(1\)"):
        nvtx.range_push("x", domain=1)


def test_bad_arguments_name_the_argument():
    with pytest.raises(TypeError, match=r"range_push\(\): argument 'msg' must be a str \(or bytes\), not int \(1\)"):
        nvtx.range_push(1)
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        nvtx.range_push("x", colour="red")
    with pytest.raises(TypeError, match="multiple values for argument 'msg'"):
        nvtx.range_push("x", msg="y")
    with pytest.raises(TypeError, match="takes 1 positional argument"):
        nvtx.mark("a", "b")
    with pytest.raises(TypeError, match="range_pop\\(\\) takes no positional"):
        nvtx.range_pop(1)
    with pytest.raises(TypeError, match=r"range_end\(\): argument 'range_id' must be the int returned by range_start\(\), not str"):
        nvtx.range_end("1")
    with pytest.raises(ValueError, match=r"argument 'range_id' is not an id from range_start\(\): -1"):
        nvtx.range_end(-1)
    assert nvtx.depth() == 0


def test_no_tool_attached_in_this_process():
    if os.environ.get("NVTX_INJECTION64_PATH"):
        pytest.skip("a tool is injected into the test process")
    assert nvtx.tool_attached() is False


# ---- what a tool receives ----

def recorder_path():
    path = os.environ.get("CUDAKIT_NVTX_RECORDER")
    if not path:
        # Build tree layout: <build>/python/cudakit -> <build>/tests/libcudakit_nvtx_recorder.so
        guess = (pathlib.Path(cudakit.__file__).resolve().parents[2] / "tests" /
                 "libcudakit_nvtx_recorder.so")
        path = str(guess) if guess.exists() else None
    if not path:
        pytest.skip("NVTX recorder not built (no nvtx3 headers); ctest sets CUDAKIT_NVTX_RECORDER")
    return path


def run_with_recorder(body):
    """Runs `body` in a fresh interpreter with the recorder injected; returns (events, result)."""
    path = recorder_path()
    script = textwrap.dedent("""
        import ctypes, json, sys
        rec = None
        def events():
            global rec
            if rec is None:
                rec = ctypes.CDLL(sys.argv[1])  # the library NVTX loaded (same path)
                rec.cudakit_nvtx_recorder_json.restype = ctypes.c_char_p
            return json.loads(rec.cudakit_nvtx_recorder_json().decode())
        result = {}
    """) + textwrap.dedent(body) + "\nprint(json.dumps({'events': events(), 'result': result}))\n"
    env = dict(os.environ, NVTX_INJECTION64_PATH=path)
    out = subprocess.run([sys.executable, "-c", script, path], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout.strip().splitlines()[-1])
    return data["events"], data["result"]


def test_importing_cudakit_does_not_initialise_nvtx():
    events, result = run_with_recorder("""
        import ctypes
        import cudakit, cudakit.nvtx as nvtx
        lib = ctypes.CDLL(sys.argv[1])
        result["after_import"] = lib.cudakit_nvtx_recorder_instances()
        nvtx.mark("first")
        result["after_call"] = lib.cudakit_nvtx_recorder_instances()
        result["attached"] = nvtx.tool_attached()
    """)
    assert result == {"after_import": 0, "after_call": 1, "attached": True}
    assert [(e["kind"], e["message"]) for e in events] == [("mark", "first")]


def test_tool_receives_torch_style_calls():
    events, result = run_with_recorder("""
        import threading
        import cudakit.nvtx as nvtx
        result["depths"] = [nvtx.range_push("outer"), nvtx.range_push("inner"),
                            nvtx.range_pop(), nvtx.range_pop()]
        nvtx.mark("tick")
        rid = nvtx.range_start("async")
        t = threading.Thread(target=nvtx.range_end, args=(rid,)); t.start(); t.join()
        result["rid"] = rid
        with nvtx.range("layer {}", 3):
            pass

        @nvtx.range("decorated {name}", name="f")
        def f():
            pass

        f(); f()
    """)
    assert result["depths"] == [0, 1, 1, 0]
    kinds = [(e["kind"], e["message"]) for e in events]
    assert kinds == [("push", "outer"), ("push", "inner"), ("pop", ""), ("pop", ""),
                     ("mark", "tick"), ("start", "async"), ("end", ""),
                     ("push", "layer 3"), ("pop", ""),
                     ("push", "decorated f"), ("pop", ""), ("push", "decorated f"), ("pop", "")]
    assert all(e["domain"] == "" for e in events)  # torch's calls use the default domain
    start, end = events[5], events[6]
    assert start["id"] == end["id"] == result["rid"]  # the tool's id is what range_start returns
    assert start["thread"] != end["thread"]


def test_tool_receives_domains_colors_categories_payloads():
    events, _ = run_with_recorder("""
        import cudakit.nvtx as nvtx
        d = nvtx.Domain("cudakit.pytest.tool")
        cat = d.category("phase")
        nvtx.range_push("colored", domain=d, color="#11223344", category=cat, payload=-7)
        nvtx.range_pop(domain=d)
        nvtx.mark("m", domain=nvtx.cudakit_domain, color=0x00FF00, payload=2.5)
        nvtx.mark("big", domain="cudakit", payload=2**63, category="io")
        with nvtx.range("ctx", domain=d, color=(255, 0, 0), category=cat):
            pass
        rid = nvtx.range_start("s", domain=d, category=9)
        nvtx.range_end(rid, domain=d)
    """)
    by_kind = {}
    for e in events:
        by_kind.setdefault(e["kind"], []).append(e)
    assert [e["message"] for e in by_kind["domain_create"]] == ["cudakit.pytest.tool", "cudakit"]
    names = {(e["domain"], e["message"]): e["category"] for e in by_kind["name_category"]}
    phase = names[("cudakit.pytest.tool", "phase")]
    assert ("cudakit", "io") in names
    push = [e for e in by_kind["push"] if e["message"] == "colored"][0]
    assert push["domain"] == "cudakit.pytest.tool"
    assert push["color"] == 0x11223344 and push["category"] == phase
    assert push["payload_type"] == 2 and push["payload_int64"] == -7  # NVTX_PAYLOAD_TYPE_INT64
    marks = {e["message"]: e for e in by_kind["mark"]}
    assert marks["m"]["domain"] == "cudakit" and marks["m"]["color"] == 0xFF00FF00
    assert marks["m"]["payload_type"] == 3 and marks["m"]["payload_double"] == 2.5
    assert marks["big"]["payload_type"] == 1 and marks["big"]["payload_uint64"] == 2**63
    assert marks["big"]["category"] == names[("cudakit", "io")]
    ctx = [e for e in by_kind["push"] if e["message"] == "ctx"][0]
    assert ctx["color"] == 0xFFFF0000 and ctx["category"] == phase
    assert [e["domain"] for e in by_kind["pop"]] == ["cudakit.pytest.tool"] * 2
    start, end = by_kind["start"][0], by_kind["end"][0]
    assert start["category"] == 9 and start["id"] == end["id"]
    assert end["domain"] == "cudakit.pytest.tool"
