"""``arch-expand``: ArchPlan step 1, BluePrint tree form -> flat SSA graph.

The seed's ``from_blueprint`` expands the layer tree into a linear list with Add2 marker
layers (facts sheet section 2). Here the tree (``arch.seq``, ``arch.repeat``, ``arch.add2``,
``arch.block`` and the macros ``arch.cbr``, ``arch.cbrp``, ``arch.gap_fc``) becomes a flat SSA
graph in the model body, in the seed's linearization order (shortcut branch before main
branch), with residual joins as ``arch.add %shortcut, %main`` (DESIGN section 3):

* ``seq``: children in order; ``repeat``: the body ``times`` times, each repetition expanded
  again with the running channel count (so the first one can be a projection block and the
  rest identity blocks); ``add2``: both regions expanded from the same input value, joined by
  ``arch.add``; an empty region is the input value itself.
* macros, both modes: ``cbrp`` -> conv, bn, relu, maxpool; ``gap_fc`` -> gap, fc
  (``arch-merge-binary`` fuses it back). ``cbr`` -> conv, bn (its eps/momentum), relu when not
  fusing, kept as ``arch.cbr`` when fusing.
* ``block``: fuse=true -> one fused op of facts 2.5 (:data:`BLOCK_FAMILIES`: identity or
  projection variant), fuse=false -> that op's primitive sequence (facts 2.6), emitted from the
  op's residual-block spec (:func:`expand_residual`, ``ResidualBlockOp.RESIDUAL``), except an inverted residual without shortcut that reads the model input: a fused
  op cannot be the first layer, so that one expands to its primitives in both modes (``mbconv``
  first trains fused as unfused; a residual block on the input is refused either way).
  Deliberate differences (DESIGN section 7): the MobileNet 3x3 is a true depthwise conv
  (``groups`` = expansion width); the identity shortcut of a block is left empty (the input
  value), ``arch-normalize-identity`` makes it explicit.

The running channel count is the seed's ``current_c`` (facts 2.2) tracked per SSA value
(``op.channels_after``), starting from the model's ``input_c``; it decides identity vs
projection blocks and the MobileNet expansion width. Emitted ops have the unknown type
``tensor<?x?x?x?xf32>``; ``arch-deduce-shapes`` computes shapes. BNs are emitted as
``arch.bn`` (``arch-rename-bn`` picks bn1d/bn2d). Ops already flat stay as they are, so the
pass is idempotent. Unlike the seed, ``fuse`` does not require ``amp``.

Option ``fuse`` (bool): when given, first rewrites the model's ``fuse`` flag.

Limit: a model may expand to at most :data:`MAX_LAYERS` layer ops; a ``repeat`` that would go
beyond is a diagnostic at the ``arch.repeat`` (a mistyped count such as ``times = 100000000``
would otherwise run for hours). Repeating an empty body any number of times is the identity.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from tr_mlir.dialects.arch import (
    Add2Op,
    AddOp,
    ArchLayerOp,
    BasicBlockIdentityOp,
    BasicBlockProjectionOp,
    BlockOp,
    BlockStyle,
    BnOp,
    BottleneckIdentityOp,
    BottleneckProjectionOp,
    CbrOp,
    CbrpOp,
    ConvOp,
    FcOp,
    GapFcOp,
    GapOp,
    InvResidualIdentityOp,
    InvResidualNoShortcutOp,
    MaxPoolOp,
    ModelOp,
    ReluOp,
    RepeatOp,
    ResidualBlockOp,
    SeqOp,
    Shortcut,
    YieldOp,
)
from tr_mlir.passes._fusion import reads_model_input
from tr_mlir.passes._model import apply_options, body_ops, fail, flag, models


MAX_LAYERS = 100_000
"""Most layer ops one model may have after expansion (unfused ResNet-152 has about 520)."""


class _Expander:
    """Emits the flat ops of one tree op into a list, tracking the running channel count.

    ``vmap`` maps values of the tree (region arguments, results of ops inside regions) to
    the flat values that replace them; ``chan`` maps flat values to their channel count.
    ``budget`` is how many ops the expansion may emit (:data:`MAX_LAYERS` less the model's
    other ops).
    """

    def __init__(self, fuse: bool, chan: dict[SSAValue, int], budget: int = MAX_LAYERS):
        self.fuse = fuse
        self.chan = chan
        self.budget = budget
        self.ops: list[Operation] = []
        self.vmap: dict[SSAValue, SSAValue] = {}

    def lookup(self, value: SSAValue) -> SSAValue:
        return self.vmap.get(value, value)

    def emit(self, op: Operation) -> SSAValue:
        """Append ``op`` to the output; returns its result after recording its channels."""
        self.ops.append(op)
        record_channels(op, self.chan)
        return op.results[0]

    def channels(self, value: SSAValue, at: Operation) -> int:
        c = self.chan.get(value)
        if c is None:
            fail(at, f"'{at.name}' op needs the channel count of its input, which is not "
                     "derived from the model input; build the tree from the model argument")
        return c

    def region(self, region: Region, x: SSAValue) -> SSAValue:
        """Expand the ops of a single-block region whose argument is ``x``; returns the
        flat value of its ``arch.yield``."""
        block = region.block
        self.vmap[block.args[0]] = x
        for op in block.ops:
            if isinstance(op, YieldOp):
                return self.lookup(op.value)
            self.op(op)
        raise AssertionError("verified tree regions end in arch.yield")

    def op(self, op: Operation) -> None:
        """Expand one op of a region (tree op, macro, or a flat op cloned as is)."""
        rule = expansion_rule(op, self.fuse)
        if rule is None:
            self.emit(op.clone(value_mapper=self.vmap))
            return
        x = self.lookup(op.operands[0])
        self.vmap[op.results[0]] = rule(self, op, x)

    # primitives -----------------------------------------------------------------------

    def conv(self, x: SSAValue, out_ch: int, k: int, s: int = 1, p: int = 0,
             groups: int = 1) -> SSAValue:
        return self.emit(ConvOp(x, out_ch=out_ch, k=k, s=s, p=p, groups=groups))

    def bn(self, x: SSAValue, eps: float | None = None,
           momentum: float | None = None) -> SSAValue:
        return self.emit(BnOp(x, eps=eps, momentum=momentum))

    def relu(self, x: SSAValue) -> SSAValue:
        return self.emit(ReluOp(x))

    def add(self, shortcut: SSAValue, main: SSAValue) -> SSAValue:
        return self.emit(AddOp(shortcut, main))


def record_channels(op: Operation, chan: dict[SSAValue, int]) -> None:
    """Record the seed's running channel count of ``op``'s result, when its inputs' are known:
    its ``channels_after`` (for ``arch.add`` the main branch's count)."""
    if not isinstance(op, ArchLayerOp):
        return
    cs = [chan.get(value) for value in op.layer_inputs]
    if None not in cs:
        chan[op.results[0]] = op.channels_after(*cs)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------
# Tree ops and macros
# --------------------------------------------------------------------------------------

Rule = Callable[[_Expander, Operation, SSAValue], SSAValue]
"""Expansion of one op given its flat input value; returns the flat output value."""


def _seq(ex: _Expander, op: SeqOp, x: SSAValue) -> SSAValue:
    return ex.region(op.body, x)


def _repeat(ex: _Expander, op: RepeatOp, x: SSAValue) -> SSAValue:
    times = op.times.value.data
    start = len(ex.ops)
    for i in range(times):
        x = ex.region(op.body, x)
        if i == 0:
            per = len(ex.ops) - start
            if per == 0:
                return x  # an empty body: every repetition is the identity
            if start + per * times > ex.budget:
                fail(op, f"'{op.name}' op would expand to {per * times} layers ({per} per repetition "
                         f"x times = {times}), more than the {MAX_LAYERS} a model may have; "
                         "check the repeat count")
        elif len(ex.ops) > ex.budget:
            fail(op, f"'{op.name}' op expands to more than the {MAX_LAYERS} layers a model may have; "
                     "check the repeat count")
    return x


def _add2(ex: _Expander, op: Add2Op, x: SSAValue) -> SSAValue:
    shortcut = ex.region(op.shortcut, x)
    main = ex.region(op.main, x)
    return ex.add(shortcut, main)


def _cbr(ex: _Expander, op: CbrOp, x: SSAValue) -> SSAValue:
    v = op.params()
    y = ex.conv(x, v["out_ch"], v["k"], v["s"], v["p"])
    return ex.relu(ex.bn(y, v["eps"], v["momentum"]))


def _cbrp(ex: _Expander, op: CbrpOp, x: SSAValue) -> SSAValue:
    v = op.params()
    y = ex.conv(x, v["out_ch"], v["conv_k"], v["conv_s"], v["conv_p"])
    y = ex.relu(ex.bn(y, v["eps"], v["momentum"]))
    return ex.emit(MaxPoolOp(y, k=v["pool_k"], s=v["pool_s"], p=v["pool_p"]))


def _gap_fc(ex: _Expander, op: GapFcOp, x: SSAValue) -> SSAValue:
    v = op.params()
    return ex.emit(FcOp(ex.emit(GapOp(x)), out_features=v["out_features"], bias=v["bias"]))


# --------------------------------------------------------------------------------------
# Blocks (facts sheet sections 2.5 and 2.6)
# --------------------------------------------------------------------------------------


def expand_residual(ex: _Expander, op: ResidualBlockOp, x: SSAValue, cin: int) -> SSAValue:
    """Emit the primitive ops of the fused residual block ``op`` on input ``x`` (``cin``
    channels), from its spec (:attr:`~tr_mlir.dialects.arch.ResidualBlockOp.RESIDUAL`): the
    projection shortcut (conv 1x1 + bn), each main stage (conv, bn, relu when the stage has one),
    the add, the post-add relu. BNs carry the op's ``eps`` / ``momentum`` when it sets them."""
    spec, v = op.RESIDUAL, op.params()
    bn_params = {key: v[key] for key in ("eps", "momentum") if key in op.properties}
    shortcut = x
    if spec.shortcut is Shortcut.PROJECTION:
        out, stride = spec.projection(v, cin)
        shortcut = ex.bn(ex.conv(x, out, 1, stride, 0), **bn_params)
    y = x
    for st in spec.main:
        y = ex.bn(ex.conv(y, st.out_ch(v, cin), st.k, st.s(v), st.p, st.groups(v, cin)), **bn_params)
        if st.relu:
            y = ex.relu(y)
    if spec.has_add:
        y = ex.add(shortcut, y)
    return ex.relu(y) if spec.post_relu else y


def _fused_bottleneck(x: SSAValue, cin: int, mid: int, out: int, stride: int,
                      ratio: int) -> ResidualBlockOp:
    if stride == 1 and cin == out:
        return BottleneckIdentityOp(x, bottleneck_ch=mid)
    return BottleneckProjectionOp(x, bottleneck_ch=mid, out_ch=out, stride=stride)


def _fused_basic(x: SSAValue, cin: int, mid: int, out: int, stride: int,
                 ratio: int) -> ResidualBlockOp:
    if stride == 1 and cin == out:
        return BasicBlockIdentityOp(x, out_ch=out)
    return BasicBlockProjectionOp(x, out_ch=out, stride=stride)


def _fused_inverted(x: SSAValue, cin: int, mid: int, out: int, stride: int,
                    ratio: int) -> ResidualBlockOp:
    if stride == 1 and cin == out:
        return InvResidualIdentityOp(x, expand_ch=cin * ratio, out_ch=out)
    return InvResidualNoShortcutOp(x, expand_ch=cin * ratio, out_ch=out, stride=stride)


BlockBuilder = Callable[[SSAValue, int, int, int, int, int], ResidualBlockOp]
"""``(x, cin, mid, out, stride, ratio) -> the fused block op`` of one block style: the identity
variant exactly when the stride is 1 and the input has ``out`` channels."""

BLOCK_FAMILIES: dict[BlockStyle, BlockBuilder] = {
    BlockStyle.RESNET_1_3_1: _fused_bottleneck,
    BlockStyle.RESNET_1_3_1_DS: _fused_bottleneck,
    BlockStyle.RESNET_3_3: _fused_basic,
    BlockStyle.RESNET_3_3_DS: _fused_basic,
    BlockStyle.MB_E1_K3: _fused_inverted,
    BlockStyle.MB_E1_K3_DS: _fused_inverted,
    BlockStyle.MB_E6_K3: _fused_inverted,
    BlockStyle.MB_E6_K3_DS: _fused_inverted,
}
"""Block style -> the fused op it becomes (stride and expansion ratio come from the style); its
primitives are the op's spec expanded (:func:`expand_residual`)."""


def _block(ex: _Expander, op: BlockOp, x: SSAValue) -> SSAValue:
    style: BlockStyle = op.style.data
    cin = ex.channels(x, op)
    mid = op.mid_ch.value.data if op.mid_ch is not None else 0
    out = op.out_ch.value.data
    fused = BLOCK_FAMILIES[style](x, cin, mid, out, style.stride, style.expand_ratio)
    if ex.fuse and not (fused.RESIDUAL.shortcut is Shortcut.NONE and reads_model_input(x)):
        return ex.emit(fused)
    # unfused, or a block without shortcut on the model input: a fused op cannot be the first
    # layer, its conv can (arch-merge-blocks agrees)
    y = expand_residual(ex, fused, x, cin)
    fused.erase()
    return y


_TREE_RULES: dict[type[Operation], Rule] = {
    SeqOp: _seq,
    RepeatOp: _repeat,
    Add2Op: _add2,
    BlockOp: _block,
    CbrpOp: _cbrp,
    GapFcOp: _gap_fc,
}
"""Op class -> expansion, in both modes."""

_UNFUSED_RULES: dict[type[Operation], Rule] = {CbrOp: _cbr}
"""Op class -> expansion when not fusing (kept as is when fusing)."""


def expansion_rule(op: Operation, fuse: bool) -> Rule | None:
    """The expansion of ``op`` in this mode, or ``None`` when it is already flat."""
    rule = _TREE_RULES.get(type(op))
    if rule is None and not fuse:
        rule = _UNFUSED_RULES.get(type(op))
    return rule


# --------------------------------------------------------------------------------------
# The pass
# --------------------------------------------------------------------------------------


def expand_model(model: ModelOp) -> None:
    """Expand every tree op and macro of ``model``'s body in place (see the module doc)."""
    fuse = flag(model, "fuse")
    chan: dict[SSAValue, int] = {model.input_value: model.input_hwc[2]}
    for op in body_ops(model):
        rule = expansion_rule(op, fuse)
        if rule is None:
            record_channels(op, chan)
            continue
        ex = _Expander(fuse, chan, MAX_LAYERS - len(model.body.block.ops))
        result = rule(ex, op, op.operands[0])
        Rewriter.insert_op(ex.ops, InsertPoint.before(op))
        op.results[0].replace_all_uses_with(result)
        Rewriter.erase_op(op)


@dataclass(frozen=True)
class ArchExpandPass(ModulePass):
    """Expand the BluePrint tree of every ``arch.model`` into a flat SSA graph (step 1).

    Options: ``fuse`` (bool, optional) first sets or clears the model's ``fuse`` flag.
    """

    name = "arch-expand"

    fuse: bool | None = None

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for model in models(op):
            apply_options(model, fuse=self.fuse)
            expand_model(model)
