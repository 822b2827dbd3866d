"""Batch-norm statistics written by the convolution that produces the activation.

``memplan-fuse-bn-stats`` binds a training conv's ``sum`` and ``sq_sum`` outputs (the seed's
conv descriptor has them: cuDNN's "genstats", :mod:`tr_mlir.dialects.kernels`) and makes the BN
forward after it read them instead of summing over its input again. Per output channel ``k``,
over the M = N*Ho*Wo pixels:

* ``sum[k] = sum_i y[i, k]``,
* ``sq_sum[k] = sum_i (y[i, k] - mean[k])^2`` with ``mean = sum / M``: the sum of squared
  deviations (Chan, Golub and LeVeque's M2), not ``sum y^2``, whose fp32 rounding would cancel in
  ``var = sum y^2 / M - mean^2``.

Both (1, 1, 1, K) fp32, each rounded once from float64. The BN forward takes ``mean = sum / M``
and the biased ``var = sq_sum / M`` (:func:`mean_var`), as PyTorch's training-mode batch norm.

Where the statistics come from:

* the compiled Winograd forward (:mod:`._cwinograd`: ``out_tiles_st``, ``tile_stats``) sums the
  output in its output transform, while each value is in a register: per part
  (:attr:`.winograd.Plan.parts`, or the pieces of a split-components chunk) the count, a pivot
  ``p`` (the part's first output pixel) and ``sum (y - p)``, ``sum (y - p)^2`` (the shifted-data
  algorithm, as :mod:`._cnorm`'s kernels), each tile's m x m values summed in fp32 and the tiles
  in float64; :func:`combine` merges the parts in order with Chan, Golub and LeVeque's pairwise
  update (1979, "Updating formulae and a pairwise algorithm for computing sample variances"), so
  the results are fixed by the shapes and the thread count;
* every other algorithm, fp16 outputs and the NumPy path: :func:`from_output`, one pass over y
  after the conv (the batch norm's own statistics kernels).

Accuracy: as the batch norm's own statistics (float64 sums shifted by a pivot inside the data),
plus each tile's fp32 partials (at most 16 terms of ``y - p`` or its square: at most about 16
units of 2^-24 relative, independent from tile to tile) and the two fp32 roundings of ``sum`` and
``sq_sum``. Measured against float64 sums over 252 random shapes: up to 12 units of 2^-24 of a
channel's ``sq_sum`` (tests/test_fuse_bn_stats.py holds every case to 1.2e-6), an error of the
variance the BN's fp32 inverse standard deviation sees as a few units in its last place. What it costs and saves: bench/README.md, "BN statistics in the conv's
output pass".
"""

from __future__ import annotations

import threading

import numpy as np

from . import _cnorm
from ._util import F32

_cache = threading.local()


def check(out_sum: np.ndarray | None, out_sq: np.ndarray | None, k: int
          ) -> tuple[np.ndarray, np.ndarray] | None:
    """``(sum, sq_sum)`` when a conv or BN kernel got both, each fp32 with ``k`` elements; ``None``
    when it got neither. Raises ``ValueError`` naming what is wrong otherwise."""
    if out_sum is None and out_sq is None:
        return None
    for name, a in (("sum", out_sum), ("sq_sum", out_sq)):
        if a is None:
            raise ValueError("batch-norm statistics: expected both 'sum' and 'sq_sum', got only one")
        if a.dtype != F32 or a.size != k:
            raise ValueError(f"batch-norm statistics: expected '{name}' of {k} fp32 elements, got {a.dtype} "
                             f"{a.shape}")
    return out_sum, out_sq


def partials(parts: int, c: int) -> list[np.ndarray]:
    """``parts`` zeroed float64 arrays ``{count, pivot[c], s1[c], s2[c]}`` (1 + 3c elements),
    the per-part sums ``tile_stats`` adds into. Made once per (parts, c) and calling thread and
    reused (their addresses are part of the kernel's job arguments, which
    :func:`._parallel.run_c` keeps per argument list), zeroed here on every call."""
    by_shape = getattr(_cache, "by_shape", None)
    if by_shape is None:
        by_shape = _cache.by_shape = {}
    arrays = by_shape.get((parts, c))
    if arrays is None:
        arrays = by_shape[(parts, c)] = [np.zeros(1 + 3 * c, np.float64) for _ in range(parts)]
    for a in arrays:
        a.fill(0.0)
    return arrays


def combine(parts: list[np.ndarray], out_sum: np.ndarray, out_sq: np.ndarray) -> None:
    """Write ``sum`` and ``sq_sum`` (fp32, C elements) from the per-part sums of :func:`partials`
    (module doc): each part's mean ``p + s1 / n`` and ``M2 = s2 - s1^2 / n``, merged in part order
    by ``M2 = M2_a + M2_b + delta^2 n_a n_b / n`` (``delta`` the difference of the means). Raises
    ``ValueError`` when no part counted a pixel."""
    c = out_sum.size
    total, mean, m2 = 0.0, None, None
    for st in parts:
        n = float(st[0])
        if n == 0.0:
            continue
        s1 = st[1 + c:1 + 2 * c]
        part_mean = st[1:1 + c] + s1 / n
        part_m2 = np.maximum(st[1 + 2 * c:] - s1 * s1 / n, 0.0)
        if mean is None:
            total, mean, m2 = n, part_mean, part_m2
            continue
        both = total + n
        delta = part_mean - mean
        mean = mean + delta * (n / both)
        m2 = m2 + part_m2 + delta * delta * (total * n / both)
        total = both
    if mean is None:
        raise ValueError("conv output statistics over no pixels")
    out_sum.reshape(-1)[...] = (mean * total).astype(F32)
    out_sq.reshape(-1)[...] = m2.astype(F32)


def from_output(y: np.ndarray, out_sum: np.ndarray, out_sq: np.ndarray) -> None:
    """``sum`` and ``sq_sum`` (fp32, K elements) of y (N, Ho, Wo, K), fp32 or fp16, by one pass
    over it after the conv: the compiled batch-norm statistics (:func:`._cnorm.batch_stats`)
    where they apply, else float64 NumPy sums (chunks of rows, shifted by the first row)."""
    k = y.shape[-1]
    y2 = y.reshape(-1, k)
    m = y2.shape[0]
    if _cnorm.usable(y2):
        mean, var = _cnorm.batch_stats(y2)
    else:
        pivot = y2[0].astype(np.float64)
        s1 = np.zeros(k, np.float64)
        s2 = np.zeros(k, np.float64)
        step = max(1, (1 << 16) // max(k, 1))
        for r in range(0, m, step):
            d = y2[r:r + step].astype(np.float64) - pivot
            s1 += d.sum(axis=0)
            s2 += (d * d).sum(axis=0)
        shift = s1 / m
        mean, var = pivot + shift, np.maximum(s2 / m - shift * shift, 0.0)
    out_sum.reshape(-1)[...] = (mean * m).astype(F32)
    out_sq.reshape(-1)[...] = (var * m).astype(F32)


def mean_var(out_sum: np.ndarray, out_sq: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
    """The float64 ``(mean, biased variance)`` per channel a BN forward takes from a conv's
    ``sum`` and ``sq_sum`` over ``m`` values per channel (the variance clamped at 0).
    Mirrored per channel in C by :data:`._cnorm.COEF_SOURCE` (prepared launches,
    :mod:`._prepared_norm`): change both (tests/test_prepared_norm.py, tests/test_fuzz_prepared_norm.py)."""
    return (out_sum.reshape(-1).astype(np.float64) / m,
            np.maximum(out_sq.reshape(-1).astype(np.float64) / m, 0.0))
