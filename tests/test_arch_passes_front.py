"""The first seven ArchPlan passes in the seed's build order, on the facts sheet's examples.

expand (step 1), rename-bn (2), normalize-softmax-ce (3), normalize-identity (4),
align-amp-input, deduce-shapes (6), normalize-flatten (5) on hand-built tree-form modules
(a tiny builder over the ArchOp constructors below), checking op kinds, parameters and shapes
against the worked examples of facts sheet section 7, with the deliberate differences of
DESIGN section 7 (shapes follow the SSA graph, true depthwise MobileNet convs, amp-keyed
alignment, flatten on true shapes).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from tr_mlir.dialects.arch import (
    Add2Op,
    AddOp,
    BlockOp,
    BlockStyle,
    BnOp,
    CbrOp,
    CbrpOp,
    ConvOp,
    FcOp,
    FlattenOp,
    GapFcOp,
    GapOp,
    IdentityOp,
    LayerOp,
    MaxPoolOp,
    ModelOp,
    OutputOp,
    ReluOp,
    RepeatOp,
    SeqOp,
    TanhOp,
    YieldOp,
    static_hwc,
)
from tr_mlir.passes import PASSES
from tr_mlir.passes.arch_align_amp_input import ArchAlignAmpInputPass
from tr_mlir.passes.arch_deduce_shapes import ArchDeduceShapesPass
from tr_mlir.passes.arch_expand import ArchExpandPass
from tr_mlir.passes.arch_normalize_flatten import ArchNormalizeFlattenPass
from tr_mlir.passes.arch_normalize_identity import ArchNormalizeIdentityPass
from tr_mlir.passes.arch_normalize_softmax_ce import ArchNormalizeSoftmaxCePass
from tr_mlir.passes.arch_rename_bn import ArchRenameBnPass

# --------------------------------------------------------------------------------------
# A tiny tree builder: each node is a function (block, value) -> value that adds ops.
# --------------------------------------------------------------------------------------

Node = Callable[[Block, SSAValue], SSAValue]


def _layer(cls: type[LayerOp], **params: object) -> Node:
    def build(block: Block, x: SSAValue) -> SSAValue:
        op = cls(x, **params)
        block.add_op(op)
        return op.output

    return build


def conv(out_ch: int, k: int, s: int = 1, p: int = 0) -> Node:
    return _layer(ConvOp, out_ch=out_ch, k=k, s=s, p=p)


def bn() -> Node:
    return _layer(BnOp)


def relu() -> Node:
    return _layer(ReluOp)


def tanh() -> Node:
    return _layer(TanhOp)


def identity() -> Node:
    return _layer(IdentityOp)


def maxpool(k: int, s: int, p: int) -> Node:
    return _layer(MaxPoolOp, k=k, s=s, p=p)


def gap() -> Node:
    return _layer(GapOp)


def fc(out_features: int, bias: bool = True) -> Node:
    return _layer(FcOp, out_features=out_features, bias=bias)


def cbr(out_ch: int, k: int, s: int, p: int) -> Node:
    return _layer(CbrOp, out_ch=out_ch, k=k, s=s, p=p)


def cbrp(out_ch: int, ck: int, cs: int, cp: int, pk: int, ps: int, pp: int) -> Node:
    return _layer(CbrpOp, out_ch=out_ch, conv_k=ck, conv_s=cs, conv_p=cp,
                  pool_k=pk, pool_s=ps, pool_p=pp)


def gap_fc(out_features: int, bias: bool = True) -> Node:
    return _layer(GapFcOp, out_features=out_features, bias=bias)


def block(style: BlockStyle, out_ch: int, mid_ch: int | None = None) -> Node:
    return _layer(BlockOp, style=style, out_ch=out_ch, mid_ch=mid_ch)


def _fill(block_: Block, children: Sequence[Node | None]) -> None:
    v = block_.args[0]
    for child in children:
        if child is not None:
            v = child(block_, v)
    block_.add_op(YieldOp(v))


def seq(*children: Node | None) -> Node:
    def build(b: Block, x: SSAValue) -> SSAValue:
        op = SeqOp(x)
        _fill(op.body.block, children)
        b.add_op(op)
        return op.output

    return build


def repeat(body: Node, times: int) -> Node:
    def build(b: Block, x: SSAValue) -> SSAValue:
        op = RepeatOp(x, times)
        _fill(op.body.block, [body])
        b.add_op(op)
        return op.output

    return build


def add2(shortcut: Node | None, main: Node | None) -> Node:
    def build(b: Block, x: SSAValue) -> SSAValue:
        op = Add2Op(x)
        _fill(op.shortcut.block, [shortcut])
        _fill(op.main.block, [main])
        b.add_op(op)
        return op.output

    return build


def model(net: Node | None, hwc: tuple[int, int, int], num_classes: int, *,
          amp: bool = False, fuse: bool = False, name: str = "net") -> ModuleOp:
    m = ModelOp(name, hwc, num_classes, amp=amp, fuse=fuse)
    body = m.body.block
    v = net(body, m.input_value) if net is not None else m.input_value
    body.add_op(OutputOp(v))
    module = ModuleOp([m])
    module.verify()
    return module


# --------------------------------------------------------------------------------------
# Running the passes
# --------------------------------------------------------------------------------------

FRONT: tuple[type[ModulePass], ...] = (
    ArchExpandPass,
    ArchRenameBnPass,
    ArchNormalizeSoftmaxCePass,
    ArchNormalizeIdentityPass,
    ArchAlignAmpInputPass,
    ArchDeduceShapesPass,
    ArchNormalizeFlattenPass,
)
"""The passes of this file in the seed's build order (facts sheet 3.1; step 6 before 5)."""


