"""The node-op vocabulary of the memplan dialect: one :class:`KernelId` per kernel family.

A graph node of a ``memplan.nodes`` op names what it runs in the seed's spelling, e.g.
``CONV_FP32_FWD``, ``CONV_AMP_BWD_FIRST_LAYER``, ``GRAD_ACCUM_FP32``, ``RANGE_CLEAR``. The kernel
it binds is precision-free: ``conv_fwd`` runs both ``CONV_FP32_FWD`` and ``CONV_AMP_FWD`` (the
dtypes of the bound arrays decide). A :class:`KernelId` is that family: its registry key
(``conv_fwd``), the precisions it has (``FP32`` and ``AMP``, or none: range and optimizer ops),
and its operand interface (:class:`Operands`: which kernel argument each positional operand of
a node feeds). Everything that names a node op keys on it:

* the layer descriptors build their nodes from the constants of :class:`K`
  (``K.CONV_FWD.op(ctx.prec)``): a misspelt kernel is an ``AttributeError`` there;
* the kernel library (:data:`KERNELS`, filled by :mod:`tr_mlir.lowering.cpu.registry`), the CUDA
  table (:mod:`tr_mlir.lowering.cuda.impls`) and the binder (:mod:`tr_mlir.lowering.executable`)
  resolve a name with :func:`kernel_id`: a name outside the vocabulary is an error when the kernel
  is registered, naming it, not a ``KeyError`` when a node is bound;
* plugins add their families with :func:`register_kernel_id` (``tr_mlir.extend.register_kernel_id``,
  or implicitly through ``tr_mlir.extend.kernel`` / ``register_operands``).

The node op of a family in a precision is :meth:`KernelId.op` (the one place the seed's spelling
is derived: the precision token sits between the stem and the phase, ``CONV`` + ``AMP`` +
``BWD_FIRST_LAYER``) and :func:`parse_node_op` reads it back; :func:`kernel_id` checks that the two
agree, so ``CONV_FWD_FP32`` is refused with the spelling it should have.

A :class:`KernelId` is a ``str`` (its registry key): tables keyed by it answer to the plain
spelling too (``KERNELS["conv_fwd"]``), and its attributes always come from :data:`KERNEL_IDS`.

**Operand rows** (:class:`Operands`). Graph nodes are positional, as the seed's: a COMPUTE node
has input and output DTensor ids, a RANGE node has input/output region spans plus scalar ids.
Kernels take named arrays; the row connects them:

* ``ins`` / ``outs``: the kernel argument of each positional input / output id; ``None`` marks an
  operand no backend reads (the inference conv's statistics ``sum`` / ``sq_sum``, the forward
  loss' ``scaling``, the GPU tree-reduction partials of softmax CE and LARS). One argument may
  appear in both lists (state updated in place: running statistics, the dropout RNG, optimizer
  moments); both must then name one DTensor.
* outputs after the listed ones are **workspaces**: DTensors named ``ws_<arg>``
  (:func:`workspace_tensor_name`) bound to the kernel's workspace argument ``<arg>``. The
  compiler plans them from the kernel's workspace rule (:meth:`KernelImpl.workspace_shapes`, see
  :func:`tr_mlir.passes._descriptors.plan_workspaces`), so nothing is allocated at run time.
* ``in_ranges`` / ``out_ranges``: the kernel argument of each region span; a name ending in
  ``*`` takes every remaining span as a tuple (pairwise copies and casts, clears).
* ``host``: the argument that receives the backend's host staging views of the output spans
  (``RANGE_H2D_COPY_A|B``: the pinned zone the host fills with the next batch).
* ``when``: arguments passed only when a static param is true (the FC bias: ``bias = false``
  leaves a placeholder DTensor that must not be bound).
* ``optional``: trailing ``outs`` a node may leave out; the kernel then gets ``None`` there and
  skips that output (the ReLU mask, which a ReLU whose backward reads its output does not write).
  Such an op plans no workspaces, so a short output list is never mistaken for workspaces.
  Trailing ``ins`` may be optional too: a node that leaves them out passes ``None`` (the batch
  statistics a BN forward reads from the conv before it, ``memplan-fuse-bn-stats``).
* ``adds_into``: trailing optional inputs that each name an output (``{"dx_acc": "dx"}``): a node
  that gives the input gives the output's own DTensor there, and the kernel then adds into that
  output instead of overwriting it (a conv's input gradient added to the residual join's,
  ``memplan-fuse-grad-acc``). Being an input, the old value counts as read; the program verifier
  refuses any other DTensor there.
* ``accumulates``: outputs (or output spans) the kernel adds into, reading their old value
  (``GRAD_ACCUM``'s ``dx += dy``, the metric sums, the EMA). An argument that is also an input
  reads its old value too. Every other output is *overwritten*: the kernel writes all of it
  without reading it (:meth:`Operands.overwrites`). The planner relies on it: a gradient whose
  first writer in a step overwrites it needs no clear (``memplan-narrow-grad-clear``).

A family without a row (``operands=None``) is a library kernel no node binds (LARS's split form,
the seed's aliases).

**The kernel library** (:data:`KERNELS`): KernelId -> implementation (a
:class:`tr_mlir.lowering.cpu.KernelSpec`, seen here through :class:`KernelImpl`: its arrays,
params and workspace rule per target, which is all the compiler asks). The library registers its
kernels when imported; :func:`implementation` imports it by name (:data:`KERNEL_LIBRARY`) the
first time the compiler needs a kernel, so the dialects and passes import nothing of the lowering.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from tr_mlir.dialects.memplan import WORKSPACE_PREFIX

from tr_mlir.errors import PluginError

PRECISIONS = ("FP32", "AMP")
"""The precision tokens of node op names (``LayerCtx.prec``): fp32, or AMP (fp16 storage)."""

PHASES = ("bwd_first_layer", "bwd_from_output", "fwd", "bwd", "inf")
"""Name suffixes the precision token precedes (``conv_bwd_first_layer`` -> ``CONV_<P>_BWD_FIRST_LAYER``);
a name without one takes the token last (``grad_accum`` -> ``GRAD_ACCUM_<P>``)."""



def workspace_tensor_name(arg: str) -> str:
    """DTensor name of the shared workspace for kernel workspace argument ``arg`` (``ws_col``)."""
    return WORKSPACE_PREFIX + arg


class KernelIdError(PluginError, KeyError):
    """A name outside the node-op vocabulary, a node op spelt unlike its family, or a family
    :func:`register_kernel_id` cannot add; the message names it and the fix."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class OperandsError(KernelIdError):
    """A node op without an operand row, or a row :func:`register_operands` cannot add; the
    message names the op and the fix."""


