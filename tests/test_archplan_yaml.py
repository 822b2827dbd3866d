"""ArchPlan YAML (tr_mlir.archplan_yaml): the seed's format, round trips, every error with its line.

Reference texts are the original's verbatim outputs in ``shared/reference/archplan-examples``
(tests that need them skip with a message when the shared folder is not beside the checkout).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
import yaml
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, StringAttr, i64
from xdsl.ir import SSAValue
from xdsl.utils.exceptions import DiagnosticException

from tr_mlir import zoo
from tr_mlir.archplan_yaml import (
    KINDS,
    LAYER_SPECS,
    NAME_ATTR,
    VERSION,
    ArchPlanYamlError,
    from_yaml,
    layer_name,
    print_archplan_yaml,
    to_yaml,
)
from tr_mlir.compile import arch_plan
from tr_mlir.dialects import arch

REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "reference" / "archplan-examples"


def reference(filename: str) -> str:
    path = REFERENCE / filename
    if not path.is_file():
        pytest.skip(f"reference file {path} not present (shared/ is not beside this checkout)")
    return path.read_text()


# --------------------------------------------------------------------------------------
# Building flat models by hand
# --------------------------------------------------------------------------------------


class Net:
    """A flat ``arch.model`` built op by op; result types from each op's shape rule."""

    def __init__(self, hwc: tuple[int, int, int], name: str = "net", num_classes: int = 10,
                 **flags: bool):
        self.model = arch.ModelOp(name, hwc, num_classes, **flags)
        self.block = self.model.body.block
        self.x = self.model.input_value

    def op(self, cls: type[arch.LayerOp], value: SSAValue | None = None, **params: Any) -> SSAValue:
        value = self.x if value is None else value
        probe = cls(value, None, **params)
        hwc = probe.infer_hwc(arch.static_hwc(value.type))
        probe.drop_all_references()
        op = cls(value, arch.nhwc_type(*hwc), **params)
        self.block.add_op(op)
        self.x = op.output
        return op.output

    def add(self, shortcut: SSAValue, main: SSAValue) -> SSAValue:
        op = arch.AddOp(shortcut, main, main.type)
        self.block.add_op(op)
        self.x = op.output
        return op.output

    def done(self, first_layer: int | None = 0) -> ModuleOp:
        self.block.add_op(arch.OutputOp(self.x))
        if first_layer is not None:
            self.model.properties["first_layer"] = IntegerAttr(first_layer, i64)
        module = ModuleOp([self.model])
        module.verify()
        return module


def every_kind_module() -> ModuleOp:
    """A model with every layer kind and every residual form (identity op, bare shortcut,
    projection, nested), non-default BN parameters and a layer name."""
    n = Net((8, 8, 3), num_classes=10, fuse=True)
    n.op(arch.ConvOp, out_ch=5, k=3, p=1)
    n.op(arch.Bn2dOp, eps=1e-3, momentum=0.05)
    for act in arch.ACTIVATION_OPS:
        n.op(act)
    n.op(arch.DropoutOp, p=0.25)
    n.op(arch.ChannelPaddingOp)  # 5 -> 8 channels
    n.op(arch.MaxPoolOp, k=2, s=2)
    n.op(arch.AvgPoolOp, k=3, s=1, p=1)
    n.op(arch.ConvOp, out_ch=8, k=3, p=1, groups=8)  # depthwise
    n.op(arch.CbrOp, out_ch=8, k=3, p=1, eps=1e-3, momentum=0.2)
    x = n.op(arch.CbrpOp, out_ch=16, conv_k=3, conv_s=1, conv_p=1, pool_k=2, pool_s=2, pool_p=0)
    # identity shortcut written as arch.identity (step 4)
    sc = n.op(arch.IdentityOp, x)
    m = n.op(arch.ConvOp, x, out_ch=16, k=3, p=1)
    m = n.op(arch.Bn2dOp, m)
    x = n.op(arch.ReluOp, n.add(sc, m))
    # bare shortcut with a nested residual in the main branch
    inner_sc = n.op(arch.ConvOp, x, out_ch=16, k=1)
    inner = n.op(arch.TanhOp, x)
    inner = n.add(inner_sc, inner)
    x = n.add(x, n.op(arch.SigmoidOp, inner))
    # projection shortcut
    sc = n.op(arch.ConvOp, x, out_ch=32, k=1, s=2)
    sc = n.op(arch.Bn2dOp, sc)
    m = n.op(arch.ConvOp, x, out_ch=32, k=3, s=2, p=1)
    x = n.add(sc, n.op(arch.Bn2dOp, m))
    n.op(arch.BottleneckIdentityOp, bottleneck_ch=8)
    n.op(arch.BottleneckProjectionOp, bottleneck_ch=8, out_ch=48, stride=2)
    n.op(arch.BottleneckProjectionOp, bottleneck_ch=8, out_ch=48, stride=1, eps=2e-5)
    n.op(arch.BasicBlockIdentityOp, out_ch=48)
    n.op(arch.BasicBlockProjectionOp, out_ch=64, stride=1, momentum=0.3)
    n.op(arch.BasicBlockProjectionOp, out_ch=64, stride=2)
    n.op(arch.InvResidualIdentityOp, expand_ch=128, out_ch=64)
    n.op(arch.InvResidualNoShortcutOp, expand_ch=128, out_ch=32, stride=1)
    x = n.op(arch.InvResidualNoShortcutOp, expand_ch=64, out_ch=32, stride=2)
    n.block.last_op.attributes[NAME_ATTR] = StringAttr("my block: #1")
    n.op(arch.GapOp)
    n.op(arch.FcOp, out_features=24, bias=True)
    n.op(arch.Bn1dOp)
    n.op(arch.FcOp, out_features=12)
    n.op(arch.FlattenOp)
    n.op(arch.GapFcOp, out_features=11)
    n.op(arch.GapFcOp, out_features=10, bias=True)
    n.op(arch.SoftmaxCeOp, num_classes=10)
    return n.done()


