"""Fuzzing of saved checkpoints (issue 15): ``Task.load`` and ``tr-train --resume`` against damaged
checkpoint files, with ``hypothesis``.

A tr-train run with ``--save-dir`` keeps ``DIR/last`` and ``DIR/best``, each holding ``config.json``
and ``state.npz`` (:meth:`tr_mlir.Task.save`) and ``tr_train.json`` (the run). Every example copies
one such run, damages one file of one of the two checkpoints (truncated at a random offset, random
bytes flipped, the file of another model's checkpoint swapped in, an array of another dtype or
shape or a missing or extra array in ``state.npz``, a JSON value of another type or a missing key)
and, half of the time, rewrites the SHA-256 that link the files (``state_sha256`` in
``config.json``, ``sha256`` in ``tr_train.json``) so that the damage is consistent and reaches the
deeper checks. Then:

* ``Task.load`` either loads or raises :class:`~tr_mlir.TaskError` naming a file of the checkpoint
  (or, for a batch size too large for this machine, the documented ``ArenaTooLargeError``, naming
  ``config.json``), never another exception; ``tr-train --resume`` either trains on or exits 1 with one
  ``tr-train: error:`` line naming the checkpoint's file, never an internal error or a traceback;
* a failed load or resume changes no file of the run (both checkpoints hashed before and after).

Modes: CI runs :data:`CI_EXAMPLES` examples per test, derandomized (the same examples every run);
``TR_MLIR_FUZZ_EXAMPLES=N`` runs N random examples per test instead (a failure prints the
``@reproduce_failure`` blob to replay it). Every failure found became a named regression test
below the fuzz tests.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tr_mlir.lowering.backend import ArenaTooLargeError
from tr_mlir.task import CONFIG_FILE, STATE_FILE, Task, TaskError
from tr_mlir.tools.tr_train import RUN_STATE_FILE, main

EXAMPLES_ENV = "TR_MLIR_FUZZ_EXAMPLES"
CI_EXAMPLES = 50
"""Examples per fuzz test in CI (about 15 s for the file); ``TR_MLIR_FUZZ_EXAMPLES`` overrides."""

_LONG = os.environ.get(EXAMPLES_ENV)
FUZZ = settings(max_examples=int(_LONG) if _LONG else CI_EXAMPLES, derandomize=not _LONG, deadline=None,
                database=None, print_blob=True, suppress_health_check=[HealthCheck.too_slow])

FILES = (CONFIG_FILE, STATE_FILE, RUN_STATE_FILE)
RUNS = {  # name -> tr-train flags; "a" is damaged, "b" (same model, Adam) and "c" (ResNet) are swapped in
    "a": ["--model", "mlp_digits", "--epochs", "2"],
    "a1": ["--model", "mlp_digits", "--epochs", "1"],  # run "a" stopped after its first epoch
    "b": ["--model", "mlp_digits", "--optimizer", "adam", "--epochs", "1"],
    "c": ["--model", "resnet_tiny", "--epochs", "1", "--batch-size", "64"],
}


def tr_train(args: list[Any]) -> tuple[int, str]:
    """``tr-train args`` in this process: (exit code, stderr)."""
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main([str(a) for a in args])
    return code, err.getvalue()


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """The three runs' --save-dir folders, under one folder."""
    root = tmp_path_factory.mktemp("runs")
    for name, flags in RUNS.items():
        code, err = tr_train(["--device", "cpu", *flags, "--save-dir", root / name])
        assert code == 0, err
    return root


