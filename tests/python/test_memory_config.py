"""Allocator settings from Python (issue 8.4): one source of truth, live vs init-only keys,
warnings for inert keys. Each case runs in a fresh interpreter: the settings are process-wide."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

import cudakit

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _need_device():
    if not cudakit.is_available():
        pytest.skip(f"no device on backend {cudakit.backend_name()}")


def _run(script: str, **env: str) -> subprocess.CompletedProcess:
    e = dict(os.environ)
    for k in ("CUDAKIT_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        e.pop(k, None)
    e.update(env)
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=e,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r


def test_inert_key_warns_as_a_user_warning():
    r = _run("""
        import warnings
        import cudakit.memory as m
        m.caching_allocator_delete(m.caching_allocator_alloc(8))
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            m._set_allocator_settings("release_lock_on_cudamalloc:True")
        print(len(w), w[0].category.__name__, "release_lock_on_cudamalloc" in str(w[0].message))
    """)
    assert r.stdout.split() == ["1", "UserWarning", "True"]


def test_inert_key_in_the_environment_warns_at_first_allocation():
    r = _run("""
        import cudakit.memory as m
        m.caching_allocator_delete(m.caching_allocator_alloc(8))
        m.caching_allocator_delete(m.caching_allocator_alloc(8))
    """, PYTORCH_CUDA_ALLOC_CONF="release_lock_on_cudamalloc:True")
    assert r.stderr.count("release_lock_on_cudamalloc") == 1, r.stderr
    assert "UserWarning" in r.stderr


def test_init_only_key_raises_once_an_allocator_exists_segment_kind_is_live():
    r = _run("""
        import cudakit.memory as m
        m._set_allocator_settings("expandable_segments:True")   # before any allocation: fine
        p = m.caching_allocator_alloc(3 << 20)
        print(m.memory_snapshot()[0]["is_expandable"])
        print(m._snapshot()["allocator_settings"]["expandable_segments"])
        m._set_allocator_settings("expandable_segments:False")   # live, as torch: later segments
        q = m.caching_allocator_alloc(30 << 20)   # fits no cached block: a new segment
        print(sorted(s["is_expandable"] for s in m.memory_snapshot()))  # both kinds coexist
        try:
            m._set_allocator_settings("backend:cudaMallocAsync")
        except ValueError as e:
            print("ValueError", "backend" in str(e))
        m._set_allocator_settings("garbage_collection_threshold:0.8")   # live: fine
        print(m._snapshot()["allocator_settings"]["garbage_collection_threshold"])
        print(m.get_allocator_backend())
        m.caching_allocator_delete(p)
        m.caching_allocator_delete(q)
    """)
    assert r.stdout.split() == ["True", "True", "[False,", "True]", "ValueError", "True", "0.8",
                                "native"]


def test_no_environment_side_doors_in_the_memory_module():
    # Every setting of the allocators goes through CUDAKIT_ALLOC_CONF (config.cpp reads it).
    offenders = []
    for path in sorted((ROOT / "src" / "memory").glob("*.[ch]pp")):
        if path.name == "config.cpp":
            continue
        if "getenv" in path.read_text():
            offenders.append(path.name)
    assert offenders == []


_SEGMENT_KINDS = """
    import cudakit.memory as m
    kinds = lambda: sorted((s["segment_type"], s["is_expandable"]) for s in m.memory_snapshot())
    def both():
        small, large = m.caching_allocator_alloc(1 << 20), m.caching_allocator_alloc(4 << 20)
        print(kinds())
        m.caching_allocator_delete(small)
        m.caching_allocator_delete(large)
        m.empty_cache()
    both()
"""


def test_expandable_segments_true_means_every_segment_as_torch_and_the_default_comes_back():
    # No settings: large blocks in expandable segments, small ones (<= 1 MiB) in 2 MiB plain
    # segments. expandable_segments:True means what it means to torch (its
    # test_mempool_expandable puts a 1 MiB tensor in an expandable segment): small ones too;
    # False: none. expandable_segments_small:False after True is the default policy again.
    r = _run(_SEGMENT_KINDS + """
    m._set_allocator_settings("expandable_segments:False")
    both()
    m._set_allocator_settings("expandable_segments:True")
    both()
    m._set_allocator_settings("expandable_segments_small:False")
    both()
    m._set_allocator_settings("expandable_segments:False")
    m._set_allocator_settings("expandable_segments:True,expandable_segments_small:False")
    both()
    """)
    assert r.stdout.splitlines() == ["[('large', True), ('small', False)]",
                                     "[('large', False), ('small', False)]",
                                     "[('large', True), ('small', True)]",
                                     "[('large', True), ('small', False)]",
                                     "[('large', True), ('small', False)]"]


def test_expandable_segments_true_in_the_environment_covers_the_small_pool():
    for conf, expect in (("expandable_segments:True", "[('large', True), ('small', True)]"),
                         ("expandable_segments:False", "[('large', False), ('small', False)]"),
                         ("expandable_segments_small:True", "[('large', True), ('small', True)]"),
                         ("expandable_segments:True,expandable_segments_small:False",
                          "[('large', True), ('small', False)]")):
        assert _run(_SEGMENT_KINDS, PYTORCH_CUDA_ALLOC_CONF=conf).stdout.splitlines() == [expect], conf


def test_expandable_small_without_expandable_segments_is_refused_and_changes_nothing():
    r = _run(_SEGMENT_KINDS + """
    m._set_allocator_settings("expandable_segments:False")
    try:
        m._set_allocator_settings("expandable_segments_small:True")
    except ValueError as e:
        print("refused:", "expandable_segments:True" in str(e))
    both()
    """)
    assert r.stdout.splitlines() == ["[('large', True), ('small', False)]", "refused: True",
                                     "[('large', False), ('small', False)]"]
