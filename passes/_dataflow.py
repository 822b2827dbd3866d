"""Reads and writes of ``memplan`` nodes by the kernel vocabulary, and the walk that finds whether
a DTensor's value is read again: the analysis the passes that rewrite the ``@train`` graph share
(``memplan-narrow-grad-clear``, ``memplan-fuse-fc-relu``).

A node *reads* a DTensor it has as an input, inside an input span, or as an output its kernel
accumulates into; it *overwrites* an output the kernel writes whole
(:meth:`tr_mlir.dialects.kernels.Operands.overwrites` and the ``accumulates`` field of the
operand row: ``GRAD_ACCUM``, the metric sums, the EMA). An output the node skips
(``skip_outputs``), binds to no argument, or whose ``when`` condition is false is neither; an op
without an operand row reads and writes every output (the safe side). This is finer than
:func:`tr_mlir.dialects.lifetimes.touches`, which knows no kernels and counts every output as
written and, for liveness, as touched.

The walk follows every training step order (:func:`tr_mlir.dialects.lifetimes.training_step_orders`)
that holds the bucket, from the node after the given one: a value is *live* when some node reads
it before any node overwrites it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from xdsl.dialects.builtin import DictionaryAttr, IntegerAttr

from tr_mlir.dialects.kernels import KernelIdError, operands_for
from tr_mlir.dialects.lifetimes import training_step_orders
from tr_mlir.dialects.memplan import GraphId, GraphOp, MemRegion, Node


def static_flag(params: Sequence[DictionaryAttr], node: Node, cond: str) -> bool:
    """The truth of static param ``cond`` of ``node`` (an operand row's ``when`` condition, e.g.
    an FC's ``bias``); False for a node without params."""
    if node.param < 0:
        return False
    value = params[node.param].data.get(cond)
    return isinstance(value, IntegerAttr) and bool(value.value.data)


def touches(node: Node, params: Sequence[DictionaryAttr],
            by_region: Mapping[int, Sequence[int]]) -> tuple[frozenset[int], frozenset[int]]:
    """(DTensor ids ``node`` reads, ids it overwrites without reading) by the kernel vocabulary
    (module doc). ``params``: the graph's static params; ``by_region``: region index -> ids of its
    DTensors with bytes (:func:`tr_mlir.dialects.lifetimes.region_members`), which region spans
    expand to. Workspace outputs (past the row's outputs) are written before they are read."""
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
        if arg is None or pos in node.skipped or (arg in row.when and not static_flag(params, node, row.when[arg])):
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


def live_after(graph: GraphOp, gid: GraphId, index: int, ids: Iterable[int],
               by_region: Mapping[int, Sequence[int]], *, wrap: bool) -> set[int]:
    """The ids of ``ids`` whose value after node ``index`` of bucket ``gid`` of ``graph`` some node
    reads before any node overwrites it, in some training step order holding ``gid`` (module doc).
    ``wrap``: the walk goes on from the start of the order up to the node itself (the next step
    runs the same order); otherwise it stops at the end of the step."""
    params = graph.params.data
    live: set[int] = set()
    for order in training_step_orders():
        if gid not in order:
            continue
        nodes = [n for g in order for n in graph.nodes(g)]
        start = sum(len(graph.nodes(g)) for g in order[:order.index(gid)]) + index + 1
        pending = set(ids) - live
        for node in nodes[start:] + (nodes[:start] if wrap else []):
            if not pending:
                break
            reads, writes = touches(node, params, by_region)
            live |= pending & reads
            pending -= reads | writes
    return live
