"""Softmax cross-entropy's forward as a C kernel (:mod:`._cc`), fp32 logits: one pass per row.

:func:`.loss.softmax_ce_fwd` in NumPy makes about 25 calls for a batch (max, exp, sums, arg-max,
the label gather, the metric counts), each a full NumPy dispatch: 100-150 us per step for
LeNet-5's or the seed's MLP's 128-200 x 10 logits, where the arithmetic is a few microseconds.
Here one call does it all, row by row (:func:`forward`). The backward stays NumPy's: it is five
calls, and their cost is the Python around them, not the arithmetic (a C version measured 34 us
against NumPy's 31 us for 128 x 10, the pointer lookups included).

The formulas, the masking of the rows past ``B`` and the metric conventions (rows with a NaN or
+-Inf logit are misses,
``top5 = top1`` for fewer than 5 classes, the arg-max is the first maximum, the first NaN in a
row with one) are :mod:`.loss`'s; the loss and probabilities are computed in fp32 as there, the
loss summed over the rows in float64 and the hits counted in float64. The results differ from the NumPy kernel by the
rounding of ``expf`` / ``logf`` (the C library's against NumPy's SIMD ones, both within an ulp or
two) and the order of the class sums (sequential here, pairwise in NumPy: for K classes a
relative error up to about K * 2**-24 in the softmax denominator instead of log2(K) * 2**-24;
Higham, *Accuracy and Stability of Numerical Algorithms*, 2002, ch. 4).
tests/test_closs.py compares both paths with each other and with PyTorch.

The function takes the batch size and class count at run time: one library for every shape.
"""

from __future__ import annotations

import ctypes
import functools
import threading
from collections.abc import Callable

import numpy as np

from . import _cc

_P = ctypes.c_void_p
_L = ctypes.c_int64
_F = ctypes.c_float

SOURCE = r"""
#include <math.h>
#include <stdint.h>
#include <string.h>
typedef int64_t i64;
static inline int finite_bits(float v) { uint32_t u; memcpy(&u, &v, 4); return (u & 0x7F800000u) != 0x7F800000u; }
/* Rows [0, n) of z (n, k): p = softmax(z), pred = arg-max (first maximum; the first NaN in a row
   with one). Rows [0, b) also add their loss lse - a * z_y - ls * mean(z) (the last term only for
   ls != 0, so a -inf logit does not make 0 * -inf) to out[0] and their top-1 / top-5 hits to
   out[1], out[2]; out[3] = 1 + the first row whose label is outside [0, k), else 0: then out[0..2]
   stay 0 and the rows after it are not written. a = 1 - ls, both rounded to fp32 by the caller. */
void softmax_ce_fwd(const float *z, const int32_t *lab, float *p, int32_t *pred, double *out, i64 n, i64 k, i64 b,
                    float a, float ls) {
  double loss = 0.0, c1 = 0.0, c5 = 0.0;
  out[0] = out[1] = out[2] = out[3] = 0.0;
  for (i64 r = 0; r < n; r++) {
    const float *zr = z + r * k;
    float *pr = p + r * k;
    float m = zr[0];
    i64 am = 0;
    int nan = isnan(zr[0]), finite = finite_bits(zr[0]);
    for (i64 j = 1; j < k; j++) {
      float v = zr[j];
      finite &= finite_bits(v);
      if (nan) continue;
      if (isnan(v)) { nan = 1; m = v; am = j; }
      else if (v > m) { m = v; am = j; }
    }
    float s = 0.0f;
    for (i64 j = 0; j < k; j++) { float e = expf(zr[j] - m); pr[j] = e; s += e; }
    for (i64 j = 0; j < k; j++) pr[j] = pr[j] / s;
    if (pred) pred[r] = (int32_t)am;
    if (r >= b) continue;
    i64 y = lab[r];
    if (y < 0 || y >= k) { out[3] = (double)(r + 1); return; }
    float zy = zr[y];
    float lse = m + logf(s);
    float lb = lse - a * zy;
    if (ls != 0.0f) {
      float sz = 0.0f;
      for (i64 j = 0; j < k; j++) sz += zr[j];
      lb = lb - ls * (sz / (float)k);
    }
    loss += (double)lb;
    if (!finite) continue;
    if (am == y) c1 += 1.0;
    if (k >= 5) {
      i64 above = 0;
      for (i64 j = 0; j < k; j++) above += zr[j] > zy;
      if (above < 5) c5 += 1.0;
    } else if (am == y) {
      c5 += 1.0;
    }
  }
  out[0] = loss; out[1] = c1; out[2] = c5;
}
"""

