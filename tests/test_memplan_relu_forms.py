"""Which form each ReLU takes (issue 12, "save less for the backward pass").

A ReLU whose every consumer reads that value in its own backward (conv, fc, batch norm, the other
activations, a fused op starting with a conv) keeps no INT8 mask: its backward reads its output
(``RELU_<P>_BWD_FROM_OUTPUT``), which stays live anyway, and its output gets a gradient slot. A
ReLU feeding a max pool, an add, a GAP, a dropout keeps the mask (its output would die early).
Inside fused blocks the stage ReLUs feed the next conv and read their output, the block's final
ReLU decides by the block's consumers, cbrp's ReLU (feeding its pool) keeps the mask.

Checked here: :attr:`Descriptor.bwd_reads_input` against the backward patterns of every
descriptor; the form of every ReLU of ResNet-like and VGG-like nets (fused and unfused) and that
an output-form ReLU touches no mask; the arena of CIFAR ResNet-18 (batch 64) shrinks, and
VGG16-BN's does not grow. Training stays bit-identical (the two forms give the same bits: kernel
tests in ``test_kernels_numpy.py`` / ``test_gpu_kernels.py``; whole steps against PyTorch in
``test_runtime_torch.py``, reuse on and off in ``test_memplan_reuse.py``).
"""

from __future__ import annotations

import re

import pytest
from xdsl.parser import Parser

from tr_mlir.blueprint import BlockStyle, block, bn, cbr, conv, gap_fc, maxpool, relu, repeat, seq
from tr_mlir.compile import compile as compile_model
from tr_mlir.compile import make_context
from tr_mlir.dialects import arch
from tr_mlir.dialects.lifetimes import analyze, lower_bound
from tr_mlir.dialects.memplan import GraphId, MemRegion
from tr_mlir.lowering.executable import find_program
from tr_mlir.passes._descriptors import DESCRIPTORS, descriptor_for, layer_ctx
from tr_mlir.passes._descriptors_program import layers
from tr_mlir.zoo import MODELS

MiB = 1 << 20

# Every layer op of a flat ArchPlan, unfused and fused (shapes for N = 2).
EVERY_OP = """
arch.model @primitives input(8, 8, 3) num_classes = 10 {
^bb0(%x: tensor<?x8x8x3xf32>):
  %c = arch.conv %x out_ch = 16 k = 3 s = 1 p = 1 : tensor<?x8x8x3xf32> -> tensor<?x8x8x16xf32>
  %c2 = arch.conv %c out_ch = 16 k = 3 s = 2 p = 1 groups = 16 : tensor<?x8x8x16xf32> -> tensor<?x4x4x16xf32>
  %bn2 = arch.bn2d %c2 : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %r = arch.relu %bn2 : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %t = arch.tanh %r : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %s = arch.silu %t : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %r6 = arch.relu6 %s : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %lr = arch.leaky_relu %r6 : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %hs = arch.hardswish %lr : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %e = arch.elu %hs : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %sg = arch.sigmoid %e : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %mp = arch.maxpool %sg k = 3 s = 1 p = 1 : tensor<?x4x4x16xf32> -> tensor<?x4x4x16xf32>
  %ap = arch.avgpool %mp k = 2 s = 2 p = 0 : tensor<?x4x4x16xf32> -> tensor<?x2x2x16xf32>
  %cp = arch.channel_padding %ap : tensor<?x2x2x16xf32> -> tensor<?x2x2x16xf32>
  %id = arch.identity %cp : tensor<?x2x2x16xf32> -> tensor<?x2x2x16xf32>
  %add = arch.add %cp, %id : tensor<?x2x2x16xf32>, tensor<?x2x2x16xf32> -> tensor<?x2x2x16xf32>
  %bn1 = arch.bn1d %add : tensor<?x2x2x16xf32> -> tensor<?x2x2x16xf32>
  %d = arch.dropout %bn1 p = 0.5 : tensor<?x2x2x16xf32> -> tensor<?x2x2x16xf32>
  %f = arch.flatten %d start_dim = 1 : tensor<?x2x2x16xf32> -> tensor<?x1x1x64xf32>
  %fc = arch.fc %f out_features = 32 bias : tensor<?x1x1x64xf32> -> tensor<?x1x1x32xf32>
  %g = arch.gap %fc : tensor<?x1x1x32xf32> -> tensor<?x1x1x32xf32>
  %ce = arch.softmax_ce %g num_classes = 10 : tensor<?x1x1x32xf32> -> tensor<?x1x1x32xf32>
  arch.output %ce : tensor<?x1x1x32xf32>
}
arch.model @fused input(32, 32, 8) num_classes = 10 fuse {
^bb0(%x: tensor<?x32x32x8xf32>):
  %a = arch.cbr %x out_ch = 16 k = 3 s = 1 p = 1 : tensor<?x32x32x8xf32> -> tensor<?x32x32x16xf32>
  %b = arch.cbrp %a out_ch = 64 conv(7, 2, 3) pool(3, 2, 1) : tensor<?x32x32x16xf32> -> tensor<?x8x8x64xf32>
  %c = arch.bottleneck_identity %b bottleneck_ch = 16 : tensor<?x8x8x64xf32> -> tensor<?x8x8x64xf32>
  %d = arch.bottleneck_projection %c bottleneck_ch = 32 out_ch = 128 stride = 2 : tensor<?x8x8x64xf32> -> tensor<?x4x4x128xf32>
  %e = arch.basic_block_identity %d out_ch = 128 : tensor<?x4x4x128xf32> -> tensor<?x4x4x128xf32>
  %f = arch.basic_block_projection %e out_ch = 64 stride = 1 : tensor<?x4x4x128xf32> -> tensor<?x4x4x64xf32>
  %g = arch.inv_residual_identity %f expand_ch = 384 out_ch = 64 : tensor<?x4x4x64xf32> -> tensor<?x4x4x64xf32>
  %h = arch.inv_residual_no_shortcut %g expand_ch = 384 out_ch = 96 stride = 2 : tensor<?x4x4x64xf32> -> tensor<?x2x2x96xf32>
  %i = arch.gap_fc %h out_features = 10 bias : tensor<?x2x2x96xf32> -> tensor<?x1x1x10xf32>
  %j = arch.softmax_ce %i num_classes = 10 : tensor<?x1x1x10xf32> -> tensor<?x1x1x10xf32>
  arch.output %j : tensor<?x1x1x10xf32>
}
"""


