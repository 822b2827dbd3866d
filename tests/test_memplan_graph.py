"""Phase 4 (memplan-build-graph): wiring of the train and infer graphs against the facts sheet
(sections 3, 7, 8.5), the in-place / accumulated gradient rules, and a dataflow check that no
backward node reads a value after a gradient overwrote it (on the small zoo models)."""

from __future__ import annotations

import pytest

from tr_mlir.compile import make_context
from tr_mlir.dialects.memplan import GraphId, MemRegion, Node, ProgramOp
from tr_mlir.passes.arch_plan import ArchPlanPass
from tr_mlir.passes.memplan_build_graph import MemplanBuildGraphPass
from tr_mlir.passes.memplan_create_plans import MemplanCreatePlansPass
from tr_mlir.passes.memplan_derive_shapes import MemplanDeriveShapesPass
from tr_mlir.passes.memplan_max_slots import MemplanMaxSlotsPass
from tr_mlir.zoo import MODELS

SMALL = ["mlp_digits", "lenet5", "resnet_tiny", "resnet8_cifar", "mobilenet_tiny", "depthwise_tiny"]


def _program(name: str, *, amp: bool = False, optimizer: str = "momentum", batch: int = 4,
             **spec) -> ProgramOp:
    ctx = make_context()
    module = MODELS[name].emit()
    ArchPlanPass(fuse=amp, amp=amp).apply(ctx, module)
    spec = {"batch_size": batch, "train_size": 10, "val_size": 6, "optimizer": optimizer, **spec}
    for p in (MemplanDeriveShapesPass(**spec), MemplanMaxSlotsPass(), MemplanCreatePlansPass(),
              MemplanBuildGraphPass()):
        p.apply(ctx, module)
    module.verify()
    return next(op for op in module.walk() if isinstance(op, ProgramOp))


class Named:
    """A program's graphs with DTensor names instead of ids."""

    def __init__(self, program: ProgramOp):
        self.program = program
        self.plan = program.plans()[0]
        self.tensors = self.plan.by_id()
        self.graphs = {g.graph_name: g for g in program.graphs()}

    def name(self, i: int) -> str:
        return self.tensors[i].name

    def nodes(self, gid: GraphId, graph: str = "train") -> list[tuple[str, tuple[str, ...], tuple[str, ...]]]:
        return [(n.op, tuple(map(self.name, n.inputs)), tuple(map(self.name, n.outputs)))
                for n in self.graphs[graph].nodes(gid)]

    def raw(self, gid: GraphId, graph: str = "train") -> list[Node]:
        return self.graphs[graph].nodes(gid)


