"""Prepared launches of the compiled batch-norm training kernels (:mod:`.norm`, fp32 NHWC).

A BN launch of the kernel function runs two C passes over the activation (:mod:`._cnorm`) and,
between them, about fifteen NumPy operations on C-element vectors (the partial sums added, the
mean and variance, the running statistics, inv_std, the folded scale and shift; in the backward
the parameter gradients and the input gradient's coefficients), with the argument lists built
on every call: 50-100 us of Python per launch, where the passes take a few microseconds at
MobileNetV2's CIFAR sizes. The prepared call (:class:`.registry.PreparedLaunch`) is three C
parts, made once: the first pass (:func:`._cnorm.stats_pass` / :func:`._cnorm.backward_sums_pass`,
into partial sums of its own), the per-channel work as one C job on the calling thread
(:data:`._cnorm.COEF_SOURCE`, reading ``eps`` and ``momentum`` through their arrays on every
call), and the second pass (:func:`._cnorm.apply_pass` / :func:`._cnorm.input_grad_pass`), each on
the same row blocks as the kernel function's (:func:`._cnorm._bounds`: fixed by the shape), a
:func:`._prepared.c_call` of them or, where they run in turn, one per block: so every part has
:class:`._prepared.Step` s and a :class:`._prepared.ReplayGroup` can run the launch with its
neighbours. The C code does each NumPy operation in NumPy's precision and order, so the bits
are the kernel function's (tests/test_prepared_norm.py, tests/test_fuzz_prepared_norm.py), but
for the sign and payload of a NaN made from two NaNs: NumPy's ``rm += t`` keeps the first
operand's in its SIMD lanes and the second's in its scalar tail, which no per-channel loop can
follow (a NaN stays a NaN).

Declined (None: the kernel function runs, with its own errors): what the kernel function would
not run compiled (fp16, non-contiguous, ``TR_MLIR_CC=0``, more than :data:`._cnorm.MAX_CHANNELS`
channels), a per-channel array that is not fp32, contiguous and of C elements, a scalar operand
that is neither a number nor a 1-element fp32 / fp64 array, statistics operands the kernel would
refuse, an empty activation, and a written array sharing memory with another operand where the
kernel function does not expect it (its NumPy steps run over whole vectors, the C code channel
by channel).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

import numpy as np

from . import _cc, _cnorm, _parallel, _prepared, conv_stats
from ._util import F32, rows2d

_ptr = _cc.address


def _scalar(v, default: float) -> _cnorm.Scalar | None:
    """A scalar operand as the C code reads it: the ``float(v.reshape(-1)[0])`` of a 1-element
    fp32 / fp64 array on every call, ``float(v)`` of a number (None: ``default``) once."""
    s = _cnorm.Scalar()
    if v is None:
        s.kind, s.value = 0, default
    elif isinstance(v, np.ndarray):
        if v.size != 1 or v.dtype not in (np.float32, np.float64):
            return None
        s.p, s.kind = _ptr(v), 1 if v.dtype == np.float32 else 2
    else:
        try:
            s.kind, s.value = 0, float(v)
        except (TypeError, ValueError):
            return None
    return s


def _per_channel(c: int, *arrays: np.ndarray | None) -> bool:
    """Every array (all required: None is not) fp32, contiguous, of ``c`` elements."""
    return all(isinstance(a, np.ndarray) and a.dtype == F32 and a.flags.c_contiguous and a.size == c
               for a in arrays)


def _like_rows(x: np.ndarray, *arrays: np.ndarray | None) -> bool:
    """Each given array has x's (M, C) rows view (the kernels read and write M * C elements)."""
    return all(a is None or (a.ndim >= 1 and a.shape[-1] == x.shape[-1] and a.size == x.size) for a in arrays)


def _apart(written: tuple, read: tuple) -> bool:
    """No array of ``written`` shares memory with another given array (``written`` or ``read``)."""
    arrays = [a for a in (*written, *read) if isinstance(a, np.ndarray)]
    count = sum(isinstance(a, np.ndarray) for a in written)
    return not any(i != j and np.may_share_memory(arrays[i], arrays[j])
                   for i in range(count) for j in range(len(arrays)))


def _blocks(fn, pieces: list[tuple[int, ...]], elements: int) -> Callable[[], None]:
    """A pass's blocks (:func:`._cnorm._bounds`) over ``elements`` elements as a prepared call: a
    :func:`._prepared.c_call` on the kernel threads where :func:`._cnorm.concurrent` (from any size
    with the C worker and the threads not contended: the C jobs' hand-off; else from the kernel
    function's :data:`._cnorm.SPLIT_ELEMENTS`, as the Python kernel threads cost more), else one
    after the other on the calling thread (the same blocks and partial sums, so the same bits)."""
    jobs = _parallel.c_gemm() and not _prepared.pinned_contended()
    if len(pieces) == 1 or _cnorm.concurrent(pieces, None if jobs else elements):
        return _prepared.c_call(fn, pieces)
    return _prepared.sequence(*(_prepared.c_call(fn, [p]) for p in pieces))


def _keep(call: Callable[[], None], *objects) -> Callable[[], None]:
    call.keep = objects  # type: ignore[attr-defined]  # what the jobs point to lives as long as the call
    return call


