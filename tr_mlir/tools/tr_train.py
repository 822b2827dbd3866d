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
:data:`REPORT_SCHEMA_VERSION` = 1::

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
resumed run's earlier invocations are included. New keys may be added within a schema version;
a key is removed or changes meaning only with a new version.

Errors (missing or malformed data, a bad blueprint file or function, an unknown model, a model
that cannot take the dataset's shape, a model too large for memory, bad flag values, unwritable
outputs) print ``tr-train: error: <message>`` on stderr and exit 1, without a traceback;
anything unexpected prints ``tr-train: internal error: ...`` (``TR_TRAIN_TRACEBACK=1`` shows the
traceback). Ctrl-C stops after writing the report of the finished epochs (exit 130).
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import inspect
import json
import math
import os
import shlex
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from tr_mlir.errors import TrMlirError
from tr_mlir.pyfile import PythonFileError, import_file, user_frame

PROG = "tr-train"

REPORT_SCHEMA_VERSION = 1
"""Version of the ``--report-json`` schema (module doc)."""

RUN_STATE_FILE = "tr_train.json"
"""File of a checkpoint folder holding the run (configuration, epochs, best)."""

RUN_STATE_FORMAT = "tr-train-run-1"

TRACEBACK_ENV = "TR_TRAIN_TRACEBACK"
"""Environment variable: set to 1 to print the traceback of an internal error."""

DEFAULT_MODEL = "resnet_tiny"
DEFAULT_DATASET = "digits"
DEFAULT_EPOCHS = 30
DEFAULT_BATCH_SIZE = 32
DEFAULT_WEIGHT_DECAY = 5e-4

SYNTHETIC_DEFAULT_SHAPE = (32, 32, 3)
"""Input of ``--dataset synthetic`` for a BluePrint that names no input shape."""


class TrainError(TrMlirError):
    """A user error with a ready message, printed as ``tr-train: error: <message>`` (exit 1)."""


# --------------------------------------------------------------------------------------
# Optimizers
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OptimizerChoice:
    """A ``--optimizer`` value: ``build(lr, weight_decay)`` and the default learning rate."""

    build: Callable[[float, float], Any]
    default_lr: float
    description: str


def _sgd(momentum: float = 0.0, nesterov: bool = False) -> Callable[[float, float], Any]:
    def build(lr: float, wd: float) -> Any:
        from tr_mlir.optim import SGD

        return SGD(lr=lr, momentum=momentum, nesterov=nesterov, weight_decay=wd)
    return build


def _adam(lr: float, wd: float) -> Any:
    from tr_mlir.optim import Adam

    return Adam(lr=lr, weight_decay=wd)


def _adamw(lr: float, wd: float) -> Any:
    from tr_mlir.optim import AdamW

    return AdamW(lr=lr, weight_decay=wd)


def _lars(lr: float, wd: float) -> Any:
    from tr_mlir.optim import LARS

    return LARS(lr=lr, momentum=0.9, weight_decay=wd)


OPTIMIZERS: dict[str, OptimizerChoice] = {
    "sgd": OptimizerChoice(_sgd(), 0.1, "SGD without momentum"),
    "momentum": OptimizerChoice(_sgd(0.9), 0.05, "SGD, momentum 0.9"),
    "nesterov": OptimizerChoice(_sgd(0.9, True), 0.05, "SGD, Nesterov momentum 0.9"),
    "adam": OptimizerChoice(_adam, 1e-3, "Adam (L2 weight decay)"),
    "adamw": OptimizerChoice(_adamw, 1e-3, "AdamW (decoupled weight decay)"),
    "lars": OptimizerChoice(_lars, 1.0, "LARS, momentum 0.9, trust coefficient 1e-3"),
}
"""``--optimizer`` name -> optimizer (module :mod:`tr_mlir.optim`) and its default ``--lr``."""

DEFAULT_OPTIMIZER = "momentum"


# --------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------


class _Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults printed after each help text (a default of None is spelled out in the text)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or isinstance(action.default, bool):
            return action.help
        return super()._get_help_string(action)


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors exit 1 (as every other tr-train error)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(1, f"{PROG}: error: {message}\n")


def _lr_defaults() -> str:
    return ", ".join(f"{v.default_lr:g} for {k}" for k, v in OPTIMIZERS.items())


_EPILOG = f"""\
stages: data -> model -> compile (ArchPlan table, memory plan) -> train -> summary.
zoo models and datasets (details: docs/tr-train.md):
  digits (8x8x1)    mlp, mlp_digits, resnet_tiny, depthwise_tiny, resnet8_cifar, mobilenet_tiny
                    as is; lenet5 resized to 32x32; the ImageNet ResNets/MobileNetV2 as is
                    (they shrink 8x8 to 1x1); vgg16_bn resized to 224x224 (very slow on a CPU)
  mnist (28x28x1)   the same; lenet5 zero-padded to 32x32
  cifar10 (32x32x3) every model as is, except vgg16_bn (resized to 224x224)
  synthetic         random data of the model's own input shape and class count
--dump-ir DIR: DIR/NN-<pass>.mlir is the IR after the NN-th pass; replay one pass with
  tr-opt DIR/03-arch-normalize-softmax-ce.mlir -p arch-normalize-identity
  or every pass with: sh DIR/replay.sh
--report-json FILE: schema_version {REPORT_SCHEMA_VERSION}, config, timings, best_val_top1, best_epoch,
  epochs [{{epoch, lr, train_loss, train_top1, val_loss, val_top1, val_top5, train_images_per_s, ...}}]
  (accuracies as fractions; docs/tr-train.md).
errors print '{PROG}: error: ...' and exit 1.
"""


