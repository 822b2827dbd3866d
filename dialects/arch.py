"""The ``arch`` dialect: a network as an SSA graph of layers over NHWC tensors.

Values are builtin tensors ``tensor<?xHxWxCxf32>`` in NHWC with a dynamic batch. Before
``arch-deduce-shapes`` H, W and C may be ``?``; afterwards they are static. The batch stays
``?`` (the memplan variants bind it).

The dialect has four families of ops (DESIGN section 3):

* primitives, one per LayerKind of the seed (``arch.conv``, ``arch.bn2d``, ``arch.relu`` ...);
* fused kinds produced by the ArchPlan fusion passes (``arch.cbr``, ``arch.bottleneck_identity`` ...);
* tree-form ops emitted from a BluePrint and removed by ``arch-expand`` (``arch.seq``,
  ``arch.add2``, ``arch.repeat``, ``arch.block``; ``cbr``/``cbrp``/``gap_fc`` double as macros);
* the model container ``arch.model`` with its terminator ``arch.output``.

Op knowledge lives on the op: every layer op has ``verify_params`` (the property rules) and
``infer_hwc`` (its NHWC shape rule, from the seed's ``recompute_shapes_from``, facts sheet
section 4, with geometry errors as diagnostics instead of clamping, DESIGN section 7), and a
``LAYER_KIND`` class attribute holding the seed's LayerKind name (used by the YAML export).
``arch.add`` shares that interface (:class:`ArchLayerOp`: ``layer_inputs``, ``infer_hwc``,
``channels_after`` over all its inputs). What a pass must know about an op beyond its shape
(bn1d/bn2d rule, flatten rule, AMP input alignment, tree form, ...) is an op trait declared in
the op's ``traits`` (section "Op traits"), so a new op, also one defined in a plugin outside
this package, declares it once and every pass learns it from the op.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from xdsl.dialects.builtin import (
    I64,
    DYNAMIC_INDEX,
    Float32Type,
    Float64Type,
    FloatAttr,
    IntegerAttr,
    StringAttr,
    SymbolNameConstraint,
    TensorType,
    UnitAttr,
    f32,
    f64,
    i64,
)
from xdsl.dialects.utils import EnumAttribute, StrEnum
from xdsl.ir import Attribute, Block, Dialect, Operation, Region, SpacedOpaqueSyntaxAttribute, SSAValue
from xdsl.irdl import (
    BaseAttr,
    IRDLOperation,
    irdl_attr_definition,
    irdl_op_definition,
    lazy_traits_def,
    operand_def,
    opt_prop_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
)
from xdsl.traits import HasParent, IsTerminator, OpTrait, Pure, SymbolOpInterface
from xdsl.utils.exceptions import VerifyException

from tr_mlir.errors import PluginError

HWC = tuple[int, int, int]
"""Static (H, W, C) of an NHWC value, batch excluded."""

DYN = DYNAMIC_INDEX


# --------------------------------------------------------------------------------------
# Attributes
# --------------------------------------------------------------------------------------


class BlockStyle(StrEnum):
    """The seed's eight residual block styles (facts sheet section 1), in its order.

    ``RESNET_1_3_1`` is the bottleneck (1x1, 3x3, 1x1), ``RESNET_3_3`` the basic block,
    ``MB_E{1,6}_K3`` the MobileNetV2 inverted residual with expansion 1 or 6; ``_DS``
    variants downsample with stride 2.
    """

    RESNET_1_3_1 = "resnet_1_3_1"
    RESNET_1_3_1_DS = "resnet_1_3_1_ds"
    RESNET_3_3 = "resnet_3_3"
    RESNET_3_3_DS = "resnet_3_3_ds"
    MB_E1_K3 = "mb_e1_k3"
    MB_E1_K3_DS = "mb_e1_k3_ds"
    MB_E6_K3 = "mb_e6_k3"
    MB_E6_K3_DS = "mb_e6_k3_ds"

    @property
    def stride(self) -> int:
        """The block's stride: 2 for the ``_DS`` styles, else 1."""
        return 2 if self.value.endswith("_ds") else 1

    @property
    def expand_ratio(self) -> int:
        """MobileNet expansion ratio (1 or 6); 0 for the ResNet styles."""
        if self.value.startswith("mb_e6"):
            return 6
        if self.value.startswith("mb_e1"):
            return 1
        return 0

    @property
    def is_bottleneck(self) -> bool:
        return self.value.startswith("resnet_1_3_1")

    @property
    def is_basic(self) -> bool:
        return self.value.startswith("resnet_3_3")

    @property
    def is_mobilenet(self) -> bool:
        return self.value.startswith("mb_")


