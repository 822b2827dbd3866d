"""Softmax cross-entropy with label smoothing: loss, top-1, top-5, predictions and the gradient.

Logits (N, 1, 1, K) or (N, K), fp32 or fp16; labels int (N,) (any shape of N elements);
``probs`` (N, K) fp32. Only the first ``B = batch_size[0]`` rows count (the rest are padding of
a short last batch: no loss, no metric, zero gradient); B defaults to N.

Loss (PyTorch ``CrossEntropyLoss(label_smoothing=ls)``, mean over the batch)::

    loss_b = (1 - ls) * (-log p_y) + (ls / K) * sum_c (-log p_c)
           = lse_b - (1 - ls) * z_y - ls * mean_c z_c,        lse_b = log sum_c exp z_c

computed from the log-sum-exp, exactly as torch's ``log_softmax`` (the mean term only where
ls != 0, so a -inf logit leaves the loss finite, as in torch). The facts sheet's kernel
(section 12.4) computes ``p = e / (sum e + 1e-8)`` and ``log(p + 1e-8)``: the same formula up to
those epsilons, which shift the loss by up to ~1e-8/p_c per class (visible only for classes of
probability near 1e-8, where the seed clamps -log p at ~18.4 and torch does not). We match torch.

``top1`` = fraction of the B rows whose arg-max is the label; ``top5`` = fraction whose label has
fewer than 5 logits strictly above it (``top5 = top1`` when K < 5). The gradient (facts 12.4)::

    dlogits_b = (p_b - ls/K - (1 - ls) * onehot(y_b)) * loss_scale / B

carries the loss scale (1.0 in fp32, the AMP scale otherwise). Rows are processed in chunks
(fp32), so fp16 logits are exact up to the final rounding and nothing of logits' size is
allocated. The forward runs the C kernel of :mod:`._closs` for fp32 logits and probabilities,
int32 labels and predictions, all C-contiguous, where a C compiler is available (one call
instead of about 25 NumPy calls; the same formulas, see there for the rounding); the backward
is NumPy's.
"""

from __future__ import annotations

import numpy as np

from . import _closs
from ._util import F32, row_chunks, scalar
from .registry import kernel


def _rows(n: int, batch_size) -> int:
    if batch_size is None:
        return n
    b = int(scalar(batch_size))
    if not 0 <= b <= n:
        raise ValueError(f"expected batch size in [0, {n}], got {b}")
    return b


def _labels(labels: np.ndarray, n: int, k: int) -> np.ndarray:
    lab = labels.reshape(-1)
    if lab.size != n:
        raise ValueError(f"expected {n} labels, got {lab.size}")
    return lab


def _check_range(lab: np.ndarray, k: int) -> None:
    if lab.size and (lab.min() < 0 or lab.max() >= k):
        raise ValueError(f"expected labels in [0, {k}), got values in [{lab.min()}, {lab.max()}]")


def _write_forward(sums: tuple[float, float, float], b: int, loss, top1, top5, inv_batch) -> None:
    """The forward's scalar outputs from the loss sum and hit counts of the first ``b`` rows."""
    inv = 1.0 / b if b else 0.0
    if inv_batch is not None:
        inv_batch.reshape(-1)[0] = inv
    loss.reshape(-1)[0] = sums[0] * inv
    top1.reshape(-1)[0] = sums[1] * inv
    top5.reshape(-1)[0] = sums[2] * inv


def _bad_label(lab: np.ndarray, b: int, k: int, row: int) -> ValueError:
    _check_range(lab[:b], k)
    return ValueError(f"expected labels in [0, {k}), got {int(lab[row])} in row {row}")


def _prepare_fwd(logits, labels, probs, loss, top1, top5, pred=None, batch_size=None, label_smoothing=None,
                 inv_batch=None):
    """The prepared launch of :func:`softmax_ce_fwd` where it runs the C kernel
    (:func:`._closs.forward_call`; the batch size and label smoothing still read each step);
    else None."""
    k = logits.shape[-1] if logits.ndim else 0
    if k == 0 or logits.size % k:
        return None
    n = logits.size // k
    if not all(a is None or a.flags.c_contiguous for a in (logits, labels, probs, pred)):
        return None  # a reshape of a strided array is a copy made now: the kernel reads the array each step
    try:
        z2, p2, lab = logits.reshape(n, k), probs.reshape(n, k), _labels(labels, n, k)
    except ValueError:
        return None
    pr = None if pred is None else pred.reshape(-1)
    if not _closs.usable(z2, lab, p2, pr) or pr is not None and pr.size != n:
        return None
    run = _closs.forward_call(z2, lab, p2, pr)

    def call() -> None:
        b = _rows(n, batch_size)
        loss_sum, correct1, correct5, bad = run(b, 0.0 if label_smoothing is None else scalar(label_smoothing))
        if bad >= 0:
            raise _bad_label(lab, b, k, bad)
        _write_forward((loss_sum, correct1, correct5), b, loss, top1, top5, inv_batch)
    return call


