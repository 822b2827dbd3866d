"""The tree-form ops of the ``arch`` dialect (removed by ``arch-expand``) and the model container."""

from __future__ import annotations

from typing import ClassVar

from tr_mlir.dialects.arch._base import (  # noqa: F401
    _EPS,
    _LAYER_FMT,
    _MOMENTUM,
    DYN,
    HWC,
    AlignsAmpInput,
    ArchLayerOp,
    ArchOp,
    BlockStyle,
    BlockStyleAttr,
    BnRenameSeeThrough,
    FeatureProducer,
    IsActivation,
    IsFused,
    IsTreeForm,
    LayerOp,
    NeedsFlatInput,
    ReadsSpatialMap,
    _bn_params,
    _check_nhwc,
    _fmt,
    _fmt_type,
    _from_attr,
    _non_negative,
    _positive,
    _stride,
    _to_attr,
    conv_out,
    nhwc_type,
    static_hwc,
    unknown_nhwc,
)
from tr_mlir.dialects.arch._fused import (  # noqa: F401
    _BN_FMT,
    BasicBlockIdentityOp,
    BasicBlockProjectionOp,
    BottleneckIdentityOp,
    BottleneckProjectionOp,
    CbrOp,
    CbrpOp,
    GapFcOp,
    InvResidualIdentityOp,
    InvResidualNoShortcutOp,
    _block_hwc,
    _FusedBnBase,
    _require_channels,
)
from tr_mlir.dialects.arch._layers import (  # noqa: F401
    AddOp,
    AvgPoolOp,
    Bn1dOp,
    Bn2dOp,
    BnOp,
    ChannelPaddingOp,
    ConvOp,
    DropoutOp,
    EluOp,
    FcOp,
    FlattenOp,
    GapOp,
    HardswishOp,
    IdentityOp,
    LeakyReluOp,
    MaxPoolOp,
    Relu6Op,
    ReluOp,
    SigmoidOp,
    SiluOp,
    SoftmaxCeOp,
    TanhOp,
    _activation,
    _ActivationBase,
    _BatchNormBase,
    _PoolBase,
)
from xdsl.dialects.builtin import (
    I64,
    IntegerAttr,
    StringAttr,
    SymbolNameConstraint,
    TensorType,
    UnitAttr,
    i64,
)
from xdsl.ir import (
    Attribute,
    Block,
    Operation,
    Region,
    SSAValue,
)
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    lazy_traits_def,
    operand_def,
    opt_prop_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
)
from xdsl.traits import HasParent, IsTerminator, SymbolOpInterface
from xdsl.utils.exceptions import VerifyException

# --------------------------------------------------------------------------------------
# Tree form
# --------------------------------------------------------------------------------------


@irdl_op_definition
class BlockOp(LayerOp):
    """``block(...)`` / ``mbconv(...)`` of the BluePrint: a residual block macro.

    ``mid_ch`` is given exactly for the bottleneck styles (``RESNET_1_3_1[_DS]``). Expanded
    by ``arch-expand`` into primitives (fuse=false) or one fused op (fuse=true).
    """

    name = "arch.block"
    LAYER_KIND: ClassVar[str] = "Block"
    style = prop_def(BlockStyleAttr)
    out_ch = prop_def(IntegerAttr[I64])
    mid_ch = opt_prop_def(IntegerAttr[I64])
    assembly_format = _fmt("$style (`mid_ch` `=` $mid_ch^)? `out_ch` `=` $out_ch")
    traits = traits_def(IsTreeForm())

    def channels_after(self, c: int) -> int:
        return self.param("out_ch")

    def verify_params(self) -> None:
        style: BlockStyle = self.style.data
        _positive(self, out_ch=self.param("out_ch"))
        mid = self.mid_ch
        if style.is_bottleneck:
            if mid is None:
                raise VerifyException(f"'{self.name}' op expected mid_ch for style {style}")
            _positive(self, mid_ch=mid.value.data)
        elif mid is not None:
            raise VerifyException(
                f"'{self.name}' op expected no mid_ch for style {style} (only the resnet_1_3_1 styles take one)"
            )

    def infer_hwc(self, hwc: HWC) -> HWC:
        style: BlockStyle = self.style.data
        return _block_hwc(hwc, style.stride, self.param("out_ch"))


