"""Batch normalization over the last (channel) axis: NHWC ``bn2d``, and ``bn1d`` on (N, 1, 1, C).

Statistics are per channel over every other axis (M = N*H*W values). PyTorch semantics
(``BatchNorm2d`` / ``BatchNorm1d``, training mode):

* ``y = (x - mean) * inv_std * gamma + beta`` with the biased batch variance,
  ``inv_std = 1 / sqrt(var + eps)``;
* running statistics updated **in place**: ``rm = (1 - momentum) * rm + momentum * mean``,
  ``rv = (1 - momentum) * rv + momentum * var * M / (M - 1)`` (unbiased; M = 1 keeps the biased 0);
* the batch ``mean`` and ``inv_std`` are saved for the backward pass.

Inference uses the folded ``eq_scale = gamma / sqrt(rv + eps)``, ``eq_bias = beta - rm * eq_scale``
(``bn_update_eq_params``). Every reduction and the normalization run in fp32 over row chunks, so
fp16 (AMP) activations get fp32 statistics and no temporary of activation size exists. Large
activations (:data:`SPLIT_ELEMENTS`) are shared out among the kernel threads by blocks of rows,
each reduction keeping one C-element partial per thread, summed in thread order. Parameters,
running statistics and saved statistics are fp32 arrays of C elements (any shape, e.g. (1, 1, 1, C)).

fp32 contiguous activations run the C kernels of :mod:`._cnorm` where a C compiler is available
(two passes over memory each way, float64 sums as PyTorch's CPU kernels accumulate, shifted by a
pivot); fp16 ones (AMP), and every array when ``TR_MLIR_CC=0``, the NumPy code here. In a
captured graph the compiled training kernels run as prepared launches (:mod:`._prepared_norm`:
the two passes and the per-channel work between them as C jobs, the same bits).
"""

from __future__ import annotations

import numpy as np

from . import _cnorm, _parallel, _prepared_norm, conv_stats
from ._util import CHUNK, F32, chunks, row_chunks, rows2d, scalar
from .activation import relu_fwd
from .registry import kernel

SPLIT_ELEMENTS = 1 << 20
"""Activations of at least this many elements are normalized by all kernel threads, each over
its block of rows in chunks of about :data:`SPLIT_CHUNK` elements (long NumPy calls: with short
ones the threads spend their time handing the GIL back and forth); smaller ones run serially in
:data:`._util.CHUNK` chunks."""

SPLIT_CHUNK = 1 << 18


def _vec(a: np.ndarray) -> np.ndarray:
    return a.reshape(-1)