def model_of(module: ModuleOp) -> arch.ModelOp:
    (model,) = [op for op in module.walk() if isinstance(op, arch.ModelOp)]
    return model


# --------------------------------------------------------------------------------------
# The seed's files
# --------------------------------------------------------------------------------------

REFERENCE_FILES = ("mlp.fused.yaml", "resnet18.fused.yaml", "resnet50.fused.yaml")


@pytest.mark.parametrize("filename", REFERENCE_FILES)
def test_seed_files_read_and_write_back_byte_identical(filename):
    text = reference(filename)
    module = from_yaml(text)
    assert to_yaml(module) == text


def test_seed_file_reads_into_the_expected_ops():
    module = from_yaml(reference("resnet50.fused.yaml"))
    model = model_of(module)
    assert model.input_hwc == (224, 224, 4)
    assert model.params()["num_classes"] == 1000  # from the SoftmaxCE
    assert model.params()["fuse"] is True and model.params()["amp"] is False
    layers = model.layers()
    assert [op.LAYER_KIND for op in layers][:3] == ["CBR", "MaxPool", "BottleneckProjection"]
    assert layers[0].params() == {"out_ch": 64, "k": 7, "s": 2, "p": 3, "eps": 1e-5,
                                  "momentum": 0.1}
    # the seed's name for this max pooling is not our default: it is kept in an attribute
    assert layers[1].attributes[NAME_ATTR] == StringAttr("maxpool_cbrp")
    assert NAME_ATTR not in layers[2].attributes
    assert model.first_layer.value.data == 0


# (file, zoo model, input, classes) -> the layer names that differ from the seed's, with why
REFERENCE_PLANS = {
    "mlp.fused.yaml": ("mlp", (28, 28, 1), 10, {}),
    # the CBR of a cbr() macro is named "cbr" by the seed, a merged one ""
    "resnet18.fused.yaml": ("resnet18", (224, 224, 3), 1000, {14: ("cbr", "")}),
    # the max pooling of a cbrp() macro is named "maxpool_cbrp" by the seed
    "resnet50.fused.yaml": ("resnet50", (224, 224, 3), 1000, {34: ("maxpool_cbrp", "maxpool")}),
}


@pytest.mark.parametrize("filename", sorted(REFERENCE_PLANS))
def test_our_fused_plans_match_the_seed_text_up_to_documented_names(filename):
    text = reference(filename)
    name, shape, classes, name_diffs = REFERENCE_PLANS[filename]
    ours = to_yaml(arch_plan(zoo.MODELS[name].blueprint(classes), shape, amp=True, fuse=True,
                             num_classes=classes))
    ref_lines, our_lines = text.splitlines(), ours.splitlines()
    assert len(ref_lines) == len(our_lines)
    diffs = {i + 1: (a, b) for i, (a, b) in enumerate(zip(ref_lines, our_lines)) if a != b}
    assert diffs == {
        line: (f"    name: {theirs}", f"    name: {mine}")
        for line, (theirs, mine) in name_diffs.items()
    }


# --------------------------------------------------------------------------------------
# Round trips
# --------------------------------------------------------------------------------------


def test_every_kind_round_trips_structurally():
    module = every_kind_module()
    text = to_yaml(module)
    back = from_yaml(text, sym_name="net", num_classes=10, fuse=True)
    assert back.is_structurally_equivalent(module)
    assert to_yaml(back) == text
    kinds = {layer["kind"] for layer in yaml.safe_load(text)["layers"]}
    assert kinds == set(KINDS) | {"Add2Start", "Add2ShortcutEnd", "Add2End"}


def test_every_layer_op_has_a_yaml_spec():
    """Convention: every layer kind of a flat plan is writable; ``arch.add`` is the markers and
    ``arch.bn`` only exists before arch-rename-bn."""
    layer_kinds = {op for op in arch.layer_ops() if op not in (arch.AddOp, arch.BnOp)}
    assert set(LAYER_SPECS) == layer_kinds
    for op_class, spec in LAYER_SPECS.items():
        props = op_class.get_irdl_definition().properties
        for p in spec.params:
            if p.constant is None:
                assert p.key in props, (op_class.name, p.key)


