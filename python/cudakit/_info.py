"""Environment report behind ``python -m cudakit info``.

Every probe is guarded: the report must come out on a broken machine (no driver, no GPU, a
library that fails to load), since that is when it is needed most. A probe that fails records
its error message instead of raising.
"""
from __future__ import annotations

import os
import platform
import sys
from typing import Any, Callable


def _probe(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as e:  # noqa: BLE001  (the report shows the failure instead)
        return f"<error: {type(e).__name__}: {e}>"


def _device_report(cudakit: Any, index: int) -> dict[str, Any]:
    props = cudakit.get_device_properties(index)
    out: dict[str, Any] = {}
    for name in ("name", "major", "minor", "total_memory", "multi_processor_count",
                 "L2_cache_size", "uuid", "pci_bus_id", "pci_device_id", "pci_domain_id",
                 "max_threads_per_multi_processor", "warp_size", "regs_per_multiprocessor",
                 "is_integrated", "gcnArchName"):
        if hasattr(props, name):
            out[name] = getattr(props, name)
    out["mem_get_info"] = _probe(lambda: cudakit.mem_get_info(index))  # (free, total)
    return out


def collect() -> dict[str, Any]:
    """The report as a dict (JSON-serialisable with ``default=str``)."""
    import cudakit
    from . import _C

    report: dict[str, Any] = {
        "cudakit": cudakit.__version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "backend": cudakit.backend_name(),
        "environment": {k: v for k, v in sorted(os.environ.items())
                        if k.startswith(("CUDAKIT_", "PYTORCH_CUDA_ALLOC_CONF",
                                         "CUDA_VISIBLE_DEVICES", "CUDA_MODULE_LOADING"))},
    }
    report["driver_version"] = _probe(cudakit.driver_version)
    report["is_available"] = _probe(cudakit.is_available)
    reason = getattr(_C, "_unavailable_reason", None)
    if reason is not None:
        report["unavailable_reason"] = _probe(reason)
    count = _probe(cudakit.device_count)
    report["device_count"] = count
    devices = []
    if isinstance(count, int):
        for i in range(count):
            devices.append(_probe(lambda i=i: _device_report(cudakit, i)))
    report["devices"] = devices
    report["capabilities"] = _probe(_C._backend_capabilities)
    libs = getattr(_C, "_optional_libraries", None)
    report["optional_libraries"] = _probe(libs) if libs is not None else "<not reported>"
    report["gds"] = {
        "is_available": _probe(cudakit.gds.is_available),
        "unavailable_reason": _probe(cudakit.gds.unavailable_reason),
    }
    report["allocator"] = {
        "backend": _probe(cudakit.get_allocator_backend),
        "settings": _probe(lambda: _allocator_settings(cudakit)),
    }
    for mod in ("numpy", "torch", "cupy", "jax"):
        if mod in sys.modules:
            report.setdefault("frameworks", {})[mod] = getattr(sys.modules[mod],
                                                               "__version__", "?")
    return report


def _allocator_settings(cudakit: Any) -> Any:
    fn = getattr(cudakit.memory, "_allocator_settings", None)
    if fn is not None:
        return fn()
    return {"CUDAKIT_ALLOC_CONF": os.environ.get("CUDAKIT_ALLOC_CONF"),
            "PYTORCH_CUDA_ALLOC_CONF": os.environ.get("PYTORCH_CUDA_ALLOC_CONF")}


def format_report(report: dict[str, Any]) -> str:
    lines = []

    def emit(key: str, value: Any, indent: int = 0) -> None:
        pad = "  " * indent
        if isinstance(value, dict):
            lines.append(f"{pad}{key}:")
            for k, v in value.items():
                emit(str(k), v, indent + 1)
        elif isinstance(value, list):
            lines.append(f"{pad}{key}:" + (" (none)" if not value else ""))
            for i, v in enumerate(value):
                emit(f"[{i}]", v, indent + 1)
        else:
            lines.append(f"{pad}{key}: {value}")

    for k, v in report.items():
        emit(k, v)
    return "\n".join(lines)
