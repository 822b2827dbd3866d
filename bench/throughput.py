"""Section 2: CPU training throughput, tr-mlir's NumPy backend against PyTorch eager.

Both sides train the same network (:mod:`bench.models`) on the same synthetic batch
(``tr_mlir.data.load_dataset('synthetic', ...)``) with SGD (lr 0.01, momentum 0.9, no weight decay), on 2 threads:
``torch.set_num_threads(2)`` and ``threadpoolctl.threadpool_limits(2)`` (OpenBLAS under NumPy).

One tr-mlir step is ``Task.train_step(x, y)``: input checks, staging the batch into the host
buffer, the copy into the arena and the replay of the captured step graphs (zero grad, forward,
backward, optimizer), returning the loss as a Python float. One PyTorch step is
``opt.zero_grad(); loss = F.cross_entropy(model(x), y); loss.backward(); opt.step(); loss.item()``
on NCHW tensors made once. After warm-up steps, the two sides are timed in alternating rounds
(so a change in machine load hits both), every step on its own; the figure is the median step
time, reported as images/s, and the ratio tr-mlir / PyTorch of the images/s. Each round is one
pair (a block of tr-mlir steps, then a block of PyTorch steps): ``round_ratios`` holds the ratio of
each pair's medians, and its median and range are the spread the report gives. ``quiet`` (over all
pairs) and ``round_quiet`` (per pair) hold the steal time and other processes' CPU time in that
window (:func:`bench.cpu_time.quietness`): a VM's load average does not show steal.

GEMM efficiency: the FLOPs of one step count the multiply-adds of conv and FC layers only (2
FLOPs each): forward, input gradient (not for the first layer) and weight gradient, from the
torch twin's layer shapes. Divided by the median step time and by the machine's fp32 GEMM peak
(:func:`gemm_peak`: the best of several large ``np.matmul`` calls on 2 threads), it says how far
each side is from being GEMM-bound.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from bench.models import THROUGHPUT_MODELS, BenchModel, torch_model

LR, MOMENTUM = 0.01, 0.9


def gemm_peak(n: int = 2048, repeats: int = 5) -> dict[str, float]:
    """fp32 GEMM rate (FLOP/s) of ``np.matmul`` and ``torch.mm`` on ``n x n`` matrices (best of
    ``repeats``), under the thread limits in force (OpenBLAS's own threading for NumPy)."""
    import torch

    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    c = np.empty_like(a)
    flops = 2.0 * n ** 3

    def best(fn: Callable[[], Any]) -> float:
        fn()
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return flops / min(times)

    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    tc = torch.empty_like(ta)
    return {"numpy_flops": best(lambda: np.matmul(a, b, out=c)),
            "torch_flops": best(lambda: torch.mm(ta, tb, out=tc)), "n": n}


STREAM_ELEMENTS = (1 << 18, 1 << 22, 1 << 24)
"""fp32 elements per operand of the host's streaming probe (:func:`stream_rate`): 1 MiB (3 MiB in
all, inside the L3 of the Zen 5 host), 16 MiB (48 MiB in all, past its 32 MiB L3; a ResNet-18
batch-norm activation of the first stage at batch 64 is 16 MiB; part of the operands still come
from the L3 on each repeat) and 64 MiB (192 MiB in all: every pass from and to memory, as a step's
passes are after the kernels between them moved their own data through the cache). On the Zen 5
host (2026-12-07) the 1 -> 2 thread ratios were about 2x, 1.3-2.7x and 1.0-2.0x: the last changed
from one second to the next (1.0-1.2x most of the time), so ``bench.scaling`` probes it every
round."""


def _best_time(threads: int, work: Callable[[int], None], repeats: int) -> float:
    """The best of ``repeats`` wall times (seconds) of ``work(i)`` for every ``i`` in
    ``range(threads)``, each on a thread of its own, all released together by a barrier (one
    thread: ``work(0)`` here). Re-raises what a probe thread raised."""
    import threading

    best = float("inf")
    for _ in range(repeats):
        if threads == 1:
            t0 = time.perf_counter()
            work(0)
            best = min(best, time.perf_counter() - t0)
            continue
        start = threading.Barrier(threads + 1)
        errors: list[BaseException] = []

        def probe(i: int) -> None:
            try:
                start.wait()
                work(i)
            except BaseException as e:  # re-raised on the calling thread below
                errors.append(e)

        pool = [threading.Thread(target=probe, args=(i,)) for i in range(threads)]
        try:
            for th in pool:
                th.start()
            start.wait()
        except BaseException:
            start.abort()  # the started threads leave the barrier (BrokenBarrierError)
            raise
        finally:
            t0 = time.perf_counter()
            for th in pool:
                if th.ident is not None:
                    th.join()
        if errors and not isinstance(errors[0], threading.BrokenBarrierError):
            raise errors[0]
        best = min(best, time.perf_counter() - t0)
    return best


def stream_rate(threads: int, elements: int, seconds: float = 0.02, repeats: int = 5) -> float:
    """The host's memory-bound throughput (bytes/s) on ``threads`` threads: ``c = a + b`` over fp32
    vectors of ``elements`` (12 bytes per element: two reads and a write), cut into ``threads``
    contiguous blocks, each thread adding its block over and over for about ``seconds``
    (NumPy's ufunc loop runs without the GIL), best of ``repeats``. Its ratio between thread
    counts is what the kernels that stream memory can expect on this host, the batch-norm and
    element-wise passes of a step among them (:func:`host_scaling`; a reference, not a bound:
    a kernel whose operands stay in the L3 between passes does better). Raises ValueError for
    fewer than one thread or fewer elements than threads, and re-raises what a probe thread
    raised."""
    if threads < 1 or elements < threads:
        raise ValueError(f"expected 1 <= threads <= elements, got {threads} threads for {elements} elements")
    a = np.ones(elements, np.float32)
    b = np.full(elements, 2.0, np.float32)
    c = np.empty_like(a)
    np.add(a, b, out=c)  # warm: page faults of c, then time one pass
    t0 = time.perf_counter()
    np.add(a, b, out=c)
    inner = max(1, int(seconds / max(time.perf_counter() - t0, 1e-6)))
    bounds = [elements * i // threads for i in range(threads + 1)]

    def work(i: int) -> None:
        lo, hi = bounds[i], bounds[i + 1]
        for _ in range(inner):
            np.add(a[lo:hi], b[lo:hi], out=c[lo:hi])

    return 12.0 * elements * inner / _best_time(threads, work, repeats)


GEMM_PROBE_SHAPES = ((512, 256, 256), (2048, 256, 256))
"""(m, k, n) of the host's compute probe (:func:`gemm_rate`): 1.3 MiB of fp32 operands per
stream, inside one core's 2 MiB L2 on the Zen 5 host, and 4.5 MiB, in the L3; the GEMMs of a
convolution's chunk are of these sizes (a Winograd component's, an im2col chunk's)."""


def gemm_rate(threads: int, m: int, k: int, n: int, seconds: float = 0.02, repeats: int = 5) -> float:
    """The host's compute-bound throughput (FLOP/s) on ``threads`` threads: that many independent
    streams of fp32 ``np.matmul`` of (m, k) by (k, n), each thread its own operands and OpenBLAS at
    one thread (NumPy runs the GEMM without the GIL), each stream about ``seconds`` long, best of
    ``repeats``. Its ratio between thread counts is what a step made of GEMMs can expect from the
    second core on this host (bench/README.md: 1.64-2.01x round to round on the Zen 5 VM). Raises
    ValueError for fewer than one thread or an empty GEMM; re-raises what a probe thread raised."""
    from threadpoolctl import threadpool_limits

    if threads < 1 or min(m, k, n) < 1:
        raise ValueError(f"expected at least 1 thread and a non-empty GEMM, got {threads} threads for "
                         f"{m} x {k} x {n}")
    rng = np.random.default_rng(0)
    ops = [(rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32),
            np.empty((m, n), np.float32)) for _ in range(threads)]
    with threadpool_limits(limits=1, user_api="blas"):
        a, b, c = ops[0]
        np.matmul(a, b, out=c)  # warm, then time one
        t0 = time.perf_counter()
        np.matmul(a, b, out=c)
        inner = max(1, int(seconds / max(time.perf_counter() - t0, 1e-6)))

        def work(i: int) -> None:
            a, b, c = ops[i]
            for _ in range(inner):
                np.matmul(a, b, out=c)

        best = _best_time(threads, work, repeats)
    return 2.0 * m * k * n * inner * threads / best


ROUND_TRIP_C_SOURCE = r"""
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
typedef struct { _Atomic long flag __attribute__((aligned(64))); double limit; double t0; } tr_pingpong;
static double tr_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
/* Wait until p->flag is `want` (1) or negative (0: the other side stopped), or until the time
   limit is past by twice (-1: the other side is not running; the caller then stops both). */
static int tr_wait(tr_pingpong *p, long want) {
  for (long spins = 1;; spins++) {
    const long v = atomic_load_explicit(&p->flag, memory_order_acquire);
    if (v == want) return 1;
    if (v < 0) return 0;
    if ((spins & 1023) == 0 && tr_now() - p->t0 > 2.0 * p->limit) return -1;
  }
}
static void *tr_pong(void *arg) {
  tr_pingpong *p = arg;
  for (long i = 0;; i++) {
    if (tr_wait(p, 2 * i + 1) != 1) return 0;
    atomic_store_explicit(&p->flag, 2 * i + 2, memory_order_release);
  }
}
/* Seconds per round trip of a cache line between this thread and a second one (each waits for
   the other's store), over up to `rounds` trips or about `limit` seconds, whichever ends first;
   -1 when the thread cannot be started or no trip completed in twice the limit. Each call has
   its own line, so concurrent calls do not interfere. */
double tr_round_trip(long rounds, double limit) {
  tr_pingpong p;
  pthread_t th;
  atomic_store(&p.flag, 0);
  p.limit = limit;
  p.t0 = tr_now();
  if (pthread_create(&th, 0, tr_pong, &p) != 0) return -1.0;
  long done = 0;
  while (done < rounds) {
    atomic_store_explicit(&p.flag, 2 * done + 1, memory_order_release);
    if (tr_wait(&p, 2 * done + 2) != 1) break;
    done++;
    if ((done & 63) == 0 && tr_now() - p.t0 > limit) break;
  }
  const double t = tr_now() - p.t0;
  atomic_store_explicit(&p.flag, -1, memory_order_release);
  pthread_join(th, 0);
  return done > 0 ? t / (double)done : -1.0;
}
"""
"""C source of :func:`core_round_trip`."""


def core_round_trip(rounds: int = 100_000, limit: float = 0.1) -> float | None:
    """Seconds one cache line takes to go from one core to another and back (two threads, each
    spinning until it sees the other's store, ``rounds`` times or for about ``limit`` seconds,
    whichever ends first; 10-40 ms by default), the threads placed by the OS as the kernel
    threads are. On the 2-vCPU Zen 5 VM (2026-12-07) it was 90-140 ns while LeNet-5 ran 1.45x
    faster on 2 threads than on 1, and 360-430 ns, for minutes at a time, while the same step ran
    1.08x faster (the vCPUs placed on distant cores: every line one thread wrote and the other
    reads crosses between them). Concurrent calls each use a cache line of their own.

    Returns None with fewer than two CPUs to run on (the two spinning threads would share one),
    without a C compiler (:mod:`tr_mlir.lowering.cpu._cc`), when the second thread cannot be
    started, or when no round trip completed within twice ``limit`` (the second thread never
    ran: a busy host). Raises ValueError for ``rounds`` outside 1 to 2**62 or a ``limit`` that
    is not a positive finite number of seconds."""
    import ctypes

    from tr_mlir.lowering.cpu import _cc

    if not 1 <= rounds <= 2 ** 62:
        raise ValueError(f"expected 1 to 2**62 rounds, got {rounds}")
    if not limit > 0 or limit == float("inf"):
        raise ValueError(f"expected a positive finite number of seconds for limit, got {limit}")
    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else range(os.cpu_count() or 1)
    if len(cpus) < 2 or not _cc.available():
        return None
    fn = _cc.function(ROUND_TRIP_C_SOURCE, "tr_round_trip", [ctypes.c_long, ctypes.c_double])
    fn.restype = ctypes.c_double
    seconds = fn(rounds, limit)
    return seconds if seconds > 0 else None


def host_scaling(t: dict[str, Any]) -> list[dict[str, Any]]:
    """The host's own scaling between the thread counts of a section-2 run ``t`` (the same pairs
    as :func:`thread_scaling`): ``{"from_threads", "threads", "gemm", "stream"}``, ``gemm`` the
    ratio of the np.matmul peaks (:func:`gemm_peak`), ``stream`` per probe size (str elements)
    the ratio of :func:`stream_rate`. Amdahl's law with these: a step whose 1-thread time is a
    share f of memory-bound passes scaling like ``stream`` and the rest like ``gemm`` speeds up
    about ``1 / ((1 - f) / gemm + f / stream)``, so of two sides with the same memory-bound
    work, the one with faster compute kernels has the larger f and scales less. Empty without ``by_threads`` or the probes
    (older results)."""
    out = []
    for th, sub in (t.get("by_threads") or {}).items():
        if int(th) == t["threads"] or "stream" not in t or "stream" not in sub:
            continue
        out.append({"from_threads": int(th), "threads": t["threads"],
                    "gemm": t["gemm_peak"]["numpy_flops"] / sub["gemm_peak"]["numpy_flops"],
                    "stream": {n: t["stream"][n] / sub["stream"][n] for n in t["stream"] if n in sub["stream"]}})
    return out


def step_flops(net, input_shape: tuple[int, int, int], batch: int) -> float:
    """Conv + FC FLOPs of one training step of the torch twin ``net`` (module doc)."""
    import torch
    import torch.nn as nn

    fwd: list[float] = []

    def hook(mod, inp, out):
        if isinstance(mod, nn.Conv2d):
            k = mod.kernel_size[0] * mod.kernel_size[1] * mod.in_channels // mod.groups
            fwd.append(2.0 * out.numel() * k)
        elif isinstance(mod, nn.Linear):
            fwd.append(2.0 * out.numel() * mod.in_features)

    hooks = [m.register_forward_hook(hook) for m in net.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    h, w, c = input_shape
    with torch.no_grad():
        net(torch.zeros(batch, c, h, w))
    for hk in hooks:
        hk.remove()
    return 3.0 * sum(fwd) - (fwd[0] if fwd else 0.0)  # fwd + wgrad + dgrad; no dgrad of the first layer


class _Ours:
    def __init__(self, m: BenchModel, x: np.ndarray, y: np.ndarray, fuse: bool, **options):
        import tr_mlir

        self.task = tr_mlir.Task(m.blueprint(), m.input_shape, m.num_classes, m.batch,
                                 optimizer=tr_mlir.optim.SGD(lr=LR, momentum=MOMENTUM), fuse=fuse, seed=0, **options)
        t0 = time.perf_counter()
        self.task.compile(train_size=m.batch * 100, val_size=m.batch)
        self.build_s = time.perf_counter() - t0
        self.x, self.y = x, y

    def step(self) -> float:
        return self.task.train_step(self.x, self.y)


class _Torch:
    def __init__(self, m: BenchModel, x: np.ndarray, y: np.ndarray):
        import torch
        import torch.nn.functional as F

        torch.manual_seed(0)
        self.net = torch_model(m.blueprint(), m.input_shape, m.num_classes)
        self.net.train()
        self.opt = torch.optim.SGD(self.net.parameters(), lr=LR, momentum=MOMENTUM)
        self.x = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))
        self.y = torch.from_numpy(y.astype(np.int64))
        self.F = F

    def step(self) -> float:
        self.opt.zero_grad()
        loss = self.F.cross_entropy(self.net(self.x), self.y)
        loss.backward()
        self.opt.step()
        return loss.item()


