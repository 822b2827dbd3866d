"""The kernel threads of the CPU kernels: :func:`run` hands independent pieces of work to the
calling thread and a small pool of persistent threads, while :data:`hold` keeps OpenBLAS at one
thread (:mod:`._parallel` explains why the kernels split their work themselves, and the C worker
thread its GEMMs use instead).

Everything here is safe against a signal handler that raises (Ctrl-C: ``KeyboardInterrupt``)
at any point where CPython runs it (a function's start, a backward jump, the return of a call),
once per split: a hand-off never hangs and never comes back while its piece still runs, and no
hold or split depth stays behind once :func:`outside_kernels` ran (every CPU graph replay starts
with it). tests/test_kernels_parallel.py checks it with a kernel timer signal every 30
microseconds through thousands of hand-offs. (Pure Python cannot be safe against handlers that
raise again and again without end: a second Ctrl-C within microseconds of the first may still
leave a split early.)
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable, Sequence

from ._blas_libs import numpy_openblas

MAX_WORKERS = 2
"""Most threads a kernel uses (and per-worker workspace slots the planner reserves): the cores of
the machines this runs on."""

lock = threading.Lock()
"""Held by the caller of a split while it hands out pieces (one split at a time)."""
_workers: list[Worker] | None = None
_blas = None  # (get_num_threads, set_num_threads) of OpenBLAS, False when there is none


class Worker:
    """One persistent kernel thread, handed a task through two locks used as wake-up hints
    (``go``: a task may be ready, ``done``: a task may have finished) over two counters that
    hold the state (``posted``: tasks handed over, ``finished``: tasks run). A hand-off is a
    lock release and a lock acquire on each side: about half the latency of a
    ``ThreadPoolExecutor`` submit and ``Future.result`` (which build a future, a queue entry and
    a condition per call).

    The counters make the hand-off safe against a signal handler that raises (Ctrl-C) between
    any two bytecodes of the calling thread: a lock acquire that succeeded just before the
    exception came out is not lost (the waiter re-reads ``finished`` instead of waiting for a
    second release that never comes, the hang seen under SIGINT in tests/test_faults.py), and a
    release finding the lock already released (an unconsumed hint) is harmless."""

    def __init__(self, index: int):
        self._go = threading.Lock()
        self._go.acquire()
        self._done = threading.Lock()
        self._done.acquire()
        self._task: Callable[[], None] | None = None
        self._error: BaseException | None = None
        self._posted = 0
        self._finished = 0
        threading.Thread(target=self._loop, name=f"tr-mlir-kernel-{index}", daemon=True).start()

    @staticmethod
    def _hint(lock: threading.Lock) -> None:
        try:
            lock.release()
        except RuntimeError:  # already released: a hint not consumed yet is as good
            pass

    def _loop(self) -> None:
        inside.depth = 1  # a kernel thread only ever runs pieces of a split
        while True:
            if self._finished == self._posted:
                self._go.acquire()
                continue
            task, self._task = self._task, None
            try:
                task()
            except BaseException as e:  # noqa: BLE001 - handed back to the caller by wait()
                self._error = e
            self._finished += 1
            self._hint(self._done)

    def start(self, task: Callable[[], None]) -> None:
        """Hand ``task`` to the thread (after waiting for the one it holds, if an interrupted
        :func:`run` left it running)."""
        if self._finished != self._posted:
            self.wait()
        self._task, self._error = task, None
        self._posted += 1
        try:  # inline, not _hint(): no Python call (where a pending signal's handler runs) before the release
            self._go.release()
        except RuntimeError:
            pass

    def wait(self) -> BaseException | None:
        """Block until every task handed over has finished (at once when none is pending);
        returns the task's exception (or None). An exception raised while waiting (a signal
        handler's: Ctrl-C) is re-raised only once the task has finished: the task uses the
        caller's arrays (raw pointers in C kernels)."""
        interrupted: BaseException | None = None
        while True:
            try:  # the inner loop inside the try: its backward jump is where a pending handler runs
                while self._finished != self._posted:
                    self._done.acquire()
                break
            except BaseException as e:  # noqa: BLE001 - re-raised below, after the task
                interrupted = interrupted or e
        err, self._error = self._error, None
        if interrupted is not None:
            raise interrupted
        return err


