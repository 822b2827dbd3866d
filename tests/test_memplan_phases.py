"""Compiler phases 1-3 (memplan-derive-shapes, memplan-max-slots, memplan-create-plans) and the
layer descriptors, on small hand-written flat arch models."""

import dataclasses

import pytest
from xdsl.dialects.builtin import ModuleOp
from xdsl.parser import Parser
from xdsl.utils.exceptions import PassFailedException

from tr_mlir.compile import make_context
from tr_mlir.dialects import arch
from tr_mlir.dialects.memplan import VARIANTS, MemRegion, ProgramOp
from tr_mlir.passes._descriptors import DESCRIPTORS, layer_ctx
from tr_mlir.passes.memplan_create_plans import MemplanCreatePlansPass
from tr_mlir.passes.memplan_derive_shapes import MemplanDeriveShapesPass, last_batch
from tr_mlir.passes.memplan_max_slots import MemplanMaxSlotsPass

MLP = """
arch.model @mlp input(28, 28, 1) num_classes = 10 first_layer = 0 {
^bb0(%x: tensor<?x28x28x1xf32>):
  %0 = arch.flatten %x : tensor<?x28x28x1xf32> -> tensor<?x1x1x784xf32>
  %1 = arch.fc %0 out_features = 32 bias : tensor<?x1x1x784xf32> -> tensor<?x1x1x32xf32>
  %2 = arch.relu %1 : tensor<?x1x1x32xf32> -> tensor<?x1x1x32xf32>
  %3 = arch.fc %2 out_features = 10 bias : tensor<?x1x1x32xf32> -> tensor<?x1x1x10xf32>
  %4 = arch.softmax_ce %3 num_classes = 10 : tensor<?x1x1x10xf32> -> tensor<?x1x1x10xf32>
  arch.output %4 : tensor<?x1x1x10xf32>
}
"""

RESIDUAL = """
arch.model @res input(8, 8, 8) num_classes = 4 {
^bb0(%x: tensor<?x8x8x8xf32>):
  %0 = arch.conv %x out_ch = 8 k = 3 p = 1 : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %1 = arch.relu %0 : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %2 = arch.conv %1 out_ch = 8 k = 3 p = 1 : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %3 = arch.identity %1 : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %4 = arch.add %3, %2 : tensor<?x8x8x8xf32>, tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %5 = arch.tanh %4 : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %6 = arch.gap %5 : tensor<?x8x8x8xf32> -> tensor<?x1x1x8xf32>
  %7 = arch.fc %6 out_features = 4 : tensor<?x1x1x8xf32> -> tensor<?x1x1x4xf32>
  %8 = arch.softmax_ce %7 num_classes = 4 : tensor<?x1x1x4xf32> -> tensor<?x1x1x4xf32>
  arch.output %8 : tensor<?x1x1x4xf32>
}
"""


def _run(text: str, optimizer: str = "momentum", **spec) -> ProgramOp:
    ctx = make_context()
    module = Parser(ctx, text).parse_module()
    spec = {"batch_size": 4, "train_size": 10, "val_size": 5, **spec}
    MemplanDeriveShapesPass(**spec).apply(ctx, module)
    MemplanMaxSlotsPass().apply(ctx, module)
    MemplanCreatePlansPass(optimizer=optimizer).apply(ctx, module)
    module.verify()
    return next(op for op in module.walk() if isinstance(op, ProgramOp))


def test_every_flat_layer_op_has_a_descriptor():
    missing = [cls.name for cls in arch.layer_ops() if cls is not arch.BnOp and cls not in DESCRIPTORS]
    assert missing == []


def test_last_batch_rule():
    assert last_batch(10, 1, 4) == 2
    assert last_batch(8, 1, 4) == 4
    assert last_batch(50000, 8, 256) == 6250 % 256
    assert last_batch(11, 2, 3) == 3  # ceil(11/2) = 6, 6 % 3 = 0 -> the full batch


