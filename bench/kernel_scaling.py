"""``python -m bench.kernel_scaling MODEL``: which kernels of a tr-mlir training step lose on two
threads, and how much more with the two cores far apart.

``bench.scaling`` gives the whole step's 1 -> 2 thread speed-up; this says where it goes. Every
kernel call of the step is timed inside real steps (not alone, as ``bench.profile`` does: what a
kernel costs on two threads depends on which core last wrote its operands). Blocks of ``--steps``
steps run on 2 threads, each between two probes of the core-to-core round trip
(:func:`bench.throughput.core_round_trip`); a block whose two probes are both at most
:data:`bench.scaling.FAR_ROUND_TRIP_S` counts as *close*, both above it as *far*, others are
dropped. Every ``--one-every``-th block is followed by a block on 1 thread. Per kernel call (its
kernel name, the shape of its main operand and, for convs, the algorithms) the table gives the
median time per step on 1 thread, on 2 close and on 2 far, and what the 2-thread time loses
against a perfect split, ``t2 - t1 / 2`` (ms per step), sorted by the larger loss. The 2026-12-07
analysis of LeNet-5's slow mode in ``bench/README.md`` ("Where each thread's data lives") was made
with a scratch version of this.

Run from the repository root (``threadpoolctl`` from the test extra)::

    python -m bench.kernel_scaling lenet5 --blocks 100 --steps 30
    python -m bench.kernel_scaling resnet18_cifar --blocks 20 --steps 2 --json /tmp/r18.json

Usage errors (an unknown model, counts below 1, a ``--json`` path that cannot be written) exit
with status 2 before anything is built. As ``python -m bench``, it re-executes itself once without
``OPENBLAS_CORETYPE`` / ``OPENBLAS_L2_SIZE``.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import time
from typing import Any

SIDES = ("1t", "close", "far")
"""The columns of the table: one thread, two threads with the cores close, two with them far."""


def launch_label(launch) -> str:
    """A kernel call's label: its kernel's name, the shape of ``x`` (else ``dy``) and, for a conv,
    the weight's shape, the stride and the algorithms of its directions."""
    kw = getattr(launch, "keywords", {}) or {}
    name = getattr(getattr(launch, "func", None), "__name__", None) or type(launch).__name__
    main = next((kw[k] for k in ("x", "dy") if hasattr(kw.get(k), "shape")), None)
    label = f"{name} {tuple(main.shape) if main is not None else ''}".rstrip()
    if hasattr(kw.get("w"), "shape") and name.startswith("conv"):
        algos = "/".join(str(kw[k]) for k in ("algo", "algo_dgrad", "algo_wgrad") if k in kw)
        label += f" w{tuple(kw['w'].shape)} s{kw.get('s', 1)}" + (f" {algos}" if algos else "")
    return label


class _Timed:
    """A launch that adds its duration to ``times[key]`` (one entry per call)."""

    def __init__(self, launch, key: int, times: dict[int, list[float]]):
        self.launch, self.key, self.times = launch, key, times

    def __call__(self) -> None:
        t0 = time.perf_counter()
        self.launch()
        self.times[self.key].append(time.perf_counter() - t0)


def instrument(task) -> tuple[dict[int, list[float]], dict[int, str]]:
    """Wrap every launch of ``task``'s captured step graphs so that each call records its seconds;
    returns the per-key time lists (filled as steps run) and each key's :func:`launch_label`. The
    graphs of the bench's own task are changed in place (each graph once)."""
    times: dict[int, list[float]] = collections.defaultdict(list)
    labels: dict[int, str] = {}
    r = task.runner
    seen: set[int] = set()
    for graph in (g for gs in list(r._pre.values()) + list(r._post.values()) for g in gs):
        if id(graph) in seen:
            continue
        seen.add(id(graph))
        wrapped = []
        for launch in graph.launches:
            key = len(labels)
            labels[key] = launch_label(launch)
            wrapped.append(_Timed(launch, key, times))
        object.__setattr__(graph, "launches", tuple(wrapped))  # the graph's own attribute (a frozen dataclass)
    return times, labels


