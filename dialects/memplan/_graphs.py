"""The ``memplan`` ops of phase 4 and after: nodes, graphs, the atlas and the program container."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tr_mlir.dialects.memplan._plans import (  # noqa: F401
    DescsOp,
    DTensor,
    PlanOp,
    SpecOp,
    VariantOp,
    _ProgramChild,
    linear_layout,
)
from tr_mlir.dialects.memplan._vocab import (  # noqa: F401
    _F64_ARRAY,
    _GRAPH_INDEX,
    _I64_ARRAY,
    _SHAPE_DEPENDENT,
    ALIGN,
    CORRESPONDING_SPANS,
    DTYPE_BYTES,
    INIT_RULES,
    NUM_GRAPH_IDS,
    NUM_REGIONS,
    RANGE_PREFIX,
    is_range_op,
    TRANSIENT_REGIONS,
    VARIANTS,
    WORKSPACE_PREFIX,
    GraphId,
    GraphIdAttr,
    MemRegion,
    OptimizerAttr,
    OptimizerKind,
    Target,
    TargetAttr,
    _check_len,
    _fail,
    _ints,
    _region_of,
    _strs,
    align256,
    channel_align,
    f64_array,
    i64_array,
    is_train_variant,
    region_enabled,
    slot_bytes,
    str_array,
)
from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseArrayBase,
    DictionaryAttr,
    StringAttr,
    SymbolNameConstraint,
    SymbolRefAttr,
    i64,
)
from xdsl.ir import (
    Block,
    Operation,
    Region,
)
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    lazy_traits_def,
    prop_def,
    region_def,
    traits_def,
)
from xdsl.traits import HasParent, NoTerminator, SymbolOpInterface, SymbolTable

# --------------------------------------------------------------------------------------
# Ops: computation graphs (phase 4)
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Node:
    """One graph node (a Python view). COMPUTE nodes have no ranges; RANGE nodes' ``op`` is in
    :func:`is_range_op`, ranges are closed region intervals, ids are scalar operands. ``param`` indexes
    the graph's ``params`` table (-1: none). ``skipped``: positions in ``outputs`` of optional kernel
    outputs the compiler found dead (``memplan-skip-dead-outputs``): the executable binds them as
    ``None`` and the kernel does not compute them."""

    op: str
    inputs: tuple[int, ...] = ()
    outputs: tuple[int, ...] = ()
    in_ranges: tuple[tuple[MemRegion, MemRegion], ...] = ()
    out_ranges: tuple[tuple[MemRegion, MemRegion], ...] = ()
    param: int = -1
    skipped: tuple[int, ...] = ()

    @property
    def is_range(self) -> bool:
        return is_range_op(self.op)


@irdl_op_definition
class NodesOp(IRDLOperation):
    """The nodes of one GraphId bucket, in execution order, as columns.

    ``ops``: op names; ``ins`` / ``outs``: DTensor ids, ``in_counts`` / ``out_counts`` per node;
    ``in_ranges`` / ``out_ranges``: (first, last) region index pairs, ``in_range_counts`` /
    ``out_range_counts`` per node; ``params``: index into the graph's param table or -1.
    The optional attribute ``skip_outputs`` (:data:`SKIP_OUTPUTS`, written by
    ``memplan-skip-dead-outputs``) lists ``(node index, output position)`` pairs, flat, of the
    outputs the nodes do not compute (:attr:`Node.skipped`), e.g. ``{skip_outputs = array<i64: 7, 0>}``:
    node 7 leaves out its first output.
    """

    name = "memplan.nodes"
    graph_id = prop_def(GraphIdAttr)
    ops = prop_def(ArrayAttr[StringAttr])
    ins = prop_def(_I64_ARRAY)
    in_counts = prop_def(_I64_ARRAY)
    outs = prop_def(_I64_ARRAY)
    out_counts = prop_def(_I64_ARRAY)
    in_ranges = prop_def(_I64_ARRAY)
    in_range_counts = prop_def(_I64_ARRAY)
    out_ranges = prop_def(_I64_ARRAY)
    out_range_counts = prop_def(_I64_ARRAY)
    params = prop_def(_I64_ARRAY)
    traits = lazy_traits_def(lambda: (HasParent(GraphOp),))
    assembly_format = (
        "$graph_id `ops` `=` $ops `ins` `=` $ins `in_counts` `=` $in_counts `outs` `=` $outs "
        "`out_counts` `=` $out_counts `in_ranges` `=` $in_ranges `in_range_counts` `=` $in_range_counts "
        "`out_ranges` `=` $out_ranges `out_range_counts` `=` $out_range_counts `params` `=` $params attr-dict"
    )

    def __init__(self, graph_id: GraphId, nodes: Sequence[Node]):
        super().__init__(properties={
            "graph_id": GraphIdAttr(graph_id),
            "ops": str_array([n.op for n in nodes]),
            "ins": i64_array([i for n in nodes for i in n.inputs]),
            "in_counts": i64_array([len(n.inputs) for n in nodes]),
            "outs": i64_array([i for n in nodes for i in n.outputs]),
            "out_counts": i64_array([len(n.outputs) for n in nodes]),
            "in_ranges": i64_array([int(r) for n in nodes for pair in n.in_ranges for r in pair]),
            "in_range_counts": i64_array([len(n.in_ranges) for n in nodes]),
            "out_ranges": i64_array([int(r) for n in nodes for pair in n.out_ranges for r in pair]),
            "out_range_counts": i64_array([len(n.out_ranges) for n in nodes]),
            "params": i64_array([n.param for n in nodes]),
        })
        skips = [v for k, n in enumerate(nodes) for p in sorted(set(n.skipped)) for v in (k, p)]
        if skips:
            self.attributes[SKIP_OUTPUTS] = i64_array(skips)

    @property
    def gid(self) -> GraphId:
        return self.graph_id.data

    def nodes(self) -> list[Node]:
        """The bucket's nodes as :class:`Node` views (the op must verify)."""
        ops = _strs(self.ops)
        ins, outs = _ints(self.ins), _ints(self.outs)
        rin, rout = _ints(self.in_ranges), _ints(self.out_ranges)
        cin, cout = _ints(self.in_counts), _ints(self.out_counts)
        crin, crout = _ints(self.in_range_counts), _ints(self.out_range_counts)
        params = _ints(self.params)
        skipped: dict[int, list[int]] = {}
        for k, p in self.skip_pairs():
            skipped.setdefault(k, []).append(p)
        out: list[Node] = []
        a = b = c = d = 0
        for k, op in enumerate(ops):
            node_rin = tuple((MemRegion(rin[2 * j]), MemRegion(rin[2 * j + 1])) for j in range(c, c + crin[k]))
            node_rout = tuple((MemRegion(rout[2 * j]), MemRegion(rout[2 * j + 1]))
                              for j in range(d, d + crout[k]))
            out.append(Node(op, ins[a:a + cin[k]], outs[b:b + cout[k]], node_rin, node_rout, params[k],
                            tuple(skipped.get(k, ()))))
            a, b, c, d = a + cin[k], b + cout[k], c + crin[k], d + crout[k]
        return out

    def skip_pairs(self) -> list[tuple[int, int]]:
        """The ``(node index, output position)`` pairs of ``skip_outputs`` (empty without it)."""
        attr = self.attributes.get(SKIP_OUTPUTS)
        if attr is None:
            return []
        flat = _ints(attr)  # type: ignore[arg-type]
        return list(zip(flat[::2], flat[1::2]))

    def verify_(self) -> None:
        n = len(self.ops.data)
        counts = {}
        for what, attr in (("in_counts", self.in_counts), ("out_counts", self.out_counts),
                           ("in_range_counts", self.in_range_counts),
                           ("out_range_counts", self.out_range_counts), ("params", self.params)):
            values = _ints(attr)
            _check_len(self, what, len(values), n, " (one per op)")
            if what != "params" and any(v < 0 for v in values):
                raise _fail(self, f"expected non-negative {what}, got {min(values)}")
            counts[what] = values
        for what, attr, key, per in (("ins", self.ins, "in_counts", 1), ("outs", self.outs, "out_counts", 1),
                                     ("in_ranges", self.in_ranges, "in_range_counts", 2),
                                     ("out_ranges", self.out_ranges, "out_range_counts", 2)):
            _check_len(self, what, len(attr.get_values()), per * sum(counts[key]),
                       f" (the sum of {key}{' times 2' if per == 2 else ''})")
        for i in _ints(self.ins) + _ints(self.outs):
            if i < 0:
                raise _fail(self, f"expected DTensor ids >= 0, got {i}")
        for what, attr in (("in_ranges", self.in_ranges), ("out_ranges", self.out_ranges)):
            flat = _ints(attr)
            for first, last in zip(flat[::2], flat[1::2]):
                if not 0 <= first <= last < NUM_REGIONS:
                    raise _fail(self, f"expected {what} spans (first, last) with 0 <= first <= last < "
                                      f"{NUM_REGIONS}, got ({first}, {last})")
        self._verify_skips(counts["out_counts"], counts["in_counts"])
        for k, op in enumerate(_strs(self.ops)):
            if not op:
                raise _fail(self, "expected non-empty op names")
            has_ranges = counts["in_range_counts"][k] or counts["out_range_counts"][k]
            if is_range_op(op):
                takes = _takes_spans(op)
                if takes is None and has_ranges:
                    raise _fail(self, f"expected RANGE node {k} ({op}) to be a known range op: no operand row "
                                      f"names its spans (a misspelt op, or a plugin's op without "
                                      f"tr_mlir.extend.register_operands)")
                if not has_ranges and takes:
                    raise _fail(self, f"expected RANGE node {k} ({op}) to cover at least one region span")
            elif has_ranges:
                raise _fail(self, f"expected COMPUTE node {k} ({op}) to have no region spans "
                                  f"(only {RANGE_PREFIX}* ops take spans)")

    def _verify_skips(self, out_counts: Sequence[int], in_counts: Sequence[int]) -> None:
        attr = self.attributes.get(SKIP_OUTPUTS)
        if attr is None:
            return
        if not isinstance(attr, DenseArrayBase) or attr.elt_type != i64 or len(_ints(attr)) % 2:
            raise _fail(self, f"expected {SKIP_OUTPUTS} to be an array<i64> of (node, output position) pairs")
        from tr_mlir.dialects.kernels import skippable_outputs

        ops, seen = _strs(self.ops), set()
        for k, p in self.skip_pairs():
            if not 0 <= k < len(out_counts) or not 0 <= p < out_counts[k]:
                raise _fail(self, f"expected {SKIP_OUTPUTS} pairs to name a node and one of its outputs, got "
                                  f"({k}, {p})")
            if (k, p) in seen:
                raise _fail(self, f"expected {SKIP_OUTPUTS} pairs to be distinct, got ({k}, {p}) twice")
            seen.add((k, p))
            if p not in skippable_outputs(ops[k], out_counts[k], in_counts[k]):
                raise _fail(self, f"expected {SKIP_OUTPUTS} pair ({k}, {p}) to name an optional output of node "
                                  f"{k} ({ops[k]}): its kernel must write output {p}")


