"""bench/ (``python -m bench``) runs in its smoke mode and writes valid results.

No timing is asserted: only that every section runs, the JSON has the documented keys and
sane values (positive times, ratios, byte counts that add up), and the markdown has its tables.
The memory analysis is also checked on known plans: the liveness bound never exceeds the reuse
arena, which never exceeds the seed layout's; the bound is the brute-force largest live sum; the
plot is a PNG.
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
    git = res["machine"]["git"]
    assert len(git["commit"]) == 40 and isinstance(git["modified"], list)

    c = res["compile"]
    assert {r["variant"] for r in c["rows"]} == {"fused_amp", "unfused_fp32"}
    for r in c["rows"]:
        names = [p["pass"] for p in r["passes"]]
        assert names[0] == "arch-expand" and names[-2:] == ["memplan-skip-dead-outputs", "memplan-assign-offsets"]
        assert r["total_s"] > 0 and all(p["s"] >= 0 for p in r["passes"])
        assert r["round_trip"]["round_trip_ok"] and r["round_trip"]["chars"] > 1000

    t = res["throughput"]
    assert t["threads"] == 2 and t["gemm_peak"]["numpy_flops"] > 0
    (m,) = t["models"]
    assert m["model"] == "mlp" and m["batch"] == 200
    assert m["tr_mlir_images_per_s"] > 0 and m["torch_images_per_s"] > 0
    assert m["ratio"] == pytest.approx(m["tr_mlir_images_per_s"] / m["torch_images_per_s"])
    # one pair per round: the smoke mode has one round of 2 steps a side
    (pair,) = m["round_ratios"]
    assert pair == pytest.approx(m["median_round_ratio"]) == pytest.approx(m["ratio"])
    # steal and other processes' CPU time, over the model and per pair (Linux: /proc/stat)
    (pair_quiet,) = m["round_quiet"]
    for q in (m["quiet"], pair_quiet, res["machine"]["quiet"]):
        assert 0.0 <= q["steal"] <= 1.0 and 0.0 <= q["others_busy"] <= 1.0 and q["wall_s"] > 0
    # the seed's MLP: 784-1024-512-256-10, forward 2*200*(784*1024+1024*512+512*256+256*10), x3 less the
    # first layer's input gradient
    fwd = 2 * 200 * (784 * 1024 + 1024 * 512 + 512 * 256 + 256 * 10)
    assert m["step_flops"] == 3 * fwd - 2 * 200 * 784 * 1024
    for side in ("tr_mlir", "torch"):  # both start from a fresh 10-class model
        assert 1.5 < m["first_loss"][side] < 3.5

    mem = res["memory"]
    rows = mem["rows"]
    assert [r["variant"] for r in rows] == ["unfused_fp32", "fused_fp32", "fused_amp"]
    for r in rows:
        assert r["model"] == "mlp" and r["batch"] == 200
        # the bound never exceeds the reuse arena, and packing never grows the seed's arena
        assert 0 < r["lower_bound_bytes"] <= r["arena_bytes"] <= r["seed_arena_bytes"]
        assert r["seed_lower_bound_bytes"] <= r["seed_arena_bytes"]
        assert r["arena_over_bound"] == pytest.approx(r["arena_bytes"] / r["lower_bound_bytes"])
        assert r["arena_over_bound"] >= 1.0
        assert r["seed_arena_over_bound"] >= r["arena_over_bound"]
        assert r["persistent_bytes"] + r["transient_pool_bytes"] <= r["arena_bytes"]
        assert r["lower_bound_bytes"] == r["persistent_bytes"] + r["transient_peak_bytes"]
        assert r["state_bytes"] == sum(r["state_parts"].values())
        assert r["state_bytes"] + r["input_bytes"] <= r["persistent_bytes"]
        assert r["persistent_bytes"] + r["activation_bytes"] + r["workspace_bytes"] <= r["seed_arena_bytes"]
        # the peak: a node of the train graph, the largest live DTensors first
        p = r["peak"]
        assert p["where"].startswith("@train ") and 0 < len(p["largest"]) <= 5 <= p["live_count"]
        sizes = [t["bytes"] for t in p["largest"]]
        assert sizes == sorted(sizes, reverse=True) and sum(sizes) <= r["transient_peak_bytes"]
        # the step curve lies between the persistent bytes and the bound (its peak over all sequences)
        curve = r["step_curve_mib"]
        assert len(curve) == r["step_nodes"] > 10
        assert r["persistent_bytes"] / 2**20 - 0.01 <= min(curve) <= max(curve) <= r["lower_bound_bytes"] / 2**20 + 0.01
        if p["in_train_base_step"]:
            assert max(curve) == pytest.approx(r["lower_bound_bytes"] / 2**20, abs=0.01)
    fp32 = rows[0]
    params = 784 * 1024 + 1024 + 1024 * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10
    assert fp32["state_parts"]["params"] >= 4 * params  # slots are padded, never smaller
    assert fp32["state_parts"]["grads"] == fp32["state_parts"]["optimizer"] == fp32["state_parts"]["params"]

    t = mem["torch"]["mlp"]
    assert "error" not in t and "profiler_error" not in t, t
    assert t["param_bytes"] == 4 * params and t["profiler_held_bytes"] >= 2 * 4 * params  # weights + momentum
    assert t["profiler_peak_bytes"] >= t["profiler_held_bytes"] and t["timeline_window"] == "marker"
    assert len(t["timeline_mib"]) == 200 and max(t["timeline_mib"]) == pytest.approx(t["profiler_peak_bytes"] / 2**20,
                                                                                   abs=0.01)
    for r in rows[:2]:
        ours = r["tr_mlir_rss"]
        assert "error" not in ours, ours
        assert ours["arena_bytes"] == r["arena_bytes"] and ours["bytes_needed"] > r["arena_bytes"]
        assert ours["fuse"] is (r["variant"] == "fused_fp32") and ours["reuse"] is True
        assert all(1.5 < loss < 3.5 for loss in ours["losses"])
        v = r["vs_torch"]
        assert v["arena_vs_profiler"] == pytest.approx(r["arena_bytes"] / t["profiler_peak_bytes"])
        assert v["seed_arena_vs_profiler"] == pytest.approx(r["seed_arena_bytes"] / t["profiler_peak_bytes"])
        if ours["rss_peak_delta_bytes"] is not None and t["rss_peak_delta_bytes"] is not None:
            assert ours["rss_peak_delta_bytes"] >= r["arena_bytes"]  # the arena is zeroed: every page touched
            assert v["rss_delta"] == pytest.approx(ours["rss_peak_delta_bytes"] / t["rss_peak_delta_bytes"])
            assert v["steps_rss_delta"] == pytest.approx(ours["steps_peak_delta_bytes"] / t["steps_peak_delta_bytes"])
            for side in (ours, t):  # the whole peak is the larger of the build's and the steps'
                assert side["rss_peak_delta_bytes"] == max(side["build_peak_delta_bytes"],
                                                           side["steps_peak_delta_bytes"])
                assert side["rss_end_delta_bytes"] <= side["steps_peak_delta_bytes"]
    assert "vs_torch" not in rows[2] and "tr_mlir_rss" not in rows[2]  # AMP: plan side only
    assert mem["targets"] == []  # no target model in the smoke mode

    png = out / mem["plots"]["mlp"]
    assert mem["plots"] == {"mlp": "smoke-memory-mlp.png"}
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and 5_000 < len(data) < 150_000

    assert res["gpu"]["skipped"] in (True, False)
    if res["gpu"]["skipped"]:
        assert res["gpu"]["reason"]


def test_smoke_writes_and_prints_markdown(smoke):
    out, proc = smoke
    md = (out / "smoke.md").read_text()
    for heading in ("## 1. Compile time", "## 2. CPU training throughput", "## 3. Memory", "## 4. GPU"):
        assert heading in md
    assert "| mlp | 200 |" in md
    res = json.loads((out / "smoke.json").read_text())
    for r in res["memory"]["rows"]:  # a plan-side row per variant, with the arenas of the JSON
        mib = [f"{r[k] / 2**20:,.1f}" for k in ("seed_arena_bytes", "arena_bytes")]
        assert f"| mlp | {r['variant']} | 200 | {mib[0]} | {mib[1]} |" in md
    assert "![mlp: memory over one training step](smoke-memory-mlp.png)" in md
    assert md.strip() in proc.stdout


def test_quietness_is_steal_and_others_over_all_vcpu_time():
    from bench.cpu_time import CpuSample, describe, quietness, sample

    a = CpuSample(wall_s=10.0, busy_s=100.0, steal_s=5.0, total_s=1000.0, own_s=50.0)
    # 20 s of 2 vCPUs: 40 s, of which 4 steal, 30 busy (25 of them this process's)
    b = CpuSample(wall_s=30.0, busy_s=130.0, steal_s=9.0, total_s=1040.0, own_s=75.0)
    q = quietness(a, b)
    assert q == pytest.approx({"steal": 0.1, "others_busy": 0.125, "wall_s": 20.0})
    assert describe(q) == "steal 10.0%, others 12.5%"
    # this process's threads can be counted in busy_s later than in own_s: never negative
    assert quietness(a, CpuSample(30.0, 110.0, 5.0, 1040.0, 75.0))["others_busy"] == 0.0
    assert quietness(a, a) is None and quietness(None, b) is None and describe(None) == "-"
    if Path("/proc/stat").exists():
        s0 = sample()
        assert s0 is not None and s0.total_s >= s0.busy_s + s0.steal_s > 0


def test_memory_plan_row_bound_is_the_largest_live_sum():
    """On a small ResNet: the bound is the largest sum of live slots found by brute force over the
    timeline, the peak's DTensors are live there, and the reuse layout holds the bound."""
    from bench.memory import _layout, compile_pair, train_base_step

    row, secs = compile_pair("resnet_tiny", 8, fuse=False, amp=False)
    assert secs["seed"] > 0 and secs["reuse"] > 0
    assert row["lower_bound_bytes"] <= row["arena_bytes"] < row["seed_arena_bytes"]
    assert row["transient_peak_bytes"] <= row["transient_pool_bytes"]

    from bench.compile_time import SPEC, compile_timed

    module, _ = compile_timed("resnet_tiny", fuse=False, amp=False, spec={**SPEC, "batch_size": 8, "train_size": 800,
                                                                        "val_size": 8})
    _, base, life, slots = _layout(module)
    sums = [sum(slots[i] for i in life.live_at(t)) for t in range(life.length)]
    assert max(sums) == row["transient_peak_bytes"] and sums.index(max(sums)) == row["peak"]["time"]
    start, nodes = train_base_step(life)
    assert start == 0 and nodes == row["step_nodes"]
    curve = [row["persistent_bytes"] + s for s in sums[start:start + nodes]]
    assert row["step_curve_mib"] == [round(v / 2**20, 2) for v in curve]  # fewer nodes than bins: one per node


