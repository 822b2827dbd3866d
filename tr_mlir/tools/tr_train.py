"""``tr-train``: compile a network with tr-mlir and train it on a dataset, in one command.

::

    tr-train                                            # resnet_tiny on digits, the defaults
    tr-train --model resnet_tiny --dataset digits --epochs 30 --fuse
    tr-train --model mlp --dataset mnist --data-dir DIR --optimizer adamw --lr 0.001 \\
             --label-smoothing 0.1 --epochs 10 --report-json r.json --plot r.png
    tr-train --blueprint mynet.py:build --dataset digits

Stages (each prints a ``== <stage>`` header on stdout; progress bars go to stderr):

1. **data**: :func:`tr_mlir.data.load_dataset` (normalized NHWC float32, a seeded train/val
   split or the dataset's test split), adapted to the model's input (see *Geometry*).
2. **model**: a zoo model (:data:`tr_mlir.zoo.MODELS`, built for the dataset's class count) or
   a BluePrint from ``--blueprint FILE.py:FUNC``.
3. **compile**: :class:`tr_mlir.Task` runs ``tr-compile`` (the ArchPlan passes, the five memplan
   phases, the atlas) for the batch size and dataset sizes and builds the executable (one arena,
   captured graphs). Printed: the pipeline with its options, the flat (fused with ``--fuse``)
   ArchPlan as a per-layer table (index, kind, in shape, out shape, params, as the seed's
   ``ArchPlan::to_string``) and the memory plan (arena bytes, bytes per non-empty region).
   ``--dump-ir DIR`` also writes the IR after every pass (*IR dumps*).
4. **train**: per epoch a tqdm bar (running loss, images/s; shown when stderr is a terminal),
   then one line: learning rate, train loss, val loss, val top-1 and top-5, training images/s;
   ``*`` marks a new best val top-1.
5. **summary**: best val top-1 and its epoch, the last epoch's metrics, the timings.

Learning rate: cosine annealing over the ``--epochs`` total, evaluated per batch, after a linear
warm-up of ``--warmup`` epochs from 0 (:class:`tr_mlir.sched.CosineAnnealingLR`). Optimizers
(:data:`OPTIMIZERS`): ``sgd`` (no momentum), ``momentum`` (0.9), ``nesterov`` (0.9), ``adam``
(L2 decay), ``adamw`` (decoupled decay), ``lars`` (momentum 0.9, trust coefficient 1e-3); the
default ``--lr`` depends on the optimizer (:data:`OPTIMIZERS`). BN parameters and biases get no
weight decay (the seed's rule, :mod:`tr_mlir.optim`). ``--batch-size`` is per process.

Device: ``--device auto`` (the default) trains on the GPU when the CUDA backend can run (CuPy
imports and a CUDA device answers), else on the CPU; ``--device gpu`` without a usable GPU is an
error. Launched by ``torchrun`` with N processes (GPUs: NCCL; CPUs: gloo,
:mod:`tr_mlir.lowering.gloo`), every process trains on its shard of the data (``--batch-size`` per
process), only rank 0 prints and writes the outputs, every rank resumes from them, and a resume
with another process count is an error (README, *Data parallel*).

Geometry (:func:`plan_input`): channels always come from the dataset (the first layer adapts).
A zoo model takes the dataset's H x W as it is, unless its classifier reads a spatial map of a
fixed size (a Flatten or FC layer, not the first layer, reading an H x W > 1 map at the model's
own input size: ``lenet5``, ``vgg16_bn``); then the images are brought to the model's own H x W:
zero-padded, centered, when that is larger but less than twice as large (MNIST 28x28 -> 32x32 for
LeNet-5), else resized bilinearly (digits 8x8 -> 32x32 for LeNet-5). A BluePrint that returns
``(layer, (H, W, C))`` gets its H x W the same way (C must be the dataset's); one that returns a
layer takes the dataset's shape. ``--dataset synthetic`` generates data of the model's own input
shape and class count (a BluePrint without a shape: 32x32x3, 10 classes). Which zoo models fit
which dataset: ``docs/tr-train.md`` (table computed by :func:`input_table`).

Blueprints: ``--blueprint FILE.py:FUNC`` imports ``FILE.py`` and calls ``FUNC(num_classes)`` (the
dataset's class count) when ``FUNC`` takes a parameter, else ``FUNC()``; it returns a BluePrint
layer (:mod:`tr_mlir.blueprint`) or ``(layer, (H, W, C))``. Its classifier must output the
dataset's class count.

IR dumps: ``--dump-ir DIR`` writes ``DIR/00-input.mlir`` (the tree-form model, as emitted) and
``DIR/NN-<pass>.mlir``, the module after the NN-th pass of ``tr-compile`` (``arch-expand`` ..
``arch-mark-first-layer``, ``memplan-derive-shapes`` .. ``memplan-build-atlas``), and
``DIR/replay.sh``, which replays every pass with ``tr-opt`` and compares; one pass by hand::

    tr-opt DIR/03-arch-normalize-softmax-ce.mlir -p arch-normalize-identity   # = DIR/04-...

(``memplan-derive-shapes`` takes the compile spec as options; ``replay.sh`` spells them out.)

Checkpoints: ``--save-dir DIR`` keeps ``DIR/last`` (after every epoch) and ``DIR/best`` (the
epoch with the best val top-1 so far): each is a :meth:`tr_mlir.Task.save` folder
(``config.json``, ``state.npz``) plus ``tr_train.json`` (the run: its configuration, the epochs
so far, the best, and the SHA-256 of the ``config.json`` and ``state.npz`` saved with it), written
whole (into ``DIR/<name>.tmp``, then swapped in: :func:`save_checkpoint`). A ``DIR`` that holds
another run's checkpoints is an error (a new run would overwrite them), unless this run resumes
from one of them. A resume checks the checkpoint before it trains: a file that is damaged or comes
from another checkpoint (its SHA-256, the configuration and epochs of ``tr_train.json`` against
``config.json``, the dataset's sizes against those it trained on) is an error naming the file.
A run killed at any point resumes to the same bits as one never stopped: a ``DIR/last`` left in
``DIR/last.old`` by a kill between the two renames of its save is put back, and a ``DIR/best``
whose save a kill stopped (after ``DIR/last`` of the same epoch) is rewritten from the resumed
checkpoint. ``--resume CKPT`` (such a folder, or a ``--save-dir`` folder: its ``last``) continues
that run: ``--epochs`` is the total, so training resumes at the epoch after the
checkpoint's; the model and the training configuration come from the checkpoint (giving
``--model``, ``--lr``, ... with another value is an error), the dataset is loaded again as the
run did (``--data-dir`` may point elsewhere); a larger ``--epochs`` stretches the cosine
schedule to the new total. Resuming ``DIR/last`` without ``--save-dir`` goes on checkpointing
into ``DIR``; resuming ``DIR/best`` or another folder saves only with ``--save-dir``.

Report (``--report-json FILE``, rewritten after every epoch), schema version
:data:`~tr_mlir.tools.train_options.REPORT_SCHEMA_VERSION` = 1::

    {
      "schema_version": 1,
      "tool": "tr-train", "tr_mlir_version": "0.1.0",
      "config": {...},                # the resolved arguments (defaults filled in, the lr the
                                      # optimizer got, device used) and derived facts:
                                      # input_shape [H, W, C], num_classes, dataset_shape,
                                      # input_adaptation (null | {"mode": "pad"|"resize",
                                      # "to": [H, W]}), train_size, val_size, start_epoch
      "timings": {"load_s", "compile_s", "dump_ir_s", "train_s", "val_s",
                  "checkpoint_s", "total_s"},           # seconds, this invocation
      "best_val_top1": 0.99, "best_epoch": 7,           # null before the first epoch
      "epochs": [                                       # every epoch of the run, 1-based
        {"epoch": 1, "lr": 0.05, "train_loss": ..., "train_top1": ...,
         "val_loss": ..., "val_top1": ..., "val_top5": ...,
         "train_images_per_s": ..., "train_s": ..., "val_s": ...}
      ]
    }

Accuracies are fractions in [0, 1]; ``lr`` is the rate at the epoch's first batch; epochs of a
resumed run's earlier invocations are included; a value that is not finite (a loss of a
diverged epoch, below) is ``null``. New keys may be added within a schema version;
a key is removed or changes meaning only with a new version.

Errors (missing or malformed data, a bad blueprint file or function, an unknown model, a model
that cannot take the dataset's shape, a model too large for memory, bad flag values, unwritable
outputs) print ``tr-train: error: <message>`` on stderr and exit 1, without a traceback;
so does a run that diverges: an epoch whose validation loss (without a validation set, its train
loss) is NaN or infinite ends the run after its line (marked ``diverged``) and the summary. It is
never the best epoch and no checkpoint is written for it (``--save-dir`` keeps the last finite
epoch's); the message names the epoch, the loss and the learning rate. NumPy's floating-point
warnings are not printed while an epoch trains and validates (the kernels' overflows in a
diverging step: the divergence is reported instead; the kernels skip an update whose gradients
are not finite, :mod:`tr_mlir.amp`, but a model whose loss stays NaN does not recover);
anything unexpected prints ``tr-train: internal error: ...`` (``TR_TRAIN_TRACEBACK=1`` shows the
traceback). Ctrl-C stops after writing the report of the finished epochs (exit 130); once the
run has finished, the console script ignores it while the interpreter exits (exit 0).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tr_mlir.passes.memplan_derive_shapes import SINGLE_VALUE_BN
from tr_mlir.tools import train_outputs
from tr_mlir.tools.train_inputs import (
    InputPlan,
    ModelSource,
    blueprint_source,
    input_table,
    plan_input,
    zoo_source,
)
from tr_mlir.tools.train_options import (
    OPTIMIZERS,
    PROG,
    RESUMED_DEFAULTS,
    RUN_STATE_FILE,
    RUN_STATE_FORMAT,
    SYNTHETIC_DEFAULT_SHAPE,
    TRACEBACK_ENV,
    TRAINING_KEYS,
    TrainError,
    build_parser,
    check_args,
    explicit_flags,
    resolve_device,
    training_options,
)
from tr_mlir.tools.train_outputs import (
    atomic_write,
    best_of,
    check_save_dir,
    diverged,
    dump_ir,
    find_checkpoint,
    load_run_state,
    make_report,
    memory_summary,
    plan_table,
    prepare_output,
    save_checkpoint,
    say,
    supported_image,
    write_plot,
)

# --------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------


def _pct(v: float | None) -> str:
    return "n/a" if v is None or math.isnan(v) else f"{100 * v:.2f}%"


def _load_data(args: argparse.Namespace, source: ModelSource, *, pad_to: Sequence[int] | None = None,
               resize_to: Sequence[int] | None = None) -> Any:
    from tr_mlir.data import load_dataset

    options: dict[str, Any] = {}
    if args.dataset == "synthetic":
        options = {"input_shape": source.native or SYNTHETIC_DEFAULT_SHAPE,
                   "num_classes": source.native_classes}
    return load_dataset(args.dataset, args.data_dir, seed=args.seed, pad_to=pad_to, resize_to=resize_to,
                        download=args.download, **options)


CLASSIFIER_OP = "'arch.softmax_ce'"
"""How the compiler's messages name the classifier's loss op: an error there is about the class
count, not the input shape, so it gets no list of zoo models that take the input."""


def _rejected(label: str, ds: Any, why: str, suffix: str = "") -> TrainError:
    """The error for a model the compiler rejects (``why``): a class-count mismatch at the
    classifier, a batch size that leaves a batch norm one value per channel, or an input the
    model cannot take, with the zoo models that can take it."""
    if CLASSIFIER_OP in why:
        return TrainError(f"{label} does not fit the {ds.name} classes: {why}{suffix}")
    if SINGLE_VALUE_BN in why:  # the batch size, not the input: no list of models that take it
        return TrainError(f"{label} cannot train on {ds.name} with this batch size: {why}{suffix}")
    h, w, c = ds.input_shape
    return TrainError(f"{label} cannot take the {ds.name} input ({h}x{w}x{c}): {why}{suffix}"
                      f"{_fits_hint(ds.input_shape)}")


def _fits_hint(data_shape: tuple[int, int, int]) -> str:
    """Zoo models that compile for ``data_shape`` (for the error message of a model that does not)."""
    try:
        table = input_table({"this": data_shape})
    except Exception:
        return ""
    names = [m for m, row in table.items() if not row["this"].startswith("no:")]
    return f"; zoo models that take {data_shape[0]}x{data_shape[1]}x{data_shape[2]} input: {', '.join(names)}"


def run(args: argparse.Namespace, explicit: set[str]) -> int:
    """Everything after argument parsing (module doc); returns the exit code. Raises
    :class:`TrainError` for user errors."""
    from tr_mlir.lowering.gloo import launch_rank

    train_outputs.SILENT = launch_rank() != 0  # torchrun: rank 0 alone prints (and writes the outputs)
    t_start = time.perf_counter()
    timings = {"load_s": 0.0, "compile_s": 0.0, "dump_ir_s": 0.0, "train_s": 0.0, "val_s": 0.0,
               "checkpoint_s": 0.0, "total_s": 0.0}
    history: list[dict[str, Any]] = []
    resume_folder = None
    if args.resume is not None:
        resume_folder = find_checkpoint(args.resume)
        saved = load_run_state(resume_folder)
        cfg = saved.get("config", {})
        for key in TRAINING_KEYS:
            if key in explicit and getattr(args, key) != cfg.get(key):
                flag = "--" + key.replace("_", "-")
                theirs = cfg.get(key)
                if theirs is None and key in ("model", "blueprint", "torch_model"):
                    source = next((f"--{k.replace('_', '-')} {cfg[k]}" for k in ("model", "blueprint", "torch_model")
                                   if cfg.get(k)), "another model")
                    theirs = f"model ({source})"
                raise TrainError(f"--resume: {flag} {getattr(args, key)} differs from the checkpoint's "
                                 f"{theirs}; a resumed run keeps its model and training configuration")
        for key in TRAINING_KEYS:
            if key in cfg:
                setattr(args, key, cfg[key])
        for key in RESUMED_DEFAULTS:  # the saved run's values unless the flag is given again
            if key not in explicit and key in cfg:
                setattr(args, key, cfg[key])
        if "dataset" not in explicit and "data_dir" not in explicit and cfg.get("data_dir"):
            args.data_dir = Path(cfg["data_dir"])
        history = list(saved.get("epochs", []))
        if args.save_dir is None and resume_folder.name == "last":
            # continuing DIR/last: keep checkpointing into DIR, as the run did (docs/tr-train.md)
            args.save_dir = resume_folder.parent
            say(f"resuming {resume_folder}: checkpoints go on into {args.save_dir} "
                 f"(--save-dir {args.save_dir}; pass --save-dir to write them elsewhere)")
    check_args(args)
    device, device_text = resolve_device(args.device)
    choice = OPTIMIZERS[args.optimizer]
    lr = choice.default_lr if args.lr is None else args.lr
    for flag, path in (("--report-json", args.report_json), ("--plot", args.plot)):
        if path is not None:
            prepare_output(flag, path)
    if args.plot is not None:
        supported_image(args.plot)
    if args.save_dir is not None:
        check_save_dir(args.save_dir, resume_folder)
    for flag, path in (("--save-dir", args.save_dir), ("--dump-ir", args.dump_ir)):
        if path is not None:
            prepare_output(flag, path, folder=True)

    # -- data and model ------------------------------------------------------------------
    from tr_mlir.blueprint import BluePrintError

    t0 = time.perf_counter()
    from tr_mlir.errors import PluginError
    from tr_mlir.extend import load_plugins

    try:
        load_plugins(args.plugin)
    except PluginError as e:
        raise TrainError(f"--plugin: {e}") from None
    if resume_folder is not None:
        source, layer, plan = _resumed_source(saved["config"])
        ds = _load_data(args, source)
        data_shape = tuple(saved["config"].get("dataset_shape", ds.input_shape))
    else:
        if args.torch_model:
            from tr_mlir.frontend.torch import train_source

            source = train_source(args.torch_model)
        else:
            source = blueprint_source(args.blueprint) if args.blueprint else zoo_source(args.model)
        ds = _load_data(args, source)
        layer = _build(source, ds.num_classes) if source.build_for is None else source.build_for(ds.num_classes,
                                                                                                 ds.input_shape)
        plan = plan_input(source, layer, ds.input_shape, ds.num_classes)
        data_shape = ds.input_shape
    if plan.mode is not None:
        del ds
        ds = _load_data(args, source, **{f"{plan.mode}_to": plan.to})
    timings["load_s"] = time.perf_counter() - t0
    say("== data")
    say(ds.describe())
    if plan.mode is not None:
        say(f"input {data_shape[0]}x{data_shape[1]} -> {plan.to[0]}x{plan.to[1]} "
             f"({'zero-padded, centered' if plan.mode == 'pad' else 'resized bilinearly'}): {plan.reason}")
    say(f"loaded in {timings['load_s']:.2f} s")

    from tr_mlir.loss import CrossEntropyLoss
    from tr_mlir.sched import CosineAnnealingLR
    from tr_mlir.task import CONFIG_FILE, Task, TaskError

    start_epoch = 0
    try:
        if resume_folder is not None:
            # the checkpoint's compile options unless given again (RESUMED_DEFAULTS; same numerics,
            # but for the last bits of the BN statistics with another fuse_bn_stats)
            task = Task.load(resume_folder, device=device, reuse=args.reuse, fuse_fc_relu=args.fuse_fc_relu,
                             fuse_bn_stats=args.fuse_bn_stats, fuse_grad_acc=args.fuse_grad_acc)
            saved_world = saved["config"].get("world_size", 1)
            if saved_world != task.world_size:
                raise TrainError(f"--resume {resume_folder}: the checkpoint was trained by {saved_world!r} "
                                 f"process(es), this run has {task.world_size} (WORLD_SIZE); resume it with "
                                 f"torchrun --nproc_per_node {saved_world!r} (another count changes the shards, the "
                                 f"steps per epoch and with them the learning-rate schedule)")
            if tuple(task.input_shape) != tuple(ds.input_shape) or task.num_classes != ds.num_classes:
                raise TrainError(f"--resume {resume_folder}: the checkpoint's model ({CONFIG_FILE}) reads "
                                 f"{task.input_shape} with {task.num_classes} classes, the dataset gives "
                                 f"{ds.input_shape} with {ds.num_classes}")
            sizes = (task.epoch_samples(ds.num_train, args.drop_last), ds.num_val)
            if (task.train_size, task.val_size) != sizes:
                raise TrainError(f"--resume {resume_folder}: the checkpoint ({CONFIG_FILE}) has trained on "
                                 f"{task.train_size} samples per epoch and validated on {task.val_size}, the "
                                 f"dataset of {RUN_STATE_FILE} ({args.dataset}) gives {sizes[0]} and {sizes[1]}: "
                                 f"not the run's data (another dataset, --data-dir or seed?)")
            start_epoch = task.epochs
            disagree = _disagreement(saved, task, choice.build(lr, args.weight_decay))
            if disagree:
                raise TrainError(f"--resume {resume_folder}: {RUN_STATE_FILE} and {CONFIG_FILE} disagree: {disagree}; "
                                 f"they come from different checkpoints")
            if args.save_dir is not None and task.rank == 0 and best_of(history)[1] == start_epoch:
                _repair_best(task, args.save_dir / "best", resume_folder, saved, start_epoch)
            if start_epoch >= args.epochs:
                raise TrainError(f"--resume {resume_folder}: the checkpoint has trained {start_epoch} epochs; "
                                 f"--epochs is the total, pass more than {start_epoch}")
            task.scheduler = CosineAnnealingLR(T_max=args.epochs, warmup_epochs=args.warmup)
        else:
            options = dict(optimizer=choice.build(lr, args.weight_decay),
                           scheduler=CosineAnnealingLR(T_max=args.epochs, warmup_epochs=args.warmup),
                           loss=CrossEntropyLoss(label_smoothing=args.label_smoothing),
                           amp=args.amp, fuse=args.fuse, device=device, seed=args.seed, reuse=args.reuse,
                           fuse_fc_relu=args.fuse_fc_relu, fuse_bn_stats=args.fuse_bn_stats,
                           fuse_grad_acc=args.fuse_grad_acc, plugins=args.plugin, **training_options(args))
            task = (layer.task(args.batch_size, **options) if source.build_for is not None  # with its weights
                    else Task(layer, ds.input_shape, ds.num_classes, args.batch_size, **options))
    except (TaskError, BluePrintError, ValueError) as e:
        if isinstance(e, TrainError):
            raise
        raise TrainError(str(e)) from None
    lead = task.rank == 0  # the process that prints and writes the outputs
    from tr_mlir.lowering.gloo import stop_on_sigterm

    stop_on_sigterm(PROG, task.rank, task.world_size)  # torchrun stops the others when a rank fails
    train_outputs.SILENT = not lead
    h, w, c = ds.input_shape
    say("== model")
    say(f"{source.label} ({source.description}): input {h}x{w}x{c}, {ds.num_classes} classes; "
         f"device {device_text}" + (f", rank {task.rank} of {task.world_size}" if task.world_size > 1 else ""))

    config = {
        "model": None if args.blueprint or args.torch_model else args.model, "blueprint": args.blueprint,
        **({"torch_model": args.torch_model} if args.torch_model else {}), "dataset": args.dataset,
        "data_dir": None if args.data_dir is None else str(args.data_dir), "download": args.download,
        "epochs": args.epochs, "batch_size": args.batch_size, "optimizer": args.optimizer, "lr": lr,
        "weight_decay": args.weight_decay, "label_smoothing": args.label_smoothing, "warmup": args.warmup,
        "amp": args.amp, "fuse": args.fuse, "augment": args.augment, "init": args.init,
        "ema": args.ema, "ema_warmup": args.ema_warmup, "resize_schedule": args.resize_schedule,
        "conv_algo": task.conv_algo,
        "loss_scaler": args.loss_scaler, "scaler_init": args.scaler_init, "scaler_growth": args.scaler_growth,
        "scaler_backoff": args.scaler_backoff, "scaler_interval": args.scaler_interval, "device": args.device, "device_used": device, "seed": args.seed,
        "reuse": task.reuse, "fuse_fc_relu": task.fuse_fc_relu,
        "fuse_bn_stats": task.fuse_bn_stats, "fuse_grad_acc": task.fuse_grad_acc, "drop_last": args.drop_last, "plugins": list(task.plugins), "dump_ir": None if args.dump_ir is None else str(args.dump_ir),
        "report_json": None if args.report_json is None else str(args.report_json),
        "plot": None if args.plot is None else str(args.plot),
        "save_dir": None if args.save_dir is None else str(args.save_dir),
        "resume": None if resume_folder is None else str(resume_folder),
        "input_shape": list(ds.input_shape), "num_classes": ds.num_classes, "dataset_shape": list(data_shape),
        "input_adaptation": None if plan.mode is None else {"mode": plan.mode, "to": list(plan.to)},
        "train_size": ds.num_train, "val_size": ds.num_val, "start_epoch": start_epoch,
        "world_size": task.world_size,
    }

    # -- compile -------------------------------------------------------------------------
    from tr_mlir.lowering.backend import ArenaTooLargeError
    from tr_mlir.passes.tr_compile import TrCompilePass

    train_size = task.epoch_samples(ds.num_train, args.drop_last)
    spec = {"batch_size": task.batch_size, "train_size": train_size, "val_size": ds.num_val,
            "world_size": task.world_size, "optimizer": task.optimizer.kind.value,
            "target": "cuda" if task.device == "gpu" else "cpu"}
    if task.resize is not None:
        spec.update(train_res=task.resize[0], train_res_end=task.resize[1])
    if task.ema is not None:
        spec["ema"] = True
    if task.conv_algo != "auto":
        spec["conv_algo"] = task.conv_algo
    pipeline = TrCompilePass(fuse=task.fuse, amp=task.amp, num_classes=task.num_classes, reuse=task.reuse,
                             fuse_fc_relu=task.fuse_fc_relu, fuse_bn_stats=task.fuse_bn_stats,
                             fuse_grad_acc=task.fuse_grad_acc, **spec)
    say("== compile")
    say(f"pipeline: builtin.module({pipeline.pipeline_pass_spec()})")
    if args.dump_ir is not None and lead:
        t0 = time.perf_counter()
        try:
            files = dump_ir(task.config()["model"], args.dump_ir, fuse=task.fuse, amp=task.amp,
                            num_classes=task.num_classes, spec=spec, reuse=task.reuse,
                            fuse_fc_relu=task.fuse_fc_relu, fuse_bn_stats=task.fuse_bn_stats,
                            fuse_grad_acc=task.fuse_grad_acc)
        except OSError as e:
            raise TrainError(f"--dump-ir {args.dump_ir}: {e}") from None
        except Exception as e:
            raise _rejected(source.label, ds, str(e), f" (IR up to the failing pass in {args.dump_ir})") from None
        timings["dump_ir_s"] = time.perf_counter() - t0
        say(f"IR after each of {len(files) - 2} passes: {args.dump_ir}/ ({files[1].name} .. {files[-2].name}); "
             f"replay: sh {args.dump_ir / 'replay.sh'}")
    t0 = time.perf_counter()
    try:
        task.compile(train_size, ds.num_val)
    except ArenaTooLargeError as e:
        raise TrainError(f"{source.label} does not fit in memory: {e}; lower --batch-size") from None
    except TaskError as e:
        why = str(e).removeprefix("Task.compile: the compiler rejected the model: ")
        if task.resize is not None and ("differs across variants" in why or "tensor count mismatch" in why):
            raise TrainError(f"--resize-schedule {args.resize_schedule}: {source.label} cannot train at several "
                             f"resolutions: {why}") from None
        raise _rejected(source.label, ds, why) from None
    timings["compile_s"] = time.perf_counter() - t0
    n_params = sum(int(a.size) for _, a in task.parameters())
    say(f"compiled in {timings['compile_s']:.2f} s (ArchPlan, memory plan, {len(task.exe.graphs)} graphs captured); "
         f"{n_params:,} trainable parameters")
    say("")
    say(plan_table(task.exe.model, task.batch_size))
    say("")
    say("memory plan: " + memory_summary(task.exe.program))

    # -- train ---------------------------------------------------------------------------
    say("")
    say(f"== train: epochs {start_epoch + 1}..{args.epochs}, batch {task.batch_size}, {args.optimizer} "
         f"lr {task.optimizer.lr:g} (cosine" + (f", warm-up {args.warmup:g} epochs" if args.warmup else "")
         + f"), weight decay {task.optimizer.weight_decay:g}, label smoothing {task.loss.label_smoothing:g}, "
         f"{'amp' if task.amp else 'fp32'}{', fused' if task.fuse else ''}, {device}"
         + (f", augment {args.augment}" if args.augment else "") + (f", init {args.init}" if args.init != "seed" else "")
         + (", GradScaler loss scale" if task.loss_scaler is not None else "")
         + (f", EMA {task.ema.decay:g}" + ("" if task.ema.warmup else " (no warm-up)") if task.ema is not None else "")
         + (f", resize {task.resize[0]} (epochs 1..{task.resize[2]}) -> {task.resize[1]}" if task.resize else "")
         + (f" x {task.world_size} processes" if task.world_size > 1 else ""))
    best, best_epoch = best_of(history)
    interrupted = False
    divergence = None
    saved_epochs = 0  # checkpoints this invocation wrote (a resume's checkpoint folder already has one)

    def write_outputs() -> None:
        timings["total_s"] = time.perf_counter() - t_start
        if args.report_json is not None and lead:
            try:
                atomic_write(args.report_json, json.dumps(make_report(config, timings, history), indent=1) + "\n")
            except OSError as e:
                raise TrainError(f"--report-json {args.report_json}: {e}") from None

    try:
        for epoch in range(start_epoch + 1, args.epochs + 1):
            row = _train_epoch(task, ds, epoch, args.epochs, args.drop_last)
            timings["train_s"] += row["train_s"]
            timings["val_s"] += row["val_s"]
            history.append(row)
            bad = diverged(row, ds.num_val)
            new_best = bad is None and (best is None or (not math.isnan(row["val_top1"]) and row["val_top1"] > best))
            if new_best:
                best, best_epoch = row["val_top1"], epoch
            say(f"epoch {epoch:>{len(str(args.epochs))}}/{args.epochs}  lr {row['lr']:.4g}  "
                 f"train loss {row['train_loss']:.4f}  val loss {row['val_loss']:.4f}  "
                 f"val top-1 {_pct(row['val_top1'])}  top-5 {_pct(row['val_top5'])}  "
                 + (f"EMA top-1 {_pct(row['val_ema_top1'])}  " if "val_ema_top1" in row else "")
                 + f"{row['train_images_per_s']:,.0f} img/s  {row['train_s'] + row['val_s']:.2f} s"
                 + ("  *" if new_best else "") + ("  diverged" if bad is not None else ""))
            if bad is not None:
                divergence = (f"training diverged in epoch {epoch}: the {bad} loss is {row[bad + '_loss']} (learning "
                              f"rate {row['lr']:.4g}); start again with a lower --lr or with --warmup (a resumed run "
                              f"keeps its learning rate)"
                              + (f"; --save-dir keeps epoch {epoch - 1}" if args.save_dir is not None and epoch > 1
                                 else ""))
                break
            if args.save_dir is not None and lead:
                t0 = time.perf_counter()
                saved_epochs += 1
                state = {"format": RUN_STATE_FORMAT, "config": config, "epochs": history,
                         "best_val_top1": best, "best_epoch": best_epoch}
                try:
                    save_checkpoint(task, args.save_dir / "last", state)
                    if new_best:  # a save stopped before this one ends: the resume rewrites it (_repair_best)
                        save_checkpoint(task, args.save_dir / "best", state)
                except OSError as e:
                    raise TrainError(f"--save-dir {args.save_dir}: {e}") from None
                timings["checkpoint_s"] += time.perf_counter() - t0
            write_outputs()
    except KeyboardInterrupt:
        interrupted = True
        print(f"\n{PROG}: interrupted after {len(history)} epoch(s)", file=sys.stderr, flush=True)

    # -- summary -------------------------------------------------------------------------
    write_outputs()
    if args.plot is not None and history and lead:
        try:
            write_plot(args.plot, history, f"{source.label} on {ds.name}")
        except (OSError, ValueError) as e:
            raise TrainError(f"--plot {args.plot}: {e}") from None
    say("")
    say("== summary")
    if history:
        last = history[-1]
        best_row = next(r for r in history if r["epoch"] == best_epoch) if best_epoch is not None else last
        if best_epoch is None:
            say("best val top-1: none (no epoch with a finite val loss and top-1)")
        else:
            say(f"best val top-1 {_pct(best)} at epoch {best_epoch} (val top-5 {_pct(best_row['val_top5'])}, "
                 f"val loss {best_row['val_loss']:.4f})")
        say(f"last epoch {last['epoch']}: val top-1 {_pct(last['val_top1'])}, train loss {last['train_loss']:.4f}, "
             f"val loss {last['val_loss']:.4f}")
        emas = [(r["val_ema_top1"], r["epoch"]) for r in history
                if "val_ema_top1" in r and math.isfinite(r.get("val_ema_loss", 0.0))]
        if emas:
            top, at = max(emas, key=lambda e: (e[0], -e[1]))
            say(f"EMA model: best val top-1 {_pct(top)} at epoch {at}, last epoch {_pct(history[-1].get('val_ema_top1'))}")
    new_rows = [r for r in history if r["epoch"] > start_epoch]
    trained = sum(r["train_s"] for r in new_rows)
    rate = f" ({ds.num_train * len(new_rows) / trained:,.0f} img/s)" if trained > 0 else ""
    say(f"time: data {timings['load_s']:.1f} s, compile {timings['compile_s']:.1f} s"
         + (f", IR dump {timings['dump_ir_s']:.1f} s" if args.dump_ir else "")
         + f", train {timings['train_s']:.1f} s{rate}, validation {timings['val_s']:.1f} s"
         + (f", checkpoints {timings['checkpoint_s']:.1f} s" if args.save_dir else "")
         + f", total {timings['total_s']:.1f} s")
    outputs = [f"{what} {p}" for what, p in (("report", args.report_json), ("plot", args.plot),
                                             ("checkpoints", args.save_dir if saved_epochs else None)) if p is not None]
    if outputs:
        say("wrote " + ", ".join(outputs))
    if divergence is not None:
        raise TrainError(divergence)
    return 130 if interrupted else 0


def _resumed_source(cfg: dict[str, Any]) -> tuple[ModelSource, None, InputPlan]:
    """The model source, (no layer: the checkpoint holds the model) and input plan of a saved
    run's configuration: the dataset is loaded again exactly as that run loaded it."""
    label = cfg.get("blueprint") or cfg.get("model") or "model"
    shape = cfg.get("dataset_shape")
    adapt = cfg.get("input_adaptation")
    source = ModelSource(label, "from the checkpoint", tuple(shape) if shape else None,
                         int(cfg.get("num_classes", 10)), lambda n: None)
    if adapt:
        return source, None, InputPlan(adapt["mode"], tuple(adapt["to"]), "as the checkpoint's run")
    return source, None, InputPlan(None, None, "as the checkpoint's run")


