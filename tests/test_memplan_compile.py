"""The compiler end to end: the ``memplan-compile`` / ``tr-compile`` pipelines, the Python API
``tr_mlir.compile.compile``, every zoo model, every optimizer, text round trips, the
``memplan-summary`` printer, and the done-when checks of issue 4 (fused AMP ResNet-50)."""

from __future__ import annotations

import io
import re
import time

import pytest
from xdsl.dialects.builtin import ModuleOp
from xdsl.parser import Parser
from xdsl.utils.exceptions import DiagnosticException

from tr_mlir.blueprint import BluePrintError, BluePrintTypeError
from tr_mlir.compile import compile, make_context
from tr_mlir.dialects.memplan import VARIANTS, AtlasOp, GraphId, ProgramOp
from tr_mlir.memplan_summary import MemplanSummaryError, print_memplan_summary
from tr_mlir.passes.tr_compile import TrCompilePass
from tr_mlir.zoo import MODELS

LARGE = ("resnet101", "resnet152")
SMALL = ("mlp_digits", "lenet5", "resnet_tiny", "resnet8_cifar", "depthwise_tiny")
OPTIMIZERS = ("sgd", "momentum", "nesterov", "adam", "adamw", "lars", "lars-nesterov")
MODES = {"fp32_unfused": {"amp": False, "fuse": False}, "amp_fused": {"amp": True, "fuse": True}}


def _compile_zoo(name: str, *, amp: bool, fuse: bool, optimizer: str = "momentum", batch: int = 8,
                 **spec) -> ModuleOp:
    model = MODELS[name]
    return compile(model.blueprint(), model.input_shape, num_classes=model.num_classes, batch_size=batch,
                   train_size=100, val_size=30, amp=amp, fuse=fuse, optimizer=optimizer, name=name, **spec)


def _program(module: ModuleOp) -> ProgramOp:
    return next(op for op in module.walk() if isinstance(op, ProgramOp))


def _check_program(module: ModuleOp) -> ProgramOp:
    module.verify()  # the memplan verifiers: plans, graphs, links, atlas
    program = _program(module)
    assert [v.variant_name for v in program.variants()] == list(VARIANTS)
    assert len(program.plans()) == 6 and len(program.graphs()) == 2 and program.ops_of(AtlasOp)
    return program


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("name", [n for n in MODELS if n not in LARGE])
def test_every_zoo_model_compiles(name, mode):
    _check_program(_compile_zoo(name, **MODES[mode]))


@pytest.mark.slow
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("name", LARGE)
def test_largest_models_compile(name, mode):
    _check_program(_compile_zoo(name, **MODES[mode], batch=32))


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("optimizer", OPTIMIZERS)
@pytest.mark.parametrize("name", ["mlp_digits", "resnet_tiny"])
def test_every_optimizer_on_the_small_models(name, optimizer, mode):
    program = _check_program(_compile_zoo(name, **MODES[mode], optimizer=optimizer))
    names = {t.name for t in program.plans()[0].tensors()}
    assert any(n.endswith(".m") for n in names) == (optimizer != "sgd")
    assert any(n.endswith(".v") for n in names) == optimizer.startswith("adam")
    lars_graphs = {GraphId.LARS_FC_OPT, GraphId.LARS_FIRST_CONV_OPT, GraphId.LARS_DEEP_CONV_OPT}
    train = {g.graph_name: g for g in program.graphs()}["train"]
    assert bool(lars_graphs & set(train.buckets())) == optimizer.startswith("lars")


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("name", SMALL)
def test_small_programs_round_trip_through_text(name, mode):
    module = _compile_zoo(name, **MODES[mode], optimizer="adam")
    text = str(module)
    again = Parser(make_context(), text).parse_module()
    again.verify()
    assert str(again) == text


def test_api_equals_the_tr_compile_pipeline():
    model = MODELS["resnet8_cifar"]
    api = compile(model.blueprint(), model.input_shape, num_classes=10, batch_size=16, train_size=1000,
                  val_size=100, amp=True, fuse=True, optimizer="nesterov", target="cuda", train_res_end=16,
                  world_size=2, name="resnet8_cifar")
    module = model.emit(amp=True, fuse=True)
    TrCompilePass(batch_size=16, train_size=1000, val_size=100, optimizer="nesterov", target="cuda",
                  train_res_end=16, world_size=2).apply(make_context(), module)
    assert str(api) == str(module)
    spec = _program(api).spec
    assert (spec.value("world_size"), spec.value("train_res_end"), spec.target_kind.value) == (2, 16, "cuda")


