"""``memplan-assign-offsets``: place transient DTensors by lifetime, so that tensors never live at
the same time share bytes.

Runs on a compiled program (after ``memplan-build-atlas``: the lifetimes follow the atlas's graphs
through the step orders the runtime replays, :mod:`tr_mlir.dialects.lifetimes`). Persistent state
(weights, gradients, optimizer state, BN statistics, inputs, scalars, results) keeps the seed's
contiguous region layout, since RANGE nodes work on region spans. With ``reuse=true`` (the default):

1. **Live-range splitting.** A transient DTensor's bytes may hold several unrelated values in one
   step: the seed writes the gradient of a feature over the feature itself (in-place dX), so a
   BN output read only by its ReLU would stay allocated until its gradient is written there in the
   backward pass. Each *web* of a DTensor (a write that does not read the old value, together with
   every read it reaches and every read-modify-write that continues it, over all sequences) becomes
   its own DTensor ``<name>.v<k>``, and the graphs' nodes are renamed to it; webs of one DTensor
   that live in different sequences (a feature's training and inference values) stay one DTensor.
   Kernel workspaces (``ws_*``), DTensors that RANGE spans cover and live-in DTensors are not
   split. No node's arithmetic changes: only where its operands live.
2. **Packing.** The transient DTensors go into one *transient pool* after the last region
   (``pool = [offset, bytes]`` on every plan; the transient regions keep their place in the region
   table with zero bytes). Offsets in the pool are an interval packing of the lifetimes: greedy best
   fit (the smallest free gap among the DTensors whose lifetimes overlap, else the top), in three
   orders (largest slot first, as TFLite's arena planner and MLIR's static memory planner; longest
   lifetime first; first use first, as XLA's heap simulator's sequential order), keeping the
   smallest pool. Slots stay the plans' 256-byte multiples, so every offset stays 256-aligned.

``reuse=false`` leaves the seed's one-slot-per-tensor layout of ``memplan-create-plans`` as it is
(for comparison and debugging). Either way the program verifier checks the placement against the
lifetimes on every verification (:func:`tr_mlir.dialects.lifetimes.check_placement`).

Diagnostics: no plans, graphs or atlas (run ``memplan-compile`` first); a RANGE node whose span
covers a transient region holding DTensors (a range kernel works on the region's bytes, which
the pool leaves empty: use ``reuse=false``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from tr_mlir.dialects.lifetimes import (
    TRANSIENT_REGIONS,
    WORKSPACE_PREFIX,
    Lifetimes,
    analyze,
    sequences,
    transient_span,
)
from tr_mlir.dialects.memplan import AtlasOp, DTensor, GraphOp, Node, PlanOp, ProgramOp, linear_layout
from tr_mlir.passes._descriptors_program import fail, model_programs

# --------------------------------------------------------------------------------------
# Live-range splitting
# --------------------------------------------------------------------------------------


class _UnionFind:
    def __init__(self) -> None:
        self.parent: dict[tuple, tuple] = {}

    def find(self, k: tuple) -> tuple:
        p = self.parent.setdefault(k, k)
        if p != k:
            root = self.find(p)
            self.parent[k] = root
            return root
        return k

    def union(self, a: tuple, b: tuple) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def split_webs(program: ProgramOp) -> tuple[dict[int, tuple[int, int]], dict[tuple[str, int, int], Node]]:
    """Live-range splitting (module doc, point 1) on the program as it is.

    Returns ``(new, nodes)``: ``new`` maps each new DTensor id to ``(original id, k)`` (its name is
    ``<original>.v<k>``); ``nodes`` maps ``(graph, GraphId index, node index)`` to the renamed node,
    for every node that changes."""
    plan = program.plans()[0]
    tensors = sorted(plan.tensors(), key=lambda t: t.id)
    before = analyze(program, plan)
    ranged: set[int] = set()
    members: dict[int, list[int]] = {}
    for t in tensors:
        if t.slot:
            members.setdefault(int(t.region), []).append(t.id)
    seqs = before.sequences
    for seq in seqs:
        for step in seq:
            for a, b in (*step.node.in_ranges, *step.node.out_ranges):
                for r in range(a, b + 1):
                    ranged.update(members.get(r, ()))
    splittable = {t.id for t in tensors if t.id in before.transient and not t.name.startswith(WORKSPACE_PREFIX)}
    splittable -= ranged | before.pinned
    uf = _UnionFind()
    first_seen: dict[tuple, tuple[int, int]] = {}  # def key -> (sequence, position) of its first occurrence
    seqs_of: dict[tuple, set[int]] = {}
    for s, seq in enumerate(seqs):
        cur: dict[int, tuple] = {}
        for pos, step in enumerate(seq):
            at = (step.graph, step.gid.index, step.index)
            node = step.node
            reads = {tid for tid in node.inputs if tid in splittable}
            for tid in reads:
                use = ("u", *at, tid)
                uf.union(use, cur[tid])  # a def reaches it: otherwise the id would be pinned (live-in)
                seqs_of.setdefault(use, set()).add(s)
            for tid in {tid for tid in node.outputs if tid in splittable}:
                key = ("d", *at, tid)
                uf.find(key)
                first_seen.setdefault(key, (s, pos))
                seqs_of.setdefault(key, set()).add(s)
                if tid in reads:
                    uf.union(key, ("u", *at, tid))
                cur[tid] = key
    # roots per original id, ordered by first occurrence, with the sequences they live in
    root_info: dict[tuple, tuple[tuple[int, int], set[int], int]] = {}
    for key in list(uf.parent):
        root = uf.find(key)
        tid = key[-1]
        where = first_seen.get(key, (1 << 60, 0))
        old = root_info.get(root)
        seq_set = seqs_of.get(key, set())
        if old is None:
            root_info[root] = (where, set(seq_set), tid)
        else:
            old[1].update(seq_set)
            root_info[root] = (min(old[0], where), old[1], tid)
    by_tid: dict[int, list[tuple]] = {}
    for root, (where, _, tid) in root_info.items():
        by_tid.setdefault(tid, []).append(root)
    next_id = len(tensors)
    new: dict[int, tuple[int, int]] = {}
    id_of_root: dict[tuple, int] = {}
    for tid in sorted(by_tid):
        roots = sorted(by_tid[tid], key=lambda r: root_info[r][0])
        groups: list[tuple[int, set[int]]] = []
        for root in roots:
            seq_set = root_info[root][1]
            for i, (gid_, used) in enumerate(groups):
                if not (used & seq_set):
                    used.update(seq_set)
                    id_of_root[root] = gid_
                    break
            else:
                if groups:
                    new[next_id] = (tid, len(groups))
                    groups.append((next_id, set(seq_set)))
                    id_of_root[root] = next_id
                    next_id += 1
                else:
                    groups.append((tid, set(seq_set)))
                    id_of_root[root] = tid
    nodes: dict[tuple[str, int, int], Node] = {}
    if not new:
        return new, nodes
    for graph in program.graphs():
        for gid, nodes_op in graph.buckets().items():
            for i, node in enumerate(nodes_op.nodes()):
                at = (graph.graph_name, gid.index, i)

                def rename(kind: str, tid: int) -> int:
                    key = (kind, *at, tid)
                    if tid not in splittable or key not in uf.parent:
                        return tid
                    return id_of_root[uf.find(key)]

                ins = tuple(rename("u", t) for t in node.inputs)
                outs = tuple(rename("d", t) for t in node.outputs)
                if ins != node.inputs or outs != node.outputs:
                    nodes[at] = replace(node, inputs=ins, outputs=outs)
    return new, nodes


# --------------------------------------------------------------------------------------
# Packing
# --------------------------------------------------------------------------------------


def _interval_matrix(life: Lifetimes, ids: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi) arrays ``[len(ids), S]`` of each id's interval in each sequence (absent: lo > hi)."""
    starts = np.array(life.starts + [life.length], np.int64)
    big = np.int64(1 << 60)
    lo = np.full((len(ids), len(life.sequences)), big, np.int64)
    hi = np.full((len(ids), len(life.sequences)), -1, np.int64)
    for row, tid in enumerate(ids):
        for a, b in life.intervals.get(tid, ()):
            s0 = int(np.searchsorted(starts, a, side="right")) - 1
            s1 = int(np.searchsorted(starts, b, side="right")) - 1
            for s in range(s0, s1 + 1):  # a pinned interval spans every sequence
                lo[row, s] = min(lo[row, s], max(a, starts[s]))
                hi[row, s] = max(hi[row, s], min(b, starts[s + 1] - 1))
    return lo, hi


