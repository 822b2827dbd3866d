"""Depthwise convolutions (groups = C = K, one filter per channel) as compiled C kernels that give
the NumPy depthwise code of :mod:`.conv` to the bit, split across the kernel threads.

The NumPy code does one strided multiply and one add per tap over the whole batch, so every
output element is ``((0 + x_t0 * w_t0) + x_t1 * w_t1) + ...`` over its valid taps in tap order
``t = i*k + j``, each product rounded to fp32 before the add. That is 2 k*k passes over the
output (and a products temporary), for 2 FLOPs per element: MobileNetV2's 3x3 depthwise convs
ran at about 3 GFLOP/s and, as whole-batch NumPy calls, on one thread only (CIFAR MobileNetV2
batch 32, 2026-12-07: the step took 43 ms on 1 thread and 48 ms on 2).

These kernels compute the same expression per element, in the same order, with the products
rounded before the adds, with the channel axis (contiguous in NHWC) as the vectorised inner loop.
No multiply-add is fused: each product is its own statement, GCC contracts nothing under the
``-std=c99`` of :data:`._cc.FLAGS` (its ISO mode implies ``-ffp-contract=off``), and Clang
honours the source's ``#pragma STDC FP_CONTRACT OFF``.

* ``tr_dw_fwd``: per output pixel, the row of C outputs is zeroed and then gets each valid
  tap's products added; images split among the threads (each output element is computed by
  one thread, so the split does not change the result).
* ``tr_dw_dgrad``: per input pixel, the row of C input gradients is zeroed (or kept, to
  accumulate) and gets the products ``dy[oh, ow] * w_t`` of each tap ``t`` that reads the pixel,
  in tap order; images split among the threads.
* ``tr_dw_wgrad``: ``dw[c, t]`` is ``np.add.reduce`` of the products over the tap's valid
  output block, which NumPy sums in (image, row, column) order starting from its identity +0
  (no pairwise summation: the reduced axes are not the contiguous one; a sum of -0 products is
  +0). The kernel keeps one sum row per tap in the scratch (k*k x C), zeroed, and visits the
  output pixels in the same order adding each valid tap's product; a tap no output reads gives
  0. The
  threads split the channels (blocks of 16), each summing all pixels for its channels, so the
  order per element, and the bits, are the same on any number of threads.

Operands: x (N, H, W, C) and y / dy (N, Ho, Wo, C) NHWC fp32 C-contiguous, w (C, k, k, 1)
fp32, any k, stride and padding. The kernels read the weights tap-major (k*k, C), transposed
into the caller's scratch ``tmp`` once per call; the weight gradient sums in ``tmp`` too
(:func:`scratch_elements`). :func:`usable` is the dispatch rule; where it does not
hold (fp16 operands, no C compiler, ``TR_MLIR_CC=0``) the NumPy code runs.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

import numpy as np

from . import _cc, _parallel, _prepared
from ._threads import MAX_WORKERS
from ._util import F32, take

SOURCE = r"""
#pragma STDC FP_CONTRACT OFF
/* Depthwise NHWC convolution, fp32; every sum in the NumPy code's order (module doc). */

/* d: H, W, C, Ho, Wo, k, s, p */
#define TR_DW_DIMS const long H = d[0], W = d[1], C = d[2], Ho = d[3], Wo = d[4], k = d[5], s = d[6], p = d[7]

void tr_dw_fwd(const float* restrict x, const float* restrict wt, float* restrict y, const long* d, long n0,
               long n1) {
  TR_DW_DIMS;
  for (long n = n0; n < n1; n++)
    for (long oh = 0; oh < Ho; oh++)
      for (long ow = 0; ow < Wo; ow++) {
        float* restrict yr = y + ((n * Ho + oh) * Wo + ow) * C;
        for (long c = 0; c < C; c++) yr[c] = 0.0f;
        for (long i = 0; i < k; i++) {
          const long ih = oh * s + i - p;
          if (ih < 0 || ih >= H) continue;
          for (long j = 0; j < k; j++) {
            const long iw = ow * s + j - p;
            if (iw < 0 || iw >= W) continue;
            const float* restrict xr = x + ((n * H + ih) * W + iw) * C;
            const float* restrict wr = wt + (i * k + j) * C;
#pragma GCC ivdep
            for (long c = 0; c < C; c++) {
              const float prod = xr[c] * wr[c];
              yr[c] = yr[c] + prod;
            }
          }
        }
      }
}

