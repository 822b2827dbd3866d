"""Fully connected layers, reshapes (flatten, channel padding), residual add and plain copies.

FC: x (N, H, W, C) read as the (N, H*W*C) NHWC-flattened matrix, weight (out, H*W*C) (any
shape of that size, e.g. the seed's (out, 1, 1, F)), optional bias (out), y (N, 1, 1, out):
``y = x @ w.T + b``. fp16 operands (AMP) are cast into fp32 workspaces (``xbuf``, ``wbuf``,
``ybuf``) for the GEMM; results are rounded once. In fp32 the backward asks for ``xbuf`` too
(:func:`concurrent_backward`): dx is computed there while dw still reads x, when the planner
gave dx x's buffer, then copied.

Threads (:mod:`._parallel`): the forward GEMM is split in two column blocks, each thread adding
the bias to its block; the backward runs dw (with the db sums) and dx at the same time, one per
thread, or splits dw alone (the first layer) in row blocks each with its db sums. The C worker
of :mod:`._parallel` runs the second thread's part when it is there. Every strategy gives the
same bits as the serial code (tests/test_kernels_parallel.py).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from . import _parallel
from ._util import F32, as32, chunks, copy_into, finish, flat, out32, scalar
from .registry import ArrayInfo, kernel


def _fc_dims(x_shape: tuple[int, ...], w_shape: tuple[int, ...]) -> tuple[int, int, int]:
    n = int(x_shape[0])
    f = math.prod(int(d) for d in x_shape[1:])  # math.prod: ~20x cheaper than np.prod on a tuple
    o = int(w_shape[0])
    if math.prod(int(d) for d in w_shape) != o * f:
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
    if "dx" in arrays and not half and concurrent_backward(n, f, o):
        out["xbuf"] = ((n * f,), F32)  # dx while x is still read, when dx is x's buffer
    return out


def concurrent_backward(n: int, f: int, o: int) -> bool:
    """Whether an fp32 FC backward of batch ``n``, ``f`` inputs and ``o`` outputs computes
    dw = dy.T @ x and dx = dy @ w at the same time, one GEMM per kernel thread, instead of one
    GEMM after the other, each split across the threads: when each GEMM is large enough to
    split (:data:`._parallel.MIN_SPLIT_FLOPS`). Measured on 2 threads (best of 30, MLP shapes,
    n = 200): f x o = 784 x 1024: 3.34 ms vs 3.54 split, 1024 x 512: 2.43 vs 2.60, 512 x 256:
    0.58 vs 0.69; in the whole MLP step under load the median step fell by 1.1 ms (fewer
    hand-offs and barriers). A static rule on the shapes, and both ways compute every element
    with the same OpenBLAS call over the whole ``k``, so the result is the same bits."""
    return 2.0 * n * f * o >= _parallel.MIN_SPLIT_FLOPS and min(n, f, o) >= 2


def fc_forward(x, w, b, y, ws: dict[str, np.ndarray]) -> None:
    """``y = x @ w.T (+ b)`` (see the module doc). The GEMM is split across the kernel threads
    (:func:`._parallel.matmul`); each thread adds the bias to the block it computed."""
    n, f, o = _fc_dims(x.shape, w.shape)
    if y.size != n * o:
        raise ValueError(f"expected fc output of {n} x {o} elements, got shape {y.shape}")
    x2, w2, y2 = as32(x, ws, "xbuf", (n, f)), as32(w, ws, "wbuf", (o, f)), out32(y, ws, "ybuf", (n, o))
    _parallel.matmul(x2, w2.T, out=y2, bias=None if b is None else b.reshape(o))
    finish(y, y2)


def fc_backward(dy, w, x, dw, db, dx, ws: dict[str, np.ndarray]) -> None:
    """dw = dy.T @ x, db = sum(dy), then dx = dy @ w (dx may be x's buffer; None: skipped).

    fp32 with dx wanted and :func:`concurrent_backward`: dw (and db) on one kernel thread while
    dx is computed on the other, into dx itself, or into workspace ``xbuf`` and then copied
    when dx shares memory with x (without ``xbuf``, as below). Otherwise each GEMM is split
    across the kernel threads (:func:`._parallel.matmul`) and the thread that computed rows
    ``r`` of dw also sums ``db[r]``. db is always the column sums of dy over the batch in
    order (one ``np.add.reduce`` over axis 0 or its column blocks: the same sums)."""
    n, f, o = _fc_dims(x.shape, w.shape)
    if dx is not None and _backward_concurrently(dy, w, x, dw, db, dx, ws, n, f, o):
        return
    dy2 = as32(dy, ws, "ybuf", (n, o))
    x2 = as32(x, ws, "xbuf", (n, f))
    dw2 = out32(dw, ws, "wbuf", (o, f))
    db2 = None if db is None else db.reshape(o)
    if not _weight_grad_c(dy2, x2, dw2, db2, n, f, o):
        _parallel.matmul(dy2.T, x2, out=dw2, epilogue=None if db2 is None else _db_epilogue(dy2, db2))
    finish(dw, dw2)
    if dx is not None:
        w2 = as32(w, ws, "wbuf", (o, f))
        dx2 = out32(dx, ws, "xbuf", (n, f))
        _parallel.matmul(dy2, w2, out=dx2)
        finish(dx, dx2)


def _weight_grad_jobs(dy2: np.ndarray, x2: np.ndarray, dw2: np.ndarray, db2: np.ndarray | None, axis: int,
                      count: int) -> tuple | None:
    """C jobs for dw = dy.T @ x and db in ``count`` blocks along ``axis``: row blocks of dw
    each with the db sums of its rows, or column blocks with db in the first (None: a layout
    the C worker cannot take)."""
    size = dw2.shape[axis]
    jobs = []
    for lo, hi in _parallel.blocks(size, count):
        s = slice(lo, hi)
        if axis == -2:
            jobs.append(_parallel.gemm_job(dy2.T[s], x2, dw2[s], sum_src=None if db2 is None else dy2[:, s],
                                           sum_dst=None if db2 is None else db2[s]))
        else:
            first = lo == 0 and db2 is not None
            jobs.append(_parallel.gemm_job(dy2.T, x2[:, s], dw2[:, s], sum_src=dy2 if first else None,
                                           sum_dst=db2 if first else None))
    return None if None in jobs else tuple(jobs)


def _weight_grad_c(dy2: np.ndarray, x2: np.ndarray, dw2: np.ndarray, db2: np.ndarray | None,
                   n: int, f: int, o: int) -> bool:
    """dw = dy.T @ x and db split across this thread and the C worker
    (:func:`._parallel.run_jobs`), as :func:`._parallel.matmul` splits it (:func:`_weight_grad_jobs`).
    False (nothing done) when the split does not apply."""
    flops = 2.0 * n * f * o
    axis = _parallel.split_axis(o, f)
    size = o if axis == -2 else f
    t = _parallel.workers()
    if (t != 2 or flops < _parallel.MIN_SPLIT_FLOPS or size < 2 * t or db2 is not None and db2.dtype != F32
            or not _parallel.c_gemm()):
        return False
    count = _parallel.gemm_blocks(flops, size, t)
    jobs = _parallel.cached_jobs(("dw", axis, count) + _parallel.array_key(dy2, x2, dw2, db2),
                                 lambda: _weight_grad_jobs(dy2, x2, dw2, db2, axis, count))
    if jobs is None:
        return False
    if count > t:
        _parallel.note_dynamic_call()
        _parallel.run_jobs(*jobs)
    else:
        _parallel.note_split(_parallel.run_jobs(*jobs))
    return True


def _db_epilogue(dy2: np.ndarray, db: np.ndarray):
    """The epilogue of a dw block (rows, cols): ``db[rows]`` = column sums of ``dy2[:, rows]``,
    by the block holding column 0 of dw (so once per row block)."""
    def epilogue(rows: slice, cols: slice) -> None:
        if cols.start is None or cols.start == 0:
            np.add.reduce(dy2[:, rows], axis=0, out=db[rows])
    return epilogue


def _backward_concurrently(dy, w, x, dw, db, dx, ws, n: int, f: int, o: int) -> bool:
    """The concurrent fp32 path of :func:`fc_backward`; False (nothing done) when it does not apply."""
    arrays = (dy, w, x, dw, dx) if db is None else (dy, w, x, dw, db, dx)
    if any(a.dtype != F32 for a in arrays) or not concurrent_backward(n, f, o) or _parallel.workers() < 2:
        return False
    dy2, w2, x2, dw2, dx2 = dy.reshape(n, o), w.reshape(o, f), x.reshape(n, f), dw.reshape(o, f), dx.reshape(n, f)
    writes = (dw2,) if db is None else (dw2, db)
    if any(np.may_share_memory(a, b) for a in writes for b in (dy2, w2, x2, dx2)) or \
            np.may_share_memory(dx2, dy2) or np.may_share_memory(dx2, w2):
        return False
    target = dx2
    if np.may_share_memory(dx2, x2):
        buf = ws.get("xbuf")
        if buf is None or buf.size < n * f or buf.dtype != F32 or np.may_share_memory(buf, x2):
            return False
        target = buf[:n * f].reshape(n, f)

    db2 = None if db is None else db.reshape(o)
    per = 1  # blocks per GEMM (one thread's share); two while the threads run unequally fast
    if _parallel.contended() and 2.0 * n * f * o >= _parallel.BLOCK_FLOPS:
        per = 2
        _parallel.note_dynamic_call()
    dw_axis, dx_axis = _parallel.split_axis(o, f), _parallel.split_axis(n, f)
    dw_count, dx_count = min(per, max(o, f) // 2), min(per, max(n, f) // 2)
    if _parallel.c_gemm():  # the jobs on this thread and the C worker (no Python hand-off)
        def make():
            dws = _weight_grad_jobs(dy2, x2, dw2, db2, dw_axis, dw_count)
            dxs = _parallel._split_jobs(dy2, w2, target, dx_axis, None, dx_count)
            if dws is None or dxs is None:
                return None
            return tuple(j for pair in itertools.zip_longest(dws, dxs) for j in pair if j is not None)

        jobs = _parallel.cached_jobs(("fc_bwd", per) + _parallel.array_key(dy2, x2, dw2, db2, w2, target), make)
        if jobs is not None:
            _parallel.run_jobs(*jobs)
            if target is not dx2:
                np.copyto(dx2, target)
            return True
    epilogue = None if db2 is None else _db_epilogue(dy2, db2)
    dws = _parallel.matmul_tasks(dy2.T, x2, dw2, dw_axis, dw_count, epilogue)
    dxs = _parallel.matmul_tasks(dy2, w2, target, dx_axis, dx_count)
    _parallel.run_dynamic([t for pair in itertools.zip_longest(dws, dxs) for t in pair if t is not None])
    if target is not dx2:
        np.copyto(dx2, target)
    return True


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


