"""Phase 5 (memplan-share-variants) and the GraphAtlas (memplan-build-atlas), facts sheet
sections 8.6 and 11."""

from __future__ import annotations

import pytest
from xdsl.parser import Parser
from xdsl.utils.exceptions import PassFailedException

from tr_mlir.compile import make_context
from tr_mlir.dialects.memplan import VARIANTS, AtlasOp, GraphId, GraphOp, ProgramOp
from tr_mlir.passes.arch_plan import ArchPlanPass
from tr_mlir.passes.memplan_build_atlas import SHAPE_INVARIANT_ID, TRAIN_STEP_GRAPHS, MemplanBuildAtlasPass
from tr_mlir.passes.memplan_build_graph import MemplanBuildGraphPass
from tr_mlir.passes.memplan_create_plans import MemplanCreatePlansPass
from tr_mlir.passes.memplan_derive_shapes import MemplanDeriveShapesPass
from tr_mlir.passes.memplan_max_slots import MemplanMaxSlotsPass
from tr_mlir.passes.memplan_share_variants import MemplanShareVariantsPass
from tr_mlir.zoo import MODELS


def _compiled(name: str = "resnet_tiny", **spec) -> ProgramOp:
    ctx = make_context()
    module = MODELS[name].emit()
    ArchPlanPass().apply(ctx, module)
    spec = {"batch_size": 4, "train_size": 10, "val_size": 8, **spec}
    for p in (MemplanDeriveShapesPass(**spec), MemplanMaxSlotsPass(), MemplanCreatePlansPass(),
              MemplanBuildGraphPass(), MemplanShareVariantsPass(), MemplanBuildAtlasPass()):
        p.apply(ctx, module)
    module.verify()
    return next(op for op in module.walk() if isinstance(op, ProgramOp))


def test_variants_share_the_graphs():
    program = _compiled()
    for v in program.variants():
        assert v.plan.root_reference.data == f"plan_{v.variant_name}"
        assert v.infer.root_reference.data == "infer"
        train = v.train.root_reference.data if v.train is not None else None
        assert train == ("train" if v.variant_name.startswith("train") else None)
    assert len(program.graphs()) == 2  # nothing cloned


def test_atlas_dedupes_by_graph_gid_and_shape():
    program = _compiled(train_res_end=4)  # resnet_tiny: 8x8 input; lowres at 4x4
    atlas = program.ops_of(AtlasOp)[0]
    keys = atlas.keys()
    assert len(set((g, gid, tuple(s)) for g, gid, s, _ in keys)) == len(keys)
    for gid in GraphId:
        slots = [atlas.slot(v, gid) for v in range(len(VARIANTS))]
        present = [s for s in slots if s >= 0]
        if gid.shape_invariant and present:
            # one key for every variant that has the bucket, captured once with the base plan
            assert len(set(present)) == 1
            g, _, shape, plan = keys[present[0]]
            assert tuple(shape) == SHAPE_INVARIANT_ID and plan == "plan_train_base"
    deep = [atlas.slot(v, GraphId.DEEP_FWD_BWD) for v in range(6)]
    # train_base 4x8x8, train_last 2x8x8, lowres 4x4x4, lowres_last 2x4x4: four keys; no val slot
    assert len(set(deep[:4])) == 4 and deep[4:] == [-1, -1]
    assert [tuple(keys[k][2]) for k in deep[:4]] == [(4, 8, 8, 1), (2, 8, 8, 1), (4, 4, 4, 1), (2, 4, 4, 1)]
    assert [keys[k][3] for k in deep[:4]] == [f"plan_{v}" for v in VARIANTS[:4]]
    # the last val batch is full (8 % 4 = 0): val_last reuses val_base's inference keys
    assert atlas.slot(4, GraphId.INF_MAIN_A) == atlas.slot(5, GraphId.INF_MAIN_A) >= 0
    assert keys[atlas.slot(4, GraphId.INF_MAIN_A)][0] == "infer"
    for v in range(4):
        assert atlas.slot(v, GraphId.INF_MAIN_A) == -1
    for gid in TRAIN_STEP_GRAPHS:
        assert atlas.slot(4, gid) == atlas.slot(5, gid) == -1
    # empty buckets have no slot anywhere (no EMA, no LARS with momentum)
    for gid in (GraphId.EMA_UPDATE, GraphId.INF_EMA_A, GraphId.LARS_FC_OPT, GraphId.SIMPLE_TASK_GRAPH):
        assert all(atlas.slot(v, gid) == -1 for v in range(6))


def test_equal_shapes_share_keys_across_variants():
    program = _compiled(train_size=8)  # last train batch full, lowres = base resolution
    atlas = program.ops_of(AtlasOp)[0]
    deep = {atlas.slot(v, GraphId.DEEP_FWD_BWD) for v in range(4)}
    assert len(deep) == 1


def test_memplan_round_trip_with_empty_graph():
    text = """
builtin.module {
  arch.model @t input(1, 1, 4) num_classes = 4 {
  ^bb0(%x: tensor<?x1x1x4xf32>):
    arch.output %x : tensor<?x1x1x4xf32>
  }
  memplan.program for @t {
    memplan.graph @train params = [] {
    }
  }
}
"""
    ctx = make_context()
    module = Parser(ctx, text).parse_module()
    module.verify()
    graph = next(op for op in module.walk() if isinstance(op, GraphOp))
    assert graph.buckets() == {}
    again = Parser(ctx, str(module)).parse_module()
    assert str(again) == str(module)


def test_atlas_needs_the_links():
    ctx = make_context()
    module = MODELS["mlp_digits"].emit()
    ArchPlanPass().apply(ctx, module)
    for p in (MemplanDeriveShapesPass(batch_size=2, train_size=4, val_size=4), MemplanMaxSlotsPass(),
              MemplanCreatePlansPass(), MemplanBuildGraphPass()):
        p.apply(ctx, module)
    with pytest.raises(PassFailedException, match="variants without a plan link; run memplan-share-variants"):
        MemplanBuildAtlasPass().apply(ctx, module)
