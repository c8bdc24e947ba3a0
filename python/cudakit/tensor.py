"""cudakit's array type and its factories (see include/cudakit/tensor.hpp).

``Tensor`` holds device memory (default: the current cuda device), pinned or pageable host
memory (``device="cpu"``, ``pin_memory=True``). dtypes are module attributes named as
torch's (``float32``, ``bfloat16``, ...; aliases ``float``, ``half``, ``long`` ...).

Device arguments accept an int, ``"cuda"``, ``"cuda:N"``, ``"cpu"`` or any object with
``.type``/``.index`` (torch.device, cudakit.Device). Factories default to the current cuda
device; ``asarray`` keeps arrays where they are (zero-copy for NumPy and DLPack producers)
unless ``device=``/``dtype=`` ask for a conversion, and puts Python sequences on the
current cuda device; ``cudakit.tensor(data)`` always copies (torch.tensor).

Semantics follow torch: ``== != < <= > >=`` are elementwise and return bool tensors,
``**`` is pow, ``bool()``/``float()``/``int()``/``.item()`` take any one-element tensor, and
tensors hash by identity. Sizes are checked: a negative size or an element count over
2**63-1 is a ValueError, a tensor larger than any allocation an OutOfMemoryError.

Interop: ``Tensor.__dlpack__``/``__dlpack_device__`` (DLPack 1.x versioned capsules when the
consumer passes ``max_version >= (1, 0)``, legacy capsules otherwise), ``from_dlpack`` (any
producer, or a capsule; a capsule can be consumed once) and ``__cuda_array_interface__``
v3. Device tensors report kDLCUDA (also on the emulated backend); pinned host tensors
kDLCUDAHost; pageable host tensors kDLCPU.

``matmul_allow_tf32()`` / ``set_matmul_allow_tf32(bool)`` mirror
``torch.backends.cuda.matmul.allow_tf32`` for float32 matmul (default False).
"""
from __future__ import annotations

import sys as _sys
import types as _types

from . import _C

Tensor = _C.Tensor
dtype = _C.dtype
Device = _C.Device
TensorDevice = _C.Device  # earlier name of Tensor.device's type: one Device type now

empty = _C.empty
zeros = _C.zeros
ones = _C.ones
full = _C.full
arange = _C.arange
empty_like = _C.empty_like
zeros_like = _C.zeros_like
ones_like = _C.ones_like
asarray = _C.asarray
pow = _C.pow
from_dlpack = _C.from_dlpack
matmul = _C.matmul
relu = _C.relu
promote_types = _C.promote_types
result_type = _C.result_type
matmul_allow_tf32 = _C.matmul_allow_tf32
set_matmul_allow_tf32 = _C.set_matmul_allow_tf32
rand = _C.rand
randn = _C.randn
randint = _C.randint
Generator = _C.Generator

_DTYPE_NAMES = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16",
                "float32", "float64", "complex64", "complex128", "half", "float", "double",
                "long", "int", "short", "cfloat", "cdouble")
for _n in _DTYPE_NAMES:
    globals()[_n] = getattr(_C, _n)
del _n

__all__ = ["Tensor", "dtype", "empty", "zeros", "ones", "full", "arange", "empty_like",
           "zeros_like", "ones_like", "asarray", "from_dlpack", "matmul", "relu", "pow", "promote_types",
           "result_type", "matmul_allow_tf32", "set_matmul_allow_tf32", "rand", "randn",
           "randint", "Generator", *_DTYPE_NAMES]


class _TensorModule(_types.ModuleType):
    """``cudakit.tensor`` is both this module and torch.tensor's factory:
    ``cudakit.tensor(data, dtype=None, device=None)`` copies numbers, nested sequences, NumPy
    arrays or tensors into a new tensor (dtype inferred as torch does: bool, int64, float32,
    complex64; device: the current cuda device unless given). A callable module, because
    ``cudakit.tensor`` already names this module (``import cudakit.tensor as T`` must keep
    working); renaming the module was rejected for that reason."""

    def __call__(self, data, dtype=None, device=None):
        return _C.tensor(data, dtype=dtype, device=device)


_sys.modules[__name__].__class__ = _TensorModule