def test_mlp_variants_and_plans():
    program = _run(MLP, optimizer="adamw")
    assert [(v.variant_name, v.batch_size) for v in program.variants()] == [
        ("train_base", 4), ("train_last", 2), ("train_lowres", 4), ("train_lowres_last", 2),
        ("val_base", 4), ("val_last", 1)]
    plans = program.plans()
    assert [p.plan_name for p in plans] == [f"plan_{v}" for v in VARIANTS]
    base = plans[0].by_id()
    names = [base[i].name for i in range(len(base))]
    assert names[:18] == ["label_a", "data_a", "label_b", "data_b", "label_smce", "has_nan", "lr", "scaling",
                          "label_smoothing", "loss", "top1", "top5", "local_batch_size",
                          "last_train_batch_size", "last_val_batch_size", "accum_loss", "accum_top1",
                          "accum_top5"]
    assert names[18:25] == ["beta", "wd", "beta2", "eps", "step", "bias_corr1", "bias_corr2"]
    assert "l1.fc_weight.m" in names and "l1.fc_weight.v" in names and "l3.fc_bias.v" in names
    fc_w = base[names.index("l1.fc_weight")]
    assert fc_w.shape == (32, 1, 1, 784) and fc_w.slot == 100864 and fc_w.init == "kaiming_uniform"
    # fp32 plan: the AMP copies are zero-byte placeholders.
    assert base[names.index("l1.fc_amp_w_fp16")].slot == 0
    # Identical ids, slots and offsets; shapes follow each variant's batch.
    last = plans[5].by_id()
    assert all(last[i].offset == base[i].offset and last[i].slot == base[i].slot for i in base)
    assert last[names.index("l2.relu_output")].shape == (1, 1, 1, 32)
    assert base[names.index("data_a")].shape == (4, 28, 28, 1)
    assert base[names.index("scaling")].init_value == 1.0


def test_sgd_keeps_weight_decay_and_lars_gets_one_partial_buffer_per_family():
    names = [t.name for t in _run(MLP, optimizer="sgd").plans()[0].tensors()]
    assert "wd" in names and "beta" not in names and not any(n.endswith(".m") for n in names)
    names = [t.name for t in _run(MLP, optimizer="lars-nesterov").plans()[0].tensors()]
    assert names.count("lars_partial_fc_weight") == 1
    assert "l1.fc_weight.n" in names and "l1.fc_bias.n" not in names and "tc" in names


def test_residual_gradient_slots_and_workspace():
    program = _run(RESIDUAL)
    descs = {d.layer_index: d.tensor_names for d in program.descs()}
    # relu output feeds the conv and the identity shortcut: a gradient slot plus a partial slot.
    assert descs[1][-2:] == ("relu_output_grad", "relu_output_grad_part")
    # tanh recomputes f'(x) from its input (its kernels read dY and X): no gradient slot of its own.
    assert descs[5] == ("tanh_output",)
    assert "relu_output_grad" not in descs[0]
    names = [t.name for t in program.plans()[0].tensors()]
    # one shared im2col workspace for both 3x3 convs (planned from the conv kernel's rule)
    assert names.count("ws_col") == 1
    assert "l0.conv_weight" in names and "l2.conv_weight" in names


def test_a_descriptor_whose_backward_reads_its_output_gets_a_gradient_slot(monkeypatch):
    tanh = DESCRIPTORS[arch.TanhOp]
    monkeypatch.setitem(DESCRIPTORS, arch.TanhOp, dataclasses.replace(tanh, bwd_reads_output=True))
    descs = {d.layer_index: d.tensor_names for d in _run(RESIDUAL).descs()}
    assert descs[5] == ("tanh_output", "tanh_output_grad")