def run(module: ModuleOp, *passes: ModulePass) -> ModuleOp:
    for p in passes:
        p.apply(Context(), module)
        module.verify()
    return module


def front(module: ModuleOp) -> ModuleOp:
    return run(module, *(cls() for cls in FRONT))


def the_model(module: ModuleOp) -> ModelOp:
    (m,) = [op for op in module.ops if isinstance(op, ModelOp)]
    return m


def kinds(module: ModuleOp) -> list[str]:
    """The seed's LayerKind names of the body, ``Add`` for arch.add."""
    return [op.LAYER_KIND for op in the_model(module).layers()]


def shapes(op: Operation) -> tuple[tuple[int, int, int] | None, tuple[int, int, int] | None]:
    return static_hwc(op.operands[0].type), static_hwc(op.results[0].type)


def layers_of(module: ModuleOp, cls: type[Operation]) -> list[Operation]:
    return [op for op in the_model(module).layers() if isinstance(op, cls)]


# --------------------------------------------------------------------------------------
# Facts 7(b): the MLP
# --------------------------------------------------------------------------------------


def mlp() -> Node:
    return seq(fc(1024), relu(), fc(512), relu(), fc(256), relu(), fc(10))


@pytest.mark.parametrize("mode", [dict(amp=True, fuse=True), dict(amp=False, fuse=False)])
def test_mlp_7b(mode: dict[str, bool]) -> None:
    module = front(model(mlp(), (28, 28, 1), 10, **mode))
    assert kinds(module) == ["Flatten", "FC", "ReLU", "FC", "ReLU", "FC", "ReLU", "FC",
                             "SoftmaxCE"]
    m = the_model(module)
    assert m.input_hwc == (28, 28, 1)  # first layer is not a conv: no alignment
    table = [shapes(op) for op in m.layers()]
    assert table == [
        ((28, 28, 1), (1, 1, 784)),
        ((1, 1, 784), (1, 1, 1024)),
        ((1, 1, 1024), (1, 1, 1024)),
        ((1, 1, 1024), (1, 1, 512)),
        ((1, 1, 512), (1, 1, 512)),
        ((1, 1, 512), (1, 1, 256)),
        ((1, 1, 256), (1, 1, 256)),
        ((1, 1, 256), (1, 1, 10)),
        ((1, 1, 10), (1, 1, 10)),
    ]
    assert [op.param("out_features") for op in layers_of(module, FcOp)] == [1024, 512, 256, 10]
    assert all(op.param("bias") for op in layers_of(module, FcOp))


