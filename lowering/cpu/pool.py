"""Pooling over NHWC: max pool (with an INT8 arg-max mask), average pool, global average pool.

Windows are k x k, stride s, padding p, floor mode (PyTorch's defaults). Max pool pads with
-inf; its mask holds the winning tap ``t = i*k + j`` of each output (the first maximum in
row-major order, as PyTorch), so k*k <= 127. Average pool counts padding
(``count_include_pad=True``, PyTorch's default): every window divides by k*k.

fp16 (AMP) arrays accumulate in fp32 workspaces (``acc``) wherever sums of several values are
formed; :meth:`KernelSpec.workspace_shapes` gives their sizes. The CUDA pooling kernels (one
thread per output or input element, :mod:`tr_mlir.lowering.cuda.sources`) use no workspace.

Speed: masked NumPy calls (``where=``) run an order of magnitude slower than plain ones, so the
mask is selected arithmetically (``mask += (t - mask) * eq`` in int8) and the backward of
non-overlapping windows (k <= s, the usual 2x2/2) writes ``dy * (mask == t)`` straight into each
tap's strided block of dx, with no fill where the windows tile the input exactly. Max pooling of
a large batch (:data:`._parallel.MIN_SPLIT_ELEMENTS`) is split by images among the kernel threads
(no temporaries: each thread uses its own rows of the ``eq`` workspace).

Compiled kernels: fp32 max and average pooling run as C kernels compiled for their shapes
(:mod:`._cpool`) whenever :func:`use_c` allows; every other case (fp16, no C compiler,
``TR_MLIR_CC=0``) runs the NumPy code below. Both give equal results (:mod:`._cpool` lists the
one difference: a non-finite dy in max pool backward).
"""

from __future__ import annotations

import numpy as np

from . import _cc, _cpool, _parallel
from ._util import F32, nhwc, take
from .registry import CUDA, ArrayInfo, kernel
from .window import Window, window


def use_c(k: int, floats: tuple[np.ndarray, ...], masks: tuple[np.ndarray, ...] = ()) -> bool:
    """Whether a pooling call runs the compiled kernel of :mod:`._cpool`: a usable C compiler
    (:func:`._cc.available`, so ``TR_MLIR_CC=0`` forces NumPy), every float array fp32, every
    mask INT8, all C-contiguous, and ``k*k <= 127`` (the INT8 mask).

    The one rule for max and average pooling, forward and backward, at any size: C was faster
    in every case measured. Project machine (2-core AMD EPYC Zen 4, shared, load 2-3), 2 kernel
    threads, ms, NumPy -> C. LeNet's step (best of 8 rounds alternating TR_MLIR_CC=0/1 in one
    process): 128x28x28x6 2x2/2 max pool forward 0.75-1.2 -> 0.15-0.19, backward 0.66 -> 0.09;
    128x10x10x16 forward 0.27 -> 0.056, backward 0.16 -> 0.026. Kernel calls (best of 30):
    average pool 128x28x28x6 0.53 -> 0.07 and 1.02 -> 0.25; 32x56x56x64 3x3/2 pad 1 max pool
    12-21 -> 3-5 and 80 -> 2.4-4.4; the small test geometries (2x7x6x3, 4x9x11x5, k/s/p
    3/2/1, 3/1/1, 3/3/1, 2/1/0) 0.01-0.11 -> 0.004-0.013.
    """
    if k * k > 127 or not _cc.available():
        return False
    return (all(a.dtype == F32 and a.flags.c_contiguous for a in floats)
            and all(m.dtype == np.int8 and m.flags.c_contiguous for m in masks))


