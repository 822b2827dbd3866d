"""Fully connected layers, reshapes (flatten, channel padding), residual add and plain copies.

FC: x (N, H, W, C) read as the (N, H*W*C) NHWC-flattened matrix, weight (out, H*W*C) (any
shape of that size, e.g. the seed's (out, 1, 1, F)), optional bias (out), y (N, 1, 1, out):
``y = x @ w.T + b``. fp16 operands (AMP) are cast into fp32 workspaces (``xbuf``, ``wbuf``,
``ybuf``) for the GEMM; results are rounded once.
"""

from __future__ import annotations

import numpy as np

from . import _parallel
from ._util import F32, as32, chunks, copy_into, finish, flat, out32, scalar
from .registry import ArrayInfo, kernel


def _fc_dims(x_shape: tuple[int, ...], w_shape: tuple[int, ...]) -> tuple[int, int, int]:
    n = int(x_shape[0])
    f = int(np.prod(x_shape[1:], dtype=np.int64))
    o = int(w_shape[0])
    if int(np.prod(w_shape, dtype=np.int64)) != o * f:
        raise ValueError(f"expected fc weight of {o} x {f} (out x H*W*C of input {tuple(x_shape)}), "
                         f"got shape {tuple(w_shape)}")
    return n, f, o


def _ws_fc(arrays: dict[str, ArrayInfo], **_: object) -> dict[str, ArrayInfo]:
    xs, ws = arrays["x"][0], arrays["w"][0]
    n, f, o = _fc_dims(xs, ws)
    half = {k for k, (_, d) in arrays.items() if d != F32}
    out: dict[str, ArrayInfo] = {}
    if half & {"x", "dx"}:
        out["xbuf"] = ((n * f,), F32)
    if half & {"w", "dw"}:
        out["wbuf"] = ((o * f,), F32)
    if half & {"y", "dy"}:
        out["ybuf"] = ((n * o,), F32)
    return out


def fc_forward(x, w, b, y, ws: dict[str, np.ndarray]) -> None:
    """``y = x @ w.T (+ b)`` (see the module doc)."""
    n, f, o = _fc_dims(x.shape, w.shape)
    if y.size != n * o:
        raise ValueError(f"expected fc output of {n} x {o} elements, got shape {y.shape}")
    x2, w2, y2 = as32(x, ws, "xbuf", (n, f)), as32(w, ws, "wbuf", (o, f)), out32(y, ws, "ybuf", (n, o))
    _parallel.matmul(x2, w2.T, out=y2)
    if b is not None:
        y2 += b.reshape(o)
    finish(y, y2)


def fc_backward(dy, w, x, dw, db, dx, ws: dict[str, np.ndarray]) -> None:
    """dw = dy.T @ x, db = sum(dy), then dx = dy @ w (dx may be x's buffer; None: skipped)."""
    n, f, o = _fc_dims(x.shape, w.shape)
    dy2 = as32(dy, ws, "ybuf", (n, o))
    x2 = as32(x, ws, "xbuf", (n, f))
    dw2 = out32(dw, ws, "wbuf", (o, f))
    _parallel.matmul(dy2.T, x2, out=dw2)
    finish(dw, dw2)
    if db is not None:
        np.add.reduce(dy2, axis=0, out=db.reshape(o))
    if dx is not None:
        w2 = as32(w, ws, "wbuf", (o, f))
        dx2 = out32(dx, ws, "xbuf", (n, f))
        _parallel.matmul(dy2, w2, out=dx2)
        finish(dx, dx2)


@kernel("fc_fwd", writes=("y",), workspaces=("xbuf", "wbuf", "ybuf"), workspace_fn=_ws_fc, also=("fc_inf",))
def fc_fwd(x, w, y, b=None, xbuf=None, wbuf=None, ybuf=None) -> None:
    """Fully connected forward: ``y = x_flat @ w.T + b`` (b None: no bias)."""
    fc_forward(x, w, b, y, {k: v for k, v in (("xbuf", xbuf), ("wbuf", wbuf), ("ybuf", ybuf)) if v is not None})