def _timed(fn: Callable[[], float], n: int, out: list[float]) -> None:
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)


def measure(m: BenchModel, *, warmup: int, rounds: int, steps: int, fuse: bool | None = None) -> dict[str, Any]:
    """Throughput of one model on both sides (module doc). Returns a dict with the median step
    times, images/s, ratio, FLOPs per step, the losses of the first step (a sanity check: both
    start near ln(num_classes)), the timing details and ``breakdown``
    (:func:`bench.profile.step_breakdown`: the fraction of the step per kernel family and the
    convolution algorithm mix). ``fuse`` None: the model's own (:attr:`BenchModel.fuse`)."""
    from bench.cpu_time import quietness, sample
    from bench.profile import step_breakdown
    from tr_mlir.data import load_dataset

    fuse = m.fuse if fuse is None else fuse

    data = load_dataset("synthetic", input_shape=m.input_shape, num_classes=m.num_classes, train_size=m.batch,
                        val_size=1, seed=0)
    x, y = data.train_x[:m.batch], data.train_y[:m.batch]
    ours, ref = _Ours(m, x, y, fuse), _Torch(m, x, y)
    first = {"tr_mlir": ours.step(), "torch": ref.step()}
    for _ in range(max(warmup - 1, 0)):
        ours.step()
        ref.step()
    t_ours: list[float] = []
    t_ref: list[float] = []
    round_ratios: list[float] = []
    round_quiet: list[dict[str, Any] | None] = []
    s_start = sample()
    for _ in range(rounds):
        o0, r0 = len(t_ours), len(t_ref)
        s0 = sample()
        _timed(ours.step, steps, t_ours)
        _timed(ref.step, steps, t_ref)
        round_quiet.append(quietness(s0, sample()))
        round_ratios.append(statistics.median(t_ref[r0:]) / statistics.median(t_ours[o0:]))
    quiet = quietness(s_start, sample())
    med_o, med_r = statistics.median(t_ours), statistics.median(t_ref)
    flops = step_flops(ref.net, m.input_shape, m.batch)
    return {
        "model": m.name, "batch": m.batch, "input_hwc": list(m.input_shape), "fuse": fuse,
        "tr_mlir_step_s": med_o, "torch_step_s": med_r,
        "tr_mlir_images_per_s": m.batch / med_o, "torch_images_per_s": m.batch / med_r,
        "ratio": med_r / med_o, "best_ratio": min(t_ref) / min(t_ours),
        "round_ratios": round_ratios, "median_round_ratio": statistics.median(round_ratios),
        "quiet": quiet, "round_quiet": round_quiet,
        "tr_mlir_best_step_s": min(t_ours), "torch_best_step_s": min(t_ref), "step_flops": flops,
        "tr_mlir_gflops": flops / med_o / 1e9, "torch_gflops": flops / med_r / 1e9,
        "first_loss": first, "timed_steps": len(t_ours),
        "tr_mlir_step_times_s": t_ours, "torch_step_times_s": t_ref,
        "nodes_per_step": _nodes_per_step(ours.task),
        "breakdown": step_breakdown(ours.task),
    }


