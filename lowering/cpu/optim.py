"""Optimizer range kernels: one call updates every parameter of a flat contiguous span.

``w``, ``g``, ``m``, ``v`` are flat fp32 views over aligned spans (element i of each belongs to
the same parameter; slot padding is zero in all of them and stays zero). Hyper-parameters and
step state are scalar operands: 1-element arrays read at call time (or plain floats). Every
kernel returns at once when ``has_nan`` is set (the AMP overflow skip), and reads the raw
gradient as ``g / loss_scale`` (unchanged when the scale is None or 0), as PyTorch's GradScaler
unscales before ``step()``. The gradient arrays are never written.

Semantics are ``torch.optim``'s (DESIGN section 7), per element:

* SGD: ``d = g + wd*w``; momentum ``m = mu*m + d`` (dampening 0; a zero buffer makes the first
  step ``m = d``, as torch's clone); Nesterov ``d = d + mu*m``, else ``d = m``; ``w -= lr*d``.
* Adam: ``d = g + wd*w``; ``m += (1-b1)*(d - m)``; ``v = b2*v + (1-b2)*d*d``;
  ``w -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)`` with ``t = step`` (already incremented).
* AdamW: ``w *= 1 - lr*wd`` first, then Adam with ``wd = 0``.
* LARS (facts sheet 12.4, per tensor): ``eta = tc*|w| / (|g| + wd*|w| + eps)`` clamped to 100,
  or 1 when either norm is < 1e-12; ``d = g + wd*w``; ``m = mu*m + lr*eta*d``; ``w -= m``
  (Nesterov: ``w -= lr*eta*d + mu*m``). Tensors are the static ``segments`` (offset, size).

``range_update_bias_*`` are the same updates without weight decay (BN gamma/beta and biases,
the seed's convention; with ``decay_all`` the compiler, ``memplan-build-graph``, gives them the
``weight`` kernels). Work runs in chunks of :data:`._util.CHUNK` elements, so temporaries stay
small (SGD reuses one). The SGD update of a large span (at least two :data:`SPLIT_CHUNK`) is
split across the kernel threads in 1 MiB chunks; the other updates stay on one thread.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Callable

import numpy as np

from . import _cc, _parallel, _prepared
from ._util import CHUNK, F32, chunks, flat, scalar
from .registry import kernel


def _skip(has_nan) -> bool:
    return has_nan is not None and scalar(has_nan) != 0


def _inv_scale(loss_scale) -> float:
    s = 1.0 if loss_scale is None else scalar(loss_scale)
    return 1.0 / s if s != 0 else 1.0


SPLIT_CHUNK = 1 << 18
"""Chunk (elements) of the SGD update when it is split across the kernel threads: long NumPy
calls, so the threads do not spend their time handing the GIL back and forth (with 16K-element
chunks two threads ran 2x slower than one)."""


SGD_C_SOURCE = r"""
/* The SGD family in one pass over w, g, m (optim.py's sgd_update; NumPy's float32 rounding:
   every operation rounded on its own, no contraction into fused multiply-adds under -std=c99). */
void tr_sgd(float *restrict w, const float *restrict g, float *restrict m, long n, float lr, float mu,
            float wd, float inv, int nesterov) {
    if (m && !nesterov && wd == 0.0f && inv == 1.0f) {
        for (long i = 0; i < n; i++) {
            float mi = m[i] * mu;
            mi = mi + g[i];
            m[i] = mi;
            float d = mi * lr;
            w[i] = w[i] - d;
        }
        return;
    }
    for (long i = 0; i < n; i++) {
        float d = g[i] * inv;
        if (wd != 0.0f) {
            float t = wd * w[i];
            d = d + t;
        }
        if (m) {
            float mi = m[i] * mu;
            mi = mi + d;
            m[i] = mi;
            if (nesterov) {
                float t = mu * mi;
                d = d + t;
            } else {
                d = mi;
            }
        }
        d = d * lr;
        w[i] = w[i] - d;
    }
}

/* tr_sgd as a job of the C kernel thread (_parallel.call_job): pointers and sizes in i, the
   float32 hyper-parameters (exactly representable) in f. */
