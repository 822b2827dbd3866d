"""Kernel-by-kernel checks of the CUDA backend against the NumPy reference kernels.

:func:`cases` builds, for every kernel name of :data:`tr_mlir.lowering.cpu.KERNELS`, one or
more :class:`Case` (random arrays of small shapes, static params, in fp32 and, where the kernel
takes activations, AMP dtypes); :func:`run_case` runs a case through the NumPy kernel and through
a :class:`~tr_mlir.lowering.cuda.backend.CudaBackend` (a GPU, or the CPU emulator) on identical
inputs and returns the error of every array the kernel writes. Workspaces follow each side's own
rule (:meth:`~tr_mlir.lowering.cpu.KernelSpec.workspace_shapes` for the CPU and for the
backend's target): a CUDA kernel touching a workspace its target's rule does not declare gets
``None`` there and fails, as it would on a plan of that target. Used by
``tests/test_gpu_kernels.py`` (emulator, CI) and ``scripts/gpu_smoke.py`` (a real GPU).

Errors: float arrays by ``max|got - want| / max(1, max|want|)`` (so fp16 rounding of values near
1 counts as ~1e-3); integer arrays (masks, predictions) by the fraction of differing elements.
Outputs start from random values in both runs, so an element the GPU kernel fails to write shows
as an error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tr_mlir.lowering.cpu import KERNELS
from tr_mlir.lowering.cpu import conv as cpu_conv
from tr_mlir.lowering.cpu.activation import ACTIVATIONS

F32, F16, I8, I32 = np.dtype(np.float32), np.dtype(np.float16), np.dtype(np.int8), np.dtype(np.int32)


@dataclass
class Case:
    """One kernel call: ``arrays`` (name -> array, or tuple of arrays for multi-range arguments),
    static ``params``, ``host``: arguments that live in pinned host memory (H2D copies),
    tolerances for float (``tol``) and integer (``int_tol``: fraction of differing elements)
    outputs, ``skip``: written arrays not compared (scratch the kernel documents as undefined)."""

    label: str
    kernel: str
    arrays: dict[str, Any]
    params: dict[str, Any] = field(default_factory=dict)
    host: tuple[str, ...] = ()
    tol: float = 1e-4
    int_tol: float = 0.0
    skip: tuple[str, ...] = ()


def _r(rng: np.random.Generator, shape: tuple[int, ...], dt: Any = F32, lo: float = -1.0, hi: float = 1.0) -> np.ndarray:
    return rng.uniform(lo, hi, shape).astype(dt)


def _mask(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return (rng.random(shape) > 0.4).astype(I8)


def _s(v: float, dt: Any = F32) -> np.ndarray:
    return np.array([v], dt)


def _tol(dt: Any) -> float:
    return 2e-2 if np.dtype(dt) == F16 else 2e-4


def cases(seed: int = 0) -> list[Case]:
    """Check cases covering every registry kernel (module doc)."""
    rng = np.random.default_rng(seed)
    out: list[Case] = []
    add = out.append

    # -- convolution -------------------------------------------------------------------------
    geoms = [("im2col", (2, 7, 7, 5), 6, 3, 1, 1, 1), ("strided", (2, 9, 8, 3), 5, 3, 2, 1, 1),
             ("pointwise", (2, 5, 5, 20), 70, 1, 1, 0, 1), ("depthwise", (2, 7, 7, 6), 6, 3, 2, 1, 6),
             ("grouped", (2, 6, 6, 4), 6, 3, 1, 1, 2), ("k7s2", (1, 12, 12, 3), 8, 7, 2, 3, 1)]
    for tag, xs, ko, k, s, p, g in geoms:
        ho = (xs[1] + 2 * p - k) // s + 1
        wo = (xs[2] + 2 * p - k) // s + 1
        ws = (ko, k, k, xs[3] // g)
        ys = (xs[0], ho, wo, ko)
        params = {"k": k, "s": s, "p": p, "groups": g}
        for dt in (F32, F16):
            spec = KERNELS["conv_fwd"]
            arr = {"x": _r(rng, xs, dt), "w": _r(rng, ws, dt), "y": _r(rng, ys, dt)}
            arr.update({n: np.zeros(sh, d) for n, (sh, d) in spec.workspace_shapes(arr, **params).items()})
            for name in ("conv_fwd", "conv_inf"):
                add(Case(f"{name} {tag} {dt.name}", name, {k_: v.copy() for k_, v in arr.items()}, params,
                         tol=_tol(dt), skip=tuple(spec.workspaces)))
            for name, with_dx in (("conv_bwd", True), ("conv_bwd_first_layer", False)):
                dw_dt = F16 if dt == F16 and tag == "im2col" else F32
                arr = {"dy": _r(rng, ys, dt), "x": _r(rng, xs, dt), "w": _r(rng, ws, dt), "dw": _r(rng, ws, dw_dt)}
                if with_dx:
                    arr["dx"] = _r(rng, xs, dt)
                spec = KERNELS[name]
                arr.update({n: np.zeros(sh, d) for n, (sh, d) in spec.workspace_shapes(arr, **params).items()})
                add(Case(f"{name} {tag} {dt.name}", name, arr, params, tol=_tol(dt), skip=tuple(spec.workspaces)))

    _add_bn_stats_cases(add)

    # -- dense ---------------------------------------------------------------------------------
    for dt in (F32, F16):
        x, w = _r(rng, (5, 2, 3, 4), dt), _r(rng, (10, 1, 1, 24), dt)
        for name in ("fc_fwd", "fc_inf"):
            add(Case(f"{name} {dt.name}", name, {"x": x.copy(), "w": w.copy(), "b": _r(rng, (10,)),
                                                 "y": _r(rng, (5, 1, 1, 10), dt)}, tol=_tol(dt)))
        add(Case(f"fc_fwd nobias {dt.name}", "fc_fwd", {"x": x.copy(), "w": w.copy(), "y": _r(rng, (5, 1, 1, 10), dt)},
                 tol=_tol(dt)))
        for name in ("fc_bwd", "fc_bwd_first_layer"):
            arr = {"dy": _r(rng, (5, 1, 1, 10), dt), "w": w.copy(), "x": x.copy(), "dw": _r(rng, (10, 1, 1, 24)),
                   "db": _r(rng, (10,))}
            if name == "fc_bwd":
                arr["dx"] = _r(rng, (5, 2, 3, 4), dt)
            add(Case(f"{name} {dt.name}", name, arr, tol=_tol(dt)))
        # the FC+ReLU GEMM epilogues (memplan-fuse-fc-relu): random x, so both sides of the gate
        add(Case(f"fc_relu_fwd {dt.name}", "fc_relu_fwd", {"x": x.copy(), "w": w.copy(), "b": _r(rng, (10,)),
                                                         "y": _r(rng, (5, 1, 1, 10), dt)}, tol=_tol(dt)))
        add(Case(f"relu_fc_bwd {dt.name}", "relu_fc_bwd", {"dy": _r(rng, (5, 1, 1, 10), dt), "w": w.copy(),
                                                         "x": x.copy(), "dw": _r(rng, (10, 1, 1, 24)),
                                                         "db": _r(rng, (10,)), "dx": _r(rng, (5, 2, 3, 4), dt)},
                 tol=_tol(dt)))

    for dt in (F32, F16):
        t = _tol(dt)
        for name in ("flatten_fwd", "flatten_inf"):
            add(Case(f"{name} {dt.name}", name, {"x": _r(rng, (3, 2, 2, 5), dt), "y": _r(rng, (3, 1, 1, 20), dt)}, tol=t))
        add(Case(f"flatten_bwd {dt.name}", "flatten_bwd", {"dy": _r(rng, (3, 1, 1, 20), dt),
                                                          "dx": _r(rng, (3, 2, 2, 5), dt)}, tol=t))
        for name in ("channel_padding_fwd", "channel_padding_inf"):
            add(Case(f"{name} {dt.name}", name, {"x": _r(rng, (2, 3, 3, 3), dt), "y": _r(rng, (2, 3, 3, 8), dt)}, tol=t))
        add(Case(f"channel_padding_bwd {dt.name}", "channel_padding_bwd",
                 {"dy": _r(rng, (2, 3, 3, 8), dt), "dx": _r(rng, (2, 3, 3, 3), dt)}, tol=t))
        add(Case(f"add_fwd {dt.name}", "add_fwd", {"a": _r(rng, (2, 4, 4, 3), dt), "b": _r(rng, (2, 4, 4, 3), dt),
                                                   "y": _r(rng, (2, 4, 4, 3), dt)}, tol=t))
        for name in ("add_bwd", "add_bwd_acc"):
            add(Case(f"{name} {dt.name}", name, {"dy": _r(rng, (2, 4, 4, 3), dt), "da": _r(rng, (2, 4, 4, 3), dt),
                                                 "db": _r(rng, (2, 4, 4, 3), dt)}, tol=t))
        for name in ("grad_acc", "grad_accum"):
            add(Case(f"{name} {dt.name}", name, {"dy": _r(rng, (2, 3, 3, 4), dt), "dx": _r(rng, (2, 3, 3, 4), dt)},
                     tol=t))
        for name in ("identity_fwd", "identity_bwd", "identity_inf", "dropout_inf"):
            add(Case(f"{name} {dt.name}", name, {"x": _r(rng, (2, 3, 3, 4), dt), "y": _r(rng, (2, 3, 3, 4), dt)}, tol=t))
        add(Case(f"axpy_fwd {dt.name}", "axpy_fwd", {"x": _r(rng, (3, 5), dt), "y": _r(rng, (3, 5), dt),
                                                     "a": _s(0.37)}, tol=t))
    add(Case("dtensor_copy labels", "dtensor_copy", {"x": rng.integers(0, 10, (6,)).astype(I32),
                                                     "y": rng.integers(0, 10, (6,)).astype(I32)}))
    for name in ("noop", "flatten_bwd_first_layer", "channel_padding_bwd_first_layer"):
        add(Case(name, name, {}))

    # -- activations ---------------------------------------------------------------------------
    for dt in (F32, F16):
        xs = (3, 4, 5, 7)
        x = _r(rng, xs, dt, -8.0, 8.0)
        x.reshape(-1)[:4] = [0.0, -3.0, 3.0, 6.0]
        for act in ACTIVATIONS:
            for name in (f"{act}_fwd", f"{act}_inf"):
                add(Case(f"{name} {dt.name}", name, {"x": x.copy(), "y": _r(rng, xs, dt)}, tol=_tol(dt)))
            add(Case(f"{act}_bwd {dt.name}", f"{act}_bwd", {"dy": _r(rng, xs, dt), "x": x.copy(), "dx": _r(rng, xs, dt)},
                     tol=_tol(dt)))
        add(Case(f"relu_fwd {dt.name}", "relu_fwd", {"x": x.copy(), "y": _r(rng, xs, dt), "mask": _mask(rng, xs)},
                 tol=_tol(dt)))
        add(Case(f"relu_inf {dt.name}", "relu_inf", {"x": x.copy(), "y": _r(rng, xs, dt)}, tol=_tol(dt)))
        add(Case(f"relu_bwd {dt.name}", "relu_bwd", {"dy": _r(rng, xs, dt), "mask": _mask(rng, xs),
                                                     "dx": _r(rng, xs, dt)}, tol=_tol(dt)))
        # the output form: no mask written; the backward reads y = relu(x) (specials in x and dy)
        add(Case(f"relu_fwd no mask {dt.name}", "relu_fwd", {"x": x.copy(), "y": _r(rng, xs, dt)}, tol=_tol(dt)))
        sx = x.copy()
        sx.reshape(-1)[4:12] = [np.nan, -0.0, np.inf, -np.inf, 1e-4, -1e-4, 65504.0, -65504.0]
        sdy = _r(rng, xs, dt)
        sdy.reshape(-1)[:12] = [np.inf, -np.inf, np.nan, -1.0, np.inf, -np.inf, np.nan, -2.0, 0.0, -0.0, -np.inf, 3.0]
        add(Case(f"relu_bwd_from_output {dt.name}", "relu_bwd_from_output",
                 {"dy": sdy, "y": np.where(sx > 0, sx, np.where(np.isnan(sx), sx, 0)).astype(dt),
                  "dx": _r(rng, xs, dt)}, tol=_tol(dt)))

    # -- batch norm ------------------------------------------------------------------------------
    for dt in (F32, F16):
        for name, xs in (("bn2d", (4, 5, 5, 37)), ("bn1d", (6, 1, 1, 9))):
            c = xs[-1]
            x = _r(rng, xs, dt, -2.0, 3.0)
            add(Case(f"{name}_fwd {dt.name}", f"{name}_fwd", {
                "x": x.copy(), "gamma": _r(rng, (c,), F32, 0.5, 1.5), "beta": _r(rng, (c,)),
                "running_mean": _r(rng, (c,)), "running_var": _r(rng, (c,), F32, 0.5, 2.0), "y": _r(rng, xs, dt),
                "save_mean": _r(rng, (c,)), "save_istd": _r(rng, (c,)), "eps": _s(1e-3), "momentum": _s(0.2)},
                tol=_tol(dt)))
            add(Case(f"{name}_fwd defaults {dt.name}", f"{name}_fwd", {
                "x": x.copy(), "gamma": _r(rng, (c,)), "beta": _r(rng, (c,)), "running_mean": _r(rng, (c,)),
                "running_var": _r(rng, (c,), F32, 0.5, 2.0), "y": _r(rng, xs, dt), "save_mean": _r(rng, (c,)),
                "save_istd": _r(rng, (c,))}, tol=_tol(dt)))
            xm = x.astype(np.float64).reshape(-1, c)
            mean = xm.mean(0).astype(F32)
            istd = (1 / np.sqrt(xm.var(0) + 1e-5)).astype(F32)
            add(Case(f"{name}_bwd {dt.name}", f"{name}_bwd", {
                "dy": _r(rng, xs, dt), "x": x.copy(), "gamma": _r(rng, (c,)), "save_mean": mean, "save_istd": istd,
                "dgamma": _r(rng, (c,)), "dbeta": _r(rng, (c,)), "dx": _r(rng, xs, dt)}, tol=_tol(dt)))
            add(Case(f"{name}_inf {dt.name}", f"{name}_inf", {"x": x.copy(), "eq_scale": _r(rng, (c,)),
                                                             "eq_bias": _r(rng, (c,)), "y": _r(rng, xs, dt)},
                     tol=_tol(dt)))
        # the fused epilogues (BN + ReLU, BN + add + ReLU): every ReLU form; a pre-activation
        # within rounding of 0 may take the other branch (int_tol on the mask)
        xs, c = (4, 5, 5, 16), 16
        x = _r(rng, xs, dt, -2.0, 3.0)
        xm = x.astype(np.float64).reshape(-1, c)
        mean, istd = xm.mean(0).astype(F32), (1 / np.sqrt(xm.var(0) + 1e-5)).astype(F32)
        for join in ("", "_add"):
            for mask in (True, False):
                arr = {"x": x.copy(), "gamma": _r(rng, (c,), F32, 0.5, 1.5), "beta": _r(rng, (c,)),
                       "running_mean": _r(rng, (c,)), "running_var": _r(rng, (c,), F32, 0.5, 2.0),
                       "y": _r(rng, xs, dt), "save_mean": _r(rng, (c,)), "save_istd": _r(rng, (c,)),
                       **({"mask": _mask(rng, xs)} if mask else {}), **({"skip": _r(rng, xs, dt)} if join else {})}
                add(Case(f"bn2d{join}_relu_fwd mask={mask} {dt.name}", f"bn2d{join}_relu_fwd", arr, tol=_tol(dt) * 4,
                         int_tol=0.02))
            for form in ("", "_from_output"):
                gate = {"mask": _mask(rng, xs)} if not form else {"y": np.maximum(_r(rng, xs, dt), 0).astype(dt)}
                add(Case(f"bn2d{join}_relu_bwd{form} {dt.name}", f"bn2d{join}_relu_bwd{form}", {
                    "dy": _r(rng, xs, dt), **gate, "x": x.copy(), "gamma": _r(rng, (c,)), "save_mean": mean,
                    "save_istd": istd, "dgamma": _r(rng, (c,)), "dbeta": _r(rng, (c,)), "dx": _r(rng, xs, dt),
                    **({"dskip": _r(rng, xs, dt)} if join else {})}, tol=_tol(dt)))
    add(Case("bn_update_eq_params", "bn_update_eq_params", {
        "gamma": _r(rng, (7,)), "beta": _r(rng, (7,)), "running_mean": _r(rng, (7,)),
        "running_var": _r(rng, (7,), F32, 0.1, 2.0), "eq_scale": _r(rng, (7,)), "eq_bias": _r(rng, (7,)),
        "eps": _s(1e-3)}))

    # -- pooling ---------------------------------------------------------------------------------
    for dt in (F32, F16):
        for k, s, p in ((3, 2, 1), (2, 2, 0), (3, 1, 1)):
            xs = (2, 7, 6, 5)
            ho, wo = (7 + 2 * p - k) // s + 1, (6 + 2 * p - k) // s + 1
            ys = (2, ho, wo, 5)
            x = _r(rng, xs, dt)
            params = {"k": k, "s": s, "p": p}
            for name in ("maxpool_fwd", "maxpool_inf"):
                add(Case(f"{name} k{k}s{s}p{p} {dt.name}", name, {"x": x.copy(), "y": _r(rng, ys, dt),
                                                                  "mask": _mask(rng, ys), "eq": np.zeros(ys, bool)},
                         params, tol=_tol(dt), skip=("eq",)))
            mask = rng.integers(0, k * k, ys).astype(I8)
            add(Case(f"maxpool_bwd k{k}s{s}p{p} {dt.name}", "maxpool_bwd", {
                "dy": _r(rng, ys, dt), "mask": mask, "dx": _r(rng, xs, dt), "eq": np.zeros(ys, bool),
                "acc": np.zeros(xs, F32)}, params, tol=_tol(dt), skip=("eq", "acc")))
            for name in ("avgpool_fwd", "avgpool_inf"):
                add(Case(f"{name} k{k}s{s}p{p} {dt.name}", name, {"x": x.copy(), "y": _r(rng, ys, dt),
                                                                  "acc": np.zeros(ys, F32)},
                         params, tol=_tol(dt), skip=("acc",)))
            add(Case(f"avgpool_bwd k{k}s{s}p{p} {dt.name}", "avgpool_bwd", {
                "dy": _r(rng, ys, dt), "dx": _r(rng, xs, dt), "acc": np.zeros(xs, F32)}, params, tol=_tol(dt),
                skip=("acc",)))
        for name in ("gap_fwd", "gap_inf"):
            add(Case(f"{name} {dt.name}", name, {"x": _r(rng, (3, 4, 5, 6), dt), "y": _r(rng, (3, 1, 1, 6), dt)},
                     tol=_tol(dt)))
        add(Case(f"gap_bwd {dt.name}", "gap_bwd", {"dy": _r(rng, (3, 1, 1, 6), dt), "dx": _r(rng, (3, 4, 5, 6), dt)},
                 tol=_tol(dt)))

    # -- softmax cross-entropy --------------------------------------------------------------------
    for dt in (F32, F16):
        for n, k in ((13, 10), (5, 3), (20, 70)):
            z = _r(rng, (n, 1, 1, k), dt, -4.0, 4.0)
            lab = rng.integers(0, k, (n,)).astype(I32)
            for name in ("softmax_ce_fwd", "softmax_ce_inf"):
                add(Case(f"{name} {n}x{k} {dt.name}", name, {
                    "logits": z.copy(), "labels": lab.copy(), "probs": _r(rng, (n, k)), "loss": _s(7.0),
                    "top1": _s(7.0), "top5": _s(7.0), "pred": rng.integers(0, k, (n,)).astype(I32),
                    "batch_size": _s(n - 2, I32), "label_smoothing": _s(0.1), "inv_batch": _s(7.0)},
                    tol=max(_tol(dt), 1e-4)))
            add(Case(f"softmax_ce_fwd plain {n}x{k} {dt.name}", "softmax_ce_fwd", {
                "logits": z.copy(), "labels": lab.copy(), "probs": _r(rng, (n, k)), "loss": _s(7.0),
                "top1": _s(7.0), "top5": _s(7.0)}, tol=max(_tol(dt), 1e-4)))
        # rows with a NaN or an Inf logit at the label (the arg-max there): misses on every backend
        own = np.random.default_rng(7)  # its own draws: the other cases keep their data
        z = _r(own, (6, 1, 1, 7), dt, -4.0, 4.0)
        lab = np.array([1, 2, 3, 4, 5, 6], I32)
        z[0, 0, 0, 1], z[1, 0, 0, 2], z[2, 0, 0, 3], z[3, 0, 0, 0] = np.nan, np.inf, -np.inf, np.nan
        add(Case(f"softmax_ce_fwd non-finite rows {dt.name}", "softmax_ce_fwd", {
            "logits": z, "labels": lab, "probs": _r(own, (6, 7)), "loss": _s(7.0), "top1": _s(7.0),
            "top5": _s(7.0), "pred": np.zeros(6, I32)}, tol=max(_tol(dt), 1e-4)))
        for n, k in ((13, 10), (5, 3), (20, 70)):
            z = _r(rng, (n, 1, 1, k), dt, -4.0, 4.0)
            lab = rng.integers(0, k, (n,)).astype(I32)
            p = np.exp(z.astype(F32).reshape(n, k))
            p /= p.sum(1, keepdims=True)
            add(Case(f"softmax_ce_bwd {n}x{k} {dt.name}", "softmax_ce_bwd", {
                "probs": p, "labels": lab.copy(), "dlogits": _r(rng, (n, 1, 1, k), dt), "loss_scale": _s(8.0),
                "label_smoothing": _s(0.1), "inv_batch": _s(1.0 / (n - 1))}, tol=_tol(dt)))
            add(Case(f"softmax_ce_bwd bs {n}x{k} {dt.name}", "softmax_ce_bwd", {
                "probs": p, "labels": lab.copy(), "dlogits": _r(rng, (n, 1, 1, k), dt),
                "batch_size": _s(n - 3, I32)}, tol=_tol(dt)))

    # -- dropout -----------------------------------------------------------------------------------
    for dt in (F32, F16):
        xs = (3, 50, 7)
        add(Case(f"dropout_fwd {dt.name}", "dropout_fwd", {
            "x": _r(rng, xs, dt), "y": _r(rng, xs, dt), "mask": _mask(rng, xs),
            "rng": np.array([12345, 3], I32)}, {"p": 0.3}, tol=_tol(dt)))
        add(Case(f"dropout_bwd {dt.name}", "dropout_bwd", {"dy": _r(rng, xs, dt), "mask": _mask(rng, xs),
                                                           "dx": _r(rng, xs, dt)}, {"p": 0.25}, tol=_tol(dt)))

    # -- ranges and scalars --------------------------------------------------------------------------
    add(Case("range_clear", "range_clear", {"out": (_r(rng, (37,)), _r(rng, (5,), F16))}))
    for name in ("range_d2d_copy", "range_sema_switch", "range_h2d_copy_dtensor"):
        add(Case(name, name, {"src": (_r(rng, (20,)), _r(rng, (7,))), "dst": (_r(rng, (20,)), _r(rng, (9,)))}))
    for name in ("range_h2d_copy_a", "range_h2d_copy_b"):
        add(Case(name, name, {"src": (rng.integers(0, 9, (6,)).astype(I32), _r(rng, (40,))),
                              "dst": (rng.integers(0, 9, (6,)).astype(I32), _r(rng, (40,)))}, host=("src",)))
    add(Case("range_cast_fp32_to_fp16", "range_cast_fp32_to_fp16", {"src": _r(rng, (33,), F32, -9, 9),
                                                                     "dst": _r(rng, (33,), F16)}))
    add(Case("range_cast_fp16_to_fp32", "range_cast_fp16_to_fp32", {"src": _r(rng, (33,), F16, -9, 9),
                                                                     "dst": _r(rng, (40,), F32)}))
    for label, vals, clip in (("finite", None, 0.0), ("inf", np.inf, 0.0), ("nan", np.nan, 0.0),
                              ("clip inf", np.inf, 0.5), ("clip nan", np.nan, 0.5)):
        g1, g2 = _r(rng, (50,)), _r(rng, (30,))
        if vals is not None:
            g2[17] = vals
        add(Case(f"range_check_nan {label}", "range_check_nan", {"grads": (g1, g2), "has_nan": _s(5, I32)},
                 {"clip": clip}))
    for hn in (0, 1):
        for sc in (8192.0, 1.5):
            add(Case(f"range_grad_scaling {hn} {sc}", "range_grad_scaling", {"has_nan": _s(hn, I32),
                                                                             "loss_scale": _s(sc)}))
    add(Case("range_accum_metrics", "range_accum_metrics", {
        "batch_size": _s(32, I32), "loss": _s(2.5), "top1": _s(0.25), "top5": _s(0.75), "acc_loss": _s(10.0),
        "acc_top1": _s(3.0), "acc_top5": _s(5.0)}))
    for name in ("range_mean_allreduce", "range_sum_allreduce", "range_bn_stats_allreduce"):
        add(Case(name, name, {"data": (_r(rng, (12,)),)}))
    for hn in (0, 1):
        add(Case(f"range_ema_param_update nan={hn}", "range_ema_param_update", {
            "w": _r(rng, (25,)), "ema": _r(rng, (25,)), "decay": _s(0.9), "has_nan": _s(hn, I32)}))
    for hn in (0, 1):
        add(Case(f"scalar_increment nan={hn}", "scalar_increment", {"step": _s(4, I32), "has_nan": _s(hn, I32)}))
    add(Case("scalar_increment", "scalar_increment", {"step": _s(4, I32)}))
    add(Case("adam_bias_correction", "adam_bias_correction", {
        "step": _s(3, I32), "beta1": _s(0.9), "beta2": _s(0.999), "bc1": _s(0.0), "bc2": _s(0.0)}))

    # -- optimizers ----------------------------------------------------------------------------------
    n = 300

    def opt_arrays(*names: str) -> dict[str, np.ndarray]:
        return {k: _r(rng, (n,)) for k in names}

    for hn in (0, 1):
        common = {"lr": _s(0.1), "loss_scale": _s(4.0), "has_nan": _s(hn, I32)}
        add(Case(f"range_update_weight_sgd nan={hn}", "range_update_weight_sgd",
                 {**opt_arrays("w", "g"), **common, "weight_decay": _s(0.01)}))
        add(Case(f"range_update_bias_sgd nan={hn}", "range_update_bias_sgd", {**opt_arrays("w", "g"), **common}))
        for kind in ("momentum", "nesterov"):
            add(Case(f"range_update_weight_{kind} nan={hn}", f"range_update_weight_{kind}",
                     {**opt_arrays("w", "g", "m"), **common, "momentum": _s(0.9), "weight_decay": _s(0.01)}))
            add(Case(f"range_update_bias_{kind} nan={hn}", f"range_update_bias_{kind}",
                     {**opt_arrays("w", "g", "m"), **common, "momentum": _s(0.9)}))
        adam_common = {**common, "beta1": _s(0.9), "beta2": _s(0.999), "eps": _s(1e-8)}
        for name in ("range_update_weight_adam", "range_update_weight_adamw"):
            v = {**opt_arrays("w", "g", "m"), "v": _r(rng, (n,), F32, 0.0, 1.0)}
            add(Case(f"{name} step nan={hn}", name, {**v, **adam_common, "weight_decay": _s(0.01), "step": _s(3, I32)}))
            v = {**opt_arrays("w", "g", "m"), "v": _r(rng, (n,), F32, 0.0, 1.0)}
            add(Case(f"{name} bc nan={hn}", name, {**v, **adam_common, "weight_decay": _s(0.01), "bc1": _s(3.7),
                                                   "bc2": _s(300.0)}))
        v = {**opt_arrays("w", "g", "m"), "v": _r(rng, (n,), F32, 0.0, 1.0)}
        add(Case(f"range_update_bias_adam nan={hn}", "range_update_bias_adam", {**v, **adam_common,
                                                                                "step": _s(2, I32)}))
        lars = {**common, "momentum": _s(0.9), "weight_decay": _s(1e-4), "trust_coefficient": _s(0.001),
                "eps": _s(1e-9)}
        for name in ("range_update_weight_lars", "range_update_weight_lars_nesterov"):
            a = opt_arrays("w", "g", "m")
            a["w"][200:] = 0.0
            add(Case(f"{name} nan={hn}", name, {**a, **lars}, {"segments": ((0, 120), (120, 80), (200, 60))}))
        for f in ("", "_fc", "_first", "_deep"):
            add(Case(f"lars_compute_trust_ratio{f} nan={hn}", f"lars_compute_trust_ratio{f}", {
                **opt_arrays("w", "g"), "trust_ratio": _s(0.0), "trust_coefficient": _s(0.02),
                "weight_decay": _s(1e-4), "eps": _s(1e-9), "loss_scale": _s(4.0), "has_nan": _s(hn, I32)}))
            for stem in ("lars_update", "lars_nesterov_update"):
                add(Case(f"{stem}{f} nan={hn}", f"{stem}{f}", {
                    **opt_arrays("w", "g", "m"), "trust_ratio": _s(3.0), "lr": _s(0.1), "momentum": _s(0.9),
                    "weight_decay": _s(1e-4), "loss_scale": _s(4.0), "has_nan": _s(hn, I32)}))

    for c in out:
        _add_workspaces(c)
    return out


STATS_GEOMS: tuple[tuple[str, tuple[int, int, int, int], int, int, int, int, int, str], ...] = (
    ("im2col", (2, 7, 7, 5), 6, 3, 1, 1, 1, "auto"),
    ("strided", (2, 9, 8, 3), 40, 3, 2, 1, 1, "auto"),  # 40 channels: two column blocks
    ("pointwise", (2, 5, 5, 20), 70, 1, 1, 0, 1, "auto"),
    ("depthwise", (2, 7, 7, 6), 6, 3, 2, 1, 6, "auto"),
    ("winograd 2x2", (2, 7, 7, 5), 8, 3, 1, 0, 1, "winograd_2x2_3x3"),  # 5x5 output: partial edge tiles
    ("winograd 4x4", (3, 9, 7, 3), 8, 3, 1, 1, 1, "winograd_4x4_3x3"),  # 9x7 output: partial edge tiles
)
"""Conv geometries of the batch-norm statistics written by ``conv_fwd`` (label, x shape, K, k, s, p,
groups, algo): the implicit GEMM's pass over y after the conv and both Winograd variants' per-chunk
reduction in the output pass."""


def _add_bn_stats_cases(add: Callable[[Case], None]) -> None:
    """``conv_fwd`` writing y's batch-norm statistics (``bn_stats``, :data:`STATS_GEOMS`, fp32 and
    fp16 y) and the BN forwards reading them (``sum`` / ``sq_sum`` given, the mean and variance of
    x, fp32 and fp16 x): against the NumPy kernels. Their own draws, so the other cases keep their data."""
    rng = np.random.default_rng(11)
    for tag, xs, ko, k, s, p, g, algo in STATS_GEOMS:
        ho, wo = (xs[1] + 2 * p - k) // s + 1, (xs[2] + 2 * p - k) // s + 1
        params = {"k": k, "s": s, "p": p, "groups": g, "algo": algo, "bn_stats": True}
        for dt in (F32, F16):
            arr = {"x": _r(rng, xs, dt, -0.5, 1.5), "w": _r(rng, (ko, k, k, xs[3] // g), dt),
                   "y": _r(rng, (xs[0], ho, wo, ko), dt), "sum": _r(rng, (1, 1, 1, ko)),
                   "sq_sum": _r(rng, (1, 1, 1, ko))}
            add(Case(f"conv_fwd bn_stats {tag} {dt.name}", "conv_fwd", arr, params, tol=_tol(dt)))
    c, xs = 24, (3, 5, 5, 24)
    for dt in (F32, F16):
        x = _r(rng, xs, dt, -2.0, 3.0)
        want_sum, want_sq = stats_reference(x)
        for name in ("bn2d_fwd", "bn2d_relu_fwd", "bn2d_add_relu_fwd"):
            arr = {"x": x.copy(), "gamma": _r(rng, (c,), F32, 0.5, 1.5), "beta": _r(rng, (c,)),
                   "running_mean": _r(rng, (c,)), "running_var": _r(rng, (c,), F32, 0.5, 2.0), "y": _r(rng, xs, dt),
                   "save_mean": _r(rng, (c,)), "save_istd": _r(rng, (c,)), "eps": _s(1e-3), "momentum": _s(0.2),
                   "sum": want_sum.astype(F32).reshape(1, 1, 1, c), "sq_sum": want_sq.astype(F32).reshape(1, 1, 1, c),
                   **({"mask": _mask(rng, xs)} if name != "bn2d_fwd" else {}),
                   **({"skip": _r(rng, xs, dt)} if name == "bn2d_add_relu_fwd" else {})}
            add(Case(f"{name} given stats {dt.name}", name, arr, tol=_tol(dt) * 4, int_tol=0.02))


def stats_reference(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """float64 ``(sum, sq_sum)`` per channel of y (..., K) (any float dtype): the sums and the sums
    of squared deviations from the means (two passes), K elements each."""
    y2 = y.reshape(-1, y.shape[-1]).astype(np.float64)
    total = y2.sum(axis=0)
    d = y2 - total / y2.shape[0]
    return total, (d * d).sum(axis=0)


def stats_error(got_sum: np.ndarray, got_sq: np.ndarray, y: np.ndarray) -> float:
    """The largest ratio of the error of a conv's fp32 ``sum`` / ``sq_sum`` (K elements each) to
    its bound, against :func:`stats_reference` of the y it was computed from: one fp32 rounding
    (2^-24 relative, bound 2^-23) plus 2^-40 of the sum of |y| (sum) or of the squared deviations
    (sq_sum) for the float64 sums; <= 1 passes."""
    want_sum, want_sq = stats_reference(y)
    y2 = y.reshape(-1, y.shape[-1]).astype(np.float64)
    worst = 0.0
    for got, want, scale in ((got_sum, want_sum, np.abs(y2).sum(axis=0)), (got_sq, want_sq, want_sq)):
        bound = 2.0 ** -23 * np.abs(want) + 2.0 ** -40 * scale + 1e-300
        worst = max(worst, float((np.abs(got.reshape(-1).astype(np.float64) - want) / bound).max()))
    return worst


def conv_stats_run(backend: Any, x: np.ndarray, w: np.ndarray, params: dict[str, Any], stats: bool = True
                   ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """Host copies of ``(y, sum, sq_sum)`` of the CUDA ``conv_fwd`` kernel of ``backend`` (``params``:
    k, s, p, groups, algo) on x (N, H, W, C) and w (K, k, k, C/groups), y of x's dtype, workspaces of
    the CUDA rule filled with NaN; ``stats`` False: without the statistics (``sum``, ``sq_sum`` None)."""
    from tr_mlir.lowering.cuda.winograd_checks import on_device

    spec = backend.kernels["conv_fwd"]
    g = cpu_conv.conv_geom(x.shape, w.shape, params["k"], params.get("s", 1), params.get("p", 0),
                           params.get("groups", 1))
    arrays = {"x": x, "w": w, "y": np.zeros(g.y_shape, x.dtype)}
    if stats:
        arrays |= {"sum": np.full((1, 1, 1, g.k_out), np.nan, F32), "sq_sum": np.full((1, 1, 1, g.k_out), np.nan, F32)}
    full = {**params, "bn_stats": stats}
    ws = {n: np.full(sh, np.nan, dt) for n, (sh, dt) in spec.workspace_shapes(arrays, target=backend.target,
                                                                              **full).items()}
    d = on_device(backend, arrays | {f"ws_{n}": a for n, a in ws.items()})
    spec.bind({k: d[k] for k in arrays} | {n: d[f"ws_{n}"] for n in ws}, full)()
    host = {k: backend.to_host(d[k]) for k in arrays}
    return host["y"], host.get("sum"), host.get("sq_sum")


def conv_stats_check(backend: Any, seed: int = 0) -> list[dict[str, Any]]:
    """The batch-norm statistics of ``conv_fwd`` on ``backend`` (a GPU, or the emulator) for every
    geometry of :data:`STATS_GEOMS`, fp32 and fp16 y: one row per check, ``case`` (a label),
    ``error`` and ``ok``: ``stats`` (:func:`stats_error` against float64 sums of the y written,
    ok <= 1), ``y`` (y bit-identical to the call without statistics: error 0) and ``rerun`` (every
    output bit-identical on a second run: no atomics)."""
    rows = []
    rng = np.random.default_rng(seed)
    for tag, xs, ko, k, s, p, g, algo in STATS_GEOMS:
        params = {"k": k, "s": s, "p": p, "groups": g, "algo": algo}
        for dt in (F32, F16):
            x = _r(rng, xs, dt, -0.5, 1.5)
            w = _r(rng, (ko, k, k, xs[3] // g), dt)
            y, ssum, ssq = conv_stats_run(backend, x, w, params)
            plain, _, _ = conv_stats_run(backend, x, w, params, stats=False)
            again = conv_stats_run(backend, x, w, params)
            label = f"conv_fwd bn_stats {tag} {dt.name}"
            err = stats_error(ssum, ssq, y)
            same_y = y.tobytes() == plain.tobytes()
            same = all(a.tobytes() == b.tobytes() for a, b in zip((y, ssum, ssq), again))
            rows += [{"case": f"{label} stats", "error": err, "ok": bool(err <= 1.0)},
                     {"case": f"{label} y", "error": 0.0 if same_y else float("inf"), "ok": same_y},
                     {"case": f"{label} rerun", "error": 0.0 if same else float("inf"), "ok": same}]
    return rows


def _add_workspaces(case: Case) -> None:
    """Give ``case`` the (zeroed) workspaces its kernel asks for, left out of the comparison."""
    spec = KERNELS[case.kernel]
    if spec.workspace_fn is None:
        return
    plain = {k: v for k, v in case.arrays.items() if not isinstance(v, tuple) and k not in spec.workspaces}
    for name, (shape, dtype) in spec.workspace_shapes(plain, **case.params).items():
        case.arrays[name] = np.zeros(shape, dtype)
    case.skip = tuple(sorted(set(case.skip) | set(spec.workspaces)))


# --------------------------------------------------------------------------------------
# Running a case
# --------------------------------------------------------------------------------------


def _flat_arrays(arrays: dict[str, Any]) -> list[tuple[str, int, np.ndarray]]:
    out = []
    for k, v in arrays.items():
        if isinstance(v, tuple):
            out += [(k, i, a) for i, a in enumerate(v)]
        else:
            out.append((k, -1, v))
    return out


def error(got: np.ndarray, want: np.ndarray) -> float:
    """Max abs error relative to ``max(1, max|want|)``; NaN/Inf must match (else ``inf``); for
    integer arrays the fraction of differing elements."""
    if got.shape != want.shape:
        return float("inf")
    if got.dtype.kind in "iub":
        return float(np.mean(got != want)) if got.size else 0.0
    g, w = got.astype(np.float64), want.astype(np.float64)
    if not np.array_equal(np.isnan(g), np.isnan(w)) or not np.array_equal(np.isinf(g), np.isinf(w)):
        return float("inf")
    fin = np.isfinite(w)
    if np.isinf(w).any() and not np.array_equal(g[~fin & ~np.isnan(w)], w[~fin & ~np.isnan(w)]):
        return float("inf")
    if not fin.any():
        return 0.0
    return float(np.max(np.abs(g[fin] - w[fin])) / max(1.0, float(np.max(np.abs(w[fin])))))


@dataclass
class Result:
    """Errors of one case: written array name (``name[i]`` for a range element) -> error, and
    whether all are within the case's tolerances."""

    case: Case
    errors: dict[str, float]
    ok: bool


