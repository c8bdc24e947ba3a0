"""cudakit.comm — torch.cuda.comm: collectives between the devices of one process.

broadcast, broadcast_coalesced, reduce_add, reduce_add_coalesced, scatter and gather, with
torch's signatures and semantics. Inputs may be cudakit tensors or any DLPack array (torch,
CuPy, JAX, ...); results are cudakit tensors (``out=`` arrays are written in place, whatever
their framework). Every result is ordered on the current stream of its device (scatter: on
the given stream), after the inputs' work on theirs; nothing synchronizes a whole device.

How data moves between devices is :func:`set_transport`'s choice: ``"auto"`` (default:
peer-access kernels when every pair of devices has peer access, else NCCL, else plain
copies), ``"peer"``, ``"nccl"`` or ``"copy"``. All give the same results.
"""
from __future__ import annotations

import warnings as _warnings

from . import _C

__all__ = ["broadcast", "broadcast_coalesced", "reduce_add", "reduce_add_coalesced", "scatter",
           "gather", "set_transport", "get_transport"]


def broadcast(tensor, devices=None, *, out=None):
    """Broadcasts a tensor to the devices given (a copy per device; the tensor itself where it
    already lives), or copies it into each tensor of ``out``. Exactly one of ``devices`` and
    ``out`` must be given. Returns a list with a tensor per device (``out`` itself)."""
    if (devices is None) == (out is None):
        raise ValueError("broadcast(): exactly one of 'devices' and 'out' must be specified, "
                         f"but got devices={devices!r} and out={out!r}")
    if devices is not None:
        return _C._comm_broadcast(tensor, devices)
    _C._comm_broadcast_out(tensor, out)
    return list(out)


def broadcast_coalesced(tensors, devices, buffer_size=10485760):
    """Broadcasts a sequence of tensors (all on ``devices[0]``) to ``devices``, packed into
    flat buffers of at most ``buffer_size`` bytes per dtype. Returns a list per device of the
    tensors there; the first is the input sequence itself."""
    return _C._comm_broadcast_coalesced(tensors, devices, buffer_size)


def reduce_add(inputs, destination=None):
    """Sums tensors of one shape and dtype living on distinct devices, on ``destination``
    (default: the current device), which must hold one of them."""
    return _C._comm_reduce_add(inputs, destination)


def reduce_add_coalesced(inputs, destination=None, buffer_size=10485760):
    """``inputs[i]`` is the sequence of tensors on device i; returns a tuple of their
    elementwise sums on ``destination``, packed in flat buffers of ``buffer_size`` bytes."""
    return _C._comm_reduce_add_coalesced(inputs, destination, buffer_size)


def scatter(tensor, devices=None, chunk_sizes=None, dim=0, streams=None, *, out=None):
    """Splits ``tensor`` along ``dim`` across ``devices`` (equal chunks as torch.chunk, or
    ``chunk_sizes``), each copy on ``streams[i]`` when given; or into the tensors of ``out``.
    Returns a tuple of the parts."""
    if out is None:
        if devices is None:
            raise ValueError("scatter(): 'devices' must be specified when 'out' is not")
        return _C._comm_scatter(tensor, devices, chunk_sizes, dim, streams)
    if devices is not None:
        raise ValueError(f"scatter(): 'devices' must not be specified when 'out' is specified, but got devices={devices!r}")
    if chunk_sizes is not None:
        raise ValueError("scatter(): 'chunk_sizes' must not be specified when 'out' is specified, "
                         f"but got chunk_sizes={chunk_sizes!r}")
    _C._comm_scatter_out(tensor, out, dim, streams)
    return tuple(out)


def gather(tensors, dim=0, destination=None, *, out=None):
    """Concatenates device tensors along ``dim`` on ``destination`` (a device, ``"cpu"``, or
    None for the current device), or into ``out``."""
    if out is not None:
        if destination is not None:
            raise ValueError("gather(): 'destination' must not be specified when 'out' is specified, "
                             f"but got destination={destination!r}")
        _C._comm_gather_out(tensors, out, dim)
        return out
    to_cpu = False
    if isinstance(destination, int) and not isinstance(destination, bool) and destination == -1:
        _warnings.warn('Using -1 to represent CPU tensor is deprecated. Please use a device object or string '
                       'instead, e.g., "cpu".', FutureWarning, stacklevel=2)
        to_cpu, destination = True, None
    elif destination is not None and _is_cpu(destination):
        to_cpu, destination = True, None
    return _C._comm_gather(tensors, dim, destination, to_cpu)


def _is_cpu(device) -> bool:
    if isinstance(device, str):
        return device == "cpu"
    return getattr(device, "type", None) == "cpu"


def set_transport(transport: str) -> None:
    """How broadcast / reduce_add move data between devices: "auto", "peer", "nccl" or "copy"
    (process-wide). A forced transport that cannot serve a call raises NotImplementedError."""
    _C._comm_set_transport(transport)


def get_transport() -> str:
    return _C._comm_transport()