def _blocks(m: int, c: int, fn) -> None:
    """``fn(lo, hi, w, rows_per_chunk)`` over row blocks: one per kernel thread for a large
    activation, else one block with :data:`._util.CHUNK`-sized chunks."""
    if m * c < SPLIT_ELEMENTS:
        fn(0, m, 0, max(1, CHUNK // max(c, 1)))
        return
    step = max(1, SPLIT_CHUNK // max(c, 1))
    t = max(1, min(_parallel.workers(), m))
    bounds = [m * i // t for i in range(t + 1)]
    _parallel.run([lambda w=w: fn(bounds[w], bounds[w + 1], w, step) for w in range(t)])


def _reduce(m: int, c: int, body, *outs: np.ndarray) -> None:
    """``outs`` = sums over row blocks of what ``body(lo, hi, acc, rows_per_chunk)`` adds into
    the zeroed C-element arrays ``acc`` (the first block sums into ``outs`` itself)."""
    parts: dict[int, tuple[np.ndarray, ...]] = {}

    def run(lo: int, hi: int, w: int, step: int) -> None:
        acc = outs if w == 0 else tuple(np.empty_like(o) for o in outs)
        for o in acc:
            o.fill(0)
        body(lo, hi, acc, step)
        if w:
            parts[w] = acc

    _blocks(m, c, run)
    for w in sorted(parts):
        for o, a in zip(outs, parts[w]):
            np.add(o, a, out=o)


def _numpy_stats(x2: np.ndarray, mean: np.ndarray, acc: np.ndarray) -> np.ndarray:
    """The NumPy statistics of (M, C) ``x2``: its mean into ``mean``, the sum of centered squares
    into ``acc``; returns the biased variance (fp32 sums per row block, blocks in thread order)."""
    m, c = x2.shape

    def total(lo: int, hi: int, out, step: int) -> None:
        np.add.reduce(x2[lo:hi], axis=0, dtype=F32, out=out[0])

    _reduce(m, c, total, mean)
    mean *= 1.0 / m

    def squares(lo: int, hi: int, out, step: int) -> None:
        for r in chunks(hi - lo, step):
            t = x2[lo + r.start:lo + r.stop] - mean
            t *= t
            np.add(out[0], t.sum(axis=0, dtype=F32), out=out[0])

    _reduce(m, c, squares, acc)
    return acc * (1.0 / m)


def _running_update(rm: np.ndarray, rv: np.ndarray, mean, var, m: int, momentum) -> None:
    """PyTorch's running statistics, in place: ``rm = (1 - mom) rm + mom mean``,
    ``rv = (1 - mom) rv + mom var M / (M - 1)`` (M = 1 keeps the biased variance).
    Mirrored per channel in C by :data:`._cnorm.COEF_SOURCE` (prepared launches,
    :mod:`._prepared_norm`): change both (tests/test_prepared_norm.py, tests/test_fuzz_prepared_norm.py)."""
    mom = scalar(momentum)
    rm *= 1.0 - mom
    rm += mom * mean
    rv *= 1.0 - mom
    rv += (mom * (m / (m - 1) if m > 1 else 1.0)) * var


def _compiled_forward(x2, y2, gamma, beta, rm, rv, mean, istd, eps, momentum, relu=False, mask2=None,
                      skip2=None, stats=None) -> None:
    """:func:`bn_forward_train` with the C kernels of :mod:`._cnorm` (fp32 (M, C) views): the
    statistics, inv_std, scale and shift in float64 (C elements), each rounded to fp32 once;
    ``relu`` (:func:`bn_relu_forward_train`): the ReLU, mask and residual add in the normalize pass;
    ``stats``: the conv's ``(sum, sq_sum)`` in place of the statistics pass.
    Mirrored per channel in C by :data:`._cnorm.COEF_SOURCE` (prepared launches,
    :mod:`._prepared_norm`): change both (tests/test_prepared_norm.py, tests/test_fuzz_prepared_norm.py)."""
    m = x2.shape[0]
    mean64, var64 = _cnorm.batch_stats(x2) if stats is None else conv_stats.mean_var(*stats, m)
    _running_update(rm, rv, mean64.astype(F32), var64.astype(F32), m, momentum)
    istd64 = 1.0 / np.sqrt(var64 + float(scalar(eps)))
    scale64 = gamma.astype(np.float64) * istd64
    mean[...] = mean64
    istd[...] = istd64
    _cnorm.apply(x2, y2, scale64.astype(F32), (beta.astype(np.float64) - mean64 * scale64).astype(F32), relu,
                 mask2, skip2)


def bn_forward_train(x, gamma, beta, running_mean, running_var, y, save_mean, save_istd, eps, momentum,
                     stats=None) -> None:
    """Training-mode batch norm (see the module doc); ``y`` may be ``x``'s buffer. ``stats``: the
    fp32 ``(sum, sq_sum)`` of x written by the conv before it (:mod:`.conv_stats`), the batch
    mean and variance then come from them instead of a pass over x."""
    if _cnorm.usable(x, y):
        _compiled_forward(rows2d(x), rows2d(y), _vec(gamma), _vec(beta), _vec(running_mean), _vec(running_var),
                          _vec(save_mean), _vec(save_istd), eps, momentum, stats=stats)
        return
    x2, y2 = rows2d(x), rows2d(y)
    m, c = x2.shape
    mean, istd = _vec(save_mean), _vec(save_istd)
    if stats is None:
        var = _numpy_stats(x2, mean, istd)
    else:
        mean64, var64 = conv_stats.mean_var(*stats, m)
        mean[...] = mean64
        var = var64.astype(F32)
    _running_update(_vec(running_mean), _vec(running_var), mean, var, m, momentum)
    var += scalar(eps)
    np.sqrt(var, out=istd)
    np.reciprocal(istd, out=istd)
    scale = _vec(gamma) * istd
    shift = _vec(beta) - mean * scale

    def normalize(lo: int, hi: int, w: int, step: int) -> None:
        for r in chunks(hi - lo, step):
            sl = slice(lo + r.start, lo + r.stop)
            t = x2[sl] * scale
            t += shift
            y2[sl] = t

    _blocks(m, c, normalize)


def bn_relu_forward_train(x, gamma, beta, running_mean, running_var, y, save_mean, save_istd, eps, momentum,
                          mask=None, skip=None, stats=None) -> None:
    """``y = relu(bn(x) + skip)`` (``skip`` None: ``relu(bn(x))``), training mode, and the INT8
    ``mask`` of the pre-activation ``> 0`` when given: :func:`bn_forward_train`, the residual add
    ``skip + bn(x)`` and ``relu_fwd`` to the bit. fp32 with a C compiler: the statistics pass, then
    one pass writing y (and mask); else (AMP, ``TR_MLIR_CC=0``) those kernels one after another
    over y (the unfused code itself). y must not share memory with x (the backward reads x).
    ``stats``: as :func:`bn_forward_train`'s."""
    if _cnorm.usable(x, y, skip) and _contiguous(mask):
        _compiled_forward(rows2d(x), rows2d(y), _vec(gamma), _vec(beta), _vec(running_mean), _vec(running_var),
                          _vec(save_mean), _vec(save_istd), eps, momentum, True,
                          None if mask is None else rows2d(mask), None if skip is None else rows2d(skip), stats)
        return
    bn_forward_train(x, gamma, beta, running_mean, running_var, y, save_mean, save_istd, eps, momentum, stats)
    if skip is not None:
        np.add(skip, y, out=y)
    relu_fwd(y, y, mask)


def _contiguous(a) -> bool:
    return a is None or a.flags.c_contiguous


def _gate_rows(gate):
    """A ReLU gate ``(kind, array)`` (:data:`._cnorm.GATES`) as ``(kind, (M, C) view)``; None stays."""
    return None if gate is None else (gate[0], rows2d(gate[1]))


def _gated(d: np.ndarray, gate, sl: slice) -> np.ndarray:
    """``d`` through the ReLU gate's rows ``sl``: ``d * mask`` or ``d * (y > 0)``, the products of
    :mod:`.activation`'s NumPy ReLU backward (same dtype, same bits)."""
    if gate is None:
        return d
    kind, g2 = gate
    return d * g2[sl] if kind == "m" else d * np.greater(g2[sl], 0)


def bn_backward(dy, x, gamma, save_mean, save_istd, dx, dgamma, dbeta, gate=None, dskip=None) -> None:
    """Batch-norm backward from the saved mean / inv_std; ``dx`` may alias ``x`` or ``dy``.

    dbeta = sum(dy); dgamma = sum(dy * xhat); dx = gamma * inv_std * (dy - dbeta/M - xhat * dgamma/M).
    ``dx`` None: parameter gradients only. ``gate``: the backward of ``bn`` followed by a ReLU,
    reading ``dy * mask`` (``("m", INT8 mask)``) or ``dy * (y > 0)`` (``("y", ReLU output)``) in
    both passes instead of ``dy`` (what ``relu_bwd`` / ``relu_bwd_from_output`` would have written,
    to the bit); ``dskip`` (with a gate): also written with that gated gradient (the gradient of a
    residual join's skip operand, :func:`bn_relu_forward_train`; may be dy's buffer).
    """
    x2, dy2 = rows2d(x), rows2d(dy)
    m, c = x2.shape
    mean, istd = _vec(save_mean), _vec(save_istd)
    dg, db = _vec(dgamma), _vec(dbeta)
    gate = _gate_rows(gate)
    skip2 = None if dskip is None else rows2d(dskip)
    if _cnorm.usable(x, dy, dx, dskip, *(() if gate is None or gate[0] == "m" else (gate[1],))) \
            and (gate is None or _contiguous(gate[1])):
        _compiled_backward(dy2, x2, _vec(gamma), mean, istd, None if dx is None else rows2d(dx), dg, db, gate,
                           skip2)
        return

    def grads(lo: int, hi: int, acc, step: int) -> None:
        for r in chunks(hi - lo, step):
            sl = slice(lo + r.start, lo + r.stop)
            xh = x2[sl] - mean
            xh *= istd
            d = _gated(dy2[sl], gate, sl).astype(F32, copy=False)
            np.add(acc[1], d.sum(axis=0, dtype=F32), out=acc[1])
            xh *= d
            np.add(acc[0], xh.sum(axis=0, dtype=F32), out=acc[0])

    _reduce(m, c, grads, dg, db)
    if dx is None:
        return
    dx2 = rows2d(dx)
    k = _vec(gamma) * istd
    mdb, mdg = db * (1.0 / m), dg * (1.0 / m)

    def input_grad(lo: int, hi: int, w: int, step: int) -> None:
        for r in chunks(hi - lo, step):
            sl = slice(lo + r.start, lo + r.stop)
            xh = x2[sl] - mean
            xh *= istd
            xh *= mdg
            d = _gated(dy2[sl], gate, sl)
            if skip2 is not None:
                skip2[sl] = d
            t = d - mdb
            t -= xh
            t *= k
            dx2[sl] = t

    _blocks(m, c, input_grad)


def _compiled_backward(dy2, x2, gamma, mean, istd, dx2, dg, db, gate=None, skip2=None) -> None:
    """:func:`bn_backward` with the C kernels of :mod:`._cnorm` (fp32 (M, C) arrays): the sums in
    double, then ``dx = k * dy - k * istd * mdg * (x - mean) - k * mdb`` with ``k = gamma * istd``,
    ``mdb = dbeta / M``, ``mdg = dgamma / M`` (the same formula).
    Mirrored per channel in C by :data:`._cnorm.COEF_SOURCE` (prepared launches,
    :mod:`._prepared_norm`): change both (tests/test_prepared_norm.py, tests/test_fuzz_prepared_norm.py)."""
    m = x2.shape[0]
    mu = np.ascontiguousarray(mean, dtype=F32)
    sdy, sdyxc = _cnorm.backward_sums(dy2, x2, mu, gate, skip2)
    istd64 = istd.astype(np.float64)
    dg64 = istd64 * sdyxc
    db[...] = sdy
    dg[...] = dg64
    if dx2 is None:
        return
    k = gamma.astype(np.float64) * istd64
    a = k.astype(F32)
    b = (-k * istd64 * dg64 / m).astype(F32)
    c0 = (-k * sdy / m).astype(F32)
    _cnorm.input_grad(dy2, x2, dx2, a, b, mu, c0, gate, skip2)


def bn_affine(x, scale, bias, y) -> None:
    """``y = x * scale + bias`` per channel (fp32 math); ``y`` may be ``x``'s buffer."""
    x2, y2 = rows2d(x), rows2d(y)
    m, c = x2.shape
    sc, bi = _vec(scale), _vec(bias)
    for r in row_chunks(m, c):
        t = x2[r] * sc
        t += bi
        y2[r] = t


def _prepare_fwd(x, gamma, beta, running_mean, running_var, y, save_mean, save_istd, eps=None, momentum=None,
                 sum=None, sq_sum=None):
    """``bn2d_fwd`` / ``bn1d_fwd``'s prepared launch (:func:`._prepared_norm.forward_call`)."""
    return _prepared_norm.forward_call(x, gamma, beta, running_mean, running_var, y, save_mean, save_istd, eps,
                                       momentum, out_sum=sum, out_sq=sq_sum)


def _prepare_relu_fwd(x, gamma, beta, running_mean, running_var, y, save_mean, save_istd, mask=None, eps=None,
                      momentum=None, sum=None, sq_sum=None, skip=None):
    """``bn2d_relu_fwd``'s prepared launch (with ``skip``: ``bn2d_add_relu_fwd``'s)."""
    return _prepared_norm.forward_call(x, gamma, beta, running_mean, running_var, y, save_mean, save_istd, eps,
                                       momentum, True, mask, skip, sum, sq_sum)


def _prepare_bwd(dy, x, gamma, save_mean, save_istd, dgamma, dbeta, dx=None):
    """``bn2d_bwd`` / ``bn1d_bwd``'s prepared launch (:func:`._prepared_norm.backward_call`)."""
    return _prepared_norm.backward_call(dy, x, gamma, save_mean, save_istd, dx, dgamma, dbeta)


def _prepare_gated(array: str):
    """The prepare function of the BN+ReLU backward kernels gated by their ``array`` argument
    (``mask``: the INT8 mask, ``y``: the ReLU output)."""
    def prepare(dy, x, gamma, save_mean, save_istd, dgamma, dbeta, dx, dskip=None, **gate):
        return _prepared_norm.backward_call(dy, x, gamma, save_mean, save_istd, dx, dgamma, dbeta,
                                            ("m" if array == "mask" else "y", gate[array]), dskip)
    return prepare


@kernel("bn2d_fwd", writes=("y", "running_mean", "running_var", "save_mean", "save_istd"), also=("bn1d_fwd",),
        prepare=_prepare_fwd)
def bn_fwd(x, gamma, beta, running_mean, running_var, y, save_mean, save_istd, eps=None, momentum=None, sum=None,
           sq_sum=None) -> None:
    """Batch norm, training mode. x, y (N, H, W, C) (bn1d: (N, 1, 1, C)); gamma, beta, running and
    saved statistics C-element fp32. Running statistics are updated in place (PyTorch momentum,
    unbiased variance); saves the batch mean and inv_std = 1/sqrt(var + eps). ``eps`` and
    ``momentum`` are scalar operands (the ``bn_epsilon`` / ``bn_momentum`` scalars, or numbers;
    None: PyTorch's 1e-5 and 0.1). ``sum``, ``sq_sum``: x's statistics as the conv before it wrote
    them (``memplan-fuse-bn-stats``, :mod:`.conv_stats`), read instead of a pass over x."""
    bn_forward_train(x, gamma, beta, running_mean, running_var, y, save_mean, save_istd,
                     1e-5 if eps is None else eps, 0.1 if momentum is None else momentum,
                     conv_stats.check(sum, sq_sum, x.shape[-1]))


@kernel("bn2d_bwd", writes=("dx", "dgamma", "dbeta"), also=("bn1d_bwd",), prepare=_prepare_bwd)
def bn_bwd(dy, x, gamma, save_mean, save_istd, dgamma, dbeta, dx=None) -> None:
    """Batch norm backward: dgamma, dbeta (overwritten) and dx, which may be x's buffer."""
    bn_backward(dy, x, gamma, save_mean, save_istd, dx, dgamma, dbeta)


@kernel("bn2d_relu_fwd", writes=("y", "running_mean", "running_var", "save_mean", "save_istd", "mask"),
        prepare=_prepare_relu_fwd)
def bn_relu_fwd(x, gamma, beta, running_mean, running_var, y, save_mean, save_istd, mask=None, eps=None,
                momentum=None, sum=None, sq_sum=None) -> None:
    """``y = relu(bn2d(x))``, training mode, as ``bn2d_fwd`` then ``relu_fwd`` to the bit (x, y
    (N, H, W, C), y not x's buffer; the INT8 ``mask`` x > 0 of the pre-activation, or None: the
    output form, whose backward reads y); :func:`bn_relu_forward_train`. ``sum``, ``sq_sum`` as
    :func:`bn_fwd`'s."""
    bn_relu_forward_train(x, gamma, beta, running_mean, running_var, y, save_mean, save_istd,
                          1e-5 if eps is None else eps, 0.1 if momentum is None else momentum, mask,
                          stats=conv_stats.check(sum, sq_sum, x.shape[-1]))


@kernel("bn2d_add_relu_fwd", writes=("y", "running_mean", "running_var", "save_mean", "save_istd", "mask"),
        prepare=_prepare_relu_fwd)
def bn_add_relu_fwd(x, skip, gamma, beta, running_mean, running_var, y, save_mean, save_istd, mask=None, eps=None,
                    momentum=None, sum=None, sq_sum=None) -> None:
    """A residual join ``y = relu(bn2d(x) + skip)`` (skip (N, H, W, C) as y), as ``bn2d_fwd``,
    ``add_fwd(skip, bn)`` and ``relu_fwd`` to the bit; ``mask``, ``sum``, ``sq_sum`` as
    :func:`bn_relu_fwd`."""
    bn_relu_forward_train(x, gamma, beta, running_mean, running_var, y, save_mean, save_istd,
                          1e-5 if eps is None else eps, 0.1 if momentum is None else momentum, mask, skip,
                          conv_stats.check(sum, sq_sum, x.shape[-1]))


@kernel("bn2d_relu_bwd", writes=("dx", "dgamma", "dbeta"), prepare=_prepare_gated("mask"))
def bn_relu_bwd(dy, mask, x, gamma, save_mean, save_istd, dgamma, dbeta, dx) -> None:
    """Backward of :func:`bn_relu_fwd` in the mask form: ``bn2d_bwd`` of ``dy * mask`` (what
    ``relu_bwd`` writes) in BN backward's two passes; dx may be x's or dy's buffer."""
    bn_backward(dy, x, gamma, save_mean, save_istd, dx, dgamma, dbeta, ("m", mask))


@kernel("bn2d_relu_bwd_from_output", writes=("dx", "dgamma", "dbeta"), prepare=_prepare_gated("y"))
def bn_relu_bwd_from_output(dy, y, x, gamma, save_mean, save_istd, dgamma, dbeta, dx) -> None:
    """Backward of :func:`bn_relu_fwd` in the output form: ``bn2d_bwd`` of ``dy * (y > 0)``."""
    bn_backward(dy, x, gamma, save_mean, save_istd, dx, dgamma, dbeta, ("y", y))


@kernel("bn2d_add_relu_bwd", writes=("dx", "dskip", "dgamma", "dbeta"), prepare=_prepare_gated("mask"))
def bn_add_relu_bwd(dy, mask, x, gamma, save_mean, save_istd, dgamma, dbeta, dx, dskip) -> None:
    """Backward of :func:`bn_add_relu_fwd` (mask form): ``dskip = dy * mask`` (the join's
    gradient, as ``relu_bwd`` writes it) and ``bn2d_bwd`` of it into dx, dgamma, dbeta, in BN
    backward's two passes; dskip may be dy's buffer, dx x's."""
    bn_backward(dy, x, gamma, save_mean, save_istd, dx, dgamma, dbeta, ("m", mask), dskip)


@kernel("bn2d_add_relu_bwd_from_output", writes=("dx", "dskip", "dgamma", "dbeta"),
        prepare=_prepare_gated("y"))
def bn_add_relu_bwd_from_output(dy, y, x, gamma, save_mean, save_istd, dgamma, dbeta, dx, dskip) -> None:
    """Backward of :func:`bn_add_relu_fwd` (output form): as :func:`bn_add_relu_bwd` with ``y > 0``."""
    bn_backward(dy, x, gamma, save_mean, save_istd, dx, dgamma, dbeta, ("y", y), dskip)


@kernel("bn2d_inf", writes=("y",), also=("bn1d_inf",))
def bn_inf(x, eq_scale, eq_bias, y) -> None:
    """Batch norm, inference: ``y = x * eq_scale + eq_bias`` (folded running statistics)."""
    bn_affine(x, eq_scale, eq_bias, y)


@kernel("bn_update_eq_params", writes=("eq_scale", "eq_bias"))
def bn_update_eq_params(gamma, beta, running_mean, running_var, eq_scale, eq_bias, eps=None) -> None:
    """Fold BN for inference: ``eq_scale = gamma / sqrt(rv + eps)``, ``eq_bias = beta - rm * eq_scale``
    (``eps`` a scalar operand; None: 1e-5)."""
    sc, bi = _vec(eq_scale), _vec(eq_bias)
    np.add(_vec(running_var), 1e-5 if eps is None else scalar(eps), out=sc)
    np.sqrt(sc, out=sc)
    np.divide(_vec(gamma), sc, out=sc)
    np.multiply(_vec(running_mean), sc, out=bi)
    np.subtract(_vec(beta), bi, out=bi)