def _repair_best(task: Any, best: Path, resumed: Path, run: dict[str, Any], epoch: int) -> None:
    """Rewrite the ``best`` checkpoint from the resumed one when that is the run's best epoch but
    ``best`` does not hold it: the run was stopped after saving ``last`` and before (or while)
    saving ``best`` (:func:`save_checkpoint`), so without this ``best`` would stay an older epoch."""
    if best.resolve() == resumed.resolve():
        return
    try:
        rows = json.loads((best / RUN_STATE_FILE).read_text())["epochs"]
    except (OSError, ValueError, KeyError, TypeError):
        rows = None
    if isinstance(rows, list) and len(rows) == epoch:
        return
    try:
        save_checkpoint(task, best, run)
    except OSError as e:
        raise TrainError(f"--save-dir {best.parent}: {e}") from None
    say(f"rewrote {best} from {resumed} (epoch {epoch}, the best): its save had not finished")


def _disagreement(run: dict[str, Any], task: Any, optimizer: Any) -> str | None:
    """How a resumed checkpoint's run state (``tr_train.json``) and its task (``config.json``)
    disagree (the epochs trained, the training configuration), or None. ``optimizer``: the one the
    run state's ``--optimizer``, ``--lr`` and ``--weight-decay`` build."""
    cfg, rows = run["config"], len(run.get("epochs", []))
    if rows != task.epochs:
        return f"{rows} epochs listed, {task.epochs} trained"
    if all(k in cfg for k in ("optimizer", "lr", "weight_decay")) and optimizer != task.optimizer:
        return f"optimizer {optimizer!r} and {task.optimizer!r}"
    saved = {"batch_size": task.batch_size, "amp": task.amp, "fuse": task.fuse, "seed": task.seed,
             "label_smoothing": task.loss.label_smoothing}
    for key, value in saved.items():
        if key in cfg and cfg[key] != value:
            return f"{key} {cfg[key]!r} and {value!r}"
    return None