def test_memory_runs_keep_the_median(monkeypatch):
    import bench.memory as M

    deltas = iter([300, 100, 200, None])
    monkeypatch.setattr(M, "measure", lambda side, name, batch, **kw: {"rss_peak_delta_bytes": next(deltas),
                                                                      "side": side})
    got = M.measure_runs("torch", "mlp", 200, 3)
    assert got == {"rss_peak_delta_bytes": 200, "side": "torch", "runs": 3, "rss_peak_delta_runs": [300, 100, 200]}
    assert M.measure_runs("torch", "mlp", 200, 1) == {"rss_peak_delta_bytes": None, "side": "torch", "runs": 1}


def test_memory_helpers():
    from bench.cli import dumps
    from bench.memory import bin_max, targets
    from bench.peak import binned

    assert bin_max([1, 5, 2, 3], 2) == [5, 3] and bin_max([1, 2], 5) == [1, 2]
    assert bin_max(list(range(1000)), 200)[-1] == 999 and len(bin_max(list(range(1001)), 200)) == 200
    # a step function over [0, 1]: the largest value in force in each bin, carried across bins
    assert binned([0.0, 0.1, 0.15, 0.9], [1.0, 4.0, 2.0, 3.0], 4) == [4.0, 2.0, 2.0, 3.0]
    assert binned([0.0, 0.6], [10.0, 5.0], 2) == [10.0, 10.0] and binned([0.0, 0.3], [10.0, 5.0], 2) == [10.0, 5.0]
    assert binned([0.0, 1.0], [1.0, 7.0], 3) == [1.0, 1.0, 7.0]  # the last event lands in the last bin
    res = {"a": [1, 2.5, -3e-05], "b": [[1, 2], {"c": "x, y"}], "d": ["1", "2"]}
    text = dumps(res)
    assert json.loads(text) == res and "[1, 2.5, -3e-05]" in text and "[1, 2]" in text
    rows = [{"model": "resnet18_cifar", "batch": 64, "variant": v, "vs_torch": {"rss_delta": x}}
            for v, x in (("unfused_fp32", 0.7), ("fused_fp32", 0.9), ("fused_amp", 0.1))]
    rows.append({"model": "resnet50", "batch": 32, "variant": "fused_fp32"})
    got = {(t["model"], t["variant"]): (t["value"], t["met"]) for t in targets(rows)}
    assert got == {("resnet18_cifar", "unfused_fp32"): (0.7, True), ("resnet18_cifar", "fused_fp32"): (0.9, False),
                   ("resnet50", "fused_fp32"): (None, None)}


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


