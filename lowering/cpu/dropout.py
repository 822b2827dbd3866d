"""Inverted dropout with a deterministic counter-based RNG whose state lives in the arena.

The state is an integer array of 2 elements, ``(seed, calls)`` (:func:`dropout_rng_state`; the
planner's ``dropout_seed`` scalar, int32 or wider). Call number ``calls`` draws one uniform per
element from NumPy's ``Philox`` (4x64) with key ``seed`` and counter ``(0, calls, 0, 0)`` -- a
stream of its own, 2^64 blocks long -- keeps elements whose draw is >= p, and increments
``calls`` in place. A replay from the same seed gives the same masks; two calls never share
numbers. Kept elements are scaled by ``1 / (1 - p)`` (p = 1 zeroes everything,
as PyTorch). Inference is the identity (``dropout_inf`` in :mod:`.dense`).
"""

from __future__ import annotations

import numpy as np

from ._util import F32, chunks, flat
from .registry import kernel


def dropout_rng_state(seed: int) -> np.ndarray:
    """A fresh state ``(seed, 0)`` as int32 (the layout of the planner's ``dropout_seed``)."""
    return np.array([seed, 0], np.int32)


def _scale(p: float) -> float:
    return 0.0 if p >= 1.0 else 1.0 / (1.0 - p)


@kernel("dropout_fwd", writes=("y", "mask", "rng"))
def dropout_fwd(x, y, mask, rng, *, p: float) -> None:
    """``mask = (u >= p)`` (INT8) with u ~ U[0, 1) from the arena RNG state ``rng`` = (seed,
    calls), whose call count is incremented; ``y = x * mask / (1 - p)``. y may be x's buffer."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"expected dropout probability in [0, 1], got {p}")
    st = rng.reshape(-1)
    seed, calls = int(st[0]) & 0xFFFFFFFF, int(st[1]) & 0xFFFFFFFF
    bg = np.random.Philox(key=seed, counter=calls << 64)
    gen = np.random.Generator(bg)
    xf, yf, mf = flat(x), flat(y), flat(mask)
    scale = _scale(p)
    for sl in chunks(xf.size):
        keep = gen.random(sl.stop - sl.start, dtype=np.float32) >= p
        mf[sl] = keep
        t = xf[sl].astype(F32, copy=True)
        t *= keep
        t *= scale
        yf[sl] = t
    st[1] = (calls + 1) & 0x7FFFFFFF


@kernel("dropout_bwd", writes=("dx",))
def dropout_bwd(dy, mask, dx, *, p: float) -> None:
    """``dx = dy * mask / (1 - p)``; dx may be dy's or x's buffer."""
    np.multiply(dy, mask, out=dx)
    np.multiply(dx, _scale(p), out=dx, casting="same_kind")
