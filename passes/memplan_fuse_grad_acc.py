"""``memplan-fuse-grad-acc``: a residual join's gradient added by the Winograd input gradient.

At a residual join the gradient of the block's input has two producers: the skip connection's
(the ``dskip`` output of the join's BN+add+ReLU backward, or a downsampling conv's input
gradient) and the main path's first conv. ``memplan-build-graph`` lets the conv write its input
gradient ``D`` whole and then adds the skip's ``T`` with a ``grad_accum`` node, one more pass over
both activations-sized tensors::

    X (...) -> (T, ...)                                  the skip gradient's writer
    CONV_FP32_BWD (dy, w, x) -> (D, dw, ...)             {algo_dgrad = "winograd_..."}
    GRAD_ACCUM_FP32 (T, D) -> (D)                        D = D + T
        => X (...) -> (D, ...)                           writes the skip gradient into D
           CONV_FP32_BWD (dy, w, x, D) -> (D, dw, ...)   D = D + the input gradient

The conv's fourth input is its operand row's ``dx_acc`` (:attr:`Operands.adds_into
<tr_mlir.dialects.kernels.Operands.adds_into>`): its own ``dx`` output, which the kernel then adds
into, in the Winograd output transform while each value is in a register
(:func:`tr_mlir.lowering.cpu.winograd.dgrad`'s ``accumulate``). Each element is the same fp32
add of the same two fp32 values as ``grad_accum``'s (IEEE addition is commutative), so training
is bit-identical with and without the pass (tests/test_fuse_grad_acc.py). ``T`` is then touched
by no node, and ``D`` lives from the skip gradient's writer on: ``memplan-assign-offsets`` has
one activation-sized tensor less to place.

Which triples. In one bucket of the ``@train`` graph: a ``GRAD_ACCUM_FP32`` node ``(T, D) ->
(D)``; the last node before it that touches ``D`` is an fp32 ``CONV_FP32_BWD`` writing ``D`` as
its ``dx`` (not yet fused), whose input-gradient algorithm is a Winograd variant (recorded by
``memplan-select-conv-algo``: the im2col, pointwise and direct input gradients are written by the
BLAS or by kernels that add in another order); the last node before the conv that touches ``T``
overwrites it (:func:`tr_mlir.passes._dataflow.touches`) and touches ``D`` nowhere else; no node
between that writer and the ``grad_accum`` touches ``T`` or ``D`` (so ``D``'s old value is dead
and nothing sees the sum early); ``T`` is dead after the ``grad_accum`` in every training step
order (:func:`tr_mlir.passes._dataflow.live_after`); and ``T`` and ``D`` are both transient
DTensors with the same dtype and shape in every plan. Everything else stays as it is, so
``conv-algo=im2col`` compiles as without the pass, and so does the ``@infer`` graph (it has no backward). Unfused residual nets
(``fuse=False``) keep their ``grad_accum``: there the skip's gradient (the identity's backward) is
written after the conv, so no writer of ``T`` comes before it.

It runs in ``memplan-compile`` after ``memplan-fuse-bn-stats`` (option ``fuse_grad_acc``, default
on); no options of its own; running it again changes nothing. Diagnostics as
``memplan-fuse-fc-relu``: a program without its ``@train`` graph, or one with its atlas already.
The program verifier (every compile, ``tr-opt``) refuses a conv whose ``dx_acc`` input is not its
own ``dx`` output. Measured on CIFAR ResNet-18: bench/README.md, "Residual gradients added in the
Winograd output transform".
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from tr_mlir.dialects.kernels import K
from tr_mlir.dialects.lifetimes import region_members
from tr_mlir.dialects.memplan import TRANSIENT_REGIONS, DTensor, Node, NodesOp, ProgramOp
from tr_mlir.passes._conv_algo import node_algorithm, winograd_variants
from tr_mlir.passes._dataflow import live_after, touches
from tr_mlir.passes.memplan_build_graph import TRAIN_GRAPH, graph_programs

_PREC = "FP32"


def _alike(tables: list[dict[int, DTensor]], a: int, b: int) -> bool:
    """Whether DTensors ``a`` and ``b`` are both transient (:data:`TRANSIENT_REGIONS
    <tr_mlir.dialects.memplan.TRANSIENT_REGIONS>`: recomputed every step, placed by lifetime) with
    the same dtype and shape in every plan (``tables``: each plan's
    :meth:`~tr_mlir.dialects.memplan.PlanOp.by_id`). (The skip gradient is often written over the
    forward's ``add`` output, a feature, and the conv's input gradient is a gradient slot.)"""
    for by_id in tables:
        ta, tb = by_id.get(a), by_id.get(b)
        if ta is None or tb is None or ta.region not in TRANSIENT_REGIONS or tb.region not in TRANSIENT_REGIONS \
                or (ta.dtype, tuple(ta.shape)) != (tb.dtype, tuple(tb.shape)):
            return False
    return True


def _fuse(program: ProgramOp) -> int:
    """Rewrite the triples of ``program``'s ``@train`` graph (module doc); returns how many."""
    graph = next(g for g in program.graphs() if g.graph_name == TRAIN_GRAPH)
    by_region = region_members(program.plans()[0].tensors())
    tables = [plan.by_id() for plan in program.plans()]
    params = graph.params.data
    variants = winograd_variants(K.CONV_BWD)  # the input-gradient algorithms whose output transform adds
    acc_op, conv_op = K.GRAD_ACCUM.op(_PREC), K.CONV_BWD.op(_PREC)
    count = 0
    for gid, bucket in list(graph.buckets().items()):
        nodes = bucket.nodes()
        j = 0
        while j < len(nodes):
            acc = nodes[j]
            found = (_triple(nodes, j, params, by_region) if acc.op == acc_op and len(acc.inputs) == 2
                     and acc.outputs == acc.inputs[1:] and not acc.skipped else None)
            if found is None:
                j += 1
                continue
            k, i = found
            t, d = acc.inputs
            conv = nodes[i]
            if (conv.op != conv_op or node_algorithm(graph, conv, "algo_dgrad") not in variants
                    or not _alike(tables, t, d)
                    or live_after(graph, gid, j, (t,), by_region, wrap=True)):
                j += 1
                continue
            writer = nodes[k]
            nodes[k] = replace(writer, outputs=tuple(d if o == t else o for o in writer.outputs))
            nodes[i] = replace(conv, inputs=(*conv.inputs, d))
            del nodes[j]
            new = NodesOp(gid, nodes)  # the next checks (live_after) read the rewritten bucket
            Rewriter.replace_op(bucket, new)
            bucket = new
            count += 1
    return count