_ARGS = {"softmax_ce_fwd": [_P, _P, _P, _P, _P, _L, _L, _L, _F, _F]}


@functools.cache
def function(name: str) -> ctypes._CFuncPtr:
    """The compiled function ``name`` (a key of :data:`_ARGS`), built once per process."""
    return _cc.function(SOURCE, name, _ARGS[name])


def usable(z: np.ndarray, lab: np.ndarray, p: np.ndarray, pred: np.ndarray | None) -> bool:
    """Whether :func:`forward` can run these arrays: a usable C compiler (:func:`._cc.available`;
    not with ``TR_MLIR_CC=0``), fp32 logits ``z`` and probabilities ``p``, int32 labels ``lab`` and
    predictions ``pred`` (or None), all C-contiguous."""
    want = ((z, np.float32), (p, np.float32), (lab, np.int32), (pred, np.int32))
    return _cc.available() and all(a is None or (a.dtype == t and a.flags.c_contiguous) for a, t in want)


_local = threading.local()


def _results() -> np.ndarray:
    """This thread's 4-double result buffer of :func:`forward` (made once: a replayed step
    allocates nothing here; per thread, as two tasks may step in two threads)."""
    out = getattr(_local, "out", None)
    if out is None:
        out = _local.out = np.zeros(4, np.float64)
    return out


def forward_call(z: np.ndarray, lab: np.ndarray, p: np.ndarray, pred: np.ndarray | None
                 ) -> Callable[[int, float], tuple[float, float, float, int]]:
    """:func:`forward` on these arrays made ready once (prepared launches): a call taking ``(b,
    ls)``, read on every step, and returning what :func:`forward` returns."""
    n, k = z.shape
    addr = _cc.address
    fn = function("softmax_ce_fwd")
    ptrs = (addr(z), addr(lab), addr(p), None if pred is None else addr(pred))

    def call(b: int, ls: float) -> tuple[float, float, float, int]:
        out = _results()
        fn(*ptrs, addr(out), n, k, b, float(np.float32(1.0 - ls)), float(np.float32(ls)))
        return float(out[0]), float(out[1]), float(out[2]), int(out[3]) - 1
    return call


def forward(z: np.ndarray, lab: np.ndarray, p: np.ndarray, pred: np.ndarray | None, b: int, ls: float
            ) -> tuple[float, float, float, int]:
    """Softmax and the loss terms of fp32 logits ``z`` (N, K) with int32 labels ``lab`` (N,):
    writes ``p`` (N, K) fp32 and ``pred`` (N,) int32 (None: not written); returns the float64
    sum of the first ``b`` rows' losses (label smoothing ``ls``, PyTorch's formula, :mod:`.loss`),
    their top-1 and top-5 hit counts, and -1; or, when a label of those rows is outside
    ``[0, K)``, zeros and the index of the first such row (``p`` and ``pred`` are then written
    only up to that row)."""
    n, k = z.shape
    out = _results()
    addr = _cc.address
    function("softmax_ce_fwd")(addr(z), addr(lab), addr(p), None if pred is None else addr(pred), addr(out), n, k, b,
                               float(np.float32(1.0 - ls)), float(np.float32(ls)))
    return float(out[0]), float(out[1]), float(out[2]), int(out[3]) - 1

