"""torch.cuda.nvtx: NVIDIA Tools Extension ranges and marks (seed section "NVTX").

Same names and semantics as torch: ``range_push(msg)`` returns the zero-based depth of the
range it starts, ``range_pop()`` the depth of the range it ends (-1 when none is open),
``range_start(msg)`` an id for ``range_end(id)`` (may end on another thread), ``mark(msg)``,
and ``range(msg, *args, **kwargs)`` as a context manager or decorator with
``msg.format(*args, **kwargs)``. Depths are counted by cudakit per thread (and per domain),
so they hold with or without a tool attached (torch returns -2 without one).

Beyond torch, every call takes keyword attributes:

* ``domain=``: a :class:`Domain`, a domain name, or None (NVTX's default domain, as torch);
  ``cudakit_domain`` is cudakit's own;
* ``color=``: ``0xRRGGBB``, ``0xAARRGGBB``, a name (``"red"``), ``"#RRGGBB"`` or an
  ``(r, g, b[, a])`` tuple;
* ``category=``: an int id or a name (registered in the domain on first use; hoist with
  ``Domain.category(name)`` in hot loops);
* ``payload=``: an int or a float shown with the event.

With ``range()`` these four names are also passed to ``msg.format()``.

The calls are C functions: with no tool attached ``range_push`` + ``range_pop`` cost well under
a tenth of a microsecond (bench/nvtx/bench_nvtx.py measures them against torch).
"""
from __future__ import annotations

import functools as _functools

from ._C import _nvtx
from ._C._nvtx import (  # noqa: F401  (the public API: C functions, no Python wrapper)
    Domain,
    depth,
    mark,
    name_category,
    range,
    range_end,
    range_pop,
    range_push,
    range_start,
    tool_attached,
)

__all__ = ["range_push", "range_pop", "range_start", "range_end", "mark", "range",
           "Domain", "cudakit_domain", "global_domain", "name_category", "depth",
           "tool_attached"]

#: NVTX's default domain (name ``""``): where calls without ``domain=`` go, as in torch.
global_domain = _nvtx.global_domain
#: The "cudakit" domain. (No module ``__getattr__`` here: on CPython 3.11 it would disable the
#: interpreter's fast path for ``cudakit.nvtx.<name>`` lookups, +35 ns per call measured.)
cudakit_domain = _nvtx.cudakit_domain


def _decorate(rng, func):
    """range(...)(func): pushes ``rng`` around every call of ``func``."""
    @_functools.wraps(func)
    def wrapper(*args, **kwargs):
        with rng:
            return func(*args, **kwargs)

    return wrapper

