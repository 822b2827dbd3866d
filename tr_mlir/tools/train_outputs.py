"""What ``tr-train`` prints and writes: the plan tables, IR dumps, the report, the plot, checkpoints
and the run state a resume reads back (formats in :mod:`tr_mlir.tools.tr_train`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shlex
import shutil
import tempfile
from pathlib import Path
from typing import Any

from tr_mlir.tools.train_options import (
    PROG,
    REPORT_SCHEMA_VERSION,
    RESUMED_DEFAULTS,
    RUN_STATE_FILE,
    RUN_STATE_FORMAT,
    TRAINING_KEYS,
    TrainError,
    build_parser,
    check_args,
)

SILENT = False
"""True in ranks other than 0 of a multi-process (torchrun) run: they print nothing (set by ``run``)."""


def say(text: str = "") -> None:
    """Print one line of the run's stdout (nothing when :data:`SILENT`)."""
    if not SILENT:
        print(text, flush=True)


# --------------------------------------------------------------------------------------
# Printing the compiled program
# --------------------------------------------------------------------------------------


def _fmt_value(v: Any) -> str:
    if isinstance(v, bool):
        return str(int(v))
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def plan_table(model: Any, batch: int | None = None) -> str:
    """The flat ``arch.model`` as the seed's ``ArchPlan::to_string`` lays it out (facts sheet
    5.1): a header, the input, and one line per layer with index, kind (``[FIRST]`` on the first
    layer), in and out shape ``[N, H, W, C]`` (N = ``batch``, default 1) and the params of
    :func:`tr_mlir.archplan_yaml.layer_params` as ``key=value``. An ``arch.add`` (unfused
    residual join) is a line of kind ``Add`` with the main branch's shape."""
    from tr_mlir.archplan_yaml import LAYER_SPECS, layer_params
    from tr_mlir.dialects.arch import static_hwc

    n = 1 if batch is None else batch
    layers = model.layers()
    first = model.first_layer.value.data if model.first_layer is not None else -1
    flags = ", ".join(f for f in ("fuse", "amp") if getattr(model, f) is not None)

    def shape(value: Any) -> str:
        hwc = static_hwc(value.type)
        return "[?]" if hwc is None else f"[{n}, {hwc[0]}, {hwc[1]}, {hwc[2]}]"

    h, w, c = model.input_hwc
    lines = [f"ArchPlan: {len(layers)} layers" + (f", first_layer_index={first}" if first >= 0 else "")
             + (f" ({flags})" if flags else ""),
             f"Input: [{n}, {h}, {w}, {c}]", "-" * 58]
    for i, op in enumerate(layers):
        kind, src = op.LAYER_KIND, shape(op.main_input)  # an add: "Add", its main branch
        params = layer_params(op) if type(op) in LAYER_SPECS else op.params()
        text = " ".join(f"{k}={_fmt_value(v)}" for k, v in params.items())
        mark = "[FIRST]" if i == first else ""
        lines.append(f"  {i:>2}  {kind:<24} {src:<22} {shape(op.results[0]):<22} {mark:<7} {text}".rstrip())
    return "\n".join(lines)


def memory_summary(program: Any) -> str:
    """Arena bytes and the bytes reserved per non-empty region of the base plan (the six plans
    share one arena), with DTensor counts, the transient pool, the liveness lower bound and the
    node at the peak: the head line, totals and memory lines of ``tr-opt -t memplan-summary``
    (:mod:`tr_mlir.memplan_summary`), regions with no bytes left out."""
    from tr_mlir.dialects.memplan import MemRegion
    from tr_mlir.memplan_summary import memory_lines, summarize

    head = summarize(program).splitlines()[0]
    base = program.plans()[0]
    count: dict[Any, int] = {}
    for t in base.tensors():
        count[t.region] = count.get(t.region, 0) + 1
    total = max(base.size, 1)
    cells = [f"{r.name:<20} {base.region_size(r):>13,} {100 * base.region_size(r) / total:>5.1f}% {count.get(r, 0):>4}"
             for r in MemRegion if base.region_size(r)]
    title = f"{'region':<20} {'bytes':>13} {'share':>6} {'DTs':>4}"
    half = (len(cells) + 1) // 2
    rows = [head, f"  {title}    {title}"]
    for i in range(half):
        rows.append(("  " + cells[i] + ("    " + cells[half + i] if half + i < len(cells) else "")).rstrip())
    pool = base.transient_pool
    if pool is not None:
        rows.append(f"  {'transient pool':<20} {pool[1]:>13,} {100 * pool[1] / total:>5.1f}%")
    rows.append(f"  {'arena':<20} {base.size:>13,} {'100.0%':>6} {len(base):>4}  "
                f"({base.size / 2**20:.2f} MiB; one arena serves all {len(program.plans())} variants)")
    rows += memory_lines(program)[1:]
    return "\n".join(rows)