def measure(name: str, *, blocks: int, steps: int, one_every: int = 3) -> dict[str, Any]:
    """Per-kernel times of model ``name`` (a key of :data:`bench.models.THROUGHPUT_MODELS`) as the
    module doc says: ``{"model", "batch", "blocks": {side: count}, "step_s": {side: median
    seconds per step}, "kernels": [{"label", side: median seconds per step or None}]}``. Raises
    ValueError for counts below 1 and KeyError for an unknown model."""
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
    per_side: dict[str, dict[int, list[float]]] = {s: collections.defaultdict(list) for s in SIDES}
    step_s: dict[str, list[float]] = {s: [] for s in SIDES}
    counts = {s: 0 for s in SIDES}

    def block(threads: int) -> tuple[dict[int, float], list[float]]:
        with threadpool_limits(limits=threads):
            ours.step()  # untimed, after the switch
            times.clear()
            whole = []
            for _ in range(steps):
                t0 = time.perf_counter()
                ours.step()
                whole.append(time.perf_counter() - t0)
        return {k: sum(v) / steps for k, v in times.items()}, whole

    for b in range(blocks):
        before = core_round_trip()
        per_step, whole = block(2)
        after = core_round_trip()
        side = None
        if before is not None and after is not None:
            far = [t > FAR_ROUND_TRIP_S for t in (before, after)]
            side = "far" if all(far) else ("close" if not any(far) else None)
        if side is not None:
            counts[side] += 1
            step_s[side] += whole
            for k, v in per_step.items():
                per_side[side][k].append(v)
        if b % one_every == 0:
            per_step, whole = block(1)
            counts["1t"] += 1
            step_s["1t"] += whole
            for k, v in per_step.items():
                per_side["1t"][k].append(v)
    kernels = [{"label": labels[k], **{s: (statistics.median(per_side[s][k]) if per_side[s].get(k) else None)
                                       for s in SIDES}} for k in sorted(labels)]
    return {"model": name, "batch": m.batch, "blocks": counts,
            "step_s": {s: (statistics.median(v) if v else None) for s, v in step_s.items()}, "kernels": kernels}


def report(res: dict[str, Any], top: int) -> str:
    """The text table of a :func:`measure` result: the ``top`` kernel calls that lose the most on
    two threads (kernel calls of one label summed), and the totals."""
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
    lines = [f"{res['model']} (batch {res['batch']}): blocks 1t {b['1t']}, close {b['close']}, far {b['far']}; "
             f"median step ms 1t {ms(st['1t'])}, close {ms(st['close'])}, far {ms(st['far'])}"]
    totals = {s: sum(r[s] or 0.0 for r in agg.values()) if any(r[s] is not None for r in agg.values()) else None
              for s in SIDES}
    lines.append(f"kernel sums ms per step: 1t {ms(totals['1t'])}, close {ms(totals['close'])}, far {ms(totals['far'])}")
    lines.append(f"{'lost close':>10} {'lost far':>9} {'1t':>8} {'close':>8} {'far':>8}  kernel call")

    def key(item: tuple[str, dict[str, float | None]]) -> float:
        return -max(v for v in (lost(item[1], "close"), lost(item[1], "far"), float("-inf")) if v is not None)

    for label, row in sorted(agg.items(), key=key)[:top]:
        lines.append(f"{ms(lost(row, 'close')):>10} {ms(lost(row, 'far')):>9} {ms(row['1t']):>8} "
                     f"{ms(row['close']):>8} {ms(row['far']):>8}  {label}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """The command line (module doc); returns the exit status (2 for usage errors, printed by
    argparse, before anything is built)."""
    from bench.models import THROUGHPUT_MODELS

    ap = argparse.ArgumentParser(prog="python -m bench.kernel_scaling", description=__doc__.splitlines()[0])
    ap.add_argument("model", choices=sorted(THROUGHPUT_MODELS))
    ap.add_argument("--blocks", type=int, default=30, help="2-thread blocks (default 30)")
    ap.add_argument("--steps", type=int, default=10, help="timed steps per block (default 10)")
    ap.add_argument("--one-every", type=int, default=3, help="a 1-thread block after every N-th (default 3)")
    ap.add_argument("--top", type=int, default=25, help="kernel calls to list (default 25)")
    ap.add_argument("--json", help="also write the measurements to this file")
    args = ap.parse_args(argv)
    for flag in ("blocks", "steps", "one_every", "top"):
        if getattr(args, flag) < 1:
            ap.error(f"--{flag.replace('_', '-')} must be at least 1")
    out = None
    if args.json:
        try:  # opened before measuring: a path that cannot be written fails now, not after minutes
            out = open(args.json, "w", encoding="utf-8")
        except OSError as e:
            ap.error(f"cannot write --json {args.json}: {e.strerror or e}")
    try:
        res = measure(args.model, blocks=args.blocks, steps=args.steps, one_every=args.one_every)
        if out is not None:
            json.dump(res, out, indent=1)
    finally:
        if out is not None:
            out.close()
    print(report(res, args.top), end="")
    return 0


if __name__ == "__main__":
    from bench.__main__ import reexec_without_blas_env

    reexec_without_blas_env(sys.argv[1:], "bench.kernel_scaling")
    sys.exit(main(sys.argv[1:]))
