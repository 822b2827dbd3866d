"""The CUDA backend's kernel table: KernelId -> GPU launcher (:func:`cuda_kernels`), plugins' CUDA
implementations (:data:`CUDA_IMPLS`, :func:`register_cuda_kernel`) and the kernels that have none
(:func:`missing_cuda_kernels`).

A launcher is keyed by the family of the node-op vocabulary it implements
(:func:`tr_mlir.dialects.kernels.kernel_id`: a name outside it fails when the table is built, at
import) and gets the arguments of that family's kernel spec by name. It names only what it reads:
every array argument of the spec except the workspaces, the workspaces its own ``cuda`` rule plans
(``wbuf`` of the fp16 conv weight gradient), and the params it uses; the table derives the rest
from the spec (:func:`_adapt`): workspaces it does not name must be ``None`` (a plan of its
``cuda`` rule holds none; a planned one it ignores is an error naming it), params it does not name
are not passed (a CPU algorithm choice, say).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from tr_mlir.dialects.kernels import KernelId, kernel_id
from tr_mlir.lowering.cpu import KERNELS, KernelSpec
from tr_mlir.lowering.cpu._util import F32, flat
from tr_mlir.lowering.cpu.activation import ACTIVATIONS
from tr_mlir.lowering.cpu.conv import conv_geom
from tr_mlir.lowering.cuda.ops import F16, I32, GpuOps
from tr_mlir.lowering.cuda.sources import BLOCK

# --------------------------------------------------------------------------------------
# The kernel table: KernelId -> GPU launcher (the arguments it reads, by the spec's names)
# --------------------------------------------------------------------------------------

Impl = Callable[..., None]


def _seq(a: Any) -> tuple[Any, ...]:
    return tuple(a) if isinstance(a, (tuple, list)) else (a,)


def _pairs(src: Any, dst: Any) -> list[tuple[Any, Any]]:
    s, d = _seq(src), _seq(dst)
    if len(s) != len(d):
        raise ValueError(f"expected as many source as destination ranges, got {len(s)} and {len(d)}")
    out = []
    for a, b in zip(s, d):
        af, bf = flat(a), flat(b)
        n = min(af.size, bf.size)
        out.append((af[:n], bf[:n]))
    return out


def _ws(kw: Mapping[str, Any], names: Sequence[str]) -> dict[str, Any]:
    return {k: kw[k] for k in names if kw.get(k) is not None}


def _impls(ops: GpuOps) -> dict[KernelId, Impl]:
    """Every kernel of the registry, on ``ops`` (keyword arguments named as the NumPy kernels')."""
    t: dict[str, Impl] = {}

    def reg(*names: str) -> Callable[[Impl], Impl]:
        def deco(fn: Impl) -> Impl:
            for n in names:
                t[n] = fn
            return fn
        return deco

    # -- conv ------------------------------------------------------------------------------
    # The algorithm params (algo, algo_dgrad, algo_wgrad; lowering/cpu/conv.py): a Winograd variant
    # runs lowering/cuda/winograd.py where it applies, anything else the implicit GEMM (GpuOps);
    # memplan-select-conv-algo records "auto" for a cuda plan unless a Winograd variant is forced.
    # sum / sq_sum (bound under bn_stats, memplan-fuse-bn-stats): y's batch-norm statistics, written
    # when given, as on the CPU (the arrays decide; their float64 parts in `tmp`, winograd.ws_fwd_cuda):
    # Winograd reduces each chunk after its output transform, the implicit GEMM makes a pass over y
    def _stats(sum, sq_sum):  # the optional statistics pair of conv_fwd and the BN forwards
        return None if sum is None and sq_sum is None else (sum, sq_sum)

    @reg("conv_fwd", "conv_inf")
    def conv_fwd(x, w, y, col=None, wbuf=None, tmp=None, sum=None, sq_sum=None, *, k, s=1, p=0, groups=1,
                 algo="auto", bn_stats=False):
        g = conv_geom(tuple(x.shape), tuple(w.shape), k, s, p, groups)
        if tuple(y.shape) != g.y_shape:
            raise ValueError(f"expected conv output of shape {g.y_shape}, got {tuple(y.shape)}")
        ws = _ws({"col": col, "wbuf": wbuf, "tmp": tmp}, ("col", "wbuf", "tmp"))
        ops.conv_forward(x, w, y, g, ws, algo, _stats(sum, sq_sum))

    @reg("conv_bwd", "conv_bwd_first_layer")
    def conv_bwd(dy, x, w, dw, dx=None, col=None, wbuf=None, dx_acc=None, *, k, s=1, p=0, groups=1,
                 algo_dgrad="auto", algo_wgrad="auto"):
        g = conv_geom(tuple(x.shape), tuple(w.shape), k, s, p, groups)
        if dx_acc is not None and (dx is None or (ops.p(dx_acc), tuple(dx_acc.shape), dx_acc.dtype, dx_acc.strides)
                                   != (ops.p(dx), tuple(dx.shape), dx.dtype, dx.strides)):
            raise ValueError("conv_bwd: dx_acc must be dx itself (the input gradient is added into dx)")
        ws = _ws({"col": col, "wbuf": wbuf}, ("col", "wbuf"))
        ops.conv_wgrad(dy, x, dw, g, ws, algo_wgrad)
        if dx is not None:  # dx_acc: dx += the input gradient (memplan-fuse-grad-acc)
            ops.conv_dgrad(dy, w, dx, g, ws, accumulate=dx_acc is not None, algo=algo_dgrad)

    # -- dense, reshapes, copies -------------------------------------------------------------
    @reg("fc_fwd", "fc_inf")
    def fc_fwd(x, w, y, b=None):
        ops.fc_forward(x, w, b, y)

    @reg("fc_bwd", "fc_bwd_first_layer")
    def fc_bwd(dy, w, x, dw, db=None, dx=None):
        ops.fc_backward(dy, w, x, dw, db, dx)

    @reg("fc_relu_fwd")
    def fc_relu_fwd(x, w, y, b=None):
        ops.fc_forward(x, w, b, y, relu=True)

    @reg("relu_fc_bwd")
    def relu_fc_bwd(dy, w, x, dw, dx, db=None):
        ops.fc_backward(dy, w, x, dw, db, dx, gate_input=True)

    @reg("flatten_fwd", "flatten_inf")
    def flatten_fwd(x, y):
        ops.copy_into(y, x)

    @reg("flatten_bwd")
    def flatten_bwd(dy, dx):
        ops.copy_into(dx, dy)

    @reg("noop", "flatten_bwd_first_layer", "channel_padding_bwd_first_layer")
    def noop():
        return None

    @reg("channel_padding_fwd", "channel_padding_inf")
    def channel_padding_fwd(x, y):
        cx, cy = int(x.shape[-1]), int(y.shape[-1])
        rows = x.size // cx
        ops.ew("tr_pad_channels", rows * cy, *ops.arr(x), *ops.arr(y), np.int64(rows), np.int32(cx), np.int32(cy),
               touch=(x, y))

    @reg("channel_padding_bwd")
    def channel_padding_bwd(dy, dx):
        cx, cy = int(dx.shape[-1]), int(dy.shape[-1])
        rows = dx.size // cx
        ops.ew("tr_crop_channels", rows * cx, *ops.arr(dy), *ops.arr(dx), np.int64(rows), np.int32(cx),
               np.int32(cy), touch=(dy, dx))

    @reg("add_fwd")
    def add_fwd(a, b, y):
        ops.add(a, b, y)

    @reg("add_bwd")
    def add_bwd(dy, da=None, db=None):
        for d in (da, db):
            if d is not None:
                ops.copy_into(d, dy)

    @reg("add_bwd_acc")
    def add_bwd_acc(dy, da=None, db=None):
        for d in (da, db):
            if d is not None:
                ops.add(d, dy, d)

    @reg("grad_acc", "grad_accum")
    def grad_acc(dy, dx):
        ops.add(dx, dy, dx)

    @reg("identity_fwd", "identity_bwd", "identity_inf", "dtensor_copy", "dropout_inf")
    def identity_fwd(x, y):
        ops.copy_into(y, x)

    @reg("axpy_fwd")
    def axpy_fwd(x, y, a):
        ops.ew("tr_axpy", y.size, *ops.arr(x), *ops.arr(y), *ops.s(a), np.int64(y.size), touch=(x, y))

    # -- activations -----------------------------------------------------------------------
    for name in ACTIVATIONS:
        def fwd(x, y, _n=name):
            ops.act_fwd(_n, x, y)

        def bwd(dy, x, dx, _n=name):
            ops.act_bwd(_n, dy, x, dx)

        t[f"{name}_fwd"] = t[f"{name}_inf"] = fwd
        t[f"{name}_bwd"] = bwd

    @reg("relu_fwd")
    def relu_fwd(x, y, mask=None):
        ops.act_fwd("relu", x, y, mask)

    @reg("relu_inf")
    def relu_inf(x, y, mask=None):
        ops.act_fwd("relu", x, y)

    @reg("relu_bwd")
    def relu_bwd(dy, mask, dx):
        ops.mul_mask(dy, mask, dx)

    @reg("relu_bwd_from_output")
    def relu_bwd_from_output(dy, y, dx):
        ops.relu_bwd_from_output(dy, y, dx)

    # -- batch norm --------------------------------------------------------------------------
    # sum / sq_sum: x's statistics as the conv before it wrote them (memplan-fuse-bn-stats): the
    # mean and variance come from them (tr_bn_given_stats) instead of the column-sum passes
    @reg("bn2d_fwd", "bn1d_fwd")
    def bn_fwd(x, gamma, beta, running_mean, running_var, y, save_mean, save_istd, eps=None, momentum=None,
               sum=None, sq_sum=None):
        ops.bn_forward_train(x, gamma, beta, running_mean, running_var, y, save_mean, save_istd,
                             1e-5 if eps is None else eps, 0.1 if momentum is None else momentum,
                             stats=_stats(sum, sq_sum))

    @reg("bn2d_bwd", "bn1d_bwd")
    def bn_bwd(dy, x, gamma, save_mean, save_istd, dgamma, dbeta, dx=None):
        ops.bn_backward(dy, x, gamma, save_mean, save_istd, dx, dgamma, dbeta)

    # BN + ReLU (+ the residual add before it): the fused epilogue of tr_bn_apply, the ReLU's
    # gate read with dy in tr_bn_bwd_sums / tr_bn_bwd_dx
    def bn_relu(x, gamma, beta, running_mean, running_var, y, save_mean, save_istd, mask, skip, eps, momentum,
                stats):
        ops.bn_forward_train(x, gamma, beta, running_mean, running_var, y, save_mean, save_istd,
                             1e-5 if eps is None else eps, 0.1 if momentum is None else momentum, True, mask, skip,
                             stats)

    @reg("bn2d_relu_fwd")
    def bn_relu_fwd(x, gamma, beta, running_mean, running_var, y, save_mean, save_istd, mask=None, eps=None,
                    momentum=None, sum=None, sq_sum=None):
        bn_relu(x, gamma, beta, running_mean, running_var, y, save_mean, save_istd, mask, None, eps, momentum,
                _stats(sum, sq_sum))

    @reg("bn2d_add_relu_fwd")
    def bn_add_relu_fwd(x, skip, gamma, beta, running_mean, running_var, y, save_mean, save_istd, mask=None,
                        eps=None, momentum=None, sum=None, sq_sum=None):
        bn_relu(x, gamma, beta, running_mean, running_var, y, save_mean, save_istd, mask, skip, eps, momentum,
                _stats(sum, sq_sum))

    @reg("bn2d_relu_bwd")
    def bn_relu_bwd(dy, mask, x, gamma, save_mean, save_istd, dgamma, dbeta, dx):
        ops.bn_backward(dy, x, gamma, save_mean, save_istd, dx, dgamma, dbeta, mask)

    @reg("bn2d_relu_bwd_from_output")
    def bn_relu_bwd_from_output(dy, y, x, gamma, save_mean, save_istd, dgamma, dbeta, dx):
        ops.bn_backward(dy, x, gamma, save_mean, save_istd, dx, dgamma, dbeta, y)

    @reg("bn2d_add_relu_bwd")
    def bn_add_relu_bwd(dy, mask, x, gamma, save_mean, save_istd, dgamma, dbeta, dx, dskip):
        ops.bn_backward(dy, x, gamma, save_mean, save_istd, dx, dgamma, dbeta, mask, dskip)

    @reg("bn2d_add_relu_bwd_from_output")
    def bn_add_relu_bwd_from_output(dy, y, x, gamma, save_mean, save_istd, dgamma, dbeta, dx, dskip):
        ops.bn_backward(dy, x, gamma, save_mean, save_istd, dx, dgamma, dbeta, y, dskip)

    @reg("bn2d_inf", "bn1d_inf")
    def bn_inf(x, eq_scale, eq_bias, y):
        ops.bn_affine(x, eq_scale, eq_bias, y)

    @reg("bn_update_eq_params")
    def bn_update_eq_params(gamma, beta, running_mean, running_var, eq_scale, eq_bias, eps=None):
        c = gamma.size
        ops.ew("tr_bn_eq_params", c, ops.p(gamma), ops.p(beta), ops.p(running_mean), ops.p(running_var),
               ops.p(eq_scale), ops.p(eq_bias), np.int32(c), *ops.s(eps), np.float64(1e-5),
               touch=(gamma, beta, running_mean, running_var, eq_scale, eq_bias))

    # -- pooling ---------------------------------------------------------------------------
    @reg("maxpool_fwd", "maxpool_inf")
    def maxpool_fwd(x, y, mask, *, k, s, p=0):
        ops.maxpool_fwd(x, y, mask, k, s, p)

    @reg("maxpool_bwd")
    def maxpool_bwd(dy, mask, dx, *, k, s, p=0):
        ops.maxpool_bwd(dy, mask, dx, k, s, p)

    @reg("avgpool_fwd", "avgpool_inf")
    def avgpool_fwd(x, y, *, k, s, p=0):
        ops.avgpool("tr_avgpool_fwd", x, y, tuple(x.shape), tuple(y.shape), k, s, p)

    @reg("avgpool_bwd")
    def avgpool_bwd(dy, dx, *, k, s, p=0):
        ops.avgpool("tr_avgpool_bwd", dy, dx, tuple(dx.shape), tuple(dy.shape), k, s, p)

    @reg("gap_fwd", "gap_inf")
    def gap_fwd(x, y):
        ops.gap_forward(x, y)

    @reg("gap_bwd")
    def gap_bwd(dy, dx):
        ops.gap_backward(dy, dx)

    # -- loss ------------------------------------------------------------------------------
    @reg("softmax_ce_fwd", "softmax_ce_inf")
    def softmax_ce_fwd(logits, labels, probs, loss, top1, top5, pred=None, batch_size=None, label_smoothing=None,
                       inv_batch=None):
        k = int(logits.shape[-1])
        n = logits.size // k
        if probs.dtype != F32 or probs.size != n * k:
            raise ValueError(f"expected fp32 probabilities of {n} x {k}, got {probs.dtype} {probs.shape}")
        if labels.size != n:
            raise ValueError(f"expected {n} labels, got {labels.size}")
        ops.dev.launch("tr_softmax_ce_fwd", (1,), (256,), (
            *ops.arr(logits), *ops.arr(labels), ops.p(probs), np.int32(n), np.int32(k), *ops.s(loss), *ops.s(top1),
            *ops.s(top5), *ops.s(pred), *ops.s(batch_size), *ops.s(label_smoothing), *ops.s(inv_batch)),
            ops.ext(logits, labels, probs, pred))

    @reg("softmax_ce_bwd")
    def softmax_ce_bwd(probs, labels, dlogits, loss_scale=None, batch_size=None, label_smoothing=None,
                       inv_batch=None):
        k = int(probs.shape[-1])
        n = probs.size // k
        if labels.size != n:
            raise ValueError(f"expected {n} labels, got {labels.size}")
        ops.ew("tr_softmax_ce_bwd", n * k, ops.p(probs), *ops.arr(labels), *ops.arr(dlogits), np.int32(n),
               np.int32(k), *ops.s(loss_scale), *ops.s(batch_size), *ops.s(label_smoothing), *ops.s(inv_batch),
               touch=(probs, labels, dlogits))

    # -- dropout ---------------------------------------------------------------------------
    @reg("dropout_fwd")
    def dropout_fwd(x, y, mask, rng, *, p):
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"expected dropout probability in [0, 1], got {p}")
        if rng.dtype != I32 or rng.size < 2:
            raise ValueError(f"expected the int32 dropout state (seed, calls), got {rng.dtype} {rng.shape}")
        scale = 0.0 if p >= 1.0 else 1.0 / (1.0 - p)
        ops.ew("tr_dropout_fwd", x.size, *ops.arr(x), *ops.arr(y), ops.p(mask), np.int64(x.size), ops.p(rng),
               np.float32(p), np.float32(scale), touch=(x, y, mask, rng))
        ops.one("tr_dropout_advance", ops.p(rng), touch=(rng,))

    @reg("dropout_bwd")
    def dropout_bwd(dy, mask, dx, *, p):
        ops.mul_mask(dy, mask, dx, 0.0 if p >= 1.0 else 1.0 / (1.0 - p))

    # -- ranges and step scalars ---------------------------------------------------------------
    @reg("range_clear")
    def range_clear(out):
        for a in _seq(out):
            ops.zero(a)

    @reg("range_d2d_copy", "range_h2d_copy_a", "range_h2d_copy_b", "range_h2d_copy_dtensor", "range_sema_switch",
         "range_cast_fp32_to_fp16", "range_cast_fp16_to_fp32")
    def range_copy(src, dst):
        for a, b in _pairs(src, dst):
            ops.convert(b, a)

    @reg("range_check_nan")
    def range_check_nan(grads, has_nan, *, clip=0.0):
        ops.zero(has_nan)
        for g in _seq(grads):
            f = flat(g)
            ops.ew("tr_check_nan", f.size, *ops.arr(f), np.int64(f.size), *ops.arr(has_nan), np.float32(clip),
                   touch=(f, has_nan))

    @reg("range_grad_scaling")
    def range_grad_scaling(has_nan, loss_scale):
        ops.one("tr_grad_scaling", *ops.s(has_nan), *ops.s(loss_scale), touch=(has_nan, loss_scale))

    @reg("range_accum_metrics")
    def range_accum_metrics(batch_size, loss, top1, top5, acc_loss, acc_top1, acc_top5):
        ops.one("tr_accum_metrics", *ops.s(batch_size), *ops.s(loss), *ops.s(top1), *ops.s(top5), *ops.s(acc_loss),
                *ops.s(acc_top1), *ops.s(acc_top5))

    def allreduce(how: str) -> Impl:
        def fn(data, *, world_size=1):
            size = 1 if ops.dev.comm is None else ops.dev.comm.size
            if world_size not in (1, size):
                raise ValueError(f"the graph was compiled for world_size={world_size}, the process group has {size}")
            for a in _seq(data):
                f = flat(a)
                if np.dtype(f.dtype) not in (F32, F16):
                    raise ValueError(f"all-reduce of a {f.dtype} range (mixed dtypes?) is not supported")
                ops.dev.allreduce(ops.dev.ptr(f), int(f.size), f.dtype, how)
        return fn

    t["range_mean_allreduce"] = allreduce("avg")
    t["range_bn_stats_allreduce"] = allreduce("avg")
    t["range_sum_allreduce"] = allreduce("sum")

    @reg("range_ema_param_update")
    def range_ema_param_update(w, ema, decay, has_nan=None):
        for a, e in _pairs(w, ema):
            ops.ew("tr_ema", a.size, *ops.arr(a), *ops.arr(e), *ops.s(decay), *ops.s(has_nan), np.int64(a.size),
                   touch=(a, e))

    @reg("scalar_increment")
    def scalar_increment(step, has_nan=None):
        ops.one("tr_scalar_increment", *ops.s(step), *ops.s(has_nan), touch=(step,))

    @reg("adam_bias_correction")
    def adam_bias_correction(step, beta1, beta2, bc1, bc2):
        ops.one("tr_adam_bias_correction", *ops.s(step), *ops.s(beta1), *ops.s(beta2), *ops.s(bc1), *ops.s(bc2))

    # -- optimizers ----------------------------------------------------------------------------
    def f32(*arrays: Any) -> None:
        for a in arrays:
            if a is not None and a.dtype != F32:
                raise ValueError(f"expected fp32 optimizer spans, got {a.dtype}")

    def sgd(w, g, m, lr, wd, mom, loss_scale, has_nan, nesterov: bool) -> None:
        wf, gf = flat(w), flat(g)
        mf = None if m is None else flat(m)
        f32(wf, gf, mf)
        ops.ew("tr_sgd", wf.size, ops.p(wf), ops.p(gf), ops.p(mf), np.int64(wf.size), *ops.s(lr), *ops.s(wd),
               *ops.s(mom), *ops.s(loss_scale), *ops.s(has_nan), np.int32(nesterov), touch=(wf, gf, mf))

    for kind, mom, nest in (("sgd", False, False), ("momentum", True, False), ("nesterov", True, True)):
        if mom:
            def weight(w, g, m, lr, momentum, weight_decay, loss_scale=None, has_nan=None, _n=nest):
                sgd(w, g, m, lr, weight_decay, momentum, loss_scale, has_nan, _n)

            def bias(w, g, m, lr, momentum, loss_scale=None, has_nan=None, _n=nest):
                sgd(w, g, m, lr, None, momentum, loss_scale, has_nan, _n)
        else:
            def weight(w, g, lr, weight_decay, loss_scale=None, has_nan=None):  # type: ignore[misc]
                sgd(w, g, None, lr, weight_decay, None, loss_scale, has_nan, False)

            def bias(w, g, lr, loss_scale=None, has_nan=None):  # type: ignore[misc]
                sgd(w, g, None, lr, None, None, loss_scale, has_nan, False)
        t[f"range_update_weight_{kind}"] = weight
        t[f"range_update_bias_{kind}"] = bias

    def adam(w, g, m, v, lr, beta1, beta2, eps, wd, step, loss_scale, has_nan, bc1, bc2, decoupled: bool) -> None:
        wf, gf, mf, vf = flat(w), flat(g), flat(m), flat(v)
        f32(wf, gf, mf, vf)
        if step is None and (bc1 is None or bc2 is None):
            raise ValueError("expected the Adam step or both bias corrections bc1, bc2")
        ops.ew("tr_adam", wf.size, ops.p(wf), ops.p(gf), ops.p(mf), ops.p(vf), np.int64(wf.size), *ops.s(lr),
               *ops.s(beta1), *ops.s(beta2), *ops.s(eps), *ops.s(wd), *ops.s(step), *ops.s(loss_scale),
               *ops.s(has_nan), *ops.s(bc1), *ops.s(bc2), np.int32(decoupled), touch=(wf, gf, mf, vf))

    @reg("range_update_weight_adam")
    def range_update_weight_adam(w, g, m, v, lr, beta1, beta2, eps, weight_decay, step=None, loss_scale=None,
                                 has_nan=None, bc1=None, bc2=None):
        adam(w, g, m, v, lr, beta1, beta2, eps, weight_decay, step, loss_scale, has_nan, bc1, bc2, False)

    @reg("range_update_bias_adam")
    def range_update_bias_adam(w, g, m, v, lr, beta1, beta2, eps, step=None, loss_scale=None, has_nan=None,
                               bc1=None, bc2=None):
        adam(w, g, m, v, lr, beta1, beta2, eps, None, step, loss_scale, has_nan, bc1, bc2, False)

    @reg("range_update_weight_adamw")
    def range_update_weight_adamw(w, g, m, v, lr, beta1, beta2, eps, weight_decay, step=None, loss_scale=None,
                                  has_nan=None, bc1=None, bc2=None):
        adam(w, g, m, v, lr, beta1, beta2, eps, weight_decay, step, loss_scale, has_nan, bc1, bc2, True)

    def lars_range(nesterov: bool) -> Impl:
        def fn(w, g, m, lr, momentum, weight_decay, trust_coefficient, eps, loss_scale=None, has_nan=None, *,
               segments):
            wf, gf, mf = flat(w), flat(g), flat(m)
            f32(wf, gf, mf)
            for off, size in segments:
                if off < 0 or off + size > wf.size:
                    raise ValueError(f"LARS segment ({off}, {size}) outside the span of {wf.size} elements")
                sub = (np.uint64(ops.dev.ptr(wf) + 4 * off), np.uint64(ops.dev.ptr(gf) + 4 * off),
                       np.uint64(ops.dev.ptr(mf) + 4 * off))
                ops.dev.launch("tr_lars_segment", (1,), (BLOCK,), (
                    *sub, np.int64(size), *ops.s(lr), *ops.s(momentum), *ops.s(weight_decay),
                    *ops.s(trust_coefficient), *ops.s(eps), *ops.s(loss_scale), *ops.s(has_nan),
                    np.int32(nesterov)), [(int(p), 4 * size) for p in sub])
        return fn

    t["range_update_weight_lars"] = lars_range(False)
    t["range_update_weight_lars_nesterov"] = lars_range(True)

    @reg("lars_compute_trust_ratio", "lars_compute_trust_ratio_fc", "lars_compute_trust_ratio_first",
         "lars_compute_trust_ratio_deep")
    def lars_compute_trust_ratio(w, g, trust_ratio, trust_coefficient, weight_decay, eps, loss_scale=None,
                                 has_nan=None):
        wf, gf = flat(w), flat(g)
        ops.dev.launch("tr_lars_trust", (1,), (BLOCK,), (
            *ops.arr(wf), *ops.arr(gf), np.int64(wf.size), *ops.s(trust_coefficient), *ops.s(weight_decay),
            *ops.s(eps), *ops.s(loss_scale), *ops.s(has_nan), *ops.s(trust_ratio)), ops.ext(wf, gf))

    def lars_tensor(nesterov: bool) -> Impl:
        def fn(w, g, m, trust_ratio, lr, momentum, weight_decay, loss_scale=None, has_nan=None):
            wf, gf, mf = flat(w), flat(g), flat(m)
            f32(wf, gf, mf)
            ops.ew("tr_lars_apply", wf.size, ops.p(wf), ops.p(gf), ops.p(mf), np.int64(wf.size),
                   *ops.s(trust_ratio), *ops.s(lr), *ops.s(momentum), *ops.s(weight_decay), *ops.s(loss_scale),
                   *ops.s(has_nan), np.int32(nesterov), touch=(wf, gf, mf))
        return fn

    for suffix in ("", "_fc", "_first", "_deep"):
        t[f"lars_update{suffix}"] = lars_tensor(False)
        t[f"lars_nesterov_update{suffix}"] = lars_tensor(True)

    return {kernel_id(name): fn for name, fn in t.items()}