def test_mlp_wiring_follows_the_seed():
    g = Named(_program("mlp"))
    # Baseline DTensors first (facts section 7).
    assert [g.name(i) for i in range(18)][:5] == ["label_a", "data_a", "label_b", "data_b", "label_smce"]
    assert g.nodes(GraphId.FIRST_LAYER_FWD_A) == [
        ("DTENSOR_COPY", ("label_a",), ("label_smce",)),
        ("FLATTEN_FP32_FWD", ("data_a",), ("l0.flatten_output",))]
    assert g.nodes(GraphId.FIRST_LAYER_FWD_B)[1] == ("FLATTEN_FP32_FWD", ("data_b",), ("l0.flatten_output",))
    assert g.nodes(GraphId.FIRST_LAYER_BWD_A) == [("FLATTEN_FP32_BWD_FIRST_LAYER", (), ())]
    deep = g.nodes(GraphId.DEEP_FWD_BWD)
    ops = [n[0] for n in deep]
    assert ops == ["FC_FP32_FWD", "RELU_FP32_FWD"] * 3 + ["FC_FP32_FWD", "SOFTMAX_CE_FP32_FWD", "SOFTMAX_CE_FP32_BWD"] + [
        "FC_FP32_BWD", "RELU_FP32_BWD_FROM_OUTPUT"] * 3 + ["FC_FP32_BWD"]
    # Forward: FC inputs [X, W, b] -> [Y] (8.5 (a)); every ReLU feeds an FC, whose backward reads the
    # ReLU's output, so the ReLU writes no mask: [X] -> [Y] (the seed: [Y, mask]).
    assert deep[0] == ("FC_FP32_FWD", ("l0.flatten_output", "l1.fc_weight", "l1.fc_bias"), ("l1.fc_output",))
    assert deep[1] == ("RELU_FP32_FWD", ("l1.fc_output",), ("l2.relu_output",))
    # SoftmaxCE: [logits, scaling, local_batch_size, label_smce, ls] -> the 9 outputs of 8.5 (a).
    assert deep[7] == ("SOFTMAX_CE_FP32_FWD",
                       ("l7.fc_output", "scaling", "local_batch_size", "label_smce", "label_smoothing"),
                       ("loss", "l8.inv_scaling_factor", "l8.pred_labels", "l8.softmax_probs", "top1", "top5",
                        "l8.loss_partial", "l8.top1_partial", "l8.top5_partial"))
    # The logits gradient lands in ce_output; every dX is written over the layer input (8.5 (c)),
    # but an FC's dX lands in the gradient slot of the ReLU output it reads, which the ReLU's
    # backward reads with the output itself (dX = dY * (Y > 0)).
    assert deep[8][2] == ("l8.ce_output",)
    assert deep[9] == ("FC_FP32_BWD", ("l8.ce_output", "l7.fc_weight", "l6.relu_output"),
                       ("l6.relu_output_grad", "l7.fc_weight_grad", "l7.fc_bias_grad"))
    assert deep[10] == ("RELU_FP32_BWD_FROM_OUTPUT", ("l6.relu_output_grad", "l6.relu_output"), ("l5.fc_output",))
    assert deep[-1] == ("FC_FP32_BWD", ("l1.fc_output", "l1.fc_weight", "l0.flatten_output"),
                        ("l0.flatten_output", "l1.fc_weight_grad", "l1.fc_bias_grad"))
    # Inference: FC reuses the forward op, ReLU its INF op.
    inf = g.nodes(GraphId.INF_MAIN_A, "infer")
    assert [n[0] for n in inf] == ["DTENSOR_COPY", "FLATTEN_FP32_FWD"] + ["FC_FP32_FWD", "RELU_FP32_INF"] * 3 + [
        "FC_FP32_FWD", "SOFTMAX_CE_FP32_INF"]


