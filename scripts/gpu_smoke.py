#!/usr/bin/env python3
"""GPU smoke test of the CUDA backend: one script, a few minutes on one GPU, a JSON report.

Without a usable GPU (CuPy missing, no driver, no device) it prints one line saying so and exits 0.
On a GPU it runs, in order, and exits 1 if any check fails:

1. **kernels**: every case of :func:`tr_mlir.lowering.cuda.checks.cases` (every registry kernel,
   fp32 and AMP dtypes) through the CUDA backend against the NumPy kernels, and the CUDA Winograd
   convs (:func:`tr_mlir.lowering.cuda.winograd_checks.check`: both variants, three directions,
   fp32 and fp16, and the fp32 input gradient added into dx (``memplan-fuse-grad-acc``), against
   the CPU im2col conv; ``max_error`` there is the ratio to the bound);
2. **capture**: a small ResNet (``resnet8_cifar``, batch 32) trained for a few steps, one epoch,
   evaluation and prediction through captured CUDA graphs, in fp32 and AMP, against the CPU
   backend on the same data and initialization;
3. **nccl**: a world-size-1 NCCL all-reduce captured in a CUDA graph (skipped without NCCL);
4. **digits**: the digits demo (scikit-learn's 8x8 digits, ``resnet_tiny``) trained on the GPU;
5. **timing**: training-step times, tr-mlir's CUDA-graph replay against PyTorch, for the models
   chosen with ``--timing-models`` (default all of ``resnet8,mlp,resnet50``):

   * ``resnet8``: ``resnet8_cifar`` at batch 256 as CUDA-graph replays (graphs only, and
     ``Task.train_step`` with the batch upload and loss read-back) against the same network in
     PyTorch eager (fp32 and AMP, channels-last), median milliseconds per step;
   * ``mlp``: the seed's MLP 784-1024-512-256-10 (:func:`tr_mlir.zoo.mlp`, 28x28x1), fp32, batches
     200 and 2048;
   * ``resnet50``: :func:`tr_mlir.zoo.resnet50` at 224x224x3, 1000 classes, fused AMP, batch 64.

   For ``mlp`` and ``resnet50`` each (model, batch) compares three sides on random data, SGD
   (momentum 0.9) on both: tr-mlir (``Task(..., device='gpu')``; the captured graphs of one step
   replayed, timed with CUDA events on the backend's stream, and ``Task.train_step`` timed on the
   host), PyTorch eager and ``torch.compile`` (mode default, inductor; the optimizer and
   ``GradScaler`` stay eager) on the twin of :func:`bench.models.torch_model` (NCHW, on CUDA;
   AMP = ``torch.autocast('cuda', torch.float16)`` + ``torch.amp.GradScaler``;
   ``cudnn.benchmark`` on), each step timed with CUDA events. Every figure is the median of the
   timed steps after warm-up steps; a side's timed steps are cut (down to 3) so that its loop fits
   ``--time-budget`` seconds. ``torch.compile`` runs in a child process per model, killed past
   its time budget (``--compile-budget``; default 90 s for ``mlp``, 150 s for ``resnet50``): a
   failure or a timeout is recorded as a skip with its reason and never fails the script;
   ``--no-compile`` leaves it out. A failure of the tr-mlir or the eager side is recorded in its
   entry and fails the section; the other entries still run.

The ``timing`` object of the report: ``models`` (the names run), ``steps``, ``warmup``,
``time_budget_s``, ``compile`` (``enabled``, ``backend``, ``mode``, ``budget_s`` per model),
``torch_version``, ``torch_settings`` (``memory_format``, ``cudnn_benchmark``,
``allow_tf32_matmul``, ``allow_tf32_cudnn``); for ``resnet8`` the keys ``model``, ``batch``,
``ours_fp32`` / ``ours_amp`` (``graph_replay_ms``, ``train_step_ms``, ``graphs_per_step``,
``img_per_s``) and ``torch_eager_fp32`` / ``torch_eager_amp`` (``step_ms``, ``img_per_s``), or
``resnet8_error``; and ``comparisons``, one entry per (model, batch):

* ``model``, ``zoo_model``, ``input_hwc``, ``num_classes``, ``batch``, ``precision`` (``fp32`` /
  ``amp``), ``fuse``;
* ``tr_mlir``: ``compile_s``, ``graph_replay_ms``, ``train_step_ms``, ``img_per_s`` (from the graph
  replay), ``train_step_img_per_s``, ``graphs_per_step``, ``kernel_nodes_per_step``,
  ``timed_steps``, ``graph_replay_ms_each``, ``train_step_ms_each``; or ``error``;
* ``torch_eager``: ``step_ms``, ``img_per_s``, ``first_step_s``, ``timed_steps``, ``step_ms_each``;
  or ``error`` (or ``skipped`` without torch);
* ``torch_compile``: the same keys (``first_step_s``: compile and first step), ``backend``,
  ``mode``; or ``skipped`` (the reason);
* ``ratio_vs_eager``, ``ratio_vs_compile``: torch step ms / tr-mlir graph-replay ms (= tr-mlir
  images/s over torch images/s; above 1: tr-mlir is faster), ``train_step_ratio_vs_eager``: the
  same with ``Task.train_step``; ``null`` where a side has no time.

Usage (from the source checkout; no install needed when xdsl, numpy, PyYAML, scikit-learn, tqdm
and CuPy import; torch for the comparisons)::

    PYTHONUNBUFFERED=1 python3 scripts/gpu_smoke.py [--report bench/results/gpu_smoke.json]
        [--skip timing] [--steps 20] [--timing-models mlp,resnet50] [--no-compile]
        [--batch mlp=200,4096] [--compile-budget 120] [--time-budget 20]

``--report``: where the JSON goes (default ``bench/results/gpu_smoke-<date>.json``). Planned for
under 5 minutes on one GPU; ``--no-compile`` saves the ``torch.compile`` children (up to
``--compile-budget`` each).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import importlib
import json
import os
import platform
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("CUPY_CACHE_DIR", "/tmp/cupy_cache")
os.environ.setdefault("CUPY_ACCELERATORS", "")

SECTIONS = ("kernels", "capture", "nccl", "digits", "timing")


def _gpu() -> tuple[bool, str]:
    try:
        from tr_mlir.lowering.cuda.backend import cuda_available
    except Exception as e:  # the checkout itself does not import
        return False, f"tr_mlir does not import ({type(e).__name__}: {e})"
    return cuda_available()


def _log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# --------------------------------------------------------------------------------------
# Sections
# --------------------------------------------------------------------------------------


def check_kernels(report: dict) -> bool:
    from tr_mlir.lowering.cuda.checks import cases, run_case
    from tr_mlir.lowering.cuda.backend import CudaBackend

    backend = CudaBackend()
    rows, failed = [], []
    for case in cases():
        try:
            r = run_case(case, backend)
            worst = max(r.errors.values(), default=0.0)
            rows.append({"case": case.label, "max_error": worst, "ok": r.ok})
            if not r.ok:
                failed.append({"case": case.label, "errors": r.errors})
        except Exception as e:  # a launch failure is a failed case, the others still run
            failed.append({"case": case.label, "exception": f"{type(e).__name__}: {e}"})
            rows.append({"case": case.label, "ok": False})
    # the CUDA Winograd convs (every algo of conv_fwd / conv_bwd beyond the implicit GEMM), and
    # conv_fwd's batch-norm statistics (memplan-fuse-bn-stats: bound, y unchanged, reruns bit-identical);
    # an import or launch failure is a failed case, the others still run
    for label, module, name, error in (("winograd", "winograd_checks", "check", "bound_ratio"),
                                       ("conv_stats", "checks", "conv_stats_check", "stats")):
        try:
            check = getattr(importlib.import_module(f"tr_mlir.lowering.cuda.{module}"), name)
            for r in check(backend):
                rows.append({"case": r["case"], "max_error": r["error"], "ok": r["ok"]})
                if not r["ok"]:
                    failed.append({"case": r["case"], "errors": {error: r["error"]}})
        except Exception as e:
            failed.append({"case": label, "exception": f"{type(e).__name__}: {e}"})
            rows.append({"case": label, "ok": False})
    report["kernels"] = {"cases": len(rows), "failed": failed,
                         "worst": sorted(rows, key=lambda r: -r.get("max_error", 0.0))[:15]}
    _log(f"kernels: {len(rows) - len(failed)}/{len(rows)} cases agree with NumPy")
    for f in failed[:20]:
        _log(f"  FAIL {f}")
    return not failed


def _task(device, amp: bool, batch: int = 32, model: str = "resnet8_cifar"):
    import tr_mlir

    return tr_mlir.Task(model, (32, 32, 3), 10, batch_size=batch, amp=amp, device=device, seed=7,
                        optimizer=tr_mlir.optim.SGD(lr=0.05, momentum=0.9, weight_decay=5e-4))


def check_capture(report: dict) -> bool:
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 32, 32, 3)).astype(np.float32)
    y = rng.integers(0, 10, 64)
    out, ok = {}, True
    for amp in (False, True):
        res = {}
        for dev in ("cpu", "gpu"):
            t0 = time.perf_counter()
            task = _task(dev, amp)
            task.compile(64, 64)
            losses = [task.train_step(x[i * 32:(i + 1) * 32], y[i * 32:(i + 1) * 32]) for i in (0, 1, 0)]
            hist = task.fit((x, y), (x, y), epochs=1, shuffle=True)
            res[dev] = {"losses": losses, "params": dict(task.parameters()), "eval": task.evaluate(x, y),
                        "pred": task.predict(x[:8]), "hist": hist, "seconds": time.perf_counter() - t0,
                        "nodes": task.exe.node_count, "graphs": len(task.exe.captured)}
        a, b = res["cpu"], res["gpu"]
        perr = max(float(np.max(np.abs(b["params"][k] - a["params"][k])) / max(1.0, float(np.max(np.abs(a["params"][k])))))
                   for k in a["params"])
        lerr = max(abs(p - q) for p, q in zip(a["losses"], b["losses"]))
        tol = 5e-3 if amp else 2e-4
        good = perr <= tol and lerr <= tol and abs(a["eval"]["loss"] - b["eval"]["loss"]) <= tol * 10
        ok = ok and good
        key = "amp" if amp else "fp32"
        out[key] = {"ok": good, "param_max_rel_err": perr, "loss_max_abs_err": lerr, "losses_cpu": a["losses"],
                    "losses_gpu": b["losses"], "eval_cpu": a["eval"], "eval_gpu": b["eval"],
                    "pred_max_abs_err": float(np.max(np.abs(a["pred"] - b["pred"]))),
                    "graphs": b["graphs"], "kernel_nodes": b["nodes"],
                    "seconds_cpu": a["seconds"], "seconds_gpu": b["seconds"]}
        _log(f"capture {key}: params rel err {perr:.2e}, loss err {lerr:.2e} -> {'ok' if good else 'FAIL'}")
    report["capture"] = out
    return ok


def check_nccl(report: dict) -> bool:
    import cupy as cp
    import numpy as np

    try:
        from cupy.cuda import nccl

        if not nccl.available:
            raise ImportError("libnccl not loadable")
    except Exception as e:
        report["nccl"] = {"skipped": f"{type(e).__name__}: {e}"}
        _log(f"nccl: skipped ({e})")
        return True
    comm = nccl.NcclCommunicator(1, nccl.get_unique_id(), 0)
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        buf = cp.arange(1 << 16, dtype=cp.float32)
        comm.allReduce(buf.data.ptr, buf.data.ptr, buf.size, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, s.ptr)
        s.synchronize()
        s.begin_capture()
        comm.allReduce(buf.data.ptr, buf.data.ptr, buf.size, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, s.ptr)
        g = s.end_capture()
        g.launch(s)
        s.synchronize()
    good = bool(np.array_equal(cp.asnumpy(buf), np.arange(1 << 16, dtype=np.float32)))
    report["nccl"] = {"ok": good, "version": getattr(nccl, "get_version", lambda: None)()}
    _log(f"nccl: captured world-1 all-reduce {'ok' if good else 'FAIL'}")
    return good


def check_digits(report: dict) -> bool:
    import tr_mlir
    from tr_mlir.data import load_dataset

    ds = load_dataset("digits")
    task = tr_mlir.Task("resnet_tiny", ds.input_shape, ds.num_classes, batch_size=64, device="gpu", seed=0,
                        optimizer=tr_mlir.optim.SGD(lr=0.05, momentum=0.9, weight_decay=5e-4))
    t0 = time.perf_counter()
    hist = task.fit(ds, epochs=8)
    secs = time.perf_counter() - t0
    top1 = hist[-1]["val_top1"]
    good = top1 >= 0.9
    report["digits"] = {"ok": good, "val_top1": top1, "val_loss": hist[-1]["val_loss"], "epochs": len(hist),
                        "seconds": secs, "compile_seconds": task.compile_seconds, "history": hist}
    _log(f"digits: val top-1 {top1:.3f} after {len(hist)} epochs in {secs:.1f}s -> {'ok' if good else 'FAIL'}")
    return good


def _torch_resnet8(channels_last: bool):
    import torch
    from torch import nn

    def cbr(cin, cout, s):
        return [nn.Conv2d(cin, cout, 3, s, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]

    class Basic(nn.Module):
        def __init__(self, cin, cout, s):
            super().__init__()
            self.main = nn.Sequential(*cbr(cin, cout, s), nn.Conv2d(cout, cout, 3, 1, 1, bias=False),
                                      nn.BatchNorm2d(cout))
            self.sc = (nn.Sequential(nn.Conv2d(cin, cout, 1, s, 0, bias=False), nn.BatchNorm2d(cout))
                       if s != 1 or cin != cout else nn.Identity())

        def forward(self, x):
            return torch.relu(self.main(x) + self.sc(x))

    net = nn.Sequential(*cbr(3, 16, 1), Basic(16, 16, 1), Basic(16, 32, 2), Basic(32, 64, 2),
                        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)).cuda()
    return net.to(memory_format=torch.channels_last) if channels_last else net


def _median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def _time_resnet8(out: dict, steps: int) -> None:
    """The ``resnet8`` timing (module doc): writes its keys into ``out`` (the ``timing`` object)."""
    import cupy as cp
    import numpy as np

    import tr_mlir.lowering.runner as R

    batch = 256
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, 32, 32, 3)).astype(np.float32)
    y = rng.integers(0, 10, batch)
    out.update({"batch": batch, "model": "resnet8_cifar"})
    for amp in (False, True):
        task = _task("gpu", amp, batch)
        task.compile(batch, batch)
        task.train_step(x, y)
        exe = task.exe
        run = task.runner
        seq = run._pre[(R.TRAIN_BASE, "a")] + run._post[(R.TRAIN_BASE, "a", False)]
        dev = exe.backend.device
        for g in seq:
            g.replay()
        dev.synchronize()
        ev0, ev1 = cp.cuda.Event(), cp.cuda.Event()
        graph_ms = []
        for _ in range(steps):
            ev0.record(dev.stream)
            for g in seq:
                g.replay()
            ev1.record(dev.stream)
            ev1.synchronize()
            graph_ms.append(cp.cuda.get_elapsed_time(ev0, ev1))
        step_ms = []
        for _ in range(steps):
            t0 = time.perf_counter()
            task.train_step(x, y)
            step_ms.append((time.perf_counter() - t0) * 1e3)
        key = "amp" if amp else "fp32"
        out[f"ours_{key}"] = {"graph_replay_ms": _median(graph_ms), "train_step_ms": _median(step_ms),
                              "graphs_per_step": len(seq), "img_per_s": batch / (_median(step_ms) / 1e3)}
        _log(f"timing ours {key}: graphs {_median(graph_ms):.2f} ms, train_step {_median(step_ms):.2f} ms")
    try:
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        out["torch"] = {"skipped": str(e)}
        return
    xt = torch.randn(batch, 3, 32, 32, device="cuda").to(memory_format=torch.channels_last)
    yt = torch.randint(0, 10, (batch,), device="cuda")
    for amp in (False, True):
        net = _torch_resnet8(True)
        opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
        scaler = torch.amp.GradScaler("cuda", enabled=amp)

        def step():
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
                loss = F.cross_entropy(net(xt), yt)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            return loss

        for _ in range(5):
            step()
        torch.cuda.synchronize()
        ms = []
        for _ in range(steps):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            step()
            e.record()
            e.synchronize()
            ms.append(s.elapsed_time(e))
        key = "amp" if amp else "fp32"
        out[f"torch_eager_{key}"] = {"step_ms": _median(ms), "img_per_s": batch / (_median(ms) / 1e3)}
        _log(f"timing torch eager {key}: {_median(ms):.2f} ms")
    out["torch_version"] = torch.__version__


# --------------------------------------------------------------------------------------
# Timing: tr-mlir CUDA-graph replay vs PyTorch eager vs torch.compile (mlp, resnet50)
# --------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TimingModel:
    """A model of the timing comparison (module doc): the zoo model ``zoo_model`` at
    ``input_hwc`` (H, W, C) with ``num_classes`` classes, timed at each of ``batches`` in AMP
    (``amp``) or fp32, compiled fused or not (``fuse``), with SGD (``lr``, ``momentum``,
    ``weight_decay``) on both sides. ``max_steps`` caps the timed steps of each side;
    ``compile_budget_s`` is the default wall-time limit of its ``torch.compile`` child process."""

    name: str
    zoo_model: str
    input_hwc: tuple[int, int, int]
    num_classes: int
    batches: tuple[int, ...]
    amp: bool
    fuse: bool
    max_steps: int
    compile_budget_s: float
    lr: float = 0.01
    momentum: float = 0.9
    weight_decay: float = 0.0

    @property
    def precision(self) -> str:
        return "amp" if self.amp else "fp32"

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> TimingModel:
        d = dict(d)
        d["input_hwc"], d["batches"] = tuple(d["input_hwc"]), tuple(d["batches"])
        return cls(**d)


TIMING_MODELS: dict[str, TimingModel] = {m.name: m for m in (
    TimingModel("mlp", "mlp", (28, 28, 1), 10, (200, 2048), amp=False, fuse=False, max_steps=50,
                compile_budget_s=90.0),
    TimingModel("resnet50", "resnet50", (224, 224, 3), 1000, (64,), amp=True, fuse=True, max_steps=10,
                compile_budget_s=150.0, lr=0.1, weight_decay=1e-4),
)}
"""The comparison models of the timing section (module doc), by ``--timing-models`` name."""

TIMING_CHOICES = ("resnet8", *TIMING_MODELS)
"""Every ``--timing-models`` name: ``resnet8`` (its own timing, :func:`_time_resnet8`) and the
comparison models."""

MIN_STEPS = 3
"""The fewest timed steps a side is cut to by its time budget."""


def fit_steps(step_s: float, steps: int, budget_s: float, minimum: int = MIN_STEPS) -> int:
    """Timed steps for a side whose step takes ``step_s`` seconds: ``steps``, cut so that the
    loop fits ``budget_s`` seconds, never below ``minimum`` (nor above ``steps``)."""
    if step_s <= 0:
        return steps
    return max(min(minimum, steps), min(steps, int(budget_s / step_s)))


def _ms_stats(ms: list[float], batch: int) -> dict:
    med = statistics.median(ms)
    return {"img_per_s": batch / (med / 1e3), "timed_steps": len(ms), "min_ms": min(ms)}


def device_timer(device) -> Callable[[Callable[[], None]], float]:
    """``timed(fn) -> milliseconds`` of ``fn``'s work on a CUDA backend device: CUDA events on the
    device's stream for a CuPy device (:class:`~tr_mlir.lowering.cuda.backend.CupyDevice`),
    otherwise (the CPU emulator, the NumPy backend: ``device`` None) host time between
    synchronizations."""
    cp = getattr(device, "cp", None)
    stream = getattr(device, "stream", None)
    if cp is not None and stream is not None:
        ev0, ev1 = cp.cuda.Event(), cp.cuda.Event()

        def timed_events(fn):
            ev0.record(stream)
            fn()
            ev1.record(stream)
            ev1.synchronize()
            return float(cp.cuda.get_elapsed_time(ev0, ev1))

        return timed_events
    sync = getattr(device, "synchronize", lambda: None)

    def timed_host(fn):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        return (time.perf_counter() - t0) * 1e3

    return timed_host


def time_tr_mlir(m: TimingModel, batch: int, *, device: Any = "gpu", steps: int, warmup: int,
                 budget_s: float, seed: int = 0) -> dict:
    """tr-mlir's side of one comparison (module doc): a :class:`tr_mlir.Task` of ``m`` at
    ``batch`` on ``device`` (``'gpu'``, a backend object, or a zero-argument callable returning
    one), compiled for one batch; ``warmup`` ``Task.train_step`` calls (at least 2, fewer than
    ``warmup`` once they took a quarter of ``budget_s``: the graphs are static), then the step's captured
    graphs (zero grad, forward, backward, optimizer of input buffer A) replayed and timed with
    :func:`device_timer`, then ``Task.train_step`` (staging, upload, replay, loss read-back) timed
    on the host. Returns the ``tr_mlir`` entry (module doc). Raises whatever the Task raises."""
    import numpy as np

    import tr_mlir
    import tr_mlir.lowering.runner as R

    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, *m.input_hwc)).astype(np.float32)
    y = rng.integers(0, m.num_classes, batch)
    dev = device() if callable(device) else device
    task = tr_mlir.Task(m.zoo_model, m.input_hwc, m.num_classes, batch_size=batch, amp=m.amp, fuse=m.fuse,
                        device=dev, seed=seed,
                        optimizer=tr_mlir.optim.SGD(lr=m.lr, momentum=m.momentum, weight_decay=m.weight_decay))
    t0 = time.perf_counter()
    task.compile(batch, batch)
    compile_s = time.perf_counter() - t0
    last = spent = 0.0
    for i in range(max(warmup, 1)):
        t0 = time.perf_counter()
        task.train_step(x, y)
        last = time.perf_counter() - t0
        spent += last
        if i >= 1 and spent > budget_s / 4:  # slow steps: the graphs are static, two warm-up steps do
            break
    n = fit_steps(last, min(steps, m.max_steps), budget_s / 2)
    run = task.runner
    seq = run._pre[(R.TRAIN_BASE, "a")] + run._post[(R.TRAIN_BASE, "a", False)]
    timed = device_timer(getattr(task.exe.backend, "device", None))

    def replay():
        for g in seq:
            g.replay()

    timed(replay)
    graph_ms = [timed(replay) for _ in range(n)]
    step_ms = []
    for _ in range(n):
        t0 = time.perf_counter()
        task.train_step(x, y)
        step_ms.append((time.perf_counter() - t0) * 1e3)
    g_med, s_med = statistics.median(graph_ms), statistics.median(step_ms)
    return {"compile_s": compile_s, "graph_replay_ms": g_med, "train_step_ms": s_med,
            "img_per_s": batch / (g_med / 1e3), "train_step_img_per_s": batch / (s_med / 1e3),
            "graphs_per_step": len(seq), "kernel_nodes_per_step": sum(len(g) for g in seq), "timed_steps": n,
            "graph_replay_ms_each": graph_ms, "train_step_ms_each": step_ms}


def torch_twin(m: TimingModel, device: str):
    """The PyTorch twin of ``m`` (:func:`bench.models.torch_model`: NCHW, torch's default
    initialization after ``torch.manual_seed(0)``) on ``device``, in training mode."""
    import torch

    from bench.models import torch_model
    from tr_mlir.zoo import MODELS

    torch.manual_seed(0)
    net = torch_model(MODELS[m.zoo_model].blueprint(m.num_classes), m.input_hwc, m.num_classes)
    return net.to(device).train()


def time_torch(m: TimingModel, batch: int, *, device: str = "cuda", steps: int, warmup: int, budget_s: float,
               compile_backend: str | None = None, cudnn_benchmark: bool = True, seed: int = 0) -> dict:
    """PyTorch's side of one comparison (module doc): :func:`torch_twin` on ``device``, eager, or
    ``torch.compile(net, backend=compile_backend)`` (mode default) when ``compile_backend`` is
    given; SGD as ``m``; AMP = ``torch.autocast(device, float16)`` + ``torch.amp.GradScaler``.
    One step: ``zero_grad``, forward, cross-entropy, scaled backward, ``scaler.step``,
    ``scaler.update`` on a batch resident on the device (no loss read-back). ``warmup`` steps
    (the first one timed on the host: compile and first run), then timed steps (CUDA events on
    CUDA, host time on the CPU). ``cudnn.benchmark`` is set for the call and restored. Returns
    the ``torch_eager`` / ``torch_compile`` entry (module doc); raises whatever torch raises."""
    import torch
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(seed)
    h, w, c = m.input_hwc
    x = torch.randn(batch, c, h, w, generator=g).to(device)
    y = torch.randint(0, m.num_classes, (batch,), generator=g).to(device)
    net = torch_twin(m, device)
    model = torch.compile(net, backend=compile_backend) if compile_backend else net
    opt = torch.optim.SGD(net.parameters(), lr=m.lr, momentum=m.momentum, weight_decay=m.weight_decay)
    kind = torch.device(device).type
    cuda = kind == "cuda"
    scaler = torch.amp.GradScaler(kind, enabled=m.amp)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(kind, dtype=torch.float16, enabled=m.amp):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    def sync():
        if cuda:
            torch.cuda.synchronize()

    def timed() -> float:
        if cuda:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            step()
            e.record()
            e.synchronize()
            return float(s.elapsed_time(e))
        t0 = time.perf_counter()
        step()
        return (time.perf_counter() - t0) * 1e3

    prev = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = cudnn_benchmark
    try:
        sync()
        t0 = time.perf_counter()
        step()
        sync()
        first_s = time.perf_counter() - t0
        last_ms = first_s * 1e3
        for _ in range(max(warmup, 1) - 1):
            last_ms = timed()
        n = fit_steps(last_ms / 1e3, min(steps, m.max_steps), budget_s)
        ms = [timed() for _ in range(n)]
    finally:
        torch.backends.cudnn.benchmark = prev
    med = statistics.median(ms)
    out = {"step_ms": med, "img_per_s": batch / (med / 1e3), "first_step_s": first_s, "timed_steps": n,
           "step_ms_each": ms}
    if compile_backend:
        out.update(backend=compile_backend, mode="default")
    return out


def _ratio(torch_side: dict, tr_side: dict, key: str = "graph_replay_ms") -> float | None:
    if "step_ms" not in torch_side or key not in tr_side:
        return None
    return torch_side["step_ms"] / tr_side[key]


def finish_ratios(entry: dict) -> dict:
    """Fill ``ratio_vs_eager``, ``ratio_vs_compile`` and ``train_step_ratio_vs_eager`` of a
    comparison entry from its sides (module doc); returns the entry."""
    tr = entry.get("tr_mlir") or {}
    entry["ratio_vs_eager"] = _ratio(entry.get("torch_eager") or {}, tr)
    entry["ratio_vs_compile"] = _ratio(entry.get("torch_compile") or {}, tr)
    entry["train_step_ratio_vs_eager"] = _ratio(entry.get("torch_eager") or {}, tr, "train_step_ms")
    return entry


def _error(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def _free_device_memory() -> None:
    """Return cached device memory (CuPy's pool, torch's caching allocator) between models."""
    import gc

    gc.collect()
    for free in (lambda: __import__("cupy").get_default_memory_pool().free_all_blocks(),
                 lambda: __import__("torch").cuda.empty_cache()):
        try:
            free()
        except Exception:
            pass


def compare_model(m: TimingModel, batch: int, *, tr_device: Any = "gpu", torch_device: str = "cuda",
                  steps: int, warmup: int, budget_s: float) -> tuple[dict, bool]:
    """The tr-mlir and eager sides of one (model, batch) comparison (module doc), each caught:
    returns ``(entry, ok)``, ``ok`` False when a side raised (its ``error`` is in the entry).
    ``torch_compile`` is filled later (:func:`torch_compile_substep`)."""
    entry: dict = {"model": m.name, "zoo_model": m.zoo_model, "input_hwc": list(m.input_hwc),
                   "num_classes": m.num_classes, "batch": batch, "precision": m.precision, "fuse": m.fuse}
    ok = True
    try:
        entry["tr_mlir"] = time_tr_mlir(m, batch, device=tr_device, steps=steps, warmup=warmup, budget_s=budget_s)
        t = entry["tr_mlir"]
        _log(f"timing {m.name} b{batch} tr-mlir: graphs {t['graph_replay_ms']:.2f} ms, "
             f"train_step {t['train_step_ms']:.2f} ms ({t['timed_steps']} steps, compile {t['compile_s']:.1f} s)")
    except Exception as e:
        ok = False
        entry["tr_mlir"] = {"error": _error(e)}
        _log(f"timing {m.name} b{batch} tr-mlir: ERROR {_error(e)}")
        traceback.print_exc()
    _free_device_memory()
    try:
        import torch  # noqa: F401
    except ImportError as e:
        entry["torch_eager"] = {"skipped": f"torch is not importable ({_error(e)})"}
        return entry, ok
    try:
        entry["torch_eager"] = time_torch(m, batch, device=torch_device, steps=steps, warmup=warmup,
                                          budget_s=budget_s)
        _log(f"timing {m.name} b{batch} torch eager: {entry['torch_eager']['step_ms']:.2f} ms")
    except Exception as e:
        ok = False
        entry["torch_eager"] = {"error": _error(e)}
        _log(f"timing {m.name} b{batch} torch eager: ERROR {_error(e)}")
        traceback.print_exc()
    _free_device_memory()
    return entry, ok


def torch_compile_substep(m: TimingModel, batches: Sequence[int], *, device: str = "cuda",
                          backend: str = "inductor", steps: int, warmup: int, budget_s: float,
                          limit_s: float) -> dict[int, dict]:
    """``torch.compile`` timings of ``m`` at each of ``batches`` (module doc), in a child process
    (this script with ``--torch-child``; :func:`torch_child_main`) killed, with its process group
    (inductor's compile workers), after ``limit_s`` seconds. Returns batch -> the
    ``torch_compile`` entry, or ``{"skipped": reason}`` for each batch the child did not time
    (its failure, its exit status, or the time budget). Never raises for the child's failures."""
    import signal
    import subprocess
    import tempfile

    results: dict[int, dict] = {}
    with tempfile.TemporaryDirectory(prefix="gpu_smoke_compile_") as tmp:
        out = Path(tmp) / "compile.jsonl"
        spec = {"model": m.to_json(), "batches": list(batches), "device": device, "backend": backend,
                "steps": steps, "warmup": warmup, "budget_s": budget_s, "out": str(out)}
        cmd = [sys.executable, str(Path(__file__).resolve()), "--torch-child", json.dumps(spec)]
        log = Path(tmp) / "compile.log"
        t0 = time.perf_counter()
        reason = None
        with log.open("w") as log_f:  # a file, not a pipe: a lingering compile worker cannot block the wait
            try:
                proc = subprocess.Popen(cmd, cwd=str(ROOT), stdout=log_f, stderr=subprocess.STDOUT,
                                        start_new_session=True)
            except OSError as e:
                proc, reason = None, f"the torch.compile process did not start ({_error(e)})"
            if proc is not None:
                try:
                    proc.wait(timeout=limit_s)
                    if proc.returncode != 0:
                        tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-3:]) or "no output"
                        reason = f"the torch.compile process exited with status {proc.returncode}: {tail}"
                except subprocess.TimeoutExpired:
                    reason = f"torch.compile exceeded its time budget of {limit_s:g} s"
                try:  # the child, or what is left of its group (inductor's compile workers)
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                proc.wait()
        wall = time.perf_counter() - t0
        if out.is_file():
            for line in out.read_text().splitlines():
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue
                b = int(rec.get("batch", -1))
                if "result" in rec:
                    results[b] = rec["result"]
                else:
                    results[b] = {"skipped": f"torch.compile failed: {rec.get('error', 'no result')}"}
    for b in batches:
        if b not in results:
            results[b] = {"skipped": reason or "the torch.compile process wrote no result"}
        results[b]["process_s"] = wall
    return results


