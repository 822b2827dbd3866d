"""scripts/gpu_smoke.py without a GPU (one line, exit 0), and the GPU checks themselves behind the
``gpu`` marker (skipped, with the reason, on machines without a CUDA GPU)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tr_mlir.lowering.cupy_backend import cuda_available

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "gpu_smoke.py"


@pytest.mark.skipif(cuda_available()[0], reason="a GPU is present: the script would run the checks")
def test_smoke_script_without_a_gpu_prints_one_line_and_exits_0(tmp_path):
    r = subprocess.run([sys.executable, str(SCRIPT), "--report", str(tmp_path / "r.json")], capture_output=True,
                       text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu_smoke: no usable CUDA GPU (") and "nothing to check" in lines[0]
    assert not (tmp_path / "r.json").exists()


def test_smoke_script_help():
    r = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "--report" in r.stdout and "kernels" in r.stdout


@pytest.mark.gpu
def test_gpu_kernels_match_numpy():
    from tr_mlir.lowering.cuda_checks import cases, run_case
    from tr_mlir.lowering.cupy_backend import CudaBackend

    backend = CudaBackend()
    bad = [(c.label, r.errors) for c in cases() if not (r := run_case(c, backend)).ok]
    assert not bad, bad[:10]


@pytest.mark.gpu
@pytest.mark.parametrize("amp", [False, True])
def test_gpu_training_matches_cpu(amp):
    import tr_mlir

    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((32, 8, 8, 1)).astype(np.float32), rng.integers(0, 10, 32)
    params = {}
    for dev in ("cpu", "gpu"):
        task = tr_mlir.Task("resnet_tiny", (8, 8, 1), 10, batch_size=16, amp=amp, device=dev)
        task.fit((x, y), epochs=2)
        params[dev] = dict(task.parameters())
    tol = 5e-3 if amp else 2e-4
    for name, p in params["cpu"].items():
        np.testing.assert_allclose(params["gpu"][name], p, rtol=tol, atol=tol, err_msg=name)


@pytest.mark.gpu
def test_gpu_capture_refuses_allocation():
    import cupy

    from tr_mlir.lowering.cupy_backend import CaptureAllocationError, CudaBackend

    backend = CudaBackend()
    with pytest.raises(CaptureAllocationError):
        backend.capture([lambda: cupy.empty(1024, cupy.float32) if backend.device.capturing else None])
