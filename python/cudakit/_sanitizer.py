"""torch.cuda._sanitizer's module name: ``cudakit._sanitizer.enable_cuda_sanitizer()`` and the
report classes, as torch spells them (the implementation is :mod:`cudakit.sanitizer`)."""
from __future__ import annotations

from .sanitizer import (  # noqa: F401
    Access,
    AccessType,
    CUDASanitizerErrors,
    SanitizerWarning,
    SynchronizationError,
    UnsynchronizedAccessError,
    enable_cuda_sanitizer,
)
from . import sanitizer as _impl


class CUDASanitizer:
    """torch's handle on the sanitizer's lifetime (``cuda_sanitizer.enable()``); ``enabled``
    reads the live state."""

    def enable(self) -> None:
        _impl.enable("raise")

    def disable(self) -> None:
        _impl.disable()

    @property
    def enabled(self) -> bool:
        return _impl.is_enabled()


cuda_sanitizer = CUDASanitizer()
