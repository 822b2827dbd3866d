"""``arch-merge-blocks`` (ArchPlan step 7): residual subgraphs -> fused residual block ops.

A residual block in a flat ``arch.model`` body is ``%y = arch.add %shortcut, %main`` (and for the
ResNet blocks a following ``arch.relu`` that is the add's only user) where ``%main`` is one of the
exact stems below, read from the block input ``%x``, and ``%shortcut`` is ``%x`` itself,
``arch.identity %x``, or a projection ``conv 1x1 + bn2d`` of ``%x``:

==================== ============================================================ ===============
family               main branch (from ``%x``)                                    post-add relu
==================== ============================================================ ===============
bottleneck           conv1x1(b) bn2d relu conv3x3(b, s, p1) bn2d relu conv1x1(o) bn2d required
basic block          conv3x3(o, s, p1) bn2d relu conv3x3(o, s1, p1) bn2d          required
inverted residual    conv1x1(e) bn2d relu dwconv3x3(e, s, p1) bn2d relu conv1x1(o) forbidden
                     bn2d
==================== ============================================================ ===============

The patterns are not written here: each is derived from a block op's residual-block spec
(``ResidualBlockOp.RESIDUAL``, :class:`~tr_mlir.dialects.arch.ResidualSpec`): the stem chain from
its stages (:func:`stem_chain`), the properties from the matched convs (:func:`stem_params`), the
shortcut and post-add relu from the spec, one :class:`BlockPattern` per block op with a shortcut
(built-in ones first, then plugins', :func:`block_patterns`) and one chain pattern per block op
without (:func:`chain_patterns`). The table above is what the built-in specs say.

(1x1 convs have ``s = 1, p = 0``; ``dwconv`` is depthwise: ``groups = e`` = its ``out_ch``;
every other conv has ``groups = 1``.) Results, replacing the relu (or the add) and erasing the
block:

* bottleneck: identity shortcut -> ``arch.bottleneck_identity {bottleneck_ch = b}``; projection
  ``conv1x1(o, s, p0) bn2d`` -> ``arch.bottleneck_projection {bottleneck_ch, out_ch, stride}``;
* basic block: ``arch.basic_block_identity {out_ch}`` / ``arch.basic_block_projection {out_ch,
  stride}``;
* inverted residual: identity shortcut only -> ``arch.inv_residual_identity {expand_ch, out_ch}``.

Conditions (all must hold, otherwise the region is left as it is): every intermediate value has
exactly one use (the block's own ops; a stem value read elsewhere blocks the merge), the widths
agree (bottleneck conv1/conv2 ``out_ch`` = ``b``; basic conv1/conv2 ``out_ch`` = ``o``; the
projection's ``out_ch`` = ``o`` and its stride = the block stride), an identity shortcut needs
stride 1 and input C = ``o``, and **all batch norms of the block agree on eps and momentum** (a
fused block carries one pair; blocks whose BNs differ are not merged). The "post-add relu" is an
``arch.relu`` that is the add's only user: the bottleneck and the basic block absorb it and do
not merge without it; the inverted residual (which has none in MobileNetV2) does not merge with
it. That rule, and the depthwise 3x3, tell an inverted residual from a bottleneck.

Plain inverted residuals without a shortcut (the chain ``conv1x1(e) bn2d relu dwconv3x3(e, s,
p1) bn2d relu conv1x1(o) bn2d`` with single-use intermediates and agreeing BNs, as the seed's
MobileNet blocks without a shortcut) become ``arch.inv_residual_no_shortcut {expand_ch, out_ch,
stride}``; they are matched after the residual blocks, so a chain that is the main branch of a
mergeable inverted residual is merged as that block.

Differences from the seed (facts sheet section 3.10, DESIGN section 7): the seed checks the kinds
of a stem prefix only, drops extra stem layers and the whole shortcut silently, never checks
strides or channels, treats a stride-2 identity bottleneck as an identity block, and can never
produce an inverted residual (its bottleneck prefix matches first). Here the whole region must
match exactly. Nested residuals are no special case: an inner block that matches is merged; an
outer region whose main branch holds anything else (an inner add or fused block) does not match.

The pass needs static NHWC types (run ``arch-deduce-shapes`` first): a candidate block whose
input or result type is not static is a diagnostic. It fuses whenever it runs; the ``arch-plan``
pipeline runs it only for models with ``fuse`` set.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern, op_type_rewrite_pattern
from xdsl.utils.exceptions import PassFailedException

from tr_mlir.dialects import arch
from tr_mlir.passes._fusion import (
    Chain,
    ChainMatch,
    FuseChain,
    Link,
    in_flat_model,
    reads_model_input,
    replace_ops,
    rewrite_models,
    shared_bn_params,
)


def _conv(k: int, p: int, s: int | None = None, depthwise: bool = False) -> Link:
    """A conv link: kernel ``k``, padding ``p``, stride ``s`` (any when ``None``), and either
    dense (``groups = 1``) or depthwise (``groups = out_ch``, > 1 channel or not)."""

    def where(conv: Operation) -> bool:
        v = conv.params()  # type: ignore[attr-defined]
        groups_ok = v["groups"] == v["out_ch"] if depthwise else v["groups"] == 1
        return v["k"] == k and v["p"] == p and (s is None or v["s"] == s) and groups_ok

    return Link(arch.ConvOp, where)


BN, RELU = Link(arch.Bn2dOp), Link(arch.ReluOp)

PROJECTION = Chain(_conv(1, 0), BN)
"""The projection shortcut: conv1x1(s) bn2d (dense)."""


def stem_chain(spec: arch.ResidualSpec) -> Chain:
    """The main path of ``spec`` as a chain: per stage a conv (its kernel, padding, fixed stride
    or any, dense or depthwise), a bn2d, and a relu when the stage has one."""
    links: list[Link] = []
    for st in spec.main:
        stride = st.stride if isinstance(st.stride, int) else None
        links += [_conv(st.k, st.p, stride, st.depthwise), BN, *((RELU,) if st.relu else ())]
    return Chain(*links)


def _out(op: Operation) -> int:
    return op.param("out_ch")  # type: ignore[attr-defined]


def _stride(op: Operation) -> int:
    return op.param("s")  # type: ignore[attr-defined]


def stem_params(spec: arch.ResidualSpec, stem: ChainMatch) -> dict[str, int] | None:
    """The op properties the matched main path gives (each stage's width and stride, by the
    property the spec names), or ``None`` when two stages naming one property disagree. Widths
    :data:`~tr_mlir.dialects.arch.IN` are checked against the input later (:func:`in_widths_ok`)."""
    params: dict[str, int] = {}
    i = 0
    for st in spec.main:
        conv = stem[i]
        i += 3 if st.relu else 2
        for name, value in ((st.width, _out(conv)), (st.stride, _stride(conv))):
            if isinstance(name, str) and name != arch.IN and params.setdefault(name, value) != value:
                return None
    return params


def in_widths_ok(spec: arch.ResidualSpec, stem: ChainMatch, cin: int) -> bool:
    """Whether every stage of width :data:`~tr_mlir.dialects.arch.IN` has ``cin`` output channels."""
    i = 0
    for st in spec.main:
        if st.width == arch.IN and _out(stem[i]) != cin:
            return False
        i += 3 if st.relu else 2
    return True


@dataclass(frozen=True)
class BlockPattern:
    """How one fused residual block op is recognized: its spec's main path as a chain."""

    op: type[arch.ResidualBlockOp]
    stem: Chain

    @property
    def spec(self) -> arch.ResidualSpec:
        return self.op.RESIDUAL