def test_vgg16_bn_wiring_fp32():
    g = Named(_program("vgg16_bn", batch=2))
    first_a = g.nodes(GraphId.FIRST_LAYER_FWD_A)
    assert first_a[1] == ("CONV_FP32_FWD", ("data_a", "l0.conv_weight"),
                          ("l0.conv_output", "l0.conv_sum", "l0.conv_sq_sum", "ws_col", "ws_tmp"))
    # the 3->64 stem is a small-channel conv: it also plans ws_tmp for the compiled kernels
    assert g.nodes(GraphId.FIRST_LAYER_BWD_B) == [
        ("CONV_FP32_BWD_FIRST_LAYER", ("l0.conv_output", "l0.conv_weight", "data_b"),
         ("l0.conv_weight_grad", "ws_col", "ws_wbuf", "ws_tmp"))]
    deep = g.nodes(GraphId.DEEP_FWD_BWD)
    bn = deep[0]
    assert bn == ("BN2D_FP32_FWD", ("l0.conv_output", "l1.bn_weight", "l1.bn_bias", "l1.bn_next_mean",
                                    "l1.bn_next_var", "bn_epsilon", "bn_momentum"),
                  ("l1.bn_output", "l1.bn_saved_mean", "l1.bn_saved_inv_var", "l1.bn_next_mean", "l1.bn_next_var"))
    # In-place dX for every backward of a single-use value: conv (input 2; into the gradient slot
    # of a ReLU output, which the ReLU's backward reads), BN (input 4), ReLU / maxpool / dropout
    # (the producer's output).
    producers = {outs[0]: ins for op, ins, outs in deep if op.endswith("_FWD")}
    for op, ins, outs in deep:
        if op == "CONV_FP32_BWD":
            assert outs[0] == (ins[2] + "_grad" if ins[2].endswith("relu_output") else ins[2]), (ins, outs)
        elif op == "BN2D_FP32_BWD":
            # BN reads its input (a conv output, layer l) and its dY over its own output (layer l + 1,
            # where the relu's backward wrote it) and writes dX over its input
            layer = int(ins[4].split(".")[0][1:])
            assert outs[0] == ins[4] == f"l{layer}.conv_output" and ins[0] == f"l{layer + 1}.bn_output"
        elif op in ("RELU_FP32_BWD", "MAXPOOL_FP32_BWD", "DROPOUT_FP32_BWD"):
            assert outs[0] == producers[ins[0]][0], (op, ins, outs)
        elif op == "RELU_FP32_BWD_FROM_OUTPUT":
            assert ins[0] == ins[1] + "_grad" and outs[0] == producers[ins[1]][0], (op, ins, outs)
    # The ReLUs feeding a max pool or a dropout keep their mask (5 + 2); those feeding a conv or an
    # FC (8 + 0: the FCs follow the dropouts) read their output in backward.
    forms = [op for op, _, _ in deep if op.startswith("RELU_FP32_BWD")]
    assert forms.count("RELU_FP32_BWD") == 7 and forms.count("RELU_FP32_BWD_FROM_OUTPUT") == 8
    # 13 convs, 13 BNs, 5 pools, 3 FCs, 2 dropouts (facts 7(b)-style counts for VGG-16-BN).
    ops = [n[0] for n in deep]
    assert ops.count("CONV_FP32_FWD") == 12 and ops.count("BN2D_FP32_FWD") == 13
    assert ops.count("MAXPOOL_FP32_FWD") == 5 and ops.count("FC_FP32_FWD") == 3
    assert ops.count("DROPOUT_FP32_FWD") == 2 and ops.count("DROPOUT_FP32_BWD") == 2
    # Inference skips dropout: the FC after it reads the relu before it.
    inf = g.nodes(GraphId.INF_MAIN_A, "infer")
    assert not any("DROPOUT" in op for op, _, _ in inf)
    fcs = [ins[0] for op, ins, _ in inf if op == "FC_FP32_FWD"]
    assert fcs[1].endswith("relu_output") and fcs[2].endswith("relu_output")
    # 13 BN inference-parameter updates, paired by layer.
    upd = g.nodes(GraphId.UPDATE_BN_INF_PARAMS)
    assert len(upd) == 13
    assert upd[0] == ("BN_UPDATE_EQ_PARAMS", ("l1.bn_weight", "l1.bn_bias", "l1.bn_next_mean", "l1.bn_next_var",
                                              "bn_epsilon"), ("l1.bn_eq_scale", "l1.bn_eq_bias"))


def test_fused_block_nodes_carry_their_stage_params():
    program = _program("resnet8_cifar", amp=True)
    graph = {g.graph_name: g for g in program.graphs()}["train"]
    params = [p.data for p in graph.params.data]
    names = program.plans()[0].by_id()
    strides = {}
    for n in graph.nodes(GraphId.DEEP_FWD_BWD):
        if n.op == "CONV_AMP_FWD":
            p = params[n.param]
            strides[names[n.outputs[0]].name] = (p["k"].value.data, p["s"].value.data, p["p"].value.data)
    # The projection block downsamples in its first 3x3 conv and its 1x1 shortcut.
    assert (3, 2, 1) in strides.values() and (1, 2, 0) in strides.values()
    assert any(k.endswith("sc_conv_output") and v == (1, 2, 0) for k, v in strides.items())


