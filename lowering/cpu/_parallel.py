"""Thread use of the NumPy kernels: work split across the BLAS threads, BLAS single-threaded inside.

OpenBLAS parallelizes one GEMM internally, with a synchronization per block. On a small machine
shared with other processes that goes badly wrong for the medium GEMMs of a training step (a
200x784 @ 784x1024 FC GEMM measured 8x *slower* on 2 threads than on 1 while other processes
kept the cores busy; only multi-GFLOP GEMMs kept their 2x), and it leaves everything around the
GEMM (im2col copies, col2im adds) on one core. The kernels therefore split their work
themselves: :func:`run` (and :func:`run_jobs`, :func:`run_c` on a C worker thread) hands ``T``
independent pieces (row blocks of a GEMM, image chunks of a conv) to ``T`` threads (the calling
thread and a small pool) while OpenBLAS is held at one thread; NumPy releases the GIL inside
copies, ufuncs and BLAS calls, so the pieces run in parallel.

``T`` is the OpenBLAS thread count in force when the kernel runs (what
``threadpoolctl.threadpool_limits`` or ``OPENBLAS_NUM_THREADS`` set), capped at :data:`MAX_WORKERS`
(the planner sizes per-worker workspaces for that many). With one thread, or too little work to
split (:data:`MIN_SPLIT_FLOPS`), a kernel runs exactly its serial code. The split is fixed by the
shapes and ``T``, so results are reproducible run to run.

Every GEMM of the kernels runs with OpenBLAS at one thread, split or not: an OpenBLAS call on
several threads leaves its worker threads spinning for a while afterwards (OpenBLAS's thread
timeout, about 0.1 s), which takes a core from the next kernel, and from any other process.

Four ways to run pieces, all giving the same bits (each GEMM output element comes from one
OpenBLAS call over all of ``k``; element-wise pieces are independent):

* :func:`run`: Python callables, the first on the calling thread, the others on persistent
  Python threads (a lock hand-off; a waiting thread needs a futex wake-up and the GIL: 10-40 us).
* :func:`run_dynamic`: any number of callables, each thread taking the next; used for GEMMs cut
  into more blocks while :func:`contended` (another process slowing one of the threads).
* :func:`run_jobs`: two C jobs (:func:`gemm_job`: a ``cblas_sgemm`` of NumPy's OpenBLAS with a
  bias add or a column sum after it; :func:`call_job`: a compiled element-wise kernel), one on
  the calling thread and one on a C worker thread that never touches the GIL; :func:`matmul`
  and :func:`split_jobs` use it when available (:func:`c_gemm`; ``TR_MLIR_C_GEMM=0``: off).
* :func:`run_c`: one compiled kernel over two argument lists (the compiled conv, pooling,
  batch-norm, ReLU and tanh-backward kernels split their batch or rows this way), as a
  :func:`kernel_job` pair on the C worker; on the Python threads without it, or while
  :func:`contended`. LeNet-5 at 2 threads against the Python threads: conv forward 0.89 -> 0.48
  ms, max pool forward 0.55 -> 0.27; all kernels of the step 8.0 -> 6.6 ms.

:func:`matmul` with ``own_blas=True`` (the FC layers) runs its GEMMs with the kernels' own
OpenBLAS instance when :func:`._blas_libs.own_blas_core` names a core type (Haswell kernels on AMD Zen 4
CPUs where NumPy's OpenBLAS picked an Intel AVX-512 type: 10-14% faster there), cut only where that
instance gives the same bits (:data:`OWN_ROW_ALIGN`), so one and two threads agree.

"The same bits" holds only where the BLAS kernels give each output element the same sums wherever
the GEMM is cut (into blocks above :data:`SMALL_GEMM_MNK`): NumPy's OpenBLAS with its SkylakeX
kernels does; with its Haswell kernels (the core type of Zen 1-3 and Intel AVX2 CPUs, or any CPU under
``OPENBLAS_CORETYPE=Haswell``) only row cuts at multiples of :data:`OWN_ROW_ALIGN` do. A probe
(:func:`._gemm_bits.numpy_cut_align`) decides which cuts the kernels make with NumPy's OpenBLAS; a BLAS
that keeps its bits under neither runs every GEMM whole."""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Callable, Sequence
from importlib import resources

import numpy as np

from . import _gemm_bits, _threads
from ._blas_libs import find_sgemm, load_own_blas
from ._threads import MAX_WORKERS, outside_kernels, run, run_dynamic, workers  # noqa: F401 - the module's API

MIN_SPLIT_FLOPS = 4e6
"""Smallest GEMM (2*m*n*k) worth splitting across threads: below it the hand-off costs more
(tens of microseconds) than the second core saves."""

SMALL_GEMM_MNK = 1e6
"""A GEMM block of m*n*k at most this takes OpenBLAS's small-matrix kernel (SkylakeX sgemm:
100^3), which sums k in another order: no cut that depends on the thread count makes one (a
2-4 MFLOP GEMM split in two gave other bits on 2 threads than whole on 1)."""

BLOCK_FLOPS = 60e6
"""While the kernel threads run unequally fast (:func:`contended`), split GEMMs of at least this
many FLOPs per thread are cut into two blocks per thread and scheduled dynamically
(:func:`run_dynamic`), so the slowed thread does fewer."""

IMBALANCE = 1.3
"""A static split whose slowest piece took this many times its fastest (pieces of at least
:data:`PROBE_SECONDS`; per element of work for :func:`run_c`), :data:`IMBALANCED_IN_A_ROW`
measured splits in a row, marks the threads as contended for :data:`CONTENDED_CALLS` splits."""

IMBALANCED_IN_A_ROW = 2
"""Unbalanced measured splits in a row that mark the threads contended. One is a transient: the
first split after PyTorch ran in the same process (its OpenMP threads still spin for a while)
was unbalanced, and the 32 contended splits after it made a round of 6 LeNet-5 steps 3.3 ms
instead of 2.4 (2026-12-07, the bench's interleaved pairs); a process that keeps a core busy
unbalances every split."""

