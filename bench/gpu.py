"""Section 4: the GPU comparison (CUDA-graph replay against PyTorch eager and ``torch.compile``
per training step, for the MLP and ResNet-50 AMP), run only where a GPU exists.

The measurement belongs to the GPU backend's smoke script, ``scripts/gpu_smoke.py`` (the CuPy
issue), which this section runs as ``python scripts/gpu_smoke.py --bench-json FILE``; the script is
to write ``{"models": [{"model", "batch", "amp", "cuda_graph_step_ms", "torch_eager_step_ms",
"torch_compile_step_ms"}, ...]}`` into FILE, and the section copies it into the results.

The section is skipped, with the reason recorded, when no GPU is visible (no ``nvidia-smi``
listing a device and no CuPy device) or when the script is not there yet. Nothing is estimated.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Any

SMOKE = os.path.join("scripts", "gpu_smoke.py")


def gpu_present() -> tuple[bool, str]:
    """Whether a CUDA GPU is visible, and how that was decided."""
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
            if out.returncode == 0 and "GPU" in out.stdout:
                return True, out.stdout.strip().splitlines()[0]
        except (OSError, subprocess.TimeoutExpired):
            pass
    try:
        import cupy  # noqa: F401 - optional

        n = cupy.cuda.runtime.getDeviceCount()
        if n > 0:
            return True, f"cupy sees {n} device(s)"
    except Exception:  # noqa: BLE001 - no CuPy, no driver, no device: all mean "no GPU"
        pass
    return False, "no GPU on this machine (no nvidia-smi device, no CuPy device)"


def run(repo_root: str, timeout: float = 900.0) -> dict[str, Any]:
    """Section 4: ``{"skipped": True, "reason": ...}`` or the smoke script's results."""
    present, how = gpu_present()
    if not present:
        return {"skipped": True, "reason": how}
    script = os.path.join(repo_root, SMOKE)
    if not os.path.isfile(script):
        return {"skipped": True, "reason": f"GPU present ({how}) but {SMOKE} (the GPU backend's smoke script) "
                                           f"does not exist yet"}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "gpu.json")
        try:
            proc = subprocess.run([sys.executable, script, "--bench-json", path], cwd=repo_root,
                                  capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"skipped": True, "reason": f"{SMOKE} timed out after {timeout:.0f} s"}
        if proc.returncode != 0 or not os.path.isfile(path):
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            return {"skipped": True, "reason": f"{SMOKE} failed (exit {proc.returncode}): {tail[0]}"}
        with open(path) as f:
            return {"skipped": False, "device": how, **json.load(f)}