SKIP_OUTPUTS = "skip_outputs"
"""The ``memplan.nodes`` attribute of the outputs its nodes do not compute (:class:`NodesOp`)."""


def _takes_spans(op: str) -> bool | None:
    """Whether RANGE op ``op`` works on region spans: its operand row in the node-op vocabulary
    names range arguments (``RANGE_GRAD_SCALING``, ``RANGE_ACCUM_METRICS`` and
    ``RANGE_H2D_COPY_DTENSOR`` take scalars and DTensors only); None when the vocabulary has no
    row for it (a misspelt op, or one no node binds: such a node may take no spans)."""
    from tr_mlir.dialects.kernels import KernelIdError, OperandsError, operands_for

    try:
        row = operands_for(op)
    except (KernelIdError, OperandsError):
        return None
    return bool(row.in_ranges or row.out_ranges)


@irdl_op_definition
class GraphOp(IRDLOperation):
    """A ComputationGraph (``@train`` or ``@infer``): one ``memplan.nodes`` per non-empty GraphId
    (the other buckets of the 33 are empty). ``params`` is the table of op parameters the nodes
    index (layer properties such as ``k``, ``s``, ``eps``). Graphs hold ids, never shapes."""

    name = "memplan.graph"
    sym_name = prop_def(SymbolNameConstraint())
    params = prop_def(ArrayAttr[DictionaryAttr])
    body = region_def("single_block")
    traits = lazy_traits_def(lambda: (HasParent(ProgramOp), SymbolOpInterface(), NoTerminator()))
    assembly_format = "$sym_name `params` `=` $params attr-dict-with-keyword $body"

    def __init__(self, name: str, buckets: Mapping[GraphId, Sequence[Node]],
                 params: Sequence[DictionaryAttr] = ()):
        block = Block()
        for gid in GraphId:
            if buckets.get(gid):
                block.add_op(NodesOp(gid, buckets[gid]))
        super().__init__(properties={"sym_name": StringAttr(name), "params": ArrayAttr(list(params))},
                         regions=[Region(block)])

    @property
    def graph_name(self) -> str:
        return self.sym_name.data

    def buckets(self) -> dict[GraphId, NodesOp]:
        """GraphId -> its ``memplan.nodes`` op (empty buckets are absent)."""
        return {op.gid: op for op in self.body.block.ops if isinstance(op, NodesOp)}

    def nodes(self, gid: GraphId) -> list[Node]:
        """The nodes of bucket ``gid`` (empty list for an empty bucket)."""
        op = self.buckets().get(gid)
        return [] if op is None else op.nodes()

    def verify_(self) -> None:
        seen: set[GraphId] = set()
        n_params = len(self.params.data)
        for op in self.body.block.ops:
            if not isinstance(op, NodesOp):
                raise _fail(self, f"expected only 'memplan.nodes' ops in the body, got '{op.name}'")
            if op.gid in seen:
                raise _fail(self, f"expected one 'memplan.nodes' per GraphId, got {op.gid.value} twice")
            seen.add(op.gid)
            for p in _ints(op.params):
                if not -1 <= p < n_params:
                    raise _fail(self, f"expected node params in [-1, {n_params}) (the params table), got {p}")


