"""``python -m bench.scaling``: each side's 1 -> 2 thread speed-up of the training step, measured
with the thread counts interleaved (issue 13, "both threads busy").

Section 2 of ``python -m bench`` measures every model on 2 threads and then again on 1
(``by_threads``), minutes apart, and ``bench.throughput.thread_scaling`` divides the medians; a
change in the host between the two blocks moves both sides' scaling the same way but not by the
same amount. Here every round times four blocks of ``--steps`` steps: tr-mlir on 2 threads,
PyTorch eager on 2, tr-mlir on 1, PyTorch on 1, in an order that rotates by one block each round
(so no block always follows the same one). Each block starts with ``max(1, steps // 5)`` untimed
steps after the thread count is set (``torch.set_num_threads``, ``threadpoolctl.threadpool_limits`` for
OpenBLAS and tr-mlir's kernel threads), and is followed by a ``--pause`` (default 0.3 s) so that
PyTorch's OpenMP threads, which spin for a while after a parallel region, are asleep before the
next block starts.

Per model the report gives each side's median step (seconds) per thread count over all rounds,
its scaling ``median step on 1 thread / median step on 2``, the same per round (each round's
block medians) as a median and a range, in how many rounds tr-mlir's speed-up was at least
PyTorch's, the milliseconds each side's 2-thread step is longer than half its 1-thread step
(:func:`split_loss`), and the host's memory scaling after each round (:func:`_memory_ratio`, a streaming
add over 64 MiB operands on 2 threads over 1 thread) and the time a cache line takes from one
core to the other and back (:func:`bench.throughput.core_round_trip`: 90-140 ns on the Zen 5 VM
while its two vCPUs sat close, 360-430 ns while they sat far apart, which cost LeNet-5's 2-thread
step a quarter of its speed), each as a median and a range. The models and
the two sides are ``bench.throughput``'s (same networks, batches, synthetic data, SGD with
momentum, fp32); the 1-minute load average before and after and the
steal / other-process CPU time per model (:mod:`bench.cpu_time`) are recorded. Before the models,
the host's own 1 -> 2 thread ratio of a streaming add (:func:`bench.throughput.stream_rate`, over
the operand sizes of :data:`bench.throughput.STREAM_ELEMENTS`, best of two probes per thread count)
is measured and reported under the table: the scaling the memory-bound passes of a step can
expect once their operands come from memory rather than the cache; and its compute ratio
(:func:`host_gemm`: independent one-thread GEMM streams, one per thread), what a step made of
GEMMs can expect from the second core.

Run from the repository root (the test extra: ``torch==2.13.0``, ``threadpoolctl``)::

    python -m bench.scaling resnet18_cifar mlp lenet5 --rounds 12 --name scaling-zen5-2026-12-07

It writes ``<out-dir>/<name>.json`` and ``.md`` (default ``bench/results``, name
``scaling-<date>``) and prints the markdown. As ``python -m bench``, it re-executes itself once
without ``OPENBLAS_CORETYPE`` / ``OPENBLAS_L2_SIZE`` (``--keep-blas-env`` keeps them).
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

THREADS = (2, 1)
"""The thread counts compared: the step on ``THREADS[1]`` over the step on ``THREADS[0]``."""

STEPS = {"mlp": 30, "lenet5": 30, "resnet18_cifar": 3, "resnet18_cifar_unfused": 3, "resnet50": 1, "mobilenet_v2": 10}
"""Timed steps per block by default (``--steps`` overrides): 0.1-0.3 s a block for the small
nets, 1-3.5 s for the ResNets (one step of ResNet-50 on one thread takes ~1 s). With 3 steps of
LeNet-5 (3 ms each) a block measured the thread switch more than the step: its 2-thread median
was 4.4 ms against 2.1 ms with 20 steps (2026-12-07)."""


def measure(name: str, *, rounds: int, steps: int, pause: float = 0.3) -> dict[str, Any]:
    """Both sides' thread scaling for the model ``name`` (a key of
    :data:`bench.models.THROUGHPUT_MODELS`), ``rounds`` rounds of four blocks of ``steps`` timed
    steps (module doc; each block after ``max(1, steps // 5)`` untimed steps). Returns
    ``{"model", "batch", "rounds", "steps", "step_s": {side: {threads: median seconds}},
    "scaling": {side: float}, "round_scaling": {side: [float per round]}, "median_round_scaling":
    {side: float}, "rounds_at_least_torch": int, "split_loss_s": {side: seconds},
    "step_times_s": {side: {threads: [seconds]}},
    "quiet", "host_memory_ratio": [float per round], "core_round_trip_s": [[seconds after each
    block's pause] per round]}`` (no seconds where :func:`bench.throughput.core_round_trip` cannot
    run); sides ``tr_mlir`` and ``torch``. Raises
    ValueError for ``rounds`` or ``steps`` below 1 and KeyError for an unknown model."""
    import torch
    from threadpoolctl import threadpool_limits

    from bench.cpu_time import quietness, sample
    from bench.models import THROUGHPUT_MODELS
    from bench.throughput import _Ours, _Torch, core_round_trip
    from tr_mlir.data import load_dataset

    if rounds < 1 or steps < 1:
        raise ValueError(f"expected rounds and steps of at least 1, got {rounds} and {steps}")
    m = THROUGHPUT_MODELS[name]
    data = load_dataset("synthetic", input_shape=m.input_shape, num_classes=m.num_classes, train_size=m.batch,
                        val_size=1, seed=0)
    x, y = data.train_x[:m.batch], data.train_y[:m.batch]
    sides = {"tr_mlir": _Ours(m, x, y, m.fuse), "torch": _Torch(m, x, y)}
    times: dict[str, dict[int, list[float]]] = {s: {th: [] for th in THREADS} for s in sides}
    per_round: dict[str, dict[int, list[float]]] = {s: {th: [] for th in THREADS} for s in sides}
    blocks = [(s, th) for th in THREADS for s in sides]
    host: list[float] = []
    round_trip: list[list[float]] = []
    torch_threads = torch.get_num_threads()
    s0 = sample()
    try:
        for th in THREADS:  # warm-up on each thread count
            torch.set_num_threads(th)
            with threadpool_limits(limits=th):
                for side in sides.values():
                    side.step(), side.step()
        for r in range(rounds):
            round_trip.append([])
            for side, th in blocks[r % len(blocks):] + blocks[:r % len(blocks)]:
                torch.set_num_threads(th)
                with threadpool_limits(limits=th):
                    for _ in range(max(1, steps // 5)):  # untimed, after the switch
                        sides[side].step()
                    block = []
                    for _ in range(steps):
                        t0 = time.perf_counter()
                        sides[side].step()
                        block.append(time.perf_counter() - t0)
                times[side][th] += block
                per_round[side][th].append(statistics.median(block))
                time.sleep(pause)
                rt = core_round_trip()  # after the pause: PyTorch's OpenMP threads spin right after a block
                if rt is not None:
                    round_trip[-1].append(rt)
            host.append(_memory_ratio())
    finally:
        torch.set_num_threads(torch_threads)
    quiet = quietness(s0, sample())
    one, two = THREADS[1], THREADS[0]
    step_s = {s: {th: statistics.median(t) for th, t in times[s].items()} for s in sides}
    round_scaling = {s: [a / b for a, b in zip(per_round[s][one], per_round[s][two])] for s in sides}
    return {
        "model": name, "batch": m.batch, "rounds": rounds, "steps": steps, "threads": list(THREADS),
        "step_s": step_s,
        "scaling": {s: step_s[s][one] / step_s[s][two] for s in sides},
        "round_scaling": round_scaling,
        "median_round_scaling": {s: statistics.median(v) for s, v in round_scaling.items()},
        "rounds_at_least_torch": sum(a >= b for a, b in zip(round_scaling["tr_mlir"], round_scaling["torch"])),
        "split_loss_s": {s: split_loss(step_s[s][one], step_s[s][two], two / one) for s in sides},
        "step_times_s": times, "quiet": quiet, "host_memory_ratio": host, "core_round_trip_s": round_trip,
    }


def split_loss(one_s: float, many_s: float, ratio: float) -> float:
    """How much longer a step on ``ratio`` times as many threads took (``many_s``) than a perfect
    split of the step on fewer (``one_s``): ``many_s - one_s / ratio``, in the unit of the two
    times (seconds in :func:`measure`). It is what the threads lose to each other (hand-offs,
    waits, the memory bandwidth they share) plus, on two threads, half of the step's serial time;
    negative where the step did better than a perfect split (e.g. its operands then fit the two
    cores' caches). Two sides whose steps differ in length compare here where a ratio cannot: with
    the same time lost, the side with the shorter step has the lower speed-up. Raises
    ``ZeroDivisionError`` for a ``ratio`` of 0."""
    return many_s - one_s / ratio


def host_stream(log=print, elements: tuple[int, ...] | None = None, probes: int = 2) -> dict[str, Any]:
    """The host's streaming-add rate (bytes/s) per thread count of :data:`THREADS` and operand size
    (str elements of ``elements``, default :data:`bench.throughput.STREAM_ELEMENTS`), the best of
    ``probes`` probes taken in the order 2, 1, 2, 1 threads: ``{"rate": {threads: {elements:
    bytes/s}}, "ratio": {elements: rate on THREADS[0] / rate on THREADS[1]}}``. Threads are held
    with ``threadpoolctl`` as for the models (the probe's own threads run NumPy's add, which takes
    no BLAS)."""
    from threadpoolctl import threadpool_limits

    from bench.throughput import STREAM_ELEMENTS, stream_rate

    sizes = STREAM_ELEMENTS if elements is None else elements
    log(f"[bench.scaling] host streaming add over {', '.join(str(n) for n in sizes)} fp32 elements")
    rate: dict[int, dict[str, float]] = {th: {} for th in THREADS}
    for th in THREADS * probes:
        with threadpool_limits(limits=th):
            for n in sizes:
                rate[th][str(n)] = max(rate[th].get(str(n), 0.0), stream_rate(th, n, repeats=3 if probes == 1 else 5))
    two, one = THREADS
    return {"rate": {str(th): r for th, r in rate.items()},
            "ratio": {n: rate[two][n] / rate[one][n] for n in rate[two]}}


def host_gemm(log=print, probes: int = 2) -> dict[str, Any]:
    """The host's compute rate (FLOP/s) per thread count of :data:`THREADS` and GEMM shape of
    :data:`bench.throughput.GEMM_PROBE_SHAPES` (key ``"m x k x n"``): independent one-thread
    ``np.matmul`` streams, one per thread (:func:`bench.throughput.gemm_rate`), the best of
    ``probes`` probes taken in the order 2, 1, 2, 1 threads: ``{"rate": {threads: {shape:
    FLOP/s}}, "ratio": {shape: rate on THREADS[0] / rate on THREADS[1]}}``. What a step made of
    GEMMs can expect from the second core, next to :func:`host_stream`'s memory-bound passes."""
    from bench.throughput import GEMM_PROBE_SHAPES, gemm_rate

    log("[bench.scaling] host GEMM streams of " + ", ".join(" x ".join(map(str, s)) for s in GEMM_PROBE_SHAPES))
    rate: dict[int, dict[str, float]] = {th: {} for th in THREADS}
    for th in THREADS * probes:
        for shape in GEMM_PROBE_SHAPES:
            key = " x ".join(map(str, shape))
            rate[th][key] = max(rate[th].get(key, 0.0), gemm_rate(th, *shape))
    two, one = THREADS
    return {"rate": {str(th): r for th, r in rate.items()},
            "ratio": {k: rate[two][k] / rate[one][k] for k in rate[two]}}


MEMORY_PROBE_ELEMENTS = 1 << 24
"""fp32 elements per operand (64 MiB) of the per-round memory probe (:func:`_memory_ratio`)."""


def _memory_ratio() -> float:
    """The host's streaming add over :data:`MEMORY_PROBE_ELEMENTS` operands (every pass from and
    to memory) on THREADS[0] threads over THREADS[1], one probe each, measured now (about 0.2 s;
    :func:`host_stream`). The 2-thread memory bandwidth of the Zen 5 VM changed from one second to
    the next (2026-12-07: 1.0-1.15x of one thread, then 2.0x a few seconds later), so every round
    records it."""
    return host_stream(lambda _: None, (MEMORY_PROBE_ELEMENTS,), probes=1)["ratio"][str(MEMORY_PROBE_ELEMENTS)]


FAR_ROUND_TRIP_S = 250e-9
"""A round whose core-to-core round trips (:func:`bench.throughput.core_round_trip`, one after each
block) have a median above this ran with the two cores far apart: the Zen 5 VM showed 90-140 ns
or 360-430 ns for minutes at a time (2026-12-07), with single probes of either kind in between."""


def placement_scaling(m: dict[str, Any]) -> dict[str, dict[str, list[float]]]:
    """A :func:`measure` result's per-round scaling of each side, split into the rounds whose
    core-to-core round trips have a median of at most :data:`FAR_ROUND_TRIP_S` (``"close"``) and
    those above it (``"far"``); rounds without a probe are left out."""
    out: dict[str, dict[str, list[float]]] = {w: {"tr_mlir": [], "torch": []} for w in ("close", "far")}
    for r, probes in enumerate(m.get("core_round_trip_s") or []):
        if probes:
            where = "far" if statistics.median(probes) > FAR_ROUND_TRIP_S else "close"
            for side in out[where]:
                out[where][side].append(m["round_scaling"][side][r])
    return out


def report(res: dict[str, Any]) -> str:
    """The markdown table of a :func:`run` result."""
    from bench.cpu_time import describe

    mach = res["machine"]
    lines = [f"# Thread scaling, tr-mlir against PyTorch eager ({res['date']})", "",
             f"Commit {(mach['git'] or {}).get('commit')}; {mach['cpu']}, {mach['cores']} cores; load before "
             f"{mach['load_before'][0]:.2f}, after {mach['load_after'][0]:.2f}; OpenBLAS variables unset: "
             f"{res['openblas_env_unset'] or 'none'}; {res['duration_s']:.0f} s.", "",
             "| model (batch) | rounds x steps | tr-mlir step 1t / 2t (ms) | PyTorch step 1t / 2t (ms) | "
             "scaling tr-mlir / PyTorch | per round, median (range) tr-mlir; PyTorch | rounds tr-mlir >= PyTorch | "
             "lost to the split, ms per step (2t - 1t / 2) tr-mlir / PyTorch | "
             "host memory 1 -> 2 threads per round, median (range) | core-to-core round trip after each block, ns, "
             "median (range); scaling tr-mlir / PyTorch in close and far rounds | steal / others |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]

    def lost(m: dict[str, Any]) -> str:
        sl = m.get("split_loss_s")  # absent from results written before it was measured
        return f"{sl['tr_mlir'] * 1e3:.1f} / {sl['torch'] * 1e3:.1f}" if sl else "-"

    def memory(m: dict[str, Any]) -> str:
        r = m.get("host_memory_ratio") or []
        return f"{statistics.median(r):.2f} ({min(r):.2f}-{max(r):.2f})" if r else "-"

    def round_trip(m: dict[str, Any]) -> str:
        r = [t * 1e9 for probes in m.get("core_round_trip_s") or [] for t in probes]
        if not r:
            return "-"
        by = placement_scaling(m)
        split = "; ".join(f"{where} rounds ({len(v['tr_mlir'])}): {statistics.median(v['tr_mlir']):.2f} / "
                          f"{statistics.median(v['torch']):.2f}" for where, v in by.items() if v["tr_mlir"])
        return f"{statistics.median(r):.0f} ({min(r):.0f}-{max(r):.0f}); {split}"

    for m in res["models"]:
        st, rs = m["step_s"], m["round_scaling"]

        def ms(side: str) -> str:
            return f"{st[side][1] * 1e3:.1f} / {st[side][2] * 1e3:.1f}"

        def rng(side: str) -> str:
            return f"{m['median_round_scaling'][side]:.2f} ({min(rs[side]):.2f}-{max(rs[side]):.2f})"

        lines.append(f"| {m['model']} ({m['batch']}) | {m['rounds']} x {m['steps']} | {ms('tr_mlir')} | "
                     f"{ms('torch')} | "
                     f"**{m['scaling']['tr_mlir']:.2f} / {m['scaling']['torch']:.2f}** | {rng('tr_mlir')}; "
                     f"{rng('torch')} | {m['rounds_at_least_torch']} of {m['rounds']} | {lost(m)} | {memory(m)} | "
                     f"{round_trip(m)} | "
                     f"{describe(m['quiet'])} |")
    lines += ["", "Scaling: each side's median step on 1 thread / its median step on 2 (`python -m bench.scaling`, "
              "bench/README.md). Lost to the split: the median 2-thread step less half the median 1-thread step "
              "(`bench.scaling.split_loss`), what keeps each side from a 2.00x speed-up, in milliseconds."]
    host = res.get("host_stream")
    if host:
        from bench.report import _operand_mib

        one, two = THREADS[1], THREADS[0]
        lines += ["", f"The host itself, {one} -> {two} threads, a split np.add streaming three operands: " + ", ".join(
            f"**{r:.2f}x** over {_operand_mib(n)} operands ({host['rate'][str(one)][n] / 1e9:.0f} -> "
            f"{host['rate'][str(two)][n] / 1e9:.0f} GB/s)" for n, r in host["ratio"].items()) + "."]
    gemm = res.get("host_gemm")
    if gemm:
        one, two = THREADS[1], THREADS[0]
        lines += ["", f"Its compute, {one} -> {two} threads, independent one-thread np.matmul streams (one per "
                  "thread): " + ", ".join(
                      f"**{r:.2f}x** for {k} ({gemm['rate'][str(one)][k] / 1e9:.0f} -> "
                      f"{gemm['rate'][str(two)][k] / 1e9:.0f} GFLOP/s)" for k, r in gemm["ratio"].items()) + "."]
    return "\n".join(lines) + "\n"


def run(names: list[str], *, rounds: int, steps: int | None = None, pause: float = 0.3, log=print) -> dict[str, Any]:
    """:func:`measure` for each model of ``names`` (``steps`` None: :data:`STEPS`' count, else 3),
    after the host's streaming and GEMM probes (:func:`host_stream`, :func:`host_gemm`; keys
    ``host_stream``, ``host_gemm``), with the machine
    (:func:`bench.cli.machine_info`, the load average before and after), the date and the duration
    in seconds. An error of the probe (e.g. ``MemoryError`` for its 192 MiB of operands) stops the
    run before any model is measured."""
    from bench.cli import machine_info

    t0 = time.perf_counter()
    res: dict[str, Any] = {"date": datetime.date.today().isoformat(), "machine": machine_info(),
                           "openblas_env_unset": os.environ.get("TR_MLIR_BENCH_UNSET", ""), "models": []}
    res["host_stream"] = host_stream(log)
    res["host_gemm"] = host_gemm(log)
    for name in names:
        n = steps or STEPS.get(name, 3)
        log(f"[bench.scaling] {name}: {rounds} rounds of 4 x {n} steps")
        res["models"].append(measure(name, rounds=rounds, steps=n, pause=pause))
    res["machine"]["load_after"] = list(os.getloadavg())
    res["duration_s"] = time.perf_counter() - t0
    return res


def main(argv: list[str] | None = None) -> int:
    """The command line (module doc). Returns the exit status: 0; 2 for a usage error (an unknown
    model, a count below 1, a pause that is not a finite number of seconds >= 0, an output folder
    that cannot be made or written, a ``--name`` with a path in it: all checked before measuring);
    1 without the test extra (torch, threadpoolctl)."""
    from bench.cli import REPO, dumps

    ap = argparse.ArgumentParser(prog="python -m bench.scaling", description=__doc__.splitlines()[0],
                                 allow_abbrev=False)
    ap.add_argument("models", nargs="*", default=["resnet18_cifar"],
                    help="models (default resnet18_cifar): keys of bench.models.THROUGHPUT_MODELS")
    ap.add_argument("--rounds", type=int, default=12, help="rounds of four blocks (default 12)")
    ap.add_argument("--steps", type=int, default=None,
                    help="timed steps per block (default per model: " +
                         ", ".join(f"{k} {v}" for k, v in STEPS.items()) + ")")
    ap.add_argument("--pause", type=float, default=0.3, help="seconds after each block (default 0.3)")
    ap.add_argument("--out-dir", type=Path, default=REPO / "bench" / "results")
    ap.add_argument("--name", default=None, help="file name stem (default scaling-<date>)")
    ap.add_argument("--keep-blas-env", action="store_true",
                    help="do not unset OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE for the run")
    args = ap.parse_args(argv)
    try:
        import threadpoolctl  # noqa: F401 - needed by measure(); checked before anything runs
        import torch  # noqa: F401

        from bench.models import THROUGHPUT_MODELS
    except ImportError as e:
        print(f"python -m bench.scaling: needs the test extra (torch==2.13.0, threadpoolctl): {e}; "
              "install with: pip install -e '.[test]'", file=sys.stderr)
        return 1
    unknown = [n for n in args.models if n not in THROUGHPUT_MODELS]
    if unknown:
        ap.error(f"unknown model(s) {', '.join(unknown)}; expected some of {', '.join(THROUGHPUT_MODELS)}")
    if args.rounds < 1 or (args.steps is not None and args.steps < 1):
        ap.error("--rounds and --steps must be at least 1")
    if not 0 <= args.pause < math.inf:
        ap.error(f"--pause must be a finite number of seconds >= 0, got {args.pause}")
    if args.name is not None and (not args.name or Path(args.name).name != args.name):
        ap.error(f"--name must be a file name stem without a folder, got {args.name!r}")
    try:
        args.out_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=args.out_dir):
            pass
    except OSError as e:
        ap.error(f"cannot write results into --out-dir {args.out_dir}: {e.strerror or e}")
    res = run(args.models, rounds=args.rounds, steps=args.steps, pause=args.pause,
              log=lambda s: print(s, file=sys.stderr))
    md = report(res)
    stem = args.name or f"scaling-{res['date']}"
    (args.out_dir / f"{stem}.json").write_text(dumps(res))
    (args.out_dir / f"{stem}.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    from bench.__main__ import reexec_without_blas_env

    reexec_without_blas_env(sys.argv[1:], "bench.scaling")
    sys.exit(main(sys.argv[1:]))
