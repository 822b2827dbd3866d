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


@irdl_op_definition
class BottleneckIdentityOp(_FusedBnBase):
    """ResNet bottleneck 1x1 -> 3x3 -> 1x1 (width ``bottleneck_ch``), identity shortcut, post-add ReLU."""

    name = "arch.bottleneck_identity"
    LAYER_KIND: ClassVar[str] = "BottleneckIdentity"
    bottleneck_ch = prop_def(IntegerAttr[I64])
    assembly_format = _fmt(f"`bottleneck_ch` `=` $bottleneck_ch {_BN_FMT}")


@irdl_op_definition
class BottleneckProjectionOp(_FusedBnBase):
    """ResNet bottleneck with a 1x1 projection shortcut; ``stride`` on the 3x3 and the projection."""

    name = "arch.bottleneck_projection"
    LAYER_KIND: ClassVar[str] = "BottleneckProjection"
    bottleneck_ch = prop_def(IntegerAttr[I64])
    out_ch = prop_def(IntegerAttr[I64])
    stride = prop_def(IntegerAttr[I64], default_value=IntegerAttr(1, i64))
    assembly_format = _fmt(
        f"`bottleneck_ch` `=` $bottleneck_ch `out_ch` `=` $out_ch (`stride` `=` $stride^)? {_BN_FMT}"
    )

    def channels_after(self, c: int) -> int:
        return self.param("out_ch")

    def infer_hwc(self, hwc: HWC) -> HWC:
        return _block_hwc(hwc, self.param("stride"), self.param("out_ch"))


@irdl_op_definition
class BasicBlockIdentityOp(_FusedBnBase):
    """ResNet basic block 3x3 -> 3x3, identity shortcut, post-add ReLU; input C = ``out_ch``."""

    name = "arch.basic_block_identity"
    LAYER_KIND: ClassVar[str] = "BasicBlockIdentity"
    out_ch = prop_def(IntegerAttr[I64])
    assembly_format = _fmt(f"`out_ch` `=` $out_ch {_BN_FMT}")

    def channels_after(self, c: int) -> int:
        return self.param("out_ch")

    def infer_hwc(self, hwc: HWC) -> HWC:
        _require_channels(self, hwc, self.param("out_ch"), "identity shortcut")
        return hwc


@irdl_op_definition
class BasicBlockProjectionOp(_FusedBnBase):
    """ResNet basic block with a 1x1 projection shortcut; ``stride`` on the first 3x3."""

    name = "arch.basic_block_projection"
    LAYER_KIND: ClassVar[str] = "BasicBlockProjection"
    out_ch = prop_def(IntegerAttr[I64])
    stride = prop_def(IntegerAttr[I64], default_value=IntegerAttr(1, i64))
    assembly_format = _fmt(f"`out_ch` `=` $out_ch (`stride` `=` $stride^)? {_BN_FMT}")

    def channels_after(self, c: int) -> int:
        return self.param("out_ch")

    def infer_hwc(self, hwc: HWC) -> HWC:
        return _block_hwc(hwc, self.param("stride"), self.param("out_ch"))


@irdl_op_definition
class InvResidualIdentityOp(_FusedBnBase):
    """MobileNetV2 inverted residual (1x1 expand, depthwise 3x3, 1x1 project) with identity shortcut.

    Stride 1 and input C = ``out_ch``; no activation after the add.
    """

    name = "arch.inv_residual_identity"
    LAYER_KIND: ClassVar[str] = "InvResidualIdentity"
    expand_ch = prop_def(IntegerAttr[I64])
    out_ch = prop_def(IntegerAttr[I64])
    assembly_format = _fmt(f"`expand_ch` `=` $expand_ch `out_ch` `=` $out_ch {_BN_FMT}")

    def channels_after(self, c: int) -> int:
        return self.param("out_ch")

    def infer_hwc(self, hwc: HWC) -> HWC:
        _require_channels(self, hwc, self.param("out_ch"), "identity shortcut")
        return hwc


@irdl_op_definition
class InvResidualNoShortcutOp(_FusedBnBase):
    """MobileNetV2 inverted residual without a shortcut; ``stride`` on the depthwise 3x3."""

    name = "arch.inv_residual_no_shortcut"
    LAYER_KIND: ClassVar[str] = "InvResidualNoShortcut"
    expand_ch = prop_def(IntegerAttr[I64])
    out_ch = prop_def(IntegerAttr[I64])
    stride = prop_def(IntegerAttr[I64], default_value=IntegerAttr(1, i64))
    assembly_format = _fmt(
        f"`expand_ch` `=` $expand_ch `out_ch` `=` $out_ch (`stride` `=` $stride^)? {_BN_FMT}"
    )

    def channels_after(self, c: int) -> int:
        return self.param("out_ch")

    def infer_hwc(self, hwc: HWC) -> HWC:
        return _block_hwc(hwc, self.param("stride"), self.param("out_ch"))