void tr_sgd_job(const long long *i, const double *f) {
    tr_sgd((float *)i[0], (const float *)i[1], (float *)i[2], (long)i[3], (float)f[0], (float)f[1], (float)f[2],
           (float)f[3], (int)i[4]);
}
"""
"""C source of the one-pass SGD update (:func:`sgd_update`); compiled through :mod:`._cc`."""

_sgd_fn: list = []


def _sgd_c():
    """The compiled ``tr_sgd`` (None when :func:`._cc.available` is False, asked on every call
    like the other compiled kernels: ``TR_MLIR_CC=0`` switches at once); its job form's address
    is ``_sgd_job[0]``."""
    if not _cc.available():
        return None
    if not _sgd_fn:
        fp = ctypes.c_void_p
        fn = _cc.function(SGD_C_SOURCE, "tr_sgd", [fp, fp, fp, ctypes.c_long, ctypes.c_float, ctypes.c_float,
                                                     ctypes.c_float, ctypes.c_float, ctypes.c_int])
        _sgd_job[:] = [ctypes.cast(_cc.load(SGD_C_SOURCE).tr_sgd_job, ctypes.c_void_p).value]
        _sgd_fn.append(fn)
    return _sgd_fn[0]


_sgd_job: list = []


def sgd_update(w, g, m, lr: float, mu: float, wd: float, nesterov: bool, inv_scale: float) -> None:
    """The SGD family on flat arrays (``m`` None: no momentum); large spans are split across the
    kernel threads (element-wise: the result does not depend on the split).

    fp32 arrays with a C compiler (:func:`._cc.available`): one compiled pass reads w, g, m and
    writes w, m (NumPy needs four to six passes with a temporary); every float operation is
    NumPy's float32 operation in the same order, so both give the same bits. Otherwise NumPy
    in chunks."""
    wf, gf = flat(w), flat(g)
    mf = None if m is None else flat(m)
    fn = _sgd_c() if wf.dtype == F32 and gf.dtype == F32 and (mf is None or mf.dtype == F32) else None
    if fn is not None:
        if gf.size < wf.size or (mf is not None and mf.size < wf.size):
            raise ValueError(f"expected gradient and momentum spans of >= {wf.size} elements, got "
                             f"{gf.size} and {None if mf is None else mf.size}")
        args = tuple(float(F32.type(v)) for v in (lr, mu, wd, inv_scale))
        pw, pg = wf.ctypes.data, gf.ctypes.data
        pm = None if mf is None else mf.ctypes.data

        def cblock(lo: int, hi: int, share: int) -> None:
            fn(pw + 4 * lo, pg + 4 * lo, None if pm is None else pm + 4 * lo, hi - lo, *args, int(nesterov))

        if wf.size >= 2 * SPLIT_CHUNK and _parallel.split_jobs(wf.size, lambda lo, hi: _parallel.call_job(
                _sgd_job[0], (pw + 4 * lo, pg + 4 * lo, 0 if pm is None else pm + 4 * lo, hi - lo, int(nesterov)),
                args)):
            return  # the two halves on this thread and the C kernel thread
        if wf.size >= 2 * SPLIT_CHUNK:
            _parallel.split(wf.size, cblock, per_worker=2)
        else:
            cblock(0, wf.size, 1)
        return

    def block(lo: int, hi: int, share: int) -> None:
        step = CHUNK if share == 1 else SPLIT_CHUNK
        tmp = np.empty(min(step, hi - lo), np.float32)  # one chunk temporary per thread, reused
        plain = mf is not None and not nesterov and not wd and inv_scale == 1.0
        for c in chunks(hi - lo, step):
            sl = slice(lo + c.start, lo + c.stop)
            d = tmp[:c.stop - c.start]
            ws = wf[sl]
            if plain:  # m = mu*m + g; w -= lr*m: four passes over the chunk
                ms = mf[sl]
                ms *= mu
                ms += gf[sl]
                np.multiply(ms, lr, out=d)
                ws -= d
                continue
            np.multiply(gf[sl], inv_scale, out=d)
            if wd:
                d += wd * ws
            if mf is not None:
                ms = mf[sl]
                ms *= mu
                ms += d
                if nesterov:
                    d += mu * ms
                else:
                    d[...] = ms
            d *= lr
            ws -= d

    if wf.size >= 2 * SPLIT_CHUNK:
        _parallel.split(wf.size, block)
    else:
        block(0, wf.size, 1)


def adam_update(w, g, m, v, lr: float, b1: float, b2: float, eps: float, wd: float, decoupled: bool,
                step: float | None, inv_scale: float, bc1: float | None = None, bc2: float | None = None) -> None:
    """Adam (``decoupled``: AdamW) on flat arrays, torch's formula and bias corrections.

    The corrections come from ``step`` (``1/(1 - b^t)`` in float64), or, when ``step`` is None,
    from the scalars ``bc1 = 1/(1 - b1^t)`` and ``bc2 = 1/(1 - b2^t)`` of ``adam_bias_correction``
    (the operands the seed's graph passes)."""
    wf, gf, mf, vf = flat(w), flat(g), flat(m), flat(v)
    if step is None:
        if bc1 is None or bc2 is None:
            raise ValueError("expected the Adam step or both bias corrections bc1, bc2")
        step_size = lr * bc1
        bc2_sqrt = math.sqrt(1.0 / bc2)
    else:
        t = max(step, 1.0)
        step_size = lr / (1.0 - b1**t)
        bc2_sqrt = math.sqrt(1.0 - b2**t)
    def block(lo: int, hi: int, share: int) -> None:
        for c in chunks(hi - lo, CHUNK // share):
            sl = slice(lo + c.start, lo + c.stop)
            ws, ms, vs = wf[sl], mf[sl], vf[sl]
            d = gf[sl] * inv_scale
            if wd and decoupled:
                ws *= 1.0 - lr * wd
            elif wd:
                d += wd * ws
            ms += (1.0 - b1) * (d - ms)
            vs *= b2
            d *= d
            d *= 1.0 - b2
            vs += d
            den = np.sqrt(vs)
            den *= 1.0 / bc2_sqrt
            den += eps
            np.divide(ms, den, out=den)
            den *= step_size
            ws -= den

    block(0, wf.size, 1)


def lars_trust_ratio(w: np.ndarray, g: np.ndarray, tc: float, wd: float, eps: float, inv_scale: float) -> float:
    """The LARS trust ratio of one tensor (facts 12.4)."""
    wn = math.sqrt(float(np.dot(w, w)))
    gn = math.sqrt(float(np.dot(g, g))) * inv_scale
    if wn >= 1e-12 and gn >= 1e-12:
        return min(tc * wn / (gn + wd * wn + eps), 100.0)
    return 1.0


def lars_apply(w, g, m, eta: float, lr: float, mu: float, wd: float, nesterov: bool, inv_scale: float) -> None:
    """The LARS momentum step of one tensor with trust ratio ``eta``."""
    for sl in chunks(w.size):
        ws, ms = w[sl], m[sl]
        d = g[sl] * inv_scale
        if wd:
            d += wd * ws
        d *= lr * eta
        ms *= mu
        ms += d
        if nesterov:
            d += mu * ms
            ws -= d
        else:
            ws -= ms


def sgd_call(w, g, m, nesterov: bool) -> Callable[[float, float, float, float], None] | None:
    """:func:`sgd_update` on these arrays, compiled path, made ready once for a prepared launch:
    a call taking ``(lr, mu, wd, inv_scale)`` (read by the caller on every step) that runs the
    same compiled pieces (one call, or :func:`._parallel.split_jobs`' blocks on the calling
    thread and the C worker, for the thread count in force now). None where :func:`sgd_update`
    runs NumPy, the Python threads or would refuse the arrays."""
    fn = _sgd_c()
    if fn is None or not all(a is None or (a.dtype == F32 and a.flags.c_contiguous) for a in (w, g, m)):
        return None
    wf, gf = flat(w), flat(g)
    mf = None if m is None else flat(m)
    n = wf.size
    if gf.size < n or (mf is not None and mf.size < n):
        return None
    pw, pg = wf.ctypes.data, gf.ctypes.data
    pm = None if mf is None else mf.ctypes.data
    nest = int(nesterov)
    if n < 2 * SPLIT_CHUNK or _parallel.workers() == 1:
        def whole(lr: float, mu: float, wd: float, inv: float) -> None:
            fn(pw, pg, pm, n, float(F32.type(lr)), float(F32.type(mu)), float(F32.type(wd)), float(F32.type(inv)),
               nest)
        return whole
    cuts = _parallel.job_blocks(n)
    if cuts is None:
        return None  # the Python kernel threads (split_jobs would not run)
    jobs = [_parallel.call_job(_sgd_job[0], (pw + 4 * lo, pg + 4 * lo, 0 if pm is None else pm + 4 * lo, hi - lo,
                                             nest)) for lo, hi in cuts]
    run = _prepared.jobs_call(tuple(jobs), True)
    running = list(run.array)  # the jobs as run (copies of ``jobs``): the step's scalars go there

    def split(lr: float, mu: float, wd: float, inv: float) -> None:
        args = [float(F32.type(v)) for v in (lr, mu, wd, inv)]
        for job in running:
            job.fargs[0:4] = args
        run()
    return split


def _prepared_sgd(update, has_nan, read) -> Callable[[], None] | None:
    """A prepared SGD launch: ``update`` (:func:`sgd_call`) with the step's scalars ``read()``
    (lr, mu, wd, inv_scale), skipped when ``has_nan`` is set, as the kernel does."""
    if update is None:
        return None

    def call() -> None:
        if not _skip(has_nan):
            update(*read())
    return call


def _register_sgd(name: str, mom: bool, nesterov: bool) -> None:
    if mom:
        def weight(w, g, m, lr, momentum, weight_decay, loss_scale=None, has_nan=None) -> None:
            if not _skip(has_nan):
                sgd_update(w, g, m, scalar(lr), scalar(momentum), scalar(weight_decay), nesterov,
                           _inv_scale(loss_scale))

        def bias(w, g, m, lr, momentum, loss_scale=None, has_nan=None) -> None:
            if not _skip(has_nan):
                sgd_update(w, g, m, scalar(lr), scalar(momentum), 0.0, nesterov, _inv_scale(loss_scale))

        def prepare_weight(w, g, m, lr, momentum, weight_decay, loss_scale=None, has_nan=None):
            return _prepared_sgd(sgd_call(w, g, m, nesterov), has_nan, lambda: (
                scalar(lr), scalar(momentum), scalar(weight_decay), _inv_scale(loss_scale)))

        def prepare_bias(w, g, m, lr, momentum, loss_scale=None, has_nan=None):
            return _prepared_sgd(sgd_call(w, g, m, nesterov), has_nan, lambda: (
                scalar(lr), scalar(momentum), 0.0, _inv_scale(loss_scale)))
        writes: tuple[str, ...] = ("w", "m")
    else:
        def weight(w, g, lr, weight_decay, loss_scale=None, has_nan=None) -> None:  # type: ignore[misc]
            if not _skip(has_nan):
                sgd_update(w, g, None, scalar(lr), 0.0, scalar(weight_decay), False, _inv_scale(loss_scale))

        def bias(w, g, lr, loss_scale=None, has_nan=None) -> None:  # type: ignore[misc]
            if not _skip(has_nan):
                sgd_update(w, g, None, scalar(lr), 0.0, 0.0, False, _inv_scale(loss_scale))

        def prepare_weight(w, g, lr, weight_decay, loss_scale=None, has_nan=None):  # type: ignore[misc]
            return _prepared_sgd(sgd_call(w, g, None, False), has_nan, lambda: (
                scalar(lr), 0.0, scalar(weight_decay), _inv_scale(loss_scale)))

        def prepare_bias(w, g, lr, loss_scale=None, has_nan=None):  # type: ignore[misc]
            return _prepared_sgd(sgd_call(w, g, None, False), has_nan, lambda: (
                scalar(lr), 0.0, 0.0, _inv_scale(loss_scale)))
        writes = ("w",)
    label = {"sgd": "plain SGD", "momentum": "SGD with momentum", "nesterov": "SGD with Nesterov momentum"}[name]
    weight.__doc__ = f"{label} over a weight span, weight decay added to the gradient (torch.optim.SGD)."
    bias.__doc__ = f"{label} over a bias-like span (BN gamma/beta, biases): no weight decay."
    kernel(f"range_update_weight_{name}", writes=writes, kind="range", prepare=prepare_weight)(weight)
    kernel(f"range_update_bias_{name}", writes=writes, kind="range", prepare=prepare_bias)(bias)


_register_sgd("sgd", False, False)
_register_sgd("momentum", True, False)
_register_sgd("nesterov", True, True)


def _opt(a) -> float | None:
    return None if a is None else scalar(a)


@kernel("range_update_weight_adam", writes=("w", "m", "v"), kind="range")
def range_update_weight_adam(w, g, m, v, lr, beta1, beta2, eps, weight_decay, step=None, loss_scale=None,
                             has_nan=None, bc1=None, bc2=None) -> None:
    """Adam over a weight span (torch.optim.Adam: L2 weight decay added to the gradient).
    ``step`` is the already-incremented step count (``scalar_increment`` runs first); without it
    the bias corrections ``bc1``, ``bc2`` (``adam_bias_correction``'s outputs) are used."""
    if not _skip(has_nan):
        adam_update(w, g, m, v, scalar(lr), scalar(beta1), scalar(beta2), scalar(eps), scalar(weight_decay),
                    False, _opt(step), _inv_scale(loss_scale), _opt(bc1), _opt(bc2))


@kernel("range_update_bias_adam", writes=("w", "m", "v"), kind="range")
def range_update_bias_adam(w, g, m, v, lr, beta1, beta2, eps, step=None, loss_scale=None, has_nan=None,
                           bc1=None, bc2=None) -> None:
    """Adam (or AdamW: identical without decay) over a bias-like span: no weight decay."""
    if not _skip(has_nan):
        adam_update(w, g, m, v, scalar(lr), scalar(beta1), scalar(beta2), scalar(eps), 0.0, False, _opt(step),
                    _inv_scale(loss_scale), _opt(bc1), _opt(bc2))


@kernel("range_update_weight_adamw", writes=("w", "m", "v"), kind="range")
def range_update_weight_adamw(w, g, m, v, lr, beta1, beta2, eps, weight_decay, step=None, loss_scale=None,
                              has_nan=None, bc1=None, bc2=None) -> None:
    """AdamW over a weight span (torch.optim.AdamW: decoupled decay ``w *= 1 - lr*wd`` first)."""
    if not _skip(has_nan):
        adam_update(w, g, m, v, scalar(lr), scalar(beta1), scalar(beta2), scalar(eps), scalar(weight_decay),
                    True, _opt(step), _inv_scale(loss_scale), _opt(bc1), _opt(bc2))


def _lars_range(nesterov: bool):
    def fn(w, g, m, lr, momentum, weight_decay, trust_coefficient, eps, loss_scale=None, has_nan=None, *,
           segments: tuple[tuple[int, int], ...]) -> None:
        if _skip(has_nan):
            return
        inv = _inv_scale(loss_scale)
        wf, gf, mf = flat(w), flat(g), flat(m)
        lr_, mu, wd = scalar(lr), scalar(momentum), scalar(weight_decay)
        tc, ep = scalar(trust_coefficient), scalar(eps)
        for off, size in segments:
            sl = slice(off, off + size)
            ws, gs = wf[sl], gf[sl]
            eta = lars_trust_ratio(ws, gs, tc, wd, ep, inv)
            lars_apply(ws, gs, mf[sl], eta, lr_, mu, wd, nesterov, inv)

    fn.__doc__ = (f"LARS{'-Nesterov' if nesterov else ''} (facts 12.4) over a weight span holding the "
                  f"tensors ``segments`` = ((element offset, size), ...): a trust ratio per tensor, "
                  f"then the momentum update. Bias-like spans use ``range_update_bias_"
                  f"{'nesterov' if nesterov else 'momentum'}``.")
    return fn


kernel("range_update_weight_lars", writes=("w", "m"), kind="range")(_lars_range(False))
kernel("range_update_weight_lars_nesterov", writes=("w", "m"), kind="range")(_lars_range(True))


@kernel("lars_compute_trust_ratio", writes=("trust_ratio",),
        also=("lars_compute_trust_ratio_fc", "lars_compute_trust_ratio_first", "lars_compute_trust_ratio_deep"))
def lars_compute_trust_ratio(w, g, trust_ratio, trust_coefficient, weight_decay, eps, loss_scale=None,
                             has_nan=None) -> None:
    """The seed's per-tensor LARS trust ratio into the 1-element ``trust_ratio`` (1 on NaN)."""
    eta = 1.0 if _skip(has_nan) else lars_trust_ratio(
        flat(w), flat(g), scalar(trust_coefficient), scalar(weight_decay), scalar(eps), _inv_scale(loss_scale))
    trust_ratio.reshape(-1)[0] = eta


def _lars_tensor(nesterov: bool):
    def fn(w, g, m, trust_ratio, lr, momentum, weight_decay, loss_scale=None, has_nan=None) -> None:
        if not _skip(has_nan):
            lars_apply(flat(w), flat(g), flat(m), scalar(trust_ratio), scalar(lr), scalar(momentum),
                       scalar(weight_decay), nesterov, _inv_scale(loss_scale))

    fn.__doc__ = f"The seed's per-tensor LARS{'-Nesterov' if nesterov else ''} update with a computed trust ratio."
    return fn


kernel("lars_update", writes=("w", "m"),
       also=("lars_update_fc", "lars_update_first", "lars_update_deep"))(_lars_tensor(False))
kernel("lars_nesterov_update", writes=("w", "m"),
       also=("lars_nesterov_update_fc", "lars_nesterov_update_first", "lars_nesterov_update_deep"))(_lars_tensor(True))