def forward_call(x, gamma, beta, running_mean, running_var, y, save_mean, save_istd, eps, momentum,
                 relu: bool = False, mask=None, skip=None, out_sum=None, out_sq=None) -> Callable[[], None] | None:
    """The prepared launch of a BN forward (``bn2d_fwd`` / ``bn1d_fwd``; ``relu``: ``bn2d_relu_fwd``
    with the INT8 ``mask`` or None, and ``skip``: ``bn2d_add_relu_fwd``): x, y, skip, mask
    (N, H, W, C) or (N, 1, 1, C), the others fp32 C-element arrays; ``eps``, ``momentum`` scalar
    operands or None (1e-5, 0.1); ``out_sum``, ``out_sq``: the conv's statistics
    (:mod:`.conv_stats`), in place of the statistics pass. Returns None where the kernel
    function would not run the compiled kernels or anything is unusual (module doc)."""
    if x.ndim == 0 or x.size == 0 or not _cnorm.usable(x, y, skip) \
            or mask is not None and (mask.dtype != np.int8 or not mask.flags.c_contiguous):
        return None
    c = x.shape[-1]
    try:
        stats = conv_stats.check(out_sum, out_sq, c)
    except ValueError:
        return None
    eps_s, mom_s = _scalar(eps, 1e-5), _scalar(momentum, 0.1)
    vectors = (gamma, beta, running_mean, running_var, save_mean, save_istd, *(stats or ()))
    if eps_s is None or mom_s is None or not _per_channel(c, *vectors) or not _like_rows(x, y, mask, skip) \
            or not _apart((running_mean, running_var, save_mean, save_istd, y, mask),
                          (gamma, beta, *(stats or ()), eps, momentum)) \
            or not _apart((running_mean, running_var, save_mean, save_istd), (x, skip)):
        return None
    x2, y2 = rows2d(x), rows2d(y)
    m = x2.shape[0]
    folded = np.empty((2, c), F32)  # the fp32 scale and shift
    args = _cnorm.FwdArgs(gamma=_ptr(gamma), beta=_ptr(beta), rm=_ptr(running_mean), rv=_ptr(running_var),
                          mean=_ptr(save_mean), istd=_ptr(save_istd), scale=_ptr(folded[0]), shift=_ptr(folded[1]),
                          eps=eps_s, momentum=mom_s, m=m, c=c)
    calls, parts = [], None
    if stats is None:
        fn, pieces, parts = _cnorm.stats_pass(x2, own=True)
        calls.append(_blocks(fn, pieces, x2.size))
        args.parts, args.stride, args.t, args.pivot = _ptr(parts[0]), _cnorm.part_stride(c), len(parts), _ptr(x2)
    else:
        args.sum, args.sq_sum = _ptr(stats[0]), _ptr(stats[1])
    calls.append(_prepared.c_call(_cnorm.coef_function("bn_fwd_finish"), [(ctypes.addressof(args),)]))
    calls.append(_blocks(*_cnorm.apply_pass(x2, y2, folded[0], folded[1], relu,
                                                     None if mask is None else rows2d(mask),
                                                     None if skip is None else rows2d(skip)), x2.size))
    return _keep(_prepared.sequence(*calls), args, parts, folded)


def backward_call(dy, x, gamma, save_mean, save_istd, dx, dgamma, dbeta, gate=None, dskip=None
                  ) -> Callable[[], None] | None:
    """The prepared launch of a BN backward (:func:`.norm.bn_backward`'s arguments: dy, x, dx,
    dskip and the ReLU gate's array (N, H, W, C) or (N, 1, 1, C), ``gate`` ``("m", INT8 mask)``,
    ``("y", ReLU output)`` or None, dx None: the parameter gradients only; the others fp32
    C-element arrays). Returns None where the kernel function would not run the compiled
    kernels or anything is unusual (module doc)."""
    g = None if gate is None else gate[1]
    relu_out = () if gate is None or gate[0] == "m" else (g,)
    if x.ndim == 0 or x.size == 0 or (g is None) != (gate is None) or dskip is not None and gate is None \
            or not _cnorm.usable(x, dy, dx, dskip, *relu_out) \
            or g is not None and (not g.flags.c_contiguous or gate[0] == "m" and g.dtype != np.int8):
        return None
    c = x.shape[-1]
    if not _per_channel(c, gamma, save_mean, save_istd, dgamma, dbeta) or not _like_rows(x, dy, dx, dskip, g) \
            or not _apart((dgamma, dbeta), (gamma, save_mean, save_istd, dy, x, g, dx, dskip)) \
            or not _apart((dx, dskip), (gamma, save_mean, save_istd)):
        return None
    x2, mu = rows2d(x), save_mean.reshape(-1)
    gate2 = None if gate is None else (gate[0], rows2d(g))
    skip2 = None if dskip is None else rows2d(dskip)
    fn, pieces, parts = _cnorm.backward_sums_pass(rows2d(dy), x2, mu, gate2, skip2, own=True)
    coef = None if dx is None else np.empty((3, c), F32)  # a, b, c0
    args = _cnorm.BwdArgs(parts=_ptr(parts[0]), stride=_cnorm.part_stride(c), t=len(parts), istd=_ptr(save_istd),
                          gamma=_ptr(gamma), dgamma=_ptr(dgamma), dbeta=_ptr(dbeta), m=x2.shape[0], c=c)
    calls = [_blocks(fn, pieces, x2.size),
             _prepared.c_call(_cnorm.coef_function("bn_bwd_coeffs"), [(ctypes.addressof(args),)])]
    if coef is not None:
        args.a, args.b, args.c0 = _ptr(coef[0]), _ptr(coef[1]), _ptr(coef[2])
        calls.append(_blocks(*_cnorm.input_grad_pass(rows2d(dy), x2, rows2d(dx), coef[0], coef[1], mu,
                                                     coef[2], gate2, skip2), x2.size))
    return _keep(_prepared.sequence(*calls), args, parts, coef)