@pytest.mark.parametrize("c, flattened", [(8, None), (16, None), (5, 3920)])
def test_mlp_flatten_rule_7b(c: int, flattened: int | None) -> None:
    """C a multiple of 8: the first FC reads the 28x28 map; C = 5: a Flatten to 3920."""
    module = front(model(mlp(), (28, 28, c), 10))
    flattens = layers_of(module, FlattenOp)
    first_fc = layers_of(module, FcOp)[0]
    if flattened is None:
        assert not flattens
        assert shapes(first_fc)[0] == (28, 28, c)
    else:
        assert len(flattens) == 1 and shapes(flattens[0])[1] == (1, 1, flattened)
        assert shapes(first_fc)[0] == (1, 1, flattened)


def test_user_flatten_is_replaced_on_true_shapes() -> None:
    """`seq(flatten(), fc(10))` at 28x28x1: the flatten is the first layer and stays, where the
    seed deletes it and, reading stale shapes, puts none back (facts 3.7)."""
    module = front(model(seq(_layer(FlattenOp), fc(10)), (28, 28, 1), 10))
    assert kinds(module) == ["Flatten", "FC", "SoftmaxCE"]
    assert shapes(layers_of(module, FcOp)[0])[0] == (1, 1, 784)


# --------------------------------------------------------------------------------------
# Facts 7(c): hand-written bottlenecks
# --------------------------------------------------------------------------------------


def bneck(mid: int, out: int, ds: bool, proj: bool) -> Node:
    s = 2 if ds else 1
    return seq(
        add2(seq(conv(out, 1, s, 0), bn()) if proj else identity(),
             seq(conv(mid, 1), bn(), relu(), conv(mid, 3, s, 1), bn(), relu(), conv(out, 1), bn())),
        relu(),
    )


def net_7c() -> Node:
    return seq(conv(64, 7, 2, 3), bn(), relu(), maxpool(3, 2, 1),
               bneck(64, 256, False, True), bneck(64, 256, False, False),
               bneck(128, 512, True, True), gap(), fc(1000))


# The seed's 48 unfused layers of 7(c) (facts sheet section 7(c), step 1 plus SoftmaxCE).
_STEM_7C = ["Conv", "Bn2d", "ReLU", "Conv", "Bn2d", "ReLU", "Conv", "Bn2d"]
SEED_7C = (
    ["Conv", "Bn2d", "ReLU", "MaxPool"]
    + ["Add2Start", "Conv", "Bn2d", "Add2ShortcutEnd", *_STEM_7C, "Add2End", "ReLU"]
    + ["Add2Start", "Identity", "Add2ShortcutEnd", *_STEM_7C, "Add2End", "ReLU"]
    + ["Add2Start", "Conv", "Bn2d", "Add2ShortcutEnd", *_STEM_7C, "Add2End", "ReLU"]
    + ["GAP", "FC", "SoftmaxCE"]
)


def seed_to_ssa(seed_kinds: list[str]) -> list[str]:
    """The seed's linear list in SSA terms: no Start/ShortcutEnd markers, Add2End is the add."""
    markers = {"Add2Start", "Add2ShortcutEnd"}
    return ["Add" if k == "Add2End" else k for k in seed_kinds if k not in markers]