# --------------------------------------------------------------------------------------
# Operand rows
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Operands:
    """How one family's positional node operands map to its kernel's named arguments (module doc)."""

    ins: tuple[str | None, ...] = ()
    outs: tuple[str | None, ...] = ()
    in_ranges: tuple[str, ...] = ()
    out_ranges: tuple[str, ...] = ()
    host: str | None = None
    when: Mapping[str, str] = field(default_factory=dict)
    optional: frozenset[str] = frozenset()
    accumulates: frozenset[str] = frozenset()
    adds_into: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for arg, out in self.adds_into.items():
            if arg not in self.ins or arg not in self.optional or out not in self.outs \
                    or self.ins.index(arg) < self._required(self.ins):
                raise OperandsError(f"Operands.adds_into: {arg!r} -> {out!r} must map a trailing optional input "
                                 f"to an output (ins {list(self.ins)}, outs {list(self.outs)}, optional "
                                 f"{sorted(self.optional)})")

    def overwrites(self, arg: str) -> bool:
        """Whether output argument ``arg`` is written whole without its old value being read: not
        in ``accumulates`` and not also an input (state updated in place)."""
        reads = {a for a in (*self.ins, *self.in_ranges) if a is not None}
        return arg not in self.accumulates and arg not in reads and arg.rstrip("*") not in {
            a.rstrip("*") for a in reads}

    def _required(self, args: tuple[str | None, ...]) -> int:
        n = len(args)
        while n and args[n - 1] in self.optional:
            n -= 1
        return n

    @property
    def required_outs(self) -> int:
        """How many of ``outs`` a node must give (the trailing ``optional`` ones may be left out)."""
        return self._required(self.outs)

    @property
    def required_ins(self) -> int:
        """How many of ``ins`` a node must give (the trailing ``optional`` ones may be left out)."""
        return self._required(self.ins)

    @property
    def arguments(self) -> tuple[str, ...]:
        """Every kernel argument the row names (ids, spans, host views), without the ``*`` marks."""
        names = [a for a in (*self.ins, *self.outs) if a is not None]
        names += [a.rstrip("*") for a in (*self.in_ranges, *self.out_ranges)]
        names += [self.host] if self.host else []
        return tuple(dict.fromkeys(names))

    def passes(self, arg: str, params: Mapping[str, Any]) -> bool:
        """Whether ``arg`` is bound under the node's static ``params`` (see ``when``)."""
        cond = self.when.get(arg)
        return cond is None or bool(params.get(cond))

    def named(self, ins: tuple[Any, ...], outs: tuple[Any, ...], params: Mapping[str, Any],
              op: str = "") -> tuple[dict[str, Any], tuple[Any, ...]]:
        """``({arg: operand}, trailing workspace outputs)`` for one node's positional operands.

        Operands may be anything (ids, shapes, arrays). Raises ``ValueError`` naming the op when
        there are fewer operands than the table lists (trailing optional outputs aside, and the
        trailing optional inputs, which a node gives all or none of), more inputs than it lists,
        or one argument gets two different operands.
        """
        if len(ins) not in (self.required_ins, len(self.ins)):  # the optional inputs come together
            least = "" if self.required_ins == len(self.ins) else f"{self.required_ins} or "
            raise ValueError(f"'{op}' node has {len(ins)} inputs, its operand table lists {least}{len(self.ins)} "
                             f"({list(self.ins)})")
        if len(outs) < self.required_outs:
            least = "" if self.required_outs == len(self.outs) else f"at least {self.required_outs} of "
            raise ValueError(f"'{op}' node has {len(outs)} outputs, its operand table lists {least}"
                             f"{len(self.outs)} ({list(self.outs)})")
        out: dict[str, Any] = {}
        for arg, value in (*zip(self.ins, ins), *zip(self.outs, outs)):
            if arg is None or not self.passes(arg, params):
                continue
            if arg in out and not _same(out[arg], value):
                raise ValueError(f"'{op}' node binds kernel argument '{arg}' to two operands: {out[arg]!r} "
                                 f"and {value!r}")
            out[arg] = value
        return out, tuple(outs[len(self.outs):])

    def named_ranges(self, in_ranges: tuple[Any, ...], out_ranges: tuple[Any, ...],
                     op: str = "") -> dict[str, Any]:
        """``{arg: span or tuple of spans}`` for one RANGE node (see ``in_ranges``/``out_ranges``)."""
        out: dict[str, Any] = {}
        for names, spans, what in ((self.in_ranges, in_ranges, "input"), (self.out_ranges, out_ranges, "output")):
            collect = bool(names) and names[-1].endswith("*")
            fixed = names[:-1] if collect else names
            if len(spans) < len(fixed) or (not collect and len(spans) != len(fixed)):
                raise ValueError(f"'{op}' node has {len(spans)} {what} ranges, its operand table lists "
                                 f"{list(names)}")
            pairs: list[tuple[str, Any]] = list(zip(fixed, spans))
            if collect:
                pairs.append((names[-1][:-1], tuple(spans[len(fixed):])))
            for arg, value in pairs:
                if arg in out and not _same(out[arg], value):
                    raise ValueError(f"'{op}' node binds kernel argument '{arg}' to two different ranges")
                out[arg] = value
        return out


