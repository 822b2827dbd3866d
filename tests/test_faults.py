"""Faults during training (issue 15): ``tr-train`` killed by signals (not mocks) at random points of
training and of a checkpoint save, then resumed, ends bit-identical to an uninterrupted run, and a
checkpoint is never half-written.

An uninterrupted reference run (:data:`RUN`: ``resnet_tiny`` on digits, :data:`EPOCHS` epochs,
``--save-dir``) is compared with chains of interrupted ones: a run started fresh in a new folder is
stopped by the first event, resumed (``tr-train --resume DIR``, every setting from the checkpoint)
and stopped by the next event, and so on until a run finishes; its ``DIR/last`` and ``DIR/best``
must then hold the reference's arrays bit for bit, its configuration and its epoch rows (lr, losses,
accuracies). When a chain finishes with events left, a new chain runs them. The events (seeded by
:data:`SEED`) send SIGKILL, SIGTERM or SIGINT (Ctrl-C: tr-train exits 130)

* during training: a random delay after the process's "== train" line, or its first or second
  epoch line (the epoch's checkpoint is being saved then);
* at a random time after the start (imports, data, compile included; SIGKILL and SIGTERM);
* at each step of a checkpoint save (of ``last`` or ``best``): the process runs with the test hook
  ``TR_MLIR_SAVE_PAUSE=POINT@FOLDER:SECONDS`` (:func:`tr_mlir.task.save_pause`), which stops that
  save at that step, saying so on stderr; the test signals the process during that pause.

After every stopped run each checkpoint folder present (``last``, ``best``, and ``last.old`` when a
kill left ``last`` between the two renames of its save) is whole: its three files, loadable by
``Task.load``, with the SHA-256 its ``tr_train.json`` records and as many epoch rows as epochs
trained. Every subprocess runs under a timeout.
"""

from __future__ import annotations

import json
import os
import queue
import random
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from tr_mlir.task import CONFIG_FILE, SAVE_PAUSE_ENV, STATE_FILE, Task
from tr_mlir.tools.train_options import RUN_STATE_FILE
from tr_mlir.tools.train_outputs import load_run_state

SEED = 15
EPOCHS = 5
RUN = ["--device", "cpu", "--model", "resnet_tiny", "--dataset", "digits", "--epochs", str(EPOCHS)]
PROCESS_TIMEOUT = 90.0
"""Seconds a tr-train subprocess may run (a resnet_tiny run of 5 epochs takes about 3 s)."""
PAUSE = 3.0
"""Seconds the save hook pauses; the signal arrives within milliseconds of its message."""
MAX_PROCESSES = 40

SAVE_POINTS = ("task-state-written", "task-config-written", "task-state-renamed", "run-task-saved",
               "run-state-written", "run-old-moved", "run-swapped")
ROW_KEYS = ("epoch", "lr", "train_loss", "train_top1", "val_loss", "val_top1", "val_top5")


@dataclass(frozen=True)
class Event:
    """Send ``sig`` after the process's ``after_epochs``-th epoch line (0: its "== train" line) plus
    ``delay`` seconds, or ``delay`` seconds after the start (``after_epochs`` None), or at save step
    ``point`` of folder ``folder`` (the hook pauses there)."""

    sig: signal.Signals
    delay: float = 0.0
    after_epochs: int | None = None
    point: str | None = None
    folder: str | None = None

    def __str__(self) -> str:
        if self.point:
            return f"{self.sig.name} at {self.point}@{self.folder}"
        when = "start" if self.after_epochs is None else f"epoch line {self.after_epochs}"
        return f"{self.sig.name} {self.delay:.3f} s after {when}"


def training_events(rng: random.Random) -> list[Event]:
    """Each signal a random time into the process's first, second or third epoch (an epoch and its
    validation take about 0.3 s), and a kill at a random time from the start."""
    sigs = [signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGKILL]
    events = [Event(s, delay=rng.uniform(0.0, 0.3), after_epochs=i % 3) for i, s in enumerate(sigs)]
    events.insert(rng.randint(0, len(events)), Event(rng.choice([signal.SIGKILL, signal.SIGTERM]),
                                                    delay=rng.uniform(0.2, 2.0)))
    return events


