"""The fusion matcher (passes/_fusion.py) and the fusion passes built on it.

Matcher edge cases (links, single-use checks, block boundaries, declined builds, leftover
users, no DCE), a property test of the chain fusions against a reference scan, and the
cross-check that fusing an unfused zoo plan with arch-merge-blocks/-triple/-binary gives exactly
the plan that the fused expansion produces.
"""

from __future__ import annotations

import textwrap
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, StringAttr, i64
from xdsl.dialects import test as xdsl_test
from xdsl.ir import SSAValue
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker

from tr_mlir import zoo
from tr_mlir.archplan_yaml import to_yaml
from tr_mlir.compile import arch_plan
from tr_mlir.dialects import arch
from tr_mlir.passes import _fusion
from tr_mlir.passes._fusion import (
    Chain,
    ChainMatch,
    FuseChain,
    Link,
    in_flat_model,
    replace_ops,
    rewrite_models,
    shared_bn_params,
)
from tr_mlir.passes.arch_mark_first_layer import ArchMarkFirstLayerPass
from tr_mlir.passes.arch_merge_binary import ArchMergeBinaryPass
from tr_mlir.passes.arch_merge_blocks import ArchMergeBlocksPass
from tr_mlir.passes.arch_merge_quadruple import ArchMergeQuadruplePass
from tr_mlir.passes.arch_merge_triple import CONV_BN_RELU, ArchMergeTriplePass, build_cbr

T = arch.nhwc_type(4, 4, 4)


class Net:
    """A flat model over ``tensor<?x4x4x4xf32>`` (every op keeps the shape)."""

    def __init__(self) -> None:
        self.model = arch.ModelOp("net", (4, 4, 4), 4)
        self.block = self.model.body.block
        self.x: SSAValue = self.model.input_value

    def op(self, cls: type, value: SSAValue | None = None, **params: Any) -> SSAValue:
        op = cls(self.x if value is None else value, T, **params)
        self.block.add_op(op)
        self.x = op.results[0]
        return self.x

    def conv(self, value: SSAValue | None = None, **params: Any) -> SSAValue:
        return self.op(arch.ConvOp, value, out_ch=4, k=1, **params)

    def add(self, a: SSAValue, b: SSAValue) -> SSAValue:
        op = arch.AddOp(a, b, T)
        self.block.add_op(op)
        self.x = op.output
        return self.x

    def done(self) -> ModuleOp:
        self.block.add_op(arch.OutputOp(self.x))
        module = ModuleOp([self.model])
        module.verify()
        return module


def kinds(module: ModuleOp) -> list[str]:
    (model,) = [op for op in module.walk() if isinstance(op, arch.ModelOp)]
    return [op.name.removeprefix("arch.") for op in model.layers()]


def conv_bn_relu() -> tuple[Net, list[SSAValue]]:
    n = Net()
    values = [n.conv(), n.op(arch.Bn2dOp, eps=1e-3), n.op(arch.ReluOp)]
    return n, values


# --------------------------------------------------------------------------------------
# Link and Chain
# --------------------------------------------------------------------------------------


def test_link_accepts_classes_tuples_and_predicates():
    n, (c, b, r) = conv_bn_relu()
    assert Link(arch.ConvOp).accepts(c.owner)
    assert Link((arch.ReluOp, arch.Bn2dOp)).accepts(b.owner)
    assert not Link(arch.ReluOp).accepts(b.owner)
    assert Link(arch.ConvOp, lambda op: op.param("k") == 1).accepts(c.owner)
    assert not Link(arch.ConvOp, lambda op: op.param("k") == 3).accepts(c.owner)


def test_chain_needs_a_link():
    with pytest.raises(ValueError, match="at least one link"):
        Chain()


def test_chain_match_gives_ops_input_and_result_type():
    n, (c, b, r) = conv_bn_relu()
    n.done()
    m = CONV_BN_RELU.match(r.owner)
    assert isinstance(m, ChainMatch)
    assert m.ops == (c.owner, b.owner, r.owner) and list(m) == list(m.ops) and len(m) == 3
    assert m.root is r.owner and m[1] is b.owner
    assert m.input is n.model.input_value
    assert m.result_type == T
    assert Chain(arch.ReluOp).match(r.owner).ops == (r.owner,)  # a one-link chain


