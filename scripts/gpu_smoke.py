#!/usr/bin/env python3
"""GPU smoke test of the CUDA backend: one script, a few minutes on one GPU, a JSON report.

Without a usable GPU (CuPy missing, no driver, no device) it prints one line saying so and exits 0.
On a GPU it runs, in order, and exits 1 if any check fails:

1. **kernels**: every case of :func:`tr_mlir.lowering.cuda_checks.cases` (every registry kernel,
   fp32 and AMP dtypes) through the CUDA backend against the NumPy kernels;
2. **capture**: a small ResNet (``resnet8_cifar``, batch 32) trained for a few steps, one epoch,
   evaluation and prediction through captured CUDA graphs, in fp32 and AMP, against the CPU
   backend on the same data and initialization;
3. **nccl**: a world-size-1 NCCL all-reduce captured in a CUDA graph (skipped without NCCL);
4. **digits**: the digits demo (scikit-learn's 8x8 digits, ``resnet_tiny``) trained on the GPU;
5. **timing**: a training step of ``resnet8_cifar`` at batch 256 as CUDA-graph replays (graphs
   only, and ``Task.train_step`` with the batch upload and loss read-back) against the same
   network in PyTorch eager (fp32 and AMP, channels-last), median milliseconds per step.

Usage (from the source checkout; no install needed when xdsl, numpy, PyYAML, scikit-learn, tqdm
and CuPy import)::

    PYTHONUNBUFFERED=1 python3 scripts/gpu_smoke.py [--report bench/results/gpu_smoke.json]
        [--skip timing] [--steps 20]

``--report``: where the JSON goes (default ``bench/results/gpu_smoke-<date>.json``).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("CUPY_CACHE_DIR", "/tmp/cupy_cache")
os.environ.setdefault("CUPY_ACCELERATORS", "")

SECTIONS = ("kernels", "capture", "nccl", "digits", "timing")


def _gpu() -> tuple[bool, str]:
    try:
        from tr_mlir.lowering.cupy_backend import cuda_available
    except Exception as e:  # the checkout itself does not import
        return False, f"tr_mlir does not import ({type(e).__name__}: {e})"
    return cuda_available()


def _log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# --------------------------------------------------------------------------------------
# Sections
# --------------------------------------------------------------------------------------


def check_kernels(report: dict) -> bool:
    from tr_mlir.lowering.cuda_checks import cases, run_case
    from tr_mlir.lowering.cupy_backend import CudaBackend

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


def check_timing(report: dict, steps: int) -> bool:
    import cupy as cp
    import numpy as np

    import tr_mlir.lowering.runner as R

    batch = 256
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, 32, 32, 3)).astype(np.float32)
    y = rng.integers(0, 10, batch)
    out: dict = {"batch": batch, "model": "resnet8_cifar"}
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
        report["timing"] = out
        return True
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
    report["timing"] = out
    return True


# --------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--report", default=None, help="JSON report path (default bench/results/gpu_smoke-<date>.json)")
    ap.add_argument("--skip", action="append", default=[], choices=SECTIONS, help="skip a section (repeatable)")
    ap.add_argument("--steps", type=int, default=20, help="timed steps per timing measurement")
    args = ap.parse_args(argv)
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
              "timing": lambda r: check_timing(r, args.steps)}
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