def _adapt(spec: KernelSpec, fn: Impl) -> Impl:
    """``fn`` called with the arguments of ``spec`` (module doc): the workspaces it does not name
    must be ``None``, the params it does not name are dropped; ``fn`` itself when it names them all
    (or takes ``**kw``). Raises ``ValueError`` naming the kernel when ``fn`` names an argument the
    spec does not have, or leaves out an array argument that is no workspace."""
    sig = inspect.signature(fn).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig):
        return fn
    takes = {p.name for p in sig if not p.name.startswith("_")}  # _name=value: a value bound at definition
    unknown = sorted(takes - set(spec.arrays) - set(spec.params))
    ignored = [a for a in spec.arrays if a not in takes and a not in spec.workspaces]
    if unknown or ignored:
        raise ValueError(f"CUDA launcher of kernel '{spec.name}' takes {sorted(takes)}: "
                         + (f"{unknown} are no arguments of the kernel" if unknown else
                            f"it must take every array argument but the workspaces, not {ignored}"))
    no_ws = tuple(a for a in spec.workspaces if a not in takes)
    no_params = tuple(p for p in spec.params if p not in takes)
    if not no_ws and not no_params:
        return fn

    def launch(**kw: Any) -> None:
        for a in no_ws:
            if kw.pop(a, None) is not None:
                raise ValueError(f"kernel '{spec.name}': the CUDA launcher uses no workspace '{a}', yet one is "
                                 "planned (its cuda workspace rule must not ask for it)")
        for p in no_params:
            kw.pop(p, None)
        fn(**kw)

    launch.__wrapped__ = fn  # type: ignore[attr-defined]
    return launch