@pytest.mark.parametrize("root", [0, 1])
def test_chain_rejects_a_root_of_the_wrong_kind(root):
    n, values = conv_bn_relu()
    assert CONV_BN_RELU.match(values[root].owner) is None


def test_chain_rejects_a_wrong_intermediate_and_a_failed_predicate():
    n = Net()
    n.conv()
    n.op(arch.Bn1dOp)
    r = n.op(arch.ReluOp)
    assert CONV_BN_RELU.match(r.owner) is None
    n = Net()
    n.conv(groups=4)
    n.op(arch.Bn2dOp)
    r = n.op(arch.ReluOp)
    assert CONV_BN_RELU.match(r.owner) is None


@pytest.mark.parametrize("extra_user", [0, 1])
def test_intermediate_with_another_user_blocks_the_match(extra_user):
    n, values = conv_bn_relu()
    n.add(values[extra_user], values[2])
    assert CONV_BN_RELU.match(values[2].owner) is None


def test_the_root_may_have_many_users():
    n, (c, b, r) = conv_bn_relu()
    n.add(r, r)
    assert CONV_BN_RELU.match(r.owner) is not None


def test_chain_longer_than_the_graph_stops_at_the_block_argument():
    n = Net()
    n.op(arch.Bn2dOp)
    r = n.op(arch.ReluOp)
    assert CONV_BN_RELU.match(r.owner) is None


def test_chain_does_not_cross_a_block_boundary():
    """A relu inside a tree-form region reading a bn2d of the model body."""
    n = Net()
    n.conv()
    b = n.op(arch.Bn2dOp)
    seq = arch.SeqOp(b, result_type=T)
    inner = arch.ReluOp(b, T)
    seq.body.block.add_ops([inner, arch.YieldOp(inner)])
    n.block.add_op(seq)
    n.x = seq.output
    n.done()
    assert CONV_BN_RELU.match(inner) is None
    assert Chain(arch.ReluOp).match(inner) is not None
    assert not in_flat_model(inner) and in_flat_model(b.owner)


# --------------------------------------------------------------------------------------
# FuseChain, replace_ops, rewrite_models
# --------------------------------------------------------------------------------------


def test_fuse_chain_replaces_the_chain_and_rewires_users():
    n, (c, b, r) = conv_bn_relu()
    n.add(r, r)
    module = n.done()
    rewrite_models(module, FuseChain(CONV_BN_RELU, build_cbr))
    module.verify()
    assert kinds(module) == ["cbr", "add"]
    (model,) = module.ops
    cbr, add = model.layers()
    assert cbr.param("eps") == 1e-3 and cbr.input is model.input_value
    assert add.shortcut is cbr.output and add.main is cbr.output


def test_a_declining_build_leaves_the_ir_alone():
    n, _ = conv_bn_relu()
    module = n.done()
    before = str(module)
    calls: list[ChainMatch] = []
    rewrite_models(module, FuseChain(CONV_BN_RELU, lambda m: calls.append(m)))
    assert len(calls) == 1 and str(module) == before


def test_chains_outside_a_model_are_left_alone():
    source = xdsl_test.TestOp(result_types=[T])
    conv = arch.ConvOp(source.res[0], T, out_ch=4, k=1)
    bn = arch.Bn2dOp(conv, T)
    relu = arch.ReluOp(bn, T)
    sink = xdsl_test.TestOp(operands=[relu.output])
    module = ModuleOp([source, conv, bn, relu, sink])
    before = str(module)
    rewrite_models(module, FuseChain(CONV_BN_RELU, build_cbr))  # no model: nothing to walk
    PatternRewriteWalker(FuseChain(CONV_BN_RELU, build_cbr)).rewrite_module(module)
    assert str(module) == before


def test_replace_ops_refuses_to_erase_an_op_still_in_use():
    n, (c, b, r) = conv_bn_relu()
    n.add(b, r)
    n.done()
    new = arch.CbrOp(c.owner.input, T, out_ch=4, k=1)
    with pytest.raises(ValueError, match="'arch.bn2d' with users outside the match"):
        replace_ops(PatternRewriter(r.owner), r.owner, (c.owner, b.owner, r.owner), new)


