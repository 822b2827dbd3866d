"""``arch-mark-first-layer``: record the index of the model's first layer.

Sets ``first_layer = 0`` on every ``arch.model`` whose body has layers and removes the property
from a model with an empty body. Like the seed's ``mark_first_layer`` (facts sheet section
3.14) the choice is positional: layer 0 is the first layer whatever its kind (a flatten, a
relu, ...). The runtime runs the first layer on the alternating A/B input buffers.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, i64
from xdsl.passes import ModulePass

from tr_mlir.dialects import arch


@dataclass(frozen=True)
class ArchMarkFirstLayerPass(ModulePass):
    """Set ``first_layer = 0`` on each ``arch.model`` with layers; clear it on an empty one."""

    name = "arch-mark-first-layer"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for model in op.walk():
            if not isinstance(model, arch.ModelOp):
                continue
            if model.layers():
                model.properties["first_layer"] = IntegerAttr(0, i64)
            else:
                model.properties.pop("first_layer", None)
