"""tr-mlir passes, importable as ``tr_mlir.passes``: one module per pass.

The registry is the table ``PASSES`` (pass name -> pass class name). The module of a pass
is its name with ``-`` replaced by ``_`` (``arch-merge-blocks`` lives in
``passes/arch_merge_blocks.py``), so the file, the CLI name and the lit test share one stem;
``tests/test_registries.py`` keeps that honest. :func:`get_all_passes` derives the lazy
factories that ``tr-opt`` and the ``xdsl.universe`` entry point register.
"""

from collections.abc import Callable
from importlib import import_module

from xdsl.passes import ModulePass

PASSES: dict[str, str] = {
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
    "memplan-derive-shapes": "MemplanDeriveShapesPass",
    "memplan-max-slots": "MemplanMaxSlotsPass",
    "memplan-create-plans": "MemplanCreatePlansPass",
    "memplan-build-graph": "MemplanBuildGraphPass",
    "memplan-share-variants": "MemplanShareVariantsPass",
    "memplan-build-atlas": "MemplanBuildAtlasPass",
    "memplan-assign-offsets": "MemplanAssignOffsetsPass",
    "memplan-compile": "MemplanCompilePass",
    "tr-compile": "TrCompilePass",
}
"""Pass name -> class name inside ``tr_mlir.passes.<name with _>``."""


def module_name(pass_name: str) -> str:
    """``arch-merge-blocks`` -> ``tr_mlir.passes.arch_merge_blocks``."""
    return f"{__name__}.{pass_name.replace('-', '_')}"


def _factory(pass_name: str, class_name: str) -> Callable[[], type[ModulePass]]:
    def load() -> type[ModulePass]:
        return getattr(import_module(module_name(pass_name)), class_name)

    return load


def get_all_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    """Pass name -> factory returning the ``ModulePass`` class (imported lazily)."""
    return {name: _factory(name, cls) for name, cls in PASSES.items()}
