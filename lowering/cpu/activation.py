"""Element-wise activations (PyTorch defaults), one table entry each: the function and its
derivative as functions of the forward **input** x.

Backward kernels recompute the derivative from x (the seed's ``dX`` is written over X, and dY
over Y, so Y is gone by then): ``dx = dy * f'(x)``, written chunk by chunk, so ``dx`` may be x's
own buffer (or dy's). Math runs in fp32 on chunks of :data:`._util.CHUNK` elements, so fp16 (AMP)
arrays are rounded once and no temporary of activation size exists.

ReLU has two backward forms, and the compiler picks one per ReLU (``passes/_descriptors.py``):
``relu_bwd`` reads dy and the seed's INT8 mask (``mask = x > 0``, written by ``relu_fwd``), for a
ReLU whose output would otherwise die early (it feeds a max pool, an add, a GAP);
``relu_bwd_from_output`` reads dy and the output y (``dx = dy * (y > 0)``, PyTorch's
``threshold_backward(grad, result, 0)``), for a ReLU whose output its consumers keep for their own
backward anyway; its forward writes no mask (``relu_fwd`` with ``mask=None``). The two give the
same bits: ``y > 0`` exactly where ``x > 0`` and the factor is the same 0 or 1.

fp32 fast paths (measured on the project machine, AMD EPYC Zen 4, one thread, best of 100,
LeNet's 128x28x28x6 = 602,112 elements; 128x10x10x16 in brackets):

* an activation with a NumPy ufunc (:attr:`Activation.ufunc`: tanh) runs it on whole blocks
  straight into y, without chunk temporaries: tanh forward 0.33 -> 0.22 ms (0.11 -> 0.07). A C
  tanh was slower than NumPy's own SIMD tanh here (0.30 ms), so the forward stays NumPy's: its
  own inner loop, called from C on the calling thread and the C worker from
  :data:`C_SPLIT_ELEMENTS` (:mod:`._ufunc`, the same bits), else the ufunc on whole blocks. Zen 5,
  one call, best of 300: 602,112 elements 94 us whole, 56 us split; 204,800: 32 and 25 us.
* ``tanh_bwd`` runs a C kernel (:data:`TANH_C_SOURCE`, through :mod:`._cc`) that writes
  ``dy * sech(x)^2`` in one pass: 0.56 -> 0.23 ms (0.19 -> 0.08). sech^2 = 4e/(1+e)^2 with
  e = exp(-2|x|) has no cancellation: within 4 ulp relative and 1.6e-7 absolute of the exact
  derivative, where torch's ``1 - y*y`` (y = its tanh, 0.5 ulp) is within 7e-8 absolute but
  has large relative errors for |x| > 2; the two agree to ~2e-7 * |dy|. (A C tanh followed by
  ``1 - t*t`` ran at 0.33 ms: the small-|x| polynomial and the select cost as much as the exp.)
  Used when :func:`use_c_tanh` allows (fp32 contiguous arrays, a C compiler, ``TR_MLIR_CC`` not
  ``0``).
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from . import _cc, _parallel, _prepared, _ufunc
from ._util import F32, chunks, flat
from .registry import kernel

Fn = Callable[[np.ndarray], np.ndarray]


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # 1/(1+exp(-x)) = (1 + tanh(x/2)) / 2: no overflow, and NumPy's tanh is vectorized. Below
    # x = -17 this rounds to 0 where the true value is < 4e-8 (an absolute error only).
    t = x * 0.5
    np.tanh(t, out=t)
    t *= 0.5
    t += 0.5
    return t


def _d_sigmoid(x: np.ndarray) -> np.ndarray:
    s = _sigmoid(x)
    t = 1.0 - s
    t *= s
    return t


def _silu(x: np.ndarray) -> np.ndarray:
    s = _sigmoid(x)
    s *= x
    return s


def _d_silu(x: np.ndarray) -> np.ndarray:
    s = _sigmoid(x)
    t = 1.0 - s
    t *= x
    t += 1.0
    t *= s
    return t


def _elu(x: np.ndarray) -> np.ndarray:
    # expm1(min(x, 0)) >= x for x <= 0 and = 0 for x > 0: the max picks the right branch.
    return np.maximum(np.expm1(np.minimum(x, 0.0)), x)


def _hardswish(x: np.ndarray) -> np.ndarray:
    return x * np.clip(x + 3.0, 0.0, 6.0) * (1.0 / 6.0)


def _d_hardswish(x: np.ndarray) -> np.ndarray:
    # PyTorch (hardswish_backward): 0 for x <= -3, x/3 + 1/2 on (-3, 3), 1 for x >= 3.
    return np.where(x <= -3.0, 0.0, np.where(x < 3.0, x * (1.0 / 3.0) + 0.5, 1.0))


LEAKY_SLOPE = 0.01


@dataclass(frozen=True)
class Activation:
    """``f(x)`` and ``f'(x)`` on fp32 chunks (PyTorch's values, including at the kinks);
    ``ufunc``: a NumPy ufunc computing ``f`` with ``out=`` (fp32 forward on whole blocks)."""

    f: Fn
    df: Fn
    ufunc: np.ufunc | None = None


ACTIVATIONS: dict[str, Activation] = {
    "tanh": Activation(np.tanh, lambda x: 1.0 - np.square(np.tanh(x)), ufunc=np.tanh),
    "sigmoid": Activation(_sigmoid, _d_sigmoid),
    "silu": Activation(_silu, _d_silu),
    "relu6": Activation(lambda x: np.clip(x, 0.0, 6.0), lambda x: ((x > 0.0) & (x < 6.0)).astype(F32)),
    "leaky_relu": Activation(lambda x: np.where(x > 0.0, x, x * LEAKY_SLOPE),
                             lambda x: np.where(x > 0.0, 1.0, LEAKY_SLOPE).astype(F32)),
    "hardswish": Activation(_hardswish, _d_hardswish),
    "elu": Activation(_elu, lambda x: np.exp(np.minimum(x, 0.0))),
}
"""Activation name (the compute op stem) -> its math. ReLU is separate (mask)."""


SPLIT_ELEMENTS = 1 << 19
"""Arrays of at least this many elements are shared out among the kernel threads by halves, in
chunks of :data:`SPLIT_CHUNK` (long NumPy calls, so the threads do not fight over the GIL); the
temporaries of both threads together stay under half the array."""

SPLIT_CHUNK = 1 << 16


def _chunked(size: int, fn) -> None:
    """``fn(slice)`` over chunks of ``range(size)``: serially in :data:`._util.CHUNK` chunks, or
    split among the kernel threads for a large array."""
    t = _parallel.workers() if size >= SPLIT_ELEMENTS else 1
    if t == 1:
        for sl in chunks(size):
            fn(sl)
        return
    bounds = [size * i // t for i in range(t + 1)]

    def block(lo: int, hi: int) -> None:
        for c in chunks(hi - lo, SPLIT_CHUNK):
            fn(slice(lo + c.start, lo + c.stop))

    _parallel.run([lambda w=w: block(bounds[w], bounds[w + 1]) for w in range(t)])


def apply_forward(act: Activation, x: np.ndarray, y: np.ndarray) -> None:
    """``y = f(x)`` chunk by chunk (or by whole blocks through ``act.ufunc`` for fp32); ``y`` may
    be ``x``'s buffer."""
    xf, yf = flat(x), flat(y)
    if act.ufunc is not None and xf.dtype == F32 and yf.dtype == F32:
        if not _ufunc.unary(act.ufunc, xf, yf, C_SPLIT_ELEMENTS):
            _halves(xf.size, lambda lo, hi: act.ufunc(xf[lo:hi], out=yf[lo:hi]))
        return

    def one(sl: slice) -> None:
        yf[sl] = act.f(xf[sl].astype(F32, copy=False))

    _chunked(xf.size, one)


