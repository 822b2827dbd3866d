"""``arch-normalize-flatten``: ArchPlan step 5, one ``arch.flatten`` only where it is needed.

The seed (facts sheet section 3.7) deletes every Flatten, then puts one back before the first
FC when its input is spatial (H > 1 or W > 1) with C % 8 != 0 (an FC reads an HWC map directly
when C is a multiple of 8), or, when there is no FC at all, before the SoftmaxCE when its input
is spatial. It runs after shape deduction but reads stale shapes after the deletion, so a
user's ``flatten()`` can vanish; here shapes are re-deduced after the deletion and the rule
reads the true input shape (DESIGN section 7). ``arch.gap_fc`` does not count as an FC. Only
the target's operand is rewired through the new flatten (another reader of the same value
keeps the map). Shapes are deduced up to the target, the rule is read, and shapes are deduced
from the target (or the new flatten) on; so the pass also runs on a graph without shapes.
Idempotent.

A flatten that is the model's first layer (its first op, reading the model input) is kept: the
first layer reads the input buffers A/B and must be a flatten, conv, channel_padding or cbr
(the seed's ``validate_first_layer``, checked by ``memplan-derive-shapes``). Deleting it left
``seq(flatten(), fc(...))`` on a 1x1xC (or HxWx8k) input with the fc first, which the seed's rule
never flattens again, so the model could not be compiled although its author wrote the flatten
the compiler asks for; at HxWxC with C % 8 != 0 the rule put the same flatten back anyway.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from tr_mlir.dialects.arch import FlattenOp, LayerOp, ModelOp, NeedsFlatInput, static_hwc
from tr_mlir.passes._model import body_ops, forward_and_erase, models, require_flat
from tr_mlir.passes.arch_deduce_shapes import deduce_shapes

FC_ALIGN = 8
"""An FC reads a spatial map directly when its channel count is a multiple of this (the
``map_align`` of ``arch.fc``'s :class:`~tr_mlir.dialects.arch.NeedsFlatInput` trait)."""


def flatten_target(model: ModelOp) -> LayerOp | None:
    """The first op with the :class:`~tr_mlir.dialects.arch.NeedsFlatInput` trait of the lowest
    ``priority`` in program order (the first ``arch.fc``, else the first ``arch.softmax_ce``),
    else None."""
    readers = [(trait.priority, i, op) for i, op in enumerate(body_ops(model))
               if (trait := op.get_trait(NeedsFlatInput)) is not None]
    return min(readers, key=lambda r: r[:2])[2] if readers else None  # type: ignore[return-value]


def needs_flatten(target: LayerOp) -> bool:
    """The seed's rule on the (static) input shape of the target (its trait's
    :meth:`~tr_mlir.dialects.arch.NeedsFlatInput.needs_flatten`)."""
    hwc = static_hwc(target.input.type)
    assert hwc is not None, "shapes are deduced before the rule is read"
    trait = target.get_trait(NeedsFlatInput)
    assert trait is not None, "the target is an op with the NeedsFlatInput trait"
    return trait.needs_flatten(hwc)


def is_first_layer_flatten(model: ModelOp, op: Operation) -> bool:
    """Whether ``op`` is a flatten that is ``model``'s first layer: its first op, reading the input."""
    first = model.body.block.first_op
    return op is first and isinstance(op, FlattenOp) and op.input is model.input_value


def normalize_flatten(model: ModelOp) -> FlattenOp | None:
    """Apply the rule of the module doc to ``model``; returns the inserted flatten, if any.

    Raises ``PassFailedException`` when shape deduction fails (e.g. a softmax_ce whose input
    does not have num_classes channels once flattened)."""
    for op in body_ops(model):
        if isinstance(op, FlattenOp) and not is_first_layer_flatten(model, op):
            forward_and_erase(op)
    target = flatten_target(model)
    if target is None:
        deduce_shapes(model)
        return None
    deduce_shapes(model, stop=target)
    if not needs_flatten(target):
        deduce_shapes(model, start=target)
        return None
    flatten = FlattenOp(target.input)
    Rewriter.insert_op(flatten, InsertPoint.before(target))
    target.operands[0] = flatten.output
    deduce_shapes(model, start=flatten)
    return flatten


@dataclass(frozen=True)
class ArchNormalizeFlattenPass(ModulePass):
    """Remove every ``arch.flatten`` of every ``arch.model`` but one that is the first layer and
    insert one before the first fc (or the softmax_ce) when its input needs it (step 5, after
    step 6).

    Fails at a tree-form op (run arch-expand first) and where shape deduction fails.
    """

    name = "arch-normalize-flatten"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for model in models(op):
            require_flat(model, self.name)
            normalize_flatten(model)