def test_lowres_variant_keeps_parameter_shapes_or_says_why():
    program = _run(RESIDUAL, train_res_end=4)
    assert program.variants()[2].resolution == 4
    descs = program.descs()[0]
    assert descs.shape(2, descs.tensor_names.index("conv_output")) == (4, 4, 4, 8)
    with pytest.raises(PassFailedException, match="tensor 'fc_weight': parameter shape differs across "
                                                  r"variants: \[32, 1, 1, 784\] in train_base, "
                                                  r"\[32, 1, 1, 196\] in train_lowres"):
        _run(MLP, train_res_end=14)


def test_diagnostics():
    bad_first = MLP.replace("%0 = arch.flatten %x", "%0 = arch.relu %x").replace(
        "tensor<?x28x28x1xf32> -> tensor<?x1x1x784xf32>", "tensor<?x28x28x1xf32> -> tensor<?x28x28x1xf32>", 1)
    bad_first = bad_first.replace("%1 = arch.fc %0", "%9 = arch.flatten %0 : tensor<?x28x28x1xf32> -> "
                                  "tensor<?x1x1x784xf32>\n  %1 = arch.fc %9")
    with pytest.raises(PassFailedException, match="'arch.relu' op cannot be the first layer"):
        _run(bad_first)
    with pytest.raises(PassFailedException, match="needs the option val_size"):
        ctx = make_context()
        MemplanDeriveShapesPass(batch_size=2, train_size=4).apply(ctx, Parser(ctx, MLP).parse_module())
    with pytest.raises(PassFailedException, match="expected batch_size > 0, got 0"):
        _run(MLP, batch_size=0)
    with pytest.raises(PassFailedException, match="unknown optimizer 'rmsprop'"):
        _run(MLP, optimizer="rmsprop")


def test_bn_eps_must_agree_and_amp_bn_needs_8_channels():
    text = """
arch.model @bn input(4, 4, 8) num_classes = 4 {
^bb0(%x: tensor<?x4x4x8xf32>):
  %0 = arch.conv %x out_ch = 8 k = 1 : tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
  %1 = arch.bn2d %0 : tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
  %2 = arch.bn2d %1 eps = 1.0e-03 : tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>
  %3 = arch.gap %2 : tensor<?x4x4x8xf32> -> tensor<?x1x1x8xf32>
  %4 = arch.fc %3 out_features = 4 : tensor<?x1x1x8xf32> -> tensor<?x1x1x4xf32>
  %5 = arch.softmax_ce %4 num_classes = 4 : tensor<?x1x1x4xf32> -> tensor<?x1x1x4xf32>
  arch.output %5 : tensor<?x1x1x4xf32>
}
"""
    with pytest.raises(PassFailedException, match="all batch norms must share eps and momentum"):
        _run(text)
    amp = text.replace(" eps = 1.0e-03", "").replace("num_classes = 4 {", "num_classes = 4 amp {")
    amp = amp.replace("out_ch = 8 k = 1 : tensor<?x4x4x8xf32> -> tensor<?x4x4x8xf32>",
                      "out_ch = 4 k = 1 : tensor<?x4x4x8xf32> -> tensor<?x4x4x4xf32>")
    amp = amp.replace("%1 = arch.bn2d %0 : tensor<?x4x4x8xf32>", "%1 = arch.bn2d %0 : tensor<?x4x4x4xf32>")
    with pytest.raises(PassFailedException, match="BN AMP requires input channels to be a multiple of 8, got 4"):
        _run(amp)


def _block_plan(cls, hwc, out_hwc, **params):
    model = arch.ModelOp("m", hwc, 10)
    op = cls(model.input_value, **params)
    return DESCRIPTORS[cls].build(layer_ctx(op, ((2, *hwc),), (2, *out_hwc), amp=False, first=False))


