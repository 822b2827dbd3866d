"""The primitive layer ops of the ``arch`` dialect, one per LayerKind of the seed, and ``arch.add``."""

from __future__ import annotations

from typing import Any, ClassVar

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
from xdsl.dialects.builtin import (
    I64,
    Float64Type,
    FloatAttr,
    IntegerAttr,
    TensorType,
    UnitAttr,
    i64,
)
from xdsl.ir import (
    Attribute,
    Operation,
    SSAValue,
)
from xdsl.irdl import (
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    traits_def,
)
from xdsl.traits import OpTrait, Pure
from xdsl.utils.exceptions import VerifyException

# --------------------------------------------------------------------------------------
# Primitives
# --------------------------------------------------------------------------------------


@irdl_op_definition
class ConvOp(LayerOp):
    """2-D convolution over NHWC, weights KRSC (``out_ch`` x k x k x C/groups), no bias.

    ``groups`` = 1 is a dense conv; ``groups`` = C = ``out_ch`` is depthwise. Output
    ``((H + 2p - k) // s + 1, (W + 2p - k) // s + 1, out_ch)`` (PyTorch ``Conv2d``).
    """

    name = "arch.conv"
    LAYER_KIND: ClassVar[str] = "Conv"
    out_ch = prop_def(IntegerAttr[I64])
    k = prop_def(IntegerAttr[I64])
    s = prop_def(IntegerAttr[I64], default_value=IntegerAttr(1, i64))
    p = prop_def(IntegerAttr[I64], default_value=IntegerAttr(0, i64))
    groups = prop_def(IntegerAttr[I64], default_value=IntegerAttr(1, i64))
    assembly_format = _fmt(
        "`out_ch` `=` $out_ch `k` `=` $k (`s` `=` $s^)? (`p` `=` $p^)? (`groups` `=` $groups^)?"
    )
    traits = traits_def(AlignsAmpInput())

    def channels_after(self, c: int) -> int:
        return self.param("out_ch")

    def verify_params(self) -> None:
        v = self.params()
        _positive(self, out_ch=v["out_ch"], k=v["k"], groups=v["groups"])
        _stride(self, s=v["s"])
        _non_negative(self, p=v["p"])
        if v["out_ch"] % v["groups"]:
            raise VerifyException(
                f"'{self.name}' op expected out_ch ({v['out_ch']}) divisible by groups ({v['groups']})"
            )

    def infer_hwc(self, hwc: HWC) -> HWC:
        v = self.params()
        h, w, c = hwc
        if c % v["groups"]:
            raise VerifyException(
                f"'{self.name}' op expected input channels ({c}) divisible by groups ({v['groups']})"
            )
        return (
            conv_out(self, h, v["k"], v["s"], v["p"]),
            conv_out(self, w, v["k"], v["s"], v["p"]),
            v["out_ch"],
        )


class _BatchNormBase(LayerOp):
    """Batch normalization (PyTorch semantics: ``momentum`` weights the new statistic)."""

    eps = prop_def(FloatAttr[Float64Type], default_value=_EPS)
    momentum = prop_def(FloatAttr[Float64Type], default_value=_MOMENTUM)
    assembly_format = _fmt("(`eps` `=` $eps^)? (`momentum` `=` $momentum^)?")

    def verify_params(self) -> None:
        v = self.params()
        _bn_params(self, v["eps"], v["momentum"])


@irdl_op_definition
class BnOp(_BatchNormBase):
    """``bn()`` of the BluePrint before ``arch-rename-bn`` decides between bn1d and bn2d."""

    name = "arch.bn"
    LAYER_KIND: ClassVar[str] = "Bn2d"


@irdl_op_definition
class Bn1dOp(_BatchNormBase):
    """Batch norm over features of a flattened value (after fc / flatten / gap)."""

    name = "arch.bn1d"
    LAYER_KIND: ClassVar[str] = "Bn1d"


@irdl_op_definition
class Bn2dOp(_BatchNormBase):
    """Batch norm over the channels of an NHWC feature map."""

    name = "arch.bn2d"
    LAYER_KIND: ClassVar[str] = "Bn2d"


class _ActivationBase(LayerOp):
    """Element-wise activation, shape-preserving (PyTorch default parameters)."""

    assembly_format = _fmt("")
    traits = traits_def(IsActivation())


def _activation(op_name: str, kind: str, doc: str, *traits: OpTrait) -> type[LayerOp]:
    body: dict[str, Any] = {"name": op_name, "LAYER_KIND": kind, "__doc__": doc,
                            "__module__": __name__, "__annotations__": {"LAYER_KIND": ClassVar[str]}}
    if traits:
        body["traits"] = traits_def(*traits)
    return irdl_op_definition(type(f"{kind}Op", (_ActivationBase,), body))