def test_params_and_layout():
    text = to_yaml(every_kind_module())
    doc = yaml.load(text, Loader=yaml.SafeLoader)
    assert list(doc) == ["first_layer_index", "input_spec", "layers", "version"]
    assert doc["version"] == VERSION
    by_kind: dict[str, list[dict]] = {}
    for layer in doc["layers"]:
        assert list(layer) == sorted(layer)  # keys sorted as the seed's fkYAML writes them
        assert list(layer.get("params", {})) == sorted(layer.get("params", {}))
        by_kind.setdefault(layer["kind"], []).append(layer)
    # BN eps/momentum are written (the seed drops them); 1e-05 is written as the seed does
    assert by_kind["Bn2d"][0]["params"] == {"eps": 0.001, "momentum": 0.05}
    assert "eps: 1e-05" in text and "momentum: 0.1" in text
    assert by_kind["Bn1d"][0]["params"] == {"eps": "1e-05", "momentum": 0.1}  # YAML 1.1 reader
    # groups only when not 1
    assert [c.get("params", {}).get("groups") for c in by_kind["Conv"]][:2] == [None, 8]
    # blocks: eps/momentum only when not the default
    assert by_kind["BottleneckIdentity"][0]["params"] == {"bottleneck_ch": 8}
    assert by_kind["BottleneckProjection"][1]["params"]["eps"] == "2e-05"  # as the seed writes
    assert by_kind["InvResidualIdentity"][0]["params"] == {
        "expand_ch": 128, "has_shortcut": True, "out_ch": 64, "stride": 1}
    assert by_kind["InvResidualNoShortcut"][1]["params"]["has_shortcut"] is False
    assert by_kind["FC"][1]["params"] == {"bias": False, "out_features": 12}
    assert by_kind["Dropout"][0]["params"] == {"p": 0.25}
    assert "params" not in by_kind["ReLU"][0]
    # markers: names and shapes
    assert [m["name"] for m in by_kind["Add2Start"]] == ["add2_start"] * 4
    assert by_kind["Add2ShortcutEnd"][0]["name"] == "add2_sc_end"
    assert by_kind["Add2End"][0]["name"] == "add2_end"


def test_default_names():
    doc = yaml.safe_load(to_yaml(every_kind_module()))
    names = [(layer["kind"], layer["name"]) for layer in doc["layers"]]
    assert ("Conv", "conv") in names and ("Bn2d", "bn") in names and ("CBR", None) in names
    assert ("GapFC", None) in names and ("SoftmaxCE", "softmax_ce") in names
    assert ("LeakyReLU", "leaky_relu") in names and ("Identity", "identity") in names
    assert ("BottleneckProjection", "bottleneck_proj_ds") in names
    assert ("BottleneckProjection", "bottleneck_proj") in names
    assert ("BasicBlockProjection", "basicblock_ds") in names
    assert ("InvResidualNoShortcut", "my block: #1") in names  # quoted, read back exactly
    assert ("InvResidualNoShortcut", "invres_noshortcut") in names


def test_names_round_trip_through_the_attribute():
    text = reference("resnet18.fused.yaml")
    module = from_yaml(text)
    first = model_of(module).layers()[0]
    assert first.attributes[NAME_ATTR] == StringAttr("cbr") and layer_name(first) == "cbr"
    del first.attributes[NAME_ATTR]
    assert layer_name(first) == ""
    assert "    name: \n" in to_yaml(module)


@pytest.mark.parametrize("value,text", [
    (1e-5, "1e-05"), (0.1, "0.1"), (1.0, "1.0"), (0.001, "0.001"), (0.5, "0.5"),
    (0.123456789, "0.123456789"), (1.5e-7, "1.5e-07"), (3e-12, "3e-12"),
])
def test_floats_are_written_like_the_seed_and_read_back_exactly(value, text):
    n = Net((4, 4, 2))
    n.op(arch.Bn2dOp, eps=value, momentum=0.1)
    written = to_yaml(n.done())
    assert f"eps: {text}\n" in written
    (bn,) = model_of(from_yaml(written)).layers()
    assert bn.param("eps") == value


@pytest.mark.parametrize("name", sorted(zoo.MODELS))
@pytest.mark.parametrize("fuse", [False, True])
def test_zoo_plans_round_trip(name, fuse):
    spec = zoo.MODELS[name]
    module = arch_plan(spec.blueprint(), spec.input_shape, amp=fuse, fuse=fuse,
                       num_classes=spec.num_classes)
    text = to_yaml(module)
    model = model_of(module)
    back = from_yaml(text, sym_name=model.sym_name.data, amp=fuse, fuse=fuse)
    assert back.is_structurally_equivalent(module)
    assert to_yaml(back) == text


def test_unfused_residuals_are_linearized_with_markers():
    spec = zoo.MODELS["resnet_tiny"]
    module = arch_plan(spec.blueprint(), spec.input_shape, amp=False, fuse=False,
                       num_classes=spec.num_classes)
    layers = yaml.safe_load(to_yaml(module))["layers"]
    kinds = [layer["kind"] for layer in layers]
    start = kinds.index("Add2Start")
    assert kinds[start:start + 3] == ["Add2Start", "Identity", "Add2ShortcutEnd"]
    sc_end = kinds.index("Add2ShortcutEnd", start)
    end = kinds.index("Add2End", start)
    # the main branch reads the block input (SSA), not the shortcut's output
    assert layers[sc_end + 1]["in_shape"] == layers[start]["in_shape"]
    assert layers[end]["out_shape"] == layers[end - 1]["out_shape"]


