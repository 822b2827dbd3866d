"""Thread use of the NumPy kernels: work split across the BLAS threads, BLAS single-threaded inside.

OpenBLAS parallelizes one GEMM internally, with a synchronization per block. On a small machine
shared with other processes that goes badly wrong for the medium GEMMs of a training step (a
200x784 @ 784x1024 FC GEMM measured 8x *slower* on 2 threads than on 1 while other processes
kept the cores busy; only multi-GFLOP GEMMs kept their 2x), and it leaves everything around the
GEMM (im2col copies, col2im adds) on one core. The kernels therefore split their work
themselves: :func:`run` hands ``T`` independent pieces (row blocks of a GEMM, image chunks of a
conv) to ``T`` threads (the calling thread and a small pool) while OpenBLAS is held at one thread;
NumPy releases the GIL inside copies, ufuncs and BLAS calls, so the pieces run in parallel.

``T`` is the OpenBLAS thread count in force when the kernel runs (what
``threadpoolctl.threadpool_limits`` or ``OPENBLAS_NUM_THREADS`` set), capped at :data:`MAX_WORKERS`
(the planner sizes per-worker workspaces for that many). With one thread, or too little work to
split (:data:`MIN_SPLIT_FLOPS`), a kernel runs exactly its serial code. The split is fixed by the
shapes and ``T``, so results are reproducible run to run.

Every GEMM of the kernels runs with OpenBLAS at one thread, split or not: an OpenBLAS call on
several threads leaves its worker threads spinning for a while afterwards (OpenBLAS's thread
timeout, about 0.1 s), which takes a core from the next kernel, and from any other process.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable, Sequence

import numpy as np

MAX_WORKERS = 2
"""Most threads a kernel uses (and per-worker workspace slots the planner reserves): the cores of
the machines this runs on."""

MIN_SPLIT_FLOPS = 4e6
"""Smallest GEMM (2*m*n*k) worth splitting across threads: below it the hand-off costs more
(tens of microseconds) than the second core saves."""

_lock = threading.Lock()
_workers: list[_Worker] | None = None
_blas = None  # (get_num_threads, set_num_threads) of OpenBLAS, False when there is none


class _Worker:
    """One persistent kernel thread, handed a task through two locks used as binary semaphores
    (``go``: a task is ready, ``done``: it finished). A hand-off is a lock release and a
    lock acquire on each side: about half the latency of a ``ThreadPoolExecutor`` submit and
    ``Future.result`` (which build a future, a queue entry and a condition per call)."""

    def __init__(self, index: int):
        self._go = threading.Lock()
        self._go.acquire()
        self._done = threading.Lock()
        self._done.acquire()
        self._task: Callable[[], None] | None = None
        self._error: BaseException | None = None
        threading.Thread(target=self._loop, name=f"tr-mlir-kernel-{index}", daemon=True).start()

    def _loop(self) -> None:
        while True:
            self._go.acquire()
            task, self._task = self._task, None
            try:
                task()
            except BaseException as e:  # noqa: BLE001 - handed back to the caller by wait()
                self._error = e
            self._done.release()

    def start(self, task: Callable[[], None]) -> None:
        """Hand ``task`` to the thread (it must not hold one: :meth:`wait` came first)."""
        self._task = task
        self._go.release()

    def wait(self) -> BaseException | None:
        """Block until the task handed over has finished; returns its exception (or None)."""
        self._done.acquire()
        err, self._error = self._error, None
        return err


def _after_fork() -> None:
    """A forked child has none of the parent's threads: make it start its own."""
    global _lock, _workers
    _lock = threading.Lock()
    _workers = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def _controller():
    """OpenBLAS's ``openblas_get_num_threads`` / ``openblas_set_num_threads``, found once through
    threadpoolctl (the C functions themselves: a call allocates nothing and costs ~1 us)."""
    global _blas
    if _blas is None:
        try:
            from threadpoolctl import ThreadpoolController

            libs = [c for c in ThreadpoolController().lib_controllers if c.internal_api == "openblas"]
            if libs:
                lib = libs[0]
                get, put = lib._get_symbol("openblas_get_num_threads"), lib._get_symbol("openblas_set_num_threads")
                _blas = (get, put) if get is not None and put is not None else (lib.get_num_threads,
                                                                                  lib.set_num_threads)
            else:
                _blas = False
        except Exception:  # noqa: BLE001 - no threadpoolctl or an unknown BLAS: serial kernels
            _blas = False
    return _blas


def workers() -> int:
    """Threads a kernel may use now: the OpenBLAS thread count, at most :data:`MAX_WORKERS`
    (1 without OpenBLAS or threadpoolctl)."""
    blas = _controller()
    if not blas:
        return 1
    return max(1, min(MAX_WORKERS, int(blas[0]())))