# --------------------------------------------------------------------------------------
# Ops: the atlas
# --------------------------------------------------------------------------------------


@irdl_op_definition
class AtlasOp(_ProgramChild):
    """The GraphAtlas (facts sheet section 11): for each (variant, GraphId) the capture key.

    ``slots``: 6 x 33 ints, variant-major, the key index or -1 (no graph). Key k is
    (``key_graphs[k]``, ``key_gids[k]``, ``key_shapes[4k:4k+4]``, ``key_plans[k]``); shape-invariant
    graphs use the shape (0, 0, 0, 0) and the base plan, so they are captured once.
    """

    name = "memplan.atlas"
    slots = prop_def(_I64_ARRAY)
    key_graphs = prop_def(ArrayAttr[SymbolRefAttr])
    key_gids = prop_def(_I64_ARRAY)
    key_shapes = prop_def(_I64_ARRAY)
    key_plans = prop_def(ArrayAttr[SymbolRefAttr])
    assembly_format = (
        "`slots` `=` $slots `key_graphs` `=` $key_graphs `key_gids` `=` $key_gids "
        "`key_shapes` `=` $key_shapes `key_plans` `=` $key_plans attr-dict"
    )

    def __init__(self, slots: Sequence[int], keys: Sequence[tuple[str, GraphId, tuple[int, int, int, int], str]]):
        super().__init__(properties={
            "slots": i64_array(slots),
            "key_graphs": ArrayAttr([SymbolRefAttr(k[0]) for k in keys]),
            "key_gids": i64_array([k[1].index for k in keys]),
            "key_shapes": i64_array([d for k in keys for d in k[2]]),
            "key_plans": ArrayAttr([SymbolRefAttr(k[3]) for k in keys]),
        })

    def slot(self, variant: int, gid: GraphId) -> int:
        """Capture key index of (variant, gid), or -1."""
        return int(self.slots.get_values()[variant * NUM_GRAPH_IDS + gid.index])

    def keys(self) -> list[tuple[str, GraphId, tuple[int, ...], str]]:
        """(graph, GraphId, shape id, plan) of every capture key."""
        gids = list(GraphId)
        shapes = _ints(self.key_shapes)
        return [(g.root_reference.data, gids[k], shapes[4 * i:4 * i + 4], p.root_reference.data)
                for i, (g, k, p) in enumerate(zip(self.key_graphs.data, _ints(self.key_gids), self.key_plans.data))]

    def verify_(self) -> None:
        slots = _ints(self.slots)
        _check_len(self, "slots", len(slots), len(VARIANTS) * NUM_GRAPH_IDS, " (6 variants x 33 GraphIds)")
        k = len(self.key_graphs.data)
        _check_len(self, "key_gids", len(self.key_gids.get_values()), k, " (one per key)")
        _check_len(self, "key_plans", len(self.key_plans.data), k, " (one per key)")
        _check_len(self, "key_shapes", len(self.key_shapes.get_values()), 4 * k, " (4 per key)")
        for s in slots:
            if not -1 <= s < k:
                raise _fail(self, f"expected slots in [-1, {k}) (a key index or -1), got {s}")
        for g in _ints(self.key_gids):
            if not 0 <= g < NUM_GRAPH_IDS:
                raise _fail(self, f"expected key GraphIds in [0, {NUM_GRAPH_IDS}), got {g}")
        for v, name in enumerate(VARIANTS):
            for gid in GraphId:
                s = slots[v * NUM_GRAPH_IDS + gid.index]
                if s >= 0 and _ints(self.key_gids)[s] != gid.index:
                    raise _fail(self, f"expected slot ({name}, {gid.value}) to point at a key of that "
                                      f"GraphId, got key {s} of GraphId {list(GraphId)[_ints(self.key_gids)[s]].value}")