def save_events(rng: random.Random) -> list[Event]:
    """A kill at every save step, of ``last`` or ``best`` (drawn), and at the two steps whose
    recovery differs between them: ``last`` between its renames (the resume puts ``last.old``
    back), ``best`` after ``last`` was saved (the resume rewrites ``best``)."""
    sigs = [signal.SIGKILL, signal.SIGTERM, signal.SIGINT]
    events = [Event(rng.choice(sigs), point=p, folder=rng.choice(["last", "best"])) for p in SAVE_POINTS]
    events += [Event(rng.choice(sigs), point="run-old-moved", folder="last"),
               Event(rng.choice(sigs), point="run-task-saved", folder="best")]
    rng.shuffle(events)
    return events


# --------------------------------------------------------------------------------------
# Running tr-train
# --------------------------------------------------------------------------------------


def tr_train(args: list[str], event: Event | None, cwd: Path) -> tuple[int, str, bool]:
    """Run ``tr-train args`` as a subprocess, signalled by ``event``: (exit status, stdout and stderr
    interleaved, whether the signal was sent). Fails the test when it runs past PROCESS_TIMEOUT."""
    env = dict(os.environ)
    env.pop(SAVE_PAUSE_ENV, None)
    if event is not None and event.point:
        env[SAVE_PAUSE_ENV] = f"{event.point}@{event.folder}:{PAUSE}"
    proc = subprocess.Popen([sys.executable, "-u", "-m", "tr_mlir.tools.tr_train", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    start = time.monotonic()
    deadline = start + PROCESS_TIMEOUT
    fire_at = start + event.delay if event is not None and event.after_epochs is None and not event.point else None
    out: list[str] = []
    epochs = 0
    fired = False
    try:
        while True:
            now = time.monotonic()
            if fire_at is not None and now >= fire_at:
                if proc.poll() is None:
                    proc.send_signal(event.sig)
                    fired = True
                fire_at = None
            wait = (fire_at if fire_at is not None else deadline) - now
            if now >= deadline:
                raise AssertionError(f"tr-train {args} ran past {PROCESS_TIMEOUT} s:\n{''.join(out)}")
            try:
                line = lines.get(timeout=max(wait, 0.0))
            except queue.Empty:
                continue
            if line is None:
                break
            out.append(line)
            if event is None or fired or fire_at is not None:
                continue
            if event.point and line.startswith(f"tr-mlir: save pause {event.point} "):
                fire_at = time.monotonic()
            elif event.after_epochs is not None and (line.startswith("== train") or re.match(r"epoch +\d+/", line)):
                if epochs == event.after_epochs:
                    fire_at = time.monotonic() + event.delay
                epochs += 1
        code = proc.wait(timeout=max(deadline - time.monotonic(), 1.0))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return code, "".join(out), fired


def checkpoint_of(folder: Path) -> dict:
    """What a finished run's checkpoint holds: arrays, configuration, epoch rows, best."""
    with np.load(folder / STATE_FILE) as z:
        arrays = {k: (z[k].dtype.str, z[k].shape, z[k].tobytes()) for k in z.files}
    config = json.loads((folder / CONFIG_FILE).read_text())
    config.pop("state_sha256")  # the archive's bytes hold its write time: compare the arrays instead
    run = json.loads((folder / RUN_STATE_FILE).read_text())
    rows = [{k: r[k] for k in ROW_KEYS} for r in run["epochs"]]
    return {"arrays": arrays, "config": config, "rows": rows, "best": (run["best_val_top1"], run["best_epoch"])}


def assert_whole(save_dir: Path) -> int:
    """Every checkpoint folder in ``save_dir`` is whole (module doc); returns the epochs ``last``
    holds (that of ``last.old`` when a kill left ``last`` between its renames; 0 for none)."""
    held = 0
    for name in ("last", "best", "last.old"):
        folder = save_dir / name
        if not folder.exists() or (name == "last.old" and (save_dir / "last").exists()):
            continue
        assert sorted(p.name for p in folder.iterdir()) == sorted([CONFIG_FILE, STATE_FILE, RUN_STATE_FILE]), folder
        task = Task.load(folder)
        run = load_run_state(folder)  # checks the SHA-256 of config.json and state.npz
        assert len(run["epochs"]) == task.epochs, folder
        if name != "best":
            held = task.epochs
    return held


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict:
    """The uninterrupted run's checkpoints."""
    folder = tmp_path_factory.mktemp("reference")
    code, out, _ = tr_train([*RUN, "--save-dir", str(folder / "ckpt")], None, folder)
    assert code == 0, out
    return {name: checkpoint_of(folder / "ckpt" / name) for name in ("last", "best")}


def run_chains(events: list[Event], root: Path, reference: dict) -> list[str]:
    """Run ``events`` in chains (module doc) under ``root``; returns a log line per process."""
    pending = list(events)
    log: list[str] = []
    chain = 0
    while pending:
        save_dir = root / f"chain{chain}" / "ckpt"
        save_dir.parent.mkdir(parents=True)
        held = 0
        while True:
            assert len(log) < MAX_PROCESSES, "\n".join(log)
            event = pending[0] if pending else None
            resume = held > 0
            args = ["--resume", str(save_dir)] if resume else [*RUN, "--save-dir", str(save_dir)]
            code, out, fired = tr_train(args, event, save_dir.parent)
            log.append(f"chain {chain} {'resume' if resume else 'fresh'} from epoch {held}: {event}: "
                       f"{'fired' if fired else 'not fired'}, exit {code}")
            assert "Traceback" not in out and "internal error" not in out, f"{log[-1]}\n{out}"
            if fired and code == 0:  # the run ended just before the signal: as if it had not been sent
                fired = False
            if fired:
                pending.pop(0)
                want = 130 if event.sig == signal.SIGINT else -event.sig
                assert code == want, f"{log[-1]}\n{out}"
            before = held
            held = assert_whole(save_dir)
            assert held >= before, f"{log[-1]}: the checkpoint went back from epoch {before} to {held}"
            if not fired:
                finished = code == 0 or (code == 1 and f"has trained {EPOCHS} epochs" in out)
                assert finished, f"{log[-1]}\n{out}"
                break
        assert held == EPOCHS, "\n".join(log)
        for name in ("last", "best"):
            got = checkpoint_of(save_dir / name)
            for key, want in reference[name].items():
                assert got[key] == want, f"{name} {key} differs from the uninterrupted run's\n" + "\n".join(log)
        chain += 1
    return log


def test_kills_during_training_resume_bit_identically(reference, tmp_path):
    events = training_events(random.Random(SEED))
    log = run_chains(events, tmp_path, reference)
    print("\n".join(log))


def test_kills_during_checkpoint_saves_resume_bit_identically(reference, tmp_path):
    """A kill at every step of a save (:func:`save_events`): the previous checkpoint stays
    whole (or is restored from ``last.old`` by the resume), and the resumed run rewrites ``best``
    when it was stopped between saving ``last`` and ``best`` of the same epoch."""
    events = save_events(random.Random(SEED + 1))
    log = run_chains(events, tmp_path, reference)
    print("\n".join(log))


# --------------------------------------------------------------------------------------
# Regression tests: the faults found, rebuilt on disk (each failed before its fix)
# --------------------------------------------------------------------------------------


def in_process(args: list) -> tuple[int, str, str]:
    """``tr-train args`` in this process: (exit code, stdout, stderr)."""
    import contextlib
    import io

    from tr_mlir.tools.tr_train import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in args])
    return code, out.getvalue(), err.getvalue()