def resize_schedule(spec: str, epochs: int) -> tuple[int, int, int]:
    """``--resize-schedule START:END[:K]`` -> ``(START, END, switch_epoch)`` for ``Task(resize=)``:
    epochs ``1 .. epochs - K`` at START, the last K (default ``max(1, round(epochs / 4))``) at END.
    Raises :class:`TrainError` for another form or values out of range."""
    parts = spec.split(":")
    try:
        if len(parts) not in (2, 3):
            raise ValueError
        nums = [int(p) for p in parts]
    except ValueError:
        raise TrainError(f"--resize-schedule expects START:END or START:END:K (integers), got '{spec}'") from None
    start, end = nums[0], nums[1]
    k = nums[2] if len(nums) == 3 else max(1, round(epochs / 4))
    if start < 1 or end < 1:
        raise TrainError(f"--resize-schedule resolutions must be >= 1, got '{spec}'")
    if not 1 <= k <= epochs:
        raise TrainError(f"--resize-schedule K (epochs at END) must be in 1..{epochs} (--epochs), got {k}")
    return start, end, epochs - k


def _augment_presets() -> tuple[str, ...]:
    from tr_mlir.augment import PRESETS

    return tuple(PRESETS)


def _training_options(a: argparse.Namespace) -> dict[str, Any]:
    """The Task options of the issue-17 flags (only the ones that differ from the defaults)."""
    out: dict[str, Any] = {}
    if a.init != "seed":
        out["init"] = a.init
    if a.loss_scaler == "torch":
        from tr_mlir.amp import GradScaler

        out["loss_scaler"] = GradScaler(a.scaler_init, a.scaler_growth, a.scaler_backoff, a.scaler_interval)
    if a.augment is not None:
        from tr_mlir.augment import preset

        out["augment"] = preset(a.augment)
    if a.ema is not None:
        from tr_mlir.ema import EMA

        out["ema"] = EMA(a.ema, a.ema_warmup)
    if a.resize_schedule is not None:
        out["resize"] = resize_schedule(a.resize_schedule, a.epochs)
    if a.conv_algo != "auto":
        out["conv_algo"] = a.conv_algo
    return out


