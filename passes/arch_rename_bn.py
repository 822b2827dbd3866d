"""``arch-rename-bn``: ArchPlan step 2, each ``arch.bn`` becomes ``arch.bn1d`` or ``arch.bn2d``.

The seed's rule (facts sheet section 3.2) walks backwards from the BN over ReLU, Tanh,
Identity and ChannelPadding (ops with the ``BnRenameSeeThrough`` trait); when the first other
layer is an FC, a Flatten or a GAP (the ``FeatureProducer`` trait) the BN
normalizes features (Bn1d), otherwise channels of a feature map (Bn2d). In SSA terms the walk
follows the BN's operand through its producers: the model input, an ``arch.add`` (the seed's
Add2End), another BN, dropout, other activations ... all give bn2d. ``arch.gap_fc`` counts as an
FC. eps and momentum are kept; ``arch.bn1d``/``arch.bn2d`` written by hand are left alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import OpResult, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from tr_mlir.dialects.arch import (
    BnRenameSeeThrough,
    Bn1dOp,
    Bn2dOp,
    BnOp,
    FeatureProducer,
    LayerOp,
)
from tr_mlir.passes._model import models, require_flat


def bn_kind(value: SSAValue) -> type[LayerOp]:
    """``Bn1dOp`` or ``Bn2dOp`` for a BN reading ``value`` (facts sheet section 3.2).

    The walk skips producers with the :class:`~tr_mlir.dialects.arch.BnRenameSeeThrough` trait
    (ReLU, Tanh, Identity, ChannelPadding: the seed's list) and gives bn1d when it stops at one
    with :class:`~tr_mlir.dialects.arch.FeatureProducer` (fc, flatten, gap, gap_fc)."""
    while isinstance(value, OpResult) and value.op.has_trait(BnRenameSeeThrough):
        value = value.op.operands[0]
    if isinstance(value, OpResult) and value.op.has_trait(FeatureProducer):
        return Bn1dOp
    return Bn2dOp


class RenameBn(RewritePattern):
    """``arch.bn`` -> ``arch.bn1d`` / ``arch.bn2d`` with the same eps and momentum."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: BnOp, rewriter: PatternRewriter) -> None:
        new = bn_kind(op.input).create(
            operands=[op.input],
            result_types=[op.output.type],
            properties=dict(op.properties),
            attributes=dict(op.attributes),
        )
        rewriter.replace(op, new)


@dataclass(frozen=True)
class ArchRenameBnPass(ModulePass):
    """Decide bn1d vs bn2d for every ``arch.bn`` of every ``arch.model`` (step 2).

    Needs the flat graph (fails at a tree-form op: run arch-expand first).
    """

    name = "arch-rename-bn"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for model in models(op):
            require_flat(model, self.name)
            PatternRewriteWalker(RenameBn(), apply_recursively=False).rewrite_region(model.body)