def run_case(case: Case, backend: Any, reference: Callable[..., None] | None = None) -> Result:
    """Run ``case`` through the NumPy kernel and through ``backend``'s kernel (module doc)."""
    spec = KERNELS[case.kernel]
    gspec = backend.kernels[case.kernel]
    ref = {k: (tuple(a.copy() for a in v) if isinstance(v, tuple) else v.copy()) for k, v in case.arrays.items()}
    (reference or spec.fn)(**ref, **{k: v for k, v in case.params.items() if k in spec.params})
    # the device kernel gets only the workspaces its own (CUDA) rule asks for: an undeclared one is None
    plain = {k: v for k, v in case.arrays.items() if not isinstance(v, tuple) and k not in gspec.workspaces}
    device = {k: v for k, v in case.arrays.items() if k not in gspec.workspaces}
    device.update(gspec.allocate_workspaces(plain, target=backend.target, **case.params))
    items = _flat_arrays(device)
    dev_items = [(k, i, a) for k, i, a in items if k not in case.host]
    total = sum(-(-a.nbytes // 256) * 256 for _, _, a in dev_items) + 256
    arena = backend.allocate(total)
    host_total = sum(-(-a.nbytes // 256) * 256 for k, _, a in items if k in case.host) + 256
    hostbuf = backend.host_buffer(host_total) if case.host else None
    views: dict[str, Any] = {}
    off = hoff = 0
    for k, i, a in items:
        if k in case.host:
            v = hostbuf[hoff:hoff + a.nbytes].view(a.dtype).reshape(a.shape)
            v[...] = a
            hoff += -(-a.nbytes // 256) * 256
        else:
            v = backend.view(arena, off, a.dtype, a.shape)
            v[...] = a
            off += -(-a.nbytes // 256) * 256
        if i < 0:
            views[k] = v
        else:
            views.setdefault(k, []).append(v)
    bound = {k: tuple(v) if isinstance(v, list) else v for k, v in views.items()}
    fn = gspec.bind(bound, case.params)
    fn()
    errors: dict[str, float] = {}
    ok = True
    for k in gspec.writes:
        if k not in case.arrays or k in case.skip or k in case.host:
            continue
        got_v, want_v = bound[k], ref[k]
        pairs = zip(got_v, want_v) if isinstance(want_v, tuple) else [(got_v, want_v)]
        for j, (g, w) in enumerate(pairs):
            name = k if not isinstance(want_v, tuple) else f"{k}[{j}]"
            e = error(backend.to_host(g), w)
            errors[name] = e
            lim = case.int_tol if w.dtype.kind in "iub" else case.tol
            ok = ok and e <= lim
    return Result(case, errors, ok)