def block_patterns() -> tuple[BlockPattern, ...]:
    """One pattern per residual block op with a shortcut (the built-in ones, then the plugins'),
    in the order of :func:`~tr_mlir.dialects.arch.layer_ops`: at most one matches a region."""
    return tuple(BlockPattern(cls, stem_chain(spec)) for cls in arch.layer_ops()
                 if (spec := arch.residual_spec(cls)) is not None and spec.has_add)


@dataclass(frozen=True)
class _Shortcut:
    projection: ChainMatch | None
    ops: tuple[Operation, ...]


def _match_shortcut(value: SSAValue, x: SSAValue, block: Block | None) -> _Shortcut | None:
    """The shortcut reading block input ``x``: ``x`` itself, ``arch.identity x`` or a projection."""
    if value is x:
        return _Shortcut(None, ())
    owner = value.owner
    if not isinstance(owner, Operation) or owner.parent_block() is not block:
        return None
    if not value.has_one_use():
        return None
    if isinstance(owner, arch.IdentityOp):
        return _Shortcut(None, (owner,)) if owner.input is x else None
    projection = PROJECTION.match(owner)
    if projection is None or projection.input is not x:
        return None
    return _Shortcut(projection, projection.ops)


def _post_relu(add: arch.AddOp) -> arch.ReluOp | None:
    """The ``arch.relu`` that is the add's only user, if any."""
    result = add.output
    if not result.has_one_use():
        return None
    user = next(iter(result.uses)).operation
    if isinstance(user, arch.ReluOp) and user.parent_block() is add.parent_block():
        return user
    return None