@irdl_attr_definition
class BlockStyleAttr(EnumAttribute[BlockStyle], SpacedOpaqueSyntaxAttribute):
    """``#arch<block_style resnet_1_3_1>``; bare ``resnet_1_3_1`` inside op formats."""

    name = "arch.block_style"


# --------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------


def nhwc_type(h: int | None = None, w: int | None = None, c: int | None = None) -> TensorType:
    """``tensor<?xHxWxCxf32>``; ``None`` dims print as ``?``. The batch is always dynamic."""
    dims = [DYN] + [DYN if d is None else d for d in (h, w, c)]
    return TensorType(f32, dims)


def unknown_nhwc() -> TensorType:
    """``tensor<?x?x?x?xf32>``: an NHWC value whose shape is not deduced yet."""
    return nhwc_type()


def static_hwc(t: Attribute) -> HWC | None:
    """(H, W, C) of a rank-4 NHWC tensor type when all three are static, else ``None``."""
    if not isinstance(t, TensorType) or t.get_num_dims() != 4:
        return None
    _, h, w, c = t.get_shape()
    if DYN in (h, w, c):
        return None
    return (h, w, c)


def _check_nhwc(op: Operation, name: str, t: Attribute) -> None:
    if not isinstance(t, TensorType) or t.get_num_dims() != 4:
        raise VerifyException(f"'{op.name}' op expected {name} to be a rank-4 NHWC tensor, got {t}")
    if not isinstance(t.get_element_type(), Float32Type):
        raise VerifyException(
            f"'{op.name}' op expected {name} element type f32 (AMP is a model attribute, "
            f"not an element type), got {t.get_element_type()}"
        )
    for d in t.get_shape()[1:]:
        if d != DYN and d <= 0:
            raise VerifyException(f"'{op.name}' op expected positive dims in {name}, got {t}")


def _fmt_type(hwc: HWC) -> str:
    return f"tensor<?x{hwc[0]}x{hwc[1]}x{hwc[2]}xf32>"


def _to_attr(value: Any) -> Attribute:
    """Python value -> property attribute (int -> i64, float -> f64, BlockStyle -> enum)."""
    if isinstance(value, Attribute):
        return value
    if isinstance(value, BlockStyle):
        return BlockStyleAttr(value)
    if isinstance(value, bool):
        raise TypeError("booleans are unit properties: pass them to the op constructor as flags")
    if isinstance(value, int):
        return IntegerAttr(value, i64)
    if isinstance(value, float):
        return FloatAttr(value, f64)
    if isinstance(value, str):
        return StringAttr(value)
    raise TypeError(f"cannot convert {value!r} to a property")


def _from_attr(attr: Attribute) -> Any:
    if isinstance(attr, IntegerAttr):
        return attr.value.data
    if isinstance(attr, FloatAttr):
        return attr.value.data
    if isinstance(attr, UnitAttr):
        return True
    if isinstance(attr, BlockStyleAttr):
        return attr.data
    if isinstance(attr, StringAttr):
        return attr.data
    return attr


def conv_out(op: Operation, size: int, k: int, s: int, p: int, what: str = "kernel") -> int:
    """Output extent of a conv/pool window: ``(size + 2p - k) // s + 1`` (PyTorch, floor mode).

    Raises ``VerifyException`` naming ``op`` when the window does not fit the padded input
    (the seed clamps to 1 instead, DESIGN section 7).
    """
    if size + 2 * p < k:
        raise VerifyException(
            f"'{op.name}' op expected {what} size {k} <= padded input size {size} + 2*{p}; "
            f"use a smaller {what} or more padding"
        )
    return (size + 2 * p - k) // s + 1


