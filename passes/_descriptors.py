"""Layer descriptors: what the Compiler phases know about each arch layer op (facts sheet section 3).

A descriptor, keyed by arch op class in :data:`DESCRIPTORS`, turns one layer in one variant (its
input and output NHWC shapes with N = the variant's batch, its properties, amp, first-layer mark)
into a :class:`LayerPlan`:

* ``tensors``: the layer's DTensors (name, region, dtype, NHWC shape), in allocation order;
* ``forward`` / ``backward`` / ``inference``: node patterns ``(op, inputs, outputs)``.

Node operands name the layer's own tensors, or symbols that phase 4 resolves:

* ``$x``, ``$x1``: the layer's input values (the producers' output tensors, or the input buffer A/B
  for the first layer);
* ``$dy``: where the gradient of the layer's output lives; ``$dx``, ``$dx1``: where the layer must
  write the gradient of its inputs. By default a gradient overwrites the value it is the gradient
  of (in-place dX, the seed's rule); a value with several uses, or whose producer reads it in its
  own backward (``bwd_reads_output``), gets a separate gradient slot instead (DESIGN section 4);
  ``dx_tensor`` names a tensor of the layer that holds ``$dx`` when the input has one use (GAP's
  grad slot and SoftmaxCE's ``ce_output``, as in the seed);
* ``@name``: a baseline DTensor (``@scaling``, ``@bn_epsilon``, ``@label_smce``, ... section 7).

Deliberate differences from the seed's descriptors (DESIGN section 7): fused layers (cbr, cbrp,
gap_fc, the six residual blocks) are real: their tensors are the concatenation of their sub-layers'
(prefixed ``sc_``, ``c1_``, ``c2_``, ``c3_``) and their patterns are the sub-layers' kernels in
order, with the reads of the block input scheduled before the write of its gradient and the
shortcut gradient accumulated (``GRAD_ACCUM``), except that a BN and the ReLU after it (and a
join's BN, add and ReLU) run as one fused kernel each way (:func:`_bn_relu`, the same bits, the
unfused inference); ``add`` has a real backward to both operands;
conv supports ``groups`` (depthwise included; weights KRSC ``{K, k, k, C/groups}``); the unused
``conv_grad_slot`` is not allocated; every kernel's scratch memory (conv im2col and fp32 casts,
pooling masks and accumulators, AMP GEMM buffers) is planned from the kernel library's own
workspace rule for the plan's target as shared ``ws_<arg>`` tensors (:func:`plan_workspaces`: a
CUDA plan holds none of the CPU kernels' scratch); the first-layer FC
backward is ``FC_*_BWD_FIRST_LAYER`` (no dX, as the conv's); BN forward
lists the running statistics it updates among its outputs; the activations other than ReLU
recompute ``f'(x)`` from their input in backward (``(dy, x) -> dx``, the seed's in-place rule: dY
over Y, dX over X), so, as in the seed, their output needs no gradient slot. Adding an op =
adding one entry to :data:`DESCRIPTORS`.

What a ReLU keeps for its backward is decided per ReLU (issue 12). The seed's ReLU writes an INT8
mask ``x > 0`` and its backward reads ``(dy, mask)``. When every consumer of the ReLU's output
reads that value in its own backward anyway (:attr:`Descriptor.bwd_reads_input`: conv, fc, batch
norm, the other activations, a fused op whose first kernel is a conv), the mask is a redundant byte
per element: the ReLU then writes no mask and its backward ``RELU_<P>_BWD_FROM_OUTPUT`` reads
``(dy, y)`` (``dx = dy * (y > 0)``, the same bits), so its output needs its own gradient slot
(:attr:`LayerPlan.bwd_reads_output`, phase 1's ``<output>_grad``, where phase 4 routes the
consumers' dX). A ReLU feeding a max pool, an add, a GAP, a dropout keeps the mask (its output
would otherwise die at its consumers' forward, and keeping it costs 4 bytes instead of 1). Inside
fused blocks the stage ReLUs feed the next conv and take the output form with an internal gradient
tensor ``<prefix>relu_output_grad`` (the next conv's dX goes there instead of over the ReLU
output); the block's final ReLU decides by the block's consumers (:attr:`LayerCtx.output_kept`), as
cbr's does; cbrp's ReLU feeds its max pool and keeps the mask.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from xdsl.ir import Operation

from tr_mlir.dialects import arch
from tr_mlir.dialects.kernels import K, LayerKernels, binding_problem, implementation, operands_for, workspace_tensor_name
from tr_mlir.dialects.memplan import MemRegion, Target
from tr_mlir.errors import PluginError, TrMlirError
from tr_mlir.passes._conv_algo import recorded_params

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
                    if _elems(shape) > _elems(old.shape):
                        self.tensors[i] = t
                    return name
        self.tensors.append(t)
        return name

    def names(self) -> list[str]:
        return [t.name for t in self.tensors]


@dataclass(frozen=True)
class Descriptor:
    """The compiler knowledge of one arch op class.

    ``build(ctx)`` returns the :class:`LayerPlan`; ``output`` names the tensor holding the layer's
    output value; ``dx_tensor`` (optional) the own tensor that holds the input gradient;
    ``bwd_reads_output``: the backward always reads the output value, so its gradient cannot
    overwrite it (a plan may also declare it per instance, :attr:`LayerPlan.bwd_reads_output`);
    ``bwd_reads_input``: the backward reads the layer's input values (conv, fc and batch norm for
    their gradients, the activations other than ReLU for ``f'(x)``, a fused op whose first kernel is
    a conv), so the producer of an input keeps it live until this backward has run (a ReLU feeding
    only such layers reads its output in backward instead of a mask: :attr:`LayerCtx.output_kept`);
    ``first_layer_ok``: the seed's ``validate_first_layer`` (Flatten, Conv, ChannelPadding, CBR).
    """

    build: Callable[[LayerCtx], LayerPlan]
    output: str
    dx_tensor: str | None = None
    bwd_reads_output: bool = False
    bwd_reads_input: bool = False
    first_layer_ok: bool = False


_BN1D = LayerKernels(K.BN1D_FWD, K.BN1D_BWD, inf=K.BN1D_INF)
_BN2D = LayerKernels(K.BN2D_FWD, K.BN2D_BWD, inf=K.BN2D_INF)
_FLATTEN = LayerKernels(K.FLATTEN_FWD, K.FLATTEN_BWD, bwd_first_layer=K.FLATTEN_BWD_FIRST_LAYER)
_CHANNEL_PADDING = LayerKernels(K.CHANNEL_PADDING_FWD, K.CHANNEL_PADDING_BWD,
                            bwd_first_layer=K.CHANNEL_PADDING_BWD_FIRST_LAYER)


# --------------------------------------------------------------------------------------
# Shape helpers
# --------------------------------------------------------------------------------------


def window(size: int, k: int, s: int, p: int) -> int:
    """Conv/pool output extent ``(size + 2p - k) // s + 1``; raises :class:`DescriptorError`."""
    if size + 2 * p < k or s < 1:
        raise DescriptorError(f"window k = {k}, s = {s}, p = {p} does not fit input size {size}")
    return (size + 2 * p - k) // s + 1


