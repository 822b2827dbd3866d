"""The data model of layer descriptors and the sub-layer parts they are built from.

:class:`LayerCtx` (one layer in one variant), :class:`LayerPlan` (its DTensors and node patterns),
and one part per sub-layer (:func:`conv_part`, :func:`bn_part`, :func:`relu_part`, ...): each adds
its tensors to a plan, under a name prefix, and returns its forward, backward and inference nodes.
The primitive descriptors (:mod:`tr_mlir.passes._descriptors`) use one part each, the fused ones
(:mod:`tr_mlir.passes._block_plans`) several; the module doc of ``_descriptors`` gives the rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from xdsl.ir import Operation

from tr_mlir.dialects.kernels import K, LayerKernels
from tr_mlir.dialects.memplan import MemRegion, Target
from tr_mlir.errors import TrMlirError

Shape = tuple[int, int, int, int]
"""NHWC."""

PLACEHOLDER: Shape = (1, 1, 1, 1)
"""Shape of a tensor kept only so that tensor lists have one length in every configuration."""

BN_EPS = 1e-5
BN_MOMENTUM = 0.1
"""PyTorch's batch-norm defaults (the arch ops' defaults too)."""


class DescriptorError(TrMlirError):
    """A layer the descriptors cannot plan (the message names the rule; phase 1 reports it at the op)."""


@dataclass(frozen=True)
class LayerCtx:
    """One layer in one variant, as a descriptor sees it.

    ``inputs``: NHWC shapes of the input values (N = the variant's batch); ``output``: the output
    shape; ``params``: the op's properties as Python values; ``amp``: fp16 features and fp16 working
    weights; ``first``: the layer reads the input buffers (A/B) and computes no input gradient;
    ``target``: the plan's target, whose kernels' workspaces are planned (:func:`plan_workspaces`);
    ``output_kept``: every consumer of the layer's output reads that value in its own backward
    (:attr:`Descriptor.bwd_reads_input`), so the output stays live until the layer's backward anyway
    (:func:`layer_ctx` derives it from the model; a ReLU then reads its output instead of a mask).
    """

    op: Operation
    params: Mapping[str, Any]
    inputs: tuple[Shape, ...]
    output: Shape
    amp: bool
    first: bool
    target: Target = Target.CPU
    output_kept: bool = False

    @property
    def batch(self) -> int:
        return self.inputs[0][0]

    @property
    def prec(self) -> str:
        """``AMP`` or ``FP32``: the kernel family of the layer's ops."""
        return "AMP" if self.amp else "FP32"

    @property
    def feat(self) -> MemRegion:
        return MemRegion.F_FEATURE_FP16 if self.amp else MemRegion.F_FEATURE_FP32

    @property
    def gslot(self) -> MemRegion:
        return MemRegion.F_GRAD_SLOT_FP16 if self.amp else MemRegion.F_GRAD_SLOT_FP32

    @property
    def featdt(self) -> str:
        return "f16" if self.amp else "f32"


@dataclass(frozen=True)
class TensorDesc:
    """One DTensor of a layer. ``shared``: a kernel workspace that phase 3 allocates once for all
    layers (one slot of the largest size), instead of once per layer."""

    name: str
    region: MemRegion
    dtype: str
    shape: Shape
    shared: bool = False


@dataclass(frozen=True)
class NodePattern:
    """A COMPUTE node of a layer: op name, input operands, output operands (see the module doc).

    ``params``: the kernel's static parameters as ``(name, value)`` pairs (a conv inside a fused
    block gets its own ``k``, ``s``, ``p``, ``groups``); ``None`` means "the layer op's
    properties" (the seed's rule: every node gets ``convert(layer.params)``), ``()`` means none.
    """

    op: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    params: tuple[tuple[str, Any], ...] | None = None

    def with_dy(self, source: str) -> NodePattern:
        """The same node reading its incoming gradient (input 0) from ``source``."""
        return replace(self, inputs=(source, *self.inputs[1:]))


@dataclass
class LayerPlan:
    """What a descriptor returns for one layer in one variant.

    ``bwd_reads_output``: this layer's backward reads its own output value (a ReLU in the output
    form), so the output's gradient cannot overwrite it: phase 1 gives the output a gradient slot
    ``<output>_grad`` as for :attr:`Descriptor.bwd_reads_output`, decided per layer instance.
    """

    tensors: list[TensorDesc] = field(default_factory=list)
    forward: list[NodePattern] = field(default_factory=list)
    backward: list[NodePattern] = field(default_factory=list)
    inference: list[NodePattern] = field(default_factory=list)
    bwd_reads_output: bool = False

    def add(self, name: str, region: MemRegion, dtype: str, shape: Shape, shared: bool = False) -> str:
        """Append a tensor; a shared workspace already present keeps the larger of the two shapes."""
        t = TensorDesc(name, region, dtype, shape, shared)
        if shared:
            for i, old in enumerate(self.tensors):
                if old.name == name:
                    if elems(shape) > elems(old.shape):
                        self.tensors[i] = t
                    return name
        self.tensors.append(t)
        return name

    def names(self) -> list[str]:
        return [t.name for t in self.tensors]


BN1D = LayerKernels(K.BN1D_FWD, K.BN1D_BWD, inf=K.BN1D_INF)
BN2D = LayerKernels(K.BN2D_FWD, K.BN2D_BWD, inf=K.BN2D_INF)
"""The batch-norm kernels (bn1d, bn2d)."""


# --------------------------------------------------------------------------------------
# Shape helpers
# --------------------------------------------------------------------------------------


def window(size: int, k: int, s: int, p: int) -> int:
    """Conv/pool output extent ``(size + 2p - k) // s + 1``; raises :class:`DescriptorError`."""
    if size + 2 * p < k or s < 1:
        raise DescriptorError(f"window k = {k}, s = {s}, p = {p} does not fit input size {size}")
    return (size + 2 * p - k) // s + 1


def elems(shape: Shape) -> int:
    """Element count of an NHWC shape."""
    n, h, w, c = shape
    return n * h * w * c


def param_shape(c: int) -> Shape:
    """The NHWC shape ``{1, 1, 1, c}`` of a per-channel parameter."""
    return (1, 1, 1, c)


# --------------------------------------------------------------------------------------
# Parts (sub-layers shared by primitive and fused descriptors)
# --------------------------------------------------------------------------------------


def conv_part(lp: LayerPlan, ctx: LayerCtx, p: str, x: str, dy_src: str, dx: str | None, in_shape: Shape,
              out_ch: int, k: int, s: int, pad: int, groups: int = 1, first: bool = False,
              ) -> tuple[str, Shape, NodePattern, NodePattern, NodePattern]:
    """Conv tensors (seed: 8, minus the unused grad slot, plus the im2col workspace) and its three
    nodes. Returns (output name, output shape, fwd, bwd, inf)."""
    n, h, w, c = in_shape
    if c % groups or out_ch % groups:
        raise DescriptorError(f"channels {c} -> {out_ch} not divisible by groups = {groups}")
    out = (n, window(h, k, s, pad), window(w, k, s, pad), out_ch)
    wsh = (out_ch, k, k, c // groups)
    fam = "FIRST_CONV" if first else "DEEP_CONV"
    weight = lp.add(f"{p}conv_weight", MemRegion[f"W_{fam}"], "f32", wsh)
    y = lp.add(f"{p}conv_output", ctx.feat, ctx.featdt, out)
    dw = lp.add(f"{p}conv_weight_grad", MemRegion[f"G_{fam}"], "f32", wsh)
    amp_w = lp.add(f"{p}conv_amp_w_fp16", MemRegion[f"A_{fam}"], "f16", wsh if ctx.amp else PLACEHOLDER)
    amp_g = lp.add(f"{p}conv_amp_g_fp16", MemRegion[f"G_{fam}_FP16"], "f16", wsh if ctx.amp else PLACEHOLDER)
    ssum = lp.add(f"{p}conv_sum", MemRegion.T_TEMP_FP32, "f32", param_shape(out_ch))
    sq = lp.add(f"{p}conv_sq_sum", MemRegion.T_TEMP_FP32, "f32", param_shape(out_ch))
    wt = amp_w if ctx.amp else weight
    wg = amp_g if ctx.amp else dw
    kp = (("out_ch", out_ch), ("k", k), ("s", s), ("p", pad), ("groups", groups))
    fwd = NodePattern(K.CONV_FWD.op(ctx.prec), (x, wt), (y, ssum, sq), kp)
    if dx is None:
        bwd = NodePattern(K.CONV_BWD_FIRST_LAYER.op(ctx.prec), (dy_src, wt, x), (wg,), kp)
    else:
        bwd = NodePattern(K.CONV_BWD.op(ctx.prec), (dy_src, wt, x), (dx, wg), kp)
    inf = NodePattern(K.CONV_INF.op(ctx.prec), (x, wt), (y, ssum, sq), kp)
    return y, out, fwd, bwd, inf


def bn_part(lp: LayerPlan, ctx: LayerCtx, p: str, x: str, dy_src: str, dx: str, shape: Shape, kind: LayerKernels,
            ) -> tuple[str, NodePattern, NodePattern, NodePattern]:
    """BN tensors (seed: 13) and nodes. ``kind`` is :data:`BN1D` or :data:`BN2D`."""
    c = shape[3]
    if ctx.amp and c % 8:
        raise DescriptorError(
            f"BN AMP requires input channels to be a multiple of 8, got {c}; insert channel_padding()")
    ps = param_shape(c)
    gamma = lp.add(f"{p}bn_weight", MemRegion.W_BN_WEIGHT, "f32", ps)
    beta = lp.add(f"{p}bn_bias", MemRegion.W_BN_BIAS, "f32", ps)
    y = lp.add(f"{p}bn_output", ctx.feat, ctx.featdt, shape)
    lp.add(f"{p}bn_prev_mean", MemRegion.B_PREV_MEAN, "f32", ps)
    lp.add(f"{p}bn_prev_var", MemRegion.B_PREV_VAR, "f32", ps)
    nm = lp.add(f"{p}bn_next_mean", MemRegion.B_NEXT_MEAN, "f32", ps)
    nv = lp.add(f"{p}bn_next_var", MemRegion.B_NEXT_VAR, "f32", ps)
    dg = lp.add(f"{p}bn_weight_grad", MemRegion.G_BN_WEIGHT, "f32", ps)
    db = lp.add(f"{p}bn_bias_grad", MemRegion.G_BN_BIAS, "f32", ps)
    eqb = lp.add(f"{p}bn_eq_bias", MemRegion.W_EQ_BIAS, "f32", ps)
    eqs = lp.add(f"{p}bn_eq_scale", MemRegion.W_EQ_SCALE, "f32", ps)
    sm = lp.add(f"{p}bn_saved_mean", MemRegion.T_TEMP_FP32, "f32", ps)
    siv = lp.add(f"{p}bn_saved_inv_var", MemRegion.T_TEMP_FP32, "f32", ps)
    kp = (("eps", float(ctx.params.get("eps", BN_EPS))),
          ("momentum", float(ctx.params.get("momentum", BN_MOMENTUM))))
    fwd = NodePattern(kind.fwd.op(ctx.prec), (x, gamma, beta, nm, nv, "@bn_epsilon", "@bn_momentum"),
                      (y, sm, siv, nm, nv), kp)
    bwd = NodePattern(kind.bwd.op(ctx.prec), (dy_src, gamma, sm, siv, x), (dx, dg, db), kp)
    inf = NodePattern(kind.inf.op(ctx.prec), (x, eqs, eqb), (y,), kp)
    return y, fwd, bwd, inf


def relu_part(lp: LayerPlan, ctx: LayerCtx, p: str, x: str, dy_src: str, dx: str, shape: Shape,
              from_output: bool, stem: str = "relu") -> tuple[str, NodePattern, NodePattern, NodePattern]:
    """ReLU tensors and nodes, in one of two forms (the caller decides, see the module doc):

    * the mask form: the forward writes ``<p><stem>_output`` and the INT8 ``<p><stem>_mask``
      (``x > 0``), the backward reads ``(dy, mask)``: 1 byte per element kept, the output may die at
      its consumers' last forward read;
    * the output form (``from_output``): no mask; the backward ``RELU_<P>_BWD_FROM_OUTPUT`` reads
      ``(dy, y)``, for a ReLU whose output its consumers keep for their backward anyway. ``dy_src``
      must then not be the output itself (a gradient slot of its own holds it).

    Both give the same bits (``y > 0`` exactly where ``x > 0``)."""
    y = lp.add(f"{p}{stem}_output", ctx.feat, ctx.featdt, shape)
    if from_output:
        assert dy_src != y, f"{y}: a ReLU that reads its output needs its gradient elsewhere"
        return (y, NodePattern(K.RELU_FWD.op(ctx.prec), (x,), (y,), ()),
                NodePattern(K.RELU_BWD_FROM_OUTPUT.op(ctx.prec), (dy_src, y), (dx,), ()),
                NodePattern(K.RELU_INF.op(ctx.prec), (x,), (y,), ()))
    mask = lp.add(f"{p}{stem}_mask", MemRegion.S_MASK, "i8", shape)
    return (y, NodePattern(K.RELU_FWD.op(ctx.prec), (x,), (y, mask), ()),
            NodePattern(K.RELU_BWD.op(ctx.prec), (dy_src, mask), (dx,), ()),
            NodePattern(K.RELU_INF.op(ctx.prec), (x,), (y, mask), ()))


def fc_part(lp: LayerPlan, ctx: LayerCtx, p: str, x: str, dy_src: str, dx: str | None, in_shape: Shape,
            out_features: int, bias: bool) -> tuple[str, NodePattern, NodePattern]:
    """FC tensors (seed: 7) and nodes (fwd, bwd); inference reuses the forward op (the seed's rule)."""
    n, h, w, c = in_shape
    wsh = (out_features, 1, 1, h * w * c)
    bsh = param_shape(out_features)
    weight = lp.add(f"{p}fc_weight", MemRegion.W_FC_WEIGHT, "f32", wsh)
    b = lp.add(f"{p}fc_bias", MemRegion.W_FC_BIAS, "f32", bsh if bias else PLACEHOLDER)
    y = lp.add(f"{p}fc_output", ctx.feat, ctx.featdt, (n, 1, 1, out_features))
    dw = lp.add(f"{p}fc_weight_grad", MemRegion.G_FC_WEIGHT, "f32", wsh)
    db = lp.add(f"{p}fc_bias_grad", MemRegion.G_FC_BIAS, "f32", bsh if bias else PLACEHOLDER)
    amp_w = lp.add(f"{p}fc_amp_w_fp16", MemRegion.A_FC_WEIGHT, "f16", wsh if ctx.amp else PLACEHOLDER)
    lp.add(f"{p}fc_amp_g_fp16", MemRegion.G_FC_WEIGHT_FP16, "f16", wsh if ctx.amp else PLACEHOLDER)
    wt = amp_w if ctx.amp else weight
    kp = (("out_features", out_features), ("bias", bias))
    fwd = NodePattern(K.FC_FWD.op(ctx.prec), (x, wt, b), (y,), kp)
    if dx is None:
        bwd = NodePattern(K.FC_BWD_FIRST_LAYER.op(ctx.prec), (dy_src, wt, x), (dw, db), kp)
    else:
        bwd = NodePattern(K.FC_BWD.op(ctx.prec), (dy_src, wt, x), (dx, dw, db), kp)
    return y, fwd, bwd


def gap_part(lp: LayerPlan, ctx: LayerCtx, p: str, x: str, dy_src: str, dx: str, in_shape: Shape,
             ) -> tuple[str, NodePattern, NodePattern]:
    """Global-average-pool tensors (its output, N x 1 x 1 x C) and nodes (fwd, bwd; inference
    reuses the forward)."""
    y = lp.add(f"{p}gap_output", ctx.feat, ctx.featdt, (in_shape[0], 1, 1, in_shape[3]))
    return (y, NodePattern(K.GAP_FWD.op(ctx.prec), (x,), (y,), ()),
            NodePattern(K.GAP_BWD.op(ctx.prec), (dy_src,), (dx,), ()))


def maxpool_part(lp: LayerPlan, ctx: LayerCtx, p: str, x: str, dy_src: str, dx: str, in_shape: Shape,
                 k: int, s: int, pad: int) -> tuple[str, NodePattern, NodePattern, NodePattern]:
    """Max-pool tensors (output and INT8 argmax mask, window ``k``, stride ``s``, padding ``pad``)
    and nodes (fwd, bwd, inf); raises :class:`DescriptorError` when the window does not fit."""
    n, h, w, c = in_shape
    out = (n, window(h, k, s, pad), window(w, k, s, pad), c)
    y = lp.add(f"{p}pool_output", ctx.feat, ctx.featdt, out)
    mask = lp.add(f"{p}pool_mask", MemRegion.S_MASK, "i8", out)
    kp = (("k", k), ("s", s), ("p", pad))
    return (y, NodePattern(K.MAXPOOL_FWD.op(ctx.prec), (x,), (y, mask), kp),
            NodePattern(K.MAXPOOL_BWD.op(ctx.prec), (dy_src, mask), (dx,), kp),
            NodePattern(K.MAXPOOL_INF.op(ctx.prec), (x,), (y, mask), kp))


def input_grad(ctx: LayerCtx, name: str = "$dx") -> str | None:
    """The input-gradient operand, or ``None`` for the first layer (it computes no dX)."""
    return None if ctx.first else name
