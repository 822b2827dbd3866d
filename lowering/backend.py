"""Backends: where an :class:`~tr_mlir.lowering.executable.Executable` keeps its arena and how it
captures graphs (DESIGN section 5).

:class:`Backend` is the interface the NumPy backend (:class:`NumpyBackend`, here) and the CuPy
backend (later) implement: one arena allocation, typed views into it at fixed offsets, host
staging memory for input batches, the kernel table (the same kernel names and signatures,
:data:`tr_mlir.lowering.cpu.KERNELS`), and capture of a list of bound kernel calls into a
replayable graph (a closure list here, a CUDA graph there).

The memory check (:func:`check_arena`) runs before the arena exists: a plan larger than the
memory available is a :class:`ArenaTooLargeError` naming the bytes needed and a batch size that
would fit, not an out-of-memory kill.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from tr_mlir.dialects.memplan import Target
from tr_mlir.errors import TrMlirError
from tr_mlir.lowering.cpu import KERNELS, KernelSpec, begin_replay, end_replay, pinned_state, replay_plan

Launch = Callable[[], None]
"""One bound kernel call: a zero-argument closure over fixed views."""


class ArenaTooLargeError(TrMlirError, MemoryError):
    """The plan's arena does not fit in the memory available; the message names the bytes needed,
    the bytes available and a batch size that would fit."""


@runtime_checkable
class CapturedGraph(Protocol):
    """A captured graph: ``replay()`` runs every captured kernel call in order."""

    def replay(self) -> None: ...

    def __len__(self) -> int: ...


@runtime_checkable
class Backend(Protocol):
    """What an executable needs from a device (NumPy here, CuPy later; same kernels).

    ``target``: the plans it runs (channel padding of fp16 features differs, facts section 5);
    ``kernels``: kernel name -> :class:`KernelSpec`.
    """

    name: str
    target: Target
    kernels: Mapping[str, KernelSpec]
    capture_runs_launches: bool
    """Whether :meth:`capture` runs the launches once (a GPU warm-up): the executable then
    initializes the arena again after capturing."""

    def available_memory(self) -> int | None:
        """Bytes an arena may take now (``None``: unknown, no check)."""
        ...

    def allocate(self, nbytes: int) -> Any:
        """A zeroed ``uint8`` arena of ``nbytes``."""
        ...

    def view(self, arena: Any, offset: int, dtype: np.dtype, shape: tuple[int, ...]) -> Any:
        """A typed view of ``prod(shape)`` elements of ``arena`` starting at byte ``offset``."""
        ...

    def host_buffer(self, nbytes: int) -> np.ndarray:
        """Zeroed host ``uint8`` memory the host writes input batches into (pinned on a GPU)."""
        ...

    def capture(self, launches: Sequence[Launch]) -> CapturedGraph:
        """Capture bound kernel calls, in order, into a replayable graph."""
        ...

    def to_host(self, array: Any) -> np.ndarray:
        """A NumPy copy of a view (on a GPU: after the work queued before it)."""
        ...


def meminfo_available() -> int | None:
    """``MemAvailable`` of ``/proc/meminfo`` in bytes, else free pages from ``os.sysconf``
    (``None`` when neither is known)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


@dataclass(frozen=True)
class ClosureGraph:
    """The CPU captured graph (facts section 12.2): an ordered tuple of bound kernel calls.

    ``replay()`` calls one Python function per node, except where consecutive prepared launches
    are all C jobs: those run as one group (:func:`tr_mlir.lowering.cpu.replay_plan`, per launch
    state, kept in ``plans``). Every array is bound at capture time, so a replay allocates nothing
    (beyond what a kernel itself documents: chunk-sized temporaries).
    """

    launches: tuple[Launch, ...]
    plans: dict = field(default_factory=dict, compare=False, repr=False)

    def replay(self) -> None:
        try:
            # a replay runs outside any kernel (heals what a Ctrl-C inside one left) and pins the
            # thread count and compiled kernels for its launches
            self.replay_in(begin_replay())
        finally:
            end_replay()

    def replay_in(self, state) -> None:
        """Run every launch under ``state``, the :class:`~tr_mlir.lowering.cpu.LaunchState` the
        caller pinned (:meth:`NumpyBackend.begin_step`) and ends (:meth:`NumpyBackend.end_step`):
        the graphs of one training step replay under one pin. Where that pin is no longer in
        force on this thread (a replay nested inside the step, another runner's in a batch
        iterator or ``on_batch``, ended it), the graph pins its own (:meth:`replay`)."""
        if pinned_state() is not state:
            self.replay()
            return
        for launch in replay_plan(self.launches, state, self.plans):
            launch()

    def __len__(self) -> int:
        return len(self.launches)