def test_api_errors_are_diagnostics():
    model = MODELS["mlp_digits"]
    with pytest.raises(DiagnosticException, match="unknown optimizer 'rmsprop'"):
        compile(model.blueprint(), (8, 8, 1), num_classes=10, batch_size=4, train_size=8, val_size=8,
                optimizer="rmsprop")
    with pytest.raises(DiagnosticException, match="expected batch_size > 0, got 0"):
        compile(model.blueprint(), (8, 8, 1), num_classes=10, batch_size=0, train_size=8, val_size=8)


@pytest.mark.parametrize("kwargs, message", [
    ({"batch_size": "4"}, "compile: batch_size must be an int, got str '4'"),
    ({"batch_size": 4.0}, "compile: batch_size must be an int, got float 4.0"),
    ({"train_size": True}, "compile: train_size must be an int, got bool True"),
    ({"world_size": None}, "compile: world_size must be an int, got NoneType None"),
    ({"val_res": "8"}, "compile: val_res must be an int, got str '8'"),
    ({"optimizer": 3}, "compile: optimizer must be a str, got int 3"),
    ({"cbrp": 1}, "compile: cbrp must be True or False, got int 1"),
])
def test_api_argument_types(kwargs, message):
    """Wrong Python types used to surface as TypeError/AttributeError from inside a pass."""
    model = MODELS["mlp_digits"]
    args = {"num_classes": 10, "batch_size": 4, "train_size": 8, "val_size": 8, **kwargs}
    with pytest.raises(BluePrintTypeError) as info:
        compile(model.blueprint(), (8, 8, 1), **args)
    assert str(info.value) == message


def test_spec_values_beyond_64_bits_are_diagnostics():
    module = MODELS["mlp_digits"].emit()
    with pytest.raises(DiagnosticException, match=r"memplan-select-conv-algo: batch_size = 10{23} does not fit in 64 bits"):
        TrCompilePass(batch_size=10**23, train_size=8, val_size=8).apply(make_context(), module)
    with pytest.raises(BluePrintError, match=r"compile: batch_size must fit in 64 bits"):
        compile(MODELS["mlp_digits"].blueprint(), (8, 8, 1), num_classes=10, batch_size=10**23, train_size=8,
                val_size=8)


@pytest.mark.parametrize("batch, message", [
    # each used to end in xDSL's "Integer value ... is out of range for type i64" (an internal error)
    (10**17, r"'memplan.descs' op tensor '\w+' of layer 0 needs \d+ bytes, more than a memory plan can address"),
    (10**16, r"'memplan.program' op needs an arena of \d+ bytes, more than a memory plan can address"),
])
def test_absurd_batch_sizes_are_diagnostics(batch, message):
    model = MODELS["mlp_digits"]
    with pytest.raises(DiagnosticException, match=message):
        compile(model.blueprint(), model.input_shape, num_classes=model.num_classes, batch_size=batch,
                train_size=batch, val_size=8)


def test_summary_prints_one_table_per_variant():
    module = _compile_zoo("resnet_tiny", amp=True, fuse=True)
    out = io.StringIO()
    print_memplan_summary(module, out)
    text = out.getvalue()
    program = _program(module)
    base = program.plans()[0]
    assert text.splitlines()[0].startswith(
        f"memplan.program for @resnet_tiny: target cpu, optimizer momentum, amp, arena {base.size:,} bytes, "
        f"{len(base)} DTensors, 2 graphs")
    for v in VARIANTS:
        assert f"\nvariant {v}: " in text
    deep = len({g.graph_name: g for g in program.graphs()}["train"].nodes(GraphId.DEEP_FWD_BWD))
    rows = re.findall(r"^  deep_fwd_bwd +@train +(\d+) +(\d+)$", text, re.MULTILINE)
    assert len(rows) == 4 and {int(n) for n, _ in rows} == {deep}  # the four train variants
    with pytest.raises(MemplanSummaryError, match="has no 'memplan.program'"):
        print_memplan_summary(MODELS["mlp"].emit(), io.StringIO())


