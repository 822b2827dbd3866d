"""The model zoo (tr_mlir.zoo): registry, architectures, emission, command line."""

from __future__ import annotations

import inspect
import subprocess
import sys
from collections import Counter

import pytest
from xdsl.context import Context
from xdsl.dialects.builtin import Builtin, ModuleOp
from xdsl.ir import Block as IRBlock
from xdsl.parser import Parser

import tr_mlir.blueprint as bp
import tr_mlir.dialects.arch as arch
from tr_mlir import zoo
from tr_mlir.blueprint import (
    BlockStyle,
    BluePrintError,
    Layer,
    block,
    cbr,
    cbrp,
    conv,
    fc,
    gap_fc,
    maxpool,
    relu,
    repeat,
    seq,
    tanh_act,
)
from tr_mlir.zoo import MODELS, emit_model, example_text

S = BlockStyle
IMAGENET = ("vgg16_bn", "resnet18", "resnet34", "resnet50", "resnet101", "resnet152",
            "resnet_bottleneck_manual", "mobilenet_v2")


def parse(text: str) -> ModuleOp:
    ctx = Context()
    ctx.load_dialect(Builtin)
    ctx.load_dialect(arch.Arch)
    module = Parser(ctx, text).parse_module()
    module.verify()
    return module


def model_of(module: ModuleOp) -> arch.ModelOp:
    (model,) = module.body.block.ops
    assert isinstance(model, arch.ModelOp)
    return model


# -- a shape walk over the tree form (test oracle: each op's own infer_hwc) -----------


def _run_region(block: IRBlock, hwc: arch.HWC) -> arch.HWC:
    env = {block.args[0]: hwc}
    for op in block.ops:
        if isinstance(op, (arch.YieldOp, arch.OutputOp)):
            return env[op.value]
        env[op.output] = TREE_SHAPE_RULES.get(type(op), _layer_rule)(op, env[op.input])
    raise AssertionError("region without terminator")


def _layer_rule(op: arch.LayerOp, hwc: arch.HWC) -> arch.HWC:
    return op.infer_hwc(hwc)


def _repeat_rule(op: arch.RepeatOp, hwc: arch.HWC) -> arch.HWC:
    for _ in range(op.times.value.data):
        hwc = _run_region(op.body.block, hwc)
    return hwc


def _add2_rule(op: arch.Add2Op, hwc: arch.HWC) -> arch.HWC:
    shortcut = _run_region(op.shortcut.block, hwc)
    main = _run_region(op.main.block, hwc)
    assert shortcut == main, f"add2 branches disagree: {shortcut} vs {main}"
    return main


TREE_SHAPE_RULES = {
    arch.SeqOp: lambda op, hwc: _run_region(op.body.block, hwc),
    arch.RepeatOp: _repeat_rule,
    arch.Add2Op: _add2_rule,
}


def output_hwc(module: ModuleOp) -> arch.HWC:
    model = model_of(module)
    return _run_region(model.body.block, model.input_hwc)


def unrolled_blocks(layer: Layer | None) -> list[Layer]:
    """The Block layers of a tree in order, repeats unrolled."""
    if layer is None:
        return []
    name = type(layer).__name__
    if name == "Block":
        return [layer]
    if name == "Seq":
        return [b for child in layer.children for b in unrolled_blocks(child)]
    if name == "Repeat":
        return unrolled_blocks(layer.body) * layer.times
    if name == "Add2":
        return unrolled_blocks(layer.shortcut) + unrolled_blocks(layer.main)
    return []


def leaves(layer: Layer | None) -> list[Layer]:
    if layer is None:
        return []
    name = type(layer).__name__
    if name == "Seq":
        return [x for c in layer.children for x in leaves(c)]
    if name == "Repeat":
        return leaves(layer.body) * layer.times
    if name == "Add2":
        return leaves(layer.shortcut) + leaves(layer.main)
    return [layer]


# --------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------


