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

from tr_mlir.blueprint._emit import (  # noqa: F401 - the package's names
    MAX_EMITTED_OPS,
    MAX_NESTING,
    emit,
    tree_size,
)
from tr_mlir.blueprint._factories import (  # noqa: F401 - the package's names
    add2,
    avgpool,
    block,
    bn,
    cbr,
    cbrp,
    channel_padding,
    conv,
    conv_bn_relu,
    conv_dw,
    dropout,
    elu,
    fc,
    flatten,
    gap,
    gap_fc,
    group_conv,
    hardswish,
    identity,
    leaky_relu,
    maxpool,
    mbconv,
    relu,
    relu6,
    repeat,
    seq,
    sigmoid,
    silu,
    tanh_act,
)
from tr_mlir.blueprint._layers import (  # noqa: F401 - the package's names
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
    Emitter,
    Fc,
    Flatten,
    Gap,
    GapFc,
    GroupConv,
    Hardswish,
    I64_MAX,
    Identity,
    Layer,
    LeakyRelu,
    MaxPool,
    Primitive,
    Relu,
    Relu6,
    Repeat,
    Seq,
    Sigmoid,
    Silu,
    Tanh,
    at_least,
    check_bool,
    check_int,
    child_layer,
)
from tr_mlir.dialects.arch import BlockStyle

__all__ = [
    "BlockStyle", "BluePrintError", "BluePrintTypeError", "Layer",
    "conv", "conv_dw", "group_conv", "bn", "relu", "tanh_act", "silu", "relu6", "leaky_relu",
    "hardswish", "elu", "sigmoid", "dropout", "flatten", "channel_padding", "maxpool",
    "avgpool", "gap", "fc", "identity", "seq", "add2", "repeat", "cbr", "conv_bn_relu", "cbrp",
    "gap_fc", "block", "mbconv", "emit",
]
