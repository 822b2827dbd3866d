"""The compile API: BluePrint -> flat ArchPlan module (and, later, -> memplan).

Each function emits the BluePrint into the ``arch`` dialect (:func:`tr_mlir.blueprint.emit`)
and runs the named pass pipeline on it, so the Python API and ``tr-opt`` share one
implementation: ``arch_plan(...)`` is ``tr-opt -p 'arch-plan{...}'`` on the emitted module.
"""

from __future__ import annotations

from xdsl.context import Context
from xdsl.dialects.builtin import Builtin, ModuleOp

from tr_mlir.dialects import get_all_dialects


def make_context() -> Context:
    """An xDSL ``Context`` with ``builtin`` and every tr-mlir dialect loaded."""
    ctx = Context()
    ctx.load_dialect(Builtin)
    for factory in get_all_dialects().values():
        ctx.load_dialect(factory())
    return ctx


def arch_plan(
    model,
    input_shape: tuple[int, int, int],
    *,
    amp: bool,
    fuse: bool,
    num_classes: int,
    cbrp: bool = False,
    name: str = "model",
) -> ModuleOp:
    """Compile a BluePrint to the flat, shape-deduced, verified ArchPlan module.

    Args:
        model: a BluePrint layer (``tr_mlir.blueprint``).
        input_shape: (H, W, C) of one sample, NHWC.
        amp: fp16 storage with fp32 accumulation; aligns the first conv's input C to 4.
        fuse: run the fusion steps (blocks, conv+bn+relu, gap+fc).
        num_classes: logits of the classifier head (``arch.softmax_ce``).
        cbrp: also fuse conv+bn+relu+maxpool (off by default, as in the seed).
        name: symbol name of the ``arch.model``.

    Returns:
        A ``builtin.module`` holding one flat ``arch.model``.

    Raises:
        tr_mlir.blueprint.BluePrintError: invalid BluePrint or arguments.
        xdsl.utils.exceptions.DiagnosticException: a pass rejected the network (bad
            geometry, a softmax_ce / class-count mismatch, ...); the message names the op.
    """
    from tr_mlir.blueprint import emit
    from tr_mlir.passes.arch_plan import ArchPlanPass

    module = emit(model, input_shape, amp=amp, fuse=fuse, num_classes=num_classes, name=name)
    ArchPlanPass(cbrp=cbrp).apply(make_context(), module)
    module.verify()
    return module