BLOCKS = [
    (arch.BottleneckIdentityOp, (8, 8, 32), (8, 8, 32), {"bottleneck_ch": 8}),
    (arch.BottleneckProjectionOp, (8, 8, 16), (4, 4, 32), {"bottleneck_ch": 8, "out_ch": 32, "stride": 2}),
    (arch.BasicBlockIdentityOp, (8, 8, 16), (8, 8, 16), {"out_ch": 16}),
    (arch.BasicBlockProjectionOp, (8, 8, 16), (4, 4, 32), {"out_ch": 32, "stride": 2}),
    (arch.InvResidualIdentityOp, (8, 8, 16), (8, 8, 16), {"expand_ch": 96, "out_ch": 16}),
    (arch.InvResidualNoShortcutOp, (8, 8, 16), (4, 4, 24), {"expand_ch": 96, "out_ch": 24, "stride": 2}),
]


@pytest.mark.parametrize("cls,hwc,out_hwc,params", BLOCKS, ids=[b[0].name for b in BLOCKS])
def test_fused_blocks_are_real(cls, hwc, out_hwc, params):
    lp = _block_plan(cls, hwc, out_hwc, **params)
    names = lp.names()
    assert len(names) == len(set(names))
    out = DESCRIPTORS[cls].output
    assert next(t for t in lp.tensors if t.name == out).shape == (2, *out_hwc)
    # Every operand is a tensor of the layer, a $-symbol or a baseline scalar.
    for node in lp.forward + lp.backward + lp.inference:
        for operand in node.inputs + node.outputs:
            assert operand in names or operand[0] in "$@", (node, operand)
    # Every read of the block input precedes the first write of its gradient.
    reads = [i for i, n in enumerate(lp.backward) if "$x" in n.inputs]
    writes = [i for i, n in enumerate(lp.backward) if "$dx" in n.outputs]
    assert reads and writes and max(reads) <= min(writes)
    # The depthwise conv of the inverted residuals is grouped: weights {K, 3, 3, 1}.
    if "expand_ch" in params:
        w = next(t for t in lp.tensors if t.name == "c2_conv_weight")
        assert w.shape == (params["expand_ch"], 3, 3, 1)
    assert all(t.region in (MemRegion.W_DEEP_CONV,) for t in lp.tensors if t.name.endswith("conv_weight"))


def test_module_without_model_fails():
    ctx = make_context()
    with pytest.raises(PassFailedException, match="expected an 'arch.model'"):
        MemplanMaxSlotsPass().apply(ctx, ModuleOp([]))


@pytest.mark.parametrize("res", [dict(train_res_end=12, val_res=6), dict(train_res_end=4, val_res=12)])
def test_every_phase_takes_all_six_variants(res):
    """Issue 15, item 8: variants that differ in batch (last batches 2 and 1) and in resolution
    both ways (lowres and val above and below train_res). Phase 2's slot of every DTensor is the
    largest of its six shapes (the seed's max over variants), some of them set by a variant other
    than train_base; phase 3's plans hold each variant's own shapes in those slots; the runtime
    trains and evaluates at every resolution without a slot overflow."""
    import numpy as np

    from tr_mlir.dialects.memplan import slot_bytes
    from tr_mlir.lowering.executable import Executable
    from tr_mlir.lowering.runner import Runner

    program = _run(RESIDUAL, **res, val_size=9)
    variants = program.variants()
    assert [v.batch_size for v in variants] == [4, 2, 4, 2, 4, 1]
    assert {v.resolution for v in variants} == {8, res["train_res_end"], res["val_res"]}
    set_by_other = 0
    for descs in program.descs():
        for t, name in enumerate(descs.tensor_names):
            region = descs.tensor_regions[t]
            per_variant = [slot_bytes(descs.shape(v, t), descs.tensor_dtypes[t], region, program.spec.target_kind)
                           for v in range(len(VARIANTS))]
            assert descs.slot_bytes[t] in (0, max(per_variant)), (descs.layer_index, name)
            set_by_other += descs.slot_bytes[t] > per_variant[0]
    assert set_by_other > 0
    for v, plan in enumerate(program.plans()):
        for tensor in plan.tensors():
            if tensor.name.startswith("l1.conv_output"):
                assert tensor.shape[1] == variants[v].resolution

    # the whole pipeline and the runtime at these variants
    from tr_mlir.passes.memplan_build_atlas import MemplanBuildAtlasPass
    from tr_mlir.passes.memplan_build_graph import MemplanBuildGraphPass
    from tr_mlir.passes.memplan_share_variants import MemplanShareVariantsPass
    from tr_mlir.passes.memplan_assign_offsets import MemplanAssignOffsetsPass

    module = program.parent_op()
    for p in (MemplanBuildGraphPass(), MemplanShareVariantsPass(), MemplanBuildAtlasPass(), MemplanAssignOffsetsPass()):
        p.apply(make_context(), module)
    module.verify()
    exe = Executable(module, seed=0)
    runner = Runner(exe)
    rng = np.random.default_rng(0)
    for name, value in dict(lr=0.01, beta=0.9, wd=1e-4).items():
        exe.set_scalar(name, value)
    for lowres, r in ((False, 8), (True, res["train_res_end"])):
        x = rng.standard_normal((10, r, r, 8)).astype(np.float32)
        y = rng.integers(0, 4, 10)
        batches = [(x[i:i + 4], y[i:i + 4]) for i in range(0, 10, 4)]
        met = runner.train_epoch(iter(batches), 3, lambda b: 0.01, lowres=lowres)
        assert met.samples == 10 and 0.3 < met.loss < 5.0
    xv = rng.standard_normal((9, res["val_res"], res["val_res"], 8)).astype(np.float32)
    ev = runner.evaluate(xv, rng.integers(0, 4, 9))
    assert ev.samples == 9 and 0.3 < ev.loss < 5.0


