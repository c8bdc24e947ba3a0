"""Implementation of :mod:`cudakit.graph_annotations` (torch's private module path
``torch.cuda._graph_annotations`` works too).

The registry, scopes and id remapping are native (``include/cudakit/graph_annotations.hpp``),
so graphs captured from C++ and from Python share them.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from . import _C

__all__ = ["clear_kernel_annotations", "get_kernel_annotations", "is_available", "mark_kernels"]


def is_available() -> bool:
    """True when annotations can be recorded: a device is available and node ids are
    (cuda: a CUDA 13.1+ driver or CUPTI -- unlike torch, 13.0 drivers work through CUPTI;
    emulated: always)."""
    return _C._graph_annotations_available()


class mark_kernels:
    """Context manager tagging the kernel, memcpy and memset nodes captured in its scope.

    ``annotation``: a ``str`` (becomes ``{"name": annotation}``) or a ``dict`` with ``str``
    keys and JSON-scalar values (str, int, float, bool, None) -- annotations end up in JSON
    profiler traces. Anything else raises ``TypeError`` at once.

    Records only inside a capture started with ``enable_annotations=True`` (``cudakit.graph``)
    on the current stream; elsewhere it is a no-op. Nested scopes merge key by key, the
    inner scope winning.
    """

    __slots__ = ("_scope",)

    def __init__(self, annotation: str | dict[str, Any]):
        self._scope = _C._MarkKernels(annotation)

    def __enter__(self) -> None:
        self._scope.__enter__()

    def __exit__(self, *exc: Any) -> None:
        self._scope.__exit__(None, None, None)


class _KernelAnnotations(Mapping):
    """Live, read-only view: graph node id -> ``[merged annotation dict]``."""

    def __getitem__(self, node_id: Any) -> list[dict[str, Any]]:
        if isinstance(node_id, bool) or not isinstance(node_id, int) or not 0 <= node_id < 2**64:
            raise KeyError(node_id)
        a = _C._kernel_annotation(node_id)
        if a is None:
            raise KeyError(node_id)
        return [a]

    def __iter__(self) -> Iterator[int]:
        return iter(_C._annotated_node_ids())

    def __len__(self) -> int:
        return _C._annotated_node_count()

    def __repr__(self) -> str:
        return f"kernel_annotations({dict(self)!r})"


_VIEW = _KernelAnnotations()


def get_kernel_annotations() -> Mapping[int, list[dict[str, Any]]]:
    """Recorded annotations keyed by graph node id ``(exec graph id << 32) | node id`` -- the
    ``graph node id`` a CUPTI-based profiler reports, and ``get_graph_data()``'s ``tools_id``.
    A live read-only mapping; ``dict(...)`` of it pickles."""
    return _VIEW


def clear_kernel_annotations() -> None:
    """Drops every recorded annotation."""
    _C._clear_kernel_annotations()
