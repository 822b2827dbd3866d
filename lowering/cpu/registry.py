"""The kernel registry: one :class:`KernelSpec` per compute/range op name, in :data:`KERNELS`.

A kernel is a plain function. Its positional-or-keyword parameters are **arrays** (views into
the arena, or small 1-element "scalar" arrays read at call time); its keyword-only parameters
are **static params** (Python ints/floats fixed at compile time). It writes its outputs in place
and allocates nothing whose size grows with an activation (at most fixed-size chunk temporaries,
see :mod:`._util`). Scratch memory a kernel needs is passed in as **workspace** arrays whose sizes
come from :meth:`KernelSpec.workspace_shapes`, so the compiler can plan them.

A kernel has one implementation per target (:data:`TARGETS`): the function registered here runs
on the CPU, the CUDA backend (:mod:`tr_mlir.lowering.cuda.backend`) binds the same spec to its own
launcher. The implementations take the same arguments but need different scratch memory (the CUDA
convolutions are implicit GEMMs: no im2col columns, no padded copies, no fp32 casts of fp16
operands), so a kernel family declares its workspace rule per target (``target_workspace_fns``)
and a plan holds only what its target's kernels use.

The runtime binds a node once (:meth:`KernelSpec.bind`) and replays the returned zero-argument
closure every step.

Every kernel belongs to a family of the node-op vocabulary
(:class:`tr_mlir.dialects.kernels.KernelId`, e.g. ``K.CONV_FWD``): :func:`register` resolves the
name against it (a name outside it is an error naming the kernel, when the module registering it
is imported) and keys :data:`KERNELS` by the KernelId. :data:`KERNELS` is the vocabulary's own
table (:data:`tr_mlir.dialects.kernels.KERNELS`), the one the compiler asks for workspace rules.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from tr_mlir.dialects import kernels as _vocabulary
from tr_mlir.dialects.kernels import (
    PRECISIONS,
    AlgorithmTable,
    KernelId,
    KernelIdError,
    kernel_id,
    kernel_name,
)

from ._prepared import Stale, launch_state

ArrayInfo = tuple[tuple[int, ...], np.dtype]
"""(shape, dtype) of one array, as a planner knows it before the arena exists."""

WorkspaceFn = Callable[..., dict[str, ArrayInfo]]
"""``fn(arrays: dict[str, ArrayInfo], **params) -> {workspace name: (shape, dtype)}``."""

CPU, CUDA = "cpu", "cuda"
TARGETS = (CPU, CUDA)
"""The targets a kernel has implementations for: the values of
:class:`tr_mlir.dialects.memplan.Target` (a plan's ``target``, a backend's ``target``)."""


def _info(value: Any) -> ArrayInfo:
    """(shape, dtype) of an array, or of a ``(shape, dtype)`` pair."""
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return tuple(int(d) for d in value.shape), np.dtype(value.dtype)
    shape, dtype = value
    return tuple(int(d) for d in shape), np.dtype(dtype)


@dataclass(frozen=True)
class KernelSpec:
    """One kernel: its function and the roles of its arguments.

    ``arrays`` are the array arguments in signature order; ``writes`` the subset it writes
    (outputs, in-place updated state such as running statistics or optimizer moments);
    ``workspaces`` the call-scoped scratch arrays (contents undefined before and after a call);
    ``optional`` the arrays that may be passed as ``None``; ``params`` the static keyword
    parameters, with ``defaults`` for the optional ones. ``kind`` is ``"compute"`` or
    ``"range"`` (range kernels take flat 1-D views over contiguous region spans).

    ``workspace_fn`` sizes the workspaces of the CPU implementation (``fn``);
    ``target_workspace_fns`` those of the implementations on other targets (target name -> rule,
    ``None``: that implementation uses none of them). A target it does not name uses
    ``workspace_fn`` (see :meth:`workspace_rule`).

    ``prepare`` (:class:`PreparedLaunch`) belongs to ``prepare_for``, the function it was
    registered with: a spec whose ``fn`` is replaced (``dataclasses.replace(spec, fn=...)``, the
    CUDA table, the gloo all-reduces) binds plain calls of its new function.
    """

    name: str
    fn: Callable[..., None]
    arrays: tuple[str, ...]
    writes: frozenset[str]
    workspaces: tuple[str, ...] = ()
    optional: frozenset[str] = frozenset()
    params: tuple[str, ...] = ()
    defaults: Mapping[str, Any] = field(default_factory=dict)
    kind: str = "compute"
    workspace_fn: WorkspaceFn | None = None
    target_workspace_fns: Mapping[str, WorkspaceFn | None] = field(default_factory=dict)
    algorithms: AlgorithmTable | None = None
    prepare: Callable[..., Callable[[], None] | None] | None = None
    prepare_for: Callable[..., None] | None = None

    @property
    def reads(self) -> tuple[str, ...]:
        """Arrays read and not written (inputs and scalar operands)."""
        return tuple(a for a in self.arrays if a not in self.writes and a not in self.workspaces)

    @property
    def outputs(self) -> tuple[str, ...]:
        """Arrays written (outputs and updated state), in signature order."""
        return tuple(a for a in self.arrays if a in self.writes)

    @property
    def doc(self) -> str:
        return inspect.getdoc(self.fn) or ""

    def workspace_rule(self, target: str = CPU) -> WorkspaceFn | None:
        """The workspace rule of the implementation on ``target`` (one of :data:`TARGETS`):
        its entry in ``target_workspace_fns``, else ``workspace_fn``; ``None``: no workspaces."""
        if target not in TARGETS:
            raise ValueError(f"kernel '{self.name}': unknown target '{target}', expected one of {list(TARGETS)}")
        return self.target_workspace_fns.get(target, self.workspace_fn)

    def workspace_shapes(self, arrays: Mapping[str, Any], *, target: str = CPU, **params: Any) -> dict[str, ArrayInfo]:
        """Shapes and dtypes of the workspaces for one call of the implementation on ``target``.

        ``arrays`` maps the kernel's non-workspace array names to arrays or ``(shape, dtype)``
        pairs (optional ones may be left out or ``None``); ``params`` are the static params.
        Workspaces are flat: a kernel accepts any contiguous array of the returned dtype with
        at least that many elements, so a planner may share one temporary among kernels.
        Returns ``{}`` for a kernel without workspaces (on that target).
        """
        rule = self.workspace_rule(target)
        if rule is None:
            return {}
        infos = {k: _info(v) for k, v in arrays.items() if v is not None and k not in self.workspaces}
        full = {**self.defaults, **{k: v for k, v in params.items() if k in self.params}}
        out = rule(infos, **full)
        # exact (Python ints): an int64 product overflows for absurd sizes, which the planner reports
        return {k: ((math.prod(int(x) for x in s),), np.dtype(d)) for k, (s, d) in out.items()}

    def allocate_workspaces(self, arrays: Mapping[str, Any], *, target: str = CPU,
                            **params: Any) -> dict[str, np.ndarray]:
        """Fresh zeroed workspaces (for tests and eager use; the runtime plans them instead)."""
        return {k: np.zeros(s, d) for k, (s, d) in self.workspace_shapes(arrays, target=target, **params).items()}

    def bind(self, arrays: Mapping[str, Any], params: Mapping[str, Any] | None = None) -> Callable[[], None]:
        """A zero-argument closure running the kernel on fixed arrays.

        ``arrays`` must name every non-optional array except workspaces (a workspace left out is
        passed as ``None``: the target's rule asked for none); ``params`` may hold more keys than
        the kernel takes (a layer op's whole param dict): only :attr:`params` are passed on.
        Raises ``KeyError`` naming a missing array or param and the kernel.
        """
        params = dict(params or {})
        missing = [a for a in self.arrays if a not in arrays and a not in self.optional and a not in self.workspaces]
        if missing:
            raise KeyError(f"kernel '{self.name}' expected arrays {missing}, got {sorted(arrays)}")
        unknown = sorted(set(arrays) - set(self.arrays))
        if unknown:
            raise KeyError(f"kernel '{self.name}' takes no arrays {unknown}; it takes {list(self.arrays)}")
        chosen = {k: params[k] for k in self.params if k in params}
        absent = [k for k in self.params if k not in chosen and k not in self.defaults]
        if absent:
            raise KeyError(f"kernel '{self.name}' expected params {absent}, got {sorted(params)}")
        bound = {a: arrays.get(a) for a in self.arrays}
        generic = functools.partial(self.fn, **bound, **chosen)
        if self.prepare is None or self.prepare_for is not self.fn:
            return generic
        return PreparedLaunch(generic, functools.partial(self.prepare, **bound, **chosen))

    def __call__(self, **kwargs: Any) -> None:
        """Run eagerly with keyword arrays and params (tests)."""
        self.fn(**kwargs)


class PreparedLaunch:
    """A bound kernel call (:meth:`KernelSpec.bind`) of a kernel with a ``prepare`` function:
    the kernel's checks, its choice of path and its pieces made once, not on every step.

    ``prepare(**arrays, **params)`` (the kernel's own arguments) returns a zero-argument call
    that does what ``fn`` would do with those arrays under the :class:`._prepared.LaunchState`
    in force when it is asked (the thread count, compiled kernels, the C worker, contention),
    or None where it has no such call (a path it does not cover, an array ``fn`` would refuse):
    then ``fn`` itself runs, raising its own errors. One call is kept per state met, so a
    process switching between 1 and 2 threads prepares twice; ``TR_MLIR_PREPARE=0`` (read where a
    replay pins its state: :func:`._prepared.begin_replay`) runs ``fn`` on every call. A prepared call that finds the state it was
    made for gone (the C worker failed to start mid-replay) raises :class:`._prepared.Stale`
    before any write ``fn`` would not redo, and ``fn`` runs instead. The prepared call must give
    ``fn``'s bits (tests/test_prepared_launches.py runs both on every prepared kernel; the sign and
    payload of a NaN aside, where NumPy's own SIMD and scalar loops differ: :mod:`._prepared_norm`). A call
    with ``steps`` (:class:`._prepared.Step` s, as :func:`._prepared.c_call`,
    :func:`._prepared.jobs_call` and :func:`._prepared.sequence` give them) must do exactly what
    its steps' jobs do, the jobs unchanged from call to call (a call that writes into its jobs
    before running them wraps them in a call of its own, without ``steps``): a replay may run
    the jobs instead of the call (:class:`._prepared.ReplayGroup`).

    ``func``, ``args`` and ``keywords`` are those of the plain bound call (``functools.partial``),
    for tools that label a graph's launches."""

    __slots__ = ("generic", "_prepare", "_calls", "_state", "_call")

    def __init__(self, generic: functools.partial, prepare: Callable[[], Callable[[], None] | None]):
        self.generic = generic
        self._prepare = prepare
        self._calls: dict[Any, Callable[[], None]] = {}
        self._state: Any = None
        self._call: Callable[[], None] = generic

    @property
    def func(self) -> Callable[..., None]:
        return self.generic.func

    @property
    def args(self) -> tuple:
        return self.generic.args

    @property
    def keywords(self) -> dict[str, Any]:
        return self.generic.keywords

    @property
    def last_call(self) -> Callable[[], None]:
        """The call the last launch ran: a prepared one, or :attr:`generic` (the kernel function)."""
        return self._call

    def prepared_call(self) -> Callable[[], None]:
        """The call a launch runs under the :class:`._prepared.LaunchState` in force now: the
        prepared one (made now if this state had none yet) or :attr:`generic`."""
        state = launch_state()
        if state is not self._state:
            call = self._calls.get(state)
            if call is None:
                call = self._calls[state] = (self._prepare() if state.prepared else None) or self.generic
            self._state, self._call = state, call
        return self._call

    def __call__(self) -> None:
        call = self.prepared_call()
        try:
            call()
        except Stale:  # its state gone, before any write the kernel function would not redo
            self.generic()


KERNELS: dict[KernelId, KernelSpec] = _vocabulary.KERNELS
"""Every kernel, keyed by its :class:`~tr_mlir.dialects.kernels.KernelId` (snake_case,
precision-free: the dtypes of the bound arrays decide between fp32 and AMP); a KernelId is a
``str``, so ``KERNELS["conv_fwd"]`` is ``KERNELS[K.CONV_FWD]``."""


def register(spec: KernelSpec) -> KernelSpec:
    """Add ``spec`` to :data:`KERNELS` under the family its name resolves to; a name outside the
    vocabulary (:class:`~tr_mlir.dialects.kernels.KernelIdError`, naming the kernel), a second
    kernel of one family, or a workspace rule for a target not in :data:`TARGETS`, is an error."""
    bad = sorted(set(spec.target_workspace_fns) - set(TARGETS))
    if bad:
        raise ValueError(f"kernel '{spec.name}': workspace rules for unknown targets {bad}, expected {list(TARGETS)}")
    try:
        kid = kernel_id(spec.name)
    except KernelIdError as e:
        raise KernelIdError(f"kernel '{spec.name}': {e}") from None
    if spec.name != kid.name:
        raise KernelIdError(f"kernel '{spec.name}': register it under its family's key '{kid}'")
    if kid in KERNELS:
        raise ValueError(f"kernel '{spec.name}' registered twice")
    KERNELS[kid] = spec
    return spec


def kernel(
    name: str | KernelId,
    *,
    writes: Sequence[str],
    workspaces: Sequence[str] = (),
    workspace_fn: WorkspaceFn | None = None,
    target_workspace_fns: Mapping[str, WorkspaceFn | None] | None = None,
    kind: str = "compute",
    also: Sequence[str] = (),
    algorithms: AlgorithmTable | None = None,
    prepare: Callable[..., Callable[[], None] | None] | None = None,
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Decorator registering a kernel function under ``name`` (and the names in ``also``): keys
    of the node-op vocabulary (``"conv_fwd"`` or ``K.CONV_FWD``; :func:`register`).

    Array arguments are the function's positional-or-keyword parameters (a default of ``None``
    makes one optional); static params are its keyword-only parameters. ``workspace_fn``: the
    CPU function's workspace rule; ``target_workspace_fns``: the other targets' (see
    :class:`KernelSpec`). ``algorithms``: for a family whose static params choose an algorithm,
    its :class:`~tr_mlir.dialects.kernels.AlgorithmTable` (what the compiler's selection pass reads).
    ``prepare``: a function taking the kernel's own arguments that returns a ready call for bound
    arrays, or None (:class:`PreparedLaunch`).
    """

    def deco(fn: Callable[..., None]) -> Callable[..., None]:
        sig = inspect.signature(fn)
        arrays, optional, params, defaults = [], set(), [], {}
        for p in sig.parameters.values():
            if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD:
                arrays.append(p.name)
                if p.default is None:
                    optional.add(p.name)
            elif p.kind is inspect.Parameter.KEYWORD_ONLY:
                params.append(p.name)
                if p.default is not inspect.Parameter.empty:
                    defaults[p.name] = p.default
        bad = [w for w in (*writes, *workspaces) if w not in arrays]
        if bad:
            raise ValueError(f"kernel '{name}': {bad} are not array arguments of {fn.__name__}")
        for n in (name, *also):
            register(KernelSpec(
                name=str(n), fn=fn, arrays=tuple(arrays), writes=frozenset(writes),
                workspaces=tuple(workspaces), optional=frozenset(optional), params=tuple(params),
                defaults=defaults, kind=kind, workspace_fn=workspace_fn,
                target_workspace_fns=dict(target_workspace_fns or {}), algorithms=algorithms, prepare=prepare,
                prepare_for=fn if prepare is not None else None,
            ))
        return fn

    return deco


PRECISION_TOKENS = tuple(p.lower() for p in PRECISIONS)
"""The precision tokens of node op names, lower case (:data:`tr_mlir.dialects.kernels.PRECISIONS`)."""

__all__ = ["ArrayInfo", "CPU", "CUDA", "KERNELS", "PRECISION_TOKENS", "TARGETS", "KernelSpec", "PreparedLaunch",
           "WorkspaceFn",
           "kernel", "kernel_name", "lookup", "register"]  # kernel_name: the vocabulary's parser of node op names


def lookup(op: str) -> KernelSpec:
    """The kernel of node op or registry name ``op`` (either spelling: ``CONV_AMP_FWD``,
    ``conv_fwd``); ``KeyError`` (:class:`~tr_mlir.dialects.kernels.KernelIdError`) naming the op
    when none exists."""
    return _vocabulary.implementation(op)  # type: ignore[return-value]