def apply_backward(act: Activation, dy: np.ndarray, x: np.ndarray, dx: np.ndarray) -> None:
    """``dx = dy * f'(x)`` chunk by chunk; ``dx`` may be ``x``'s or ``dy``'s buffer. (NumPy code;
    ``tanh_bwd`` goes to the C kernel first, see :func:`use_c_tanh`.)"""
    xf, dyf, dxf = flat(x), flat(dy), flat(dx)

    def one(sl: slice) -> None:
        g = act.df(xf[sl].astype(F32, copy=False))
        g *= dyf[sl]
        dxf[sl] = g

    _chunked(xf.size, one)


TANH_C_SOURCE = r"""
#include <math.h>
#include <string.h>
/* tanh'(x) = 1 - tanh(x)^2 = sech(x)^2 = 4e / (1 + e)^2 with e = exp(-2|x|), in fp32,
   vectorizable (no calls, no branches; ISO float semantics, fmaf = one rounding). No
   cancellation: within 4 ulp (relative) everywhere, 1.6e-7 absolute, where 1 - t^2 from a
   rounded t has absolute errors of ~1e-7 and relative ones without bound as |x| grows.
   exp(z) = 2^n p(r) (Cephes expf), |x| clamped at 40 (e = 0 beyond: tanh' = 0 as 1 - 1*1);
   NaN propagates. */
static inline float dtanh1(float x) {
  const float a = fabsf(x);
  const float z = -2.0f * (a > 40.0f ? 40.0f : a);
  const float rn = fmaf(z, 1.44269504088896341f, 12582912.0f);  /* 1.5*2^23: round(z/ln2) in the low bits */
  const float fn = rn - 12582912.0f;
  unsigned rb;
  memcpy(&rb, &rn, 4);
  const float r = fmaf(fn, 2.12194440e-4f, fmaf(fn, -0.693359375f, z));
  float p = 1.9875691500E-4f;
  p = fmaf(p, r, 1.3981999507E-3f);
  p = fmaf(p, r, 8.3334519073E-3f);
  p = fmaf(p, r, 4.1665795894E-2f);
  p = fmaf(p, r, 1.6666665459E-1f);
  p = fmaf(p, r, 5.0000001201E-1f);
  p = fmaf(p * r, r, r) + 1.0f;
  const unsigned sbits = (rb - 0x4B400000u + 127u) << 23;  /* 2^n */
  float s;
  memcpy(&s, &sbits, 4);
  const float e = a > 40.0f ? 0.0f : p * s;
  const float d = 1.0f + e;
  return (4.0f * e) / (d * d);
}

/* dx may be x's or dy's buffer (no restrict): element e is read before it is written and no
   other element depends on it, which is what ivdep tells the vectorizer. */
void tanh_bwd(const float* dy, const float* x, float* dx, long n0, long n1) {
#pragma GCC ivdep
  for (long e = n0; e < n1; e++) dx[e] = dy[e] * dtanh1(x[e]);
}
"""
"""C source of the fused tanh backward (``dx = dy * sech(x)^2`` over ``[n0, n1)``)."""