def fingerprint(folder: Path) -> dict[str, str]:
    """Relative path -> SHA-256 of every file under ``folder`` (and '<dir>' for every folder)."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "<dir>"
            for p in sorted(folder.rglob("*"))}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def rehash(ckpt: Path) -> None:
    """Rewrite the SHA-256 that link the files of checkpoint ``ckpt`` (where they still parse), as if
    the damaged files had been saved that way."""
    def read(name: str) -> Any:
        try:
            return json.loads((ckpt / name).read_text())
        except (OSError, ValueError):
            return None

    cfg = read(CONFIG_FILE)
    if isinstance(cfg, dict) and "state_sha256" in cfg and (ckpt / STATE_FILE).is_file():
        cfg["state_sha256"] = sha256(ckpt / STATE_FILE)
        (ckpt / CONFIG_FILE).write_text(json.dumps(cfg, indent=1))
    run = read(RUN_STATE_FILE)
    if isinstance(run, dict) and isinstance(run.get("sha256"), dict):
        run["sha256"] = {n: sha256(ckpt / n) for n in (CONFIG_FILE, STATE_FILE) if (ckpt / n).is_file()}
        (ckpt / RUN_STATE_FILE).write_text(json.dumps(run, indent=1))


# --------------------------------------------------------------------------------------
# Damage
# --------------------------------------------------------------------------------------

JSON_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from([2**31, 2**63, 10**30, -(2**63)]),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=4),
    st.sampled_from(["digits", "synthetic", "cpu", "gpu", "SGD", "Adam", "CosineAnnealingLR", "builtin.module {}"]),
    st.lists(st.integers(-1, 40), max_size=4), st.lists(st.lists(st.text(max_size=4), max_size=2), max_size=2),
    st.dictionaries(st.sampled_from(["type", "lr", "epoch", "T_max", "x"]), st.integers(-1, 3), max_size=2),
)
"""JSON values of every type, some of them values the files hold elsewhere."""

DTYPES = [np.float16, np.float64, ">f4", np.int32, np.int64, np.uint8, np.bool_, np.complex64, "<U3"]


def _json_paths(obj: Any, path: tuple = ()) -> list[tuple]:
    out = [path]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _json_paths(v, (*path, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _json_paths(v, (*path, i))
    return out


def damage_json(data: st.DataObject, path: Path) -> str:
    """Set a random value (of any type) somewhere in the JSON file ``path``, or delete a key."""
    obj = json.loads(path.read_text())
    where = data.draw(st.sampled_from(_json_paths(obj)[1:]), label="json path")
    parent = obj
    for k in where[:-1]:
        parent = parent[k]
    if isinstance(parent, dict) and data.draw(st.booleans(), label="delete"):
        del parent[where[-1]]
        what = f"delete {where}"
    else:
        parent[where[-1]] = data.draw(JSON_VALUES, label="value")
        what = f"set {where}"
    path.write_text(json.dumps(obj, indent=1))
    return what


def damage_npz(data: st.DataObject, path: Path) -> str:
    """Replace an array of ``state.npz`` by one of another dtype or shape, make it non-finite, drop it,
    or add an array the task does not have."""
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    key = data.draw(st.sampled_from(sorted(arrays)), label="array")
    a = arrays[key]
    how = data.draw(st.sampled_from(["dtype", "flat", "axis", "empty", "scalar", "nan", "huge", "drop", "extra"]),
                    label="how")
    if how == "dtype":
        dtype = data.draw(st.sampled_from(DTYPES), label="dtype")
        arrays[key] = a.astype(dtype)
        how = f"dtype {np.dtype(dtype)}"
    elif how == "flat":
        arrays[key] = a.reshape(-1)
    elif how == "axis":
        arrays[key] = a[None]
    elif how == "empty":
        arrays[key] = a.reshape(-1)[:0]
    elif how == "scalar":
        arrays[key] = np.array(1, a.dtype)
    elif how == "nan":
        arrays[key] = np.full(a.shape, np.nan if a.dtype.kind == "f" else -1, a.dtype)
    elif how == "huge":
        arrays[key] = np.full(a.shape, 2**40 if a.dtype.kind in "iu" else np.inf, a.dtype)
    elif how == "drop":
        del arrays[key]
    else:
        arrays[key.rsplit("/", 1)[0] + "/extra"] = a
    with open(path, "wb") as f:
        np.savez(f, **arrays)
    return f"{how} {key}"


def damage(data: st.DataObject, runs: Path, ckpt: Path, name: str) -> str:
    """Damage file ``name`` of checkpoint folder ``ckpt`` one of the ways of the module doc; returns
    what was done (hypothesis prints it with a failing example)."""
    path = ckpt / name
    kinds = ["truncate", "flip", "swap"] + (["npz"] if name == STATE_FILE else ["json"])
    kind = data.draw(st.sampled_from(kinds), label="kind")
    raw = path.read_bytes()
    if kind == "truncate":
        at = data.draw(st.integers(0, len(raw) - 1), label="offset")
        path.write_bytes(raw[:at])
        return f"truncate {name} at {at} of {len(raw)}"
    if kind == "flip":
        b = bytearray(raw)
        flips = data.draw(st.lists(st.tuples(st.integers(0, len(b) - 1), st.integers(1, 255)), min_size=1,
                                   max_size=4), label="flips")
        for at, mask in flips:
            b[at] ^= mask
        path.write_bytes(bytes(b))
        return f"flip {name} at {flips}"
    if kind == "swap":
        source = data.draw(st.sampled_from(["b/last", "c/last", "a/" + ("best" if ckpt.name == "last" else "last")]),
                           label="from")
        shutil.copyfile(runs / source / name, path)
        return f"{name} from {source}"
    return f"{name}: " + (damage_npz(data, path) if kind == "npz" else damage_json(data, path))


def damaged_run(data: st.DataObject, runs: Path) -> tuple[Path, Path, str, bool]:
    """A fresh copy of run "a" with one file of one checkpoint damaged: (run folder, damaged
    checkpoint folder, damaged file name, whether the links were rehashed)."""
    run = Path(tempfile.mkdtemp(dir=runs, prefix="fuzz-")) / "a"
    shutil.copytree(runs / "a", run)
    ckpt = run / data.draw(st.sampled_from(["last", "best"]), label="checkpoint")
    name = data.draw(st.sampled_from(FILES), label="file")
    damage(data, runs, ckpt, name)
    relinked = data.draw(st.booleans(), label="rehash")
    if relinked:
        rehash(ckpt)
    return run, ckpt, name, relinked


def names_a_file(message: str, ckpt: Path) -> bool:
    """Whether ``message`` names a file of checkpoint ``ckpt``: by its path, or the folder and its name."""
    return any(str(ckpt / n) in message or (str(ckpt) in message and n in message)
               for n in (*FILES, CONFIG_FILE + ".tmp"))


# --------------------------------------------------------------------------------------
# The fuzz tests
# --------------------------------------------------------------------------------------


@FUZZ
@given(data=st.data())
def test_fuzz_task_load_of_a_damaged_checkpoint(runs, data):
    run, ckpt, name, relinked = damaged_run(data, runs)
    before = fingerprint(run)
    try:
        Task.load(ckpt)
    except (TaskError, ArenaTooLargeError) as e:  # the latter: a batch size too large for this machine
        assert name != RUN_STATE_FILE, f"Task.load does not read {RUN_STATE_FILE}, yet: {e}"
        assert names_a_file(str(e), ckpt), str(e)
    assert fingerprint(run) == before
    shutil.rmtree(run.parent)


@FUZZ
@given(data=st.data())
def test_fuzz_tr_train_resume_of_a_damaged_checkpoint(runs, data):
    run, ckpt, name, relinked = damaged_run(data, runs)
    before = fingerprint(run)
    code, err = tr_train(["--device", "cpu", "--resume", ckpt, "--save-dir", run, "--epochs", "3"])
    assert "internal error" not in err and "Traceback" not in err, err
    assert code in (0, 1), (code, err)
    if code == 1:
        assert err.startswith("tr-train: error: ") and err.count("tr-train:") == 1, err
        assert names_a_file(err, ckpt), err
        assert fingerprint(run) == before  # neither checkpoint touched
    else:
        assert sorted(p.name for p in run.iterdir()) == ["best", "last"]
        assert Task.load(run / "last").epochs == 3
    shutil.rmtree(run.parent)


# --------------------------------------------------------------------------------------
# Regression tests: one per failure the fuzzing found (a first random fuzzer, these tests run on the
# code before the fixes, and a few values of the fuzzer tried by hand); each failed before its fix
# --------------------------------------------------------------------------------------


@pytest.fixture
def run_a(runs, tmp_path) -> Path:
    """A fresh copy of run "a" (mlp_digits, 2 epochs, momentum)."""
    shutil.copytree(runs / "a", tmp_path / "a")
    return tmp_path / "a"


def edit_json(path: Path, edit) -> None:
    obj = json.loads(path.read_text())
    edit(obj)
    path.write_text(json.dumps(obj, indent=1))


def edit_state(ckpt: Path, edit) -> None:
    """Rewrite ``ckpt/state.npz`` through ``edit(arrays)`` and relink it (``rehash``)."""
    with np.load(ckpt / STATE_FILE) as z:
        arrays = {k: z[k] for k in z.files}
    edit(arrays)
    with open(ckpt / STATE_FILE, "wb") as f:
        np.savez(f, **arrays)
    rehash(ckpt)


def assert_resume_fails(run: Path, ckpt: Path, *needles: str, epochs: int = 3) -> None:
    """``tr-train --resume ckpt`` exits 1 with one error naming ``needles``, and changes no file."""
    before = fingerprint(run)
    code, err = tr_train(["--device", "cpu", "--resume", ckpt, "--save-dir", run, "--epochs", epochs])
    assert code == 1 and err.startswith("tr-train: error: ") and "internal error" not in err, err
    for needle in needles:
        assert needle in err, (needle, err)
    assert fingerprint(run) == before


@pytest.mark.parametrize("text", ["", "{", '{"format": "tr-mlir-task-1",\n', "\udcfb{}"],
                         ids=["empty", "open", "cut", "utf8"])
def test_config_json_that_is_not_json_is_named(run_a, text):
    """Found: a truncated or non-UTF-8 config.json said 'cannot read a saved task from DIR: Expecting
    value: line 1 column 1 (char 0)', naming the folder but not the file."""
    ckpt = run_a / "last"
    (ckpt / CONFIG_FILE).write_bytes(text.encode("utf-8", "surrogateescape"))
    with pytest.raises(TaskError, match=rf"{ckpt / CONFIG_FILE} is not JSON \(truncated or damaged\?\)"):
        Task.load(ckpt)
    assert_resume_fails(run_a, ckpt, str(ckpt / CONFIG_FILE))


