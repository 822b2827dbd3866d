"""``memplan-narrow-grad-clear``: clear only the gradient regions whose first writer accumulates.

``memplan-build-graph`` starts every training step with ``ZERO_GRAD``: one ``RANGE_CLEAR`` over
``[G_BN_BIAS .. G_DEEP_CONV_FP16]`` (the gradients, R_RESULT between them), the seed's rule, so
kernels that add into a gradient start from zero. Most gradients need no clear: their single
producer (a backward kernel's ``dw`` / ``db`` / ``dgamma`` / ``dbeta``, the AMP cast of the fp16
conv gradients into the fp32 regions, the loss' ``loss`` / ``top1`` / ``top5``) writes all of it
without reading it. This pass keeps the clear only over the regions that need it.

Analysis. For every training step order (:func:`tr_mlir.dialects.lifetimes.training_step_orders`,
each starting with ``ZERO_GRAD``) over the program's ``@train`` graph, every DTensor with bytes
in a cleared region is followed from the clear to the end of the step (the next step starts with
the clear again). The clear's value of the DTensor is *dead* when the DTensor's first touch after
it is a node that writes it without reading it, or when no node touches it at all (no node reads
it, and the arena starts zeroed). Reads and overwrites are the kernel vocabulary's
(:mod:`tr_mlir.passes._dataflow`: an input, an input span or an accumulated output is read; an
output the kernel writes whole is overwritten; a skipped or unbound output is neither). A region stays cleared when
any of its DTensors' clear value is live in some step order; a region without bytes is free.
The cleared regions are written back as the fewest spans (free regions bridge two spans)::

    memplan.nodes zero_grad ops = ["RANGE_CLEAR"] ... out_ranges = [24, 33] out_range_counts = [1]
    // becomes, when only G_FC_BIAS (26) needs it (an accumulated FC bias, say):
    memplan.nodes zero_grad ops = ["RANGE_CLEAR"] ... out_ranges = [26, 26] out_range_counts = [1]

and when no region needs it the ``RANGE_CLEAR`` is removed (an empty ``zero_grad`` bucket: the
atlas gives it no capture key and the runtime launches nothing). In the built-in models every
gradient's producer overwrites it, so the clear goes; a plugin kernel that accumulates declares
``accumulates`` in its operand row and keeps its region cleared.

Bytes outside any DTensor inside a region (alignment padding) are zero from the arena's
initialization and no node writes them but whole-span range ops (casts, all-reduces), which
carry zeros to zeros, so they stay zero without the clear.

It runs in ``memplan-compile`` right after ``memplan-build-graph`` (before the atlas, which then
sees the narrowed bucket); no options. Diagnostics: a program without its ``@train`` graph (run
``memplan-build-graph`` first), and one that already has its atlas (the pass must run before
``memplan-build-atlas``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from tr_mlir.dialects.kernels import K
from tr_mlir.dialects.lifetimes import region_members
from tr_mlir.dialects.memplan import GraphId, GraphOp, MemRegion, Node, NodesOp, PlanOp, ProgramOp
from tr_mlir.passes._dataflow import live_after
from tr_mlir.passes.memplan_build_graph import TRAIN_GRAPH, graph_programs


def _clear_index(nodes: Sequence[Node]) -> int | None:
    clears = [i for i, n in enumerate(nodes) if n.op == K.RANGE_CLEAR.op()]
    return clears[0] if len(clears) == 1 else None


def needed_regions(plan: PlanOp, graph: GraphOp) -> set[MemRegion]:
    """The regions of the ``ZERO_GRAD`` clear whose cleared value some node reads (module doc)."""
    by_region = region_members(plan.tensors())
    region_of = {t.id: t.region for t in plan.tensors() if t.slot}
    clear_nodes = graph.nodes(GraphId.ZERO_GRAD)
    k = _clear_index(clear_nodes)
    if k is None:
        return set()
    cleared = {MemRegion(r) for a, b in clear_nodes[k].out_ranges for r in range(a, b + 1)}
    ids = {t for r in cleared for t in by_region.get(int(r), ())}
    return {region_of[t] for t in live_after(graph, GraphId.ZERO_GRAD, k, ids, by_region, wrap=False)}


def spans(cleared: Iterable[MemRegion], need: set[MemRegion], plan: PlanOp) -> list[tuple[MemRegion, MemRegion]]:
    """The fewest closed spans of ``cleared`` (in address order) holding every region of ``need``
    and no other region with bytes."""
    out: list[list[MemRegion]] = []
    gap = False
    for r in sorted(cleared):
        if r in need:
            if out and not gap:
                out[-1][1] = r
            else:
                out.append([r, r])
            gap = False
        elif plan.region_size(r) > 0:
            gap = True
    return [(a, b) for a, b in out]


def narrow(program: ProgramOp) -> None:
    """Rewrite the ``ZERO_GRAD`` clear of ``program``'s ``@train`` graph to the needed spans."""
    graph = next(g for g in program.graphs() if g.graph_name == TRAIN_GRAPH)
    plan = program.plans()[0]
    nodes = graph.nodes(GraphId.ZERO_GRAD)
    k = _clear_index(nodes)
    if k is None:
        return
    cleared = [MemRegion(r) for a, b in nodes[k].out_ranges for r in range(a, b + 1)]
    kept = spans(cleared, needed_regions(plan, graph), plan)
    new = list(nodes)
    if kept:
        new[k] = Node(nodes[k].op, out_ranges=tuple(kept))
    else:
        del new[k]
    old = graph.buckets()[GraphId.ZERO_GRAD]
    if new:
        Rewriter.replace_op(old, NodesOp(GraphId.ZERO_GRAD, new))
    else:
        Rewriter.erase_op(old)


@dataclass(frozen=True)
class MemplanNarrowGradClearPass(ModulePass):
    """Narrow (or drop) every program's gradient clear (see the module doc)."""

    name = "memplan-narrow-grad-clear"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for _, program in graph_programs(op, self.name, "the atlas names the buckets it may empty"):
            narrow(program)
