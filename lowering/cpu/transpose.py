"""Transposed copies of weight-gradient GEMM results, as a compiled kernel split across the kernel threads.

The im2col weight gradient forms ``dw.T`` (``(G, kkc, Kg)``: more rows than columns, the
orientation OpenBLAS runs several times faster, :func:`.conv._gemm_tn`), in one piece or as
per-thread partial sums (:func:`.conv._wgrad_chunked`), and then needs ``dw`` (``(G, Kg, kkc)``):
the parts added in order and transposed. :func:`._util.sum_transposed` does it in NumPy by blocks
of rows on the calling thread. For the large ones (ResNet-50's 2048 -> 512 pointwise conv: a
(2048, 512) result; ResNet-18's 256 -> 512 stride-2 conv: (2304, 512), two parts) that pass was a
serial tail of the 2-thread weight gradient (1.5 ms of 8.0 in the latter, cold). Here a C kernel
adds the parts of one 16 x 16 tile into a local tile and writes it transposed, whole 64-byte
lines on both sides, over a block of source rows per kernel thread
(:func:`._parallel.run_c`). The additions are those of the NumPy code, in the same order, so the
bits are the same on any thread count.

Measured on the Zen 5 host (2026-12-07, operands out of cache, medians of 20): (2304, 512) with
two parts, NumPy 1.74 ms on one thread and 1.50 on two, the C kernel 1.36 and 0.80; (1152, 256):
NumPy 0.36 / 0.27, C 0.38 / 0.33, so below :data:`C_ELEMENTS` the NumPy code stays.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

import numpy as np

from . import _cc, _parallel, _prepared
from ._util import F32
from ._util import sum_transposed as numpy_sum_transposed

MAX_PARTS = 4
"""Most parts the C kernel adds (the weight gradient has at most ``MAX_WORKERS`` of them)."""

C_ELEMENTS = 1 << 20
"""Smallest matrix (elements of one group) the C kernel transposes (module doc)."""

TILE = 16
"""Rows and columns of a tile; the threads' row blocks start at multiples of it."""

SOURCE = r"""
#define TB 16
/* dst (n, m) = (p0 + p1 + ... over np parts) (m, n) transposed, for the source rows [r0, r1) */
void tr_sum_t(const float* restrict p0, const float* restrict p1, const float* restrict p2,
              const float* restrict p3, long np, float* restrict dst, long m, long n, long r0, long r1) {
  float tile[TB][TB] __attribute__((aligned(64)));
  for (long i0 = r0; i0 < r1; i0 += TB) {
    const long ni = i0 + TB < r1 ? TB : r1 - i0;
    for (long j0 = 0; j0 < n; j0 += TB) {
      const long nj = j0 + TB < n ? TB : n - j0;
      for (long i = 0; i < ni; i++) {
        const long e = (i0 + i) * n + j0;
        for (long j = 0; j < nj; j++) {
          float s = p0[e + j];
          if (np > 1) s += p1[e + j];
          if (np > 2) s += p2[e + j];
          if (np > 3) s += p3[e + j];
          tile[i][j] = s;
        }
      }
      for (long j = 0; j < nj; j++)
        for (long i = 0; i < ni; i++) dst[(j0 + j) * m + i0 + i] = tile[i][j];
    }
  }
}
"""
"""C source of the kernel (compiled through :mod:`._cc`)."""

_fn: list = []


def _kernel():
    """The compiled ``tr_sum_t``, or None where :func:`._cc.available` says no (asked on every
    call: ``TR_MLIR_CC=0`` switches at once)."""
    if not _cc.available():
        return None
    if not _fn:
        _fn.append(_cc.function(SOURCE, "tr_sum_t", [ctypes.c_void_p] * 4 + [ctypes.c_long, ctypes.c_void_p]
                                + [ctypes.c_long] * 4))
    return _fn[0]


def sum_transposed(dst: np.ndarray, parts: list[np.ndarray]) -> None:
    """``dst[g] = (parts[0][g] + parts[1][g] + ...).T`` for every leading index g: ``dst``
    (G, n, m), each part (G, m, n), the parts added in list order (a single part: a transposed
    copy). fp32 C-contiguous operands of at least :data:`C_ELEMENTS` per group and at most
    :data:`MAX_PARTS` parts run the C kernel, its source rows cut into one block per kernel thread
    at multiples of :data:`TILE` (module doc); everything else :func:`._util.sum_transposed`,
    which also adds the parts into ``parts[0]`` and casts to ``dst``'s dtype (fp16 included). The
    same bits either way. Raises ``ValueError`` for mismatched shapes."""
    if not _shapes_match(dst, parts):
        raise ValueError(f"expected parts of one shape (G, m, n) and dst (G, n, m), got "
                         f"{[p.shape for p in parts]} and {dst.shape}")
    found = _pieces(dst, parts)
    if found is None:
        numpy_sum_transposed(dst, parts)
        return
    fn, groups = found
    for pieces in groups:
        _parallel.run_c(fn, pieces)


def _shapes_match(dst: np.ndarray, parts: list[np.ndarray]) -> bool:
    """Parts of one shape (G, m, n) and dst (G, n, m)."""
    return bool(parts) and all(p.shape == parts[0].shape for p in parts) and dst.ndim == 3 and \
        dst.shape == (parts[0].shape[0], parts[0].shape[2], parts[0].shape[1])


def _pieces(dst: np.ndarray, parts: list[np.ndarray], small: bool = False
            ) -> tuple[ctypes._CFuncPtr, list[list[tuple[int, ...]]]] | None:
    """The C kernel and, per group, its pieces (one block of source rows per kernel thread), for
    :func:`sum_transposed`'s checked operands; None where the NumPy code runs. ``small``: below
    :data:`C_ELEMENTS` too, as one piece per group (the NumPy code's bits)."""
    g, m, n = parts[0].shape
    fn = _kernel() if (small or m * n >= C_ELEMENTS) and len(parts) <= MAX_PARTS else None
    if fn is None or any(a.dtype != F32 or not a.flags.c_contiguous for a in (dst, *parts)):
        return None
    t = _parallel.workers() if m * n >= C_ELEMENTS else 1
    cuts = [min(m, -(-(m * i // t) // TILE) * TILE) for i in range(t)] + [m]
    groups = []
    for gi in range(g):
        ptrs = [p[gi].ctypes.data for p in parts] + [0] * (MAX_PARTS - len(parts))
        groups.append([(*ptrs, len(parts), dst[gi].ctypes.data, m, n, lo, hi) for lo, hi in zip(cuts, cuts[1:])
                       if hi > lo])
    return fn, groups


def sum_transposed_call(dst: np.ndarray, parts: list[np.ndarray]) -> Callable[[], None] | None:
    """:func:`sum_transposed` of these operands made ready once for a prepared launch, under the
    thread count in force now: :func:`._prepared.c_call` per group (the same pieces; below
    :data:`C_ELEMENTS`, where the function runs NumPy, one piece per group on the calling thread,
    the same bits and no Python, so the call can join a replay group), or the NumPy code's call
    where the C kernel does not run; None where the shapes do not match."""
    if not _shapes_match(dst, parts):
        return None
    found = _pieces(dst, parts, small=True)
    if found is None:
        return lambda: numpy_sum_transposed(dst, parts)
    fn, groups = found
    return _prepared.sequence(*(_prepared.c_call(fn, pieces) for pieces in groups))