@pytest.mark.parametrize("key, value, message", [
    ("scalar/scaling", np.ones((1,)), r"'scalar/scaling' has shape \(1,\), the model's is \(\)"),
    ("scalar/has_nan", np.array(1 + 2j), r"'scalar/has_nan' is complex128, a save writes float64"),
    ("scalar/scaling", np.array("x"), r"'scalar/scaling' is <U1, a save writes float64"),
    ("scalar/scaling", np.array(np.inf), r"'scalar/scaling' is inf, expected finite numbers"),
    ("scalar/dropout_seed", np.zeros(0, np.int64), r"'scalar/dropout_seed' has shape \(0,\)"),
    ("scalar/dropout_seed", np.array([2**40, 0]), r"'scalar/dropout_seed' is \[1099511627776, 0\], expected int32"),
    ("param/fc0.weight", "int32", r"'param/fc0.weight' is int32, a save writes float32"),
])
def test_state_arrays_of_another_dtype_or_shape_are_named(run_a, key, value, message):
    """Found: a state.npz scalar of shape (1,) ended tr-train in 'internal error: TypeError: only
    0-dimensional arrays can be converted to Python scalars', a complex one in another TypeError,
    a string one in a bare 'could not convert string to float', a dropout RNG state of shape (0,)
    in a NumPy broadcast error, and parameters of another dtype loaded silently."""
    ckpt = run_a / "last"

    def edit(arrays):
        arrays[key] = arrays[key].astype(value) if isinstance(value, str) else value

    edit_state(ckpt, edit)
    with pytest.raises(TaskError, match=rf"{ckpt / STATE_FILE}: {message}"):
        Task.load(ckpt)
    assert_resume_fails(run_a, ckpt, str(ckpt / STATE_FILE))