def _shape(value) -> tuple[int, int, int, int]:
    _, h, w, c = value.type.get_shape()
    return (2, h, w, c)


def _plans():
    """(op, descriptor, plan) of every layer of :data:`EVERY_OP`, none as the first layer."""
    module = Parser(make_context(), EVERY_OP).parse_module()
    out = []
    for model in module.walk():
        if isinstance(model, arch.ModelOp):
            for op in layers(model):
                desc = descriptor_for(op)
                ins = tuple(_shape(v) for v in op.operands)
                out.append((op, desc, desc.build(layer_ctx(op, ins, _shape(op.results[0]), amp=False, first=False))))
    return out


def test_bwd_reads_input_is_what_the_backward_patterns_read():
    seen = set()
    for op, desc, plan in _plans():
        reads = any(o.startswith("$x") for n in plan.backward for o in n.inputs)
        assert reads == desc.bwd_reads_input, op.name
        seen.add(type(op))
    assert seen == set(DESCRIPTORS)


def test_the_primitive_relu_decides_by_its_consumers():
    plans = {op.name: plan for op, _, plan in _plans() if op.name in ("arch.relu",)}
    relu = plans["arch.relu"]  # feeds a tanh, whose backward reads its input
    assert relu.bwd_reads_output and relu.names() == ["relu_output"]
    assert [n.op for n in relu.backward] == ["RELU_FP32_BWD_FROM_OUTPUT"]
    assert relu.backward[0].inputs == ("$dy", "relu_output") and relu.forward[0].outputs == ("relu_output",)


# -- forms in real nets ---------------------------------------------------------------------


def _resnet18_cifar():
    body = [cbr(64, 3, 1, 1), repeat(block(64, BlockStyle.RESNET_3_3), 2)]
    for width in (128, 256, 512):
        body += [block(width, BlockStyle.RESNET_3_3_DS), block(width, BlockStyle.RESNET_3_3)]
    return seq(*body, gap_fc(10, True))


def _vgg_like():
    return seq(conv(8, 3, 1, 1), bn(), relu(), conv(8, 3, 1, 1), bn(), relu(), maxpool(2, 2, 0),
               conv(16, 3, 1, 1), bn(), relu(), maxpool(2, 2, 0), conv(16, 3, 1, 1), bn(), relu(), gap_fc(10, True))


