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

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

MAX_WORKERS = 2
"""Most threads a kernel uses (and per-worker workspace slots the planner reserves): the cores of
the machines this runs on."""

MIN_SPLIT_FLOPS = 4e6
"""Smallest GEMM (2*m*n*k) worth splitting across threads: below it the hand-off costs more
(tens of microseconds) than the second core saves."""

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_blas = None  # (get_num_threads, set_num_threads) of OpenBLAS, False when there is none


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
    the first runs on the calling thread. Exceptions propagate."""
    global _pool
    if len(tasks) <= 1:
        for t in tasks:
            t()
        return
    get, put = _controller()
    n = int(get())
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=MAX_WORKERS - 1, thread_name_prefix="tr-mlir-kernel")
        put(1)
        try:
            futures = [_pool.submit(t) for t in tasks[1:]]
            tasks[0]()
            for f in futures:
                f.result()
        finally:
            put(n)


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """``np.matmul(a, b, out=out)`` for ``a`` (..., m, k), ``b`` (..., k, n), ``out`` (..., m, n),
    split across :func:`workers` threads when large enough: into row blocks of ``m`` or column
    blocks of ``n``, whichever is larger (each thread then keeps the whole of the smaller side:
    1.8-1.9x on 2 threads for the MLP's 200-row GEMMs split by columns, 1.7x by rows)."""
    m, k = a.shape[-2], a.shape[-1]
    n = b.shape[-1]
    t = workers()
    flops = 2.0 * m * n * k * (int(np.prod(a.shape[:-2])) if a.ndim > 2 else 1)
    if t == 1 or flops < MIN_SPLIT_FLOPS or max(m, n) < 2 * t:
        blas = _controller()
        if blas and t > 1:  # OpenBLAS at one thread for this call too (module doc)
            get, put = blas
            threads = int(get())
            put(1)
            try:
                np.matmul(a, b, out=out)
            finally:
                put(threads)
        else:
            np.matmul(a, b, out=out)
        return
    if m >= n:
        bounds = [m * i // t for i in range(t + 1)]
        tasks = [(lambda lo=lo, hi=hi: np.matmul(a[..., lo:hi, :], b, out=out[..., lo:hi, :]))
                 for lo, hi in zip(bounds, bounds[1:])]
    else:
        bounds = [n * i // t for i in range(t + 1)]
        tasks = [(lambda lo=lo, hi=hi: np.matmul(a, b[..., lo:hi], out=out[..., lo:hi]))
                 for lo, hi in zip(bounds, bounds[1:])]
    run(tasks)

MIN_SPLIT_ELEMENTS = 1 << 18
"""Smallest element-wise job (elements) worth splitting across threads (1 MiB of fp32)."""


def split(n: int, fn: Callable[[int, int, int], None]) -> None:
    """Run ``fn(lo, hi, share)`` over contiguous blocks ``[lo, hi)`` of ``range(n)``, one block per
    kernel thread (one block under :data:`MIN_SPLIT_ELEMENTS`). ``share`` is the number of
    blocks: a kernel that works in chunk temporaries divides its chunk size by it, so the
    temporaries alive at once stay what they are on one thread. For element-wise work only
    (each element's result independent of the split)."""
    t = workers() if n >= MIN_SPLIT_ELEMENTS else 1
    bounds = [n * i // t for i in range(t + 1)]
    run([lambda w=w: fn(bounds[w], bounds[w + 1], t) for w in range(t)])

