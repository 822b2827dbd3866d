"""The memplan dialect's Python side: slot sizes, layout, enums, builders and accessors.

Verifier diagnostics are pinned by lit_tests/memplan/dialect/invalid.mlir; here the helpers the
passes and the runtime use, and a text round trip of a program built in Python.
"""

import pytest
from xdsl.context import Context
from xdsl.dialects.builtin import Builtin, DictionaryAttr, IntegerAttr, ModuleOp, SymbolRefAttr, i64
from xdsl.parser import Parser
from xdsl.utils.exceptions import VerifyException

from tr_mlir.dialects.memplan import (
    NUM_GRAPH_IDS,
    NUM_REGIONS,
    VARIANTS,
    AtlasOp,
    DTensor,
    GraphId,
    GraphOp,
    MemRegion,
    Memplan,
    Node,
    OptimizerKind,
    PlanOp,
    ProgramOp,
    SpecOp,
    Target,
    VariantOp,
    channel_align,
    linear_layout,
    region_enabled,
    slot_bytes,
)


def test_region_table_matches_the_seed():
    assert NUM_REGIONS == 68
    assert MemRegion.W_BN_BIAS + 1 == MemRegion.W_BN_WEIGHT and MemRegion.W_BN_WEIGHT + 1 == MemRegion.W_FC_BIAS
    assert MemRegion.G_DEEP_CONV == 29 and MemRegion.R_RESULT == 30 and MemRegion.R_RESULT_ACCUMULATED == 67


def test_slot_bytes_examples_of_the_facts_sheet():
    # An FC weight 512 x 784: 1,606,144 B in fp32, 803,072 B in fp16 (same element count).
    assert slot_bytes((512, 1, 1, 784), "f32", MemRegion.W_FC_WEIGHT, Target.CPU) == 1_606_144
    assert slot_bytes((512, 1, 1, 784), "f16", MemRegion.A_FC_WEIGHT, Target.CPU) == 803_072
    # A scalar costs 512 B (fp32/int32) or 256 B (fp16/int8).
    assert slot_bytes((1, 1, 1, 1), "f32", MemRegion.S_SCALAR_FP32, Target.CPU) == 512
    assert slot_bytes((1, 1, 1, 1), "i32", MemRegion.S_SCALAR_INT32, Target.CPU) == 512
    assert slot_bytes((1, 1, 1, 1), "i8", MemRegion.S_MASK, Target.CPU) == 256


def test_channel_padding_depends_on_target():
    assert channel_align("f16", MemRegion.F_FEATURE_FP16, Target.CUDA) == 8
    assert channel_align("f16", MemRegion.F_FEATURE_FP16, Target.CPU) == 1
    assert channel_align("i8", MemRegion.S_MASK, Target.CUDA) == 8
    assert channel_align("f16", MemRegion.I_A_DATA, Target.CPU) == 4
    assert channel_align("f32", MemRegion.F_FEATURE_FP32, Target.CUDA) == 1
    # 3 fp16 channels pad to 8 on CUDA: 2*8*16*16 + 16 bytes, rounded up.
    assert slot_bytes((2, 16, 16, 3), "f16", MemRegion.F_FEATURE_FP16, Target.CUDA) == 8448
    assert slot_bytes((2, 16, 16, 3), "f16", MemRegion.F_FEATURE_FP16, Target.CPU) == 3328


def test_region_enabled_follows_amp_and_optimizer():
    sgd, adam = OptimizerKind.SGD, OptimizerKind.ADAM
    assert not region_enabled(MemRegion.A_DEEP_CONV, amp=False, optimizer=sgd)
    assert region_enabled(MemRegion.A_DEEP_CONV, amp=True, optimizer=sgd)
    assert region_enabled(MemRegion.G_DEEP_CONV_FP16, amp=True, optimizer=sgd)
    assert not region_enabled(MemRegion.F_FEATURE_FP32, amp=True, optimizer=sgd)
    assert not region_enabled(MemRegion.M_DEEP_CONV, amp=False, optimizer=sgd)
    assert region_enabled(MemRegion.V_FC_BIAS, amp=False, optimizer=adam)
    assert not region_enabled(MemRegion.N_FC_WEIGHT, amp=False, optimizer=adam)
    assert not region_enabled(MemRegion.E_DEEP_CONV, amp=True, optimizer=adam)


def test_linear_layout_is_the_seeds_finalize():
    regions = [MemRegion.F_FEATURE_FP32, MemRegion.W_DEEP_CONV, MemRegion.W_DEEP_CONV, MemRegion.B_PREV_MEAN]
    offsets, bases, sizes = linear_layout(regions, [512, 1024, 256, 256])
    # Regions in address order, tensors of a region in list order.
    assert offsets == [1536, 256, 1280, 0]
    assert bases[MemRegion.W_DEEP_CONV] == 256 and sizes[MemRegion.W_DEEP_CONV] == 1280
    assert bases[-1] + sizes[-1] == 2048