def _positive(op: Operation, **values: int) -> None:
    for key, v in values.items():
        if v <= 0:
            raise VerifyException(f"'{op.name}' op expected {key} > 0, got {v}")


def _stride(op: Operation, **values: int) -> None:
    for key, v in values.items():
        if v < 1:
            raise VerifyException(f"'{op.name}' op expected {key} >= 1, got {v}")


def _non_negative(op: Operation, **values: int) -> None:
    for key, v in values.items():
        if v < 0:
            raise VerifyException(f"'{op.name}' op expected {key} >= 0, got {v}")


def _bn_params(op: Operation, eps: float, momentum: float) -> None:
    if not eps > 0:
        raise VerifyException(f"'{op.name}' op expected eps > 0, got {eps}")
    if eps == math.inf:  # it would print as 0x7FF0000000000000, which the custom format cannot read
        raise VerifyException(f"'{op.name}' op expected a finite eps, got {eps}")
    if not 0.0 <= momentum <= 1.0:
        raise VerifyException(f"'{op.name}' op expected momentum in [0, 1], got {momentum}")


# --------------------------------------------------------------------------------------
# Op traits: what passes and tools ask an op instead of keeping lists of op classes
# --------------------------------------------------------------------------------------
#
# A new op (in this file or in a plugin) declares what it is once, in its ``traits``; the passes
# query ``op.has_trait(T)`` / ``op.get_trait(T)`` (classmethods, so the op class answers too).
# ``traits_def`` of base classes are merged into their subclasses' traits.


@dataclass(frozen=True)
class IsActivation(OpTrait):
    """An element-wise, shape-preserving activation layer (``arch.relu``, ``arch.tanh``, ...).

    Carried by every op built on the activation base class. Classifies ops; it does not change
    what a pass does by itself (``arch-rename-bn`` sees through an activation only when it also
    carries :class:`BnRenameSeeThrough`)."""


@dataclass(frozen=True)
class IsFused(OpTrait):
    """A fused kind produced by the ArchPlan fusion passes (``arch.cbr``, ``arch.cbrp``,
    ``arch.gap_fc``, the fused residual blocks): one op standing for a chain of primitives."""


@dataclass(frozen=True)
class IsTreeForm(OpTrait):
    """An op of the BluePrint tree form (``arch.seq``, ``arch.repeat``, ``arch.add2``,
    ``arch.yield``, ``arch.block``) that ``arch-expand`` removes. The passes after it need the
    flat graph: ``require_flat`` (``passes/_model.py``) fails at the first op with this trait."""


@dataclass(frozen=True)
class BnRenameSeeThrough(OpTrait):
    """``arch-rename-bn`` walks backwards from an ``arch.bn`` over layers with this trait to
    decide bn1d vs bn2d (the seed's list: ReLU, Tanh, Identity, ChannelPadding; other
    activations and dropout stop the walk). The op must have one input (``input``)."""


@dataclass(frozen=True)
class FeatureProducer(OpTrait):
    """A layer whose result is a feature vector rather than a feature map (fc, flatten, gap,
    gap_fc): ``arch-rename-bn`` makes a BN reading it (through :class:`BnRenameSeeThrough`
    layers) an ``arch.bn1d``."""


@dataclass(frozen=True)
class ReadsSpatialMap(OpTrait):
    """A layer whose weights (or output size) depend on the H x W of the map it reads, because
    it flattens that map (fc, flatten; not gap_fc, which averages first). ``tr-train``'s resize
    rule (``reads_fixed_map``) keeps a model's native input size when such a layer other than
    the first reads an H x W > 1 map (LeNet-5, VGG)."""


@dataclass(frozen=True)
class AlignsAmpInput(OpTrait):
    """A layer that, as the reader of the model input, wants the input channels rounded up to a
    multiple of 4 under AMP (the seed's "layer 0 is a Conv or CBR"; conv, cbr):
    ``arch-align-amp-input`` consults :meth:`aligns`."""

    def aligns(self, op: Operation) -> bool:
        """Whether this instance of the op asks for aligned channels: not when it has a
        ``groups`` property other than 1 (extra channels would change a grouped conv)."""
        groups = op.properties.get("groups")
        return not isinstance(groups, IntegerAttr) or groups.value.data == 1


