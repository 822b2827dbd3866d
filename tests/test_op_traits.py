"""Op knowledge as op traits (the plugin issue): passes ask the op, not a list of op classes.

Each trait of ``tr_mlir.dialects.arch`` is declared on the right built-in ops, and an op class
defined here (subclassing the arch base classes, carrying the trait, registered in no table) is
treated by the pass or tool that consults the trait as the built-in ops are. With the old closed
tuples (``SEE_THROUGH``, ``FEATURE_PRODUCERS``, ``(FcOp, FlattenOp)``, ``(FcOp, SoftmaxCeOp)``,
``isinstance(op, ConvOp)``, ``TREE_OPS``, ``isinstance(op, AddOp)`` ladders) these ops were
ignored.
"""

from __future__ import annotations

from typing import ClassVar

import pytest
from xdsl.dialects.builtin import I64, IntegerAttr, ModuleOp, TensorType, i64
from xdsl.ir import Operation, SSAValue
from xdsl.irdl import irdl_op_definition, operand_def, prop_def, result_def, traits_def
from xdsl.utils.exceptions import PassFailedException, VerifyException

from tr_mlir.dialects import arch
from tr_mlir.dialects.arch import (
    HWC,
    AlignsAmpInput,
    ArchLayerOp,
    BnRenameSeeThrough,
    FeatureProducer,
    IsActivation,
    IsFused,
    IsTreeForm,
    LayerOp,
    ModelOp,
    NeedsFlatInput,
    OutputOp,
    ReadsSpatialMap,
    static_hwc,
)
from tr_mlir.passes._model import require_flat
from tr_mlir.passes.arch_align_amp_input import align_amp_input
from tr_mlir.passes.arch_deduce_shapes import deduce_shapes
from tr_mlir.passes.arch_expand import record_channels
from tr_mlir.passes.arch_normalize_flatten import normalize_flatten
from tr_mlir.passes.arch_rename_bn import ArchRenameBnPass
from tr_mlir.tools.train_inputs import has_spatial_reader
from tr_mlir.tools.train_outputs import plan_table

# --------------------------------------------------------------------------------------
# Declarations on the built-in ops
# --------------------------------------------------------------------------------------

ALL_OPS: list[type[Operation]] = sorted(set(arch.Arch.operations), key=lambda op: op.name)

EXPECTED: dict[type, set[type[Operation]]] = {
    IsActivation: {arch.ReluOp, arch.TanhOp, arch.SiluOp, arch.Relu6Op, arch.LeakyReluOp,
                   arch.HardswishOp, arch.EluOp, arch.SigmoidOp},
    IsFused: {arch.CbrOp, arch.CbrpOp, arch.GapFcOp, arch.BottleneckIdentityOp,
              arch.BottleneckProjectionOp, arch.BasicBlockIdentityOp, arch.BasicBlockProjectionOp,
              arch.InvResidualIdentityOp, arch.InvResidualNoShortcutOp},
    IsTreeForm: {arch.SeqOp, arch.RepeatOp, arch.Add2Op, arch.YieldOp, arch.BlockOp},
    BnRenameSeeThrough: {arch.ReluOp, arch.TanhOp, arch.IdentityOp, arch.ChannelPaddingOp},
    FeatureProducer: {arch.FcOp, arch.FlattenOp, arch.GapOp, arch.GapFcOp},
    ReadsSpatialMap: {arch.FcOp, arch.FlattenOp},
    AlignsAmpInput: {arch.ConvOp, arch.CbrOp},
    NeedsFlatInput: {arch.FcOp, arch.SoftmaxCeOp},
}


@pytest.mark.parametrize("trait", list(EXPECTED), ids=lambda t: t.__name__)
def test_trait_declared_on_exactly_the_builtin_ops(trait: type) -> None:
    carriers = {op for op in ALL_OPS if op.has_trait(trait)}
    assert carriers == EXPECTED[trait]
    assert trait.__doc__  # says what it means and who reads it


def test_class_tuples_agree_with_the_traits() -> None:
    assert set(arch.ACTIVATION_OPS) == EXPECTED[IsActivation]
    assert set(arch.FUSED_OPS) == EXPECTED[IsFused]
    assert set(arch.TREE_OPS) == EXPECTED[IsTreeForm]


