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

The data model (:class:`LayerCtx`, :class:`LayerPlan`, ...) and the sub-layer parts live in
:mod:`tr_mlir.passes._layer_parts`, the fused ops' plans in :mod:`tr_mlir.passes._block_plans` (a
residual block's derived from its op's spec: :func:`residual_descriptor`); this module holds the
primitive descriptors, the workspace planning and the table.

Deliberate differences from the seed's descriptors (DESIGN section 7): fused layers (cbr, cbrp,
gap_fc, the residual blocks) are real: their tensors are the concatenation of their sub-layers'
(prefixed ``sc_``, ``c1_``, ``c2_``, ``c3_``) and their patterns are the sub-layers' kernels in
order, with the reads of the block input scheduled before the write of its gradient and the
shortcut gradient accumulated (``GRAD_ACCUM``), except that a BN and the ReLU after it (and a
join's BN, add and ReLU) run as one fused kernel each way (:func:`tr_mlir.passes._block_plans.bn_relu_epilogue`,
the same bits, the unfused inference); ``add`` has a real backward to both operands;
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
from dataclasses import dataclass, replace

import numpy as np
from xdsl.ir import Operation

from tr_mlir.dialects import arch
from tr_mlir.dialects.kernels import K, LayerKernels, binding_problem, implementation, operands_for, workspace_tensor_name
from tr_mlir.dialects.memplan import MemRegion, Target
from tr_mlir.errors import PluginError
from tr_mlir.passes._block_plans import build_cbr, build_cbrp, build_gap_fc, residual_output, residual_plan
from tr_mlir.passes._conv_algo import recorded_params
from tr_mlir.passes._layer_parts import (  # noqa: F401 (re-exported: the descriptor data model)
    BN1D,
    BN2D,
    PLACEHOLDER,
    DescriptorError,
    LayerCtx,
    LayerPlan,
    NodePattern,
    Shape,
    TensorDesc,
    bn_part,
    conv_part,
    fc_part,
    gap_part,
    input_grad,
    maxpool_part,
    relu_part,
    window,
)


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


_FLATTEN = LayerKernels(K.FLATTEN_FWD, K.FLATTEN_BWD, bwd_first_layer=K.FLATTEN_BWD_FIRST_LAYER)
_CHANNEL_PADDING = LayerKernels(K.CHANNEL_PADDING_FWD, K.CHANNEL_PADDING_BWD,
                            bwd_first_layer=K.CHANNEL_PADDING_BWD_FIRST_LAYER)



# --------------------------------------------------------------------------------------
# Primitive descriptors
# --------------------------------------------------------------------------------------


def _build_conv(ctx: LayerCtx) -> LayerPlan:
    v = ctx.params
    lp = LayerPlan()
    _, _, f, b, i = conv_part(lp, ctx, "", "$x", "$dy", input_grad(ctx), ctx.inputs[0], v["out_ch"], v["k"],
                              v["s"], v["p"], v.get("groups", 1), first=ctx.first)
    lp.forward, lp.backward, lp.inference = [f], [b], [i]
    return lp


def _build_bn(kind: LayerKernels) -> Callable[[LayerCtx], LayerPlan]:
    def build(ctx: LayerCtx) -> LayerPlan:
        lp = LayerPlan()
        _, f, b, i = bn_part(lp, ctx, "", "$x", "$dy", "$dx", ctx.inputs[0], kind)
        lp.forward, lp.backward, lp.inference = [f], [b], [i]
        return lp
    return build


def _build_fc(ctx: LayerCtx) -> LayerPlan:
    lp = LayerPlan()
    _, f, b = fc_part(lp, ctx, "", "$x", "$dy", input_grad(ctx), ctx.inputs[0], ctx.params["out_features"],
                      bool(ctx.params.get("bias")))
    lp.forward, lp.backward, lp.inference = [f], [b], [f]
    return lp


def _build_relu(ctx: LayerCtx) -> LayerPlan:
    lp = LayerPlan(bwd_reads_output=ctx.output_kept)
    _, f, b, i = relu_part(lp, ctx, "", "$x", "$dy", "$dx", ctx.inputs[0], ctx.output_kept)
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
    _, f, b, i = maxpool_part(lp, ctx, "", "$x", "$dy", "$dx", ctx.inputs[0], v["k"], v["s"], v["p"])
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
    _, f, b = gap_part(lp, ctx, "", "$x", "$dy", "$dx", ctx.inputs[0])
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


def residual_descriptor(op: type[arch.ResidualBlockOp]) -> Descriptor:
    """The descriptor of a residual block op, derived from its spec (``op.RESIDUAL``): its plan
    (:func:`~tr_mlir.passes._block_plans.residual_plan`), its output tensor, and a backward that
    reads the block input (its first kernel is a conv)."""
    return Descriptor(residual_plan(op.RESIDUAL), residual_output(op.RESIDUAL), bwd_reads_input=True)


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
    arch.Bn1dOp: Descriptor(_build_bn(BN1D), "bn_output", bwd_reads_input=True),
    arch.Bn2dOp: Descriptor(_build_bn(BN2D), "bn_output", bwd_reads_input=True),
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
    arch.CbrOp: Descriptor(build_cbr, "cbr_relu_output", bwd_reads_input=True, first_layer_ok=True),
    arch.CbrpOp: Descriptor(build_cbrp, "pool_output", bwd_reads_input=True),
    arch.GapFcOp: Descriptor(build_gap_fc, "fc_output"),
    **{cls: residual_descriptor(cls) for cls in arch.FUSED_OPS if arch.residual_spec(cls) is not None},
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