def torch_child_main(spec_json: str) -> int:
    """``--torch-child SPEC``: time ``torch.compile`` for the spec's model and batches (a JSON
    object written by :func:`torch_compile_substep`), appending one JSON line per batch to
    ``spec['out']``: ``{"batch", "result"}`` or ``{"batch", "error"}``. Returns 0, or 2 for an
    unreadable spec."""
    try:
        spec = json.loads(spec_json)
        m = TimingModel.from_json(spec["model"])
        out = Path(spec["out"])
    except (ValueError, KeyError, TypeError) as e:
        print(f"gpu_smoke --torch-child: bad spec ({_error(e)})", file=sys.stderr)
        return 2
    import torch

    for batch in spec["batches"]:
        torch._dynamo.reset()
        try:
            rec = {"batch": batch, "result": time_torch(
                m, batch, device=spec["device"], steps=spec["steps"], warmup=spec["warmup"],
                budget_s=spec["budget_s"], compile_backend=spec["backend"])}
        except Exception as e:
            traceback.print_exc()
            rec = {"batch": batch, "error": _error(e)}
        with out.open("a") as f:
            f.write(json.dumps(rec) + "\n")
        _free_device_memory()
    return 0


def torch_settings() -> dict:
    """The torch settings that bear on the comparison (module doc's ``torch_settings``)."""
    import torch

    return {"memory_format": "NCHW", "cudnn_benchmark": True,
            "allow_tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
            "allow_tf32_cudnn": bool(torch.backends.cudnn.allow_tf32)}