ReluOp = _activation("arch.relu", "ReLU", "``max(x, 0)``.", BnRenameSeeThrough())
TanhOp = _activation("arch.tanh", "Tanh", "``tanh(x)``.", BnRenameSeeThrough())
SiluOp = _activation("arch.silu", "SiLU", "``x * sigmoid(x)``.")
Relu6Op = _activation("arch.relu6", "ReLU6", "``min(max(x, 0), 6)``.")
LeakyReluOp = _activation(
    "arch.leaky_relu", "LeakyReLU", "``x if x > 0 else 0.01 x`` (PyTorch's default slope)."
)
HardswishOp = _activation("arch.hardswish", "Hardswish", "``x * relu6(x + 3) / 6``.")
EluOp = _activation("arch.elu", "ELU", "``x if x > 0 else exp(x) - 1`` (alpha = 1).")
SigmoidOp = _activation("arch.sigmoid", "Sigmoid", "``1 / (1 + exp(-x))``.")


class _PoolBase(LayerOp):
    """Pooling window k x k, stride s, padding p; floor mode (PyTorch's default)."""

    k = prop_def(IntegerAttr[I64])
    s = prop_def(IntegerAttr[I64])
    p = prop_def(IntegerAttr[I64], default_value=IntegerAttr(0, i64))
    assembly_format = _fmt("`k` `=` $k `s` `=` $s (`p` `=` $p^)?")

    def verify_params(self) -> None:
        v = self.params()
        _positive(self, k=v["k"])
        _stride(self, s=v["s"])
        _non_negative(self, p=v["p"])
        if 2 * v["p"] > v["k"]:
            raise VerifyException(
                f"'{self.name}' op expected padding p ({v['p']}) <= k/2 ({v['k']}/2), as PyTorch requires"
            )

    def infer_hwc(self, hwc: HWC) -> HWC:
        v = self.params()
        h, w, c = hwc
        return (
            conv_out(self, h, v["k"], v["s"], v["p"], "pool window"),
            conv_out(self, w, v["k"], v["s"], v["p"], "pool window"),
            c,
        )


@irdl_op_definition
class MaxPoolOp(_PoolBase):
    """Max pooling (padding counts as -inf)."""

    name = "arch.maxpool"
    LAYER_KIND: ClassVar[str] = "MaxPool"


@irdl_op_definition
class AvgPoolOp(_PoolBase):
    """Average pooling (padding counted in the divisor, PyTorch's ``count_include_pad``)."""

    name = "arch.avgpool"
    LAYER_KIND: ClassVar[str] = "AvgPool"


@irdl_op_definition
class GapOp(LayerOp):
    """Global average pooling: (H, W, C) -> (1, 1, C)."""

    name = "arch.gap"
    LAYER_KIND: ClassVar[str] = "GAP"
    assembly_format = _fmt("")
    traits = traits_def(FeatureProducer())

    def infer_hwc(self, hwc: HWC) -> HWC:
        return (1, 1, hwc[2])


@irdl_op_definition
class FcOp(LayerOp):
    """Fully connected: reads the H*W*C features of a sample, writes (1, 1, out_features).

    Weights ``out_features x (H*W*C)``; ``bias`` (a unit flag) adds a bias vector.
    """

    name = "arch.fc"
    LAYER_KIND: ClassVar[str] = "FC"
    out_features = prop_def(IntegerAttr[I64])
    bias = opt_prop_def(UnitAttr)
    assembly_format = _fmt("`out_features` `=` $out_features (`bias` $bias^)?")
    traits = traits_def(FeatureProducer(), ReadsSpatialMap(), NeedsFlatInput(priority=0, map_align=8))

    def channels_after(self, c: int) -> int:
        return self.param("out_features")

    def verify_params(self) -> None:
        _positive(self, out_features=self.param("out_features"))

    def infer_hwc(self, hwc: HWC) -> HWC:
        return (1, 1, self.param("out_features"))


@irdl_op_definition
class FlattenOp(LayerOp):
    """(H, W, C) -> (1, 1, H*W*C), in NHWC order. ``start_dim`` is the BluePrint's (1)."""

    name = "arch.flatten"
    LAYER_KIND: ClassVar[str] = "Flatten"
    start_dim = prop_def(IntegerAttr[I64], default_value=IntegerAttr(1, i64))
    assembly_format = _fmt("(`start_dim` `=` $start_dim^)?")
    traits = traits_def(FeatureProducer(), ReadsSpatialMap())

    def verify_params(self) -> None:
        if self.param("start_dim") != 1:
            raise VerifyException(
                f"'{self.name}' op expected start_dim = 1 (flatten all but the batch), "
                f"got {self.param('start_dim')}"
            )

    def infer_hwc(self, hwc: HWC) -> HWC:
        return (1, 1, hwc[0] * hwc[1] * hwc[2])


