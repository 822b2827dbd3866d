"""Section 3's fresh-process measurements: the peak memory of one training step, PyTorch and tr-mlir.

Run by :func:`bench.memory.measure` as ``python -m bench.peak SIDE MODEL BATCH [--fuse]`` (``SIDE``:
``torch`` or ``tr-mlir``) from the repository root; prints one line ``BENCH-RESULT {json}``. Each
side runs in its own fresh process so that nothing of another measurement is resident.

Both sides do the same thing, in the same order:

1. a warm-up on a tiny network (two training steps): loads the libraries and starts the thread
   pools (PyTorch: oneDNN kernels, OpenMP threads; tr-mlir: its compiled C kernels, the C GEMM
   worker, the private OpenBLAS copy), so that their code and thread stacks are not counted;
2. the model's description is built and the batch (random, fixed seed) is made: PyTorch plans the
   unfused fp32 ``arch.model`` that its twin is built from (:func:`bench.models.flat_plan`);
   tr-mlir compiles the memplan program (``tr-compile``, ``reuse`` as given). These Python objects
   stay alive but are built before the baseline, so the compiler's own memory is not counted;
3. ``gc.collect()``, then the peak resident set size is reset (``5`` written to
   ``/proc/self/clear_refs`` sets ``VmHWM`` to the current ``VmRSS``) and the baseline ``VmRSS``
   is read;
4. the trainable object is built (PyTorch: the twin and its ``SGD(lr=0.01, momentum=0.9)``;
   tr-mlir: the :class:`~tr_mlir.lowering.executable.Executable` (arena, views, initialized
   parameters, captured graphs) and its :class:`~tr_mlir.lowering.runner.Runner`, with the scalars
   a :class:`tr_mlir.Task` writes for the same SGD) and two training steps run;
5. ``rss_peak_delta_bytes``: the peak RSS from the reset to the end of the two steps minus the
   baseline (``None`` where the peak cannot be reset); in two parts, ``build_peak_delta_bytes``
   (``VmHWM`` after building, before the first step, minus the baseline) and
   ``steps_peak_delta_bytes`` (the peak is reset once more after building: ``VmHWM`` over the two
   steps alone minus the baseline); ``rss_end_delta_bytes``: ``VmRSS`` after the steps minus the
   baseline. tr-mlir also reports ``arena_bytes`` and ``bytes_needed`` (the arena plus the host
   staging of the input buffers).

PyTorch then runs a third step under ``torch.profiler`` (``profile_memory=True``) inside a
``record_function`` marker, and reads the allocator timeline (``prof._memory_profile().timeline``,
the data behind ``export_memory_timeline``): ``profiler_peak_bytes`` is the bytes held before the
step (parameters, gradients, momentum, the batch: the timeline's ``PREEXISTING`` entries) plus the
running sum of every allocation and free during the step, at its maximum; ``timeline_mib`` the same
running sum in :data:`TIMELINE_POINTS` equal bins of the step's duration (the marker's start and
end; the first and last timeline event where the marker is not found: ``timeline_window``), the
largest value in force anywhere in each bin (:func:`binned`). Event times are clipped to the window.
"""

from __future__ import annotations

import gc
import json
import sys
import time
from typing import Any

import numpy as np

TIMELINE_POINTS = 200
LR, MOMENTUM = 0.01, 0.9
MIB = 2 ** 20


def status(key: str) -> int | None:
    """A ``kB`` field of ``/proc/self/status`` (``VmRSS``, ``VmHWM``) in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return None


def reset_peak() -> bool:
    """Reset ``VmHWM`` (the peak RSS) to the current RSS; ``False`` where the kernel refuses."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _peaks(reset: bool, base: int, built: int) -> dict[str, int | None]:
    """The RSS numbers of the module doc (point 5), read after the two steps; ``built``: ``VmHWM``
    after building (the peak is reset again after it, so the steps' own peak is known too)."""
    steps, now = status("VmHWM"), status("VmRSS")
    return {"rss_peak_delta_bytes": max(built, steps) - base if reset else None, "rss_base_bytes": base,
            "build_peak_delta_bytes": built - base if reset else None,
            "steps_peak_delta_bytes": steps - base if reset else None, "rss_end_delta_bytes": now - base}


