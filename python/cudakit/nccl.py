"""cudakit.nccl — torch.cuda.nccl, plus communicators that span processes.

torch's names: ``version()``, ``is_available(tensors)``, ``unique_id()``, ``init_rank``, and
the single-process collectives ``all_reduce``, ``reduce``, ``broadcast``, ``all_gather``,
``reduce_scatter`` over one tensor per device (with ``op``, ``streams`` and ``comms``).

Beyond torch.cuda.nccl: :class:`Communicator` — one rank of a communicator that may span
processes, made from a unique id shared by any means (``Communicator(world_size, uid,
rank)``), from the environment that torchrun and ``python -m cudakit.launch`` set
(``Communicator.from_env()``) or through a file (``Communicator.from_file(path, world_size,
rank)``). It has collectives and ``send``/``recv``, non-blocking initialization
(``blocking=False``), ``abort()``, and a watchdog: an operation that does not finish within
``timeout`` seconds, or a peer that dies, turns into :class:`NcclError` instead of a hang.
``group()`` pairs sends and receives (ncclGroupStart/End).

NCCL is loaded at run time on the cuda backend (``CUDAKIT_NCCL_LIBRARY`` picks a copy); the
emulated backend has its own engine over shared memory, so all of this runs without a GPU.
"""
from __future__ import annotations

import collections.abc
import contextlib
import warnings

from . import _C
from ._C import Communicator, NcclError  # noqa: F401  (public API)

__all__ = ["SUM", "PROD", "MAX", "MIN", "AVG", "Communicator", "NcclError", "version",
           "is_available", "unique_id", "init_rank", "all_reduce", "reduce", "broadcast",
           "all_gather", "reduce_scatter", "group", "group_start", "group_end"]

# Reduction operators (ncclRedOp_t values, as torch.cuda.nccl.SUM == 0).
SUM = 0
PROD = 1
MAX = 2
MIN = 3
AVG = 4


def version():
    """The engine's version as (major, minor, patch) — with a suffix string when it has one
    (the emulated engine says "emulated"). NotImplementedError when NCCL cannot be loaded."""
    return _C._nccl_version()


def is_available(tensors) -> bool:
    """Whether the single-process collectives can run on ``tensors``: the engine loads, and
    each is a contiguous device tensor on a device of its own."""
    if isinstance(tensors, (str, bytes)) or not isinstance(tensors, collections.abc.Iterable):
        return False
    return _C._nccl_is_available(list(tensors))


def unique_id() -> bytes:
    """A new communicator id (128 bytes) for init_rank / Communicator."""
    return _C._nccl_unique_id()


def init_rank(num_ranks, uid, rank):
    """torch.cuda.nccl.init_rank: rank ``rank`` of ``num_ranks`` on the current device."""
    return Communicator(num_ranks, uid, rank)


def _check_sequence_type(inputs) -> None:
    if not isinstance(inputs, collections.abc.Container) or hasattr(inputs, "__dlpack__"):
        raise TypeError("Inputs should be a collection of tensors")


def all_reduce(inputs, outputs=None, op=SUM, streams=None, comms=None):
    _check_sequence_type(inputs)
    if outputs is None:
        outputs = inputs
    _check_sequence_type(outputs)
    _C._nccl_all_reduce(inputs, outputs, op, streams, comms)


# `output` used to be `outputs` (a list); both are accepted, as torch does.
def reduce(inputs, output=None, root=0, op=SUM, streams=None, comms=None, *, outputs=None):
    _check_sequence_type(inputs)
    if outputs is not None:
        if output is not None:
            raise ValueError("'output' and 'outputs' can not be both specified. 'outputs' is deprecated in favor of "
                             "'output', taking in a single output tensor. The signature of reduce is: "
                             "reduce(inputs, output=None, root=0, op=SUM, streams=None, comms=None).")
        warnings.warn("`nccl.reduce` with an output tensor list is deprecated. Please specify a single output "
                      "tensor with argument 'output' instead instead.", FutureWarning, stacklevel=2)
        _output = outputs[root]
    elif not hasattr(output, "__dlpack__") and isinstance(output, collections.abc.Sequence):
        warnings.warn("nccl.reduce with an output tensor list is deprecated. Please specify a single output "
                      "tensor.", FutureWarning, stacklevel=2)
        _output = output[root]
    else:
        if output is None and not (isinstance(root, int) and 0 <= root < len(inputs)):
            raise ValueError(f"reduce(): argument 'root' must be an index into the inputs, in [0, {len(inputs)}), "
                             f"got {root!r}")
        _output = inputs[root] if output is None else output
    _C._nccl_reduce(inputs, _output, root, op, streams, comms)


def broadcast(inputs, root=0, streams=None, comms=None):
    _check_sequence_type(inputs)
    _C._nccl_broadcast(inputs, root, streams, comms)


def all_gather(inputs, outputs, streams=None, comms=None):
    _check_sequence_type(inputs)
    _check_sequence_type(outputs)
    _C._nccl_all_gather(inputs, outputs, streams, comms)


def reduce_scatter(inputs, outputs, op=SUM, streams=None, comms=None):
    _check_sequence_type(inputs)
    _check_sequence_type(outputs)
    _C._nccl_reduce_scatter(inputs, outputs, op, streams, comms)


def group_start() -> None:
    """ncclGroupStart for this thread: operations until the matching group_end launch
    together (so ranks may post sends and receives in any order)."""
    _C._nccl_group_start()


def group_end() -> None:
    _C._nccl_group_end()


@contextlib.contextmanager
def group():
    """``with nccl.group(): ...`` — group_start / group_end around the block."""
    group_start()
    try:
        yield
    finally:
        group_end()