# --------------------------------------------------------------------------------------
# The program container
# --------------------------------------------------------------------------------------


@irdl_op_definition
class ProgramOp(IRDLOperation):
    """A compiled network: spec, variants, descriptors, plans, graphs and atlas of the
    ``arch.model`` named ``model`` (``memplan.program for @resnet50 {...}``, next to the model). A
    symbol table for the variant/plan/graph symbols.

    Cross-op checks: variant names unique and complete once plans exist; the six plans share ids,
    names, regions, slots and offsets; every node id is a DTensor of the plans; variant links
    resolve; the atlas keys name existing graphs and plans.
    """

    name = "memplan.program"
    model = prop_def(SymbolRefAttr)
    body = region_def("single_block")
    traits = traits_def(SymbolTable(), NoTerminator())
    assembly_format = "`for` $model attr-dict-with-keyword $body"

    def __init__(self, model: str, ops: Sequence[Operation] = ()):
        super().__init__(properties={"model": SymbolRefAttr(model)}, regions=[Region(Block(ops))])

    @property
    def model_name(self) -> str:
        return self.model.root_reference.data

    def ops_of(self, cls: type[Operation]) -> list:
        """The body ops of one class, in order."""
        return [op for op in self.body.block.ops if isinstance(op, cls)]

    @property
    def spec(self) -> SpecOp | None:
        found = self.ops_of(SpecOp)
        return found[0] if found else None

    def variants(self) -> list[VariantOp]:
        return self.ops_of(VariantOp)

    def plans(self) -> list[PlanOp]:
        return self.ops_of(PlanOp)

    def graphs(self) -> list[GraphOp]:
        return self.ops_of(GraphOp)

    def descs(self) -> list[DescsOp]:
        return self.ops_of(DescsOp)

    def lookup(self, name: str) -> Operation | None:
        """The body op with symbol ``name``."""
        for op in self.body.block.ops:
            sym = op.properties.get("sym_name")
            if isinstance(sym, StringAttr) and sym.data == name:
                return op
        return None

    def verify_(self) -> None:
        if len(self.ops_of(SpecOp)) > 1:
            raise _fail(self, "expected at most one 'memplan.spec'")
        if len(self.ops_of(AtlasOp)) > 1:
            raise _fail(self, "expected at most one 'memplan.atlas'")
        variants = self.variants()
        names = [v.variant_name for v in variants]
        if variants and names != list(VARIANTS):
            raise _fail(self, f"expected the six variants {', '.join(VARIANTS)} in this order, got "
                              f"{', '.join(names)}")
        if variants and len({v.is_amp for v in variants}) > 1:
            raise _fail(self, "expected amp to be the same in all six variants")
        self._verify_param_names()
        self._verify_plans()
        self._verify_graphs()
        self._verify_links()
        self._verify_lifetimes()

    def _verify_lifetimes(self) -> None:
        """No two transient DTensors share a byte while both are live (:mod:`tr_mlir.dialects.lifetimes`).

        Runs once the program has plans, graphs and an atlas (the lifetimes follow the atlas); a plan
        with a transient pool needs all three."""
        plans = self.plans()
        if not plans:
            return
        ready = bool(self.graphs()) and bool(self.ops_of(AtlasOp))
        if not ready:
            if plans[0].transient_pool is not None:
                raise _fail(self, "expected graphs and an atlas in a program whose plans have a transient pool "
                                  "(the placement follows the lifetimes of the atlas's graphs)")
            return
        from tr_mlir.dialects.lifetimes import analyze, check_placement, transient_span

        if plans[0].transient_pool is not None:
            spanned = transient_span(self, plans[0].tensors())
            if spanned is not None:
                step, region, ids = spanned
                raise _fail(self, f"expected no RANGE node over a transient region in a program whose plans have a "
                                  f"transient pool (the region has no bytes: its {len(ids)} DTensors are placed by "
                                  f"lifetime), got {step.where} over {region.name}; plan it with reuse=false")

        try:
            life = analyze(self, plans[0])
        except (KeyError, IndexError, ValueError) as e:  # ids or graphs the other checks reject
            raise _fail(self, f"cannot compute the DTensor lifetimes: {e}") from None
        collision = check_placement(self, plans[0], life)
        if collision is not None:
            raise _fail(self, f"expected DTensors live at the same time not to share bytes, got "
                              f"{collision.message()} in @{plans[0].plan_name}")

    def _verify_param_names(self) -> None:
        """Parameter names are unique across layers, and a program names all its layers or none."""
        seen: dict[str, int] = {}
        descs = self.descs()
        named = [d.tensor_param_names is not None for d in descs]
        if any(named) and not all(named):
            missing = next(d.layer_index for d, n in zip(descs, named) if not n)
            raise _fail(self, f"expected param_names on every 'memplan.descs' or none, layer {missing} has none "
                              f"(rerun memplan-name-parameters)")
        for d in descs:
            for pname in d.tensor_param_names or ():
                if pname and pname in seen:
                    raise _fail(self, f"expected unique parameter names across layers, got '{pname}' in layers "
                                      f"{seen[pname]} and {d.layer_index}")
                if pname:
                    seen[pname] = d.layer_index

    def _verify_plans(self) -> None:
        plans = self.plans()
        if not plans:
            return
        base = plans[0]
        for other in plans[1:]:
            for field in ("ids", "names", "mem_regions", "dtypes", "slots", "offsets", "region_bases",
                          "region_sizes", "target", "total_bytes", "pool"):
                if base.properties.get(field) != other.properties.get(field):
                    raise _fail(self, f"expected plan @{other.plan_name} to share {field} with "
                                      f"@{base.plan_name} (one arena serves every variant)")

    def _verify_graphs(self) -> None:
        plans = self.plans()
        n = len(plans[0]) if plans else None
        for graph in self.graphs():
            for gid, nodes_op in graph.buckets().items():
                for i in _ints(nodes_op.ins) + _ints(nodes_op.outs):
                    if n is None or i >= n:
                        raise _fail(self, f"expected every node id of @{graph.graph_name} ({gid.value}) to be "
                                          f"a DTensor of the plans ({n or 0} ids), got {i}")
                problem = _stats_problem(graph, nodes_op.nodes()) or _adds_into_problem(nodes_op.nodes())
                if problem:
                    raise _fail(self, f"@{graph.graph_name} ({gid.value}): {problem}")

    def _verify_links(self) -> None:
        for v in self.variants():
            for key, cls in (("plan", PlanOp), ("train", GraphOp), ("infer", GraphOp)):
                ref = v.properties.get(key)
                if ref is None:
                    continue
                assert isinstance(ref, SymbolRefAttr)
                target = self.lookup(ref.root_reference.data)
                if not isinstance(target, cls):
                    raise _fail(self, f"expected {key} of variant @{v.variant_name} to name a "
                                      f"'{cls.name}', got {ref}")
        for atlas in self.ops_of(AtlasOp):
            for g, gid, _shape, p in atlas.keys():
                graph = self.lookup(g)
                if not isinstance(graph, GraphOp):
                    raise _fail(self, f"expected atlas key graphs to name a 'memplan.graph', got @{g}")
                if gid not in graph.buckets():
                    raise _fail(self, f"expected atlas key ({g}, {gid.value}) to name a non-empty bucket")
                if not isinstance(self.lookup(p), PlanOp):
                    raise _fail(self, f"expected atlas key plans to name a 'memplan.plan', got @{p}")


