"""``memplan-skip-dead-outputs``: mark the optional kernel outputs whose value no node reads.

Some kernels may leave an output out: the input gradient ``dx`` of ``FC_*_BWD``, ``CONV_*_BWD``
and the batch-norm backward is *optional* (the kernel implementation takes ``None`` there and
skips that GEMM). Which outputs are optional is the kernel's: the arguments its implementation
writes and accepts as ``None`` (:attr:`~tr_mlir.dialects.kernels.KernelImpl.optional` and
``writes``, read through :func:`tr_mlir.dialects.kernels.implementation`), never a list of ops
here. The case that matters is the first layer after a reshape of the model input (the MLP's
first FC after ``flatten``): its input gradient only feeds the no-op backward of the reshape,
and computing it costs a GEMM as large as the layer's forward.

Analysis. Over every training step order the runtime replays
(:func:`tr_mlir.dialects.lifetimes.training_step_orders`, each a cycle: step after step) and
every training variant (resolved through the atlas), an output DTensor of a node is *dead* when
its region is a feature or gradient-slot region (``F_*``: transient values, never read by the
host) and the next node that touches it, cyclically, writes it without reading it (a RANGE node
touches every DTensor of its spans). A node that runs in no training step order keeps all its
outputs; a node shared by several variants or step orders is marked only where the output is dead
in all of them. The verdict is recorded on the bucket's ``memplan.nodes`` op as the attribute
``skip_outputs``: ``(node index, output position)`` pairs, flat (:data:`~tr_mlir.dialects.memplan.SKIP_OUTPUTS`)::

    memplan.nodes first_layer_bwd_a ops = ["FC_FP32_BWD_FIRST_LAYER"] ...
    memplan.nodes deep_fwd_bwd ops = [..., "FC_FP32_BWD"] ... {skip_outputs = array<i64: 7, 0>}

(node 7 of ``deep_fwd_bwd``, the first FC's backward, does not write its output 0, ``dx``). The
executable binds a skipped output as ``None`` and does nothing else: it makes no decision of its
own. Skipping a write changes no other value, so the lifetimes (``memplan-assign-offsets``) stay
those of the full graph: the pass may run before or after the placement. It always recomputes
the attribute (a rerun replaces it).

It runs in ``memplan-compile`` after ``memplan-build-atlas`` (it needs the graphs and the atlas);
no options. Diagnostics: a program without graphs or atlas (run ``memplan-build-atlas`` first).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from tr_mlir.dialects.kernels import skippable_outputs
from tr_mlir.dialects.lifetimes import training_step_orders
from tr_mlir.dialects.memplan import (
    SKIP_OUTPUTS,
    VARIANTS,
    AtlasOp,
    GraphId,
    MemRegion,
    Node,
    ProgramOp,
    i64_array,
    is_train_variant,
)
from tr_mlir.passes._descriptors_program import model_programs
from tr_mlir.passes._model import fail

FEATURE_REGIONS = frozenset({MemRegion.F_FEATURE_FP32, MemRegion.F_GRAD_SLOT_FP32, MemRegion.F_FEATURE_FP16,
                             MemRegion.F_GRAD_SLOT_FP16})
"""The regions whose DTensors may be left unwritten: features and gradient slots (transient values
of one step that the host never reads)."""

Where = tuple[str, GraphId, int]
"""A node's place: (graph name, GraphId, index in the bucket)."""


def optional_outputs(node: Node) -> frozenset[int]:
    """Positions in ``node.outputs`` of the outputs its kernel may leave out: an argument of the
    operand row that the implementation writes and accepts as ``None``, and not one the node
    has its kernel add into (``adds_into``: its old value is read). Empty for a node op without a
    kernel or operand row (nothing is skipped there)."""
    return skippable_outputs(node.op, len(node.outputs), len(node.inputs))


def _sequences(program: ProgramOp, atlas: AtlasOp) -> Iterable[list[tuple[Where, Node]]]:
    """The node sequence of every (training variant, training step order) pair."""
    graphs = {g.graph_name: g for g in program.graphs()}
    keys = atlas.keys()
    for variant, name in enumerate(VARIANTS):
        if not is_train_variant(name):
            continue
        for order in training_step_orders():
            nodes: list[tuple[Where, Node]] = []
            for gid in order:
                slot = atlas.slot(variant, gid)
                if slot >= 0:
                    gname = keys[slot][0]
                    nodes += [((gname, gid, i), n) for i, n in enumerate(graphs[gname].nodes(gid))]
            yield nodes


def dead_outputs(program: ProgramOp) -> dict[Where, frozenset[int]]:
    """Node place -> the positions of its optional outputs that are dead in every training
    sequence that runs it (module doc)."""
    atlases = program.ops_of(AtlasOp)
    plan = program.plans()[0]
    tensors = {t.id: t for t in plan.tensors()}
    by_region: dict[int, list[int]] = {}
    for t in tensors.values():
        if t.slot:
            by_region.setdefault(int(t.region), []).append(t.id)

    def expand(ids: Sequence[int], spans: Sequence[tuple[MemRegion, MemRegion]]) -> frozenset[int]:
        out = set(ids)
        for a, b in spans:
            for r in range(a, b + 1):
                out.update(by_region.get(r, ()))
        return frozenset(out)

    verdict: dict[tuple[Where, int], bool] = {}
    for nodes in _sequences(program, atlases[0]):
        rw = [(expand(n.inputs, n.in_ranges), expand(n.outputs, n.out_ranges)) for _, n in nodes]
        touch: dict[int, list[int]] = {}
        for q, (r, w) in enumerate(rw):
            for tid in r | w:
                touch.setdefault(tid, []).append(q)
        size = len(nodes)
        for p, (where, node) in enumerate(nodes):
            for pos in optional_outputs(node):
                tid = node.outputs[pos]
                if tensors[tid].region not in FEATURE_REGIONS:
                    continue
                pos_list = touch[tid]
                k = bisect.bisect_right(pos_list, p)
                q = pos_list[k] if k < len(pos_list) else pos_list[0] + size  # the next touch, cyclically
                r, w = rw[q % size]
                dead = q % size != p and tid not in r and tid in w
                verdict[(where, pos)] = verdict.get((where, pos), True) and dead
    out: dict[Where, set[int]] = {}
    for (where, pos), dead in verdict.items():
        if dead:
            out.setdefault(where, set()).add(pos)
    return {w: frozenset(s) for w, s in out.items()}


def mark(program: ProgramOp, dead: dict[Where, frozenset[int]]) -> None:
    """Write ``skip_outputs`` on every ``memplan.nodes`` op of ``program`` (removed where none)."""
    for graph in program.graphs():
        for gid, op in graph.buckets().items():
            pairs = [v for i in range(len(op.ops.data)) for pos in sorted(dead.get((graph.graph_name, gid, i), ()))
                     for v in (i, pos)]
            if pairs:
                op.attributes[SKIP_OUTPUTS] = i64_array(pairs)
            else:
                op.attributes.pop(SKIP_OUTPUTS, None)


@dataclass(frozen=True)
class MemplanSkipDeadOutputsPass(ModulePass):
    """Mark the dead optional outputs of every program's graphs (see the module doc)."""

    name = "memplan-skip-dead-outputs"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for model, program in model_programs(op, self.name):
            assert program is not None
            if not program.graphs() or not program.ops_of(AtlasOp) or not program.plans():
                fail(model, f"'{model.name}' op @{model.sym_name.data}: {self.name} needs the program's graphs "
                            f"and atlas; run memplan-build-atlas first (or memplan-compile)")
            mark(program, dead_outputs(program))