def _build(source: ModelSource, num_classes: int) -> Any:
    from tr_mlir.blueprint import BluePrintError

    try:
        return source.build(num_classes)
    except BluePrintError as e:
        raise TrainError(f"{source.label}: {e}") from None


def _train_epoch(task: Any, ds: Any, epoch: int, epochs: int, drop_last: bool = False) -> dict[str, Any]:
    """One epoch of ``task`` on ``ds`` with a tqdm bar (stderr, only on a terminal), then the
    validation pass; returns the report row."""
    from tqdm import tqdm

    n, b = task.epoch_samples(ds.num_train, drop_last), task.batch_size * task.world_size  # a batch per rank and step
    bar = tqdm(total=n, desc=f"epoch {epoch}/{epochs}", unit="img", leave=False, disable=None,
               file=sys.stderr, dynamic_ncols=True, mininterval=0.25)
    done = [0]
    shown = [0.0]

    def on_batch(i: int) -> None:
        # Batch i is being staged while step i-1 runs: steps 0..i-2 are complete. The running loss
        # is read from the arena at most every 0.5 s (on a GPU each read waits for the device).
        if bar.disable:
            return
        finished = min(max(i - 1, 0) * b, n)
        if finished > done[0]:
            now = time.perf_counter()
            if now - shown[0] >= 0.5:
                shown[0] = now
                bar.set_postfix(loss=f"{task.exe.get_scalar('accum_loss') / finished:.4f}", refresh=False)
            bar.update(finished - done[0])
            done[0] = finished

    import warnings

    import numpy as np

    try:
        t0 = time.perf_counter()
        # a diverging step's overflows are reported as the divergence, not per kernel: errstate on
        # this thread, the filter for the kernel threads' NumPy code (a process-wide filter: a CLI)
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            row = task.fit((ds.train_x, ds.train_y), None, epochs=1, on_batch=on_batch, drop_last=drop_last)[0]
        train_s = time.perf_counter() - t0
        if not bar.disable:
            bar.set_postfix(loss=f"{row['train_loss']:.4f}", refresh=False)
            bar.update(n - done[0])
        t0 = time.perf_counter()
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            ev = task.evaluate(ds.val_x, ds.val_y)
            ev_ema = task.evaluate(ds.val_x, ds.val_y, ema=True) if task.ema is not None else None
        val_s = time.perf_counter() - t0
    finally:
        bar.close()
    return {"epoch": epoch, "lr": row["lr"], "train_loss": row["train_loss"], "train_top1": row["train_top1"],
            "val_loss": ev["loss"], "val_top1": ev["top1"], "val_top5": ev["top5"],
            "train_images_per_s": n / train_s if train_s > 0 else None,
            "train_s": train_s, "val_s": val_s,
            **({} if ev_ema is None else {"val_ema_loss": ev_ema["loss"], "val_ema_top1": ev_ema["top1"],
                                          "val_ema_top5": ev_ema["top5"]})}