def test_rewrite_models_keeps_dead_ops_and_visits_every_model():
    n, (c, b, r) = conv_bn_relu()
    n.op(arch.TanhOp, n.model.input_value)  # dead: nothing reads it
    n.x = r
    first = n.done()
    n2, _ = conv_bn_relu()
    n2.model.properties["sym_name"] = StringAttr("second")
    second = n2.done()
    module = ModuleOp([first.ops.first.clone(), second.ops.first.clone()])
    rewrite_models(module, FuseChain(CONV_BN_RELU, build_cbr))
    models = list(module.ops)
    assert [op.name for op in models[0].layers()] == ["arch.cbr", "arch.tanh"]
    assert [op.name for op in models[1].layers()] == ["arch.cbr"]


def test_earlier_groups_have_priority():
    """Two groups competing for the same ops: the first group's walk takes them."""
    n, _ = conv_bn_relu()
    module = n.done()
    bn_relu = Chain(arch.Bn2dOp, arch.ReluOp)
    as_relu6 = FuseChain(bn_relu, lambda m: arch.Relu6Op(m.input, m.result_type))
    rewrite_models(module, as_relu6, FuseChain(CONV_BN_RELU, build_cbr))
    assert kinds(module) == ["conv", "relu6"]


def test_shared_bn_params():
    n = Net()
    a = n.op(arch.Bn2dOp, eps=1e-3, momentum=0.2).owner
    b = n.op(arch.Bn2dOp, eps=1e-3, momentum=0.2).owner
    c = n.op(arch.Bn2dOp, eps=1e-3, momentum=0.3).owner
    d = n.op(arch.Bn2dOp, eps=1e-4, momentum=0.2).owner
    assert shared_bn_params(a, b) == {"eps": 1e-3, "momentum": 0.2}
    assert shared_bn_params(a) == {"eps": 1e-3, "momentum": 0.2}
    assert shared_bn_params(a, b, c) is None
    assert shared_bn_params(a, d) is None


# --------------------------------------------------------------------------------------
# The chain passes against a reference scan
# --------------------------------------------------------------------------------------

LAYERS = {
    "conv": (arch.ConvOp, {"out_ch": 4, "k": 1}),
    "dwconv": (arch.ConvOp, {"out_ch": 4, "k": 1, "groups": 4}),
    "bn2d": (arch.Bn2dOp, {}),
    "relu": (arch.ReluOp, {}),
    "maxpool": (arch.MaxPoolOp, {"k": 1, "s": 1}),
}

PATTERNS = {
    ArchMergeTriplePass: (("conv", "bn2d", "relu"), "cbr", True),
    ArchMergeQuadruplePass: (("conv", "bn2d", "relu", "maxpool"), "cbrp", False),
}
"""Pass -> (the chain, the fused kind, whether the fused op may be the first layer: a chain that
reads the model input fuses only then)."""


def reference_fusion(names: list[str], tapped: set[int], pattern: tuple[str, ...], fused: str,
                     first_ok: bool = True):
    """The expected layer kinds: each run of ``pattern`` whose values before the last are not
    tapped (read elsewhere) becomes ``fused``, the run reading the model input only when
    ``first_ok``; the taps' adds follow."""
    out, i = [], 0
    while i < len(names):
        window = tuple(names[i:i + len(pattern)])
        if (window == pattern and not tapped & set(range(i, i + len(pattern) - 1))
                and (i > 0 or first_ok)):
            out.append(fused)
            i += len(pattern)
        else:
            out.append(LAYERS[names[i]][0].name.removeprefix("arch."))
            i += 1
    return out + ["add"] * len(tapped)


@pytest.mark.parametrize("pass_class", sorted(PATTERNS, key=lambda p: p.name))
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_chain_passes_match_a_reference_scan(pass_class, data):
    pattern, fused, first_ok = PATTERNS[pass_class]
    # whole patterns are drawn as one token so that most examples contain some
    tokens = data.draw(st.lists(st.sampled_from(["*", *sorted(LAYERS)]), min_size=1, max_size=8))
    names = [name for token in tokens for name in (pattern if token == "*" else (token,))]
    tapped = data.draw(st.sets(st.integers(0, len(names) - 1), max_size=4))
    n = Net()
    values = []
    for name in names:
        cls, params = LAYERS[name]
        values.append(n.op(cls, **params))
    last = values[-1]
    for i in sorted(tapped):
        last = n.add(last, values[i])
    module = n.done()
    pass_class().apply(None, module)
    module.verify()
    assert kinds(module) == reference_fusion(names, tapped, pattern, fused, first_ok)


