"""Thread use of the NumPy kernels (lowering/cpu/_parallel.py) and the kernels that rely on
it most: FC forward/backward strategies (dense.py), the compiled SGD update (optim.py) and the
compiled NaN/Inf check (ranges.py). Every strategy must give the same bits as the serial code."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import types

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from tr_mlir.lowering.cpu import KERNELS, _blas_libs, _cc, _gemm_bits, _parallel, _threads, dense, optim, ranges

F32 = np.float32
two_threads = pytest.mark.skipif(not _threads.controller(), reason="needs OpenBLAS + threadpoolctl for 2 threads")


def rnd(rng, shape, dtype=F32):
    return rng.standard_normal(shape).astype(dtype)


# -- run / run_dynamic ---------------------------------------------------------------------

@two_threads
def test_run_uses_a_second_thread_and_returns_after_both():
    seen, barrier = [], threading.Barrier(2, timeout=10)

    def task():
        barrier.wait()  # deadlocks (BrokenBarrierError after 10 s) unless both run at once
        seen.append(threading.get_ident())

    with threadpool_limits(2):
        for _ in range(50):
            seen.clear()
            _parallel.run([task, task])
            assert len(seen) == 2 and seen[0] != seen[1]


@two_threads
def test_run_waits_for_the_helper_when_interrupted():
    """A signal (Ctrl-C) while the calling thread waits for a kernel thread: the exception comes
    out only once the helper's task is done (it writes the caller's arrays, which C kernels
    hold as raw pointers), and the next hand-off waits for its own task."""
    class Interrupted(Exception):
        pass

    def handler(signum, frame):
        raise Interrupted()

    done = threading.Event()

    def slow():
        time.sleep(0.3)
        done.set()

    main = threading.main_thread().ident
    timer = threading.Timer(0.1, lambda: signal.pthread_kill(main, signal.SIGINT))
    old = signal.signal(signal.SIGINT, handler)
    try:
        timer.start()
        with pytest.raises(Interrupted):
            _parallel.run([lambda: None, slow])
        assert done.is_set()
        out = []
        _parallel.run([lambda: None, lambda: (time.sleep(0.05), out.append(1))])
        assert out == [1]
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, old)


INTERRUPT_STRESS = r"""
import signal, sys, threading, time
from threadpoolctl import threadpool_limits
from tr_mlir.lowering.cpu import _parallel, _threads

class Interrupted(BaseException):  # as KeyboardInterrupt: no `except Exception` takes it
    pass

armed = [False]

def handler(signum, frame):  # raises once per arming: once per run() call below, as one Ctrl-C
    if armed[0]:
        armed[0] = False
        raise Interrupted()

main = threading.main_thread().ident
running = [0]

def piece():
    if threading.get_ident() == main:
        return
    running[0] += 1
    time.sleep(2e-4)  # releases the GIL: the caller goes on (and takes its signals) meanwhile
    running[0] -= 1

runs = interrupted = early = 0
with threadpool_limits(2):
    assert _parallel.workers() == 2
    _threads.run([piece, piece])
    worker = _threads._workers[0]
    signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, 3e-5, 3e-5)  # from the kernel: lands at any point the handler can run
    end = time.monotonic() + float(sys.argv[1])
    i = 0
    while time.monotonic() < end:
        i += 1
        try:
            armed[0] = i % 2 == 1  # every other run: the others must come back normally
            _threads.run([piece, piece])
            armed[0] = False
            runs += 1
        except Interrupted:
            interrupted += 1
            early += worker._finished != worker._posted or running[0] > 0
    signal.setitimer(signal.ITIMER_REAL, 0, 0)
    armed[0] = False
