"""The whole ArchPlan pipeline against the original system's observable results.

Reference points: the fact sheet's worked examples (section 7) and the original's verbatim
YAML outputs in ``shared/reference/archplan-examples`` (skipped with a message when the shared
folder is not beside the checkout). DESIGN section 7 differences are asserted explicitly:
unfused residual nets keep their true spatial sizes, MobileNet blocks use a depthwise 3x3.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tr_mlir import zoo
from tr_mlir.archplan_yaml import from_yaml, to_yaml
from tr_mlir.blueprint import (
    BlockStyle,
    add2,
    block,
    bn,
    cbr,
    conv,
    fc,
    gap,
    gap_fc,
    identity,
    maxpool,
    mbconv,
    relu,
    seq,
)
from tr_mlir.compile import arch_plan
from tr_mlir.dialects import arch

REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "reference" / "archplan-examples"


def layers_of(module) -> list:
    (model,) = [op for op in module.walk() if isinstance(op, arch.ModelOp)]
    return model, model.layers()


def kinds(module) -> list[str]:
    return [op.LAYER_KIND for op in layers_of(module)[1]]


def hwc(op) -> tuple[int, int, int]:
    return arch.static_hwc(op.output.type)


def in_hwc(op) -> tuple[int, int, int]:
    return arch.static_hwc(op.operands[0].type)


# --------------------------------------------------------------------------------------
# Facts sheet 7(a): ResNet-50
# --------------------------------------------------------------------------------------


def test_resnet50_fused_amp_is_the_20_layer_plan():
    module = arch_plan(zoo.resnet50(), (224, 224, 3), amp=True, fuse=True, num_classes=1000)
    model, layers = layers_of(module)
    assert model.input_hwc == (224, 224, 4)  # AMP aligns the first conv's input C to 4
    assert model.first_layer.value.data == 0
    assert kinds(module) == (
        ["CBR", "MaxPool", "BottleneckProjection"]
        + ["BottleneckIdentity"] * 2
        + ["BottleneckProjection"]
        + ["BottleneckIdentity"] * 3
        + ["BottleneckProjection"]
        + ["BottleneckIdentity"] * 5
        + ["BottleneckProjection"]
        + ["BottleneckIdentity"] * 2
        + ["GapFC", "SoftmaxCE"]
    )
    assert layers[0].params() == {
        "out_ch": 64, "k": 7, "s": 2, "p": 3, "eps": 1e-5, "momentum": 0.1
    }
    assert hwc(layers[0]) == (112, 112, 64)
    assert hwc(layers[1]) == (56, 56, 64)
    projections = [op for op in layers if isinstance(op, arch.BottleneckProjectionOp)]
    assert [(p.param("bottleneck_ch"), p.param("out_ch"), p.param("stride")) for p in projections] == [
        (64, 256, 1), (128, 512, 2), (256, 1024, 2), (512, 2048, 2)
    ]
    assert [hwc(p) for p in projections] == [(56, 56, 256), (28, 28, 512), (14, 14, 1024), (7, 7, 2048)]
    assert hwc(layers[-3]) == (7, 7, 2048)
    assert layers[-2].params() == {"out_features": 1000, "bias": True}
    assert hwc(layers[-1]) == (1, 1, 1000)


def test_resnet50_unfused_keeps_true_shapes():
    """DESIGN section 7: shapes follow the SSA graph (the original ends in 1x1x2048)."""
    module = arch_plan(zoo.resnet50(), (224, 224, 3), amp=False, fuse=False, num_classes=1000)
    model, layers = layers_of(module)
    assert model.input_hwc == (224, 224, 3)  # no AMP: no alignment
    gap_op = next(op for op in layers if isinstance(op, arch.GapOp))
    assert in_hwc(gap_op) == (7, 7, 2048)
    assert sum(isinstance(op, arch.AddOp) for op in layers) == 16
    # identity shortcuts carry an explicit arch.identity (the seed's re-inserted Identity)
    assert sum(isinstance(op, arch.IdentityOp) for op in layers) == 12
    assert not any(isinstance(op, arch.FUSED_OPS) for op in layers)
    assert kinds(module)[-1] == "SoftmaxCE"


# --------------------------------------------------------------------------------------
# Facts sheet 7(b): the MLP
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("fuse,amp", [(False, False), (True, True), (True, False)])
def test_mlp_plan_is_identical_in_both_modes(fuse, amp):
    module = arch_plan(zoo.mlp(), (28, 28, 1), amp=amp, fuse=fuse, num_classes=10)
    model, layers = layers_of(module)
    assert kinds(module) == ["Flatten", "FC", "ReLU", "FC", "ReLU", "FC", "ReLU", "FC", "SoftmaxCE"]
    assert model.input_hwc == (28, 28, 1)
    assert hwc(layers[0]) == (1, 1, 784)
    assert [op.param("out_features") for op in layers if isinstance(op, arch.FcOp)] == [1024, 512, 256, 10]


def test_fc_on_hwc_with_c_multiple_of_8_needs_no_flatten():
    module = arch_plan(zoo.mlp(), (28, 28, 8), amp=False, fuse=False, num_classes=10)
    assert kinds(module)[0] == "FC"
    assert in_hwc(layers_of(module)[1][0]) == (28, 28, 8)


# --------------------------------------------------------------------------------------
# Facts sheet 7(c): hand-written bottlenecks
# --------------------------------------------------------------------------------------


def bneck(mid: int, out: int, ds: bool, proj: bool):
    s = 2 if ds else 1
    shortcut = seq(conv(out, 1, s, 0), bn()) if proj else identity()
    main = seq(conv(mid, 1), bn(), relu(), conv(mid, 3, s, 1), bn(), relu(), conv(out, 1), bn())
    return seq(add2(shortcut, main), relu())


HANDWRITTEN = seq(
    conv(64, 7, 2, 3), bn(), relu(), maxpool(3, 2, 1),
    bneck(64, 256, False, True), bneck(64, 256, False, False), bneck(128, 512, True, True),
    gap(), fc(1000, True),
)


def test_handwritten_bottlenecks_fuse_to_seven_layers():
    module = arch_plan(HANDWRITTEN, (224, 224, 3), amp=True, fuse=True, num_classes=1000)
    model, layers = layers_of(module)
    assert kinds(module) == [
        "CBR", "MaxPool", "BottleneckProjection", "BottleneckIdentity", "BottleneckProjection",
        "GapFC", "SoftmaxCE",
    ]
    assert model.input_hwc == (224, 224, 4)
    assert layers[2].params()["bottleneck_ch"] == 64 and layers[2].param("stride") == 1
    assert layers[4].param("stride") == 2 and hwc(layers[4]) == (28, 28, 512)
    assert hwc(layers[3]) == (56, 56, 256)


def test_handwritten_bottlenecks_unfused_shapes_follow_ssa():
    module = arch_plan(HANDWRITTEN, (224, 224, 3), amp=False, fuse=False, num_classes=1000)
    _, layers = layers_of(module)
    adds = [op for op in layers if isinstance(op, arch.AddOp)]
    assert [hwc(a) for a in adds] == [(56, 56, 256), (56, 56, 256), (28, 28, 512)]
    # stem 4; projection blocks 2 + 8 + add + relu = 12; identity block 1 + 8 + add + relu = 11;
    # gap, fc, softmax_ce: no Add2 marker layers in SSA form
    assert len(layers) == 4 + 12 + 11 + 12 + 3


# --------------------------------------------------------------------------------------
# Facts sheet 7(d)
# --------------------------------------------------------------------------------------


def test_resnet18_fused():
    module = arch_plan(zoo.resnet18(), (224, 224, 3), amp=True, fuse=True, num_classes=1000)
    assert kinds(module) == [
        "CBR", "MaxPool", "BasicBlockIdentity", "BasicBlockIdentity",
        "BasicBlockProjection", "BasicBlockIdentity", "BasicBlockProjection", "BasicBlockIdentity",
        "BasicBlockProjection", "BasicBlockIdentity", "GapFC", "SoftmaxCE",
    ]
    _, layers = layers_of(module)
    assert [hwc(op)[:2] for op in layers if isinstance(op, arch.BasicBlockProjectionOp)] == [
        (28, 28), (14, 14), (7, 7)
    ]


def test_mobilenet_v2_head_fused():
    net = seq(
        cbr(32, 3, 2, 1), mbconv(1, 16, 1), mbconv(6, 24, 2), mbconv(6, 24, 1), mbconv(1, 24, 1),
        block(32, BlockStyle.MB_E1_K3_DS), cbr(1280, 1, 1, 0), gap_fc(1000, True),
    )
    module = arch_plan(net, (224, 224, 3), amp=True, fuse=True, num_classes=1000)
    _, layers = layers_of(module)
    assert kinds(module) == [
        "CBR", "InvResidualNoShortcut", "InvResidualNoShortcut", "InvResidualIdentity",
        "InvResidualIdentity", "InvResidualNoShortcut", "CBR", "GapFC", "SoftmaxCE",
    ]
    got = [(op.param("expand_ch"), op.param("out_ch"), op.params().get("stride", 1))
           for op in layers if "InvResidual" in op.LAYER_KIND]
    assert got == [(32, 16, 1), (96, 24, 2), (144, 24, 1), (24, 24, 1), (24, 32, 2)]
    assert hwc(layers[0]) == (112, 112, 32)
    assert hwc(layers[2]) == (56, 56, 24)
    assert hwc(layers[5]) == (28, 28, 32)


def test_mobilenet_unfused_uses_a_true_depthwise_conv():
    net = seq(cbr(32, 3, 2, 1), mbconv(6, 32, 1), gap_fc(10, True))
    module = arch_plan(net, (32, 32, 3), amp=False, fuse=False, num_classes=10)
    _, layers = layers_of(module)
    dw = [op for op in layers if isinstance(op, arch.ConvOp) and op.param("groups") > 1]
    assert [(op.param("groups"), op.param("out_ch"), op.param("k")) for op in dw] == [(192, 192, 3)]


def test_lenet5_fused():
    module = arch_plan(zoo.lenet5(), (32, 32, 1), amp=True, fuse=True, num_classes=10)
    model, layers = layers_of(module)
    assert model.input_hwc == (32, 32, 4)
    assert len(layers) == 12
    assert "Flatten" not in kinds(module)
    first_fc = next(op for op in layers if isinstance(op, arch.FcOp))
    assert in_hwc(first_fc) == (5, 5, 16)
    assert kinds(module)[0] == "Conv"


def run_lengths(module) -> list[tuple]:
    """(kind, count, in HWC, out HWC, params without eps/momentum) per run of equal layers."""
    rows: list[list] = []
    for op in layers_of(module)[1]:
        params = {k: v for k, v in op.params().items() if k not in ("eps", "momentum")}
        key = [op.LAYER_KIND, 1, in_hwc(op), hwc(op), params]
        if rows and rows[-1][0] == key[0] and rows[-1][2:] == key[2:]:
            rows[-1][1] += 1
        else:
            rows.append(key)
    return [tuple(r) for r in rows]


P2 = {"k": 2, "s": 2, "p": 0}
GAP_FC = {"out_features": 1000, "bias": True}
SMCE = ("SoftmaxCE", 1, (1, 1, 1000), (1, 1, 1000), {"num_classes": 1000})
STEM = [("CBR", 1, (224, 224, 4), (112, 112, 64), {"out_ch": 64, "k": 7, "s": 2, "p": 3}),
        ("MaxPool", 1, (112, 112, 64), (56, 56, 64), {"k": 3, "s": 2, "p": 1})]

FUSED_PLANS = {  # derived from the seed's rules (facts sheet sections 2-4), AMP + fuse, 224x224x3
    "resnet34": STEM + [
        ("BasicBlockIdentity", 3, (56, 56, 64), (56, 56, 64), {"out_ch": 64}),
        ("BasicBlockProjection", 1, (56, 56, 64), (28, 28, 128), {"out_ch": 128, "stride": 2}),
        ("BasicBlockIdentity", 3, (28, 28, 128), (28, 28, 128), {"out_ch": 128}),
        ("BasicBlockProjection", 1, (28, 28, 128), (14, 14, 256), {"out_ch": 256, "stride": 2}),
        ("BasicBlockIdentity", 5, (14, 14, 256), (14, 14, 256), {"out_ch": 256}),
        ("BasicBlockProjection", 1, (14, 14, 256), (7, 7, 512), {"out_ch": 512, "stride": 2}),
        ("BasicBlockIdentity", 2, (7, 7, 512), (7, 7, 512), {"out_ch": 512}),
        ("GapFC", 1, (7, 7, 512), (1, 1, 1000), GAP_FC), SMCE],
    "resnet101": STEM + [
        ("BottleneckProjection", 1, (56, 56, 64), (56, 56, 256), {"bottleneck_ch": 64, "out_ch": 256, "stride": 1}),
        ("BottleneckIdentity", 2, (56, 56, 256), (56, 56, 256), {"bottleneck_ch": 64}),
        ("BottleneckProjection", 1, (56, 56, 256), (28, 28, 512), {"bottleneck_ch": 128, "out_ch": 512, "stride": 2}),
        ("BottleneckIdentity", 3, (28, 28, 512), (28, 28, 512), {"bottleneck_ch": 128}),
        ("BottleneckProjection", 1, (28, 28, 512), (14, 14, 1024),
         {"bottleneck_ch": 256, "out_ch": 1024, "stride": 2}),
        ("BottleneckIdentity", 22, (14, 14, 1024), (14, 14, 1024), {"bottleneck_ch": 256}),
        ("BottleneckProjection", 1, (14, 14, 1024), (7, 7, 2048), {"bottleneck_ch": 512, "out_ch": 2048, "stride": 2}),
        ("BottleneckIdentity", 2, (7, 7, 2048), (7, 7, 2048), {"bottleneck_ch": 512}),
        ("GapFC", 1, (7, 7, 2048), (1, 1, 1000), GAP_FC), SMCE],
    # the user's flatten() is deleted and none re-inserted: C = 512 is a multiple of 8 (facts 3.7)
    "vgg16_bn": [
        ("CBR", 1, (224, 224, 4), (224, 224, 64), {"out_ch": 64, "k": 3, "s": 1, "p": 1}),
        ("CBR", 1, (224, 224, 64), (224, 224, 64), {"out_ch": 64, "k": 3, "s": 1, "p": 1}),
        ("MaxPool", 1, (224, 224, 64), (112, 112, 64), P2),
        ("CBR", 1, (112, 112, 64), (112, 112, 128), {"out_ch": 128, "k": 3, "s": 1, "p": 1}),
        ("CBR", 1, (112, 112, 128), (112, 112, 128), {"out_ch": 128, "k": 3, "s": 1, "p": 1}),
        ("MaxPool", 1, (112, 112, 128), (56, 56, 128), P2),
        ("CBR", 1, (56, 56, 128), (56, 56, 256), {"out_ch": 256, "k": 3, "s": 1, "p": 1}),
        ("CBR", 2, (56, 56, 256), (56, 56, 256), {"out_ch": 256, "k": 3, "s": 1, "p": 1}),
        ("MaxPool", 1, (56, 56, 256), (28, 28, 256), P2),
        ("CBR", 1, (28, 28, 256), (28, 28, 512), {"out_ch": 512, "k": 3, "s": 1, "p": 1}),
        ("CBR", 2, (28, 28, 512), (28, 28, 512), {"out_ch": 512, "k": 3, "s": 1, "p": 1}),
        ("MaxPool", 1, (28, 28, 512), (14, 14, 512), P2),
        ("CBR", 3, (14, 14, 512), (14, 14, 512), {"out_ch": 512, "k": 3, "s": 1, "p": 1}),
        ("MaxPool", 1, (14, 14, 512), (7, 7, 512), P2),
        ("FC", 1, (7, 7, 512), (1, 1, 4096), {"out_features": 4096, "bias": True}),
        ("ReLU", 1, (1, 1, 4096), (1, 1, 4096), {}),
        ("Dropout", 1, (1, 1, 4096), (1, 1, 4096), {"p": 0.5}),
        ("FC", 1, (1, 1, 4096), (1, 1, 4096), {"out_features": 4096, "bias": True}),
        ("ReLU", 1, (1, 1, 4096), (1, 1, 4096), {}),
        ("Dropout", 1, (1, 1, 4096), (1, 1, 4096), {"p": 0.5}),
        ("FC", 1, (1, 1, 4096), (1, 1, 1000), {"out_features": 1000, "bias": True}), SMCE],
    # expand_ch = entering channels x ratio, as the seed's block expansion (facts 2.5)
    "mobilenet_v2": [
        ("CBR", 1, (224, 224, 4), (112, 112, 32), {"out_ch": 32, "k": 3, "s": 2, "p": 1}),
        ("InvResidualNoShortcut", 1, (112, 112, 32), (112, 112, 16), {"expand_ch": 32, "out_ch": 16, "stride": 1}),
        ("InvResidualNoShortcut", 1, (112, 112, 16), (56, 56, 24), {"expand_ch": 96, "out_ch": 24, "stride": 2}),
        ("InvResidualIdentity", 1, (56, 56, 24), (56, 56, 24), {"expand_ch": 144, "out_ch": 24}),
        ("InvResidualNoShortcut", 1, (56, 56, 24), (28, 28, 32), {"expand_ch": 144, "out_ch": 32, "stride": 2}),
        ("InvResidualIdentity", 2, (28, 28, 32), (28, 28, 32), {"expand_ch": 192, "out_ch": 32}),
        ("InvResidualNoShortcut", 1, (28, 28, 32), (14, 14, 64), {"expand_ch": 192, "out_ch": 64, "stride": 2}),
        ("InvResidualIdentity", 3, (14, 14, 64), (14, 14, 64), {"expand_ch": 384, "out_ch": 64}),
        ("InvResidualNoShortcut", 1, (14, 14, 64), (14, 14, 96), {"expand_ch": 384, "out_ch": 96, "stride": 1}),
        ("InvResidualIdentity", 2, (14, 14, 96), (14, 14, 96), {"expand_ch": 576, "out_ch": 96}),
        ("InvResidualNoShortcut", 1, (14, 14, 96), (7, 7, 160), {"expand_ch": 576, "out_ch": 160, "stride": 2}),
        ("InvResidualIdentity", 2, (7, 7, 160), (7, 7, 160), {"expand_ch": 960, "out_ch": 160}),
        ("InvResidualNoShortcut", 1, (7, 7, 160), (7, 7, 320), {"expand_ch": 960, "out_ch": 320, "stride": 1}),
        ("CBR", 1, (7, 7, 320), (7, 7, 1280), {"out_ch": 1280, "k": 1, "s": 1, "p": 0}),
        ("GapFC", 1, (7, 7, 1280), (1, 1, 1000), GAP_FC), SMCE],
}


@pytest.mark.parametrize("name", sorted(FUSED_PLANS))
def test_fused_zoo_plans_follow_the_seeds_rules(name):
    """The fused AMP plans of the zoo models the fact sheet does not list verbatim."""
    module = arch_plan(getattr(zoo, name)(), (224, 224, 3), amp=True, fuse=True, num_classes=1000)
    assert run_lengths(module) == FUSED_PLANS[name]


def test_fuse_without_amp_does_not_align():
    module = arch_plan(zoo.resnet18(), (224, 224, 3), amp=False, fuse=True, num_classes=1000)
    model, _ = layers_of(module)
    assert model.input_hwc == (224, 224, 3)
    assert kinds(module)[0] == "CBR"


# --------------------------------------------------------------------------------------
# Every zoo model in both modes
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(zoo.MODELS))
@pytest.mark.parametrize("fuse,amp", [(False, False), (True, True)])
def test_zoo_plans_verify_and_round_trip_through_yaml(name, fuse, amp):
    spec = zoo.MODELS[name]
    if name in ("resnet101", "resnet152") and not fuse:
        pytest.skip("the largest unfused plans are covered by resnet50; kept out for speed")
    module = arch_plan(spec.blueprint(), spec.input_shape, amp=amp, fuse=fuse,
                       num_classes=spec.num_classes)
    module.verify()
    assert kinds(module)[-1] == "SoftmaxCE"
    text = to_yaml(module)
    again = to_yaml(from_yaml(text))
    assert again == text


# --------------------------------------------------------------------------------------
# The original's verbatim YAML outputs
# --------------------------------------------------------------------------------------

REFERENCE_MODELS = {
    "mlp.fused.yaml": (lambda: zoo.mlp(), (28, 28, 1), 10),
    "resnet18.fused.yaml": (lambda: zoo.resnet18(), (224, 224, 3), 1000),
    "resnet50.fused.yaml": (lambda: zoo.resnet50(), (224, 224, 3), 1000),
}


@pytest.mark.parametrize("filename", sorted(REFERENCE_MODELS))
def test_matches_the_originals_yaml(filename):
    path = REFERENCE / filename
    if not path.is_file():
        pytest.skip(f"reference file {path} not present (shared/ is not beside this checkout)")
    build, shape, classes = REFERENCE_MODELS[filename]
    ours = yaml.safe_load(to_yaml(arch_plan(build(), shape, amp=True, fuse=True, num_classes=classes)))
    ref = yaml.safe_load(path.read_text())
    assert ours["version"] == ref["version"] == "ArchPlan-1.0"
    assert ours["input_spec"] == ref["input_spec"]
    assert ours["first_layer_index"] == ref["first_layer_index"]
    assert len(ours["layers"]) == len(ref["layers"])
    for i, (a, b) in enumerate(zip(ours["layers"], ref["layers"])):
        where = f"layer {i} ({b['kind']})"
        assert a["kind"] == b["kind"], where
        assert a["in_shape"] == b["in_shape"], where
        assert a["out_shape"] == b["out_shape"], where
        ref_params = b.get("params") or {}
        our_params = a.get("params") or {}
        assert {k: our_params.get(k) for k in ref_params} == ref_params, where
        # BN eps/momentum are written by us (the original drops them); nothing else is extra
        assert set(our_params) - set(ref_params) <= {"eps", "momentum"}, where
