"""The ``memplan`` ops of phases 1-3: the spec, the variants, the per-layer descriptors and the memory plans."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

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
    STATE_REGIONS,
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
    I64,
    ArrayAttr,
    IntegerAttr,
    StringAttr,
    SymbolNameConstraint,
    SymbolRefAttr,
    UnitAttr,
    i64,
)
from xdsl.ir import (
    Attribute,
)
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    lazy_traits_def,
    opt_prop_def,
    prop_def,
)
from xdsl.traits import HasParent, SymbolOpInterface

# --------------------------------------------------------------------------------------
# Ops: spec and variants
# --------------------------------------------------------------------------------------


def _program_op() -> type[IRDLOperation]:
    """``memplan.program`` (defined with the graphs; the traits of the ops here name it lazily)."""
    from tr_mlir.dialects.memplan._graphs import ProgramOp

    return ProgramOp


class _ProgramChild(IRDLOperation):
    traits = lazy_traits_def(lambda: (HasParent(_program_op()),))


@irdl_op_definition
class SpecOp(_ProgramChild):
    """The compile spec: the one source of truth for phases 1..5 (DESIGN section 1).

    ``batch_size`` is per process; ``train_size`` / ``val_size`` are dataset sizes (they decide the
    last-batch variants); ``train_res`` .. ``train_res_end`` the progressive train resolutions,
    ``val_res`` the validation one; ``world_size`` the number of processes.
    """

    name = "memplan.spec"
    batch_size = prop_def(IntegerAttr[I64])
    train_size = prop_def(IntegerAttr[I64])
    val_size = prop_def(IntegerAttr[I64])
    train_res = prop_def(IntegerAttr[I64])
    train_res_end = prop_def(IntegerAttr[I64])
    val_res = prop_def(IntegerAttr[I64])
    world_size = prop_def(IntegerAttr[I64])
    optimizer = prop_def(OptimizerAttr)
    target = prop_def(TargetAttr)
    assembly_format = (
        "`batch_size` `=` $batch_size `train_size` `=` $train_size `val_size` `=` $val_size "
        "`train_res` `=` $train_res `train_res_end` `=` $train_res_end `val_res` `=` $val_res "
        "`world_size` `=` $world_size `optimizer` $optimizer `target` $target attr-dict"
    )

    def __init__(self, *, batch_size: int, train_size: int, val_size: int, train_res: int,
                 train_res_end: int, val_res: int, world_size: int = 1,
                 optimizer: OptimizerKind = OptimizerKind.MOMENTUM, target: Target = Target.CPU):
        ints = dict(batch_size=batch_size, train_size=train_size, val_size=val_size,
                    train_res=train_res, train_res_end=train_res_end, val_res=val_res,
                    world_size=world_size)
        props: dict[str, Attribute] = {k: IntegerAttr(v, i64) for k, v in ints.items()}
        props["optimizer"] = OptimizerAttr(optimizer)
        props["target"] = TargetAttr(target)
        super().__init__(properties=props)

    def value(self, name: str) -> int:
        """An integer field as a Python int."""
        attr = self.properties[name]
        assert isinstance(attr, IntegerAttr)
        return attr.value.data

    @property
    def optimizer_kind(self) -> OptimizerKind:
        return self.optimizer.data

    @property
    def target_kind(self) -> Target:
        return self.target.data

    def verify_(self) -> None:
        for key in ("batch_size", "train_size", "val_size", "train_res", "train_res_end", "val_res",
                    "world_size"):
            v = self.value(key)
            if v <= 0:
                raise _fail(self, f"expected {key} > 0, got {v}")


@irdl_op_definition
class VariantOp(_ProgramChild):
    """One of the six variants: its batch, resolution, max resolution (sizes the input buffers),
    input channels, amp; after phase 5 the links to its plan and graphs.

    ``res`` / ``max_res`` are heights; a model with a non-square input (H != W) also records the
    widths ``width`` / ``max_width`` (absent: the width equals the height). Val variants have no
    train graph.
    """

    name = "memplan.variant"
    sym_name = prop_def(SymbolNameConstraint())
    batch = prop_def(IntegerAttr[I64])
    res = prop_def(IntegerAttr[I64])
    max_res = prop_def(IntegerAttr[I64])
    width = opt_prop_def(IntegerAttr[I64])
    max_width = opt_prop_def(IntegerAttr[I64])
    channels = prop_def(IntegerAttr[I64])
    amp = opt_prop_def(UnitAttr)
    plan = opt_prop_def(SymbolRefAttr)
    train = opt_prop_def(SymbolRefAttr)
    infer = opt_prop_def(SymbolRefAttr)
    traits = lazy_traits_def(lambda: (HasParent(_program_op()), SymbolOpInterface()))
    assembly_format = (
        "$sym_name `batch` `=` $batch `res` `=` $res (`width` `=` $width^)? `max_res` `=` $max_res "
        "(`max_width` `=` $max_width^)? `channels` `=` $channels "
        "(`amp` $amp^)? (`plan` $plan^)? (`train` $train^)? (`infer` $infer^)? attr-dict"
    )

    def __init__(self, name: str, *, batch: int, res: int, max_res: int, channels: int,
                 amp: bool = False, width: int | None = None, max_width: int | None = None):
        props: dict[str, Attribute] = {
            "sym_name": StringAttr(name),
            "batch": IntegerAttr(batch, i64),
            "res": IntegerAttr(res, i64),
            "max_res": IntegerAttr(max_res, i64),
            "channels": IntegerAttr(channels, i64),
        }
        if (width is not None and width != res) or (max_width is not None and max_width != max_res):
            props["width"] = IntegerAttr(res if width is None else width, i64)
            props["max_width"] = IntegerAttr(max_res if max_width is None else max_width, i64)
        if amp:
            props["amp"] = UnitAttr()
        super().__init__(properties=props)

    @property
    def variant_name(self) -> str:
        return self.sym_name.data

    @property
    def batch_size(self) -> int:
        return self.batch.value.data

    @property
    def resolution(self) -> int:
        return self.res.value.data

    @property
    def max_resolution(self) -> int:
        return self.max_res.value.data

    @property
    def hw(self) -> tuple[int, int]:
        """``(H, W)`` of the variant's input (its resolution; W = H for a square input)."""
        h = self.resolution
        return h, (self.width.value.data if self.width is not None else h)

    @property
    def max_hw(self) -> tuple[int, int]:
        """``(H, W)`` of the input buffers (the largest resolution of the six variants)."""
        h = self.max_resolution
        return h, (self.max_width.value.data if self.max_width is not None else h)

    @property
    def num_channels(self) -> int:
        return self.channels.value.data

    @property
    def is_amp(self) -> bool:
        return self.amp is not None

    def verify_(self) -> None:
        if self.variant_name not in VARIANTS:
            raise _fail(self, f"expected a variant name in {', '.join(VARIANTS)}, got '{self.variant_name}'")
        for key, v in (("batch", self.batch_size), ("res", self.resolution),
                       ("max_res", self.max_resolution), ("channels", self.num_channels)):
            if v <= 0:
                raise _fail(self, f"expected {key} > 0, got {v}")
        if self.max_resolution < self.resolution:
            raise _fail(self, f"expected max_res >= res, got max_res = {self.max_resolution} < "
                              f"res = {self.resolution}")
        if (self.width is None) != (self.max_width is None):
            raise _fail(self, "expected width and max_width together (a non-square input) or neither")
        (_, w), (_, mw) = self.hw, self.max_hw
        if w <= 0 or mw < w:
            raise _fail(self, f"expected 0 < width <= max_width, got width = {w}, max_width = {mw}")
        if not is_train_variant(self.variant_name) and self.train is not None:
            raise _fail(self, f"expected no train graph on validation variant '{self.variant_name}' "
                              f"(val variants only run inference), got {self.train}")


