"""Fully connected layers, reshapes (flatten, channel padding), residual add and plain copies.

FC: x (N, H, W, C) read as the (N, H*W*C) NHWC-flattened matrix, weight (out, H*W*C) (any
shape of that size, e.g. the seed's (out, 1, 1, F)), optional bias (out), y (N, 1, 1, out):
``y = x @ w.T + b``. fp16 operands (AMP) are cast into fp32 workspaces (``xbuf``, ``wbuf``,
``ybuf``) for the GEMM; results are rounded once. (The CUDA GEMM reads fp16 in place: no workspace.)

Threads (:mod:`._parallel`): the forward GEMM is split in two column blocks, each thread adding
the bias to its block; the backward gives each thread a column block of dw and then the same
columns of dx (safe when dx is x's buffer), or splits dw alone (the first layer) in row blocks
each with its db sums. The C worker
of :mod:`._parallel` runs the second thread's part when it is there. GEMMs of at least
:data:`._parallel.MIN_SPLIT_FLOPS` use the kernels' own OpenBLAS instance when there is one
(:func:`._parallel.own_blas`: results agree with NumPy's to float rounding); the blocks are then
fixed by the shapes. With NumPy's OpenBLAS, the cuts are those that keep its bits
(:func:`._gemm_bits.numpy_cut_align`: where only row cuts at multiples of 24 do, no column
blocks and no one-section backward). Every strategy gives the same bits on one or two threads,
contended or not (tests/test_kernels_parallel.py).
"""

from __future__ import annotations

import ctypes
import functools
import math

import numpy as np

from . import _cc, _gemm_bits, _parallel, _prepared
from .activation import relu_bwd_from_output, relu_fwd
from ._util import F32, as32, chunks, copy_into, finish, flat, out32, same_memory, scalar
from .registry import CUDA, ArrayInfo, kernel


def _fc_dims(x_shape: tuple[int, ...], w_shape: tuple[int, ...]) -> tuple[int, int, int]:
    n = int(x_shape[0])
    f = math.prod(int(d) for d in x_shape[1:])  # math.prod: ~20x cheaper than np.prod on a tuple
    o = int(w_shape[0])
    if math.prod(int(d) for d in w_shape) != o * f:
        raise ValueError(f"expected fc weight of {o} x {f} (out x H*W*C of input {tuple(x_shape)}), "
                         f"got shape {tuple(w_shape)}")
    return n, f, o


def ws_fc(arrays: dict[str, ArrayInfo], **_: object) -> dict[str, ArrayInfo]:
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


