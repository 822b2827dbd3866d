"""tr-train: arguments and defaults, every error path (exit 1, no traceback), a short run writing
the report, the plot, checkpoints and IR dumps, resume, and the dumps replayed by tr-opt."""

from __future__ import annotations

import gzip
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tr_mlir.tools import tr_train
from tr_mlir.tools.tr_train import build_parser, main

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "tr-train.md"

# The flag list (issue 6, item 1).
FLAGS = ["--model", "--blueprint", "--dataset", "--data-dir", "--download", "--epochs", "--batch-size",
         "--optimizer", "--lr", "--weight-decay", "--label-smoothing", "--warmup", "--amp", "--fuse",
         "--device", "--seed", "--dump-ir", "--report-json", "--plot", "--save-dir", "--resume", "--no-reuse",
         "--no-fuse-fc-relu", "--reuse", "--fuse-fc-relu"]


def run_main(args: list[str], capsys) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def assert_error(code: int, err: str, *needles: str) -> None:
    assert code == 1, err
    assert err.startswith("tr-train: error: ") or "\ntr-train: error: " in err, err
    assert "Traceback" not in err
    for n in needles:
        assert n in err, (n, err)


def subprocess_tr_train(args: list[str], *, prelude: str = "", cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``tr-train args`` in a fresh interpreter (``prelude`` runs first, e.g. a memory limit)."""
    code = f"{prelude}\nimport sys\nfrom tr_mlir.tools.tr_train import main\nsys.exit(main({args!r}))"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, timeout=120)


# --------------------------------------------------------------------------------------
# Arguments
# --------------------------------------------------------------------------------------


def test_help_lists_every_flag_and_its_default(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = re.sub(r"\s+", " ", capsys.readouterr().out)
    for flag in FLAGS:
        assert flag in out, flag
    for text in ("(default: resnet_tiny)", "(default: digits)", "(default: 30)", "(default: 32)",
                 "(default: momentum)", "(default: 0.0005)", "(default: 0.0)", "(default: auto)",
                 "(default: 0)", "0.05 for momentum", "0.001 for adamw", "~/.cache/tr_mlir/<dataset>",
                 "tr-opt DIR/03-arch-normalize-softmax-ce.mlir -p arch-normalize-identity",
                 "schema_version 1"):
        assert text in out, text
    # every option's help states its default
    assert out.count("default") >= len(FLAGS)


def test_parser_defaults():
    a = build_parser().parse_args([])
    assert a.reuse is True and a.fuse_fc_relu is True
    assert build_parser().parse_args(["--no-reuse", "--reuse", "--no-fuse-fc-relu"]).reuse is True
    assert (a.model, a.blueprint, a.dataset, a.data_dir, a.download) == ("resnet_tiny", None, "digits", None, False)
    assert (a.epochs, a.batch_size, a.optimizer, a.lr, a.weight_decay) == (30, 32, "momentum", None, 5e-4)
    assert (a.label_smoothing, a.warmup, a.amp, a.fuse, a.device, a.seed) == (0.0, 0.0, False, False, "auto", 0)
    assert (a.dump_ir, a.report_json, a.plot, a.save_dir, a.resume) == (None, None, None, None, None)
    assert set(tr_train.OPTIMIZERS) == {"sgd", "momentum", "nesterov", "adam", "adamw", "lars"}


def test_explicit_flags_tells_given_from_defaulted():
    assert tr_train.explicit_flags([]) == set()
    assert tr_train.explicit_flags(["--lr", "0.05", "--amp", "--epochs", "30"]) == {"lr", "amp", "epochs"}


def _gpu() -> bool:
    from tr_mlir.lowering.cuda.backend import cuda_available

    return cuda_available()[0]


def test_device_resolution(monkeypatch):
    assert tr_train.resolve_device("cpu")[0] == "cpu"
    # the CPU line says whether the kernels compile C, and why not
    monkeypatch.setenv("TR_MLIR_CC", "0")
    assert tr_train.resolve_device("cpu")[1] == "CPU (NumPy backend, compiled C kernels off: disabled by TR_MLIR_CC=0)"
    monkeypatch.delenv("TR_MLIR_CC")
    from tr_mlir.lowering.cpu import _cc

    if _cc.compiler() is not None:
        assert "compiled C kernels on (" in tr_train.resolve_device("cpu")[1]
    if _gpu():
        assert tr_train.resolve_device("auto")[0] == tr_train.resolve_device("gpu")[0] == "gpu"
        return
    device, text = tr_train.resolve_device("auto")
    assert device == "cpu" and "no GPU" in text
    with pytest.raises(tr_train.TrainError, match="--device gpu: no usable GPU: .*; use --device cpu"):
        tr_train.resolve_device("gpu")


# --------------------------------------------------------------------------------------
# Geometry
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("model, shape, expected", [
    ("lenet5", (28, 28, 1), ("pad", (32, 32))),        # the MNIST -> 32x32 for LeNet-5
    ("lenet5", (8, 8, 1), ("resize", (32, 32))),
    ("lenet5", (32, 32, 3), (None, None)),
    ("mlp", (8, 8, 1), (None, None)),                  # flattens the raw input: any size
    ("resnet_tiny", (28, 28, 1), (None, None)),        # global average pooling: any size
    ("resnet50", (32, 32, 3), (None, None)),
    ("vgg16_bn", (32, 32, 3), ("resize", (224, 224))),  # its classifier reads a 7x7 map
])
def test_plan_input(model, shape, expected):
    src = tr_train.zoo_source(model)
    plan = tr_train.plan_input(src, src.build(10), shape, 10)
    assert (plan.mode, plan.to) == expected


def test_docs_table_matches_the_geometry_rule():
    """docs/tr-train.md's model x dataset table is what input_table() computes."""
    rows = {}
    for line in DOC.read_text().splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0] != "model" and re.fullmatch(r"[a-z0-9_]+", cells[0]):
            rows[cells[0]] = dict(zip(("digits", "mnist", "cifar10"), cells[1:]))
    assert rows == tr_train.input_table()


