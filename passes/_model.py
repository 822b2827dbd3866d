"""Shared helpers of the ArchPlan passes: finding models, applying options, diagnostics.

Every ArchPlan pass works on each ``arch.model`` of the module in turn, reads the model facts
(``amp``, ``fuse``, ``num_classes``, ``input_h/w/c``) from the container and, when the pass was
given an option, first rewrites the attribute the option names (DESIGN section 1). The passes
after ``arch-expand`` need the flat form: :func:`require_flat` reports the first tree-form op
left in a model.
"""

from __future__ import annotations

from typing import NoReturn

from xdsl.dialects.builtin import IntegerAttr, ModuleOp, i64
from xdsl.ir import Operation, SSAValue
from xdsl.rewriter import Rewriter
from xdsl.utils.exceptions import PassFailedException

from tr_mlir.dialects.arch import IsTreeForm, LayerOp, ModelOp, OutputOp


def models(module: ModuleOp) -> list[ModelOp]:
    """Every ``arch.model`` of ``module`` (at any depth), in program order."""
    return [op for op in module.walk() if isinstance(op, ModelOp)]


def apply_options(
    model: ModelOp,
    *,
    amp: bool | None = None,
    fuse: bool | None = None,
    num_classes: int | None = None,
) -> None:
    """Rewrite the model attributes named by the pass options that were given (not ``None``).

    Raises ``PassFailedException`` (at the model) for ``num_classes`` < 1.
    """
    if amp is not None:
        model.set_flag("amp", amp)
    if fuse is not None:
        model.set_flag("fuse", fuse)
    if num_classes is not None:
        if num_classes < 1:
            fail(model, f"'{model.name}' op expected num_classes >= 1, got {num_classes}")
        model.num_classes = IntegerAttr(num_classes, i64)


def flag(model: ModelOp, name: str) -> bool:
    """The model's unit flag ``amp`` or ``fuse`` as a bool."""
    return bool(model.param(name))


def fail(op: Operation, message: str) -> NoReturn:
    """Raise ``PassFailedException(message)`` with the IR annotated at ``op``.

    The exception's ``op`` attribute is ``op``: ``tr-opt`` reports its ``file:line:col`` when
    ``op`` was parsed from the input.
    """
    error = PassFailedException(message)
    error.op = op  # type: ignore[attr-defined]
    op.emit_error(message, error)


def require_flat(model: ModelOp, pass_name: str) -> None:
    """Fail at the first tree-form op (one with the :class:`~tr_mlir.dialects.arch.IsTreeForm`
    trait: ``arch.seq``, ``arch.add2``, ``arch.repeat``, ``arch.block``, ``arch.yield``) of
    ``model``: ``pass_name`` needs the flat SSA graph."""
    for op in model.body.walk():
        if op.has_trait(IsTreeForm):
            fail(
                op,
                f"'{op.name}' op is tree form, but {pass_name} needs the flat graph; "
                "run arch-expand first",
            )


def body_ops(model: ModelOp) -> list[Operation]:
    """The ops of the model body in program order, terminator excluded (a snapshot)."""
    return [op for op in model.body.block.ops if not isinstance(op, OutputOp)]


def forward_and_erase(op: LayerOp) -> SSAValue:
    """Remove a layer that a normalization pass re-creates where needed (``identity``,
    ``flatten``, ``softmax_ce``): its users read its input instead. Returns that input.
    Result types downstream may be stale afterwards until shapes are deduced again."""
    source = op.input
    op.output.replace_all_uses_with(source)
    Rewriter.erase_op(op)
    return source

