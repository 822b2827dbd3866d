"""The BluePrint DSL: networks as immutable layer trees, and their emission into ``arch``.

A BluePrint is written with the seed's factory functions (facts sheet section 1), with the
seed's argument order and defaults::

    from tr_mlir.blueprint import *

    net = seq(cbr(64, 7, 2, 3), maxpool(3, 2, 1),
              repeat(block(64, BlockStyle.RESNET_3_3), 2),
              block(128, BlockStyle.RESNET_3_3_DS),
              gap_fc(1000, True))
    module = emit(net, (224, 224, 3), num_classes=1000)

Every factory returns a :class:`Layer`: a frozen dataclass (children are tuples), hashable,
compared by value, whose ``repr`` is the DSL call that builds it (``eval(repr(layer))``
rebuilds an equal layer with ``from tr_mlir.blueprint import *``); ``str`` is the same call
laid out on several lines when it is long. ``None`` is the seed's null layer: accepted as a
``seq`` child, an ``add2`` side or a ``repeat`` body, it expands to nothing.

Validation: the seed's ``std::invalid_argument`` checks raise :class:`BluePrintError` (a
``ValueError``) with the seed's messages, in the seed's order. On top of those, every
factory range-checks its arguments (the seed accepts negative channels or zero strides and
fails later, DESIGN section 7): sizes >= 1, strides >= 1, paddings >= 0, pool padding <= k/2
(PyTorch's rule), ``out_ch`` divisible by ``groups``, dropout ``p`` in [0, 1), batch-norm
``eps`` > 0 and ``momentum`` in [0, 1]. Wrong argument types (a bool or float where an int is
expected, a non-Layer child) raise :class:`BluePrintTypeError`, which is both a
``BluePrintError`` and a ``TypeError``. Messages name the factory and the argument:
``"conv: k must be >= 1, got 0"``.

:func:`emit` turns a layer tree into a module holding one ``arch.model`` in tree form (the
input of ``arch-expand``): each Layer class emits itself (``Layer._emit``), so the emitter
has no switch over layer kinds.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import numbers
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Attribute, Region, SSAValue
from xdsl.ir import Block as IRBlock

from tr_mlir.dialects.arch import (
    Add2Op,
    AvgPoolOp,
    BlockOp,
    BlockStyle,
    BnOp,
    CbrOp,
    CbrpOp,
    ChannelPaddingOp,
    ConvOp,
    DropoutOp,
    EluOp,
    FcOp,
    FlattenOp,
    GapFcOp,
    GapOp,
    HardswishOp,
    IdentityOp,
    LayerOp,
    LeakyReluOp,
    MaxPoolOp,
    ModelOp,
    OutputOp,
    Relu6Op,
    ReluOp,
    RepeatOp,
    SeqOp,
    SigmoidOp,
    SiluOp,
    TanhOp,
    YieldOp,
)
from tr_mlir.errors import TrMlirError

__all__ = [
    "BlockStyle", "BluePrintError", "BluePrintTypeError", "Layer",
    "conv", "conv_dw", "group_conv", "bn", "relu", "tanh_act", "silu", "relu6", "leaky_relu",
    "hardswish", "elu", "sigmoid", "dropout", "flatten", "channel_padding", "maxpool",
    "avgpool", "gap", "fc", "identity", "seq", "add2", "repeat", "cbr", "conv_bn_relu", "cbrp",
    "gap_fc", "block", "mbconv", "emit",
]


class BluePrintError(TrMlirError, ValueError):
    """A BluePrint factory or :func:`emit` was given an invalid argument.

    ``str(e)`` is the bare message (the seed's text for the checks the seed has).
    """


class BluePrintTypeError(BluePrintError, TypeError):
    """An argument of the wrong type (e.g. a bool or float where an int is expected)."""


# --------------------------------------------------------------------------------------
# Argument checks (messages name the factory and the argument)
# --------------------------------------------------------------------------------------


I64_MAX = (1 << 63) - 1
"""Largest integer argument: ``arch`` op properties are 64-bit signed integers (``i64``)."""


def check_int(where: str, name: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise BluePrintTypeError(f"{where}: {name} must be an int, got {type(v).__name__} {v!r}")
    if not -I64_MAX - 1 <= v <= I64_MAX:
        raise BluePrintError(f"{where}: {name} must fit in 64 bits (at most {I64_MAX}), got {v}")
    return int(v)


def _at_least(where: str, name: str, v: Any, low: int) -> int:
    v = check_int(where, name, v)
    if v < low:
        raise BluePrintError(f"{where}: {name} must be >= {low}, got {v}")
    return v


def _float(where: str, name: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise BluePrintTypeError(f"{where}: {name} must be a float, got {type(v).__name__} {v!r}")
    return float(v)


def check_bool(where: str, name: str, v: Any) -> bool:
    if not isinstance(v, bool):
        raise BluePrintTypeError(f"{where}: {name} must be True or False, got {type(v).__name__} {v!r}")
    return v


def _child(where: str, name: str, v: Any) -> Layer | None:
    if v is not None and not isinstance(v, Layer):
        raise BluePrintTypeError(
            f"{where}: {name} must be a Layer (or None), got {type(v).__name__} {v!r}; "
            f"build layers with the factory functions, e.g. relu()"
        )
    return v


def _pool_padding(where: str, k: int, p: int, k_name: str = "k", p_name: str = "p") -> None:
    if 2 * p > k:
        raise BluePrintError(
            f"{where}: {p_name} must be <= {k_name}/2 (PyTorch's pooling rule), got {p_name}={p}, {k_name}={k}"
        )


def _bn_args(where: str, momentum: Any, eps: Any) -> tuple[float, float]:
    momentum = _float(where, "momentum", momentum)
    eps = _float(where, "eps", eps)
    if not 0.0 <= momentum <= 1.0:
        raise BluePrintError(f"{where}: momentum must be in [0, 1], got {momentum}")
    if not eps > 0.0:
        raise BluePrintError(f"{where}: eps must be > 0, got {eps}")
    if eps == math.inf:
        raise BluePrintError(f"{where}: eps must be finite, got {eps}")
    return momentum, eps


# --------------------------------------------------------------------------------------
# The emitter state
# --------------------------------------------------------------------------------------


class _Emitter:
    """Where emitted ops go (``block``) and the seed's running channel count ``c``.

    ``c`` is the seed's ``current_c`` (facts sheet section 2.2): it starts at the input C
    and each created op updates it with ``op.channels_after(c)``.
    """

    def __init__(self, block: IRBlock, c: int):
        self.block = block
        self.c = c

    def add(self, op: LayerOp) -> SSAValue:
        """Append a layer op, thread ``c`` through it, return its result."""
        self.block.add_op(op)
        self.c = op.channels_after(self.c)
        return op.output

    def region(self, layers: Sequence[Layer | None], arg_type: Attribute, c: int) -> tuple[Region, int]:
        """A single-block region taking ``arg_type``, holding ``layers`` emitted in order
        from channel count ``c`` and ending in ``arch.yield``; also returns the count after."""
        block = IRBlock(arg_types=[arg_type])
        sub = _Emitter(block, c)
        value: SSAValue = block.args[0]
        for layer in layers:
            if layer is not None:
                value = layer._emit(sub, value)
        block.add_op(YieldOp(value))
        return Region(block), sub.c


# --------------------------------------------------------------------------------------
# Layers
# --------------------------------------------------------------------------------------


def _arg_repr(v: Any) -> str:
    if isinstance(v, BlockStyle):
        return f"BlockStyle.{v.name}"
    return repr(v)


_layer = dataclass(frozen=True, repr=False)
"""Decorator of every Layer class: frozen (immutable, hashable), compared by value, our repr."""


@_layer
class Layer:
    """A node of a BluePrint. Use the factory functions; the classes are their results.

    Subclasses set ``_DSL`` (the factory name used by ``repr``) and implement ``_emit``.
    """

    _DSL: ClassVar[str] = ""

    def _args(self) -> tuple[Any, ...]:
        """Positional arguments of the DSL call that rebuilds this layer (trailing
        arguments equal to the factory's defaults left out)."""
        fields = dataclasses.fields(self)
        values = [getattr(self, f.name) for f in fields]
        while fields and fields[-1].default is not dataclasses.MISSING and values[-1] == fields[-1].default:
            fields, values = fields[:-1], values[:-1]
        return tuple(values)

    def __repr__(self) -> str:
        return f"{self._DSL}({', '.join(_arg_repr(a) for a in self._args())})"

    def __str__(self) -> str:
        return self._format(0, 88)

    def _format(self, indent: int, width: int) -> str:
        flat = repr(self)
        args = self._args()
        if indent + len(flat) <= width or not any(isinstance(a, Layer) for a in args):
            return flat
        pad = " " * (indent + 4)
        parts = [a._format(indent + 4, width) if isinstance(a, Layer) else _arg_repr(a) for a in args]
        return f"{self._DSL}(\n" + "".join(f"{pad}{p},\n" for p in parts) + " " * indent + ")"

    def _emit(self, em: _Emitter, x: SSAValue) -> SSAValue:
        """Emit this layer after ``x`` into ``em``; return the value it produces."""
        raise NotImplementedError(f"{type(self).__name__} cannot be emitted")


@_layer
class _Primitive(Layer):
    """A layer that becomes one ``arch`` op (``OP``) whose properties are the fields."""

    OP: ClassVar[type[LayerOp]]

    def _props(self, c: int) -> dict[str, Any]:
        """Properties of the op, given the channel count ``c`` entering it."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def _emit(self, em: _Emitter, x: SSAValue) -> SSAValue:
        return em.add(self.OP(x, **self._props(em.c)))


@_layer
class Conv(_Primitive):
    """``conv(out_ch, k, s=1, p=0)``: dense 2-D convolution -> ``arch.conv``."""

    _DSL: ClassVar[str] = "conv"
    OP: ClassVar[type[LayerOp]] = ConvOp
    out_ch: int
    k: int
    s: int = 1
    p: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "out_ch", _at_least("conv", "out_ch", self.out_ch, 1))
        object.__setattr__(self, "k", _at_least("conv", "k", self.k, 1))
        object.__setattr__(self, "s", _at_least("conv", "s", self.s, 1))
        object.__setattr__(self, "p", _at_least("conv", "p", self.p, 0))


@_layer
class ConvDw(_Primitive):
    """``conv_dw(k, s=1, p=0)``: depthwise conv -> ``arch.conv`` with
    ``groups = out_ch = C`` (the channel count entering it). The seed rejects it."""

    _DSL: ClassVar[str] = "conv_dw"
    OP: ClassVar[type[LayerOp]] = ConvOp
    k: int
    s: int = 1
    p: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "k", _at_least("conv_dw", "k", self.k, 1))
        object.__setattr__(self, "s", _at_least("conv_dw", "s", self.s, 1))
        object.__setattr__(self, "p", _at_least("conv_dw", "p", self.p, 0))

    def _props(self, c: int) -> dict[str, Any]:
        return {"out_ch": c, "k": self.k, "s": self.s, "p": self.p, "groups": c}


@_layer
class GroupConv(_Primitive):
    """``group_conv(out_ch, groups, k, s=1, p=0)``: grouped conv -> ``arch.conv`` with ``groups``.
    The seed rejects it; here the input C must be divisible by ``groups`` (checked by the op)."""

    _DSL: ClassVar[str] = "group_conv"
    OP: ClassVar[type[LayerOp]] = ConvOp
    out_ch: int
    groups: int
    k: int
    s: int = 1
    p: int = 0

    def __post_init__(self) -> None:
        w = "group_conv"
        object.__setattr__(self, "out_ch", _at_least(w, "out_ch", self.out_ch, 1))
        object.__setattr__(self, "groups", _at_least(w, "groups", self.groups, 1))
        object.__setattr__(self, "k", _at_least(w, "k", self.k, 1))
        object.__setattr__(self, "s", _at_least(w, "s", self.s, 1))
        object.__setattr__(self, "p", _at_least(w, "p", self.p, 0))
        if self.out_ch % self.groups:
            raise BluePrintError(
                f"{w}: out_ch must be divisible by groups, got out_ch={self.out_ch}, groups={self.groups}"
            )


@_layer
class Bn(_Primitive):
    """``bn(momentum=0.1, eps=1e-5)`` (momentum first, as the seed) -> ``arch.bn``
    (``arch-rename-bn`` later picks bn1d or bn2d)."""

    _DSL: ClassVar[str] = "bn"
    OP: ClassVar[type[LayerOp]] = BnOp
    momentum: float = 0.1
    eps: float = 1e-5

    def __post_init__(self) -> None:
        momentum, eps = _bn_args("bn", self.momentum, self.eps)
        object.__setattr__(self, "momentum", momentum)
        object.__setattr__(self, "eps", eps)


@_layer
class Relu(_Primitive):
    """``relu()`` -> ``arch.relu``."""

    _DSL: ClassVar[str] = "relu"
    OP: ClassVar[type[LayerOp]] = ReluOp


@_layer
class Tanh(_Primitive):
    """``tanh_act()`` -> ``arch.tanh``."""

    _DSL: ClassVar[str] = "tanh_act"
    OP: ClassVar[type[LayerOp]] = TanhOp


@_layer
class Silu(_Primitive):
    """``silu()`` -> ``arch.silu``."""

    _DSL: ClassVar[str] = "silu"
    OP: ClassVar[type[LayerOp]] = SiluOp


@_layer
class Relu6(_Primitive):
    """``relu6()`` -> ``arch.relu6``."""

    _DSL: ClassVar[str] = "relu6"
    OP: ClassVar[type[LayerOp]] = Relu6Op


@_layer
class LeakyRelu(_Primitive):
    """``leaky_relu()`` -> ``arch.leaky_relu`` (slope 0.01; the seed has no parameter)."""

    _DSL: ClassVar[str] = "leaky_relu"
    OP: ClassVar[type[LayerOp]] = LeakyReluOp


@_layer
class Hardswish(_Primitive):
    """``hardswish()`` -> ``arch.hardswish``."""

    _DSL: ClassVar[str] = "hardswish"
    OP: ClassVar[type[LayerOp]] = HardswishOp


@_layer
class Elu(_Primitive):
    """``elu()`` -> ``arch.elu`` (alpha 1; the seed has no parameter)."""

    _DSL: ClassVar[str] = "elu"
    OP: ClassVar[type[LayerOp]] = EluOp


@_layer
class Sigmoid(_Primitive):
    """``sigmoid()`` -> ``arch.sigmoid``."""

    _DSL: ClassVar[str] = "sigmoid"
    OP: ClassVar[type[LayerOp]] = SigmoidOp


@_layer
class Dropout(_Primitive):
    """``dropout(p)``: drop probability ``p`` in [0, 1) -> ``arch.dropout``."""

    _DSL: ClassVar[str] = "dropout"
    OP: ClassVar[type[LayerOp]] = DropoutOp
    p: float

    def __post_init__(self) -> None:
        p = _float("dropout", "p", self.p)
        if not 0.0 <= p < 1.0:
            raise BluePrintError(f"dropout: p must be in [0, 1), got {p}")
        object.__setattr__(self, "p", p)


@_layer
class Flatten(_Primitive):
    """``flatten(start_dim=1)`` -> ``arch.flatten``: (H, W, C) -> (1, 1, H*W*C).

    Only ``start_dim = 1`` (flatten all but the batch) has a meaning; the seed keeps the
    value only in the layer name, here any other value is an error.
    """

    _DSL: ClassVar[str] = "flatten"
    OP: ClassVar[type[LayerOp]] = FlattenOp
    start_dim: int = 1

    def __post_init__(self) -> None:
        start_dim = check_int("flatten", "start_dim", self.start_dim)
        if start_dim != 1:
            raise BluePrintError(
                f"flatten: start_dim must be 1 (flatten all but the batch), got {start_dim}"
            )
        object.__setattr__(self, "start_dim", start_dim)


@_layer
class ChannelPadding(_Primitive):
    """``channel_padding()`` -> ``arch.channel_padding`` (C up to a multiple of 8)."""

    _DSL: ClassVar[str] = "channel_padding"
    OP: ClassVar[type[LayerOp]] = ChannelPaddingOp


@_layer
class _Pool(_Primitive):
    k: int
    s: int
    p: int

    def __post_init__(self) -> None:
        w = self._DSL
        object.__setattr__(self, "k", _at_least(w, "k", self.k, 1))
        object.__setattr__(self, "s", _at_least(w, "s", self.s, 1))
        object.__setattr__(self, "p", _at_least(w, "p", self.p, 0))
        _pool_padding(w, self.k, self.p)


@_layer
class MaxPool(_Pool):
    """``maxpool(k, s, p)`` -> ``arch.maxpool``."""

    _DSL: ClassVar[str] = "maxpool"
    OP: ClassVar[type[LayerOp]] = MaxPoolOp


@_layer
class AvgPool(_Pool):
    """``avgpool(k, s, p)`` -> ``arch.avgpool``."""

    _DSL: ClassVar[str] = "avgpool"
    OP: ClassVar[type[LayerOp]] = AvgPoolOp


@_layer
class Gap(_Primitive):
    """``gap()`` -> ``arch.gap``: global average pooling to (1, 1, C)."""

    _DSL: ClassVar[str] = "gap"
    OP: ClassVar[type[LayerOp]] = GapOp


@_layer
class Fc(_Primitive):
    """``fc(out_features, bias)`` -> ``arch.fc`` (``bias`` is required, as in the seed)."""

    _DSL: ClassVar[str] = "fc"
    OP: ClassVar[type[LayerOp]] = FcOp
    out_features: int
    bias: bool

    def __post_init__(self) -> None:
        object.__setattr__(self, "out_features", _at_least("fc", "out_features", self.out_features, 1))
        check_bool("fc", "bias", self.bias)


@_layer
class Identity(_Primitive):
    """``identity()`` -> ``arch.identity``."""

    _DSL: ClassVar[str] = "identity"
    OP: ClassVar[type[LayerOp]] = IdentityOp


@_layer
class Cbr(_Primitive):
    """``cbr(out_ch, k, s, p, momentum=0.1, eps=1e-5)``: conv + bn + relu -> the ``arch.cbr`` macro."""

    _DSL: ClassVar[str] = "cbr"
    OP: ClassVar[type[LayerOp]] = CbrOp
    out_ch: int
    k: int
    s: int
    p: int
    momentum: float = 0.1
    eps: float = 1e-5

    def __post_init__(self) -> None:
        object.__setattr__(self, "out_ch", _at_least("cbr", "out_ch", self.out_ch, 1))
        object.__setattr__(self, "k", _at_least("cbr", "k", self.k, 1))
        object.__setattr__(self, "s", _at_least("cbr", "s", self.s, 1))
        object.__setattr__(self, "p", _at_least("cbr", "p", self.p, 0))
        momentum, eps = _bn_args("cbr", self.momentum, self.eps)
        object.__setattr__(self, "momentum", momentum)
        object.__setattr__(self, "eps", eps)


@_layer
class Cbrp(_Primitive):
    """``cbrp(out_ch, conv_k, conv_s, conv_p, pool_k, pool_s, pool_p)``: conv + bn + relu +
    maxpool -> the ``arch.cbrp`` macro (batch norm with default eps/momentum, as the seed)."""

    _DSL: ClassVar[str] = "cbrp"
    OP: ClassVar[type[LayerOp]] = CbrpOp
    out_ch: int
    conv_k: int
    conv_s: int
    conv_p: int
    pool_k: int
    pool_s: int
    pool_p: int

    def __post_init__(self) -> None:
        low = {"out_ch": 1, "conv_k": 1, "conv_s": 1, "conv_p": 0, "pool_k": 1, "pool_s": 1, "pool_p": 0}
        for name, bound in low.items():
            object.__setattr__(self, name, _at_least("cbrp", name, getattr(self, name), bound))
        _pool_padding("cbrp", self.pool_k, self.pool_p, "pool_k", "pool_p")


@_layer
class GapFc(_Primitive):
    """``gap_fc(out_features, bias)``: gap + fc -> the ``arch.gap_fc`` macro."""

    _DSL: ClassVar[str] = "gap_fc"
    OP: ClassVar[type[LayerOp]] = GapFcOp
    out_features: int
    bias: bool

    def __post_init__(self) -> None:
        object.__setattr__(self, "out_features", _at_least("gap_fc", "out_features", self.out_features, 1))
        check_bool("gap_fc", "bias", self.bias)


_BLOCK3 = "block(mid_ch, out_ch, style)"
_BLOCK2 = "block(out_ch, style)"


@_layer
class Block(_Primitive):
    """``block(mid_ch, out_ch, style)`` / ``block(out_ch, style)`` / ``mbconv(...)``: a
    residual block macro -> ``arch.block``.

    ``mid_ch`` is set exactly for the bottleneck styles (the 3-argument form). The stride
    and MobileNet expansion ratio follow from the style (``stride``, ``expand_ratio``).
    """

    _DSL: ClassVar[str] = "block"
    OP: ClassVar[type[LayerOp]] = BlockOp
    out_ch: int
    style: BlockStyle
    mid_ch: int | None = None

    def __post_init__(self) -> None:
        where = _BLOCK2 if self.mid_ch is None else _BLOCK3
        if not isinstance(self.style, BlockStyle):
            raise BluePrintTypeError(
                f"{where}: style must be a BlockStyle, got {type(self.style).__name__} {self.style!r}"
            )
        if self.mid_ch is None:
            if self.style.is_bottleneck:
                raise BluePrintError("block(out_ch, style): unsupported style")
        else:
            if not self.style.is_bottleneck:
                raise BluePrintError(
                    "block(mid_ch, out_ch, style): style must be RESNET_1_3_1 or RESNET_1_3_1_DS"
                )
            object.__setattr__(self, "mid_ch", _at_least(where, "mid_ch", self.mid_ch, 1))
        object.__setattr__(self, "out_ch", _at_least(where, "out_ch", self.out_ch, 1))

    @property
    def stride(self) -> int:
        """2 for the ``_DS`` styles, else 1 (the seed hard-wires strides per style)."""
        return self.style.stride

    @property
    def expand_ratio(self) -> int:
        """MobileNet expansion ratio (1 or 6); 0 for the ResNet styles."""
        return self.style.expand_ratio

    def _args(self) -> tuple[Any, ...]:
        if self.mid_ch is None:
            return (self.out_ch, self.style)
        return (self.mid_ch, self.out_ch, self.style)


@_layer
class Seq(Layer):
    """``seq(*layers)``: the children in order -> ``arch.seq``. ``None`` children expand to nothing."""

    _DSL: ClassVar[str] = "seq"
    children: tuple[Layer | None, ...]

    def __post_init__(self) -> None:
        if isinstance(self.children, Layer) or not isinstance(self.children, Sequence):
            raise BluePrintTypeError(
                f"seq: children must be a sequence of layers, got {type(self.children).__name__}"
            )
        children = tuple(self.children)
        if not children:
            raise BluePrintError("seq: empty sequential is not allowed")
        for i, child in enumerate(children):
            _child("seq", f"child {i}", child)
        object.__setattr__(self, "children", children)

    def _args(self) -> tuple[Any, ...]:
        return self.children

    def _emit(self, em: _Emitter, x: SSAValue) -> SSAValue:
        body, em.c = em.region(self.children, x.type, em.c)
        op = SeqOp(x, body)
        em.block.add_op(op)
        return op.output


@_layer
class Add2(Layer):
    """``add2(shortcut, main)`` -> ``arch.add2``: ``shortcut(x) + main(x)``.

    As in the seed, the shortcut comes first and the channel count after the block is the
    main branch's. A ``None`` side is the identity (its region yields its argument).
    """

    _DSL: ClassVar[str] = "add2"
    shortcut: Layer | None
    main: Layer | None

    def __post_init__(self) -> None:
        _child("add2", "shortcut", self.shortcut)
        _child("add2", "main", self.main)

    def _emit(self, em: _Emitter, x: SSAValue) -> SSAValue:
        shortcut, _ = em.region((self.shortcut,), x.type, em.c)
        main, em.c = em.region((self.main,), x.type, em.c)
        op = Add2Op(x, shortcut, main)
        em.block.add_op(op)
        return op.output


@_layer
class Repeat(Layer):
    """``repeat(body, times)`` -> ``arch.repeat``: ``body`` applied ``times`` times in a row.

    The channel count is threaded through the repetitions as in the seed. The body is
    emitted once, so it must emit the same ops whatever channel count enters it (only
    ``conv_dw`` depends on it); otherwise :func:`emit` raises :class:`BluePrintError`.
    """

    _DSL: ClassVar[str] = "repeat"
    body: Layer | None
    times: int

    def __post_init__(self) -> None:
        times = check_int("repeat", "times", self.times)
        if times < 1:
            raise BluePrintError("repeat: times must be >= 1")
        _child("repeat", "body", self.body)
        object.__setattr__(self, "times", times)

    def _emit(self, em: _Emitter, x: SSAValue) -> SSAValue:
        c_in = em.c
        body, c_out = em.region((self.body,), x.type, c_in)
        # Repetition i starts from the count repetition i-1 left; once a repetition leaves
        # the count unchanged, every later one is the same.
        for i in range(2, self.times + 1):
            if c_out == c_in:
                break
            again, c_next = em.region((self.body,), x.type, c_out)
            if not again.is_structurally_equivalent(body):
                raise BluePrintError(
                    f"repeat: the body emits different ops on repetition {i} (C = {c_out} enters "
                    f"it, C = {c_in} entered repetition {i - 1}), e.g. conv_dw takes its width from "
                    f"the entering channels; write the repetitions out with seq(...): {self!r}"
                )
            c_in, c_out = c_out, c_next
        em.c = c_out
        op = RepeatOp(x, self.times, body)
        em.block.add_op(op)
        return op.output


# --------------------------------------------------------------------------------------
# Factory functions (the seed's DSL)
# --------------------------------------------------------------------------------------


def conv(out_ch: int, k: int, s: int = 1, p: int = 0) -> Layer:
    """Dense k x k convolution with ``out_ch`` filters, stride ``s``, padding ``p`` (no bias)."""
    return Conv(out_ch, k, s, p)


def conv_dw(k: int, s: int = 1, p: int = 0) -> Layer:
    """Depthwise k x k convolution (one filter per input channel)."""
    return ConvDw(k, s, p)


def group_conv(out_ch: int, groups: int, k: int, s: int = 1, p: int = 0) -> Layer:
    """Grouped k x k convolution: ``groups`` groups, ``out_ch`` filters in all."""
    return GroupConv(out_ch, groups, k, s, p)


def bn(momentum: float = 0.1, eps: float = 1e-5) -> Layer:
    """Batch normalization; note the seed's order: ``momentum`` before ``eps``."""
    return Bn(momentum, eps)


def relu() -> Layer:
    """ReLU activation."""
    return Relu()


def tanh_act() -> Layer:
    """Tanh activation."""
    return Tanh()


def silu() -> Layer:
    """SiLU (swish) activation."""
    return Silu()


def relu6() -> Layer:
    """ReLU6 activation."""
    return Relu6()


def leaky_relu() -> Layer:
    """Leaky ReLU activation (slope 0.01)."""
    return LeakyRelu()


def hardswish() -> Layer:
    """Hardswish activation."""
    return Hardswish()


def elu() -> Layer:
    """ELU activation (alpha 1)."""
    return Elu()


def sigmoid() -> Layer:
    """Sigmoid activation."""
    return Sigmoid()


def dropout(p: float) -> Layer:
    """Dropout with drop probability ``p`` (required, in [0, 1))."""
    return Dropout(p)


def flatten(start_dim: int = 1) -> Layer:
    """Flatten (H, W, C) to (1, 1, H*W*C); ``start_dim`` must be 1."""
    return Flatten(start_dim)


def channel_padding() -> Layer:
    """Zero-pad the channels up to a multiple of 8."""
    return ChannelPadding()


def maxpool(k: int, s: int, p: int) -> Layer:
    """Max pooling, window k x k, stride ``s``, padding ``p`` (all required)."""
    return MaxPool(k, s, p)


def avgpool(k: int, s: int, p: int) -> Layer:
    """Average pooling, window k x k, stride ``s``, padding ``p`` (all required)."""
    return AvgPool(k, s, p)


def gap() -> Layer:
    """Global average pooling to (1, 1, C)."""
    return Gap()


def fc(out_features: int, bias: bool) -> Layer:
    """Fully connected layer; ``bias`` is required."""
    return Fc(out_features, bias)


def identity() -> Layer:
    """Identity layer."""
    return Identity()


def seq(*layers: Layer | None | Sequence[Layer | None]) -> Layer:
    """The layers in order: ``seq(a, b, c)`` or ``seq([a, b, c])``; at least one child.

    Raises ``BluePrintError("seq: empty sequential is not allowed")`` for none.
    """
    if len(layers) == 1 and isinstance(layers[0], (list, tuple)):
        return Seq(tuple(layers[0]))
    return Seq(layers)


def add2(shortcut: Layer | None, main: Layer | None) -> Layer:
    """Residual join ``shortcut(x) + main(x)``; ``None`` (or ``identity()``) is an identity side."""
    return Add2(shortcut, main)


def repeat(body: Layer | None, times: int) -> Layer:
    """``body`` applied ``times`` (>= 1) times in a row."""
    return Repeat(body, times)


def cbr(out_ch: int, k: int, s: int, p: int, momentum: float = 0.1, eps: float = 1e-5) -> Layer:
    """conv(out_ch, k, s, p) + bn(momentum, eps) + relu() as one macro."""
    return Cbr(out_ch, k, s, p, momentum, eps)


def conv_bn_relu(out_ch: int, k: int, s: int, p: int, momentum: float = 0.1, eps: float = 1e-5) -> Layer:
    """Alias of :func:`cbr`."""
    return cbr(out_ch, k, s, p, momentum, eps)


def cbrp(out_ch: int, conv_k: int, conv_s: int, conv_p: int, pool_k: int, pool_s: int, pool_p: int) -> Layer:
    """conv + bn + relu + maxpool(pool_k, pool_s, pool_p) as one macro."""
    return Cbrp(out_ch, conv_k, conv_s, conv_p, pool_k, pool_s, pool_p)


def gap_fc(out_features: int, bias: bool) -> Layer:
    """gap() + fc(out_features, bias) as one macro."""
    return GapFc(out_features, bias)


def _block3(mid_ch: int, out_ch: int, style: BlockStyle) -> Layer:
    return Block(out_ch, style, mid_ch)


def _block2(out_ch: int, style: BlockStyle) -> Layer:
    return Block(out_ch, style)


def block(*args: Any, **kwargs: Any) -> Layer:
    """A residual block: ``block(mid_ch, out_ch, style)`` or ``block(out_ch, style)``.

    The 3-argument form takes the bottleneck styles ``RESNET_1_3_1[_DS]`` (``mid_ch`` is
    the bottleneck width); the 2-argument form the basic (``RESNET_3_3[_DS]``) and
    MobileNet (``MB_E{1,6}_K3[_DS]``) styles. Other combinations raise the seed's errors.
    """
    form = _block3 if len(args) + len(kwargs) == 3 else _block2
    try:
        bound = inspect.signature(form).bind(*args, **kwargs)
    except TypeError as e:
        raise BluePrintTypeError(f"block: expected {_BLOCK3} or {_BLOCK2}: {e}") from None
    return form(*bound.args, **bound.kwargs)


_MBCONV_STYLES = {
    (1, 1): BlockStyle.MB_E1_K3,
    (1, 2): BlockStyle.MB_E1_K3_DS,
    (6, 1): BlockStyle.MB_E6_K3,
    (6, 2): BlockStyle.MB_E6_K3_DS,
}


def mbconv(expand_ratio: int, out_ch: int, stride: int) -> Layer:
    """MobileNetV2 inverted residual: ``block(out_ch, MB_E{expand_ratio}_K3[_DS])``.

    ``expand_ratio`` must be 1 or 6 (checked first), ``stride`` 1 or 2, as in the seed.
    """
    expand_ratio = check_int("mbconv", "expand_ratio", expand_ratio)
    if expand_ratio not in (1, 6):
        raise BluePrintError("mbconv: expand_ratio must be 1 or 6")
    stride = check_int("mbconv", "stride", stride)
    if stride not in (1, 2):
        raise BluePrintError("mbconv: stride must be 1 or 2")
    out_ch = _at_least("mbconv", "out_ch", out_ch, 1)
    return Block(out_ch, _MBCONV_STYLES[(expand_ratio, stride)])


# --------------------------------------------------------------------------------------
# Emission
# --------------------------------------------------------------------------------------

_SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_$.]*")

MAX_NESTING = 63
"""Deepest nesting of ``seq`` / ``add2`` / ``repeat`` that :func:`emit` accepts: each is a region,
and with the model body that makes 64, what ``tr-opt`` parses (``opt_parser.MAX_REGION_DEPTH``; xDSL's
recursive printer and parser fail not far beyond)."""

MAX_EMITTED_OPS = 100_000
"""Most ops :func:`emit` creates (``arch-expand`` caps a flat model at as many layers). A tree
that reuses a sub-layer at every level (``x = seq(x, x)``) doubles with each level."""


def tree_size(model: Layer) -> tuple[int, int]:
    """``(ops, nesting)`` of a layer tree: the number of ops :func:`emit` creates for it (capped at
    ``MAX_EMITTED_OPS + 1``) and its deepest nesting of ``seq`` / ``add2`` / ``repeat``.

    Iterative and computed once per distinct layer object, so shared sub-layers and deep trees
    cost time linear in the number of distinct layers and no recursion.
    """
    memo: dict[int, tuple[int, int]] = {}
    stack: list[tuple[Layer, bool]] = [(model, False)]
    while stack:
        layer, ready = stack.pop()
        if id(layer) in memo:
            continue
        children = [] if isinstance(layer, _Primitive) else [c for c in layer._args() if isinstance(c, Layer)]
        if not ready and any(id(c) not in memo for c in children):
            stack.append((layer, True))
            stack.extend((c, False) for c in children)
            continue
        ops = min(1 + sum(memo[id(c)][0] for c in children), MAX_EMITTED_OPS + 1)
        nesting = 0 if isinstance(layer, _Primitive) else 1 + max((memo[id(c)][1] for c in children), default=0)
        memo[id(layer)] = (ops, nesting)
    return memo[id(model)]


def emit(
    model: Layer | None,
    input_shape: tuple[int, int, int],
    *,
    num_classes: int,
    amp: bool = False,
    fuse: bool = False,
    name: str = "model",
) -> ModuleOp:
    """Emit a BluePrint as a module holding one ``arch.model @name`` in tree form.

    ``input_shape`` is the (H, W, C) of one sample (NHWC, batch excluded); the model's block
    argument gets that static type, every other value ``tensor<?x?x?x?xf32>`` (shapes are
    deduced later by ``arch-deduce-shapes``). ``num_classes`` (required: the seed's
    ``build(num_classes)``), ``amp`` and ``fuse`` are recorded on the model. Unlike the
    seed, ``fuse`` does not require ``amp`` (DESIGN section 7). ``None`` emits an empty model.

    Mapping: ``seq`` -> ``arch.seq``, ``add2`` -> ``arch.add2`` (regions shortcut, main),
    ``repeat`` -> ``arch.repeat``, ``block``/``mbconv`` -> ``arch.block``,
    ``cbr``/``cbrp``/``gap_fc`` -> their macro ops, ``bn`` -> ``arch.bn``, ``conv_dw`` ->
    ``arch.conv`` with ``groups = out_ch = C`` entering it (the seed's running channel
    count), every other primitive -> its op.

    Raises :class:`BluePrintError` for a bad argument, a ``repeat`` whose body depends on
    the channels entering it, a tree nested deeper than :data:`MAX_NESTING` or one that would
    emit more than :data:`MAX_EMITTED_OPS` ops.
    """
    _child("emit", "model", model)
    if model is not None:
        ops, nesting = tree_size(model)
        if nesting > MAX_NESTING:
            raise BluePrintError(
                f"emit: the model nests seq/add2/repeat {nesting} levels deep, at most {MAX_NESTING} are "
                "supported; flatten the nesting, e.g. seq(a, b, c) instead of seq(a, seq(b, seq(c)))"
            )
        if ops > MAX_EMITTED_OPS:
            raise BluePrintError(
                f"emit: the model would emit more than {MAX_EMITTED_OPS} ops; a sub-layer reused at "
                "every level (x = seq(x, x)) doubles the tree each time, use repeat(x, n) instead"
            )
    if isinstance(input_shape, (str, bytes)) or not isinstance(input_shape, Sequence) or len(input_shape) != 3:
        raise BluePrintTypeError(f"emit: input_shape must be (H, W, C), got {input_shape!r}")
    hwc = tuple(_at_least("emit", f"input_shape[{i}]", d, 1) for i, d in enumerate(input_shape))
    num_classes = _at_least("emit", "num_classes", num_classes, 1)
    check_bool("emit", "amp", amp)
    check_bool("emit", "fuse", fuse)
    if not isinstance(name, str) or not _SYMBOL.fullmatch(name):
        raise BluePrintError(f"emit: name must be a symbol name like 'resnet50', got {name!r}")
    op = ModelOp(name, hwc, num_classes, amp=amp, fuse=fuse)
    body = op.body.block
    em = _Emitter(body, hwc[2])
    value: SSAValue = op.input_value
    if model is not None:
        value = model._emit(em, value)
    body.add_op(OutputOp(value))
    return ModuleOp([op])