# --------------------------------------------------------------------------------------
# Ops: per-layer descriptors (phases 1 and 2)
# --------------------------------------------------------------------------------------


@irdl_op_definition
class DescsOp(_ProgramChild):
    """Phase 1/2 tensor descriptors of one layer (the ``layer``-th op of the ``arch.model``).

    Per tensor: ``names``, ``regions``, ``dtypes``; ``shapes`` holds NHWC shapes for the six
    variants in order (``6 * 4 * n`` ints, variant-major); ``slots`` (phase 2) the max slot bytes
    over the variants. ``shared`` lists indices of workspace tensors that phase 3 allocates once
    for all layers (a slot of the largest size). ``param_names`` (``memplan-name-parameters``)
    gives each tensor its user-visible parameter or buffer name (``conv0.weight``,
    ``bn3.running_var``, the keys of the Task's ``state_dict``), ``""`` for a tensor that is
    neither; only a tensor of :data:`STATE_REGIONS` may be named, never a shared one, and a name is
    unique in the program (:class:`ProgramOp` checks across layers).
    """

    name = "memplan.descs"
    layer = prop_def(IntegerAttr[I64])
    op = prop_def(StringAttr)
    names = prop_def(ArrayAttr[StringAttr])
    mem_regions = prop_def(ArrayAttr[StringAttr])
    dtypes = prop_def(ArrayAttr[StringAttr])
    shapes = prop_def(_I64_ARRAY)
    shared = opt_prop_def(_I64_ARRAY)
    slots = opt_prop_def(_I64_ARRAY)
    param_names = opt_prop_def(ArrayAttr[StringAttr])
    assembly_format = (
        "$layer $op `names` `=` $names `regions` `=` $mem_regions `dtypes` `=` $dtypes "
        "`shapes` `=` $shapes (`shared` `=` $shared^)? (`slots` `=` $slots^)? "
        "(`param_names` `=` $param_names^)? attr-dict"
    )

    def __init__(self, layer: int, op_name: str, names: Sequence[str], regions: Sequence[str],
                 dtypes: Sequence[str], shapes: Sequence[int], shared: Sequence[int] = (),
                 slots: Sequence[int] | None = None):
        props: dict[str, Attribute] = {
            "layer": IntegerAttr(layer, i64), "op": StringAttr(op_name),
            "names": str_array(names), "mem_regions": str_array(regions), "dtypes": str_array(dtypes),
            "shapes": i64_array(shapes),
        }
        if shared:
            props["shared"] = i64_array(shared)
        if slots is not None:
            props["slots"] = i64_array(slots)
        super().__init__(properties=props)

    @property
    def layer_index(self) -> int:
        return self.layer.value.data

    @property
    def tensor_names(self) -> tuple[str, ...]:
        return _strs(self.names)

    @property
    def tensor_regions(self) -> tuple[MemRegion, ...]:
        return tuple(MemRegion[r] for r in _strs(self.mem_regions))

    @property
    def tensor_dtypes(self) -> tuple[str, ...]:
        return _strs(self.dtypes)

    @property
    def shared_indices(self) -> tuple[int, ...]:
        return () if self.shared is None else _ints(self.shared)

    def shape(self, variant: int, t: int) -> tuple[int, int, int, int]:
        """NHWC shape of tensor ``t`` in variant ``variant`` (0..5)."""
        flat = self.shapes.get_values()
        n = len(self.names.data)
        base = (variant * n + t) * 4
        return tuple(int(v) for v in flat[base:base + 4])  # type: ignore[return-value]

    @property
    def slot_bytes(self) -> tuple[int, ...] | None:
        return None if self.slots is None else _ints(self.slots)

    @property
    def tensor_param_names(self) -> tuple[str, ...] | None:
        """One parameter / buffer name per tensor (``""``: unnamed); None before
        ``memplan-name-parameters``."""
        return None if self.param_names is None else _strs(self.param_names)

    def verify_(self) -> None:
        n = len(self.names.data)
        if self.layer_index < 0:
            raise _fail(self, f"expected layer >= 0, got {self.layer_index}")
        _check_len(self, "regions", len(self.mem_regions.data), n, " (one per name)")
        _check_len(self, "dtypes", len(self.dtypes.data), n, " (one per name)")
        _check_len(self, "shapes", len(self.shapes.get_values()), 4 * n * len(VARIANTS),
                   " (4 per tensor per variant)")
        for r in _strs(self.mem_regions):
            _region_of(self, r, "regions")
        for d in _strs(self.dtypes):
            if d not in DTYPE_BYTES:
                raise _fail(self, f"expected a dtype in {', '.join(DTYPE_BYTES)}, got '{d}'")
        for v in _ints(self.shapes):
            if v <= 0:
                raise _fail(self, f"expected positive shape dims, got {v}")
        for i in self.shared_indices:
            if not 0 <= i < n:
                raise _fail(self, f"expected shared indices in [0, {n}), got {i}")
        if self.slots is not None:
            slots = _ints(self.slots)
            _check_len(self, "slots", len(slots), n, " (one per name)")
            for s in slots:
                if s < 0 or s % ALIGN:
                    raise _fail(self, f"expected slot bytes to be non-negative multiples of {ALIGN}, got {s}")
        pnames = self.tensor_param_names
        if pnames is not None:
            _check_len(self, "param_names", len(pnames), n, " (one per name, \"\" for none)")
            shared = set(self.shared_indices)
            regions = _strs(self.mem_regions)
            for t, pname in enumerate(pnames):
                if not pname:
                    continue
                if any(ch.isspace() for ch in pname) or not pname.isprintable() or pname[0] == "." or pname[-1] == ".":
                    raise _fail(self, f"expected a parameter name without whitespace or control characters, not "
                                      f"starting or ending with '.', got {pname!r}")
                if t in shared:
                    raise _fail(self, f"expected no parameter name on a shared workspace, got '{pname}' on "
                                      f"{self.tensor_names[t]} (shared index {t})")
                if MemRegion[regions[t]] not in STATE_REGIONS:
                    raise _fail(self, f"expected parameter names only on a layer's parameters and BN running "
                                      f"statistics ({', '.join(sorted(r.name for r in STATE_REGIONS))}), got "
                                      f"'{pname}' on {self.tensor_names[t]} in {regions[t]}")
            named = [p for p in pnames if p]
            if len(set(named)) != len(named):
                dup = next(p for p in named if named.count(p) > 1)
                raise _fail(self, f"expected unique parameter names, got '{dup}' twice")


