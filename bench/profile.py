"""``python -m bench.profile MODEL``: where a tr-mlir training step spends its time.

Builds the throughput model ``MODEL`` (:data:`bench.models.THROUGHPUT_MODELS`: ``mlp``,
``lenet5``, ``resnet18_cifar``) as ``bench.throughput`` does, warms it up, then times every
captured kernel call of one training step on its own (the best of ``--repeat`` calls, so the
table is the kernels' cost without Python or load noise) and prints the conv algorithm mix (convs
per direction and algorithm, :func:`algorithm_mix`), the time per kernel and the slowest calls
with their shapes. ``--pyinstrument`` also records whole steps with pyinstrument
(``pip install pyinstrument``; not a dependency of tr-mlir) and prints its call tree.
``--threads`` sets the BLAS / kernel thread count (default 2).
"""

from __future__ import annotations

import argparse
import collections
import sys
import time


def timed_launches(task, repeat: int):
    """``(best seconds, launch)`` for every kernel call of one training step of ``task`` (slot A),
    each call run ``repeat`` times on its own. The calls really run: the task's parameters and
    statistics move by one step (and repeats of a kernel that writes over its input time it on its
    own output), so profile after the measurements that need the task untouched."""
    from tr_mlir.lowering.cpu import begin_replay, end_replay

    r = task.runner
    graphs = r._pre[(0, "a")] + r._post[(0, "a", False)]
    for launch in (g for graph in graphs for g in graph.launches):
        best = float("inf")
        try:
            begin_replay()  # each launch as inside a replay (the thread count and switches pinned)
            for _ in range(repeat):
                t0 = time.perf_counter()
                launch()
                best = min(best, time.perf_counter() - t0)
        finally:
            end_replay()
        yield best, launch


def kernel_table(task, repeat: int) -> list[tuple[float, str, dict]]:
    """``(best seconds, kernel name, array shapes)`` for every kernel call of one training step."""
    rows = []
    for best, launch in timed_launches(task, repeat):
        kw = getattr(launch, "keywords", {})
        shapes = {k: tuple(v.shape) for k, v in kw.items() if hasattr(v, "shape") and v.size > 1
                  and k not in ("col", "wbuf", "ybuf", "xbuf", "tmp", "eq", "acc")}
        rows.append((best, getattr(getattr(launch, "func", None), "__name__", repr(launch)), shapes))
    return rows


FAMILY_OF_MODULE = {"conv": "conv", "norm": "batch norm", "activation": "activation", "dense": "fc / add / reshape",
                    "pool": "pooling", "loss": "loss", "optim": "optimizer", "ranges": "ranges (clear, copy, checks)",
                    "dropout": "dropout"}
"""Kernel family of a CPU kernel, from the module of ``tr_mlir.lowering.cpu`` that defines it."""

CONV_ALGO_PARAMS = ("algo", "algo_dgrad", "algo_wgrad")
"""The static params of the conv kernels that carry the compiler's algorithm choice, per direction."""


def kernel_family(fn) -> str:
    """The family of a kernel function (:data:`FAMILY_OF_MODULE`; its module's last name otherwise)."""
    module = getattr(fn, "__module__", "") or ""
    last = module.rsplit(".", 1)[-1]
    return FAMILY_OF_MODULE.get(last, last or "other")