# --------------------------------------------------------------------------------------
# Error paths: exit 1, one message, no traceback
# --------------------------------------------------------------------------------------


def test_missing_mnist_exits_1_with_what_and_how_subprocess():
    r = subprocess_tr_train(["--dataset", "mnist", "--data-dir", "/nonexistent"])
    assert_error(r.returncode, r.stderr, "/nonexistent", "train-images-idx3-ubyte", "--download")
    assert r.stdout == ""


def test_bad_flag_value_exits_1_subprocess():
    r = subprocess_tr_train(["--batch-size", "many"])
    assert_error(r.returncode, r.stderr, "--batch-size", "invalid int value")


def test_model_too_large_for_memory_exits_1_subprocess():
    # The arena check reads the available memory from the backend; pretend there are 50 kB.
    prelude = "import tr_mlir.lowering.backend as b; b.meminfo_available = lambda: 50_000"
    r = subprocess_tr_train(["--model", "mlp_digits", "--epochs", "1"], prelude=prelude)
    assert_error(r.returncode, r.stderr, "does not fit in memory", "bytes", "batch size")


def test_ctrl_c_after_a_finished_run_exits_0():
    """The console script's run is over when a SIGINT arrives during the interpreter's exit: the
    process exits with the run's status, not by the signal (tests/test_faults.py found -2)."""
    code = ("import os, signal, sys, time\n"
            "from tr_mlir.tools.tr_train import main\n"
            "sys.argv = ['tr-train', '--model', 'mlp_digits', '--epochs', '1']\n"
            "rc = main()\n"
            "os.kill(os.getpid(), signal.SIGINT)\n"
            "time.sleep(0.2)\n"
            "sys.exit(rc)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr and "best val top-1" in r.stdout


def test_console_script_error_is_clean():
    exe = Path(sys.executable).with_name("tr-train")
    if not exe.exists():
        pytest.skip("tr-train console script not installed next to the interpreter")
    r = subprocess.run([str(exe), "--model", "no_such_model"], capture_output=True, text=True, timeout=120)
    assert_error(r.returncode, r.stderr, "unknown model 'no_such_model'", "resnet_tiny")


@pytest.mark.parametrize("args, needles", [
    (["--model", "nope"], ["unknown model 'nope'", "zoo models:"]),
    (["--epochs", "0"], ["--epochs must be an integer >= 1"]),
    (["--batch-size", "0"], ["--batch-size must be an integer >= 1"]),
    (["--lr", "-0.1"], ["--lr must be a number > 0"]),
    (["--lr", "nan"], ["--lr must be a number > 0"]),
    (["--weight-decay", "-1"], ["--weight-decay must be a number >= 0"]),
    (["--label-smoothing", "1"], ["--label-smoothing must be in [0, 1)"]),
    (["--warmup", "-1"], ["--warmup must be a number of epochs >= 0"]),
    (["--warmup", "5", "--epochs", "5"], ["--warmup (5 epochs) must be less than --epochs (5)"]),
    (["--seed", "-3"], ["--seed must be an integer >= 0"]),
    (["--device", "tpu"], ["invalid choice: 'tpu'"]),
    (["--optimizer", "rmsprop"], ["invalid choice: 'rmsprop'"]),
    (["--dataset", "imagenet"], ["invalid choice: 'imagenet'"]),
    (["--model", "mlp", "--blueprint", "x.py:f"], ["not allowed with argument --model"]),
    (["--blueprint", "x.py"], ["--blueprint expects FILE.py:FUNC"]),
    (["--blueprint", "/nonexistent/x.py:f"], ["no such file: /nonexistent/x.py"]),
    (["--plot", "curves.xyz"], ["unsupported image format 'xyz'"]),
    (["--resume", "/nonexistent/ckpt"], ["no such checkpoint folder"]),
])
def test_error_paths_exit_1_without_traceback(args, needles, capsys):
    try:
        code = main(args)
    except SystemExit as e:  # argparse's own errors
        code = e.code
    _, err = capsys.readouterr()
    assert_error(code, err, *needles)


@pytest.fixture
def unwritable_folder(tmp_path):
    """A folder that exists but takes no new files: a read-only folder, or /proc as root (root
    writes through permissions)."""
    if os.geteuid() != 0:
        folder = tmp_path / "ro"
        folder.mkdir()
        folder.chmod(0o500)
        yield folder
        folder.chmod(0o700)
    elif Path("/proc/self").is_dir():
        yield Path("/proc")
    else:
        pytest.skip("no unwritable folder for root")


@pytest.mark.parametrize("flag, name", [("--plot", "curves.png"), ("--report-json", "r.json"),
                                        ("--save-dir", "ckpt"), ("--dump-ir", "ir")])
def test_unwritable_outputs_fail_before_training(flag, name, unwritable_folder, capsys):
    """--plot and --report-json into a folder that exists but is read-only failed only after
    training (the plot after the last epoch), so the run was lost."""
    code, out, err = run_main(["--device", "cpu", "--model", "mlp_digits", "--epochs", "1", flag,
                               unwritable_folder / name], capsys)
    assert_error(code, err, f"{flag} {unwritable_folder / name}: cannot")
    assert "== train" not in out


def test_device_gpu_without_a_gpu_exits_1(capsys):
    if _gpu():
        pytest.skip("a GPU is present")
    code, _, err = run_main(["--device", "gpu"], capsys)
    assert_error(code, err, "--device gpu: no usable GPU", "use --device cpu")


def _write_idx(path: Path, magic: int, dims: tuple[int, ...], data: bytes) -> None:
    header = magic.to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in dims)
    with gzip.open(path, "wb") as f:
        f.write(header + data)