def main(argv: Sequence[str] | None = None) -> int:
    """The console script: parse ``argv`` (default ``sys.argv[1:]``), run, return the exit code
    (0 ok, 1 error, 130 interrupted)."""
    console = argv is None  # the console script: this process ends when main returns
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    try:
        from tr_mlir.data import DatasetError
        from tr_mlir.lowering.backend import ArenaTooLargeError
        from tr_mlir.lowering.distributed import DistributedError

        try:
            status = run(args, explicit_flags(argv))
            if console:
                _ignore_interrupts_from_now_on()
            return _failed(status) if status else status  # 130: interrupted, no closing barrier
        except (DatasetError, DistributedError) as e:  # DistributedError: the launch or a rank (lowering/gloo.py)
            raise TrainError(str(e)) from None
        except ArenaTooLargeError as e:
            raise TrainError(f"the model does not fit in memory: {e}") from None
    except TrainError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr, flush=True)
        return _failed(1)
    except KeyboardInterrupt:
        print(f"\n{PROG}: interrupted", file=sys.stderr, flush=True)
        return _failed(130)
    except Exception as e:  # anything else is a bug (ours, or a loaded plugin's): say so without a wall of Python
        from tr_mlir.extend import plugin_frame

        where = plugin_frame(e)
        if where is not None:
            print(f"{PROG}: error: {where}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
            return _failed(1)
        print(f"{PROG}: internal error: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        if os.environ.get(TRACEBACK_ENV) == "1":
            traceback.print_exc()
        else:
            print(f"{PROG}: set {TRACEBACK_ENV}=1 to see the Python traceback", file=sys.stderr)
        return _failed(1)


def _ignore_interrupts_from_now_on() -> None:
    """Ignore SIGINT for the rest of the process: the run is over (its report and checkpoints are
    written) and only the interpreter's exit is left. A Ctrl-C there used to escape as an uncaught
    KeyboardInterrupt: the process died by SIGINT (exit -2 in Python's terms) after a run that had
    finished, found by tests/test_faults.py when faster epochs moved its signal past the run.
    From the main thread only (``signal.signal`` raises ``ValueError`` elsewhere)."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def _failed(status: int) -> int:
    """``status``, after telling a gloo process group this rank leaves without its closing barrier
    (the other ranks then fail at once instead of after the timeout: lowering/gloo.py)."""
    if "tr_mlir.lowering.gloo" in sys.modules:
        sys.modules["tr_mlir.lowering.gloo"].abandon(status)
    return status


if __name__ == "__main__":
    sys.exit(main())