def pack(sizes: np.ndarray, lo: np.ndarray, hi: np.ndarray, order: np.ndarray) -> tuple[np.ndarray, int]:
    """Greedy best-fit interval packing (module doc, point 2) of items taken in ``order``.

    ``sizes[i]`` bytes, lifetime ``lo[i, s] .. hi[i, s]`` per sequence ``s``. Returns (offsets,
    total bytes)."""
    n = len(sizes)
    offsets = np.zeros(n, np.int64)
    placed = np.zeros(0, np.int64)
    total = 0
    for i in order:
        size = int(sizes[i])
        if placed.size:
            ov = ((lo[placed] <= hi[i]) & (lo[i] <= hi[placed])).any(axis=1)
            conflicts = placed[ov]
        else:
            conflicts = placed
        pos = 0
        if conflicts.size:
            starts = offsets[conflicts]
            k = np.argsort(starts, kind="stable")
            starts = starts[k]
            ends = np.maximum.accumulate(starts + sizes[conflicts][k])
            prev = np.concatenate(([0], ends[:-1]))
            gaps = starts - prev
            fit = np.nonzero(gaps >= size)[0]
            if fit.size:
                best = fit[np.argmin(gaps[fit])]
                pos = int(prev[best])
            else:
                pos = int(ends[-1])
        offsets[i] = pos
        total = max(total, pos + size)
        placed = np.append(placed, i)
    return offsets, total