# -- section 4 (GPU): the rendering of a recorded timing, without a GPU ----------------------

# FIXTURE, hand-written for the renderer: the shape of scripts/gpu_smoke.py's report (its
# docstring), with made-up numbers. It is NOT a measurement; no GPU has run the comparison yet.
GPU_REPORT_FIXTURE = {
    "fixture": "hand-written for tests/test_bench.py; not a measurement",
    "gpu": "NVIDIA H200 (1 device)", "seconds": 201.5, "sections": {"timing": {"ok": True, "seconds": 190.0}},
    "timing": {
        "models": ["resnet8", "mlp", "resnet50"], "steps": 20, "warmup": 5, "time_budget_s": 20.0,
        "compile": {"enabled": True, "backend": "inductor", "mode": "default",
                    "budget_s": {"mlp": 90.0, "resnet50": 150.0}},
        "model": "resnet8_cifar", "batch": 256,
        "ours_fp32": {"graph_replay_ms": 4.0, "train_step_ms": 5.0, "graphs_per_step": 14, "img_per_s": 51200.0},
        "ours_amp": {"graph_replay_ms": 3.0, "train_step_ms": 4.0, "graphs_per_step": 16, "img_per_s": 64000.0},
        "torch_eager_fp32": {"step_ms": 6.0, "img_per_s": 42666.7},
        "torch_eager_amp": {"step_ms": 8.0, "img_per_s": 32000.0},
        "torch_version": "2.11.0+cu130",
        "torch_settings": {"memory_format": "NCHW", "cudnn_benchmark": True, "allow_tf32_matmul": False,
                           "allow_tf32_cudnn": True},
        "comparisons": [
            {"model": "mlp", "zoo_model": "mlp", "input_hwc": [28, 28, 1], "num_classes": 10, "batch": 200,
             "precision": "fp32", "fuse": False,
             "tr_mlir": {"compile_s": 1.0, "graph_replay_ms": 0.25, "train_step_ms": 0.5, "img_per_s": 800000.0,
                         "train_step_img_per_s": 400000.0, "graphs_per_step": 9, "kernel_nodes_per_step": 30,
                         "timed_steps": 20, "graph_replay_ms_each": [0.25] * 20, "train_step_ms_each": [0.5] * 20},
             "torch_eager": {"step_ms": 1.0, "img_per_s": 200000.0, "first_step_s": 0.5, "timed_steps": 20,
                             "step_ms_each": [1.0] * 20},
             "torch_compile": {"step_ms": 0.5, "img_per_s": 400000.0, "first_step_s": 20.0, "timed_steps": 20,
                               "step_ms_each": [0.5] * 20, "backend": "inductor", "mode": "default",
                               "process_s": 40.0},
             "ratio_vs_eager": 4.0, "ratio_vs_compile": 2.0, "train_step_ratio_vs_eager": 2.0},
            {"model": "mlp", "zoo_model": "mlp", "input_hwc": [28, 28, 1], "num_classes": 10, "batch": 2048,
             "precision": "fp32", "fuse": False,
             "tr_mlir": {"error": "CudaLaunchError: made-up failure for the fixture"},
             "torch_eager": {"step_ms": 2.0, "img_per_s": 1024000.0, "first_step_s": 0.1, "timed_steps": 20,
                             "step_ms_each": [2.0] * 20},
             "torch_compile": {"step_ms": 1.6, "img_per_s": 1280000.0, "first_step_s": 5.0, "timed_steps": 20,
                               "step_ms_each": [1.6] * 20, "backend": "inductor", "mode": "default",
                               "process_s": 40.0},
             "ratio_vs_eager": None, "ratio_vs_compile": None, "train_step_ratio_vs_eager": None},
            {"model": "resnet50", "zoo_model": "resnet50", "input_hwc": [224, 224, 3], "num_classes": 1000,
             "batch": 64, "precision": "amp", "fuse": True,
             "tr_mlir": {"compile_s": 9.0, "graph_replay_ms": 200.0, "train_step_ms": 220.0, "img_per_s": 320.0,
                         "train_step_img_per_s": 290.9, "graphs_per_step": 14, "kernel_nodes_per_step": 900,
                         "timed_steps": 10, "graph_replay_ms_each": [200.0] * 10, "train_step_ms_each": [220.0] * 10},
             "torch_eager": {"step_ms": 40.0, "img_per_s": 1600.0, "first_step_s": 3.0, "timed_steps": 10,
                             "step_ms_each": [40.0] * 10},
             "torch_compile": {"skipped": "torch.compile exceeded its time budget of 150 s", "process_s": 150.2},
             "ratio_vs_eager": 0.2, "ratio_vs_compile": None, "train_step_ratio_vs_eager": 40.0 / 220.0},
        ],
    },
}