class _RegionOp(ArchOp):
    """A tree-form op: one NHWC input, one NHWC output, regions whose blocks take the input."""

    input = operand_def(TensorType)
    output = result_def(TensorType)
    traits = traits_def(IsTreeForm())

    def _verify_region(self, region: Region, what: str) -> None:
        block = region.block
        if len(block.args) != 1:
            raise VerifyException(
                f"'{self.name}' op expected the {what} region to take exactly one argument, "
                f"got {len(block.args)}"
            )
        _check_nhwc(self, f"{what} region argument", block.args[0].type)
        last = block.last_op
        if not isinstance(last, YieldOp):
            raise VerifyException(f"'{self.name}' op expected the {what} region to end in 'arch.yield'")

    def verify_(self) -> None:
        _check_nhwc(self, "input", self.input.type)
        _check_nhwc(self, "result", self.output.type)
        for name, region in zip(self.get_irdl_definition().regions, self.regions):
            self._verify_region(region, name[0])


def _single_region(input_type: Attribute) -> Region:
    return Region(Block(arg_types=[input_type]))


@irdl_op_definition
class SeqOp(_RegionOp):
    """``seq(*layers)``: its body threads the input through the layers in order."""

    name = "arch.seq"
    body = region_def("single_block")
    assembly_format = "$input attr-dict `:` type($input) `->` type($output) $body"

    def __init__(self, input: SSAValue | Operation, body: Region | None = None,
                 result_type: Attribute | None = None):
        in_t = SSAValue.get(input).type
        super().__init__(operands=[input], result_types=[result_type or unknown_nhwc()],
                         regions=[body if body is not None else _single_region(in_t)])


@irdl_op_definition
class RepeatOp(_RegionOp):
    """``repeat(body, times)``: the body applied ``times`` times in a row."""

    name = "arch.repeat"
    times = prop_def(IntegerAttr[I64])
    body = region_def("single_block")
    assembly_format = "$input `times` `=` $times attr-dict `:` type($input) `->` type($output) $body"

    def __init__(self, input: SSAValue | Operation, times: int, body: Region | None = None,
                 result_type: Attribute | None = None):
        in_t = SSAValue.get(input).type
        super().__init__(operands=[input], result_types=[result_type or unknown_nhwc()],
                         properties={"times": IntegerAttr(times, i64)},
                         regions=[body if body is not None else _single_region(in_t)])

    def verify_(self) -> None:
        super().verify_()
        if self.times.value.data < 1:
            raise VerifyException(f"'{self.name}' op expected times >= 1, got {self.times.value.data}")


@irdl_op_definition
class Add2Op(_RegionOp):
    """``add2(shortcut, main)``: ``shortcut(x) + main(x)``. An empty region yields its argument."""

    name = "arch.add2"
    shortcut = region_def("single_block")
    main = region_def("single_block")
    assembly_format = (
        "$input attr-dict `:` type($input) `->` type($output) `shortcut` $shortcut `main` $main"
    )

    def __init__(self, input: SSAValue | Operation, shortcut: Region | None = None,
                 main: Region | None = None, result_type: Attribute | None = None):
        in_t = SSAValue.get(input).type
        super().__init__(operands=[input], result_types=[result_type or unknown_nhwc()],
                         regions=[shortcut if shortcut is not None else _single_region(in_t),
                                  main if main is not None else _single_region(in_t)])


@irdl_op_definition
class YieldOp(IRDLOperation):
    """Terminator of a tree-form region: the region's result value."""

    name = "arch.yield"
    value = operand_def(TensorType)
    traits = lazy_traits_def(lambda: (IsTerminator(), HasParent(SeqOp, RepeatOp, Add2Op), IsTreeForm()))
    assembly_format = "$value attr-dict `:` type($value)"

    def __init__(self, value: SSAValue | Operation):
        super().__init__(operands=[value])


# --------------------------------------------------------------------------------------
# Model container
# --------------------------------------------------------------------------------------