PROBE_SECONDS = 2e-4
"""Shortest piece of a static split that counts as a measurement for :data:`IMBALANCE`."""

CONTENDED_CALLS = 32
"""Splits run the contended way (split GEMMs with dynamic blocks, :func:`run_c` on the Python
threads) once :data:`IMBALANCED_IN_A_ROW` measured static splits in a row were unbalanced,
before the next static split measures again."""

_contended = 0  # splits left to run the contended way
_imbalanced = 0  # unbalanced measured splits in a row


def contended() -> bool:
    """Whether recent static splits (:data:`IMBALANCED_IN_A_ROW` in a row) found one kernel thread
    much slower than the other.

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
    """Count one split run the contended way (towards the next static measurement)."""
    global _contended
    if _contended > 0:
        _contended -= 1


def note_split(durations: Sequence[float]) -> None:
    """Record the piece times of a static split (see :func:`contended`, :data:`IMBALANCE`)."""
    global _contended, _imbalanced
    lo, hi = min(durations), max(durations)
    if lo < PROBE_SECONDS:
        return  # too short to measure
    if hi > IMBALANCE * lo:
        _imbalanced += 1
        if _imbalanced >= IMBALANCED_IN_A_ROW:
            _contended = CONTENDED_CALLS
    else:
        _imbalanced = 0


GEMM_C_SOURCE = resources.files(__package__).joinpath("_split_gemm.c").read_bytes().decode("utf-8")
"""C source of the split-GEMM worker (:func:`run_jobs`): ``_split_gemm.c`` next to this module
(package data); compiled through :mod:`._cc`."""

IDLE_SPIN_NS = 300_000
"""How long (ns) the C worker spins for its next job before sleeping on a condition variable,
while no thread of the process is being preempted (:data:`CONTENDED_SPIN_NS` otherwise).
Between two kernels of a step the main thread runs the next launch's Python code (tens of
microseconds); a worker that went to sleep in that gap is woken through the kernel, which on a
KVM guest costs about as much as a small kernel's half. The spin only runs after a job, so an
idle process sleeps within 0.3 ms (OpenMP runtimes spin-wait likewise: Intel's
``KMP_BLOCKTIME`` defaults to 200 ms).