def run(tasks: Sequence[Callable[[], None]]) -> None:
    """Run ``tasks`` (at most :data:`MAX_WORKERS`) concurrently, OpenBLAS held at one thread;
    the first runs on the calling thread, the others on persistent kernel threads. Returns when
    all have finished; the first exception raised (calling thread first) then propagates.
    Raises ``ValueError`` for more than :data:`MAX_WORKERS` tasks."""
    global _workers
    if len(tasks) <= 1:
        for t in tasks:
            t()
        return
    if len(tasks) > MAX_WORKERS:
        raise ValueError(f"expected at most MAX_WORKERS = {MAX_WORKERS} tasks, got {len(tasks)}")
    blas = _controller()
    with _lock:
        if _workers is None:
            _workers = [_Worker(i + 1) for i in range(MAX_WORKERS - 1)]
        if blas:
            get, put = blas
            n = int(get())
            put(1)
        try:
            helpers = _workers[:len(tasks) - 1]
            for w, t in zip(helpers, tasks[1:]):
                w.start(t)
            error: BaseException | None = None
            try:
                tasks[0]()
            except BaseException as e:  # noqa: BLE001 - raised once the helpers are done
                error = e
            for w in helpers:  # always wait: the helpers' tasks use the caller's arrays
                err = w.wait()
                error = error or err
            if error is not None:
                raise error
        finally:
            if blas:
                put(n)


def run_dynamic(tasks: Sequence[Callable[[], None]]) -> None:
    """Run any number of independent ``tasks`` on up to :func:`workers` threads (the calling
    thread and the kernel threads, OpenBLAS held at one thread), each thread taking the next
    task not yet started: a thread slowed down by another process on its core simply does
    fewer of them, where a fixed share per thread would make everyone wait for it. Which thread
    runs a task varies; what a task computes must not depend on that. Exceptions propagate as
    in :func:`run` (the other thread finishes the remaining tasks first)."""
    t = min(workers(), len(tasks))
    if t <= 1:
        blas = _controller()
        threads = int(blas[0]()) if blas else 1
        if threads > 1:
            blas[1](1)
        try:
            for task in tasks:
                task()
        finally:
            if threads > 1:
                blas[1](threads)
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


BLOCK_FLOPS = 60e6
"""While the kernel threads run unequally fast (:func:`contended`), split GEMMs of at least this
many FLOPs per thread are cut into two blocks per thread and scheduled dynamically
(:func:`run_dynamic`), so the slowed thread does fewer."""

IMBALANCE = 1.3
"""A static split whose slowest piece took this many times its fastest (pieces of at least
:data:`PROBE_SECONDS`) marks the threads as contended for :data:`CONTENDED_CALLS` GEMMs."""

PROBE_SECONDS = 2e-4
"""Shortest piece of a static split that counts as a measurement for :data:`IMBALANCE`."""

CONTENDED_CALLS = 32
"""Split GEMMs run with dynamic blocks after an unbalanced static split, before the next static
split measures again."""

_contended = 0  # split GEMMs left to run with dynamic blocks


def contended() -> bool:
    """Whether a recent static split found one kernel thread much slower than the other.

    On this project's 2-core machine, shared with other processes, another process often took
    half of one core: the calling thread's half of an MLP GEMM then took 2x the worker's (3.8 vs
    1.9 ms), and with one fixed half per thread every split waited for it. Two blocks per thread
    scheduled dynamically let the faster thread take three of four; but each extra block costs
    one more packing of the shared operand (about 20 us on the MLP's GEMMs; the whole step on
    an idle machine went from 10.39 to 10.60 ms with them always on). So the blocks are used
    only while the threads are measured to be unequal. The result has the same bits either way
    (every output element comes from one OpenBLAS call over all of ``k``)."""
    return _contended > 0


def note_dynamic_call() -> None:
    """Count one split GEMM run with dynamic blocks (towards the next static measurement)."""
    global _contended
    if _contended > 0:
        _contended -= 1


def _note_split(durations: Sequence[float]) -> None:
    """Record the piece times of a static split (see :func:`contended`)."""
    global _contended
    lo, hi = min(durations), max(durations)
    if lo >= PROBE_SECONDS and hi > IMBALANCE * lo:
        _contended = CONTENDED_CALLS


def serial_matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """``np.matmul(a, b, out=out)`` on the calling thread with OpenBLAS at one thread (module
    doc: a threaded OpenBLAS call leaves its threads spinning)."""
    blas = _controller()
    threads = int(blas[0]()) if blas else 1
    if threads > 1:
        blas[1](1)
        try:
            np.matmul(a, b, out=out)
        finally:
            blas[1](threads)
    else:
        np.matmul(a, b, out=out)


def split_axis(m: int, n: int) -> int:
    """The axis a split GEMM with an ``m x n`` output is cut along: ``-2`` (row blocks) when
    ``m >= n``, else ``-1`` (column blocks): each thread then keeps the whole of the smaller
    side (1.8-1.9x on 2 threads for the MLP's 200-row GEMMs split by columns, 1.7x by rows)."""
    return -2 if m >= n else -1