def build_parser() -> argparse.ArgumentParser:
    """The ``tr-train`` argument parser (every default shown by ``--help``)."""
    from tr_mlir.data import DATASETS

    p = _Parser(prog=PROG, formatter_class=_Formatter, epilog=_EPILOG,
                description="Compile a network with tr-mlir (BluePrint -> ArchPlan -> memory plan -> "
                            "executable) and train it on a dataset; CPU by default.")
    m = p.add_mutually_exclusive_group()
    m.add_argument("--model", default=DEFAULT_MODEL, metavar="NAME",
                   help="zoo model (python -m tr_mlir.zoo --list), built for the dataset's classes")
    m.add_argument("--blueprint", default=None, metavar="FILE.py:FUNC",
                   help="use FUNC of FILE.py instead of a zoo model: FUNC(num_classes) or FUNC() returns "
                        "a BluePrint layer or (layer, (H, W, C)) (default: none, the --model)")
    m.add_argument("--torch-model", default=None, metavar="FILE.py:FACTORY",
                   help="import the torch.nn.Module that FACTORY(num_classes) or FACTORY() of FILE.py returns "
                        "(tr_mlir.frontend.torch), with its weights, for the dataset's shape (default: none)")
    p.add_argument("--plugin", action="append", default=[], metavar="FILE_OR_MODULE",
                   help="load a tr-mlir plugin (a Python file or module: its ops, fusion steps, descriptors and "
                        "kernels, see tr_mlir.extend) before building the model; repeatable (default: none; "
                        "installed plugins load always)")
    p.add_argument("--dataset", default=DEFAULT_DATASET, choices=list(DATASETS),
                   help="dataset (python -m tr_mlir.data --list)")
    p.add_argument("--data-dir", type=Path, default=None, metavar="DIR",
                   help="folder of the dataset files (mnist, cifar10) (default: $TR_MLIR_DATA_DIR/<dataset> "
                        "if set, else ~/.cache/tr_mlir/<dataset>)")
    p.add_argument("--download", action="store_true",
                   help="download missing MNIST files into --data-dir (SHA-256 checked) (default: off)")
    p.add_argument("--epochs", type=int, default=DEFAULT_EPOCHS, metavar="N",
                   help="total number of epochs (with --resume: including the checkpoint's; default there: "
                        "the resumed run's total)")
    p.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, metavar="B",
                   help="samples per training step and process (torchrun with N GPU processes: N*B per step)")
    p.add_argument("--optimizer", default=DEFAULT_OPTIMIZER, choices=list(OPTIMIZERS),
                   help="optimizer: " + "; ".join(f"{k}: {v.description}" for k, v in OPTIMIZERS.items()))
    p.add_argument("--lr", type=float, default=None, metavar="X",
                   help=f"peak learning rate (default: {_lr_defaults()})")
    p.add_argument("--weight-decay", type=float, default=DEFAULT_WEIGHT_DECAY, metavar="X",
                   help="weight decay (not applied to BN parameters and biases)")
    p.add_argument("--label-smoothing", type=float, default=0.0, metavar="X",
                   help="label smoothing of the cross-entropy loss, in [0, 1)")
    p.add_argument("--warmup", type=float, default=0.0, metavar="N",
                   help="epochs of linear learning-rate warm-up before the cosine decay")
    p.add_argument("--amp", action="store_true",
                   help="mixed precision: fp16 activations and working weights, fp32 master weights, "
                        "loss scaling (emulated with NumPy on the CPU) (default: off)")
    p.add_argument("--fuse", action="store_true",
                   help="fuse residual blocks, conv+bn+relu and gap+fc (default: off)")
    p.add_argument("--augment", default=None, choices=list(_augment_presets()), metavar="PRESET",
                   help="host data augmentation of every training batch, seeded (tr_mlir.augment): "
                        "cifar (pad-4 random crop + horizontal flip), mnist / digits (random affine: "
                        "10 degrees, 10%% translation, scale 0.9..1.1), crop, flip (default: none)")
    p.add_argument("--init", default="seed", choices=("seed", "torch"),
                   help="parameter initialization: seed (trunc-normal convs, Kaiming-uniform FC weights, zero "
                        "biases) or torch (PyTorch's nn.Conv2d / nn.Linear defaults) (tr_mlir.inits)")
    p.add_argument("--loss-scaler", default="seed", choices=("seed", "torch"),
                   help="with --amp: seed (8192, halved on overflow, never grown) or torch "
                        "(torch.amp.GradScaler's rule with the --scaler-* values) (tr_mlir.amp)")
    p.add_argument("--scaler-init", type=float, default=65536.0, metavar="X",
                   help="--loss-scaler torch: initial scale")
    p.add_argument("--scaler-growth", type=float, default=2.0, metavar="X",
                   help="--loss-scaler torch: growth factor (> 1)")
    p.add_argument("--scaler-backoff", type=float, default=0.5, metavar="X",
                   help="--loss-scaler torch: backoff factor on overflow, in (0, 1)")
    p.add_argument("--scaler-interval", type=int, default=2000, metavar="N",
                   help="--loss-scaler torch: good steps in a row before the scale grows")
    p.add_argument("--ema", type=float, default=None, metavar="DECAY",
                   help="keep an exponential moving average of the weights (EMA_UPDATE graph after every step, "
                        "decay warm-up min(DECAY, (1+t)/(10+t))) and report the EMA model's validation too "
                        "(tr_mlir.ema) (default: off)")
    p.add_argument("--no-ema-warmup", dest="ema_warmup", action="store_false",
                   help="--ema without the decay warm-up (every update uses DECAY)")
    p.add_argument("--resize-schedule", default=None, metavar="START:END[:K]",
                   help="progressive resizing: train at resolution START (train_base/train_last variants), "
                        "the last K epochs (default: a quarter, at least 1) at END (train_lowres variants), "
                        "in one compiled plan; batches resized bilinearly on the host; validation at the "
                        "dataset's resolution; needs a model with global pooling (default: off)")
    p.add_argument("--drop-last", action="store_true",
                   help="skip each epoch's last partial batch (every step has the full batch; needed when "
                        "a last batch of one sample would reach a batch norm)")
    p.add_argument("--conv-algo", default="auto", metavar="ALGO",
                   help="conv algorithms (memplan-select-conv-algo): auto (cost rule), im2col (the rule before it, "
                        "same numerics), numpy, or one algorithm (direct, pointwise, depthwise) where it applies")
    p.add_argument("--no-reuse", dest="reuse", action="store_false",
                   help="give every transient DTensor its own slot (the seed's layout) instead of placing "
                        "tensors that are never live together in the same bytes (same numerics, more memory)")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "gpu"),
                   help="auto: the GPU when the GPU backend can run (CuPy imports and a CUDA device "
                        "answers), else the CPU; gpu without one is an error")
    p.add_argument("--seed", type=int, default=0, metavar="S",
                   help="seed of the weights, the train/val split, the data order and dropout")
    p.add_argument("--dump-ir", type=Path, default=None, metavar="DIR",
                   help="write the IR after every compiler pass to DIR/NN-<pass>.mlir, and DIR/replay.sh "
                        "(default: off)")
    p.add_argument("--report-json", type=Path, default=None, metavar="FILE",
                   help="write the run report (versioned JSON schema, see below) (default: off)")
    p.add_argument("--plot", type=Path, default=None, metavar="FILE.png",
                   help="draw loss and accuracy curves per epoch with matplotlib (default: off)")
    p.add_argument("--save-dir", type=Path, default=None, metavar="DIR",
                   help="keep the last and the best checkpoint in DIR/last and DIR/best (default: off)")
    p.add_argument("--resume", type=Path, default=None, metavar="CKPT",
                   help="continue the run saved in CKPT (a DIR/last or DIR/best folder, or DIR) "
                        "(default: off)")
    return p