Measured on the Zen 5 host (2026-12-07, 2 threads, in one process, the settings alternating
every 15 steps, medians of 12 rounds), idle spin / contended spin: CIFAR MobileNetV2 24.4 ms at
20 / 20 us, 22.4 at 300 / 20 (this rule), 22.0 at 300 / 300; LeNet-5 2.37, 2.38, 2.10 ms; the MLP
4.71, 4.58, 4.54 ms. With a CPU hog on the 2 cores (6 rounds): MobileNetV2 43.8, 43.8, 107 ms;
LeNet-5 4.67, 4.51, 9.16; the MLP 12.0, 12.0, 13.9: an always-long spin keeps three threads
runnable on two cores, one of them spinning."""

CONTENDED_SPIN_NS = 20_000
"""The C worker's idle spin (ns) for its next 16 splits after any thread of the process was
preempted (the process's involuntary context switches, ``getrusage(RUSAGE_SELF)``, went up since
the worker's last job: another runnable thread wanted a core). The process's own threads count
too: while LeNet-5's tanh forward still woke a Python kernel thread, a quiet LeNet-5 step saw
about one such switch and ran at the short spin's speed; without that wake-up it gets the long
spin's (2.21 -> 1.98 ms). MobileNetV2's 120 splits per step mostly run with the long one.
Counted on Linux only (elsewhere the worker always spins this long)."""

WAIT_SPIN_NS = 1_000_000
"""How long (ns) the calling thread, its own job done, spins for the worker's before sleeping
(the two halves of a split take about the same time)."""

ENV_C_GEMM = "TR_MLIR_C_GEMM"
"""Environment variable: ``0`` keeps split GEMMs and the compiled kernels' splits (:func:`run_c`)
on the Python kernel threads (no C worker)."""

_NO_TRANS, _TRANS = 111, 112  # CBLAS_TRANSPOSE


class _Job(ctypes.Structure):
    """One ``tr_job`` of :data:`GEMM_C_SOURCE`: ``c = a @ b`` (cblas row-major), then an optional
    bias add over the rows of ``c``, an optional ReLU or ReLU gate (:func:`gemm_job`) and an
    optional column sum."""

    _fields_ = [("ta", ctypes.c_int64), ("tb", ctypes.c_int64), ("m", ctypes.c_int64), ("n", ctypes.c_int64),
                ("k", ctypes.c_int64), ("lda", ctypes.c_int64), ("ldb", ctypes.c_int64), ("ldc", ctypes.c_int64),
                ("a", ctypes.c_void_p), ("b", ctypes.c_void_p), ("c", ctypes.c_void_p), ("bias", ctypes.c_void_p),
                ("sum_src", ctypes.c_void_p), ("sum_dst", ctypes.c_void_p), ("sum_ld", ctypes.c_int64),
                ("sum_n", ctypes.c_int64), ("sum_rows", ctypes.c_int64), ("seconds", ctypes.c_double),
                ("call", ctypes.c_void_p), ("iargs", ctypes.c_int64 * 12), ("fargs", ctypes.c_double * 8),
                ("next", ctypes.c_void_p), ("own", ctypes.c_int64), ("relu", ctypes.c_int64),
                ("gate", ctypes.c_void_p), ("gate_ld", ctypes.c_int64), ("nargs", ctypes.c_int64)]


_cgemm: tuple | None | bool = None  # (tr_run_list, tr_after_fork, tr_run_here, own, tr_run_segments); False: none
_run_here_fn = None  # tr_run_here of that library, kept after _run_array turns the worker off


def _after_fork() -> None:
    """A forked child has no C worker thread: the next split starts one (the kernel threads and
    the OpenBLAS hold are :mod:`._threads`' own fork hook)."""
    if _cgemm:
        _cgemm[1]()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
_jobs_cache: dict = {}


_sgemm_found: list = []


def sgemm_address() -> tuple[int, bool] | None:
    """:func:`find_sgemm` once per process, for kernels calling ``cblas_sgemm`` themselves
    (:mod:`._cwinograd`) inside :func:`run` or :func:`one_thread` (OpenBLAS at one thread)."""
    if not _sgemm_found:
        _sgemm_found.append(find_sgemm() if _threads.controller() else None)
    return _sgemm_found[0]


def one_thread() -> _threads.BlasHold:
    """A context manager holding OpenBLAS at one thread, as :func:`run` does around a split."""
    return _threads.hold


def c_gemm() -> bool:
    """Whether split GEMMs and :func:`run_c` splits can run on the C worker (:func:`run_jobs`): a C
    compiler (:func:`._cc.available`), NumPy's OpenBLAS ``cblas_sgemm`` found (the worker is set up
    with it; without NumPy's OpenBLAS the kernels run on one thread anyway), ``TR_MLIR_C_GEMM`` not ``0``.
    The two switches are read on every call; the worker is set up once, at the first call with
    both on (a first call under ``TR_MLIR_CC=0`` used to turn it off for the whole process)."""
    global _cgemm, _run_here_fn
    from . import _cc

    if os.environ.get(ENV_C_GEMM, "1").strip() == "0" or not _cc.available():
        return False  # TR_MLIR_CC=0 after the worker started stops it too (no compiled code runs)
    if _cgemm is None:
        _cgemm = False
        if _threads.controller():
            found = find_sgemm()
            if found is not None:
                try:
                    lib = _cc.load(GEMM_C_SOURCE)
                except (RuntimeError, OSError):
                    lib = None
                if lib is not None:
                    setup = lib.tr_setup
                    setup.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64]
                    setup.restype = ctypes.c_int
                    setup(found[0], int(found[1]), IDLE_SPIN_NS, CONTENDED_SPIN_NS, WAIT_SPIN_NS)
                    run2 = lib.tr_run_list
                    run2.argtypes = [ctypes.c_void_p, ctypes.c_int]
                    run2.restype = ctypes.c_int
                    after = lib.tr_after_fork
                    after.argtypes = []
                    after.restype = None
                    here = lib.tr_run_here
                    here.argtypes = [ctypes.c_void_p]
                    here.restype = None
                    segs = lib.tr_run_segments  # replay groups (_prepared.ReplayGroup): this library's worker
                    segs.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
                    segs.restype = ctypes.c_int
                    own = load_own_blas()
                    if own:
                        lib.tr_setup_own.argtypes = [ctypes.c_void_p, ctypes.c_int]
                        lib.tr_setup_own(own[0], int(own[1]))
                    _cgemm, _run_here_fn = (run2, after, here, own, segs), here
                    if own and not _own_cuts_keep_bits():
                        lib.tr_setup_own(None, 0)  # jobs with own=1 then take NumPy's sgemm too
                        _cgemm = (run2, after, here, False, segs)
    return bool(_cgemm)


def _own_cuts_keep_bits() -> bool:
    """Whether the own OpenBLAS instance gives the same bits for row blocks cut at multiples of
    :data:`OWN_ROW_ALIGN`, plain or transposed operands, as for the whole GEMM (a probe when it
    is loaded; if not, it is not used)."""
    return _gemm_bits.row_cuts_keep_bits(lambda a, b, out: run_here(gemm_job(a, b, out, own=True)))


def own_blas() -> str | None:
    """The core name of the kernels' own OpenBLAS instance in use, or None (see :func:`._blas_libs.own_blas_core`)."""
    cg = _cgemm if c_gemm() else None  # one read: another Python thread may turn the worker off
    return cg[3][2] if cg and cg[3] else None


def _operand(x: np.ndarray) -> tuple[int, int] | None:
    """(CBLAS transpose flag, leading dimension) of a 2-D fp32 operand in row-major cblas terms,
    or None when its strides do not fit BLAS."""
    if x.dtype != np.float32 or x.ndim != 2 or x.ctypes.data % 4:
        return None
    (r, c), (s0, s1) = x.shape, x.strides
    if s1 == 4 and s0 % 4 == 0 and s0 // 4 >= max(1, c):
        return _NO_TRANS, s0 // 4
    if s0 == 4 and s1 % 4 == 0 and s1 // 4 >= max(1, r):
        return _TRANS, s1 // 4
    return None


def gemm_job(a: np.ndarray, b: np.ndarray, out: np.ndarray, *, bias: np.ndarray | None = None,
             sum_src: np.ndarray | None = None, sum_dst: np.ndarray | None = None, own: bool = False,
             relu: bool = False, gate: np.ndarray | None = None) -> _Job | None:
    """A job for :func:`run_jobs`: ``out = a @ b`` (2-D fp32 views, ``out`` with unit column
    stride), then ``out[i, :] += bias`` when given (fp32, ``n`` contiguous), then ``relu``:
    ``out = max(out, 0)`` (``relu_fwd``'s expression), then ``gate`` (fp32, ``out``'s shape, unit
    column stride): ``out *= gate > 0`` (``relu_bwd_from_output``'s product), then
    ``sum_dst = sum_src.sum(axis=0)`` (rows added in order, as ``np.add.reduce``) when given.
    None when a layout does not fit (the caller then uses NumPy). ``own``: the GEMM with the
    kernels' own OpenBLAS instance (:func:`own_blas`) when there is one."""
    (m, k), n = a.shape, b.shape[1]
    if b.shape[0] != k or out.shape != (m, n) or k < 1:
        return None
    oa, ob, oc = _operand(a), _operand(b), _operand(out)
    if oa is None or ob is None or oc is None or oc[0] != _NO_TRANS:
        return None
    job = _Job(oa[0], ob[0], m, n, k, oa[1], ob[1], oc[1], a.ctypes.data, b.ctypes.data, out.ctypes.data)
    job.own = int(own)
    job.relu = int(relu)
    if gate is not None:
        og = _operand(gate)
        if og is None or og[0] != _NO_TRANS or gate.dtype != np.float32 or gate.shape != (m, n):
            return None
        job.gate, job.gate_ld = gate.ctypes.data, og[1]
    if bias is not None:
        if bias.dtype != np.float32 or bias.shape != (n,) or bias.strides != (4,):
            return None
        job.bias = bias.ctypes.data
    if sum_dst is not None:
        os_ = _operand(sum_src)
        if (os_ is None or os_[0] != _NO_TRANS or sum_dst.dtype != np.float32 or sum_dst.ndim != 1
                or sum_dst.strides != (4,) or sum_dst.shape[0] != sum_src.shape[1]):
            return None
        job.sum_src, job.sum_dst = sum_src.ctypes.data, sum_dst.ctypes.data
        job.sum_ld, job.sum_n, job.sum_rows = os_[1], sum_src.shape[1], sum_src.shape[0]
    return job


def call_job(fn: int, ints: Sequence[int] = (), floats: Sequence[float] = ()) -> _Job:
    """A job for :func:`run_jobs` that calls the compiled function at address ``fn`` as
    ``fn(const int64_t *ints, const double *floats)`` (at most 8 of each): element-wise kernels
    (pointers and sizes in ``ints``) run on the C worker this way."""
    if len(ints) > 8 or len(floats) > 8:
        raise ValueError(f"expected at most 8 int and 8 float arguments, got {len(ints)} and {len(floats)}")
    job = _Job()
    job.call = fn
    for i, v in enumerate(ints):
        job.iargs[i] = int(v)
    for i, v in enumerate(floats):
        job.fargs[i] = float(v)
    return job


def split_jobs(n: int, make: Callable[[int, int], _Job]) -> bool:
    """Element-wise work over ``range(n)`` as :func:`call_job` blocks, ``make(lo, hi)``, on the
    calling thread and the C worker, when :func:`split` would use two threads and the C worker
    is there: two blocks per thread (at least :data:`MIN_SPLIT_ELEMENTS` / 2 elements each),
    taken dynamically, so a thread slowed by another process does fewer (a block costs a call
    of a few microseconds, no packing). False: nothing was run (use :func:`split`)."""
    cuts = job_blocks(n)
    if cuts is None:
        return False
    run_jobs(*[make(lo, hi) for lo, hi in cuts])
    return True


def job_blocks(n: int) -> list[tuple[int, int]] | None:
    """The blocks :func:`split_jobs` cuts ``range(n)`` into now, or None where it would not split
    (also what a prepared launch of such a kernel makes once)."""
    if n < MIN_SPLIT_ELEMENTS or workers() != 2 or not c_gemm():
        return None
    return blocks(n, max(2, min(4, n // (MIN_SPLIT_ELEMENTS // 2))))


def chain(first: _Job, then: _Job) -> _Job:
    """Make ``then`` run right after ``first`` on the same thread (``first`` alone goes into
    the list of :func:`run_jobs`; ``then`` must stay alive as long as ``first`` is used)."""
    first.next = ctypes.addressof(then)
    return first


def run_jobs(*jobs: _Job) -> tuple[float, ...]:
    """Run :func:`gemm_job` / :func:`call_job` / :func:`kernel_job` jobs on the calling thread
    and the C worker thread, OpenBLAS held at one thread, each thread taking the next job not yet
    started (the calling thread starts with the first); returns the seconds each job took. With
    two jobs of equal size that is one per thread; with more, a thread slowed by another process
    takes fewer. Needs :func:`c_gemm`. (No exception can come from the C side; bad layouts were
    refused by :func:`gemm_job`.)"""
    arr = (_Job * len(jobs))(*jobs)
    _run_array(arr)
    return tuple(j.seconds for j in arr)


def _run_array(arr) -> None:
    """Run the jobs of a ctypes ``_Job`` array as :func:`run_jobs` does. Where the C worker
    thread cannot be started (``pthread_create`` failed, nothing ran) the jobs run one after the
    other on the calling thread (each writes its own part: the same bits) and the C worker is off
    from then on (:func:`c_gemm` False: the Python kernel threads split, as without it)."""
    global _cgemm
    with _threads.lock, _threads.hold:
        cg = _cgemm  # False: another Python thread's call turned the worker off since this one's check
        if cg and cg[0](ctypes.addressof(arr), len(arr)) == 0:
            return
        for job in arr:
            _run_here_fn(ctypes.addressof(job))
        _cgemm = False


def kernel_job(fn: ctypes._CFuncPtr, args: Sequence[int]) -> _Job:
    """A job for :func:`run_jobs` that calls the compiled kernel ``fn`` (a :func:`._cc.function`
    whose parameters are all pointers and integers, at most 12) as ``fn(*args)``, ``args`` given
    as Python ints (addresses and sizes)."""
    if not 1 <= len(args) <= 12:
        raise ValueError(f"expected 1 to 12 kernel arguments, got {len(args)}")
    job = _Job()
    job.call = ctypes.cast(fn, ctypes.c_void_p).value
    job.nargs = len(args)
    for i, v in enumerate(args):
        job.iargs[i] = int(v)
    return job


_KERNEL_ARGTYPES = {ctypes.c_void_p, ctypes.c_long, ctypes.c_int64, ctypes.c_longlong, ctypes.c_size_t, ctypes.c_int,
                    ctypes.c_ssize_t, ctypes.c_ulong}
"""The parameter types a :func:`kernel_job` may pass (each received from an ``int64_t`` in an
8-byte register or stack slot on the LP64 ABIs of x86-64 System V and Linux AArch64)."""

_job_form: dict[int, bool] = {}  # kernel address -> whether run_c may call it as a kernel_job


def _callable_as_job(fn: ctypes._CFuncPtr) -> int | None:
    """``fn``'s address when :func:`kernel_job` may call it (8-byte pointers; at most 12
    parameters, all of :data:`_KERNEL_ARGTYPES`), else None."""
    addr = ctypes.cast(fn, ctypes.c_void_p).value
    ok = _job_form.get(addr)
    if ok is None:
        types = getattr(fn, "argtypes", None) or ()
        ok = _job_form[addr] = (ctypes.sizeof(ctypes.c_void_p) == 8 and 1 <= len(types) <= 12
                                and all(t in _KERNEL_ARGTYPES for t in types))
    return addr if ok else None


def run_c(fn: ctypes._CFuncPtr, pieces: Sequence[tuple[int, ...]], *, keep: bool = True,
          work: Sequence[int] | None = None) -> None:
    """Call the compiled kernel ``fn`` once per piece, ``fn(*piece)``, the pieces concurrently
    (independent parts of one kernel's work that write disjoint memory; by default each piece's
    last two arguments are its range ``[lo, hi)`` of images, rows or elements, else ``work``
    says how much each does; ``fn``'s parameters pointers and integers, the pieces' values
    Python ints).

    Two pieces with the C worker (:func:`c_gemm`): one on the calling thread and one on the C
    worker, as a :func:`kernel_job` pair (a hand-off of a few microseconds and no GIL; the Python
    kernel threads of :func:`run` need about 40 us per split here, measured with empty pieces).
    ``keep``: the pair is kept per argument list (:func:`cached_jobs`), for call sites whose
    pointers are the same every step (the bound arrays of a captured graph); False for pointers
    to per-call temporaries. The pieces' times per unit of work feed :func:`note_split`: ``work``
    gives each piece's amount (for a kernel whose last two arguments are not its range), else
    the length of that range.
    Otherwise :func:`run`: without the C worker, for a kernel whose parameters a job cannot pass
    (:func:`_callable_as_job`), once the C thread could not start (that call ran both pieces
    here, :func:`_run_array`), and while :func:`contended`
    (another process slows a thread: the caller's spin-wait for the C worker would keep a core
    busy that the slowed worker could move to; LeNet-5 with a CPU hog measured 0.86-0.90x the
    Python threads that way). The pieces' results do not depend on the thread that runs them."""
    if len(pieces) == 1:
        fn(*pieces[0])
        return
    addr = _callable_as_job(fn) if len(pieces) == 2 and c_gemm() else None
    if addr is not None:
        if _contended > 0:  # the worker is slowed: the Python threads block instead of spinning
            note_dynamic_call()
        else:
            if keep:
                key = ("kernel", addr, tuple(pieces))
                arr = cached_jobs(key, lambda: (_Job * 2)(*(kernel_job(fn, p) for p in pieces)))
            else:
                arr = (_Job * 2)(*(kernel_job(fn, p) for p in pieces))
            run_pair(arr, pieces, work)
            return
    run([lambda p=p: fn(*p) for p in pieces])


def pair_sizes(pieces: Sequence[tuple[int, ...]], work: Sequence[int] | None) -> tuple[int, ...]:
    """Each piece's amount of work (at least 1): ``work``, else the length of the range its last two
    arguments give (:func:`run_c`)."""
    return tuple(max(1, w) for w in work) if work is not None else tuple(max(1, p[-1] - p[-2]) for p in pieces)


def note_pair(seconds: Sequence[float], sizes: Sequence[int]) -> None:
    """:func:`note_split` of a job pair's ``seconds``, each scaled to the larger amount of work."""
    top = max(sizes)
    note_split([t / n * top for t, n in zip(seconds, sizes)])


def run_pair(arr, pieces: Sequence[tuple[int, ...]], work: Sequence[int] | None) -> None:
    """Run :func:`run_c`'s job pair ``arr`` (of ``pieces``) on this thread and the C worker
    (:func:`_run_array`) and feed :func:`note_pair` their times."""
    _run_array(arr)
    note_pair((arr[0].seconds, arr[1].seconds), pair_sizes(pieces, work))


def run_here(job: _Job) -> None:
    """Run one job (and its :func:`chain`) on the calling thread, without the GIL. Needs
    :func:`c_gemm`; for jobs of the kernels' own OpenBLAS (one thread) or element-wise calls."""
    if job.own:  # the kernels' own OpenBLAS instance runs at one thread anyway
        _run_here_fn(ctypes.addressof(job))  # kept where another thread's _run_array turned the worker off
        return
    with _threads.hold:
        _run_here_fn(ctypes.addressof(job))


def cached_jobs(key: tuple, make: Callable[[], tuple | None]) -> tuple | None:
    """Jobs for a call site, made once by ``make()`` and kept under ``key`` (which must hold
    every pointer, shape and stride the jobs use): a kernel replays the same arrays every step."""
    jobs = _jobs_cache.get(key, _jobs_cache)
    if jobs is _jobs_cache:
        if len(_jobs_cache) > 1024:
            _jobs_cache.clear()
        jobs = _jobs_cache[key] = make()
    return jobs


def array_key(*arrays: np.ndarray | None) -> tuple:
    """Pointer, shape, strides and dtype of each array (None kept): a :func:`cached_jobs` key."""
    return tuple(None if x is None else (x.ctypes.data, x.shape, x.strides, x.dtype.char) for x in arrays)


def serial_matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """``np.matmul(a, b, out=out)`` on the calling thread with OpenBLAS at one thread (module
    doc: a threaded OpenBLAS call leaves its threads spinning)."""
    with _threads.hold:
        np.matmul(a, b, out=out)


def split_axis(m: int, n: int) -> int:
    """The axis a split GEMM with an ``m x n`` output is cut along: ``-2`` (row blocks) when
    ``m >= n``, else ``-1`` (column blocks): each thread then keeps the whole of the smaller
    side (1.8-1.9x on 2 threads for the MLP's 200-row GEMMs split by columns, 1.7x by rows)."""
    return -2 if m >= n else -1


def blocks(size: int, t: int, align: int = 1) -> list[tuple[int, int]]:
    """``t`` contiguous blocks ``(lo, hi)`` covering ``range(size)``, sizes differing by at most
    1 (``align`` > 1: inner cuts at multiples of ``align``, sizes differing by at most ``align``;
    needs ``size >= t * align``)."""
    if align > 1:
        units = size // align
        bounds = [units * i // t * align for i in range(t)] + [size]
    else:
        bounds = [size * i // t for i in range(t + 1)]
    return list(zip(bounds, bounds[1:]))


OWN_COL_BLOCKS = 2
"""Column blocks of a GEMM with the kernels' own OpenBLAS instance and no Python epilogue (the
FC forward): a fixed cut, the same on one or two threads."""

OWN_ROW_ALIGN = 24
"""Row cut granularity of GEMMs with the kernels' own OpenBLAS instance (Haswell kernels), and
with NumPy's OpenBLAS where it runs Haswell kernels too (:func:`._gemm_bits.numpy_cut_align`): their
results change when a GEMM is cut into column blocks, or into row blocks at other multiples
(their row unroll is 24), and stay the same bits at multiples of 24 (checked for the MLP's
shapes, tests/test_kernels_parallel.py)."""


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray, *, axis: int | None = None,
           epilogue: Callable[[slice, slice], None] | None = None, bias: np.ndarray | None = None,
           own_blas: bool = False, relu: bool = False, gate: np.ndarray | None = None,
           row_sums: tuple[np.ndarray, np.ndarray] | None = None) -> None:
    """``np.matmul(a, b, out=out)`` for ``a`` (..., m, k), ``b`` (..., k, n), ``out`` (..., m, n),
    split across :func:`workers` threads when large enough (:data:`MIN_SPLIT_FLOPS`): into row
    blocks of ``m`` (``axis=-2``) or column blocks of ``n`` (``axis=-1``); ``None`` chooses by
    :func:`split_axis`. Each output element is computed by one OpenBLAS call over all of ``k``
    either way, and the blocks are cut only where NumPy's OpenBLAS keeps its bits
    (:func:`._gemm_bits.numpy_cut_align`: row blocks at multiples of :data:`OWN_ROW_ALIGN` whatever ``axis``
    says, or no split, where cuts anywhere would change them), so the split does not change the
    result.

    ``epilogue(rows, cols)``, when given, runs on the thread that computed the output block
    ``out[..., rows, cols]`` right after it (while the block is in cache). It must touch only
    that block; unsplit, it is called once with the whole output. ``bias`` (``n`` values) is
    added to every row of ``out`` the same way (after the GEMM, before ``epilogue``).

    2-D fp32 operands split in two without ``epilogue`` run on the C worker (:func:`c_gemm`,
    :func:`run_jobs`): the same ``cblas_sgemm`` calls NumPy makes, without a Python thread
    hand-off. ``own_blas``: every 2-D GEMM that fits, split or not, runs with the kernels' own
    OpenBLAS instance (:func:`own_blas`) when there is one: results agree with NumPy's to
    float rounding, and are the same bits on one or two threads (FC layers use it).

    ``relu`` (``out = max(out, 0)`` after the bias) and ``gate`` (``out *= gate > 0``, gate fp32
    of ``out``'s shape: the backward of a ReLU from its output) are the ReLU epilogues of a fused
    FC (:mod:`.dense`): in the C jobs they run on each block as it is computed; on any other path
    the ReLU kernels (:func:`.activation.relu_fwd`, :func:`.activation.relu_bwd_from_output`) run
    over the whole ``out`` (C-contiguous) after the GEMM. Either way the bits are those of the
    GEMM followed by the unfused ReLU kernel. Raises ValueError for a non-contiguous ``out``
    or a ``gate`` of another shape on that path.

    A stack of one GEMM (a conv with one group) runs as its 2-D GEMM, so a split takes the C worker
    (MobileNetV2's pointwise weight gradients through the Python threads: 0.13-0.15 ms on 2, 0.09 on 1).

    A matrix-vector product (``m`` or ``n`` = 1) is never split: NumPy runs it as a ``gemv``,
    whose sums are not those of ``cblas_sgemm`` on blocks, so a split would change its bits
    between one and two threads. Nor is a GEMM whose ``out`` (or ``row_sums``' destination)
    shares memory with an operand: NumPy copies the operand first, where blocks would write over
    what another block still reads.

    ``row_sums``: ``(src, dst)``, ``dst`` = the column sums of ``src`` as
    :func:`row_sums_epilogue` (an FC's bias gradient); not with ``epilogue`` (ValueError)."""
    if (a.ndim == b.ndim == out.ndim == 3 and a.shape[0] == b.shape[0] == out.shape[0] == 1
            and (gate is None or gate.ndim == 3)):
        a, b, out = a[0], b[0], out[0]
        gate = None if gate is None else gate[0]
    if row_sums is not None:
        if epilogue is not None:
            raise ValueError("expected row_sums or an epilogue, not both")
        epilogue = row_sums_epilogue(*row_sums)
    if not _matmul(a, b, out, axis, epilogue, bias, own_blas, relu, gate, row_sums=row_sums) \
            and (relu or gate is not None):
        _relu_after(out, relu, gate)


def _relu_after(out: np.ndarray, relu: bool, gate: np.ndarray | None) -> None:
    """The ReLU epilogues of :func:`matmul` as the unfused kernels, over the whole ``out``."""
    from . import activation  # activation imports this module

    if not out.flags.c_contiguous or gate is not None and gate.shape != out.shape:
        raise ValueError(f"expected a C-contiguous GEMM output{' and a gate' if gate is not None else ''} of "
                         f"one shape for a ReLU epilogue, got {out.shape}"
                         f"{'' if gate is None else f' and {gate.shape}'}")
    if relu:
        activation.relu_fwd(out, out)
    if gate is not None:
        activation.relu_bwd_from_output(out, gate, out)


def row_sums_epilogue(src: np.ndarray, dst: np.ndarray) -> Callable[[slice, slice], None]:
    """A :func:`matmul` epilogue for a GEMM whose output rows are the columns of ``src`` (n, o):
    ``dst[rows]`` (o,) = the column sums of ``src[:, rows]`` (``np.add.reduce``, rows added in
    order), by the block holding output column 0 (once per row block): an FC's bias gradient
    beside its weight gradient ``dw = dy.T @ x``."""
    def epilogue(rows: slice, cols: slice) -> None:
        if cols.start is None or cols.start == 0:
            np.add.reduce(src[:, rows], axis=0, out=dst[rows])
    return epilogue


def matmul_call(a: np.ndarray, b: np.ndarray, out: np.ndarray, *, axis: int | None = None,
                epilogue: Callable[[slice, slice], None] | None = None, bias: np.ndarray | None = None,
                own_blas: bool = False, relu: bool = False, gate: np.ndarray | None = None,
                row_sums: tuple[np.ndarray, np.ndarray] | None = None) -> Callable[[], None] | None:
    """:func:`matmul` on these 2-D arrays as a ready zero-argument call for a prepared launch:
    the path :func:`matmul` takes under the :class:`._prepared.LaunchState` in force now, with
    its jobs made once (the same jobs, hence the same bits). None where that path runs on the
    Python kernel threads (nothing to gain there). ``row_sums``: ``(src, dst)`` of
    :func:`row_sums_epilogue`, summed in the GEMM's C job where it runs as one (the same bits),
    else by that epilogue; not with ``epilogue`` (ValueError)."""
    if a.ndim != 2 or b.ndim != 2 or out.ndim != 2:
        return None
    if row_sums is not None:
        if epilogue is not None:
            raise ValueError("expected row_sums or an epilogue, not both")
        epilogue = row_sums_epilogue(*row_sums)
    return _matmul(a, b, out, axis, epilogue, bias, own_blas, relu, gate, prepare=True, row_sums=row_sums)


def _prepared():
    from . import _prepared  # it imports this module

    return _prepared


def _matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray, axis: int | None,
            epilogue: Callable[[slice, slice], None] | None, bias: np.ndarray | None, own_blas: bool,
            relu: bool, gate: np.ndarray | None, prepare: bool = False,
            row_sums: tuple[np.ndarray, np.ndarray] | None = None):
    """:func:`matmul` but for the ReLU epilogues on the paths other than the C jobs: True when the
    C jobs ran them (``relu``, ``gate``), False when the caller must. ``prepare``: run nothing,
    return the path's ready call (:func:`matmul_call`), or None; ``row_sums``: ``epilogue`` is
    their :func:`row_sums_epilogue`, which a whole-GEMM C job may sum itself instead."""
    user = epilogue  # a Python epilogue keeps the split on the Python threads
    if bias is not None:
        bias1 = bias.reshape(-1)

        def epilogue(rows: slice, cols: slice) -> None:
            out[..., rows, cols] += bias1[cols]
            if user is not None:
                user(rows, cols)
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
    # an output over an operand: NumPy's matmul copies the operand first; a block or job would
    # write over what another block still reads (the kernels' contracts do not ask for it)
    overlap = any(np.may_share_memory(out, v) for v in (a, b, bias, gate) if v is not None) or \
        row_sums is not None and any(np.may_share_memory(row_sums[1], v) for v in (out, a, b, row_sums[0]))
    # small GEMMs (a shape rule: 1 and 2 threads agree) keep NumPy's OpenBLAS, faster there (MLP's 200x10)
    own = own_blas and flops >= MIN_SPLIT_FLOPS and a.ndim == 2 and b.ndim == 2 and c_gemm() and not overlap
    cg = _cgemm if own else None  # one read, as in own_blas(): another Python thread may turn the worker off
    own = bool(cg and cg[3])
    if own and user is None and n >= 2 * OWN_COL_BLOCKS:
        # fixed column blocks, whatever the thread count (its bits depend on the cut): equal
        # halves, where row cuts at multiples of 24 split the MLP's 200 rows 96 / 104
        make = lambda: _split_jobs(  # noqa: E731
            a, b, out, -1, None if bias is None else bias.reshape(-1), OWN_COL_BLOCKS, True, relu=relu, gate=gate)
        if prepare:
            jobs = make()
            return None if jobs is None else _prepared().jobs_call(jobs, t >= 2)
        jobs = cached_jobs(("own-cols", relu) + array_key(a, b, out, bias, gate), make)
        if jobs is not None:
            if t >= 2:
                run_jobs(*jobs)
            else:
                for job in jobs:
                    run_here(job)
            return True
    align = 1  # cuts anywhere keep the bits
    if own:
        align = OWN_ROW_ALIGN
    elif t > 1 and flops >= MIN_SPLIT_FLOPS:
        align = _gemm_bits.numpy_cut_align()  # 0: no cut keeps NumPy's bits, the GEMM runs whole
    if align != 1:  # row blocks at multiples of align: the only other cuts that keep the bits
        axis, size = -2, m // align if align else 0
    unit = max(align, 1) * (n if axis == -2 else m) * k  # m*n*k of one unit of size, of one matrix
    if t == 1 or flops < MIN_SPLIT_FLOPS or size < 2 * t or min(m, n) == 1 or size // t * unit <= SMALL_GEMM_MNK \
            or overlap:
        if own:
            make = lambda: gemm_job(a, b, out, bias=None if bias is None else bias.reshape(-1),  # noqa: E731
                                    own=True, relu=relu, gate=gate)
            job = make() if prepare else cached_jobs(("one", relu) + array_key(a, b, out, bias, gate), make)
            if job is not None:
                if prepare:
                    if user is None:
                        return _prepared().jobs_call((job,), False)
                    gemm = _prepared().jobs_call((job,), False)

                    def one() -> None:
                        gemm()
                        user(whole, whole)
                    return one
                run_here(job)
                if user is not None:
                    user(whole, whole)
                return True
        if prepare:
            one_job = _serial_job(a, b, out, bias, relu, gate, row_sums) if user is None or row_sums else None
            if one_job is not None:
                return _prepared().jobs_call((one_job,), False)

            def serial() -> None:
                serial_matmul(a, b, out)
                if epilogue is not None:
                    epilogue(whole, whole)
                if relu or gate is not None:
                    _relu_after(out, relu, gate)
            return serial
        serial_matmul(a, b, out)
        if epilogue is not None:
            epilogue(whole, whole)
        return False

    count = gemm_blocks(flops, size, t, _prepared().pinned_contended() if prepare else None, unit=unit)
    if t == 2 and user is None and a.ndim == 2 and b.ndim == 2 and c_gemm():
        make = lambda: _split_jobs(a, b, out, axis, None if bias is None else bias.reshape(-1),  # noqa: E731
                                   count, own, align, relu=relu, gate=gate)
        if prepare:
            jobs = make()
            return None if jobs is None else _prepared().jobs_call(jobs, True, count)
        jobs = cached_jobs(("mm", axis, count, own, align, relu) + array_key(a, b, out, bias, gate), make)
        if jobs is not None:
            if count > t:
                note_dynamic_call()
                run_jobs(*jobs)
            else:
                note_split(run_jobs(*jobs))
            return True
    if prepare:
        return None
    tasks = matmul_tasks(a, b, out, axis, count, epilogue, align)
    if count > t:
        note_dynamic_call()
        run_dynamic(tasks)
        return False
    times = [0.0] * len(tasks)

    def timed(i: int) -> None:
        t0 = time.perf_counter()
        tasks[i]()
        times[i] = time.perf_counter() - t0

    run([(lambda i=i: timed(i)) for i in range(len(tasks))])
    note_split(times)
    return False


def _serial_job(a: np.ndarray, b: np.ndarray, out: np.ndarray, bias: np.ndarray | None, relu: bool,
                gate: np.ndarray | None, row_sums: tuple[np.ndarray, np.ndarray] | None = None) -> _Job | None:
    """The whole GEMM ``out = a @ b`` (+ ``bias``, the ReLU epilogues) of a prepared launch that
    does not split it, as one :func:`gemm_job` with NumPy's OpenBLAS, so that the launch is a C
    job and stays inside a replay group (a small pointwise conv of MobileNetV2 broke its groups).
    The same ``cblas_sgemm`` call ``np.matmul`` makes (the split blocks' jobs rely on it too), so
    the same bits; None, and NumPy, where NumPy would not call it so: a matrix-vector product
    (``gemv``), ``a @ a.T`` (``syrk``), an output overlapping an operand (NumPy copies the operand
    first; a job would write over what it still reads), no C worker, or a layout a job cannot take.
    ``row_sums``: the job also sums them (:func:`row_sums_epilogue`'s sums, in the same order)."""
    m, n = out.shape[-2], out.shape[-1]
    if a.ndim != 2 or b.ndim != 2 or min(m, n) < 2 or np.shares_memory(a, b) or not c_gemm():
        return None
    src, dst = row_sums if row_sums is not None else (None, None)
    reads = [v for v in (a, b, bias, gate, src) if v is not None]
    if any(np.may_share_memory(w, r) for w in (out, dst) if w is not None for r in reads) \
            or dst is not None and np.may_share_memory(dst, out):
        return None
    return gemm_job(a, b, out, bias=None if bias is None else bias.reshape(-1), relu=relu, gate=gate,
                    sum_src=src, sum_dst=dst)


def _split_jobs(a: np.ndarray, b: np.ndarray, out: np.ndarray, axis: int, bias: np.ndarray | None,
                count: int = 2, own: bool = False, align: int = 1, *, relu: bool = False,
                gate: np.ndarray | None = None) -> tuple | None:
    """``count`` :func:`gemm_job` blocks of ``out = a @ b (+ bias)`` (and the ReLU epilogues
    ``relu`` / ``gate``) along ``axis``, cut at multiples of ``align`` (None: a layout the C
    worker cannot take)."""
    jobs = []
    for lo, hi in blocks(out.shape[axis], count, align):
        s = slice(lo, hi)
        if axis == -2:
            job = gemm_job(a[s], b, out[s], bias=bias, own=own, relu=relu, gate=None if gate is None else gate[s])
        else:
            job = gemm_job(a, b[:, s], out[:, s], bias=None if bias is None else bias[s], own=own, relu=relu,
                           gate=None if gate is None else gate[:, s])
        if job is None:
            return None
        jobs.append(job)
    return tuple(jobs)


def gemm_blocks(flops: float, size: int, t: int, contended_now: bool | None = None, *, unit: float) -> int:
    """Blocks a split GEMM of ``flops`` is cut into along an axis of ``size`` (units), on ``t`` threads: ``t``,
    or ``2 t`` while :func:`contended` (``contended_now``: a prepared call's pinned state) from :data:`BLOCK_FLOPS`
    per thread, blocks 2 units wide or more and above :data:`SMALL_GEMM_MNK` (``unit``: one matrix's m*n*k a unit)."""
    busy = _contended > 0 if contended_now is None else contended_now
    per = 2 if busy and flops >= BLOCK_FLOPS * t and _gemm_bits.cuts_keep_bits() and size // (2 * t) * unit > SMALL_GEMM_MNK \
        else 1
    return max(1, min(t * per, size // 2))


def matmul_tasks(a: np.ndarray, b: np.ndarray, out: np.ndarray, axis: int, count: int,
                 epilogue: Callable[[slice, slice], None] | None = None, align: int = 1) -> list[Callable[[], None]]:
    """``np.matmul(a, b, out=out)`` as ``count`` independent tasks: row blocks (``axis=-2``) or
    column blocks (``axis=-1``) of ``out``, cut at multiples of ``align``, each followed by
    ``epilogue(rows, cols)`` of its block (see :func:`matmul`). For :func:`run` / :func:`run_dynamic`."""
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

    return [(lambda lo=lo, hi=hi: piece(lo, hi)) for lo, hi in blocks(size, count, align)]


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