class NumpyBackend:
    """The CPU backend: a NumPy ``uint8`` arena, views at fixed offsets, closure-list capture.

    ``memory_limit`` (bytes) replaces the system's available memory in the arena check (tests,
    or to keep headroom for other processes).
    """

    name = "numpy"
    target = Target.CPU
    capture_runs_launches = False

    def __init__(self, memory_limit: int | None = None):
        self.kernels: Mapping[str, KernelSpec] = KERNELS
        self.memory_limit = memory_limit

    @staticmethod
    def begin_step():
        """Pin the kernels' launch state for the graphs of one step (each then replays with
        :meth:`ClosureGraph.replay_in`, skipping a replay's own pin: 5-6 us of thread-count and
        environment reads per graph, nine graphs per LeNet-5 step) and return it; always pair
        with :meth:`end_step` in a ``finally``. A switch set inside the step (``TR_MLIR_CC``, a
        thread count) takes effect at the next step."""
        return begin_replay()

    @staticmethod
    def end_step() -> None:
        """End what :meth:`begin_step` pinned."""
        end_replay()

    def available_memory(self) -> int | None:
        return self.memory_limit if self.memory_limit is not None else meminfo_available()

    def allocate(self, nbytes: int) -> np.ndarray:
        return np.zeros(nbytes, np.uint8)

    def view(self, arena: np.ndarray, offset: int, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        dtype = np.dtype(dtype)
        n = int(np.prod(shape, dtype=np.int64))
        end = offset + n * dtype.itemsize
        if offset < 0 or end > arena.size:
            raise ValueError(f"view [{offset}, {end}) outside the arena of {arena.size} bytes")
        return arena[offset:end].view(dtype).reshape(shape)

    def host_buffer(self, nbytes: int) -> np.ndarray:
        return np.zeros(nbytes, np.uint8)

    def capture(self, launches: Sequence[Launch]) -> ClosureGraph:
        return ClosureGraph(tuple(launches))

    def to_host(self, array: Any) -> np.ndarray:
        return np.array(array)


def check_arena(need: int, available: int | None, *, batch: int, per_sample: int, fixed: int,
                size_at: Callable[[int], int] | None = None) -> None:
    """Raise :class:`ArenaTooLargeError` when ``need`` bytes exceed ``available``.

    ``per_sample`` / ``fixed``: the batch-proportional and constant parts of the arena, used to
    name the largest batch size that fits (an estimate: ``(available - fixed) // per_sample``).
    ``size_at(b)``, when given, estimates the whole need at batch ``b`` (parts that do not scale
    linearly, such as chunked kernel workspaces, included); the suggestion is then the largest
    batch below ``batch`` whose estimate fits (a binary search: ``size_at`` must not decrease).
    """
    if available is None or need <= available:
        return
    if size_at is None:
        fits = (available - fixed) // per_sample if per_sample > 0 and available > fixed else 0
        about = fixed + fits * per_sample
    else:
        lo, hi = 0, batch - 1  # the largest b in [1, batch) with size_at(b) <= available, else 0
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if size_at(mid) <= available:
                lo = mid
            else:
                hi = mid - 1
        fits = lo
        about = size_at(fits) if fits else fixed
    hint = (f"batch size {fits} would fit (about {about:,} bytes)" if fits >= 1 else
            f"even batch size 1 would not fit: the parameters and optimizer state alone take {fixed:,} bytes")
    raise ArenaTooLargeError(
        f"the memory plan needs {need:,} bytes ({need / 2**30:.2f} GiB) at batch size {batch}, "
        f"but only {available:,} bytes ({available / 2**30:.2f} GiB) are available; {hint}")
