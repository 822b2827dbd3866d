"""Fused blocks on the GPU: the NumPy block routines of :mod:`tr_mlir.lowering.cpu.fused`, step for
step, on the :class:`~tr_mlir.lowering.cuda.ops.GpuOps` primitives.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tr_mlir.lowering.cpu._util import take
from tr_mlir.lowering.cpu.conv import WORKSPACES as CONV_WS
from tr_mlir.lowering.cpu.conv import ConvGeom
from tr_mlir.lowering.cpu.fused import Layout
from tr_mlir.lowering.cuda.ops import GpuOps


# --------------------------------------------------------------------------------------
# Fused blocks (the NumPy block routines, step for step, on the GPU primitives)
# --------------------------------------------------------------------------------------


def _geoms(lay: Layout, x_shape: tuple[int, ...], w: Callable[[str], tuple[int, ...]]) -> dict[str, ConvGeom]:
    out, h = {}, tuple(x_shape)
    for st in lay.main:
        g = st.geom(h, w(st.tag))
        out[st.tag] = g
        h = g.y_shape
    if lay.projection:
        out["_sc"] = lay.projection.geom(tuple(x_shape), w("_sc"))
    return out


def block_forward(ops: GpuOps, lay: Layout, arr: dict[str, Any], eps: float, momentum: float) -> None:
    """Training forward of a fused block (:func:`tr_mlir.lowering.cpu.fused.block_forward`)."""
    x = arr["x"]
    geoms = _geoms(lay, x.shape, lambda t: arr[f"w{t}"].shape)
    ws = {k: arr[k] for k in CONV_WS if arr.get(k) is not None}
    h = x
    for i, st in enumerate(lay.main):
        t = st.tag
        c, out = arr[f"c{t}"], arr[lay.out_name(i)]
        ops.conv_forward(h, arr[f"w{t}"], c, geoms[t], ws)
        ops.bn_forward_train(c, arr[f"gamma{t}"], arr[f"beta{t}"], arr[f"mean{t}"], arr[f"var{t}"], out,
                             arr[f"save_mean{t}"], arr[f"save_istd{t}"], eps, momentum)
        if st.relu:
            ops.relu_inplace(out, arr[f"mask{t}"])
        h = out
    y = arr["y"]
    if lay.shortcut == "identity":
        ops.add(y, x, y)
    elif lay.shortcut == "projection":
        c = arr["c_sc"]
        ops.conv_forward(x, arr["w_sc"], c, geoms["_sc"], ws)
        tb = take(arr.get("t"), y.shape)
        ops.bn_forward_train(c, arr["gamma_sc"], arr["beta_sc"], arr["mean_sc"], arr["var_sc"], tb,
                             arr["save_mean_sc"], arr["save_istd_sc"], eps, momentum)
        ops.add(y, tb, y)
    if lay.post_relu:
        ops.relu_inplace(y, arr["mask_out"])
    if lay.pool:
        k, s, p = lay.pool
        ops.maxpool_fwd(h, y, arr["pool_mask"], k, s, p)


def block_backward(ops: GpuOps, lay: Layout, arr: dict[str, Any]) -> None:
    """Backward of a fused block (:func:`tr_mlir.lowering.cpu.fused.block_backward`)."""
    x, dx = arr["x"], arr.get("dx")
    geoms = _geoms(lay, x.shape, lambda t: arr[f"w{t}"].shape)
    ws = {k: arr[k] for k in CONV_WS if arr.get(k) is not None}
    g = arr["dy"]
    if lay.pool:
        k, s, p = lay.pool
        last = arr[f"a{lay.main[-1].tag}"]
        ops.maxpool_bwd(g, arr["pool_mask"], last, k, s, p)
        g = last
    if lay.post_relu:
        ops.mul_mask(g, arr["mask_out"], g)
    dz = g
    for i in reversed(range(len(lay.main))):
        st = lay.main[i]
        t = st.tag
        if st.relu:
            ops.mul_mask(g, arr[f"mask{t}"], g)
        c = arr[f"c{t}"]
        ops.bn_backward(g, c, arr[f"gamma{t}"], arr[f"save_mean{t}"], arr[f"save_istd{t}"], c,
                        arr[f"dgamma{t}"], arr[f"dbeta{t}"])
        h_in = x if i == 0 else arr[f"a{lay.main[i - 1].tag}"]
        ops.conv_wgrad(c, h_in, arr[f"dw{t}"], geoms[t], ws)
        if i > 0:
            ops.conv_dgrad(c, arr[f"w{t}"], h_in, geoms[t], ws)
            g = h_in
    if lay.shortcut == "projection":
        c = arr["c_sc"]
        ops.bn_backward(dz, c, arr["gamma_sc"], arr["save_mean_sc"], arr["save_istd_sc"], c, arr["dgamma_sc"],
                        arr["dbeta_sc"])
        ops.conv_wgrad(c, x, arr["dw_sc"], geoms["_sc"], ws)
    if dx is None:
        return
    first = lay.main[0].tag
    ops.conv_dgrad(arr[f"c{first}"], arr[f"w{first}"], dx, geoms[first], ws)
    if lay.shortcut == "identity":
        ops.add(dx, dz, dx)
    elif lay.shortcut == "projection":
        ops.conv_dgrad(arr["c_sc"], arr["w_sc"], dx, geoms["_sc"], ws, accumulate=True)


def block_inference(ops: GpuOps, lay: Layout, arr: dict[str, Any]) -> None:
    """Inference of a fused block with folded BN (:func:`tr_mlir.lowering.cpu.fused.block_inference`)."""
    x = arr["x"]
    geoms = _geoms(lay, x.shape, lambda t: arr[f"w{t}"].shape)
    ws = {k: arr[k] for k in CONV_WS if arr.get(k) is not None}
    h = x
    for i, st in enumerate(lay.main):
        t = st.tag
        out = arr[lay.out_name(i)]
        ops.conv_forward(h, arr[f"w{t}"], out, geoms[t], ws)
        ops.bn_affine(out, arr[f"eq_scale{t}"], arr[f"eq_bias{t}"], out)
        if st.relu:
            ops.relu_inplace(out, None)
        h = out
    y = arr["y"]
    if lay.shortcut == "identity":
        ops.add(y, x, y)
    elif lay.shortcut == "projection":
        c = arr["c_sc"]
        ops.conv_forward(x, arr["w_sc"], c, geoms["_sc"], ws)
        ops.bn_affine(c, arr["eq_scale_sc"], arr["eq_bias_sc"], c)
        ops.add(y, c, y)
    if lay.post_relu:
        ops.relu_inplace(y, None)
    if lay.pool:
        k, s, p = lay.pool
        ops.maxpool_fwd(h, y, arr["pool_mask"], k, s, p)
