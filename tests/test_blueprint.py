"""The BluePrint DSL (tr_mlir.blueprint): factories, validation, repr, and emission to arch."""

from __future__ import annotations

import dataclasses
import re

import pytest
from xdsl.context import Context
from xdsl.dialects.builtin import Builtin, ModuleOp
from xdsl.parser import Parser

import tr_mlir.blueprint as bp
import tr_mlir.dialects.arch as arch
from tr_mlir.blueprint import (
    BlockStyle,
    BluePrintError,
    BluePrintTypeError,
    Layer,
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
    emit,
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

S = BlockStyle


def fields(layer: Layer) -> dict:
    return {f.name: getattr(layer, f.name) for f in dataclasses.fields(layer)}


def roundtrip(module: ModuleOp) -> str:
    """Print, parse back (builtin + arch), print again; both prints must agree."""
    text = str(module)
    ctx = Context()
    ctx.load_dialect(Builtin)
    ctx.load_dialect(arch.Arch)
    parsed = Parser(ctx, text).parse_module()
    parsed.verify()
    assert str(parsed) == text
    assert parsed.is_structurally_equivalent(module)
    return text


def model_of(module: ModuleOp) -> arch.ModelOp:
    (model,) = module.body.block.ops
    assert isinstance(model, arch.ModelOp)
    return model


def ops_named(module: ModuleOp, name: str) -> list:
    return [op for op in module.walk() if op.name == name]


# --------------------------------------------------------------------------------------
# Factories: defaults, argument order, classes
# --------------------------------------------------------------------------------------

FACTORY_CASES = [
    (conv(64, 3), "Conv", {"out_ch": 64, "k": 3, "s": 1, "p": 0}),
    (conv(64, 3, 2, 1), "Conv", {"out_ch": 64, "k": 3, "s": 2, "p": 1}),
    (conv_dw(3), "ConvDw", {"k": 3, "s": 1, "p": 0}),
    (conv_dw(3, 2, 1), "ConvDw", {"k": 3, "s": 2, "p": 1}),
    (group_conv(64, 4, 3), "GroupConv", {"out_ch": 64, "groups": 4, "k": 3, "s": 1, "p": 0}),
    (group_conv(64, 4, 3, 2, 1), "GroupConv", {"out_ch": 64, "groups": 4, "k": 3, "s": 2, "p": 1}),
    (bn(), "Bn", {"momentum": 0.1, "eps": 1e-5}),
    (bn(0.2), "Bn", {"momentum": 0.2, "eps": 1e-5}),
    (bn(0.2, 1e-3), "Bn", {"momentum": 0.2, "eps": 1e-3}),
    (relu(), "Relu", {}),
    (tanh_act(), "Tanh", {}),
    (silu(), "Silu", {}),
    (relu6(), "Relu6", {}),
    (leaky_relu(), "LeakyRelu", {}),
    (hardswish(), "Hardswish", {}),
    (elu(), "Elu", {}),
    (sigmoid(), "Sigmoid", {}),
    (dropout(0.5), "Dropout", {"p": 0.5}),
    (dropout(0), "Dropout", {"p": 0.0}),
    (flatten(), "Flatten", {"start_dim": 1}),
    (channel_padding(), "ChannelPadding", {}),
    (maxpool(3, 2, 1), "MaxPool", {"k": 3, "s": 2, "p": 1}),
    (avgpool(2, 2, 0), "AvgPool", {"k": 2, "s": 2, "p": 0}),
    (gap(), "Gap", {}),
    (fc(10, True), "Fc", {"out_features": 10, "bias": True}),
    (fc(10, False), "Fc", {"out_features": 10, "bias": False}),
    (identity(), "Identity", {}),
    (cbr(64, 7, 2, 3), "Cbr", {"out_ch": 64, "k": 7, "s": 2, "p": 3, "momentum": 0.1, "eps": 1e-5}),
    (cbr(64, 7, 2, 3, 0.3, 1e-4), "Cbr", {"out_ch": 64, "k": 7, "s": 2, "p": 3, "momentum": 0.3, "eps": 1e-4}),
    (conv_bn_relu(8, 3, 1, 1, 0.05), "Cbr", {"out_ch": 8, "k": 3, "s": 1, "p": 1, "momentum": 0.05, "eps": 1e-5}),
    (cbrp(64, 7, 2, 3, 3, 2, 1), "Cbrp",
     {"out_ch": 64, "conv_k": 7, "conv_s": 2, "conv_p": 3, "pool_k": 3, "pool_s": 2, "pool_p": 1}),
    (gap_fc(1000, True), "GapFc", {"out_features": 1000, "bias": True}),
    (block(64, 256, S.RESNET_1_3_1), "Block", {"out_ch": 256, "style": S.RESNET_1_3_1, "mid_ch": 64}),
    (block(128, 512, S.RESNET_1_3_1_DS), "Block", {"out_ch": 512, "style": S.RESNET_1_3_1_DS, "mid_ch": 128}),
    (block(64, S.RESNET_3_3), "Block", {"out_ch": 64, "style": S.RESNET_3_3, "mid_ch": None}),
    (block(out_ch=64, style=S.RESNET_3_3_DS), "Block", {"out_ch": 64, "style": S.RESNET_3_3_DS, "mid_ch": None}),
    (block(mid_ch=64, out_ch=256, style=S.RESNET_1_3_1), "Block",
     {"out_ch": 256, "style": S.RESNET_1_3_1, "mid_ch": 64}),
    (mbconv(1, 16, 1), "Block", {"out_ch": 16, "style": S.MB_E1_K3, "mid_ch": None}),
    (mbconv(1, 16, 2), "Block", {"out_ch": 16, "style": S.MB_E1_K3_DS, "mid_ch": None}),
    (mbconv(6, 24, 1), "Block", {"out_ch": 24, "style": S.MB_E6_K3, "mid_ch": None}),
    (mbconv(6, 24, 2), "Block", {"out_ch": 24, "style": S.MB_E6_K3_DS, "mid_ch": None}),
    (repeat(relu(), 3), "Repeat", {"body": relu(), "times": 3}),
    (add2(identity(), relu()), "Add2", {"shortcut": identity(), "main": relu()}),
    (seq(relu(), gap()), "Seq", {"children": (relu(), gap())}),
]


@pytest.mark.parametrize("layer, cls, expected", FACTORY_CASES, ids=lambda v: None)
def test_factory_fields(layer, cls, expected):
    assert type(layer).__name__ == cls
    assert fields(layer) == expected


def test_block_style_is_the_dialect_enum():
    assert bp.BlockStyle is arch.BlockStyle
    assert [s.name for s in BlockStyle] == [
        "RESNET_1_3_1", "RESNET_1_3_1_DS", "RESNET_3_3", "RESNET_3_3_DS",
        "MB_E1_K3", "MB_E1_K3_DS", "MB_E6_K3", "MB_E6_K3_DS",
    ]


def test_block_stride_and_expand_ratio():
    assert (block(64, 256, S.RESNET_1_3_1).stride, block(64, 256, S.RESNET_1_3_1).expand_ratio) == (1, 0)
    assert block(64, S.RESNET_3_3_DS).stride == 2
    assert (mbconv(6, 24, 2).stride, mbconv(6, 24, 2).expand_ratio) == (2, 6)
    assert (mbconv(1, 24, 1).stride, mbconv(1, 24, 1).expand_ratio) == (1, 1)


def test_aliases_and_seq_forms():
    assert conv_bn_relu(8, 3, 1, 1) == cbr(8, 3, 1, 1)
    assert seq([relu(), gap()]) == seq(relu(), gap()) == seq((relu(), gap()))
    assert seq(relu()) == seq([relu()])
    assert mbconv(6, 24, 2) == block(24, S.MB_E6_K3_DS)


def test_numeric_arguments_are_normalized():
    assert bn(1, 1) == bn(1.0, 1.0)
    assert type(bn(1, 1).eps) is float
    assert type(dropout(0).p) is float


# --------------------------------------------------------------------------------------
# Values: immutability, equality, hashing, repr
# --------------------------------------------------------------------------------------


def test_layers_are_immutable():
    layer = conv(64, 3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        layer.out_ch = 32  # type: ignore[misc]
    s = seq([relu(), gap()])
    assert isinstance(s.children, tuple)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.children = ()  # type: ignore[misc]


def test_layers_compare_and_hash_by_value():
    a = seq(conv(8, 3, 1, 1), bn(), relu(), add2(None, conv(8, 1)))
    b = seq(conv(8, 3, 1, 1), bn(), relu(), add2(None, conv(8, 1)))
    assert a == b and hash(a) == hash(b)
    assert a != seq(conv(8, 3, 1, 1), bn(), relu(), add2(conv(8, 1), None))
    assert relu() != tanh_act()
    assert maxpool(2, 2, 0) != avgpool(2, 2, 0)
    assert len({relu(), relu(), gap(), conv(1, 1), conv(1, 1, 1, 0)}) == 3
    shared = block(64, S.RESNET_3_3)
    net = seq(shared, shared)  # a layer may appear twice (shareable nodes)
    assert net.children[0] is net.children[1]


REPR_CASES = [
    (conv(64, 3), "conv(64, 3)"),
    (conv(64, 3, 2), "conv(64, 3, 2)"),
    (conv(64, 3, 1, 1), "conv(64, 3, 1, 1)"),
    (conv_dw(3, 1, 1), "conv_dw(3, 1, 1)"),
    (group_conv(8, 2, 3), "group_conv(8, 2, 3)"),
    (bn(), "bn()"),
    (bn(0.2), "bn(0.2)"),
    (bn(0.1, 1e-3), "bn(0.1, 0.001)"),
    (tanh_act(), "tanh_act()"),
    (leaky_relu(), "leaky_relu()"),
    (dropout(0.5), "dropout(0.5)"),
    (flatten(), "flatten()"),
    (maxpool(3, 2, 1), "maxpool(3, 2, 1)"),
    (fc(10, True), "fc(10, True)"),
    (cbr(64, 7, 2, 3), "cbr(64, 7, 2, 3)"),
    (conv_bn_relu(64, 7, 2, 3, 0.2), "cbr(64, 7, 2, 3, 0.2)"),
    (cbrp(64, 7, 2, 3, 3, 2, 1), "cbrp(64, 7, 2, 3, 3, 2, 1)"),
    (gap_fc(1000, False), "gap_fc(1000, False)"),
    (block(64, 256, S.RESNET_1_3_1), "block(64, 256, BlockStyle.RESNET_1_3_1)"),
    (block(64, S.RESNET_3_3), "block(64, BlockStyle.RESNET_3_3)"),
    (mbconv(6, 24, 2), "block(24, BlockStyle.MB_E6_K3_DS)"),
    (repeat(relu(), 2), "repeat(relu(), 2)"),
    (add2(None, seq(conv(8, 1), bn())), "add2(None, seq(conv(8, 1), bn()))"),
    (seq(None, relu()), "seq(None, relu())"),
]


@pytest.mark.parametrize("layer, text", REPR_CASES, ids=[t for _, t in REPR_CASES])
def test_repr_is_the_dsl_call(layer, text):
    assert repr(layer) == text
    assert eval(text, vars(bp)) == layer


def test_str_lays_out_long_trees_and_evals_back():
    net = seq(cbr(64, 7, 2, 3), maxpool(3, 2, 1), repeat(block(64, S.RESNET_3_3), 2),
              add2(None, seq(conv(64, 3, 1, 1), bn(), relu(), conv(64, 3, 1, 1), bn())),
              block(128, S.RESNET_3_3_DS), gap_fc(1000, True))
    text = str(net)
    assert text.startswith("seq(\n    cbr(64, 7, 2, 3),\n")
    assert all(len(line) <= 88 for line in text.splitlines())
    assert eval(text, vars(bp)) == net
    assert str(relu()) == "relu()"


# --------------------------------------------------------------------------------------
# Errors: the seed's messages (exact), then our range and type checks
# --------------------------------------------------------------------------------------

SEED_ERRORS = [
    (lambda: seq(), "seq: empty sequential is not allowed"),
    (lambda: seq([]), "seq: empty sequential is not allowed"),
    (lambda: repeat(relu(), 0), "repeat: times must be >= 1"),
    (lambda: repeat(relu(), -3), "repeat: times must be >= 1"),
    (lambda: block(64, 256, S.RESNET_3_3),
     "block(mid_ch, out_ch, style): style must be RESNET_1_3_1 or RESNET_1_3_1_DS"),
    (lambda: block(64, 256, S.MB_E6_K3),
     "block(mid_ch, out_ch, style): style must be RESNET_1_3_1 or RESNET_1_3_1_DS"),
    (lambda: block(256, S.RESNET_1_3_1), "block(out_ch, style): unsupported style"),
    (lambda: block(256, S.RESNET_1_3_1_DS), "block(out_ch, style): unsupported style"),
    (lambda: mbconv(3, 16, 1), "mbconv: expand_ratio must be 1 or 6"),
    (lambda: mbconv(6, 16, 3), "mbconv: stride must be 1 or 2"),
    # seed order: style before our range checks, expand_ratio before stride before out_ch
    (lambda: block(0, S.RESNET_1_3_1), "block(out_ch, style): unsupported style"),
    (lambda: block(0, 0, S.RESNET_3_3),
     "block(mid_ch, out_ch, style): style must be RESNET_1_3_1 or RESNET_1_3_1_DS"),
    (lambda: mbconv(2, 0, 3), "mbconv: expand_ratio must be 1 or 6"),
    (lambda: mbconv(1, 0, 3), "mbconv: stride must be 1 or 2"),
]


@pytest.mark.parametrize("call, message", SEED_ERRORS, ids=[m for _, m in SEED_ERRORS])
def test_seed_errors(call, message):
    with pytest.raises(BluePrintError) as info:
        call()
    assert str(info.value) == message
    assert isinstance(info.value, ValueError)


RANGE_ERRORS = [
    (lambda: conv(0, 3), "conv: out_ch must be >= 1, got 0"),
    (lambda: conv(8, 0), "conv: k must be >= 1, got 0"),
    (lambda: conv(8, 3, 0), "conv: s must be >= 1, got 0"),
    (lambda: conv(8, 3, 1, -1), "conv: p must be >= 0, got -1"),
    (lambda: conv_dw(0), "conv_dw: k must be >= 1, got 0"),
    (lambda: conv_dw(3, 0), "conv_dw: s must be >= 1, got 0"),
    (lambda: conv_dw(3, 1, -2), "conv_dw: p must be >= 0, got -2"),
    (lambda: group_conv(8, 0, 3), "group_conv: groups must be >= 1, got 0"),
    (lambda: group_conv(-8, 2, 3), "group_conv: out_ch must be >= 1, got -8"),
    (lambda: group_conv(10, 4, 3), "group_conv: out_ch must be divisible by groups, got out_ch=10, groups=4"),
    (lambda: bn(eps=0.0), "bn: eps must be > 0, got 0.0"),
    (lambda: bn(eps=-1e-5), "bn: eps must be > 0, got -1e-05"),
    (lambda: bn(1.5), "bn: momentum must be in [0, 1], got 1.5"),
    (lambda: bn(-0.1), "bn: momentum must be in [0, 1], got -0.1"),
    (lambda: bn(float("nan")), "bn: momentum must be in [0, 1], got nan"),
    (lambda: dropout(1.0), "dropout: p must be in [0, 1), got 1.0"),
    (lambda: dropout(-0.1), "dropout: p must be in [0, 1), got -0.1"),
    (lambda: flatten(2), "flatten: start_dim must be 1 (flatten all but the batch), got 2"),
    (lambda: maxpool(0, 1, 0), "maxpool: k must be >= 1, got 0"),
    (lambda: maxpool(2, 0, 0), "maxpool: s must be >= 1, got 0"),
    (lambda: maxpool(3, 2, 2), "maxpool: p must be <= k/2 (PyTorch's pooling rule), got p=2, k=3"),
    (lambda: avgpool(2, 2, -1), "avgpool: p must be >= 0, got -1"),
    (lambda: avgpool(1, 1, 1), "avgpool: p must be <= k/2 (PyTorch's pooling rule), got p=1, k=1"),
    (lambda: fc(0, True), "fc: out_features must be >= 1, got 0"),
    (lambda: gap_fc(0, True), "gap_fc: out_features must be >= 1, got 0"),
    (lambda: cbr(0, 3, 1, 1), "cbr: out_ch must be >= 1, got 0"),
    (lambda: cbr(8, 3, 0, 1), "cbr: s must be >= 1, got 0"),
    (lambda: cbr(8, 3, 1, 1, eps=0), "cbr: eps must be > 0, got 0.0"),
    (lambda: conv_bn_relu(8, 3, 1, 1, 2.0), "cbr: momentum must be in [0, 1], got 2.0"),
    (lambda: cbrp(64, 7, 2, 3, 3, 0, 1), "cbrp: pool_s must be >= 1, got 0"),
    (lambda: cbrp(64, 7, 2, -3, 3, 2, 1), "cbrp: conv_p must be >= 0, got -3"),
    (lambda: cbrp(64, 7, 2, 3, 3, 2, 2),
     "cbrp: pool_p must be <= pool_k/2 (PyTorch's pooling rule), got pool_p=2, pool_k=3"),
    (lambda: block(0, 256, S.RESNET_1_3_1), "block(mid_ch, out_ch, style): mid_ch must be >= 1, got 0"),
    (lambda: block(64, 0, S.RESNET_1_3_1), "block(mid_ch, out_ch, style): out_ch must be >= 1, got 0"),
    (lambda: block(-1, S.RESNET_3_3), "block(out_ch, style): out_ch must be >= 1, got -1"),
    (lambda: mbconv(6, 0, 1), "mbconv: out_ch must be >= 1, got 0"),
    # properties are i64: larger ints were accepted and failed in emit without naming the layer
    (lambda: conv(2**70, 3), f"conv: out_ch must fit in 64 bits (at most {2**63 - 1}), got {2**70}"),
    (lambda: repeat(relu(), 2**63), f"repeat: times must fit in 64 bits (at most {2**63 - 1}), got {2**63}"),
    # an infinite eps was accepted and printed as hex that the parser cannot read back
    (lambda: bn(0.1, float("inf")), "bn: eps must be finite, got inf"),
    (lambda: cbr(8, 3, 1, 1, eps=float("inf")), "cbr: eps must be finite, got inf"),
]


@pytest.mark.parametrize("call, message", RANGE_ERRORS, ids=[m for _, m in RANGE_ERRORS])
def test_range_errors(call, message):
    with pytest.raises(BluePrintError) as info:
        call()
    assert str(info.value) == message
    assert not isinstance(info.value, TypeError)


TYPE_ERRORS = [
    (lambda: conv(True, 3), "conv: out_ch must be an int, got bool True"),
    (lambda: conv(8, 3.0), "conv: k must be an int, got float 3.0"),
    (lambda: conv(8, "3"), "conv: k must be an int, got str '3'"),
    (lambda: maxpool(2, 2, None), "maxpool: p must be an int, got NoneType None"),
    (lambda: repeat(relu(), 2.0), "repeat: times must be an int, got float 2.0"),
    (lambda: mbconv(6.0, 16, 1), "mbconv: expand_ratio must be an int, got float 6.0"),
    (lambda: bn("0.1"), "bn: momentum must be a float, got str '0.1'"),
    (lambda: bn(True), "bn: momentum must be a float, got bool True"),
    (lambda: dropout(None), "dropout: p must be a float, got NoneType None"),
    (lambda: fc(10, 1), "fc: bias must be True or False, got int 1"),
    (lambda: gap_fc(10, "yes"), "gap_fc: bias must be True or False, got str 'yes'"),
    (lambda: block(64, "resnet_3_3"), "block(out_ch, style): style must be a BlockStyle, got str 'resnet_3_3'"),
    (lambda: block(64, 256, 2), "block(mid_ch, out_ch, style): style must be a BlockStyle, got int 2"),
]


@pytest.mark.parametrize("call, message", TYPE_ERRORS, ids=[m for _, m in TYPE_ERRORS])
def test_type_errors(call, message):
    with pytest.raises(BluePrintTypeError) as info:
        call()
    assert str(info.value) == message
    assert isinstance(info.value, TypeError) and isinstance(info.value, BluePrintError)


@pytest.mark.parametrize("call, pattern", [
    (lambda: seq(relu, gap()), r"seq: child 0 must be a Layer \(or None\), got function"),
    (lambda: seq(relu(), [gap()]), r"seq: child 1 must be a Layer \(or None\), got list"),
    (lambda: add2("x", relu()), r"add2: shortcut must be a Layer \(or None\), got str 'x'"),
    (lambda: add2(relu(), 3), r"add2: main must be a Layer \(or None\), got int 3"),
    (lambda: repeat([relu()], 2), r"repeat: body must be a Layer \(or None\), got list"),
    (lambda: block(64), r"block: expected block\(mid_ch, out_ch, style\) or block\(out_ch, style\)"),
    (lambda: block(1, 2, 3, 4), r"block: expected block\(mid_ch, out_ch, style\) or block\(out_ch, style\)"),
    (lambda: block(64, colour=S.RESNET_3_3), r"block: expected .*missing a required argument: 'style'"),
])
def test_structural_type_errors(call, pattern):
    with pytest.raises(BluePrintTypeError, match=pattern):
        call()


def test_missing_required_arguments_are_python_type_errors():
    with pytest.raises(TypeError):
        dropout()  # type: ignore[call-arg]  # p has no default, as in the seed
    with pytest.raises(TypeError):
        fc(10)  # type: ignore[call-arg]  # bias is required
    with pytest.raises(TypeError):
        maxpool(3, 2)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        cbr(64, 7, 2)  # type: ignore[call-arg]


# --------------------------------------------------------------------------------------
# Emission
# --------------------------------------------------------------------------------------

# (layer, op name, expected params) with 16 channels entering
EMIT_CASES = [
    (conv(8, 3, 2, 1), "arch.conv", {"out_ch": 8, "k": 3, "s": 2, "p": 1, "groups": 1}),
    (conv_dw(3, 2, 1), "arch.conv", {"out_ch": 16, "k": 3, "s": 2, "p": 1, "groups": 16}),
    (group_conv(32, 4, 3, 1, 1), "arch.conv", {"out_ch": 32, "k": 3, "s": 1, "p": 1, "groups": 4}),
    (bn(0.2, 1e-3), "arch.bn", {"momentum": 0.2, "eps": 1e-3}),
    (bn(), "arch.bn", {"momentum": 0.1, "eps": 1e-5}),
    (relu(), "arch.relu", {}),
    (tanh_act(), "arch.tanh", {}),
    (silu(), "arch.silu", {}),
    (relu6(), "arch.relu6", {}),
    (leaky_relu(), "arch.leaky_relu", {}),
    (hardswish(), "arch.hardswish", {}),
    (elu(), "arch.elu", {}),
    (sigmoid(), "arch.sigmoid", {}),
    (dropout(0.25), "arch.dropout", {"p": 0.25}),
    (flatten(), "arch.flatten", {"start_dim": 1}),
    (channel_padding(), "arch.channel_padding", {}),
    (maxpool(3, 2, 1), "arch.maxpool", {"k": 3, "s": 2, "p": 1}),
    (avgpool(2, 2, 0), "arch.avgpool", {"k": 2, "s": 2, "p": 0}),
    (gap(), "arch.gap", {}),
    (fc(10, True), "arch.fc", {"out_features": 10, "bias": True}),
    (fc(10, False), "arch.fc", {"out_features": 10, "bias": False}),
    (identity(), "arch.identity", {}),
    (cbr(8, 3, 1, 1, 0.3, 1e-4), "arch.cbr", {"out_ch": 8, "k": 3, "s": 1, "p": 1, "momentum": 0.3, "eps": 1e-4}),
    (cbrp(8, 3, 1, 1, 2, 2, 0), "arch.cbrp", {"out_ch": 8, "conv_k": 3, "conv_s": 1, "conv_p": 1,
                                              "pool_k": 2, "pool_s": 2, "pool_p": 0,
                                              "eps": 1e-5, "momentum": 0.1}),
    (gap_fc(10, True), "arch.gap_fc", {"out_features": 10, "bias": True}),
    (block(4, 16, S.RESNET_1_3_1_DS), "arch.block", {"style": S.RESNET_1_3_1_DS, "mid_ch": 4, "out_ch": 16}),
    (block(16, S.RESNET_3_3), "arch.block", {"style": S.RESNET_3_3, "out_ch": 16}),
    (mbconv(6, 24, 2), "arch.block", {"style": S.MB_E6_K3_DS, "out_ch": 24}),
]


@pytest.mark.parametrize("layer, op_name, params", EMIT_CASES, ids=[repr(c[0]) for c in EMIT_CASES])
def test_emit_primitive(layer, op_name, params):
    module = emit(layer, (8, 8, 16), num_classes=10)
    module.verify()
    model = model_of(module)
    (op,) = model.layers()
    assert op.name == op_name
    assert op.params() == params
    assert op.input is model.input_value
    assert op.output.type == arch.unknown_nhwc()
    assert model.output_op.value is op.output
    roundtrip(module)


def test_emit_model_container():
    module = emit(seq(conv(8, 3, 1, 1), relu()), (28, 30, 3), num_classes=7, name="net")
    model = model_of(module)
    assert model.sym_name.data == "net"
    assert model.input_hwc == (28, 30, 3)
    assert model.params()["num_classes"] == 7
    assert (model.params()["amp"], model.params()["fuse"]) == (False, False)
    assert model.input_value.type == arch.nhwc_type(28, 30, 3)
    (s,) = model.layers()
    assert isinstance(s, arch.SeqOp)
    assert s.body.block.args[0].type == arch.nhwc_type(28, 30, 3)
    assert [op.name for op in s.body.block.ops] == ["arch.conv", "arch.relu", "arch.yield"]
    text = roundtrip(module)
    assert "arch.model @net input(28, 30, 3) num_classes = 7 {" in text


@pytest.mark.parametrize("amp, fuse", [(True, False), (False, True), (True, True)])
def test_emit_records_amp_and_fuse_independently(amp, fuse):
    model = model_of(emit(relu(), (4, 4, 1), num_classes=2, amp=amp, fuse=fuse))
    assert (model.params()["amp"], model.params()["fuse"]) == (amp, fuse)
    roundtrip(model.parent_op())


def test_emit_add2_regions_and_channel_count():
    # shortcut ends at 32 channels, main at 16: the main branch's count continues (seed).
    net = seq(add2(conv(32, 1), conv(16, 1)), conv_dw(3, 1, 1))
    module = emit(net, (8, 8, 3), num_classes=10)
    (add,) = ops_named(module, "arch.add2")
    assert [op.name for op in add.shortcut.block.ops] == ["arch.conv", "arch.yield"]
    assert [op.name for op in add.main.block.ops] == ["arch.conv", "arch.yield"]
    assert add.shortcut.block.first_op.params()["out_ch"] == 32
    assert add.main.block.first_op.params()["out_ch"] == 16
    # both regions take the add2's input
    assert add.shortcut.block.first_op.input is add.shortcut.block.args[0]
    assert add.main.block.first_op.input is add.main.block.args[0]
    dw = [op for op in ops_named(module, "arch.conv") if op.params()["groups"] > 1]
    assert [op.params()["groups"] for op in dw] == [16]
    roundtrip(module)


def test_emit_shortcut_channels_do_not_leak():
    net = seq(conv(8, 1), add2(conv(32, 1), None), conv_dw(3))
    module = emit(net, (8, 8, 3), num_classes=10)
    dw = ops_named(module, "arch.conv")[-1]
    assert dw.params()["groups"] == 8 and dw.params()["out_ch"] == 8


def test_emit_conv_dw_tracks_current_c():
    net = seq(conv_dw(3, 1, 1), conv(24, 1), conv_dw(3, 2, 1), fc(10, True), conv_dw(1),
              channel_padding(), conv_dw(1), gap(), maxpool(1, 1, 0), flatten(), conv_dw(1),
              block(4, 40, S.RESNET_1_3_1), conv_dw(1), cbr(12, 1, 1, 0), conv_dw(1),
              cbrp(4, 1, 1, 0, 1, 1, 0), conv_dw(1), gap_fc(6, True), conv_dw(1),
              group_conv(18, 3, 1), conv_dw(1))
    module = emit(net, (8, 8, 3), num_classes=10)
    convs = [op.params() for op in ops_named(module, "arch.conv")]
    # input 3, fc -> 10, channel_padding -> 16, gap/maxpool/flatten keep it (seed), block -> 40,
    # cbr -> 12, cbrp -> 4, gap_fc -> 6, group_conv -> 18
    assert [(p["out_ch"], p["groups"]) for p in convs if p["out_ch"] == p["groups"]] == [
        (3, 3), (24, 24), (10, 10), (16, 16), (16, 16), (40, 40), (12, 12), (4, 4), (6, 6), (18, 18)]
    roundtrip(module)


def test_emit_group_conv():
    module = emit(seq(conv(16, 1), group_conv(32, 4, 3, 1, 1)), (8, 8, 3), num_classes=10)
    convs = ops_named(module, "arch.conv")
    assert convs[1].params() == {"out_ch": 32, "k": 3, "s": 1, "p": 1, "groups": 4}
    text = roundtrip(module)
    assert "arch.conv %3 out_ch = 32 k = 3 p = 1 groups = 4" in text


def test_emit_none_children():
    module = emit(seq(None, relu(), None), (4, 4, 2), num_classes=2)
    (s,) = ops_named(module, "arch.seq")
    assert [op.name for op in s.body.block.ops] == ["arch.relu", "arch.yield"]
    roundtrip(module)

    module = emit(add2(None, None), (4, 4, 2), num_classes=2)
    (add,) = ops_named(module, "arch.add2")
    for region in (add.shortcut, add.main):
        (y,) = region.block.ops
        assert isinstance(y, arch.YieldOp) and y.value is region.block.args[0]
    roundtrip(module)

    module = emit(seq(None), (4, 4, 2), num_classes=2)
    (s,) = ops_named(module, "arch.seq")
    (y,) = s.body.block.ops
    assert y.value is s.body.block.args[0]

    module = emit(repeat(None, 3), (4, 4, 2), num_classes=2)
    (r,) = ops_named(module, "arch.repeat")
    assert r.times.value.data == 3
    roundtrip(module)


def test_emit_empty_model():
    module = emit(None, (4, 4, 2), num_classes=2)
    module.verify()
    model = model_of(module)
    assert model.layers() == []
    assert model.output_op.value is model.input_value
    roundtrip(module)


def test_emit_nested_tree():
    net = seq(cbr(8, 3, 1, 1),
              repeat(seq(add2(identity(), seq(conv(8, 3, 1, 1), bn(), relu(), conv(8, 3, 1, 1), bn())),
                         relu()), 2),
              gap_fc(10, True))
    module = emit(net, (8, 8, 1), num_classes=10)
    module.verify()
    names = [op.name for op in module.walk()]
    assert names.count("arch.seq") == 3
    assert names.count("arch.repeat") == 1 and names.count("arch.add2") == 1
    assert names.count("arch.yield") == 6  # seq x3, repeat, shortcut, main
    (rep,) = ops_named(module, "arch.repeat")
    assert rep.times.value.data == 2
    roundtrip(module)


def _nested(depth: int) -> Layer:
    layer = relu()
    for _ in range(depth):
        layer = seq(layer)
    return layer


def test_emit_nesting_limit_matches_tr_opt():
    """The deepest tree emit accepts prints and parses back in tr-opt; one level more (or a
    nesting that overflows Python's recursion, which emit used to raise) is a BluePrintError."""
    from tr_mlir.tools.opt_parser import TrParser

    module = emit(_nested(bp.MAX_NESTING), (8, 8, 3), num_classes=3)
    text = str(module)
    parse_ctx = Context()
    parse_ctx.load_dialect(Builtin)
    parse_ctx.load_dialect(arch.Arch)
    assert str(TrParser(parse_ctx, text).parse_module()) == text
    for depth in (bp.MAX_NESTING + 1, 5000):
        with pytest.raises(BluePrintError, match=f"nests seq/add2/repeat {depth} levels deep, at most "
                                                 f"{bp.MAX_NESTING} are supported"):
            emit(_nested(depth), (8, 8, 3), num_classes=3)


def test_emit_refuses_exponential_trees():
    """A sub-layer reused at every level doubles the tree: 2**60 ops would never finish."""
    layer = relu()
    for _ in range(60):
        layer = seq(layer, layer)
    with pytest.raises(BluePrintError, match=f"would emit more than {bp.MAX_EMITTED_OPS} ops"):
        emit(layer, (8, 8, 3), num_classes=3)
    assert bp.tree_size(seq(relu(), repeat(seq(relu(), relu()), 1000))) == (6, 3)  # a repeat body emits once


def test_emit_repeat_threads_channels():
    # first repetition sees C=3, the next ones 32; conv_dw after the conv is the same each time.
    net = seq(repeat(seq(conv(32, 1), conv_dw(3, 1, 1)), 3), conv_dw(1))
    module = emit(net, (8, 8, 3), num_classes=10)
    groups = [op.params()["groups"] for op in ops_named(module, "arch.conv")]
    assert groups == [1, 32, 32]
    # channel_padding reaches its fixed point after one repetition
    module = emit(seq(repeat(channel_padding(), 4), conv_dw(1)), (8, 8, 3), num_classes=10)
    assert ops_named(module, "arch.conv")[0].params()["groups"] == 8


def test_emit_repeat_body_depending_on_channels_is_an_error():
    net = repeat(seq(conv_dw(3, 1, 1), conv(32, 1)), 2)
    with pytest.raises(BluePrintError, match=re.escape(
            "repeat: the body emits different ops on repetition 2 (C = 32 enters it, C = 8 entered "
            "repetition 1)")):
        emit(net, (8, 8, 8), num_classes=10)
    # fine when the entering count is already the body's output count
    emit(net, (8, 8, 32), num_classes=10).verify()
    # fine with one repetition
    emit(repeat(seq(conv_dw(3, 1, 1), conv(32, 1)), 1), (8, 8, 8), num_classes=10).verify()


def test_emit_does_not_mutate_or_share_state():
    net = seq(conv(8, 3, 1, 1), relu())
    a = emit(net, (8, 8, 1), num_classes=10)
    b = emit(net, (8, 8, 1), num_classes=10)
    assert str(a) == str(b)
    assert a.is_structurally_equivalent(b)


@pytest.mark.parametrize("kwargs, exc, message", [
    ({"input_shape": (8, 8)}, BluePrintTypeError, "emit: input_shape must be (H, W, C), got (8, 8)"),
    ({"input_shape": "8x8x1"}, BluePrintTypeError, "emit: input_shape must be (H, W, C), got '8x8x1'"),
    ({"input_shape": 8}, BluePrintTypeError, "emit: input_shape must be (H, W, C), got 8"),
    ({"input_shape": (8, 0, 1)}, BluePrintError, "emit: input_shape[1] must be >= 1, got 0"),
    ({"input_shape": (8, 8, True)}, BluePrintTypeError, "emit: input_shape[2] must be an int, got bool True"),
    ({"num_classes": 0}, BluePrintError, "emit: num_classes must be >= 1, got 0"),
    ({"num_classes": 2.5}, BluePrintTypeError, "emit: num_classes must be an int, got float 2.5"),
    ({"amp": 1}, BluePrintTypeError, "emit: amp must be True or False, got int 1"),
    ({"fuse": None}, BluePrintTypeError, "emit: fuse must be True or False, got NoneType None"),
    ({"name": "my net"}, BluePrintError, "emit: name must be a symbol name like 'resnet50', got 'my net'"),
    ({"name": ""}, BluePrintError, "emit: name must be a symbol name like 'resnet50', got ''"),
    ({"model": "relu"}, BluePrintTypeError, "emit: model must be a Layer (or None), got str 'relu'; build layers with the factory "
     "functions, e.g. relu()"),
])
def test_emit_argument_errors(kwargs, exc, message):
    args = {"model": relu(), "input_shape": (8, 8, 1), "num_classes": 10, **kwargs}
    model = args.pop("model")
    with pytest.raises(exc) as info:
        emit(model, **args)
    assert str(info.value) == message


def test_emit_requires_num_classes():
    with pytest.raises(TypeError, match="num_classes"):
        emit(relu(), (8, 8, 1))  # type: ignore[call-arg]


def test_every_layer_class_emits_itself():
    """Emission is dispatched through the Layer classes: every concrete class has an
    ``_emit``, and every primitive one names an arch LayerOp."""
    from tr_mlir.blueprint import _layers

    concrete = [c for c in vars(_layers).values()
                if isinstance(c, type) and issubclass(c, Layer) and c.__module__ == _layers.__name__
                and c._DSL]
    assert len(concrete) == 27  # 20 primitives, 4 macros, seq/add2/repeat
    for cls in concrete:
        assert cls._emit is not Layer._emit, cls
        if issubclass(cls, _layers.Primitive):
            assert issubclass(cls.OP, arch.LayerOp), cls
        assert callable(getattr(bp, cls._DSL)), cls  # the factory named by repr exists
