"""Element-wise activations (PyTorch defaults), one table entry each: the function and its
derivative as functions of the forward **input** x.

Backward kernels recompute the derivative from x (the seed's ``dX`` is written over X, and dY
over Y, so Y is gone by then): ``dx = dy * f'(x)``, written chunk by chunk, so ``dx`` may be x's
own buffer (or dy's). Math runs in fp32 on chunks of :data:`._util.CHUNK` elements, so fp16 (AMP)
arrays are rounded once and no temporary of activation size exists.

ReLU keeps the seed's INT8 mask (``mask = x > 0``): ``relu_bwd`` reads only dy and the mask.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from . import _parallel
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
    """``f(x)`` and ``f'(x)`` on fp32 chunks (PyTorch's values, including at the kinks)."""

    f: Fn
    df: Fn


ACTIVATIONS: dict[str, Activation] = {
    "tanh": Activation(np.tanh, lambda x: 1.0 - np.square(np.tanh(x))),
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
    """``y = f(x)`` chunk by chunk; ``y`` may be ``x``'s buffer."""
    xf, yf = flat(x), flat(y)

    def one(sl: slice) -> None:
        yf[sl] = act.f(xf[sl].astype(F32, copy=False))

    _chunked(xf.size, one)


def apply_backward(act: Activation, dy: np.ndarray, x: np.ndarray, dx: np.ndarray) -> None:
    """``dx = dy * f'(x)`` chunk by chunk; ``dx`` may be ``x``'s or ``dy``'s buffer."""
    xf, dyf, dxf = flat(x), flat(dy), flat(dx)

    def one(sl: slice) -> None:
        g = act.df(xf[sl].astype(F32, copy=False))
        g *= dyf[sl]
        dxf[sl] = g

    _chunked(xf.size, one)


def _register(name: str, act: Activation) -> None:
    def fwd(x, y) -> None:
        apply_forward(act, x, y)

    def bwd(dy, x, dx) -> None:
        apply_backward(act, dy, x, dx)

    fwd.__doc__ = (f"``y = {name}(x)`` element-wise (PyTorch semantics); any shape, fp32 or fp16. "
                   f"Also the inference op.")
    bwd.__doc__ = (f"``dx = dy * {name}'(x)``, the derivative recomputed from the forward input x; "
                   f"dx may be x's buffer (the seed writes dX over X).")
    kernel(f"{name}_fwd", writes=("y",), also=(f"{name}_inf",))(fwd)
    kernel(f"{name}_bwd", writes=("dx",))(bwd)


for _name, _act in ACTIVATIONS.items():
    _register(_name, _act)


def _halves(size: int, fn) -> None:
    """``fn(lo, hi)`` over flat blocks, one per kernel thread for a large array (whole-block
    NumPy calls, no temporaries)."""
    t = _parallel.workers() if size >= _parallel.MIN_SPLIT_ELEMENTS else 1
    bounds = [size * i // t for i in range(t + 1)]
    _parallel.run([lambda w=w: fn(bounds[w], bounds[w + 1]) for w in range(t)])


@kernel("relu_fwd", writes=("y", "mask"))
def relu_fwd(x, y, mask) -> None:
    """``y = max(x, 0)``, ``mask = (x > 0)`` as INT8 (same shape as x); large arrays are split
    among the kernel threads."""
    xf, yf, mf = flat(x), flat(y), flat(mask)

    def block(lo: int, hi: int) -> None:
        np.greater(xf[lo:hi], 0, out=mf[lo:hi])
        np.maximum(xf[lo:hi], 0, out=yf[lo:hi])

    _halves(xf.size, block)


@kernel("relu_inf", writes=("y",))
def relu_inf(x, y, mask=None) -> None:
    """``y = max(x, 0)``; the mask (bound or not) is not written."""
    np.maximum(x, 0, out=y)


@kernel("relu_bwd", writes=("dx",))
def relu_bwd(dy, mask, dx) -> None:
    """``dx = dy * mask`` (the INT8 mask of ``relu_fwd``); dx may be dy's buffer."""
    dyf, mf, dxf = flat(dy), flat(mask), flat(dx)
    _halves(dxf.size, lambda lo, hi: np.multiply(dyf[lo:hi], mf[lo:hi], out=dxf[lo:hi]))
