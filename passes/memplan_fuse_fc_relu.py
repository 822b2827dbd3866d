"""``memplan-fuse-fc-relu``: an FC and the ReLU next to it as one GEMM with a ReLU epilogue.

The seed's MLP is ``fc``, ``relu``, ``fc``, ... as separate layers, so ``memplan-build-graph``
emits each ReLU as its own pass over memory: ``relu_fwd`` after the FC that feeds it, and
``relu_bwd_from_output`` after the backward of the FC it feeds. This pass rewrites the adjacent
pairs of the ``@train`` graph's buckets into the fused kernels of the vocabulary
(:mod:`tr_mlir.dialects.kernels`), which apply the ReLU to each GEMM block while it is in cache
(``lowering/cpu/dense.py``, ``lowering/cuda/kernels/gemm.cu``)::

    FC_<P>_FWD (x, w[, b]) -> t ; RELU_<P>_FWD (t) -> y
        => FC_RELU_<P>_FWD (x, w[, b]) -> y
    FC_<P>_BWD (dy, w, x) -> (g, dw[, db]) ; RELU_<P>_BWD_FROM_OUTPUT (g, x) -> dx
        => RELU_FC_<P>_BWD (dy, w, x) -> (dx, dw[, db])

The forward pair: the ReLU in the output form (no mask output) reading only the FC's output
``t``. The backward pair: the ReLU backward reading the FC's input gradient ``g`` and, as its
output ``y``, the FC's own input ``x`` (the FC is fed by that ReLU, so ``x > 0`` is the ReLU's
gate), writing a ``dx`` that is none of the FC's inputs. In both, the intermediate (``t``,
``g``) must be dead after the ReLU: following every training step order
(:func:`tr_mlir.dialects.lifetimes.training_step_orders`) cyclically from the ReLU (the next step
comes round to the FC again), its next touch is a write without a read, or nothing touches it
(reads and writes by the kernel vocabulary, :func:`tr_mlir.passes._dataflow.live_after`). The
fused node keeps the FC's param entry (its ``bias`` condition) and the FC's position.

The fused kernels give the unfused pair's bits (the ReLU expressions of the unfused kernels, in
the epilogue or after the GEMM), so training is bit-identical with and without the pass
(tests/test_fuse_fc_relu.py). The intermediate ``t`` is then written only by the backward, and
``g`` by nothing: ``memplan-assign-offsets`` sees the shorter lifetimes. The ``@infer`` graph
stays unfused (``relu_inf`` rounds ``-0`` as ``np.maximum`` does, not as ``relu_fwd``).

It runs in ``memplan-compile`` right after ``memplan-build-graph``; no options; running it
again changes nothing. Diagnostics: a program without its ``@train`` graph (run
``memplan-build-graph`` first), and one that already has its atlas (run it before
``memplan-build-atlas``). Measured on the seed's MLP (batch 200, one thread; ``python -m
bench.profile mlp``): see bench/README.md, "FC+ReLU epilogue".
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from tr_mlir.dialects.kernels import K, KernelId
from tr_mlir.dialects.lifetimes import region_members
from tr_mlir.dialects.memplan import Node, NodesOp, ProgramOp
from tr_mlir.passes._dataflow import live_after
from tr_mlir.passes.memplan_build_graph import TRAIN_GRAPH, graph_programs


def _ops(kind: KernelId) -> dict[str, str]:
    """Node op -> its precision, over ``kind``'s precisions."""
    return {kind.op(p): p for p in kind.precisions}


def _fuse_forward(fc: Node, relu: Node, prec: str) -> tuple[Node, int] | None:
    """The fused forward of ``fc`` then ``relu`` and the dead intermediate, or None. The FC's
    outputs after ``y`` are its workspaces (AMP's fp32 buffers), the fused kernel's too."""
    if not fc.outputs or len(relu.inputs) != 1 or len(relu.outputs) != 1 or relu.in_ranges or relu.out_ranges:
        return None
    t, y = fc.outputs[0], relu.outputs[0]
    if relu.inputs[0] != t or y in fc.outputs or y in fc.inputs or relu.skipped or fc.skipped:
        return None
    return Node(K.FC_RELU_FWD.op(prec), fc.inputs, (y, *fc.outputs[1:]), param=fc.param), t


def _fuse_backward(fc: Node, relu: Node, prec: str) -> tuple[Node, int] | None:
    """The fused backward of ``fc`` then ``relu`` (the ReLU that feeds the FC) and the dead
    intermediate, or None (``dw``, ``db`` and the workspaces after ``dx`` as the FC's)."""
    if len(fc.inputs) != 3 or len(fc.outputs) < 2 or fc.skipped or len(relu.inputs) != 2 or len(relu.outputs) != 1:
        return None
    g, x = fc.outputs[0], fc.inputs[2]
    dx = relu.outputs[0]
    if relu.inputs != (g, x) or dx in fc.inputs or dx in fc.outputs[1:] or relu.skipped:
        return None
    return Node(K.RELU_FC_BWD.op(prec), fc.inputs, (dx, *fc.outputs[1:]), param=fc.param), g


def _fuse(program: ProgramOp) -> int:
    """Rewrite the fusable pairs of ``program``'s ``@train`` graph (module doc); returns how many.
    The program must have its ``@train`` graph and no atlas yet (:func:`graph_programs` checks;
    on a compiled program the rewrite would leave the atlas and offsets naming nodes it removed)."""
    graph = next(g for g in program.graphs() if g.graph_name == TRAIN_GRAPH)
    by_region = region_members(program.plans()[0].tensors())
    rules = ((_ops(K.FC_FWD), _ops(K.RELU_FWD), _fuse_forward),
             (_ops(K.FC_BWD), _ops(K.RELU_BWD_FROM_OUTPUT), _fuse_backward))
    count = 0
    for gid, bucket in list(graph.buckets().items()):
        nodes = bucket.nodes()
        i = 0
        while i + 1 < len(nodes):
            fc, relu = nodes[i], nodes[i + 1]
            for fc_ops, relu_ops, rule in rules:
                prec = fc_ops.get(fc.op)
                if prec is None or relu_ops.get(relu.op) != prec:
                    continue
                fused = rule(fc, relu, prec)
                if fused is not None and not live_after(graph, gid, i + 1, (fused[1],), by_region, wrap=True):
                    nodes[i:i + 2] = [fused[0]]
                    # the next checks read the rewritten bucket
                    new = NodesOp(gid, nodes)
                    Rewriter.replace_op(bucket, new)
                    bucket = new
                    count += 1
                break
            i += 1
    return count


@dataclass(frozen=True)
class MemplanFuseFcReluPass(ModulePass):
    """Fuse every program's adjacent FC and ReLU nodes (see the module doc)."""

    name = "memplan-fuse-fc-relu"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for _, program in graph_programs(op, self.name, "the atlas names the nodes it rewrites"):
            _fuse(program)
