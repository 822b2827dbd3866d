"""Shared helpers of the memplan passes: the model/program pair, the layer list, diagnostics.

Every memplan pass works on each ``arch.model`` of the module and the ``memplan.program`` that
names it (``memplan.program @m model @m``), created by ``memplan-derive-shapes``. The layers of a
model are the ops of its flat body in order (the seed's linearized ArchPlan); layer ``i`` of a
``memplan.descs`` op is the ``i``-th of them.
"""

from __future__ import annotations

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.utils.exceptions import PassFailedException

from tr_mlir.dialects.arch import ModelOp, OutputOp
from tr_mlir.dialects.memplan import ProgramOp
from tr_mlir.passes._model import fail

__all__ = ["I64_MAX", "fail", "layer_inputs", "layers", "model_programs", "use_count"]

I64_MAX = (1 << 63) - 1
"""Largest spec value, slot or arena size a memplan program can hold (its attributes are i64)."""


def model_programs(module: ModuleOp, pass_name: str, *, need_program: bool = True,
                   ) -> list[tuple[ModelOp, ProgramOp | None]]:
    """(model, its program) for every ``arch.model`` of ``module``.

    With ``need_program``, a model without a program fails: ``pass_name`` runs after
    ``memplan-derive-shapes``. A module without any model fails too.
    """
    found: list[tuple[ModelOp, ProgramOp | None]] = []
    programs = {p.model_name: p for p in module.walk() if isinstance(p, ProgramOp)}
    models = [op for op in module.walk() if isinstance(op, ModelOp)]
    if not models:
        raise PassFailedException(f"{pass_name} expected an 'arch.model' in the module, found none")
    for model in models:
        program = programs.get(model.sym_name.data)
        if program is None and need_program:
            fail(model, f"'{model.name}' op @{model.sym_name.data} has no 'memplan.program'; "
                        f"{pass_name} runs after memplan-derive-shapes (the memplan phases: memplan-compile)")
        found.append((model, program))
    return found


def layers(model: ModelOp) -> list[Operation]:
    """The layer ops of a flat model, in order (terminator excluded)."""
    return [op for op in model.body.block.ops if not isinstance(op, OutputOp)]


def layer_inputs(op: Operation) -> tuple[SSAValue, ...]:
    """The NHWC values a layer reads (one, or two for ``arch.add``)."""
    return tuple(op.operands)


def use_count(value: SSAValue) -> int:
    """How many layer ops read ``value`` (the model terminator does not count)."""
    return sum(1 for use in value.uses if not isinstance(use.operation, OutputOp))
