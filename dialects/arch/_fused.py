"""The fused layer ops of the ``arch`` dialect, produced by the ArchPlan fusion passes."""

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
    Float64Type,
    FloatAttr,
    IntegerAttr,
    UnitAttr,
    i64,
)
from xdsl.ir import (
    Operation,
)
from xdsl.irdl import (
    irdl_op_definition,
    opt_prop_def,
    prop_def,
    traits_def,
)
from xdsl.utils.exceptions import VerifyException

from tr_mlir.dialects.arch._residual import IN, ConvStage, ResidualSpec, Shortcut

# --------------------------------------------------------------------------------------
# Fused kinds
# --------------------------------------------------------------------------------------


class _FusedBnBase(LayerOp):
    """Fused layer containing batch norms; they share ``eps`` and ``momentum``."""

    eps = prop_def(FloatAttr[Float64Type], default_value=_EPS)
    momentum = prop_def(FloatAttr[Float64Type], default_value=_MOMENTUM)
    traits = traits_def(IsFused())

    def verify_params(self) -> None:
        v = self.params()
        _bn_params(self, v["eps"], v["momentum"])
        ints = {k: x for k, x in v.items() if isinstance(x, int) and not isinstance(x, bool)}
        strides = {k: x for k, x in ints.items() if k in ("s", "conv_s", "pool_s", "stride")}
        pads = {k: x for k, x in ints.items() if k in ("p", "conv_p", "pool_p")}
        _positive(self, **{k: x for k, x in ints.items() if k not in strides and k not in pads})
        _stride(self, **strides)
        _non_negative(self, **pads)


_BN_FMT = "(`eps` `=` $eps^)? (`momentum` `=` $momentum^)?"


@irdl_op_definition
class CbrOp(_FusedBnBase):
    """conv + bn2d + relu (fused; also the ``cbr`` macro of the BluePrint)."""

    name = "arch.cbr"
    LAYER_KIND: ClassVar[str] = "CBR"
    out_ch = prop_def(IntegerAttr[I64])
    k = prop_def(IntegerAttr[I64])
    s = prop_def(IntegerAttr[I64], default_value=IntegerAttr(1, i64))
    p = prop_def(IntegerAttr[I64], default_value=IntegerAttr(0, i64))
    assembly_format = _fmt(
        f"`out_ch` `=` $out_ch `k` `=` $k (`s` `=` $s^)? (`p` `=` $p^)? {_BN_FMT}"
    )
    traits = traits_def(AlignsAmpInput())

    def channels_after(self, c: int) -> int:
        return self.param("out_ch")

    def infer_hwc(self, hwc: HWC) -> HWC:
        v = self.params()
        h, w, _ = hwc
        return (conv_out(self, h, v["k"], v["s"], v["p"]), conv_out(self, w, v["k"], v["s"], v["p"]),
                v["out_ch"])


@irdl_op_definition
class CbrpOp(_FusedBnBase):
    """conv + bn2d + relu + maxpool (fused by ``arch-merge-quadruple``; also a macro)."""

    name = "arch.cbrp"
    LAYER_KIND: ClassVar[str] = "CBRP"
    out_ch = prop_def(IntegerAttr[I64])
    conv_k = prop_def(IntegerAttr[I64])
    conv_s = prop_def(IntegerAttr[I64])
    conv_p = prop_def(IntegerAttr[I64])
    pool_k = prop_def(IntegerAttr[I64])
    pool_s = prop_def(IntegerAttr[I64])
    pool_p = prop_def(IntegerAttr[I64])
    assembly_format = _fmt(
        "`out_ch` `=` $out_ch `conv` `(` $conv_k `,` $conv_s `,` $conv_p `)` "
        f"`pool` `(` $pool_k `,` $pool_s `,` $pool_p `)` {_BN_FMT}"
    )

    def channels_after(self, c: int) -> int:
        return self.param("out_ch")

    def verify_params(self) -> None:
        super().verify_params()
        v = self.params()
        if 2 * v["pool_p"] > v["pool_k"]:
            raise VerifyException(
                f"'{self.name}' op expected pool padding ({v['pool_p']}) <= pool_k/2 ({v['pool_k']}/2)"
            )

    def infer_hwc(self, hwc: HWC) -> HWC:
        v = self.params()
        h, w, _ = hwc
        h = conv_out(self, h, v["conv_k"], v["conv_s"], v["conv_p"])
        w = conv_out(self, w, v["conv_k"], v["conv_s"], v["conv_p"])
        h = conv_out(self, h, v["pool_k"], v["pool_s"], v["pool_p"], "pool window")
        w = conv_out(self, w, v["pool_k"], v["pool_s"], v["pool_p"], "pool window")
        return (h, w, v["out_ch"])