@pytest.mark.parametrize("amp_fuse", [True, False])
def test_bottlenecks_7c(amp_fuse: bool) -> None:
    module = front(model(net_7c(), (224, 224, 3), 1000, amp=amp_fuse, fuse=amp_fuse))
    assert kinds(module) == seed_to_ssa(SEED_7C)
    m = the_model(module)
    c_in = 4 if amp_fuse else 3  # AMP aligns the first conv's input to 4
    assert m.input_hwc == (224, 224, c_in)
    convs = layers_of(module, ConvOp)
    assert shapes(convs[0]) == ((224, 224, c_in), (112, 112, 64))
    # Shapes follow the graph: the main branch starts from the block input, not from the
    # shortcut's output (the seed's linear walk gives [1,56,56,256] here).
    assert shapes(convs[2]) == ((56, 56, 64), (56, 56, 64))   # block 1, conv1
    adds = layers_of(module, AddOp)
    assert [shapes(a)[1] for a in adds] == [(56, 56, 256), (56, 56, 256), (28, 28, 512)]
    # block 3: projection conv 1x1 s2 and the strided 3x3 both reach 28x28.
    assert shapes(convs[-4]) == ((56, 56, 256), (28, 28, 512))
    assert shapes(layers_of(module, GapOp)[0]) == ((28, 28, 512), (1, 1, 512))
    assert shapes(layers_of(module, FcOp)[0]) == ((1, 1, 512), (1, 1, 1000))
    # The identity of block 2 is the one re-inserted by step 4, before the block's conv1,
    # and the add reads it.
    (ident,) = layers_of(module, IdentityOp)
    assert adds[1].shortcut is ident.output
    # every BN follows a conv: bn2d
    assert "Bn1d" not in kinds(module)


def test_bottleneck_7c_branch_shapes() -> None:
    module = front(model(net_7c(), (224, 224, 3), 1000))
    convs = layers_of(module, ConvOp)
    # block 3 (ds): shortcut conv, then conv1 1x1, conv2 3x3 s2, conv3 1x1
    sc, c1, c2, c3 = convs[-4:]
    assert sc.param("s") == 2 and c2.param("s") == 2
    assert shapes(c1) == ((56, 56, 256), (56, 56, 128))
    assert shapes(c2) == ((56, 56, 128), (28, 28, 128))
    assert shapes(c3) == ((28, 28, 128), (28, 28, 512))


# --------------------------------------------------------------------------------------
# Facts 7(a): ResNet-50 with block()
# --------------------------------------------------------------------------------------

R131, R131_DS = BlockStyle.RESNET_1_3_1, BlockStyle.RESNET_1_3_1_DS


def resnet50() -> Node:
    return seq(
        cbrp(64, 7, 2, 3, 3, 2, 1),
        repeat(block(R131, 256, 64), 3), block(R131_DS, 512, 128),
        repeat(block(R131, 512, 128), 3), block(R131_DS, 1024, 256),
        repeat(block(R131, 1024, 256), 5), block(R131_DS, 2048, 512),
        repeat(block(R131, 2048, 512), 2), gap_fc(1000),
    )


def test_resnet50_unfused_shapes_follow_ssa() -> None:
    """Unfused ResNet-50 ends in 7x7x2048 like the fused one (the seed's linear walk gives
    1x1x2048, facts 7(a); DESIGN section 7)."""
    module = run(model(resnet50(), (224, 224, 3), 1000), ArchExpandPass())
    # the seed's 218 step-1 layers less 48 markers and 12 Identity layers, plus 16 adds
    assert len(the_model(module).layers()) == 218 - 48 - 12 + 16
    module = front(module)
    m = the_model(module)
    assert m.input_hwc == (224, 224, 3)  # no amp: no alignment
    ks = kinds(module)
    assert ks[:4] == ["Conv", "Bn2d", "ReLU", "MaxPool"]
    assert ks.count("Add") == 16 and ks.count("Identity") == 12
    assert ks[-3:] == ["GAP", "FC", "SoftmaxCE"]
    assert len(ks) == 218 - 48 + 16 + 1
    blocks_out = [shapes(a)[1] for a in layers_of(module, AddOp)]
    assert blocks_out == (
        [(56, 56, 256)] * 3 + [(28, 28, 512)] * 4 + [(14, 14, 1024)] * 6 + [(7, 7, 2048)] * 3
    )
    assert shapes(layers_of(module, GapOp)[0]) == ((7, 7, 2048), (1, 1, 2048))
    # Projection blocks: conv 1x1 stride 2 shortcut and the 3x3 of the main branch carry the
    # stride; shortcut ops come before the main branch.
    first_ds = [op for op in layers_of(module, ConvOp) if op.param("s") == 2]
    assert [(op.param("k"), op.param("out_ch")) for op in first_ds] == [
        (7, 64), (1, 512), (3, 128), (1, 1024), (3, 256), (1, 2048), (3, 512)
    ]


