"""Inverted dropout with a deterministic counter-based RNG whose state lives in the arena.

The state is a uint64 array of 6 elements: the Philox-4x64 key (2 words) and counter (4 words)
(:func:`dropout_rng_state` makes one from a seed). Each call draws one uniform per element from
NumPy's ``Philox`` started at that key and counter, keeps elements whose draw is >= p, and
stores the advanced counter back, so a replay of the same seed gives the same masks and two
calls never reuse numbers. Kept elements are scaled by ``1 / (1 - p)`` (p = 1 zeroes everything,
as PyTorch). Inference is the identity (``dropout_inf`` in :mod:`.dense`).
"""

from __future__ import annotations

import numpy as np

from ._util import F32, chunks, flat
from .registry import kernel


def dropout_rng_state(seed: int) -> np.ndarray:
    """A fresh 6-word uint64 state: key from ``seed`` (SplitMix-style spread), counter 0."""
    ss = np.random.SeedSequence(seed)
    key = ss.generate_state(2, np.uint64)
    return np.concatenate([key, np.zeros(4, np.uint64)])


def _scale(p: float) -> float:
    return 0.0 if p >= 1.0 else 1.0 / (1.0 - p)


@kernel("dropout_fwd", writes=("y", "mask", "rng"))
def dropout_fwd(x, y, mask, rng, *, p: float) -> None:
    """``mask = (u >= p)`` (INT8) with u ~ U[0, 1) from the arena RNG ``rng`` (advanced in place);
    ``y = x * mask / (1 - p)``. y may be x's buffer."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"expected dropout probability in [0, 1], got {p}")
    bg = np.random.Philox(key=rng[:2], counter=rng[2:6])
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
    rng[2:6] = bg.state["state"]["counter"]


@kernel("dropout_bwd", writes=("dx",))
def dropout_bwd(dy, mask, dx, *, p: float) -> None:
    """``dx = dy * mask / (1 - p)``; dx may be dy's or x's buffer."""
    np.multiply(dy, mask, out=dx)
    np.multiply(dx, _scale(p), out=dx, casting="same_kind")
