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
adds the quadruple merge; ``skip`` names fusion steps to leave out, ``extra`` opt-in fusion
steps to add (comma-separated pass names without spaces, e.g.
``arch-plan{fuse=true skip="arch-merge-blocks,arch-merge-binary"}``; both only matter with
``fuse``).

The fusion steps are an open list (:data:`FUSION_STEPS`): a plugin adds its own fusion pass
with :func:`register_fusion_step` (``tr_mlir.extend.register_fusion_step``), saying where it
runs relative to the others and whether it runs by default for every fused model or only when
named in ``extra``.

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
from tr_mlir.errors import PluginError

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

@dataclass(frozen=True)
class FusionStep:
    """One fusion step of ``arch-plan``: the registered pass ``name``; ``default``: it runs for
    every model whose ``fuse`` flag is set (else only when named in the ``extra`` option)."""

    name: str
    default: bool = True


FUSION_STEPS: list[FusionStep] = [
    FusionStep("arch-merge-blocks"),
    FusionStep("arch-merge-quadruple", default=False),  # the seed leaves it out; cbrp=true adds it
    FusionStep("arch-merge-triple"),
    FusionStep("arch-merge-binary"),
]
"""Steps run only for models whose ``fuse`` flag is set, in this order (plugins insert theirs with
:func:`register_fusion_step`)."""

LAST_STEPS: tuple[str, ...] = ("arch-mark-first-layer",)


class FusionStepError(PluginError):
    """A fusion step that cannot be registered or named; the message names the step."""


def register_fusion_step(name: str, *, after: str | None = None, before: str | None = None,
                         default: bool = True) -> FusionStep:
    """Make the registered pass ``name`` a fusion step of ``arch-plan``.

    It runs right after the step ``after`` or right before the step ``before`` (at most one;
    neither: after the last fusion step), for every fused model when ``default`` is true, else
    only when named in ``arch-plan{extra="..."}`` / ``tr-compile{extra="..."}`` (a comma-separated
    list of step names; ``Task`` and ``tr-train`` run the default steps). Registering the
    same step twice at the same place is a no-op.

    Raises :class:`FusionStepError` when ``name`` is not a registered pass (register it first,
    ``tr_mlir.extend.register_pass``), when ``after``/``before`` is not a fusion step, or when the
    step is already registered elsewhere.
    """
    from tr_mlir.passes import PASSES

    if name not in PASSES:
        raise FusionStepError(f"fusion step '{name}': no pass of that name is registered; register the pass "
                              "first (tr_mlir.extend.register_pass)")
    if after is not None and before is not None:
        raise FusionStepError(f"fusion step '{name}': give 'after' or 'before', not both")
    names = [s.name for s in FUSION_STEPS]
    anchor = after if after is not None else before
    if anchor is not None and anchor not in names:
        raise FusionStepError(f"fusion step '{name}': '{anchor}' is not a fusion step; the steps are {names}")
    step = FusionStep(name, default)
    if name in names:
        i = names.index(name)
        wanted = (names.index(after) + 1 if after is not None else names.index(before) if before is not None
                  else len(names) - 1)
        if FUSION_STEPS[i] == step and wanted in (i, i + 1):
            return step
        raise FusionStepError(f"fusion step '{name}' is already registered (at position {i} of {names})")
    at = names.index(after) + 1 if after is not None else names.index(before) if before is not None else len(names)
    FUSION_STEPS.insert(at, step)
    return step


def _names(option: str, text: str) -> list[str]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    known = [s.name for s in FUSION_STEPS]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise FusionStepError(f"arch-plan: {option} names {unknown}, which are not fusion steps; the fusion "
                              f"steps are {known}")
    return names


def plan_steps(fuse: bool, cbrp: bool, *, skip: str = "", extra: str = "") -> list[str]:
    """Pass names that ``arch-plan`` runs for a model with the given ``fuse`` flag: the front
    steps, then (``fuse``) the default fusion steps plus those named in ``extra`` (comma-separated;
    ``cbrp`` adds ``arch-merge-quadruple``) less those named in ``skip``, then the last steps.

    Raises :class:`FusionStepError` for a name in ``skip`` or ``extra`` that is not a fusion step.
    """
    skipped, added = set(_names("skip", skip)), set(_names("extra", extra))
    if cbrp:
        added.add("arch-merge-quadruple")
    steps = list(FRONT_STEPS)
    if fuse:
        steps += [s.name for s in FUSION_STEPS if (s.default or s.name in added) and s.name not in skipped]
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
    skip: str = ""
    extra: str = ""

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
        try:
            steps = plan_steps(fused == {True}, self.cbrp, skip=self.skip, extra=self.extra)
        except FusionStepError as e:
            from xdsl.utils.exceptions import PassFailedException

            raise PassFailedException(str(e)) from None
        run_passes(ctx, op, steps)