def test_resnet50_fused_7a() -> None:
    module = run(model(resnet50(), (224, 224, 3), 1000, amp=True, fuse=True), ArchExpandPass())
    assert len(the_model(module).layers()) == 22  # facts 7(a): step 1 gives 22 layers
    module = front(module)
    ks = kinds(module)
    assert ks == (["Conv", "Bn2d", "ReLU", "MaxPool", "BottleneckProjection"]
                  + ["BottleneckIdentity"] * 2 + ["BottleneckProjection"]
                  + ["BottleneckIdentity"] * 3 + ["BottleneckProjection"]
                  + ["BottleneckIdentity"] * 5 + ["BottleneckProjection"]
                  + ["BottleneckIdentity"] * 2 + ["GAP", "FC", "SoftmaxCE"])
    m = the_model(module)
    assert m.input_hwc == (224, 224, 4)
    layers = m.layers()
    assert shapes(layers[0]) == ((224, 224, 4), (112, 112, 64))
    assert shapes(layers[3]) == ((112, 112, 64), (56, 56, 64))
    projections = [op for op in layers if op.LAYER_KIND == "BottleneckProjection"]
    assert [(op.param("bottleneck_ch"), op.param("out_ch"), op.param("stride"))
            for op in projections] == [(64, 256, 1), (128, 512, 2), (256, 1024, 2), (512, 2048, 2)]
    assert [shapes(op)[1] for op in projections] == [
        (56, 56, 256), (28, 28, 512), (14, 14, 1024), (7, 7, 2048)
    ]
    assert shapes(layers[-3]) == ((7, 7, 2048), (1, 1, 2048))


def test_resnet50_emitted_by_blueprint_matches() -> None:
    """The same net written with the BluePrint DSL goes through the front passes to the same IR."""
    import tr_mlir.blueprint as bp  # first-party: an import error must fail, never skip
    net = bp.seq(
        bp.cbrp(64, 7, 2, 3, 3, 2, 1),
        bp.repeat(bp.block(64, 256, R131), 3), bp.block(128, 512, R131_DS),
        bp.repeat(bp.block(128, 512, R131), 3), bp.block(256, 1024, R131_DS),
        bp.repeat(bp.block(256, 1024, R131), 5), bp.block(512, 2048, R131_DS),
        bp.repeat(bp.block(512, 2048, R131), 2), bp.gap_fc(1000, True),
    )
    for fuse in (False, True):
        ours = front(model(resnet50(), (224, 224, 3), 1000, amp=fuse, fuse=fuse))
        theirs = front(bp.emit(net, (224, 224, 3), num_classes=1000, amp=fuse, fuse=fuse))
        assert kinds(theirs) == kinds(ours)
        assert [shapes(op) for op in the_model(theirs).layers()] == [
            shapes(op) for op in the_model(ours).layers()
        ]


# --------------------------------------------------------------------------------------
# Facts 7(d): ResNet-18, MobileNetV2 head, LeNet-5
# --------------------------------------------------------------------------------------