@dataclass(frozen=True)
class NeedsFlatInput(OpTrait):
    """A layer that reads a flat feature vector (fc, softmax_ce): ``arch-normalize-flatten``
    puts one ``arch.flatten`` before the first such op of the lowest ``priority`` (the first fc,
    else the first softmax_ce) when its input is spatial (H > 1 or W > 1), unless
    ``map_align`` > 0 and the input's C is a multiple of it (an fc reads an HWC map directly
    when C % 8 == 0). ``arch.gap_fc`` averages first and has no such trait."""

    priority: int = 0
    map_align: int = 0

    def needs_flatten(self, hwc: HWC) -> bool:
        """Whether an input of shape ``hwc`` must be flattened first."""
        h, w, c = hwc
        spatial = h > 1 or w > 1
        if self.map_align > 0:
            return spatial and c % self.map_align != 0
        return spatial


# --------------------------------------------------------------------------------------
# Base classes
# --------------------------------------------------------------------------------------


_EPS = FloatAttr(1e-5, f64)
_MOMENTUM = FloatAttr(0.1, f64)


class ArchOp(IRDLOperation):
    """Common helpers for arch ops: Python-valued construction and parameter access."""

    @classmethod
    def unit_property_names(cls) -> tuple[str, ...]:
        """Names of the op's ``UnitAttr`` flag properties (e.g. ``bias``, ``amp``)."""
        props = cls.get_irdl_definition().properties
        return tuple(
            name
            for name, pdef in props.items()
            if isinstance(pdef.constr, BaseAttr) and pdef.constr.attr is UnitAttr
        )

    def params(self) -> dict[str, Any]:
        """Properties as Python values; unit flags as booleans (absent = ``False``)."""
        out: dict[str, Any] = {name: False for name in self.unit_property_names()}
        for name, attr in self.properties.items():
            out[name] = _from_attr(attr)
        return out

    def param(self, name: str) -> Any:
        """One property as a Python value (see :meth:`params`)."""
        return self.params()[name]


class ArchLayerOp(ArchOp):
    """The interface of every layer of a flat ArchPlan: :class:`LayerOp` (one input) and
    ``arch.add`` (two inputs). Passes that need a layer's shape or channel rule ask it here
    instead of telling one-input layers and joins apart:

    * :attr:`layer_inputs`: the NHWC values the layer reads, in operand order;
    * :attr:`main_input`: the input the seed's running channel count and plan table follow (the
      only input of a one-input layer, the main branch of an add);
    * :meth:`infer_hwc` ``(*input_hwcs)``: the result's (H, W, C) from the inputs' (one per
      input), ``VerifyException`` on bad geometry (read by ``arch-deduce-shapes``);
    * :meth:`channels_after` ``(*input_cs)``: the seed's running channel count after the layer
      (read by ``arch-expand``).
    """

    LAYER_KIND: ClassVar[str] = ""

    @property
    def layer_inputs(self) -> tuple[SSAValue, ...]:
        """The NHWC values the layer reads, in operand order."""
        return tuple(self.operands)

    @property
    def main_input(self) -> SSAValue:
        """The input whose shape the plan table shows and whose channel count continues."""
        return self.layer_inputs[-1]

    def infer_hwc(self, *input_hwcs: HWC) -> HWC:
        """Output (H, W, C) for static input shapes, one per :attr:`layer_inputs`."""
        raise NotImplementedError(f"{type(self).__name__} has no NHWC shape rule")

    def channels_after(self, *input_cs: int) -> int:
        """The running channel count after this layer given each input's."""
        raise NotImplementedError(f"{type(self).__name__} has no channel rule")