C_SPLIT_ELEMENTS = 1 << 16
"""Smallest array the C tanh backward and the fp32 tanh forward (NumPy's loop on the kernel
threads, :mod:`._ufunc`) split among the kernel threads by element ranges (the calling thread the
first half, the C worker the second: the images each wrote in the kernels before,
:data:`._cpool.MIN_SPLIT_FWD`). Lowered from 262,144 together with the pooling thresholds:
LeNet-5's 204,800-element tanh backward now splits (step figures there)."""

_tanh_bwd_c: list = []


def use_c_tanh(*arrays: np.ndarray) -> bool:
    """Whether ``tanh_bwd`` runs its C kernel: all arrays fp32 and C-contiguous, and
    :func:`._cc.available` (a C compiler; ``TR_MLIR_CC=0`` forces NumPy). The C kernel was faster
    at every size measured (module doc); the aliasing of the NumPy code is kept (dx may be x's
    or dy's buffer: each element is read before it is written)."""
    return all(a.dtype == F32 and a.flags.c_contiguous for a in arrays) and _cc.available()


def tanh_backward_c(dy: np.ndarray, x: np.ndarray, dx: np.ndarray) -> None:
    """``dx = dy * (1 - tanh(x)^2)`` (as ``dy * sech(x)^2``) by the C kernel, fp32, any shape (same size), split by
    element ranges among the kernel threads from :data:`C_SPLIT_ELEMENTS` elements."""
    _parallel.run_c(*_tanh_backward_pieces(dy, x, dx))