# --------------------------------------------------------------------------------------
# Ops: memory plans (phase 3)
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DTensor:
    """One row of a plan's DTensor table (a Python view; the IR holds columns)."""

    id: int
    name: str
    region: MemRegion
    dtype: str
    shape: tuple[int, int, int, int]
    slot: int
    offset: int
    init: str
    init_value: float


def linear_layout(regions: Sequence[MemRegion], slots: Sequence[int]) -> tuple[list[int], list[int], list[int]]:
    """The seed's ``finalize`` (facts sheet section 5): one pass over the regions in address order,
    tensors of a region in allocation (list) order. Returns (offsets, region bases, region sizes)."""
    members: list[list[int]] = [[] for _ in MemRegion]
    for i, r in enumerate(regions):
        members[r].append(i)
    offsets = [0] * len(regions)
    bases, sizes = [], []
    cursor = 0
    for r in MemRegion:
        bases.append(cursor)
        for i in members[r]:
            offsets[i] = cursor
            cursor += slots[i]
        sizes.append(cursor - bases[-1])
    return offsets, bases, sizes


@irdl_op_definition
class PlanOp(_ProgramChild):
    """A MemoryPlan of one variant: the region table and the DTensor table (facts section 5).

    Regions: ``region_bases`` / ``region_sizes`` for all 68 regions in address order. DTensors, one
    column per field: ``ids``, ``names``, ``regions``, ``dtypes``, ``shapes`` (NHWC, 4 per tensor),
    ``slots`` and ``offsets`` (bytes), ``inits`` (see :data:`INIT_RULES`) and ``init_values``.
    ``total_bytes`` is the arena size; ``target`` decides channel padding.
    """

    name = "memplan.plan"
    sym_name = prop_def(SymbolNameConstraint())
    target = prop_def(TargetAttr)
    total_bytes = prop_def(IntegerAttr[I64])
    region_bases = prop_def(_I64_ARRAY)
    region_sizes = prop_def(_I64_ARRAY)
    ids = prop_def(_I64_ARRAY)
    names = prop_def(ArrayAttr[StringAttr])
    mem_regions = prop_def(ArrayAttr[StringAttr])
    dtypes = prop_def(ArrayAttr[StringAttr])
    shapes = prop_def(_I64_ARRAY)
    slots = prop_def(_I64_ARRAY)
    offsets = prop_def(_I64_ARRAY)
    inits = prop_def(ArrayAttr[StringAttr])
    init_values = prop_def(_F64_ARRAY)
    pool = opt_prop_def(_I64_ARRAY)
    traits = lazy_traits_def(lambda: (HasParent(_program_op()), SymbolOpInterface()))
    assembly_format = (
        "$sym_name `target` $target `total_bytes` `=` $total_bytes "
        "`region_bases` `=` $region_bases `region_sizes` `=` $region_sizes (`pool` `=` $pool^)? "
        "`ids` `=` $ids `names` `=` $names `regions` `=` $mem_regions `dtypes` `=` $dtypes "
        "`shapes` `=` $shapes `slots` `=` $slots `offsets` `=` $offsets `inits` `=` $inits "
        "`init_values` `=` $init_values attr-dict"
    )

    def __init__(self, name: str, target: Target, *, region_bases: Sequence[int],
                 region_sizes: Sequence[int], tensors: Sequence[DTensor],
                 pool: tuple[int, int] | None = None):
        total = (region_bases[-1] + region_sizes[-1]) if region_bases else 0
        if pool is not None:
            total = pool[0] + pool[1]
        props: dict[str, Attribute] = {
            "sym_name": StringAttr(name), "target": TargetAttr(target),
            "total_bytes": IntegerAttr(total, i64),
            "region_bases": i64_array(region_bases), "region_sizes": i64_array(region_sizes),
            "ids": i64_array([t.id for t in tensors]),
            "names": str_array([t.name for t in tensors]),
            "mem_regions": str_array([t.region.name for t in tensors]),
            "dtypes": str_array([t.dtype for t in tensors]),
            "shapes": i64_array([d for t in tensors for d in t.shape]),
            "slots": i64_array([t.slot for t in tensors]),
            "offsets": i64_array([t.offset for t in tensors]),
            "inits": str_array([t.init for t in tensors]),
            "init_values": f64_array([t.init_value for t in tensors]),
        }
        if pool is not None:
            props["pool"] = i64_array(pool)
        super().__init__(properties=props)

    @property
    def transient_pool(self) -> tuple[int, int] | None:
        """``(offset, bytes)`` of the transient pool (``memplan-assign-offsets`` with reuse), or ``None``
        for the seed's layout (every DTensor in its own slot inside its region)."""
        if self.pool is None:
            return None
        a, b = _ints(self.pool)
        return a, b

    @property
    def plan_name(self) -> str:
        return self.sym_name.data

    @property
    def target_kind(self) -> Target:
        return self.target.data

    @property
    def size(self) -> int:
        """Arena bytes (``total_bytes``)."""
        return self.total_bytes.value.data

    def __len__(self) -> int:
        return len(self.ids.get_values())

    def region_base(self, r: MemRegion) -> int:
        return int(self.region_bases.get_values()[r])

    def region_size(self, r: MemRegion) -> int:
        return int(self.region_sizes.get_values()[r])

    def span(self, first: MemRegion, last: MemRegion) -> tuple[int, int]:
        """(offset, bytes) of the closed region interval ``[first .. last]`` (range ops)."""
        start = self.region_base(first)
        return start, self.region_base(last) + self.region_size(last) - start

    def tensors(self) -> Iterator[DTensor]:
        """The DTensor rows in table order."""
        ids, slots, offsets = _ints(self.ids), _ints(self.slots), _ints(self.offsets)
        shapes = _ints(self.shapes)
        names, regions, dtypes, inits = (_strs(self.names), _strs(self.mem_regions), _strs(self.dtypes),
                                         _strs(self.inits))
        values = self.init_values.get_values()
        for i, tid in enumerate(ids):
            yield DTensor(tid, names[i], MemRegion[regions[i]], dtypes[i],
                          shapes[4 * i:4 * i + 4], slots[i], offsets[i], inits[i], float(values[i]))  # type: ignore[arg-type]

    def by_id(self) -> dict[int, DTensor]:
        """id -> DTensor."""
        return {t.id: t for t in self.tensors()}

    # -- verification ------------------------------------------------------------------

    def verify_(self) -> None:
        n = len(self.ids.get_values())
        for what, attr, per in (("names", self.names, 1), ("regions", self.mem_regions, 1),
                                ("dtypes", self.dtypes, 1), ("inits", self.inits, 1)):
            _check_len(self, what, len(attr.data), n, " (one per id)")
        for what, attr, per in (("shapes", self.shapes, 4), ("slots", self.slots, 1),
                                ("offsets", self.offsets, 1), ("init_values", self.init_values, 1)):
            _check_len(self, what, len(attr.get_values()), per * n,
                       " (4 per id)" if per == 4 else " (one per id)")
        if self.pool is not None:
            _check_len(self, "pool", len(self.pool.get_values()), 2, " (offset and bytes)")
        self._verify_regions()
        ids = _ints(self.ids)
        if sorted(ids) != list(range(n)):
            dup = sorted({i for i in ids if ids.count(i) > 1})
            missing = sorted(set(range(n)) - set(ids))
            detail = f"duplicate ids {dup[:5]}" if dup else f"missing ids {missing[:5]}"
            raise _fail(self, f"expected ids to be unique and dense (0..{n - 1}), got {detail}")
        for r in _strs(self.mem_regions):
            _region_of(self, r, "regions")
        for d in _strs(self.dtypes):
            if d not in DTYPE_BYTES:
                raise _fail(self, f"expected a dtype in {', '.join(DTYPE_BYTES)}, got '{d}'")
        for rule in _strs(self.inits):
            if rule not in INIT_RULES:
                raise _fail(self, f"expected an init rule in {', '.join(INIT_RULES)}, got '{rule}'")
        for v in _ints(self.shapes):
            if v <= 0:
                raise _fail(self, f"expected positive shape dims, got {v}")
        self._verify_layout()
        self._verify_correspondence()

    def _verify_regions(self) -> None:
        bases, sizes = _ints(self.region_bases), _ints(self.region_sizes)
        _check_len(self, "region_bases", len(bases), NUM_REGIONS, " (one per region)")
        _check_len(self, "region_sizes", len(sizes), NUM_REGIONS, " (one per region)")
        cursor = 0
        for r in MemRegion:
            if bases[r] != cursor:
                raise _fail(self, f"expected regions contiguous and in order: region {r.name} "
                                  f"should start at {cursor}, got {bases[r]}")
            if sizes[r] < 0 or sizes[r] % ALIGN:
                raise _fail(self, f"expected region sizes to be non-negative multiples of {ALIGN}, "
                                  f"got {sizes[r]} for {r.name}")
            cursor += sizes[r]
        pool = self.transient_pool
        if pool is not None:
            if pool[0] != cursor or pool[1] < 0 or pool[1] % ALIGN:
                raise _fail(self, f"expected the transient pool to start at the end of the last region ({cursor}) "
                                  f"with a non-negative multiple of {ALIGN} bytes, got pool = [{pool[0]}, {pool[1]}]")
            for r in TRANSIENT_REGIONS:
                if sizes[r]:
                    raise _fail(self, f"expected transient region {r.name} to have no bytes of its own in a plan "
                                      f"with a transient pool, got {sizes[r]}")
            cursor += pool[1]
        if self.size != cursor:
            what = "end of the transient pool" if pool is not None else "end of the last region"
            raise _fail(self, f"expected total_bytes = {what} = {cursor}, got {self.size}")

    def _verify_layout(self) -> None:
        bases, sizes = _ints(self.region_bases), _ints(self.region_sizes)
        pool = self.transient_pool
        by_region: dict[MemRegion, list[tuple[int, int, int]]] = {}
        for t in self.tensors():
            if t.offset % ALIGN or t.slot % ALIGN or t.slot < 0:
                raise _fail(self, f"expected 256-aligned offsets and slots, got offset {t.offset} and "
                                  f"slot {t.slot} for DTensor {t.id} '{t.name}'")
            if t.slot and t.slot < slot_bytes(t.shape, t.dtype, t.region, self.target_kind):
                need = slot_bytes(t.shape, t.dtype, t.region, self.target_kind)
                raise _fail(self, f"expected DTensor {t.id} '{t.name}' slot to hold its shape "
                                  f"{list(t.shape)} {t.dtype} ({need} bytes), got {t.slot}")
            r = t.region
            if pool is not None and r in TRANSIENT_REGIONS:
                if t.offset < pool[0] or t.offset + t.slot > pool[0] + pool[1]:
                    raise _fail(self, f"expected DTensor {t.id} '{t.name}' [{t.offset}, {t.offset + t.slot}) "
                                      f"inside the transient pool [{pool[0]}, {pool[0] + pool[1]})")
                continue  # pooled DTensors may share bytes: the program verifier checks their lifetimes
            if t.offset < bases[r] or t.offset + t.slot > bases[r] + sizes[r]:
                raise _fail(self, f"expected DTensor {t.id} '{t.name}' [{t.offset}, {t.offset + t.slot}) "
                                  f"inside its region {r.name} [{bases[r]}, {bases[r] + sizes[r]})")
            by_region.setdefault(r, []).append((t.offset, t.slot, t.id))
        for r, rows in by_region.items():
            rows.sort()
            for (o1, s1, i1), (o2, _s2, i2) in zip(rows, rows[1:]):
                if o1 + s1 > o2:
                    raise _fail(self, f"expected non-overlapping DTensors, got {i1} [{o1}, {o1 + s1}) "
                                      f"and {i2} starting at {o2} in {r.name}")

    def _verify_correspondence(self) -> None:
        bases = _ints(self.region_bases)
        members: dict[MemRegion, list[DTensor]] = {}
        for t in self.tensors():
            if t.slot:
                members.setdefault(t.region, []).append(t)
        for rows in members.values():
            rows.sort(key=lambda t: t.offset)
        for partner, w_span, p_span, ratio in CORRESPONDING_SPANS:
            w_regions = [MemRegion(i) for i in range(w_span[0], w_span[1] + 1)]
            p_regions = [MemRegion(i) for i in range(p_span[0], p_span[1] + 1)]
            if not any(members.get(r) for r in p_regions):
                continue
            w_start, p_start = bases[w_span[0]], bases[p_span[0]]
            for wr, pr in zip(w_regions, p_regions):
                ws, ps = members.get(wr, []), members.get(pr, [])
                if len(ws) != len(ps):
                    raise _fail(self, f"expected {pr.name} to mirror {wr.name} ({partner} element "
                                      f"correspondence), got {len(ps)} tensors for {len(ws)} weights")
                for w, p in zip(ws, ps):
                    if w.shape != p.shape or (w.offset - w_start) != (p.offset - p_start) * ratio:
                        raise _fail(self, f"expected {p.name} (DTensor {p.id}, {pr.name}) at the element "
                                          f"offset and shape of {w.name} (DTensor {w.id}, {wr.name}), got "
                                          f"shape {list(p.shape)} vs {list(w.shape)}, element offset "
                                          f"{(p.offset - p_start) * ratio // 4} vs {(w.offset - w_start) // 4}")