def blocks(size: int, t: int) -> list[tuple[int, int]]:
    """``t`` contiguous blocks ``(lo, hi)`` covering ``range(size)``, sizes differing by at most 1."""
    bounds = [size * i // t for i in range(t + 1)]
    return list(zip(bounds, bounds[1:]))


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray, *, axis: int | None = None,
           epilogue: Callable[[slice, slice], None] | None = None) -> None:
    """``np.matmul(a, b, out=out)`` for ``a`` (..., m, k), ``b`` (..., k, n), ``out`` (..., m, n),
    split across :func:`workers` threads when large enough (:data:`MIN_SPLIT_FLOPS`): into row
    blocks of ``m`` (``axis=-2``) or column blocks of ``n`` (``axis=-1``); ``None`` chooses by
    :func:`split_axis`. Each output element is computed by one OpenBLAS call over all of ``k``
    either way, so the split does not change the result.

    ``epilogue(rows, cols)``, when given, runs on the thread that computed the output block
    ``out[..., rows, cols]`` right after it (while the block is in cache): e.g. a bias add. It
    must touch only that block; unsplit, it is called once with the whole output."""
    m, k = a.shape[-2], a.shape[-1]
    n = b.shape[-1]
    t = workers()
    flops = 2.0 * m * n * k * (int(np.prod(a.shape[:-2])) if a.ndim > 2 else 1)
    if axis is None:
        axis = split_axis(m, n)
    if axis not in (-2, -1):
        raise ValueError(f"expected split axis -2 (rows) or -1 (columns), got {axis}")
    size = m if axis == -2 else n
    whole = slice(None)
    if t == 1 or flops < MIN_SPLIT_FLOPS or size < 2 * t:
        serial_matmul(a, b, out)
        if epilogue is not None:
            epilogue(whole, whole)
        return

    count = gemm_blocks(flops, size, t)
    tasks = matmul_tasks(a, b, out, axis, count, epilogue)
    if count > t:
        note_dynamic_call()
        run_dynamic(tasks)
        return
    times = [0.0] * len(tasks)

    def timed(i: int) -> None:
        t0 = time.perf_counter()
        tasks[i]()
        times[i] = time.perf_counter() - t0

    run([(lambda i=i: timed(i)) for i in range(len(tasks))])
    _note_split(times)


def gemm_blocks(flops: float, size: int, t: int) -> int:
    """Blocks a split GEMM of ``flops`` is cut into along an axis of ``size``, on ``t`` threads:
    ``t``, or ``2 t`` while :func:`contended` from :data:`BLOCK_FLOPS` per thread on (each block
    at least 2 wide)."""
    per = 2 if _contended > 0 and flops >= BLOCK_FLOPS * t else 1
    return max(1, min(t * per, size // 2))


def matmul_tasks(a: np.ndarray, b: np.ndarray, out: np.ndarray, axis: int, count: int,
                 epilogue: Callable[[slice, slice], None] | None = None) -> list[Callable[[], None]]:
    """``np.matmul(a, b, out=out)`` as ``count`` independent tasks: row blocks (``axis=-2``) or
    column blocks (``axis=-1``) of ``out``, each followed by ``epilogue(rows, cols)`` of its
    block (see :func:`matmul`). For :func:`run` / :func:`run_dynamic`."""
    size = out.shape[axis]
    whole = slice(None)

    def piece(lo: int, hi: int) -> None:
        s = slice(lo, hi)
        if axis == -2:
            np.matmul(a[..., s, :], b, out=out[..., s, :])
        else:
            np.matmul(a, b[..., s], out=out[..., s])
        if epilogue is not None:
            epilogue(s, whole) if axis == -2 else epilogue(whole, s)

    return [(lambda lo=lo, hi=hi: piece(lo, hi)) for lo, hi in blocks(size, count)]


MIN_SPLIT_ELEMENTS = 1 << 18
"""Smallest element-wise job (elements) worth splitting across threads (1 MiB of fp32)."""


def split(n: int, fn: Callable[[int, int, int], None], *, per_worker: int = 1) -> None:
    """Run ``fn(lo, hi, share)`` over contiguous blocks ``[lo, hi)`` of ``range(n)``, one block per
    kernel thread (one block under :data:`MIN_SPLIT_ELEMENTS`). ``share`` is the number of
    threads: a kernel that works in chunk temporaries divides its chunk size by it, so the
    temporaries alive at once stay what they are on one thread. For element-wise work only
    (each element's result independent of the split).

    ``per_worker > 1``: that many blocks per thread, scheduled dynamically (:func:`run_dynamic`:
    a thread slowed by another process takes fewer); ``fn`` may then run several blocks on one
    thread, one at a time."""
    t = workers() if n >= MIN_SPLIT_ELEMENTS else 1
    if t > 1 and per_worker > 1:
        count = max(t, min(t * per_worker, n // (MIN_SPLIT_ELEMENTS // 2)))
        run_dynamic([(lambda lo=lo, hi=hi: fn(lo, hi, t)) for lo, hi in blocks(n, count)])
        return
    bounds = [n * i // t for i in range(t + 1)]
    run([lambda w=w: fn(bounds[w], bounds[w + 1], t) for w in range(t)])