void tr_dw_dgrad(const float* restrict dy, const float* restrict wt, float* restrict dx, const long* d,
                 long accumulate, long n0, long n1) {
  TR_DW_DIMS;
  for (long n = n0; n < n1; n++)
    for (long ih = 0; ih < H; ih++)
      for (long iw = 0; iw < W; iw++) {
        float* restrict dr = dx + ((n * H + ih) * W + iw) * C;
        if (!accumulate)
          for (long c = 0; c < C; c++) dr[c] = 0.0f;
        for (long i = 0; i < k; i++) {
          const long th = ih + p - i;
          if (th < 0 || th % s) continue;
          const long oh = th / s;
          if (oh >= Ho) continue;
          for (long j = 0; j < k; j++) {
            const long tw = iw + p - j;
            if (tw < 0 || tw % s) continue;
            const long ow = tw / s;
            if (ow >= Wo) continue;
            const float* restrict g = dy + ((n * Ho + oh) * Wo + ow) * C;
            const float* restrict wr = wt + (i * k + j) * C;
#pragma GCC ivdep
            for (long c = 0; c < C; c++) {
              const float prod = g[c] * wr[c];
              dr[c] = dr[c] + prod;
            }
          }
        }
      }
}

void tr_dw_wgrad(const float* restrict dy, const float* restrict x, float* restrict acc, float* restrict dw,
                 const long* d, long N, long c0, long c1) {
  TR_DW_DIMS;
  const long kk = k * k;
  for (long t = 0; t < kk; t++)
    for (long c = c0; c < c1; c++) acc[t * C + c] = 0.0f;
  for (long n = 0; n < N; n++)
    for (long oh = 0; oh < Ho; oh++)
      for (long ow = 0; ow < Wo; ow++) {
        const float* restrict g = dy + ((n * Ho + oh) * Wo + ow) * C;
        for (long i = 0; i < k; i++) {
          const long ih = oh * s + i - p;
          if (ih < 0 || ih >= H) continue;
          for (long j = 0; j < k; j++) {
            const long iw = ow * s + j - p;
            if (iw < 0 || iw >= W) continue;
            const float* restrict xr = x + ((n * H + ih) * W + iw) * C;
            float* restrict a = acc + (i * k + j) * C;
#pragma GCC ivdep
            for (long c = c0; c < c1; c++) {
              const float prod = g[c] * xr[c];
              a[c] = a[c] + prod;
            }
          }
        }
      }
  for (long c = c0; c < c1; c++)
    for (long t = 0; t < kk; t++) dw[c * kk + t] = acc[t * C + c];
}

/* wt (kk, C) = w (C, kk) transposed: the tap-major weights (a copy; the prepared launches') */
void tr_dw_taps(const float* restrict w, float* restrict wt, long C, long kk) {
  for (long t = 0; t < kk; t++)
    for (long c = 0; c < C; c++) wt[t * C + c] = w[c * kk + t];
}
"""
"""C source of the three depthwise kernels (module doc)."""

SPLIT_ELEMENTS = 1 << 16
"""Smallest forward output / input gradient (elements) split among the threads by images: near
it the hand-off costs about what the second thread saves (batch 32, 1 thread / 2 threads:
MobileNetV2's 2x2x576 maps, 73,728 elements, input gradient 0.036 / 0.030 ms, forward 0.033 /
0.028; 4x4x192, 98,304: 0.062 / 0.042 and 0.061 / 0.042)."""

WGRAD_SPLIT_ELEMENTS = 1 << 18
"""Smallest output (elements) whose weight gradient is split among the threads by channels
(each thread reads half of every row: 4x4x192 maps, 98,304 elements, took 0.044 ms on 1 thread
and 0.053 on 2; 8x8x144, 294,912: 0.124 and 0.110)."""

CHANNEL_BLOCK = 16
"""Channel granularity of the weight gradient's split among threads (one AVX-512 vector)."""

_fns: dict[str, ctypes._CFuncPtr] = {}


def _fn(name: str, nargs_ptr: int, nargs_long: int) -> ctypes._CFuncPtr:
    fn = _fns.get(name)
    if fn is None:
        fn = _fns[name] = _cc.function(SOURCE, name, [ctypes.c_void_p] * nargs_ptr + [ctypes.c_long] * nargs_long)
    return fn


