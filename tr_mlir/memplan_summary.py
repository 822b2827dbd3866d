"""``tr-opt -t memplan-summary``: a readable table of a compiled memplan program.

For every ``memplan.program`` of the module: one header line (model, target, optimizer, amp,
arena bytes, DTensor and capture-key counts); the conv algorithm mix (:func:`conv_algorithms`: convs
per direction and algorithm, as ``memplan-select-conv-algo`` chose them); once the program has its graphs and atlas, the memory
lines of :func:`memory_lines` (the transient pool, the liveness lower bound, the node at the peak
and the largest tensors live there: "why is my model out of memory"); then one table per variant:

* its batch, resolution, plan and graphs;
* per non-empty region: the bytes reserved in the arena (identical in all six plans), the bytes
  this variant's shapes actually use (the same slot formula on the variant's shapes: ``last`` and
  ``lowres`` variants use less of the shared slots), and the DTensor count;
* per GraphId with a slot (from the atlas; without one, the buckets of the variant's graphs): the
  graph, the node count, the capture key (shared keys show where a graph is captured once).

Raises :class:`MemplanSummaryError` (a diagnostic) when the module holds no ``memplan.program``
with plans.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import IO

from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.utils.exceptions import DiagnosticException

from tr_mlir.dialects.memplan import (
    AtlasOp,
    GraphId,
    GraphOp,
    MemRegion,
    PlanOp,
    ProgramOp,
    VariantOp,
    is_train_variant,
    slot_bytes,
)
from tr_mlir.errors import TrMlirError


class MemplanSummaryError(TrMlirError, ValueError, DiagnosticException):
    """The module has nothing to summarize (no ``memplan.program`` with plans)."""


def _n(x: int) -> str:
    return f"{x:,}"


def _graph_slots(program: ProgramOp, v_index: int, variant: VariantOp) -> Iterator[tuple[GraphId, str, int, str]]:
    """(GraphId, graph, node count, key) for every GraphId the variant runs."""
    graphs = {g.graph_name: g for g in program.graphs()}
    atlases = program.ops_of(AtlasOp)
    if atlases:
        atlas = atlases[0]
        keys = atlas.keys()
        for gid in GraphId:
            k = atlas.slot(v_index, gid)
            if k < 0:
                continue
            graph = graphs[keys[k][0]]
            yield gid, f"@{graph.graph_name}", len(graph.nodes(gid)), str(k)
        return
    linked: list[GraphOp] = []
    for ref in (variant.train, variant.infer):
        if ref is not None and ref.root_reference.data in graphs:
            linked.append(graphs[ref.root_reference.data])
    if not linked:  # before phase 5: train variants run both graphs, val variants only @infer
        linked = [g for n, g in graphs.items() if is_train_variant(variant.variant_name) or n == "infer"]
    for gid in GraphId:
        for graph in linked:
            if gid in graph.buckets():
                yield gid, f"@{graph.graph_name}", len(graph.nodes(gid)), "-"
                break


def summarize(program: ProgramOp) -> str:
    """The summary text of one program (see the module doc)."""
    plans = {p.plan_name: p for p in program.plans()}
    if not plans:
        raise MemplanSummaryError(f"'memplan.program' op for @{program.model_name} has no plans; "
                                  f"memplan-summary needs a compiled program (run memplan-compile)")
    spec = program.spec
    variants = program.variants()
    base = next(iter(plans.values()))
    atlases = program.ops_of(AtlasOp)
    head = [f"memplan.program for @{program.model_name}"]
    if spec is not None:
        head.append(f"target {spec.target_kind.value}, optimizer {spec.optimizer_kind.value}")
    if variants:
        head.append("amp" if variants[0].is_amp else "fp32")
    head.append(f"arena {_n(base.size)} bytes, {len(base)} DTensors, {len(program.graphs())} graphs")
    if atlases:
        head.append(f"{len(atlases[0].keys())} capture keys")
    lines = [": ".join([head[0], ", ".join(head[1:])])]
    mix = conv_algorithms(program)
    if any(mix.values()):
        lines.append(f"conv algorithms (convs per direction): {format_conv_algorithms(mix)}")
    lines += memory_lines(program)
    for v_index, variant in enumerate(variants):
        name = variant.variant_name
        plan: PlanOp | None = None
        if variant.plan is not None:
            plan = plans.get(variant.plan.root_reference.data)
        plan = plan or plans.get(f"plan_{name}")
        links = " ".join(f"{k} @{getattr(variant, k).root_reference.data}"
                         for k in ("plan", "train", "infer") if getattr(variant, k) is not None)
        lines += ["", f"variant {name}: batch {variant.batch_size}, resolution {variant.resolution}"
                      + (f", {links}" if links else "")]
        if plan is not None:
            lines += _region_table(plan)
        slots = list(_graph_slots(program, v_index, variant))
        if slots:
            lines.append(f"  {'GraphId':<30} {'graph':<8} {'nodes':>6} {'key':>5}")
            lines += [f"  {gid.value:<30} {g:<8} {count:>6} {key:>5}" for gid, g, count, key in slots]
            lines.append(f"  {'total':<30} {'':<8} {sum(s[2] for s in slots):>6}")
    return "\n".join(lines) + "\n"


def conv_algorithms(program: ProgramOp) -> dict[str, Counter[str]]:
    """Direction (``fwd``, ``dgrad``, ``wgrad``) -> algorithm -> number of convs, read from the conv
    nodes' params in the ``@train`` graph (one forward and one backward node per conv: the A copy of
    the first layer's; ``auto`` where no algorithm is recorded, the kernel's default)."""
    from tr_mlir.lowering.cpu import KERNELS, kernel_name
    from tr_mlir.lowering.cpu.conv import AUTO, DIRECTIONS
    from tr_mlir.lowering.operands import operands_for

    mix: dict[str, Counter[str]] = {d: Counter() for d in DIRECTIONS.values()}
    train = next((g for g in program.graphs() if g.graph_name == "train"), None)
    if train is None:
        return mix
    table = [{k: v.data for k, v in d.data.items() if isinstance(v, StringAttr)} for d in train.params.data]
    for gid in (GraphId.FIRST_LAYER_FWD_A, GraphId.DEEP_FWD_BWD, GraphId.FIRST_LAYER_BWD_A):
        for node in train.nodes(gid):
            spec = KERNELS.get(kernel_name(node.op))
            if spec is None or not set(DIRECTIONS) & set(spec.params):
                continue
            params = table[node.param] if node.param >= 0 else {}
            named, _ = operands_for(node.op).named(node.inputs, node.outputs, params, node.op)
            names = ["algo"] if "dy" not in named else ["algo_wgrad", *(["algo_dgrad"] if "dx" in named else [])]
            for name in names:
                mix[DIRECTIONS[name]][params.get(name, AUTO)] += 1
    return mix


def format_conv_algorithms(mix: dict[str, Counter[str]]) -> str:
    """``fwd im2col 3, direct 2; dgrad ...; wgrad ...`` (most used first; ``-`` for none)."""
    return "; ".join(f"{d} " + (", ".join(f"{a} {n}" for a, n in mix[d].most_common()) or "-") for d in mix)


def memory_lines(program: ProgramOp, top: int = 5) -> list[str]:
    """The memory lines of the summary (empty before the program has plans, graphs and an atlas).

    * the layout: the transient pool of ``memplan-assign-offsets`` (its bytes against the sum of
      the transient slots it holds), or the seed's one slot per DTensor (``reuse=false``);
    * the liveness lower bound (:func:`tr_mlir.dialects.lifetimes.lower_bound`): persistent bytes
      plus the largest sum of transient slots live at one node, and arena / bound;
    * the node where that peak is reached and the ``top`` largest DTensors live there.
    """
    from tr_mlir.dialects.lifetimes import analyze, lower_bound

    plans = program.plans()
    if not plans or not program.graphs() or not program.ops_of(AtlasOp):
        return []
    plan = plans[0]
    life = analyze(program, plan)
    rows = sorted(plan.tensors(), key=lambda t: t.id)
    slots = [t.slot for t in rows]
    transient_bytes = sum(slots[i] for i in life.transient)
    persistent = sum(t.slot for t in rows if t.id not in life.transient)
    peak, at = lower_bound(life, slots)
    bound = persistent + peak
    pool = plan.transient_pool
    if pool is not None:
        layout = (f"transient pool {_n(pool[1])} bytes for {len(life.transient)} transient DTensors of "
                  f"{_n(transient_bytes)} bytes (placed by lifetime)")
    else:
        layout = (f"one slot per DTensor (reuse=false): {len(life.transient)} transient DTensors of "
                  f"{_n(transient_bytes)} bytes")
    lines = [f"memory: {layout}",
             f"  liveness lower bound {_n(bound)} bytes = persistent {_n(persistent)} + transient peak {_n(peak)}; "
             f"arena / bound {plan.size / max(bound, 1):.3f}"]
    if life.length:
        live = sorted(life.live_at(at), key=lambda i: (-slots[i], i))
        largest = ", ".join(f"{rows[i].name} {_n(slots[i])}" for i in live[:top])
        lines.append(f"  peak at {life.step_at(at).where}: {len(live)} live, largest {largest}")
    return lines


def _region_table(plan: PlanOp) -> list[str]:
    reserved: dict[MemRegion, int] = {}
    used: dict[MemRegion, int] = {}
    count: dict[MemRegion, int] = {}
    for t in plan.tensors():
        count[t.region] = count.get(t.region, 0) + 1
        if t.slot:
            used[t.region] = used.get(t.region, 0) + slot_bytes(t.shape, t.dtype, t.region, plan.target_kind)
    for r in MemRegion:
        if plan.region_size(r):
            reserved[r] = plan.region_size(r)
    rows = [f"  {'region':<22} {'reserved bytes':>16} {'used bytes':>16} {'DTensors':>9}"]
    for r in MemRegion:
        if r in reserved or r in count:
            rows.append(f"  {r.name:<22} {_n(reserved.get(r, 0)):>16} {_n(used.get(r, 0)):>16} {count.get(r, 0):>9}")
    pool = plan.transient_pool
    if pool is not None:
        rows.append(f"  {'transient pool':<22} {_n(pool[1]):>16}")
    rows.append(f"  {'total':<22} {_n(plan.size):>16} {_n(sum(used.values())):>16} {len(plan):>9}")
    return rows


def print_memplan_summary(module: ModuleOp, stream: IO[str]) -> None:
    """Write :func:`summarize` of every program of ``module`` to ``stream`` (``tr-opt -t
    memplan-summary``); raises :class:`MemplanSummaryError` when there is none."""
    programs = [op for op in module.walk() if isinstance(op, ProgramOp)]
    if not programs:
        raise MemplanSummaryError("memplan-summary: the module has no 'memplan.program'; compile it first "
                                  "(tr-compile or memplan-compile)")
    stream.write("\n".join(summarize(p) for p in programs))