def explicit_flags(argv: Sequence[str]) -> set[str]:
    """The destinations of the options given on the command line ``argv`` (not defaulted)."""
    p = build_parser()
    unset = object()  # argparse fills in defaults only for attributes the namespace lacks
    defaults = vars(p.parse_args([]))
    # an append option (--plugin) appends to the namespace's value: give it a fresh list
    ns = argparse.Namespace(**{d: [] if isinstance(v, list) else unset for d, v in defaults.items()})
    p.parse_args(list(argv), namespace=ns)
    return {d for d, v in vars(ns).items() if v is not unset and not (isinstance(defaults[d], list) and v == [])}


TRAINING_KEYS: tuple[str, ...] = ("model", "blueprint", "torch_model", "dataset", "batch_size", "optimizer", "lr",
                                  "weight_decay", "label_smoothing", "warmup", "amp", "fuse", "seed", "drop_last", "augment",
                                  "init", "loss_scaler", "scaler_init", "scaler_growth", "scaler_backoff",
                                  "scaler_interval", "ema", "ema_warmup", "resize_schedule", "conv_algo")
"""Options that define a run: fixed by the checkpoint on ``--resume``."""

RESUMED_DEFAULTS: tuple[str, ...] = ("epochs", "device", "reuse")
"""Options a resumed run takes from its checkpoint unless given again: ``--epochs`` (the cosine
schedule's length: resuming an interrupted run must not change it), ``--device``, ``--no-reuse``."""


def _check_args(a: argparse.Namespace) -> None:
    """Range checks of the numeric flags; raises :class:`TrainError`."""
    def bad(flag: str, want: str, got: Any) -> NoReturn:
        raise TrainError(f"{flag} must be {want}, got {got}")

    if a.epochs < 1:
        bad("--epochs", "an integer >= 1", a.epochs)
    if a.batch_size < 1:
        bad("--batch-size", "an integer >= 1", a.batch_size)
    if a.lr is not None and (not math.isfinite(a.lr) or a.lr <= 0):
        bad("--lr", "a number > 0", a.lr)
    if not math.isfinite(a.weight_decay) or a.weight_decay < 0:
        bad("--weight-decay", "a number >= 0", a.weight_decay)
    if not math.isfinite(a.label_smoothing) or not 0 <= a.label_smoothing < 1:
        bad("--label-smoothing", "in [0, 1)", a.label_smoothing)
    if not math.isfinite(a.warmup) or a.warmup < 0:
        bad("--warmup", "a number of epochs >= 0", a.warmup)
    if a.warmup > 0 and a.warmup >= a.epochs:
        raise TrainError(f"--warmup ({a.warmup:g} epochs) must be less than --epochs ({a.epochs})")
    if a.seed < 0:
        bad("--seed", "an integer >= 0", a.seed)
    if a.loss_scaler == "torch":
        if not a.amp:
            raise TrainError("--loss-scaler torch needs --amp (fp32 training has no loss scale)")
        from tr_mlir.amp import GradScaler

        try:
            GradScaler(a.scaler_init, a.scaler_growth, a.scaler_backoff, a.scaler_interval)
        except ValueError as e:
            raise TrainError(str(e).replace("GradScaler: init_scale", "--scaler-init")
                             .replace("GradScaler: growth_factor", "--scaler-growth")
                             .replace("GradScaler: backoff_factor", "--scaler-backoff")
                             .replace("GradScaler: growth_interval", "--scaler-interval")) from None
    elif (a.scaler_init, a.scaler_growth, a.scaler_backoff, a.scaler_interval) != (65536.0, 2.0, 0.5, 2000):
        raise TrainError("--scaler-init / --scaler-growth / --scaler-backoff / --scaler-interval set the "
                         "--loss-scaler torch rule; add --amp --loss-scaler torch (the seed's rule has no such values)")
    if a.ema is not None and (not math.isfinite(a.ema) or not 0 <= a.ema < 1):
        bad("--ema", "a decay in [0, 1)", a.ema)
    if a.ema is None and not a.ema_warmup:
        raise TrainError("--no-ema-warmup applies to --ema DECAY; add --ema (or drop --no-ema-warmup)")
    if a.resize_schedule is not None:
        resize_schedule(a.resize_schedule, a.epochs)
    if a.init == "torch" and getattr(a, "torch_model", None):
        raise TrainError("--init torch re-initializes the weights; --torch-model keeps the module's own")
    if a.blueprint is not None and ":" not in a.blueprint:
        raise TrainError(f"--blueprint expects FILE.py:FUNC, got '{a.blueprint}'")


def resolve_device(requested: str) -> tuple[str, str]:
    """``--device`` -> (the device used, ``cpu`` or ``gpu``; in words, for the CPU with whether its
    kernels compile C: :func:`tr_mlir.lowering.cpu._cc.describe`). ``auto`` is the GPU when the
    CUDA backend can run (CuPy imports and a CUDA device answers:
    :func:`tr_mlir.lowering.cuda.backend.cuda_available`), else the CPU; ``gpu`` without one is a
    :class:`TrainError` saying why."""
    from tr_mlir.lowering.cpu import _cc

    if requested == "cpu":
        return "cpu", f"CPU (NumPy backend, {_cc.describe()})"
    from tr_mlir.lowering.cuda.backend import cuda_available

    ok, why = cuda_available()
    if ok:
        return "gpu", f"GPU: {why} (CUDA backend)"
    if requested == "gpu":
        raise TrainError(f"--device gpu: no usable GPU: {why}; use --device cpu or --device auto")
    return "cpu", f"CPU (NumPy backend, {_cc.describe()}; no GPU: {why})"