def test_registry_is_consistent():
    assert len(MODELS) >= 15
    for name, spec in MODELS.items():
        assert spec.name == name == spec.builder.__name__
        assert getattr(zoo, name) is spec.builder
        assert name in zoo.__all__
        default = inspect.signature(spec.builder).parameters["num_classes"].default
        assert default == spec.num_classes, name
        assert spec.description and "\n" not in spec.description and len(spec.description) <= 80
        assert spec.builder.__doc__
        h, w, c = spec.input_shape
        assert min(h, w, c) >= 1


def test_default_inputs_and_classes():
    for name in IMAGENET:
        assert (MODELS[name].input_shape, MODELS[name].num_classes) == ((224, 224, 3), 1000), name
    assert (MODELS["mlp"].input_shape, MODELS["mlp"].num_classes) == ((28, 28, 1), 10)
    assert (MODELS["lenet5"].input_shape, MODELS["lenet5"].num_classes) == ((32, 32, 1), 10)
    for name in ("resnet_tiny", "mlp_digits", "depthwise_tiny"):
        assert MODELS[name].input_shape == (8, 8, 1)
    assert MODELS["resnet8_cifar"].input_shape == (32, 32, 3)


# --------------------------------------------------------------------------------------
# Every model: emits, verifies, round-trips, shapes work out
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", MODELS)
def test_emit_verifies_and_roundtrips(name):
    spec = MODELS[name]
    module = emit_model(name)
    module.verify()
    model = model_of(module)
    assert model.sym_name.data == name
    assert model.input_hwc == spec.input_shape
    assert model.params()["num_classes"] == spec.num_classes
    text = str(module)
    reparsed = parse(text)
    assert str(reparsed) == text
    assert reparsed.is_structurally_equivalent(module)


@pytest.mark.parametrize("name", MODELS)
def test_shapes_end_in_the_logits(name):
    spec = MODELS[name]
    assert output_hwc(emit_model(name)) == (1, 1, spec.num_classes)
    assert output_hwc(emit_model(name, num_classes=7)) == (1, 1, 7)


@pytest.mark.parametrize("name", MODELS)
def test_blueprint_is_deterministic_and_printable(name):
    spec = MODELS[name]
    a, b = spec.blueprint(), spec.builder(spec.num_classes)
    assert a == b and hash(a) == hash(b)
    assert eval(repr(a), vars(bp)) == a


# --------------------------------------------------------------------------------------
# Architectures
# --------------------------------------------------------------------------------------


def test_mlp_is_the_seed_model():
    assert zoo.mlp() == seq(fc(1024, True), relu(), fc(512, True), relu(), fc(256, True), relu(),
                            fc(10, True))


def test_lenet5_is_the_seed_model():
    assert zoo.lenet5() == seq(conv(6, 5), tanh_act(), maxpool(2, 2, 0), conv(16, 5), tanh_act(),
                               maxpool(2, 2, 0), fc(120, True), tanh_act(), fc(84, True), tanh_act(),
                               fc(10, True))


def test_resnet50_is_facts_7a():
    assert zoo.resnet50() == seq(
        cbrp(64, 7, 2, 3, 3, 2, 1),
        repeat(block(64, 256, S.RESNET_1_3_1), 3), block(128, 512, S.RESNET_1_3_1_DS),
        repeat(block(128, 512, S.RESNET_1_3_1), 3), block(256, 1024, S.RESNET_1_3_1_DS),
        repeat(block(256, 1024, S.RESNET_1_3_1), 5), block(512, 2048, S.RESNET_1_3_1_DS),
        repeat(block(512, 2048, S.RESNET_1_3_1), 2), gap_fc(1000, True))


def test_resnet18_is_facts_7d():
    assert zoo.resnet18() == seq(
        cbr(64, 7, 2, 3), maxpool(3, 2, 1), repeat(block(64, S.RESNET_3_3), 2),
        block(128, S.RESNET_3_3_DS), block(128, S.RESNET_3_3),
        block(256, S.RESNET_3_3_DS), block(256, S.RESNET_3_3),
        block(512, S.RESNET_3_3_DS), block(512, S.RESNET_3_3), gap_fc(1000, True))