@pytest.mark.parametrize("into, source, message", [
    ("a", "b", r"holds arrays this task does not have: scalar/step, state/fc0.bias.v, .* \(saved with another "
               r"optimizer or precision\?\)"),
    ("b", "a", r"lacks state/fc0.weight.v, state/fc0.bias.v, .* and 1 more \(saved with another optimizer or "
               r"precision\?\)"),
])
def test_state_of_another_optimizer_is_refused(runs, tmp_path, into, source, message):
    """Found: the state.npz of the same model trained with Adam loaded into a momentum task (its
    first moments became the momentum buffers), and a momentum state into an Adam task (the second
    moments and the step silently stayed zero)."""
    shutil.copytree(runs / into, tmp_path / into)
    ckpt = tmp_path / into / "last"
    shutil.copyfile(runs / source / "last" / STATE_FILE, ckpt / STATE_FILE)
    rehash(ckpt)
    with pytest.raises(TaskError, match=message):
        Task.load(ckpt)


@pytest.mark.parametrize("name", [STATE_FILE, CONFIG_FILE, RUN_STATE_FILE])
def test_a_file_from_another_checkpoint_of_the_run_is_refused(runs, run_a, name):
    """Found: the state.npz (or config.json, or tr_train.json) of the same run's epoch-1 checkpoint
    copied into its epoch-2 checkpoint resumed silently: from epoch 1's weights with epoch 2's step
    count, or with one epoch missing from the report. Each is now refused, naming the file."""
    ckpt = run_a / "last"
    shutil.copyfile(runs / "a1" / "last" / name, ckpt / name)
    if name == STATE_FILE:
        with pytest.raises(TaskError, match=rf"{ckpt / STATE_FILE} is not the archive {ckpt / CONFIG_FILE} was "
                                            r"saved with \(its SHA-256 is not the 'state_sha256'"):
            Task.load(ckpt)
    wrong = CONFIG_FILE if name == RUN_STATE_FILE else name
    assert_resume_fails(run_a, ckpt, f"{ckpt / wrong} is not the file this checkpoint was saved with")


