"""``memplan-name-parameters``: give the model's parameters and BN buffers their user-visible names.

The names a user sees (``Task.parameters()``, ``Task.buffers()``, ``Task.state_dict()``, the
checkpoints and ``tr-train``'s exports) are a compile decision recorded in the IR, not a rule of
the runtime: this pass writes them on every ``memplan.descs`` op as ``param_names``, one entry per
tensor (``""`` for a tensor that is neither a parameter nor a buffer)::

    memplan.descs 1 "arch.conv" names = ["w", "dw", ...] regions = ["W_DEEP_CONV", ...] ...
        param_names = ["conv1.weight", "", ...]

Rule (this pass is where it lives; the names follow PyTorch's ``<module><index>.<field>`` style,
and DESIGN section 3's order). Walking the ``memplan.descs`` ops in order and each one's tensors
in order (the order in which ``memplan-create-plans`` gives the layers' DTensors their ids, so the
names number in plan order), each region of :data:`NAMING` names its tensors
``<prefix><index>.<field>``; a tensor whose rule ``starts`` a new item takes the next index of its
counter (``conv``, ``bn``, ``fc``, and ``bn_stats`` for the running statistics, which number like
the BN layers that own them), the others share the current one: the conv weight is
``convN.weight``; the BN gamma starts ``bnN`` (``bnN.weight``) and its beta is ``bnN.bias``; the
FC weight starts ``fcN`` and its bias, ``fcN.bias``, is a parameter only when the FC's ``bias``
property is set (the plan holds the slot for every FC; a fused op answers for the chain member
that owns the tensor, :meth:`~tr_mlir.dialects.arch.ArchOp.tensor_params`); the running mean
starts ``bnN.running_mean`` and the variance follows. A tensor without bytes in the plan (a
region this configuration disables) and a shared workspace are not named. A plugin op whose
descriptor emits tensors of these regions is named by the same rule. The torch frontend numbers
an imported module's layers the same way to map these names to the module's own
(:mod:`tr_mlir.frontend.torch`, which checks the two agree).

It runs in ``memplan-compile`` right after ``memplan-create-plans`` (it reads the plan's slots);
a rerun rewrites the same names. No options. Diagnostics: a program without plans (run
``memplan-create-plans`` first).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from tr_mlir.dialects.memplan import MemRegion, ProgramOp, str_array
from tr_mlir.passes._descriptors_program import layers, model_programs
from tr_mlir.passes._model import fail

R = MemRegion


@dataclass(frozen=True)
class Naming:
    """How the DTensors of one region are named: the ``counter`` they number by, whether a tensor
    of this region ``starts`` the next item of that counter (else it belongs to the current one),
    the name ``prefix`` and ``field``, and ``needs``: an op property that must be set for the
    tensor to be a parameter (``None``: always)."""

    counter: str
    starts: bool
    prefix: str
    field: str
    needs: str | None = None


NAMING: dict[MemRegion, Naming] = {
    R.W_FIRST_CONV: Naming("conv", True, "conv", "weight"),
    R.W_DEEP_CONV: Naming("conv", True, "conv", "weight"),
    R.W_BN_WEIGHT: Naming("bn", True, "bn", "weight"),
    R.W_BN_BIAS: Naming("bn", False, "bn", "bias"),
    R.W_FC_WEIGHT: Naming("fc", True, "fc", "weight"),
    R.W_FC_BIAS: Naming("fc", False, "fc", "bias", needs="bias"),
    R.B_NEXT_MEAN: Naming("bn_stats", True, "bn", "running_mean"),
    R.B_NEXT_VAR: Naming("bn_stats", False, "bn", "running_var"),
}
"""The naming rule of each region of :data:`~tr_mlir.dialects.memplan.STATE_REGIONS` (module doc)."""


def parameter_names(program: ProgramOp, model_layers: Sequence) -> list[tuple[str, ...]]:
    """Per ``memplan.descs`` op of ``program`` (in order), one name per tensor, ``""`` for none.

    ``model_layers``: the ``arch.model``'s layer ops (``descs.layer`` indexes them). The program
    must have its plans (``memplan-create-plans``): their slots say which tensors hold bytes.
    Raises ``IndexError`` when the program has no plan."""
    plans = program.plans()
    slots = {t.name: t.slot for t in plans[0].tensors()}
    index = {counter: -1 for counter in {rule.counter for rule in NAMING.values()}}
    out: list[tuple[str, ...]] = []
    for descs in program.descs():
        layer = descs.layer_index
        shared = set(descs.shared_indices)
        names: list[str] = []
        for t, (name, region) in enumerate(zip(descs.tensor_names, descs.tensor_regions)):
            rule = NAMING.get(region)
            if rule is None or t in shared or not slots.get(f"l{layer}.{name}"):
                names.append("")
                continue
            if rule.needs is not None and not model_layers[layer].tensor_params(name).get(rule.needs):
                names.append("")
                continue
            index[rule.counter] += int(rule.starts)
            names.append(f"{rule.prefix}{index[rule.counter]}.{rule.field}")
        out.append(tuple(names))
    return out


@dataclass(frozen=True)
class MemplanNameParametersPass(ModulePass):
    """Write ``param_names`` on every ``memplan.descs`` op (see the module doc)."""

    name = "memplan-name-parameters"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for model, program in model_programs(op, self.name):
            assert program is not None
            if not program.plans():
                fail(model, f"'{model.name}' op @{model.sym_name.data}: {self.name} needs the program's plans; "
                            f"run memplan-create-plans first (or memplan-compile)")
            for descs, names in zip(program.descs(), parameter_names(program, layers(model))):
                descs.properties["param_names"] = str_array(names)