@pytest.mark.parametrize("name, stages, style", [
    ("resnet18", (2, 2, 2, 2), S.RESNET_3_3),
    ("resnet34", (3, 4, 6, 3), S.RESNET_3_3),
    ("resnet50", (3, 4, 6, 3), S.RESNET_1_3_1),
    ("resnet101", (3, 4, 23, 3), S.RESNET_1_3_1),
    ("resnet152", (3, 8, 36, 3), S.RESNET_1_3_1),
])
def test_resnet_stages(name, stages, style):
    blocks = unrolled_blocks(MODELS[name].blueprint())
    widths = (64, 128, 256, 512) if style is S.RESNET_3_3 else (256, 512, 1024, 2048)
    assert Counter(b.out_ch for b in blocks) == dict(zip(widths, stages))
    ds = [i for i, b in enumerate(blocks) if b.stride == 2]
    assert ds == [stages[0], sum(stages[:2]), sum(stages[:3])]  # first block of stages 2-4
    assert {b.style.is_bottleneck for b in blocks} == {style.is_bottleneck}
    if style.is_bottleneck:
        assert all(b.out_ch == 4 * b.mid_ch for b in blocks)


def test_mobilenet_v2_table():
    blocks = unrolled_blocks(zoo.mobilenet_v2())
    table = [(b.expand_ratio, b.out_ch, b.stride) for b in blocks]
    assert len(table) == 17
    assert table == ([(1, 16, 1)] + [(6, 24, 2), (6, 24, 1)] + [(6, 32, 2)] + [(6, 32, 1)] * 2
                     + [(6, 64, 2)] + [(6, 64, 1)] * 3 + [(6, 96, 1)] * 3
                     + [(6, 160, 2)] + [(6, 160, 1)] * 2 + [(6, 320, 1)])
    children = zoo.mobilenet_v2().children
    assert children[0] == cbr(32, 3, 2, 1)
    assert children[-2:] == (cbr(1280, 1, 1, 0), gap_fc(1000, True))
    assert output_hwc(emit_model("mobilenet_v2", num_classes=1280)) == (1, 1, 1280)


def test_vgg16_bn_layers():
    kinds = Counter(type(x).__name__ for x in leaves(zoo.vgg16_bn()))
    assert kinds == {"Conv": 13, "Bn": 13, "Relu": 15, "MaxPool": 5, "Flatten": 1, "Fc": 3, "Dropout": 2}
    convs = [x.out_ch for x in leaves(zoo.vgg16_bn()) if type(x).__name__ == "Conv"]
    assert convs == [64, 64, 128, 128, 256, 256, 256, 512, 512, 512, 512, 512, 512]
    fcs = [(x.out_features, x.bias) for x in leaves(zoo.vgg16_bn(5)) if type(x).__name__ == "Fc"]
    assert fcs == [(4096, True), (4096, True), (5, True)]


def test_small_models_cover_the_block_kinds():
    styles = {b.style for b in unrolled_blocks(zoo.resnet_tiny())}
    assert styles == {S.RESNET_3_3, S.RESNET_3_3_DS}
    styles = {b.style for b in unrolled_blocks(zoo.mobilenet_tiny())}
    assert styles == {S.MB_E1_K3, S.MB_E6_K3, S.MB_E6_K3_DS}
    module = emit_model("depthwise_tiny")
    dws = [op.params() for op in module.walk() if op.name == "arch.conv" and op.params()["groups"] > 1]
    assert [(p["groups"], p["out_ch"], p["s"]) for p in dws] == [(16, 16, 1), (32, 32, 2)]
    assert output_hwc(module) == (1, 1, 10)


