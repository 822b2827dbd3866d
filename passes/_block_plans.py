"""The layer plans of the fused ops: cbr, cbrp, gap_fc and the residual blocks.

A fused layer's tensors are its sub-layers' (:mod:`tr_mlir.passes._layer_parts`), prefixed per
sub-layer, and its patterns are the sub-layers' kernels in order (the rules are in the module doc
of :mod:`tr_mlir.passes._descriptors`). A residual block's plan is derived from its op's spec
(:class:`~tr_mlir.dialects.arch.ResidualSpec`, :func:`residual_plan`); the kernels of one conv +
bn2d (+ relu) stage are emitted in one place, :func:`conv_bn_stage`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from tr_mlir.dialects import arch
from tr_mlir.dialects.kernels import K
from tr_mlir.passes._layer_parts import (
    BN2D,
    LayerCtx,
    LayerPlan,
    NodePattern,
    Shape,
    bn_part,
    conv_part,
    fc_part,
    gap_part,
    input_grad,
    maxpool_part,
    relu_part,
)


EPILOGUES = True
"""Emit the fused batch-norm epilogues (:func:`bn_relu_epilogue`): measured to pay on ResNet-18
CIFAR (bench/README.md); False emits the unfused kernels, the same bits (tests, bench comparisons)."""


def bn_relu_epilogue(bn: tuple[NodePattern, NodePattern], relu: tuple[NodePattern, NodePattern], prec: str,
                     skip: tuple[str, str] | None = None) -> tuple[NodePattern, NodePattern] | None:
    """The fused epilogue of a BN's ``(fwd, bwd)`` followed by a ReLU's (:func:`bn_part`,
    :func:`relu_part`; ``skip``: ``(operand, gradient tensor)`` of a residual add between them,
    ``relu(bn(x) + skip)``): one forward writing the ReLU's output (and mask), one backward reading
    the ReLU's incoming gradient through its mask or output and writing the BN's gradients (and the
    join's gradient). The same bits as the unfused kernels (lowering/cpu/norm.py); None when
    :data:`EPILOGUES` is off. Inference stays unfused."""
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


def build_cbr(ctx: LayerCtx) -> LayerPlan:
    """``arch.cbr``: conv, bn2d, relu (the relu's output form as the layer's consumers decide)."""
    v = ctx.params
    lp = LayerPlan()
    conv_y, shape, cf, cb, ci = conv_part(lp, ctx, "", "$x", "bn_output", input_grad(ctx), ctx.inputs[0],
                                          v["out_ch"], v["k"], v["s"], v["p"], first=ctx.first)
    bn_y, bf, bb, bi = bn_part(lp, ctx, "", conv_y, "cbr_relu_output", conv_y, shape, BN2D)
    # Backward: dY -> d(bn_out) over bn_out -> d(conv_out) over conv_out -> dX. The ReLU reads its
    # output when the layer's consumers keep it anyway (dY then has its own slot), else its mask.
    lp.bwd_reads_output = ctx.output_kept
    _, rf, rb, ri = relu_part(lp, ctx, "", bn_y, "$dy", bn_y, shape, ctx.output_kept, stem="cbr_relu")
    bb = bb.with_dy(bn_y)
    cb = cb.with_dy(conv_y)
    lp.forward, lp.backward, lp.inference = [cf, bf, rf], [rb, bb, cb], [ci, bi, ri]
    if fused := bn_relu_epilogue((bf, bb), (rf, rb), ctx.prec):
        lp.forward, lp.backward = [cf, fused[0]], [fused[1], cb]
    return lp


def build_cbrp(ctx: LayerCtx) -> LayerPlan:
    """``arch.cbrp``: conv, bn2d, relu (mask form: it feeds the pool), max pool."""
    v = ctx.params
    lp = LayerPlan()
    conv_y, shape, cf, cb, ci = conv_part(lp, ctx, "", "$x", "bn_output", input_grad(ctx), ctx.inputs[0],
                                          v["out_ch"], v["conv_k"], v["conv_s"], v["conv_p"], first=ctx.first)
    bn_y, bf, bb, bi = bn_part(lp, ctx, "", conv_y, "bn_output", conv_y, shape, BN2D)
    relu_y, rf, rb, ri = relu_part(lp, ctx, "", bn_y, "relu_output", bn_y, shape, False)  # feeds the pool: mask
    _, pf, pb, pi = maxpool_part(lp, ctx, "", relu_y, "$dy", relu_y, shape, v["pool_k"], v["pool_s"], v["pool_p"])
    lp.forward = [cf, bf, rf, pf]
    lp.backward = [pb, rb, bb, cb.with_dy(conv_y)]
    lp.inference = [ci, bi, ri, pi]
    if fused := bn_relu_epilogue((bf, bb), (rf, rb), ctx.prec):
        lp.forward, lp.backward = [cf, fused[0], pf], [pb, fused[1], cb.with_dy(conv_y)]
    return lp


def build_gap_fc(ctx: LayerCtx) -> LayerPlan:
    """``arch.gap_fc``: global average pool, fully connected."""
    lp = LayerPlan()
    gap_y, gf, gb = gap_part(lp, ctx, "", "$x", "gap_output", "$dx", ctx.inputs[0])
    _, ff, fb = fc_part(lp, ctx, "", gap_y, "$dy", gap_y, lp.tensors[0].shape, ctx.params["out_features"],
                        bool(ctx.params.get("bias")))
    lp.forward, lp.backward, lp.inference = [gf, ff], [fb, gb], [gf, ff]
    return lp


@dataclass(frozen=True)
class StagePlan:
    """The nodes of one conv + bn2d (+ relu) stage (:func:`conv_bn_stage`).

    ``output``: the stage's output value; ``output_grad``: where its consumer writes the gradient of
    ``output`` (the output itself, or the ReLU's own gradient tensor when the ReLU reads its output);
    ``shape``: the output's NHWC shape; ``forward`` / ``inference``: the nodes in order;
    ``conv_out`` / ``bn_out``: the conv's and the BN's outputs (their gradients overwrite them);
    ``bn_bwd``: the BN's backward, or the fused BN+ReLU backward (``relu_bwd`` None), or None when
    a residual join's fused epilogue runs it (:func:`bn_relu_epilogue`).
    """

    output: str
    output_grad: str
    shape: Shape
    forward: tuple[NodePattern, ...]
    inference: tuple[NodePattern, ...]
    conv_out: str
    bn_out: str
    conv_bwd: NodePattern
    bn_bwd: NodePattern | None
    relu_bwd: NodePattern | None

    def backward(self, dy: str) -> list[NodePattern]:
        """The stage's backward nodes in order, the gradient of its output read from ``dy``: the
        ReLU's, the BN's (over the BN output), the conv's (over the conv output; it writes the
        stage input's gradient)."""
        conv = self.conv_bwd.with_dy(self.conv_out)
        if self.bn_bwd is None:
            return [conv]
        if self.relu_bwd is None:
            return [self.bn_bwd.with_dy(dy), conv]
        return [self.relu_bwd.with_dy(dy), self.bn_bwd.with_dy(self.bn_out), conv]


def conv_bn_stage(lp: LayerPlan, ctx: LayerCtx, prefix: str, x: str, dx: str, shape: Shape, out_ch: int, k: int,
                  s: int, p: int, groups: int, relu: bool, relu_grad: str | None) -> StagePlan:
    """The tensors (prefixed ``prefix``) and kernels of one conv + bn2d (+ relu) stage reading ``x``
    (NHWC ``shape``) and writing its gradient to ``dx``.

    ``relu_grad``: for a stage ReLU that feeds a conv (which reads it in backward): the name of the
    ReLU output's own gradient tensor; the ReLU then takes the output form (no mask). ``None``: the
    mask form, the output's gradient overwriting it. Raises :class:`DescriptorError` as the parts.
    """
    cy, cshape, cf, cb, ci = conv_part(lp, ctx, prefix, x, "", dx, shape, out_ch, k, s, p, groups)
    by, bf, bb, bi = bn_part(lp, ctx, prefix, cy, "", cy, cshape, BN2D)
    if not relu:
        return StagePlan(by, by, cshape, (cf, bf), (ci, bi), cy, by, cb, bb, None)
    ry, rf, rb, ri = relu_part(lp, ctx, prefix, by, relu_grad or "", by, cshape, relu_grad is not None)
    if relu_grad is not None:
        lp.add(relu_grad, ctx.gslot, ctx.featdt, cshape)
    if fused := bn_relu_epilogue((bf, bb), (rf, rb), ctx.prec):
        return StagePlan(ry, relu_grad or ry, cshape, (cf, fused[0]), (ci, bi, ri), cy, by, cb, fused[1], None)
    return StagePlan(ry, relu_grad or ry, cshape, (cf, bf, rf), (ci, bi, ri), cy, by, cb, bb, rb)


def residual_output(spec: arch.ResidualSpec) -> str:
    """The tensor holding a residual block's output: the post-add ReLU's, the add's, or (no
    shortcut) the last stage's BN or ReLU output."""
    if spec.post_relu:
        return "relu_output"
    if spec.has_add:
        return "add_output"
    return f"c{len(spec.main)}_{'relu' if spec.main[-1].relu else 'bn'}_output"


def residual_plan(spec: arch.ResidualSpec) -> Callable[[LayerCtx], LayerPlan]:
    """The ``build`` of a residual block's descriptor, from its op's spec (see :func:`_residual`)."""

    def build(ctx: LayerCtx) -> LayerPlan:
        return _residual(ctx, spec)

    build.__doc__ = f"The {spec.family} ({spec.shortcut.value} shortcut) as its stages' kernels."
    return build


def _residual(ctx: LayerCtx, spec: arch.ResidualSpec) -> LayerPlan:
    """A residual block as its sub-layers' kernels over the block's own tensors.

    The projection shortcut (prefix ``sc_``: conv 1x1 + bn2d on the block input), the main stages
    (prefixes ``c1_``, ``c2_``, ...), the add (unless the block has no shortcut), the post-add
    relu. Backward in reverse, with every read of the block input (the shortcut conv's and the
    first main conv's) before ``$dx`` is written, and the shortcut gradient accumulated into
    ``$dx`` last (``branch_grad`` holds the projection's dX meanwhile).

    ReLUs: a stage's ReLU that feeds the next stage's conv (which reads it in backward) reads its
    output (no mask): the next conv writes its dX into ``<prefix>relu_output_grad`` instead of over
    the ReLU output. The ReLU after the add (the block's output) does so when the block's
    consumers keep its output (:attr:`LayerCtx.output_kept`), else it keeps its mask.
    """
    lp = LayerPlan()
    v, x_shape = ctx.params, ctx.inputs[0]
    cin = x_shape[3]
    fwd: list[NodePattern] = []
    bwd: list[NodePattern] = []
    inf: list[NodePattern] = []
    add_name = "add_output"
    sc_out = "$x"
    shortcut: StagePlan | None = None
    if spec.shortcut is arch.Shortcut.PROJECTION:
        out, stride = spec.projection(v, cin)
        shortcut = conv_bn_stage(lp, ctx, "sc_", "$x", "branch_grad", x_shape, out, 1, stride, 0, 1, False, None)
        sc_out = shortcut.output
        fwd += shortcut.forward
        inf += shortcut.inference
    cur, cur_grad, shape = "$x", "$dx", x_shape  # cur_grad: where the gradient of the stage input goes
    stages: list[StagePlan] = []
    for i, st in enumerate(spec.main):
        prefix = f"c{i + 1}_"
        feeds_conv = i + 1 < len(spec.main)
        stage = conv_bn_stage(lp, ctx, prefix, cur, cur_grad, shape, st.out_ch(v, cin), st.k, st.s(v), st.p,
                              st.groups(v, cin), st.relu, f"{prefix}relu_output_grad" if feeds_conv else None)
        fwd += stage.forward
        inf += stage.inference
        stages.append(stage)
        cur, cur_grad, shape = stage.output, stage.output_grad, stage.shape
    grad_at_join = "$dy"
    if spec.has_add:
        y = lp.add(add_name, ctx.feat, ctx.featdt, shape)
        add_f = NodePattern(K.ADD_FWD.op(ctx.prec), (sc_out, cur), (y,), ())
        fwd.append(add_f)
        inf.append(add_f)
        if spec.post_relu:
            grad_at_join = add_name
            lp.bwd_reads_output = ctx.output_kept
            _, rf, rb, ri = relu_part(lp, ctx, "", y, "$dy", y, shape, ctx.output_kept)
            fwd.append(rf)
            inf.append(ri)
            bwd.append(rb)
            last = stages[-1]  # fwd[-3:]: its BN forward (when it has no ReLU), the add, the ReLU
            if not spec.main[-1].relu and (
                    fused := bn_relu_epilogue((fwd[-3], last.bn_bwd), (rf, rb), ctx.prec, (sc_out, add_name))):
                fwd[-3:], bwd[-1:] = [fused[0]], [fused[1]]
                stages[-1] = replace(last, bn_bwd=None)
    if shortcut is not None:
        lp.add("branch_grad", ctx.gslot, ctx.featdt, x_shape)
        bwd += shortcut.backward(grad_at_join)
    dy = grad_at_join
    for stage in reversed(stages):
        bwd += stage.backward(dy)
        dy = stage.conv_bwd.outputs[0]
    if spec.shortcut is arch.Shortcut.IDENTITY:
        bwd.append(NodePattern(K.GRAD_ACCUM.op(ctx.prec), (grad_at_join, "$dx"), ("$dx",), ()))
    elif shortcut is not None:
        bwd.append(NodePattern(K.GRAD_ACCUM.op(ctx.prec), ("branch_grad", "$dx"), ("$dx",), ()))
    lp.forward, lp.backward, lp.inference = fwd, bwd, inf
    return lp