def test_run_state_of_another_run_is_refused(runs, run_a):
    """Found: the tr_train.json of another run (resnet_tiny, batch 64) resumed run "a" silently: the
    report and the next checkpoints named the other model and batch size, the training used a's.
    With consistent SHA-256 (a hand-made or older checkpoint) the two files are compared."""
    ckpt = run_a / "last"
    shutil.copyfile(runs / "c" / "last" / RUN_STATE_FILE, ckpt / RUN_STATE_FILE)
    assert_resume_fails(run_a, ckpt, f"{ckpt / CONFIG_FILE} is not the file this checkpoint was saved with")
    rehash(ckpt)
    assert_resume_fails(run_a, ckpt, f"--resume {ckpt}: {RUN_STATE_FILE} and {CONFIG_FILE} disagree: "
                                     "1 epochs listed, 2 trained")
    rows = json.loads((runs / "a" / "last" / RUN_STATE_FILE).read_text())["epochs"]
    edit_json(ckpt / RUN_STATE_FILE, lambda r: r.update(epochs=rows))
    assert_resume_fails(run_a, ckpt, "disagree: batch_size 64 and 32")


@pytest.mark.parametrize("edit, needle", [
    (lambda r: r["config"].update(weight_decay=-3), "--weight-decay must be a number >= 0, got -3"),
    (lambda r: r["config"].update(batch_size=-1), "--batch-size must be an integer >= 1, got -1"),
    (lambda r: r["config"].update(lr=float("nan")), "--lr must be a number > 0, got nan"),
])
def test_run_state_value_out_of_range_names_the_file(run_a, edit, needle):
    """Found: a tr_train.json holding --weight-decay -3 (or --batch-size -1) said '--weight-decay
    must be a number >= 0, got -3', as if the flag had been given: nothing named the file."""
    ckpt = run_a / "last"
    edit_json(ckpt / RUN_STATE_FILE, edit)
    assert_resume_fails(run_a, ckpt, f"--resume {ckpt}: {RUN_STATE_FILE} is damaged: its configuration fails the "
                                     f"flags' checks: {needle}")


@pytest.mark.parametrize("edit, needle", [
    (lambda r: r["epochs"][0].update(val_top1=[]), "epoch 1: 'val_top1' is [], expected a number"),
    (lambda r: r["epochs"][1].pop("train_loss"), "epoch 2: 'train_loss' is None, expected a number"),
    (lambda r: r["config"].update(num_classes="x"), "'num_classes' is 'x', expected an int >= 1"),
    (lambda r: r["epochs"].reverse(), "'epochs' lists epochs [2, 1], expected 1, 2, ..."),
])
def test_run_state_of_another_shape_is_named(run_a, edit, needle):
    """Found: an epoch row whose val_top1 was a list ended tr-train in 'internal error: TypeError:
    must be real number, not list', a num_classes 'x' in 'internal error: ValueError'; a row without
    its train loss or rows out of order were taken as they were."""
    ckpt = run_a / "last"
    edit_json(ckpt / RUN_STATE_FILE, edit)
    assert_resume_fails(run_a, ckpt, f"--resume {ckpt}: {RUN_STATE_FILE} is damaged: {needle}")