def _program(model, shape, batch=4, num_classes=10, **kw):
    module = compile_model(model, shape, num_classes=num_classes, batch_size=batch, train_size=batch * 10,
                           val_size=batch * 2, **kw)
    _, program = find_program(module)
    return module, program


def _forms(program) -> dict[str, str]:
    """``l<i>.<stem>`` of every ReLU output -> ``"mask"`` or ``"output"``, checked against the graphs:
    a mask-form ReLU writes its mask forward (and in inference) and reads it backward; an
    output-form ReLU writes only its output (no DTensor of a mask region) and its backward reads
    the output itself, which its forward wrote, with the gradient from ``<output>_grad``."""
    plan = program.plans()[0]
    by_id = plan.by_id()
    names = {t.name for t in plan.tensors()}
    graphs = {g.graph_name: g for g in program.graphs()}
    relus = [(gid, n) for g in graphs.values() for gid in GraphId for n in g.nodes(gid) if n.op.startswith("RELU_")]
    base = lambda i: re.sub(r"\.v\d+$", "", by_id[i].name)  # noqa: E731 (live-range split names)
    forms: dict[str, str] = {}
    for gid, n in relus:
        kind = n.op.split("_", 2)[2]  # FWD, INF, BWD, BWD_FROM_OUTPUT
        if kind in ("FWD", "INF"):
            y = base(n.outputs[0])
            stem = y[:-len("_output")]
            if f"{stem}_mask" in names:
                assert [base(i) for i in n.outputs] == [y, f"{stem}_mask"], (y, kind)
                forms[y] = "mask"
            else:
                assert len(n.outputs) == 1 and by_id[n.outputs[0]].region is not MemRegion.S_MASK, y
                forms[y] = "output"
        elif kind == "BWD":
            assert by_id[n.inputs[1]].region is MemRegion.S_MASK and base(n.inputs[1]).endswith("relu_mask")
        else:
            assert kind == "BWD_FROM_OUTPUT", n.op
            y = base(n.inputs[1])
            assert y.endswith("relu_output") and base(n.inputs[0]) == f"{y}_grad", [base(i) for i in n.inputs]
            assert forms[y] == "output"
    masks = {t.name for t in plan.tensors() if t.region is MemRegion.S_MASK}
    for y, form in forms.items():
        assert (f"{y[:-len('_output')]}_mask" in masks) == (form == "mask"), y
        assert (f"{y}_grad" in names) == (form == "output") or form == "mask", y
    return forms


def _layer_ops(module):
    model = next(op for op in module.walk() if isinstance(op, arch.ModelOp))
    return [op.name for op in layers(model)]


@pytest.mark.parametrize("amp", [False, True], ids=["fp32", "amp"])
def test_fused_resnet_keeps_one_mask_the_one_before_gap_fc(amp):
    module, program = _program(_resnet18_cifar(), (32, 32, 3), fuse=True, amp=amp)
    ops = _layer_ops(module)
    forms = _forms(program)
    masks = sorted(y for y, f in forms.items() if f == "mask")
    last_block = ops.index("arch.gap_fc") - 1
    # the stage ReLUs of every block feed the block's next conv; each block output feeds a block
    # (its convs read it), only the last one feeds gap_fc (whose backward does not read it)
    assert masks == [f"l{last_block}.relu_output"]
    assert forms["l0.cbr_relu_output"] == "output"
    assert sum(1 for y in forms if y.endswith("c1_relu_output")) == 8 and len(forms) == 1 + 8 * 2


def test_unfused_resnet_keeps_the_masks_of_relus_read_by_an_add():
    module, program = _program(_resnet18_cifar(), (32, 32, 3), fuse=False)
    ops = _layer_ops(module)
    forms = _forms(program)
    model = next(op for op in module.walk() if isinstance(op, arch.ModelOp))
    want = {}
    for i, op in enumerate(layers(model)):
        if op.name == "arch.relu":
            users = {u.operation.name for u in op.results[0].uses}
            want[f"l{i}.relu_output"] = "output" if users <= {"arch.conv"} else "mask"
    assert forms == want
    # bn -> relu -> conv inside a block and a block output read by a projection block's two convs
    # read their output; a block output read by an identity block's add (and the last, by the
    # gap_fc) keep the mask
    assert list(want.values()).count("mask") == 6 and list(want.values()).count("output") == 11
    assert ops.count("arch.relu") == 17


