"""A small matcher for the ArchPlan fusion passes, built on xDSL's pattern rewriter.

A fusion replaces a *single-use producer chain* of layer ops, e.g. ``conv -> bn2d -> relu``,
by one fused op that reads the chain's input. The pieces:

* :class:`Link`: one step of a chain, an op class (or a tuple of classes) and an optional
  predicate on the op (``lambda conv: conv.param("groups") == 1``).
* :class:`Chain`: links from producer to consumer. ``chain.match(root)`` walks from ``root``
  (matched by the last link) back through each op's first operand (a layer's ``input``) and
  returns a :class:`ChainMatch` or ``None``. A chain matches only when every op satisfies its
  link, every intermediate value (each result except the root's) has exactly one use (the next
  op of the chain: no other users), and every op sits in the root's block (values crossing a
  region boundary never fuse).
* :class:`ChainMatch`: the matched ``ops`` (producer first), the chain ``input`` value, the
  ``root`` and its ``result_type`` (the static type the fused op carries, copied from the op it
  replaces, so fusion never loses a deduced shape).
* :class:`FuseChain`: a ``RewritePattern`` holding a chain and a *build callback*
  ``build(match) -> Operation | None``. The callback returns the fused op, constructed on
  ``match.input`` with ``match.result_type`` (or ``None`` to decline, e.g. when parameters
  disagree). The pattern then rewires the root's users to the fused op and erases the chain
  (:func:`replace_ops`). It fires only on ops directly in an ``arch.model`` body (the flat
  ArchPlan, :func:`in_flat_model`); ops nested in other regions are left alone.
* :func:`rewrite_models`: runs patterns, in order, over every ``arch.model`` body of a module,
  one walk per pattern group, in program order, without xDSL's dead-code elimination (a
  network's ops are ``Pure``, a sink keeps them alive, and a fusion pass must not delete
  anything else).
* :func:`shared_bn_params`: the ``eps``/``momentum`` of several batch norms when they agree
  (a fused op carries one pair), else ``None``.
* :func:`reads_model_input`: whether a match reads the model input (a chain fused into an op
  other than ``arch.cbr`` must not: it would become a first layer the input buffers cannot feed).

Writing a new fusion pass (a complete one; ``passes/arch_merge_triple.py`` is this file)::

    from dataclasses import dataclass
    from xdsl.passes import ModulePass
    from tr_mlir.dialects import arch
    from tr_mlir.passes._fusion import Chain, ChainMatch, FuseChain, Link, rewrite_models

    CONV_BN_RELU = Chain(
        Link(arch.ConvOp, lambda conv: conv.param("groups") == 1),
        Link(arch.Bn2dOp),
        Link(arch.ReluOp),
    )

    def build_cbr(m: ChainMatch) -> arch.CbrOp:
        conv, bn, _ = m.ops
        c = conv.params()
        return arch.CbrOp(m.input, m.result_type, out_ch=c["out_ch"], k=c["k"], s=c["s"],
                          p=c["p"], eps=bn.param("eps"), momentum=bn.param("momentum"))

    @dataclass(frozen=True)
    class ArchMergeTriplePass(ModulePass):
        name = "arch-merge-triple"

        def apply(self, ctx, op):
            rewrite_models(op, FuseChain(CONV_BN_RELU, build_cbr))

Matches that are not a straight chain (a residual block joins two branches) use the same
parts: match each branch with :meth:`Chain.match` (``ChainMatch.input`` tells where a branch
starts), check :meth:`Chain.match` results share an input, and finish with
:func:`replace_ops`; ``passes/arch_merge_blocks.py`` does exactly that.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Attribute, BlockArgument, Operation, SSAValue
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
)

from tr_mlir.dialects import arch

OpClasses = type[Operation] | tuple[type[Operation], ...]


@dataclass(frozen=True)
class Link:
    """One step of a :class:`Chain`: the op class(es) it accepts and an optional predicate."""

    kind: OpClasses
    where: Callable[[Operation], bool] | None = None

    def accepts(self, op: Operation) -> bool:
        """True when ``op`` is an instance of ``kind`` and satisfies ``where``."""
        return isinstance(op, self.kind) and (self.where is None or bool(self.where(op)))


@dataclass(frozen=True)
class ChainMatch:
    """A matched chain: ``ops`` from producer to root (the op whose result is replaced)."""

    ops: tuple[Operation, ...]

    @property
    def root(self) -> Operation:
        """The last op of the chain; its result is what the fused op replaces."""
        return self.ops[-1]

    @property
    def input(self) -> SSAValue:
        """The value the chain reads (first operand of its first op): the fused op's input."""
        return self.ops[0].operands[0]

    @property
    def result_type(self) -> Attribute:
        """The root's result type, carried over to the fused op (static after shape deduction)."""
        return self.root.results[0].type

    def __iter__(self) -> Iterator[Operation]:
        return iter(self.ops)

    def __len__(self) -> int:
        return len(self.ops)

    def __getitem__(self, index: int) -> Operation:
        return self.ops[index]