def binned(times: list[float], values: list[float], points: int) -> list[float]:
    """``values`` (a step function, ``values[i]`` from ``times[i]`` on; ``times`` ascending in
    [0, 1], ``times[0]`` the start) as ``points`` equal bins of [0, 1]: the largest value in force
    anywhere in each bin (the one carried in from the previous bin included)."""
    out: list[float] = []
    i, cur = 0, (values[0] if values else 0.0)
    for b in range(points):
        hi, top = (b + 1) / points, cur
        while i < len(times) and (times[i] < hi or b == points - 1):
            cur = values[i]
            top = max(top, cur)
            i += 1
        out.append(float(top))
    return out


# --------------------------------------------------------------------------------------
# PyTorch
# --------------------------------------------------------------------------------------


def _torch_warmup(torch, F, c: int, h: int, w: int) -> None:
    tiny = torch.nn.Sequential(torch.nn.Conv2d(c, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                               torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.LazyLinear(10))
    opt = None
    for _ in range(2):
        out = tiny(torch.randn(8, c, max(h, 4), max(w, 4)))
        if opt is None:
            opt = torch.optim.SGD(tiny.parameters(), lr=LR, momentum=MOMENTUM)
        F.cross_entropy(out, torch.randint(0, 10, (8,))).backward()
        opt.step()
    torch.mm(torch.randn(512, 512), torch.randn(512, 512))


def _profiled_timeline(prof, marker: str) -> dict[str, Any]:
    from torch.profiler._memory_profiler import Action

    events = sorted(prof._memory_profile().timeline, key=lambda e: e[0])
    held = sum(size for t, action, _, size in events if action == Action.PREEXISTING)
    timed = [(t, action, size) for t, action, _, size in events if action != Action.PREEXISTING]
    window, lo, hi = "marker", None, None
    marks = [e for e in prof.events() if e.name == marker]
    start_ns = getattr(prof.profiler.kineto_results, "trace_start_ns", None)
    if marks and start_ns is not None:
        lo = start_ns() + marks[0].time_range.start * 1e3
        hi = start_ns() + marks[0].time_range.end * 1e3
    elif timed:
        window, lo, hi = "events", timed[0][0], timed[-1][0]
    live = peak = held
    times, values = [0.0], [float(held)]
    span = (hi - lo) if lo is not None and hi > lo else 1.0
    for t, action, size in timed:
        if action == Action.CREATE:
            live += size
        elif action == Action.DESTROY:
            live -= size
        peak = max(peak, live)
        times.append(min(max((t - lo) / span, 0.0), 1.0) if lo is not None else 0.0)
        values.append(float(live))
    return {"profiler_peak_bytes": peak, "profiler_held_bytes": held, "timeline_window": window,
            "timeline_mib": [round(v / MIB, 2) for v in binned(times, values, TIMELINE_POINTS)]}


def torch_side(name: str, batch: int, threads: int) -> dict[str, Any]:
    """The PyTorch measurement (module doc)."""
    import torch
    import torch.nn.functional as F

    from bench.compile_time import model_spec
    from bench.models import flat_plan, torch_model_from_plan

    torch.set_num_threads(threads)
    builder, (h, w, c), classes = model_spec(name)
    _torch_warmup(torch, F, c, h, w)
    plan = flat_plan(builder(classes), (h, w, c), classes)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(batch, c, h, w, generator=gen)
    y = torch.randint(0, classes, (batch,), generator=gen)
    gc.collect()
    reset = reset_peak()
    base = status("VmRSS")
    torch.manual_seed(0)
    net = torch_model_from_plan(plan)
    opt = torch.optim.SGD(net.parameters(), lr=LR, momentum=MOMENTUM)

    def step() -> float:
        opt.zero_grad()
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        return loss.item()

    built = status("VmHWM")
    reset_peak()
    t0 = time.perf_counter()
    step()
    step()
    steps_s = time.perf_counter() - t0
    out: dict[str, Any] = {**_peaks(reset, base, built),
                           "param_bytes": sum(p.numel() * p.element_size() for p in net.parameters()),
                           "two_steps_s": steps_s, "threads": threads}
    try:
        from torch.profiler import ProfilerActivity, profile, record_function

        with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True,
                     with_stack=True) as prof:
            with record_function("bench_memory_step"):
                step()
        out.update(_profiled_timeline(prof, "bench_memory_step"))
    except Exception as e:  # a private API: report, do not fail the benchmark
        out["profiler_error"] = f"{type(e).__name__}: {e}"
    return out