def test_gpu_section_renders_a_recorded_timing():
    from bench.gpu import from_report
    from bench.report import gpu_table

    g = from_report(GPU_REPORT_FIXTURE, 0, "unused")
    assert g["skipped"] is False and g["ok"] is True and g["device"] == "NVIDIA H200 (1 device)"
    assert g["timing"] is GPU_REPORT_FIXTURE["timing"] and g["smoke_seconds"] == 201.5
    md = gpu_table(g)
    assert md.startswith("Device: NVIDIA H200 (1 device).") and "reported a failure" not in md
    # resnet8_cifar as before
    assert "| resnet8_cifar | 256 | fp32 | 4.00 | 5.00 | 6.00 | 1.20 |" in md
    assert "| resnet8_cifar | 256 | amp | 3.00 | 4.00 | 8.00 | 2.00 |" in md
    # the comparisons: ms, img/s, ratios, torch.compile's first step, timed steps
    assert ("| mlp | 200 | fp32 | 0.25 | 0.50 | 1.00 | 0.50 | 800,000 | 200,000 | 400,000 | **4.00** | **2.00** "
            "| 20.0 | 20/20/20 |") in md
    assert "| mlp | 2048 | fp32 | error | error | 2.00 | 1.60 | - | 1,024,000 | 1,280,000 | - | - | 5.0 | -/20/20 |" in md
    assert ("| resnet50 | 64 | amp fused | 200.00 | 220.00 | 40.00 | skipped | 320 | 1,600 | - | **0.20** | - | - "
            "| 10/10/- |") in md
    assert "- mlp batch 2048, tr-mlir: error: CudaLaunchError: made-up failure for the fixture" in md
    assert "- resnet50 batch 64, torch.compile: skipped: torch.compile exceeded its time budget of 150 s" in md
    assert "torch 2.11.0+cu130, NCHW, cudnn.benchmark True" in md and "budget mlp 90 s, resnet50 150 s" in md
    # a markdown table: every row has the header's column count
    rows = [line for line in md.splitlines() if line.startswith("| mlp") or line.startswith("| resnet50")]
    head = next(line for line in md.splitlines() if line.startswith("| model | batch | precision | tr-mlir"))
    assert len(rows) == 3 and all(r.count("|") == head.count("|") for r in rows)


def test_gpu_section_keeps_a_failed_runs_timing_and_says_so():
    from bench.gpu import from_report
    from bench.report import gpu_table

    failed = {**GPU_REPORT_FIXTURE, "sections": {"timing": {"ok": False, "seconds": 100.0}}}
    g = from_report(failed, 1, "unused")
    assert g["skipped"] is False and g["ok"] is False and g["exit_code"] == 1
    md = gpu_table(g)
    assert "**The smoke script reported a failure** (exit 1)" in md and "| mlp | 200 |" in md

    only_mlp = {"gpu": "G", "timing": {**{k: v for k, v in GPU_REPORT_FIXTURE["timing"].items()
                                          if not k.startswith(("ours_", "torch_eager_", "model", "batch"))},
                                       "compile": {"enabled": False, "backend": "inductor", "mode": "default",
                                                   "budget_s": {}},
                                       "comparisons": GPU_REPORT_FIXTURE["timing"]["comparisons"][:1]}}
    md = gpu_table(from_report(only_mlp, 0, "unused"))
    assert "resnet8_cifar" not in md and "torch.compile not run (--no-compile)" in md and "| mlp | 200 |" in md


@pytest.mark.parametrize("report, rc, reason", [
    (None, 1, "scripts/gpu_smoke.py failed (exit 1): Traceback line"),
    (None, 0, "scripts/gpu_smoke.py wrote no timing section"),
    ({"gpu": "G", "sections": {"timing": "skipped"}}, 0, "scripts/gpu_smoke.py wrote no timing section"),
])
def test_gpu_section_skips_without_a_timing(report, rc, reason):
    from bench.gpu import from_report
    from bench.report import gpu_table

    g = from_report(report, rc, "G", "Traceback line")
    assert g == {"skipped": True, "reason": reason} and gpu_table(g) == f"Skipped: {reason}."


def test_gpu_section_command_line():
    from bench.gpu import OTHER_SECTIONS, smoke_command

    cmd = smoke_command("s.py", "r.json", steps=7)
    assert cmd[1:6] == ["s.py", "--report", "r.json", "--steps", "7"]
    assert all(f"--skip {s}" in " ".join(cmd) for s in OTHER_SECTIONS) and "--no-compile" not in cmd
    assert "--timing-models" not in cmd  # the script's default: all of them
    cmd = smoke_command("s.py", "r.json", models=("mlp", "resnet50"), compile=False)
    assert cmd[-3:] == ["--timing-models", "mlp,resnet50", "--no-compile"]