def _same(a: Any, b: Any) -> bool:
    if hasattr(a, "__array_interface__") and hasattr(b, "__array_interface__"):
        return (a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
                and a.nbytes == b.nbytes)
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


# --------------------------------------------------------------------------------------
# KernelId
# --------------------------------------------------------------------------------------


class KernelId(str):
    """One kernel family: its registry key (the ``str`` value, snake_case, precision-free), the
    precisions its node ops come in (``()``: precision-free, the op is the key upper-cased) and
    its operand interface ``operands`` (``None``: a library kernel no node binds). Immutable;
    equal to (and hashed as) its key."""

    stem: str
    phase: str
    precisions: tuple[str, ...]
    operands: Operands | None

    def __new__(cls, name: str, operands: Operands | None = None, *,
                precisions: Iterable[str] = PRECISIONS) -> KernelId:
        precs = tuple(precisions)
        if not name or name != name.lower() or not name.replace("_", "").isalnum() or "__" in name:
            raise KernelIdError(f"KernelId('{name}'): a kernel name is snake_case (conv_fwd, my_op_bwd)")
        bad = [p for p in precs if p not in PRECISIONS]
        if bad:
            raise KernelIdError(f"KernelId('{name}'): unknown precisions {bad}, expected some of {list(PRECISIONS)}")
        if any(t in name.split("_") for t in (p.lower() for p in PRECISIONS)) and precs:
            raise KernelIdError(f"KernelId('{name}'): the name of a family with precisions holds no precision "
                                f"token (its node ops add it)")
        if operands is not None and not isinstance(operands, Operands):
            raise OperandsError(f"KernelId('{name}'): expected an Operands row, got {type(operands).__name__}")
        self = super().__new__(cls, name)
        phase = next((p for p in PHASES if name.endswith("_" + p)), "")
        for attr, value in (("stem", name[:-len(phase) - 1] if phase else name), ("phase", phase),
                            ("precisions", precs), ("operands", operands)):
            object.__setattr__(self, attr, value)
        return self

    def __setattr__(self, attr: str, value: Any) -> None:
        raise AttributeError(f"KernelId '{self}' is immutable")

    def __reduce__(self) -> tuple[Any, ...]:
        return (_restore, (str(self), self.operands, self.precisions))

    def __repr__(self) -> str:
        return f"KernelId({str(self)!r})"

    @property
    def name(self) -> str:
        """The registry key as a plain ``str``."""
        return str(self)

    def with_operands(self, operands: Operands) -> KernelId:
        """The same family with operand row ``operands``."""
        return KernelId(self.name, operands, precisions=self.precisions)

    def op(self, precision: str | None = None) -> str:
        """The node op name of this family in ``precision`` (one of :attr:`precisions`; ``None``
        for a precision-free family): ``K.CONV_BWD_FIRST_LAYER.op("AMP")`` is
        ``CONV_AMP_BWD_FIRST_LAYER``, ``K.GRAD_ACCUM.op("FP32")`` ``GRAD_ACCUM_FP32``,
        ``K.RANGE_CLEAR.op()`` ``RANGE_CLEAR``. Raises :class:`KernelIdError` for a precision
        the family does not have."""
        if not self.precisions:
            if precision is not None:
                raise KernelIdError(f"kernel '{self}' is precision-free: its node op is {self.upper()}, "
                                    f"not one in {precision}")
            return self.upper()
        if precision not in self.precisions:
            raise KernelIdError(f"kernel '{self}' has node ops in {list(self.precisions)}, not in {precision!r}")
        return "_".join(p for p in (self.stem.upper(), precision, self.phase.upper()) if p)

    def ops(self) -> tuple[str, ...]:
        """Every node op name of this family."""
        return tuple(self.op(p) for p in self.precisions) if self.precisions else (self.op(),)


def _restore(name: str, operands: Operands | None, precisions: tuple[str, ...]) -> KernelId:
    return KERNEL_IDS.get(name) or KernelId(name, operands, precisions=precisions)


KERNEL_IDS: dict[str, KernelId] = {}
"""The vocabulary: registry key -> :class:`KernelId` (the built-in families of :class:`K`, and
plugins', :func:`register_kernel_id`)."""


def register_kernel_id(kid: KernelId) -> KernelId:
    """Add the family ``kid`` to :data:`KERNEL_IDS` and return the registered one. Registering an
    equal family again is a no-op; one without an operand row gets ``kid``'s row (the kernel was
    registered first, its row now: :func:`register_operands`).

    Raises :class:`KernelIdError` when ``kid`` is not a :class:`KernelId`, or the key has another
    family: other precisions, or (:class:`OperandsError`) another operand row.
    """
    if not isinstance(kid, KernelId):
        raise KernelIdError(f"register_kernel_id({kid!r}): expected a KernelId, got {type(kid).__name__}")
    old = KERNEL_IDS.get(kid)
    if old is not None:
        if old.precisions != kid.precisions:
            raise KernelIdError(f"register_kernel_id('{kid}'): '{kid}' already is a family with precisions "
                                f"{list(old.precisions)}")
        if kid.operands is None or old.operands == kid.operands:
            return old
        if old.operands is not None:
            raise OperandsError(f"register_kernel_id('{kid}'): '{kid}' already has an operand row {old.operands}")
        if kid in KERNELS:  # keep the library's key the registered object
            KERNELS[kid] = KERNELS.pop(kid)
    KERNEL_IDS[kid] = kid
    return kid


