"""``memplan-share-variants``: Compiler phase 5, the variants point at their plan and the shared graphs.

The seed's ``share_or_clone`` (facts sheet section 8.6): every variant uses the one inference graph,
and every ``train_*`` variant the one training graph; ``val_*`` variants get no train graph. No
graph is cloned: graphs hold DTensor ids only, and ids are identical in all six plans, so one
topology serves every variant; each variant gets its own plan ``@plan_<variant>`` (its shapes).

Sharing is only sound when each graph is valid against every plan it is shared with; this pass
checks what the verifier does not: every DTensor a node of a shared graph names has bytes in the
plans (a node on a zero-byte placeholder, e.g. an fp16 copy in an fp32 plan, would read or write
outside its slot). Diagnostics: no plans or graphs (run ``memplan-create-plans`` /
``memplan-build-graph`` first); a node on a zero-byte DTensor.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, SymbolRefAttr
from xdsl.passes import ModulePass

from tr_mlir.dialects.memplan import VARIANTS, GraphOp, PlanOp, ProgramOp, is_train_variant
from tr_mlir.passes._descriptors_program import fail, model_programs
from tr_mlir.passes.memplan_build_graph import INFER_GRAPH, TRAIN_GRAPH


def plan_name(variant: str) -> str:
    """The plan symbol of a variant (``@plan_train_base``), as ``memplan-create-plans`` names it."""
    return f"plan_{variant}"


def _check_graph(graph: GraphOp, plan: PlanOp) -> None:
    by_id = plan.by_id()
    for gid, nodes_op in graph.buckets().items():
        for k, node in enumerate(nodes_op.nodes()):
            for i in node.inputs + node.outputs:
                t = by_id.get(i)
                if t is not None and t.slot == 0:
                    fail(nodes_op, f"'memplan.nodes' op node {k} ({node.op}) of @{graph.graph_name} "
                                   f"({gid.value}) uses DTensor {i} '{t.name}', which has no bytes in "
                                   f"@{plan.plan_name} (region {t.region.name} is off in this configuration)")


def share_variants(program: ProgramOp) -> None:
    """Set ``plan``, ``train`` (train variants only) and ``infer`` of every variant of ``program``."""
    plans = {p.plan_name: p for p in program.plans()}
    graphs = {g.graph_name: g for g in program.graphs()}
    variants = program.variants()
    if len(variants) != len(VARIANTS):
        fail(program, "'memplan.program' op has no variants; run memplan-derive-shapes first")
    if TRAIN_GRAPH not in graphs or INFER_GRAPH not in graphs:
        fail(program, f"'memplan.program' op needs the graphs @{TRAIN_GRAPH} and @{INFER_GRAPH}; "
                      f"run memplan-build-graph first")
    missing = [plan_name(v) for v in VARIANTS if plan_name(v) not in plans]
    if plan_name(VARIANTS[0]) in plans:
        base = plans[plan_name(VARIANTS[0])]
        for graph in (graphs[TRAIN_GRAPH], graphs[INFER_GRAPH]):
            _check_graph(graph, base)  # slots are shared by the six plans (verified)
    if missing:
        fail(program, f"'memplan.program' op has no plan @{missing[0]}; run memplan-create-plans first")
    for v in variants:
        v.plan = SymbolRefAttr(plan_name(v.variant_name))
        v.infer = SymbolRefAttr(INFER_GRAPH)
        v.train = SymbolRefAttr(TRAIN_GRAPH) if is_train_variant(v.variant_name) else None


@dataclass(frozen=True)
class MemplanShareVariantsPass(ModulePass):
    """Phase 5: link every variant to its plan and to the shared graphs (see the module doc)."""

    name = "memplan-share-variants"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for _model, program in model_programs(op, self.name):
            assert program is not None
            share_variants(program)