# --------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelSource:
    """Where the network comes from: a zoo name or ``FILE.py:FUNC``.

    ``native``: the model's own input shape (the zoo's, or the BluePrint's returned shape;
    None: take the dataset's); ``native_classes``: the zoo's class count (synthetic data);
    ``build(num_classes)`` returns the BluePrint layer.
    """

    label: str
    description: str
    native: tuple[int, int, int] | None
    native_classes: int
    build: Callable[[int], Any]
    explicit_shape: bool = False  # a BluePrint that named its input: channels must match
    build_for: Callable[[int, tuple[int, int, int]], Any] | None = None  # --torch-model: (classes, shape) -> TorchModel


def zoo_source(name: str) -> ModelSource:
    """The zoo model ``name``; :class:`TrainError` (with the known names) when unknown."""
    from tr_mlir.zoo import MODELS

    spec = MODELS.get(name)
    if spec is None:
        raise TrainError(f"unknown model '{name}'; zoo models: {', '.join(MODELS)} "
                         "(or pass --blueprint FILE.py:FUNC)")
    return ModelSource(name, f"zoo: {spec.description}", tuple(spec.input_shape), spec.num_classes,
                       spec.blueprint)


def blueprint_source(spec: str) -> ModelSource:
    """Import ``FILE.py:FUNC`` (module doc); :class:`TrainError` for a missing or broken file, a
    missing or non-callable FUNC, or a call that fails or returns something else than a layer
    or ``(layer, (H, W, C))``."""
    from tr_mlir.blueprint import Layer

    file_text, _, func_name = spec.rpartition(":")
    path = Path(file_text)
    if not file_text or not func_name:
        raise TrainError(f"--blueprint expects FILE.py:FUNC, got '{spec}'")
    try:
        module = import_file(path, "_tr_train_blueprint_")
    except PythonFileError as e:
        raise TrainError(f"--blueprint: {e}") from None
    module_name = module.__name__
    func = getattr(module, func_name, None)
    if func is None:
        names = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_")
                       and getattr(v, "__module__", None) == module_name)
        raise TrainError(f"--blueprint: {path} defines no '{func_name}'"
                         + (f"; its functions: {', '.join(names)}" if names else ""))
    if not callable(func):
        raise TrainError(f"--blueprint: '{func_name}' in {path} is not a function, got {type(func).__name__}")
    try:
        takes_classes = bool(inspect.signature(func).parameters)
    except (TypeError, ValueError):
        takes_classes = True

    def call(num_classes: int) -> Any:
        try:
            return func(num_classes) if takes_classes else func()
        except (Exception, SystemExit) as e:  # sys.exit() in FUNC must not end tr-train silently
            raise TrainError(f"--blueprint: {func_name}({num_classes if takes_classes else ''}) failed: "
                             f"{user_frame(e, path)}{type(e).__name__}: {e}") from None

    def split(result: Any) -> tuple[Any, tuple[int, int, int] | None]:
        if isinstance(result, Layer):
            return result, None
        if (isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], Layer)
                and isinstance(result[1], (tuple, list)) and len(result[1]) == 3
                and all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in result[1])):
            return result[0], tuple(result[1])
        raise TrainError(f"--blueprint: {func_name} must return a BluePrint layer or (layer, (H, W, C)) "
                         f"with positive ints, got {result!r:.200}")

    # The shape is a property of the function: ask it once with the default class count.
    _, native = split(call(10))
    return ModelSource(f"{path}:{func_name}", f"blueprint {func_name} from {path}", native, 10,
                       lambda n: split(call(n))[0], explicit_shape=native is not None)


# --------------------------------------------------------------------------------------
# Geometry: which input a model gets from a dataset
# --------------------------------------------------------------------------------------


def has_spatial_reader(model: Any) -> bool:
    """Whether a layer of the flat ``arch.model`` other than its first, with the
    :class:`~tr_mlir.dialects.arch.ReadsSpatialMap` trait (fc, flatten: their weights depend on
    the H x W they read), reads an H x W > 1 map."""
    from tr_mlir.dialects.arch import ReadsSpatialMap, static_hwc

    for i, op in enumerate(model.layers()):
        if i > 0 and op.has_trait(ReadsSpatialMap):
            hwc = static_hwc(op.operands[0].type)
            if hwc is not None and hwc[0] * hwc[1] > 1:
                return True
    return False


@functools.lru_cache(maxsize=64)
def reads_fixed_map(layer: Any, shape: tuple[int, int, int], num_classes: int) -> bool:
    """Whether the model, planned (fused) at ``shape``, has a Flatten or FC layer other than its
    first that reads an H x W > 1 map (its classifier then needs that input size: LeNet-5, VGG).
    A fused ``gap_fc`` averages its map first, so it is not such a layer."""
    from tr_mlir.compile import arch_plan
    from tr_mlir.dialects.arch import ModelOp

    try:
        module = arch_plan(layer, shape, amp=False, fuse=True, num_classes=num_classes)
    except Exception:  # a model that does not plan at its own shape has no size to keep
        return False
    return has_spatial_reader(next(op for op in module.walk() if isinstance(op, ModelOp)))


