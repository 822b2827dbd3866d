"""``tr-train``'s command line: flags, their defaults and checks, the optimizer choices, the device.

The flags and what they do are documented in :mod:`tr_mlir.tools.tr_train` (the command) and
``docs/tr-train.md``; :func:`build_parser` is the parser, :func:`check_args` the checks argparse
cannot make, :func:`resolve_device` the ``--device`` rule.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from tr_mlir.errors import TrMlirError

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
    """Defaults printed after each help text (a default of None, a flag's, or an empty list of a
    repeatable option is spelled out in the text)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or isinstance(action.default, bool) or action.default == []:
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


def training_options(a: argparse.Namespace) -> dict[str, Any]:
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
                        "same numerics), numpy, or one algorithm (direct, pointwise, depthwise, winograd_2x2_3x3, "
                        "winograd_4x4_3x3) where it applies")
    p.add_argument("--reuse", action=argparse.BooleanOptionalAction, default=True,
                   help="place transient DTensors that are never live together in the same bytes; --no-reuse "
                        "gives each its own slot (the seed's layout: same numerics, more memory); on --resume, "
                        "the checkpoint's setting unless given (default: on)")
    p.add_argument("--fuse-fc-relu", action=argparse.BooleanOptionalAction, default=True,
                   help="run each FC and the ReLU next to it as one GEMM with a ReLU epilogue "
                        "(memplan-fuse-fc-relu); --no-fuse-fc-relu keeps them separate kernels (same numerics); "
                        "on --resume, the checkpoint's setting unless given (default: on)")
    p.add_argument("--fuse-bn-stats", action=argparse.BooleanOptionalAction, default=True,
                   help="let each Winograd conv write the batch-norm statistics of its output for the BN after "
                        "it (memplan-fuse-bn-stats); --no-fuse-bn-stats keeps the BN's own statistics pass (the "
                        "last bits differ: reproduces a run without it); on --resume, the checkpoint's setting "
                        "unless given (default: on)")
    p.add_argument("--fuse-grad-acc", action=argparse.BooleanOptionalAction, default=True,
                   help="let the Winograd input gradient at a residual join add the skip's gradient in its "
                        "output transform (memplan-fuse-grad-acc); --no-fuse-grad-acc keeps the separate "
                        "grad_accum pass (same numerics); on --resume, the checkpoint's setting unless given "
                        "(default: on)")
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

RESUMED_DEFAULTS: tuple[str, ...] = ("epochs", "device", "reuse", "fuse_fc_relu", "fuse_bn_stats", "fuse_grad_acc")
"""Options a resumed run takes from its checkpoint unless given again: ``--epochs`` (the cosine
schedule's length: resuming an interrupted run must not change it), ``--device``,
``--[no-]reuse``, ``--[no-]fuse-fc-relu``, ``--[no-]fuse-bn-stats``, ``--[no-]fuse-grad-acc``."""


def check_args(a: argparse.Namespace) -> None:
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