def _by_images(n: int, size: int, fn) -> None:
    """``fn(lo, hi)`` over image blocks, one per kernel thread when ``size`` elements is large."""
    t = _parallel.workers() if size >= _parallel.MIN_SPLIT_ELEMENTS else 1
    t = max(1, min(t, n))
    bounds = [n * i // t for i in range(t + 1)]
    _parallel.run([lambda w=w: fn(bounds[w], bounds[w + 1]) for w in range(t)])


def _win(x_shape: tuple[int, ...], k: int, s: int, p: int, what: str) -> Window:
    _, h, w, _ = nhwc(tuple(x_shape), what)
    if 2 * p > k:
        raise ValueError(f"expected pool padding ({p}) <= k/2 ({k}/2)")
    return window(h, w, k, s, p)


def _check_out(y_shape: tuple[int, ...], x_shape: tuple[int, ...], win: Window) -> None:
    want = (x_shape[0], win.ho, win.wo, x_shape[3])
    if tuple(y_shape) != want:
        raise ValueError(f"expected pool output of shape {want}, got {tuple(y_shape)}")


def _prepare(name: str, x_shape: tuple[int, ...], y_shape: tuple[int, ...], arrays: tuple[np.ndarray, ...],
             mask: np.ndarray | None, k: int, s: int, p: int):
    """A pooling kernel's prepared launch (:class:`.registry.PreparedLaunch`): the compiled
    kernel ``name`` over ``arrays`` (:func:`._cpool.call`) where the kernel function would run it
    (input ``x_shape`` and output ``y_shape`` valid for the window, ``mask`` of ``y_shape``,
    :func:`use_c`); else None, and the kernel function runs and raises its own errors."""
    try:
        win = _win(x_shape, k, s, p, "pool input")
        _check_out(y_shape, x_shape, win)
    except ValueError:
        return None
    if mask is not None and mask.shape != tuple(y_shape):
        return None
    floats = tuple(a for a in arrays if a is not mask)
    if not use_c(k, floats, () if mask is None else (mask,)):
        return None
    return _cpool.call(name, *arrays, k=k, s=s, p=p)


def _prepare_maxpool_fwd(x, y, mask, eq, *, k: int, s: int, p: int = 0):
    return _prepare("maxpool_fwd", x.shape, y.shape, (x, y, mask), mask, k, s, p)


def _prepare_maxpool_bwd(dy, mask, dx, eq, acc=None, *, k: int, s: int, p: int = 0):
    return _prepare("maxpool_bwd", dx.shape, dy.shape, (dy, mask, dx), mask, k, s, p)


def _prepare_avgpool_fwd(x, y, acc=None, *, k: int, s: int, p: int = 0):
    return _prepare("avgpool_fwd", x.shape, y.shape, (x, y), None, k, s, p)


def _prepare_avgpool_bwd(dy, dx, acc=None, *, k: int, s: int, p: int = 0):
    return _prepare("avgpool_bwd", dx.shape, dy.shape, (dy, dx), None, k, s, p)


def ws_maxpool_fwd(arrays: dict[str, ArrayInfo], *, k: int, s: int, p: int = 0) -> dict[str, ArrayInfo]:
    n = int(np.prod(arrays["y"][0], dtype=np.int64))
    return {"eq": ((2 * n,), np.dtype(bool))}  # the comparison and an int8 scratch


def _ws_maxpool_bwd(arrays: dict[str, ArrayInfo], *, k: int, s: int, p: int = 0) -> dict[str, ArrayInfo]:
    out = {"eq": (arrays["dy"][0], np.dtype(bool))}
    if arrays["dx"][1] != F32 and k > s:
        out["acc"] = (arrays["dx"][0], F32)
    return out


@kernel("maxpool_fwd", writes=("y", "mask"), workspaces=("eq",), workspace_fn=ws_maxpool_fwd,
        target_workspace_fns={CUDA: None}, also=("maxpool_inf",), prepare=_prepare_maxpool_fwd)
def maxpool_fwd(x, y, mask, eq, *, k: int, s: int, p: int = 0) -> None:
    """Max pool: ``y`` (N, Ho, Wo, C) and ``mask`` (same shape, INT8 winning tap index).

    ``eq``: bool workspace of twice y's size. NaN propagates as in PyTorch.
    """
    win = _win(x.shape, k, s, p, "maxpool input")
    _check_out(y.shape, x.shape, win)
    if mask.shape != y.shape:
        raise ValueError(f"expected a maxpool mask of shape {tuple(y.shape)}, got {tuple(mask.shape)}")
    if use_c(k, (x, y), (mask,)):
        _cpool.maxpool_fwd(x, y, mask, k, s, p)
        return
    both = take(eq, (2 * y.size,), np.dtype(bool))
    e_all = both[:y.size].reshape(y.shape)
    d_all = both[y.size:].view(np.int8).reshape(y.shape)
    taps = [t for t in win.taps if not t.empty]
    full = taps[0].oh == slice(0, win.ho) and taps[0].ow == slice(0, win.wo)

    def block(lo: int, hi: int) -> None:
        xb, yb, mb, e, d = x[lo:hi], y[lo:hi], mask[lo:hi], e_all[lo:hi], d_all[lo:hi]
        if full:  # the first tap covers every output: start from it
            np.copyto(yb, xb[:, taps[0].ih, taps[0].iw, :], casting="same_kind")
        else:
            yb.fill(-np.inf)
        for tap in taps[1:] if full else taps:
            yv = yb[:, tap.oh, tap.ow, :]
            np.maximum(yv, xb[:, tap.ih, tap.iw, :], out=yv)
        mb.fill(0)
        for tap in reversed(taps):  # the first maximum in row-major order wins: written last
            sl = (slice(None), tap.oh, tap.ow, slice(None))
            ev, dv, mv = e[sl], d[sl], mb[sl]
            np.equal(xb[:, tap.ih, tap.iw, :], yb[sl], out=ev)
            np.subtract(tap.t, mv, out=dv, casting="unsafe")
            np.multiply(dv, ev, out=dv)
            np.add(mv, dv, out=mv)

    _by_images(x.shape[0], x.size, block)


@kernel("maxpool_bwd", writes=("dx",), workspaces=("eq", "acc"), workspace_fn=_ws_maxpool_bwd,
        target_workspace_fns={CUDA: None}, prepare=_prepare_maxpool_bwd)
def maxpool_bwd(dy, mask, dx, eq, acc=None, *, k: int, s: int, p: int = 0) -> None:
    """Max pool backward: each dy goes to its window's winning input (``mask``); dx is
    overwritten and may be x's buffer. ``acc``: fp32 accumulator, needed for fp16 dx when windows
    overlap (k > s)."""
    win = _win(dx.shape, k, s, p, "maxpool input")
    _check_out(dy.shape, dx.shape, win)
    if mask.shape != dy.shape:
        raise ValueError(f"expected a maxpool mask of shape {tuple(dy.shape)}, got {tuple(mask.shape)}")
    if use_c(k, (dy, dx), (mask,)):
        _cpool.maxpool_bwd(dy, mask, dx, k, s, p)
        return
    e = take(eq, dy.shape, np.dtype(bool))
    if not win.overlapping:  # each input element is in at most one window (module doc)
        tiled = p == 0 and k == s and win.ho * s == win.h and win.wo * s == win.w

        def block(lo: int, hi: int) -> None:
            dxb, eb, mb, dyb = dx[lo:hi], e[lo:hi], mask[lo:hi], dy[lo:hi]
            if not tiled:
                dxb.fill(0)
            for tap in win.taps:
                if tap.empty:
                    continue
                ev = eb[:, tap.oh, tap.ow, :]
                np.equal(mb[:, tap.oh, tap.ow, :], tap.t, out=ev)
                np.multiply(dyb[:, tap.oh, tap.ow, :], ev, out=dxb[:, tap.ih, tap.iw, :], casting="same_kind")

        _by_images(dx.shape[0], dx.size, block)
        return
    a = dx if dx.dtype == F32 else take(acc, dx.shape)
    a.fill(0)
    for tap in win.taps:
        if tap.empty:
            continue
        ev = e[:, tap.oh, tap.ow, :]
        np.equal(mask[:, tap.oh, tap.ow, :], tap.t, out=ev)
        av = a[:, tap.ih, tap.iw, :]
        np.add(av, dy[:, tap.oh, tap.ow, :], out=av, where=ev)
    if a is not dx:
        np.copyto(dx, a, casting="same_kind")


def _ws_avg(arrays: dict[str, ArrayInfo], name: str) -> dict[str, ArrayInfo]:
    shape, dtype = arrays[name]
    return {"acc": (shape, F32)} if dtype != F32 else {}


@kernel("avgpool_fwd", writes=("y",), workspaces=("acc",), also=("avgpool_inf",),
        workspace_fn=lambda arrays, **_: _ws_avg(arrays, "y"), target_workspace_fns={CUDA: None},
        prepare=_prepare_avgpool_fwd)
def avgpool_fwd(x, y, acc=None, *, k: int, s: int, p: int = 0) -> None:
    """Average pool (padding counted: divide by k*k); ``acc`` fp32 for fp16 y."""
    win = _win(x.shape, k, s, p, "avgpool input")
    _check_out(y.shape, x.shape, win)
    if use_c(k, (x, y)):
        _cpool.avgpool_fwd(x, y, k, s, p)
        return
    a = y if y.dtype == F32 else take(acc, y.shape)
    a.fill(0)
    for tap in win.taps:
        if not tap.empty:
            av = a[:, tap.oh, tap.ow, :]
            np.add(av, x[:, tap.ih, tap.iw, :], out=av)
    a *= 1.0 / (k * k)
    if a is not y:
        np.copyto(y, a, casting="same_kind")


@kernel("avgpool_bwd", writes=("dx",), workspaces=("acc",),
        workspace_fn=lambda arrays, **_: _ws_avg(arrays, "dx"), target_workspace_fns={CUDA: None},
        prepare=_prepare_avgpool_bwd)
def avgpool_bwd(dy, dx, acc=None, *, k: int, s: int, p: int = 0) -> None:
    """Average pool backward: ``dx`` (overwritten, may be x's buffer) gets dy / (k*k) from every
    window covering it; ``acc`` fp32 for fp16 dx."""
    win = _win(dx.shape, k, s, p, "avgpool input")
    _check_out(dy.shape, dx.shape, win)
    if use_c(k, (dy, dx)):
        _cpool.avgpool_bwd(dy, dx, k, s, p)
        return
    a = dx if dx.dtype == F32 else take(acc, dx.shape)
    a.fill(0)
    for tap in win.taps:
        if not tap.empty:
            av = a[:, tap.ih, tap.iw, :]
            np.add(av, dy[:, tap.oh, tap.ow, :], out=av)
    a *= 1.0 / (k * k)
    if a is not dx:
        np.copyto(dx, a, casting="same_kind")


def gap_forward(x: np.ndarray, y: np.ndarray) -> None:
    """``y[n, 0, 0, c] = mean over H, W of x[n, :, :, c]`` (fp32 accumulation)."""
    n, h, w, c = nhwc(x.shape, "gap input")
    if y.size != n * c:
        raise ValueError(f"expected gap output of shape ({n}, 1, 1, {c}), got {y.shape}")
    y2 = y.reshape(n, c)
    if y.dtype == F32:
        np.add.reduce(x.reshape(n, h * w, c), axis=1, dtype=F32, out=y2)
        np.multiply(y2, 1.0 / (h * w), out=y2)
    else:  # fp16: sum in fp32 (an (N, C) temporary, 1/(H*W) of x), round once
        t = np.add.reduce(x.reshape(n, h * w, c), axis=1, dtype=F32)
        np.multiply(t, 1.0 / (h * w), out=y2, casting="same_kind")


def gap_backward(dy: np.ndarray, dx: np.ndarray) -> None:
    """``dx[n, h, w, c] = dy[n, c] / (H*W)``; dx is overwritten."""
    n, h, w, c = nhwc(dx.shape, "gap input")
    np.multiply(dy.reshape(n, 1, c), 1.0 / (h * w), out=dx.reshape(n, h * w, c), casting="same_kind")


@kernel("gap_fwd", writes=("y",), also=("gap_inf",))
def gap_fwd(x, y) -> None:
    """Global average pool: x (N, H, W, C) -> y (N, 1, 1, C)."""
    gap_forward(x, y)


@kernel("gap_bwd", writes=("dx",))
def gap_bwd(dy, dx) -> None:
    """Global average pool backward: dy (N, 1, 1, C) -> dx (N, H, W, C), overwritten."""
    gap_backward(dy, dx)
