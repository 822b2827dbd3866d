"""Prepared launches of the convolution kernels (``conv_fwd``, ``conv_bwd``; :class:`.registry.PreparedLaunch`).

A conv launch of the kernel function works out its geometry, checks its algorithm, picks its
method (:func:`.conv.dispatch_method`) and builds its pieces on every call: 20-40 us of Python,
where MobileNetV2's CIFAR convs take a few microseconds to a few hundred (its 104 conv launches a
step). A prepared launch does that once per :class:`._prepared.LaunchState` and replays the pieces
the function would run, so the bits are the function's (tests/test_prepared_launches.py):

* ``direct`` (the compiled small-channel kernels, :mod:`._cconv`): their pieces, as
  :func:`._prepared.c_call` calls;
* ``pointwise`` (1x1, stride 1, no padding: one GEMM on the NHWC matrix): the forward
  ``y = x @ w.T`` and the input gradient ``dx = dy @ w`` as :func:`._parallel.matmul_call`; the
  weight gradient as :func:`.conv._gemm_tn` runs it for one group, ``dw = dy.T @ x`` where
  ``K >= C``, else ``dw.T = x.T @ dy`` in ``wbuf`` and the tiled transposed copy
  (:func:`.transpose.sum_transposed_call`);
* ``depthwise`` (groups = C = K, :mod:`._cdepthwise`): the tap-major copy of w and the
  kernel's pieces (:func:`._cdepthwise.forward_call` and the like).

Each direction of ``conv_bwd`` is prepared on its own method; the weight gradient runs first, as
in the function (dx may be x's buffer). Declined (None: the kernel function runs, with its own
errors): an algorithm that does not apply, Winograd (its kernels run from Python), the
statistics epilogue (``bn_stats``), an input gradient added into dx (``dx_acc``), fp16 operands (AMP's casts), arrays that are not
C-contiguous, the im2col method, and a path the function would run on the Python kernel threads.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from . import _cconv, _cdepthwise, _parallel, _prepared
from ._util import F32, take
from .transpose import sum_transposed_call

Call = Callable[[], None]


def _geometry(x_shape, w_shape, k: int, s: int, p: int, groups: int, fp16: bool, *algos: str):
    """The geometry of a conv whose ``algos`` all apply and none is Winograd, else None (the
    kernel itself then raises its errors or runs Winograd)."""
    from . import conv, winograd  # they import this module

    try:
        g = conv.conv_geom(x_shape, w_shape, k, s, p, groups)
        for a in algos:
            conv.check_algorithm(a, g, fp16)
    except ValueError:
        return None
    if any(a in winograd.VARIANTS and winograd.applicable(g) for a in algos):
        return None
    return g


def _fp32(*arrays: np.ndarray) -> bool:
    """Every array fp32 and C-contiguous (the pointwise and depthwise paths' views of them)."""
    return all(a.dtype == F32 and a.flags.c_contiguous for a in arrays)


def _direction(g, algo: str, arrays: tuple, tmp, direct, depthwise, pointwise: Callable[[], Call | None]
               ) -> Call | None:
    """The ready call of one conv direction on ``arrays`` (its two operands and its output, in the
    kernel function's order) by the method the function picks (:func:`.conv.dispatch_method`):
    ``direct(*arrays, g, tmp)``, ``depthwise(*arrays, g, tmp)`` where its kernels run, or
    ``pointwise()``; None otherwise."""
    from . import conv  # it imports this module

    meth = conv.dispatch_method(g, algo, *arrays)
    if meth == "direct":
        return direct(*arrays, g, tmp)
    if not _fp32(*arrays):
        return None
    if meth == "depthwise" and _cdepthwise.usable(g, tmp, *arrays):
        return depthwise(*arrays, g, tmp)
    return pointwise() if meth == "pointwise" else None


def prepare_fwd(x, w, y, col=None, wbuf=None, ybuf=None, xbuf=None, tmp=None, sum=None, sq_sum=None, *, k: int,
                s: int = 1, p: int = 0, groups: int = 1, algo: str = "auto", bn_stats: bool = False) -> Call | None:
    """``conv_fwd``'s prepared launch (module doc), or None."""
    fp16 = any(a.dtype != F32 for a in (x, w, y))
    g = _geometry(x.shape, w.shape, k, s, p, groups, fp16, algo)
    if g is None or sum is not None or sq_sum is not None or y.shape != g.y_shape:
        return None
    try:
        return _direction(g, algo, (x, w, y), tmp, _cconv.forward_call, _cdepthwise.forward_call, lambda: (
            _parallel.matmul_call(x.reshape(g.m, g.c), w.reshape(g.k_out, g.c).T, y.reshape(g.m, g.k_out))))
    except ValueError:
        return None


def _pointwise_wgrad(dy, x, dw, g, wbuf) -> Call | None:
    """The pointwise weight gradient as :func:`.conv._gemm_tn` runs it for one group: ``dw = dy.T
    @ x`` where K >= C, else ``dw.T = x.T @ dy`` in ``wbuf`` and its transposed copy."""
    x2, dy2 = x.reshape(g.m, g.c), dy.reshape(g.m, g.k_out)
    if g.k_out >= g.c:
        return _parallel.matmul_call(dy2.T, x2, dw.reshape(g.k_out, g.c))
    wt = take(wbuf, (1, g.c, g.k_out))
    gemm = _parallel.matmul_call(x2.T, dy2, wt[0])
    copy = sum_transposed_call(dw.reshape(1, g.k_out, g.c), [wt])
    if gemm is None or copy is None:
        return None
    return _prepared.sequence(gemm, copy)


def prepare_bwd(dy, x, w, dw, dx=None, col=None, wbuf=None, ybuf=None, xbuf=None, tmp=None, dx_acc=None, *, k: int,
                s: int = 1, p: int = 0, groups: int = 1, algo_dgrad: str = "auto",
                algo_wgrad: str = "auto") -> Call | None:
    """``conv_bwd``'s prepared launch (module doc): the weight gradient's call, then the input
    gradient's (none for ``conv_bwd_first_layer``), or None where either has none, and for an
    input gradient added into dx (``dx_acc``: the kernel function runs it)."""
    if dx_acc is not None:
        return None
    fp16 = any(a is not None and a.dtype != F32 for a in (dy, x, w, dw, dx))
    algos = (algo_wgrad,) if dx is None else (algo_wgrad, algo_dgrad)
    g = _geometry(x.shape, w.shape, k, s, p, groups, fp16, *algos)
    if g is None or not dw.flags.c_contiguous or dy.shape != g.y_shape or dw.shape != g.w_shape \
            or dx is not None and dx.shape != g.x_shape:
        return None
    try:
        weight = _direction(g, algo_wgrad, (dy, x, dw), tmp, _cconv.wgrad_call, _cdepthwise.wgrad_call,
                            lambda: _pointwise_wgrad(dy, x, dw, g, wbuf))
        if weight is None or dx is None:
            return weight
        data = _direction(g, algo_dgrad, (dy, w, dx), tmp, _cconv.dgrad_call, _cdepthwise.dgrad_call, lambda: (
            _parallel.matmul_call(dy.reshape(g.m, g.k_out), w.reshape(g.k_out, g.c), dx.reshape(g.m, g.c))))
    except ValueError:
        return None
    return None if data is None else _prepared.sequence(weight, data)