@irdl_op_definition
class GapFcOp(LayerOp):
    """gap + fc (fused by ``arch-merge-binary``; also the ``gap_fc`` macro)."""

    name = "arch.gap_fc"
    LAYER_KIND: ClassVar[str] = "GapFC"
    out_features = prop_def(IntegerAttr[I64])
    bias = opt_prop_def(UnitAttr)
    assembly_format = _fmt("`out_features` `=` $out_features (`bias` $bias^)?")
    traits = traits_def(FeatureProducer(), IsFused())

    def channels_after(self, c: int) -> int:
        return self.param("out_features")

    def verify_params(self) -> None:
        _positive(self, out_features=self.param("out_features"))

    def infer_hwc(self, hwc: HWC) -> HWC:
        return (1, 1, self.param("out_features"))


def _block_hwc(hwc: HWC, stride: int, out_ch: int) -> HWC:
    h, w, _ = hwc
    return ((h - 1) // stride + 1, (w - 1) // stride + 1, out_ch)


def _require_channels(op: Operation, hwc: HWC, out_ch: int, why: str) -> None:
    if hwc[2] != out_ch:
        raise VerifyException(
            f"'{op.name}' op expected input C = {out_ch} ({why}), got C = {hwc[2]}"
        )


class ResidualBlockOp(_FusedBnBase):
    """A fused residual block whose structure is the class's ``RESIDUAL`` spec.

    ``arch-expand``, ``arch-merge-blocks`` and the layer descriptor all derive the block from
    :attr:`RESIDUAL` (:class:`~tr_mlir.dialects.arch.ResidualSpec`); so do the shape rule (each
    main stage's conv window in turn; an identity shortcut needs input C = the block's width) and
    the running channel count (the last stage's width). Its batch norms share ``eps`` and
    ``momentum``.
    """

    RESIDUAL: ClassVar[ResidualSpec]

    def channels_after(self, c: int) -> int:
        return self.RESIDUAL.out_ch(self.params(), c)

    def infer_hwc(self, hwc: HWC) -> HWC:
        spec, v = self.RESIDUAL, self.params()
        h, w, c = hwc
        out = spec.out_ch(v, c)
        if spec.shortcut is Shortcut.IDENTITY:
            _require_channels(self, hwc, out, "identity shortcut")
        for st in spec.main:
            h = conv_out(self, h, st.k, st.s(v), st.p)
            w = conv_out(self, w, st.k, st.s(v), st.p)
        return (h, w, out)


def residual_spec(op: Operation | type[Operation]) -> ResidualSpec | None:
    """The residual-block spec of an op or op class, or ``None`` for one that is no residual block."""
    cls = op if isinstance(op, type) else type(op)
    return cls.RESIDUAL if issubclass(cls, ResidualBlockOp) else None


_BOTTLENECK, _BASIC, _INVERTED = "bottleneck block", "basic block", "inverted residual block"


@irdl_op_definition
class BottleneckIdentityOp(ResidualBlockOp):
    """ResNet bottleneck 1x1 -> 3x3 -> 1x1 (width ``bottleneck_ch``), identity shortcut, post-add ReLU."""

    name = "arch.bottleneck_identity"
    LAYER_KIND: ClassVar[str] = "BottleneckIdentity"
    RESIDUAL: ClassVar[ResidualSpec] = ResidualSpec(
        _BOTTLENECK,
        (ConvStage("bottleneck_ch", 1, 0), ConvStage("bottleneck_ch", 3, 1), ConvStage(IN, 1, 0, relu=False)),
        Shortcut.IDENTITY, post_relu=True)
    bottleneck_ch = prop_def(IntegerAttr[I64])
    assembly_format = _fmt(f"`bottleneck_ch` `=` $bottleneck_ch {_BN_FMT}")


@irdl_op_definition
class BottleneckProjectionOp(ResidualBlockOp):
    """ResNet bottleneck with a 1x1 projection shortcut; ``stride`` on the 3x3 and the projection."""

    name = "arch.bottleneck_projection"
    LAYER_KIND: ClassVar[str] = "BottleneckProjection"
    RESIDUAL: ClassVar[ResidualSpec] = ResidualSpec(
        _BOTTLENECK,
        (ConvStage("bottleneck_ch", 1, 0), ConvStage("bottleneck_ch", 3, 1, stride="stride"),
         ConvStage("out_ch", 1, 0, relu=False)),
        Shortcut.PROJECTION, post_relu=True)
    bottleneck_ch = prop_def(IntegerAttr[I64])
    out_ch = prop_def(IntegerAttr[I64])
    stride = prop_def(IntegerAttr[I64], default_value=IntegerAttr(1, i64))
    assembly_format = _fmt(
        f"`bottleneck_ch` `=` $bottleneck_ch `out_ch` `=` $out_ch (`stride` `=` $stride^)? {_BN_FMT}"
    )


@irdl_op_definition
class BasicBlockIdentityOp(ResidualBlockOp):
    """ResNet basic block 3x3 -> 3x3, identity shortcut, post-add ReLU; input C = ``out_ch``."""

    name = "arch.basic_block_identity"
    LAYER_KIND: ClassVar[str] = "BasicBlockIdentity"
    RESIDUAL: ClassVar[ResidualSpec] = ResidualSpec(
        _BASIC, (ConvStage("out_ch", 3, 1), ConvStage("out_ch", 3, 1, relu=False)),
        Shortcut.IDENTITY, post_relu=True)
    out_ch = prop_def(IntegerAttr[I64])
    assembly_format = _fmt(f"`out_ch` `=` $out_ch {_BN_FMT}")


@irdl_op_definition
class BasicBlockProjectionOp(ResidualBlockOp):
    """ResNet basic block with a 1x1 projection shortcut; ``stride`` on the first 3x3."""

    name = "arch.basic_block_projection"
    LAYER_KIND: ClassVar[str] = "BasicBlockProjection"
    RESIDUAL: ClassVar[ResidualSpec] = ResidualSpec(
        _BASIC, (ConvStage("out_ch", 3, 1, stride="stride"), ConvStage("out_ch", 3, 1, relu=False)),
        Shortcut.PROJECTION, post_relu=True)
    out_ch = prop_def(IntegerAttr[I64])
    stride = prop_def(IntegerAttr[I64], default_value=IntegerAttr(1, i64))
    assembly_format = _fmt(f"`out_ch` `=` $out_ch (`stride` `=` $stride^)? {_BN_FMT}")


@irdl_op_definition
class InvResidualIdentityOp(ResidualBlockOp):
    """MobileNetV2 inverted residual (1x1 expand, depthwise 3x3, 1x1 project) with identity shortcut.

    Stride 1 and input C = ``out_ch``; no activation after the add.
    """

    name = "arch.inv_residual_identity"
    LAYER_KIND: ClassVar[str] = "InvResidualIdentity"
    RESIDUAL: ClassVar[ResidualSpec] = ResidualSpec(
        _INVERTED,
        (ConvStage("expand_ch", 1, 0), ConvStage("expand_ch", 3, 1, depthwise=True),
         ConvStage("out_ch", 1, 0, relu=False)),
        Shortcut.IDENTITY, post_relu=False)
    expand_ch = prop_def(IntegerAttr[I64])
    out_ch = prop_def(IntegerAttr[I64])
    assembly_format = _fmt(f"`expand_ch` `=` $expand_ch `out_ch` `=` $out_ch {_BN_FMT}")


@irdl_op_definition
class InvResidualNoShortcutOp(ResidualBlockOp):
    """MobileNetV2 inverted residual without a shortcut; ``stride`` on the depthwise 3x3."""

    name = "arch.inv_residual_no_shortcut"
    LAYER_KIND: ClassVar[str] = "InvResidualNoShortcut"
    RESIDUAL: ClassVar[ResidualSpec] = ResidualSpec(
        _INVERTED,
        (ConvStage("expand_ch", 1, 0), ConvStage("expand_ch", 3, 1, stride="stride", depthwise=True),
         ConvStage("out_ch", 1, 0, relu=False)),
        Shortcut.NONE, post_relu=False)
    expand_ch = prop_def(IntegerAttr[I64])
    out_ch = prop_def(IntegerAttr[I64])
    stride = prop_def(IntegerAttr[I64], default_value=IntegerAttr(1, i64))
    assembly_format = _fmt(
        f"`expand_ch` `=` $expand_ch `out_ch` `=` $out_ch (`stride` `=` $stride^)? {_BN_FMT}"
    )
