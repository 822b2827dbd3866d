"""``arch-deduce-shapes``: ArchPlan step 6, NHWC shape inference over the SSA graph.

The seed walks its layer list linearly from the input shape (facts sheet section 4), so the
shortcut's output feeds the main branch and unfused residual nets downsample twice. Here shapes
follow the SSA graph (DESIGN section 7): a forward walk gives every layer the result type
``tensor<?xHxWxCxf32>`` from its op's shape rule ``infer_hwc`` applied to its input, and
``arch.add`` requires both operands to have one shape (its result has it). So an unfused
ResNet-50 ends in 7x7x2048, as the fused one does. Bad geometry (kernel larger than the padded
input, a softmax_ce whose input C is not num_classes, ...) is a diagnostic at the op instead of
the seed's clamping to 1. The model's input argument takes its type from ``input_h/w/c``.
Idempotent.

:func:`deduce_shapes` is the shared "re-deduce shapes" helper of the passes that edit the graph
after this step (``arch-normalize-flatten``, the merge passes).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter
from xdsl.utils.exceptions import VerifyException

from tr_mlir.dialects.arch import HWC, ArchLayerOp, ModelOp, nhwc_type, static_hwc
from tr_mlir.passes._model import body_ops, fail, models, require_flat


def _input_hwc(op: Operation, value: SSAValue) -> HWC:
    hwc = static_hwc(value.type)
    if hwc is None:
        fail(op, f"'{op.name}' op expected a static NHWC input, got {value.type}; "
                 "run arch-deduce-shapes on the whole model")
    return hwc


def _layer_hwc(op: ArchLayerOp) -> HWC:
    """The op's shape rule on its inputs' static shapes (``arch.add``: both operands)."""
    hwcs = [_input_hwc(op, value) for value in op.layer_inputs]
    try:
        return op.infer_hwc(*hwcs)
    except VerifyException as e:
        fail(op, str(e))


def _set_hwc(value: SSAValue, hwc: HWC) -> None:
    new_type = nhwc_type(*hwc)
    if value.type != new_type:
        Rewriter.replace_value_with_new_type(value, new_type)


def deduce_shapes(model: ModelOp, start: Operation | None = None,
                  stop: Operation | None = None) -> None:
    """Give every layer of ``model`` from ``start`` (default: the first op, after retyping the
    input argument from ``input_h/w/c``) up to ``stop`` (excluded; default: the end of the
    body) its static NHWC result type.

    Ops before ``start`` must have static types already. Raises ``PassFailedException`` at the
    first op whose shape rule fails, at an ``arch.add`` of two shapes, and at an op without an
    NHWC shape rule."""
    ops = body_ops(model)
    if start is None:
        _set_hwc(model.input_value, model.input_hwc)
    else:
        ops = ops[ops.index(start):]
    if stop is not None:
        ops = ops[:ops.index(stop)]
    for op in ops:
        if isinstance(op, ArchLayerOp):
            _set_hwc(op.results[0], _layer_hwc(op))
        else:
            fail(op, f"'{op.name}' op has no NHWC shape rule; an arch.model body holds arch "
                     "layer ops only")


@dataclass(frozen=True)
class ArchDeduceShapesPass(ModulePass):
    """Give every layer of every ``arch.model`` its static NHWC result type (step 6).

    Fails at a tree-form op (run arch-expand first), at bad geometry, at an ``arch.add`` of
    two shapes and at a softmax_ce whose input has other than num_classes channels.
    """

    name = "arch-deduce-shapes"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for model in models(op):
            require_flat(model, self.name)
            deduce_shapes(model)