def parse_node_op(op: str) -> tuple[str, str | None]:
    """``(registry key, precision token or None)`` of a node op or registry name, the inverse of
    :meth:`KernelId.op`: ``CONV_AMP_BWD_FIRST_LAYER`` -> ``("conv_bwd_first_layer", "AMP")``,
    ``GRAD_ACCUM_FP32`` -> ``("grad_accum", "FP32")``, ``RANGE_CAST_FP32_TO_FP16`` (a precision-free
    family) -> ``("range_cast_fp32_to_fp16", None)``, ``conv_fwd`` -> ``("conv_fwd", None)``. Purely
    the spelling: the key need not be registered (:func:`kernel_id` resolves it)."""
    low = op.lower()
    if low in KERNEL_IDS:
        return low, None
    tokens = low.split("_")
    precs = [t for t in tokens if t.upper() in PRECISIONS]
    if len(precs) != 1:
        return low, None
    return "_".join(t for t in tokens if t != precs[0]), precs[0].upper()


def kernel_name(op: str) -> str:
    """The registry key of a node op or registry name (:func:`parse_node_op`, the key alone):
    ``CONV_AMP_BWD_FIRST_LAYER`` -> ``conv_bwd_first_layer``."""
    return parse_node_op(op)[0]


def kernel_id(op: str) -> KernelId:
    """The family of a node op (``CONV_AMP_FWD``) or registry key (``conv_fwd``).

    Raises :class:`KernelIdError` naming the op when the key is no registered family, or when a
    node op is spelt otherwise than its family derives it (``CONV_FWD_FP32``: the message gives
    ``CONV_FP32_FWD``).
    """
    if isinstance(op, KernelId) and KERNEL_IDS.get(op) is not None:
        return KERNEL_IDS[op]
    name, prec = parse_node_op(op)
    kid = KERNEL_IDS.get(name)
    if kid is None:
        raise KernelIdError(f"no kernel family '{name}' (node op '{op}'): declare it with "
                            f"tr_mlir.extend.register_kernel_id(KernelId('{name}', Operands(...))) or register "
                            f"its kernel with @tr_mlir.extend.kernel('{name}', ...)")
    if op != name and op not in kid.ops():
        raise KernelIdError(f"node op '{op}' is not a spelling of kernel '{name}': its node ops are "
                            f"{list(kid.ops())}")
    return kid


def register_operands(name: str, entry: Operands) -> Operands:
    """Add the operand row of a plugin's kernel ``name`` (a registry key, or a node op name in any
    spelling: ``CONV_RELU_FP32_FWD`` and ``conv_relu_fwd`` are one row), declaring its family when
    there is none yet (:func:`register_kernel_id`). Registering the same row twice is a no-op.
    Returns ``entry``.

    Raises :class:`OperandsError` when ``entry`` is not an :class:`Operands` or the op already has
    another row.
    """
    key = kernel_name(name)
    if not isinstance(entry, Operands):
        raise OperandsError(f"register_operands('{name}'): expected an Operands row, got {type(entry).__name__}")
    old = KERNEL_IDS.get(key)
    if old is not None and old.operands is not None and old.operands != entry:
        raise OperandsError(f"register_operands('{name}'): '{key}' already has an operand row {old.operands}")
    register_kernel_id(old.with_operands(entry) if old is not None else KernelId(key, entry))
    return entry


def operands_for(op: str) -> Operands:
    """The :class:`Operands` of node op ``op`` (any spelling: ``CONV_AMP_BWD`` or ``conv_bwd``).

    Raises :class:`OperandsError` naming the op when its family has no row (a plugin's kernel
    needs one: ``tr_mlir.extend.register_operands``).
    """
    name = kernel_name(op)
    kid = KERNEL_IDS.get(name)
    if kid is None or kid.operands is None:
        raise OperandsError(f"no operand row for node op '{op}' (kernel '{name}'): the descriptor that emits it "
                            f"needs one; register it with tr_mlir.extend.register_operands('{name}', Operands(...))")
    return kid.operands


class _OperandRows(Mapping[str, Operands]):
    """Registry key -> operand row of every family that has one: a read-only view of
    :data:`KERNEL_IDS` (rows are added with :func:`register_operands`)."""

    def __getitem__(self, name: str) -> Operands:
        kid = KERNEL_IDS.get(name)
        if kid is None or kid.operands is None:
            raise KeyError(name)
        return kid.operands

    def __iter__(self):  # type: ignore[no-untyped-def]
        return (k for k, kid in KERNEL_IDS.items() if kid.operands is not None)

    def __len__(self) -> int:
        return sum(1 for kid in KERNEL_IDS.values() if kid.operands is not None)


OPERANDS: Mapping[str, Operands] = _OperandRows()
"""Registry key -> :class:`Operands` for every family with a row (a view of :data:`KERNEL_IDS`)."""


@dataclass(frozen=True)
class LayerKernels:
    """The families one kind of layer runs, for descriptors shared by several kinds (batch norm
    1d / 2d, the activations, the reshapes): ``LayerKernels(K.BN2D_FWD, K.BN2D_BWD, inf=K.BN2D_INF)``."""

    fwd: KernelId
    bwd: KernelId
    inf: KernelId | None = None
    bwd_first_layer: KernelId | None = None


# --------------------------------------------------------------------------------------
# The kernel library, as the compiler sees it
# --------------------------------------------------------------------------------------

ArrayInfo = tuple[tuple[int, ...], Any]
"""(shape, dtype) of one array, as a planner knows it before the arena exists."""


