"""``python -m bench.kernel_scaling MODEL``: which kernels of a tr-mlir training step lose on two
threads, and how much more with the two cores far apart.

``bench.scaling`` gives the whole step's 1 -> 2 thread speed-up; this says where it goes. Every
kernel call of the step is timed inside real steps (not alone, as ``bench.profile`` does: what a
kernel costs on two threads depends on which core last wrote its operands). Blocks of ``--steps``
steps run on 2 threads, each between two probes of the core-to-core round trip
(:func:`bench.throughput.core_round_trip`): every block counts in the ``2t`` column; one whose two
probes are both at most :data:`bench.scaling.FAR_ROUND_TRIP_S` also in ``close``, both above it
in ``far`` (mixed or missing probes: in neither). The first 2-thread block and every
``--one-every``-th after it are followed by a block on 1 thread. Per kernel call (its kernel's
registered name or names, the shape of its main operand and, for convs, the algorithms) the table
gives its time per step in ms (each block's mean over its steps, the median over the blocks of a
column) and what the 2-thread time loses against a perfect split, ``t2 - t1 / 2``, sorted by the
largest loss. The 2026-12-07 analysis of LeNet-5's slow mode in ``bench/README.md`` ("Where each
thread's data lives") was made with a scratch version of this.

Run from the repository root::

    python -m bench.kernel_scaling lenet5 --blocks 100 --steps 30
    python -m bench.kernel_scaling resnet18_cifar --blocks 20 --steps 2 --json /tmp/r18.json

Usage errors (an unknown model, counts below 1, a ``--json`` path whose folder cannot be written)
exit with status 2 before anything is built; ``--json`` is written (through a temporary file in
the same folder) only after the report is printed, so an interrupted run leaves an earlier file
as it was. Ctrl-C exits with status 130. As ``python -m bench``, it re-executes itself once
without ``OPENBLAS_CORETYPE`` / ``OPENBLAS_L2_SIZE`` (``--keep-blas-env`` keeps them).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

SIDES = ("1t", "2t", "close", "far")
"""The columns of the table: one thread; two threads (every block), with the cores close, with
them far apart."""


def _kernel_names() -> dict[int, str]:
    """id of a kernel function -> its registered name(s), ``/``-joined (one function may be
    registered under several names, e.g. ``bn2d_bwd/bn1d_bwd``)."""
    from tr_mlir.lowering.cpu.registry import KERNELS

    names: dict[int, list[str]] = collections.defaultdict(list)
    for kid, spec in KERNELS.items():
        names[id(spec.fn)].append(str(getattr(spec, "name", kid)))
    return {k: "/".join(v) for k, v in names.items()}


def launch_label(launch, names: dict[int, str] | None = None) -> str:
    """A kernel call's label: its kernel's registered name(s) (``names``, :func:`_kernel_names`;
    else the function's own name), the shape of ``x`` (else ``dy``) and, for a conv, the weight's
    shape, the stride and the algorithms of its directions."""
    kw = getattr(launch, "keywords", {}) or {}
    func = getattr(launch, "func", None)
    name = (names or {}).get(id(func)) or getattr(func, "__name__", None) or type(launch).__name__
    main = next((kw[k] for k in ("x", "dy") if hasattr(kw.get(k), "shape")), None)
    label = f"{name} {tuple(main.shape) if main is not None else ''}".rstrip()
    if hasattr(kw.get("w"), "shape") and name.startswith("conv"):
        algos = "/".join(str(kw[k]) for k in ("algo", "algo_dgrad", "algo_wgrad") if k in kw)
        label += f" w{tuple(kw['w'].shape)} s{kw.get('s', 1)}" + (f" {algos}" if algos else "")
    return label


class _Timed:
    """A launch that appends its duration (seconds) to ``times[key]``, one entry per call."""

    def __init__(self, launch, key: int, times: dict[int, list[float]]):
        self.launch, self.key, self.times = launch, key, times

    def __call__(self) -> None:
        t0 = time.perf_counter()
        self.launch()
        self.times[self.key].append(time.perf_counter() - t0)


def instrument(task) -> tuple[dict[int, list[float]], dict[int, str]]:
    """Wrap every launch of ``task``'s captured step graphs so that each call records its seconds;
    returns the per-key time lists (filled as steps run: clear them between blocks) and each key's
    :func:`launch_label`. The graphs of the bench's own task are changed in place, each graph once
    and for good (the calls compute what they did). Raises ValueError for a task instrumented
    before."""
    times: dict[int, list[float]] = collections.defaultdict(list)
    labels: dict[int, str] = {}
    names = _kernel_names()
    r = task.runner
    seen: set[int] = set()
    for graph in (g for gs in list(r._pre.values()) + list(r._post.values()) for g in gs):
        if id(graph) in seen:
            continue
        seen.add(id(graph))
        wrapped = []
        for launch in graph.launches:
            if isinstance(launch, _Timed):
                raise ValueError("the task's graphs are instrumented already")
            key = len(labels)
            labels[key] = launch_label(launch, names)
            wrapped.append(_Timed(launch, key, times))
        object.__setattr__(graph, "launches", tuple(wrapped))  # the graph's own attribute (a frozen dataclass)
    return times, labels


def run_blocks(step: Callable[[], object], times: dict[int, list[float]], labels: dict[int, str], *,
               blocks: int, steps: int, one_every: int, probe: Callable[[], float | None],
               far_s: float, threads: Callable[[int], Any]) -> dict[str, Any]:
    """The blocks of the module doc: ``step()`` runs one training step whose instrumented calls
    fill ``times`` (:func:`instrument`), ``probe()`` gives a round trip in seconds or None,
    ``far_s`` the threshold, ``threads(n)`` a context manager holding ``n`` kernel threads.
    Returns ``{"blocks": {side: count}, "step_s": {side: median seconds per step or None},
    "kernels": [{"label", side: median over blocks of seconds per step, or None}]}``."""
    per_side: dict[str, dict[int, list[float]]] = {s: collections.defaultdict(list) for s in SIDES}
    step_s: dict[str, list[float]] = {s: [] for s in SIDES}
    counts = {s: 0 for s in SIDES}

    def block(n: int) -> tuple[dict[int, float], list[float]]:
        with threads(n):
            step()  # untimed, after the switch
            times.clear()
            whole = []
            for _ in range(steps):
                t0 = time.perf_counter()
                step()
                whole.append(time.perf_counter() - t0)
        return {k: sum(v) / steps for k, v in times.items()}, whole

    def add(sides: list[str], per_step: dict[int, float], whole: list[float]) -> None:
        for side in sides:
            counts[side] += 1
            step_s[side] += whole
            for k, v in per_step.items():
                per_side[side][k].append(v)

    for b in range(blocks):
        before = probe()
        per_step, whole = block(2)
        after = probe()
        sides = ["2t"]
        if before is not None and after is not None:
            far = [t > far_s for t in (before, after)]
            if all(far):
                sides.append("far")
            elif not any(far):
                sides.append("close")
        add(sides, per_step, whole)
        if b % one_every == 0:
            add(["1t"], *block(1))
    kernels = [{"label": labels[k], **{s: (statistics.median(per_side[s][k]) if per_side[s].get(k) else None)
                                       for s in SIDES}} for k in sorted(labels)]
    return {"blocks": counts, "step_s": {s: (statistics.median(v) if v else None) for s, v in step_s.items()},
            "kernels": kernels}


def measure(name: str, *, blocks: int, steps: int, one_every: int = 3) -> dict[str, Any]:
    """:func:`run_blocks` on the throughput model ``name`` (a key of
    :data:`bench.models.THROUGHPUT_MODELS`, built as ``bench.throughput`` does), with
    ``"model"`` and ``"batch"`` added. Raises ValueError for counts below 1 and KeyError for an
    unknown model."""
    from threadpoolctl import threadpool_limits

    from bench.models import THROUGHPUT_MODELS
    from bench.scaling import FAR_ROUND_TRIP_S
    from bench.throughput import _Ours, core_round_trip
    from tr_mlir.data import load_dataset

    if blocks < 1 or steps < 1 or one_every < 1:
        raise ValueError(f"expected blocks, steps and one_every of at least 1, got {blocks}, {steps}, {one_every}")
    m = THROUGHPUT_MODELS[name]
    data = load_dataset("synthetic", input_shape=m.input_shape, num_classes=m.num_classes, train_size=m.batch,
                        val_size=1, seed=0)
    ours = _Ours(m, data.train_x[:m.batch], data.train_y[:m.batch], m.fuse)
    times, labels = instrument(ours.task)
    res = run_blocks(ours.step, times, labels, blocks=blocks, steps=steps, one_every=one_every,
                     probe=core_round_trip, far_s=FAR_ROUND_TRIP_S, threads=lambda n: threadpool_limits(limits=n))
    return {"model": name, "batch": m.batch, **res}


def report(res: dict[str, Any], top: int) -> str:
    """The text table of a :func:`measure` result (seconds in, milliseconds out): the ``top``
    kernel calls that lose the most on two threads (calls of one label summed), and the totals."""
    agg: dict[str, dict[str, float | None]] = {}
    for k in res["kernels"]:
        row = agg.setdefault(k["label"], {s: None for s in SIDES})
        for s in SIDES:
            if k[s] is not None:
                row[s] = (row[s] or 0.0) + k[s]

    def lost(row: dict[str, float | None], side: str) -> float | None:
        return None if row[side] is None or row["1t"] is None else row[side] - row["1t"] / 2

    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v * 1e3:.3f}"

    b, st = res["blocks"], res["step_s"]
    lines = [f"{res['model']} (batch {res['batch']}): blocks 1t {b['1t']}, 2t {b['2t']} (close {b['close']}, "
             f"far {b['far']}); median step ms 1t {ms(st['1t'])}, 2t {ms(st['2t'])}, close {ms(st['close'])}, "
             f"far {ms(st['far'])}"]
    totals = {s: sum(r[s] or 0.0 for r in agg.values()) if any(r[s] is not None for r in agg.values()) else None
              for s in SIDES}
    lines.append(f"kernel sums ms per step: 1t {ms(totals['1t'])}, 2t {ms(totals['2t'])}, close {ms(totals['close'])}, "
                 f"far {ms(totals['far'])}")
    lines.append(f"{'lost 2t':>8} {'close':>8} {'far':>8} {'1t':>8} {'2t':>8} {'close':>8} {'far':>8}  kernel call")

    def key(item: tuple[str, dict[str, float | None]]) -> float:
        return -max(v for v in (*(lost(item[1], s) for s in SIDES[1:]), float("-inf")) if v is not None)

    for label, row in sorted(agg.items(), key=key)[:top]:
        lines.append(" ".join(f"{ms(lost(row, s)):>8}" for s in SIDES[1:]) + " "
                     + " ".join(f"{ms(row[s]):>8}" for s in SIDES) + f"  {label}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """The command line (module doc); returns the exit status: 0, 1 when the ``--json`` file cannot
    be written after measuring (the report is printed first), 2 for usage errors (printed by
    argparse before anything is built), 130 on Ctrl-C."""
    from bench.models import THROUGHPUT_MODELS

    ap = argparse.ArgumentParser(prog="python -m bench.kernel_scaling", description=__doc__.splitlines()[0],
                                 allow_abbrev=False)
    ap.add_argument("model", choices=sorted(THROUGHPUT_MODELS))
    ap.add_argument("--blocks", type=int, default=30, help="2-thread blocks (default 30)")
    ap.add_argument("--steps", type=int, default=10, help="timed steps per block (default 10)")
    ap.add_argument("--one-every", type=int, default=3,
                    help="a 1-thread block after the first 2-thread block and every N-th after it (default 3)")
    ap.add_argument("--top", type=int, default=25, help="kernel calls to list (default 25)")
    ap.add_argument("--json", help="also write the measurements to this file (after the report)")
    ap.add_argument("--keep-blas-env", action="store_true",
                    help="do not unset OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE for the run")
    args = ap.parse_args(argv)
    for flag in ("blocks", "steps", "one_every", "top"):
        if getattr(args, flag) < 1:
            ap.error(f"--{flag.replace('_', '-')} must be at least 1")
    folder = None
    if args.json is not None:
        folder = os.path.dirname(os.path.abspath(args.json)) if args.json else None
        if folder is None or os.path.isdir(args.json):
            ap.error(f"--json must name a file, got {args.json!r}")
        try:  # the folder must take a file now; the target itself is not touched until the end
            with tempfile.TemporaryFile(dir=folder):
                pass
        except OSError as e:
            ap.error(f"cannot write --json {args.json!r}: {e.strerror or e}")
    try:
        res = measure(args.model, blocks=args.blocks, steps=args.steps, one_every=args.one_every)
    except KeyboardInterrupt:
        print("python -m bench.kernel_scaling: interrupted; nothing written", file=sys.stderr)
        return 130
    print(report(res, args.top), end="")
    if args.json is not None:
        try:
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=".kernel_scaling-", suffix=".json")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(res, f, indent=1)
            os.replace(tmp, args.json)
        except OSError as e:
            print(f"python -m bench.kernel_scaling: cannot write --json {args.json}: {e.strerror or e}",
                  file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    from bench.__main__ import reexec_without_blas_env

    reexec_without_blas_env(sys.argv[1:], "bench.kernel_scaling")
    sys.exit(main(sys.argv[1:]))