def test_multi_use_value_accumulates_in_backward_order():
    g = Named(_program("resnet_tiny"))  # unfused: add/identity/conv layers, the relu feeds two layers
    deep = g.nodes(GraphId.DEEP_FWD_BWD)
    accum = [i for i, n in enumerate(deep) if n[0] == "GRAD_ACCUM_FP32"]
    assert accum
    for i in accum:
        part, slot = deep[i][1]
        assert part.endswith("_grad_part") and slot == part[:-len("_part")] and deep[i][2] == (slot,)
        # The slot was written first, by a later layer, before the partial contribution.
        writers = [j for j, n in enumerate(deep[:i]) if slot in n[2]]
        part_writers = [j for j, n in enumerate(deep[:i]) if part in n[2]]
        assert writers and part_writers and writers[0] < part_writers[-1] < i


F_REGIONS = (MemRegion.F_FEATURE_FP32, MemRegion.F_GRAD_SLOT_FP32, MemRegion.F_FEATURE_FP16,
             MemRegion.F_GRAD_SLOT_FP16, MemRegion.I_A_DATA)


def _dataflow(program: ProgramOp) -> None:
    """Run one training step symbolically: every feature buffer holds a value or a gradient.
    Forward nodes read values and write values; backward nodes read the incoming gradient (input
    0) and values (the rest) and write gradients. Fails on a read of a buffer in the wrong state
    (a value read after its gradient overwrote it, or a gradient read before it is written)."""
    g = Named(program)
    state: dict[int, str] = {i: "value" for i, t in g.tensors.items() if t.name == "data_a"}
    schedule = g.raw(GraphId.FIRST_LAYER_FWD_A) + g.raw(GraphId.DEEP_FWD_BWD) + g.raw(GraphId.FIRST_LAYER_BWD_A)
    backward = False
    for k, node in enumerate(schedule):
        backward = backward or "_BWD" in node.op
        feat_in = [(pos, i) for pos, i in enumerate(node.inputs) if g.tensors[i].region in F_REGIONS]
        for pos, i in feat_in:
            if not backward:
                want = "value"
            elif node.op.startswith("GRAD_ACCUM"):
                want = "grad"
            elif node.op.startswith("SOFTMAX_CE"):
                want = "value"
            else:
                want = "grad" if pos == 0 else "value"
            assert state.get(i) == want, (f"node {k} {node.op} reads {g.name(i)} as a {want}, "
                                          f"but it holds {state.get(i)}")
        for i in node.outputs:
            if g.tensors[i].region in F_REGIONS:
                state[i] = "grad" if backward else "value"


@pytest.mark.parametrize("amp", [False, True], ids=["fp32", "amp"])
@pytest.mark.parametrize("name", SMALL + ["mlp", "resnet_bottleneck_manual"])
def test_no_value_is_read_after_its_gradient_overwrote_it(name, amp):
    _dataflow(_program(name, amp=amp, batch=2))


def test_graphs_are_shape_free():
    a = _program("resnet_tiny", batch=4)
    b = _program("resnet_tiny", batch=6, train_size=100, val_size=7, train_res=8, train_res_end=4)
    for ga, gb in zip(a.graphs(), b.graphs()):
        assert str(ga) == str(gb)
    assert str(a.plans()[0]) != str(b.plans()[0])


def test_graph_ids_per_graph():
    g = Named(_program("resnet_tiny", amp=True, optimizer="adam"))
    train = set(g.graphs["train"].buckets())
    infer = set(g.graphs["infer"].buckets())
    assert infer == {GraphId.INF_MAIN_A, GraphId.INF_MAIN_B, GraphId.VAL_RESULT_COMM}
    assert train == set(GraphId) - infer - {
        GraphId.INF_EMA_A, GraphId.INF_EMA_B, GraphId.EMA_UPDATE, GraphId.CAST_EMA_FP32_TO_FP16,
        GraphId.SIMPLE_TASK_GRAPH, GraphId.LARS_FC_OPT, GraphId.LARS_FIRST_CONV_OPT, GraphId.LARS_DEEP_CONV_OPT}
    opt = g.nodes(GraphId.OPTIMIZER)
    assert [n[0] for n in opt] == ["SCALAR_INCREMENT", "ADAM_BIAS_CORRECTION", "RANGE_UPDATE_WEIGHT_ADAM",
                                   "RANGE_UPDATE_BIAS_ADAM"]
    # Adam ids: [lr, wd, beta, beta2, eps, scaling, bc1, bc2, has_nan] (has_nan always last).
    assert opt[2][1] == ("lr", "wd", "beta", "beta2", "eps", "scaling", "bias_corr1", "bias_corr2", "has_nan")
    assert opt[3][1] == ("lr", "beta", "beta2", "eps", "scaling", "bias_corr1", "bias_corr2", "has_nan")


