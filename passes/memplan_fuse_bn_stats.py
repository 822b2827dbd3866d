"""``memplan-fuse-bn-stats``: batch-norm statistics computed by the conv that writes the activation.

A conv followed by a batch norm reads its output twice in the forward: the BN's statistics pass
(per-channel sums over the whole activation), then its normalize pass. The seed's conv already
has the two outputs that remove the first read: its descriptor gives every conv the (1, 1, 1, K)
fp32 DTensors ``conv_sum`` and ``conv_sq_sum`` (cuDNN's "genstats"), which no kernel wrote until
now. This pass makes the ``@train`` graph use them::

    CONV_FP32_FWD (x, w) -> (y, sum, sq_sum)          {algo = "winograd_..."}
    BN2D_[ADD_]RELU_FP32_FWD | BN2D_FP32_FWD (y, ..., eps, momentum) -> (...)
        => CONV_FP32_FWD (x, w) -> (y, sum, sq_sum)   {algo = "winograd_...", bn_stats = true}
           BN2D_... (y, ..., eps, momentum, sum, sq_sum) -> (...)

``bn_stats = true`` binds the conv kernel's ``sum`` and ``sq_sum`` arguments (the ``when``
condition of the ``CONV_FWD`` operand row, :mod:`tr_mlir.dialects.kernels`); the BN forward takes
them as its trailing optional inputs and skips its statistics pass. What the kernels compute,
and how accurately: :mod:`tr_mlir.lowering.cpu.conv_stats` (``sum = sum y``, ``sq_sum = sum
(y - mean)^2``, float64 sums rounded to fp32 once).

Which pairs. The conv is an fp32 training forward whose forward algorithm is a Winograd variant
(the kernel's :attr:`~tr_mlir.dialects.kernels.AlgorithmTable.variants`, recorded by
``memplan-select-conv-algo``): its output transform is the compiler's own code, which adds each
chunk of output to the sums while it is in cache; an im2col, pointwise or direct conv's output is
written by the BLAS or a kernel that does not sum, where the pass would only move the BN's pass
into the conv. The first node after the conv in its bucket that reads ``y`` must be a ``BN2D``
forward (plain, +ReLU, or +add+ReLU, fp32) reading ``y`` as its ``x`` (not as the residual
operand) and not fused already; no node between them writes ``y``. Everything else stays as it
is, so ``conv-algo=im2col`` compiles exactly as without this pass, and so does the ``@infer``
graph.

Measured on CIFAR ResNet-18 (batch 64, Zen 5 host): see bench/README.md, "BN statistics in the
conv's output pass". The numbers change in the last bits (the sums are taken in another order),
so training with and without the pass is not bit-identical; each is deterministic for a given
thread count, and both are checked against PyTorch (tests/test_fuse_bn_stats.py).

It runs in ``memplan-compile`` after ``memplan-build-graph`` and ``memplan-fuse-fc-relu`` (option
``fuse_bn_stats``, default on); no options of its own; running it again changes nothing. Diagnostics as
``memplan-fuse-fc-relu``: a program without its ``@train`` graph, or one with its atlas already.
The program verifier (every compile, ``tr-opt``) refuses a BN forward whose statistics inputs are
not both the bound ``sum`` / ``sq_sum`` of the node that writes its input.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from xdsl.context import Context
from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, IntegerAttr, ModuleOp, i1
from xdsl.rewriter import Rewriter
from xdsl.passes import ModulePass

from tr_mlir.dialects.kernels import K, operands_for
from tr_mlir.dialects.memplan import Node, NodesOp, ProgramOp
from tr_mlir.passes._conv_algo import node_algorithm, winograd_variants
from tr_mlir.passes._dataflow import static_flag
from tr_mlir.passes.memplan_build_graph import TRAIN_GRAPH, graph_programs

FLAG = "bn_stats"
"""The conv node's static param that binds its ``sum`` and ``sq_sum`` outputs (the ``when``
condition of its operand row)."""

_PREC = "FP32"
_BN_FORWARDS = (K.BN2D_FWD, K.BN2D_RELU_FWD, K.BN2D_ADD_RELU_FWD)


def _bn_for(nodes: list[Node], i: int) -> int | None:
    """The index of the BN forward that takes the statistics of conv ``nodes[i]``, or None."""
    conv = nodes[i]
    y = conv.outputs[0]
    ops = {kind.op(_PREC): kind for kind in _BN_FORWARDS}
    for j in range(i + 1, len(nodes)):
        node = nodes[j]
        if y in node.inputs:
            kind = ops.get(node.op)
            if kind is None or node.inputs[0] != y or y in node.inputs[1:] or node.skipped:
                return None
            row = operands_for(node.op)
            return j if len(node.inputs) == row.required_ins else None
        if y in node.outputs or node.out_ranges:  # a range op in between: not followed (the safe side)
            return None
    return None


def _fuse(program: ProgramOp) -> int:
    """Rewrite the conv / BN pairs of ``program``'s ``@train`` graph (module doc); returns how many."""
    graph = next(g for g in program.graphs() if g.graph_name == TRAIN_GRAPH)
    variants = winograd_variants(K.CONV_FWD)  # the forward algorithms whose output pass sums the statistics
    table = list(graph.params.data)
    flagged: dict[int, int] = {}  # conv param entry -> the same entry with bn_stats = true
    count = 0
    conv_op = K.CONV_FWD.op(_PREC)
    for gid, bucket in list(graph.buckets().items()):
        nodes = bucket.nodes()
        changed = False
        for i, conv in enumerate(nodes):
            if conv.op != conv_op or len(conv.outputs) < 3 or 1 in conv.skipped or 2 in conv.skipped:
                continue
            if node_algorithm(graph, conv, "algo") not in variants or static_flag(graph.params.data, conv, FLAG):
                continue
            j = _bn_for(nodes, i)
            if j is None:
                continue
            if conv.param not in flagged:
                entry = dict(table[conv.param].data)
                entry[FLAG] = IntegerAttr(1, i1)
                flagged[conv.param] = len(table)
                table.append(DictionaryAttr(dict(sorted(entry.items()))))
            nodes[i] = replace(conv, param=flagged[conv.param])
            nodes[j] = replace(nodes[j], inputs=(*nodes[j].inputs, conv.outputs[1], conv.outputs[2]))
            changed = True
            count += 1
        if changed:
            Rewriter.replace_op(bucket, NodesOp(gid, nodes))
    if flagged:
        graph.properties["params"] = ArrayAttr(table)
    return count


@dataclass(frozen=True)
class MemplanFuseBnStatsPass(ModulePass):
    """Let every program's Winograd training convs write the statistics of the batch norm after
    them (see the module doc)."""

    name = "memplan-fuse-bn-stats"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for _, program in graph_programs(op, self.name, "the atlas names the nodes it rewrites"):
            _fuse(program)