class LayerOp(ArchLayerOp):
    """A layer with one NHWC input and one NHWC output.

    Subclasses set ``name``, ``LAYER_KIND`` (the seed's LayerKind name), their properties,
    ``verify_params`` and ``infer_hwc``. The verifier checks the properties, then, when the
    input's H, W, C are static, the shape rule, and, when the result is static too, that it
    matches the rule.
    """

    LAYER_KIND: ClassVar[str] = ""

    input = operand_def(TensorType)
    output = result_def(TensorType)

    traits = traits_def(Pure())

    def __init__(
        self,
        input: SSAValue | Operation,
        result_type: Attribute | None = None,
        **params: Any,
    ):
        props: dict[str, Attribute] = {}
        for key, value in params.items():
            if value is None or value is False:
                continue
            props[key] = UnitAttr() if value is True else _to_attr(value)
        super().__init__(
            operands=[input],
            result_types=[result_type if result_type is not None else unknown_nhwc()],
            properties=props,
        )

    @property
    def layer_inputs(self) -> tuple[SSAValue, ...]:
        return (self.input,)

    @property
    def main_input(self) -> SSAValue:
        return self.input

    def verify_params(self) -> None:
        """Check the properties alone; raise ``VerifyException`` with the rule broken."""

    def infer_hwc(self, hwc: HWC) -> HWC:  # type: ignore[override]
        """Output (H, W, C) for a static input (H, W, C). Default: shape-preserving."""
        return hwc

    def channels_after(self, c: int) -> int:  # type: ignore[override]
        """The seed's running channel count (``current_c``, facts sheet section 2.2) after
        this layer, given ``c`` before it. Only layers that set channels change it; like the
        seed, flatten, gap and pooling leave it unchanged. Default: ``c``."""
        return c

    def verify_(self) -> None:
        _check_nhwc(self, "input", self.input.type)
        _check_nhwc(self, "result", self.output.type)
        self.verify_params()
        in_hwc = static_hwc(self.input.type)
        if in_hwc is None:
            return
        expected = self.infer_hwc(in_hwc)
        got = self.output.type.get_shape()[1:]
        for e, g in zip(expected, got):
            if g != DYN and g != e:
                raise VerifyException(
                    f"'{self.name}' op result type {self.output.type} does not match the "
                    f"deduced shape {_fmt_type(expected)} for input {self.input.type}"
                )


_LAYER_FMT = "attr-dict `:` type($input) `->` type($output)"


def _fmt(props: str) -> str:
    return f"$input {props} {_LAYER_FMT}".replace("  ", " ")


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


# --------------------------------------------------------------------------------------
# Registries and the dialect
# --------------------------------------------------------------------------------------

PRIMITIVE_OPS: tuple[type[LayerOp], ...] = (
    ConvOp, BnOp, Bn1dOp, Bn2dOp, ReluOp, TanhOp, SiluOp, Relu6Op, LeakyReluOp, HardswishOp,
    EluOp, SigmoidOp, MaxPoolOp, AvgPoolOp, GapOp, FcOp, FlattenOp, ChannelPaddingOp, IdentityOp,
    SoftmaxCeOp, DropoutOp,
)
"""Single-input primitive layers (``arch.add`` is the two-input primitive)."""

ACTIVATION_OPS: tuple[type[LayerOp], ...] = (
    ReluOp, TanhOp, SiluOp, Relu6Op, LeakyReluOp, HardswishOp, EluOp, SigmoidOp,
)

FUSED_OPS: tuple[type[LayerOp], ...] = (
    CbrOp, CbrpOp, GapFcOp, BottleneckIdentityOp, BottleneckProjectionOp, BasicBlockIdentityOp,
    BasicBlockProjectionOp, InvResidualIdentityOp, InvResidualNoShortcutOp,
)

TREE_OPS: tuple[type[IRDLOperation], ...] = (SeqOp, RepeatOp, Add2Op, YieldOp, BlockOp)

BUILTIN_OPS: tuple[type[IRDLOperation], ...] = (
    *PRIMITIVE_OPS, AddOp, *FUSED_OPS, *TREE_OPS, ModelOp, OutputOp,
)
"""Every op the package defines, in the dialect's order."""

_REGISTERED: list[type[LayerOp]] = []
"""Layer ops added by plugins (:func:`register_op`), in registration order."""


class OpRegistrationError(PluginError):
    """An op class :func:`register_op` cannot add; the message names the class and the rule."""