NONSQUARE = """
arch.model @wide input(4, 8, 2) num_classes = 4 {
^bb0(%x: tensor<?x4x8x2xf32>):
  %0 = arch.conv %x out_ch = 4 k = 3 p = 1 : tensor<?x4x8x2xf32> -> tensor<?x4x8x4xf32>
  %1 = arch.relu %0 : tensor<?x4x8x4xf32> -> tensor<?x4x8x4xf32>
  %2 = arch.gap %1 : tensor<?x4x8x4xf32> -> tensor<?x1x1x4xf32>
  %3 = arch.softmax_ce %2 num_classes = 4 : tensor<?x1x1x4xf32> -> tensor<?x1x1x4xf32>
  arch.output %3 : tensor<?x1x1x4xf32>
}
"""


def test_non_square_variants_keep_the_aspect_ratio():
    """Issue 15, item 1: a 4x8 input at train_res 4 (4x8), train_res_end 2 (2x4) and val_res 6
    (6x12): the input buffers are planned at the largest (6x12), each variant's features at its
    own (H, W); a resolution without a whole width is a diagnostic naming the fix."""
    program = _run(NONSQUARE, train_res_end=2, val_res=6)
    assert [v.hw for v in program.variants()] == [(4, 8), (4, 8), (2, 4), (2, 4), (6, 12), (6, 12)]
    assert all(v.max_hw == (6, 12) for v in program.variants())
    plan = program.plans()[0]
    data = next(t for t in plan.tensors() if t.name == "data_a")
    assert data.shape == (4, 6, 12, 2)
    descs = program.descs()[0]
    out = descs.tensor_names.index("conv_output")
    assert [descs.shape(v, out)[1:3] for v in range(6)] == [(4, 8), (4, 8), (2, 4), (2, 4), (6, 12), (6, 12)]
    assert "width = 8 max_res = 6 max_width = 12" in str(program)
    with pytest.raises(PassFailedException, match=r"train_res_end = 3 gives no whole width for the 4x6 input "
                                                  r"\(the width keeps the aspect ratio: 3 \* 6 / 4\); use a multiple of 2"):
        _run(NONSQUARE.replace("input(4, 8, 2)", "input(4, 6, 2)").replace("4x8x", "4x6x"), train_res_end=3)
