"""Range kernels over flat spans of regions, and the small scalar kernels of the step.

A range argument is a flat 1-D view over a contiguous span of regions (the runtime makes it
from the span's bytes with the regions' dtype), or a sequence of such views where the seed's
node carries several ranges (paired element-wise by position). Scalars are 1-element arrays.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence

import numpy as np

from . import _cc, _parallel, _prepared
from ._util import F32, chunks, flat, scalar
from .registry import kernel

Ranges = np.ndarray | Sequence[np.ndarray]


def _seq(a: Ranges) -> tuple[np.ndarray, ...]:
    return (a,) if isinstance(a, np.ndarray) else tuple(a)


def _pairs(src: Ranges, dst: Ranges) -> list[tuple[np.ndarray, np.ndarray]]:
    s, d = _seq(src), _seq(dst)
    if len(s) != len(d):
        raise ValueError(f"expected as many source as destination ranges, got {len(s)} and {len(d)}")
    out = []
    for a, b in zip(s, d):
        af, bf = flat(a), flat(b)
        n = min(af.size, bf.size)
        out.append((af[:n], bf[:n]))
    return out


@kernel("range_clear", writes=("out",), kind="range")
def range_clear(out) -> None:
    """memset 0 of every range (gradients, metric accumulators), split among the kernel threads.
    Contiguous ranges go through C ``memset`` (all-zero bits: +0.0, 0; about 35% faster than
    ``ndarray.fill`` on the MLP's 5.8 MB of gradients; ``ctypes`` releases the GIL)."""
    for a in _seq(out):
        if not a.flags.c_contiguous:
            a[...] = 0
            continue
        p, size = a.ctypes.data, a.dtype.itemsize
        fns = _nonfinite_c()
        if fns is not None and _parallel.split_jobs(a.size, lambda lo, hi, p=p, size=size: _parallel.call_job(
                fns["jobs"]["tr_zero_job"], (p + lo * size, (hi - lo) * size))):
            continue  # the two halves on this thread and the C kernel thread
        _parallel.split(a.size, lambda lo, hi, share, p=p, size=size: ctypes.memset(p + lo * size, 0, (hi - lo) * size),
                        per_worker=2)


def _prepare_copy(src, dst):
    """The prepared launch of :func:`range_d2d_copy`: the pairs of views made once."""
    try:
        pairs = _pairs(src, dst)
    except ValueError:
        return None

    def call() -> None:
        for a, b in pairs:
            np.copyto(b, a, casting="same_kind")
    return call


@kernel("range_d2d_copy", writes=("dst",), kind="range",
        also=("range_h2d_copy_a", "range_h2d_copy_b", "range_h2d_copy_dtensor", "range_sema_switch"),
        prepare=_prepare_copy)
def range_d2d_copy(src, dst) -> None:
    """Pairwise copy ``dst[i][:n] = src[i][:n]``, n the smaller size (BN NEXT -> PREV statistics;
    host staging -> input buffers; EMA -> weights for ``range_sema_switch``)."""
    for a, b in _pairs(src, dst):
        np.copyto(b, a, casting="same_kind")


@kernel("range_cast_fp32_to_fp16", writes=("dst",), kind="range", also=("range_cast_fp16_to_fp32",))
def range_cast(src, dst) -> None:
    """Element-wise cast ``dst[:n] = src[:n]`` over the smaller size (fp32 weights -> fp16 AMP
    copies, fp16 gradients -> fp32); the dtypes of the views decide the direction."""
    for a, b in _pairs(src, dst):
        np.copyto(b, a, casting="same_kind")


NONFINITE_C_SOURCE = r"""
#include <stdint.h>
#include <string.h>
/* 1 if any of the n floats is NaN or +-Inf (exponent bits all set), else 0: one read-only pass,
   an integer OR reduction the compiler vectorizes. */
int tr_nonfinite(const float *x, long n) {
    const uint32_t *u = (const uint32_t *)x;
    uint32_t bad = 0;
    for (long i = 0; i < n; i++)
        bad |= ((u[i] & 0x7f800000u) == 0x7f800000u);
    return (int)bad;
}
/* The same over n fp16 values (exponent bits 0x7c00). */
int tr_nonfinite16(const uint16_t *x, long n) {
    uint16_t bad = 0;
    for (long i = 0; i < n; i++)
        bad |= ((x[i] & 0x7c00u) == 0x7c00u);
    return (int)bad;
}
/* Jobs of the C kernel thread (_parallel.call_job): i = (data, count, int32 result, fp16?). */
void tr_nonfinite_job(const long long *i, const double *f) {
    (void)f;
    *(int32_t *)i[2] = i[3] ? tr_nonfinite16((const uint16_t *)i[0], (long)i[1])
                            : tr_nonfinite((const float *)i[0], (long)i[1]);
}
/* i = (data, bytes): memset 0. */
void tr_zero_job(const long long *i, const double *f) {
    (void)f;
    memset((void *)i[0], 0, (size_t)i[1]);
}
"""
"""C source of the NaN/Inf test of :func:`range_check_nan` (compiled through :mod:`._cc`)."""

_nonfinite_fns: list = []


def _nonfinite_c() -> dict | None:
    """``{dtype: compiled test}`` for fp32 and fp16 (None when :func:`._cc.available` is False,
    asked on every call: ``TR_MLIR_CC=0`` switches at once)."""
    if not _cc.available():
        return None
    if not _nonfinite_fns:
        args = [ctypes.c_void_p, ctypes.c_long]
        fns = {}
        for dt, name in ((F32, "tr_nonfinite"), (np.dtype(np.float16), "tr_nonfinite16")):
            fn = _cc.function(NONFINITE_C_SOURCE, name, args)
            fn.restype = ctypes.c_int
            fns[dt] = fn
        lib = _cc.load(NONFINITE_C_SOURCE)
        fns["jobs"] = {name: ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
                       for name in ("tr_nonfinite_job", "tr_zero_job")}
        _nonfinite_fns.append(fns)
    return _nonfinite_fns[0]


def _any_nonfinite(f: np.ndarray) -> bool:
    """Whether the flat array ``f`` holds a NaN or an Inf (split among the kernel threads)."""
    fns = _nonfinite_c()
    fn = None if fns is None else fns.get(f.dtype)
    parts: list = []
    if fn is not None:
        p, size = f.ctypes.data, f.dtype.itemsize
        res = np.zeros(8, np.int32)  # one slot per block (split_jobs makes at most 4: lo * 8 // n differ)
        half = int(f.dtype.itemsize == 2)
        job = fns["jobs"]["tr_nonfinite_job"]
        n = f.size
        if _parallel.split_jobs(n, lambda a, b: _parallel.call_job(
                job, (p + size * a, b - a, res.ctypes.data + 4 * (a * 8 // n), half))):
            return bool(res.any())
        _parallel.split(f.size, lambda a, b, share: parts.append(fn(p + size * a, b - a)), per_worker=2)
        return any(parts)
    _parallel.split(f.size, lambda a, b, share: parts.append((float(f[a:b].max()), float(f[a:b].min()))))
    return not all(np.isfinite(v) for p in parts for v in p)


def _nonfinite_call(f: np.ndarray) -> Callable[[], bool] | None:
    """:func:`_any_nonfinite` on the flat array ``f`` made ready once (prepared launches): the
    compiled test, whole or as :func:`._parallel.split_jobs`' blocks for the thread count in
    force now; None where it runs NumPy or the Python threads."""
    fns = _nonfinite_c()
    fn = None if fns is None else fns.get(f.dtype)
    if fn is None:
        return None
    p, size, n = f.ctypes.data, f.dtype.itemsize, f.size
    if n < _parallel.MIN_SPLIT_ELEMENTS or _parallel.workers() == 1:
        return lambda: bool(fn(p, n))
    cuts = _parallel.job_blocks(n)
    if cuts is None:
        return None  # the Python kernel threads (split_jobs would not run)
    res = np.zeros(8, np.int32)  # as _any_nonfinite: one slot per block, each block writes its own
    job, half = fns["jobs"]["tr_nonfinite_job"], int(size == 2)
    run = _prepared.jobs_call(tuple(_parallel.call_job(job, (p + size * a, b - a, res.ctypes.data + 4 * (a * 8 // n),
                                                             half)) for a, b in cuts), True)

    def split() -> bool:
        run()
        return bool(res.any())
    split.res = res  # type: ignore[attr-defined]
    return split


def _prepare_check_nan(grads, has_nan, *, clip: float = 0.0):
    """The prepared launch of :func:`range_check_nan` without clipping: one ready test per range
    (:func:`_nonfinite_call`), stopping at the first range that has a NaN or Inf, as the kernel."""
    if clip > 0:
        return None
    tests = []
    for g in _seq(grads):
        if not g.flags.c_contiguous:
            return None
        f = g.reshape(-1)
        if f.size:
            test = _nonfinite_call(f)
            if test is None:
                return None
            tests.append(test)
    flag = has_nan.reshape(-1)

    def call() -> None:
        flag[0] = 1 if any(test() for test in tests) else 0
    return call


@kernel("range_check_nan", writes=("has_nan", "grads"), kind="range", prepare=_prepare_check_nan)
def range_check_nan(grads, has_nan, *, clip: float = 0.0) -> None:
    """``has_nan = 1`` if any NaN or Inf in the gradient ranges, else 0 (facts 12.4).

    With ``clip > 0``: gradients are clamped to [-clip, clip] in place, NaN sets the flag and
    Inf does not (it is clamped). The test reads each range once: a compiled pass over the bits
    (:mod:`._cc`) or, without a C compiler, the max/min reductions (NaN and Inf propagate); no
    temporary of gradient size is made.
    """
    bad = False
    for g in _seq(grads):
        f = flat(g)
        if f.size == 0:
            continue
        if clip > 0:
            parts: list[tuple[float, float]] = []
            _parallel.split(f.size, lambda a, b, share, f=f: parts.append((float(f[a:b].max()),
                                                                              float(f[a:b].min()))))
            bad = bad or any(np.isnan(v) for p in parts for v in p)
            np.clip(f, -clip, clip, out=f)
        else:
            bad = bad or _any_nonfinite(f)
    has_nan.reshape(-1)[0] = 1 if bad else 0


@kernel("range_grad_scaling", writes=("loss_scale",), kind="range")
def range_grad_scaling(has_nan, loss_scale) -> None:
    """AMP loss scale: on overflow (``has_nan``) halve it, floor 1.0; no growth (facts 12.4)."""
    if scalar(has_nan):
        s = loss_scale.reshape(-1)
        s[0] = max(float(s[0]) * 0.5, 1.0)


@kernel("range_accum_metrics", writes=("acc_loss", "acc_top1", "acc_top5"), kind="range")
def range_accum_metrics(batch_size, loss, top1, top5, acc_loss, acc_top1, acc_top5) -> None:
    """``acc_x += x * batch_size`` for loss, top1, top5 (sums over samples; the host divides by
    the sample count at the end of the epoch)."""
    bs = scalar(batch_size)
    for x, acc in ((loss, acc_loss), (top1, acc_top1), (top5, acc_top5)):
        a = acc.reshape(-1)
        a[0] = float(a[0]) + scalar(x) * bs


@kernel("range_mean_allreduce", writes=("data",), kind="range",
        also=("range_sum_allreduce", "range_bn_stats_allreduce"))
def range_allreduce(data, *, world_size: int = 1) -> None:
    """All-reduce of a range across data-parallel ranks. With one process (the NumPy backend)
    the sum and the mean are the data itself, so nothing is done; more ranks need the CUDA
    backend's NCCL communicator and raise ``NotImplementedError`` here."""
    if world_size != 1:
        raise NotImplementedError(f"the NumPy backend runs one process, got world_size={world_size}; "
                                  f"data-parallel all-reduce needs the CUDA backend")


@kernel("range_ema_param_update", writes=("ema",), kind="range")
def range_ema_param_update(w, ema, decay, has_nan=None) -> None:
    """``ema = decay * ema + (1 - decay) * w`` over the ranges (chunked, fp32), skipped when
    ``has_nan`` is set: the optimizer skipped the step, so the EMA is not updated either (an
    ``AveragedModel.update_parameters`` made only after a real ``optimizer.step``)."""
    if has_nan is not None and scalar(has_nan) != 0:
        return
    d = scalar(decay)
    for a, e in _pairs(w, ema):
        for sl in chunks(a.size):
            t = e[sl] * d
            t += (1.0 - d) * a[sl].astype(F32, copy=False)
            e[sl] = t


@kernel("scalar_increment", writes=("step",))
def scalar_increment(step, has_nan=None) -> None:
    """``step += 1`` (Adam's step count), skipped when ``has_nan`` is set: a skipped update is
    not a step, as with PyTorch's GradScaler (the seed counted it; DESIGN section 7)."""
    if has_nan is not None and scalar(has_nan):
        return
    s = step.reshape(-1)
    s[0] = s[0] + 1


@kernel("adam_bias_correction", writes=("bc1", "bc2"))
def adam_bias_correction(step, beta1, beta2, bc1, bc2) -> None:
    """``bc1 = 1 / (1 - beta1^step)``, ``bc2 = 1 / (1 - beta2^step)`` (facts 12.4; the Adam range
    kernels compute the same from ``step`` themselves, in float64)."""
    t = scalar(step)
    b1, b2 = scalar(beta1), scalar(beta2)
    bc1.reshape(-1)[0] = 1.0 / (1.0 - b1**t) if t > 0 else 1.0
    bc2.reshape(-1)[0] = 1.0 / (1.0 - b2**t) if t > 0 else 1.0
