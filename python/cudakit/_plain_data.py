"""Loading pickles that hold plain data only (dicts, lists, tuples, strings, numbers).

Memory snapshots (memory_viz) and kernel annotations (_trace_merge) are pickles a user may
have been sent: they never need a class, and refusing every class means a hostile file
cannot run code while it is read."""
from __future__ import annotations

import io
import pickle
from typing import Any


class _PlainDataUnpickler(pickle.Unpickler):
    def __init__(self, file: Any, what: str) -> None:
        super().__init__(file)
        self._what = what

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(
            f"it references {module}.{name}; {self._what} only plain data "
            "(dicts, lists, strings, numbers)")


def loads(data: bytes, what: str) -> Any:
    """Unpickles `data`, refusing any class with pickle.UnpicklingError naming it. `what` names
    the content in that message ("a memory snapshot holds", "annotations hold")."""
    return _PlainDataUnpickler(io.BytesIO(data), what).load()