@pytest.mark.parametrize("fuse,cbrp", [(False, False), (True, False), (True, True)],
                         ids=["unfused", "fused", "cbrp"])
def test_vgg_like_relus_before_a_pool_keep_the_mask(fuse, cbrp):
    module, program = _program(_vgg_like(), (16, 16, 3), fuse=fuse, cbrp=cbrp)
    ops = _layer_ops(module)
    forms = _forms(program)
    if not fuse:
        # relu layers 2, 5, 9, 13: into a conv, a pool, a pool, the gap_fc
        assert forms == {"l2.relu_output": "output", "l5.relu_output": "mask", "l9.relu_output": "mask",
                         "l13.relu_output": "mask"}
    elif not cbrp:
        assert ops[:4] == ["arch.cbr", "arch.cbr", "arch.maxpool", "arch.cbr"]
        assert forms == {"l0.cbr_relu_output": "output", "l1.cbr_relu_output": "mask",
                         "l3.cbr_relu_output": "mask", "l5.cbr_relu_output": "mask"}
    else:
        # the cbr feeds a cbrp (its conv reads it); cbrp's ReLU feeds its own max pool
        assert ops[:4] == ["arch.cbr", "arch.cbrp", "arch.cbrp", "arch.cbr"]
        assert forms == {"l0.cbr_relu_output": "output", "l1.relu_output": "mask", "l2.relu_output": "mask",
                         "l3.cbr_relu_output": "mask"}


def test_mobilenet_inverted_residual_relus_read_their_output():
    _, program = _program(MODELS["mobilenet_tiny"].blueprint(10), (32, 32, 3), fuse=True, amp=True)
    forms = _forms(program)
    inner = {y: f for y, f in forms.items() if re.search(r"\.c[12]_relu_output$", y)}
    assert inner and set(inner.values()) == {"output"}


# -- the arena ------------------------------------------------------------------------------


def _arena(model, shape, batch, **kw):
    _, program = _program(model, shape, batch, **kw)
    plan = program.plans()[0]
    life = analyze(program, plan)
    rows = sorted(plan.tensors(), key=lambda t: t.id)
    slots = [t.slot for t in rows]
    bound, at = lower_bound(life, slots)
    masks_at_peak = sum(slots[i] for i in life.live_at(at) if "relu_mask" in rows[i].name)
    return plan.size / MiB, bound / MiB, masks_at_peak / MiB


# The mask form's arenas (every ReLU writing a mask, before issue 12): CIFAR ResNet-18 at batch 64
# 507.8 MiB fused and unfused (bound 378.2, 33.5 MiB of ReLU masks live at the peak), VGG16-BN at
# 224 x 224, batch 32, 5173.8 MiB fused and unfused.
@pytest.mark.parametrize("fuse,most", [(False, 490.0), (True, 480.0)], ids=["unfused", "fused"])
def test_cifar_resnet18_arena_shrinks(fuse, most):
    """The ReLU output forms' arena, with today's conv rule (the measurements above) and with the
    cost rule's Winograd convolutions (their scratch fits in the same arena: measured 482.6 /
    471.5 MiB unfused / fused, bound 352.9 / 339.9 MiB)."""
    arena, bound, masks = _arena(_resnet18_cifar(), (32, 32, 3), 64, fuse=fuse, conv_algo="im2col")
    assert arena < most and bound < 378.2 - 19
    assert masks < 12 if not fuse else masks == 0
    arena, bound, _ = _arena(_resnet18_cifar(), (32, 32, 3), 64, fuse=fuse)
    assert arena < most and bound < 378.2 - 19


@pytest.mark.parametrize("fuse", [False, True], ids=["unfused", "fused"])
def test_vgg16_bn_arena_does_not_grow(fuse):
    # the 8 ReLUs feeding a conv drop their masks; the 7 before a pool or a dropout keep them
    spec = MODELS["vgg16_bn"]
    arena, _, masks = _arena(spec.blueprint(spec.num_classes), spec.input_shape, 32, num_classes=spec.num_classes,
                             fuse=fuse)
    assert arena < 5173.8 - 200 and masks < 404.3 - 200
