"""bench/ (``python -m bench``) runs in its smoke mode and writes valid results.

No timing is asserted: only that every section runs, the JSON has the documented keys and
sane values (positive times, ratios, byte counts that add up), and the markdown has its tables.
The memory analysis is also checked on a known plan: the liveness bound never exceeds the arena.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # bench/ is a plain package of the checkout, not installed
    sys.path.insert(0, str(REPO))


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-m", "bench", "--smoke", "--out-dir", str(out), "--name", "smoke"],
                          cwd=REPO, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out, proc


def test_smoke_writes_json_with_documented_keys(smoke):
    from bench.cli import RESULT_KEYS, SCHEMA_VERSION

    out, _ = smoke
    res = json.loads((out / "smoke.json").read_text())
    assert set(RESULT_KEYS) <= set(res) and res["schema_version"] == SCHEMA_VERSION and res["mode"] == "smoke"
    for key in ("cpu", "cores", "load_before", "load_after", "numpy", "torch"):
        assert key in res["machine"]

    c = res["compile"]
    assert {r["variant"] for r in c["rows"]} == {"fused_amp", "unfused_fp32"}
    for r in c["rows"]:
        names = [p["pass"] for p in r["passes"]]
        assert names[0] == "arch-expand" and names[-1] == "memplan-build-atlas"
        assert r["total_s"] > 0 and all(p["s"] >= 0 for p in r["passes"])
        assert r["round_trip"]["round_trip_ok"] and r["round_trip"]["chars"] > 1000

    t = res["throughput"]
    assert t["threads"] == 2 and t["gemm_peak"]["numpy_flops"] > 0
    (m,) = t["models"]
    assert m["model"] == "mlp" and m["batch"] == 200
    assert m["tr_mlir_images_per_s"] > 0 and m["torch_images_per_s"] > 0
    assert m["ratio"] == pytest.approx(m["tr_mlir_images_per_s"] / m["torch_images_per_s"])
    # the seed's MLP: 784-1024-512-256-10, forward 2*200*(784*1024+1024*512+512*256+256*10), x3 less the
    # first layer's input gradient
    fwd = 2 * 200 * (784 * 1024 + 1024 * 512 + 512 * 256 + 256 * 10)
    assert m["step_flops"] == 3 * fwd - 2 * 200 * 784 * 1024
    for side in ("tr_mlir", "torch"):  # both start from a fresh 10-class model
        assert 1.5 < m["first_loss"][side] < 3.5

    rows = res["memory"]["rows"]
    assert {r["variant"] for r in rows} == {"fused_amp", "unfused_fp32"}
    for r in rows:
        assert 0 < r["lower_bound_bytes"] <= r["arena_bytes"]
        assert r["arena_over_bound"] >= 1.0
        assert r["state_bytes"] == sum(r["state_parts"].values())
        assert r["state_bytes"] + r["activation_bytes"] + r["workspace_bytes"] + r["input_bytes"] <= r["arena_bytes"]
    fp32 = next(r for r in rows if r["variant"] == "unfused_fp32")
    params = 784 * 1024 + 1024 + 1024 * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10
    assert fp32["state_parts"]["params"] >= 4 * params  # slots are padded, never smaller

    assert res["gpu"]["skipped"] in (True, False)
    if res["gpu"]["skipped"]:
        assert res["gpu"]["reason"]


def test_smoke_writes_and_prints_markdown(smoke):
    out, proc = smoke
    md = (out / "smoke.md").read_text()
    for heading in ("## 1. Compile time", "## 2. CPU training throughput", "## 3. Memory", "## 4. GPU"):
        assert heading in md
    assert "| mlp | 200 |" in md
    assert md.strip() in proc.stdout


def test_bad_section_is_a_usage_error():
    proc = subprocess.run([sys.executable, "-m", "bench", "--sections", "compile,nope"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "unknown section(s) nope" in proc.stderr


def test_torch_twin_matches_the_plan():
    """The PyTorch twin has the tr-mlir model's parameter count (a CIFAR ResNet-18: 11,173,962)."""
    from bench.models import THROUGHPUT_MODELS, torch_model

    m = THROUGHPUT_MODELS["resnet18_cifar"]
    net = torch_model(m.blueprint(), m.input_shape, m.num_classes)
    assert sum(p.numel() for p in net.parameters()) == 11_173_962


def test_openblas_env_is_unset_for_the_benchmark_alone(tmp_path):
    """With OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE set, ``python -m bench`` re-executes itself once
    without both and records which it unset."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(OPENBLAS_CORETYPE="Haswell", OPENBLAS_L2_SIZE="512")
    proc = subprocess.run([sys.executable, "-m", "bench", "--smoke", "--sections", "gpu", "--out-dir", str(tmp_path),
                           "--name", "env"], cwd=REPO, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads((tmp_path / "env.json").read_text())
    assert res["openblas_env_unset"] == ["OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"]
    assert set(res) >= {"gpu", "machine"} and "throughput" not in res
