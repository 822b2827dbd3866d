"""``arch-normalize-softmax-ce``: ArchPlan step 3, exactly one classifier head, last.

The seed deletes every SoftmaxCE layer and appends one ``SoftmaxCE{num_classes}`` at the end
(facts sheet section 3.3). Here every ``arch.softmax_ce`` is removed (its users read its
input), then one ``arch.softmax_ce {num_classes}`` is applied to the value the model returns
and ``arch.output`` returns it. ``num_classes`` is the model's; the pass is idempotent. The
check that the last layer produces ``num_classes`` channels belongs to ``arch-deduce-shapes``
(the op's shape rule).

Option ``num_classes`` (int): when given, first rewrites the model's ``num_classes``.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from tr_mlir.dialects.arch import ModelOp, SoftmaxCeOp
from tr_mlir.passes._model import apply_options, body_ops, forward_and_erase, models, require_flat


def normalize_softmax_ce(model: ModelOp) -> SoftmaxCeOp:
    """Leave exactly one ``arch.softmax_ce`` in ``model``, on its returned value; returns it."""
    for op in body_ops(model):
        if isinstance(op, SoftmaxCeOp):
            forward_and_erase(op)
    output = model.output_op
    logits = output.value
    head = SoftmaxCeOp(logits, result_type=logits.type, num_classes=model.param("num_classes"))
    Rewriter.insert_op(head, InsertPoint.before(output))
    output.operands[0] = head.output
    return head


@dataclass(frozen=True)
class ArchNormalizeSoftmaxCePass(ModulePass):
    """Give every ``arch.model`` exactly one ``arch.softmax_ce`` head, last (step 3).

    Options: ``num_classes`` (int, optional) first rewrites the model's ``num_classes``.
    Needs the flat graph (fails at a tree-form op: run arch-expand first).
    """

    name = "arch-normalize-softmax-ce"

    num_classes: int | None = None

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for model in models(op):
            apply_options(model, num_classes=self.num_classes)
            require_flat(model, self.name)
            normalize_softmax_ce(model)
