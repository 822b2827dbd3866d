"""The user-facing switch of ``memplan-fuse-bn-stats`` (the Winograd convs write the batch-norm
statistics of their output): ``Task(fuse_bn_stats=...)``, ``Task.save`` / ``Task.load``, and
``tr-train --[no-]fuse-bn-stats``, plumbed as ``fuse_fc_relu`` is (tests/test_fuse_fc_relu.py).

Unlike the FC+ReLU epilogue the pass changes the last bits of the BN statistics (the sums are
taken in another order), so training with and without it agrees to ~1e-5, not to the bit; each
setting is deterministic. The kernels and the pass themselves: tests/test_fuse_bn_stats.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import tr_mlir
from tr_mlir.tools.tr_train import build_parser, main

F32 = np.float32
ALGO = "winograd_2x2_3x3"
SHAPE = (8, 8, 16)
BATCH = 8

NETS = '''
from tr_mlir.blueprint import BlockStyle, block, cbr, gap_fc, seq

def bn_net():
    return seq(cbr(16, 3, 1, 1), block(16, BlockStyle.RESNET_3_3), gap_fc(10, True)), (8, 8, 16)
'''
"""A ``--blueprint`` file: the net of :func:`_net` with its input shape (for ``--dataset synthetic``)."""


def _net():
    """A cbr and a residual block of 3x3 convs (stride 1: every one takes the forced Winograd)."""
    from tr_mlir import blueprint as bp
    from tr_mlir.blueprint import BlockStyle

    return bp.seq(bp.cbr(16, 3, 1, 1), bp.block(16, BlockStyle.RESNET_3_3), bp.gap_fc(10, True))


def _task(**options) -> tr_mlir.Task:
    return tr_mlir.Task(_net(), SHAPE, 10, BATCH, optimizer=tr_mlir.optim.SGD(lr=0.05, momentum=0.9), seed=1,
                        conv_algo=ALGO, **options)


def _bn_stats_nodes(task: tr_mlir.Task) -> list[str]:
    """The ``@train`` graph's nodes whose static params carry ``bn_stats``."""
    from tr_mlir.dialects.memplan import GraphId

    graph = next(g for g in task.exe.program.graphs() if g.graph_name == "train")
    return [n.op for gid in GraphId for n in graph.nodes(gid)
            if n.param >= 0 and "bn_stats" in graph.params.data[n.param].data]


def _steps(task: tr_mlir.Task, n: int = 4) -> list[float]:
    rng = np.random.default_rng(2)
    return [task.train_step(rng.standard_normal((BATCH, *SHAPE)).astype(F32),
                            rng.integers(0, 10, BATCH).astype(np.int32)) for _ in range(n)]


# --------------------------------------------------------------------------------------
# Task
# --------------------------------------------------------------------------------------


def test_the_task_option_is_checked_and_turns_the_pass_off():
    with pytest.raises(tr_mlir.TaskError, match="Task: fuse_bn_stats must be a bool, got 1"):
        _task(fuse_bn_stats=1)
    default = _task().compile()
    assert default.fuse_bn_stats is True and _bn_stats_nodes(default)
    assert set(_bn_stats_nodes(default)) == {"CONV_FP32_FWD"}
    off = _task(fuse_bn_stats=False).compile()
    assert off.fuse_bn_stats is False and _bn_stats_nodes(off) == []
    assert "bn_stats" not in str(off.module) and "bn_stats" in str(default.module)
    assert tr_mlir.Task(_net(), SHAPE, 10, BATCH).fuse_bn_stats is True


def test_the_task_option_is_saved_loaded_and_recompiles_with_the_state(tmp_path):
    """Kept by ``Task.save`` / ``Task.load`` (which can override it); changing it before
    ``compile()`` recompiles, keeping the parameters; a non-bool is refused there; a save that
    predates the option loads with it on."""
    task = _task(fuse_bn_stats=False).compile()
    _steps(task, 1)
    task.save(tmp_path / "t")
    assert json.loads((tmp_path / "t" / "config.json").read_text())["fuse_bn_stats"] is False
    loaded = tr_mlir.Task.load(tmp_path / "t")
    assert loaded.fuse_bn_stats is False and _bn_stats_nodes(loaded) == []
    before = [a.copy() for _, a in loaded.parameters()]
    loaded.fuse_bn_stats = True
    assert _bn_stats_nodes(loaded.compile())
    for a, (_, b) in zip(before, loaded.parameters()):
        assert a.tobytes() == b.tobytes()
    loaded.fuse_bn_stats = 0
    with pytest.raises(tr_mlir.TaskError, match="Task.compile: fuse_bn_stats must be a bool, got 0"):
        loaded.compile(train_size=16)
    # Task.load with the option given compiles once, with it
    again = tr_mlir.Task.load(tmp_path / "t", fuse_bn_stats=True)
    assert again.fuse_bn_stats is True and _bn_stats_nodes(again)
    # a save of an older version has no key: the pass runs (the default)
    config = tmp_path / "t" / "config.json"
    cfg = json.loads(config.read_text())
    del cfg["fuse_bn_stats"]
    config.write_text(json.dumps(cfg))
    old = tr_mlir.Task.load(tmp_path / "t")
    assert old.fuse_bn_stats is True and _bn_stats_nodes(old)
    config.write_text(json.dumps({**cfg, "fuse_bn_stats": "no"}))
    with pytest.raises(tr_mlir.TaskError, match="does not describe a task: .*'fuse_bn_stats' is 'no', expected a bool"):
        tr_mlir.Task.load(tmp_path / "t")