def check_timing(report: dict, args: argparse.Namespace, *, tr_device: Any = "gpu",
                 torch_device: str = "cuda") -> bool:
    """The timing section (module doc) for ``args.timing_models``; writes ``report['timing']``
    (updated as it goes, so a crash keeps what was measured). Returns False when a tr-mlir or
    eager side failed (never for ``torch.compile``). ``tr_device`` / ``torch_device``: where the
    comparison sides run (tests: the CPU emulator and ``'cpu'``)."""
    budgets = {n: (args.compile_budget if args.compile_budget is not None else TIMING_MODELS[n].compile_budget_s)
               for n in args.timing_models if n in TIMING_MODELS}
    out: dict = {"models": list(args.timing_models), "steps": args.steps, "warmup": args.warmup,
                 "time_budget_s": args.time_budget,
                 "compile": {"enabled": not args.no_compile, "backend": args.compile_backend, "mode": "default",
                             "budget_s": budgets},
                 "comparisons": []}
    report["timing"] = out
    ok = True
    if "resnet8" in args.timing_models:
        try:
            _time_resnet8(out, args.steps)
        except Exception as e:
            ok = False
            out["resnet8_error"] = traceback.format_exc()
            _log(f"timing resnet8: ERROR {_error(e)}")
        _free_device_memory()
    try:
        import torch

        out["torch_version"] = torch.__version__
        out["torch_settings"] = torch_settings()
    except ImportError:
        pass
    for name in args.timing_models:
        m = TIMING_MODELS.get(name)
        if m is None:
            continue
        batches = args.batch.get(name, m.batches)
        entries = []
        for b in batches:
            entry, good = compare_model(m, b, tr_device=tr_device, torch_device=torch_device, steps=args.steps,
                                        warmup=args.warmup, budget_s=args.time_budget)
            ok = ok and good
            entries.append(entry)
            out["comparisons"].append(entry)
        if args.no_compile:
            compiled = {b: {"skipped": "--no-compile"} for b in batches}
        elif "torch_version" not in out:
            compiled = {b: {"skipped": "torch is not importable"} for b in batches}
        else:
            _log(f"timing {m.name}: torch.compile ({args.compile_backend}) in a child process, "
                 f"budget {budgets[name]:.0f} s")
            compiled = torch_compile_substep(m, batches, device=torch_device, backend=args.compile_backend,
                                             steps=args.steps, warmup=args.warmup, budget_s=args.time_budget,
                                             limit_s=budgets[name])
        for entry in entries:
            entry["torch_compile"] = compiled[entry["batch"]]
            finish_ratios(entry)
            c = entry["torch_compile"]
            _log(f"timing {m.name} b{entry['batch']} torch.compile: "
                 + (f"{c['step_ms']:.2f} ms (first step {c['first_step_s']:.1f} s)" if "step_ms" in c
                    else f"skipped ({c['skipped']})"))
    return ok