# --------------------------------------------------------------------------------------
# tr-mlir
# --------------------------------------------------------------------------------------


def _tr_mlir_warmup() -> None:
    import tr_mlir
    from tr_mlir import zoo

    rng = np.random.default_rng(0)
    task = tr_mlir.Task(zoo.resnet_tiny(10), (8, 8, 1), 10, 8, optimizer=tr_mlir.optim.SGD(lr=LR, momentum=MOMENTUM))
    x = rng.standard_normal((8, 8, 8, 1), dtype=np.float32)
    y = rng.integers(0, 10, 8)
    for _ in range(2):
        task.train_step(x, y)


def tr_mlir_side(name: str, batch: int, fuse: bool, reuse: bool = True) -> dict[str, Any]:
    """The tr-mlir measurement (module doc): fp32, ``fuse`` as given."""
    import tr_mlir
    from bench.compile_time import SPEC, compile_timed, model_spec
    from tr_mlir.lowering.executable import Executable
    from tr_mlir.lowering.runner import Runner

    _tr_mlir_warmup()
    _, (h, w, c), classes = model_spec(name)
    spec = {**SPEC, "batch_size": batch, "train_size": batch * 100, "val_size": batch}
    module, _ = compile_timed(name, fuse=fuse, amp=False, spec=spec, reuse=reuse)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, h, w, c), dtype=np.float32)
    y = rng.integers(0, classes, batch)
    sgd = tr_mlir.optim.SGD(lr=LR, momentum=MOMENTUM)
    gc.collect()
    reset = reset_peak()
    base = status("VmRSS")
    exe = Executable(module, seed=0)
    for key, value in sgd.scalars().items():  # what Task.compile writes
        if exe.has(key):
            exe.set_scalar(key, value)
    exe.set_scalar("label_smoothing", 0.0)
    exe.scalar("dropout_seed")[:] = np.array([0, 0], np.int32)
    runner = Runner(exe)
    runner.prepare_weights()
    built = status("VmHWM")
    reset_peak()
    t0 = time.perf_counter()
    losses = [runner.train_step(x, y, LR) for _ in range(2)]
    steps_s = time.perf_counter() - t0
    return {**_peaks(reset, base, built), "arena_bytes": exe.base.size, "bytes_needed": exe.bytes_needed,
            "two_steps_s": steps_s, "losses": losses, "fuse": fuse, "reuse": reuse}


def main(argv: list[str]) -> int:
    side, name, batch = argv[0], argv[1], int(argv[2])
    threads = int(argv[argv.index("--threads") + 1]) if "--threads" in argv else 2
    if side == "torch":
        out = torch_side(name, batch, threads)
    elif side == "tr-mlir":
        out = tr_mlir_side(name, batch, "--fuse" in argv, "--no-reuse" not in argv)
    else:
        raise SystemExit(f"unknown side {side!r}: torch or tr-mlir")
    print("BENCH-RESULT " + json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