def test_resnet18_fused_7d() -> None:
    b33, b33ds = BlockStyle.RESNET_3_3, BlockStyle.RESNET_3_3_DS
    net = seq(cbr(64, 7, 2, 3), maxpool(3, 2, 1), repeat(block(b33, 64), 2),
              block(b33ds, 128), block(b33, 128), block(b33ds, 256), block(b33, 256),
              block(b33ds, 512), block(b33, 512), gap_fc(1000))
    module = front(model(net, (224, 224, 3), 1000, amp=True, fuse=True))
    assert kinds(module) == (["CBR", "MaxPool", "BasicBlockIdentity", "BasicBlockIdentity"]
                             + ["BasicBlockProjection", "BasicBlockIdentity"] * 3
                             + ["GAP", "FC", "SoftmaxCE"])
    blocks = [op for op in the_model(module).layers() if op.LAYER_KIND.startswith("BasicBlock")]
    assert [shapes(op)[1][:2] for op in blocks] == (
        [(56, 56)] * 2 + [(28, 28)] * 2 + [(14, 14)] * 2 + [(7, 7)] * 2
    )
    projections = [op for op in blocks if op.LAYER_KIND == "BasicBlockProjection"]
    assert [op.param("stride") for op in projections] == [2] * 3


def mobilenet_head() -> Node:
    e1, e1ds = BlockStyle.MB_E1_K3, BlockStyle.MB_E1_K3_DS
    e6, e6ds = BlockStyle.MB_E6_K3, BlockStyle.MB_E6_K3_DS
    return seq(cbr(32, 3, 2, 1), block(e1, 16), block(e6ds, 24), block(e6, 24), block(e1, 24),
               block(e1ds, 32), cbr(1280, 1, 1, 0), gap_fc(1000))


def test_mobilenet_head_fused_7d() -> None:
    module = front(model(mobilenet_head(), (224, 224, 3), 1000, amp=True, fuse=True))
    layers = the_model(module).layers()
    inv = [op for op in layers if op.LAYER_KIND.startswith("InvResidual")]
    assert [(op.LAYER_KIND, op.param("expand_ch"), op.param("out_ch"),
             op.params().get("stride", 1)) for op in inv] == [
        ("InvResidualNoShortcut", 32, 16, 1),
        ("InvResidualNoShortcut", 96, 24, 2),
        ("InvResidualIdentity", 144, 24, 1),
        ("InvResidualIdentity", 24, 24, 1),
        ("InvResidualNoShortcut", 24, 32, 2),
    ]
    assert [shapes(op)[1] for op in inv] == [
        (112, 112, 16), (56, 56, 24), (56, 56, 24), (56, 56, 24), (28, 28, 32)
    ]
    assert kinds(module)[-4:] == ["CBR", "GAP", "FC", "SoftmaxCE"]


def test_mobilenet_head_unfused_is_depthwise() -> None:
    module = front(model(mobilenet_head(), (224, 224, 3), 1000))
    convs = layers_of(module, ConvOp)
    depthwise = [op for op in convs if op.param("groups") > 1]
    # one true depthwise 3x3 per block, groups = expansion width = out_ch
    assert [(op.param("groups"), op.param("out_ch"), op.param("s")) for op in depthwise] == [
        (32, 32, 1), (96, 96, 2), (144, 144, 1), (24, 24, 1), (24, 24, 2)
    ]
    assert all(op.param("k") == 3 for op in depthwise)
    # identity shortcuts only where stride 1 and channels stay: blocks 3 and 4
    adds = layers_of(module, AddOp)
    assert [shapes(a)[1] for a in adds] == [(56, 56, 24), (56, 56, 24)]
    assert len(layers_of(module, IdentityOp)) == 2
    assert shapes(layers_of(module, GapOp)[0])[0] == (28, 28, 1280)