def test_quadruple_must_run_before_triple():
    def build() -> ModuleOp:
        n = Net()
        n.op(arch.ReluOp)  # the chain does not read the model input (else no cbrp)
        for name in ("conv", "bn2d", "relu", "maxpool"):
            cls, params = LAYERS[name]
            n.op(cls, **params)
        return n.done()

    module = build()
    ArchMergeQuadruplePass().apply(None, module)
    ArchMergeTriplePass().apply(None, module)
    assert kinds(module) == ["relu", "cbrp"]
    module = build()
    ArchMergeTriplePass().apply(None, module)
    ArchMergeQuadruplePass().apply(None, module)
    assert kinds(module) == ["relu", "cbr", "maxpool"]


def test_binary_keeps_the_bias_flag_and_types():
    for bias in (True, False):
        model = arch.ModelOp("net", (3, 3, 8), 5)
        x = model.input_value
        gap = arch.GapOp(x, arch.nhwc_type(1, 1, 8))
        fc = arch.FcOp(gap, arch.nhwc_type(1, 1, 5), out_features=5, bias=bias)
        model.body.block.add_ops([gap, fc, arch.OutputOp(fc)])
        module = ModuleOp([model])
        ArchMergeBinaryPass().apply(None, module)
        module.verify()
        (fused,) = model.layers()
        assert isinstance(fused, arch.GapFcOp)
        assert fused.params() == {"out_features": 5, "bias": bias}
        assert fused.output.type == arch.nhwc_type(1, 1, 5) and fused.input is x


def test_mark_first_layer():
    n, _ = conv_bn_relu()
    module = n.done()
    ArchMarkFirstLayerPass().apply(None, module)
    assert module.ops.first.first_layer.value.data == 0
    empty = ModuleOp([arch.ModelOp("empty", (1, 1, 1), 1)])
    empty.ops.first.body.block.add_op(arch.OutputOp(empty.ops.first.input_value))
    empty.ops.first.properties["first_layer"] = IntegerAttr(0, i64)
    ArchMarkFirstLayerPass().apply(None, empty)
    assert empty.ops.first.first_layer is None
    empty.verify()


# --------------------------------------------------------------------------------------
# Cross-check: fusing an unfused plan gives the fused plan
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(zoo.MODELS))
def test_fusing_the_unfused_plan_gives_the_fused_plan(name):
    """arch-expand{fuse} emits fused block ops directly; our passes must reach the same plan from
    the primitive expansion (exact matching of every block the zoo builds)."""
    spec = zoo.MODELS[name]
    unfused = arch_plan(spec.blueprint(), spec.input_shape, amp=False, fuse=False,
                        num_classes=spec.num_classes)
    for pass_class in (ArchMergeBlocksPass, ArchMergeTriplePass, ArchMergeBinaryPass):
        pass_class().apply(None, unfused)
    unfused.verify()
    fused = arch_plan(spec.blueprint(), spec.input_shape, amp=False, fuse=True,
                      num_classes=spec.num_classes)
    assert to_yaml(unfused) == to_yaml(fused)


def test_merge_blocks_leaves_a_fully_merged_plan_alone():
    spec = zoo.MODELS["resnet18"]
    fused = arch_plan(spec.blueprint(), spec.input_shape, amp=False, fuse=True,
                      num_classes=spec.num_classes)
    before = str(fused)
    ArchMergeBlocksPass().apply(None, fused)
    assert str(fused) == before


def test_the_module_docstring_example_runs():
    """The complete pass shown in _fusion.py's docstring works as documented."""
    doc = _fusion.__doc__ or ""
    start = doc.index("Writing a new fusion pass")
    code_start = doc.index("::\n\n", start) + 4
    lines = []
    for line in doc[code_start:].splitlines():
        if line and not line.startswith("    "):
            break
        lines.append(line)
    namespace: dict[str, Any] = {}
    exec(textwrap.dedent("\n".join(lines)), namespace)
    pass_class = namespace["ArchMergeTriplePass"]
    assert pass_class.name == "arch-merge-triple"
    n, _ = conv_bn_relu()
    module = n.done()
    pass_class().apply(None, module)
    assert kinds(module) == ["cbr"]
    assert module.ops.first.layers()[0].param("eps") == 1e-3
