"""``arch-plan``: the whole ArchPlan (the seed's ``from_blueprint`` + ``build``) as one pipeline.

Runs ``arch-expand`` (step 1), then the seed's build order (facts sheet section 3.1):
``arch-rename-bn`` (2), ``arch-normalize-softmax-ce`` (3), ``arch-normalize-identity`` (4),
``arch-align-amp-input``, ``arch-deduce-shapes`` (6), ``arch-normalize-flatten`` (5), then,
when the model's ``fuse`` flag is set, ``arch-merge-blocks`` (7), ``arch-merge-quadruple`` (8,
only with ``cbrp=true``: the seed leaves it out), ``arch-merge-triple`` (9),
``arch-merge-binary`` (10); ``arch-mark-first-layer`` always last.

Options (MLIR syntax, e.g. ``arch-plan{fuse=true amp=true num_classes=1000}``): ``fuse``,
``amp`` and ``num_classes`` first rewrite the model attributes they name (DESIGN section 1),
so a module emitted with ``amp=false`` can be planned with AMP; ``cbrp`` (default false)
adds the quadruple merge.

A module that already holds a ``memplan.program`` (the output of ``memplan-*`` / ``tr-compile``)
is rejected: the program was compiled from the model as it is, and re-planning the model would
leave it stale without a word.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, i64
from xdsl.passes import ModulePass

from tr_mlir.dialects.arch import ModelOp

FRONT_STEPS: tuple[str, ...] = (
    "arch-expand",
    "arch-rename-bn",
    "arch-normalize-softmax-ce",
    "arch-normalize-identity",
    "arch-align-amp-input",
    "arch-deduce-shapes",
    "arch-normalize-flatten",
)
"""Steps run for every model, in the seed's order (step 6 before step 5)."""

FUSION_STEPS: tuple[str, ...] = (
    "arch-merge-blocks",
    "arch-merge-quadruple",
    "arch-merge-triple",
    "arch-merge-binary",
)
"""Steps run only for models whose ``fuse`` flag is set (the quadruple merge only with cbrp)."""

LAST_STEPS: tuple[str, ...] = ("arch-mark-first-layer",)


def plan_steps(fuse: bool, cbrp: bool) -> list[str]:
    """Pass names that ``arch-plan`` runs for a model with the given ``fuse`` flag."""
    steps = list(FRONT_STEPS)
    if fuse:
        steps += [s for s in FUSION_STEPS if cbrp or s != "arch-merge-quadruple"]
    return steps + list(LAST_STEPS)


def set_model_options(
    module: ModuleOp,
    *,
    fuse: bool | None = None,
    amp: bool | None = None,
    num_classes: int | None = None,
) -> list[ModelOp]:
    """Rewrite the named attributes of every ``arch.model`` in ``module``; return the models.

    ``None`` leaves an attribute as it is (the model container is the single source of
    truth, DESIGN section 1).
    """
    models = [op for op in module.walk() if isinstance(op, ModelOp)]
    for model in models:
        if fuse is not None:
            model.set_flag("fuse", fuse)
        if amp is not None:
            model.set_flag("amp", amp)
        if num_classes is not None:
            model.num_classes = IntegerAttr(num_classes, i64)
    return models


def run_passes(ctx: Context, module: ModuleOp, names: Sequence[str]) -> None:
    """Apply the registered passes ``names`` in order (default options), verifying after each."""
    from tr_mlir.passes import get_all_passes

    registry = get_all_passes()
    for name in names:
        registry[name]()().apply(ctx, module)
        module.verify()


@dataclass(frozen=True)
class ArchPlanPass(ModulePass):
    """The ArchPlan pipeline; see the module docstring for the order and the options."""

    name = "arch-plan"

    fuse: bool | None = None
    amp: bool | None = None
    num_classes: int | None = None
    cbrp: bool = False

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        from tr_mlir.dialects.memplan import ProgramOp
        from tr_mlir.passes._model import fail

        program = next((o for o in op.walk() if isinstance(o, ProgramOp)), None)
        if program is not None:
            fail(program, "arch-plan: the module already holds a memplan program compiled from its model; "
                          "re-planning the model would leave that program stale: run arch-plan on the arch IR "
                          "(before the memplan-* passes)")
        models = set_model_options(op, fuse=self.fuse, amp=self.amp, num_classes=self.num_classes)
        fused = {model.fuse is not None for model in models}
        # Every model of one module is planned with its own fuse flag; run the steps of the
        # union and let the fusion passes act on the models whose flag is set.
        if len(fused) > 1:
            from xdsl.utils.exceptions import PassFailedException

            raise PassFailedException(
                "arch-plan: the models of one module disagree on 'fuse'; pass fuse=true or "
                "fuse=false to plan them alike"
            )
        run_passes(ctx, op, plan_steps(fused == {True}, self.cbrp))