def test_gpu_section_runs_the_smoke_script(monkeypatch):
    """With the GPU check forced (this machine has none), section 4 runs the real script, which
    finds no GPU, prints its one line and writes no report: a skip that says so."""
    import bench.gpu as G

    if G.gpu_present()[0]:
        pytest.skip("a GPU is present: the script would time the models")
    monkeypatch.setattr(G, "gpu_present", lambda: (True, "forced"))
    assert G.run(str(REPO), timeout=120) == {"skipped": True, "reason": "scripts/gpu_smoke.py wrote no timing section"}


def test_fc_relu_epilogue_benchmarks_run(capsys):
    """``python -m bench.epilogues fc-relu-kernels`` / ``fc-relu-step``, one round each: every
    MLP pair timed on the three sides, and the whole steps' tr-mlir losses bit-identical with and
    without memplan-fuse-fc-relu."""
    from bench.epilogues import fc_relu_kernels, fc_relu_step

    fc_relu_kernels(1)
    out = capsys.readouterr().out
    assert out.count("fwd fc+relu") == 3 and out.count("bwd relu+fc") == 3 and "all six" in out
    assert "load " in out  # and the steal time, or "-" where /proc/stat is missing
    fc_relu_step(1, 1)
    out = capsys.readouterr().out
    assert "before / after" in out and "tr-mlir losses bit-identical: True" in out


def test_bn_stats_bound_benchmark_runs(capsys):
    """``python -m bench.epilogues bn-stats``, one round: a row per ResNet-18 shape, the load and
    the steal time printed."""
    import numpy as np
    from bench.epilogues import SHAPES, bn_stats

    from tr_mlir.lowering.cpu import _cnorm

    if not _cnorm.usable(np.zeros(1, np.float32)):
        bn_stats(1)
        assert "no usable C compiler" in capsys.readouterr().out
        pytest.skip("no usable C compiler (or TR_MLIR_CC=0): the compiled statistics kernel is what this mode times")
    bn_stats(1)
    out = capsys.readouterr().out
    assert all("x".join(map(str, s)) in out for s in SHAPES) and "steal" in out


def test_bn_stats_epilogue_kernel_benchmark_runs(capsys):
    """``python -m bench.epilogues bn-stats-kernels``, one round: a row per ResNet-18 shape with
    its Winograd variant, the PyTorch columns, the load and the steal time. (``bn-stats-step``
    shares the interleaved three-sided step loop of ``fc-relu-step``, run above.)"""
    from bench.epilogues import SHAPES, bn_stats_kernels

    bn_stats_kernels(1)
    out = capsys.readouterr().out
    assert all("x".join(map(str, s)) in out for s in SHAPES) and "winograd_4x4_3x3" in out
    assert "torch conv" in out and "torch / ours" in out and "steal" in out


def test_thread_scaling_compares_each_side_with_itself():
    """Issue 13's "both threads busy": each side's median step on 1 thread over its median on 2,
    rendered with whether tr-mlir scales at least as well."""
    from bench.report import throughput_table
    from bench.throughput import thread_scaling

    def model(name, ours, torch):
        return {"model": name, "tr_mlir_step_s": ours, "torch_step_s": torch}

    t = {"threads": 2, "models": [model("mlp", 0.005, 0.009), model("lenet5", 0.002, 0.004)],
         "by_threads": {"1": {"threads": 1, "models": [model("mlp", 0.009, 0.016), model("lenet5", 0.0025, 0.008)]}}}
    got = {s["model"]: s for s in thread_scaling(t)}
    assert got["mlp"]["tr_mlir"] == pytest.approx(1.8) and got["mlp"]["torch"] == pytest.approx(16 / 9)
    assert got["lenet5"]["tr_mlir"] == pytest.approx(1.25) and got["lenet5"]["torch"] == pytest.approx(2.0)
    assert got["mlp"]["from_threads"] == 1 and got["mlp"]["threads"] == 2
    assert thread_scaling({"threads": 2, "models": t["models"]}) == []

    from bench.report import _scaling_table

    table = _scaling_table(thread_scaling(t))
    assert "| mlp | 1 -> 2 | **1.80x** | 1.78x | yes |" in table
    assert "| lenet5 | 1 -> 2 | **1.25x** | 2.00x | no |" in table
    t["scaling"] = thread_scaling(t)
    assert table in throughput_table({**t, "gemm_peak": {"n": 8, "numpy_flops": 1.0, "torch_flops": 1.0}, "blas": [],
                                      "models": [], "by_threads": {}})


def test_host_scaling_reports_the_hosts_own_scaling():
    """The host's own scaling under the thread-scaling table: the np.matmul peak ratio and the streaming add's
    ratio per operand size between the two thread counts (older results without probes: none)."""
    from bench.report import throughput_table
    from bench.throughput import host_scaling, stream_rate

    sub = {"threads": 1, "gemm_peak": {"numpy_flops": 250e9}, "stream": {"262144": 100e9, "4194304": 60e9}, "models": []}
    t = {"threads": 2, "gemm_peak": {"n": 8, "numpy_flops": 480e9, "torch_flops": 1.0}, "blas": [], "models": [],
         "stream": {"262144": 180e9, "4194304": 63e9}, "by_threads": {"1": sub}}
    (h,) = host_scaling(t)
    assert (h["from_threads"], h["threads"]) == (1, 2) and h["gemm"] == pytest.approx(1.92)
    assert h["stream"] == {"262144": pytest.approx(1.8), "4194304": pytest.approx(1.05)}
    assert host_scaling({**t, "by_threads": {"1": {k: v for k, v in sub.items() if k != "stream"}}}) == []
    t["scaling"] = [{"model": "mlp", "from_threads": 1, "threads": 2, "tr_mlir": 1.7, "torch": 1.9}]
    t["host_scaling"] = [h]
    text = throughput_table({**t, "by_threads": {}})
    assert ("1 -> 2 threads: a 2048^3 np.matmul **1.92x**; a split np.add streaming three operands (a reference for "
            "a step's memory-bound passes) **1.80x** over 1 MiB operands, **1.05x** over 16 MiB operands.") in text
    assert "np.matmul **1.92x**." in throughput_table({**t, "by_threads": {}, "host_scaling": [{**h, "stream": {}}]})
    assert stream_rate(1, 4096, seconds=0.001, repeats=1) > 0 and stream_rate(2, 4096, seconds=0.001, repeats=1) > 0
    with pytest.raises(ValueError, match="threads"):
        stream_rate(0, 10)


