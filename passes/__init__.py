"""tr-mlir passes, importable as ``tr_mlir.passes``: one module per pass.

The registry is the table ``PASSES`` (pass name -> pass class name, or the class itself for a
pass a plugin registered with :func:`register_pass`). The module of a built-in pass is its name
with ``-`` replaced by ``_`` (``arch-merge-blocks`` lives in ``passes/arch_merge_blocks.py``), so
the file, the CLI name and the lit test share one stem; ``tests/test_registries.py`` keeps that
honest. :func:`get_all_passes` derives the lazy factories that ``tr-opt``, ``arch-plan`` and the
``xdsl.universe`` entry point register.
"""

import re
from collections.abc import Callable
from importlib import import_module

from xdsl.passes import ModulePass

from tr_mlir.errors import PluginError

_PASS_NAME = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*")

PASSES: dict[str, str | type[ModulePass]] = {
    "arch-expand": "ArchExpandPass",
    "arch-rename-bn": "ArchRenameBnPass",
    "arch-normalize-softmax-ce": "ArchNormalizeSoftmaxCePass",
    "arch-normalize-identity": "ArchNormalizeIdentityPass",
    "arch-align-amp-input": "ArchAlignAmpInputPass",
    "arch-deduce-shapes": "ArchDeduceShapesPass",
    "arch-normalize-flatten": "ArchNormalizeFlattenPass",
    "arch-merge-blocks": "ArchMergeBlocksPass",
    "arch-merge-quadruple": "ArchMergeQuadruplePass",
    "arch-merge-triple": "ArchMergeTriplePass",
    "arch-merge-binary": "ArchMergeBinaryPass",
    "arch-mark-first-layer": "ArchMarkFirstLayerPass",
    "arch-plan": "ArchPlanPass",
    "memplan-select-conv-algo": "MemplanSelectConvAlgoPass",
    "memplan-derive-shapes": "MemplanDeriveShapesPass",
    "memplan-max-slots": "MemplanMaxSlotsPass",
    "memplan-create-plans": "MemplanCreatePlansPass",
    "memplan-name-parameters": "MemplanNameParametersPass",
    "memplan-build-graph": "MemplanBuildGraphPass",
    "memplan-fuse-bn-stats": "MemplanFuseBnStatsPass",
    "memplan-fuse-fc-relu": "MemplanFuseFcReluPass",
    "memplan-fuse-grad-acc": "MemplanFuseGradAccPass",
    "memplan-narrow-grad-clear": "MemplanNarrowGradClearPass",
    "memplan-share-variants": "MemplanShareVariantsPass",
    "memplan-build-atlas": "MemplanBuildAtlasPass",
    "memplan-skip-dead-outputs": "MemplanSkipDeadOutputsPass",
    "memplan-assign-offsets": "MemplanAssignOffsetsPass",
    "memplan-compile": "MemplanCompilePass",
    "tr-compile": "TrCompilePass",
}
"""Pass name -> class name inside ``tr_mlir.passes.<name with _>`` (built-in passes), or the
``ModulePass`` class (plugins' passes, :func:`register_pass`)."""


class PassRegistrationError(PluginError):
    """A pass :func:`register_pass` cannot add; the message names the class and the rule."""


def register_pass(cls: type[ModulePass]) -> type[ModulePass]:
    """Add a plugin's pass class under its ``name``; returns ``cls`` (usable as a decorator).

    The class may live in any module. It must be a ``ModulePass`` subclass (a frozen dataclass
    whose fields are its options, as every xDSL pass) with a ``name`` of lower-case words joined
    by ``-`` that no other pass has; registering the same class twice is a no-op. ``tr-opt``
    (``-p`` / ``--pass-pipeline``), ``arch-plan``'s steps and the ``xdsl.universe`` entry point
    see it.

    Raises :class:`PassRegistrationError` naming the class and what is wrong.
    """
    what = getattr(cls, "__qualname__", repr(cls))
    if not (isinstance(cls, type) and issubclass(cls, ModulePass)):
        raise PassRegistrationError(f"register_pass({what}): a pass must subclass xdsl.passes.ModulePass")
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not _PASS_NAME.fullmatch(name):
        raise PassRegistrationError(f"register_pass({what}): set 'name' to lower-case words joined by '-' "
                                    f"(e.g. 'arch-merge-conv-relu'), got {name!r}")
    old = PASSES.get(name)
    if old is cls:
        return cls
    if old is not None:
        where = old if isinstance(old, str) else f"{old.__module__}.{old.__qualname__}"
        raise PassRegistrationError(f"register_pass({what}): a pass named '{name}' already exists ({where})")
    PASSES[name] = cls
    return cls


def module_name(pass_name: str) -> str:
    """``arch-merge-blocks`` -> ``tr_mlir.passes.arch_merge_blocks``."""
    return f"{__name__}.{pass_name.replace('-', '_')}"


def _factory(pass_name: str, class_name: str | type[ModulePass]) -> Callable[[], type[ModulePass]]:
    def load() -> type[ModulePass]:
        if not isinstance(class_name, str):
            return class_name
        return getattr(import_module(module_name(pass_name)), class_name)

    return load


def get_all_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    """Pass name -> factory returning the ``ModulePass`` class (imported lazily), plugins' included."""
    return {name: _factory(name, cls) for name, cls in PASSES.items()}