STATS_ARGS = ("sum", "sq_sum")
"""The batch-norm statistics a conv writes under its ``when`` param and the BN forward after it
reads (``memplan-fuse-bn-stats``): the operand-row arguments :func:`_stats_problem` follows."""


def _stats_problem(graph: GraphOp, nodes: list[Node]) -> str:
    """What is wrong with the statistics inputs of one bucket's nodes, or ``""``: a node whose
    operand row lists :data:`STATS_ARGS` as trailing optional inputs gives both or neither, and
    when it gives them they are the ``sum`` / ``sq_sum`` outputs of the node that last wrote its
    first input earlier in the bucket, bound there (the ``when`` param true). Reading another
    conv's sums, or a tensor no kernel writes, would train on stale values without an error."""
    from tr_mlir.dialects.kernels import KernelIdError, operands_for

    params = graph.params.data
    for j, node in enumerate(nodes):
        try:
            row = operands_for(node.op)
        except KernelIdError:
            continue
        if tuple(row.ins[-2:]) != STATS_ARGS or row.required_ins == len(row.ins):
            continue
        if len(node.inputs) not in (row.required_ins, len(row.ins)):
            return (f"node {j} '{node.op}' has {len(node.inputs)} inputs, expected {row.required_ins} or "
                    f"{len(row.ins)} (sum and sq_sum come together)")
        if len(node.inputs) == row.required_ins:
            continue
        x, stats = node.inputs[0], tuple(node.inputs[-2:])
        writer = next((i for i in range(j - 1, -1, -1) if x in nodes[i].outputs), None)
        bound = None
        if writer is not None:
            prod = nodes[writer]
            try:
                prow = operands_for(prod.op)
            except KernelIdError:
                prow = None
            if prow is not None and all(a in prow.outs for a in STATS_ARGS):
                pos = [prow.outs.index(a) for a in STATS_ARGS]
                flags = {prow.when.get(a) for a in STATS_ARGS} - {None}
                entry = params[prod.param].data if 0 <= prod.param < len(params) else {}
                on = all(getattr(getattr(entry.get(f), "value", None), "data", 0) for f in flags)
                if on and max(pos) < len(prod.outputs):
                    bound = tuple(prod.outputs[p] for p in pos)
        if stats != bound:
            source = "no earlier node in the bucket" if writer is None else f"node {writer} '{nodes[writer].op}'"
            return (f"node {j} '{node.op}' reads statistics {list(stats)} of its input {x}, which {source} "
                    f"writes{'' if bound is None else f' with statistics {list(bound)}'}; expected the "
                    f"sum and sq_sum outputs of the conv that writes it, bound by its bn_stats param "
                    f"(memplan-fuse-bn-stats)")
    return ""


