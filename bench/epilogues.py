"""``python -m bench.epilogues``: the fused epilogues (batch norm, FC+ReLU, residual gradients) against the unfused kernels.

Several measurements, each interleaved (the two sides alternate, the order flipping every round) with
medians and the load average printed, on ``--threads`` kernel threads (default 2):

* ``kernels``: per CIFAR ResNet-18 activation shape at batch 64, the unfused sequence (``bn2d_fwd``
  + ``relu_fwd``; + ``add_fwd`` at a join; ``relu_bwd[_from_output]`` + ``bn2d_bwd``) against the
  fused kernel (``bn2d_relu_*``, ``bn2d_add_relu_*``), ``--repeats`` rounds;
* ``step``: whole training steps of CIFAR ResNet-18 fused (bench.throughput's model) compiled with
  the epilogues off (``passes/_block_plans.py`` ``EPILOGUES = False``, "before") and on
  ("after"): ``--rounds`` rounds of ``--steps`` steps each; the losses must agree to the bit;
* ``fc-relu-kernels``: the seed's MLP (batch 200) FC+ReLU pairs, the unfused sequence (``fc_fwd`` +
  ``relu_fwd``; ``fc_bwd`` + ``relu_bwd_from_output``) against the GEMM epilogue (``fc_relu_fwd``,
  ``relu_fc_bwd``) and against PyTorch eager's kernels for the same pair (``relu(linear)``; the
  ``mm``, ``mm``, ``sum`` and ``threshold_backward`` its autograd runs), ``--repeats`` rounds;
* ``fc-relu-step``: whole training steps of the MLP compiled without ``memplan-fuse-fc-relu``
  ("before"), with it ("after") and PyTorch eager's step (bench.throughput's), three sides
  interleaved; the tr-mlir losses must agree to the bit;
* ``bn-stats``: what computing BN's statistics in the pass that writes the conv output could
  save at most, per CIFAR ResNet-18 activation shape (one thread, the compiled statistics kernel
  of ``lowering/cpu/_cnorm.py`` called directly): the output written whole and then the
  statistics over it (today's sequence: the conv, then BN's first pass), against each im2col
  chunk (``lowering/cpu/conv.py`` ``chunk_images``) written and its statistics taken at once,
  while it is in cache (the best a fused epilogue can do; the write stands in for the GEMM's).
  The difference is the bound; the statistics' own arithmetic stays in both;
* ``bn-stats-kernels``: per ResNet-18 Winograd conv, the conv alone, writing its output's BN
  statistics in its output transform (``memplan-fuse-bn-stats``), and followed by the BN's own
  statistics pass, with PyTorch eager's ``conv2d`` of the same operands beside them;
* ``bn-stats-step``: whole steps of CIFAR ResNet-18 fused compiled without ``memplan-fuse-bn-stats``
  ("before"), with it ("after") and PyTorch eager's, interleaved (the losses agree to rounding);
* ``grad-acc-step``: the same without ``memplan-fuse-grad-acc`` (``Task(fuse_grad_acc=False)``,
  "before") and with it; the tr-mlir losses must agree to the bit.

Each prints the load average and the steal time (:mod:`bench.cpu_time`) around it.
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


MLP_FORWARD = ((200, 784, 1024), (200, 1024, 512), (200, 512, 256))
"""The seed's MLP's FC -> ReLU pairs at batch 200, (N, F, O): fused in the forward."""
MLP_BACKWARD = ((200, 1024, 512), (200, 512, 256), (200, 256, 10))
"""Its ReLU -> FC pairs (the FC's input a ReLU's output), (N, F, O): fused in the backward."""


def fc_relu_pairs() -> dict[str, tuple]:
    """``{case: (unfused call, fused call, PyTorch call)}`` on random fp32 arrays, one per pair of
    :data:`MLP_FORWARD` and :data:`MLP_BACKWARD`."""
    import torch
    import torch.nn.functional as F

    from tr_mlir.lowering.cpu import KERNELS

    def bound(name, **arrays):
        spec = KERNELS[name]
        ws = {k: np.zeros(sh, d) for k, (sh, d) in spec.workspace_shapes(arrays).items()}
        return spec.bind({**arrays, **ws}, {})

    rng = np.random.default_rng(0)
    out = {}
    for n, f, o in MLP_FORWARD:
        x = rng.standard_normal((n, 1, 1, f)).astype(np.float32)
        w = (rng.standard_normal((o, 1, 1, f)) / np.sqrt(f)).astype(np.float32)
        b = rng.standard_normal(o).astype(np.float32)
        t, y = np.empty((n, 1, 1, o), np.float32), np.empty((n, 1, 1, o), np.float32)
        pair = (bound("fc_fwd", x=x, w=w, b=b, y=t), bound("relu_fwd", x=t, y=y))
        fused = bound("fc_relu_fwd", x=x, w=w, b=b, y=y)
        tx, tw, tb = torch.from_numpy(x.reshape(n, f)), torch.from_numpy(w.reshape(o, f)), torch.from_numpy(b)
        out[f"fwd fc+relu {f}->{o}"] = (lambda p=pair: (p[0](), p[1]()), fused,
                                        lambda tx=tx, tw=tw, tb=tb: torch.relu(F.linear(tx, tw, tb)))
    for n, f, o in MLP_BACKWARD:
        x = np.maximum(rng.standard_normal((n, 1, 1, f)), 0).astype(np.float32)
        w = (rng.standard_normal((o, 1, 1, f)) / np.sqrt(f)).astype(np.float32)
        dy = rng.standard_normal((n, 1, 1, o)).astype(np.float32)
        dw, db = np.empty((o, 1, 1, f), np.float32), np.empty(o, np.float32)
        g, dx = np.empty_like(x), np.empty_like(x)
        pair = (bound("fc_bwd", dy=dy, w=w, x=x, dw=dw, db=db, dx=g), bound("relu_bwd_from_output", dy=g, y=x, dx=dx))
        fused = bound("relu_fc_bwd", dy=dy, w=w, x=x, dw=dw, db=db, dx=dx)
        tdy, tw, tx = torch.from_numpy(dy.reshape(n, o)), torch.from_numpy(w.reshape(o, f)), torch.from_numpy(x.reshape(n, f))

        def torch_bwd(tdy=tdy, tw=tw, tx=tx):
            tdy.t().mm(tx), tdy.sum(0)
            torch.ops.aten.threshold_backward(tdy.mm(tw), tx, 0)

        out[f"bwd relu+fc {f}->{o}"] = (lambda p=pair: (p[0](), p[1]()), fused, torch_bwd)
    return out


def _interleaved_n(fns, rounds: int) -> list[float]:
    """Median seconds of each of ``fns`` over ``rounds`` rounds, the order rotating every round."""
    times: list[list[float]] = [[] for _ in fns]
    for r in range(rounds):
        for i in [(r + k) % len(fns) for k in range(len(fns))]:
            t0 = time.perf_counter()
            fns[i]()
            times[i].append(time.perf_counter() - t0)
    return [statistics.median(t) for t in times]


def fc_relu_kernels(repeats: int) -> None:
    from bench.cpu_time import describe, quietness, sample

    before = sample()
    print(f"load {os.getloadavg()[0]:.2f}")
    print(f"{'case':<24} {'unfused ms':>10} {'fused ms':>9} {'torch ms':>9} {'fused/unfused':>13} "
          f"{'torch/fused':>11}")
    total = [0.0, 0.0, 0.0]
    for case, fns in fc_relu_pairs().items():
        for fn in fns:
            fn()
        ts = _interleaved_n(fns, repeats)
        total = [a + b for a, b in zip(total, ts)]
        print(f"{case:<24} {ts[0] * 1e3:>10.3f} {ts[1] * 1e3:>9.3f} {ts[2] * 1e3:>9.3f} {ts[0] / ts[1]:>12.3f}x "
              f"{ts[2] / ts[1]:>10.3f}x")
    print(f"{'all six':<24} {total[0] * 1e3:>10.3f} {total[1] * 1e3:>9.3f} {total[2] * 1e3:>9.3f} "
          f"{total[0] / total[1]:>12.3f}x {total[2] / total[1]:>10.3f}x")
    print(f"load {os.getloadavg()[0]:.2f}; {describe(quietness(before, sample()))}")


def _steps_before_after(model: str, before: dict, rounds: int, steps: int) -> tuple[dict, dict]:
    """Whole training steps of bench.throughput's ``model`` compiled with the options ``before``,
    with the defaults ("after"), and PyTorch eager's step, three sides interleaved (the order
    rotating): ``({side: median seconds per step}, {side: per-round seconds}, {side: losses})``,
    printing the load and the steal time around it."""
    from bench.cpu_time import describe, quietness, sample
    from bench.models import THROUGHPUT_MODELS
    from bench.throughput import _Ours, _Torch
    from tr_mlir.data import load_dataset

    m = THROUGHPUT_MODELS[model]
    data = load_dataset("synthetic", input_shape=m.input_shape, num_classes=m.num_classes, train_size=m.batch,
                        val_size=1)
    x, y = data.train_x[:m.batch], data.train_y[:m.batch]
    sides = {"before": _Ours(m, x, y, m.fuse, **before), "after": _Ours(m, x, y, m.fuse)}
    sides["torch"] = _Torch(m, x, y)
    for side in sides.values():
        side.step(), side.step()
    losses: dict[str, list[float]] = {k: [] for k in sides}

    def steps_of(side):
        return lambda: losses[side].extend(sides[side].step() for _ in range(steps))

    names = list(sides)
    start = sample()
    print(f"load {os.getloadavg()[0]:.2f}")
    per: dict[str, list[float]] = {k: [] for k in names}
    for _ in range(rounds):
        for k, t in zip(names, _interleaved_n([steps_of(k) for k in names], 3)):
            per[k].append(t / steps)
    print(f"load {os.getloadavg()[0]:.2f}; {describe(quietness(start, sample()))}")
    return {k: statistics.median(v) for k, v in per.items()}, per, losses


def _print_steps(title: str, med: dict, per: dict, rounds: int) -> None:
    print(f"{title}: step ms before {med['before'] * 1e3:.2f}, after {med['after'] * 1e3:.2f}, "
          f"PyTorch {med['torch'] * 1e3:.2f} (medians of {rounds} rounds); before / after "
          f"{med['before'] / med['after']:.3f}, PyTorch / before {med['torch'] / med['before']:.3f}, "
          f"PyTorch / after {med['torch'] / med['after']:.3f}; rounds before / after: "
          f"{', '.join(f'{b / a:.3f}' for b, a in zip(per['before'], per['after']))}")


def fc_relu_step(rounds: int, steps: int) -> None:
    med, per, losses = _steps_before_after("mlp", {"fuse_fc_relu": False}, rounds, steps)
    _print_steps("MLP batch 200", med, per, rounds)
    print(f"tr-mlir losses bit-identical: {losses['before'] == losses['after']}")


def bn_stats_step(rounds: int, steps: int) -> None:
    """CIFAR ResNet-18 fused (batch 64) without ``memplan-fuse-bn-stats`` ("before"), with it
    ("after") and PyTorch, interleaved; the losses agree to fp32 rounding, not to the bit."""
    med, per, losses = _steps_before_after("resnet18_cifar", {"fuse_bn_stats": False}, rounds, steps)
    _print_steps("ResNet-18 CIFAR batch 64", med, per, rounds)
    diffs = [abs(a - b) / max(abs(b), 1e-30) for a, b in zip(losses["after"], losses["before"])]
    print(f"tr-mlir losses after / before, relative difference: first timed step {diffs[0]:.1e}, largest "
          f"{max(diffs):.1e} (each side trains on one batch over and over: rounding differences grow "
          f"as the loss falls, as between the Winograd and im2col algorithms)")


def grad_acc_step(rounds: int, steps: int) -> None:
    """CIFAR ResNet-18 fused (batch 64) without ``memplan-fuse-grad-acc`` ("before"), with it
    ("after") and PyTorch, interleaved; the tr-mlir losses agree to the bit."""
    med, per, losses = _steps_before_after("resnet18_cifar", {"fuse_grad_acc": False}, rounds, steps)
    _print_steps("ResNet-18 CIFAR batch 64", med, per, rounds)
    print(f"tr-mlir losses bit-identical: {losses['before'] == losses['after']}")


def bn_stats_kernels(repeats: int) -> None:
    """Per CIFAR ResNet-18 Winograd conv (3x3, stride 1, C -> C at batch 64, the cost rule's
    variant), median ms over ``repeats`` interleaved rounds of: the conv alone, the conv writing
    its output's BN statistics (``conv_fwd`` with ``sum`` / ``sq_sum``: in the output transform),
    the conv then the BN's own statistics pass (``lowering/cpu/_cnorm.py``), and PyTorch eager's
    ``conv2d`` of the same operands (NCHW, its layout; timed after ours, not interleaved with them)
    with its ratio to the conv alone; load and steal around."""
    import torch

    from bench.cpu_time import describe, quietness, sample
    from tr_mlir.lowering.cpu import KERNELS, _cnorm

    variants = {32: "winograd_4x4_3x3", 16: "winograd_4x4_3x3", 8: "winograd_2x2_3x3", 4: "winograd_2x2_3x3"}
    start = sample()
    print(f"load {os.getloadavg()[0]:.2f}")
    print(f"{'shape':<16} {'variant':<17} {'conv ms':>8} {'+stats in':>9} {'+BN pass':>9} {'saved ms':>8} "
          f"{'torch conv':>10} {'torch / ours':>12}")
    rng = np.random.default_rng(0)
    spec = KERNELS["conv_fwd"]
    for n, h, w, c in SHAPES:
        algo = variants[h]
        x = rng.standard_normal((n, h, w, c)).astype(np.float32)
        wt = (rng.standard_normal((c, 3, 3, c)) / np.sqrt(9 * c)).astype(np.float32)
        y = np.empty_like(x)
        s, q = np.empty(c, np.float32), np.empty(c, np.float32)
        params = {"k": 3, "s": 1, "p": 1, "groups": 1, "algo": algo}
        ws = {k: np.zeros(sh, dt) for k, (sh, dt) in spec.workspace_shapes({"x": x, "w": wt, "y": y}, **params).items()}
        plain = spec.bind({"x": x, "w": wt, "y": y, **ws}, params)
        fused = spec.bind({"x": x, "w": wt, "y": y, "sum": s, "sq_sum": q, **ws}, {**params, "bn_stats": True})
        xt, wtt = torch.from_numpy(x.transpose(0, 3, 1, 2).copy()), torch.from_numpy(wt.transpose(0, 3, 1, 2).copy())

        def then_pass() -> None:
            plain()
            _cnorm.batch_stats(y.reshape(-1, c))

        def torch_conv() -> None:
            torch.nn.functional.conv2d(xt, wtt, padding=1)

        ours = [plain, fused, then_pass]
        for f in (*ours, torch_conv):
            f()
        # tr-mlir's calls interleaved among themselves, PyTorch's after them: its OpenMP threads
        # spin on after a call and would slow whichever tr-mlir call came next
        tp, tf, tb = (t * 1e3 for t in _interleaved_n(ours, repeats))
        tc = _interleaved_n([torch_conv], repeats)[0] * 1e3
        print(f"{'x'.join(map(str, (n, h, w, c))):<16} {algo:<17} {tp:>8.2f} {tf - tp:>+9.3f} {tb - tp:>+9.3f} "
              f"{tb - tf:>8.3f} {tc:>10.2f} {tc / tp:>11.2f}x")
    print(f"load {os.getloadavg()[0]:.2f}; {describe(quietness(start, sample()))}")


def bn_stats_sides(shape: tuple[int, ...]) -> tuple:
    """``(separate, per chunk, chunk images)`` for activation ``shape`` (N, H, W, C): the two calls
    the ``bn-stats`` measurement compares (module doc), on random fp32 arrays."""
    from tr_mlir.lowering.cpu import _cnorm
    from tr_mlir.lowering.cpu.conv import chunk_images, conv_geom

    n, h, w, c = shape
    per = chunk_images(conv_geom(shape, (c, 3, 3, c), 3, 1, 1, 1))
    rng = np.random.default_rng(0)
    src = rng.standard_normal(shape).astype(np.float32)
    y = np.empty_like(src)  # the conv output
    y2, s2 = y.reshape(-1, c), src.reshape(-1, c)
    pivot = np.ascontiguousarray(s2[0])
    sums = np.zeros((2, c), np.float64)
    fn = _cnorm.function("bn_stats", c)
    ptr = {id(a): a.__array_interface__["data"][0] for a in (y2, pivot, sums)}
    rows = per * h * w

    def stats(r0: int, r1: int) -> None:
        fn(ptr[id(y2)], ptr[id(pivot)], ptr[id(sums)], ptr[id(sums)] + 8 * c, r0, r1)

    spans = [(r0, min(r0 + rows, y2.shape[0])) for r0 in range(0, y2.shape[0], rows)]

    def separate() -> None:  # the same calls as chunked(), in two passes over the whole output
        for r0, r1 in spans:
            np.copyto(y2[r0:r1], s2[r0:r1])
        for r0, r1 in spans:
            stats(r0, r1)

    def chunked() -> None:
        for r0, r1 in spans:
            np.copyto(y2[r0:r1], s2[r0:r1])
            stats(r0, r1)

    return separate, chunked, per


def bn_stats(repeats: int) -> None:
    """Print, per CIFAR ResNet-18 activation shape (N, H, W, C), fp32, the median ms of the two
    ``bn_stats_sides`` calls over ``repeats`` interleaved rounds and their difference, the most a
    BN-statistics epilogue in the conv could save there (module doc); load and steal around it."""
    from bench.cpu_time import describe, quietness, sample

    from tr_mlir.lowering.cpu import _cnorm

    if not _cnorm.usable(np.zeros(1, np.float32)):
        print("bn-stats times the compiled statistics kernel: no usable C compiler here (or TR_MLIR_CC=0)")
        return
    before = sample()
    print(f"load {os.getloadavg()[0]:.2f}")
    print(f"{'shape':<16} {'chunk images':>12} {'separate ms':>11} {'in-cache ms':>11} {'bound ms':>8} {'bound':>6}")
    for shape in SHAPES:
        separate, chunked, per = bn_stats_sides(shape)
        separate(), chunked()
        ts, tc = _interleaved(separate, chunked, repeats)
        print(f"{'x'.join(map(str, shape)):<16} {per:>12} {ts * 1e3:>11.3f} {tc * 1e3:>11.3f} "
              f"{(ts - tc) * 1e3:>8.3f} {(ts - tc) / ts:>6.1%}")
    print(f"load {os.getloadavg()[0]:.2f}; {describe(quietness(before, sample()))}")


def main(argv: list[str] | None = None) -> int:
    from threadpoolctl import threadpool_limits

    ap = argparse.ArgumentParser(prog="python -m bench.epilogues", description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("kernels", "step", "fc-relu-kernels", "fc-relu-step", "bn-stats",
                                     "bn-stats-kernels", "bn-stats-step", "grad-acc-step"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=41,
                    help="kernels, fc-relu-kernels, bn-stats, bn-stats-kernels: rounds per case")
    ap.add_argument("--rounds", type=int, default=9,
                    help="step, fc-relu-step, bn-stats-step, grad-acc-step: rounds (each every side)")
    ap.add_argument("--steps", type=int, default=2,
                    help="step, fc-relu-step, bn-stats-step, grad-acc-step: steps per side per round")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)  # torch's own pool (threadpoolctl limits OpenBLAS)
    with threadpool_limits(args.threads):
        {"kernels": lambda: kernels(args.repeats), "step": lambda: step(args.rounds, args.steps),
         "fc-relu-kernels": lambda: fc_relu_kernels(args.repeats),
         "fc-relu-step": lambda: fc_relu_step(args.rounds, args.steps),
         "bn-stats": lambda: bn_stats(args.repeats), "bn-stats-kernels": lambda: bn_stats_kernels(args.repeats),
         "bn-stats-step": lambda: bn_stats_step(args.rounds, args.steps),
         "grad-acc-step": lambda: grad_acc_step(args.rounds, args.steps)}[args.what]()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