def test_manual_bottlenecks_are_facts_7c():
    blue = zoo.resnet_bottleneck_manual()
    # facts 7(c): 47 layers after the seed's step 1 = our 38 leaves + 3 Add2 marker triples
    assert len(leaves(blue)) == 47 - 3 * 3
    kinds = Counter(type(x).__name__ for x in leaves(blue))
    assert kinds == {"Conv": 12, "Bn": 12, "Relu": 10, "MaxPool": 1, "Identity": 1, "Gap": 1, "Fc": 1}
    module = emit_model("resnet_bottleneck_manual")
    assert sum(op.name == "arch.add2" for op in module.walk()) == 3
    assert output_hwc(module) == (1, 1, 1000)


# --------------------------------------------------------------------------------------
# emit_model and the command line
# --------------------------------------------------------------------------------------


def test_emit_model_overrides():
    module = emit_model("resnet_tiny", num_classes=3, input_shape=(16, 12, 3), amp=True, fuse=True)
    model = model_of(module)
    assert model.input_hwc == (16, 12, 3)
    assert model.params()["num_classes"] == 3
    assert (model.params()["amp"], model.params()["fuse"]) == (True, True)
    assert output_hwc(module) == (1, 1, 3)


@pytest.mark.parametrize("call, message", [
    (lambda: emit_model("resnet_huge"), "unknown model 'resnet_huge'; known models: mlp, mlp_digits"),
    (lambda: emit_model("mlp", num_classes=0), "mlp: num_classes must be >= 1, got 0"),
    (lambda: emit_model("mlp", num_classes=True), "mlp: num_classes must be an int, got True"),
    (lambda: emit_model("lenet5", input_shape=(32, 32)), "emit: input_shape must be (H, W, C)"),
])
def test_emit_model_errors(call, message):
    with pytest.raises(BluePrintError) as info:
        call()
    assert str(info.value).startswith(message)


def test_cli_list(capsys):
    assert zoo.main(["--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == list(MODELS)
    assert lines[list(MODELS).index("resnet50")].split()[1:3] == ["224x224x3", "1000"]


def test_cli_prints_a_model(capsys):
    assert zoo.main(["resnet_tiny", "--num-classes", "4", "--input", "8,8,3", "--amp"]) == 0
    out = capsys.readouterr().out
    model = model_of(parse(out))
    assert model.input_hwc == (8, 8, 3)
    assert model.params()["num_classes"] == 4
    assert (model.params()["amp"], model.params()["fuse"]) == (True, False)
    assert out == str(emit_model("resnet_tiny", num_classes=4, input_shape=(8, 8, 3), amp=True)) + "\n"


def test_cli_write_examples(tmp_path, capsys):
    out = tmp_path / "ex"
    assert zoo.main(["--write-examples", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(f"{n}.mlir" for n in MODELS)
    assert (out / "mlp.mlir").read_text() == example_text("mlp")
    assert f"wrote {len(MODELS)} examples" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["nope"], "python -m tr_mlir.zoo: error: unknown model 'nope'; known models:"),
    (["mlp", "--num-classes", "0"], "python -m tr_mlir.zoo: error: mlp: num_classes must be >= 1, got 0"),
    (["lenet5", "--input", "0,32,1"], "python -m tr_mlir.zoo: error: emit: input_shape[0] must be >= 1, got 0"),
])
def test_cli_errors_without_traceback(argv, message, capsys):
    assert zoo.main(argv) == 1
    captured = capsys.readouterr()
    assert captured.err.startswith(message)
    assert "Traceback" not in captured.err and captured.out == ""


@pytest.mark.parametrize("argv", [[], ["mlp", "--list"], ["mlp", "--input", "8,8"], ["mlp", "--input", "a,b,c"]])
def test_cli_usage_errors(argv, capsys):
    with pytest.raises(SystemExit) as info:
        zoo.main(argv)
    assert info.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_cli_module_entry_point():
    proc = subprocess.run([sys.executable, "-m", "tr_mlir.zoo", "mlp_digits"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == str(emit_model("mlp_digits")) + "\n"
