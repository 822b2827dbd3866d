"""``memplan-max-slots``: Compiler phase 2, the slot bytes of every layer tensor.

For every ``memplan.descs`` op, ``slots[t] = max over the six variants of slot_bytes(shape, dtype,
region, target)`` (facts sheet section 8.3, slot formula of section 5; the target comes from the
spec, as channel padding differs between CPU and CUDA). This is the only cross-variant
comparison; it gives every variant the same slot sizes, hence the same offsets in phase 3.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from tr_mlir.dialects.memplan import VARIANTS, DescsOp, ProgramOp, i64_array, slot_bytes
from tr_mlir.passes._descriptors_program import I64_MAX, fail, model_programs


def max_slots(descs: DescsOp, program: ProgramOp) -> list[int]:
    """Max slot bytes over the variants of each tensor of ``descs``.

    Fails at ``descs`` when a slot does not fit in 64 bits (an absurd batch size)."""
    spec = program.spec
    if spec is None:
        fail(program, "'memplan.program' op has no 'memplan.spec'; run memplan-derive-shapes first")
    target = spec.target_kind
    regions, dtypes = descs.tensor_regions, descs.tensor_dtypes
    slots = [max(slot_bytes(descs.shape(v, t), dtypes[t], regions[t], target) for v in range(len(VARIANTS)))
             for t in range(len(regions))]
    for t, slot in enumerate(slots):
        if slot > I64_MAX:
            fail(descs, f"'{descs.name}' op tensor '{descs.tensor_names[t]}' of layer {descs.layer_index} needs "
                        f"{slot} bytes, more than a memory plan can address ({I64_MAX}); reduce batch_size or "
                        "the resolutions")
    return slots


@dataclass(frozen=True)
class MemplanMaxSlotsPass(ModulePass):
    """Phase 2: fill ``slots`` of every ``memplan.descs`` (see the module doc)."""

    name = "memplan-max-slots"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for _model, program in model_programs(op, self.name):
            assert program is not None
            for descs in program.descs():
                descs.slots = i64_array(max_slots(descs, program))
