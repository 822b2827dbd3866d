"""memplan -> Executable: one arena, a view per DTensor, initialized parameters, captured graphs.

:class:`Executable` is built from a module holding a compiled ``memplan.program`` (the output of
``tr-compile`` / :func:`tr_mlir.compile.compile`) and nothing else (DESIGN sections 4 and 5):

1. **Arena.** The plans of the six variants share ids, slots and offsets (the dialect verifies
   it), so one ``uint8`` arena of ``total_bytes`` serves all of them. Before allocating it the size
   is checked against the memory available (:func:`~tr_mlir.lowering.backend.check_arena`).
2. **Views.** Each DTensor gets a typed view at its offset, once per distinct (offset, dtype,
   shape): its shape in that variant's plan (features and inputs have the variant's batch). A
   DTensor with a zero-byte slot (a region disabled for this configuration) has no view. The
   input data buffers are sized for the largest resolution; a variant at a lower resolution
   views their first ``B*res*res*C`` elements. Range operands are flat views over the byte span
   of a closed region interval, typed by the regions' dtype (bytes when the span mixes dtypes:
   only clears and copies take those).
3. **Initialization** (facts sheet section 7, after the arena is zeroed): by each DTensor's init
   rule in the base plan (parameter shapes are identical in all plans, so once, not six times as
   the seed): :data:`INITIALIZERS`. Random rules draw from ``numpy.random.default_rng((seed, k))``
   for the k-th randomly initialized tensor in id order, so a seed gives the same weights every
   time, and the same for fused and unfused compiles (their parameters come in the same order).
   ``host`` scalars (learning rate, optimizer hyper-parameters, label smoothing, dropout seed)
   are the caller's to write (:meth:`Executable.set_scalar`).
4. **Capture.** For every capture key of the atlas (facts section 11) the key's graph bucket is
   bound against the key's plan, node by node: the node op's family
   (:func:`tr_mlir.dialects.kernels.kernel_id`) keys the backend's kernel table, its operand row
   (:class:`~tr_mlir.dialects.kernels.Operands`) names each positional operand, workspaces are
   the ``ws_<arg>`` DTensors the compiler planned (sized again here from the rule of the
   backend's target, :meth:`KernelSpec.workspace_shapes`, and checked against their slots),
   static params come from the graph's params table, and :meth:`KernelSpec.bind` makes the
   closure. The backend captures the closures of a key into one
   graph. :meth:`Executable.launch` replays ``atlas[variant][gid]`` (nothing for -1).
   **Skipped outputs**: an output the compiler marked dead (:attr:`Node.skipped`, the
   ``skip_outputs`` attribute of ``memplan-skip-dead-outputs``) is bound as ``None``, which the
   kernel documents as "skipped"; marking an output the kernel requires is an
   :class:`ExecutableError`. The executable decides nothing about it.

Nothing here names an op: op knowledge is in the operand table and the kernels, and every
decision is the compiler's: which outputs a node skips, which update kernel a parameter runs
(``decay_all`` is ``memplan-build-graph``'s option, DESIGN section 7). The executable has no
configuration switch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from xdsl.dialects.builtin import DictionaryAttr, FloatAttr, IntegerAttr, ModuleOp, StringAttr

from tr_mlir.dialects.arch import ModelOp
from tr_mlir.dialects.memplan import (
    TRANSIENT_REGIONS,
    VARIANTS,
    AtlasOp,
    DTensor,
    GraphId,
    GraphOp,
    MemRegion,
    Node,
    PlanOp,
    ProgramOp,
    VariantOp,
)
from tr_mlir.errors import TrMlirError
from tr_mlir.lowering.backend import Backend, CapturedGraph, NumpyBackend, check_arena
from tr_mlir.dialects.kernels import KERNEL_IDS, KERNELS, KernelIdError, kernel_id, kernel_name
from tr_mlir.lowering.cpu import KernelSpec
from tr_mlir.lowering.operands import WORKSPACE_PREFIX, operands_for, workspace_tensor_name

DTYPES: Mapping[str, np.dtype] = {"f32": np.dtype(np.float32), "f16": np.dtype(np.float16),
                                  "i32": np.dtype(np.int32), "i8": np.dtype(np.int8)}
"""DTensor dtype name -> NumPy dtype."""

_DATA_REGIONS = (MemRegion.I_A_DATA, MemRegion.I_B_DATA)
_INPUT_REGIONS = (MemRegion.I_A_LABEL, MemRegion.I_A_DATA, MemRegion.I_B_LABEL, MemRegion.I_B_DATA)
_BATCH_REGIONS = frozenset({*_INPUT_REGIONS, MemRegion.F_FEATURE_FP32, MemRegion.F_GRAD_SLOT_FP32,
                            MemRegion.F_FEATURE_FP16, MemRegion.F_GRAD_SLOT_FP16, MemRegion.S_MASK,
                            MemRegion.T_TEMP_FP32, MemRegion.T_TEMP_FP16, MemRegion.T_TEMP_INT32,
                            MemRegion.T_TEMP_INT8, MemRegion.R_PREDICTED_LABEL})


class ExecutableError(TrMlirError):
    """The module cannot be executed (no program, a plan for another target, an op without a
    kernel, a node whose operands do not fit its kernel); the message names what and where."""


# --------------------------------------------------------------------------------------
# Initializers (facts sheet section 7)
# --------------------------------------------------------------------------------------


def _fan_in(shape: tuple[int, ...]) -> int:
    """Fan-in of a KRSC conv weight ``(K, k, k, C/g)`` or an FC weight ``(out, 1, 1, F)``."""
    return max(int(np.prod(shape[1:])), 1)


_INIT_CHUNK = 1 << 16
"""Elements drawn at a time by the random initializers (chunked draws give the same stream)."""


def _flat_target(view: Any) -> tuple[np.ndarray, bool]:
    """A flat float32 array to fill for ``view``: the view itself when it is a plain contiguous
    NumPy array (no copy), else a host buffer to copy in at the end (device arrays)."""
    if type(view) is np.ndarray and view.flags.c_contiguous:
        return view.reshape(-1), False
    return np.empty(int(np.prod(view.shape)), np.float32), True


def kaiming_uniform(view: np.ndarray, rng: np.random.Generator) -> None:
    """PyTorch's default for ``nn.Linear`` / ``nn.Conv2d`` weights: ``kaiming_uniform_(a=sqrt(5))``,
    i.e. U(-b, b) with ``b = gain * sqrt(3 / fan_in) = 1 / sqrt(fan_in)``.

    Drawn in chunks of :data:`_INIT_CHUNK` float64 values (the same stream as one draw of the
    whole shape, so the same weights), so initializing a weight of N elements needs no N-sized
    float64 temporary (VGG16-BN's first FC layer: 103M parameters)."""
    bound = 1.0 / np.sqrt(_fan_in(view.shape))
    flat, copy = _flat_target(view)
    for i in range(0, flat.size, _INIT_CHUNK):
        j = min(i + _INIT_CHUNK, flat.size)
        flat[i:j] = rng.uniform(-bound, bound, j - i)
    if copy:
        view[...] = flat.reshape(view.shape)


def trunc_normal(view: np.ndarray, rng: np.random.Generator) -> None:
    """MLPerf-style conv init (the seed's ``TRUNC_NORMAL``): He-scaled normal truncated at two
    standard deviations, ``std = sqrt(2 / fan_in) / 0.8796`` (the truncation's variance loss
    corrected, as TensorFlow's ``variance_scaling(mode='fan_in', distribution='truncated_normal')``).

    The draws: one standard normal per element in order, then, while any value lies beyond two
    standard deviations, one new draw for each such element in order. Drawn in chunks (the same
    stream as whole-shape draws, so the same weights) without an N-sized float64 temporary."""
    std = np.sqrt(2.0 / _fan_in(view.shape)) / 0.87962566103423978
    flat, copy = _flat_target(view)
    bad_parts = []
    for i in range(0, flat.size, _INIT_CHUNK):
        j = min(i + _INIT_CHUNK, flat.size)
        x = rng.standard_normal(j - i)
        flat[i:j] = x * std
        bad_parts.append(np.flatnonzero(np.abs(x) > 2.0) + i)
    bad = np.concatenate(bad_parts) if bad_parts else np.zeros(0, np.int64)
    while bad.size:
        x = rng.standard_normal(bad.size)
        flat[bad] = x * std
        bad = bad[np.abs(x) > 2.0]
    if copy:
        view[...] = flat.reshape(view.shape)


INITIALIZERS: Mapping[str, Callable[[np.ndarray, DTensor, Callable[[], np.random.Generator]], None]] = {
    "none": lambda v, t, rng: None,
    "host": lambda v, t, rng: None,
    "zeros": lambda v, t, rng: v.fill(0),
    "ones": lambda v, t, rng: v.fill(1),
    "fill": lambda v, t, rng: v.fill(t.init_value),
    "kaiming_uniform": lambda v, t, rng: kaiming_uniform(v, rng()),
    "trunc_normal": lambda v, t, rng: trunc_normal(v, rng()),
}
"""Init rule (:data:`tr_mlir.dialects.memplan.INIT_RULES`) -> ``fn(view, dtensor, rng_factory)``."""

RANDOM_RULES = frozenset({"kaiming_uniform", "trunc_normal"})


# --------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------


def _py(attr: Any) -> Any:
    if isinstance(attr, IntegerAttr):
        v = attr.value.data
        return bool(v) if getattr(attr.type, "width", None) is not None and attr.type.width.data == 1 else int(v)
    if isinstance(attr, FloatAttr):
        return float(attr.value.data)
    if isinstance(attr, StringAttr):
        return attr.data
    return attr


def graph_params(graph: GraphOp) -> list[dict[str, Any]]:
    """The graph's params table as Python dicts (unit/bool params as bools)."""
    out = []
    for d in graph.params.data:
        assert isinstance(d, DictionaryAttr)
        out.append({k: _py(v) for k, v in d.data.items()})
    return out


def find_program(module: ModuleOp) -> tuple[ModelOp, ProgramOp]:
    """The (single) ``arch.model`` and its ``memplan.program`` of ``module``; raises
    :class:`ExecutableError` when there is none, or several."""
    programs = [op for op in module.walk() if isinstance(op, ProgramOp)]
    if len(programs) != 1:
        raise ExecutableError(f"expected one 'memplan.program' in the module, got {len(programs)}; "
                              f"compile the model first (tr-compile / tr_mlir.compile.compile)")
    program = programs[0]
    models = [op for op in module.walk() if isinstance(op, ModelOp) and op.sym_name.data == program.model_name]
    if not models:
        raise ExecutableError(f"'memplan.program' names @{program.model_name}, which the module does not hold")
    return models[0], program


@dataclass(frozen=True)
class Key:
    """One capture key of the atlas: graph, GraphId, ShapeId, plan (facts section 11)."""

    graph: str
    gid: GraphId
    shape: tuple[int, ...]
    plan: str


# --------------------------------------------------------------------------------------
# The executable
# --------------------------------------------------------------------------------------


class Executable:
    """A compiled program made runnable: arena, views, parameters, captured graphs (module doc).

    Args:
        module: a ``builtin.module`` with one ``arch.model`` and its compiled ``memplan.program``
            (plans, graphs, atlas).
        backend: the :class:`~tr_mlir.lowering.backend.Backend` (default :class:`NumpyBackend`).
        seed: seed of the parameter initialization.

    Raises:
        ExecutableError: the module is not a complete compiled program, its plans target another
            backend, or a node cannot be bound to its kernel.
        ArenaTooLargeError: the arena does not fit in the available memory (raised before any
            allocation).
    """

    def __init__(self, module: ModuleOp, *, backend: Backend | None = None, seed: int = 0):
        self.backend: Backend = backend if backend is not None else NumpyBackend()
        self.model, self.program = find_program(module)
        self.seed = seed
        self.variants: list[VariantOp] = self.program.variants()
        if [v.variant_name for v in self.variants] != list(VARIANTS):
            raise ExecutableError("expected the six variants of memplan-derive-shapes in the program")
        plans = {p.plan_name: p for p in self.program.plans()}
        self.plans: list[PlanOp] = []
        for v in self.variants:
            if v.plan is None or v.plan.root_reference.data not in plans:
                raise ExecutableError(f"variant @{v.variant_name} has no plan; run memplan-share-variants "
                                      f"(or the whole tr-compile pipeline)")
            self.plans.append(plans[v.plan.root_reference.data])
        self._variant_of_plan = {p.plan_name: i for i, p in enumerate(self.plans)}
        atlases = self.program.ops_of(AtlasOp)
        if not atlases:
            raise ExecutableError("the program has no 'memplan.atlas'; run memplan-build-atlas (or tr-compile)")
        self.atlas: AtlasOp = atlases[0]
        self.base: PlanOp = self.plans[0]
        if self.base.target_kind is not self.backend.target:
            raise ExecutableError(f"the plan targets '{self.base.target_kind.value}', the {self.backend.name} "
                                  f"backend runs '{self.backend.target.value}' plans; recompile with "
                                  f"target={self.backend.target.value}")
        self.graphs: dict[str, GraphOp] = {g.graph_name: g for g in self.program.graphs()}
        self._params = {name: graph_params(g) for name, g in self.graphs.items()}
        self._tables: dict[str, list[DTensor]] = {}
        for p in self.plans:
            if p.plan_name not in self._tables:
                rows = sorted(p.tensors(), key=lambda t: t.id)
                self._tables[p.plan_name] = rows
        self.tensors: list[DTensor] = self._tables[self.base.plan_name]
        self.ids: dict[str, int] = {t.name: t.id for t in self.tensors}
        self._check_memory()
        self.arena = self.backend.allocate(self.base.size)
        lo = self.base.region_base(MemRegion.I_A_LABEL)
        hi = self.base.region_base(MemRegion.I_B_DATA) + self.base.region_size(MemRegion.I_B_DATA)
        self._host_base = lo
        self.host = self.backend.host_buffer(hi - lo)
        self._views: dict[tuple[int, str, tuple[int, ...]], Any] = {}
        self._scalars: dict[str, Any] = {}
        self.initialize()
        self.keys: list[Key] = [Key(g, gid, tuple(shape), p) for g, gid, shape, p in self.atlas.keys()]
        self.captured: list[CapturedGraph] = [self._capture(k) for k in self.keys]
        if getattr(self.backend, "capture_runs_launches", False):
            self.initialize()  # the GPU warm-up ran the graphs once
        self._slots: list[list[CapturedGraph | None]] = [
            [self.captured[s] if (s := self.atlas.slot(v, gid)) >= 0 else None for gid in GraphId]
            for v in range(len(VARIANTS))]

    # -- memory ----------------------------------------------------------------------------

    def arena_estimate(self) -> tuple[int, int]:
        """``(fixed, per_sample)`` bytes of the arena: the batch-proportional part (inputs,
        features, masks and temporaries of the base variant, divided by its batch) and the rest
        (parameters, gradients, optimizer state, scalars). The kernel workspaces are in neither:
        their size follows the kernels' rules (:meth:`workspace_bytes`)."""
        batch = self.variants[0].batch_size
        pool = self.base.transient_pool
        ws = sum(t.slot for t in self.tensors if t.name.startswith(WORKSPACE_PREFIX))
        scaled = sum(t.slot for t in self.tensors
                     if t.region in _BATCH_REGIONS and t.shape[0] == batch and not t.name.startswith(WORKSPACE_PREFIX)
                     and (pool is None or t.region not in TRANSIENT_REGIONS))
        if pool is not None:  # the transient pool: its bytes beyond the workspaces scale with the batch
            scaled += max(pool[1] - ws, 0)
        return self.base.size - scaled - ws, -(-scaled // batch)

    def workspace_bytes(self, batch: int) -> int:
        """Bytes of the kernel workspaces the plans would hold at ``batch`` (the base variant's
        graphs, every batch-sized operand rescaled), from the kernels' own workspace rules, as
        the planner computes them; an estimate within alignment padding."""
        base = self.variants[0].batch_size
        need: dict[str, int] = {}
        for graph in self.graphs.values():
            table = self._params[graph.graph_name]
            for gid in GraphId:
                for node in graph.nodes(gid):
                    spec = self.backend.kernels.get(kernel_name(node.op))
                    if spec is None or not spec.workspaces:
                        continue
                    params = table[node.param] if node.param >= 0 else {}
                    try:
                        named, _ = operands_for(node.op).named(node.inputs, node.outputs, params, node.op)
                        infos = {}
                        for arg, tid in named.items():
                            if arg in spec.arrays and arg not in spec.workspaces:
                                t = self.tensors[tid]
                                shape = tuple(t.shape)
                                if t.region in _BATCH_REGIONS and shape[0] == base:
                                    shape = (batch, *shape[1:])
                                infos[arg] = (shape, DTYPES[t.dtype])
                        for arg, ((n,), dt) in spec.workspace_shapes(infos, target=self.backend.target,
                                                                     **params).items():
                            need[arg] = max(need.get(arg, 0), n * np.dtype(dt).itemsize)
                    except (KeyError, ValueError):
                        continue
        return sum(2 * (-(-(b + 16) // 256) * 256) for b in need.values())  # fp32 slot rule, an upper bound

    @property
    def bytes_needed(self) -> int:
        """Memory the executable allocates: the arena plus the host staging of the input buffers."""
        return self.base.size + sum(self.base.region_size(r) for r in _INPUT_REGIONS)

    def _check_memory(self) -> None:
        fixed, per_sample = self.arena_estimate()
        batch = self.variants[0].batch_size
        staging = self.bytes_needed - self.base.size
        per = per_sample + -(-staging // batch)
        check_arena(self.bytes_needed, self.backend.available_memory(), batch=batch, per_sample=per,
                    fixed=fixed, size_at=lambda b: fixed + b * per + self.workspace_bytes(b))

    # -- views -----------------------------------------------------------------------------

    def _view(self, offset: int, dtype: np.dtype, shape: tuple[int, ...], base: Any = None) -> Any:
        key = (offset, dtype.str, shape, id(base))
        v = self._views.get(key)  # type: ignore[arg-type]
        if v is None:
            v = self.backend.view(self.arena if base is None else base, offset, dtype, shape)
            self._views[key] = v  # type: ignore[index]
        return v

    def tensor_shape(self, t: DTensor, variant: int) -> tuple[int, ...]:
        """Shape of DTensor ``t``'s view in ``variant``: its plan shape, except that input data
        buffers (sized for the largest resolution) are viewed at the variant's resolution."""
        v = self.variants[variant]
        if t.region in _DATA_REGIONS and v.hw != v.max_hw:
            n, _, _, c = t.shape
            return (n, *v.hw, c)
        return tuple(t.shape)

    def view(self, tid: int | str, variant: int = 0) -> Any:
        """The view of DTensor ``tid`` (id or name) in ``variant`` (created once). Raises
        :class:`ExecutableError` for a DTensor without bytes (a disabled region)."""
        tid = self.ids[tid] if isinstance(tid, str) else tid
        t = self._tables[self.plans[variant].plan_name][tid]
        if t.slot == 0:
            raise ExecutableError(f"DTensor {t.id} '{t.name}' ({t.region.name}) has no bytes in this configuration")
        return self._view(t.offset, DTYPES[t.dtype], self.tensor_shape(t, variant))

    def span_view(self, first: MemRegion, last: MemRegion, *, host: bool = False) -> Any:
        """Flat view of the byte span of regions ``[first .. last]`` (typed by their dtype, or
        ``uint8`` when they mix dtypes); ``host``: the same span of the host staging buffer."""
        offset, nbytes = self.base.span(first, last)
        regions = set(range(first, last + 1))
        dtypes = {t.dtype for t in self.tensors if t.region in regions and t.slot}
        dtype = DTYPES[dtypes.pop()] if len(dtypes) == 1 else np.dtype(np.uint8)
        if host:
            return self._view(offset - self._host_base, dtype, (nbytes // dtype.itemsize,), self.host)
        return self._view(offset, dtype, (nbytes // dtype.itemsize,))

    def host_view(self, tid: int | str, variant: int = 0) -> np.ndarray:
        """The host staging view of an input DTensor (``label_a``, ``data_b``, ...) in ``variant``:
        what ``RANGE_H2D_COPY_A|B`` copies into the arena."""
        tid = self.ids[tid] if isinstance(tid, str) else tid
        t = self._tables[self.plans[variant].plan_name][tid]
        if t.region not in _INPUT_REGIONS:
            raise ExecutableError(f"DTensor '{t.name}' is not an input buffer (I_A_* / I_B_*)")
        return self._view(t.offset - self._host_base, DTYPES[t.dtype], self.tensor_shape(t, variant), self.host)

    def scalar(self, name: str) -> Any:
        """The flat 1-element (or 2 for ``dropout_seed``) view of baseline scalar ``name``."""
        v = self._scalars.get(name)
        if v is None:
            v = self._scalars[name] = self.view(name).reshape(-1)
        return v

    def set_scalar(self, name: str, value: float) -> None:
        """Write a scalar DTensor (lr, beta, wd, label_smoothing, ...) in the arena."""
        self.scalar(name)[0] = value

    def get_scalar(self, name: str) -> float:
        """Read a scalar DTensor from the arena."""
        return float(self.backend.to_host(self.scalar(name)[:1])[0])

    def to_host(self, view: Any) -> np.ndarray:
        """A NumPy copy of a view (device arrays are copied to the host)."""
        return self.backend.to_host(view)

    def has(self, name: str) -> bool:
        """Whether the plans hold a DTensor ``name`` with bytes."""
        tid = self.ids.get(name)
        return tid is not None and self.tensors[tid].slot > 0

    # -- initialization --------------------------------------------------------------------

    def initialize(self) -> None:
        """Zero the arena and apply every DTensor's init rule (module doc, point 3)."""
        self.arena.fill(0)
        k = 0
        for t in self.tensors:
            if t.slot == 0:
                continue
            rule = INITIALIZERS.get(t.init)
            if rule is None:
                raise ExecutableError(f"DTensor '{t.name}' has unknown init rule '{t.init}'")
            if t.init in RANDOM_RULES:
                seed = (self.seed, k)
                k += 1
                rule(self.view(t.id), t, lambda s=seed: np.random.default_rng(list(s)))
            else:
                rule(self.view(t.id), t, lambda: np.random.default_rng(0))

    # -- capture ---------------------------------------------------------------------------

    def _kernel(self, node: Node) -> KernelSpec:
        """The kernel of ``node`` (keyed by the family of its op, :func:`kernel_id`)."""
        name = kernel_name(node.op)
        try:
            name = kernel_id(node.op)
        except KernelIdError as e:
            if name in KERNEL_IDS:  # a family spelt otherwise than it derives its node ops
                raise ExecutableError(str(e)) from None
        spec = self.backend.kernels.get(name)
        if spec is None:
            if name in KERNELS:
                raise ExecutableError(
                    f"the model's graphs run op '{node.op}', whose kernel '{name}' has no {self.backend.name} "
                    f"implementation: give it one (tr_mlir.extend.register_cuda_kernel) or train on "
                    f"device='cpu'")
            raise ExecutableError(f"no kernel for op '{node.op}' (looked up '{name}'): register it with "
                                  f"@tr_mlir.extend.kernel('{name}', ...)")
        return spec

    @staticmethod
    def _skipped(node: Node, ops: Any, spec: KernelSpec) -> frozenset[str]:
        """The kernel arguments of the outputs the IR marks skipped (:attr:`Node.skipped`); raises
        :class:`ExecutableError` for one the kernel must write."""
        args = set()
        for pos in node.skipped:
            arg = ops.outs[pos] if pos < len(ops.outs) else None
            if arg is None or arg not in spec.optional or arg not in spec.writes:
                raise ExecutableError(f"the graph skips output {pos} of '{node.op}', which kernel '{spec.name}' "
                                      f"must write (only optional outputs may be skipped); recompile")
            args.add(arg)
        return frozenset(args)

    def _bind(self, node: Node, params: Mapping[str, Any], variant: int, where: str) -> Callable[[], None]:
        spec = self._kernel(node)
        try:
            ops = operands_for(node.op)
            named, ws_ids = ops.named(node.inputs, node.outputs, params, node.op)
            skipped = self._skipped(node, ops, spec)
            arrays: dict[str, Any] = {arg: self.view(tid, variant) for arg, tid in named.items()
                                      if arg not in skipped}
            spans = ops.named_ranges(
                tuple(self.span_view(a, b) for a, b in node.in_ranges),
                tuple(self.span_view(a, b) for a, b in node.out_ranges), node.op)
            arrays.update(spans)
            if ops.host is not None:
                arrays[ops.host] = tuple(self.span_view(a, b, host=True) for a, b in node.out_ranges)
            arrays.update(self._workspaces(spec, arrays, ws_ids, params, variant))
            return spec.bind(arrays, params)
        except (ValueError, KeyError, ExecutableError) as e:
            msg = e.args[0] if e.args else str(e)
            raise ExecutableError(f"{where}: cannot bind '{node.op}' to kernel '{spec.name}': {msg}") from None

    def _workspaces(self, spec: KernelSpec, arrays: Mapping[str, Any], ws_ids: Sequence[int],
                    params: Mapping[str, Any], variant: int) -> dict[str, Any]:
        if not spec.workspaces:
            return {}
        given = {self.tensors[i].name: i for i in ws_ids}
        out = {}
        infos = {k: v for k, v in arrays.items() if k in spec.arrays and k not in spec.workspaces
                 and hasattr(v, "shape")}
        for arg, ((n,), dtype) in spec.workspace_shapes(infos, target=self.backend.target, **params).items():
            name = workspace_tensor_name(arg)
            if name not in given:
                raise ExecutableError(f"the kernel needs workspace '{arg}' ({n} {np.dtype(dtype).name}), but "
                                      f"the node has no '{name}' output; recompile (the planner asks the kernel)")
            t = self.tensors[given[name]]
            if n * np.dtype(dtype).itemsize > t.slot:
                raise ExecutableError(f"workspace '{name}' has {t.slot} bytes, the kernel needs "
                                      f"{n * np.dtype(dtype).itemsize}; recompile")
            out[arg] = self._view(t.offset, np.dtype(dtype), (n,))
        return out

    def _capture(self, key: Key) -> CapturedGraph:
        graph = self.graphs[key.graph]
        variant = self._variant_of_plan[key.plan]
        table = self._params[key.graph]
        launches = []
        for i, node in enumerate(graph.nodes(key.gid)):
            params = table[node.param] if node.param >= 0 else {}
            where = f"@{key.graph} {key.gid.value} node {i} (plan @{key.plan})"
            launches.append(self._bind(node, params, variant, where))
        return self.backend.capture(launches)

    # -- running ---------------------------------------------------------------------------

    def graph(self, variant: int, gid: GraphId) -> CapturedGraph | None:
        """The captured graph of ``atlas[variant][gid]`` (``None`` when the variant has none)."""
        return self._slots[variant][gid.index]

    def launch(self, variant: int, gid: GraphId) -> None:
        """Replay ``atlas[variant][gid]``; a missing slot (-1) is skipped, as the seed's launch."""
        g = self._slots[variant][gid.index]
        if g is not None:
            g.replay()

    def sequence(self, variant: int, gids: Sequence[GraphId]) -> tuple[CapturedGraph, ...]:
        """The captured graphs of ``gids`` for ``variant``, missing ones left out (precompute a
        step's launches once, then replay them)."""
        return tuple(g for gid in gids if (g := self._slots[variant][gid.index]) is not None)

    @property
    def node_count(self) -> int:
        """Kernel calls captured, over all keys."""
        return sum(len(g) for g in self.captured)