def test_empty_model_and_unmarked_first_layer():
    module = Net((2, 2, 3), num_classes=3).done(first_layer=None)
    text = to_yaml(module)
    assert "first_layer_index: -1\n" in text and "layers: []\n" in text
    back = from_yaml(text, sym_name="net", fuse=False)
    assert back.is_structurally_equivalent(module)


def test_first_layer_index_is_positional_over_markers():
    """The seed marks index 0 whatever it is (facts 3.14): a body opening with a residual
    region is marked at its Add2Start; other marks map through the marker positions."""
    n = Net((2, 2, 4))
    sc = n.op(arch.IdentityOp)
    n.add(sc, n.op(arch.ReluOp, n.model.input_value))
    n.op(arch.TanhOp)
    module = n.done(first_layer=0)
    text = to_yaml(module)
    assert "first_layer_index: 0\n" in text
    assert model_of(from_yaml(text)).first_layer.value.data == 0
    model_of(module).properties["first_layer"] = IntegerAttr(3, i64)  # the tanh
    text = to_yaml(module)
    assert "first_layer_index: 5\n" in text  # Start, Identity, ScEnd, ReLU, End, Tanh
    assert model_of(from_yaml(text)).first_layer.value.data == 3
    model_of(module).properties["first_layer"] = IntegerAttr(2, i64)  # the add
    text = to_yaml(module)
    assert "first_layer_index: 4\n" in text  # its Add2End
    assert model_of(from_yaml(text)).first_layer.value.data == 2
    model_of(module).properties["first_layer"] = IntegerAttr(1, i64)  # the relu
    text = to_yaml(module)
    assert "first_layer_index: 2\n" in text  # moved left over the Add2ShortcutEnd
    assert model_of(from_yaml(text)).first_layer.value.data == 1


def test_print_archplan_yaml_writes_to_the_stream():
    module = every_kind_module()
    stream = io.StringIO()
    print_archplan_yaml(module, stream)
    assert stream.getvalue() == to_yaml(module)


def test_from_yaml_options():
    text = reference("mlp.fused.yaml")
    model = model_of(from_yaml(text, sym_name="mlp", num_classes=10, amp=True, fuse=False))
    assert model.sym_name.data == "mlp"
    assert model.params()["num_classes"] == 10
    assert model.params()["amp"] is True and model.params()["fuse"] is False
    # a head of another width: building the plan for 7 classes fails the same way
    with pytest.raises(ArchPlanYamlError) as info:
        from_yaml(text, num_classes=7)
    assert info.value.field == "layers[8].params.num_classes"
    assert ("expected num_classes = 7 (the num_classes given to from_yaml) for the SoftmaxCE head, "
            "got 10") in str(info.value)


def test_flow_style_and_nulls_are_accepted():
    text = (
        "version: ArchPlan-1.0\nfirst_layer_index: 0\ninput_spec: {c: 3, h: 2, w: 2}\n"
        "layers:\n"
        "  - {kind: Conv, name: ~, in_shape: [1, 2, 2, 3], out_shape: [1, 2, 2, 4],\n"
        "     params: {k: 1, out_ch: 4, p: 0, s: 1}}\n"
        "  - {kind: Bn2d, in_shape: [1, 2, 2, 4], out_shape: [1, 2, 2, 4]}\n"
        "  - {kind: FC, in_shape: [1, 2, 2, 4], out_shape: [1, 1, 1, 5], params: {out_features: 5}}\n"
        "  - {kind: ReLU, in_shape: [1, 1, 1, 5], out_shape: [1, 1, 1, 5], params: ~}\n"
    )
    conv, bn, fc, _ = model_of(from_yaml(text)).layers()
    assert NAME_ATTR in conv.attributes and conv.attributes[NAME_ATTR] == StringAttr("")
    assert bn.params() == {"eps": 1e-5, "momentum": 0.1}  # the seed's defaults
    assert fc.param("bias") is True  # the seed's default


# --------------------------------------------------------------------------------------
# Errors while reading, each with its line and field
# --------------------------------------------------------------------------------------