@kernel("softmax_ce_fwd", writes=("probs", "loss", "top1", "top5", "pred", "inv_batch"), also=("softmax_ce_inf",),
        prepare=_prepare_fwd)
def softmax_ce_fwd(logits, labels, probs, loss, top1, top5, pred=None, batch_size=None, label_smoothing=None,
                   inv_batch=None) -> None:
    """Softmax + cross-entropy forward: writes ``probs`` (N, K) fp32, the 1-element ``loss``
    (batch mean), ``top1``, ``top5`` (fractions of the batch), optionally ``pred`` (N,) arg-max
    labels and ``inv_batch`` = 1/B (the seed's ``inv_scaling_factor``). ``label_smoothing``: a
    scalar operand (None: 0)."""
    k = logits.shape[-1]
    n = logits.size // k
    z2, p2 = logits.reshape(n, k), probs.reshape(n, k)
    lab = _labels(labels, n, k)
    b = _rows(n, batch_size)
    ls = 0.0 if label_smoothing is None else scalar(label_smoothing)
    pr = None if pred is None else pred.reshape(-1)
    if pr is not None and pr.size != n:
        raise ValueError(f"expected {n} predictions (pred), got {pr.size}")
    if _closs.usable(z2, lab, p2, pr):
        loss_sum, correct1, correct5, bad = _closs.forward(z2, lab, p2, pr, b, ls)
        if bad >= 0:
            raise _bad_label(lab, b, k, bad)
    else:
        loss_sum, correct1, correct5 = _numpy_forward(z2, lab, p2, pr, b, ls)
    _write_forward((loss_sum, correct1, correct5), b, loss, top1, top5, inv_batch)


def _numpy_forward(z2: np.ndarray, lab: np.ndarray, p2: np.ndarray, pr: np.ndarray | None, b: int, ls: float
                   ) -> tuple[float, float, float]:
    """The NumPy forward of :func:`softmax_ce_fwd` over row chunks: writes ``p2`` and ``pr``,
    returns the float64 loss sum and the top-1 / top-5 hit counts of the first ``b`` rows."""
    n, k = z2.shape
    loss_sum = correct1 = correct5 = 0.0
    for rc in row_chunks(n, k):
        z = z2[rc].astype(F32, copy=False)
        mx = z.max(axis=1)
        e = z - mx[:, None]
        np.exp(e, out=e)
        s = e.sum(axis=1)
        e /= s[:, None]
        p2[rc] = e
        am = z.argmax(axis=1)
        if pr is not None:
            pr[rc] = am
        hi = min(rc.stop, b)
        if hi <= rc.start:
            continue
        v = slice(0, hi - rc.start)
        y = lab[rc][v]
        _check_range(y, k)
        zv = z[v]
        zy = zv[np.arange(zv.shape[0]), y]
        lse = mx[v] + np.log(s[v])
        lb = lse - (1.0 - ls) * zy
        if ls:  # not 0 * mean(z): a -inf logit would make it NaN
            lb = lb - ls * zv.mean(axis=1)
        loss_sum += float(lb.sum(dtype=np.float64))
        # a row with a NaN/Inf logit is a miss: comparisons with NaN are False, so without
        # this guard a diverged run would count every row as a top-5 hit
        finite = np.isfinite(zv).all(axis=1)
        hit1 = (am[v] == y) & finite
        correct1 += float(hit1.sum())
        if k >= 5:
            correct5 += float((((zv > zy[:, None]).sum(axis=1) < 5) & finite).sum())
        else:
            correct5 += float(hit1.sum())
    return loss_sum, correct1, correct5


@kernel("softmax_ce_bwd", writes=("dlogits",))
def softmax_ce_bwd(probs, labels, dlogits, loss_scale=None, batch_size=None, label_smoothing=None,
                   inv_batch=None) -> None:
    """``dlogits = (p - ls/K - (1-ls) onehot(y)) * loss_scale / B`` for the first B rows, 0 for
    the rest. ``dlogits`` (logits' shape, fp32 or fp16) may be the logits' buffer. ``loss_scale``
    None means 1. B comes from ``batch_size``; else from ``inv_batch`` (1/B written by the
    forward); else it is N."""
    k = probs.shape[-1]
    n = probs.size // k
    p2, d2 = probs.reshape(n, k), dlogits.reshape(n, k)
    lab = _labels(labels, n, k)
    if batch_size is None and inv_batch is not None:
        ib = scalar(inv_batch)
        batch_size = round(1.0 / ib) if ib > 0 else 0
    b = _rows(n, batch_size)
    ls = 0.0 if label_smoothing is None else scalar(label_smoothing)
    c = (1.0 if loss_scale is None else scalar(loss_scale)) / b if b else 0.0
    for rc in row_chunks(n, k):
        hi = min(rc.stop, b)
        t = p2[rc] - ls / k
        if hi > rc.start:
            y = lab[rc.start:hi]
            _check_range(y, k)
            t[np.arange(hi - rc.start), y] -= 1.0 - ls
        t[max(hi - rc.start, 0):] = 0.0
        t *= c
        d2[rc] = t
