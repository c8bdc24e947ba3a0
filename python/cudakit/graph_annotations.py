"""Annotate kernels captured in CUDA graphs for profiler traces (seed: "Graph Kernel
Annotations (prototype)"; ``torch.cuda.graph_annotations``).

During a capture started with ``cudakit.graph(g, enable_annotations=True)``,
:func:`mark_kernels` tags the kernel, memcpy and memset nodes captured in its scope. The
annotations are keyed by the ``graph node id`` a CUPTI-based profiler attaches to kernel
events during replay, so joining them with a trace is a dictionary lookup::

    import cudakit
    from cudakit.graph_annotations import mark_kernels, get_kernel_annotations

    g = cudakit.CUDAGraph()
    with cudakit.graph(g, enable_annotations=True):
        with mark_kernels("attention"):
            y = x @ x.t()
        with mark_kernels({"name": "mlp", "layer": 3}):
            z = cudakit.relu(y) @ x
    annotations = get_kernel_annotations()   # {graph node id: [{"name": ...}]}

torch needs CUDA 13.1's ``cudaGraphNodeGetToolsId`` and records nothing on 13.0; cudakit
also works on 13.0 drivers through CUPTI (loaded at run time), and on the emulated backend.
"""
from ._graph_annotations import (
    clear_kernel_annotations,
    get_kernel_annotations,
    is_available,
    mark_kernels,
)

__all__ = ["clear_kernel_annotations", "get_kernel_annotations", "is_available", "mark_kernels"]

for _name in __all__:
    globals()[_name].__module__ = __name__
del _name
