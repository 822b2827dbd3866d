"""``arch-align-amp-input``: round the model's input channels up to a multiple of 4 under AMP.

The seed (facts sheet section 3.5) rounds the input C up to a multiple of 4 when the plan is
fused, layer 0 is a Conv or CBR and C % 4 != 0, so the first conv's fp16 input is aligned. Here
the rule keys on the model's ``amp`` flag (DESIGN sections 1 and 7: fuse and amp are
independent), and "layer 0" is the first op (program order) reading the model input: an
``arch.conv`` with ``groups`` = 1 or an ``arch.cbr`` (ops with the ``AlignsAmpInput`` trait). So that no other reader of the input sees
its channel count change, every other reader must be one of those too (an empty residual
shortcut on the input has an ``arch.identity`` reader after ``arch-normalize-identity``: no
alignment, as the seed's Add2Start at layer 0). The model's ``input_c`` and the type of its
input argument change (H and W stay as they are); ``arch-deduce-shapes`` re-derives the shapes
downstream. The extra channels are zero-filled by the data loader.

Option ``amp`` (bool): when given, first sets or clears the model's ``amp`` flag.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, TensorType, i64
from xdsl.ir import Operation
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from tr_mlir.dialects.arch import AlignsAmpInput, ModelOp
from tr_mlir.passes._model import apply_options, body_ops, flag, models, require_flat

ALIGN = 4
"""Input channels are rounded up to a multiple of this (the seed's value; not 8)."""


def _aligns(op: Operation) -> bool:
    """Whether ``op`` as the first consumer of the input asks for aligned channels: an op with
    the :class:`~tr_mlir.dialects.arch.AlignsAmpInput` trait (``arch.conv``, ``arch.cbr``) that
    is not grouped (a grouped conv would change meaning)."""
    trait = op.get_trait(AlignsAmpInput)
    return trait is not None and trait.aligns(op)


def consumers(model: ModelOp) -> list[Operation]:
    """The ops of the body that read the model input, in program order."""
    x = model.input_value
    return [op for op in body_ops(model) if x in op.operands]


def align_amp_input(model: ModelOp) -> bool:
    """Apply the rule of the module doc to ``model``; returns whether ``input_c`` changed."""
    if not flag(model, "amp"):
        return False
    c = model.input_hwc[2]
    readers = consumers(model)
    if c % ALIGN == 0 or not readers or not all(_aligns(op) for op in readers):
        return False
    aligned = (c + ALIGN - 1) // ALIGN * ALIGN
    model.input_c = IntegerAttr(aligned, i64)
    arg = model.input_value
    assert isinstance(arg.type, TensorType)
    n, h, w, _ = arg.type.get_shape()
    Rewriter.replace_value_with_new_type(
        arg, TensorType(arg.type.get_element_type(), [n, h, w, aligned])
    )
    return True


@dataclass(frozen=True)
class ArchAlignAmpInputPass(ModulePass):
    """Under AMP, align the input channels of a model whose first layer is a conv to 4.

    Options: ``amp`` (bool, optional) first sets or clears the model's ``amp`` flag.
    Needs the flat graph (fails at a tree-form op: run arch-expand first).
    """

    name = "arch-align-amp-input"

    amp: bool | None = None

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for model in models(op):
            apply_options(model, amp=self.amp)
            require_flat(model, self.name)
            align_amp_input(model)