ALIGN = 16
"""fp32 elements per 64 bytes: each thread's weight-gradient sums start on a cache line of their
own (two threads' sums in one line made the 2-thread weight gradient 2.7-4.5x slower than one
thread's: false sharing)."""


def _region(g) -> int:
    return -(-g.win.k * g.win.k * g.c // ALIGN) * ALIGN


def scratch_elements(g) -> int:
    """fp32 elements of ``tmp`` the kernels use for geometry ``g``: the tap-major weights (forward,
    input gradient; k*k x C) or the per-tap sums of each kernel thread (weight gradient;
    :data:`._threads.MAX_WORKERS` regions of k*k x C, each on its own cache lines)."""
    return MAX_WORKERS * _region(g) + ALIGN


def usable(g, tmp: np.ndarray | None, *arrays: np.ndarray) -> bool:
    """Whether the compiled kernels run a depthwise conv phase of geometry ``g`` (groups = C = K):
    every array fp32 and C-contiguous (AMP's fp16 operands keep the NumPy code), a contiguous fp32
    ``tmp`` of at least :func:`scratch_elements`, and :func:`._cc.available` (a C compiler, and
    ``TR_MLIR_CC`` not ``0``). Either way the results are the same bits."""
    if not (g.groups == g.c == g.k_out and all(a.dtype == F32 and a.flags.c_contiguous for a in arrays)):
        return False
    if tmp is None or tmp.dtype != F32 or not tmp.flags.c_contiguous or tmp.size < scratch_elements(g):
        return False
    return _cc.available()


_dims_arrays: dict[tuple[int, ...], np.ndarray] = {}


def _dims(g) -> int:
    """Address of the kernels' ``d`` array (H, W, C, Ho, Wo, k, s, p as C longs) for ``g``, kept for
    the life of the process (one per geometry, so the job pairs can be kept too)."""
    win = g.win
    key = (win.h, win.w, g.c, win.ho, win.wo, win.k, win.s, win.p)
    arr = _dims_arrays.get(key)
    if arr is None:
        arr = _dims_arrays[key] = np.array(key, dtype=np.dtype(ctypes.c_long))
    return arr.ctypes.data


def _tap_major(w: np.ndarray, g, tmp: np.ndarray) -> np.ndarray:
    kk = g.win.k * g.win.k
    wt = take(tmp, (kk, g.c))
    np.copyto(wt, w.reshape(g.c, kk).T)
    return wt


def _image_pieces(g, head: tuple[int, ...], elements: int) -> list[tuple[int, ...]]:
    t = min(_parallel.workers(), g.n) if elements >= SPLIT_ELEMENTS else 1
    bounds = [g.n * i // t for i in range(t + 1)]
    return [head + (lo, hi) for lo, hi in zip(bounds, bounds[1:])]


def forward(x: np.ndarray, w: np.ndarray, y: np.ndarray, g, tmp: np.ndarray) -> None:
    """y (N, Ho, Wo, C) = depthwise conv of x (N, H, W, C) with w (C, k, k, 1), fp32; the NumPy
    depthwise forward's bits. No layout checks here: the caller gates on :func:`usable` (the
    kernels index raw pointers with ``g``'s sizes). Raises ``ValueError`` (:func:`._util.take`)
    when ``tmp`` is too small."""
    wt = _tap_major(w, g, tmp)
    _parallel.run_c(*_forward_pieces(x, wt, y, g))


def _forward_pieces(x: np.ndarray, wt: np.ndarray, y: np.ndarray, g) -> tuple[ctypes._CFuncPtr, list]:
    """``tr_dw_fwd`` and its pieces (image ranges) for x (N, H, W, C), the tap-major weights wt
    (k*k, C) and y (N, Ho, Wo, C), fp32, as :func:`forward` runs them."""
    return _fn("tr_dw_fwd", 4, 2), _image_pieces(g, (x.ctypes.data, wt.ctypes.data, y.ctypes.data, _dims(g)), y.size)


def dgrad(dy: np.ndarray, w: np.ndarray, dx: np.ndarray, g, tmp: np.ndarray, accumulate: bool = False) -> None:
    """dx (N, H, W, C) = dL/dx from dy (N, Ho, Wo, C) and w, fp32; ``accumulate``: dx += dL/dx.
    The NumPy depthwise input gradient's bits. Gated and raising as :func:`forward`."""
    wt = _tap_major(w, g, tmp)
    _parallel.run_c(*_dgrad_pieces(dy, wt, dx, g, accumulate))


def _dgrad_pieces(dy: np.ndarray, wt: np.ndarray, dx: np.ndarray, g, accumulate: bool) -> tuple[ctypes._CFuncPtr, list]:
    """``tr_dw_dgrad`` and its pieces (image ranges) for dy (N, Ho, Wo, C), wt (k*k, C) and dx
    (N, H, W, C), fp32, as :func:`dgrad` runs them."""
    head = (dy.ctypes.data, wt.ctypes.data, dx.ctypes.data, _dims(g), int(accumulate))
    return _fn("tr_dw_dgrad", 4, 3), _image_pieces(g, head, dx.size)


def wgrad(dy: np.ndarray, x: np.ndarray, dw: np.ndarray, g, tmp: np.ndarray) -> None:
    """dw (C, k, k, 1) = dL/dw (overwritten) from dy (N, Ho, Wo, C) and x (N, H, W, C), fp32; the
    NumPy depthwise weight gradient's bits on any number of threads (channel blocks per thread).
    Gated and raising as :func:`forward`."""
    _parallel.run_c(*_wgrad_pieces(dy, x, dw, g, tmp))


def _wgrad_pieces(dy: np.ndarray, x: np.ndarray, dw: np.ndarray, g, tmp: np.ndarray) -> tuple[ctypes._CFuncPtr, list]:
    """``tr_dw_wgrad`` and its pieces (channel blocks, each summing in its own 64-byte aligned
    region of ``tmp``) for dy (N, Ho, Wo, C), x (N, H, W, C) and dw (C, k, k, 1), fp32, as
    :func:`wgrad` runs them. Raises ``ValueError`` when ``tmp`` is too small."""
    flat = take(tmp, (scratch_elements(g),))
    base = flat.ctypes.data + (-flat.ctypes.data % 64)  # 64-byte aligned (fp32 arrays are 4-byte aligned)
    blocks = -(-g.c // CHANNEL_BLOCK)
    t = min(_parallel.workers(), blocks) if dy.size >= WGRAD_SPLIT_ELEMENTS else 1
    cuts = [min(g.c, blocks * i // t * CHANNEL_BLOCK) for i in range(t)] + [g.c]
    # thread w sums its channels [lo, hi) in its own region (indexed t*C + c, as the whole)
    return _fn("tr_dw_wgrad", 5, 3), [(dy.ctypes.data, x.ctypes.data, base + 4 * w * _region(g), dw.ctypes.data,
                                       _dims(g), g.n, lo, hi) for w, (lo, hi) in enumerate(zip(cuts, cuts[1:]))]


def _taps_call(w: np.ndarray, g, tmp: np.ndarray) -> tuple[Callable[[], None], np.ndarray]:
    """The tap-major copy of w into ``tmp`` as a one-job call (``tr_dw_taps``: :func:`_tap_major`'s
    values), and the (k*k, C) view it writes."""
    kk = g.win.k * g.win.k
    wt = take(tmp, (kk, g.c))
    return _prepared.c_call(_fn("tr_dw_taps", 2, 2), [(w.ctypes.data, wt.ctypes.data, g.c, kk)]), wt


def forward_call(x: np.ndarray, w: np.ndarray, y: np.ndarray, g, tmp: np.ndarray) -> Callable[[], None]:
    """:func:`forward` on these arrays as a ready call (:func:`._prepared.c_call` s: the tap-major
    copy, then the same pieces, hence the same bits). Gated and raising as :func:`forward`."""
    taps, wt = _taps_call(w, g, tmp)
    return _prepared.sequence(taps, _prepared.c_call(*_forward_pieces(x, wt, y, g)))


def dgrad_call(dy: np.ndarray, w: np.ndarray, dx: np.ndarray, g, tmp: np.ndarray) -> Callable[[], None]:
    """:func:`dgrad` (overwriting dx) on these arrays as a ready call, as :func:`forward_call`."""
    taps, wt = _taps_call(w, g, tmp)
    return _prepared.sequence(taps, _prepared.c_call(*_dgrad_pieces(dy, wt, dx, g, False)))


def wgrad_call(dy: np.ndarray, x: np.ndarray, dw: np.ndarray, g, tmp: np.ndarray) -> Callable[[], None]:
    """:func:`wgrad` on these arrays as a ready call (:func:`._prepared.c_call`: the same pieces)."""
    return _prepared.c_call(*_wgrad_pieces(dy, x, dw, g, tmp))