def test_truncated_idx_exits_1(tmp_path, capsys):
    rng = np.random.default_rng(0)
    for prefix, n in (("train", 20), ("t10k", 10)):
        images = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8).tobytes()
        if prefix == "train":
            images = images[: len(images) // 2]  # cut in the middle
        _write_idx(tmp_path / f"{prefix}-images-idx3-ubyte.gz", 2051, (n, 28, 28), images)
        _write_idx(tmp_path / f"{prefix}-labels-idx1-ubyte.gz", 2049, (n,),
                   rng.integers(0, 10, n, dtype=np.uint8).tobytes())
    code, out, err = run_main(["--dataset", "mnist", "--data-dir", tmp_path, "--model", "mlp_digits"], capsys)
    assert_error(code, err, "train-images-idx3-ubyte.gz", "truncated", "expected 15696 bytes")


BLUEPRINTS = '''
from tr_mlir.blueprint import seq, conv, relu, fc, gap_fc, cbr

def good(num_classes):
    return seq(cbr(8, 3, 1, 1), gap_fc(num_classes, True))

def sized():
    return seq(cbr(8, 3, 1, 1), fc(10, True)), (16, 16, 1)

def rgb():
    return seq(cbr(8, 3, 1, 1), gap_fc(10, True)), (8, 8, 3)

def huge_kernel(num_classes):
    return seq(conv(4, 9), relu(), gap_fc(num_classes, True))

def not_a_layer(num_classes):
    return 42

def seven_classes(num_classes):
    return seq(fc(32, True), relu(), fc(7, True))

def raises(num_classes):
    return 1 / 0

def exits(num_classes):
    import sys
    sys.exit(3)

value = 3
'''


@pytest.fixture
def blueprint_file(tmp_path):
    path = tmp_path / "nets.py"
    path.write_text(BLUEPRINTS)
    return path


@pytest.mark.parametrize("func, needles", [
    ("missing", ["defines no 'missing'", "good", "sized"]),
    ("value", ["'value'", "is not a function"]),
    ("not_a_layer", ["must return a BluePrint layer or (layer, (H, W, C))", "42"]),
    ("raises", ["raises(10) failed", "nets.py:", "ZeroDivisionError"]),
    ("exits", ["exits(10) failed", "nets.py:", "SystemExit: 3"]),  # used to end tr-train with status 3, silently
    ("rgb", ["reads 3 channel(s)", "the dataset has 1"]),
    ("huge_kernel", ["cannot take the digits input (8x8x1)", "'arch.conv' op expected kernel size 9",
                     "zoo models that take 8x8x1 input:", "resnet_tiny"]),
    ("seven_classes", ["does not fit the digits classes", "the last layer must produce 10 logits"]),
])
def test_bad_blueprints_exit_1(blueprint_file, func, needles, capsys):
    code, _, err = run_main(["--blueprint", f"{blueprint_file}:{func}", "--epochs", "1"], capsys)
    assert_error(code, err, *needles)
    if func == "seven_classes":  # the input is not the problem: no list of models that take it
        assert "zoo models that take" not in err


def test_a_last_batch_of_one_sample_is_reported_as_the_batch_size(capsys):
    """digits has 1437 training samples: batch size 2 leaves a last batch of one, which a BN
    cannot train on. The error says it is the batch size, not the model's input."""
    code, _, err = run_main(["--model", "resnet18", "--dataset", "digits", "--epochs", "1", "--batch-size", "2"],
                            capsys)
    assert_error(code, err, "resnet18 cannot train on digits with this batch size", "single value per channel",
                 "--drop-last")
    assert "cannot take" not in err and "zoo models that take" not in err


def test_blueprint_file_that_does_not_import(tmp_path, capsys):
    bad = tmp_path / "broken.py"
    bad.write_text("def f(:\n    pass\n")
    code, _, err = run_main(["--blueprint", f"{bad}:f"], capsys)
    assert_error(code, err, "importing", "broken.py:1", "SyntaxError")


def test_blueprint_file_that_exits_while_importing(tmp_path, capsys):
    """A module calling sys.exit() at import ended tr-train with its status and no message."""
    bad = tmp_path / "quits.py"
    bad.write_text("import sys\nsys.exit(2)\n")
    code, _, err = run_main(["--blueprint", f"{bad}:f"], capsys)
    assert_error(code, err, "importing", "quits.py:2", "SystemExit: 2")


# --------------------------------------------------------------------------------------
# Runs
# --------------------------------------------------------------------------------------


def test_blueprint_runs_and_sized_blueprint_is_resized(blueprint_file, tmp_path, capsys):
    code, out, err = run_main(["--device", "cpu", "--blueprint", f"{blueprint_file}:sized", "--epochs", "1",
                               "--report-json", tmp_path / "r.json"], capsys)
    assert code == 0, err
    assert "input 8x8 -> 16x16 (resized bilinearly)" in out
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["config"]["input_shape"] == [16, 16, 1]
    assert report["config"]["input_adaptation"] == {"mode": "resize", "to": [16, 16]}
    assert report["config"]["blueprint"].endswith("nets.py:sized") and report["config"]["model"] is None


def test_short_run_writes_report_plot_checkpoints_and_ir(tmp_path, capsys):
    save, ir = tmp_path / "ckpt", tmp_path / "ir"
    report_path, plot = tmp_path / "out" / "r.json", tmp_path / "out" / "curves.png"
    code, out, err = run_main(["--device", "cpu", "--model", "mlp_digits", "--epochs", "2", "--fuse", "--report-json", report_path,
                               "--plot", plot, "--save-dir", save, "--dump-ir", ir], capsys)
    assert code == 0, err
    # stages and tables
    for header in ("== data", "== model", "== compile", "== train", "== summary"):
        assert header in out
    assert "ArchPlan: 7 layers, first_layer_index=0 (fuse)" in out
    assert re.search(r"0  Flatten\s+\[32, 8, 8, 1\]\s+\[32, 1, 1, 64\]\s+\[FIRST\]", out)
    assert re.search(r"FC\s+\[32, 1, 1, 64\]\s+\[32, 1, 1, 64\]\s+bias=1 out_features=64", out)
    assert "memory plan: memplan.program for @model: target cpu, optimizer momentum, fp32, arena" in out
    assert "W_FC_WEIGHT" in out and "one arena serves all 6 variants" in out
    assert re.search(r"epoch 1/2 .*val top-1 \d+\.\d\d%  top-5 \d+\.\d\d%  [\d,]+ img/s", out)
    assert "best val top-1" in out
    # the report
    r = json.loads(report_path.read_text())
    assert r["schema_version"] == 1 and r["tool"] == "tr-train"
    assert {"compile_s", "train_s", "val_s", "load_s", "total_s"} <= set(r["timings"])
    assert r["config"]["model"] == "mlp_digits" and r["config"]["lr"] == 0.05 and r["config"]["epochs"] == 2
    assert r["config"]["device_used"] in ("cpu", "gpu") and r["config"]["train_size"] == 1437
    assert [e["epoch"] for e in r["epochs"]] == [1, 2]
    for e in r["epochs"]:
        for key in ("train_loss", "val_loss", "val_top1", "val_top5", "train_images_per_s"):
            assert isinstance(e[key], float) and math.isfinite(e[key]), key
        assert 0 <= e["val_top1"] <= e["val_top5"] <= 1
    best = max(r["epochs"], key=lambda e: e["val_top1"])
    assert (r["best_val_top1"], r["best_epoch"]) == (best["val_top1"], best["epoch"])
    assert r["epochs"][1]["val_top1"] > 0.5
    # the plot
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # checkpoints
    for which in ("last", "best"):
        assert {p.name for p in (save / which).iterdir()} == {"config.json", "state.npz", "tr_train.json"}
    assert json.loads((save / "last" / "tr_train.json").read_text())["epochs"] == r["epochs"]
    # IR dumps
    names = sorted(p.name for p in ir.iterdir())
    assert names[0] == "00-input.mlir" and names[1] == "01-arch-expand.mlir"
    assert "08-arch-merge-blocks.mlir" in names and names[-2] == "25-memplan-assign-offsets.mlir"
    assert names[-1] == "replay.sh"

    # resume: --epochs is the total; the run continues at epoch 3 with the stretched cosine schedule
    code, out, err = run_main(["--device", "cpu", "--resume", save, "--epochs", "3", "--report-json", report_path], capsys)
    assert code == 0, err
    assert "epochs 3..3" in out and "epoch 3/3" in out
    r2 = json.loads(report_path.read_text())
    assert [e["epoch"] for e in r2["epochs"]] == [1, 2, 3]
    assert r2["epochs"][:2] == r["epochs"]
    assert r2["config"]["start_epoch"] == 2 and r2["config"]["resume"] == str(save / "last")
    assert r2["epochs"][2]["lr"] == pytest.approx(0.05 * 0.5 * (1 + math.cos(math.pi * 2 / 3)))
    # resuming DIR/last without --save-dir goes on checkpointing into DIR
    assert f"checkpoints go on into {save}" in out
    assert json.loads((save / "last" / "tr_train.json").read_text())["epochs"] == r2["epochs"]
    # a resumed run keeps its configuration; more epochs than asked is an error
    code, _, err = run_main(["--resume", save, "--epochs", "3", "--lr", "0.2"], capsys)
    assert_error(code, err, "--lr 0.2 differs from the checkpoint's 0.05")
    code, _, err = run_main(["--resume", save / "last", "--epochs", "2"], capsys)
    assert_error(code, err, "has trained 3 epochs", "more than 3")

    # every dumped pass replays with tr-opt into the next dump, byte for byte
    from tr_mlir.tools.tr_opt import main as tr_opt

    script = (ir / "replay.sh").read_text()
    steps = re.findall(r"^tr-opt (\S+) -p (.+?) \| cmp -s - (\S+)", script, flags=re.M)
    assert len(steps) == 25
    for src, spec, dst in steps:
        spec = spec.strip("'")
        out_file = tmp_path / "replayed.mlir"
        try:
            tr_opt([str(ir / src), "-p", spec, "-o", str(out_file)])
        except SystemExit as e:
            assert e.code in (0, None), (src, spec)
        assert out_file.read_text() == (ir / dst).read_text(), dst


def test_no_fuse_fc_relu_keeps_the_fc_and_relu_kernels_and_is_resumed(tmp_path, capsys):
    """``--no-fuse-fc-relu`` compiles without memplan-fuse-fc-relu (the pipeline line, the IR
    dump, the checkpoint's Task config) and a resumed run keeps it unless the flag (or its positive
    form) is given."""
    save, ir = tmp_path / "ckpt", tmp_path / "ir"
    code, out, err = run_main(["--device", "cpu", "--model", "mlp_digits", "--epochs", "1", "--no-fuse-fc-relu",
                               "--save-dir", save, "--dump-ir", ir], capsys)
    assert code == 0, err
    assert "fuse_fc_relu=false" in out
    names = sorted(p.name for p in ir.iterdir())
    assert not [n for n in names if "fuse-fc-relu" in n] and names[-2] == "21-memplan-assign-offsets.mlir"
    ops = (ir / names[-2]).read_text()
    assert "RELU_FP32_BWD_FROM_OUTPUT" in ops and "FC_RELU_FP32_FWD" not in ops
    assert json.loads((save / "last" / "config.json").read_text())["fuse_fc_relu"] is False
    assert json.loads((save / "last" / "tr_train.json").read_text())["config"]["fuse_fc_relu"] is False
    code, out, err = run_main(["--device", "cpu", "--resume", save, "--epochs", "2"], capsys)
    assert code == 0, err
    assert "fuse_fc_relu=false" in out
    # given on a resume, --no-reuse applies (the task is recompiled with its state)
    code, out, err = run_main(["--device", "cpu", "--resume", save, "--epochs", "3", "--no-reuse"], capsys)
    assert code == 0, err
    assert "reuse=false fuse_fc_relu=false" in out
    assert json.loads((save / "last" / "config.json").read_text())["reuse"] is False
    # and the positive flags turn both back on for a resumed run saved without them
    code, out, err = run_main(["--device", "cpu", "--resume", save, "--epochs", "4", "--reuse", "--fuse-fc-relu"],
                              capsys)
    assert code == 0, err
    assert "reuse=false" not in out and "fuse_fc_relu=false" not in out
    config = json.loads((save / "last" / "config.json").read_text())
    assert config["reuse"] is True and config["fuse_fc_relu"] is True
    code, out, err = run_main(["--device", "cpu", "--model", "mlp_digits", "--epochs", "1"], capsys)
    assert code == 0, err
    assert "fuse_fc_relu" not in out  # the default: the pass runs


def test_replay_script_runs_with_tr_opt(tmp_path):
    """replay.sh as a user runs it (four passes, to keep it short: tr-opt starts in ~0.6 s; the
    in-process replay above covers every pass)."""
    bindir = Path(sys.executable).parent
    if not (bindir / "tr-opt").exists():
        pytest.skip("tr-opt console script not installed next to the interpreter")
    ir = tmp_path / "ir"
    tr_train.dump_ir(_tree("resnet_tiny"), ir, fuse=True, amp=False, num_classes=10,
                     spec={"batch_size": 8, "train_size": 20, "val_size": 10, "optimizer": "momentum", "target": "cpu"})
    script = (ir / "replay.sh").read_text().splitlines()
    keep = [ln for ln in script if not ln.startswith("tr-opt")
            or re.search(r" -p '?(arch-expand|arch-merge-blocks|memplan-select-conv-algo|memplan-derive-shapes)", ln)]
    assert len(keep) == len(script) - 21  # 25 passes, 4 kept
    (ir / "replay.sh").write_text("\n".join(keep) + "\n")
    env = dict(os.environ, PATH=f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    r = subprocess.run(["sh", str(ir / "replay.sh")], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "all passes replay identically" in r.stdout


def _tree(name: str) -> str:
    from tr_mlir.blueprint import emit

    src = tr_train.zoo_source(name)
    return str(emit(src.build(10), src.native, num_classes=10, fuse=True))


def test_amp_fuse_synthetic_run(tmp_path, capsys):
    """AMP (CPU emulation) on generated data of the model's own shape and class count."""
    code, out, err = run_main(["--device", "cpu", "--model", "resnet_tiny", "--dataset", "synthetic", "--epochs", "1", "--amp",
                               "--fuse", "--batch-size", "64", "--report-json", tmp_path / "r.json"], capsys)
    assert code == 0, err
    assert "8x8x1, 10 classes" in out and "ArchPlan: 5 layers, first_layer_index=0 (fuse, amp)" in out
    assert "Input: [64, 8, 8, 4]" in out  # AMP aligns the first conv's input channels to 4
    r = json.loads((tmp_path / "r.json").read_text())
    assert r["config"]["amp"] and r["config"]["train_size"] == 1024 and r["config"]["val_size"] == 256
    # synthetic data of 10 classes: one epoch's mean loss stays near ln 10 (2.30), not 1e30 or NaN
    assert 1.0 < r["epochs"][0]["train_loss"] < 4.0, r["epochs"][0]["train_loss"]


def test_a_failing_checkpoint_save_keeps_the_previous_checkpoint(tmp_path, capsys, monkeypatch):
    """Checkpoints were written in place: a save that failed half-way (full disk, Ctrl-C) left
    DIR/last with a new config.json next to a broken state.npz. Now a failing save leaves the
    previous checkpoint whole, and the next successful save replaces it whole."""
    from tr_mlir.task import Task

    save = tmp_path / "ckpt"
    code, _, err = run_main(["--device", "cpu", "--model", "mlp_digits", "--epochs", "1", "--save-dir", save], capsys)
    assert code == 0, err
    before = {p.name: p.read_bytes() for p in (save / "last").iterdir()}
    real_save = Task.save

    def broken_save(task, path):
        real_save(task, path)
        (Path(path) / "state.npz").write_bytes(b"half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Task, "save", broken_save)
    code, _, err = run_main(["--device", "cpu", "--resume", save, "--epochs", "2", "--save-dir", save], capsys)
    assert_error(code, err, f"--save-dir {save}", "No space left on device")
    assert {p.name: p.read_bytes() for p in (save / "last").iterdir()} == before
    monkeypatch.undo()
    assert Task.load(save / "last").epochs == 1
    code, _, err = run_main(["--device", "cpu", "--resume", save, "--epochs", "2", "--save-dir", save], capsys)
    assert code == 0, err
    assert Task.load(save / "last").epochs == 2
    assert sorted(p.name for p in save.iterdir()) == ["best", "last"]


def test_a_new_run_does_not_overwrite_the_checkpoints_of_another(tmp_path, capsys):
    """A fresh run with the --save-dir of an earlier run silently replaced that run's best
    checkpoint after its own first epoch. Now it is an error before anything is written; resuming
    from the folder may keep saving there."""
    save = tmp_path / "ckpt"
    code, _, err = run_main(["--device", "cpu", "--model", "mlp_digits", "--epochs", "1", "--save-dir", save], capsys)
    assert code == 0, err
    files = {p: p.read_bytes() for p in save.rglob("*") if p.is_file()}
    code, out, err = run_main(["--device", "cpu", "--model", "mlp", "--epochs", "1", "--save-dir", save], capsys)
    assert_error(code, err, f"--save-dir {save}: it holds the checkpoint {save / 'last'} of another run",
                 f"--resume {save} --save-dir {save}")
    assert "== data" not in out
    assert {p: p.read_bytes() for p in save.rglob("*") if p.is_file()} == files
    other = tmp_path / "other"
    code, _, err = run_main(["--device", "cpu", "--resume", save / "best", "--epochs", "2", "--save-dir", other], capsys)
    assert code == 0, err  # an empty (new) folder is fine for a resumed run too
    code, _, err = run_main(["--device", "cpu", "--resume", save, "--epochs", "2", "--save-dir", other], capsys)
    assert_error(code, err, f"--save-dir {other}: it holds the checkpoint")
    code, _, err = run_main(["--device", "cpu", "--resume", save, "--epochs", "2", "--save-dir", save], capsys)
    assert code == 0, err


@pytest.mark.parametrize("damage, needle", [
    (lambda r: r["config"].update(optimizer="rmsprop"), "'optimizer' is 'rmsprop', not a valid --optimizer value"),
    (lambda r: r["config"].update(batch_size="32"), "'batch_size' is '32', not a valid --batch-size value"),
    (lambda r: r["config"].update(amp="yes"), "'amp' is 'yes', not a valid --amp value"),
    (lambda r: r["config"].update(dataset_shape=[8, 8]), "'dataset_shape' is [8, 8], expected [H, W, C]"),
    (lambda r: r["config"].update(input_adaptation={"mode": "crop"}), "'input_adaptation' is"),
    (lambda r: r.update(config=[1]), "no 'config' object"),
    (lambda r: r.update(epochs={"1": 2}), "'epochs' is not a list of epoch rows"),
])
def test_resume_from_a_damaged_run_state_is_an_error(damage, needle, tmp_path, capsys):
    """A tr_train.json with a value no flag produces (an optimizer 'rmsprop', a string batch
    size, no config object) ended in 'internal error: KeyError' or TypeError; now it is named."""
    save = tmp_path / "ckpt"
    code, _, err = run_main(["--device", "cpu", "--model", "mlp_digits", "--epochs", "1", "--save-dir", save], capsys)
    assert code == 0, err
    state = save / "last" / "tr_train.json"
    run = json.loads(state.read_text())
    damage(run)
    state.write_text(json.dumps(run))
    code, _, err = run_main(["--device", "cpu", "--resume", save, "--epochs", "2"], capsys)
    assert_error(code, err, f"--resume {save / 'last'}: tr_train.json is damaged: {needle}")


def test_plot_marks_whole_epochs(tmp_path, monkeypatch):
    """The x axes of a 3-epoch plot were ticked 1.00, 1.25, ..., 3.00."""
    from matplotlib.figure import Figure

    saved = []
    monkeypatch.setattr(Figure, "savefig", lambda fig, path, **kw: saved.append(fig))
    rows = [{"epoch": e, "train_loss": 1.0 / e, "val_loss": 1.1 / e, "train_top1": 0.3 * e,
             "val_top1": 0.3 * e, "val_top5": 0.33 * e} for e in (1, 2, 3)]
    tr_train.write_plot(tmp_path / "p.png", rows, "t")
    (fig,) = saved
    fig.canvas.draw()
    for ax in fig.axes:
        ticks = [t for t in ax.get_xticks() if 1 <= t <= 3]
        assert ticks and all(float(t).is_integer() for t in ticks), ticks


def test_resume_without_epochs_runs_to_the_saved_total(tmp_path, capsys, monkeypatch):
    """Issue 15, item 7: a resumed run keeps its epoch total (the cosine schedule's length) unless
    --epochs is given again; the resumed run ends where an uninterrupted one would."""
    save = tmp_path / "ckpt"
    args = ["--device", "cpu", "--model", "mlp_digits", "--epochs", "3", "--save-dir", save]
    from tr_mlir.tools import tr_train as tt

    real = tt._train_epoch
    calls = []

    def stop_after_first(task, ds, epoch, epochs, drop_last=False):
        calls.append(epoch)
        if len(calls) == 2 and epoch == 2:
            raise KeyboardInterrupt  # interrupted during epoch 2: the checkpoint holds epoch 1
        return real(task, ds, epoch, epochs, drop_last)

    monkeypatch.setattr(tt, "_train_epoch", stop_after_first)
    code, out, err = run_main(args, capsys)
    assert code != 0
    monkeypatch.setattr(tt, "_train_epoch", real)
    code, out, err = run_main(["--device", "cpu", "--resume", save, "--report-json", tmp_path / "r.json"], capsys)
    assert code == 0, err
    assert "epochs 2..3" in out and "epoch 3/3" in out and "epoch 4/" not in out
    resumed = json.loads((tmp_path / "r.json").read_text())
    assert resumed["config"]["epochs"] == 3
    code, out, err = run_main(args[:-2] + ["--report-json", tmp_path / "u.json"], capsys)
    assert code == 0, err
    whole = json.loads((tmp_path / "u.json").read_text())
    keep = ("train_loss", "val_loss", "val_top1", "lr")
    assert [{k: e[k] for k in keep} for e in resumed["epochs"]] == [{k: e[k] for k in keep} for e in whole["epochs"]]


def test_drop_last_trains_full_batches_only(tmp_path, capsys):
    """Issue 15, item 2: --drop-last skips the partial last batch (1437 digits, batch 32: 44 full
    batches), so a batch norm never sees a last batch of one sample."""
    code, out, err = run_main(["--device", "cpu", "--model", "mlp_digits", "--epochs", "1", "--drop-last",
                               "--report-json", tmp_path / "r.json"], capsys)
    assert code == 0, err
    r = json.loads((tmp_path / "r.json").read_text())
    assert r["config"]["drop_last"] is True and r["config"]["train_size"] == 1437
    assert "batch_size=32 train_size=1408 " in out


def test_a_diverging_run_stops_with_an_error_and_keeps_the_last_finite_checkpoint(tmp_path, capsys, monkeypatch):
    """A run whose validation loss turns NaN: the epoch's line says so, it is not the best, the
    run stops there (exit 1, the epoch, loss and learning rate named), ``last`` and ``best`` keep
    the last finite epoch, and the report is valid JSON with null for the NaN losses."""
    from tr_mlir.tools import tr_train as tt

    real = tt._train_epoch

    def nan_in_epoch_3(task, ds, epoch, epochs, drop_last=False):
        row = real(task, ds, epoch, epochs, drop_last)
        if epoch == 3:
            row.update(train_loss=float("nan"), val_loss=float("inf"), val_top1=0.99)
        return row

    monkeypatch.setattr(tt, "_train_epoch", nan_in_epoch_3)
    save = tmp_path / "ckpt"
    code, out, err = run_main(["--device", "cpu", "--model", "mlp_digits", "--epochs", "5", "--save-dir", save,
                               "--report-json", tmp_path / "r.json"], capsys)
    assert_error(code, err, "training diverged in epoch 3: the val loss is inf", "--save-dir keeps epoch 2",
                 "a resumed run keeps its learning rate")
    assert "epoch 4/5" not in out and re.search(r"epoch 3/5 .* diverged$", out, re.M)
    assert "at epoch 3" not in out and "best val top-1" in out
    report = json.loads((tmp_path / "r.json").read_text(), parse_constant=lambda c: pytest.fail(f"{c} in JSON"))
    assert [e["epoch"] for e in report["epochs"]] == [1, 2, 3]
    assert report["epochs"][2]["val_loss"] is None and report["epochs"][2]["train_loss"] is None
    assert report["best_epoch"] in (1, 2)
    for name in ("last", "best"):
        saved = json.loads((save / name / "tr_train.json").read_text())
        assert len(saved["epochs"]) in ((2,) if name == "last" else (1, 2))


def test_diverged_and_best_of_read_the_losses():
    from tr_mlir.tools.train_outputs import best_of, diverged

    nan, inf = float("nan"), float("inf")
    assert diverged({"val_loss": nan, "train_loss": 1.0}, 10) == "val"
    assert diverged({"val_loss": 2.0, "train_loss": inf}, 10) is None  # one overflowing step, a finite model
    assert diverged({"val_loss": None}, 10) == "val"
    assert diverged({"val_loss": nan, "train_loss": -inf}, 0) == "train"
    assert diverged({"val_loss": nan, "train_loss": 0.5}, 0) is None
    rows = [{"epoch": 1, "val_top1": 0.5, "val_loss": 1.0}, {"epoch": 2, "val_top1": 0.9, "val_loss": nan},
            {"epoch": 3, "val_top1": nan, "val_loss": 0.9}, {"epoch": 4, "val_top1": 0.6, "val_loss": 0.8}]
    assert best_of(rows) == (0.6, 4)
    assert best_of(rows[1:3]) == (None, None)