# --------------------------------------------------------------------------------------


def _models_arg(text: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    bad = [n for n in names if n not in TIMING_CHOICES]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"unknown timing model(s) {', '.join(bad) or '(none given)'}; "
                                         f"choose from {','.join(TIMING_CHOICES)}")
    return names


def _batch_arg(text: str) -> tuple[str, tuple[int, ...]]:
    name, sep, sizes = text.partition("=")
    name = name.strip()
    if not sep or name not in TIMING_MODELS:
        raise argparse.ArgumentTypeError(f"expected MODEL=B[,B...] with MODEL one of {','.join(TIMING_MODELS)} "
                                         f"(resnet8 keeps batch 256), got {text!r}")
    try:
        batches = tuple(int(b) for b in sizes.split(",") if b.strip())
    except ValueError:
        batches = ()
    if not batches or min(batches) < 1:
        raise argparse.ArgumentTypeError(f"expected positive batch sizes after '{name}=', got {sizes!r}")
    return name, batches


def _positive(kind: type) -> Callable[[str], Any]:
    def conv(text: str) -> Any:
        try:
            v = kind(text)
        except ValueError:
            v = 0
        if v <= 0:
            raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
        return v

    return conv


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (module doc). ``timing_models``: a tuple of names; ``batch``: model name
    -> batch sizes (only the models given with ``--batch``). Exits 2 on a usage error."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--report", default=None, help="JSON report path (default bench/results/gpu_smoke-<date>.json)")
    ap.add_argument("--skip", action="append", default=[], choices=SECTIONS, help="skip a section (repeatable)")
    ap.add_argument("--steps", type=_positive(int), default=20,
                    help="timed steps per timing measurement (resnet50 at most 10, mlp at most 50)")
    ap.add_argument("--warmup", type=_positive(int), default=5, help="warm-up steps before the timed ones (default 5)")
    ap.add_argument("--timing-models", type=_models_arg, default=TIMING_CHOICES,
                    help=f"comma-separated models of the timing section (default {','.join(TIMING_CHOICES)})")
    ap.add_argument("--batch", type=_batch_arg, action="append", default=[], metavar="MODEL=B[,B...]",
                    help="batch sizes of a comparison model (default mlp=200,2048 resnet50=64; repeatable)")
    ap.add_argument("--no-compile", action="store_true", help="leave out torch.compile in the timing section")
    ap.add_argument("--compile-budget", type=_positive(float), default=None, metavar="SECONDS",
                    help="wall-time limit of each model's torch.compile process (default mlp 90, resnet50 150)")
    ap.add_argument("--compile-backend", default="inductor",
                    help="torch.compile backend (default inductor; 'eager' / 'aot_eager' to debug the harness)")
    ap.add_argument("--time-budget", type=_positive(float), default=20.0, metavar="SECONDS",
                    help="seconds one side's timed loop may take; fewer steps (down to 3) beyond (default 20)")
    ap.add_argument("--torch-child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.batch = dict(args.batch)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.torch_child is not None:
        return torch_child_main(args.torch_child)
    ok, why = _gpu()
    if not ok:
        print(f"gpu_smoke: no usable CUDA GPU ({why}); nothing to check")
        return 0
    import cupy
    import numpy

    t0 = time.perf_counter()
    report: dict = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                    "host": platform.node(), "gpu": why, "python": platform.python_version(),
                    "cupy": cupy.__version__, "numpy": numpy.__version__, "sections": {}}
    _log(f"gpu_smoke on {why}, CuPy {cupy.__version__}")
    all_ok = True
    checks = {"kernels": check_kernels, "capture": check_capture, "nccl": check_nccl, "digits": check_digits,
              "timing": lambda r: check_timing(r, args)}
    for name in SECTIONS:
        if name in args.skip:
            report["sections"][name] = "skipped"
            continue
        s0 = time.perf_counter()
        try:
            good = checks[name](report)
        except Exception as e:
            good = False
            report[name + "_error"] = traceback.format_exc()
            _log(f"{name}: ERROR {type(e).__name__}: {e}")
            traceback.print_exc()
        report["sections"][name] = {"ok": good, "seconds": round(time.perf_counter() - s0, 2)}
        all_ok = all_ok and good
    report["ok"] = all_ok
    report["seconds"] = round(time.perf_counter() - t0, 2)
    path = Path(args.report) if args.report else ROOT / "bench" / "results" / (
        f"gpu_smoke-{_dt.date.today().isoformat()}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1, default=lambda o: o.tolist() if hasattr(o, "tolist") else str(o)))
    _log(f"{'PASS' if all_ok else 'FAIL'} in {report['seconds']:.0f}s; report: {path}")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