def test_stream_rate_reraises_a_probe_threads_error(monkeypatch):
    """A probe thread that fails does not leave a rate measured on fewer threads: its error is
    raised on the caller, and no thread is left waiting."""
    import threading

    from bench import throughput

    real_add = throughput.np.add
    before = threading.active_count()

    def add(*args, **kw):
        if threading.current_thread() is not threading.main_thread():
            raise MemoryError("probe thread")
        return real_add(*args, **kw)

    monkeypatch.setattr(throughput.np, "add", add)
    with pytest.raises(MemoryError, match="probe thread"):
        throughput.stream_rate(2, 4096, seconds=0.001, repeats=1)
    assert threading.active_count() == before


def test_scaling_writes_both_sides_per_round(tmp_path):
    """``python -m bench.scaling`` (the thread counts interleaved): one round of one step a side
    on the MLP writes the JSON and markdown with each side's step per thread count, its scaling
    (1-thread median over 2-thread median) and one per-round value each, and the host's own
    streaming-add ratio per operand size."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-m", "bench.scaling", "mlp", "--rounds", "1", "--steps", "1", "--pause", "0",
                           "--out-dir", str(tmp_path), "--name", "s"], cwd=REPO, capture_output=True, text=True,
                          timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads((tmp_path / "s.json").read_text())
    (m,) = res["models"]
    assert m["model"] == "mlp" and m["rounds"] == 1 and m["steps"] == 1 and m["threads"] == [2, 1]
    for side in ("tr_mlir", "torch"):
        step = m["step_s"][side]
        assert step["1"] > 0 and step["2"] > 0
        assert m["scaling"][side] == pytest.approx(step["1"] / step["2"])
        assert m["split_loss_s"][side] == pytest.approx(step["2"] - step["1"] / 2)  # what a perfect split would save
        assert len(m["round_scaling"][side]) == 1 and len(m["step_times_s"][side]["2"]) == 1
    assert m["rounds_at_least_torch"] in (0, 1)
    assert len(m["host_memory_ratio"]) == 1 and m["host_memory_ratio"][0] > 0  # the memory probe after each round
    (probes,) = m["core_round_trip_s"]  # the core-to-core round trip after each of the round's four blocks
    from tr_mlir.lowering.cpu import _cc

    probing = len(os.sched_getaffinity(0)) >= 2 and _cc.available()
    assert len(probes) <= 4 and all(t > 0 for t in probes) and (probes or not probing)  # None on a busy host
    md = (tmp_path / "s.md").read_text()
    assert "| mlp (200) | 1 x 1 |" in md
    loss = m["split_loss_s"]
    assert f"| {loss['tr_mlir'] * 1e3:.1f} / {loss['torch'] * 1e3:.1f} |" in md
    from bench.throughput import STREAM_ELEMENTS

    host = res["host_stream"]  # the host's streaming add on both thread counts, every operand size
    assert set(host["rate"]) == {"1", "2"} and set(host["ratio"]) == {str(n) for n in STREAM_ELEMENTS}
    for n, r in host["ratio"].items():
        assert host["rate"]["1"][n] > 0 and r == pytest.approx(host["rate"]["2"][n] / host["rate"]["1"][n])
    assert "The host itself, 1 -> 2 threads, a split np.add streaming three operands: **" in md
    assert "over 64 MiB operands" in md
    from bench.throughput import GEMM_PROBE_SHAPES

    gemm = res["host_gemm"]  # independent one-thread GEMM streams on both thread counts, every shape
    keys = {" x ".join(map(str, shape)) for shape in GEMM_PROBE_SHAPES}
    assert set(gemm["rate"]) == {"1", "2"} and set(gemm["ratio"]) == keys
    for k, r in gemm["ratio"].items():
        assert gemm["rate"]["1"][k] > 0 and r == pytest.approx(gemm["rate"]["2"][k] / gemm["rate"]["1"][k])
    assert "Its compute, 1 -> 2 threads, independent one-thread np.matmul streams (one per thread): **" in md


def test_gemm_rate_counts_every_streams_flops_and_checks_its_arguments():
    """The compute probe gives positive FLOP/s on one and two threads and refuses bad arguments
    (its ratio is a measurement, reported by bench.scaling, not asserted)."""
    from bench.throughput import gemm_rate

    one, two = gemm_rate(1, 64, 32, 48, seconds=0.002, repeats=2), gemm_rate(2, 64, 32, 48, seconds=0.002, repeats=2)
    assert one > 0 and two > 0
    with pytest.raises(ValueError, match="at least 1 thread"):
        gemm_rate(0, 4, 4, 4)
    with pytest.raises(ValueError, match="non-empty GEMM"):
        gemm_rate(1, 0, 4, 4)


def test_core_round_trip_measures_and_checks_its_arguments(monkeypatch):
    """The cache-line ping-pong gives a positive time per round trip, stops at its time limit
    (not after billions of rounds), refuses bad arguments, runs concurrently with itself, and
    gives None rather than spinning two threads on one CPU or without a C compiler."""
    import threading
    import time

    from bench.throughput import core_round_trip
    from tr_mlir.lowering.cpu import _cc

    if len(os.sched_getaffinity(0)) < 2 or not _cc.available():
        assert core_round_trip() is None
    else:
        rt = core_round_trip(rounds=2000)
        assert rt is None or rt > 0  # None: the second thread never ran (a busy host)
        t0 = time.perf_counter()
        core_round_trip(rounds=2 ** 62, limit=0.02)
        assert time.perf_counter() - t0 < 5.0  # stopped by the limit: 2**62 trips would take centuries
        got: list = []
        pair = [threading.Thread(target=lambda: got.append(core_round_trip(rounds=10 ** 9, limit=0.02)))
                for _ in range(2)]
        for th in pair:
            th.start()
        for th in pair:
            th.join(timeout=60)
        assert not any(th.is_alive() for th in pair) and len(got) == 2  # no hang with two at once
    for bad in ({"rounds": 0}, {"rounds": 2 ** 63}, {"limit": 0.0}, {"limit": float("nan")}, {"limit": float("inf")}):
        with pytest.raises(ValueError, match="expected"):
            core_round_trip(**bad)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    assert core_round_trip() is None
    monkeypatch.undo()
    monkeypatch.setenv("TR_MLIR_CC", "0")
    assert core_round_trip() is None


def test_scaling_splits_rounds_by_core_placement():
    """Rounds whose round trips have a median above FAR_ROUND_TRIP_S count as far, the others as
    close (one slow probe does not make a round far), rounds without a probe as neither."""
    from bench import scaling

    far = scaling.FAR_ROUND_TRIP_S
    m = {"round_scaling": {"tr_mlir": [1.5, 1.1, 1.6, 1.2], "torch": [1.8, 1.7, 1.9, 1.6]},
         "core_round_trip_s": [[1e-7, 2 * far, 1e-7, 1e-7], [2 * far, 2 * far, 1e-7, 3 * far], [], [far] * 4]}
    assert scaling.placement_scaling(m) == {"close": {"tr_mlir": [1.5, 1.2], "torch": [1.8, 1.6]},
                                            "far": {"tr_mlir": [1.1], "torch": [1.7]}}
    assert scaling.placement_scaling({"round_scaling": m["round_scaling"]}) == {
        "close": {"tr_mlir": [], "torch": []}, "far": {"tr_mlir": [], "torch": []}}


def test_split_loss_is_the_time_over_a_perfect_split():
    """Two sides losing the same seconds to the split: the one with the shorter step has the lower
    speed-up (why bench.scaling reports the seconds next to the ratios)."""
    from bench.scaling import split_loss

    assert split_loss(0.600, 0.300, 2) == pytest.approx(0.0)  # a perfect split
    assert split_loss(0.600, 0.330, 2) == pytest.approx(0.030)
    assert split_loss(1.200, 0.630, 2) == pytest.approx(0.030)  # the same loss, 1.90x against 1.82x
    assert split_loss(0.100, 0.060, 2) == pytest.approx(0.010)
    assert split_loss(0.090, 0.020, 2) == pytest.approx(-0.025)  # better than a perfect split (e.g. cache)
    assert split_loss(0.800, 0.250, 4) == pytest.approx(0.050)  # the ratio divides, not a fixed 2
    assert split_loss(0.300, 0.200, 1.5) == pytest.approx(0.0)


def test_scaling_report_reads_results_without_split_loss():
    """Results written before the split-loss column render it as ``-``; every row of the table
    has the header's columns."""
    from bench import scaling

    m = {"model": "mlp", "batch": 200, "rounds": 1, "steps": 1, "step_s": {s: {1: 0.008, 2: 0.005} for s in
                                                                          ("tr_mlir", "torch")},
         "scaling": {"tr_mlir": 1.6, "torch": 1.6}, "round_scaling": {"tr_mlir": [1.6], "torch": [1.6]},
         "median_round_scaling": {"tr_mlir": 1.6, "torch": 1.6}, "rounds_at_least_torch": 1,
         "quiet": {"steal": 0.0, "others_busy": 0.0}}
    res = {"date": "2026-12-07", "machine": {"git": {"commit": "x"}, "cpu": "cpu", "cores": 2, "load_before": [0.1],
                                             "load_after": [0.2]},
           "openblas_env_unset": "", "duration_s": 1.0, "models": [m, {**m, "model": "lenet5",
                                                                        "split_loss_s": {"tr_mlir": 0.001,
                                                                                         "torch": 0.002}}]}
    table = [line for line in scaling.report(res).splitlines() if line.startswith("|")]
    assert len(table) == 4 and len({line.count("|") for line in table}) == 1
    assert "| 1 of 1 | - |" in table[2] and "| 1 of 1 | 1.0 / 2.0 |" in table[3]