def _elems(shape: Shape) -> int:
    n, h, w, c = shape
    return n * h * w * c


def _param_shape(c: int) -> Shape:
    return (1, 1, 1, c)


# --------------------------------------------------------------------------------------
# Parts (sub-layers shared by primitive and fused descriptors)
# --------------------------------------------------------------------------------------


def _conv(lp: LayerPlan, ctx: LayerCtx, p: str, x: str, dy_src: str, dx: str | None, in_shape: Shape,
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
    ssum = lp.add(f"{p}conv_sum", MemRegion.T_TEMP_FP32, "f32", _param_shape(out_ch))
    sq = lp.add(f"{p}conv_sq_sum", MemRegion.T_TEMP_FP32, "f32", _param_shape(out_ch))
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


def _bn(lp: LayerPlan, ctx: LayerCtx, p: str, x: str, dy_src: str, dx: str, shape: Shape, kind: LayerKernels,
        ) -> tuple[str, NodePattern, NodePattern, NodePattern]:
    """BN tensors (seed: 13) and nodes. ``kind`` is :data:`_BN1D` or :data:`_BN2D`."""
    c = shape[3]
    if ctx.amp and c % 8:
        raise DescriptorError(
            f"BN AMP requires input channels to be a multiple of 8, got {c}; insert channel_padding()")
    ps = _param_shape(c)
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


def _relu(lp: LayerPlan, ctx: LayerCtx, p: str, x: str, dy_src: str, dx: str, shape: Shape,
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


EPILOGUES = True
"""Emit the fused batch-norm epilogues (:func:`_bn_relu`): measured to pay on ResNet-18 CIFAR
(bench/README.md); False emits the unfused kernels, the same bits (tests, bench comparisons)."""


def _bn_relu(bn: tuple[NodePattern, NodePattern], relu: tuple[NodePattern, NodePattern], prec: str,
             skip: tuple[str, str] | None = None) -> tuple[NodePattern, NodePattern] | None:
    """The fused epilogue of a BN's ``(fwd, bwd)`` followed by a ReLU's (:func:`_bn`, :func:`_relu`;
    ``skip``: ``(operand, gradient tensor)`` of a residual add between them, ``relu(bn(x) + skip)``):
    one forward writing the ReLU's output (and mask), one backward reading the ReLU's incoming
    gradient through its mask or output and writing the BN's gradients (and the join's gradient).
    The same bits as the unfused kernels (lowering/cpu/norm.py); None when :data:`EPILOGUES` is off."""
    (bf, bb), (rf, rb) = bn, relu
    if not EPILOGUES:
        return None
    kind = (K.BN2D_ADD_RELU_FWD, K.BN2D_ADD_RELU_BWD, K.BN2D_ADD_RELU_BWD_FROM_OUTPUT) if skip else \
        (K.BN2D_RELU_FWD, K.BN2D_RELU_BWD, K.BN2D_RELU_BWD_FROM_OUTPUT)
    ins = (bf.inputs[0], *((skip[0],) if skip else ()), *bf.inputs[1:])
    fwd = NodePattern(kind[0].op(prec), ins, (rf.outputs[0], *bf.outputs[1:], *rf.outputs[1:]), bf.params)
    outs = (bb.outputs[0], *((skip[1],) if skip else ()), *bb.outputs[1:])
    op = kind[2] if rb.op == K.RELU_BWD_FROM_OUTPUT.op(prec) else kind[1]
    return fwd, NodePattern(op.op(prec), (*rb.inputs, *bb.inputs[1:]), outs, bb.params)


def _fc(lp: LayerPlan, ctx: LayerCtx, p: str, x: str, dy_src: str, dx: str | None, in_shape: Shape,
        out_features: int, bias: bool) -> tuple[str, NodePattern, NodePattern]:
    """FC tensors (seed: 7) and nodes (fwd, bwd); inference reuses the forward op (the seed's rule)."""
    n, h, w, c = in_shape
    wsh = (out_features, 1, 1, h * w * c)
    bsh = _param_shape(out_features)
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


def _gap(lp: LayerPlan, ctx: LayerCtx, p: str, x: str, dy_src: str, dx: str, in_shape: Shape,
         ) -> tuple[str, NodePattern, NodePattern]:
    y = lp.add(f"{p}gap_output", ctx.feat, ctx.featdt, (in_shape[0], 1, 1, in_shape[3]))
    return (y, NodePattern(K.GAP_FWD.op(ctx.prec), (x,), (y,), ()),
            NodePattern(K.GAP_BWD.op(ctx.prec), (dy_src,), (dx,), ()))


def _maxpool(lp: LayerPlan, ctx: LayerCtx, p: str, x: str, dy_src: str, dx: str, in_shape: Shape,
             k: int, s: int, pad: int) -> tuple[str, NodePattern, NodePattern, NodePattern]:
    n, h, w, c = in_shape
    out = (n, window(h, k, s, pad), window(w, k, s, pad), c)
    y = lp.add(f"{p}pool_output", ctx.feat, ctx.featdt, out)
    mask = lp.add(f"{p}pool_mask", MemRegion.S_MASK, "i8", out)
    kp = (("k", k), ("s", s), ("p", pad))
    return (y, NodePattern(K.MAXPOOL_FWD.op(ctx.prec), (x,), (y, mask), kp),
            NodePattern(K.MAXPOOL_BWD.op(ctx.prec), (dy_src, mask), (dx,), kp),
            NodePattern(K.MAXPOOL_INF.op(ctx.prec), (x,), (y, mask), kp))


def _dx(ctx: LayerCtx, name: str = "$dx") -> str | None:
    """The input-gradient operand, or ``None`` for the first layer (it computes no dX)."""
    return None if ctx.first else name


# --------------------------------------------------------------------------------------
# Primitive descriptors
# --------------------------------------------------------------------------------------


def _build_conv(ctx: LayerCtx) -> LayerPlan:
    v = ctx.params
    lp = LayerPlan()
    _, _, f, b, i = _conv(lp, ctx, "", "$x", "$dy", _dx(ctx), ctx.inputs[0], v["out_ch"], v["k"], v["s"],
                          v["p"], v.get("groups", 1), first=ctx.first)
    lp.forward, lp.backward, lp.inference = [f], [b], [i]
    return lp


def _build_bn(kind: LayerKernels) -> Callable[[LayerCtx], LayerPlan]:
    def build(ctx: LayerCtx) -> LayerPlan:
        lp = LayerPlan()
        _, f, b, i = _bn(lp, ctx, "", "$x", "$dy", "$dx", ctx.inputs[0], kind)
        lp.forward, lp.backward, lp.inference = [f], [b], [i]
        return lp
    return build


def _build_fc(ctx: LayerCtx) -> LayerPlan:
    lp = LayerPlan()
    _, f, b = _fc(lp, ctx, "", "$x", "$dy", _dx(ctx), ctx.inputs[0], ctx.params["out_features"],
                  bool(ctx.params.get("bias")))
    lp.forward, lp.backward, lp.inference = [f], [b], [f]
    return lp


def _build_relu(ctx: LayerCtx) -> LayerPlan:
    lp = LayerPlan(bwd_reads_output=ctx.output_kept)
    _, f, b, i = _relu(lp, ctx, "", "$x", "$dy", "$dx", ctx.inputs[0], ctx.output_kept)
    lp.forward, lp.backward, lp.inference = [f], [b], [i]
    return lp


def _build_activation(kind: LayerKernels, tensor: str) -> Callable[[LayerCtx], LayerPlan]:
    def build(ctx: LayerCtx) -> LayerPlan:
        lp = LayerPlan()
        y = lp.add(f"{tensor}_output", ctx.feat, ctx.featdt, ctx.inputs[0])
        f = NodePattern(kind.fwd.op(ctx.prec), ("$x",), (y,))
        lp.forward = [f]
        lp.backward = [NodePattern(kind.bwd.op(ctx.prec), ("$dy", "$x"), ("$dx",))]
        lp.inference = [f]
        return lp
    return build


def _build_maxpool(ctx: LayerCtx) -> LayerPlan:
    v = ctx.params
    lp = LayerPlan()
    _, f, b, i = _maxpool(lp, ctx, "", "$x", "$dy", "$dx", ctx.inputs[0], v["k"], v["s"], v["p"])
    lp.forward, lp.backward, lp.inference = [f], [b], [i]
    return lp


def _build_avgpool(ctx: LayerCtx) -> LayerPlan:
    v = ctx.params
    n, h, w, c = ctx.inputs[0]
    lp = LayerPlan()
    y = lp.add("avgpool_output", ctx.feat, ctx.featdt,
               (n, window(h, v["k"], v["s"], v["p"]), window(w, v["k"], v["s"], v["p"]), c))
    lp.forward = [NodePattern(K.AVGPOOL_FWD.op(ctx.prec), ("$x",), (y,))]
    lp.backward = [NodePattern(K.AVGPOOL_BWD.op(ctx.prec), ("$dy",), ("$dx",))]
    lp.inference = [NodePattern(K.AVGPOOL_INF.op(ctx.prec), ("$x",), (y,))]
    return lp


def _build_gap(ctx: LayerCtx) -> LayerPlan:
    lp = LayerPlan()
    _, f, b = _gap(lp, ctx, "", "$x", "$dy", "$dx", ctx.inputs[0])
    lp.add("gap_grad_slot", ctx.gslot, ctx.featdt, ctx.inputs[0])
    lp.forward, lp.backward, lp.inference = [f], [b], [f]
    return lp


def _build_reshape(kind: LayerKernels, tensor: str, shape: Callable[[Shape], Shape]) -> Callable[[LayerCtx], LayerPlan]:
    def build(ctx: LayerCtx) -> LayerPlan:
        lp = LayerPlan()
        y = lp.add(f"{tensor}_output", ctx.feat, ctx.featdt, shape(ctx.inputs[0]))
        f = NodePattern(kind.fwd.op(ctx.prec), ("$x",), (y,))
        lp.forward, lp.inference = [f], [f]
        if ctx.first:
            lp.backward = [NodePattern(kind.bwd_first_layer.op(ctx.prec), (), ())]
        else:
            lp.backward = [NodePattern(kind.bwd.op(ctx.prec), ("$dy",), ("$dx",))]
        return lp
    return build


def _build_identity(ctx: LayerCtx) -> LayerPlan:
    lp = LayerPlan()
    y = lp.add("identity_output", ctx.feat, ctx.featdt, ctx.inputs[0])
    f = NodePattern(K.IDENTITY_FWD.op(ctx.prec), ("$x",), (y,))
    lp.forward, lp.inference = [f], [f]
    lp.backward = [NodePattern(K.IDENTITY_BWD.op(ctx.prec), ("$dy",), ("$dx",))]
    return lp


def _build_softmax_ce(ctx: LayerCtx) -> LayerPlan:
    n = ctx.batch
    lp = LayerPlan()
    lp.add("ce_output", ctx.feat, ctx.featdt, ctx.inputs[0])
    probs = lp.add("softmax_probs", MemRegion.T_TEMP_FP32, "f32", ctx.inputs[0])
    pred = lp.add("pred_labels", MemRegion.R_PREDICTED_LABEL, "i32", (n, 1, 1, 1))
    inv = lp.add("inv_scaling_factor", MemRegion.S_SCALAR_FP32, "f32", PLACEHOLDER)
    loss_p = lp.add("loss_partial", MemRegion.T_TEMP_FP32, "f32", (n, 1, 1, 1))
    top1_p = lp.add("top1_partial", MemRegion.T_TEMP_INT32, "i32", (n, 1, 1, 1))
    top5_p = lp.add("top5_partial", MemRegion.T_TEMP_INT32, "i32", (n, 1, 1, 1))
    ins = ("$x", "@scaling", "@local_batch_size", "@label_smce", "@label_smoothing")
    outs = ("@loss", inv, pred, probs, "@top1", "@top5", loss_p, top1_p, top5_p)
    lp.forward = [NodePattern(K.SOFTMAX_CE_FWD.op(ctx.prec), ins, outs)]
    lp.backward = [NodePattern(K.SOFTMAX_CE_BWD.op(ctx.prec),
                               (probs, inv, "@scaling", "@label_smce", "@label_smoothing"), ("$dx",))]
    lp.inference = [NodePattern(K.SOFTMAX_CE_INF.op(ctx.prec), ins, outs)]
    return lp


def _build_dropout(ctx: LayerCtx) -> LayerPlan:
    lp = LayerPlan()
    y = lp.add("dropout_output", ctx.feat, ctx.featdt, ctx.inputs[0])
    mask = lp.add("dropout_mask", MemRegion.S_MASK, "i8", ctx.inputs[0])
    lp.forward = [NodePattern(K.DROPOUT_FWD.op(ctx.prec), ("$x", "@dropout_seed"), (y, mask, "@dropout_seed"))]
    lp.backward = [NodePattern(K.DROPOUT_BWD.op(ctx.prec), ("$dy", mask), ("$dx",))]
    lp.inference = []  # the inference graph skips dropout (facts section 8.5 (e))
    return lp


def _build_add(ctx: LayerCtx) -> LayerPlan:
    lp = LayerPlan()
    y = lp.add("add_output", ctx.feat, ctx.featdt, ctx.output)
    f = NodePattern(K.ADD_FWD.op(ctx.prec), ("$x", "$x1"), (y,))
    lp.forward, lp.inference = [f], [f]
    lp.backward = [NodePattern(K.ADD_BWD.op(ctx.prec), ("$dy",), ("$dx", "$dx1"))]
    return lp


# --------------------------------------------------------------------------------------
# Fused descriptors
# --------------------------------------------------------------------------------------


def _build_cbr(ctx: LayerCtx) -> LayerPlan:
    v = ctx.params
    lp = LayerPlan()
    conv_y, shape, cf, cb, ci = _conv(lp, ctx, "", "$x", "bn_output", _dx(ctx), ctx.inputs[0], v["out_ch"],
                                      v["k"], v["s"], v["p"], first=ctx.first)
    bn_y, bf, bb, bi = _bn(lp, ctx, "", conv_y, "cbr_relu_output", conv_y, shape, _BN2D)
    # Backward: dY -> d(bn_out) over bn_out -> d(conv_out) over conv_out -> dX. The ReLU reads its
    # output when the layer's consumers keep it anyway (dY then has its own slot), else its mask.
    lp.bwd_reads_output = ctx.output_kept
    _, rf, rb, ri = _relu(lp, ctx, "", bn_y, "$dy", bn_y, shape, ctx.output_kept, stem="cbr_relu")
    bb = bb.with_dy(bn_y)
    cb = cb.with_dy(conv_y)
    lp.forward, lp.backward, lp.inference = [cf, bf, rf], [rb, bb, cb], [ci, bi, ri]
    if fused := _bn_relu((bf, bb), (rf, rb), ctx.prec):
        lp.forward, lp.backward = [cf, fused[0]], [fused[1], cb]
    return lp


def _build_cbrp(ctx: LayerCtx) -> LayerPlan:
    v = ctx.params
    lp = LayerPlan()
    conv_y, shape, cf, cb, ci = _conv(lp, ctx, "", "$x", "bn_output", _dx(ctx), ctx.inputs[0], v["out_ch"],
                                      v["conv_k"], v["conv_s"], v["conv_p"], first=ctx.first)
    bn_y, bf, bb, bi = _bn(lp, ctx, "", conv_y, "bn_output", conv_y, shape, _BN2D)
    relu_y, rf, rb, ri = _relu(lp, ctx, "", bn_y, "relu_output", bn_y, shape, False)  # feeds the pool: mask
    _, pf, pb, pi = _maxpool(lp, ctx, "", relu_y, "$dy", relu_y, shape, v["pool_k"], v["pool_s"], v["pool_p"])
    lp.forward = [cf, bf, rf, pf]
    lp.backward = [pb, rb, bb, cb.with_dy(conv_y)]
    lp.inference = [ci, bi, ri, pi]
    if fused := _bn_relu((bf, bb), (rf, rb), ctx.prec):
        lp.forward, lp.backward = [cf, fused[0], pf], [pb, fused[1], cb.with_dy(conv_y)]
    return lp


def _build_gap_fc(ctx: LayerCtx) -> LayerPlan:
    lp = LayerPlan()
    gap_y, gf, gb = _gap(lp, ctx, "", "$x", "gap_output", "$dx", ctx.inputs[0])
    _, ff, fb = _fc(lp, ctx, "", gap_y, "$dy", gap_y, lp.tensors[0].shape, ctx.params["out_features"],
                    bool(ctx.params.get("bias")))
    lp.forward, lp.backward, lp.inference = [gf, ff], [fb, gb], [gf, ff]
    return lp


@dataclass(frozen=True)
class _Stage:
    """One conv + bn (+ relu) stage of a residual block."""

    prefix: str
    out_ch: int
    k: int
    s: int
    p: int
    relu: bool
    groups: int = 1


def _residual(ctx: LayerCtx, main: list[_Stage], shortcut: _Stage | None, identity: bool,
              post_relu: bool) -> LayerPlan:
    """A residual block as its sub-layers' kernels over the block's own tensors.

    ``shortcut``: a projection (conv + bn) on the block input; ``identity``: the input itself is
    added; neither: no add (inverted residual without shortcut). Forward: shortcut, main stages,
    add, final relu. Backward in reverse, with every read of the block input (the shortcut conv's
    and the first main conv's) before ``$dx`` is written, and the shortcut gradient accumulated into
    ``$dx`` last (``branch_grad`` holds the projection's dX meanwhile).

    ReLUs: a stage's ReLU feeds the next stage's conv, which reads it in backward, so it reads its
    output (no mask): the next conv writes its dX into ``<prefix>relu_output_grad`` instead of over
    the ReLU output. The ReLU after the add (the block's output) does so when the block's
    consumers keep its output (:attr:`LayerCtx.output_kept`), else it keeps its mask.
    """
    lp = LayerPlan()
    fwd: list[NodePattern] = []
    bwd: list[NodePattern] = []
    inf: list[NodePattern] = []
    x_shape = ctx.inputs[0]
    has_add = identity or shortcut is not None
    add_name = "add_output"
    sc_out = "$x"
    sc_bwd: list[NodePattern] = []
    if shortcut is not None:
        st = shortcut
        cy, cshape, cf, cb, ci = _conv(lp, ctx, st.prefix, "$x", "", "branch_grad", x_shape, st.out_ch, st.k,
                                       st.s, st.p, st.groups)
        by, bf, bb, bi = _bn(lp, ctx, st.prefix, cy, add_name, cy, cshape, _BN2D)
        sc_out = by
        fwd += [cf, bf]
        inf += [ci, bi]
        sc_bwd = [bb, cb.with_dy(cy)]
    cur, shape = "$x", x_shape
    cur_grad = "$dx"  # where the gradient of the current stage input goes
    stage_nodes: list[tuple[NodePattern, NodePattern | None, NodePattern | None, str, str]] = []
    for i, st in enumerate(main):
        cy, cshape, cf, cb, ci = _conv(lp, ctx, st.prefix, cur, "", cur_grad, shape, st.out_ch, st.k, st.s,
                                       st.p, st.groups)
        by, bf, bb, bi = _bn(lp, ctx, st.prefix, cy, "", cy, cshape, _BN2D)
        fwd += [cf, bf]
        inf += [ci, bi]
        out, out_grad = by, by
        rb = None
        if st.relu:
            feeds_conv = i + 1 < len(main)  # else it would feed the add (never so in the blocks here)
            grad = f"{st.prefix}relu_output_grad" if feeds_conv else ""
            ry, rf, rb, ri = _relu(lp, ctx, st.prefix, by, grad, by, cshape, feeds_conv)
            if feeds_conv:
                lp.add(grad, ctx.gslot, ctx.featdt, cshape)
            fwd.append(rf)
            inf.append(ri)
            out, out_grad = ry, grad or ry
            if fused := _bn_relu((bf, bb), (rf, rb), ctx.prec):
                fwd[-2:], (bb, rb) = [fused[0]], (fused[1], None)
        stage_nodes.append((cb, bb, rb, cy, by))
        cur, cur_grad, shape = out, out_grad, cshape
    if has_add:
        y = lp.add(add_name, ctx.feat, ctx.featdt, shape)
        add_f = NodePattern(K.ADD_FWD.op(ctx.prec), (sc_out, cur), (y,), ())
        fwd.append(add_f)
        inf.append(add_f)
        grad_at_join = add_name
        if post_relu:
            lp.bwd_reads_output = ctx.output_kept
            ry, rf, rb, ri = _relu(lp, ctx, "", y, "$dy", y, shape, ctx.output_kept)
            fwd.append(rf)
            inf.append(ri)
            bwd.append(rb)
            cb, bb, _, cy, by = stage_nodes[-1]  # fwd[-3]: its BN forward (the last stage has no ReLU)
            if not main[-1].relu and (fused := _bn_relu((fwd[-3], bb), (rf, rb), ctx.prec, (sc_out, add_name))):
                fwd[-3:], bwd[-1:] = [fused[0]], [fused[1]]
                stage_nodes[-1] = (cb, None, None, cy, by)
        else:
            grad_at_join = "$dy"
    else:
        grad_at_join = "$dy"
    if shortcut is not None:
        lp.add("branch_grad", ctx.gslot, ctx.featdt, x_shape)
        bb, cb = sc_bwd
        bwd.append(bb.with_dy(grad_at_join))
        bwd.append(cb)
    # Main branch backward: the gradient of a stage's output lives in that output's buffer, or in
    # its ReLU's gradient tensor (the ReLU reads its output).
    dy = grad_at_join
    for cb, bb, rb, cy, by in reversed(stage_nodes):
        if rb is not None:
            bwd.append(rb.with_dy(dy))
            dy = by
        if bb is not None:  # None: the join's fused epilogue runs it
            bwd.append(bb.with_dy(dy))
        bwd.append(cb.with_dy(cy))
        dy = cb.outputs[0]
    if identity:
        bwd.append(NodePattern(K.GRAD_ACCUM.op(ctx.prec), (grad_at_join, "$dx"), ("$dx",), ()))
    elif shortcut is not None:
        bwd.append(NodePattern(K.GRAD_ACCUM.op(ctx.prec), ("branch_grad", "$dx"), ("$dx",), ()))
    lp.forward, lp.backward, lp.inference = fwd, bwd, inf
    return lp


def _build_bottleneck_identity(ctx: LayerCtx) -> LayerPlan:
    m, c = ctx.params["bottleneck_ch"], ctx.inputs[0][3]
    return _residual(ctx, [_Stage("c1_", m, 1, 1, 0, True), _Stage("c2_", m, 3, 1, 1, True),
                           _Stage("c3_", c, 1, 1, 0, False)], None, identity=True, post_relu=True)


def _build_bottleneck_projection(ctx: LayerCtx) -> LayerPlan:
    v = ctx.params
    m, o, s = v["bottleneck_ch"], v["out_ch"], v["stride"]
    return _residual(ctx, [_Stage("c1_", m, 1, 1, 0, True), _Stage("c2_", m, 3, s, 1, True),
                           _Stage("c3_", o, 1, 1, 0, False)], _Stage("sc_", o, 1, s, 0, False),
                     identity=False, post_relu=True)


def _build_basic_identity(ctx: LayerCtx) -> LayerPlan:
    o = ctx.params["out_ch"]
    return _residual(ctx, [_Stage("c1_", o, 3, 1, 1, True), _Stage("c2_", o, 3, 1, 1, False)], None,
                     identity=True, post_relu=True)


def _build_basic_projection(ctx: LayerCtx) -> LayerPlan:
    o, s = ctx.params["out_ch"], ctx.params["stride"]
    return _residual(ctx, [_Stage("c1_", o, 3, s, 1, True), _Stage("c2_", o, 3, 1, 1, False)],
                     _Stage("sc_", o, 1, s, 0, False), identity=False, post_relu=True)


def _inv_stages(ctx: LayerCtx, stride: int) -> list[_Stage]:
    e, o = ctx.params["expand_ch"], ctx.params["out_ch"]
    return [_Stage("c1_", e, 1, 1, 0, True), _Stage("c2_", e, 3, stride, 1, True, groups=e),
            _Stage("c3_", o, 1, 1, 0, False)]


def _build_inv_identity(ctx: LayerCtx) -> LayerPlan:
    return _residual(ctx, _inv_stages(ctx, 1), None, identity=True, post_relu=False)


def _build_inv_no_shortcut(ctx: LayerCtx) -> LayerPlan:
    return _residual(ctx, _inv_stages(ctx, ctx.params["stride"]), None, identity=False, post_relu=False)


# --------------------------------------------------------------------------------------
# Kernel workspaces
# --------------------------------------------------------------------------------------

_NP_DTYPE = {"f32": np.float32, "f16": np.float16, "i32": np.int32, "i8": np.int8}
_WORKSPACE_HOME = {np.dtype(np.float32): (MemRegion.T_TEMP_FP32, "f32"),
                   np.dtype(np.float16): (MemRegion.T_TEMP_FP16, "f16"),
                   np.dtype(bool): (MemRegion.T_TEMP_INT8, "i8")}
"""Workspace dtype (as a kernel asks for it) -> the temporary region and DTensor dtype holding it
(a bool workspace lives in an int8 slot, viewed as bool by the backend)."""


def operand_info(lp: LayerPlan, ctx: LayerCtx, operand: str) -> tuple[Shape, np.dtype]:
    """(shape, dtype) of one node operand in this variant (see the module doc for the symbols)."""
    if operand.startswith("@"):
        return PLACEHOLDER, np.dtype(np.float32)
    if operand.startswith(("$x", "$dx")):
        k = operand.lstrip("$dx")
        return ctx.inputs[int(k or 0)], np.dtype(_NP_DTYPE[ctx.featdt])
    if operand == "$dy":
        return ctx.output, np.dtype(_NP_DTYPE[ctx.featdt])
    for t in lp.tensors:
        if t.name == operand:
            return t.shape, np.dtype(_NP_DTYPE[t.dtype])
    raise DescriptorError(f"node operand '{operand}' is not a tensor of the layer")


def plan_workspaces(lp: LayerPlan, ctx: LayerCtx) -> LayerPlan:
    """Plan the scratch memory of every node's kernel and append it to the node's outputs.

    For each node the kernel (:data:`tr_mlir.lowering.cpu.KERNELS`) is asked for the
    workspaces of its implementation on the plan's target (:meth:`KernelSpec.workspace_shapes`
    with ``ctx.target``: a CUDA plan holds none of the CPU kernels' im2col columns, padded copies
    or fp32 casts) given the node's operand shapes and dtypes in this variant, its operands named
    through :data:`tr_mlir.lowering.operands.OPERANDS`. Each
    workspace ``<arg>`` becomes the shared DTensor ``ws_<arg>`` (one for the whole model, of the
    largest size any node needs, in ``T_TEMP_FP32`` / ``T_TEMP_FP16`` / ``T_TEMP_INT8`` by dtype), a
    flat ``{1, 1, 1, elements}`` tensor appended to the node's outputs; the backend binds it to the
    kernel's workspace argument by that name. Workspaces are call-scoped, so all kernels share them.
    A conv node first takes the algorithms recorded on the layer op into its params
    (:func:`tr_mlir.passes._conv_algo.recorded_params`), so its workspaces are those of its algorithms.
    """
    check_node_kernels(lp)

    def with_ws(pattern: NodePattern) -> NodePattern:
        spec = implementation(pattern.op)
        params = dict(ctx.params) if pattern.params is None else dict(pattern.params)
        named, _ = operands_for(pattern.op).named(pattern.inputs, pattern.outputs, params, pattern.op)
        if chosen := recorded_params(ctx.op, named.get("w"), spec.params):
            pattern = replace(pattern, params=tuple({**params, **chosen}.items()))
            params.update(chosen)
        if spec.workspace_rule(ctx.target) is None:
            return pattern
        infos = {arg: operand_info(lp, ctx, o) for arg, o in named.items()}
        try:
            needs = spec.workspace_shapes(infos, target=ctx.target, **params)
        except ValueError as e:
            raise DescriptorError(f"node '{pattern.op}': {e}") from e
        outs = list(pattern.outputs)
        for arg in spec.workspaces:
            if arg not in needs:
                continue
            (elems,), dtype = needs[arg]
            region, dt = _WORKSPACE_HOME[np.dtype(dtype)]
            outs.append(lp.add(workspace_tensor_name(arg), region, dt, (1, 1, 1, max(int(elems), 1)), shared=True))
        return replace(pattern, outputs=tuple(outs))

    lp.forward = [with_ws(p) for p in lp.forward]
    lp.backward = [with_ws(p) for p in lp.backward]
    lp.inference = [with_ws(p) for p in lp.inference]
    return lp


def check_node_kernels(lp: LayerPlan) -> None:
    """Every node op of ``lp`` has a kernel and an operand row (:func:`~tr_mlir.dialects.kernels.binding_problem`);
    raises :class:`DescriptorError` naming the node op and the missing registration (phase 1 reports it at the layer)."""
    for pattern in (*lp.forward, *lp.backward, *lp.inference):
        problem = binding_problem(pattern.op)
        if problem:
            raise DescriptorError(f"its descriptor emits {problem}")


def _with_workspaces(build: Callable[[LayerCtx], LayerPlan]) -> Callable[[LayerCtx], LayerPlan]:
    def planned(ctx: LayerCtx) -> LayerPlan:
        return plan_workspaces(build(ctx), ctx)
    planned.__doc__ = build.__doc__
    return planned


# --------------------------------------------------------------------------------------
# The table
# --------------------------------------------------------------------------------------

_ACTIVATIONS = {  # the kernel stem names the output tensor (tanh_output)
    arch.TanhOp: LayerKernels(K.TANH_FWD, K.TANH_BWD), arch.SiluOp: LayerKernels(K.SILU_FWD, K.SILU_BWD),
    arch.Relu6Op: LayerKernels(K.RELU6_FWD, K.RELU6_BWD), arch.LeakyReluOp: LayerKernels(K.LEAKY_RELU_FWD, K.LEAKY_RELU_BWD),
    arch.HardswishOp: LayerKernels(K.HARDSWISH_FWD, K.HARDSWISH_BWD), arch.EluOp: LayerKernels(K.ELU_FWD, K.ELU_BWD),
    arch.SigmoidOp: LayerKernels(K.SIGMOID_FWD, K.SIGMOID_BWD),
}

_BUILTIN: Mapping[type[Operation], Descriptor] = {
    arch.ConvOp: Descriptor(_build_conv, "conv_output", bwd_reads_input=True, first_layer_ok=True),
    arch.Bn1dOp: Descriptor(_build_bn(_BN1D), "bn_output", bwd_reads_input=True),
    arch.Bn2dOp: Descriptor(_build_bn(_BN2D), "bn_output", bwd_reads_input=True),
    arch.FcOp: Descriptor(_build_fc, "fc_output", bwd_reads_input=True),
    arch.ReluOp: Descriptor(_build_relu, "relu_output"),
    **{cls: Descriptor(_build_activation(kind, kind.fwd.stem), f"{kind.fwd.stem}_output", bwd_reads_input=True)
       for cls, kind in _ACTIVATIONS.items()},
    arch.MaxPoolOp: Descriptor(_build_maxpool, "pool_output"),
    arch.AvgPoolOp: Descriptor(_build_avgpool, "avgpool_output"),
    arch.GapOp: Descriptor(_build_gap, "gap_output", dx_tensor="gap_grad_slot"),
    arch.FlattenOp: Descriptor(_build_reshape(_FLATTEN, "flatten", lambda s: (s[0], 1, 1, s[1] * s[2] * s[3])),
                               "flatten_output", first_layer_ok=True),
    arch.ChannelPaddingOp: Descriptor(
        _build_reshape(_CHANNEL_PADDING, "channel_padding", lambda s: (s[0], s[1], s[2], (s[3] + 7) // 8 * 8)),
        "channel_padding_output", first_layer_ok=True),
    arch.IdentityOp: Descriptor(_build_identity, "identity_output"),
    arch.SoftmaxCeOp: Descriptor(_build_softmax_ce, "ce_output", dx_tensor="ce_output"),
    arch.DropoutOp: Descriptor(_build_dropout, "dropout_output"),
    arch.AddOp: Descriptor(_build_add, "add_output"),
    arch.CbrOp: Descriptor(_build_cbr, "cbr_relu_output", bwd_reads_input=True, first_layer_ok=True),
    arch.CbrpOp: Descriptor(_build_cbrp, "pool_output", bwd_reads_input=True),
    arch.GapFcOp: Descriptor(_build_gap_fc, "fc_output"),
    arch.BottleneckIdentityOp: Descriptor(_build_bottleneck_identity, "relu_output", bwd_reads_input=True),
    arch.BottleneckProjectionOp: Descriptor(_build_bottleneck_projection, "relu_output", bwd_reads_input=True),
    arch.BasicBlockIdentityOp: Descriptor(_build_basic_identity, "relu_output", bwd_reads_input=True),
    arch.BasicBlockProjectionOp: Descriptor(_build_basic_projection, "relu_output", bwd_reads_input=True),
    arch.InvResidualIdentityOp: Descriptor(_build_inv_identity, "add_output", bwd_reads_input=True),
    arch.InvResidualNoShortcutOp: Descriptor(_build_inv_no_shortcut, "c3_bn_output", bwd_reads_input=True),
}
DESCRIPTORS: dict[type[Operation], Descriptor] = {cls: replace(d, build=_with_workspaces(d.build))
                                                 for cls, d in _BUILTIN.items()}
"""Arch op class -> its descriptor (every layer op of a flat ArchPlan, plugins' included:
:func:`register_descriptor`); every ``build`` plans its kernels' workspaces (:func:`plan_workspaces`)."""


class DescriptorRegistrationError(PluginError):
    """A descriptor :func:`register_descriptor` cannot add; the message names the op and the rule."""


def register_descriptor(op: type[Operation], descriptor: Descriptor, *, workspaces: bool = True) -> Descriptor:
    """Make ``descriptor`` the compiler knowledge of the (plugin) arch op class ``op``.

    ``workspaces``: plan the scratch memory of the kernels the descriptor's nodes run
    (:func:`plan_workspaces`, the built-in descriptors' rule); ``False`` for a ``build`` that
    already does (one composed of registered descriptors' builds, as
    :func:`tr_mlir.extend.chain_descriptor`). Returns the registered (wrapped) descriptor.
    Registering the same descriptor for the same class twice is a no-op.

    Raises :class:`DescriptorRegistrationError` when ``op`` is not an op class, already has a
    descriptor, or ``descriptor`` is not a :class:`Descriptor` with a callable ``build`` and an
    ``output`` name.
    """
    what = getattr(op, "name", None) or getattr(op, "__qualname__", repr(op))
    if not (isinstance(op, type) and issubclass(op, Operation)):
        raise DescriptorRegistrationError(f"register_descriptor({what!r}): expected an arch op class")
    if not isinstance(descriptor, Descriptor):
        raise DescriptorRegistrationError(f"register_descriptor({what}): expected a Descriptor, got "
                                          f"{type(descriptor).__name__}")
    if not callable(descriptor.build) or not isinstance(descriptor.output, str) or not descriptor.output:
        raise DescriptorRegistrationError(f"register_descriptor({what}): a Descriptor needs a callable build "
                                          "and the name of its output tensor (output=...)")
    wrapped = replace(descriptor, build=_with_workspaces(descriptor.build)) if workspaces else descriptor
    old = DESCRIPTORS.get(op)
    if old is not None:
        if _REGISTERED.get(op) is descriptor:
            return old
        raise DescriptorRegistrationError(f"register_descriptor({what}): '{what}' already has a descriptor")
    DESCRIPTORS[op] = wrapped
    _REGISTERED[op] = descriptor
    return wrapped


_REGISTERED: dict[type[Operation], Descriptor] = {}
"""Plugin op class -> the descriptor as given to :func:`register_descriptor` (before wrapping)."""




def descriptor_for(op: Operation) -> Descriptor:
    """The descriptor of ``op``'s class; raises :class:`DescriptorError` when there is none."""
    d = DESCRIPTORS.get(type(op))
    if d is None:
        if getattr(op, "has_trait", None) is not None and op.has_trait(arch.IsTreeForm):
            raise DescriptorError(f"'{op.name}' is a tree-form op: the memplan passes need the flat ArchPlan "
                                  "(run arch-plan first)")
        raise DescriptorError(f"no layer descriptor for '{op.name}': register one "
                              "(tr_mlir.extend.register_descriptor) in the plugin that defines the op")
    return d


def output_kept(op: Operation) -> bool:
    """Whether every consumer of ``op``'s result reads it in its own backward
    (:attr:`Descriptor.bwd_reads_input`); ``False`` for a result without consumers or read by the
    model's terminator."""
    users = [use.operation for result in op.results for use in result.uses]
    return bool(users) and all((d := DESCRIPTORS.get(type(u))) is not None and d.bwd_reads_input for u in users)


def layer_ctx(op: Operation, inputs: tuple[Shape, ...], output: Shape, *, amp: bool, first: bool,
              target: Target = Target.CPU) -> LayerCtx:
    """The :class:`LayerCtx` of an arch layer op (its properties read through ``params()``; whether
    its consumers keep its output, :func:`output_kept`, from the model around it)."""
    params = op.params() if isinstance(op, arch.ArchOp) else {}
    return LayerCtx(op, params, inputs, output, amp, first, target, output_kept(op))