def place(life: Lifetimes, tensors: list[DTensor]) -> tuple[dict[int, int], int]:
    """Offsets in the transient pool for the transient DTensors with bytes, and the pool bytes."""
    ids = sorted(life.transient)
    if not ids:
        return {}, 0
    by_id = {t.id: t for t in tensors}
    sizes = np.array([by_id[i].slot for i in ids], np.int64)
    lo, hi = _interval_matrix(life, ids)
    present = hi >= lo
    length = np.where(present, hi - lo + 1, 0).sum(axis=1)
    first = np.where(present, lo, 1 << 60).min(axis=1)
    orders = [np.lexsort((first, -sizes)), np.lexsort((-sizes, -length)), np.lexsort((-sizes, first))]
    best: tuple[np.ndarray, int] | None = None
    for order in orders:
        offsets, total = pack(sizes, lo, hi, order)
        if best is None or total < best[1]:
            best = (offsets, total)
    assert best is not None
    offsets, total = best
    return {tid: int(o) for tid, o in zip(ids, offsets)}, int(total)


# --------------------------------------------------------------------------------------
# The pass
# --------------------------------------------------------------------------------------


def assign_offsets(program: ProgramOp) -> None:
    """``reuse=true`` on one program (module doc): split, then pack; rewrites its plans and graphs."""
    plans = program.plans()
    new, renamed = split_webs(program)
    if renamed:
        for graph in program.graphs():
            buckets = {}
            for gid, nodes_op in graph.buckets().items():
                buckets[gid] = [renamed.get((graph.graph_name, gid.index, i), n)
                                for i, n in enumerate(nodes_op.nodes())]
            Rewriter.replace_op(graph, GraphOp(graph.graph_name, buckets, graph.params.data))
    tables: list[list[DTensor]] = []
    for plan in plans:
        rows = sorted(plan.tensors(), key=lambda t: t.id)
        for tid, (orig, k) in sorted(new.items()):
            t = rows[orig]
            rows.append(replace(t, id=tid, name=f"{t.name}.v{k}"))
        tables.append(rows)
    base = tables[0]
    persistent = [t.region not in TRANSIENT_REGIONS for t in base]
    offsets, bases, sizes = linear_layout([t.region for t in base], [t.slot if p else 0 for t, p in zip(base, persistent)])
    pool_base = bases[-1] + sizes[-1]
    life = analyze(program, tensors=base)  # the split program's lifetimes (offsets not final yet)
    pool_offsets, pool_bytes = place(life, base)
    for t in base:  # never-touched transients (none in practice) sit at the pool's start
        if t.slot and not persistent[t.id] and t.id not in pool_offsets:
            pool_offsets[t.id] = 0
            pool_bytes = max(pool_bytes, t.slot)
    final_offsets = [pool_base + pool_offsets[t.id] if not persistent[t.id] and t.slot else
                     (offsets[t.id] if persistent[t.id] else pool_base) for t in base]
    for old, rows in zip(plans, tables):
        placed = [replace(t, offset=final_offsets[t.id]) for t in rows]
        Rewriter.replace_op(old, PlanOp(old.plan_name, old.target_kind, region_bases=bases, region_sizes=sizes,
                                        tensors=placed, pool=(pool_base, pool_bytes)))


@dataclass(frozen=True)
class MemplanAssignOffsetsPass(ModulePass):
    """Place transient DTensors by lifetime (module doc). Option ``reuse`` (default true)."""

    name = "memplan-assign-offsets"

    reuse: bool = True

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for _model, program in model_programs(op, self.name):
            assert program is not None
            if not program.plans() or not program.graphs() or not program.ops_of(AtlasOp):
                fail(program, f"'memplan.program' op has no plans, graphs or atlas; {self.name} places a "
                              f"compiled program (run memplan-compile first)")
            if not self.reuse or any(p.pool is not None for p in program.plans()):
                continue  # the seed's layout, or already placed
            try:
                sequences(program)
            except ValueError as e:
                fail(program, f"'memplan.program' op: {e}")
            spanned = transient_span(program, program.plans()[0].tensors())
            if spanned is not None:
                step, region, ids = spanned
                fail(program, f"'memplan.program' op: {self.name} cannot place the {len(ids)} DTensors of "
                              f"{region.name} by lifetime: {step.where} works on the region's span, which "
                              f"must stay contiguous; run it with reuse=false (the seed's layout)")
            assign_offsets(program)