@dataclass(frozen=True)
class InputPlan:
    """How a dataset reaches a model: ``mode`` None (as is), ``"pad"`` or ``"resize"`` to
    ``to`` = (H, W); ``reason`` in words."""

    mode: str | None
    to: tuple[int, int] | None
    reason: str


def _pad_or_resize(src: tuple[int, int], dst: tuple[int, int]) -> str:
    """``pad`` when ``dst`` is at least ``src`` and less than twice it in both dims, else ``resize``."""
    if all(s <= d < 2 * s for s, d in zip(src, dst)):
        return "pad"
    return "resize"


def plan_input(source: ModelSource, layer: Any, data_shape: tuple[int, int, int], num_classes: int) -> InputPlan:
    """The geometry rule of the module doc for ``layer`` (from ``source``) and a dataset of
    ``data_shape`` (H, W, C); :class:`TrainError` when a BluePrint's channels differ."""
    h, w, c = data_shape
    native = source.native
    if native is None:
        return InputPlan(None, None, "the model takes the dataset's shape")
    if source.explicit_shape and native[2] != c:
        raise TrainError(f"{source.label} reads {native[2]} channel(s) ({native[0]}x{native[1]}x{native[2]}), "
                         f"but the dataset has {c}")
    if (native[0], native[1]) == (h, w):
        return InputPlan(None, None, "the dataset has the model's input size")
    if not source.explicit_shape and not reads_fixed_map(layer, (native[0], native[1], c), num_classes):
        return InputPlan(None, None, "the model does not depend on the input size")
    mode = _pad_or_resize((h, w), (native[0], native[1]))
    why = "the model's input size" if source.explicit_shape else "its classifier reads a fixed-size map"
    return InputPlan(mode, (native[0], native[1]), why)


def input_table(datasets: dict[str, tuple[int, int, int]] | None = None) -> dict[str, dict[str, str]]:
    """For every zoo model and dataset shape: the input the model trains on, as text
    (``8x8x1``, ``32x32x1 (padded)``, ``32x32x1 (resized)``, or ``no: <reason>``) after
    :func:`plan_input` and an ArchPlan compile. ``datasets``: name -> (H, W, C) (default: digits,
    mnist, cifar10). The table of ``docs/tr-train.md``."""
    from tr_mlir.compile import arch_plan
    from tr_mlir.zoo import MODELS

    datasets = datasets or {"digits": (8, 8, 1), "mnist": (28, 28, 1), "cifar10": (32, 32, 3)}
    out: dict[str, dict[str, str]] = {}
    for name in MODELS:
        src = zoo_source(name)
        row = {}
        for ds, shape in datasets.items():
            layer = src.build(10)
            plan = plan_input(src, layer, shape, 10)
            hw = plan.to or shape[:2]
            final = (hw[0], hw[1], shape[2])
            try:
                arch_plan(layer, final, amp=False, fuse=True, num_classes=10)
            except Exception as e:
                row[ds] = "no: " + str(e).splitlines()[0]
                continue
            tag = {None: "", "pad": " (padded)", "resize": " (resized)"}[plan.mode]
            row[ds] = f"{final[0]}x{final[1]}x{final[2]}{tag}"
        out[name] = row
    return out


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
    from tr_mlir.memplan_summary import summarize

    from tr_mlir.memplan_summary import memory_lines

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
            spec: dict[str, Any], reuse: bool = True) -> list[Path]:
    """Run ``tr-compile`` pass by pass on the tree-form module ``tree_text``, writing
    ``out_dir/00-input.mlir`` and ``out_dir/NN-<pass>.mlir`` after each pass, and
    ``out_dir/replay.sh`` (each pass replayed with tr-opt and compared). ``spec``: the compile
    spec options of ``memplan-derive-shapes``; ``reuse``: ``memplan-assign-offsets``'s option.
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
    passes += MemplanCompilePass(**spec, reuse=reuse).phases()
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


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def best_of(epochs: list[dict[str, Any]]) -> tuple[float | None, int | None]:
    """(best val top-1, its epoch) over the epoch rows (the earliest epoch on ties)."""
    best, at = None, None
    for row in epochs:
        v = row.get("val_top1")
        if v is not None and not math.isnan(v) and (best is None or v > best):
            best, at = v, row["epoch"]
    return best, at


def make_report(config: dict[str, Any], timings: dict[str, float], epochs: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``--report-json`` document (schema in the module doc)."""
    import tr_mlir

    best, at = best_of(epochs)
    return {"schema_version": REPORT_SCHEMA_VERSION, "tool": PROG, "tr_mlir_version": tr_mlir.__version__,
            "config": config, "timings": {k: round(v, 4) for k, v in timings.items()},
            "best_val_top1": best, "best_epoch": at, "epochs": epochs}


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