SMALL = (
    "first_layer_index: 0\n"            # 1
    "input_spec:\n"                     # 2
    "  c: 3\n"                          # 3
    "  h: 4\n"                          # 4
    "  w: 4\n"                          # 5
    "layers:\n"                         # 6
    "  - in_shape: [1, 4, 4, 3]\n"      # 7
    "    kind: Add2Start\n"             # 8
    "    name: add2_start\n"            # 9
    "    out_shape: [1, 4, 4, 3]\n"     # 10
    "  - in_shape: [1, 4, 4, 3]\n"      # 11
    "    kind: Add2ShortcutEnd\n"       # 12
    "    out_shape: [1, 4, 4, 3]\n"     # 13
    "  - in_shape: [1, 4, 4, 3]\n"      # 14
    "    kind: Conv\n"                  # 15
    "    name: conv\n"                  # 16
    "    out_shape: [1, 4, 4, 3]\n"     # 17
    "    params:\n"                     # 18
    "      k: 3\n"                      # 19
    "      out_ch: 3\n"                 # 20
    "      p: 1\n"                      # 21
    "      s: 1\n"                      # 22
    "  - in_shape: [1, 4, 4, 3]\n"      # 23
    "    kind: Add2End\n"               # 24
    "    out_shape: [1, 4, 4, 3]\n"     # 25
    "  - in_shape: [1, 4, 4, 3]\n"      # 26
    "    kind: GAP\n"                   # 27
    "    out_shape: [1, 1, 1, 3]\n"     # 28
    "  - in_shape: [1, 1, 1, 3]\n"      # 29
    "    kind: SoftmaxCE\n"             # 30
    "    out_shape: [1, 1, 1, 3]\n"     # 31
    "    params: {num_classes: 3}\n"    # 32
    "version: ArchPlan-1.0\n"           # 33
)


def test_the_small_plan_reads():
    model = model_of(from_yaml(SMALL))
    kinds = [op.LAYER_KIND for op in model.layers()]
    assert kinds == ["Conv", "Add", "GAP", "SoftmaxCE"]
    add = model.layers()[1]
    assert add.shortcut is model.input_value  # an empty shortcut is the block input itself
    assert model.params()["num_classes"] == 3
    assert to_yaml(from_yaml(SMALL)) == to_yaml(from_yaml(to_yaml(from_yaml(SMALL))))


def replace_line(text: str, line: int, new: str | None) -> str:
    lines = text.splitlines(keepends=True)
    if new is None:
        del lines[line - 1]
    else:
        lines[line - 1] = new + "\n"
    return "".join(lines)


ERRORS = [
    # (id, line to replace, new text (None: delete), expected line, field, message part)
    ("version", 33, "version: ArchPlan-0.9", 33, "version",
     "Unsupported YAML version: ArchPlan-0.9"),
    ("version missing", 33, None, 1, "version", "Unsupported YAML version: (missing)"),
    ("unknown kind", 27, "    kind: GlobalPool", 27, "layers[4].kind", "unknown kind: GlobalPool"),
    ("add is not a kind", 27, "    kind: Add", 27, "layers[4].kind", "unknown kind: Add"),
    ("kind not a string", 27, "    kind: 3", 27, "layers[4].kind", "expected a string, got 3"),
    ("kind missing", 27, None, 26, "layers[4].kind", "missing field"),
    ("in_shape missing", 26, "  - name: gap", 26, "layers[4].in_shape", "missing field"),
    ("param missing", 21, None, 19, "layers[2].params.p", "missing field"),
    ("param ill-typed", 21, "      p: one", 21, "layers[2].params.p", "expected an integer, got 'one'"),
    ("param is a float", 21, "      p: 1.0", 21, "layers[2].params.p", "expected an integer, got 1.0"),
    ("param bool for int", 21, "      p: true", 21, "layers[2].params.p", "expected an integer, got True"),
    # wider than i64: was an xDSL VerifyException without line or field
    ("param beyond 64 bits", 21, "      p: 99999999999999999999999", 21, "layers[2].params.p",
     "expected an integer that fits in 64 bits, got 99999999999999999999999"),
    ("input_spec beyond 64 bits", 4, "  h: 9223372036854775808", 4, "input_spec.h",
     "expected an integer that fits in 64 bits"),
    ("unknown param", 21, "      q: 1", 21, "layers[2].params.q", "unknown key 'q'"),
    ("params of a marker", 10, "    out_shape: [1, 4, 4, 3]\n    params: {k: 1}", 11,
     "layers[0].params.k", "unknown key 'k' (expected: none)"),
    ("params not a mapping", 32, "    params: [3]", 32, "layers[5].params", "expected a mapping"),
    ("bad param value", 19, "      k: 0", 19, "layers[2].params", "expected k > 0, got 0"),
    ("geometry", 19, "      k: 9", 19, "layers[2].params", "expected kernel size 9 <= padded input"),
    ("out_shape wrong", 17, "    out_shape: [1, 4, 4, 5]", 17, "layers[2].out_shape",
     "expected [1, 4, 4, 3] (Conv of [1, 4, 4, 3]), got [1, 4, 4, 5]"),
    ("in_shape wrong", 26, "  - in_shape: [1, 4, 4, 2]", 26, "layers[4].in_shape",
     "expected [1, 4, 4, 3] (the value it reads), got [1, 4, 4, 2]"),
    ("in_shape of the first layer", 7, "  - in_shape: [1, 4, 4, 4]", 7, "layers[0].in_shape",
     "expected [1, 4, 4, 3] (the model input)"),
    ("shape too short", 28, "    out_shape: [1, 1, 3]", 28, "layers[4].out_shape",
     "expected a list of 4 integers [N, H, W, C], got a list of 3 items"),
    ("shape not positive", 28, "    out_shape: [1, 1, 0, 3]", 28, "layers[4].out_shape[2]",
     "expected a positive size, got 0"),
    ("batch not 1", 28, "    out_shape: [8, 1, 1, 3]", 28, "layers[4].out_shape[0]", "expected N = 1"),
    ("softmax classes", 32, "    params: {num_classes: 4}", 32, "layers[5].params",
     "expected input C = num_classes = 4, got C = 3"),
    ("marker changes shape", 10, "    out_shape: [1, 4, 4, 4]", 10, "layers[0].out_shape",
     "Add2Start keeps the shape"),
    ("ShortcutEnd without Start", 8, "    kind: ReLU", 12, "layers[1].kind",
     "Add2ShortcutEnd without a matching Add2Start"),
    ("End without ShortcutEnd", 12, "    kind: Identity", 24, "layers[3].kind",
     "Add2End without an Add2ShortcutEnd for the Add2Start at line 7"),
    ("Start never closed", 24, "    kind: Identity", 7, "layers", "Add2Start has no matching Add2End"),
    ("End without Start", 27, "    kind: Add2End", 27, "layers[4].kind",
     "Add2End without a matching Add2Start"),
    ("unknown layer key", 9, "    nam: add2_start", 9, "layers[0].nam", "unknown key 'nam'"),
    ("name not a string", 16, "    name: [conv]", 16, "layers[2].name", "expected a scalar"),
    ("name a number", 16, "    name: 5", 16, "layers[2].name", "expected a string, got 5"),
    ("unknown top key", 1, "first_layer_index: 0\nextra: 1", 2, "extra", "unknown key 'extra'"),
    ("duplicate key", 1, "first_layer_index: 0\nfirst_layer_index: 0", 2, "first_layer_index",
     "duplicate key"),
    ("first_layer_index out of range", 1, "first_layer_index: 6", 1, "first_layer_index",
     "expected -1 or an index in [0, 6), got 6"),
    ("first_layer_index not an int", 1, "first_layer_index: first", 1, "first_layer_index",
     "expected an integer"),
    ("first_layer_index missing", 1, None, 1, "first_layer_index", "missing field"),
    ("input_spec field missing", 3, None, 3, "input_spec.c", "missing field"),
    ("input_spec not positive", 4, "  h: 0", 4, "input_spec.h", "expected a positive size, got 0"),
    ("input_spec unknown key", 3, "  c: 3\n  n: 1", 4, "input_spec.n", "unknown key 'n'"),
    ("layer not a mapping", 7, "  - 3\n  - in_shape: [1, 4, 4, 3]", 7, "layers[0]",
     "expected a mapping, got 3"),
    ("invalid YAML", 19, "      k: [3", 20, None, "invalid YAML"),
]