SHORT = ["--device", "cpu", "--model", "mlp_digits"]


def stopped_after_epoch_1(monkeypatch, save: Path) -> None:
    """Run ``SHORT --epochs 2 --save-dir save`` and Ctrl-C it as its second epoch starts."""
    from tr_mlir.tools import tr_train as tt

    real = tt._train_epoch

    def train_epoch(task, ds, epoch, *args):
        if epoch == 2:
            raise KeyboardInterrupt
        return real(task, ds, epoch, *args)

    with monkeypatch.context() as m:
        m.setattr(tt, "_train_epoch", train_epoch)
        code, _, err = in_process([*SHORT, "--epochs", "2", "--save-dir", save])
    assert code == 130, err
    assert Task.load(save / "last").epochs == 1


def arrays_of(folder: Path) -> dict:
    with np.load(folder / STATE_FILE) as z:
        return {k: z[k].tobytes() for k in z.files}


def test_resume_after_a_kill_between_the_two_renames_of_a_save(tmp_path, monkeypatch):
    """Found: a kill between save_checkpoint's two renames (DIR/last moved to DIR/last.old, the new
    DIR/last.tmp not yet renamed) left no DIR/last, and `--resume DIR` said 'not a tr-train
    checkpoint'. The resume now puts DIR/last.old back and redoes the epoch that was being saved."""
    save = tmp_path / "ckpt"
    stopped_after_epoch_1(monkeypatch, save)
    os.replace(save / "last", save / "last.old")
    (save / "last.tmp").mkdir()
    (save / "last.tmp" / STATE_FILE).write_bytes(b"half")
    code, out, err = in_process(["--device", "cpu", "--resume", save])
    assert code == 0, err
    assert f"restored {save / 'last'} from {save / 'last.old'}" in out
    assert sorted(p.name for p in save.iterdir()) == ["best", "last"]
    assert Task.load(save / "last").epochs == 2
    whole = tmp_path / "whole"
    code, _, err = in_process([*SHORT, "--epochs", "2", "--save-dir", whole])
    assert code == 0, err
    assert arrays_of(save / "last") == arrays_of(whole / "last")