def test_layer_ops_keep_pure() -> None:
    # traits_def of the base classes merge: declaring a trait does not drop Pure
    from xdsl.traits import Pure

    for op in (arch.ReluOp, arch.FcOp, arch.CbrOp, arch.BlockOp, arch.SoftmaxCeOp, arch.AddOp):
        assert op.has_trait(Pure), op.name


def test_flat_input_parameters() -> None:
    fc = arch.FcOp.get_trait(NeedsFlatInput)
    ce = arch.SoftmaxCeOp.get_trait(NeedsFlatInput)
    assert fc is not None and ce is not None
    assert fc.priority < ce.priority
    assert fc.needs_flatten((4, 4, 3)) and not fc.needs_flatten((4, 4, 8))
    assert not fc.needs_flatten((1, 1, 3))
    assert ce.needs_flatten((4, 4, 8)) and not ce.needs_flatten((1, 1, 10))


def test_every_layer_op_has_the_layer_interface() -> None:
    for op in arch.layer_ops():
        assert issubclass(op, ArchLayerOp), op.name


def test_add_interface() -> None:
    m = ModelOp("m", (4, 4, 8), 10)
    x = m.input_value
    add = arch.AddOp(x, x)
    assert add.layer_inputs == (add.shortcut, add.main)
    assert add.main_input is add.main
    assert add.infer_hwc((4, 4, 8), (4, 4, 8)) == (4, 4, 8)
    assert add.channels_after(3, 8) == 8
    with pytest.raises(VerifyException, match="expected shortcut and main of one shape"):
        add.infer_hwc((4, 4, 8), (2, 2, 8))
    relu = arch.ReluOp(x)
    assert relu.layer_inputs == (x,) and relu.main_input is x
    assert relu.infer_hwc((4, 4, 8)) == (4, 4, 8)


# --------------------------------------------------------------------------------------
# Test-only ops (registered nowhere)
# --------------------------------------------------------------------------------------


@irdl_op_definition
class SeeThroughActOp(LayerOp):
    """An activation the bn1d/bn2d walk sees through."""

    name = "test.see_through_act"
    LAYER_KIND: ClassVar[str] = "TestSeeThroughAct"
    traits = traits_def(IsActivation(), BnRenameSeeThrough())


@irdl_op_definition
class OpaqueActOp(LayerOp):
    """An activation without BnRenameSeeThrough: it stops the walk."""

    name = "test.opaque_act"
    LAYER_KIND: ClassVar[str] = "TestOpaqueAct"
    traits = traits_def(IsActivation())


class _DenseBase(LayerOp):
    out_features = prop_def(IntegerAttr[I64])

    def channels_after(self, c: int) -> int:
        return self.param("out_features")

    def infer_hwc(self, hwc: HWC) -> HWC:
        return (1, 1, self.param("out_features"))


@irdl_op_definition
class FlattenFcOp(_DenseBase):
    """A fused flatten + fc: reads the spatial map, produces features, reads a flat vector."""

    name = "test.flatten_fc"
    LAYER_KIND: ClassVar[str] = "TestFlattenFc"
    traits = traits_def(FeatureProducer(), ReadsSpatialMap(), IsFused())


@irdl_op_definition
class PlainDenseOp(_DenseBase):
    """The same shape rule without any trait."""

    name = "test.plain_dense"
    LAYER_KIND: ClassVar[str] = "TestPlainDense"


@irdl_op_definition
class LinearOp(_DenseBase):
    """Reads a flat vector (an fc-like op that is not arch.fc)."""

    name = "test.linear"
    LAYER_KIND: ClassVar[str] = "TestLinear"
    traits = traits_def(NeedsFlatInput(priority=0, map_align=8))


@irdl_op_definition
class ConvReluOp(LayerOp):
    """A fused conv + relu (the issue's example plugin op)."""

    name = "test.conv_relu"
    LAYER_KIND: ClassVar[str] = "TestConvRelu"
    out_ch = prop_def(IntegerAttr[I64])
    k = prop_def(IntegerAttr[I64])
    groups = prop_def(IntegerAttr[I64], default_value=IntegerAttr(1, i64))
    traits = traits_def(AlignsAmpInput(), IsFused())

    def channels_after(self, c: int) -> int:
        return self.param("out_ch")

    def infer_hwc(self, hwc: HWC) -> HWC:
        h, w, _ = hwc
        k = self.param("k")
        return (h - k + 1, w - k + 1, self.param("out_ch"))