@pytest.mark.parametrize("key, value, needle", [
    ("scheduler", [["type", "X"]], "'scheduler' is [['type', 'X']], expected null or an object"),
    ("optimizer", [["type", "X"]], "'optimizer' is [['type', 'X']], expected an object"),
    ("steps", float("inf"), "'steps' is inf, expected an int >= 0"),
    ("steps", -5, "'steps' is -5, expected an int >= 0"),
    ("reuse", "no", "'reuse' is 'no', expected a bool"),
])
def test_config_json_values_of_another_type_are_task_errors(run_a, key, value, needle):
    """Found: a config.json whose scheduler or optimizer was a list raised AttributeError, steps
    Infinity an OverflowError, steps -5 a ZeroDivisionError (the schedule at a negative step);
    reuse 'no' loaded as reuse=True."""
    ckpt = run_a / "last"
    edit_json(ckpt / CONFIG_FILE, lambda c: c.update({key: value}))
    with pytest.raises(TaskError, match=rf"{ckpt / CONFIG_FILE} does not describe a task: .*" + re.escape(needle)):
        Task.load(ckpt)


def test_batch_size_too_large_in_config_json_names_the_file(run_a):
    """Found (the fuzzer's 2**31 tried by hand as the batch size): such a config.json raised
    ArenaTooLargeError ('the memory plan needs 4,131,758,643,712 bytes ...') without naming the
    file; it still raises that error (the documented one: the configuration is valid, the machine
    too small), naming config.json."""
    ckpt = run_a / "last"
    edit_json(ckpt / CONFIG_FILE, lambda c: c.update(batch_size=2**31))
    with pytest.raises(ArenaTooLargeError, match=rf"Task.load: {ckpt / CONFIG_FILE}: the memory plan needs"):
        Task.load(ckpt)


def test_resume_on_another_dataset_is_refused(run_a):
    """Found: a tr_train.json whose dataset was 'synthetic' resumed the digits model on 1024
    generated samples (recompiled for them) without a word."""
    ckpt = run_a / "last"
    edit_json(ckpt / RUN_STATE_FILE, lambda r: r["config"].update(dataset="synthetic"))
    assert_resume_fails(run_a, ckpt, f"--resume {ckpt}: the checkpoint ({CONFIG_FILE}) has trained on 1437 samples "
                                     f"per epoch and validated on 360, the dataset of {RUN_STATE_FILE} (synthetic) "
                                     f"gives 1024 and 256")


def test_task_save_stopped_between_its_renames_loads_the_new_save(runs, tmp_path):
    """Found reviewing Task.save for the fault tests: it renamed state.npz, then config.json; a stop
    between the two left the new state next to the old config, which loaded silently (the new
    weights with the old step count). Now config.json records the state's SHA-256 (the mix is an
    error), and the config.json.tmp such a stop leaves behind completes the pair."""
    old, new = tmp_path / "old", tmp_path / "new"
    task = Task.load(runs / "a1" / "last")
    task.save(old)
    task.fit(load_digits_pair(), epochs=1)
    task.save(new)
    shutil.copyfile(new / STATE_FILE, old / STATE_FILE)  # the on-disk state after the first rename
    with pytest.raises(TaskError, match=rf"{old / STATE_FILE} is not the archive {old / CONFIG_FILE} was saved with"):
        Task.load(old)
    shutil.copyfile(new / CONFIG_FILE, old / (CONFIG_FILE + ".tmp"))
    again = Task.load(old)
    assert again.steps == task.steps and again.epochs == task.epochs
    for (n, a), (_, b) in zip(again.parameters(), task.parameters()):
        assert np.array_equal(a, b), n
    (old / CONFIG_FILE).unlink()  # the first save into a folder, stopped there
    assert Task.load(old).steps == task.steps


def load_digits_pair() -> tuple[np.ndarray, np.ndarray]:
    from tr_mlir.data import load_dataset

    ds = load_dataset("digits")
    return ds.train_x, ds.train_y