@pytest.mark.parametrize("case", ERRORS, ids=[c[0] for c in ERRORS])
def test_read_errors_name_the_line_and_the_field(case):
    _, line, new, want_line, want_field, message = case
    text = replace_line(SMALL, line, new)
    with pytest.raises(ArchPlanYamlError) as info:
        from_yaml(text)
    err = info.value
    assert message in str(err)
    assert err.line == want_line, str(err)
    assert err.field == want_field, str(err)
    assert str(err).startswith(f"line {want_line}: ")


def test_first_layer_index_maps_to_the_first_op_at_or_after_it():
    text = replace_line(SMALL, 1, "first_layer_index: 3")  # the Add2End: the add op
    assert model_of(from_yaml(text)).first_layer.value.data == 1
    text = replace_line(SMALL, 1, "first_layer_index: 1")  # the Add2ShortcutEnd: then the conv
    assert model_of(from_yaml(text)).first_layer.value.data == 0
    text = replace_line(SMALL, 1, "first_layer_index: -1")
    assert model_of(from_yaml(text)).first_layer is None


@pytest.mark.parametrize("text,line,message", [
    ("", 1, "empty document"),
    ("- 1\n- 2\n", 1, "expected a mapping, got a list of 2 items"),
    ("a: 1\n---\nb: 2\n", 2, "invalid YAML"),
    ("version: ArchPlan-1.0\ninput_spec: {c: 1, h: 1, w: 1}\nlayers: []\n", 1,
     "first_layer_index: missing field"),
    ("version: ArchPlan-1.0\nfirst_layer_index: 0\ninput_spec: {c: 1, h: 1, w: 1}\nlayers: 3\n", 4,
     "layers: expected a list, got 3"),
])
def test_document_level_errors(text, line, message):
    with pytest.raises(ArchPlanYamlError) as info:
        from_yaml(text)
    assert message in str(info.value) and info.value.line == line


def test_deeply_nested_yaml_is_an_error_not_a_recursion_error():
    with pytest.raises(ArchPlanYamlError, match="invalid YAML: nested too deeply"):
        from_yaml("[" * 100000 + "]" * 100000)


