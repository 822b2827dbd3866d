"""``memplan-build-atlas``: the GraphAtlas, (variant, GraphId) -> capture key (facts sheet section 11).

For each of the six variants and each of the 33 GraphIds the atlas holds the index of a capture key
``(graph, GraphId, ShapeId, plan)`` or -1. A key is captured once (a CUDA graph or a CPU closure
list) and replayed by every slot that points at it:

* a shape-invariant GraphId (``GraphId.shape_invariant``: transfers, comms, casts, NaN check, stats,
  the optimizer, metrics, ...) gets ShapeId ``(0, 0, 0, 0)`` and the base plan ``@plan_train_base``,
  so the six variants share one key;
* a shape-dependent one (first layer, deep forward/backward, inference) gets the variant's ShapeId
  ``(batch, res, res, C)`` (``(batch, H, W, C)`` for a non-square input) and the variant's plan;
  variants with equal ShapeIds share the key of the first (e.g. ``train_last`` reuses
  ``train_base``'s when the last batch is full and the resolutions agree). The plan is not part of
  the key: plans of equal shapes are identical.

Slots follow the seed's ``build_graph_atlas``: the graph is ``@train`` when its bucket is
non-empty, else ``@infer`` when that one is, else there is no slot; train variants get no
shape-dependent inference slot; val variants get no slot for the per-step training graphs
(first layer forward/backward, deep forward/backward, optimizer: the seed drops them as
shape-dependent train graphs; its OPTIMIZER is shape-dependent, here it is captured once, DESIGN
section 7). Val variants do get the shape-invariant buckets of ``@train`` (transfers, metrics,
BN inference parameters): the keys are shared with the train variants, so nothing is captured twice.

Runs after ``memplan-share-variants`` (it reads each variant's plan link). Diagnostics: no variant
links or graphs (run the earlier phases first).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from tr_mlir.dialects.arch import ModelOp
from tr_mlir.dialects.memplan import VARIANTS, AtlasOp, GraphId, GraphOp, ProgramOp, VariantOp, is_train_variant
from tr_mlir.passes._descriptors_program import fail, model_programs
from tr_mlir.passes.memplan_build_graph import INFER_GRAPH, TRAIN_GRAPH

SHAPE_INVARIANT_ID: tuple[int, int, int, int] = (0, 0, 0, 0)
"""The seed's ``kShapeInvariant``."""

TRAIN_STEP_GRAPHS: frozenset[GraphId] = frozenset({
    GraphId.FIRST_LAYER_FWD_A, GraphId.FIRST_LAYER_FWD_B, GraphId.DEEP_FWD_BWD,
    GraphId.FIRST_LAYER_BWD_A, GraphId.FIRST_LAYER_BWD_B, GraphId.OPTIMIZER,
})
"""Training-step graphs that validation variants never run (no atlas slot for ``val_*``)."""

Key = tuple[str, GraphId, tuple[int, int, int, int], str]


def shape_id(variant: VariantOp) -> tuple[int, int, int, int]:
    """A variant's ShapeId ``(N, H, W, C)`` (the seed's ``get_shape_id``; W is the variant's
    width, which a non-square input keeps in its aspect ratio)."""
    h, w = variant.hw
    return (variant.batch_size, h, w, variant.num_channels)


def build_atlas(model: ModelOp, program: ProgramOp) -> AtlasOp:
    """The ``memplan.atlas`` of ``program`` (see the module doc)."""
    graphs = {g.graph_name: g for g in program.graphs()}
    if TRAIN_GRAPH not in graphs or INFER_GRAPH not in graphs:
        fail(program, f"'memplan.program' op needs the graphs @{TRAIN_GRAPH} and @{INFER_GRAPH}; "
                      f"run memplan-build-graph first")
    variants = program.variants()
    if len(variants) != len(VARIANTS) or any(v.plan is None for v in variants):
        fail(program, "'memplan.program' op has variants without a plan link; run memplan-share-variants first")
    order: list[GraphOp] = [graphs[TRAIN_GRAPH], graphs[INFER_GRAPH]]
    buckets = [g.buckets() for g in order]
    base_plan = variants[0].plan.root_reference.data  # type: ignore[union-attr]
    keys: dict[tuple[str, GraphId, tuple[int, int, int, int]], int] = {}
    key_list: list[Key] = []
    slots: list[int] = []
    for v in variants:
        train_variant = is_train_variant(v.variant_name)
        for gid in GraphId:
            skip = (train_variant and gid.is_inference and not gid.shape_invariant) or (
                not train_variant and gid in TRAIN_STEP_GRAPHS)
            graph = None if skip else next((g for g, b in zip(order, buckets) if gid in b), None)
            if graph is None:
                slots.append(-1)
                continue
            if gid.shape_invariant:
                shape, plan = SHAPE_INVARIANT_ID, base_plan
            else:
                shape = shape_id(v)
                plan = v.plan.root_reference.data  # type: ignore[union-attr]
            key = (graph.graph_name, gid, shape)
            if key not in keys:
                keys[key] = len(key_list)
                key_list.append((graph.graph_name, gid, shape, plan))
            slots.append(keys[key])
    return AtlasOp(slots, key_list)


@dataclass(frozen=True)
class MemplanBuildAtlasPass(ModulePass):
    """The GraphAtlas of every program (see the module doc)."""

    name = "memplan-build-atlas"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for model, program in model_programs(op, self.name):
            assert program is not None
            atlas = build_atlas(model, program)
            for old in program.ops_of(AtlasOp):
                Rewriter.erase_op(old)
            Rewriter.insert_op(atlas, InsertPoint.at_end(program.body.block))