@irdl_op_definition
class TreeMacroOp(LayerOp):
    """A test-only tree-form macro."""

    name = "test.tree_macro"
    traits = traits_def(IsTreeForm())


@irdl_op_definition
class ConcatOp(ArchLayerOp):
    """A two-input layer: channel concatenation, through the ArchLayerOp interface."""

    name = "test.concat"
    LAYER_KIND: ClassVar[str] = "TestConcat"
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    output = result_def(TensorType)

    def __init__(self, lhs: SSAValue, rhs: SSAValue):
        super().__init__(operands=[lhs, rhs], result_types=[arch.unknown_nhwc()])

    def infer_hwc(self, lhs: HWC, rhs: HWC) -> HWC:  # type: ignore[override]
        if lhs[:2] != rhs[:2]:
            raise VerifyException(f"'{self.name}' op expected one H x W")
        return (lhs[0], lhs[1], lhs[2] + rhs[2])

    def channels_after(self, lhs_c: int, rhs_c: int) -> int:  # type: ignore[override]
        return lhs_c + rhs_c


def _model(hwc: tuple[int, int, int], *layers: type[Operation] | tuple, num_classes: int = 10,
           amp: bool = False) -> tuple[ModuleOp, ModelOp, list[Operation]]:
    """A flat model threading its input through ``layers`` (classes, or (class, params))."""
    m = ModelOp("m", hwc, num_classes, amp=amp)
    block = m.body.block
    x: SSAValue = m.input_value
    ops: list[Operation] = []
    for layer in layers:
        cls, params = layer if isinstance(layer, tuple) else (layer, {})
        op = cls(x, **params)
        block.add_op(op)
        ops.append(op)
        x = op.results[0]
    block.add_op(OutputOp(x))
    return ModuleOp([m]), m, ops


def _bn_after(*producers: type[Operation] | tuple) -> type[Operation]:
    module, _, ops = _model((4, 4, 3), *producers, arch.BnOp)
    ArchRenameBnPass().apply(None, module)  # type: ignore[arg-type]
    return type(list(module.walk())[-2])


# --------------------------------------------------------------------------------------
# The passes consult the traits
# --------------------------------------------------------------------------------------


def test_rename_bn_sees_through_a_new_activation() -> None:
    fc = (arch.FcOp, {"out_features": 6})
    assert _bn_after(fc, arch.ReluOp) is arch.Bn1dOp
    assert _bn_after(fc, SeeThroughActOp) is arch.Bn1dOp
    assert _bn_after(fc, SeeThroughActOp, arch.ReluOp, SeeThroughActOp) is arch.Bn1dOp
    assert _bn_after(fc, OpaqueActOp) is arch.Bn2dOp


def test_rename_bn_new_feature_producer() -> None:
    assert _bn_after((FlattenFcOp, {"out_features": 6})) is arch.Bn1dOp
    assert _bn_after((FlattenFcOp, {"out_features": 6}), SeeThroughActOp) is arch.Bn1dOp
    assert _bn_after((PlainDenseOp, {"out_features": 6})) is arch.Bn2dOp


def _planned(*layers: type[Operation] | tuple, hwc=(8, 8, 3)) -> ModelOp:
    _, m, _ = _model(hwc, *layers)
    deduce_shapes(m)
    return m


def test_tr_train_resize_rule_sees_a_new_spatial_reader() -> None:
    conv = (arch.ConvOp, {"out_ch": 4, "k": 3, "p": 1})
    # an fc on the 8x8 map: the classifier fixes the input size
    assert has_spatial_reader(_planned(conv, (arch.FcOp, {"out_features": 10})))
    # the fused flatten+fc reads the map the same way
    assert has_spatial_reader(_planned(conv, (FlattenFcOp, {"out_features": 10})))
    # without the trait, or after a gap, or as the first layer: no fixed size
    assert not has_spatial_reader(_planned(conv, (PlainDenseOp, {"out_features": 10})))
    assert not has_spatial_reader(_planned(conv, arch.GapOp, (FlattenFcOp, {"out_features": 10})))
    assert not has_spatial_reader(_planned((FlattenFcOp, {"out_features": 10})))