class BlasHold:
    """OpenBLAS held at one thread while any kernel is inside ``with hold:``.

    Nested and concurrent holders share one save and one restore of the thread count, so two
    Python threads running kernels at once (data-parallel ranks in one process) cannot leave
    OpenBLAS at one thread for good, as a save/restore per call did (the second caller saved the
    first's 1). While held, :meth:`user_threads` is the saved count, so :func:`workers` (and with
    it every split) does not depend on whether another thread is inside a kernel.

    Safe against a signal handler's exception (Ctrl-C) between any two bytecodes: ``forced``
    says the count in force is the hold's 1, not the user's (set before the hold sets it,
    cleared after the restore), so the next hold never takes its own 1 for the user's count
    (without it, OpenBLAS stayed at one thread and every later kernel ran single-threaded); and
    the global count, this thread's holds and its split depth change together, inside the lock
    (no call between them, where a pending handler could run), so a hold whose exit never ran
    is on this thread's record and :func:`outside_kernels` gives it back."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0
        self.saved = 1
        self.forced = False

    def __enter__(self) -> "BlasHold":
        blas = controller()
        inside.depth  # noqa: B018 - a thread's first touch builds its state here, outside the lock
        with self.lock:
            if blas and self.count == 0 and not self.forced:
                self.saved = int(blas[0]())
                if self.saved > 1:
                    self.forced = True
                    blas[1](1)
            self.count += 1
            inside.holds += 1
            inside.depth += 1
        return self

    def __exit__(self, *exc: object) -> None:
        self.release(1)

    def release(self, holds: int) -> None:
        """End ``holds`` of the calling thread's holds (the OpenBLAS count restored with the last)."""
        blas = controller()
        with self.lock:
            self.count -= holds
            inside.holds -= holds
            inside.depth -= holds
            if blas and self.count == 0 and self.forced:
                blas[1](self.saved)
                self.forced = False

    def user_threads(self, blas) -> int:
        """The OpenBLAS thread count the user set (the saved one while held)."""
        with self.lock:
            return self.saved if self.count or self.forced else int(blas[0]())


class ThreadState(threading.local):
    """Per thread: ``depth``, splits entered and not left (> 0 while running a piece of a split:
    the caller inside ``hold``, and every kernel thread); ``holds``, the ``hold``
    holds this thread entered and not left."""

    def __init__(self) -> None:
        self.depth = 0
        self.holds = 0


hold = BlasHold()


class ReplayPin(threading.local):
    """Per thread: ``workers``, the kernel thread count pinned for the graph replay this thread
    runs (:func:`._prepared.begin_replay`), None outside one. A replay runs kernels only; pinned,
    :func:`workers` skips reading the count from OpenBLAS on every call (a lock and a C call,
    about 0.7 us, 20 times in a LeNet-5 step), and a count a kernel sets inside the replay takes
    effect at the next one (in a training step's replays, pinned once for the step: the next step)."""

    workers: int | None = None


replay = ReplayPin()

inside = ThreadState()
"""``depth`` > 0 on a thread that is running a piece of a split: :func:`workers` is then 1, so a
piece never splits again (nested splits would wait on each other)."""


def outside_kernels() -> None:
    """Say that the calling thread runs no kernel now (a CPU graph replay starts): give back the
    ``hold`` holds it entered and never left, and set its split depth to 0. Heals what an
    exception raised inside ``hold``'s exit (a signal handler's, Ctrl-C) left behind:
    OpenBLAS held at one thread for the user's own NumPy calls, and :func:`workers` 1 on this
    thread for good. Never call it from inside a kernel."""
    state = inside
    if state.holds:
        hold.release(state.holds)
    if hold.forced and not hold.count:  # a restore was cut off (nobody holds it): finish it
        hold.release(0)
    state.depth = 0