def _adds_into_problem(nodes: list[Node]) -> str:
    """What is wrong with the ``adds_into`` inputs of one bucket's nodes
    (:attr:`tr_mlir.dialects.kernels.Operands.adds_into`), or ``""``: a node that gives such an
    input must give the DTensor of the output it names there (the kernel adds into that output;
    another tensor would be read as its old value)."""
    from tr_mlir.dialects.kernels import KernelIdError, operands_for

    for j, node in enumerate(nodes):
        try:
            row = operands_for(node.op)
        except KernelIdError:
            continue
        for arg, out in row.adds_into.items():
            i, o = row.ins.index(arg), row.outs.index(out)
            if i < len(node.inputs) and (o >= len(node.outputs) or node.inputs[i] != node.outputs[o]):
                got = node.outputs[o] if o < len(node.outputs) else None
                return (f"node {j} '{node.op}' gives {node.inputs[i]} as its '{arg}' input, expected its own "
                        f"'{out}' output {got} (the kernel adds into it; memplan-fuse-grad-acc)")
    return ""


def _parse_with_entry_block(op_cls: type[IRDLOperation]) -> None:
    """Give an op whose single-block body is written ``{}`` its empty block when parsed.

    MLIR does this for no-terminator single-block regions; xDSL 0.74's format parser returns a
    region without blocks, which the ``single_block`` constraint then rejects, so an empty graph
    (or program) would print but not parse back.
    """
    parse = op_cls.parse.__func__  # type: ignore[attr-defined]

    def parse_with_block(cls, parser):  # type: ignore[no-untyped-def]
        op = parse(cls, parser)
        if not op.body.blocks:
            op.body.add_block(Block())
        return op

    op_cls.parse = classmethod(parse_with_block)  # type: ignore[method-assign, assignment]


_parse_with_entry_block(GraphOp)
_parse_with_entry_block(ProgramOp)