def test_optimizer_kind_spellings():
    assert OptimizerKind.parse("lars-nesterov") is OptimizerKind.LARS_NESTEROV
    assert OptimizerKind.parse("adamw") is OptimizerKind.ADAMW
    assert OptimizerKind.SGD.uses_momentum is False and OptimizerKind.LARS.uses_momentum
    with pytest.raises(ValueError, match="unknown optimizer 'rmsprop', expected one of sgd, momentum"):
        OptimizerKind.parse("rmsprop")


def test_graph_ids():
    assert NUM_GRAPH_IDS == 33
    assert GraphId.UPDATE_BN_INF_PARAMS.index == 32
    # The seed's 11 shape-dependent ids minus OPTIMIZER (its content does not depend on shapes).
    assert sum(not g.shape_invariant for g in GraphId) == 10
    assert GraphId.OPTIMIZER.shape_invariant and not GraphId.DEEP_FWD_BWD.shape_invariant


def _program() -> ProgramOp:
    regions = [MemRegion.W_FC_WEIGHT, MemRegion.G_FC_WEIGHT, MemRegion.F_FEATURE_FP32]
    shapes = [(10, 1, 1, 4), (10, 1, 1, 4), (2, 1, 1, 10)]
    slots = [slot_bytes(s, "f32", r, Target.CPU) for s, r in zip(shapes, regions)]
    offsets, bases, sizes = linear_layout(regions, slots)
    tensors = [DTensor(i, f"t{i}", r, "f32", s, sl, o, "zeros", 0.0)
               for i, (r, s, sl, o) in enumerate(zip(regions, shapes, slots, offsets))]
    plans = [PlanOp(f"plan_{v}", Target.CPU, region_bases=bases, region_sizes=sizes, tensors=tensors)
             for v in VARIANTS]
    variants = []
    for v in VARIANTS:
        op = VariantOp(v, batch=2, res=8, max_res=8, channels=4, amp=False)
        op.properties["plan"] = SymbolRefAttr(f"plan_{v}")
        variants.append(op)
    graph = GraphOp("train", {
        GraphId.DEEP_FWD_BWD: [Node("FC_FP32_FWD", (2, 0), (2,), param=0)],
        GraphId.ZERO_GRAD: [Node("RANGE_CLEAR", out_ranges=((MemRegion.G_BN_BIAS, MemRegion.G_DEEP_CONV_FP16),))],
    }, [DictionaryAttr({"out_features": IntegerAttr(10, i64)})])
    slot_table = [-1] * (6 * 33)
    slot_table[GraphId.DEEP_FWD_BWD.index] = 0
    atlas = AtlasOp(slot_table, [("train", GraphId.DEEP_FWD_BWD, (2, 8, 8, 4), "plan_train_base")])
    spec = SpecOp(batch_size=2, train_size=8, val_size=4, train_res=8, train_res_end=8, val_res=8)
    return ProgramOp("net", [spec, *variants, *plans, graph, atlas])


def test_program_builds_verifies_and_round_trips():
    module = ModuleOp([_program()])
    module.verify()
    ctx = Context()
    ctx.load_dialect(Builtin)
    ctx.load_dialect(Memplan)
    parsed = Parser(ctx, str(module)).parse_module()
    parsed.verify()
    assert parsed.is_structurally_equivalent(module)


def test_accessors():
    program = _program()
    plan = program.plans()[0]
    rows = list(plan.tensors())
    assert [t.region for t in rows] == [MemRegion.W_FC_WEIGHT, MemRegion.G_FC_WEIGHT, MemRegion.F_FEATURE_FP32]
    assert plan.span(MemRegion.W_FC_WEIGHT, MemRegion.W_DEEP_CONV) == (0, 512)
    assert len(plan) == 3 and plan.size == 1536
    graph = program.graphs()[0]
    (node,) = graph.nodes(GraphId.DEEP_FWD_BWD)
    assert node.inputs == (2, 0) and node.outputs == (2,) and not node.is_range
    (clear,) = graph.nodes(GraphId.ZERO_GRAD)
    assert clear.is_range and clear.out_ranges == ((MemRegion.G_BN_BIAS, MemRegion.G_DEEP_CONV_FP16),)
    assert graph.nodes(GraphId.OPTIMIZER) == []
    atlas = program.ops_of(AtlasOp)[0]
    assert atlas.slot(0, GraphId.DEEP_FWD_BWD) == 0 and atlas.slot(1, GraphId.DEEP_FWD_BWD) == -1
    assert atlas.keys() == [("train", GraphId.DEEP_FWD_BWD, (2, 8, 8, 4), "plan_train_base")]
    assert program.lookup("plan_val_last") is program.plans()[-1]


def test_a_val_variant_refuses_a_train_graph():
    program = _program()
    program.variants()[4].properties["train"] = SymbolRefAttr("train")
    with pytest.raises(VerifyException, match="expected no train graph on validation variant 'val_base'"):
        ModuleOp([program]).verify()