# --------------------------------------------------------------------------------------
# IR dumps
# --------------------------------------------------------------------------------------


def _as_tr_opt_prints(module: Any) -> str:
    """The module as ``tr-opt`` writes it (xDSL's ``mlir`` target: the module, then an empty
    line), so a replayed pass compares byte for byte."""
    return str(module) + "\n\n"


def dump_ir(tree_text: str, out_dir: Path, *, fuse: bool, amp: bool, num_classes: int,
            spec: dict[str, Any], reuse: bool = True, fuse_fc_relu: bool = True,
            fuse_bn_stats: bool = True, fuse_grad_acc: bool = True) -> list[Path]:
    """Run ``tr-compile`` pass by pass on the tree-form module ``tree_text``, writing
    ``out_dir/00-input.mlir`` and ``out_dir/NN-<pass>.mlir`` after each pass, and
    ``out_dir/replay.sh`` (each pass replayed with tr-opt and compared). ``spec``: the compile
    spec options of ``memplan-derive-shapes``; ``reuse``: ``memplan-assign-offsets``'s option;
    ``fuse_fc_relu``: whether ``memplan-fuse-fc-relu`` runs; ``fuse_bn_stats``: whether
    ``memplan-fuse-bn-stats`` runs; ``fuse_grad_acc``: whether ``memplan-fuse-grad-acc`` runs.
    Returns the files written. A pass that fails
    leaves the files before it and raises its exception."""
    from xdsl.parser import Parser

    from tr_mlir.compile import make_context
    from tr_mlir.passes import get_all_passes
    from tr_mlir.passes.arch_plan import plan_steps, set_model_options
    from tr_mlir.passes.memplan_compile import MemplanCompilePass

    ctx = make_context()
    module = Parser(ctx, tree_text).parse_module()
    set_model_options(module, fuse=fuse, amp=amp, num_classes=num_classes)
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("[0-9][0-9]-*.mlir"):
        old.unlink()
    registry = get_all_passes()
    from tr_mlir.extend import loaded_plugins

    plugin_flags = "".join(f" --load-plugin {shlex.quote(p)}" for p in loaded_plugins())
    passes = [registry[name]()() for name in plan_steps(fuse, cbrp=False)]
    passes += MemplanCompilePass(**spec, reuse=reuse, fuse_fc_relu=fuse_fc_relu, fuse_bn_stats=fuse_bn_stats,
                                 fuse_grad_acc=fuse_grad_acc).phases()
    width = max(2, len(str(len(passes))))
    files = [out_dir / f"{0:0{width}d}-input.mlir"]
    files[0].write_text(_as_tr_opt_prints(module))
    script = ["#!/bin/sh", "# Replays every pass of tr-compile with tr-opt and compares with the dumps.",
              "# Run from anywhere: sh replay.sh (tr-opt must be on PATH, e.g. .venv/bin).",
              'cd "$(dirname "$0")" || exit 1', "status=0"]
    for i, p in enumerate(passes, 1):
        p.apply(ctx, module)
        module.verify()
        path = out_dir / f"{i:0{width}d}-{p.name}.mlir"
        path.write_text(_as_tr_opt_prints(module))
        spec_text = str(p.pipeline_pass_spec())
        script.append(f"tr-opt{plugin_flags} {files[-1].name} -p {shlex.quote(spec_text)} | cmp -s - {path.name} "
                      f"|| {{ echo 'differs: {path.name}'; status=1; }}")
        files.append(path)
    script += ['[ $status = 0 ] && echo "all passes replay identically"', "exit $status"]
    replay = out_dir / "replay.sh"
    replay.write_text("\n".join(script) + "\n")
    replay.chmod(0o755)
    return [*files, replay]


# --------------------------------------------------------------------------------------
# Report, plot, checkpoints
# --------------------------------------------------------------------------------------


def atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


def diverged(row: dict[str, Any], num_val: int) -> str | None:
    """Which loss of the epoch row ``row`` shows the run diverged: ``"val"`` when its validation
    loss is NaN or infinite (the model as trained so far gives no finite loss on data it does not
    train on), ``"train"`` when there is no validation set (``num_val`` 0) and its train loss is
    not finite; else None. A missing loss (None, as a report's ``null``) counts as not finite."""
    if num_val > 0:
        return None if _finite(row.get("val_loss")) else "val"
    return None if _finite(row.get("train_loss")) else "train"