def tanh_backward_call(dy: np.ndarray, x: np.ndarray, dx: np.ndarray) -> Callable[[], None]:
    """:func:`tanh_backward_c` on these arrays as a ready zero-argument call
    (:func:`._prepared.c_call`, for the thread count in force now)."""
    return _prepared.c_call(*_tanh_backward_pieces(dy, x, dx))


def _tanh_backward_pieces(dy: np.ndarray, x: np.ndarray, dx: np.ndarray):
    if not _tanh_bwd_c:
        _tanh_bwd_c.append(_cc.function(TANH_C_SOURCE, "tanh_bwd", [ctypes.c_void_p] * 3 + [ctypes.c_long] * 2))
    fn = _tanh_bwd_c[0]
    n = x.size
    if dy.size != n or dx.size != n:
        raise ValueError(f"expected dy, x, dx of one size, got {dy.size}, {n}, {dx.size}")
    pdy, px, pdx = dy.ctypes.data, x.ctypes.data, dx.ctypes.data
    t = _parallel.workers() if n >= C_SPLIT_ELEMENTS else 1
    bounds = [n * i // t for i in range(t + 1)]
    return fn, [(pdy, px, pdx, lo, hi) for lo, hi in zip(bounds, bounds[1:])]


_C_BACKWARD = {"tanh": (use_c_tanh, tanh_backward_c)}
"""Activation name -> (rule, C backward) for the activations with a compiled backward."""
_C_BACKWARD_CALLS = {"tanh": tanh_backward_call}
"""Activation name -> the ready-call form of its C backward (prepared launches)."""


def _register(name: str, act: Activation) -> None:
    def fwd(x, y) -> None:
        apply_forward(act, x, y)

    def bwd(dy, x, dx) -> None:
        compiled = _C_BACKWARD.get(name)
        if compiled is not None and compiled[0](dy, x, dx):
            compiled[1](dy, x, dx)
            return
        apply_backward(act, dy, x, dx)

    def prepare_fwd(x, y) -> Callable[[], None] | None:
        """The prepared launch of the fp32 ufunc forward: :func:`._ufunc.unary_call` where
        :func:`apply_forward` splits; where it runs whole, the ufunc's own loop as one C piece
        (its bits; a job a replay group can run), else the ufunc itself; else None."""
        if act.ufunc is None or x.dtype != F32 or y.dtype != F32 or x.size != y.size \
                or not (x.flags.c_contiguous and y.flags.c_contiguous):
            return None
        xf, yf = flat(x), flat(y)
        call = _ufunc.unary_call(act.ufunc, xf, yf, C_SPLIT_ELEMENTS, whole=True)  # whole: NumPy's bits, as a C job
        if call is not None:
            return call
        if xf.size >= HALVES_SPLIT_ELEMENTS and _parallel.workers() > 1:
            return None  # _halves splits it on the Python threads
        return functools.partial(act.ufunc, xf, out=yf)

    def prepare_bwd(dy, x, dx) -> Callable[[], None] | None:
        """The prepared launch of a compiled backward (:data:`_C_BACKWARD`); else None."""
        compiled = _C_BACKWARD.get(name)
        if compiled is None or not compiled[0](dy, x, dx) or not dy.size == x.size == dx.size:
            return None
        return _C_BACKWARD_CALLS[name](dy, x, dx)

    fwd.__doc__ = (f"``y = {name}(x)`` element-wise (PyTorch semantics); any shape, fp32 or fp16. "
                   f"Also the inference op.")
    bwd.__doc__ = (f"``dx = dy * {name}'(x)``, the derivative recomputed from the forward input x; "
                   f"dx may be x's buffer (the seed writes dX over X).")
    kernel(f"{name}_fwd", writes=("y",), also=(f"{name}_inf",), prepare=prepare_fwd)(fwd)
    kernel(f"{name}_bwd", writes=("dx",), prepare=prepare_bwd)(bwd)


for _name, _act in ACTIVATIONS.items():
    _register(_name, _act)


HALVES_SPLIT_ELEMENTS = 1 << 20
"""Smallest array (elements) :func:`_halves` splits among the kernel threads (the fp32 ufunc
forwards such as tanh, and the NumPy ReLU of AMP and ``TR_MLIR_CC=0``). Its halves go to the
Python kernel threads (a NumPy ufunc cannot run on the C worker), whose hand-off costs tens of
microseconds and wakes a thread that then competes with the C worker's spin: the tanh forward
over 602,112 elements (LeNet-5's first activation at batch 128) took 0.098 ms on 1 thread and
0.104 ms split; 1,048,576: 0.181 and 0.118 ms (Zen 5 host, 2026-12-07). An fp16 ReLU over 524K
and 602K elements took the same time split or not."""


def _halves(size: int, fn) -> None:
    """``fn(lo, hi)`` over flat blocks, one per kernel thread for an array of at least
    :data:`HALVES_SPLIT_ELEMENTS` (whole-block NumPy calls, no temporaries)."""
    t = _parallel.workers() if size >= HALVES_SPLIT_ELEMENTS else 1
    bounds = [size * i // t for i in range(t + 1)]
    _parallel.run([lambda w=w: fn(bounds[w], bounds[w + 1]) for w in range(t)])


RELU_C_SOURCE = r"""
/* fp32 ReLU in one pass each way, the NumPy code's results to the bit: y = max(x, 0) with NaN
   kept (np.maximum propagates it) and -0 -> +0; mask = x > 0 (0 for NaN); dx = dy * mask as a
   product, so an Inf or NaN in dy still gives NaN where the mask is 0 (the NaN check sees it).
   relu_bwd_y is the backward from the output: dx = dy * (y > 0), the same product with the same
   factor, since y > 0 exactly where x > 0 (NaN and -0 give y NaN and +0, neither > 0).
   y may be x's buffer and dx dy's (each element is read before it is written). */
void relu_fwd(const float* x, float* y, signed char* m, long n0, long n1) {
#pragma GCC ivdep
  for (long e = n0; e < n1; e++) {
    const float v = x[e];
    m[e] = v > 0.0f;
    y[e] = v <= 0.0f ? 0.0f : v;
  }
}
void relu_fwd_y(const float* x, float* y, long n0, long n1) {
#pragma GCC ivdep
  for (long e = n0; e < n1; e++) {
    const float v = x[e];
    y[e] = v <= 0.0f ? 0.0f : v;
  }
}
void relu_bwd(const float* dy, const signed char* m, float* dx, long n0, long n1) {
#pragma GCC ivdep
  for (long e = n0; e < n1; e++) dx[e] = dy[e] * (float)m[e];
}
void relu_bwd_y(const float* dy, const float* y, float* dx, long n0, long n1) {
#pragma GCC ivdep
  for (long e = n0; e < n1; e++) dx[e] = dy[e] * (float)(y[e] > 0.0f);
}
"""
"""C source of the one-pass fp32 ReLU forward (y and mask, or y alone) and backward (``dx = dy *
mask``, or ``dx = dy * (y > 0)`` from the output)."""

_relu_c: dict = {}


def _relu_fn(name: str, *arrays: np.ndarray):
    """The compiled ``name`` of :data:`RELU_C_SOURCE` (one pointer per array, then the element
    range) when :func:`._cc.available` and the float arrays are fp32 (a mask INT8), all
    C-contiguous; else None (the NumPy code runs). In the MLP's step the pair went from 0.28 to
    ~0.1 ms (two NumPy passes and an int8 -> float product per call before)."""
    floats = [a for a in arrays if a.dtype != np.int8]
    if not (all(a.dtype == F32 for a in floats) and all(a.flags.c_contiguous for a in arrays)
            and len(arrays) - len(floats) <= 1 and _cc.available()):
        return None
    fn = _relu_c.get(name)
    if fn is None:
        argtypes = [ctypes.c_void_p] * len(arrays) + [ctypes.c_long] * 2
        fn = _relu_c[name] = _cc.function(RELU_C_SOURCE, name, argtypes)
    return fn


def _relu_c_call(fn, *arrays: np.ndarray) -> None:
    """``fn(*pointers, lo, hi)`` over element blocks, one per kernel thread for a large array
    (:func:`._parallel.run_c`)."""
    ptrs = [a.ctypes.data for a in arrays]
    size = arrays[0].size
    t = _parallel.workers() if size >= _parallel.MIN_SPLIT_ELEMENTS else 1
    bounds = [size * i // t for i in range(t + 1)]
    _parallel.run_c(fn, [(*ptrs, lo, hi) for lo, hi in zip(bounds, bounds[1:])])


def _same_size(what: str, *arrays: np.ndarray) -> None:
    if len({a.size for a in arrays}) != 1:
        raise ValueError(f"expected {what} of one size, got {', '.join(str(a.size) for a in arrays)}")


@kernel("relu_fwd", writes=("y", "mask"))
def relu_fwd(x, y, mask=None) -> None:
    """``y = max(x, 0)``, ``mask = (x > 0)`` as INT8 (same shape as x); ``mask`` None skips it
    (the plan keeps the output for the backward, :func:`relu_bwd_from_output`). Large arrays are
    split among the kernel threads. fp32: one compiled pass (:data:`RELU_C_SOURCE`) when
    available; y is the same with and without the mask."""
    xf, yf = flat(x), flat(y)
    mf = None if mask is None else flat(mask)
    _same_size("x, y, mask" if mf is not None else "x, y", xf, yf, *(() if mf is None else (mf,)))
    if mf is None:
        fn = _relu_fn("relu_fwd_y", xf, yf)
        if fn is not None:
            _relu_c_call(fn, xf, yf)
        else:
            _halves(xf.size, lambda lo, hi: np.maximum(xf[lo:hi], 0, out=yf[lo:hi]))
        return
    fn = _relu_fn("relu_fwd", xf, yf, mf)
    if fn is not None:
        _relu_c_call(fn, xf, yf, mf)
        return

    def block(lo: int, hi: int) -> None:
        np.greater(xf[lo:hi], 0, out=mf[lo:hi])
        np.maximum(xf[lo:hi], 0, out=yf[lo:hi])

    _halves(xf.size, block)


@kernel("relu_inf", writes=("y",))
def relu_inf(x, y, mask=None) -> None:
    """``y = max(x, 0)``; the mask (bound or not) is not written."""
    np.maximum(x, 0, out=y)


def _relu_backward(c_name: str, dy: np.ndarray, other: np.ndarray, dx: np.ndarray, what: str,
                   numpy_code: Callable[[np.ndarray, np.ndarray, np.ndarray], None]) -> None:
    """A ReLU backward over flat views ``(dy, mask or y, dx)``: the compiled ``c_name`` when
    :func:`_relu_fn` allows, else ``numpy_code(dy, other, dx)``."""
    dyf, of, dxf = flat(dy), flat(other), flat(dx)
    _same_size(what, dyf, of, dxf)
    fn = _relu_fn(c_name, dyf, of, dxf)
    if fn is not None:
        _relu_c_call(fn, dyf, of, dxf)
    else:
        numpy_code(dyf, of, dxf)


@kernel("relu_bwd", writes=("dx",))
def relu_bwd(dy, mask, dx) -> None:
    """``dx = dy * mask`` (the INT8 mask of ``relu_fwd``); dx may be dy's buffer. fp32: one
    compiled pass when available."""
    def numpy_code(dyf, mf, dxf):
        _halves(dxf.size, lambda lo, hi: np.multiply(dyf[lo:hi], mf[lo:hi], out=dxf[lo:hi]))

    _relu_backward("relu_bwd", dy, mask, dx, "dy, mask, dx", numpy_code)


@kernel("relu_bwd_from_output", writes=("dx",))
def relu_bwd_from_output(dy, y, dx) -> None:
    """``dx = dy * (y > 0)`` from the forward output ``y = relu(x)`` (PyTorch's
    ``threshold_backward(grad, result, 0)``): bit-identical to ``relu_bwd`` with the mask of x, as
    ``y > 0`` exactly where ``x > 0`` (NaN and -0 map to NaN and +-0, neither > 0) and the factor is
    the same 0 or 1 (so Inf * 0 is NaN as there). dx may be dy's or y's buffer. fp32: one compiled
    pass when available; else the product with a boolean chunk (:data:`._util.CHUNK` elements)."""
    def numpy_code(dyf, yf, dxf):
        _chunked(dxf.size, lambda sl: np.multiply(dyf[sl], np.greater(yf[sl], 0), out=dxf[sl]))

    _relu_backward("relu_bwd_y", dy, y, dx, "dy, y, dx", numpy_code)
