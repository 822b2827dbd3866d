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
it, and the arena starts zeroed). A node reads a DTensor it has as an input, inside an input span,
or as an output its kernel accumulates into; it overwrites an output the kernel writes whole:
the kernel vocabulary says which (:meth:`tr_mlir.dialects.kernels.Operands.overwrites` and the
``accumulates`` field of the operand row: ``GRAD_ACCUM``, the metric sums, the EMA; an output a
node skips, ``skip_outputs``, or binds to no argument is no write). A region stays cleared when
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

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import DictionaryAttr, IntegerAttr, ModuleOp
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from tr_mlir.dialects.kernels import K, KernelIdError, operands_for
from tr_mlir.dialects.lifetimes import training_step_orders
from tr_mlir.dialects.memplan import GraphId, GraphOp, MemRegion, Node, NodesOp, PlanOp, ProgramOp
from tr_mlir.passes.memplan_build_graph import TRAIN_GRAPH, graph_programs


def _flag(params: Sequence[DictionaryAttr], node: Node, cond: str) -> bool:
    """The truth of static param ``cond`` of ``node`` (its ``when`` conditions)."""
    if node.param < 0:
        return False
    value = params[node.param].data.get(cond)
    return isinstance(value, IntegerAttr) and bool(value.value.data)


def touches(node: Node, params: Sequence[DictionaryAttr],
            by_region: Mapping[int, Sequence[int]]) -> tuple[frozenset[int], frozenset[int]]:
    """(ids ``node`` reads, ids it overwrites) by the kernel vocabulary (module doc): spans expanded
    to their DTensors; an accumulated output is read; an unbound or skipped output is neither."""
    def expand(spans: Iterable[tuple[MemRegion, MemRegion]]) -> set[int]:
        return {t for a, b in spans for r in range(a, b + 1) for t in by_region.get(r, ())}

    reads = set(node.inputs) | expand(node.in_ranges)
    try:
        row = operands_for(node.op)
    except KernelIdError:  # an op without a row: every output is read and written
        outs = set(node.outputs) | expand(node.out_ranges)
        return frozenset(reads | outs), frozenset()
    writes: set[int] = set()
    for pos, (arg, tid) in enumerate(zip(row.outs, node.outputs)):
        if arg is None or pos in node.skipped or (arg in row.when and not _flag(params, node, row.when[arg])):
            continue
        (writes if row.overwrites(arg) else reads).add(tid)
    names = list(row.out_ranges)
    for i, span in enumerate(node.out_ranges):
        if not names:  # spans the row does not name: count them as read (the safe side)
            reads.update(expand((span,)))
            continue
        arg = names[min(i, len(names) - 1)]
        (writes if row.overwrites(arg) else reads).update(expand((span,)))
    writes.update(node.outputs[len(row.outs):])  # workspaces: scratch, written before read
    return frozenset(reads), frozenset(writes - reads)


def _clear_index(nodes: Sequence[Node]) -> int | None:
    clears = [i for i, n in enumerate(nodes) if n.op == K.RANGE_CLEAR.op()]
    return clears[0] if len(clears) == 1 else None


def needed_regions(plan: PlanOp, graph: GraphOp) -> set[MemRegion]:
    """The regions of the ``ZERO_GRAD`` clear whose cleared value some node reads (module doc)."""
    by_region: dict[int, list[int]] = {}
    region_of: dict[int, MemRegion] = {}
    for t in plan.tensors():
        if t.slot:
            by_region.setdefault(int(t.region), []).append(t.id)
            region_of[t.id] = t.region
    params = graph.params.data
    clear_nodes = graph.nodes(GraphId.ZERO_GRAD)
    k = _clear_index(clear_nodes)
    if k is None:
        return set()
    cleared = {MemRegion(r) for a, b in clear_nodes[k].out_ranges for r in range(a, b + 1)}
    ids = {t for r in cleared for t in by_region.get(int(r), ())}
    need: set[MemRegion] = set()
    for order in training_step_orders():
        nodes = [n for gid in order for n in graph.nodes(gid)]
        start = sum(len(graph.nodes(gid)) for gid in order[:order.index(GraphId.ZERO_GRAD)]) + k + 1
        pending = set(ids)
        for node in nodes[start:]:
            if not pending:
                break
            reads, writes = touches(node, params, by_region)
            live = pending & reads
            need.update(region_of[t] for t in live)
            pending -= live | writes
    return need


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
