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
fp16 (AMP) activations get fp32 statistics and no temporary of activation size exists. Parameters,
running statistics and saved statistics are fp32 arrays of C elements (any shape, e.g. (1, 1, 1, C)).
"""

from __future__ import annotations

import numpy as np

from ._util import F32, row_chunks, rows2d, scalar
from .registry import kernel


def _vec(a: np.ndarray) -> np.ndarray:
    return a.reshape(-1)


def bn_forward_train(x, gamma, beta, running_mean, running_var, y, save_mean, save_istd, eps, momentum) -> None:
    """Training-mode batch norm (see the module doc); ``y`` may be ``x``'s buffer."""
    x2, y2 = rows2d(x), rows2d(y)
    m, c = x2.shape
    mean, istd = _vec(save_mean), _vec(save_istd)
    np.add.reduce(x2, axis=0, dtype=F32, out=mean)
    mean *= 1.0 / m
    istd.fill(0)
    for r in row_chunks(m, c):
        t = x2[r] - mean
        t *= t
        istd += t.sum(axis=0, dtype=F32)
    var = istd * (1.0 / m)
    mom = scalar(momentum)
    rm, rv = _vec(running_mean), _vec(running_var)
    rm *= 1.0 - mom
    rm += mom * mean
    rv *= 1.0 - mom
    rv += (mom * (m / (m - 1) if m > 1 else 1.0)) * var
    var += scalar(eps)
    np.sqrt(var, out=istd)
    np.reciprocal(istd, out=istd)
    scale = _vec(gamma) * istd
    shift = _vec(beta) - mean * scale
    for r in row_chunks(m, c):
        t = x2[r] * scale
        t += shift
        y2[r] = t


def bn_backward(dy, x, gamma, save_mean, save_istd, dx, dgamma, dbeta) -> None:
    """Batch-norm backward from the saved mean / inv_std; ``dx`` may alias ``x`` or ``dy``.

    dbeta = sum(dy); dgamma = sum(dy * xhat); dx = gamma * inv_std * (dy - dbeta/M - xhat * dgamma/M).
    ``dx`` None: parameter gradients only.
    """
    x2, dy2 = rows2d(x), rows2d(dy)
    m, c = x2.shape
    mean, istd = _vec(save_mean), _vec(save_istd)
    dg, db = _vec(dgamma), _vec(dbeta)
    dg.fill(0)
    db.fill(0)
    for r in row_chunks(m, c):
        xh = x2[r] - mean
        xh *= istd
        d = dy2[r].astype(F32, copy=False)
        db += d.sum(axis=0, dtype=F32)
        xh *= d
        dg += xh.sum(axis=0, dtype=F32)
    if dx is None:
        return
    dx2 = rows2d(dx)
    k = _vec(gamma) * istd
    mdb, mdg = db * (1.0 / m), dg * (1.0 / m)
    for r in row_chunks(m, c):
        xh = x2[r] - mean
        xh *= istd
        xh *= mdg
        t = dy2[r] - mdb
        t -= xh
        t *= k
        dx2[r] = t


def bn_affine(x, scale, bias, y) -> None:
    """``y = x * scale + bias`` per channel (fp32 math); ``y`` may be ``x``'s buffer."""
    x2, y2 = rows2d(x), rows2d(y)
    m, c = x2.shape
    sc, bi = _vec(scale), _vec(bias)
    for r in row_chunks(m, c):
        t = x2[r] * sc
        t += bi
        y2[r] = t


@kernel("bn2d_fwd", writes=("y", "running_mean", "running_var", "save_mean", "save_istd"), also=("bn1d_fwd",))
def bn_fwd(x, gamma, beta, running_mean, running_var, y, save_mean, save_istd, eps=None, momentum=None) -> None:
    """Batch norm, training mode. x, y (N, H, W, C) (bn1d: (N, 1, 1, C)); gamma, beta, running and
    saved statistics C-element fp32. Running statistics are updated in place (PyTorch momentum,
    unbiased variance); saves the batch mean and inv_std = 1/sqrt(var + eps). ``eps`` and
    ``momentum`` are scalar operands (the ``bn_epsilon`` / ``bn_momentum`` scalars, or numbers;
    None: PyTorch's 1e-5 and 0.1)."""
    bn_forward_train(x, gamma, beta, running_mean, running_var, y, save_mean, save_istd,
                     1e-5 if eps is None else eps, 0.1 if momentum is None else momentum)


@kernel("bn2d_bwd", writes=("dx", "dgamma", "dbeta"), also=("bn1d_bwd",))
def bn_bwd(dy, x, gamma, save_mean, save_istd, dgamma, dbeta, dx=None) -> None:
    """Batch norm backward: dgamma, dbeta (overwritten) and dx, which may be x's buffer."""
    bn_backward(dy, x, gamma, save_mean, save_istd, dx, dgamma, dbeta)


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