@dataclass(frozen=True)
class AlgorithmTable:
    """The algorithms of a kernel family whose static params choose how it computes (the conv
    kernels' ``algo`` / ``algo_dgrad`` / ``algo_wgrad``), as the compiler's selection pass reads
    them through the kernel (:attr:`KernelImpl.algorithms`; ``memplan-select-conv-algo``).

    ``auto``: the value that leaves the choice to the kernel's run-time rule; ``directions``:
    static param -> the direction it chooses for; ``algorithms``: name -> an object with
    ``applicable(geometry, fp16) -> bool``; ``variants``: further names the options accept (the
    Winograd variants); ``rule(geometry, fp16)``: the run-time rule's choice; ``check(name,
    geometry, fp16)``: raises ``ValueError`` for a name that does not apply; ``geometry(arrays,
    params)``: ``(geometry, fp16, the params present)`` of one node from its operand
    ``(shape, dtype)`` pairs and static params."""

    auto: str
    directions: Mapping[str, str]
    algorithms: Mapping[str, Any]
    variants: tuple[str, ...]
    rule: Callable[[Any, bool], str]
    check: Callable[[str, Any, bool], None]
    geometry: Callable[[Mapping[str, ArrayInfo], Mapping[str, Any]], tuple[Any, bool, list[str]]]


class KernelImpl(Protocol):
    """What the compiler asks of a kernel implementation (:class:`tr_mlir.lowering.cpu.KernelSpec`):
    its argument roles (``writes``: the arrays it writes; ``optional``: those it accepts as
    ``None``, an optional output then not computed), its static params, its workspace rule per
    target and, for a family whose params choose an algorithm, its :class:`AlgorithmTable`."""

    name: str
    arrays: tuple[str, ...]
    writes: frozenset[str]
    optional: frozenset[str]
    workspaces: tuple[str, ...]
    params: tuple[str, ...]
    algorithms: AlgorithmTable | None

    def workspace_rule(self, target: str = ...) -> Callable[..., dict[str, ArrayInfo]] | None: ...

    def workspace_shapes(self, arrays: Mapping[str, Any], *, target: str = ...,
                         **params: Any) -> dict[str, ArrayInfo]: ...


KERNELS: dict[str, Any] = {}
"""KernelId -> its implementation (a ``KernelSpec``), filled by the kernel library when imported
(:func:`tr_mlir.lowering.cpu.registry.register`); ``tr_mlir.lowering.cpu.KERNELS`` is this dict."""

KERNEL_LIBRARY = "tr_mlir.lowering.cpu"
"""The module that registers the built-in kernels (imported by :func:`load_kernel_library`)."""


def load_kernel_library() -> Mapping[str, KernelImpl]:
    """:data:`KERNELS`, after importing :data:`KERNEL_LIBRARY` (once) so the built-in kernels are in it."""
    importlib.import_module(KERNEL_LIBRARY)
    return KERNELS


def implementation(op: str) -> KernelImpl:
    """The implementation of node op or registry name ``op`` (:func:`kernel_id`, then
    :data:`KERNELS`). Raises :class:`KernelIdError` naming the op when the family or its kernel
    does not exist."""
    name = kernel_name(op)
    spec = load_kernel_library().get(name) if name in KERNEL_IDS else None
    if spec is None:
        raise KernelIdError(f"no kernel for op '{op}' (looked up '{name}'): register one with "
                            f"@tr_mlir.extend.kernel('{name}', writes=[...])")
    kernel_id(op)  # a node op spelt otherwise than its family derives it is refused
    return spec


def skippable_outputs(op: str, count: int, inputs: int = 0) -> frozenset[int]:
    """Positions among the first ``count`` outputs of a node of op ``op`` that its kernel may leave
    out (``memplan-skip-dead-outputs``): an output argument of the operand row that the
    implementation writes and accepts as ``None``, and not one the node's ``inputs`` (how many it
    gives) make the kernel add into (``adds_into``). Empty for an op without a kernel or operand row."""
    try:
        spec, row = implementation(op), operands_for(op)
    except KernelIdError:
        return frozenset()
    optional = (spec.optional & spec.writes) - set(row.when)  # a `when` argument is its param's to bind
    optional -= {out for arg, out in row.adds_into.items() if row.ins.index(arg) < inputs}
    return frozenset(p for p, arg in enumerate(row.outs[:count]) if arg in optional)


def binding_problem(op: str) -> str:
    """What node op ``op`` lacks to bind, as ``"node op 'X', which has no kernel 'x': register one
    with ..."`` (the registration that fills it), or ``""`` when its family (:func:`kernel_id`)
    has a kernel (:data:`KERNELS`) and an operand row."""
    name = kernel_name(op)
    if name not in KERNEL_IDS or name not in load_kernel_library():
        return (f"node op '{op}', which has no kernel '{name}': register one with "
                f"@tr_mlir.extend.kernel('{name}', writes=[...])")
    try:
        kid = kernel_id(op)
    except KernelIdError as e:
        return f"node op '{op}': {e}"
    if kid.operands is None:
        return f"node op '{op}', which has no operand row: tr_mlir.extend.register_operands('{kid}', Operands(...))"
    return ""


# --------------------------------------------------------------------------------------
# The built-in families
# --------------------------------------------------------------------------------------

_FREE: tuple[str, ...] = ()
_XY = Operands(("x",), ("y",))
_DYDX = Operands(("dy",), ("dx",))
_DY_X = Operands(("dy", "x"), ("dx",))  # the activations recompute f'(x) from the input
_CONV_INF = Operands(("x", "w"), ("y", None, None))  # the seed's cuDNN forward also emits sum / sq_sum
# the training forward writes them (Σy and Σ(y - mean)^2 per channel) under bn_stats = true
# (memplan-fuse-bn-stats), for the BN forward after it, which then reads them instead of y
_CONV_FWD = Operands(("x", "w"), ("y", "sum", "sq_sum"), when={"sum": "bn_stats", "sq_sum": "bn_stats"})
_BN_STATS = frozenset({"sum", "sq_sum"})
_BN_FWD = Operands(("x", "gamma", "beta", "running_mean", "running_var", "eps", "momentum", "sum", "sq_sum"),
                   ("y", "save_mean", "save_istd", "running_mean", "running_var"), optional=_BN_STATS)
