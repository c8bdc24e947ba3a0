"""The memory_viz page must really work in a browser: render a snapshot recorded here in
headless Chromium (no network) and check the marker the page's script sets when it has
finished (``<body data-rendered="ok" data-allocations=N data-blocks=M>``). Skipped when no
chromium/chromium-browser/google-chrome binary is on PATH (Debian: apt-get install chromium).

The same check by hand:
    chromium --headless=new --no-sandbox --disable-gpu --virtual-time-budget=5000 \
        --dump-dom snapshot.html | grep -o '<body[^>]*>'
"""
import os
import pickle
import re
import shutil
import subprocess
import sys

import pytest

_BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def _browser():
    for name in _BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    pytest.skip(f"no headless browser on PATH (looked for {', '.join(_BROWSERS)}); "
                "install one (Debian: apt-get install chromium) to run the browser check")


def _render(browser, page, tmp_path):
    """The DOM after the page's scripts ran, and the browser's console log."""
    cmd = [browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
           "--disable-extensions", "--disable-background-networking",
           f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000",
           "--enable-logging=stderr", "--v=0", "--dump-dom", page.as_uri()]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"{cmd[0]} failed ({r.returncode}): {r.stderr[-2000:]}"
    return r.stdout, r.stderr


def _body_attrs(dom):
    m = re.search(r"<body([^>]*)>", dom)
    assert m, f"no <body> in the dumped DOM: {dom[:500]}"
    return dict(re.findall(r'([\w-]+)="([^"]*)"', m.group(1)))


def _write_page(snap_path, out):
    r = subprocess.run([sys.executable, "-m", "cudakit.memory_viz", str(snap_path), "-o", str(out)],
                       capture_output=True, text=True, env=dict(os.environ))
    assert r.returncode == 0, r.stderr
    page = out.read_text()
    # Self-contained: nothing the browser would fetch (the SVG namespace is a name, not a URL
    # that is loaded).
    rest = page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert not re.search(r"https?://|\bsrc=|<link\b|@import", rest), "page references the network"
    return page


def _expected_allocations(snap):
    """Allocations the timeline must account for: every alloc in the trace, every free of a
    block allocated before recording started, and every block still allocated whose alloc
    is not in the trace."""
    n = 0
    for dev, trace in enumerate(snap["device_traces"]):
        if not trace:  # no timeline is drawn for a device without a trace
            continue
        open_addrs = set()
        for e in trace:
            if e["action"] == "alloc":
                n += 1
                open_addrs.add(e["addr"])
            elif e["action"] == "free_completed":
                if e["addr"] in open_addrs:
                    open_addrs.discard(e["addr"])
                else:
                    n += 1
        n += sum(1 for s in snap["segments"] if s["device"] == dev for b in s["blocks"]
                 if b["state"] == "active_allocated" and b["address"] not in open_addrs)
    return n


def _check(browser, snap_path, tmp_path):
    with open(snap_path, "rb") as f:
        snap = pickle.load(f)
    out = tmp_path / (snap_path.stem + ".html")
    _write_page(snap_path, out)
    dom, log = _render(browser, out, tmp_path)
    attrs = _body_attrs(dom)
    assert attrs.get("data-rendered") == "ok", (
        f"page script did not finish: {attrs}; console: "
        + "\n".join(l for l in log.splitlines() if "CONSOLE" in l or "Uncaught" in l))
    assert "Uncaught" not in log, log
    assert int(attrs["data-allocations"]) == _expected_allocations(snap)
    assert int(attrs["data-blocks"]) == sum(len(s["blocks"]) for s in snap["segments"])
    return attrs, snap, dom


def test_page_renders_in_headless_browser(ck, tmp_path):
    browser = _browser()
    mem = ck.memory
    mem._record_memory_history("all", context="all", stacks="python", max_entries=100000)
    keep = []
    try:
        s1, s2 = ck.Stream(), ck.Stream()
        sizes = (512, 4096, 1 << 20, 3 << 20, 9 << 20, 25 << 20)
        ptrs = [mem.caching_allocator_alloc(n, stream=s1 if i % 2 else s2)
                for i, n in enumerate(sizes * 3)]
        for p in ptrs[::2]:
            mem.caching_allocator_delete(p)
        keep = ptrs[1::2]
        mem.empty_cache()
        with pytest.raises(ck.OutOfMemoryError):
            mem.caching_allocator_alloc(1 << 50)
        snap_path = tmp_path / "snap.pickle"
        mem._dump_snapshot(str(snap_path))
    finally:
        mem._record_memory_history(None)
        for p in keep:
            mem.caching_allocator_delete(p)
    attrs, snap, dom = _check(browser, snap_path, tmp_path)
    n_allocs = sum(1 for t in snap["device_traces"] for e in t if e["action"] == "alloc")
    assert n_allocs >= len(sizes) * 3
    assert int(attrs["data-bands"]) >= 1
    assert 'class="oom"' in dom  # the OOM is marked on the timeline


def test_empty_snapshot_renders(tmp_path):
    browser = _browser()
    snap_path = tmp_path / "empty.pickle"
    with open(snap_path, "wb") as f:
        pickle.dump({"segments": [], "device_traces": []}, f)
    attrs, _, dom = _check(browser, snap_path, tmp_path)
    assert attrs["data-allocations"] == "0" and attrs["data-blocks"] == "0"
    assert "Empty snapshot" in dom