@pytest.mark.parametrize("key,value,message", [
    ("has_shortcut", "false", "expected true for InvResidualIdentity, got false"),
    ("stride", "2", "expected 1 for InvResidualIdentity, got 2"),
])
def test_constant_params_are_checked(key, value, message):
    text = (
        "version: ArchPlan-1.0\nfirst_layer_index: 0\ninput_spec: {c: 8, h: 4, w: 4}\nlayers:\n"
        "  - kind: InvResidualIdentity\n    in_shape: [1, 4, 4, 8]\n    out_shape: [1, 4, 4, 8]\n"
        "    params: {expand_ch: 16, has_shortcut: true, out_ch: 8, stride: 1}\n"
    )
    assert from_yaml(text)
    bad = text.replace(f"{key}: {'true' if key == 'has_shortcut' else '1'}", f"{key}: {value}")
    with pytest.raises(ArchPlanYamlError) as info:
        from_yaml(bad)
    assert message in str(info.value)
    assert info.value.line == 8 and info.value.field == f"layers[0].params.{key}"


# --------------------------------------------------------------------------------------
# The ArchPlan's structural rules, as building the plan from a BluePrint applies them
# --------------------------------------------------------------------------------------


def plan_text(*layers: tuple[str, tuple[int, int, int], tuple[int, int, int], str], c: int = 3) -> str:
    """A plan on a 4x4xc input, one flow-style line per layer (kind, in HWC, out HWC, params)."""
    lines = ["version: ArchPlan-1.0", "first_layer_index: 0", f"input_spec: {{c: {c}, h: 4, w: 4}}",
             "layers:"]
    for kind, i, o, params in layers:
        extra = f", params: {{{params}}}" if params else ""
        lines.append(f"  - {{kind: {kind}, in_shape: [1, {i[0]}, {i[1]}, {i[2]}], "
                     f"out_shape: [1, {o[0]}, {o[1]}, {o[2]}]{extra}}}")
    return "\n".join(lines) + "\n"


HW3 = (4, 4, 3)
START, SC_END, END = ("Add2Start", HW3, HW3, ""), ("Add2ShortcutEnd", HW3, HW3, ""), ("Add2End", HW3, HW3, "")
CONV3 = ("Conv", HW3, HW3, "k: 3, out_ch: 3, p: 1, s: 1")
IDENTITY, RELU = ("Identity", HW3, HW3, ""), ("ReLU", HW3, HW3, "")

EMPTY_STEMS = [
    # (id, layers, line of the Add2End, its index, the Add2Start's line, only identities)
    ("projection shortcut, no main", (START, CONV3, SC_END, END), 8, 3, 5, False),
    ("no shortcut, no main", (START, SC_END, END), 7, 2, 5, False),
    ("main of Identity layers only", (START, SC_END, IDENTITY, IDENTITY, END), 9, 4, 5, True),
    ("nested region with an empty main", (START, SC_END, RELU, START, IDENTITY, SC_END, END, END), 11, 6, 8,
     False),
]


@pytest.mark.parametrize("case", EMPTY_STEMS, ids=[c[0] for c in EMPTY_STEMS])
def test_an_add2_with_an_empty_main_branch_is_the_seeds_empty_stem(case):
    """Issue 15, item 5: the reader accepted these; building the plan (arch-normalize-identity,
    the seed's step 4) rejects an Add2 whose main branch has no layer once Identity layers are
    removed, at any depth."""
    _, layers, line, index, start_line, identities = case
    with pytest.raises(ArchPlanYamlError) as info:
        from_yaml(plan_text(*layers))
    err = info.value
    assert err.line == line and err.field == f"layers[{index}].kind", str(err)
    message = f"Empty stem in add2: the main branch of the Add2Start at line {start_line} has no layer"
    assert message in str(err)
    assert ("but Identity layers (building the plan removes them)" in str(err)) == identities


def test_empty_stems_fail_to_build_from_a_blueprint_too():
    """The same regions written as BluePrints: arch-plan rejects each (the reader's rule is that one)."""
    from xdsl.utils.exceptions import PassFailedException

    from tr_mlir import blueprint as bp

    for net in (bp.add2(bp.conv(3, 3, 1, 1), None), bp.add2(None, None), bp.add2(None, bp.identity()),
                bp.add2(None, bp.seq(bp.relu(), bp.add2(bp.identity(), None)))):
        with pytest.raises(PassFailedException, match="Empty stem in add2"):
            arch_plan(bp.seq(net, bp.gap_fc(3, True)), HW3, amp=False, fuse=False, num_classes=3)


def test_non_empty_main_branches_still_read():
    for layers in ((START, SC_END, RELU, END), (START, IDENTITY, SC_END, IDENTITY, RELU, IDENTITY, END),
                   (START, CONV3, SC_END, START, SC_END, RELU, END, END)):
        assert from_yaml(plan_text(*layers))


def nested_plan(depth: int) -> str:
    return plan_text(*[START, SC_END] * depth, RELU, *[END] * depth)


def test_add2_nesting_is_limited_like_a_blueprints():
    """A BluePrint nests seq/add2/repeat at most MAX_NESTING levels; the reader took any depth, and
    writing a plan nested 1000 deep back raised RecursionError."""
    from tr_mlir.blueprint import MAX_NESTING

    module = from_yaml(nested_plan(MAX_NESTING))
    assert to_yaml(module) == to_yaml(from_yaml(to_yaml(module)))
    for depth in (MAX_NESTING + 1, 1000):
        with pytest.raises(ArchPlanYamlError) as info:
            from_yaml(nested_plan(depth))
        err = info.value
        index = 2 * MAX_NESTING  # the Add2Start opening level MAX_NESTING + 1
        assert err.line == 5 + index and err.field == f"layers[{index}].kind"
        assert (f"Add2 regions nested more than {MAX_NESTING} deep (this Add2Start opens level "
                f"{MAX_NESTING + 1})") in str(err)


