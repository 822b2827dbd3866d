"""Prepared launches: what the CPU kernels decide per call, made once per launch state.

A captured graph replays the same kernel calls on the same arrays every step. A kernel function
checks its arrays, chooses its path (compiled or NumPy, split or not) and builds the argument
lists of its pieces on every call: 10-25 us of Python per launch, a fifth of LeNet-5's step on
two threads. A kernel registered with ``prepare`` (:class:`.registry.PreparedLaunch`) makes that
once per :class:`LaunchState` and replays a ready call: :func:`c_call` for a compiled kernel's
pieces (:func:`._parallel.run_c` with its job pair made once), :func:`jobs_call` and
:func:`._parallel.matmul_call` for GEMM jobs. The same pieces run, so the bits are the kernel
function's. :func:`begin_replay` pins the state for one replay (the runner: once for all the
graphs of a training step), so that neither the kernel functions nor the prepared launches ask
OpenBLAS for its thread count or read ``TR_MLIR_CC`` on every call.
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading
from collections.abc import Callable, Sequence
from typing import NamedTuple

from . import _cc, _parallel, _threads

ENV_PREPARE = "TR_MLIR_PREPARE"
"""Environment variable: ``0`` runs every launch of a captured graph through its kernel function
(its checks and dispatch on every call) instead of the call the kernel prepared
(:class:`.registry.PreparedLaunch`); read when a replay pins its launch state (:func:`begin_replay`:
at each graph replay, or once per training step for all its graphs)."""


class Stale(Exception):  # noqa: N818 - a signal between two modules, not an error anyone sees
    """Raised by a prepared call when the :class:`LaunchState` it was made for no longer holds
    (the C worker could not start mid-replay): the launch then runs the whole kernel function
    (:class:`.registry.PreparedLaunch`). Raised before any write the function would not redo:
    a part that ran (the FC weight gradient before its input gradient) is computed again, to the
    same values, and nothing a part reads has been overwritten yet."""


ENV_GROUPS = "TR_MLIR_REPLAY_GROUPS"
"""Environment variable: ``0`` calls every prepared launch of a replay from Python, one after the
other, instead of running runs of them as :class:`ReplayGroup` s; read with :data:`ENV_PREPARE`."""

NOTE_SPLIT = "split"
"""A :class:`Step`'s two jobs are a :func:`c_call` pair: their times per unit of work (``sizes``)
feed :func:`._parallel.note_split`, as :func:`._parallel.run_pair` does."""
NOTE_STATIC = "static"
"""A :class:`Step`'s two jobs are a static GEMM split: their times feed :func:`._parallel.note_split`."""
NOTE_DYNAMIC = "dynamic"
"""A :class:`Step` is a dynamic GEMM split: it counts as a :func:`._parallel.note_dynamic_call`."""


class Step(NamedTuple):
    """What one prepared call (or one part of it) runs, for a :class:`ReplayGroup`: ``jobs``
    (:class:`._parallel._Job` s, copied into the group's array), one after the other on the
    calling thread (``here``, as :func:`._parallel.run_here`) or drained by the calling thread and
    the C worker (as :func:`._parallel._run_array`); ``note``: how their times are recorded
    afterwards (:data:`NOTE_SPLIT`, :data:`NOTE_STATIC`, :data:`NOTE_DYNAMIC`, None: not at all),
    ``sizes``: each job's amount of work for :data:`NOTE_SPLIT`."""

    jobs: tuple
    here: bool
    note: str | None = None
    sizes: tuple[int, ...] | None = None


class LaunchState(NamedTuple):
    """What decides how a kernel call runs, besides its arrays: the kernel threads
    (:func:`._parallel.workers`), the compiled kernels (:func:`._cc.available`), the C worker
    (:func:`._parallel.c_gemm`), :func:`._parallel.contended`, and whether prepared calls are
    on. A prepared launch (:class:`.registry.PreparedLaunch`) keeps one call per state it met;
    equal states are one object (:func:`launch_state`)."""

    workers: int
    compiled: bool
    c_gemm: bool
    contended: bool
    prepared: bool
    """Whether prepared launches run their prepared calls (:data:`ENV_PREPARE`)."""


_launch_states: dict[tuple, LaunchState] = {}


class _ReplayState(threading.local):
    state: LaunchState | None = None
    grouped: bool = True  # ENV_GROUPS as read when the state was pinned


_replay_state = _ReplayState()


def _state_now() -> LaunchState:
    key = (_parallel.workers(), _cc.available(), _parallel.c_gemm(), _parallel.contended(),
           os.environ.get(ENV_PREPARE, "1").strip() != "0")
    state = _launch_states.get(key)
    if state is None:
        state = _launch_states.setdefault(key, LaunchState(*key))
    return state


def pinned_state() -> LaunchState | None:
    """The :class:`LaunchState` pinned on the calling thread (:func:`begin_replay`), or None."""
    return _replay_state.state


def pinned_contended() -> bool:
    """:func:`._parallel.contended` as the prepared calls decide it: the pinned state's."""
    return launch_state().contended