@pytest.mark.parametrize("stopped", ["before-rename", "between-renames"])
@pytest.mark.parametrize("more", [False, True], ids=["finished", "more-epochs"])
def test_resume_rewrites_a_best_checkpoint_whose_save_was_stopped(tmp_path, monkeypatch, stopped, more):
    """Found: a kill after DIR/last was saved and before DIR/best was (a new best epoch) left
    DIR/best at an older epoch for good (the resumed run starts after that epoch and saves best only
    on a later improvement); after the last epoch the resume just said 'has trained N epochs'. The
    resume now rewrites DIR/best from the checkpoint it resumes when that is the run's best."""
    save, whole = tmp_path / "ckpt", tmp_path / "whole"
    code, _, err = in_process([*SHORT, "--epochs", "2", "--save-dir", whole])
    assert code == 0, err
    assert json.loads((whole / "best" / RUN_STATE_FILE).read_text())["best_epoch"] == 2  # epoch 2 is a new best
    stopped_after_epoch_1(monkeypatch, save)
    epoch1 = tmp_path / "epoch1"
    os.replace(save / "best", epoch1)
    code, _, err = in_process(["--device", "cpu", "--resume", save])
    assert code == 0, err
    os.replace(save / "best", tmp_path / "dropped")  # as if the save of best(2) had not happened ...
    os.replace(epoch1, save / ("best" if stopped == "before-rename" else "best.old"))  # ... or half of it
    code, out, err = in_process(["--device", "cpu", "--resume", save] + (["--epochs", "3"] if more else []))
    assert f"rewrote {save / 'best'} from {save / 'last'} (epoch 2, the best)" in out
    if more:
        assert code == 0, err
    else:
        assert code == 1 and "has trained 2 epochs" in err, err
        assert arrays_of(save / "best") == arrays_of(whole / "best")
    assert len(json.loads((save / "best" / RUN_STATE_FILE).read_text())["epochs"]) >= 2
    assert not (save / "best.old").exists()


# --------------------------------------------------------------------------------------
# Issue 17: the training features survive a kill
# --------------------------------------------------------------------------------------

FEATURES = ["--device", "cpu", "--model", "resnet_tiny", "--dataset", "digits", "--epochs", "4",
            "--augment", "digits", "--ema", "0.9", "--resize-schedule", "6:8:2", "--init", "torch",
            "--amp", "--loss-scaler", "torch", "--scaler-init", "1024", "--scaler-interval", "5"]
"""Every issue-17 feature on: augmentation, EMA, progressive resizing (epochs 1-2 at 6x6, 3-4 at
8x8), PyTorch init, AMP with the GradScaler rule."""


@pytest.mark.parametrize("sig", [signal.SIGKILL])
def test_kill_with_every_training_feature_resumes_bit_identically(tmp_path, sig):
    ref = tmp_path / "ref"
    code, out, _ = tr_train([*FEATURES, "--save-dir", str(ref / "ckpt")], None, tmp_path)
    assert code == 0, out
    assert "EMA top-1" in out and "resize 6 (epochs 1..2) -> 8" in out
    want = checkpoint_of(ref / "ckpt" / "last")
    assert any(k.startswith("ema/") for k in want["arrays"]) and "scalar/scaler_growth_tracker" in want["arrays"]
    run = tmp_path / "run" / "ckpt"
    run.parent.mkdir()
    code, out, fired = tr_train([*FEATURES, "--save-dir", str(run)], Event(sig, 0.05, after_epochs=2), run.parent)
    assert fired and code == -sig, out
    held = assert_whole(run)
    assert 1 <= held < 4  # killed during epoch 2 or 3 (or its checkpoint)
    code, out, _ = tr_train(["--resume", str(run)], None, run.parent)
    assert code == 0, out
    got = checkpoint_of(run / "last")
    for key in ("arrays", "config", "rows"):
        assert got[key] == want[key], f"{key} differs from the uninterrupted run's (killed after epoch {held})"