def _nodes_per_step(task) -> int:
    runner = task.runner
    graphs = runner._pre[(0, "a")] + runner._post[(0, "a", False)] + runner._transfer["a"]
    return sum(len(g) for g in graphs)


def run(names: list[str], *, warmup: int, rounds: int, steps: int | dict[str, int], threads: int = 2,
        peak_n: int = 2048, also_threads: tuple[int, ...] = ()) -> dict[str, Any]:
    """Section 2 for the models ``names`` (keys of :data:`THROUGHPUT_MODELS`) on ``threads``
    threads; ``steps``: timed steps per round (per model name when a dict). Adds each side's
    fraction of the measured GEMM peak (the best of the peaks measured before and after the
    models, so a busy moment does not lower it). ``also_threads``: the same measurement again
    on these thread counts (``by_threads``; the 1-thread ratio is far less sensitive to other
    processes on the machine)."""
    import torch
    from threadpoolctl import threadpool_info, threadpool_limits

    def one(th: int) -> dict[str, Any]:
        torch.set_num_threads(th)
        with threadpool_limits(limits=th):
            blas = [{k: d.get(k) for k in ("internal_api", "prefix", "version", "architecture", "num_threads")}
                    for d in threadpool_info()]
            before = gemm_peak(peak_n)
            stream = [{str(n): stream_rate(th, n) for n in STREAM_ELEMENTS}]
            rows = []
            for name in names:
                n = steps[name] if isinstance(steps, dict) else steps
                rows.append(measure(THROUGHPUT_MODELS[name], warmup=warmup, rounds=rounds, steps=n))
            after = gemm_peak(peak_n)
            stream.append({str(n): stream_rate(th, n) for n in STREAM_ELEMENTS})
        peak = {"n": peak_n, "numpy_flops": max(before["numpy_flops"], after["numpy_flops"]),
                "torch_flops": max(before["torch_flops"], after["torch_flops"]),
                "numpy_flops_before_after": [before["numpy_flops"], after["numpy_flops"]]}
        for r in rows:
            r["tr_mlir_peak_fraction"] = r["tr_mlir_gflops"] * 1e9 / peak["numpy_flops"]
            r["torch_peak_fraction"] = r["torch_gflops"] * 1e9 / peak["numpy_flops"]
        return {"threads": th, "torch_threads": torch.get_num_threads(), "blas": blas, "gemm_peak": peak,
                "stream": {n: max(s[n] for s in stream) for n in stream[0]}, "models": rows}

    out = one(threads)
    out["by_threads"] = {str(th): one(th) for th in also_threads}
    out["scaling"] = thread_scaling(out)
    out["host_scaling"] = host_scaling(out)
    torch.set_num_threads(threads)
    return out


def thread_scaling(t: dict[str, Any]) -> list[dict[str, Any]]:
    """How each side's step speeds up from another thread count to ``t["threads"]``: per model
    measured on both, ``{"model", "from_threads", "threads", "tr_mlir", "torch"}`` where each side
    is its median step on ``from_threads`` / its median step on ``threads`` (issue 13's "both
    threads busy": tr-mlir's speed-up at least PyTorch's). Empty without ``by_threads``."""
    out = []
    mine = {m["model"]: m for m in t["models"]}
    for th, sub in (t.get("by_threads") or {}).items():
        for m in sub["models"]:
            main = mine.get(m["model"])
            if main is None or int(th) == t["threads"]:
                continue
            out.append({"model": m["model"], "from_threads": int(th), "threads": t["threads"],
                        "tr_mlir": m["tr_mlir_step_s"] / main["tr_mlir_step_s"],
                        "torch": m["torch_step_s"] / main["torch_step_s"]})
    return out