@irdl_op_definition
class ChannelPaddingOp(LayerOp):
    """Zero-pads C up to a multiple of 8 (the seed's ChannelPadding)."""

    name = "arch.channel_padding"
    LAYER_KIND: ClassVar[str] = "ChannelPadding"
    assembly_format = _fmt("")
    traits = traits_def(BnRenameSeeThrough())

    def channels_after(self, c: int) -> int:
        return (c + 7) // 8 * 8

    def infer_hwc(self, hwc: HWC) -> HWC:
        h, w, c = hwc
        return (h, w, (c + 7) // 8 * 8)


@irdl_op_definition
class IdentityOp(LayerOp):
    """``y = x``; after ``arch-normalize-identity`` only on empty residual shortcuts."""

    name = "arch.identity"
    LAYER_KIND: ClassVar[str] = "Identity"
    assembly_format = _fmt("")
    traits = traits_def(BnRenameSeeThrough())


@irdl_op_definition
class SoftmaxCeOp(LayerOp):
    """Softmax cross-entropy head over ``num_classes`` logits (the loss of the network).

    Once shapes are known the input's C must equal ``num_classes``. H and W are not checked
    here: between ``arch-deduce-shapes`` and ``arch-normalize-flatten`` the head may still
    read a spatial map (the seed checks C only, facts sheet section 4); the flatten pass
    inserts the ``arch.flatten`` that makes it (1, 1, num_classes).
    """

    name = "arch.softmax_ce"
    LAYER_KIND: ClassVar[str] = "SoftmaxCE"
    num_classes = prop_def(IntegerAttr[I64])
    assembly_format = _fmt("`num_classes` `=` $num_classes")
    traits = traits_def(NeedsFlatInput(priority=1))

    def verify_params(self) -> None:
        _positive(self, num_classes=self.param("num_classes"))

    def infer_hwc(self, hwc: HWC) -> HWC:
        n = self.param("num_classes")
        if hwc[2] != n:
            raise VerifyException(
                f"'{self.name}' op expected input C = num_classes = {n}, got C = {hwc[2]}; "
                f"the last layer must produce {n} logits"
            )
        return hwc


@irdl_op_definition
class DropoutOp(LayerOp):
    """Inverted dropout with drop probability ``p`` in [0, 1) (PyTorch ``Dropout``)."""

    name = "arch.dropout"
    LAYER_KIND: ClassVar[str] = "Dropout"
    p = prop_def(FloatAttr[Float64Type])
    assembly_format = _fmt("`p` `=` $p")

    def verify_params(self) -> None:
        p = self.param("p")
        if not 0.0 <= p < 1.0:
            raise VerifyException(f"'{self.name}' op expected dropout p in [0, 1), got {p}")


@irdl_op_definition
class AddOp(ArchLayerOp):
    """Residual join ``shortcut + main``; both operands and the result have one shape.

    The shortcut operand comes first (the seed's linearization order); :attr:`main_input` is
    ``main``.
    """

    name = "arch.add"
    LAYER_KIND: ClassVar[str] = "Add"
    shortcut = operand_def(TensorType)
    main = operand_def(TensorType)
    output = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = "$shortcut `,` $main attr-dict `:` type($shortcut) `,` type($main) `->` type($output)"

    def __init__(self, shortcut: SSAValue | Operation, main: SSAValue | Operation,
                 result_type: Attribute | None = None):
        super().__init__(operands=[shortcut, main],
                         result_types=[result_type if result_type is not None else unknown_nhwc()])

    def infer_hwc(self, shortcut: HWC, main: HWC) -> HWC:  # type: ignore[override]
        """The common shape of both inputs; ``VerifyException`` when they differ."""
        if shortcut != main:
            raise VerifyException(
                f"'{self.name}' op expected shortcut and main of one shape, got "
                f"{_fmt_type(shortcut)} (shortcut) and {_fmt_type(main)} (main); the shortcut "
                "branch needs a projection (conv 1x1 with the block's stride and channels)"
            )
        return main

    def channels_after(self, shortcut_c: int, main_c: int) -> int:  # type: ignore[override]
        """The main branch's count (the seed's ``current_c`` runs along the main branch)."""
        return main_c

    def verify_(self) -> None:
        types = [self.shortcut.type, self.main.type, self.output.type]
        for what, t in zip(("shortcut", "main", "result"), types):
            _check_nhwc(self, what, t)
        for i, dims in enumerate(zip(*(t.get_shape()[1:] for t in types))):
            known = {d for d in dims if d != DYN}
            if len(known) > 1:
                raise VerifyException(
                    f"'{self.name}' op expected shortcut, main and result of one shape, got "
                    f"{types[0]}, {types[1]} -> {types[2]} (dim {'HWC'[i]} differs)"
                )