def _require_static(add: arch.AddOp, x: SSAValue, spec: arch.ResidualSpec) -> None:
    for what, t in (("block input", x.type), ("result", add.output.type)):
        if arch.static_hwc(t) is None:
            raise PassFailedException(
                f"'{add.name}' op expected a static NHWC {what} type to merge a {spec.family}, "
                f"got {t}; run arch-deduce-shapes before arch-merge-blocks"
            )


class MergeResidualBlock(RewritePattern):
    """Replace one exactly matching residual block rooted at an ``arch.add`` (see the module);
    ``patterns``: the block patterns to try, in order (default: :func:`block_patterns` now)."""

    def __init__(self, patterns: tuple[BlockPattern, ...] | None = None):
        self.patterns = block_patterns() if patterns is None else patterns

    @op_type_rewrite_pattern
    def match_and_rewrite(self, add: arch.AddOp, rewriter: PatternRewriter) -> None:
        if not in_flat_model(add) or add.shortcut is add.main:
            return
        main = add.main
        if not isinstance(main.owner, Operation) or not main.has_one_use():
            return
        relu = _post_relu(add)
        for pattern in self.patterns:
            if (relu is not None) != pattern.spec.post_relu:
                continue
            stem = pattern.stem.match(main.owner)
            if stem is None or stem.root.parent_block() is not add.parent_block():
                continue
            fused = self._build(add, relu, pattern, stem)
            if fused is None:
                continue
            new_op, shortcut = fused
            root = relu if relu is not None else add
            ops = (*shortcut.ops, *stem.ops, add, *((relu,) if relu is not None else ()))
            replace_ops(rewriter, root, ops, new_op)
            return

    @staticmethod
    def _build(
        add: arch.AddOp, relu: arch.ReluOp | None, pattern: BlockPattern, stem: ChainMatch
    ) -> tuple[Operation, _Shortcut] | None:
        spec, x = pattern.spec, stem.input
        shortcut = _match_shortcut(add.shortcut, x, add.parent_block())
        if shortcut is None or (shortcut.projection is None) != (spec.shortcut is arch.Shortcut.IDENTITY):
            return None
        params = stem_params(spec, stem)
        if params is None:
            return None
        _require_static(add, x, spec)
        in_hwc = arch.static_hwc(x.type)
        if in_hwc is None or not in_widths_ok(spec, stem, in_hwc[2]):
            return None
        bns = [op for op in stem.ops if isinstance(op, arch.Bn2dOp)]
        out_ch, stride = spec.projection(params, in_hwc[2])
        if shortcut.projection is None:
            if stride != 1 or in_hwc[2] != out_ch:
                return None
        else:
            proj_conv, proj_bn = shortcut.projection.ops
            if _out(proj_conv) != out_ch or _stride(proj_conv) != stride:
                return None
            bns.append(proj_bn)
        bn_params = shared_bn_params(*bns)
        if bn_params is None:
            return None
        result_type = (relu if relu is not None else add).results[0].type
        return pattern.op(x, result_type, **params, **bn_params), shortcut


def chain_builder(op: type[arch.ResidualBlockOp]) -> Callable[[ChainMatch], Operation | None]:
    """The builder of ``op`` (a residual block without shortcut) for a matched plain chain of its
    main path: ``None`` when its widths or batch-norm parameters disagree or it reads the model
    input (its conv stays the first layer: :func:`~tr_mlir.passes._fusion.reads_model_input`)."""
    spec = op.RESIDUAL

    def build(match: ChainMatch) -> Operation | None:
        params = stem_params(spec, match)
        bn_params = shared_bn_params(*(o for o in match.ops if isinstance(o, arch.Bn2dOp)))
        if params is None or bn_params is None or reads_model_input(match.input):
            return None
        in_hwc = arch.static_hwc(match.input.type)
        if not in_widths_ok(spec, match, in_hwc[2] if in_hwc is not None else -1):
            return None
        return op(match.input, match.result_type, **params, **bn_params)

    return build


def chain_patterns() -> list[FuseChain]:
    """One chain pattern per residual block op without a shortcut (built-in, then plugins')."""
    return [FuseChain(stem_chain(spec), chain_builder(cls)) for cls in arch.layer_ops()
            if (spec := arch.residual_spec(cls)) is not None and not spec.has_add]


@dataclass(frozen=True)
class ArchMergeBlocksPass(ModulePass):
    """Merge exactly matching residual blocks (then plain inverted residuals) into fused ops."""

    name = "arch-merge-blocks"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        rewrite_models(op, MergeResidualBlock(), chain_patterns())
