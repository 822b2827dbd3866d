"""Lifetimes of the transient DTensors of a ``memplan.program`` over the step orders the runtime replays.

The runtime contract (:class:`tr_mlir.lowering.runner.Runner`, facts sheet section 13) is that the
graphs of a program run in a few fixed *step orders*:

* a training step of a ``train_*`` variant (:func:`training_step_orders`): ``ZERO_GRAD``, the first
  layer's forward on input buffer A (or B), the prefetch ``TRANSFER`` of the other buffer,
  ``DEEP_FWD_BWD``, the first layer's backward, the AMP casts, the all-reduces, the metrics, the
  NaN check, the BN statistics, the optimizer, ``CAST_MAIN_FP32_TO_FP16`` and, after the last batch,
  ``UPDATE_BN_INF_PARAMS``;
* an inference step of a ``val_*`` variant (:func:`inference_step_orders`): ``TRANSFER``, the
  inference graph on buffer A (or B), ``ACCUM_METRICS`` (``_VAL_LAST`` for the last batch);
* every other non-empty bucket (``CLEAR_METRICS``, ``VAL_RESULT_COMM``, ...) alone.

Each (variant, order) pair resolves through the atlas to a *sequence* of nodes (identical ones
counted once). The sequences are laid end to end on one timeline; a node's *time* is its position
there. A DTensor is *transient* when its region is (:data:`TRANSIENT_REGIONS`: features, gradient
slots, masks, temporaries and kernel workspaces); everything else (parameters, gradients,
optimizer state, BN statistics, inputs, scalars, results) carries its value from step to step and
is live throughout. A node *touches* a DTensor it names as an input or output, or one inside a
region span of a RANGE node.

The lifetime of a transient DTensor is, per sequence that touches it, the closed interval from
its first touch to its last touch, with two rules that keep it sound:

* **live-in**: a DTensor whose first touch in some sequence reads it (its value comes from an
  earlier sequence or step) is live on the whole timeline (*pinned*);
* **live-out**: a DTensor whose last touch in a sequence writes it (no later node reads that value,
  so only the host can: the inference graph's probabilities that ``Runner.predict`` copies out) is
  live to the end of that sequence, except kernel scratch (``ws_*``, :data:`WORKSPACE_PREFIX`:
  call-scoped, its value never outlives the node).

Two transient DTensors may share bytes exactly when their lifetimes are disjoint (no time at which
both are live). This is the rule that ``memplan-assign-offsets`` packs by and that the program
verifier checks on every compile (:func:`check_placement`).

The analysis works on ids only: it neither knows op names nor kernels (DESIGN section 8).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from tr_mlir.dialects.memplan import (
    TRANSIENT_REGIONS,
    VARIANTS,
    WORKSPACE_PREFIX,
    AtlasOp,
    DTensor,
    GraphId,
    GraphOp,
    MemRegion,
    Node,
    PlanOp,
    ProgramOp,
    is_train_variant,
)

G = GraphId


_AB = ("a", "b")
_FIRST_FWD = {"a": G.FIRST_LAYER_FWD_A, "b": G.FIRST_LAYER_FWD_B}
_FIRST_BWD = {"a": G.FIRST_LAYER_BWD_A, "b": G.FIRST_LAYER_BWD_B}
_TRANSFER = {"a": G.TRANSFER_A, "b": G.TRANSFER_B}
_INF = {"a": G.INF_MAIN_A, "b": G.INF_MAIN_B}


def after_deep(ab: str, last: bool) -> tuple[GraphId, ...]:
    """The launches from ``DEEP_FWD_BWD`` to the end of one training step on input buffer ``ab``
    (``last``: the epoch's last batch, which also refreshes the BN inference parameters)."""
    return (G.DEEP_FWD_BWD, _FIRST_BWD[ab], G.CAST_DEEP_GRAD_FP16_TO_FP32, G.DEEP_COMM,
            G.CAST_FIRST_GRAD_FP16_TO_FP32, G.FIRST_COMM,
            G.ACCUM_METRICS_TRAIN_LAST if last else G.ACCUM_METRICS,
            G.NAN_CHECK_AND_GRAD_SCALING, G.STATS_COMM, G.UPDATE_STATS,
            G.OPTIMIZER, G.LARS_FC_OPT, G.LARS_FIRST_CONV_OPT, G.LARS_DEEP_CONV_OPT, G.EMA_UPDATE,
            G.CAST_MAIN_FP32_TO_FP16) + ((G.UPDATE_BN_INF_PARAMS,) if last else ())


def before_deep(ab: str) -> tuple[GraphId, ...]:
    """The launches of a training step before the prefetch of the other input buffer."""
    return (G.ZERO_GRAD, _FIRST_FWD[ab])


def training_step_orders() -> tuple[tuple[GraphId, ...], ...]:
    """Every GraphId order one training step can replay (input buffer A or B, last batch or not,
    with the prefetch ``TRANSFER`` of the other buffer between the first layer and the deep graph)."""
    return tuple(before_deep(ab) + (_TRANSFER["b" if ab == "a" else "a"],) + after_deep(ab, last)
                 for ab in _AB for last in (False, True))


def inference_step_orders() -> tuple[tuple[GraphId, ...], ...]:
    """Every GraphId order one inference (validation) batch can replay."""
    return tuple((_TRANSFER[ab], _INF[ab], accum) for ab in _AB
                 for accum in (G.ACCUM_METRICS, G.ACCUM_METRICS_VAL_LAST))


@dataclass(frozen=True)
class Step:
    """One node of a sequence: where it lives (graph, GraphId, index in the bucket) and the node."""

    graph: str
    gid: GraphId
    index: int
    node: Node

    @property
    def where(self) -> str:
        return f"@{self.graph} {self.gid.value} node {self.index} ({self.node.op})"


@dataclass
class Lifetimes:
    """The result of :func:`analyze`.

    ``sequences``: the node sequences (:class:`Step` lists), laid end to end: sequence ``s`` starts
    at time ``starts[s]``; ``intervals[tid]``: the closed ``(first, last)`` time intervals of a
    transient DTensor, one per sequence that touches it (absent: never touched); ``pinned``: ids
    live on the whole timeline (live-in); ``transient``: the transient ids with bytes.
    """

    sequences: list[list[Step]]
    starts: list[int]
    intervals: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    pinned: set[int] = field(default_factory=set)
    transient: set[int] = field(default_factory=set)

    @property
    def length(self) -> int:
        """Timeline length (nodes over all sequences)."""
        return self.starts[-1] + len(self.sequences[-1]) if self.sequences else 0

    def step_at(self, time: int) -> Step:
        """The node at ``time``."""
        import bisect

        s = bisect.bisect_right(self.starts, time) - 1
        return self.sequences[s][time - self.starts[s]]

    def live_at(self, time: int) -> list[int]:
        """The transient ids live at ``time``."""
        return [tid for tid, ivs in self.intervals.items() if any(a <= time <= b for a, b in ivs)]

    def overlap(self, a: int, b: int) -> int | None:
        """The first time both ``a`` and ``b`` are live, or ``None`` when their lifetimes are disjoint."""
        best = None
        for a0, a1 in self.intervals.get(a, ()):
            for b0, b1 in self.intervals.get(b, ()):
                lo = max(a0, b0)
                if lo <= min(a1, b1) and (best is None or lo < best):
                    best = lo
        return best


def _atlas(program: ProgramOp) -> AtlasOp | None:
    atlases = program.ops_of(AtlasOp)
    return atlases[0] if atlases else None


def sequences(program: ProgramOp) -> list[list[Step]]:
    """The distinct node sequences of ``program`` (module doc), resolved through its atlas.

    Raises ``ValueError`` when the program has no atlas."""
    atlas = _atlas(program)
    if atlas is None:
        raise ValueError("the program has no 'memplan.atlas': lifetimes follow the atlas's graphs")
    graphs: dict[str, GraphOp] = {g.graph_name: g for g in program.graphs()}
    keys = atlas.keys()
    bucket_cache: dict[tuple[str, GraphId], list[Node]] = {}

    def resolve(variant: int, order: Iterable[GraphId]) -> list[tuple[str, GraphId]]:
        out = []
        for gid in order:
            k = atlas.slot(variant, gid)
            if k >= 0:
                out.append((keys[k][0], gid))
        return out

    orders: list[list[tuple[str, GraphId]]] = []
    for v, name in enumerate(VARIANTS):
        for order in (training_step_orders() if is_train_variant(name) else inference_step_orders()):
            seq = resolve(v, order)
            if seq and seq not in orders:
                orders.append(seq)
    covered = {pair for seq in orders for pair in seq}
    for g in graphs.values():
        for gid in g.buckets():
            if (g.graph_name, gid) not in covered:
                orders.append([(g.graph_name, gid)])
                covered.add((g.graph_name, gid))
    out: list[list[Step]] = []
    for seq in orders:
        steps: list[Step] = []
        for gname, gid in seq:
            nodes = bucket_cache.get((gname, gid))
            if nodes is None:
                nodes = bucket_cache[(gname, gid)] = graphs[gname].nodes(gid) if gname in graphs else []
            steps += [Step(gname, gid, i, n) for i, n in enumerate(nodes)]
        if steps:
            out.append(steps)
    return out


def region_members(tensors: Iterable[DTensor]) -> dict[int, list[int]]:
    """Region index -> ids of its DTensors with bytes (what a RANGE node's span touches)."""
    out: dict[int, list[int]] = {}
    for t in tensors:
        if t.slot:
            out.setdefault(int(t.region), []).append(t.id)
    return out


def touches(node: Node, members: dict[int, list[int]]) -> tuple[list[int], list[int]]:
    """(ids read, ids written) by ``node``, region spans expanded to their DTensors."""
    reads = list(node.inputs)
    writes = list(node.outputs)
    for a, b in node.in_ranges:
        for r in range(a, b + 1):
            reads += members.get(r, ())
    for a, b in node.out_ranges:
        for r in range(a, b + 1):
            writes += members.get(r, ())
    return reads, writes


def transient_span(program: ProgramOp, tensors: Iterable[DTensor]) -> tuple[Step, MemRegion, list[int]] | None:
    """The first RANGE node of ``program``'s graphs whose span covers a transient region holding
    DTensors with bytes: ``(node, region, ids of those DTensors)``, or ``None``.

    A RANGE kernel works on the region's byte span, so its DTensors must stay contiguous in their
    region: a plan with a transient pool (the region empty, its DTensors placed by lifetime) cannot
    serve such a node (``memplan-assign-offsets`` refuses it, the program verifier rejects it)."""
    members = region_members(tensors)
    for graph in program.graphs():
        for gid, nodes in graph.buckets().items():
            for i, node in enumerate(nodes.nodes()):
                for a, b in (*node.in_ranges, *node.out_ranges):
                    for r in range(int(a), int(b) + 1):
                        if MemRegion(r) in TRANSIENT_REGIONS and members.get(r):
                            return Step(graph.graph_name, gid, i, node), MemRegion(r), members[r]
    return None


def analyze(program: ProgramOp, plan: PlanOp | None = None, *, tensors: Sequence[DTensor] | None = None
            ) -> Lifetimes:
    """The lifetimes of the transient DTensors of ``program`` (module doc), against ``plan`` (default
    its first plan: ids, regions and slots are the same in all six), or against the DTensor table
    ``tensors`` (a plan being built).

    Raises ``ValueError`` when the program has no plans or no atlas."""
    if tensors is None:
        if plan is None:
            plans = program.plans()
            if not plans:
                raise ValueError("the program has no 'memplan.plan'")
            plan = plans[0]
        tensors = list(plan.tensors())
    tensors = sorted(tensors, key=lambda t: t.id)
    transient = {t.id for t in tensors if t.slot and t.region in TRANSIENT_REGIONS}
    scratch = {t.id for t in tensors if t.name.startswith(WORKSPACE_PREFIX)}
    members = region_members(tensors)
    seqs = sequences(program)
    result = Lifetimes(seqs, [], transient=transient)
    time = 0
    for seq in seqs:
        result.starts.append(time)
        first: dict[int, int] = {}
        last: dict[int, int] = {}
        last_is_write: dict[int, bool] = {}
        for pos, step in enumerate(seq):
            reads, writes = touches(step.node, members)
            t = time + pos
            for tid in reads:
                if tid not in transient:
                    continue
                if tid not in first:
                    first[tid] = t
                    result.pinned.add(tid)  # read before any write in this sequence: live-in
                last[tid] = t
                last_is_write[tid] = False
            read_here = set(reads)
            for tid in writes:
                if tid not in transient:
                    continue
                first.setdefault(tid, t)
                last[tid] = t
                last_is_write[tid] = tid not in read_here
        end = time + len(seq) - 1
        for tid, a in first.items():
            b = end if last_is_write[tid] and tid not in scratch else last[tid]
            result.intervals.setdefault(tid, []).append((a, b))
        time += len(seq)
    whole = (0, max(time - 1, 0))
    for tid in result.pinned:
        result.intervals[tid] = [whole]
    return result


def lower_bound(lifetimes: Lifetimes, slots: Sequence[int]) -> tuple[int, int]:
    """``(bytes, time)``: the largest sum of the slots of transient DTensors live at one time, and
    the first time it is reached (the liveness lower bound of any placement that keeps the slots)."""
    import numpy as np

    n = max(lifetimes.length, 1)
    delta = np.zeros(n + 1, np.int64)
    for tid, ivs in lifetimes.intervals.items():
        for a, b in ivs:
            delta[a] += slots[tid]
            delta[b + 1] -= slots[tid]
    live = np.cumsum(delta[:-1])
    at = int(np.argmax(live))
    return int(live[at]), at


@dataclass(frozen=True)
class Collision:
    """Two transient DTensors that share bytes while both are live (:func:`check_placement`)."""

    a: DTensor
    b: DTensor
    step: Step

    def message(self) -> str:
        lo = max(self.a.offset, self.b.offset)
        hi = min(self.a.offset + self.a.slot, self.b.offset + self.b.slot)
        return (f"DTensors {self.a.id} '{self.a.name}' [{self.a.offset}, {self.a.offset + self.a.slot}) and "
                f"{self.b.id} '{self.b.name}' [{self.b.offset}, {self.b.offset + self.b.slot}) share bytes "
                f"[{lo}, {hi}) but are both live at {self.step.where}")


def check_placement(program: ProgramOp, plan: PlanOp, lifetimes: Lifetimes | None = None) -> Collision | None:
    """The first collision of ``plan``'s transient DTensors (module doc), or ``None``.

    A sweep over the timeline keeps the byte ranges of the live DTensors in offset order; a
    DTensor that becomes live is checked against its neighbours there (O(n log n))."""
    import bisect

    life = lifetimes if lifetimes is not None else analyze(program, plan)
    by_id = {t.id: t for t in plan.tensors()}
    events: list[tuple[int, int, int]] = []  # (time, 0 = start / 1 = end, id)
    for tid, ivs in life.intervals.items():
        t = by_id[tid]
        if not t.slot:
            continue
        for a, b in ivs:
            events.append((a, 0, tid))
            events.append((b, 1, tid))
    events.sort()
    live: list[tuple[int, int]] = []  # (offset, id), sorted
    for time, kind, tid in events:
        t = by_id[tid]
        key = (t.offset, tid)
        if kind == 1:
            i = bisect.bisect_left(live, key)
            if i < len(live) and live[i] == key:
                live.pop(i)
            continue
        i = bisect.bisect_left(live, key)
        for j in (i - 1, i):
            if 0 <= j < len(live):
                other = by_id[live[j][1]]
                if t.offset < other.offset + other.slot and other.offset < t.offset + t.slot:
                    a, b = sorted((t, other), key=lambda x: x.id)
                    return Collision(a, b, life.step_at(time))
        live.insert(i, key)
    return None
