"""torch.cuda's random-number-generator functions (seed section "Random Number Generator").

One Philox4x32-10 generator per device. The state is a 16-byte uint8 host tensor (little-
endian uint64 seed, then uint64 offset in 128-bit Philox blocks). Seeding is lazy: nothing
here initialises a device context; until seeded, every device uses seed 67280421310721.
The same seed and offset give bit-identical samples on the cuda and emulated backends.
"""
from __future__ import annotations

# typing costs ~8 ms of import (it pulls in re and enum); the annotations are strings here.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Iterable, List, Union

    DeviceLike = Union[int, str, Any]

from . import _C

__all__ = [
    "get_rng_state", "get_rng_state_all", "set_rng_state", "set_rng_state_all",
    "manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed",
    "Generator", "default_generator",
]

Generator = _C.Generator


def _as_state(new_state: Any, fn: str = "set_rng_state"):
    """A generator state: a uint8 (byte) tensor, as torch requires (a cudakit tensor, or an
    array of dtype uint8 that cudakit.asarray understands: NumPy, DLPack, ...), or bytes.
    Anything else -- a str, floats that would be truncated -- is refused by name."""
    if isinstance(new_state, _C.Tensor):
        return new_state  # the generator checks its dtype and size
    if isinstance(new_state, (bytes, bytearray)):
        import numpy as np

        new_state = np.frombuffer(bytes(new_state), dtype=np.uint8)
    dtype = getattr(new_state, "dtype", None)
    if dtype is None or str(dtype).replace("torch.", "") != "uint8":
        what = type(new_state).__name__ + (f" of dtype {dtype}" if dtype is not None else "")
        raise _C.ArgumentTypeError(
            f"{fn}(): argument 'new_state' must be a uint8 (byte) tensor as returned by "
            f"get_rng_state(), got {what}")
    return _C.asarray(new_state, dtype=_C.uint8, device="cpu")


def default_generator(device: DeviceLike = "cuda") -> Generator:
    """The default generator of ``device`` (torch.cuda.default_generators[i])."""
    return _C._default_generator(device)


def get_rng_state(device: DeviceLike = "cuda"):
    """Random number generator state of ``device`` as a uint8 host tensor (16 bytes)."""
    return _C._get_rng_state(device)


def get_rng_state_all() -> List:
    """States of all devices' generators."""
    return list(_C._get_rng_state_all())


def set_rng_state(new_state: Any, device: DeviceLike = "cuda") -> None:
    """Sets the generator state of ``device`` from a tensor returned by get_rng_state()."""
    _C._set_rng_state(_as_state(new_state), device)


def set_rng_state_all(new_states: Iterable[Any]) -> None:
    """Sets every device's generator state (one state per device)."""
    if isinstance(new_states, (str, bytes)) or not hasattr(new_states, "__iter__"):
        raise _C.ArgumentTypeError(
            "set_rng_state_all(): argument 'new_states' must be an iterable of states, not "
            f"{type(new_states).__name__}")
    _C._set_rng_state_all([_as_state(s, "set_rng_state_all") for s in new_states])


def manual_seed(seed: int) -> None:
    """Seeds the current device's generator (and resets its offset)."""
    _C._manual_seed(seed)


def manual_seed_all(seed: int) -> None:
    """Seeds the generators of all devices."""
    _C._manual_seed_all(seed)


def seed() -> None:
    """Seeds the current device's generator with a non-deterministic random number."""
    _C._seed()


def seed_all() -> None:
    """Seeds every device's generator with one non-deterministic random number."""
    _C._seed_all()


def initial_seed() -> int:
    """The current device's seed."""
    return int(_C._initial_seed())