def test_training_with_and_without_the_pass_agrees_and_each_is_deterministic():
    """Four steps: the losses and parameters with and without the pass agree to ~1e-5 (the BN
    statistics summed in another order); two runs of one setting are identical to the bit."""
    runs = {}
    for on in (True, False):
        first, second = _task(fuse_bn_stats=on).compile(), _task(fuse_bn_stats=on).compile()
        losses = _steps(first)
        assert _steps(second) == losses, f"fuse_bn_stats={on}: not deterministic"
        for (_, a), (_, b) in zip(first.parameters(), second.parameters()):
            assert a.tobytes() == b.tobytes()
        runs[on] = losses, [a.copy() for _, a in first.parameters()]
    (on_losses, on_params), (off_losses, off_params) = runs[True], runs[False]
    np.testing.assert_allclose(on_losses, off_losses, rtol=1e-5, atol=0)
    for i, (a, b) in enumerate(zip(on_params, off_params)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=f"parameter #{i}")


# --------------------------------------------------------------------------------------
# tr-train
# --------------------------------------------------------------------------------------


def test_parser_flags_and_resumed_default():
    from tr_mlir.tools.train_options import RESUMED_DEFAULTS

    assert build_parser().parse_args([]).fuse_bn_stats is True
    assert build_parser().parse_args(["--no-fuse-bn-stats"]).fuse_bn_stats is False
    assert build_parser().parse_args(["--no-fuse-bn-stats", "--fuse-bn-stats"]).fuse_bn_stats is True
    assert "fuse_bn_stats" in RESUMED_DEFAULTS


def test_help_lists_the_flags(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "--fuse-bn-stats, --no-fuse-bn-stats" in out
    assert "--no-fuse-bn-stats keeps the BN's own statistics pass" in out


def _tr_train(args: list, capsys) -> str:
    """``tr-train args`` in this process, which must succeed; returns its standard output."""
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def _first_run(tmp_path, capsys, *extra) -> tuple[Path, str]:
    """One epoch of the net of :data:`NETS` on synthetic data with every 3x3 conv Winograd,
    checkpointed in ``tmp_path/ckpt``; returns that folder and the output."""
    tmp_path.mkdir(exist_ok=True)
    nets = tmp_path / "nets.py"
    nets.write_text(NETS)
    save = tmp_path / "ckpt"
    out = _tr_train(["--device", "cpu", "--blueprint", f"{nets}:bn_net", "--dataset", "synthetic", "--batch-size", "64",
                     "--conv-algo", ALGO, "--epochs", "1", "--save-dir", save, *extra], capsys)
    return save, out


def _saved_setting(save: Path) -> tuple[bool, bool]:
    """``fuse_bn_stats`` as the last checkpoint records it: in the Task's config, in the run state."""
    last = save / "last"
    return (json.loads((last / "config.json").read_text())["fuse_bn_stats"],
            json.loads((last / "tr_train.json").read_text())["config"]["fuse_bn_stats"])


def _dumped(ir: Path) -> tuple[list[str], str]:
    """The passes of an ``--dump-ir`` folder, and the IR after the last one."""
    names = sorted(p.name for p in ir.glob("[0-9]*-*.mlir"))
    return [n.split("-", 1)[1][:-len(".mlir")] for n in names[1:]], (ir / names[-1]).read_text()


def test_tr_train_no_fuse_bn_stats_compiles_without_the_pass_and_is_resumed(tmp_path, capsys):
    """``--no-fuse-bn-stats`` compiles without memplan-fuse-bn-stats (the pipeline line, the IR
    dump, the checkpoint's Task config and run state) and a resumed run keeps it unless the flag
    (or its positive form) is given; by default the pass runs."""
    save, out = _first_run(tmp_path, capsys, "--no-fuse-bn-stats", "--dump-ir", tmp_path / "off")
    assert "fuse_bn_stats=false" in out
    passes, last = _dumped(tmp_path / "off")
    assert "memplan-fuse-fc-relu" in passes and "memplan-fuse-bn-stats" not in passes and "bn_stats" not in last
    assert _saved_setting(save) == (False, False)
    assert "fuse_bn_stats=false" in _tr_train(["--device", "cpu", "--resume", save, "--epochs", "2"], capsys)
    assert _saved_setting(save) == (False, False)
    # the positive flag turns it back on for a resumed run saved without it
    out = _tr_train(["--device", "cpu", "--resume", save, "--epochs", "3", "--fuse-bn-stats"], capsys)
    assert "fuse_bn_stats=false" not in out and _saved_setting(save) == (True, True)
    # the default: the pass runs and flags the convs
    save, out = _first_run(tmp_path / "default", capsys, "--dump-ir", tmp_path / "on")
    assert "fuse_bn_stats=false" not in out and _saved_setting(save) == (True, True)
    passes, last = _dumped(tmp_path / "on")
    assert passes.index("memplan-fuse-bn-stats") == passes.index("memplan-fuse-fc-relu") + 1 and "bn_stats" in last


def test_tr_train_damaged_run_state_value_is_named(tmp_path, capsys):
    """A tr_train.json whose ``fuse_bn_stats`` is no bool is a damaged run state on --resume."""
    save, _ = _first_run(tmp_path, capsys)
    state = save / "last" / "tr_train.json"
    run = json.loads(state.read_text())
    run["config"]["fuse_bn_stats"] = "yes"
    state.write_text(json.dumps(run))
    code = main(["--device", "cpu", "--resume", str(save), "--epochs", "2"])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    assert f"--resume {save / 'last'}: tr_train.json is damaged: 'fuse_bn_stats' is 'yes', not a valid" in err