def _supported_image(path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    kinds = FigureCanvasAgg(Figure()).get_supported_filetypes()
    ext = path.suffix.lstrip(".").lower()
    if ext not in kinds:
        raise TrainError(f"--plot {path}: unsupported image format '{ext or '(none)'}'; use one of "
                         f"{', '.join(sorted(kinds))} (e.g. curves.png)")


def _prepare_output(flag: str, path: Path, *, folder: bool = False) -> None:
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
    _atomic_write(tmp / RUN_STATE_FILE, json.dumps({**run, "sha256": digests}, indent=1) + "\n")
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
    _say(f"restored {folder} from {old}: a checkpoint save was interrupted between its two renames")


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
        _check_args(saved)
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


# --------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------


_SILENT = False  # ranks other than 0 of a multi-process (torchrun) run print nothing


def _say(text: str = "") -> None:
    if not _SILENT:
        print(text, flush=True)


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
    classifier, or an input the model cannot take, with the zoo models that can take it."""
    if CLASSIFIER_OP in why:
        return TrainError(f"{label} does not fit the {ds.name} classes: {why}{suffix}")
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
    global _SILENT
    from tr_mlir.lowering.gloo import launch_rank

    _SILENT = launch_rank() != 0  # torchrun: rank 0 alone prints (and writes the outputs)
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
            _say(f"resuming {resume_folder}: checkpoints go on into {args.save_dir} "
                 f"(--save-dir {args.save_dir}; pass --save-dir to write them elsewhere)")
    _check_args(args)
    device, device_text = resolve_device(args.device)
    choice = OPTIMIZERS[args.optimizer]
    lr = choice.default_lr if args.lr is None else args.lr
    for flag, path in (("--report-json", args.report_json), ("--plot", args.plot)):
        if path is not None:
            _prepare_output(flag, path)
    if args.plot is not None:
        _supported_image(args.plot)
    if args.save_dir is not None:
        check_save_dir(args.save_dir, resume_folder)
    for flag, path in (("--save-dir", args.save_dir), ("--dump-ir", args.dump_ir)):
        if path is not None:
            _prepare_output(flag, path, folder=True)

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
    _say("== data")
    _say(ds.describe())
    if plan.mode is not None:
        _say(f"input {data_shape[0]}x{data_shape[1]} -> {plan.to[0]}x{plan.to[1]} "
             f"({'zero-padded, centered' if plan.mode == 'pad' else 'resized bilinearly'}): {plan.reason}")
    _say(f"loaded in {timings['load_s']:.2f} s")

    from tr_mlir.loss import CrossEntropyLoss
    from tr_mlir.sched import CosineAnnealingLR
    from tr_mlir.task import CONFIG_FILE, Task, TaskError

    start_epoch = 0
    try:
        if resume_folder is not None:
            task = Task.load(resume_folder, device=device)
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
                           plugins=args.plugin, **_training_options(args))
            task = (layer.task(args.batch_size, **options) if source.build_for is not None  # with its weights
                    else Task(layer, ds.input_shape, ds.num_classes, args.batch_size, **options))
    except (TaskError, BluePrintError, ValueError) as e:
        if isinstance(e, TrainError):
            raise
        raise TrainError(str(e)) from None
    lead = task.rank == 0  # the process that prints and writes the outputs
    from tr_mlir.lowering.gloo import stop_on_sigterm

    stop_on_sigterm(PROG, task.rank, task.world_size)  # torchrun stops the others when a rank fails
    _SILENT = not lead
    h, w, c = ds.input_shape
    _say("== model")
    _say(f"{source.label} ({source.description}): input {h}x{w}x{c}, {ds.num_classes} classes; "
         f"device {device_text}" + (f", rank {task.rank} of {task.world_size}" if task.world_size > 1 else ""))

    config = {
        "model": None if args.blueprint or args.torch_model else args.model, "blueprint": args.blueprint,
        **({"torch_model": args.torch_model} if args.torch_model else {}), "dataset": args.dataset,
        "data_dir": None if args.data_dir is None else str(args.data_dir), "download": args.download,
        "epochs": args.epochs, "batch_size": args.batch_size, "optimizer": args.optimizer, "lr": lr,
        "weight_decay": args.weight_decay, "label_smoothing": args.label_smoothing, "warmup": args.warmup,
        "amp": args.amp, "fuse": args.fuse, "augment": args.augment, "init": args.init,
        "ema": args.ema, "ema_warmup": args.ema_warmup, "resize_schedule": args.resize_schedule, "conv_algo": task.conv_algo,
        "loss_scaler": args.loss_scaler, "scaler_init": args.scaler_init, "scaler_growth": args.scaler_growth,
        "scaler_backoff": args.scaler_backoff, "scaler_interval": args.scaler_interval, "device": args.device, "device_used": device, "seed": args.seed,
        "reuse": task.reuse, "drop_last": args.drop_last, "plugins": list(task.plugins), "dump_ir": None if args.dump_ir is None else str(args.dump_ir),
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
    pipeline = TrCompilePass(fuse=task.fuse, amp=task.amp, num_classes=task.num_classes, reuse=task.reuse, **spec)
    _say("== compile")
    _say(f"pipeline: builtin.module({pipeline.pipeline_pass_spec()})")
    if args.dump_ir is not None and lead:
        t0 = time.perf_counter()
        try:
            files = dump_ir(task.config()["model"], args.dump_ir, fuse=task.fuse, amp=task.amp,
                            num_classes=task.num_classes, spec=spec, reuse=task.reuse)
        except OSError as e:
            raise TrainError(f"--dump-ir {args.dump_ir}: {e}") from None
        except Exception as e:
            raise _rejected(source.label, ds, str(e), f" (IR up to the failing pass in {args.dump_ir})") from None
        timings["dump_ir_s"] = time.perf_counter() - t0
        _say(f"IR after each of {len(files) - 2} passes: {args.dump_ir}/ ({files[1].name} .. {files[-2].name}); "
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
    _say(f"compiled in {timings['compile_s']:.2f} s (ArchPlan, memory plan, {len(task.exe.graphs)} graphs captured); "
         f"{n_params:,} trainable parameters")
    _say("")
    _say(plan_table(task.exe.model, task.batch_size))
    _say("")
    _say("memory plan: " + memory_summary(task.exe.program))

    # -- train ---------------------------------------------------------------------------
    _say("")
    _say(f"== train: epochs {start_epoch + 1}..{args.epochs}, batch {task.batch_size}, {args.optimizer} "
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

    def write_outputs() -> None:
        timings["total_s"] = time.perf_counter() - t_start
        if args.report_json is not None and lead:
            try:
                _atomic_write(args.report_json, json.dumps(make_report(config, timings, history), indent=1) + "\n")
            except OSError as e:
                raise TrainError(f"--report-json {args.report_json}: {e}") from None

    try:
        for epoch in range(start_epoch + 1, args.epochs + 1):
            row = _train_epoch(task, ds, epoch, args.epochs, args.drop_last)
            timings["train_s"] += row["train_s"]
            timings["val_s"] += row["val_s"]
            history.append(row)
            new_best = best is None or (not math.isnan(row["val_top1"]) and row["val_top1"] > best)
            if new_best:
                best, best_epoch = row["val_top1"], epoch
            _say(f"epoch {epoch:>{len(str(args.epochs))}}/{args.epochs}  lr {row['lr']:.4g}  "
                 f"train loss {row['train_loss']:.4f}  val loss {row['val_loss']:.4f}  "
                 f"val top-1 {_pct(row['val_top1'])}  top-5 {_pct(row['val_top5'])}  "
                 + (f"EMA top-1 {_pct(row['val_ema_top1'])}  " if "val_ema_top1" in row else "")
                 + f"{row['train_images_per_s']:,.0f} img/s  {row['train_s'] + row['val_s']:.2f} s"
                 + ("  *" if new_best else ""))
            if args.save_dir is not None and lead:
                t0 = time.perf_counter()
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
    _say("")
    _say("== summary")
    if history:
        last = history[-1]
        best_row = next(r for r in history if r["epoch"] == best_epoch) if best_epoch is not None else last
        _say(f"best val top-1 {_pct(best)} at epoch {best_epoch} (val top-5 {_pct(best_row['val_top5'])}, "
             f"val loss {best_row['val_loss']:.4f})")
        _say(f"last epoch {last['epoch']}: val top-1 {_pct(last['val_top1'])}, train loss {last['train_loss']:.4f}, "
             f"val loss {last['val_loss']:.4f}")
        emas = [(r["val_ema_top1"], r["epoch"]) for r in history if "val_ema_top1" in r]
        if emas:
            top, at = max(emas, key=lambda e: (e[0], -e[1]))
            _say(f"EMA model: best val top-1 {_pct(top)} at epoch {at}, last epoch {_pct(history[-1].get('val_ema_top1'))}")
    new_rows = [r for r in history if r["epoch"] > start_epoch]
    trained = sum(r["train_s"] for r in new_rows)
    rate = f" ({ds.num_train * len(new_rows) / trained:,.0f} img/s)" if trained > 0 else ""
    _say(f"time: data {timings['load_s']:.1f} s, compile {timings['compile_s']:.1f} s"
         + (f", IR dump {timings['dump_ir_s']:.1f} s" if args.dump_ir else "")
         + f", train {timings['train_s']:.1f} s{rate}, validation {timings['val_s']:.1f} s"
         + (f", checkpoints {timings['checkpoint_s']:.1f} s" if args.save_dir else "")
         + f", total {timings['total_s']:.1f} s")
    outputs = [f"{what} {p}" for what, p in (("report", args.report_json), ("plot", args.plot),
                                             ("checkpoints", args.save_dir)) if p is not None]
    if outputs:
        _say("wrote " + ", ".join(outputs))
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
    _say(f"rewrote {best} from {resumed} (epoch {epoch}, the best): its save had not finished")


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

    try:
        t0 = time.perf_counter()
        row = task.fit((ds.train_x, ds.train_y), None, epochs=1, on_batch=on_batch, drop_last=drop_last)[0]
        train_s = time.perf_counter() - t0
        if not bar.disable:
            bar.set_postfix(loss=f"{row['train_loss']:.4f}", refresh=False)
            bar.update(n - done[0])
        t0 = time.perf_counter()
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
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    try:
        from tr_mlir.data import DatasetError
        from tr_mlir.lowering.backend import ArenaTooLargeError
        from tr_mlir.lowering.distributed import DistributedError

        try:
            status = run(args, explicit_flags(argv))
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


def _failed(status: int) -> int:
    """``status``, after telling a gloo process group this rank leaves without its closing barrier
    (the other ranks then fail at once instead of after the timeout: lowering/gloo.py)."""
    if "tr_mlir.lowering.gloo" in sys.modules:
        sys.modules["tr_mlir.lowering.gloo"].abandon(status)
    return status


if __name__ == "__main__":
    sys.exit(main())