@irdl_op_definition
class ModelOp(ArchOp):
    """A network: the single source of truth for the model facts (DESIGN section 1).

    Properties: ``input_h``, ``input_w``, ``input_c`` (the NHWC input of one sample),
    ``num_classes``, the flags ``amp`` (fp16 storage with fp32 accumulation) and ``fuse``
    (fused kernels), and ``first_layer`` (set by ``arch-mark-first-layer``: the index of the
    first layer op in the body). The body's block takes the input tensor and ends in
    ``arch.output``.
    """

    name = "arch.model"
    sym_name = prop_def(SymbolNameConstraint())
    input_h = prop_def(IntegerAttr[I64])
    input_w = prop_def(IntegerAttr[I64])
    input_c = prop_def(IntegerAttr[I64])
    num_classes = prop_def(IntegerAttr[I64])
    amp = opt_prop_def(UnitAttr)
    fuse = opt_prop_def(UnitAttr)
    first_layer = opt_prop_def(IntegerAttr[I64])
    body = region_def("single_block")
    traits = traits_def(SymbolOpInterface())
    assembly_format = (
        "$sym_name `input` `(` $input_h `,` $input_w `,` $input_c `)` `num_classes` `=` $num_classes "
        "(`amp` $amp^)? (`fuse` $fuse^)? (`first_layer` `=` $first_layer^)? attr-dict-with-keyword $body"
    )

    def __init__(self, sym_name: str, input_hwc: HWC, num_classes: int, *, amp: bool = False,
                 fuse: bool = False, body: Region | None = None):
        h, w, c = input_hwc
        props: dict[str, Attribute] = {
            "sym_name": StringAttr(sym_name),
            "input_h": IntegerAttr(h, i64),
            "input_w": IntegerAttr(w, i64),
            "input_c": IntegerAttr(c, i64),
            "num_classes": IntegerAttr(num_classes, i64),
        }
        if amp:
            props["amp"] = UnitAttr()
        if fuse:
            props["fuse"] = UnitAttr()
        if body is None:
            body = Region(Block(arg_types=[nhwc_type(h, w, c)]))
        super().__init__(properties=props, regions=[body])

    @property
    def input_hwc(self) -> HWC:
        """(H, W, C) of one input sample."""
        return (self.input_h.value.data, self.input_w.value.data, self.input_c.value.data)

    @property
    def input_value(self) -> SSAValue:
        """The block argument holding the network input."""
        return self.body.block.args[0]

    @property
    def output_op(self) -> OutputOp:
        last = self.body.block.last_op
        assert isinstance(last, OutputOp)
        return last

    def layers(self) -> list[Operation]:
        """The ops of the body in order, without the terminator."""
        return [op for op in self.body.block.ops if not isinstance(op, OutputOp)]

    def set_flag(self, name: str, value: bool) -> None:
        """Set or clear a unit flag property (``amp`` or ``fuse``)."""
        if value:
            self.properties[name] = UnitAttr()
        else:
            self.properties.pop(name, None)

    def verify_(self) -> None:
        v = self.params()
        _positive(self, input_h=v["input_h"], input_w=v["input_w"], input_c=v["input_c"],
                  num_classes=v["num_classes"])
        block = self.body.block
        if len(block.args) != 1:
            raise VerifyException(
                f"'{self.name}' op expected the body to take exactly one argument (the input), "
                f"got {len(block.args)}"
            )
        arg_t = block.args[0].type
        _check_nhwc(self, "input argument", arg_t)
        dims = arg_t.get_shape()[1:]
        for d, e, key in zip(dims, self.input_hwc, ("input_h", "input_w", "input_c")):
            if d != DYN and d != e:
                raise VerifyException(
                    f"'{self.name}' op input argument type {arg_t} does not match "
                    f"{key} = {e}"
                )
        if not isinstance(block.last_op, OutputOp):
            raise VerifyException(f"'{self.name}' op expected the body to end in 'arch.output'")
        fl = v.get("first_layer")
        if fl is not None and fl is not False:
            n = len(self.layers())
            if not 0 <= fl < n:
                raise VerifyException(
                    f"'{self.name}' op expected first_layer in [0, {n}), got {fl}"
                )


@irdl_op_definition
class OutputOp(IRDLOperation):
    """Terminator of ``arch.model``: the network's last value (keeps the graph alive under DCE)."""

    name = "arch.output"
    value = operand_def(TensorType)
    traits = traits_def(IsTerminator(), HasParent(ModelOp))
    assembly_format = "$value attr-dict `:` type($value)"

    def __init__(self, value: SSAValue | Operation):
        super().__init__(operands=[value])