@pytest.mark.parametrize("optimizer,weight,bias", [
    ("sgd", "RANGE_UPDATE_WEIGHT_SGD", "RANGE_UPDATE_BIAS_SGD"),
    ("momentum", "RANGE_UPDATE_WEIGHT_MOMENTUM", "RANGE_UPDATE_BIAS_MOMENTUM"),
    ("nesterov", "RANGE_UPDATE_WEIGHT_NESTEROV", "RANGE_UPDATE_BIAS_NESTEROV"),
    ("adamw", "RANGE_UPDATE_WEIGHT_ADAMW", "RANGE_UPDATE_BIAS_ADAM"),
    ("lars", None, "RANGE_UPDATE_BIAS_MOMENTUM"),
])
def test_optimizer_graph(optimizer, weight, bias):
    g = Named(_program("mlp_digits", optimizer=optimizer))
    opt = g.raw(GraphId.OPTIMIZER)
    ops = [n.op for n in opt]
    assert ops[-1] == bias and (weight in ops if weight else not any("WEIGHT" in o for o in ops))
    upd = opt[-1]
    assert upd.in_ranges[0] == (MemRegion.W_BN_BIAS, MemRegion.W_FC_BIAS)
    assert g.name(upd.inputs[-1]) == "has_nan" and "wd" not in map(g.name, upd.inputs)
    if weight:
        w = next(n for n in opt if n.op == weight)
        assert w.in_ranges[:2] == ((MemRegion.W_FC_WEIGHT, MemRegion.W_DEEP_CONV),
                                   (MemRegion.G_FC_WEIGHT, MemRegion.G_DEEP_CONV))
        assert "wd" in map(g.name, w.inputs)  # plain SGD keeps its weight decay (DESIGN section 7)
    else:
        lars = g.nodes(GraphId.LARS_FC_OPT)
        assert len(lars) == 2 * 3  # three FC weights, trust ratio + update each
        assert lars[1][0] == "LARS_UPDATE_FC" and lars[1][2] == (lars[1][1][0], lars[1][1][2])


def _layer_tensors(program: ProgramOp, layer: int) -> list[tuple[str, str, str, tuple[int, ...], int]]:
    prefix = f"l{layer}."
    return [(t.name[len(prefix):], t.region.name, t.dtype, tuple(t.shape), t.slot)
            for t in program.plans()[0].tensors() if t.name.startswith(prefix)]