def test_lenet5_7d() -> None:
    net = seq(conv(6, 5), tanh(), maxpool(2, 2, 0), conv(16, 5), tanh(), maxpool(2, 2, 0),
              fc(120), tanh(), fc(84), tanh(), fc(10))
    module = front(model(net, (32, 32, 1), 10, amp=True, fuse=True))
    assert the_model(module).input_hwc == (32, 32, 4)
    assert len(the_model(module).layers()) == 12
    assert "Flatten" not in kinds(module)  # C = 16 at the first FC
    assert shapes(layers_of(module, FcOp)[0])[0] == (5, 5, 16)


# --------------------------------------------------------------------------------------
# Pass contracts: idempotence, options, several models, registry names
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("build", [net_7c, resnet50, mobilenet_head, mlp])
@pytest.mark.parametrize("fuse", [False, True])
def test_front_passes_are_idempotent(build: Callable[[], Node], fuse: bool) -> None:
    hwc = (28, 28, 1) if build is mlp else (224, 224, 3)
    module = front(model(build(), hwc, 10 if build is mlp else 1000, amp=fuse, fuse=fuse))
    once = str(module)
    for cls in FRONT:
        run(module, cls())
        assert str(module) == once, cls.name


def test_options_rewrite_the_model_first() -> None:
    module = model(seq(conv(8, 3, 1, 1), block(BlockStyle.RESNET_3_3, 8)), (8, 8, 3), 10)
    run(module, ArchExpandPass(fuse=True))
    m = the_model(module)
    assert m.param("fuse") and kinds(module) == ["Conv", "BasicBlockIdentity"]
    run(module, ArchNormalizeSoftmaxCePass(num_classes=8))
    assert m.param("num_classes") == 8 and m.layers()[-1].param("num_classes") == 8
    run(module, ArchAlignAmpInputPass(amp=True))
    assert m.param("amp") and m.input_hwc == (8, 8, 4)
    run(module, ArchAlignAmpInputPass(amp=False), ArchDeduceShapesPass())
    assert not m.param("amp") and m.input_hwc == (8, 8, 4)  # alignment is not undone
    assert shapes(m.layers()[0])[0] == (8, 8, 4)


def test_num_classes_option_must_be_positive() -> None:
    module = model(seq(fc(10)), (1, 1, 4), 10)
    with pytest.raises(PassFailedException, match="expected num_classes >= 1, got 0"):
        run(module, ArchExpandPass(), ArchNormalizeSoftmaxCePass(num_classes=0))


def test_every_model_is_processed() -> None:
    a = the_model(model(mlp(), (28, 28, 1), 10, name="a"))
    b = the_model(model(seq(block(BlockStyle.RESNET_3_3, 8), gap_fc(10)), (8, 8, 8), 10, name="b"))
    for m in (a, b):
        m.detach()
    module = ModuleOp([a, b])
    front(module)
    assert [type(op).__name__ for op in a.layers()][:2] == ["FlattenOp", "FcOp"]
    assert [op.LAYER_KIND for op in b.layers()] == [
        "Identity", "Conv", "Bn2d", "ReLU", "Conv", "Bn2d", "Add", "ReLU", "GAP", "FC", "SoftmaxCE"
    ]


def test_deduce_shapes_rejects_mismatched_add() -> None:
    """A hand-written add2 whose branches disagree is a diagnostic naming both shapes."""
    net = seq(add2(None, seq(conv(16, 3, 1, 1))))
    module = run(model(net, (8, 8, 8), 16), ArchExpandPass())
    with pytest.raises(PassFailedException, match=r"tensor<\?x8x8x8xf32> \(shortcut\) and "
                                                  r"tensor<\?x8x8x16xf32> \(main\)"):
        run(module, ArchDeduceShapesPass())


def test_pass_names_are_registered() -> None:
    for cls in FRONT:
        assert PASSES[cls.name] == cls.__name__
        assert cls.__module__ == f"tr_mlir.passes.{cls.name.replace('-', '_')}"