def _triple(nodes: list[Node], j: int, params, by_region) -> tuple[int, int] | None:
    """``(k, i)`` for the ``grad_accum`` node ``nodes[j]`` ``(T, D) -> (D)``: ``i`` the conv
    backward writing ``D`` (the last node before ``j`` touching ``D``, with three inputs and ``D``
    its first output, not skipped), ``k`` the writer of ``T`` (the last node before ``i`` touching
    ``T``, overwriting it, touching ``D`` nowhere); no node between ``k`` and ``j`` touches ``T``
    or ``D``. None otherwise."""
    t, d = nodes[j].inputs
    if t == d:
        return None

    def touched(n: Node) -> frozenset[int]:
        reads, writes = touches(n, params, by_region)
        return reads | writes

    i = next((p for p in range(j - 1, -1, -1) if d in touched(nodes[p])), None)
    if i is None or t in touched(nodes[i]):
        return None
    conv = nodes[i]
    if len(conv.inputs) != 3 or not conv.outputs or conv.outputs[0] != d or d in conv.outputs[1:] \
            or d in conv.inputs or 0 in conv.skipped:
        return None
    k = next((p for p in range(i - 1, -1, -1) if t in touched(nodes[p])), None)
    if k is None:
        return None
    writer = nodes[k]
    reads, writes = touches(writer, params, by_region)
    if t not in writes or t in reads or d in reads | writes or writer.outputs.count(t) != 1:
        return None
    # between k and j nothing else touches T, nor D (after i: i is the last node before j touching it)
    if any(t in touched(n) or d in touched(n) for n in nodes[k + 1:i]) or any(t in touched(n) for n in nodes[i + 1:j]):
        return None
    return k, i


@dataclass(frozen=True)
class MemplanFuseGradAccPass(ModulePass):
    """Let every program's Winograd input gradients add the residual join's skip gradient (see
    the module doc)."""

    name = "memplan-fuse-grad-acc"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for _, program in graph_programs(op, self.name, "the atlas names the nodes it rewrites"):
            _fuse(program)