def test_align_amp_input_aligns_for_a_new_conv() -> None:
    _, m, _ = _model((8, 8, 3), (ConvReluOp, {"out_ch": 8, "k": 3}), amp=True)
    assert align_amp_input(m) and m.input_hwc == (8, 8, 4)
    assert static_hwc(m.input_value.type) == (8, 8, 4)
    _, m, _ = _model((8, 8, 3), (ConvReluOp, {"out_ch": 6, "k": 3, "groups": 3}), amp=True)
    assert not align_amp_input(m) and m.input_hwc == (8, 8, 3)
    _, m, _ = _model((8, 8, 3), (PlainDenseOp, {"out_features": 8}), amp=True)
    assert not align_amp_input(m)


def test_normalize_flatten_targets_a_new_flat_reader() -> None:
    conv = (arch.ConvOp, {"out_ch": 3, "k": 3, "p": 1})
    _, m, ops = _model((4, 4, 3), conv, (LinearOp, {"out_features": 10}),
                       (arch.SoftmaxCeOp, {"num_classes": 10}))
    flatten = normalize_flatten(m)
    assert flatten is not None and ops[1].operands[0] is flatten.output
    assert static_hwc(flatten.output.type) == (1, 1, 48)
    # map_align: C = 8 is read as a map
    conv8 = (arch.ConvOp, {"out_ch": 8, "k": 3, "p": 1})
    _, m, _ = _model((4, 4, 3), conv8, (LinearOp, {"out_features": 10}),
                     (arch.SoftmaxCeOp, {"num_classes": 10}))
    assert normalize_flatten(m) is None
    # without the trait the softmax_ce is the target (its 1x1 input needs nothing)
    _, m, _ = _model((4, 4, 3), conv, (PlainDenseOp, {"out_features": 10}),
                     (arch.SoftmaxCeOp, {"num_classes": 10}))
    assert normalize_flatten(m) is None


def test_require_flat_refuses_a_new_tree_op() -> None:
    _, m, _ = _model((4, 4, 3), TreeMacroOp)
    with pytest.raises(PassFailedException, match="'test.tree_macro' op is tree form"):
        require_flat(m, "arch-deduce-shapes")
    _, m, _ = _model((4, 4, 3), SeeThroughActOp)
    require_flat(m, "arch-deduce-shapes")


def _concat_model() -> tuple[ModelOp, ConcatOp]:
    m = ModelOp("m", (4, 4, 3), 7)
    block = m.body.block
    x = m.input_value
    conv = arch.ConvOp(x, out_ch=4, k=1)
    cat = ConcatOp(x, conv.output)
    block.add_ops([conv, cat, OutputOp(cat.output)])
    return m, cat


def test_deduce_shapes_and_channels_use_the_layer_interface() -> None:
    m, cat = _concat_model()
    deduce_shapes(m)
    assert static_hwc(cat.output.type) == (4, 4, 7)
    chan: dict[SSAValue, int] = {m.input_value: 3}
    for op in m.layers():
        record_channels(op, chan)
    assert chan[cat.output] == 7


def test_deduce_shapes_reports_the_interface_error() -> None:
    m = ModelOp("m", (4, 4, 3), 7)
    block = m.body.block
    x = m.input_value
    pool = arch.MaxPoolOp(x, k=2, s=2)
    cat = ConcatOp(x, pool.output)
    block.add_ops([pool, cat, OutputOp(cat.output)])
    with pytest.raises(PassFailedException, match="'test.concat' op expected one H x W"):
        deduce_shapes(m)


def test_plan_table_reads_the_interface() -> None:
    _, m, _ = _model((4, 4, 8), arch.ReluOp)
    x = m.input_value
    relu = m.layers()[0]
    add = arch.AddOp(x, relu.results[0])
    m.body.block.insert_op_before(add, m.output_op)
    m.output_op.operands[0] = add.output
    deduce_shapes(m)
    lines = plan_table(m).splitlines()
    assert "Add" in lines[-1] and "[1, 4, 4, 8]" in lines[-1]
