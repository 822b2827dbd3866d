"""scripts/gpu_smoke.py without a GPU (one line, exit 0), its command line, its timing harness run
on the CPU (the tr-mlir side over the CUDA backend's CPU emulator, the PyTorch side on the CPU, the
``torch.compile`` child process with torch's ``eager`` backend, its time budget and failures), and
the GPU checks themselves behind the ``gpu`` marker (skipped, with the reason, on machines without a
CUDA GPU). No GPU number is produced or checked here."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from tr_mlir.lowering.cuda.backend import cuda_available

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "gpu_smoke.py"


def _load_script():
    spec = importlib.util.spec_from_file_location("gpu_smoke", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gpu_smoke"] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


gs = _load_script()
# a tiny model for the CPU runs of the timing harness: the zoo's 64-32-10 MLP on 8x8x1
TINY = gs.TimingModel("tiny", "mlp_digits", (8, 8, 1), 10, (8, 16), amp=False, fuse=False, max_steps=4,
                      compile_budget_s=60.0)


def _emulator():
    from tr_mlir.lowering.cuda import emulator as emu

    if emu.host_compiler() is None:
        pytest.skip("no host C++ compiler for the kernel emulator")
    from tr_mlir.lowering.cuda.backend import CudaBackend

    return lambda: CudaBackend(emu.EmulatedDevice())


@pytest.mark.skipif(cuda_available()[0], reason="a GPU is present: the script would run the checks")
@pytest.mark.parametrize("extra", [[], ["--timing-models", "mlp,resnet50", "--no-compile", "--batch", "mlp=200"]])
def test_smoke_script_without_a_gpu_prints_one_line_and_exits_0(tmp_path, extra):
    r = subprocess.run([sys.executable, str(SCRIPT), "--report", str(tmp_path / "r.json"), *extra],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu_smoke: no usable CUDA GPU (") and "nothing to check" in lines[0]
    assert not (tmp_path / "r.json").exists()


def test_smoke_script_help():
    r = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "--report" in r.stdout and "kernels" in r.stdout
    for opt in ("--timing-models", "--no-compile", "--batch", "--compile-budget", "--time-budget"):
        assert opt in r.stdout
    assert "--torch-child" not in r.stdout  # internal


# -- command line -------------------------------------------------------------------------


def test_timing_options_defaults():
    a = gs.parse_args([])
    assert a.timing_models == ("resnet8", "mlp", "resnet50")
    assert a.batch == {} and a.no_compile is False and a.compile_budget is None
    assert a.compile_backend == "inductor" and a.steps == 20 and a.warmup == 5 and a.time_budget == 20.0
    assert gs.TIMING_MODELS["mlp"].batches == (200, 2048) and not gs.TIMING_MODELS["mlp"].amp
    r50 = gs.TIMING_MODELS["resnet50"]
    assert (r50.input_hwc, r50.num_classes, r50.amp, r50.fuse) == ((224, 224, 3), 1000, True, True)


def test_timing_options_parsed():
    a = gs.parse_args(["--timing-models", "mlp, resnet50,mlp", "--no-compile", "--batch", "mlp=200,4096",
                       "--batch", "resnet50=128", "--compile-budget", "30", "--steps", "7", "--time-budget", "5",
                       "--skip", "kernels", "--skip", "digits"])
    assert a.timing_models == ("mlp", "resnet50")  # order kept, duplicates dropped
    assert a.no_compile and a.batch == {"mlp": (200, 4096), "resnet50": (128,)}
    assert a.compile_budget == 30.0 and a.steps == 7 and a.time_budget == 5.0 and a.skip == ["kernels", "digits"]


@pytest.mark.parametrize("argv, message", [
    (["--timing-models", "mlp,vgg"], "unknown timing model(s) vgg"),
    (["--timing-models", ","], "unknown timing model(s) (none given)"),
    (["--batch", "resnet8=64"], "resnet8 keeps batch 256"),
    (["--batch", "mlp"], "expected MODEL=B"),
    (["--batch", "mlp=0"], "expected positive batch sizes"),
    (["--batch", "mlp=2x"], "expected positive batch sizes"),
    (["--steps", "0"], "expected a positive number"),
    (["--compile-budget", "-1"], "expected a positive number"),
    (["--skip", "nope"], "invalid choice"),
])
def test_timing_options_usage_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        gs.parse_args(argv)
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_fit_steps():
    assert gs.fit_steps(0.01, 20, 20.0) == 20  # fits
    assert gs.fit_steps(2.0, 20, 20.0) == 10  # cut to the budget
    assert gs.fit_steps(100.0, 20, 20.0) == 3  # never below 3 ...
    assert gs.fit_steps(100.0, 2, 20.0) == 2  # ... nor above the steps asked
    assert gs.fit_steps(0.0, 9, 1.0) == 9


# -- the timing harness on the CPU --------------------------------------------------------


def test_device_timer_uses_cuda_events_on_a_cupy_device():
    calls = []

    class Event:
        def __init__(self):
            self.name = f"e{len([c for c in calls if c[0] == 'new'])}"
            calls.append(("new", self.name))

        def record(self, stream):
            calls.append(("record", self.name, stream))

        def synchronize(self):
            calls.append(("sync", self.name))

    cuda = SimpleNamespace(Event=Event, get_elapsed_time=lambda a, b: calls.append(("elapsed", a.name, b.name)) or 1.5)
    dev = SimpleNamespace(cp=SimpleNamespace(cuda=cuda), stream="S", synchronize=lambda: calls.append(("devsync",)))
    timed = gs.device_timer(dev)
    assert timed(lambda: calls.append(("work",))) == 1.5
    assert calls[2:] == [("record", "e0", "S"), ("work",), ("record", "e1", "S"), ("sync", "e1"),
                         ("elapsed", "e0", "e1")]


def test_device_timer_synchronizes_around_host_time_elsewhere():
    calls = []
    dev = SimpleNamespace(synchronize=lambda: calls.append("sync"))
    ms = gs.device_timer(dev)(lambda: (calls.append("work"), time.sleep(0.02)))
    assert calls == ["sync", "work", "sync"] and 15 <= ms < 1000
    assert gs.device_timer(None)(lambda: None) >= 0  # the NumPy backend: no device


def _check_side(side, batch, each):
    assert side["timed_steps"] == len(side[each]) and 1 <= side["timed_steps"] <= TINY.max_steps
    assert all(t > 0 for t in side[each])


def test_tr_mlir_side_on_the_cpu_emulator():
    side = gs.time_tr_mlir(TINY, 8, device=_emulator(), steps=3, warmup=1, budget_s=10.0)
    _check_side(side, 8, "graph_replay_ms_each")
    _check_side(side, 8, "train_step_ms_each")
    assert side["graph_replay_ms"] == pytest.approx(float(np.median(side["graph_replay_ms_each"])))
    assert side["img_per_s"] == pytest.approx(8 / (side["graph_replay_ms"] / 1e3))
    assert side["train_step_img_per_s"] == pytest.approx(8 / (side["train_step_ms"] / 1e3))
    # zero grad + forward + backward + optimizer of one buffer, several kernels each
    assert side["graphs_per_step"] >= 4 and side["kernel_nodes_per_step"] > side["graphs_per_step"]
    assert side["compile_s"] > 0


@pytest.mark.parametrize("amp", [False, True])
def test_torch_side_on_the_cpu(amp):
    import dataclasses

    m = dataclasses.replace(TINY, amp=amp)
    side = gs.time_torch(m, 16, device="cpu", steps=3, warmup=2, budget_s=10.0)
    _check_side(side, 16, "step_ms_each")
    assert side["step_ms"] == pytest.approx(float(np.median(side["step_ms_each"])))
    assert side["img_per_s"] == pytest.approx(16 / (side["step_ms"] / 1e3)) and side["first_step_s"] > 0
    assert "backend" not in side


def test_torch_side_compiled_in_process_with_the_eager_backend():
    side = gs.time_torch(TINY, 8, device="cpu", steps=2, warmup=1, budget_s=10.0, compile_backend="eager")
    assert side["backend"] == "eager" and side["mode"] == "default" and side["timed_steps"] == 2


def test_torch_twin_is_the_bench_twin():
    net = gs.torch_twin(TINY, "cpu")
    assert net.training and sum(p.numel() for p in net.parameters()) == 64 * 64 + 64 + 64 * 32 + 32 + 32 * 10 + 10


def test_compile_child_times_each_batch():
    res = gs.torch_compile_substep(TINY, (8, 16), device="cpu", backend="eager", steps=2, warmup=1,
                                   budget_s=10.0, limit_s=120.0)
    assert set(res) == {8, 16}
    for r in res.values():
        assert "skipped" not in r, r
        assert r["backend"] == "eager" and r["timed_steps"] == 2 and r["step_ms"] > 0 and r["process_s"] > 0


def test_compile_child_failure_is_a_skip_with_the_reason():
    res = gs.torch_compile_substep(TINY, (8,), device="cpu", backend="no_such_backend", steps=2, warmup=1,
                                   budget_s=10.0, limit_s=120.0)
    assert res[8]["skipped"].startswith("torch.compile failed: ") and "no_such_backend" in res[8]["skipped"]


def test_compile_child_past_its_budget_is_killed_and_skipped():
    t0 = time.perf_counter()
    res = gs.torch_compile_substep(TINY, (8, 16), device="cpu", backend="eager", steps=2, warmup=1,
                                   budget_s=10.0, limit_s=0.3)
    assert time.perf_counter() - t0 < 10
    for b in (8, 16):
        assert res[b]["skipped"] == "torch.compile exceeded its time budget of 0.3 s"


def test_compile_child_refuses_a_bad_spec(capsys):
    assert gs.main(["--torch-child", "{not json"]) == 2
    assert "bad spec" in capsys.readouterr().err


def test_timing_section_on_the_cpu(monkeypatch):
    """check_timing end to end (tr-mlir over the emulator, torch on the CPU, --no-compile), then
    the same with a tr-mlir side that fails: recorded, the eager side still timed, section not ok."""
    monkeypatch.setitem(gs.TIMING_MODELS, "tiny", TINY)
    args = gs.parse_args(["--steps", "2", "--warmup", "1", "--no-compile", "--time-budget", "10"])
    args.timing_models, args.batch = ("tiny",), {"tiny": (8,)}
    report = {}
    assert gs.check_timing(report, args, tr_device=_emulator(), torch_device="cpu")
    t = report["timing"]
    assert t["models"] == ["tiny"] and t["compile"]["enabled"] is False and "ours_fp32" not in t
    (c,) = t["comparisons"]
    assert (c["model"], c["zoo_model"], c["batch"], c["precision"], c["input_hwc"]) == ("tiny", "mlp_digits", 8,
                                                                                       "fp32", [8, 8, 1])
    assert c["torch_compile"] == {"skipped": "--no-compile"} and c["ratio_vs_compile"] is None
    assert c["ratio_vs_eager"] == pytest.approx(c["torch_eager"]["step_ms"] / c["tr_mlir"]["graph_replay_ms"])
    assert c["train_step_ratio_vs_eager"] == pytest.approx(c["torch_eager"]["step_ms"] / c["tr_mlir"]["train_step_ms"])
    assert t["torch_settings"]["memory_format"] == "NCHW"

    def no_device():
        raise RuntimeError("device lost")

    report = {}
    assert not gs.check_timing(report, args, tr_device=no_device, torch_device="cpu")
    (c,) = report["timing"]["comparisons"]
    assert c["tr_mlir"] == {"error": "RuntimeError: device lost"} and c["torch_eager"]["step_ms"] > 0
    assert c["ratio_vs_eager"] is None


@pytest.mark.gpu
def test_gpu_kernels_match_numpy():
    from tr_mlir.lowering.cuda.checks import cases, run_case
    from tr_mlir.lowering.cuda.backend import CudaBackend

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

    from tr_mlir.lowering.cuda.backend import CaptureAllocationError, CudaBackend

    backend = CudaBackend()
    with pytest.raises(CaptureAllocationError):
        backend.capture([lambda: cupy.empty(1024, cupy.float32) if backend.device.capturing else None])