_BN_BWD = Operands(("dy", "gamma", "save_mean", "save_istd", "x"), ("dx", "dgamma", "dbeta"))
_BN_INF = Operands(("x", "eq_scale", "eq_bias"), ("y",))
_BN_RELU_OUTS = ("y", "save_mean", "save_istd", "running_mean", "running_var", "mask")
_BN_GATED = ("gamma", "save_mean", "save_istd", "x")
_RELU_FWD = Operands(("x",), ("y", "mask"), optional=frozenset({"mask"}))  # no mask in the output form
_MAXPOOL_FWD = Operands(("x",), ("y", "mask"))
_FC_FWD = Operands(("x", "w", "b"), ("y",), when={"b": "bias"})
_CE_FWD = Operands(("logits", None, "batch_size", "labels", "label_smoothing"),
                   ("loss", "inv_batch", "pred", "probs", "top1", "top5", None, None, None))
_LARS_TRUST = Operands(("w", "g", "trust_coefficient", "weight_decay", "eps", "loss_scale", "has_nan", None),
                       ("trust_ratio",))
_LARS_UPDATE = Operands(("w", "g", "m", "trust_ratio", "lr", "momentum", "weight_decay", "loss_scale", "has_nan"),
                        ("w", "m"))
_ADAM_IDS = ("beta1", "beta2", "eps", "loss_scale", "bc1", "bc2", "has_nan")
_COPY = Operands(in_ranges=("src*",), out_ranges=("dst*",))
_H2D = Operands(out_ranges=("dst*",), host="src")
_ALLREDUCE = Operands(in_ranges=("data*",), out_ranges=("data*",))
_SGD_W = Operands(("lr", "weight_decay", "loss_scale", "has_nan"), in_ranges=("w", "g"), out_ranges=("w",))
_MOM_W = Operands(("lr", "weight_decay", "momentum", "loss_scale", "has_nan"), in_ranges=("w", "g", "m"),
                  out_ranges=("w", "m"))
_ADAM_W = Operands(("lr", "weight_decay", *_ADAM_IDS), in_ranges=("w", "g", "m", "v"), out_ranges=("w", "m", "v"))
_MOM_B = Operands(("lr", "momentum", "loss_scale", "has_nan"), in_ranges=("w", "g", "m"), out_ranges=("w", "m"))


def _id(name: str, operands: Operands | None = None, precisions: Iterable[str] = PRECISIONS) -> KernelId:
    return register_kernel_id(KernelId(name, operands, precisions=precisions))


class K:
    """The built-in families, one constant each (``K.CONV_FWD`` is ``conv_fwd``); the layer
    descriptors and the optimizer graphs build their nodes from these."""

    # conv (weights KRSC); the first layer computes no dX
    CONV_FWD = _id("conv_fwd", _CONV_FWD)
    CONV_INF = _id("conv_inf", _CONV_INF)
    CONV_BWD = _id("conv_bwd", Operands(("dy", "w", "x", "dx_acc"), ("dx", "dw"), optional=frozenset({"dx_acc"}),
                                        adds_into={"dx_acc": "dx"}))
    CONV_BWD_FIRST_LAYER = _id("conv_bwd_first_layer", Operands(("dy", "w", "x"), ("dw",)))
    # batch norm: the forward lists the running statistics it updates among its outputs
    BN1D_FWD = _id("bn1d_fwd", Operands(_BN_FWD.ins[:-2], _BN_FWD.outs))
    BN1D_BWD = _id("bn1d_bwd", _BN_BWD)
    BN1D_INF = _id("bn1d_inf", _BN_INF)
    BN2D_FWD = _id("bn2d_fwd", _BN_FWD)
    BN2D_BWD = _id("bn2d_bwd", _BN_BWD)
    BN2D_INF = _id("bn2d_inf", _BN_INF)
    # batch norm + ReLU (and + residual add before the ReLU) in one pass each way; the mask or
    # output form as a ReLU's (lowering/cpu/norm.py)
    BN2D_RELU_FWD = _id("bn2d_relu_fwd", Operands(_BN_FWD.ins, _BN_RELU_OUTS,
                                                  optional=frozenset({"mask"}) | _BN_STATS))
    BN2D_RELU_BWD = _id("bn2d_relu_bwd", Operands(("dy", "mask", *_BN_GATED), ("dx", "dgamma", "dbeta")))
    BN2D_RELU_BWD_FROM_OUTPUT = _id("bn2d_relu_bwd_from_output",
                                    Operands(("dy", "y", *_BN_GATED), ("dx", "dgamma", "dbeta")))
    BN2D_ADD_RELU_FWD = _id("bn2d_add_relu_fwd", Operands(("x", "skip", *_BN_FWD.ins[1:]), _BN_RELU_OUTS,
                                                          optional=frozenset({"mask"}) | _BN_STATS))
    BN2D_ADD_RELU_BWD = _id("bn2d_add_relu_bwd", Operands(("dy", "mask", *_BN_GATED),
                                                          ("dx", "dskip", "dgamma", "dbeta")))
    BN2D_ADD_RELU_BWD_FROM_OUTPUT = _id("bn2d_add_relu_bwd_from_output",
                                        Operands(("dy", "y", *_BN_GATED), ("dx", "dskip", "dgamma", "dbeta")))
    BN_UPDATE_EQ_PARAMS = _id("bn_update_eq_params",
                              Operands(("gamma", "beta", "running_mean", "running_var", "eps"), ("eq_scale", "eq_bias")),
                              _FREE)
    # ReLU: the mask form, or the output form (no mask: the backward reads y)
    RELU_FWD = _id("relu_fwd", _RELU_FWD)
    RELU_INF = _id("relu_inf", _RELU_FWD)
    RELU_BWD = _id("relu_bwd", Operands(("dy", "mask"), ("dx",)))
    RELU_BWD_FROM_OUTPUT = _id("relu_bwd_from_output", Operands(("dy", "y"), ("dx",)))
    TANH_FWD, TANH_INF, TANH_BWD = (_id(f"tanh_{p}", o) for p, o in (("fwd", _XY), ("inf", _XY), ("bwd", _DY_X)))
    SIGMOID_FWD, SIGMOID_INF, SIGMOID_BWD = (_id(f"sigmoid_{p}", o) for p, o in (("fwd", _XY), ("inf", _XY),
                                                                                ("bwd", _DY_X)))
    SILU_FWD, SILU_INF, SILU_BWD = (_id(f"silu_{p}", o) for p, o in (("fwd", _XY), ("inf", _XY), ("bwd", _DY_X)))
    RELU6_FWD, RELU6_INF, RELU6_BWD = (_id(f"relu6_{p}", o) for p, o in (("fwd", _XY), ("inf", _XY), ("bwd", _DY_X)))
    LEAKY_RELU_FWD, LEAKY_RELU_INF, LEAKY_RELU_BWD = (_id(f"leaky_relu_{p}", o) for p, o in (
        ("fwd", _XY), ("inf", _XY), ("bwd", _DY_X)))
    HARDSWISH_FWD, HARDSWISH_INF, HARDSWISH_BWD = (_id(f"hardswish_{p}", o) for p, o in (
        ("fwd", _XY), ("inf", _XY), ("bwd", _DY_X)))
    ELU_FWD, ELU_INF, ELU_BWD = (_id(f"elu_{p}", o) for p, o in (("fwd", _XY), ("inf", _XY), ("bwd", _DY_X)))
    # pooling
    MAXPOOL_FWD = _id("maxpool_fwd", _MAXPOOL_FWD)
    MAXPOOL_INF = _id("maxpool_inf", _MAXPOOL_FWD)
    MAXPOOL_BWD = _id("maxpool_bwd", Operands(("dy", "mask"), ("dx",)))
    AVGPOOL_FWD = _id("avgpool_fwd", _XY)
    AVGPOOL_INF = _id("avgpool_inf", _XY)
    AVGPOOL_BWD = _id("avgpool_bwd", _DYDX)
    GAP_FWD = _id("gap_fwd", _XY)
    GAP_INF = _id("gap_inf", _XY)
    GAP_BWD = _id("gap_bwd", _DYDX)
    # dense (FC weights (out, H*W*C)); the bias is bound only with bias = true
    FC_FWD = _id("fc_fwd", _FC_FWD)
    FC_INF = _id("fc_inf", _FC_FWD)
    FC_BWD = _id("fc_bwd", Operands(("dy", "w", "x"), ("dx", "dw", "db"), when={"db": "bias"}))
    FC_BWD_FIRST_LAYER = _id("fc_bwd_first_layer", Operands(("dy", "w", "x"), ("dw", "db"), when={"db": "bias"}))
    # an FC and its ReLU in the GEMM epilogue (memplan-fuse-fc-relu): the forward of fc -> relu,
    # the backward of relu -> fc (the FC's input is the ReLU's output; dx the ReLU input's gradient)
    FC_RELU_FWD = _id("fc_relu_fwd", _FC_FWD)
    RELU_FC_BWD = _id("relu_fc_bwd", Operands(("dy", "w", "x"), ("dx", "dw", "db"), when={"db": "bias"}))
    # reshapes and copies (identity_bwd is the copy identity_fwd(x, y): dy -> x, dx -> y)
    FLATTEN_FWD = _id("flatten_fwd", _XY)
    FLATTEN_INF = _id("flatten_inf", _XY)
    FLATTEN_BWD = _id("flatten_bwd", _DYDX)
    FLATTEN_BWD_FIRST_LAYER = _id("flatten_bwd_first_layer", Operands())
    CHANNEL_PADDING_FWD = _id("channel_padding_fwd", _XY)
    CHANNEL_PADDING_INF = _id("channel_padding_inf", _XY)
    CHANNEL_PADDING_BWD = _id("channel_padding_bwd", _DYDX)
    CHANNEL_PADDING_BWD_FIRST_LAYER = _id("channel_padding_bwd_first_layer", Operands())
    IDENTITY_FWD = _id("identity_fwd", _XY)
    IDENTITY_INF = _id("identity_inf", _XY)
    IDENTITY_BWD = _id("identity_bwd", _XY)
    DTENSOR_COPY = _id("dtensor_copy", _XY, _FREE)
    # loss, dropout, add, gradient accumulation
    SOFTMAX_CE_FWD = _id("softmax_ce_fwd", _CE_FWD)
    SOFTMAX_CE_INF = _id("softmax_ce_inf", _CE_FWD)
    SOFTMAX_CE_BWD = _id("softmax_ce_bwd", Operands(("probs", "inv_batch", "loss_scale", "labels", "label_smoothing"),
                                                    ("dlogits",)))
    DROPOUT_FWD = _id("dropout_fwd", Operands(("x", "rng"), ("y", "mask", "rng")))
    DROPOUT_BWD = _id("dropout_bwd", Operands(("dy", "mask"), ("dx",)))
    ADD_FWD = _id("add_fwd", Operands(("a", "b"), ("y",)))
    ADD_BWD = _id("add_bwd", Operands(("dy",), ("da", "db")))
    GRAD_ACCUM = _id("grad_accum", Operands(("dy", "dx"), ("dx",), accumulates=frozenset({"dx"})))
    # step scalars and LARS (per parameter family: fc, first conv, deep convs)
    SCALAR_INCREMENT = _id("scalar_increment", Operands(("step", "has_nan"), ("step",)), _FREE)
    ADAM_BIAS_CORRECTION = _id("adam_bias_correction", Operands(("step", "beta1", "beta2"), ("bc1", "bc2")), _FREE)
    LARS_COMPUTE_TRUST_RATIO_FC = _id("lars_compute_trust_ratio_fc", _LARS_TRUST, _FREE)
    LARS_COMPUTE_TRUST_RATIO_FIRST = _id("lars_compute_trust_ratio_first", _LARS_TRUST, _FREE)
    LARS_COMPUTE_TRUST_RATIO_DEEP = _id("lars_compute_trust_ratio_deep", _LARS_TRUST, _FREE)
    LARS_UPDATE_FC = _id("lars_update_fc", _LARS_UPDATE, _FREE)
    LARS_UPDATE_FIRST = _id("lars_update_first", _LARS_UPDATE, _FREE)
    LARS_UPDATE_DEEP = _id("lars_update_deep", _LARS_UPDATE, _FREE)
    LARS_NESTEROV_UPDATE_FC = _id("lars_nesterov_update_fc", _LARS_UPDATE, _FREE)
    LARS_NESTEROV_UPDATE_FIRST = _id("lars_nesterov_update_first", _LARS_UPDATE, _FREE)
    LARS_NESTEROV_UPDATE_DEEP = _id("lars_nesterov_update_deep", _LARS_UPDATE, _FREE)
    # range ops
    RANGE_CLEAR = _id("range_clear", Operands(out_ranges=("out*",)), _FREE)
    RANGE_D2D_COPY = _id("range_d2d_copy", _COPY, _FREE)
    RANGE_CAST_FP32_TO_FP16 = _id("range_cast_fp32_to_fp16", _COPY, _FREE)
    RANGE_CAST_FP16_TO_FP32 = _id("range_cast_fp16_to_fp32", _COPY, _FREE)
    RANGE_H2D_COPY_A = _id("range_h2d_copy_a", _H2D, _FREE)
    RANGE_H2D_COPY_B = _id("range_h2d_copy_b", _H2D, _FREE)
    RANGE_MEAN_ALLREDUCE = _id("range_mean_allreduce", _ALLREDUCE, _FREE)
    RANGE_SUM_ALLREDUCE = _id("range_sum_allreduce", _ALLREDUCE, _FREE)
    RANGE_BN_STATS_ALLREDUCE = _id("range_bn_stats_allreduce", _ALLREDUCE, _FREE)
    RANGE_CHECK_NAN = _id("range_check_nan", Operands(outs=("has_nan",), in_ranges=("grads*",)), _FREE)
    RANGE_GRAD_SCALING = _id("range_grad_scaling", Operands(("has_nan", "loss_scale"), ("loss_scale",)), _FREE)
    RANGE_EMA_PARAM_UPDATE = _id("range_ema_param_update",
                                 Operands(("decay", "has_nan"), in_ranges=("w",), out_ranges=("ema",),
                                          accumulates=frozenset({"ema"})), _FREE)
    RANGE_ACCUM_METRICS = _id("range_accum_metrics", Operands(("batch_size", "loss", "top1", "top5"),
                                                              ("acc_loss", "acc_top1", "acc_top5"),
                                                              accumulates=frozenset({"acc_loss", "acc_top1",
                                                                                     "acc_top5"})), _FREE)
    RANGE_UPDATE_WEIGHT_SGD = _id("range_update_weight_sgd", _SGD_W, _FREE)
    RANGE_UPDATE_WEIGHT_MOMENTUM = _id("range_update_weight_momentum", _MOM_W, _FREE)
    RANGE_UPDATE_WEIGHT_NESTEROV = _id("range_update_weight_nesterov", _MOM_W, _FREE)
    RANGE_UPDATE_WEIGHT_ADAM = _id("range_update_weight_adam", _ADAM_W, _FREE)
    RANGE_UPDATE_WEIGHT_ADAMW = _id("range_update_weight_adamw", _ADAM_W, _FREE)
    RANGE_UPDATE_BIAS_SGD = _id("range_update_bias_sgd", Operands(("lr", "loss_scale", "has_nan"), in_ranges=("w", "g"),
                                                                  out_ranges=("w",)), _FREE)
    RANGE_UPDATE_BIAS_MOMENTUM = _id("range_update_bias_momentum", _MOM_B, _FREE)
    RANGE_UPDATE_BIAS_NESTEROV = _id("range_update_bias_nesterov", _MOM_B, _FREE)
    RANGE_UPDATE_BIAS_ADAM = _id("range_update_bias_adam", Operands(("lr", *_ADAM_IDS), in_ranges=("w", "g", "m", "v"),
                                                                    out_ranges=("w", "m", "v")), _FREE)

    def __init__(self) -> None:
        raise TypeError("K is a namespace of KernelId constants")


LIBRARY_KERNELS: tuple[KernelId, ...] = (
    *(_id(n) for n in ("noop", "grad_acc", "add_bwd_acc", "axpy_fwd", "dropout_inf")),
    *(_id(n, None, _FREE) for n in ("lars_compute_trust_ratio", "lars_update", "lars_nesterov_update",
                                    "range_update_weight_lars", "range_update_weight_lars_nesterov",
                                    "range_h2d_copy_dtensor", "range_sema_switch")),
)
"""Built-in families without an operand row: library kernels no node binds (LARS's split form, the seed's aliases and seed range ops the atlas does not emit)."""
