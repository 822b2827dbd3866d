"""``python -m bench.epilogues``: the fused batch-norm epilogues against the unfused kernels.

Two measurements, each interleaved (the two sides alternate, the order flipping every round) with
medians and the load average printed, on ``--threads`` kernel threads (default 2):

* ``kernels``: per CIFAR ResNet-18 activation shape at batch 64, the unfused sequence (``bn2d_fwd``
  + ``relu_fwd``; + ``add_fwd`` at a join; ``relu_bwd[_from_output]`` + ``bn2d_bwd``) against the
  fused kernel (``bn2d_relu_*``, ``bn2d_add_relu_*``), ``--repeats`` rounds;
* ``step``: whole training steps of CIFAR ResNet-18 fused (bench.throughput's model) compiled with
  the epilogues off (``passes/_block_plans.py`` ``EPILOGUES = False``, "before") and on
  ("after"): ``--rounds`` rounds of ``--steps`` steps each; the losses must agree to the bit.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

SHAPES = ((64, 32, 32, 64), (64, 16, 16, 128), (64, 8, 8, 256), (64, 4, 4, 512))
"""CIFAR ResNet-18's activation shapes at batch 64 (NHWC)."""


def _interleaved(a, b, rounds: int) -> tuple[float, float]:
    """Median seconds of ``a()`` and ``b()`` over ``rounds`` alternating rounds."""
    ta, tb = [], []
    for r in range(rounds):
        for fn, t in ((a, ta), (b, tb)) if r % 2 == 0 else ((b, tb), (a, ta)):
            t0 = time.perf_counter()
            fn()
            t.append(time.perf_counter() - t0)
    return statistics.median(ta), statistics.median(tb)


def kernel_pairs(shape: tuple[int, ...]) -> dict[str, tuple]:
    """``{case: (unfused call, fused call)}`` on random fp32 arrays of ``shape``."""
    from tr_mlir.lowering.cpu import KERNELS

    def run(name, **arrays):
        KERNELS[name].bind(arrays, {})()

    rng = np.random.default_rng(0)
    c = shape[-1]
    x, dy, skip = (rng.standard_normal(shape).astype(np.float32) for _ in range(3))
    p = {"gamma": np.ones(c, np.float32), "beta": np.zeros(c, np.float32)}
    st = {k: np.zeros(c, np.float32) for k in ("running_mean", "running_var", "save_mean", "save_istd")}
    y, t, dx = (np.empty_like(x) for _ in range(3))
    mask = np.zeros(shape, np.int8)
    bw = {"gamma": p["gamma"], "save_mean": st["save_mean"], "save_istd": st["save_istd"],
          "dgamma": np.zeros(c, np.float32), "dbeta": np.zeros(c, np.float32)}
    run("bn2d_relu_fwd", x=x, y=y, **p, **st)  # saved statistics and y for the backward cases
    return {
        "fwd bn+relu": (lambda: (run("bn2d_fwd", x=x, y=t, **p, **st), run("relu_fwd", x=t, y=y)),
                        lambda: run("bn2d_relu_fwd", x=x, y=y, **p, **st)),
        "fwd bn+add+relu (mask)": (
            lambda: (run("bn2d_fwd", x=x, y=t, **p, **st), run("add_fwd", a=skip, b=t, y=t),
                     run("relu_fwd", x=t, y=y, mask=mask)),
            lambda: run("bn2d_add_relu_fwd", x=x, skip=skip, y=y, mask=mask, **p, **st)),
        "bwd bn+relu (output)": (
            lambda: (run("relu_bwd_from_output", dy=dy, y=y, dx=t), run("bn2d_bwd", dy=t, x=x, dx=dx, **bw)),
            lambda: run("bn2d_relu_bwd_from_output", dy=dy, y=y, x=x, dx=dx, **bw)),
        "bwd bn+add+relu (output)": (
            lambda: (run("relu_bwd_from_output", dy=dy, y=y, dx=t), run("bn2d_bwd", dy=t, x=x, dx=dx, **bw)),
            lambda: run("bn2d_add_relu_bwd_from_output", dy=dy, y=y, x=x, dx=dx, dskip=t, **bw)),
        "bwd bn+add+relu (mask)": (
            lambda: (run("relu_bwd", dy=dy, mask=mask, dx=t), run("bn2d_bwd", dy=t, x=x, dx=dx, **bw)),
            lambda: run("bn2d_add_relu_bwd", dy=dy, mask=mask, x=x, dx=dx, dskip=t, **bw)),
    }


def kernels(repeats: int) -> None:
    print(f"load {os.getloadavg()[0]:.2f}")
    print(f"{'shape':<16} {'case':<26} {'unfused ms':>10} {'fused ms':>9} {'speed-up':>8}")
    for shape in SHAPES:
        for case, (unfused, fused) in kernel_pairs(shape).items():
            unfused(), fused()
            tu, tf = _interleaved(unfused, fused, repeats)
            print(f"{'x'.join(map(str, shape)):<16} {case:<26} {tu * 1e3:>10.2f} {tf * 1e3:>9.2f} {tu / tf:>7.2f}x")
    print(f"load {os.getloadavg()[0]:.2f}")


def step(rounds: int, steps: int) -> None:
    import tr_mlir.passes._block_plans as descriptors
    from bench.models import THROUGHPUT_MODELS
    from bench.throughput import _Ours
    from tr_mlir.data import load_dataset

    m = THROUGHPUT_MODELS["resnet18_cifar"]
    data = load_dataset("synthetic", input_shape=m.input_shape, num_classes=m.num_classes, train_size=m.batch,
                        val_size=1)
    tasks = {}
    for side, on in (("before", False), ("after", True)):
        descriptors.EPILOGUES = on
        tasks[side] = _Ours(m, data.train_x[:m.batch], data.train_y[:m.batch], m.fuse)
        tasks[side].step(), tasks[side].step()
    descriptors.EPILOGUES = True
    losses: dict[str, list[float]] = {"before": [], "after": []}

    def steps_of(side):
        return lambda: losses[side].extend(tasks[side].step() for _ in range(steps))

    print(f"load {os.getloadavg()[0]:.2f}")
    ratios = []
    for _ in range(rounds):
        tb, ta = _interleaved(steps_of("before"), steps_of("after"), 2)
        ratios.append(tb / ta)
    print(f"load {os.getloadavg()[0]:.2f}; ResNet-18 CIFAR fused, batch {m.batch}: step time before / after, "
          f"median of {rounds} rounds: {statistics.median(ratios):.3f} (rounds: "
          f"{', '.join(f'{r:.3f}' for r in ratios)}); losses bit-identical: {losses['before'] == losses['after']}")


def main(argv: list[str] | None = None) -> int:
    from threadpoolctl import threadpool_limits

    ap = argparse.ArgumentParser(prog="python -m bench.epilogues", description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("kernels", "step"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=41, help="kernels: rounds per case")
    ap.add_argument("--rounds", type=int, default=9, help="step: rounds (each both sides, twice)")
    ap.add_argument("--steps", type=int, default=2, help="step: steps per side per round")
    args = ap.parse_args(argv)
    with threadpool_limits(args.threads):
        kernels(args.repeats) if args.what == "kernels" else step(args.rounds, args.steps)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
