"""The seed's factory functions (facts sheet section 1): one per layer kind, with the seed's
argument order and defaults, each validating its arguments and returning a :class:`Layer`."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any
from tr_mlir.blueprint._layers import (
    Add2,
    AvgPool,
    BLOCK2_SIGNATURE,
    BLOCK3_SIGNATURE,
    Block,
    BluePrintError,
    BluePrintTypeError,
    Bn,
    Cbr,
    Cbrp,
    ChannelPadding,
    Conv,
    ConvDw,
    Dropout,
    Elu,
    Fc,
    Flatten,
    Gap,
    GapFc,
    GroupConv,
    Hardswish,
    Identity,
    Layer,
    LeakyRelu,
    MaxPool,
    Relu,
    Relu6,
    Repeat,
    Seq,
    Sigmoid,
    Silu,
    Tanh,
    at_least,
    check_int,
)


from tr_mlir.dialects.arch import (
    BlockStyle,
)

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
        raise BluePrintTypeError(f"block: expected {BLOCK3_SIGNATURE} or {BLOCK2_SIGNATURE}: {e}") from None
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
    out_ch = at_least("mbconv", "out_ch", out_ch, 1)
    return Block(out_ch, _MBCONV_STYLES[(expand_ratio, stride)])