def concurrent_backward(n: int, f: int, o: int, own: bool = False) -> bool:
    """Whether an fp32 FC backward of batch ``n``, ``f`` inputs and ``o`` outputs runs as one
    parallel section, each thread computing a column block of dw and then the same columns of
    dx (:func:`_backward_concurrently`), instead of one split GEMM after the other: when each
    GEMM is large enough to split (:data:`._parallel.MIN_SPLIT_FLOPS`). One hand-off instead of
    two, no wait between the GEMMs. (Measured first with dw and dx one per thread on Python
    threads, n = 200: f x o = 1024 x 512: 2.43 ms vs 2.60 split; under load the MLP step fell
    by 1.1 ms.) A static rule on the shapes; every way computes each element with the same
    OpenBLAS call over the whole ``k``, so the result is the same bits: NumPy's OpenBLAS (not
    ``own``, the kernels' own, whose two blocks run on one thread too) only with halves above
    :data:`._parallel.SMALL_GEMM_MNK`."""
    return 2.0 * n * f * o >= _parallel.MIN_SPLIT_FLOPS and min(n, f, o) >= 2 \
        and (own or n * (f // 2) * o > _parallel.SMALL_GEMM_MNK)


def fc_forward(x, w, b, y, ws: dict[str, np.ndarray], relu: bool = False) -> None:
    """``y = x @ w.T (+ b)`` (see the module doc). The GEMM is split across the kernel threads
    (:func:`._parallel.matmul`); each thread adds the bias to the block it computed.

    ``relu``: ``y = relu(x @ w.T (+ b))``, the FC+ReLU GEMM epilogue: an fp32 ``y`` gets the ReLU
    on each block right after its GEMM and bias (while the block is in cache); an fp16 one (AMP)
    gets :func:`.activation.relu_fwd` over ``y`` after the rounding. The bits of ``fc_fwd`` then
    ``relu_fwd`` (output form) either way."""
    n, f, o = _fc_dims(x.shape, w.shape)
    if y.size != n * o:
        raise ValueError(f"expected fc output of {n} x {o} elements, got shape {y.shape}")
    x2, w2, y2 = as32(x, ws, "xbuf", (n, f)), as32(w, ws, "wbuf", (o, f)), out32(y, ws, "ybuf", (n, o))
    fused = relu and y.dtype == F32
    _parallel.matmul(x2, w2.T, out=y2, bias=None if b is None else b.reshape(o), own_blas=True, relu=fused)
    finish(y, y2)
    if relu and not fused:
        relu_fwd(y, y)


def fc_backward(dy, w, x, dw, db, dx, ws: dict[str, np.ndarray], gate_input: bool = False) -> None:
    """dw = dy.T @ x, db = sum(dy), then dx = dy @ w (dx may be x's buffer; None: skipped).

    ``gate_input``: ``x`` is a ReLU's output and ``dx`` the gradient of that ReLU's input,
    ``dx = (dy @ w) * (x > 0)`` (the ReLU backward from its output, PyTorch's
    ``threshold_backward``, in the GEMM epilogue): fp32 operands gate each dx block right after
    its GEMM, others (AMP) run :func:`.activation.relu_bwd_from_output` over dx after the
    rounding; the bits of ``fc_bwd`` then ``relu_bwd_from_output`` either way. dx must then be
    given and not share x's memory (ValueError).

    fp32 with dx wanted and :func:`concurrent_backward`: one parallel section, each thread a
    column block of dw (with a block of the db sums) and then the same columns of dx
    (:func:`_backward_concurrently`; dx may be x's buffer). Otherwise each GEMM is split
    across the kernel threads (:func:`._parallel.matmul`) and the thread that computed rows
    ``r`` of dw also sums ``db[r]``. db is always the column sums of dy over the batch in
    order (one ``np.add.reduce`` over axis 0 or its column blocks: the same sums)."""
    n, f, o = _fc_dims(x.shape, w.shape)
    if gate_input and (dx is None or np.may_share_memory(dx, x)):
        raise ValueError("an FC backward gated by its input's ReLU needs a dx apart from x "
                         f"({'no dx' if dx is None else 'dx shares x memory'})")
    fused = gate_input and dx.dtype == F32 and x.dtype == F32
    if dx is not None and _backward_concurrently(dy, w, x, dw, db, dx, ws, n, f, o, fused):
        return
    dy2 = as32(dy, ws, "ybuf", (n, o))
    x2 = as32(x, ws, "xbuf", (n, f))
    dw2 = out32(dw, ws, "wbuf", (o, f))
    db2 = None if db is None else db.reshape(o)
    if not _weight_grad_c(dy2, x2, dw2, db2, n, f, o):
        _parallel.matmul(dy2.T, x2, out=dw2, row_sums=None if db2 is None else (dy2, db2), own_blas=True)
    finish(dw, dw2)
    if dx is not None:
        w2 = as32(w, ws, "wbuf", (o, f))
        dx2 = out32(dx, ws, "xbuf", (n, f))
        _parallel.matmul(dy2, w2, out=dx2, own_blas=True, gate=x2 if fused else None)
        finish(dx, dx2)
        if gate_input and not fused:
            relu_bwd_from_output(dx, x, dx)


def _weight_grad_jobs(dy2: np.ndarray, x2: np.ndarray, dw2: np.ndarray, db2: np.ndarray | None, axis: int,
                      count: int, align: int = 1) -> tuple | None:
    """C jobs for dw = dy.T @ x and db in ``count`` blocks along ``axis`` (cuts at multiples of
    ``align``): row blocks of dw each with the db sums of its rows, or column blocks with db in
    the first (None: a layout the C worker cannot take)."""
    size = dw2.shape[axis]
    jobs = []
    for lo, hi in _parallel.blocks(size, count, align):
        s = slice(lo, hi)
        if axis == -2:
            jobs.append(_parallel.gemm_job(dy2.T[s], x2, dw2[s], sum_src=None if db2 is None else dy2[:, s],
                                           sum_dst=None if db2 is None else db2[s], own=True))
        else:
            first = lo == 0 and db2 is not None
            jobs.append(_parallel.gemm_job(dy2.T, x2[:, s], dw2[:, s], sum_src=dy2 if first else None,
                                           sum_dst=db2 if first else None, own=True))
    return None if None in jobs else tuple(jobs)


def _weight_grad_c(dy2: np.ndarray, x2: np.ndarray, dw2: np.ndarray, db2: np.ndarray | None,
                   n: int, f: int, o: int, prepare: bool = False):
    """dw = dy.T @ x and db split across this thread and the C worker
    (:func:`._parallel.run_jobs`), as :func:`._parallel.matmul` splits it (:func:`_weight_grad_jobs`).
    False (nothing done) when the split does not apply. ``prepare``: run nothing, return the
    split's ready call (:func:`._parallel.matmul_call`'s form) or False."""
    flops = 2.0 * n * f * o
    t = _parallel.workers()
    if t != 2 or flops < _parallel.MIN_SPLIT_FLOPS or db2 is not None and db2.dtype != F32 or not _parallel.c_gemm():
        return False
    writes = (dw2,) if db2 is None else (dw2, db2)
    if any(np.may_share_memory(w, a) for i, w in enumerate(writes) for a in (*writes[i + 1:], dy2, x2)):
        return False  # a written array over another array (outside the kernels' contracts): in turn
    own = _parallel.own_blas() is not None
    # own OpenBLAS: row cuts at multiples of 24 only; NumPy's: where its probe says they keep its bits
    align = _parallel.OWN_ROW_ALIGN if own else _gemm_bits.numpy_cut_align()
    if not align:
        return False
    axis = -2 if align > 1 else _parallel.split_axis(o, f)
    size = (o // align) if axis == -2 else f
    unit = align * (f if axis == -2 else o) * n  # m*n*k per unit of size
    if size < 2 * t or size // t * unit <= _parallel.SMALL_GEMM_MNK:
        return False  # too few rows or columns, or a block OpenBLAS would sum another way
    count = _parallel.gemm_blocks(flops, size, t, _prepared.pinned_contended() if prepare else None, unit=unit)
    if prepare:
        jobs = _weight_grad_jobs(dy2, x2, dw2, db2, axis, count, align)
        return False if jobs is None else _prepared.jobs_call(jobs, True, count)
    jobs = _parallel.cached_jobs(("dw", axis, count, align) + _parallel.array_key(dy2, x2, dw2, db2),
                                 lambda: _weight_grad_jobs(dy2, x2, dw2, db2, axis, count, align))
    if jobs is None:
        return False
    if count > t:
        _parallel.note_dynamic_call()
        _parallel.run_jobs(*jobs)
    else:
        _parallel.note_split(_parallel.run_jobs(*jobs))
    return True


def _backward_concurrently(dy, w, x, dw, db, dx, ws, n: int, f: int, o: int, gate: bool = False,
                           prepare: bool = False):
    """The concurrent fp32 path of :func:`fc_backward`; False (nothing done) when it does not
    apply. ``gate``: each dx block times ``x > 0`` of its columns right after its GEMM
    (:func:`fc_backward`'s ``gate_input``; dx apart from x). Column blocks ``c`` of the ``f``
    inputs: each thread computes ``dw[:, c] = dy.T @ x[:, c]`` and then
    ``dx[:, c] = dy @ w[:, c]``, so when dx is x's buffer a thread overwrites
    only the columns of x it has itself finished reading; the db sums are split by blocks of
    the ``o`` outputs, one block with each dw block. ``prepare``: run nothing; False where the
    path does not apply, its ready call where it runs the C jobs, None where it runs the Python
    threads."""
    arrays = (dy, w, x, dw, dx) if db is None else (dy, w, x, dw, db, dx)
    own = _parallel.own_blas() is not None  # fixed blocks on any thread count (its bits depend on the cut)
    threads = _parallel.workers()
    if any(a.dtype != F32 for a in arrays) or not concurrent_backward(n, f, o, own) or threads > 2 or \
            threads == 1 and not own:
        return False
    dy2, w2, x2, dw2, dx2 = dy.reshape(n, o), w.reshape(o, f), x.reshape(n, f), dw.reshape(o, f), dx.reshape(n, f)
    db2 = None if db is None else db.reshape(o)
    writes = (dw2,) if db2 is None else (dw2, db2)
    if not own and _gemm_bits.numpy_cut_align() != 1:
        return False  # NumPy's OpenBLAS changes its bits under column cuts here (its Haswell kernels)
    if any(np.may_share_memory(a, b) for a in writes for b in (dy2, w2, x2, dx2)) or \
            np.may_share_memory(dx2, dy2) or np.may_share_memory(dx2, w2) or \
            db2 is not None and np.may_share_memory(dw2, db2):
        return False
    in_place = np.may_share_memory(dx2, x2)
    if in_place and (dx2.ctypes.data != x2.ctypes.data or dx2.strides != x2.strides):
        return False  # overlapping some other way: one GEMM after the other
    count = 2  # column blocks: one per thread, two per thread while the threads run unequally fast
    busy = _prepared.pinned_contended() if prepare else _parallel.contended()
    if not own and busy and 2.0 * n * f * o >= _parallel.BLOCK_FLOPS and _gemm_bits.cuts_keep_bits():
        count = 4
        if not prepare:  # the prepared call counts each of its calls (jobs_call)
            _parallel.note_dynamic_call()
    count = min(count, f // 2)
    cols = [slice(lo, hi) for lo, hi in _parallel.blocks(f, count)]
    outs = [slice(lo, hi) for lo, hi in _parallel.blocks(o, count)]
    if _parallel.c_gemm():  # the jobs on this thread and the C worker (no Python hand-off)
        def make():
            heads, tails = [], []
            for c, r in zip(cols, outs):
                head = _parallel.gemm_job(dy2.T, x2[:, c], dw2[:, c], sum_src=None if db2 is None else dy2[:, r],
                                          sum_dst=None if db2 is None else db2[r], own=True)
                tail = _parallel.gemm_job(dy2, w2[:, c], dx2[:, c], own=True, gate=x2[:, c] if gate else None)
                if head is None or tail is None:
                    return None
                heads.append(_parallel.chain(head, tail))
                tails.append(tail)
            return tuple(heads), tuple(tails)  # the tails stay alive with the heads

        if prepare:
            jobs = make()
            if jobs is not None:
                return _prepared.jobs_call(jobs[0], threads > 1, count if count > 2 else 0, keep=jobs[1])
            return False if threads == 1 else None
        jobs = _parallel.cached_jobs(("fc_bwd", count, gate) + _parallel.array_key(dy2, x2, dw2, db2, w2, dx2), make)
        if jobs is not None:
            if threads == 1:
                for head in jobs[0]:
                    _parallel.run_here(head)
            else:
                _parallel.run_jobs(*jobs[0])
            return True
        if threads == 1:
            return False

    if prepare:
        return None

    def block(c: slice, r: slice) -> None:
        np.matmul(dy2.T, x2[:, c], out=dw2[:, c])
        if db2 is not None:
            np.add.reduce(dy2[:, r], axis=0, out=db2[r])
        np.matmul(dy2, w2[:, c], out=dx2[:, c])
        if gate:  # relu_bwd_from_output's NumPy product (its C one gives the same bits)
            np.multiply(dx2[:, c], np.greater(x2[:, c], 0), out=dx2[:, c])

    _parallel.run_dynamic([(lambda c=c, r=r: block(c, r)) for c, r in zip(cols, outs)])
    return True


def _fp32_contiguous(*arrays: np.ndarray | None) -> bool:
    return all(a is None or (a.dtype == F32 and a.flags.c_contiguous) for a in arrays)


def _prepare_forward(x, w, y, b, relu: bool):
    """The prepared launch of :func:`fc_forward` for fp32 C-contiguous arrays
    (:func:`._parallel.matmul_call`: the same path, jobs and bits); None otherwise."""
    if not _fp32_contiguous(x, w, y, b):
        return None
    try:
        n, f, o = _fc_dims(x.shape, w.shape)
        if y.size != n * o:
            return None
        bias = None if b is None else b.reshape(o)
    except ValueError:
        return None
    return _parallel.matmul_call(x.reshape(n, f), w.reshape(o, f).T, y.reshape(n, o), bias=bias, own_blas=True,
                                 relu=relu)


def _prepare_backward(dy, w, x, dw, db, dx, gate_input: bool = False):
    """The prepared launch of :func:`fc_backward` for fp32 C-contiguous arrays: the path it takes
    (:func:`_backward_concurrently`, :func:`_weight_grad_c`, :func:`._parallel.matmul_call`)
    with its jobs made once; None where a part runs on the Python threads, or for arrays
    :func:`fc_backward` would refuse."""
    if not _fp32_contiguous(dy, w, x, dw, db, dx):
        return None
    try:
        n, f, o = _fc_dims(x.shape, w.shape)
    except ValueError:
        return None
    if dy.size != n * o or dw.size != o * f or db is not None and db.size != o \
            or dx is not None and dx.size != n * f:
        return None
    if gate_input and (dx is None or np.may_share_memory(dx, x)):
        return None
    if dx is not None:
        whole = _backward_concurrently(dy, w, x, dw, db, dx, {}, n, f, o, gate_input, prepare=True)
        if whole is not False:
            return whole
    dy2, x2, dw2 = dy.reshape(n, o), x.reshape(n, f), dw.reshape(o, f)
    db2 = None if db is None else db.reshape(o)
    weight = _weight_grad_c(dy2, x2, dw2, db2, n, f, o, prepare=True)
    if weight is False:
        weight = _parallel.matmul_call(dy2.T, x2, dw2, row_sums=None if db2 is None else (dy2, db2), own_blas=True)
    if weight is None or dx is None:
        return weight
    w2, dx2 = w.reshape(o, f), dx.reshape(n, f)
    data = _parallel.matmul_call(dy2, w2, dx2, own_blas=True, gate=x2 if gate_input else None)
    if data is None:
        return None
    writes = (dw2, dx2) if db2 is None else (dw2, db2, dx2)
    return _side_by_side(weight, data, writes, (dy2, x2, w2)) or _prepared.sequence(weight, data)


def _side_by_side(weight, data, writes: tuple[np.ndarray, ...], reads: tuple[np.ndarray, ...]):
    """The weight and input gradients of a small FC backward, each one whole-GEMM C job
    (:func:`._parallel.matmul_call` of a GEMM too small to split), as a pair: one on the calling
    thread, one on the C worker. No GEMM is cut, so the bits are those of the two in turn (as on one
    thread). None where either is not one such job, on one thread, or where an array one job
    writes (``writes``: dw, db, dx) shares memory with another written or read one (``reads``: dy,
    x, w; dx written over x, where the weight gradient reads x, runs the two in turn)."""
    jobs = [getattr(c, "steps", None) for c in (weight, data)]
    if _parallel.workers() < 2 or any(st is None or len(st) != 1 or not st[0].here or len(st[0].jobs) != 1
                                      for st in jobs):
        return None
    arrays = writes + reads
    if any(np.may_share_memory(w, a) for i, w in enumerate(writes) for a in arrays[i + 1:]):
        return None
    return _prepared.jobs_call((jobs[0][0].jobs[0], jobs[1][0].jobs[0]), True, keep=(weight, data))


def _prepare_fc_fwd(x, w, y, b=None, xbuf=None, wbuf=None, ybuf=None):
    return _prepare_forward(x, w, y, b, False)


def _prepare_fc_relu_fwd(x, w, y, b=None, xbuf=None, wbuf=None, ybuf=None):
    return _prepare_forward(x, w, y, b, True)


def _prepare_fc_bwd(dy, w, x, dw, db=None, dx=None, xbuf=None, wbuf=None, ybuf=None):
    return _prepare_backward(dy, w, x, dw, db, dx)


def _prepare_relu_fc_bwd(dy, w, x, dw, dx, db=None, xbuf=None, wbuf=None, ybuf=None):
    return _prepare_backward(dy, w, x, dw, db, dx, gate_input=True)


@kernel("fc_fwd", writes=("y",), workspaces=("xbuf", "wbuf", "ybuf"), workspace_fn=ws_fc,
        target_workspace_fns={CUDA: None}, also=("fc_inf",), prepare=_prepare_fc_fwd)
def fc_fwd(x, w, y, b=None, xbuf=None, wbuf=None, ybuf=None) -> None:
    """Fully connected forward: ``y = x_flat @ w.T + b`` (b None: no bias)."""
    fc_forward(x, w, b, y, {k: v for k, v in (("xbuf", xbuf), ("wbuf", wbuf), ("ybuf", ybuf)) if v is not None})


@kernel("fc_bwd", writes=("dx", "dw", "db"), workspaces=("xbuf", "wbuf", "ybuf"), workspace_fn=ws_fc,
        target_workspace_fns={CUDA: None}, also=("fc_bwd_first_layer",), prepare=_prepare_fc_bwd)
def fc_bwd(dy, w, x, dw, db=None, dx=None, xbuf=None, wbuf=None, ybuf=None) -> None:
    """Fully connected backward: dw (out, F) and db (out) overwritten, then dx (may be x's
    buffer; None skips it, e.g. when x is the model input). dw, db fp32 even in AMP."""
    fc_backward(dy, w, x, dw, db, dx,
                {k: v for k, v in (("xbuf", xbuf), ("wbuf", wbuf), ("ybuf", ybuf)) if v is not None})


@kernel("fc_relu_fwd", writes=("y",), workspaces=("xbuf", "wbuf", "ybuf"), workspace_fn=ws_fc,
        target_workspace_fns={CUDA: None}, prepare=_prepare_fc_relu_fwd)
def fc_relu_fwd(x, w, y, b=None, xbuf=None, wbuf=None, ybuf=None) -> None:
    """An FC and the ReLU after it (output form): ``y = relu(x_flat @ w.T + b)``, the ReLU in the
    GEMM epilogue (:func:`fc_forward`); the bits of ``fc_fwd`` then ``relu_fwd``. Written by
    ``memplan-fuse-fc-relu``.

    Shapes (NHWC): x (N, H, W, C) or (N, 1, 1, F) with F = H*W*C, flattened per sample; w
    (O, 1, 1, F) or (O, F); b (O,) fp32 or None; y (N, 1, 1, O). x, w, y fp32, or fp16 under AMP
    (fp32 accumulation; xbuf, wbuf, ybuf: the fp32 workspaces). Raises ValueError for a y of
    another size than N x O."""
    fc_forward(x, w, b, y, {k: v for k, v in (("xbuf", xbuf), ("wbuf", wbuf), ("ybuf", ybuf)) if v is not None},
               relu=True)


@kernel("relu_fc_bwd", writes=("dx", "dw", "db"), workspaces=("xbuf", "wbuf", "ybuf"), workspace_fn=ws_fc,
        target_workspace_fns={CUDA: None}, prepare=_prepare_relu_fc_bwd)
def relu_fc_bwd(dy, w, x, dw, dx, db=None, xbuf=None, wbuf=None, ybuf=None) -> None:
    """The backward of an FC whose input ``x`` is a ReLU's output, through that ReLU: dw and db as
    ``fc_bwd``, ``dx = (dy @ w) * (x > 0)``, the gradient of the ReLU's input (dx apart from x),
    the gate in the GEMM epilogue (:func:`fc_backward`); the bits of ``fc_bwd`` then
    ``relu_bwd_from_output``. Written by ``memplan-fuse-fc-relu``.

    Shapes (NHWC): dy (N, 1, 1, O); w (O, 1, 1, F); x and dx (N, 1, 1, F) (or (N, H, W, C) with
    F = H*W*C); dw (O, 1, 1, F) and db (O,) fp32 even under AMP, overwritten; dy, w, x, dx fp32
    or fp16 (AMP). Raises ValueError when dx shares x's memory."""
    fc_backward(dy, w, x, dw, db, dx,
                {k: v for k, v in (("xbuf", xbuf), ("wbuf", wbuf), ("ybuf", ybuf)) if v is not None},
                gate_input=True)


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


def _prepare_add(a, b, y):
    """The prepared launch of ``add_fwd`` (and, through :func:`_prepare_acc`, of ``add_bwd_acc``
    and ``grad_acc``): :func:`_add`'s compiled pieces for the state in force now, as a
    :func:`._prepared.c_call`; None where :func:`_add` runs NumPy."""
    found = _add_pieces(a, b, y, _prepared.pinned_contended())
    return None if found is None else _prepared.c_call(*found)


@kernel("add_fwd", writes=("y",), prepare=_prepare_add)
def add_fwd(a, b, y) -> None:
    """Residual join ``y = a + b`` (same shapes); y may be a's or b's buffer."""
    _add(a, b, y)


ADD_C_SOURCE = r"""
/* y = a + b over elements [n0, n1) in fp32 (IEEE, as np.add); y may be a's or b's buffer */
void add_f32(const float* a, const float* b, float* y, long n0, long n1) {
  for (long e = n0; e < n1; e++) y[e] = a[e] + b[e];
}
"""
"""C source of the fp32 add of :func:`_add` (a kernel the C worker can run)."""

ADD_SPLIT_ELEMENTS = 1 << 16
"""Smallest fp32 add :func:`_add` splits between the calling thread and the C worker. Far below
:data:`._parallel.MIN_SPLIT_ELEMENTS`: a residual join's operands come from split kernels whose
second half ran on the C worker, so each thread adding its own half reads its own cache; the
calling thread alone would pull the other half across. In ResNet-18's step on 2 threads the
whole-tensor adds of the smaller stages took 0.85-2.2x their 1-thread time (``grad_acc`` over
131,072 elements: 0.16 -> 0.35 ms), the Python-thread split of the large ones 1.04x."""

_add_c: list = []


def _add_fn():
    """The compiled :data:`ADD_C_SOURCE`, or None where :func:`._cc.available` says no
    (``TR_MLIR_CC=0`` included)."""
    if not _cc.available():
        return None
    if not _add_c:
        _add_c.append(_cc.function(ADD_C_SOURCE, "add_f32", [ctypes.c_void_p] * 3 + [ctypes.c_long] * 2))
    return _add_c[0]


def _add(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """``out = a + b`` element-wise (``casting="same_kind"``; ``out`` may be ``a``'s or ``b``'s
    buffer). Same-shaped contiguous arrays, each operand either ``out``'s own buffer or apart from
    it, are cut into one flat block per kernel thread: fp32 ones of at least
    :data:`ADD_SPLIT_ELEMENTS` by the compiled add on the calling thread and the C worker
    (:func:`._parallel.run_c`), others of at least :data:`._parallel.MIN_SPLIT_ELEMENTS` by NumPy
    on the Python kernel threads (:func:`._parallel.split`). Each element's sum is the same
    wherever the cut falls and in C as in NumPy (one IEEE fp32 addition), so the bits are those
    of one NumPy call."""
    if not _flat_blocks(a, b, out):
        np.add(a, b, out=out, casting="same_kind")
        return
    found = _add_pieces(a, b, out, _parallel.contended())
    if found is not None:
        _parallel.run_c(*found)
        return
    if out.size >= _parallel.MIN_SPLIT_ELEMENTS:
        af, bf, of = flat(a), flat(b), flat(out)
        _parallel.split(of.size, lambda lo, hi, _t: np.add(af[lo:hi], bf[lo:hi], out=of[lo:hi],
                                                            casting="same_kind"))
        return
    np.add(a, b, out=out, casting="same_kind")


def _add_pieces(a: np.ndarray, b: np.ndarray, out: np.ndarray, contended: bool) -> tuple | None:
    """The compiled add and its pieces (flat blocks ``[lo, hi)``, one per kernel thread from
    :data:`ADD_SPLIT_ELEMENTS`; while ``contended``, run_c splits on the Python threads, about 40
    us a hand-off, so not below :data:`._parallel.MIN_SPLIT_ELEMENTS`) for :func:`_add`'s fp32
    same-shaped contiguous operands (each ``out``'s own buffer or apart from it); None otherwise."""
    if not (a.dtype == b.dtype == out.dtype == F32 and _flat_blocks(a, b, out)):
        return None
    fn = _add_fn()
    if fn is None:
        return None
    n = out.size
    t = _parallel.workers() if n >= (_parallel.MIN_SPLIT_ELEMENTS if contended else ADD_SPLIT_ELEMENTS) else 1
    bounds = [n * i // t for i in range(t + 1)]
    ptrs = (a.ctypes.data, b.ctypes.data, out.ctypes.data)
    return fn, [(*ptrs, lo, hi) for lo, hi in zip(bounds, bounds[1:])]


def _prepare_acc(dy, dx=None, da=None, db=None):
    """The prepared launch of ``grad_acc`` (``dx += dy``) and ``add_bwd_acc`` (``da += dy``,
    ``db += dy``): :func:`_prepare_add` of each, in the kernel's order; None where any has none."""
    calls = [_prepare_add(d, dy, d) for d in (dx, da, db) if d is not None]
    return None if not calls or None in calls else _prepared.sequence(*calls)


def _flat_blocks(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> bool:
    """Whether :func:`_add` may cut its operands into flat blocks: same shapes, C-contiguous, each
    operand ``out``'s own buffer or apart from it."""
    return a.shape == b.shape == out.shape and a.flags.c_contiguous and b.flags.c_contiguous \
        and out.flags.c_contiguous and all(_same_or_apart(v, out) for v in (a, b))


def _same_or_apart(v: np.ndarray, out: np.ndarray) -> bool:
    """Whether ``v`` is ``out``'s own buffer (same address and dtype: element i over element i) or
    shares no memory with it."""
    return (v.ctypes.data == out.ctypes.data and v.dtype == out.dtype) or not np.may_share_memory(v, out)


@kernel("add_bwd", writes=("da", "db"))
def add_bwd(dy, da=None, db=None) -> None:
    """Gradient of ``a + b``: ``da = dy`` and ``db = dy`` (copies, skipped where the gradient
    slot is dy's own buffer; None: that operand needs no gradient)."""
    for d in (da, db):
        if d is not None:
            copy_into(d, dy)


@kernel("add_bwd_acc", writes=("da", "db"), prepare=_prepare_acc)
def add_bwd_acc(dy, da=None, db=None) -> None:
    """Gradient of ``a + b`` accumulated: ``da += dy``, ``db += dy`` (slots summing several uses)."""
    for d in (da, db):
        if d is not None:
            _add(d, dy, d)


@kernel("grad_acc", writes=("dx",), also=("grad_accum",), prepare=_prepare_acc)
def grad_acc(dy, dx) -> None:
    """``dx += dy``: add one use's gradient into a value's gradient slot (split by threads as
    :func:`_add`)."""
    _add(dx, dy, dx)


def _prepare_identity(x, y):
    """The prepared launch of :func:`identity_fwd`: nothing when y is x's buffer, else the copy
    :func:`._util.copy_into` makes, its views made once."""
    if same_memory(y, x) and y.dtype == x.dtype:
        return _nothing
    if x.size != y.size or not x.flags.c_contiguous:  # a strided x: its reshape is a copy made now
        return None
    dst, src = (y.reshape(-1), x.reshape(-1)) if y.flags.c_contiguous else (y, x.reshape(y.shape))
    return functools.partial(np.copyto, dst, src, casting="same_kind")


def _nothing() -> None:
    pass


@kernel("identity_fwd", writes=("y",), also=("identity_bwd", "identity_inf", "dtensor_copy", "dropout_inf"),
        prepare=_prepare_identity)
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