class Chain:
    """A single-use producer chain of ops, described from producer to consumer.

    ``Chain(Link(ConvOp), Link(Bn2dOp), Link(ReluOp))`` matches ``relu(bn2d(conv(x)))`` when
    the conv and bn2d results have no other users. Ops are followed through their first
    operand, the ``input`` of every layer op.
    """

    def __init__(self, *links: Link | OpClasses):
        if not links:
            raise ValueError("a Chain needs at least one link")
        self.links: tuple[Link, ...] = tuple(
            link if isinstance(link, Link) else Link(link) for link in links
        )

    def __len__(self) -> int:
        return len(self.links)

    def match(self, root: Operation) -> ChainMatch | None:
        """The chain ending at ``root``, or ``None``.

        Fails when an op does not satisfy its link, a producer is a block argument or lives in
        another block than ``root``, or an intermediate result has more than one use (or more
        than one result). The root's own users are not constrained.
        """
        block = root.parent_block()
        ops: list[Operation] = []
        op: Operation = root
        for i, link in enumerate(reversed(self.links)):
            if not link.accepts(op) or op.parent_block() is not block:
                return None
            if i > 0 and (len(op.results) != 1 or not op.results[0].has_one_use()):
                return None
            ops.append(op)
            if i == len(self.links) - 1:
                break
            if not op.operands:
                return None
            producer = op.operands[0].owner
            if not isinstance(producer, Operation):
                return None
            op = producer
        return ChainMatch(tuple(reversed(ops)))


def in_flat_model(op: Operation) -> bool:
    """True when ``op`` sits directly in the body of an ``arch.model`` (the flat ArchPlan)."""
    return isinstance(op.parent_op(), arch.ModelOp)


def replace_ops(
    rewriter: PatternRewriter, root: Operation, ops: Sequence[Operation], new_op: Operation
) -> None:
    """Replace ``root`` by ``new_op`` (inserted before it, users rewired), then erase ``ops``.

    ``ops`` are the matched ops (``root`` among them or not). Each is erased once nothing uses
    it any more, consumers before producers; an op still used from outside the match is a
    matcher bug and raises ``ValueError``.
    """
    rewriter.replace(root, new_op)
    pending = [op for op in ops if op is not root]
    while pending:
        unused = [op for op in pending if not any(r.uses for r in op.results)]
        if not unused:
            inside = {id(op) for op in pending}
            culprit = next(
                (op for op in pending for r in op.results for use in r.uses
                 if id(use.operation) not in inside),
                pending[0],
            )
            raise ValueError(
                f"fusion left '{culprit.name}' with users outside the match; "
                "the matcher must check that intermediate values have a single use"
            )
        for op in unused:
            rewriter.erase(op)
        gone = {id(op) for op in unused}
        pending = [op for op in pending if id(op) not in gone]


class FuseChain(RewritePattern):
    """Replace each match of ``chain`` in a flat model by ``build(match)``.

    ``build`` returns the fused op taking ``match.input`` (typed ``match.result_type``), or
    ``None`` to leave the match alone.
    """

    def __init__(self, chain: Chain, build: Callable[[ChainMatch], Operation | None]):
        self.chain = chain
        self.build = build

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter, /) -> None:
        if not in_flat_model(op):
            return
        match = self.chain.match(op)
        if match is None:
            return
        fused = self.build(match)
        if fused is None:
            return
        replace_ops(rewriter, match.root, match.ops, fused)


def rewrite_models(module: ModuleOp, *groups: RewritePattern | Sequence[RewritePattern]) -> None:
    """Apply pattern groups to every ``arch.model`` body of ``module``.

    Each group (a pattern or a sequence of patterns tried in order on each op) gets its own
    walk in program order, after the previous group's walk, so an earlier group has priority
    over a later one (``arch-merge-blocks`` merges residual blocks before plain chains).
    Dead-code elimination is off.
    """
    models = [op for op in module.walk() if isinstance(op, arch.ModelOp)]
    for model in models:
        for group in groups:
            patterns = [group] if isinstance(group, RewritePattern) else list(group)
            walker = PatternRewriteWalker(
                GreedyRewritePatternApplier(patterns, dce_enabled=False),
                apply_recursively=False,
            )
            walker.rewrite_region(model.body)


def shared_bn_params(*bns: Operation) -> dict[str, float] | None:
    """``{"eps": e, "momentum": m}`` when all batch norms ``bns`` agree exactly, else ``None``."""
    pairs = {(bn.param("eps"), bn.param("momentum")) for bn in bns}  # type: ignore[attr-defined]
    if len(pairs) != 1:
        return None
    ((eps, momentum),) = pairs
    return {"eps": eps, "momentum": momentum}


def reads_model_input(value: SSAValue) -> bool:
    """True when ``value`` is the input of its ``arch.model`` (the body's block argument).

    Only flatten, conv, channel_padding and cbr may be the first layer (the one reading the
    input buffers A/B; ``memplan-derive-shapes`` refuses any other), so a chain fused into another
    op (an inverted residual without shortcut, a cbrp) must not start at the model input: a model
    whose first layer is a conv would compile unfused and be refused fused. (A residual block on
    the input is refused unfused too: its add reads the input as well.)
    """
    return isinstance(value, BlockArgument) and isinstance(value.owner.parent_op(), arch.ModelOp)