def test_layer_count_is_limited_like_arch_expands(monkeypatch):
    """A model has at most MAX_LAYERS ops (arch-expand's cap on what a BluePrint builds); an
    Add2End counts (its arch.add), the other markers do not."""
    import tr_mlir.archplan_yaml as archplan_yaml

    assert archplan_yaml.MAX_LAYERS == 100_000
    monkeypatch.setattr(archplan_yaml, "MAX_LAYERS", 4)
    assert from_yaml(SMALL)  # Conv, Add, GAP, SoftmaxCE
    monkeypatch.setattr(archplan_yaml, "MAX_LAYERS", 3)
    with pytest.raises(ArchPlanYamlError) as info:
        from_yaml(SMALL)
    assert info.value.line == 29 and info.value.field == "layers[5]"
    assert "the plan has more than 3 layers" in str(info.value)


def test_the_error_is_a_value_error_and_an_xdsl_diagnostic():
    with pytest.raises(ValueError):
        from_yaml("version: 2\n")
    with pytest.raises(DiagnosticException):
        from_yaml("version: 2\n")


# --------------------------------------------------------------------------------------
# Errors while writing
# --------------------------------------------------------------------------------------


def test_write_needs_exactly_one_model():
    with pytest.raises(ArchPlanYamlError, match="exactly one 'arch.model'.*found 0"):
        to_yaml(ModuleOp([]))
    a, b = Net((2, 2, 3), "a").done(None), Net((2, 2, 3), "b").done(None)
    two = ModuleOp([model_of(a).clone(), model_of(b).clone()])
    with pytest.raises(ArchPlanYamlError, match="found 2"):
        to_yaml(two)


def test_write_accepts_a_model_op():
    module = every_kind_module()
    assert to_yaml(model_of(module)) == to_yaml(module)


def test_write_needs_static_types():
    n = Net((4, 4, 3))
    op = arch.ReluOp(n.x, arch.unknown_nhwc())
    n.block.add_op(op)
    n.x = op.output
    with pytest.raises(ArchPlanYamlError, match="'arch.relu' op expected a static NHWC result type, got "
                                                r"tensor<\?x\?x\?x\?xf32>; run arch-deduce-shapes") as info:
        to_yaml(n.done())
    assert info.value.op is op


def test_write_rejects_tree_form_and_unrenamed_ops():
    n = Net((4, 4, 3))
    seq = arch.SeqOp(n.x, result_type=n.x.type)
    seq.body.block.add_op(arch.YieldOp(seq.body.block.args[0]))
    n.block.add_op(seq)
    n.x = seq.output
    with pytest.raises(ArchPlanYamlError, match="'arch.seq' op is not an ArchPlan layer"):
        to_yaml(n.done())
    n = Net((4, 4, 3))
    n.op(arch.BnOp)
    with pytest.raises(ArchPlanYamlError, match="'arch.bn' op has no ArchPlan layer kind"):
        to_yaml(n.done())


def test_write_rejects_dead_layers():
    n = Net((4, 4, 3))
    dead = n.op(arch.ReluOp)
    n.x = n.model.input_value
    n.op(arch.TanhOp)
    with pytest.raises(ArchPlanYamlError, match="'arch.relu' op does not lead to 'arch.output'") as info:
        to_yaml(n.done())
    assert info.value.op is dead.owner


def test_write_rejects_a_graph_that_is_not_a_nest_of_residuals():
    """y = relu(x) feeds two adds whose forks differ: no marker nesting writes it."""
    n = Net((4, 4, 3))
    y = n.op(arch.ReluOp)
    a = n.add(y, n.op(arch.TanhOp, y))
    t = n.op(arch.SigmoidOp, n.model.input_value)
    n.add(y, n.add(t, a))
    with pytest.raises(ArchPlanYamlError, match="read by two branches that no 'arch.add' joins"):
        to_yaml(n.done())


def test_nested_residuals_sharing_a_fork_are_written_and_read_back():
    """z = x + g(x + f(x)): the inner region's shortcut is the outer block input."""
    n = Net((4, 4, 3))
    x = n.model.input_value
    inner = n.add(x, n.op(arch.ReluOp, x))
    n.add(x, n.op(arch.TanhOp, inner))
    module = n.done()
    text = to_yaml(module)
    kinds = [layer["kind"] for layer in yaml.safe_load(text)["layers"]]
    assert kinds == ["Add2Start", "Add2ShortcutEnd", "Add2Start", "Add2ShortcutEnd", "ReLU",
                     "Add2End", "Tanh", "Add2End"]
    assert from_yaml(text, sym_name="net", num_classes=10, fuse=False).is_structurally_equivalent(module)


def test_errors_of_the_write_path_are_diagnostics():
    with pytest.raises(DiagnosticException):
        to_yaml(ModuleOp([]))