def launch_state() -> LaunchState:
    """The :class:`LaunchState` a kernel call runs under now: the one pinned at the start of the
    graph replay the calling thread runs (:func:`begin_replay`), else measured now (a few
    microseconds)."""
    state = _replay_state.state
    return state if state is not None else _state_now()


def begin_replay() -> LaunchState:
    """Start a graph replay on the calling thread: :func:`._threads.outside_kernels`, then pin
    the :class:`LaunchState` of now for the replay, which :func:`._parallel.workers` and
    :func:`._cc.available` then answer from: a thread count or ``TR_MLIR_CC`` set by a kernel
    (a plugin's) inside the replay takes effect at the next replay (the next step, for the
    replays of a training step pinned together). :func:`._parallel.contended`
    keeps changing with the measurements; the prepared calls follow the pinned value, the
    kernel functions the live one. Always pair it with :func:`end_replay` in a ``finally``.
    Several graphs may replay under one pin (a training step's: the runner, through the CPU
    backend's ``begin_step``, and :meth:`~tr_mlir.lowering.backend.ClosureGraph.replay_in`)."""
    _threads.outside_kernels()
    end_replay()
    state = _state_now()
    _replay_state.state, _replay_state.grouped = state, os.environ.get(ENV_GROUPS, "1").strip() != "0"
    _threads.replay.workers = state.workers
    _cc.pinned.value = state.compiled
    return state


def end_replay() -> None:
    """End what :func:`begin_replay` pinned on the calling thread (nothing pinned: no change)."""
    _replay_state.state = None
    _threads.replay.workers = None
    _cc.pinned.value = None


def c_call(fn: ctypes._CFuncPtr, pieces: Sequence[tuple[int, ...]], *,
           work: Sequence[int] | None = None) -> Callable[[], None]:
    """:func:`._parallel.run_c` ``(fn, pieces, work=work)`` made ready once for a prepared launch
    (the pieces' pointers are those of bound arrays): a zero-argument call that runs one piece
    on the calling thread, or two as a :func:`._parallel.kernel_job` pair made here, on the
    calling thread and the C worker, and feeds :func:`._parallel.note_split` as ``run_c`` does.
    While :func:`._parallel.contended`, after the C thread failed to start, or for a kernel
    ``run_c`` would not run as jobs, the call is ``run_c`` itself."""
    pieces = [tuple(p) for p in pieces]
    run_c = _parallel.run_c
    as_job = _parallel.c_gemm() and _parallel._callable_as_job(fn) is not None
    if len(pieces) == 1:
        one = functools.partial(fn, *pieces[0])
        if as_job:
            one.steps = (Step((_parallel.kernel_job(fn, pieces[0]),), True),)  # type: ignore[attr-defined]
        return one
    if len(pieces) != 2 or not as_job:
        return functools.partial(run_c, fn, pieces, work=work)
    arr = (_parallel._Job * 2)(*(_parallel.kernel_job(fn, p) for p in pieces))
    sizes = _parallel.pair_sizes(pieces, work)

    def call() -> None:
        # while contended, or the C thread could not start (_run_array turned it off): run_c's way
        if _parallel.contended() or not _parallel.c_gemm():
            run_c(fn, pieces, work=work)
        else:
            _parallel.run_pair(arr, pieces, work)

    call.jobs = arr  # type: ignore[attr-defined]  # the pair lives as long as the call
    call.steps = (Step(tuple(arr), False, NOTE_SPLIT, sizes),)  # type: ignore[attr-defined]
    return call


def jobs_call(jobs: tuple, split: bool, count: int = 0, keep: object = None) -> Callable[[], None]:
    """A ready call running ``jobs`` (:func:`._parallel.gemm_job` and the like) as
    :func:`._parallel.matmul` does: on the calling thread and the C worker when ``split``
    (``count`` > 2: dynamic blocks, each call counted by :func:`._parallel.note_dynamic_call`; 2:
    a static split whose times feed :func:`._parallel.note_split`), else one after the other
    here. ``keep``: what else must live as long as the call (the jobs a
    :func:`._parallel.chain` points to). A split call's ``array`` holds the jobs it runs, copies
    of ``jobs``. Both calls have ``steps`` (:class:`Step`), which a :class:`ReplayGroup` copies
    once: a caller that changes a job argument between calls (in ``array``) must return a call
    of its own that does so, without ``steps`` (as :func:`.optim.sgd_call`). Either raises
    :class:`Stale` (none of its jobs run) once the C worker was turned off (it could not start)."""
    if not split:
        def here() -> None:
            if not _parallel._cgemm:
                raise Stale()
            for job in jobs:
                _parallel.run_here(job)
        here.jobs = (jobs, keep)  # type: ignore[attr-defined]
        here.steps = (Step(tuple(jobs), True),)  # type: ignore[attr-defined]
        return here
    arr = (_parallel._Job * len(jobs))(*jobs)

    def call() -> None:
        if not _parallel._cgemm:
            raise Stale()
        _parallel._run_array(arr)
        if count > 2:
            _parallel.note_dynamic_call()
        elif count == 2:
            _parallel.note_split(tuple(j.seconds for j in arr))

    call.array = arr  # type: ignore[attr-defined]  # the jobs as they run (copies of ``jobs``)
    call.jobs = (jobs, keep)  # type: ignore[attr-defined]  # what the chains point to lives with the call
    note = NOTE_DYNAMIC if count > 2 else NOTE_STATIC if count == 2 else None
    call.steps = (Step(tuple(arr), False, note),)  # type: ignore[attr-defined]
    return call


