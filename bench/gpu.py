"""Section 4: the GPU comparison, run only where a GPU exists.

The measurement belongs to the CUDA backend's smoke script, ``scripts/gpu_smoke.py``: this
section runs ``python scripts/gpu_smoke.py --report FILE`` with every other smoke section skipped
and copies the script's ``timing`` object into the results (key ``timing``; its keys are listed
in the script's docstring and in bench/README.md, section 4):

* ``resnet8_cifar`` at batch 256: CUDA-graph replay and ``Task.train_step`` against PyTorch eager,
  fp32 and AMP (channels-last);
* ``comparisons``: the seed's MLP (fp32, batches 200 and 2048) and ResNet-50 (224x224x3, fused
  AMP, batch 64), tr-mlir's CUDA-graph replay and ``Task.train_step`` against the
  :func:`bench.models.torch_model` twin in PyTorch eager and under ``torch.compile`` (mode
  default), median milliseconds per training step, images/s and the ratios. ``torch.compile``
  runs in a child process of the script with a time budget; a failure or a timeout is a skip
  with its reason, recorded in the entry.

Skipped, with the reason recorded, when no CUDA GPU is usable
(:func:`tr_mlir.lowering.cuda.backend.cuda_available`: CuPy, a driver and a device), when the
script times out, or when it writes no ``timing`` object. When the script exits non-zero but wrote
its timing (a tr-mlir or eager measurement failed; the failure is in the entry), the timing is
kept with ``ok: false``. Nothing is estimated.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

SMOKE = os.path.join("scripts", "gpu_smoke.py")
OTHER_SECTIONS = ("kernels", "capture", "nccl", "digits")


def gpu_present() -> tuple[bool, str]:
    """Whether a CUDA GPU is usable by the CUDA backend, and why not."""
    try:
        from tr_mlir.lowering.cuda.backend import cuda_available
    except Exception as e:  # noqa: BLE001 - the backend module itself cannot load
        return False, f"no GPU on this machine (the CUDA backend does not load: {type(e).__name__})"
    ok, why = cuda_available()
    return (True, why) if ok else (False, f"no GPU on this machine ({why})")


def smoke_command(script: str, report: str, *, steps: int = 20, models: Sequence[str] | None = None,
                  compile: bool = True) -> list[str]:
    """The smoke-script command line of this section: only the ``timing`` section, ``steps``
    timed steps, the timing ``models`` (default: the script's, all of them), ``--no-compile``
    unless ``compile``."""
    cmd = [sys.executable, script, "--report", report, "--steps", str(steps)]
    for s in OTHER_SECTIONS:
        cmd += ["--skip", s]
    if models:
        cmd += ["--timing-models", ",".join(models)]
    if not compile:
        cmd.append("--no-compile")
    return cmd


def from_report(report: dict[str, Any] | None, returncode: int, how: str, tail: str = "") -> dict[str, Any]:
    """Section 4's result from the smoke script's JSON ``report`` (None: none was written), its
    exit status and the GPU description ``how``: ``{"skipped": False, "device", "ok",
    "exit_code", "smoke_seconds", "timing"}``, or ``{"skipped": True, "reason"}`` when there is
    no timing object (``tail``: the script's last output line, for the reason)."""
    if report is None or "timing" not in report:
        if returncode != 0:
            return {"skipped": True, "reason": f"{SMOKE} failed (exit {returncode}): {tail or 'no output'}"}
        return {"skipped": True, "reason": f"{SMOKE} wrote no timing section"}
    section = (report.get("sections") or {}).get("timing")
    ok = returncode == 0 and (not isinstance(section, dict) or bool(section.get("ok", True)))
    out = {"skipped": False, "device": report.get("gpu", how), "ok": ok, "exit_code": returncode,
           "smoke_seconds": report.get("seconds"), "timing": report["timing"]}
    if "timing_error" in report:
        out["error"] = report["timing_error"].strip().splitlines()[-1]
    return out


def run(repo_root: str, timeout: float = 900.0, steps: int = 20, models: Sequence[str] | None = None,
        compile: bool = True) -> dict[str, Any]:
    """Section 4 (module doc): runs the smoke script's timing section on the GPU (at most
    ``timeout`` seconds) and returns :func:`from_report`'s dict, or a skip when no GPU is usable
    or the script is missing or times out."""
    present, how = gpu_present()
    if not present:
        return {"skipped": True, "reason": how}
    script = os.path.join(repo_root, SMOKE)
    if not os.path.isfile(script):
        return {"skipped": True, "reason": f"GPU present ({how}) but {SMOKE} is missing"}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "gpu.json")
        cmd = smoke_command(script, path, steps=steps, models=models, compile=compile)
        try:
            proc = subprocess.run(cmd, cwd=repo_root, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"skipped": True, "reason": f"{SMOKE} timed out after {timeout:.0f} s"}
        tail = ((proc.stderr or proc.stdout).strip().splitlines()[-1:] or [""])[0]
        report = None
        if os.path.isfile(path):
            with open(path) as f:
                report = json.load(f)
    return from_report(report, proc.returncode, how, tail)