def register_op(cls: type[LayerOp]) -> type[LayerOp]:
    """Add a plugin's layer op class to the ``arch`` dialect; returns ``cls`` (usable as a decorator
    above ``@irdl_op_definition``).

    The class must be an IRDL op definition subclassing :class:`LayerOp` (one NHWC input, one NHWC
    output, ``verify_params`` / ``infer_hwc`` / ``channels_after`` as the built-in layers), named
    ``arch.<name>`` with a name and a ``LAYER_KIND`` no other arch op has. Registering the same class
    twice is a no-op. Contexts that load the dialect afterwards (:func:`arch_dialect`, ``tr-opt``,
    ``xdsl-opt`` through the ``xdsl.universe`` entry point) know the op.

    Raises :class:`OpRegistrationError` naming the class and what is wrong.
    """
    what = getattr(cls, "__qualname__", repr(cls))
    if not (isinstance(cls, type) and issubclass(cls, LayerOp)):
        raise OpRegistrationError(f"register_op({what}): an arch op must subclass tr_mlir.dialects.arch.LayerOp "
                                  "(one NHWC input, one NHWC output)")
    if cls in _REGISTERED:
        return cls
    try:
        cls.get_irdl_definition()
    except Exception:  # noqa: BLE001 - a class without its IRDL definition
        raise OpRegistrationError(f"register_op({what}): not an IRDL op definition; decorate the class with "
                                  "@irdl_op_definition (below @register_op)") from None
    name = getattr(cls, "name", "")
    if not isinstance(name, str) or not name.startswith("arch.") or len(name) <= len("arch."):
        raise OpRegistrationError(f"register_op({what}): its name must be 'arch.<name>', got {name!r}")
    if not cls.LAYER_KIND:
        raise OpRegistrationError(f"register_op({what}): set LAYER_KIND (the LayerKind name the ArchPlan YAML "
                                  "writes, e.g. 'ConvRelu')")
    for other in (*BUILTIN_OPS, *_REGISTERED):
        if other.name == name:
            raise OpRegistrationError(f"register_op({what}): the arch dialect already has an op '{name}' "
                                      f"({other.__module__}.{other.__qualname__})")
        if getattr(other, "LAYER_KIND", "") == cls.LAYER_KIND and other is not BnOp:
            raise OpRegistrationError(f"register_op({what}): LAYER_KIND '{cls.LAYER_KIND}' is already the kind "
                                      f"of '{other.name}'")
    _REGISTERED.append(cls)
    return cls


def registered_ops() -> tuple[type[LayerOp], ...]:
    """The layer ops plugins added (:func:`register_op`), in registration order."""
    return tuple(_REGISTERED)


def arch_dialect() -> Dialect:
    """The ``arch`` dialect with the package's ops and every op registered so far (one object
    until another op is registered: a context built after a plugin loaded knows its ops)."""
    global _DIALECT
    if _DIALECT is None or _DIALECT[0] != tuple(_REGISTERED):
        ops = tuple(_REGISTERED)
        _DIALECT = (ops, Arch if not ops else Dialect("arch", [*BUILTIN_OPS, *ops], [BlockStyleAttr]))
    return _DIALECT[1]


_DIALECT: tuple[tuple[type[LayerOp], ...], Dialect] | None = None


Arch = Dialect("arch", list(BUILTIN_OPS), [BlockStyleAttr])
"""The ``arch`` dialect of the package's own ops (plugins' ops: :func:`arch_dialect`)."""


def ops_by_layer_kind() -> Mapping[str, type[ArchOp]]:
    """Seed LayerKind name -> op class, plugin ops included (``Bn2d`` maps to ``arch.bn2d``)."""
    return {op.LAYER_KIND: op for op in layer_ops() if op is not BnOp}


def layer_ops() -> Sequence[type[ArchOp]]:
    """Every op class that is a layer of a flat ArchPlan (primitives, ``add``, fused kinds, and the
    layer ops plugins registered)."""
    return (*PRIMITIVE_OPS, AddOp, *FUSED_OPS, *_REGISTERED)