def step_breakdown(task, repeat: int = 1) -> dict:
    """Where one training step of ``task`` goes: ``families`` maps each kernel family to its
    fraction of the summed kernel time (each launch timed on its own, best of ``repeat``: the
    kernels' cost without Python dispatch, so the fractions add up to 1); ``conv_algorithms``
    counts the conv launches per direction and algorithm, read from their static params
    (:data:`CONV_ALGO_PARAMS`; ``"auto"`` where the kernel chooses at run time)."""
    per: dict[str, float] = collections.defaultdict(float)
    algos: dict[str, dict[str, int]] = collections.defaultdict(lambda: collections.defaultdict(int))
    for best, launch in timed_launches(task, repeat):
        fn = getattr(launch, "func", launch)
        family = kernel_family(fn)
        per[family] += best
        if family == "conv":
            kw = getattr(launch, "keywords", {})
            name = getattr(fn, "__name__", "conv")
            if name.endswith(("_fwd", "_inf")):
                directions = {"fwd": "algo"}
            else:  # conv_bwd_first_layer (dx None) computes no input gradient
                directions = {"wgrad": "algo_wgrad", **({"dgrad": "algo_dgrad"} if kw.get("dx") is not None else {})}
            for d, param in directions.items():
                algos[d][str(kw.get(param, "auto"))] += 1
    total = sum(per.values()) or 1.0
    return {"families": {k: v / total for k, v in sorted(per.items(), key=lambda kv: -kv[1])},
            "kernel_s": total, "conv_algorithms": {d: dict(v) for d, v in algos.items()}}


def algorithm_mix(task) -> str:
    """The compiled model's conv algorithm mix, convs per direction and algorithm as
    ``memplan-select-conv-algo`` chose them (:func:`tr_mlir.memplan_summary.conv_algorithms`)."""
    from tr_mlir.lowering.executable import find_program
    from tr_mlir.memplan_summary import conv_algorithms, format_conv_algorithms

    return format_conv_algorithms(conv_algorithms(find_program(task.module)[1]))


def main(argv: list[str] | None = None) -> int:
    from threadpoolctl import threadpool_limits

    from bench.models import THROUGHPUT_MODELS
    from bench.throughput import _Ours
    from tr_mlir.data import load_dataset

    ap = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__.splitlines()[0])
    ap.add_argument("model", choices=sorted(THROUGHPUT_MODELS))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3, help="calls per kernel (the best counts)")
    ap.add_argument("--top", type=int, default=15, help="slowest calls to list")
    ap.add_argument("--pyinstrument", type=int, default=0, metavar="STEPS",
                    help="also profile STEPS whole steps with pyinstrument")
    args = ap.parse_args(argv)
    m = THROUGHPUT_MODELS[args.model]
    with threadpool_limits(args.threads):
        data = load_dataset("synthetic", input_shape=m.input_shape, num_classes=m.num_classes,
                            train_size=m.batch, val_size=1)
        ours = _Ours(m, data.train_x[:m.batch], data.train_y[:m.batch], m.fuse)
        ours.step()
        ours.step()
        t0 = time.perf_counter()
        ours.step()
        step = time.perf_counter() - t0
        rows = kernel_table(ours.task, args.repeat)
        total = sum(r[0] for r in rows)
        per = collections.defaultdict(lambda: [0, 0.0])
        for t, name, _ in rows:
            per[name][0] += 1
            per[name][1] += t
        print(f"{args.model}, batch {m.batch}, {args.threads} threads: one step {step * 1e3:.1f} ms; "
              f"{len(rows)} kernel calls, best-of-{args.repeat} sum {total * 1e3:.1f} ms")
        print(f"conv algorithms (convs per direction): {algorithm_mix(ours.task)}")
        print(f"{'kernel':<28} {'calls':>5} {'ms':>9} {'share':>6}")
        for name, (n, t) in sorted(per.items(), key=lambda kv: -kv[1][1]):
            print(f"{name:<28} {n:>5} {t * 1e3:>9.2f} {100 * t / total:>5.1f}%")
        print(f"\nslowest {args.top} calls:")
        for t, name, shapes in sorted(rows, key=lambda r: -r[0])[:args.top]:
            print(f"{t * 1e3:8.2f} ms  {name}  {shapes}")
        if args.pyinstrument:
            try:
                from pyinstrument import Profiler
            except ImportError:
                print("pyinstrument is not installed (pip install pyinstrument)", file=sys.stderr)
                return 1
            prof = Profiler(interval=0.0005)
            prof.start()
            for _ in range(args.pyinstrument):
                ours.step()
            prof.stop()
            print(prof.output_text(unicode=False, color=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