_parallel.outside_kernels()  # as a graph replay does: the holds an interrupted exit left are given back
hold = _threads.hold
assert early == 0, f"{early} of {interrupted} interrupted runs returned while the helper's piece ran"
assert (_threads.inside.depth, _threads.inside.holds, hold.count, hold.forced) == (0, 0, 0, False)
assert _parallel.workers() == 2 and not _threads.lock.locked()
assert _threads.controller()[0]() == 2, "OpenBLAS left at one thread"
print("runs", runs, "interrupted", interrupted)
"""


@two_threads
def test_run_survives_signals_at_every_point_of_a_hand_off():
    """A signal every 30 microseconds from the kernel timer (``setitimer``, so it lands at
    whatever point the calling thread's handler can run next, not only where a sender thread
    got the GIL), its handler raising once per :func:`_threads.run` call (one Ctrl-C), while the
    calling thread hands pieces that release the GIL to the kernel thread; in a subprocess, so a
    hang fails the test by its timeout instead of stopping the suite. No run hangs or comes back
    (returning or raising) while the helper's piece still runs (an interrupt right after
    ``done.acquire()`` succeeded made the retry wait forever: tr-train hung on Ctrl-C,
    tests/test_faults.py in CI; one at the start of ``wait()`` returned early), and afterwards
    the thread state is whole: no hold or split depth left over, OpenBLAS back at two threads
    (an interrupt inside the hold's enter or exit left the depth up: every later kernel ran on
    one thread)."""
    try:
        out = subprocess.run([sys.executable, "-c", INTERRUPT_STRESS, "3"], capture_output=True, text=True,
                             timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("a _threads.run hand-off hung under signals")
    assert out.returncode == 0, out.stderr[-3000:]
    runs, interrupted = map(int, out.stdout.split()[1::2])
    assert interrupted > 100 and runs > 100, out.stdout


@two_threads
@pytest.mark.parametrize("which", [0, 1])
def test_run_propagates_errors_after_waiting_for_the_other_task(which):
    done = []

    def slow():
        threading.Event().wait(0.05)
        done.append(True)

    def bad():
        raise KeyError("boom")

    tasks = [bad, slow] if which == 0 else [slow, bad]
    with threadpool_limits(2):
        with pytest.raises(KeyError, match="boom"):
            _parallel.run(tasks)
        assert done == [True]  # the other task had finished when the error came out
        out = []
        _parallel.run([lambda: out.append(1), lambda: out.append(2)])  # the worker survived
        assert sorted(out) == [1, 2]


@pytest.mark.parametrize("threads", [1, 2])
def test_run_takes_more_tasks_than_workers(threads):
    out = []
    with threadpool_limits(threads):
        _parallel.run([(lambda i=i: out.append(i)) for i in range(_parallel.MAX_WORKERS + 3)])
    assert sorted(out) == list(range(_parallel.MAX_WORKERS + 3))


@two_threads
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("count", [0, 1, 3, 8])
def test_run_dynamic_runs_every_task_once(threads, count):
    hits = [0] * count
    lock = threading.Lock()

    def make(i):
        def task():
            with lock:
                hits[i] += 1
        return task

    with threadpool_limits(threads):
        _parallel.run_dynamic([make(i) for i in range(count)])
    assert hits == [1] * count


@two_threads
def test_run_dynamic_lets_the_free_thread_take_the_remaining_tasks():
    """One thread blocked on a long task: the other runs all the rest."""
    release = threading.Event()
    idents: list[int] = []

    def long():
        release.wait(10)
        idents.append(-1)

    def short():
        idents.append(threading.get_ident())
        if sum(1 for i in idents if i != -1) == 5:
            release.set()

    with threadpool_limits(2):
        _parallel.run_dynamic([long] + [short] * 5)
    shorts = [i for i in idents if i != -1]
    assert len(shorts) == 5 and len(set(shorts)) == 1


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
@two_threads
def test_run_works_in_a_forked_child():
    with threadpool_limits(2):
        _parallel.run([lambda: None, lambda: None])  # the parent's workers exist
        _parallel.matmul(np.ones((200, 300), F32), np.ones((300, 400), F32), np.zeros((200, 400), F32))
        pid = os.fork()
        if pid == 0:  # child: fresh workers must be started, not the parent's (absent) threads
            code = 1
            try:
                out = []
                a, b = np.ones((200, 300), F32), np.ones((300, 400), F32)
                c = np.zeros((200, 400), F32)

                def work():
                    _parallel.run([lambda: out.append(1), lambda: out.append(2)])
                    _parallel.matmul(a, b, c)  # the C worker when there is one

                t = threading.Thread(target=work)
                t.start()
                t.join(20)
                code = 0 if sorted(out) == [1, 2] and (c == 300).all() else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_concurrent_callers_give_openblas_its_thread_count_back():
    """Two Python threads running kernels at once (data-parallel ranks in one process) used to
    save and restore OpenBLAS's thread count per call, so the second saved the first's 1 and
    the count could stay at 1 for good; with the shared hold it comes back, and workers() reads
    the user's count while another thread is inside a kernel (and 1 inside a piece of a split,
    which never splits again)."""
    a = np.ones((64, 64), np.float32)
    seen = []

    def hammer() -> None:
        out = np.empty_like(a)
        for _ in range(300):
            _parallel.serial_matmul(a, a, out)
            _parallel.run_dynamic([lambda: seen.append(("inside", _parallel.workers()))])
            seen.append(("outside", _parallel.workers()))  # the other thread may be in a kernel

    with threadpool_limits(2):
        threads = [threading.Thread(target=hammer) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        blas = _threads.controller()
        if not blas:
            pytest.skip("no OpenBLAS under NumPy: kernels run on one thread")
        assert int(blas[0]()) == 2
        assert set(seen) == {("inside", 1), ("outside", 2)}


def test_blocks_cover_the_range():
    for size, t in ((10, 3), (7, 7), (1024, 4), (5, 2)):
        b = _parallel.blocks(size, t)
        assert len(b) == t and b[0][0] == 0 and b[-1][1] == size
        assert all(hi == lo2 for (_, hi), (lo2, _) in zip(b, b[1:]))
        assert max(hi - lo for lo, hi in b) - min(hi - lo for lo, hi in b) <= 1


# -- matmul ---------------------------------------------------------------------------------

SHAPES = [(200, 784, 1024), (1024, 200, 784), (200, 1024, 512), (200, 512, 256), (256, 200, 512), (37, 300, 91),
          (3, 5, 2)]


@two_threads
@pytest.mark.parametrize("c_worker", [True, False])
@pytest.mark.parametrize("m,k,n", SHAPES)
def test_matmul_splits_give_the_serial_bits(monkeypatch, m, k, n, c_worker):
    rng = np.random.default_rng(m + k + n)
    a, b = rnd(rng, (m, k)), rnd(rng, (k, n))
    want = np.empty((m, n), F32)
    with threadpool_limits(1):
        np.matmul(a, b, out=want)
    at = np.ascontiguousarray(a.T).T  # a transposed operand (the FC weight gradient's dy.T)
    bias = rnd(rng, (n,))
    if not c_worker:
        monkeypatch.setattr(_parallel, "_cgemm", False)
    monkeypatch.setattr(_parallel, "_contended", 0)
    monkeypatch.setattr(_parallel, "IMBALANCE", 1e9)
    with threadpool_limits(2):
        for lhs in (a, at):
            for axis in (None, -2, -1):
                got = np.full((m, n), np.nan, F32)
                _parallel.matmul(lhs, b, got, axis=axis)
                assert np.array_equal(got, want), (axis, lhs is at)
                _parallel.matmul(lhs, b, got, axis=axis, bias=bias)
                assert np.array_equal(got, want + bias), (axis, lhs is at)


@two_threads
def test_matmul_batched_and_epilogue_blocks():
    rng = np.random.default_rng(3)
    a, b = rnd(rng, (3, 300, 200)), rnd(rng, (3, 200, 400))
    with threadpool_limits(1):  # the serial bits (OpenBLAS's own threads cut the GEMM its way)
        want = np.matmul(a, b)
    for axis in (-2, -1):
        seen = np.zeros((300, 400), np.int32)
        got = np.empty_like(want)

        def epi(rows, cols, got=got, seen=seen):
            seen[rows, cols] += 1
            got[..., rows, cols] += 1.0

        with threadpool_limits(2):
            _parallel.matmul(a, b, got, axis=axis, epilogue=epi)
        assert (seen == 1).all()  # blocks cover the output exactly once
        assert np.array_equal(got, want + F32(1.0))
    with pytest.raises(ValueError, match="split axis"):
        _parallel.matmul(a, b, got, axis=0)


def test_gemm_blocks_rule(monkeypatch):
    monkeypatch.setattr(_parallel, "_contended", 0)
    big = 1e9  # m*n*k of one unit of the cut axis
    assert _parallel.gemm_blocks(1e6, 1024, 2, unit=big) == 2
    assert _parallel.gemm_blocks(1e12, 1024, 2, unit=big) == 2  # one block per thread on balanced threads
    monkeypatch.setattr(_parallel, "_contended", 5)
    assert _parallel.gemm_blocks(1e6, 1024, 2, unit=big) == 2
    assert _parallel.gemm_blocks(1e12, 1024, 2, unit=big) == (4 if _gemm_bits.cuts_keep_bits() else 2)
    monkeypatch.setattr(_gemm_bits, "_invariant", [True])
    assert _parallel.gemm_blocks(1e12, 5, 2, unit=big) == 2  # blocks at least 2 wide
    assert _parallel.gemm_blocks(1e12, 3, 2, unit=big) == 1
    assert _parallel.gemm_blocks(1e12, 1024, 2, unit=4000) == 4  # quarters of 256 units: 1.02e6 m*n*k
    assert _parallel.gemm_blocks(1e12, 1024, 2, unit=3900) == 2  # 0.998e6: OpenBLAS's small kernel


def test_contention_is_measured_on_static_splits(monkeypatch):
    monkeypatch.setattr(_parallel, "_contended", 0)
    monkeypatch.setattr(_parallel, "_imbalanced", 0)
    _parallel.note_split([1e-3, 1.1e-3])
    assert not _parallel.contended()
    _parallel.note_split([1e-5, 1e-4])  # too short to count
    assert not _parallel.contended()
    _parallel.note_split([1e-3, 2e-3])  # one unbalanced split: a transient
    assert not _parallel.contended()
    _parallel.note_split([1e-3, 1.1e-3])  # balanced again: the count restarts
    _parallel.note_split([1e-3, 2e-3])
    assert not _parallel.contended()
    _parallel.note_split([1e-5, 1e-4])  # too short: neither breaks nor extends the run
    _parallel.note_split([2e-3, 1e-3])
    assert _parallel.contended()
    for _ in range(_parallel.CONTENDED_CALLS):
        _parallel.note_dynamic_call()
    assert not _parallel.contended()


@two_threads
@pytest.mark.parametrize("contended", [False, True])
def test_matmul_dynamic_blocks_give_the_serial_bits(monkeypatch, contended):
    rng = np.random.default_rng(11)
    a, b = rnd(rng, (200, 784)), rnd(rng, (784, 1024))
    want = np.empty((200, 1024), F32)
    with threadpool_limits(1):
        np.matmul(a, b, out=want)
    monkeypatch.setattr(_parallel, "_contended", 3 if contended else 0)
    monkeypatch.setattr(_parallel, "IMBALANCE", 1e9)  # no new measurement changes the mode here
    got = np.empty_like(want)
    with threadpool_limits(2):
        _parallel.matmul(a, b, got)
    assert np.array_equal(got, want)
    if _gemm_bits.cuts_keep_bits():
        assert _parallel._contended == (2 if contended else 0)  # a dynamic call counted


# -- FC kernels -----------------------------------------------------------------------------

def _fc_case(rng, n, f, o):
    return (rnd(rng, (n, 1, 1, f)), rnd(rng, (o, 1, 1, f)), rnd(rng, (1, 1, 1, o)), rnd(rng, (n, 1, 1, o)))


def _fc_step(x, w, b, dy, threads, alias, keep_ws=True):
    """fc_fwd then fc_bwd through the registry; returns y, dw, db, dx."""
    x = x.copy()
    y = np.zeros((x.shape[0], 1, 1, w.shape[0]), F32)
    dw, db = np.zeros_like(w), np.zeros_like(b)
    dx = x if alias else np.zeros_like(x)
    spec = KERNELS["fc_bwd"]
    arrays = dict(dy=dy, w=w, x=x, dw=dw, db=db, dx=dx)
    ws = spec.allocate_workspaces(arrays) if keep_ws else {}
    with threadpool_limits(threads):
        KERNELS["fc_fwd"].bind(dict(x=x, w=w, b=b, y=y), {})()
        spec.bind({**arrays, **ws}, {})()
    return y, dw, db, dx


@two_threads
@pytest.mark.parametrize("c_worker", [True, False])
@pytest.mark.parametrize("contended", [False, True])
@pytest.mark.parametrize("n,f,o", [(200, 1024, 512), (200, 512, 256), (64, 300, 200), (200, 784, 1024), (4, 6, 5)])
def test_fc_strategies_give_the_serial_bits(monkeypatch, n, f, o, contended, c_worker):
    """The one-section backward (dw then dx per column block, dx separate or x's own buffer),
    with and without the planned workspaces, the bias and db epilogues: all equal the 1-thread
    result."""
    rng = np.random.default_rng(n * f + o)
    x, w, b, dy = _fc_case(rng, n, f, o)
    monkeypatch.setattr(_parallel, "IMBALANCE", 1e9)
    if not c_worker:  # NumPy's OpenBLAS on Python threads (and no own OpenBLAS instance)
        monkeypatch.setattr(_parallel, "_cgemm", False)
    elif not _parallel.c_gemm():
        pytest.skip("no C worker here (no compiler or not NumPy's OpenBLAS)")
    want = _fc_step(x, w, b, dy, 1, alias=False)
    x2, w2, dy2 = x.reshape(n, f), w.reshape(o, f), dy.reshape(n, o)
    ref = (x2 @ w2.T + b.reshape(o), dy2.T @ x2, dy2.sum(0), dy2 @ w2)
    for got, r in zip(want, ref):
        assert np.abs(got.reshape(r.shape) - r).max() <= 1e-5 * max(1.0, np.abs(r).max())
    for alias in (False, True):
        for keep_ws in (True, False):
            monkeypatch.setattr(_parallel, "_contended", 100 if contended else 0)  # dynamic blocks or not
            got = _fc_step(x, w, b, dy, 2, alias=alias, keep_ws=keep_ws)
            for g, wnt in zip(got, want):
                assert np.array_equal(g, wnt), (alias, keep_ws)


def test_fc_workspace_rule():
    spec = KERNELS["fc_bwd"]
    f32 = np.dtype(F32)
    big = {"dy": ((200, 1, 1, 512), f32), "w": ((512, 1, 1, 1024), f32), "x": ((200, 1, 1, 1024), f32),
           "dw": ((512, 1, 1, 1024), f32), "db": ((1, 1, 1, 512), f32)}
    assert spec.workspace_shapes({**big, "dx": ((200, 1, 1, 1024), f32)}) == {}  # fp32: no buffers
    assert spec.workspace_shapes(big) == {}  # no dx (first layer): no buffer
    tiny = {"dy": ((2, 1, 1, 3), f32), "w": ((3, 1, 1, 4), f32), "x": ((2, 1, 1, 4), f32),
            "dw": ((3, 1, 1, 4), f32), "dx": ((2, 1, 1, 4), f32)}
    assert spec.workspace_shapes(tiny) == {}
    assert KERNELS["fc_fwd"].workspace_shapes({"x": big["x"], "w": big["w"], "y": ((200, 1, 1, 512), f32)}) == {}
    assert dense.concurrent_backward(200, 1024, 512) and not dense.concurrent_backward(2, 4, 3)


@two_threads
def test_fc_backward_amp_keeps_its_sequential_path():
    """fp16 operands share the cast workspaces: never the concurrent path; same bits as 1 thread."""
    rng = np.random.default_rng(5)
    n, f, o = 64, 300, 200
    x, w, dy = (rnd(rng, s, np.float16) for s in ((n, 1, 1, f), (o, 1, 1, f), (n, 1, 1, o)))
    outs = []
    for threads in (1, 2):
        xx = x.copy()
        dw, db = np.zeros((o, 1, 1, f), F32), np.zeros((1, 1, 1, o), F32)
        spec = KERNELS["fc_bwd"]
        arrays = dict(dy=dy, w=w, x=xx, dw=dw, db=db, dx=xx)
        ws = spec.allocate_workspaces(arrays)
        with threadpool_limits(threads):
            spec.bind({**arrays, **ws}, {})()
        outs.append((dw, db, xx))
    for a, b in zip(*outs):
        assert np.array_equal(a, b)


# -- compiled SGD and NaN check -------------------------------------------------------------

needs_cc = pytest.mark.skipif(not _cc.available(), reason="no C compiler")

SGD_CASES = [(0.9, 0.0, False, 1.0, True), (0.9, 1e-4, False, 1.0, True), (0.9, 1e-4, True, 1 / 1024, True),
             (0.0, 5e-4, False, 0.5, False), (0.8, 0.0, True, 1.0, True)]


@needs_cc
@pytest.mark.parametrize("c_worker", [True, False])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("mu,wd,nesterov,inv,mom", SGD_CASES)
def test_compiled_sgd_gives_numpy_bits(monkeypatch, threads, mu, wd, nesterov, inv, mom, c_worker):
    if not c_worker:
        monkeypatch.setattr(_parallel, "_cgemm", False)
    rng = np.random.default_rng(7)
    n = 2 * optim.SPLIT_CHUNK + 12345  # split across the threads
    w0, g, m0 = rnd(rng, n), rnd(rng, n), rnd(rng, n)
    m0[:100] = 0.0  # a fresh momentum buffer
    g[5] = np.inf
    res = []
    for compiled in (True, False):
        monkeypatch.setattr(optim, "_sgd_fn", [] if compiled else [None])
        w, m = w0.copy(), m0.copy()
        with threadpool_limits(threads), np.errstate(all="ignore"):  # the Inf: NumPy warns, C does not
            for _ in range(3):
                optim.sgd_update(w, g, m if mom else None, 0.01, mu, wd, nesterov, inv)
        res.append((w, m))
    assert np.array_equal(res[0][0], res[1][0], equal_nan=True)
    assert np.array_equal(res[0][1], res[1][1], equal_nan=True)


@needs_cc
def test_compiled_sgd_kernel_through_the_registry_and_nan_skip():
    rng = np.random.default_rng(8)
    n = 1000
    w, g, m = rnd(rng, n), rnd(rng, n), np.zeros(n, F32)
    w_ref, m_ref = w.copy(), m.copy()
    for _ in range(2):
        m_ref = m_ref * F32(0.9) + g
        w_ref = w_ref - m_ref * F32(0.1)
        KERNELS["range_update_weight_momentum"].bind(
            dict(w=w, g=g, m=m, lr=np.array([0.1], F32), momentum=np.array([0.9], F32),
                 weight_decay=np.array([0.0], F32)), {})()
    assert np.array_equal(w, w_ref) and np.array_equal(m, m_ref)
    before = w.copy()
    KERNELS["range_update_weight_momentum"].bind(
        dict(w=w, g=g, m=m, lr=np.array([0.1], F32), momentum=np.array([0.9], F32),
             weight_decay=np.array([0.0], F32), has_nan=np.array([1], F32)), {})()
    assert np.array_equal(w, before)
    with pytest.raises(ValueError, match="spans"):
        optim.sgd_update(w, g[:10], m, 0.1, 0.9, 0.0, False, 1.0)


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("c_worker", [True, False])
def test_nan_check_finds_every_nonfinite(monkeypatch, compiled, dtype, threads, c_worker):
    if compiled and not _cc.available():
        pytest.skip("no C compiler")
    if not c_worker:
        monkeypatch.setattr(_parallel, "_cgemm", False)
    monkeypatch.setattr(ranges, "_nonfinite_fns", [] if compiled else [None])
    rng = np.random.default_rng(9)
    n = 2 * _parallel.MIN_SPLIT_ELEMENTS + 3
    base = rnd(rng, n, dtype)
    big = np.finfo(dtype).max
    flag = np.zeros(1, F32)
    with threadpool_limits(threads):
        ranges.range_check_nan([base, base[:7]], flag)
        assert flag[0] == 0
        for pos in (0, n // 2 - 1, n // 2, n - 1):
            for val, bad in ((np.nan, 1), (np.inf, 1), (-np.inf, 1), (big, 0), (-big, 0)):
                x = base.copy()
                x[pos] = val
                ranges.range_check_nan([base[:7], x], flag)
                assert flag[0] == bad, (pos, val)


@two_threads
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("per_worker", [1, 2, 3])
@pytest.mark.parametrize("n", [10, _parallel.MIN_SPLIT_ELEMENTS, 5 * _parallel.MIN_SPLIT_ELEMENTS + 7])
def test_split_covers_every_element_once(threads, per_worker, n):
    hits = np.zeros(n, np.int32)
    shares = set()

    def fn(lo, hi, share):
        hits[lo:hi] += 1
        shares.add(share)

    with threadpool_limits(threads):
        _parallel.split(n, fn, per_worker=per_worker)
    assert (hits == 1).all()
    t = min(threads, _parallel.MAX_WORKERS) if n >= _parallel.MIN_SPLIT_ELEMENTS else 1
    assert shares == {t}  # share = threads, whatever the block count


@pytest.mark.parametrize("c_worker", [True, False])
@pytest.mark.parametrize("threads", [1, 2])
def test_range_clear_zeroes_exactly_its_ranges(monkeypatch, threads, c_worker):
    if not c_worker:
        monkeypatch.setattr(_parallel, "_cgemm", False)
    n = 3 * _parallel.MIN_SPLIT_ELEMENTS + 5
    base = np.full(n + 20, -1.5, F32)
    ints = np.full(11, 7, np.int32)
    halves = np.full(9, np.float16(2.0))
    strided = np.full((4, 6), 3.0, F32)[:, ::2]
    with threadpool_limits(threads):
        ranges.range_clear([base[10:10 + n], ints, halves, strided])
    assert (base[10:10 + n] == 0).all() and not np.signbit(base[10:10 + n]).any()
    assert (base[:10] == -1.5).all() and (base[10 + n:] == -1.5).all()
    assert (ints == 0).all() and (halves == 0).all() and (strided == 0).all()


@two_threads
def test_c_gemm_jobs_refuse_layouts_blas_cannot_take():
    if not _parallel.c_gemm():
        pytest.skip("no C worker here")
    rng = np.random.default_rng(12)
    a, b = rnd(rng, (8, 6)), rnd(rng, (6, 4))
    out = np.empty((8, 4), F32)
    assert _parallel.gemm_job(a, b, out) is not None
    assert _parallel.gemm_job(a[:, ::2], b[::2], out) is None  # non-unit strides both ways
    assert _parallel.gemm_job(a, b, np.empty((4, 8), F32).T) is None  # transposed output
    assert _parallel.gemm_job(a.astype(np.float64), b, out) is None
    assert _parallel.gemm_job(a, b, out, bias=np.zeros(4, np.float16)) is None
    job0 = _parallel.gemm_job(a[:4], b, out[:4], sum_src=a[:, :3], sum_dst=np.empty(3, F32))
    assert job0 is not None
    dst = np.empty(6, F32)
    job1 = _parallel.gemm_job(a[4:], b, out[4:], sum_src=a, sum_dst=dst)
    with threadpool_limits(2):
        _parallel.run_jobs(job0, job1)
    assert np.array_equal(out, a @ b) and np.array_equal(dst, np.add.reduce(a, axis=0))


def test_c_worker_can_be_switched_off():
    import subprocess
    import sys

    code = "from tr_mlir.lowering.cpu import _parallel as P; print(P.c_gemm())"
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, _parallel.ENV_C_GEMM: "0"},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr


@needs_cc
@two_threads
@pytest.mark.parametrize("count", [1, 2, 5])
def test_run_jobs_runs_a_list_of_call_jobs(count):
    if not _parallel.c_gemm():
        pytest.skip("no C worker here")
    fns = ranges._nonfinite_c()
    zero = fns["jobs"]["tr_zero_job"]
    a = np.ones(1000, F32)
    parts = _parallel.blocks(a.size, count)
    jobs = [_parallel.call_job(zero, (a.ctypes.data + 4 * lo, 4 * (hi - lo))) for lo, hi in parts[:-1]]
    with threadpool_limits(2):
        secs = _parallel.run_jobs(*jobs) if jobs else ()
    lo_last = parts[-1][0]
    assert len(secs) == len(jobs) and (a[:lo_last] == 0).all() and (a[lo_last:] == 1).all()
    with pytest.raises(ValueError, match="at most 8"):
        _parallel.call_job(zero, range(9))


ARGS_C = r"""
#define _GNU_SOURCE
#include <unistd.h>
#include <sys/syscall.h>
#include <time.h>
/* Twelve arguments of the kinds the kernels take (pointers, long, int): writes each one back and
   the id of the thread that ran it, so a test sees every argument arrive where the ABI puts it.
   p2 non-null: a counter both calls increment, each then waiting (at most a second) for the
   other, so a quick first piece cannot let one thread take both. */
void tr_args12(long *out, const float *p1, int *p2, long a3, int a4, long a5, long a6, long a7, long a8,
               long a9, long a10, long a11) {
    long v[12] = {(long)out, (long)p1, (long)p2, a3, a4, a5, a6, a7, a8, a9, a10, a11};
    for (int i = 0; i < 12; i++) out[i] = v[i];
    out[12] = (long)syscall(SYS_gettid);
    if (p2) {
        struct timespec t0, t;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        __atomic_add_fetch(p2, 1, __ATOMIC_SEQ_CST);
        do clock_gettime(CLOCK_MONOTONIC, &t);
        while (__atomic_load_n(p2, __ATOMIC_SEQ_CST) < 2 && t.tv_sec - t0.tv_sec < 2);
    }
}
void tr_float_arg(float *out, float v, long lo, long hi) { for (long i = lo; i < hi; i++) out[i] = v; }
"""


@needs_cc
@two_threads
@pytest.mark.parametrize("c_worker,contended", [(True, False), (True, True), (False, False)])
def test_run_c_passes_every_argument_and_uses_the_second_thread(monkeypatch, c_worker, contended):
    """run_c's pieces get every argument and run on two threads: on the C worker, or on the Python
    kernel threads without it or while a split measured the worker slowed (contended)."""
    import ctypes

    if c_worker and not _parallel.c_gemm():
        pytest.skip("no C worker here")
    if not c_worker:
        monkeypatch.setattr(_parallel, "_cgemm", False)
    monkeypatch.setattr(_parallel, "_contended", 10 ** 6 if contended else 0)
    fn = _cc.function(ARGS_C, "tr_args12", [ctypes.c_void_p] * 3 + [ctypes.c_long, ctypes.c_int] + [ctypes.c_long] * 7)
    out = np.zeros((2, 13), np.int64)
    counter = np.zeros(1, np.int32)
    pieces = [(out[w].ctypes.data, 1 << 40, counter.ctypes.data, -3 - w, 7 * w - 5, *range(100 * w, 100 * w + 7))
              for w in range(2)]
    _parallel._jobs_cache.clear()
    with threadpool_limits(2):
        for _ in range(2):  # the second call replays the kept job pair
            counter[0] = 0
            t0 = time.perf_counter()
            _parallel.run_c(fn, pieces)
            assert time.perf_counter() - t0 < 1.0 and counter[0] == 2  # neither piece waited for its timeout
    for w in range(2):
        assert out[w, :12].tolist() == list(pieces[w])
    assert out[0, 12] != out[1, 12]  # two threads ran the two pieces
    kept = [k for k in _parallel._jobs_cache if k[0] == "kernel"]
    assert len(kept) == (1 if c_worker and not contended else 0)
    with pytest.raises(ValueError, match="1 to 12"):
        _parallel.kernel_job(fn, range(13))


@needs_cc
@two_threads
def test_run_c_keeps_no_pair_for_temporaries_and_refuses_float_parameters(monkeypatch):
    import ctypes

    if not _parallel.c_gemm():
        pytest.skip("no C worker here")
    monkeypatch.setattr(_parallel, "_contended", 0)
    fn = _cc.function(ARGS_C, "tr_args12", [ctypes.c_void_p] * 3 + [ctypes.c_long, ctypes.c_int] + [ctypes.c_long] * 7)
    out = np.zeros((2, 13), np.int64)
    pieces = [(out[w].ctypes.data, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8 * w, 8 * w + 8) for w in range(2)]
    _parallel._jobs_cache.clear()
    with threadpool_limits(2):
        _parallel.run_c(fn, pieces, keep=False)
    assert out[:, :12].tolist() == [list(p) for p in pieces] and not _parallel._jobs_cache
    assert _parallel._callable_as_job(fn) is not None
    # a float parameter cannot travel in a job's integer slots: the Python threads call it
    ffn = _cc.function(ARGS_C, "tr_float_arg", [ctypes.c_void_p, ctypes.c_float, ctypes.c_long, ctypes.c_long])
    assert _parallel._callable_as_job(ffn) is None
    y = np.zeros(8, F32)
    with threadpool_limits(2):
        _parallel.run_c(ffn, [(y.ctypes.data, 2.5, 0, 4), (y.ctypes.data, 2.5, 4, 8)])
    assert (y == 2.5).all() and not _parallel._jobs_cache


@needs_cc
@two_threads
def test_run_c_balance_check_per_unit_of_work(monkeypatch):
    """run_c hands :func:`note_split` each piece's time per unit of work, scaled to the largest
    piece: by default the length of its range (its last two arguments), else ``work`` (the
    Winograd kernels, whose last arguments are the GEMM's address and its integer width)."""
    import ctypes

    if not _parallel.c_gemm():
        pytest.skip("no C worker here")
    monkeypatch.setattr(_parallel, "_contended", 0)
    real = _parallel._run_array

    def timed(arr):
        real(arr)
        arr[0].seconds, arr[1].seconds = 1.0, 3.0

    seen = []
    monkeypatch.setattr(_parallel, "_run_array", timed)
    monkeypatch.setattr(_parallel, "note_split", seen.append)
    fn = _cc.function(ARGS_C, "tr_args12", [ctypes.c_void_p] * 3 + [ctypes.c_long, ctypes.c_int] + [ctypes.c_long] * 7)
    out = np.zeros((2, 13), np.int64)
    pieces = [(out[w].ctypes.data, 0, 0, 1, 2, 3, 4, 5, 6, 7, 10 * w, 10 * w + 10 + 20 * w) for w in range(2)]
    with threadpool_limits(2):
        _parallel.run_c(fn, pieces, keep=False)  # ranges of 10 and 30 elements
        _parallel.run_c(fn, pieces, keep=False, work=[6, 2])
    assert seen == [pytest.approx([3.0, 3.0]), pytest.approx([1.0, 9.0])]


@two_threads
def test_winograd_halves_run_on_the_c_worker(monkeypatch):
    """A split Winograd forward and weight gradient hand their second half to the C worker
    (run_c with two pieces: the thread the split batch-norm and element-wise kernels use for
    theirs), with the same bits as on one thread."""
    from tr_mlir.lowering.cpu import conv, winograd

    if not (_cc.available() and _parallel.c_gemm() and _parallel.sgemm_address()):
        pytest.skip("no C compiler, C worker or cblas_sgemm here")
    monkeypatch.setattr(_parallel, "_contended", 0)
    pieces = []
    real = _parallel.run_c
    monkeypatch.setattr(_parallel, "run_c", lambda fn, ps, **kw: (pieces.append(len(ps)), real(fn, ps, **kw)))
    rng = np.random.default_rng(3)
    x, w = rnd(rng, (8, 12, 12, 16)), rnd(rng, (16, 3, 3, 16))
    dy = rnd(rng, (8, 12, 12, 16))
    g = conv.conv_geom(x.shape, w.shape, 3, 1, 1, 1)
    got = {}
    for th in (1, 2):
        ws = {k: np.zeros(1 << 20, F32) for k in ("col", "wbuf", "ybuf", "xbuf", "tmp")}
        y, dw = np.zeros_like(x), np.zeros_like(w)
        with threadpool_limits(th):
            winograd.forward(x, w, y, g, ws, "winograd_4x4_3x3")
            winograd.wgrad(dy, x, dw, g, ws, "winograd_4x4_3x3")
        got[th] = (y.tobytes(), dw.tobytes())
    assert got[1] == got[2]
    assert 2 in pieces


@needs_cc
def test_run_c_with_one_piece_calls_on_this_thread():
    import ctypes

    fn = _cc.function(ARGS_C, "tr_args12", [ctypes.c_void_p] * 3 + [ctypes.c_long, ctypes.c_int] + [ctypes.c_long] * 7)
    out = np.zeros(13, np.int64)
    _parallel.run_c(fn, [(out.ctypes.data, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9)])
    assert out[3:12].tolist() == list(range(1, 10)) and out[12] == threading.get_native_id()


@two_threads
def test_fc_backward_dx_overlapping_x_another_way_gets_the_serial_result():
    """dx a shifted window of x's buffer: the one-section path must not run (it would overwrite
    rows still to be read); the result equals the 1-thread kernel's."""
    rng = np.random.default_rng(13)
    n, f, o = 64, 300, 200
    w, dy = rnd(rng, (o, 1, 1, f)), rnd(rng, (n, 1, 1, o))
    base = rnd(rng, (n + 1) * f)
    outs = []
    for threads in (1, 2):
        buf = base.copy()
        x, dx = buf[:n * f].reshape(n, 1, 1, f), buf[f:].reshape(n, 1, 1, f)
        dw, db = np.zeros((o, 1, 1, f), F32), np.zeros((1, 1, 1, o), F32)
        spec = KERNELS["fc_bwd"]
        arrays = dict(dy=dy, w=w, x=x, dw=dw, db=db, dx=dx)
        with threadpool_limits(threads):
            spec.bind({**arrays, **spec.allocate_workspaces(arrays)}, {})()
        outs.append((dw, db, buf))
    for a, b in zip(*outs):
        assert np.array_equal(a, b)


@two_threads
@pytest.mark.parametrize("m,k,n", [(200, 784, 1024), (200, 512, 256), (37, 300, 91), (3, 5, 2)])
def test_own_blas_gemms_agree_across_threads_and_with_numpy(monkeypatch, m, k, n):
    """``own_blas=True``: the same bits on 1 and 2 threads, split either way; NumPy's result to
    float rounding (another OpenBLAS kernel may sum in another order)."""
    if not _parallel.c_gemm():
        pytest.skip("no C worker here")
    monkeypatch.setattr(_parallel, "_contended", 0)
    monkeypatch.setattr(_parallel, "IMBALANCE", 1e9)
    rng = np.random.default_rng(m * n)
    a, b, bias = rnd(rng, (m, k)), rnd(rng, (k, n)), rnd(rng, (n,))
    outs = []
    for threads in (1, 2):
        for axis in (-2, -1):
            got = np.full((m, n), np.nan, F32)
            with threadpool_limits(threads):
                _parallel.matmul(a, b, got, axis=axis, bias=bias, own_blas=True)
            outs.append(got)
    for got in outs[1:]:
        assert np.array_equal(got, outs[0])
    want = a @ b + bias
    assert np.abs(outs[0] - want).max() <= 1e-5 * np.abs(want).max()


def test_own_blas_rule(monkeypatch):
    monkeypatch.setenv(_blas_libs.ENV_OWN_BLAS, "0")
    assert _blas_libs.own_blas_core() is None
    monkeypatch.setenv(_blas_libs.ENV_OWN_BLAS, "Zen")
    assert _blas_libs.own_blas_core() == "Zen"
    monkeypatch.delenv(_blas_libs.ENV_OWN_BLAS)
    core = _blas_libs.own_blas_core()
    assert core in (None, "Haswell")
    vendor, family = _blas_libs._cpu_vendor_family()
    if core == "Haswell":
        assert (vendor, family) == ("AuthenticAMD", _blas_libs.ZEN4_FAMILY)
    if _parallel.own_blas():  # the instance is not one threadpoolctl finds (and re-threads)
        from threadpoolctl import threadpool_info

        assert not any("tr-mlir-blas" in d["filepath"] for d in threadpool_info())


@pytest.mark.parametrize("vendor, family, arch, want", [
    ("AuthenticAMD", 0x19, "SkylakeX", "Haswell"),  # Zen 4: AVX-512 in 256-bit halves
    ("AuthenticAMD", 0x1A, "SkylakeX", None),  # Zen 5: full 512-bit units, NumPy's kernels faster
    ("AuthenticAMD", 0x19, "Haswell", None),  # NumPy's OpenBLAS already on AVX2 kernels
    ("AuthenticAMD", None, "SkylakeX", None),  # /proc/cpuinfo unreadable
    ("GenuineIntel", 6, "SkylakeX", None),
])
def test_own_blas_rule_by_cpu(monkeypatch, vendor, family, arch, want):
    """The private Haswell instance only on Zen 4 (cpu family 0x19) with an AVX-512 NumPy OpenBLAS."""
    monkeypatch.delenv(_blas_libs.ENV_OWN_BLAS, raising=False)
    monkeypatch.setattr(_blas_libs, "_cpu_vendor_family", lambda: (vendor, family))
    monkeypatch.setattr(_blas_libs, "numpy_openblas", lambda: types.SimpleNamespace(architecture=arch))
    assert _blas_libs.own_blas_core() == want


def test_cpu_vendor_family_reads_proc_cpuinfo():
    import platform

    vendor, family = _blas_libs._cpu_vendor_family()
    if not os.path.exists("/proc/cpuinfo"):
        assert (vendor, family) == ("", None)
    elif platform.machine() in ("x86_64", "AMD64", "i686"):  # x86 Linux lists both for every CPU
        assert vendor in ("AuthenticAMD", "GenuineIntel", "HygonGenuine") and isinstance(family, int) and family > 0


def test_cpu_vendor_family_of_a_cpuinfo_text(monkeypatch, tmp_path):
    """The first CPU's ``vendor_id`` and ``cpu family``; an unreadable file gives ("", None)."""
    import builtins

    text = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 2\n\nprocessor\t: 1\n"
    real_open = builtins.open

    def fake_open(path, *a, **kw):
        if path == "/proc/cpuinfo":
            f = tmp_path / "cpuinfo"
            f.write_text(text)
            return real_open(f, *a, **kw)
        return real_open(path, *a, **kw)

    monkeypatch.setattr(builtins, "open", fake_open)
    assert _blas_libs._cpu_vendor_family() == ("AuthenticAMD", 26)
    text = "vendor_id : GenuineIntel\ncpu family : six\n"
    assert _blas_libs._cpu_vendor_family() == ("", None)


def test_matrix_vector_products_keep_their_bits_on_two_threads():
    """m or n = 1 (NumPy's gemv) is never split: a split's cblas_sgemm blocks would sum otherwise."""
    rng = np.random.default_rng(5)
    for a_shape, b_shape in (((2048, 2048), (2048, 1)), ((1, 512, 4096), (1, 4096, 1)), ((1, 8192), (8192, 2048))):
        a = rng.standard_normal(a_shape).astype(np.float32)
        b = rng.standard_normal(b_shape).astype(np.float32)
        outs = []
        for threads in (1, 2):
            out = np.empty(np.matmul(a, b).shape, np.float32)
            with threadpool_limits(limits=threads):
                _parallel.matmul(a, b, out=out)
            outs.append(out)
        assert outs[0].tobytes() == outs[1].tobytes() == _serial(a, b).tobytes()


def _serial(a, b):
    out = np.empty(np.matmul(a, b).shape, np.float32)
    _parallel.serial_matmul(a, b, out)
    return out


def test_own_blas_without_a_writable_cache(monkeypatch, tmp_path):
    """The own OpenBLAS copy does not depend on a writable cache (else the FC layers' bits would
    change with the cache directory's permissions): it goes to the process's private directory."""
    if _blas_libs.own_blas_core() is None or not _parallel.c_gemm():
        pytest.skip("no own OpenBLAS instance on this machine")
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv(_cc.ENV_CACHE, str(blocker / "sub"))
    own = _blas_libs.load_own_blas()
    assert own and own[2].lower() == _blas_libs.own_blas_core().lower()
    assert not (blocker / "sub").exists()


def test_cut_probes():
    """Where NumPy's OpenBLAS here keeps its bits (the probes: any cut, row cuts at multiples of
    OWN_ROW_ALIGN, or none); an own instance in use passed its probe for row cuts at multiples
    of OWN_ROW_ALIGN."""
    assert isinstance(_gemm_bits.cuts_keep_bits(), bool)
    align = _gemm_bits.numpy_cut_align()
    assert align in (0, 1, _parallel.OWN_ROW_ALIGN) and (align == 1) == _gemm_bits.cuts_keep_bits()
    if _parallel.own_blas():
        assert _parallel._own_cuts_keep_bits()


@two_threads
@pytest.mark.parametrize("c_worker", [True, False])
@pytest.mark.parametrize("align", [0, _parallel.OWN_ROW_ALIGN])
def test_gemm_cuts_follow_numpy_cut_align(monkeypatch, align, c_worker):
    """Where NumPy's OpenBLAS keeps its bits only under row cuts at multiples of OWN_ROW_ALIGN
    (its Haswell kernels), split GEMMs and the FC kernels cut nothing else (no column blocks,
    no one-section backward); where it keeps them under no cut, nothing splits."""
    if c_worker and not _parallel.c_gemm():
        pytest.skip("no C worker here")
    if c_worker and _parallel._cgemm[3]:  # NumPy's OpenBLAS only (the own instance has its own rule)
        monkeypatch.setattr(_parallel, "_cgemm", _parallel._cgemm[:3] + (False,))
    if not c_worker:
        monkeypatch.setattr(_parallel, "_cgemm", False)
    monkeypatch.setattr(_gemm_bits, "_numpy_align", [align])
    monkeypatch.setattr(_parallel, "_jobs_cache", {})
    monkeypatch.setattr(_parallel, "_contended", 100)  # dynamic blocks too, where they would apply
    monkeypatch.setattr(_parallel, "IMBALANCE", 1e9)
    cuts, real_blocks = [], _parallel.blocks

    def spy(size, t, step=1):
        cuts.append((size, t, step))
        return real_blocks(size, t, step)

    monkeypatch.setattr(_parallel, "blocks", spy)
    rng = np.random.default_rng(14)
    with threadpool_limits(2):
        for m, k, n in ((200, 512, 256), (256, 200, 512), (3 * 24, 100, 999)):
            a, b = rnd(rng, (m, k)), rnd(rng, (k, n))
            for axis in (None, -2, -1):
                _parallel.matmul(a, b, np.empty((m, n), F32), axis=axis, bias=rnd(rng, (n,)))
        _fc_step(*_fc_case(rng, 200, 512, 256), 2, alias=True)
    if align == 0:
        assert cuts == []
    else:
        assert cuts and all(step == align for _, _, step in cuts), cuts


def test_numpy_openblas_haswell_kernels_split_with_the_serial_bits():
    """NumPy's OpenBLAS made to run its Haswell kernels (OPENBLAS_CORETYPE=Haswell, as set on
    some machines; the core type of Zen 1-3 CPUs too), whose bits change under column cuts and
    row cuts off multiples of 24: the probe finds that, and split GEMMs and the FC kernels on
    two threads still give the one-thread bits (they did not: every split cut in halves)."""
    import subprocess
    import sys

    code = """
import numpy as np
from threadpoolctl import threadpool_limits
from tr_mlir.lowering.cpu import KERNELS, _blas_libs, _gemm_bits, _parallel as P
lib = _blas_libs.numpy_openblas()
if lib is None or str(lib.architecture).lower() != "haswell":
    print("SKIP", None if lib is None else lib.architecture); raise SystemExit
assert _gemm_bits.numpy_cut_align() == P.OWN_ROW_ALIGN, _gemm_bits.numpy_cut_align()
rng = np.random.default_rng(0)
r = lambda *s: rng.standard_normal(s).astype(np.float32)
for c_worker in (True, False):
    if not c_worker:
        P._cgemm = False
    for m, k, n in ((200, 512, 256), (256, 200, 512)):
        a, b = r(m, k), r(k, n)
        for lhs in (a, np.ascontiguousarray(a.T).T):
            with threadpool_limits(1):
                want = lhs @ b
            for axis in (None, -2, -1):
                got = np.empty_like(want)
                with threadpool_limits(2):
                    P.matmul(lhs, b, got, axis=axis)
                assert np.array_equal(got, want), (c_worker, m, k, n, axis)
    x, w, b, dy = r(200, 1, 1, 512), r(256, 1, 1, 512), r(1, 1, 1, 256), r(200, 1, 1, 256)
    outs = []
    for t in (1, 2):
        xx = x.copy()
        y, dw, db = np.empty((200, 1, 1, 256), np.float32), np.empty_like(w), np.empty_like(b)
        with threadpool_limits(t):
            KERNELS["fc_fwd"].bind(dict(x=xx, w=w, b=b, y=y), {})()
            KERNELS["fc_bwd"].bind(dict(dy=dy, w=w, x=xx, dw=dw, db=db, dx=xx), {})()
        outs.append((y, dw, db, xx))
    assert all(np.array_equal(p, q) for p, q in zip(*outs)), c_worker
print("OK")
"""
    env = {**os.environ, "OPENBLAS_CORETYPE": "Haswell", _blas_libs.ENV_OWN_BLAS: "0"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    if out.stdout.startswith("SKIP"):
        pytest.skip(f"NumPy's OpenBLAS does not take OPENBLAS_CORETYPE=Haswell here ({out.stdout.strip()})")
    assert out.stdout.strip() == "OK", out.stdout


@pytest.mark.skipif(_cc.compiler() is None, reason="no C compiler on this machine: compiled kernels untested")
def test_cc_switch_applies_at_once_to_sgd_and_the_nan_check(monkeypatch):
    """TR_MLIR_CC=0 sends the SGD update and the NaN check to their NumPy code on the next call,
    as it does for the conv and pool kernels (they used to decide once per process)."""
    monkeypatch.delenv(_cc.ENV_SWITCH, raising=False)
    assert optim._sgd_c() is not None and ranges._nonfinite_c() is not None
    monkeypatch.setenv(_cc.ENV_SWITCH, "0")
    assert optim._sgd_c() is None and ranges._nonfinite_c() is None
    monkeypatch.delenv(_cc.ENV_SWITCH)
    assert optim._sgd_c() is not None


def test_c_worker_not_switched_off_for_good_by_an_early_switch(monkeypatch):
    """A first c_gemm() call under TR_MLIR_CC=0 or TR_MLIR_C_GEMM=0 answers False without
    deciding for the whole process (the suite's later C-worker tests were skipped that way)."""
    monkeypatch.setattr(_parallel, "_cgemm", None)
    monkeypatch.setenv(_cc.ENV_SWITCH, "0")
    assert not _parallel.c_gemm()
    assert _parallel._cgemm is None
    monkeypatch.delenv(_cc.ENV_SWITCH)
    monkeypatch.setenv(_parallel.ENV_C_GEMM, "0")
    assert not _parallel.c_gemm()
    monkeypatch.delenv(_parallel.ENV_C_GEMM)
    if _cc.compiler() is not None and _blas_libs.find_sgemm() is not None:
        assert _parallel.c_gemm()


def test_cc_switch_stops_a_started_c_worker(monkeypatch):
    """TR_MLIR_CC=0 means no compiled code: once the C worker has started, the switch still
    turns it off for the next call (split GEMMs and compiled-kernel splits on the Python
    threads), and back on without it."""
    monkeypatch.delenv(_cc.ENV_SWITCH, raising=False)
    if not _parallel.c_gemm():
        pytest.skip("no C worker here (no compiler or no NumPy OpenBLAS)")
    monkeypatch.setenv(_cc.ENV_SWITCH, "0")
    assert not _parallel.c_gemm() and _parallel._cgemm  # off for now, not torn down
    monkeypatch.delenv(_cc.ENV_SWITCH)
    assert _parallel.c_gemm()


def test_numpy_openblas_is_picked_whatever_the_import_order():
    """scikit-learn loads scipy's own OpenBLAS; threadpoolctl may list it first. The kernels
    control and call NumPy's (the C worker was off for a whole test run when scipy's came
    first)."""
    import os

    import scipy.linalg  # noqa: F401 - loads scipy's OpenBLAS next to NumPy's

    lib = _blas_libs.numpy_openblas()
    if lib is None:
        pytest.skip("no OpenBLAS loaded")
    assert "numpy" in os.path.basename(os.path.dirname(lib.filepath))
    if _cc.compiler() is not None:
        assert _blas_libs.find_sgemm() is not None


@pytest.mark.parametrize("dtypes,cc", [(("float32", "float32"), True), (("float32", "float32"), False),
                                       (("float32", "float16"), True)], ids=["fp32", "fp32-numpy", "fp32+fp16"])
def test_residual_adds_split_by_threads_with_numpys_bits(dtypes, cc, monkeypatch):
    """add_fwd / add_bwd_acc / grad_acc on a large activation: one flat block per thread, the
    bits of one np.add (Inf - Inf and NaN included); fp32 by the compiled add on the calling
    thread and the C worker (``dense.ADD_SPLIT_ELEMENTS``, far smaller), otherwise NumPy on the
    Python threads; a partly overlapping output keeps the single call."""
    from tr_mlir.lowering.cpu import dense

    if not cc:
        monkeypatch.setenv("TR_MLIR_CC", "0")
    compiled = cc and dtypes[1] == "float32" and _cc.available()
    # the split sizes asserted below are those of uncontended threads: a busy machine must not turn
    # on the contended mode (its larger add threshold) before or during the test (a flake, 2026-12-07)
    monkeypatch.setattr(_parallel, "_contended", 0)
    monkeypatch.setattr(_parallel, "note_split", lambda durations: None)
    calls = []
    real_split, real_run_c = _parallel.split, _parallel.run_c
    monkeypatch.setattr(_parallel, "split", lambda n, fn, **kw: (calls.append(n), real_split(n, fn, **kw)))
    monkeypatch.setattr(_parallel, "run_c", lambda fn, pieces, **kw: (
        calls.append(pieces[-1][-1]) if len(pieces) == 2 else None, real_run_c(fn, pieces, **kw)))
    rng = np.random.default_rng(0)
    shape = (8, 32, 32, 16) if compiled else (8, 64, 64, 16)  # 131,072 / 524,288 elements
    acc = rng.standard_normal(shape).astype(dtypes[0])
    d = rng.standard_normal(shape).astype(dtypes[1])
    acc.flat[:3] = [np.inf, np.nan, 1.0]
    d.flat[:3] = [-np.inf, 2.0, np.nan]
    want = acc.copy()
    with np.errstate(invalid="ignore"):
        np.add(want, d, out=want, casting="same_kind")
    with threadpool_limits(limits=2), np.errstate(invalid="ignore"):
        got = acc.copy()
        KERNELS["grad_acc"].fn(dy=d, dx=got)
        da, db = acc.copy(), acc.copy()
        KERNELS["add_bwd_acc"].fn(dy=d, da=da, db=db)
        y = np.empty(shape, dtypes[0])
        KERNELS["add_fwd"].fn(a=acc, b=d, y=y)
        assert calls == [acc.size] * 4
        buf = np.concatenate([acc.ravel(), acc.ravel()[:1]])  # out one element past a: overlapping
        KERNELS["add_fwd"].fn(a=buf[:acc.size].reshape(shape), b=d, y=buf[1:].reshape(shape))
        assert len(calls) == 4  # not split
        ref = np.add(acc, d, casting="same_kind").astype(dtypes[0])
    for out in (got, da, db, y):
        assert out.tobytes() == want.tobytes()
    assert (dense._add_fn() is not None) == compiled or dtypes[1] != "float32"
    assert buf[1:].tobytes() == ref.tobytes()


@needs_cc
@two_threads
def test_a_c_thread_that_cannot_start_runs_the_jobs_here_and_turns_the_worker_off(monkeypatch):
    """``pthread_create`` failing (``tr_run_list`` returns -1 having run nothing): a split GEMM's
    jobs and a compiled kernel's piece pair run on the calling thread, to the same bits, and the
    C worker stays off afterwards (the Python threads split)."""
    if not _parallel.c_gemm():
        pytest.skip("no C worker here")
    real = _parallel._cgemm
    monkeypatch.setattr(_parallel, "_cgemm", (lambda _arr, _n: -1, *real[1:]))
    monkeypatch.setattr(_parallel, "_contended", 0)
    rng = np.random.default_rng(7)
    a, b = rnd(rng, (200, 784)), rnd(rng, (784, 1024))
    want = np.empty((200, 1024), F32)
    with threadpool_limits(1):
        np.matmul(a, b, out=want)
    got = np.full_like(want, np.nan)
    with threadpool_limits(2):
        _parallel.matmul(a, b, got)
    assert np.array_equal(got, want)
    assert _parallel._cgemm is False and not _parallel.c_gemm()
    monkeypatch.setattr(_parallel, "_cgemm", (lambda _arr, _n: -1, *real[1:]))
    x = rnd(rng, (1 << 18,))
    y = np.zeros_like(x)
    with threadpool_limits(2):
        KERNELS["tanh_fwd"].fn(x=x, y=y)  # its two halves through run_c's job pair
    assert y.tobytes() == np.tanh(x).tobytes() and _parallel._cgemm is False


@two_threads
@pytest.mark.parametrize("m, k, n, trans_b", [(40, 2048, 24, True), (41, 2033, 24, False), (200, 100, 64, False),
                                              (100, 100, 200, True), (64, 256, 100, False), (30, 3000, 45, False)])
def test_gemms_whose_halves_would_take_openblas_small_kernel_agree_on_one_and_two_threads(m, k, n, trans_b):
    """GEMMs of 2-5 MFLOP, some cut unevenly: a half of at most SMALL_GEMM_MNK (OpenBLAS's
    small-matrix kernel, another order of the k sums) would give other bits on 2 threads than the
    whole GEMM on 1; such GEMMs run whole (and the FC kernels' splits too)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((n, k)).astype(np.float32).T if trans_b else rng.standard_normal((k, n)).astype(np.float32)
    outs = []
    for t in (1, 2):
        out = np.zeros((m, n), np.float32)
        with threadpool_limits(t):
            _parallel.matmul(a, b, out=out)
        outs.append(out)
    np.testing.assert_array_equal(outs[0], outs[1])
    x, w, dy = a.reshape(m, 1, 1, k), np.ascontiguousarray(b.T).reshape(n, 1, 1, k), outs[0].reshape(m, 1, 1, n)
    got = []
    for t in (1, 2):
        arrays = {"dy": dy, "w": w, "x": x.copy(), "dw": np.zeros_like(w), "db": np.zeros(n, np.float32),
                  "dx": np.zeros_like(x)}
        with threadpool_limits(t):
            KERNELS["fc_bwd"].fn(**arrays)
        got.append([arrays[name].tobytes() for name in ("dw", "db", "dx")])
    assert got[0] == got[1]


@two_threads
def test_a_contended_stack_is_not_cut_into_small_kernel_blocks(monkeypatch):
    """While the threads are contended a split GEMM takes two blocks per thread (from BLOCK_FLOPS
    per thread, counted over the whole stack); 19 GEMMs of 208x137 @ 137x113 (3.2M m*n*k each)
    would then be cut into quarters under SMALL_GEMM_MNK, whose sums OpenBLAS orders otherwise:
    they stay in halves, the bits of one thread."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((19, 208, 137)).astype(np.float32)
    b = rng.standard_normal((19, 137, 113)).astype(np.float32)
    outs = []
    for t, contended in ((1, 0), (2, 5)):
        monkeypatch.setattr(_parallel, "_contended", contended)
        out = np.zeros((19, 208, 113), np.float32)
        with threadpool_limits(t):
            _parallel.matmul(a, b, out)
        outs.append(out)
    np.testing.assert_array_equal(outs[0], outs[1])