def best_of(epochs: list[dict[str, Any]]) -> tuple[float | None, int | None]:
    """(best val top-1, its epoch) over the epoch rows (the earliest epoch on ties); an epoch
    whose val loss is not finite (:func:`diverged`) is not a candidate."""
    best, at = None, None
    for row in epochs:
        v = row.get("val_top1")
        if _finite(v) and _finite(row.get("val_loss", 0.0)) and (best is None or v > best):
            best, at = v, row["epoch"]
    return best, at


def make_report(config: dict[str, Any], timings: dict[str, float], epochs: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``--report-json`` document (schema in the module doc)."""
    import tr_mlir

    best, at = best_of(epochs)
    rows = [{k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in r.items()} for r in epochs]
    return {"schema_version": REPORT_SCHEMA_VERSION, "tool": PROG, "tr_mlir_version": tr_mlir.__version__,
            "config": config, "timings": {k: round(v, 4) for k, v in timings.items()},
            "best_val_top1": best, "best_epoch": at, "epochs": rows}


def write_plot(path: Path, epochs: list[dict[str, Any]], title: str) -> None:
    """Loss (train, val) and accuracy (train top-1, val top-1, val top-5, in %) per epoch, two
    panels (whole epochs on the x axes), drawn with matplotlib's Agg backend into ``path``
    (format from the suffix)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(11, 4.2))
    FigureCanvasAgg(fig)
    ax_loss, ax_acc = fig.subplots(1, 2)
    x = [r["epoch"] for r in epochs]
    ax_loss.plot(x, [r["train_loss"] for r in epochs], "o-", label="train loss")
    ax_loss.plot(x, [r["val_loss"] for r in epochs], "s-", label="val loss")
    ax_loss.set_xlabel("epoch")
    ax_loss.set_ylabel("cross-entropy")
    ax_loss.set_title("loss")
    for key, label, style in (("train_top1", "train top-1", "o-"), ("val_top1", "val top-1", "s-"),
                              ("val_top5", "val top-5", "^--")):
        ax_acc.plot(x, [100 * r[key] for r in epochs], style, label=label)
    ax_acc.set_xlabel("epoch")
    ax_acc.set_ylabel("accuracy (%)")
    ax_acc.set_title("accuracy")
    for ax in (ax_loss, ax_acc):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # not 1.25, 1.5, ... for a short run
        ax.grid(True, alpha=0.3)
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def supported_image(path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    kinds = FigureCanvasAgg(Figure()).get_supported_filetypes()
    ext = path.suffix.lstrip(".").lower()
    if ext not in kinds:
        raise TrainError(f"--plot {path}: unsupported image format '{ext or '(none)'}'; use one of "
                         f"{', '.join(sorted(kinds))} (e.g. curves.png)")


def prepare_output(flag: str, path: Path, *, folder: bool = False) -> None:
    """Create ``path`` (a folder) or its parent and create and remove a file in it, so an output
    that cannot be written (a missing or read-only place) fails before training, not after it."""
    target = path if folder else path.parent
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise TrainError(f"{flag} {path}: cannot create {target}: {e.strerror or e}") from None
    if not folder and path.is_dir():
        raise TrainError(f"{flag} {path}: is a folder, expected a file name")
    try:
        with tempfile.TemporaryFile(dir=target, prefix=".tr-train-probe-"):
            pass
    except OSError as e:
        raise TrainError(f"{flag} {path}: cannot write in {target}: {e.strerror or e}") from None


def save_checkpoint(task: Any, folder: Path, run: dict[str, Any]) -> None:
    """:meth:`Task.save` and the run state (``tr_train.json``) into ``folder``, whole or not at all:
    written into ``folder.tmp``, then swapped in (the old folder is renamed to ``folder.old`` and
    removed after the swap), so a save that fails or is interrupted leaves the previous checkpoint
    in place (in ``folder.old`` only if it stops between the two renames: the next save, or
    :func:`find_checkpoint` resuming it, puts it back). The run state records the SHA-256 of the
    ``config.json`` and ``state.npz`` it was saved with (key ``sha256``), so that a resume notices
    a damaged file or one copied from another checkpoint. Raises ``OSError`` when a file cannot be
    written."""
    from tr_mlir.task import CONFIG_FILE, STATE_FILE, save_pause

    tmp, old = folder.with_name(folder.name + ".tmp"), folder.with_name(folder.name + ".old")
    if old.exists():
        if folder.exists():
            shutil.rmtree(old)
        else:
            os.replace(old, folder)
    if tmp.exists():
        shutil.rmtree(tmp)
    task.save(tmp)
    save_pause("run-task-saved", tmp)
    digests = {name: hashlib.sha256((tmp / name).read_bytes()).hexdigest() for name in (CONFIG_FILE, STATE_FILE)}
    atomic_write(tmp / RUN_STATE_FILE, json.dumps({**run, "sha256": digests}, indent=1) + "\n")
    save_pause("run-state-written", tmp)
    if folder.exists():
        os.replace(folder, old)
        save_pause("run-old-moved", old)
    os.replace(tmp, folder)
    save_pause("run-swapped", folder)
    shutil.rmtree(old, ignore_errors=True)


def check_save_dir(save_dir: Path, resume_folder: Path | None) -> None:
    """Raise :class:`TrainError` when ``save_dir`` holds a checkpoint (``last`` or ``best``) that
    this run would overwrite, unless the run resumes from a checkpoint of that folder (it then
    continues the run saved there)."""
    from tr_mlir.task import CONFIG_FILE

    held = [save_dir / n for n in ("last", "best")
            if (save_dir / n / CONFIG_FILE).exists() or (save_dir / n / RUN_STATE_FILE).exists()]
    if not held or (resume_folder is not None and resume_folder.resolve().parent == save_dir.resolve()):
        return
    raise TrainError(f"--save-dir {save_dir}: it holds the checkpoint {held[0]} of another run, which this run "
                     f"would overwrite; continue that run with --resume {save_dir} --save-dir {save_dir}, or "
                     f"choose another --save-dir (or delete the old one)")


def _restore_interrupted(folder: Path) -> None:
    """Put ``folder.old`` back as ``folder`` when a checkpoint save stopped between its two renames
    (:func:`save_checkpoint`): ``folder`` is missing and ``folder.old`` holds the previous one."""
    from tr_mlir.task import CONFIG_FILE

    old = folder.with_name(folder.name + ".old")
    if folder.exists() or not ((old / RUN_STATE_FILE).is_file() and (old / CONFIG_FILE).is_file()):
        return
    try:
        os.replace(old, folder)
    except OSError as e:
        if folder.exists():  # another rank of a torchrun launch put it back first
            return
        raise TrainError(f"--resume {folder}: cannot restore it from {old} (a checkpoint save was interrupted): "
                         f"{e.strerror or e}") from None
    say(f"restored {folder} from {old}: a checkpoint save was interrupted between its two renames")


def find_checkpoint(path: Path) -> Path:
    """The checkpoint folder ``path`` names: itself, or its ``last`` (a ``--save-dir``); either is
    first restored from its ``.old`` copy when a save was interrupted between its two renames."""
    from tr_mlir.task import CONFIG_FILE

    for cand in (path, path / "last"):
        _restore_interrupted(cand)
        if (cand / RUN_STATE_FILE).is_file() and (cand / CONFIG_FILE).is_file():
            return cand
    if not path.exists():
        raise TrainError(f"--resume {path}: no such checkpoint folder")
    raise TrainError(f"--resume {path}: not a tr-train checkpoint (expected {RUN_STATE_FILE} and {CONFIG_FILE} "
                     f"in it or in {path / 'last'}; write one with --save-dir)")


def load_run_state(folder: Path) -> dict[str, Any]:
    """The run state of a checkpoint folder; :class:`TrainError` when unreadable or damaged, or when
    the ``config.json`` or ``state.npz`` next to it is not the file it was saved with (the SHA-256
    it records: :func:`save_checkpoint`)."""
    path = folder / RUN_STATE_FILE
    try:
        run = json.loads(path.read_text())
    except OSError as e:
        raise TrainError(f"--resume {folder}: cannot read {path}: {e.strerror or e}") from None
    except ValueError as e:  # JSON, UTF-8 or an int of more digits than Python converts
        raise TrainError(f"--resume {folder}: cannot read {path}: not JSON (truncated or damaged?): {e}") from None
    if not isinstance(run, dict) or run.get("format") != RUN_STATE_FORMAT:
        raise TrainError(f"--resume {folder}: {RUN_STATE_FILE} is not a {RUN_STATE_FORMAT} file")
    problem = _run_state_problem(run)
    if problem:
        raise TrainError(f"--resume {folder}: {RUN_STATE_FILE} is damaged: {problem}")
    for name, digest in run.get("sha256", {}).items():
        try:
            data = (folder / name).read_bytes()
        except OSError as e:
            raise TrainError(f"--resume {folder}: cannot read {folder / name}: {e.strerror or e}") from None
        if hashlib.sha256(data).hexdigest() != digest:
            raise TrainError(f"--resume {folder}: {folder / name} is not the file this checkpoint was saved with "
                             f"(its SHA-256 differs from the one {RUN_STATE_FILE} records): one of the two is "
                             f"damaged or comes from another checkpoint")
    return run


def _valid_flag_value(action: argparse.Action, value: Any) -> bool:
    """Whether ``value`` (read from JSON) is something ``action``'s flag could have produced."""
    if isinstance(action.default, bool):
        return isinstance(value, bool)
    if value is None:
        return action.default is None or action.dest in ("model", "blueprint")  # one of the two is null
    want = {int: (int,), float: (int, float)}.get(action.type, (str,))
    return (isinstance(value, want) and not isinstance(value, bool)
            and (action.choices is None or value in action.choices))


EPOCH_ROW_KEYS: tuple[str, ...] = ("lr", "train_loss", "train_top1", "val_loss", "val_top1", "val_top5",
                                   "train_images_per_s", "train_s", "val_s")
"""The numbers of a report's epoch row besides ``epoch`` (``train_images_per_s`` may be null)."""


def _run_state_problem(run: dict[str, Any]) -> str | None:
    """What is wrong with a run state read back (the training configuration as flags produce
    it and within their ranges, the input shapes, the epoch rows 1, 2, ... with their numbers,
    the recorded SHA-256 of the checkpoint's files), or None."""
    from tr_mlir.task import CONFIG_FILE, STATE_FILE

    cfg = run.get("config")
    if not isinstance(cfg, dict):
        return "no 'config' object"
    saved = build_parser().parse_args([])
    for action in build_parser()._actions:
        if action.dest in TRAINING_KEYS + RESUMED_DEFAULTS and action.dest in cfg:
            if not _valid_flag_value(action, cfg[action.dest]):
                return f"'{action.dest}' is {cfg[action.dest]!r}, not a valid {action.option_strings[0]} value"
            setattr(saved, action.dest, cfg[action.dest])
    try:
        check_args(saved)
    except TrainError as e:
        return f"its configuration fails the flags' checks: {e}"

    def ints(v: Any, n: int) -> bool:
        return (isinstance(v, list) and len(v) == n
                and all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in v))

    for key in ("dataset_shape", "input_shape"):
        if key in cfg and not ints(cfg[key], 3):
            return f"'{key}' is {cfg[key]!r}, expected [H, W, C]"
    if "num_classes" in cfg and not ints([cfg["num_classes"]], 1):
        return f"'num_classes' is {cfg['num_classes']!r}, expected an int >= 1"
    adapt = cfg.get("input_adaptation")
    if adapt is not None and not (isinstance(adapt, dict) and adapt.get("mode") in ("pad", "resize")
                                  and ints(adapt.get("to"), 2)):
        return f"'input_adaptation' is {adapt!r}, expected null or {{\"mode\": \"pad\"|\"resize\", \"to\": [H, W]}}"
    if not isinstance(cfg.get("data_dir"), (str, type(None))):
        return f"'data_dir' is {cfg['data_dir']!r}, expected a path or null"
    epochs = run.get("epochs", [])
    if not isinstance(epochs, list) or not all(isinstance(r, dict) and isinstance(r.get("epoch"), int) for r in epochs):
        return "'epochs' is not a list of epoch rows"
    if [r["epoch"] for r in epochs] != list(range(1, len(epochs) + 1)):
        return f"'epochs' lists epochs {[r['epoch'] for r in epochs]!r:.80}, expected 1, 2, ..."

    def number(v: Any, key: str) -> bool:
        return (v is None and key == "train_images_per_s") or (isinstance(v, (int, float)) and not isinstance(v, bool))

    for row in epochs:
        bad = next((k for k in EPOCH_ROW_KEYS if not number(row.get(k), k)), None)
        if bad is not None:
            return f"epoch {row['epoch']}: '{bad}' is {row.get(bad)!r:.80}, expected a number"
    digests = run.get("sha256", {CONFIG_FILE: "", STATE_FILE: ""})  # checkpoints of earlier versions lack it
    if not (isinstance(digests, dict) and set(digests) == {CONFIG_FILE, STATE_FILE}
            and all(isinstance(v, str) for v in digests.values())):
        return f"'sha256' is {digests!r:.120}, expected {{\"{CONFIG_FILE}\": ..., \"{STATE_FILE}\": ...}}"
    return None
