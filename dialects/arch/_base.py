"""Attributes, type helpers, op traits and the base classes of the ``arch`` ops (:mod:`tr_mlir.dialects.arch`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    Float32Type,
    FloatAttr,
    IntegerAttr,
    StringAttr,
    TensorType,
    UnitAttr,
    f32,
    f64,
    i64,
)
from xdsl.dialects.utils import EnumAttribute, StrEnum
from xdsl.ir import (
    Attribute,
    Operation,
    SpacedOpaqueSyntaxAttribute,
    SSAValue,
)
from xdsl.irdl import (
    BaseAttr,
    IRDLOperation,
    irdl_attr_definition,
    operand_def,
    result_def,
    traits_def,
)
from xdsl.traits import OpTrait, Pure
from xdsl.utils.exceptions import VerifyException

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

    def tensor_params(self, tensor: str) -> dict[str, Any]:
        """The properties (as :meth:`params`) of the layer that owns the descriptor tensor named
        ``tensor``: this op's own; a fused op that plans several layers' tensors answers for the
        one that owns it (:class:`tr_mlir.extend.FusedChainOp`). ``memplan-name-parameters`` asks
        it whether an FC bias is a parameter."""
        return self.params()


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