_IMPL_NAMES: frozenset[KernelId] = frozenset(_impls(None))  # type: ignore[arg-type]  # the table's names only
"""The kernels the backend implements itself (building the table binds no device; a name outside
the node-op vocabulary fails here, at import)."""

CUDA_IMPLS: dict[KernelId, Callable[[GpuOps], Impl]] = {}
"""Plugins' CUDA implementations: KernelId -> ``factory(ops: GpuOps) -> fn``, where ``fn`` takes
the arguments of the kernel's registry spec it reads (device arrays, keyword params, as the
built-in launchers: :func:`_adapt`) and launches on ``ops`` (:func:`register_cuda_kernel`)."""


def register_cuda_kernel(name: str, factory: Callable[[GpuOps], Impl]) -> None:
    """Give the registry kernel ``name`` (a KernelId, or a node op name in any spelling; its CPU
    implementation registered with ``@kernel``) a CUDA implementation: ``factory(ops)`` returns
    the launcher, called with the spec's arrays and params it names (module doc;
    ``ops.compile(source)`` / ``ops.launch(...)`` build it from CUDA C++ source). Raises
    ``KeyError`` when ``name`` is not a registered kernel."""
    try:
        kid = kernel_id(name)
    except KeyError:
        kid = None
    if kid is None or kid not in KERNELS:
        raise KeyError(f"register_cuda_kernel('{name}'): no kernel '{name}' is registered; register its CPU "
                       "implementation with @tr_mlir.extend.kernel first")
    CUDA_IMPLS[kid] = factory


def missing_cuda_kernels(names: Iterable[str] | None = None) -> list[str]:
    """Registry kernels (all, or ``names``) without a CUDA implementation, sorted. The built-in
    kernels all have one (``tests/test_gpu_kernels.py``); a plugin's CPU-only kernel is listed."""
    have = set(_IMPL_NAMES) | set(CUDA_IMPLS)
    return sorted(n for n in (KERNELS if names is None else names) if n not in have)


def cuda_kernels(ops: GpuOps) -> dict[KernelId, KernelSpec]:
    """The GPU kernel table: for every KernelId of :data:`KERNELS` with a CUDA implementation (the
    built-in ones and :data:`CUDA_IMPLS`) its spec with the GPU launcher (:func:`_adapt`). A kernel without one is
    left out: the executable reports it, by name, only when a model's graphs use it."""
    impls = _impls(ops)
    for name, factory in CUDA_IMPLS.items():
        impls[name] = factory(ops)
    # prepare=None: a prepared call is the CPU function's (it reads host pointers)
    return {name: dataclasses.replace(spec, fn=_adapt(spec, impls[name]), prepare=None)
            for name, spec in KERNELS.items() if name in impls}