@kernel("fc_bwd", writes=("dx", "dw", "db"), workspaces=("xbuf", "wbuf", "ybuf"), workspace_fn=_ws_fc,
        also=("fc_bwd_first_layer",))
def fc_bwd(dy, w, x, dw, db=None, dx=None, xbuf=None, wbuf=None, ybuf=None) -> None:
    """Fully connected backward: dw (out, F) and db (out) overwritten, then dx (may be x's
    buffer; None skips it, e.g. when x is the model input). dw, db fp32 even in AMP."""
    fc_backward(dy, w, x, dw, db, dx,
                {k: v for k, v in (("xbuf", xbuf), ("wbuf", wbuf), ("ybuf", ybuf)) if v is not None})


@kernel("flatten_fwd", writes=("y",), also=("flatten_inf",))
def flatten_fwd(x, y) -> None:
    """(N, H, W, C) -> (N, 1, 1, H*W*C) in NHWC order: a copy, skipped when y is x's buffer."""
    copy_into(y, x)


@kernel("flatten_bwd", writes=("dx",))
def flatten_bwd(dy, dx) -> None:
    """dx = dy reshaped back (a copy, skipped when they share a buffer)."""
    copy_into(dx, dy)


@kernel("noop", writes=(), also=("flatten_bwd_first_layer", "channel_padding_bwd_first_layer"))
def noop() -> None:
    """Nothing to do (the backward of a reshape of the model input: no gradient is wanted)."""


@kernel("channel_padding_fwd", writes=("y",), also=("channel_padding_inf",))
def channel_padding_fwd(x, y) -> None:
    """Zero-pad channels at the tail: y[..., :C] = x, y[..., C:] = 0."""
    c = x.shape[-1]
    y[..., :c] = x
    y[..., c:] = 0


@kernel("channel_padding_bwd", writes=("dx",))
def channel_padding_bwd(dy, dx) -> None:
    """Drop the padded channels: dx = dy[..., :C]."""
    dx[...] = dy[..., : dx.shape[-1]]


@kernel("add_fwd", writes=("y",))
def add_fwd(a, b, y) -> None:
    """Residual join ``y = a + b`` (same shapes); y may be a's or b's buffer."""
    np.add(a, b, out=y)


@kernel("add_bwd", writes=("da", "db"))
def add_bwd(dy, da=None, db=None) -> None:
    """Gradient of ``a + b``: ``da = dy`` and ``db = dy`` (copies, skipped where the gradient
    slot is dy's own buffer; None: that operand needs no gradient)."""
    for d in (da, db):
        if d is not None:
            copy_into(d, dy)


@kernel("add_bwd_acc", writes=("da", "db"))
def add_bwd_acc(dy, da=None, db=None) -> None:
    """Gradient of ``a + b`` accumulated: ``da += dy``, ``db += dy`` (slots summing several uses)."""
    for d in (da, db):
        if d is not None:
            np.add(d, dy, out=d, casting="same_kind")


@kernel("grad_acc", writes=("dx",), also=("grad_accum",))
def grad_acc(dy, dx) -> None:
    """``dx += dy``: add one use's gradient into a value's gradient slot."""
    np.add(dx, dy, out=dx, casting="same_kind")


@kernel("identity_fwd", writes=("y",), also=("identity_bwd", "identity_inf", "dtensor_copy", "dropout_inf"))
def identity_fwd(x, y) -> None:
    """``y = x`` (copy with cast, skipped when y is x's buffer). Also ``dtensor_copy`` (labels)
    and ``dropout_inf`` (dropout is the identity at inference)."""
    copy_into(y, x)


@kernel("axpy_fwd", writes=("y",))
def axpy_fwd(x, y, a) -> None:
    """``y += a * x`` (``a`` a scalar operand), in chunks."""
    alpha = scalar(a)
    xf, yf = flat(x), flat(y)
    for sl in chunks(xf.size):
        yf[sl] += alpha * xf[sl].astype(F32, copy=False)