def _after_fork() -> None:
    """A forked child has none of the parent's threads: make it start its own (and give
    OpenBLAS back the user's thread count if the fork came while a kernel held it at one)."""
    global lock, _workers, hold
    lock = threading.Lock()
    _workers = None
    held, hold = hold, BlasHold()
    blas = controller() if held.forced else None
    if blas:
        blas[1](held.saved)
    inside.holds = inside.depth = 0  # the forking thread's holds were of the parent's hold


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def controller():
    """OpenBLAS's ``openblas_get_num_threads`` / ``openblas_set_num_threads``, found once through
    threadpoolctl (the C functions themselves: a call allocates nothing and costs ~1 us)."""
    global _blas
    if _blas is None:
        try:
            lib = numpy_openblas()
            if lib is not None:
                get, put = lib._get_symbol("openblas_get_num_threads"), lib._get_symbol("openblas_set_num_threads")
                _blas = (get, put) if get is not None and put is not None else (lib.get_num_threads,
                                                                                  lib.set_num_threads)
            else:
                _blas = False
        except Exception:  # noqa: BLE001 - no threadpoolctl or an unknown BLAS: serial kernels
            _blas = False
    return _blas


def workers() -> int:
    """Threads a kernel may use now: the OpenBLAS thread count the user set, at most
    :data:`MAX_WORKERS`; 1 without OpenBLAS or threadpoolctl, and 1 inside a piece of a split
    (``inside``: pieces do not split again). Inside a graph replay, the count pinned at its start
    (:data:`replay`)."""
    if getattr(inside, "depth", 0):
        return 1
    pinned = replay.workers
    if pinned is not None:
        return pinned
    blas = controller()
    if not blas:
        return 1
    return max(1, min(MAX_WORKERS, hold.user_threads(blas)))


def run(tasks: Sequence[Callable[[], None]]) -> None:
    """Run ``tasks`` concurrently, OpenBLAS held at one thread; the first runs on the calling
    thread, the others on persistent kernel threads (more than :data:`MAX_WORKERS` tasks: each
    thread takes the next one, :func:`run_dynamic`). Returns when all have finished; the first
    exception raised (calling thread first) then propagates."""
    global _workers
    if len(tasks) <= 1:
        for t in tasks:
            t()
        return
    if len(tasks) > MAX_WORKERS:  # more tasks than threads: each thread takes the next one
        run_dynamic(tasks)
        return
    with lock, hold:
        if _workers is None:
            _workers = [Worker(i + 1) for i in range(MAX_WORKERS - 1)]
        helpers = _workers[:len(tasks) - 1]
        error: BaseException | None = None
        try:
            for w, t in zip(helpers, tasks[1:]):
                w.start(t)
            tasks[0]()
        except BaseException as e:  # noqa: BLE001 - raised once the helpers are done
            error = e
        if error is not None:  # a hand-off cut off before its release of `go`: wake the thread anyway
            for w in helpers:
                w._hint(w._go)
        for w in helpers:  # always wait (at once for a helper not started): its task uses the caller's arrays
            stop: BaseException | None = None
            err: BaseException | None = None
            while True:
                try:
                    err = w.wait()
                except BaseException as e:  # noqa: BLE001 - an interrupt, re-raised below
                    stop = stop or e
                if w._finished == w._posted:  # not a call: wait() may have been left before it began
                    break
            error = error or stop or err
        if error is not None:
            raise error


def run_dynamic(tasks: Sequence[Callable[[], None]]) -> None:
    """Run any number of independent ``tasks`` on up to :func:`workers` threads (the calling
    thread and the kernel threads, OpenBLAS held at one thread), each thread taking the next
    task not yet started: a thread slowed down by another process on its core simply does
    fewer of them, where a fixed share per thread would make everyone wait for it. Which thread
    runs a task varies; what a task computes must not depend on that. Exceptions propagate as
    in :func:`run` (the other thread finishes the remaining tasks first)."""
    t = min(workers(), len(tasks))
    if t <= 1:
        with hold:
            for task in tasks:
                task()
        return
    counter = itertools.count()  # next() is atomic under the GIL
    n = len(tasks)

    def loop() -> None:
        while True:
            i = next(counter)
            if i >= n:
                return
            tasks[i]()

    run([loop] * t)
