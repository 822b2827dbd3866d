"""The BluePrint layer values: the argument checks (messages name the factory and the argument),
the emitter the layers write ``arch`` ops through, and one immutable class per layer kind, each
emitting itself (:meth:`Layer._emit`). The factories are in :mod:`tr_mlir.blueprint._factories`."""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

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
    """``v`` as an int: an integral, non-bool value that fits in an ``i64`` property (``where``:
    the factory, ``name``: the argument, both named in the message). Raises
    :class:`BluePrintTypeError` for another type, :class:`BluePrintError` when out of range."""
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise BluePrintTypeError(f"{where}: {name} must be an int, got {type(v).__name__} {v!r}")
    if not -I64_MAX - 1 <= v <= I64_MAX:
        raise BluePrintError(f"{where}: {name} must fit in 64 bits (at most {I64_MAX}), got {v}")
    return int(v)


def at_least(where: str, name: str, v: Any, low: int) -> int:
    """:func:`check_int`, and at least ``low`` (:class:`BluePrintError` otherwise)."""
    v = check_int(where, name, v)
    if v < low:
        raise BluePrintError(f"{where}: {name} must be >= {low}, got {v}")
    return v


def _float(where: str, name: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise BluePrintTypeError(f"{where}: {name} must be a float, got {type(v).__name__} {v!r}")
    return float(v)


def check_bool(where: str, name: str, v: Any) -> bool:
    """``v`` when it is a bool (:class:`BluePrintTypeError` otherwise)."""
    if not isinstance(v, bool):
        raise BluePrintTypeError(f"{where}: {name} must be True or False, got {type(v).__name__} {v!r}")
    return v


def child_layer(where: str, name: str, v: Any) -> Layer | None:
    """``v`` when it is a :class:`Layer` or None (:class:`BluePrintTypeError` otherwise)."""
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


class Emitter:
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
        sub = Emitter(block, c)
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

    def _emit(self, em: Emitter, x: SSAValue) -> SSAValue:
        """Emit this layer after ``x`` into ``em``; return the value it produces."""
        raise NotImplementedError(f"{type(self).__name__} cannot be emitted")


@_layer
class Primitive(Layer):
    """A layer that becomes one ``arch`` op (``OP``) whose properties are the fields."""

    OP: ClassVar[type[LayerOp]]

    def _props(self, c: int) -> dict[str, Any]:
        """Properties of the op, given the channel count ``c`` entering it."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def _emit(self, em: Emitter, x: SSAValue) -> SSAValue:
        return em.add(self.OP(x, **self._props(em.c)))


@_layer
class Conv(Primitive):
    """``conv(out_ch, k, s=1, p=0)``: dense 2-D convolution -> ``arch.conv``."""

    _DSL: ClassVar[str] = "conv"
    OP: ClassVar[type[LayerOp]] = ConvOp
    out_ch: int
    k: int
    s: int = 1
    p: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "out_ch", at_least("conv", "out_ch", self.out_ch, 1))
        object.__setattr__(self, "k", at_least("conv", "k", self.k, 1))
        object.__setattr__(self, "s", at_least("conv", "s", self.s, 1))
        object.__setattr__(self, "p", at_least("conv", "p", self.p, 0))


@_layer
class ConvDw(Primitive):
    """``conv_dw(k, s=1, p=0)``: depthwise conv -> ``arch.conv`` with
    ``groups = out_ch = C`` (the channel count entering it). The seed rejects it."""

    _DSL: ClassVar[str] = "conv_dw"
    OP: ClassVar[type[LayerOp]] = ConvOp
    k: int
    s: int = 1
    p: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "k", at_least("conv_dw", "k", self.k, 1))
        object.__setattr__(self, "s", at_least("conv_dw", "s", self.s, 1))
        object.__setattr__(self, "p", at_least("conv_dw", "p", self.p, 0))

    def _props(self, c: int) -> dict[str, Any]:
        return {"out_ch": c, "k": self.k, "s": self.s, "p": self.p, "groups": c}


@_layer
class GroupConv(Primitive):
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
        object.__setattr__(self, "out_ch", at_least(w, "out_ch", self.out_ch, 1))
        object.__setattr__(self, "groups", at_least(w, "groups", self.groups, 1))
        object.__setattr__(self, "k", at_least(w, "k", self.k, 1))
        object.__setattr__(self, "s", at_least(w, "s", self.s, 1))
        object.__setattr__(self, "p", at_least(w, "p", self.p, 0))
        if self.out_ch % self.groups:
            raise BluePrintError(
                f"{w}: out_ch must be divisible by groups, got out_ch={self.out_ch}, groups={self.groups}"
            )


@_layer
class Bn(Primitive):
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
class Relu(Primitive):
    """``relu()`` -> ``arch.relu``."""

    _DSL: ClassVar[str] = "relu"
    OP: ClassVar[type[LayerOp]] = ReluOp


@_layer
class Tanh(Primitive):
    """``tanh_act()`` -> ``arch.tanh``."""

    _DSL: ClassVar[str] = "tanh_act"
    OP: ClassVar[type[LayerOp]] = TanhOp


@_layer
class Silu(Primitive):
    """``silu()`` -> ``arch.silu``."""

    _DSL: ClassVar[str] = "silu"
    OP: ClassVar[type[LayerOp]] = SiluOp


@_layer
class Relu6(Primitive):
    """``relu6()`` -> ``arch.relu6``."""

    _DSL: ClassVar[str] = "relu6"
    OP: ClassVar[type[LayerOp]] = Relu6Op


@_layer
class LeakyRelu(Primitive):
    """``leaky_relu()`` -> ``arch.leaky_relu`` (slope 0.01; the seed has no parameter)."""

    _DSL: ClassVar[str] = "leaky_relu"
    OP: ClassVar[type[LayerOp]] = LeakyReluOp


@_layer
class Hardswish(Primitive):
    """``hardswish()`` -> ``arch.hardswish``."""

    _DSL: ClassVar[str] = "hardswish"
    OP: ClassVar[type[LayerOp]] = HardswishOp


@_layer
class Elu(Primitive):
    """``elu()`` -> ``arch.elu`` (alpha 1; the seed has no parameter)."""

    _DSL: ClassVar[str] = "elu"
    OP: ClassVar[type[LayerOp]] = EluOp


@_layer
class Sigmoid(Primitive):
    """``sigmoid()`` -> ``arch.sigmoid``."""

    _DSL: ClassVar[str] = "sigmoid"
    OP: ClassVar[type[LayerOp]] = SigmoidOp


@_layer
class Dropout(Primitive):
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
class Flatten(Primitive):
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
class ChannelPadding(Primitive):
    """``channel_padding()`` -> ``arch.channel_padding`` (C up to a multiple of 8)."""

    _DSL: ClassVar[str] = "channel_padding"
    OP: ClassVar[type[LayerOp]] = ChannelPaddingOp


@_layer
class _Pool(Primitive):
    k: int
    s: int
    p: int

    def __post_init__(self) -> None:
        w = self._DSL
        object.__setattr__(self, "k", at_least(w, "k", self.k, 1))
        object.__setattr__(self, "s", at_least(w, "s", self.s, 1))
        object.__setattr__(self, "p", at_least(w, "p", self.p, 0))
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
class Gap(Primitive):
    """``gap()`` -> ``arch.gap``: global average pooling to (1, 1, C)."""

    _DSL: ClassVar[str] = "gap"
    OP: ClassVar[type[LayerOp]] = GapOp


@_layer
class Fc(Primitive):
    """``fc(out_features, bias)`` -> ``arch.fc`` (``bias`` is required, as in the seed)."""

    _DSL: ClassVar[str] = "fc"
    OP: ClassVar[type[LayerOp]] = FcOp
    out_features: int
    bias: bool

    def __post_init__(self) -> None:
        object.__setattr__(self, "out_features", at_least("fc", "out_features", self.out_features, 1))
        check_bool("fc", "bias", self.bias)


@_layer
class Identity(Primitive):
    """``identity()`` -> ``arch.identity``."""

    _DSL: ClassVar[str] = "identity"
    OP: ClassVar[type[LayerOp]] = IdentityOp


@_layer
class Cbr(Primitive):
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
        object.__setattr__(self, "out_ch", at_least("cbr", "out_ch", self.out_ch, 1))
        object.__setattr__(self, "k", at_least("cbr", "k", self.k, 1))
        object.__setattr__(self, "s", at_least("cbr", "s", self.s, 1))
        object.__setattr__(self, "p", at_least("cbr", "p", self.p, 0))
        momentum, eps = _bn_args("cbr", self.momentum, self.eps)
        object.__setattr__(self, "momentum", momentum)
        object.__setattr__(self, "eps", eps)


@_layer
class Cbrp(Primitive):
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
            object.__setattr__(self, name, at_least("cbrp", name, getattr(self, name), bound))
        _pool_padding("cbrp", self.pool_k, self.pool_p, "pool_k", "pool_p")


@_layer
class GapFc(Primitive):
    """``gap_fc(out_features, bias)``: gap + fc -> the ``arch.gap_fc`` macro."""

    _DSL: ClassVar[str] = "gap_fc"
    OP: ClassVar[type[LayerOp]] = GapFcOp
    out_features: int
    bias: bool

    def __post_init__(self) -> None:
        object.__setattr__(self, "out_features", at_least("gap_fc", "out_features", self.out_features, 1))
        check_bool("gap_fc", "bias", self.bias)


BLOCK3_SIGNATURE = "block(mid_ch, out_ch, style)"
BLOCK2_SIGNATURE = "block(out_ch, style)"
"""The two call forms of ``block`` (a three-conv bottleneck style takes ``mid_ch``), as messages
and ``repr`` name them."""


@_layer
class Block(Primitive):
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
        where = BLOCK2_SIGNATURE if self.mid_ch is None else BLOCK3_SIGNATURE
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
            object.__setattr__(self, "mid_ch", at_least(where, "mid_ch", self.mid_ch, 1))
        object.__setattr__(self, "out_ch", at_least(where, "out_ch", self.out_ch, 1))

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
            child_layer("seq", f"child {i}", child)
        object.__setattr__(self, "children", children)

    def _args(self) -> tuple[Any, ...]:
        return self.children

    def _emit(self, em: Emitter, x: SSAValue) -> SSAValue:
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
        child_layer("add2", "shortcut", self.shortcut)
        child_layer("add2", "main", self.main)

    def _emit(self, em: Emitter, x: SSAValue) -> SSAValue:
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
        child_layer("repeat", "body", self.body)
        object.__setattr__(self, "times", times)

    def _emit(self, em: Emitter, x: SSAValue) -> SSAValue:
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