# --------------------------------------------------------------------------------------
# Done-when checks of issue 4 (ResNet-50, fused, AMP, batch 256: the command line)
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def resnet50() -> tuple[ModuleOp, float]:
    start = time.perf_counter()
    module = MODELS["resnet50"].emit()
    TrCompilePass(fuse=True, amp=True, num_classes=1000, batch_size=256, train_size=1281167,
                  val_size=50000).apply(make_context(), module)
    module.verify()
    return module, time.perf_counter() - start


def test_resnet50_compiles_in_seconds(resnet50):
    _module, seconds = resnet50
    print(f"in-process tr-compile of fused AMP ResNet-50 (six variants): {seconds:.2f} s")
    assert seconds < 30


def test_resnet50_parses_back_and_verifies(resnet50):
    module, _ = resnet50
    text = str(module)
    again = Parser(make_context(), text).parse_module()
    again.verify()
    assert str(again) == text


def test_resnet50_plans_share_ids_and_offsets(resnet50):
    program = _program(resnet50[0])
    plans = program.plans()
    base = plans[0]
    for plan in plans[1:]:
        for column in ("ids", "names", "slots", "offsets", "region_bases", "region_sizes", "total_bytes"):
            assert plan.properties[column] == base.properties[column], (plan.plan_name, column)
    batches = {p.plan_name: p.by_id()[1].shape[0] for p in plans}  # data_a is {B, maxres, maxres, C}
    assert batches == {"plan_train_base": 256, "plan_train_last": 143, "plan_train_lowres": 256,
                       "plan_train_lowres_last": 143, "plan_val_base": 256, "plan_val_last": 80}


def test_resnet50_deep_fwd_bwd_identical_for_train_base_and_train_last(resnet50):
    program = _program(resnet50[0])
    atlas = program.ops_of(AtlasOp)[0]
    keys = atlas.keys()
    graphs = {g.graph_name: g for g in program.graphs()}
    v = {name: i for i, name in enumerate(VARIANTS)}
    kb, kl = atlas.slot(v["train_base"], GraphId.DEEP_FWD_BWD), atlas.slot(v["train_last"], GraphId.DEEP_FWD_BWD)
    assert kb != kl  # captured per shape (batch 256 vs 143) ...
    assert keys[kb][0] == keys[kl][0] == "train"  # ... from one graph:
    variants = program.variants()
    assert variants[v["train_base"]].train == variants[v["train_last"]].train
    base_nodes = graphs[keys[kb][0]].nodes(GraphId.DEEP_FWD_BWD)
    # a real deep graph (232 nodes: the BN + ReLU pairs and joins each run as one epilogue node)
    assert base_nodes == graphs[keys[kl][0]].nodes(GraphId.DEEP_FWD_BWD) and len(base_nodes) > 200


def test_resnet50_atlas_dedupes_shape_independent_graphs(resnet50):
    program = _program(resnet50[0])
    atlas = program.ops_of(AtlasOp)[0]
    keys = atlas.keys()
    graphs = program.graphs()
    shared = 0
    for gid in GraphId:
        slots = [atlas.slot(i, gid) for i in range(len(VARIANTS))]
        present = {s for s in slots if s >= 0}
        if gid.shape_invariant and present:
            assert len(present) == 1 and tuple(keys[present.pop()][2]) == (0, 0, 0, 0)
            shared += 1
    # every non-empty shape-invariant bucket has exactly one key for all variants
    assert shared == sum(1 for gid in GraphId if gid.shape_invariant and any(gid in g.buckets() for g in graphs))
    assert shared >= 17  # zero_grad is empty: memplan-narrow-grad-clear drops the clear
    assert GraphId.ZERO_GRAD not in next(g for g in graphs if g.graph_name == "train").buckets()
    # train_lowres == train_base (no resolution schedule): its shape-dependent slots reuse base's keys
    assert atlas.slot(2, GraphId.DEEP_FWD_BWD) == atlas.slot(0, GraphId.DEEP_FWD_BWD)
    # 6 variants x 33 GraphIds, far fewer captures
    assert len(keys) < sum(1 for i in range(6) for g in GraphId if atlas.slot(i, g) >= 0) / 3