def sequence(*calls: Callable[[], None]) -> Callable[[], None]:
    """A ready call running ``calls`` in order, with their :class:`Step` s (``steps``) one after
    the other when every call has them (so a :class:`ReplayGroup` can take it)."""
    def call() -> None:
        for c in calls:
            c()
    parts = [getattr(c, "steps", None) for c in calls]
    if all(p is not None for p in parts):
        call.steps = tuple(st for p in parts for st in p)  # type: ignore[attr-defined]
    return call


def _run_segments() -> Callable[..., int]:
    """``tr_run_segments`` of the library :func:`._parallel.c_gemm` loaded and set up (its worker
    thread, state and sgemm; a ``CC`` changed since would make :func:`._cc.load` build a copy
    with a worker and state of its own)."""
    return _parallel._cgemm[4]


class ReplayGroup:
    """Consecutive launches of a replay whose prepared calls are all C jobs (:class:`Step` s),
    run by one call into the C worker's library (``tr_run_segments``): each launch's jobs as its
    own call would run them, in the same order, each after the previous ones are done, with no
    return to Python between them. Between two kernels of LeNet-5 on two threads the C worker
    otherwise waits while the main thread runs the next launch's Python (a few microseconds per
    launch). The same jobs run, so the bits are those of the launches' own calls.

    While :func:`._parallel.contended` (checked once per group, where each call checks it once),
    with the C worker off, or when its thread cannot start (nothing ran), the launches run one by
    one, as without groups. After the group the jobs' times feed :func:`._parallel.note_split` /
    :func:`._parallel.note_dynamic_call` as each call would have."""

    __slots__ = ("launches", "calls", "array", "counts", "notes")

    def __init__(self, launches: Sequence[Callable[[], None]], calls: Sequence[Callable[[], None]]):
        self.launches = tuple(launches)
        self.calls = tuple(calls)  # keeps every job's chain and operands alive with the group
        steps = [st for c in calls for st in c.steps]  # type: ignore[attr-defined]
        jobs = [j for st in steps for j in st.jobs]
        self.array = (_parallel._Job * len(jobs))(*jobs)
        self.counts = (ctypes.c_int64 * len(steps))(*(-len(st.jobs) if st.here else len(st.jobs) for st in steps))
        notes, at = [], 0
        for st in steps:
            if st.note is not None:
                notes.append((st.note, at, st.sizes))
            at += len(st.jobs)
        self.notes = tuple(notes)

    def __call__(self) -> None:
        if _parallel.contended() or not _parallel.c_gemm():
            for launch in self.launches:
                launch()
            return
        with _threads.lock, _threads.hold:
            # _cgemm False: another Python thread's call turned the worker off since the check
            rc = _run_segments()(ctypes.addressof(self.array), ctypes.addressof(self.counts),
                                 len(self.counts)) if _parallel._cgemm else -1
            if rc != 0:  # the C thread could not start (nothing ran): the Python threads from now on
                _parallel._cgemm = False
        if rc != 0:  # each launch finds its own way
            for launch in self.launches:
                launch()
            return
        arr = self.array
        for note, at, sizes in self.notes:
            if note == NOTE_DYNAMIC:
                _parallel.note_dynamic_call()
            elif sizes is None:
                _parallel.note_split((arr[at].seconds, arr[at + 1].seconds))
            else:
                _parallel.note_pair((arr[at].seconds, arr[at + 1].seconds), sizes)


def replay_plan(launches: tuple, state: LaunchState, plans: dict) -> tuple:
    """What a replay of ``launches`` under ``state`` calls: the launches, with each run of two or
    more consecutive prepared launches whose calls have :class:`Step` s made one
    :class:`ReplayGroup` (none when the state has no C worker or no prepared calls, or with
    :data:`ENV_GROUPS` ``0``, read when ``state`` was pinned). Made once per state and kept in
    ``plans`` (the graph's own; the prepared calls of every launch are made here, in order)."""
    rs = _replay_state
    grouped = rs.grouped if rs.state is state else os.environ.get(ENV_GROUPS, "1").strip() != "0"
    if not (state.prepared and state.c_gemm and grouped):
        return launches
    found = plans.get(state)
    if found is not None:
        return found
    items: list = []
    run: list = []

    def close() -> None:
        if len(run) >= 2:
            items.append(ReplayGroup([lc for lc, _ in run], [c for _, c in run]))
        else:
            items.extend(lc for lc, _ in run)
        run.clear()

    for launch in launches:
        current = getattr(launch, "prepared_call", None)
        call = current() if current is not None else None
        if call is not None and getattr(call, "steps", None) is not None:
            run.append((launch, call))
            continue
        close()
        items.append(launch)
    close()
    plan = plans[state] = tuple(items)
    return plan