def test_mlp_and_vgg16_bn_plan_tensors_follow_facts_3_and_7():
    mlp = _program("mlp", batch=4)
    names = [t.name for t in mlp.plans()[0].tensors()]
    # facts section 7: the baseline DTensors first, ids fixed (momentum: beta, wd)
    assert names[:23] == ["label_a", "data_a", "label_b", "data_b", "label_smce", "has_nan", "lr", "scaling",
                          "label_smoothing", "loss", "top1", "top5", "local_batch_size",
                          "last_train_batch_size", "last_val_batch_size", "accum_loss", "accum_top1",
                          "accum_top5", "beta", "wd", "dropout_seed", "bn_epsilon", "bn_momentum"]
    # facts section 3, FC (7 tensors; fp32: the fp16 copies are zero-byte placeholders), then the
    # momentum buffers of its parameters
    assert [(n, r, d, s, slot > 0) for n, r, d, s, slot in _layer_tensors(mlp, 1)] == [
        ("fc_weight", "W_FC_WEIGHT", "f32", (1024, 1, 1, 784), True),
        ("fc_bias", "W_FC_BIAS", "f32", (1, 1, 1, 1024), True),
        ("fc_output", "F_FEATURE_FP32", "f32", (4, 1, 1, 1024), True),
        ("fc_weight_grad", "G_FC_WEIGHT", "f32", (1024, 1, 1, 784), True),
        ("fc_bias_grad", "G_FC_BIAS", "f32", (1, 1, 1, 1024), True),
        ("fc_amp_w_fp16", "A_FC_WEIGHT", "f16", (1, 1, 1, 1), False),
        ("fc_amp_g_fp16", "G_FC_WEIGHT_FP16", "f16", (1, 1, 1, 1), False),
        ("fc_weight.m", "M_FC_WEIGHT", "f32", (1024, 1, 1, 784), True),
        ("fc_bias.m", "M_FC_BIAS", "f32", (1, 1, 1, 1024), True)]
    # ReLU: its output and (an FC reads the output in backward, so no mask) the output's gradient slot
    assert [t[:2] for t in _layer_tensors(mlp, 2)] == [("relu_output", "F_FEATURE_FP32"),
                                                       ("relu_output_grad", "F_GRAD_SLOT_FP32")]
    assert [t[:2] for t in _layer_tensors(mlp, 8)] == [
        ("ce_output", "F_FEATURE_FP32"), ("softmax_probs", "T_TEMP_FP32"), ("pred_labels", "R_PREDICTED_LABEL"),
        ("inv_scaling_factor", "S_SCALAR_FP32"), ("loss_partial", "T_TEMP_FP32"), ("top1_partial", "T_TEMP_INT32"),
        ("top5_partial", "T_TEMP_INT32")]
    vgg = _program("vgg16_bn", batch=2)
    conv0 = _layer_tensors(vgg, 0)
    # Conv (the first layer: W_FIRST_CONV family; the unused conv_grad_slot is not planned, the
    # im2col workspace is one shared DTensor)
    assert [t[:2] for t in conv0] == [
        ("conv_weight", "W_FIRST_CONV"), ("conv_output", "F_FEATURE_FP32"), ("conv_weight_grad", "G_FIRST_CONV"),
        ("conv_amp_w_fp16", "A_FIRST_CONV"), ("conv_amp_g_fp16", "G_FIRST_CONV_FP16"), ("conv_sum", "T_TEMP_FP32"),
        ("conv_sq_sum", "T_TEMP_FP32"), ("conv_weight.m", "M_FIRST_CONV")]
    assert conv0[0][3] == (64, 3, 3, 3) and conv0[1][3] == (2, 224, 224, 64)  # KRSC weights, NHWC output
    assert _layer_tensors(vgg, 3)[0][:2] == ("conv_weight", "W_DEEP_CONV")
    # BN: 13 tensors in the seed's order, then the momentum buffers of gamma and beta
    assert [t[:2] for t in _layer_tensors(vgg, 1)] == [
        ("bn_weight", "W_BN_WEIGHT"), ("bn_bias", "W_BN_BIAS"), ("bn_output", "F_FEATURE_FP32"),
        ("bn_prev_mean", "B_PREV_MEAN"), ("bn_prev_var", "B_PREV_VAR"), ("bn_next_mean", "B_NEXT_MEAN"),
        ("bn_next_var", "B_NEXT_VAR"), ("bn_weight_grad", "G_BN_WEIGHT"), ("bn_bias_grad", "G_BN_BIAS"),
        ("bn_eq_bias", "W_EQ_BIAS"), ("bn_eq_scale", "W_EQ_SCALE"), ("bn_saved_mean", "T_TEMP_FP32"),
        ("bn_saved_inv_var", "T_TEMP_FP32"), ("bn_weight.m", "M_BN_WEIGHT"), ("bn_bias.m", "M_BN_BIAS")]