def test_scaling_rejects_unknown_models():
    proc = subprocess.run([sys.executable, "-m", "bench.scaling", "nope"], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and "unknown model(s) nope" in proc.stderr


@pytest.mark.parametrize("args, message", [
    (["--pause", "-1"], "--pause must be a finite number of seconds >= 0"),
    (["--name", "a/b"], "--name must be a file name stem without a folder"),
    (["--out-dir", "/proc/no/such/folder"], "cannot write results into --out-dir"),
    (["--keep-blas"], "unrecognized arguments: --keep-blas"),
])
def test_scaling_checks_its_arguments_before_measuring(args, message):
    """Bad arguments are usage errors (rc 2, no traceback) found before any model is compiled."""
    proc = subprocess.run([sys.executable, "-m", "bench.scaling", "mlp", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr


def test_kernel_scaling_times_every_kernel_call(tmp_path):
    """``python -m bench.kernel_scaling``: one 2-thread block and one 1-thread block of the MLP give
    each kernel call's time per step on 1 thread, the totals, and the JSON of the measurements."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = tmp_path / "k.json"
    proc = subprocess.run([sys.executable, "-m", "bench.kernel_scaling", "mlp", "--blocks", "1", "--steps", "1",
                           "--top", "3", "--json", str(out)], cwd=REPO, capture_output=True, text=True, timeout=600,
                          env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads(out.read_text())
    assert res["model"] == "mlp" and res["blocks"]["1t"] == 1 and res["blocks"]["2t"] == 1
    assert res["blocks"]["close"] + res["blocks"]["far"] <= 1
    ran = [k for k in res["kernels"] if k["1t"] is not None]  # the other slot's graphs did not run in one step
    assert res["step_s"]["1t"] > 0 and len(ran) >= 10 and all(k["1t"] >= 0 for k in ran)
    assert any(k["label"].startswith("fc_relu_fwd (200, 1, 1, 784)") for k in res["kernels"])  # registered names
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("mlp (batch 200): blocks 1t 1, 2t 1")
    assert lines[1].startswith("kernel sums ms per step: 1t ")
    assert len(lines) == 3 + 3  # header lines and the top 3 calls


def test_kernel_scaling_blocks_sort_calls_by_placement(monkeypatch):
    """run_blocks with a fake step (two calls of known seconds per step, the untimed first step of
    each block recorded too), a fake probe and a fake thread switch: the untimed step is left out,
    times are per step, every 2-thread block counts in 2t and in close or far by its two probes
    (mixed or missing: neither), and a 1-thread block follows the first and every one_every-th."""
    import contextlib

    from bench.kernel_scaling import run_blocks

    times: dict = {0: [], 1: []}
    state = {"threads": 0, "calls": 0, "two": -1}
    two_thread_factor = [0.6, 0.8, 0.7, 0.7]  # per 2-thread block: close, far, mixed, missing

    def step():
        state["calls"] += 1
        factor = 1.0 if state["threads"] == 1 else two_thread_factor[state["two"]]
        times.setdefault(0, []).append(0.010 * factor)
        times.setdefault(1, []).append(0.002 * factor)

    @contextlib.contextmanager
    def threads(n):
        state["threads"] = n
        state["two"] += n == 2
        yield

    probes = iter([1e-7, 1e-7, 5e-7, 5e-7, 1e-7, 5e-7, None, 1e-7])  # close, far, mixed, missing
    res = run_blocks(step, times, {0: "a", 1: "b"}, blocks=4, steps=3, one_every=3, probe=lambda: next(probes),
                     far_s=2.5e-7, threads=threads)
    assert res["blocks"] == {"1t": 2, "2t": 4, "close": 1, "far": 1}  # 1-thread blocks after blocks 0 and 3
    assert state["calls"] == (4 + 2) * (3 + 1)  # each block: one untimed step and three timed
    by = {k["label"]: k for k in res["kernels"]}
    assert by["a"]["1t"] == pytest.approx(0.010) and by["a"]["2t"] == pytest.approx(0.007)  # median of 6, 8, 7, 7
    assert by["a"]["close"] == pytest.approx(0.006) and by["a"]["far"] == pytest.approx(0.008)
    assert by["b"]["far"] == pytest.approx(0.0016)
    assert res["step_s"]["1t"] > 0 and res["step_s"]["close"] > 0


def test_kernel_scaling_report_sorts_by_the_larger_loss():
    """Kernel calls of one label are summed; the loss is t2 - t1/2 on each placement, rows sorted by
    the larger of the two; a side without blocks prints '-'."""
    from bench.kernel_scaling import report

    res = {"model": "m", "batch": 2, "blocks": {"1t": 1, "2t": 1, "close": 1, "far": 0},
           "step_s": {"1t": 0.004, "2t": 0.003, "close": 0.003, "far": None},
           "kernels": [{"label": "a", "1t": 0.002, "2t": 0.0011, "close": 0.0011, "far": None},
                       {"label": "b", "1t": 0.001, "2t": 0.0009, "close": 0.0009, "far": None},
                       {"label": "a", "1t": 0.001, "2t": 0.0005, "close": 0.0005, "far": None}]}
    text = report(res, top=5).splitlines()
    assert text[0] == ("m (batch 2): blocks 1t 1, 2t 1 (close 1, far 0); median step ms 1t 4.000, 2t 3.000, "
                       "close 3.000, far -")
    assert text[1] == "kernel sums ms per step: 1t 4.000, 2t 2.500, close 2.500, far -"
    assert [line.split()[-1] for line in text[3:]] == ["b", "a"]  # b loses 0.4 ms, a 0.1 ms
    assert text[3].split()[:5] == ["0.400", "0.400", "-", "1.000", "0.900"]


@pytest.mark.parametrize("args, message", [
    (["mlp", "--blocks", "0"], "--blocks must be at least 1"),
    (["mlp", "--json", "/proc/no/such/file.json"], "cannot write --json"),
    (["mlp", "--json", ""], "--json must name a file"),
    (["mlp", "--json", "/tmp"], "--json must name a file"),
    (["mlp", "--one", "2"], "unrecognized arguments: --one"),
    (["nope"], "invalid choice: 'nope'"),
])
def test_kernel_scaling_checks_its_arguments_first(args, message):
    proc = subprocess.run([sys.executable, "-m", "bench.kernel_scaling", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr
