"""Section 4: the GPU comparison, run only where a GPU exists.

The measurement belongs to the CUDA backend's smoke script, ``scripts/gpu_smoke.py``: its
``timing`` section trains ``resnet8_cifar`` at batch 256 as CUDA-graph replays (the captured
graphs alone, and ``Task.train_step`` with the batch upload and the loss read-back) against the
same network in PyTorch eager (fp32 and AMP, channels-last), median milliseconds per step. This
section runs ``python scripts/gpu_smoke.py --report FILE`` with every other smoke section skipped
and copies the script's ``timing`` object into the results (key ``timing``).

The issue's wider GPU comparison (the MLP and ResNet-50 AMP, and ``torch.compile``) is not in the
smoke script yet; the section reports what the script measures and nothing else.

Skipped, with the reason recorded, when no CUDA GPU is usable
(:func:`tr_mlir.lowering.cupy_backend.cuda_available`: CuPy, a driver and a device) or the
script fails. Nothing is estimated.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from typing import Any

SMOKE = os.path.join("scripts", "gpu_smoke.py")
OTHER_SECTIONS = ("kernels", "capture", "nccl", "digits")


def gpu_present() -> tuple[bool, str]:
    """Whether a CUDA GPU is usable by the CUDA backend, and why not."""
    try:
        from tr_mlir.lowering.cupy_backend import cuda_available
    except Exception as e:  # noqa: BLE001 - the backend module itself cannot load
        return False, f"no GPU on this machine (the CUDA backend does not load: {type(e).__name__})"
    ok, why = cuda_available()
    return (True, why) if ok else (False, f"no GPU on this machine ({why})")


def run(repo_root: str, timeout: float = 900.0, steps: int = 20) -> dict[str, Any]:
    """Section 4: ``{"skipped": True, "reason": ...}`` or ``{"skipped": False, "device",
    "timing"}`` with the smoke script's timing object."""
    present, how = gpu_present()
    if not present:
        return {"skipped": True, "reason": how}
    script = os.path.join(repo_root, SMOKE)
    if not os.path.isfile(script):
        return {"skipped": True, "reason": f"GPU present ({how}) but {SMOKE} is missing"}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "gpu.json")
        cmd = [sys.executable, script, "--report", path, "--steps", str(steps)]
        for s in OTHER_SECTIONS:
            cmd += ["--skip", s]
        try:
            proc = subprocess.run(cmd, cwd=repo_root, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"skipped": True, "reason": f"{SMOKE} timed out after {timeout:.0f} s"}
        if proc.returncode != 0 or not os.path.isfile(path):
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            return {"skipped": True, "reason": f"{SMOKE} failed (exit {proc.returncode}): {tail[0]}"}
        with open(path) as f:
            report = json.load(f)
    if "timing" not in report:
        return {"skipped": True, "reason": f"{SMOKE} wrote no timing section"}
    return {"skipped": False, "device": report.get("gpu", how), "timing": report["timing"]}
