"""The Task API: compile a BluePrint model and train it, mirroring the seed's ``DeepLearningTask``.

::

    import tr_mlir
    from tr_mlir import zoo
    task = tr_mlir.Task(zoo.resnet_tiny(10), (8, 8, 1), 10, batch_size=32,
                        optimizer=tr_mlir.optim.SGD(lr=0.05, momentum=0.9, weight_decay=5e-4))
    history = task.fit((train_x, train_y), (val_x, val_y), epochs=3)
    task.evaluate(val_x, val_y)      # {'loss': ..., 'top1': ..., 'top5': ...}
    probs = task.predict(val_x)      # (N, 10) softmax probabilities

A Task compiles the model (on first use, or explicitly with :meth:`Task.compile`) with ``tr-compile`` (ArchPlan, the five Compiler phases, the atlas) for
its batch size and dataset sizes (the sizes decide the last-batch variants), builds an
:class:`~tr_mlir.lowering.executable.Executable` (one arena, captured graphs) and drives it with
a :class:`~tr_mlir.lowering.runner.Runner` in the seed's step order (facts sheet section 13).

Data: inputs are NHWC ``float32`` arrays ``(N, H, W, C)`` of the task's ``input_shape``, labels
integer arrays ``(N,)`` in ``[0, num_classes)``. Where AMP widened the first conv's input channels
(to a multiple of 4) the Task zero-pads the channels itself. Anything else is a
:class:`TaskError` that names the argument, the expected and the given shape/dtype; so is an input
holding NaN or Inf (it would poison the BN running statistics for good).

Parameters (:meth:`Task.parameters`): the trainable tensors in the canonical order of DESIGN
section 3 (the seed's linearization: shortcut branch before main branch; a fused op lists its
parameters in its unfused order), named ``conv<i>.weight``, ``bn<j>.weight`` / ``bn<j>.bias``
(gamma, beta), ``fc<k>.weight`` / ``fc<k>.bias`` by order of appearance, identical for fused,
unfused and AMP compiles of one network. Layouts: conv weights KRSC ``(K, kh, kw, C/groups)``
(torch's OIHW transposed by ``(0, 2, 3, 1)``), the first conv with the user's input channels;
FC weights ``(out, in)`` over the NHWC-flattened input (an FC after a spatial map reads it in
H, W, C order, not torch's C, H, W); BN and bias vectors ``(C,)``. :meth:`Task.buffers`: the BN
running statistics ``bn<j>.running_mean`` / ``bn<j>.running_var`` (PyTorch conventions:
momentum weighs the new batch, unbiased running variance).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from tr_mlir import optim as _optim
from tr_mlir import sched as _sched
from tr_mlir.dialects.arch import ModelOp
from tr_mlir.dialects.memplan import MemRegion
from tr_mlir.loss import CrossEntropyLoss

__all__ = ["Task", "TaskError"]

R = MemRegion
CONFIG_FILE = "config.json"
STATE_FILE = "state.npz"
FORMAT = "tr-mlir-task-1"

from tr_mlir.errors import TrMlirError  # noqa: E402  (the root of TaskError)


class TaskError(TrMlirError, ValueError):
    """A bad argument to the Task API (shape, dtype, size, option, plugin), or a model the compiler or
    the backend cannot run; the message says which and why."""


@dataclass(frozen=True)
class _Entry:
    """One named tensor of the Task view: its DTensor, stored shape and the user-visible slice."""

    name: str
    tid: int
    store: tuple[int, ...]
    index: tuple[slice, ...]
    state: tuple[tuple[str, int], ...] = ()  # (suffix, DTensor id) of optimizer state

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(range(*s.indices(d))) for s, d in zip(self.index, self.store))


def _layer_of(name: str) -> int | None:
    if name.startswith("l") and "." in name:
        head = name.split(".", 1)[0][1:]
        if head.isdigit():
            return int(head)
    return None


def _vector(t: Any, user_c: int) -> tuple[tuple[int, ...], tuple[slice, ...]]:
    """A C-element parameter stored as (1, 1, 1, C): shown as (C,)."""
    c = t.shape[3]
    return (c,), (slice(0, c),)


def _conv_weight(t: Any, user_c: int) -> tuple[tuple[int, ...], tuple[slice, ...]]:
    """KRSC conv weights. The first conv's weight may hold more input channels than the data
    has (the plan pads the input's channels, ``arch-align-amp-input``); the user sees only the
    data's ``user_c`` channels."""
    full = tuple(slice(0, d) for d in t.shape)
    if t.region is R.W_FIRST_CONV and t.shape[3] > user_c:
        return tuple(t.shape), (*full[:3], slice(0, user_c))
    return tuple(t.shape), full


def _fc_weight(t: Any, user_c: int) -> tuple[tuple[int, ...], tuple[slice, ...]]:
    """FC weights (out, H*W*C) over the NHWC-flattened input."""
    o, f = t.shape[0], int(np.prod(t.shape[1:]))
    return (o, f), (slice(0, o), slice(0, f))


def _fc_has_bias(t: Any, ops: Sequence[Any]) -> bool:
    """The FC bias slot is planned for every FC; it is a parameter only when the op has ``bias``."""
    layer = _layer_of(t.name)
    return layer is not None and bool(ops[layer].params().get("bias"))


@dataclass(frozen=True)
class _Naming:
    """How the DTensors of one region get their canonical names (``conv0.weight``,
    ``bn3.running_var``, ...): the counter they number by (``starts``: 1 when a tensor of this
    region begins the next layer of that counter, 0 when it belongs to the current one), the name
    prefix and field, whether it is a buffer (BN statistics) rather than a parameter, its user
    view, and an optional filter."""

    counter: str
    starts: int
    prefix: str
    field: str
    view: Callable[[Any, int], tuple[tuple[int, ...], tuple[slice, ...]]]
    buffer: bool = False
    keep: Callable[[Any, Sequence[Any]], bool] | None = None


_NAMING: dict[MemRegion, _Naming] = {
    R.W_FIRST_CONV: _Naming("conv", 1, "conv", "weight", _conv_weight),
    R.W_DEEP_CONV: _Naming("conv", 1, "conv", "weight", _conv_weight),
    R.W_BN_WEIGHT: _Naming("bn", 1, "bn", "weight", _vector),
    R.W_BN_BIAS: _Naming("bn", 0, "bn", "bias", _vector),
    R.W_FC_WEIGHT: _Naming("fc", 1, "fc", "weight", _fc_weight),
    R.W_FC_BIAS: _Naming("fc", 0, "fc", "bias", _vector, keep=_fc_has_bias),
    R.B_NEXT_MEAN: _Naming("bn_stats", 1, "bn", "running_mean", _vector, buffer=True),
    R.B_NEXT_VAR: _Naming("bn_stats", 0, "bn", "running_var", _vector, buffer=True),
}
"""The canonical names of the Task view (module doc), keyed by the region of a DTensor, in the
plan's tensor order."""


def _tapped(items: Iterable[Any], tap: Callable[[int], None]) -> Iterable[Any]:
    """``items`` unchanged, calling ``tap(i)`` just before the ``i``-th is handed out."""
    for i, item in enumerate(items):
        tap(i)
        yield item


def _check_int(owner: str, name: str, v: Any, low: int = 1) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < low:
        raise TaskError(f"{owner}: {name} must be an int >= {low}, got {v!r}")
    return int(v)


def _check_finite(x: np.ndarray, where: str) -> None:
    """Raise :class:`TaskError` naming the samples of ``x`` (N, ...) that hold a NaN or an Inf.
    Such a sample would not just give a NaN loss: the batch-norm forward folds it into the running
    statistics, which the NaN-gated (skipped) update does not roll back, so every later evaluation
    would be NaN. The check is ``min`` and ``max`` (NaN and Inf propagate through them), so it
    allocates nothing of the input's size; only the error path looks for the samples."""
    if np.isfinite(x.min()) and np.isfinite(x.max()):
        return
    bad = np.flatnonzero(~np.isfinite(x.reshape(x.shape[0], -1)).all(axis=1))
    more = f" and {bad.size - 1} more" if bad.size > 1 else ""
    raise TaskError(f"{where}: x holds NaN or Inf (sample {int(bad[0])}{more}); expected finite inputs")


SAVE_PAUSE_ENV = "TR_MLIR_SAVE_PAUSE"
"""Test hook of the fault tests (``tests/test_faults.py``): ``TR_MLIR_SAVE_PAUSE=POINT:SECONDS``
makes saves stop ``SECONDS`` at the step ``POINT`` (:func:`save_pause`), so that a test can signal
the process exactly there. Unset (everywhere else) it costs one environment lookup per step."""


def save_pause(point: str, where: Path) -> None:
    """The test hook :data:`SAVE_PAUSE_ENV`: when it is ``POINT:SECONDS`` or ``POINT@NAME:SECONDS``
    and ``point`` is ``POINT`` (``*``: every point) of a save into a folder named ``NAME`` (its name
    up to the first dot: ``last`` for ``last.tmp``), print ``tr-mlir: save pause <point> <where>``
    on stderr and sleep ``SECONDS``. The points, in order: :meth:`Task.save`'s
    ``task-state-written``, ``task-config-written``, ``task-state-renamed``; tr-train's checkpoint
    save (:func:`tr_mlir.tools.train_outputs.save_checkpoint`) adds ``run-task-saved``,
    ``run-state-written``, ``run-old-moved`` and ``run-swapped``. A malformed value does nothing."""
    spec = os.environ.get(SAVE_PAUSE_ENV)
    if not spec:
        return
    target, _, seconds = spec.rpartition(":")
    name, _, folder = target.partition("@")
    try:
        delay = float(seconds)
    except ValueError:
        return
    if name in (point, "*") and folder in ("", where.name.split(".")[0]):
        print(f"tr-mlir: save pause {point} {where}", file=sys.stderr, flush=True)
        time.sleep(delay)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read_config(path: Path, folder: Path) -> dict[str, Any]:
    """``config.json`` read back: a JSON object of format :data:`FORMAT`, else :class:`TaskError`."""
    try:
        cfg = json.loads(path.read_text())
    except OSError as e:
        raise TaskError(f"Task.load: cannot read a saved task from {folder}: {path}: {e.strerror or e}") from e
    except ValueError as e:  # JSON, UTF-8 or an int of more digits than Python converts
        raise TaskError(f"Task.load: cannot read a saved task from {folder}: {path} is not JSON (truncated or "
                        f"damaged?): {e}") from e
    if not isinstance(cfg, dict) or cfg.get("format") != FORMAT:
        raise TaskError(f"Task.load: {path} is not a {FORMAT} file")
    return cfg


def _read_state(data: bytes, path: Path) -> dict[str, np.ndarray]:
    """The arrays of a ``state.npz`` archive's bytes, else :class:`TaskError` naming ``path``."""
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as archive:
            state = {name: archive[name] for name in archive.files}
    except Exception as e:  # a damaged archive fails in zipfile, zlib, the npy header parser, ...
        raise TaskError(f"Task.load: {path} is not a readable NumPy .npz archive (truncated or damaged?): "
                        f"{type(e).__name__}: {e}") from e
    odd = [k for k, v in state.items() if not isinstance(v, np.ndarray)]
    if odd:
        raise TaskError(f"Task.load: {path} is not a readable NumPy .npz archive: '{odd[0]}' is no array")
    return state


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


_CONFIG_KEYS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "model": (lambda v: isinstance(v, str), "a string (tree-form MLIR)"),
    "input_shape": (lambda v: isinstance(v, list) and len(v) == 3 and all(map(_is_int, v)), "[H, W, C]"),
    "num_classes": (_is_int, "an int"),
    "batch_size": (_is_int, "an int"),
    "optimizer": (lambda v: isinstance(v, dict), "an object (an optimizer's config())"),
    "scheduler": (lambda v: v is None or isinstance(v, dict), "null or an object (a scheduler's config())"),
    "label_smoothing": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool), "a number"),
    "amp": (lambda v: isinstance(v, bool), "a bool"),
    "fuse": (lambda v: isinstance(v, bool), "a bool"),
    "device": (lambda v: isinstance(v, str), "a string"),
    "seed": (_is_int, "an int"),
    "train_size": (lambda v: v is None or _is_int(v), "null or an int"),
    "val_size": (lambda v: v is None or _is_int(v), "null or an int"),
    "steps": (lambda v: _is_int(v) and v >= 0, "an int >= 0"),
    "epochs": (lambda v: _is_int(v) and v >= 0, "an int >= 0"),
}
"""The keys of ``config.json`` (:meth:`Task.config`) and what each must hold; value ranges are the
Task's own checks."""

_OPTIONAL_CONFIG_KEYS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "reuse": (lambda v: isinstance(v, bool), "a bool"),
    "state_sha256": (lambda v: isinstance(v, str), "a string"),
    "plugins": (lambda v: isinstance(v, list) and all(isinstance(p, str) for p in v), "a list of strings"),
    "torch_naming": (lambda v: v is None or isinstance(v, list), "null or a list (the imported module's names)"),
    "init": (lambda v: v in ("seed", "torch"), "'seed' or 'torch'"),
    "loss_scaler": (lambda v: v is None or isinstance(v, dict), "null or an object (GradScaler.config())"),
    "augment": (lambda v: v is None or isinstance(v, dict), "null or an object (an augmentation's config())"),
    "ema": (lambda v: v is None or isinstance(v, dict), "null or an object (EMA.config())"),
    "resize": (lambda v: v is None or (isinstance(v, list) and len(v) == 3 and all(map(_is_int, v))),
               "null or [start, end, switch_epoch]"),
    "conv_algo": (lambda v: isinstance(v, str), "a string"),
}
"""Keys that saves of earlier versions lack."""


def _config_problem(cfg: dict[str, Any]) -> str | None:
    """What is wrong with the types of a ``config.json`` read back, or None."""
    for key, (ok, want) in _CONFIG_KEYS.items():
        if key not in cfg:
            return f"missing key '{key}'"
        if not ok(cfg[key]):
            return f"'{key}' is {cfg[key]!r:.80}, expected {want}"
    for key, (ok, want) in _OPTIONAL_CONFIG_KEYS.items():
        if key in cfg and not ok(cfg[key]):
            return f"'{key}' is {cfg[key]!r:.80}, expected {want}"
    return None


class Task:
    """A model, its training configuration and its compiled executable (module doc).

    Args:
        model: a BluePrint layer (:mod:`tr_mlir.blueprint`), a zoo model name
            (:data:`tr_mlir.zoo.MODELS`), or a module holding one tree-form ``arch.model``.
        input_shape: ``(H, W, C)`` of one sample (NHWC).
        num_classes: classes of the softmax cross-entropy head.
        batch_size: samples per training step (and per inference batch).
        optimizer: :mod:`tr_mlir.optim` optimizer (default ``SGD(lr=0.1, momentum=0.9)``).
        scheduler: ``None`` (constant learning rate) or :class:`tr_mlir.sched.CosineAnnealingLR`
            (in epochs, evaluated per batch).
        loss: :class:`tr_mlir.CrossEntropyLoss`.
        amp: fp16 activations and working weights, fp32 master weights, loss scaling.
        fuse: compile with fused blocks (same numerics as unfused in one precision).
        device: ``'cpu'``, ``'gpu'`` (``'cuda'``: the CUDA backend,
            :mod:`tr_mlir.lowering.cuda.backend`; launched by ``torchrun`` with several processes
            it trains data-parallel, each rank on its shard of the data, and so does ``'cpu'``
            over gloo, :mod:`tr_mlir.lowering.gloo`), ``'auto'`` (the GPU when
            CuPy imports and a CUDA device answers, else the CPU), or a backend object (tests:
            the CUDA backend over the CPU emulator).
        seed: parameter initialization, data order, dropout.
        reuse: place transient DTensors by lifetime (``memplan-assign-offsets``): tensors never live
            at the same time share bytes. ``False`` keeps the seed's one-slot-per-tensor layout
            (same numerics, bit for bit; more memory).
        init: ``'seed'`` (the plan's rules: trunc-normal convs, Kaiming-uniform FC weights, zero
            biases) or ``'torch'`` (PyTorch's ``nn.Conv2d`` / ``nn.Linear`` defaults);
            :mod:`tr_mlir.inits`.
        loss_scaler: AMP only: ``None`` (the seed's rule: 8192, halved on overflow, no growth) or a
            :class:`tr_mlir.amp.GradScaler` (PyTorch's GradScaler rule); :mod:`tr_mlir.amp`.
        augment: a :mod:`tr_mlir.augment` transform (e.g. ``augment.preset('cifar')``) applied by
            :meth:`fit` (only) to every training batch on a background thread, seeded by the Task
            seed and the epoch; :meth:`train_step` takes its batch as given; ``None``: none.
        resize: progressive resizing ``(start, end, switch_epoch)``: :meth:`fit` trains epochs
            ``0 .. switch_epoch - 1`` (counted over the task's life, :attr:`epochs`) at resolution
            ``start`` with the ``train_base`` / ``train_last`` variants and the later ones at
            ``end`` with ``train_lowres`` / ``train_lowres_last``, both compiled into the one plan
            and arena (no recompile at the switch); training batches are resized on the host
            (bilinear, :func:`tr_mlir.data.resize_batch`) from ``input_shape`` to the epoch's
            resolution (heights; the width keeps the aspect ratio). Validation and inference stay
            at ``input_shape``. The model must accept every resolution (a global pooling before the
            classifier); ``None``: every epoch at ``input_shape``.
        ema: ``None``, a decay in [0, 1) or a :class:`tr_mlir.ema.EMA`: keep an exponential moving
            average of the weights in the plan, updated by the ``EMA_UPDATE`` graph after every
            optimizer step (:mod:`tr_mlir.ema`); ``evaluate(..., ema=True)`` and :meth:`fit`'s
            ``val_ema_*`` columns use it.
        conv_algo: the conv algorithms (``memplan-select-conv-algo``): ``'auto'`` (the cost
            rule), ``'im2col'`` (the run-time rule before that pass: same numerics, bit for bit),
            ``'numpy'``, or one algorithm (``'direct'``, ...) for every conv it applies to.
        plugins: plugin files or module names loaded before the model is built
            (:func:`tr_mlir.extend.load_plugin`: their ops, fusion steps, descriptors and kernels),
            kept in :meth:`config` so :meth:`load` loads them again. Installed plugins (the
            ``tr_mlir.plugins`` entry points) are always loaded.

    Raises:
        TaskError: a bad argument, or ``device='gpu'`` on a machine without a usable GPU.
    """

    def __init__(self, model: Any, input_shape: Sequence[int], num_classes: int, batch_size: int, *,
                 optimizer: _optim.Optimizer = _optim.SGD(lr=0.1, momentum=0.9),
                 scheduler: _sched.CosineAnnealingLR | None = None,
                 loss: CrossEntropyLoss = CrossEntropyLoss(label_smoothing=0.0),
                 amp: bool = False, fuse: bool = False, device: str = "cpu", seed: int = 0,
                 reuse: bool = True, init: str = "seed", loss_scaler: Any = None, augment: Any = None,
                 ema: Any = None, resize: Sequence[int] | None = None, conv_algo: str = "auto",
                 plugins: Sequence[str | os.PathLike] = ()):
        if isinstance(input_shape, (str, bytes)) or not isinstance(input_shape, Sequence) or len(input_shape) != 3:
            raise TaskError(f"Task: input_shape must be (H, W, C), got {input_shape!r}")
        self.input_shape = tuple(_check_int("Task", f"input_shape[{i}]", d) for i, d in enumerate(input_shape))
        self.num_classes = _check_int("Task", "num_classes", num_classes)
        self.batch_size = _check_int("Task", "batch_size", batch_size)
        if not isinstance(optimizer, _optim.Optimizer):
            raise TaskError(f"Task: optimizer must be a tr_mlir.optim optimizer (SGD, Adam, AdamW, LARS), "
                            f"got {optimizer!r}")
        if scheduler is not None and not isinstance(scheduler, _sched.CosineAnnealingLR):
            raise TaskError(f"Task: scheduler must be None or tr_mlir.sched.CosineAnnealingLR, got {scheduler!r}")
        if not isinstance(loss, CrossEntropyLoss):
            raise TaskError(f"Task: loss must be tr_mlir.CrossEntropyLoss, got {loss!r}")
        for name, flag in (("amp", amp), ("fuse", fuse), ("reuse", reuse)):
            if not isinstance(flag, bool):
                raise TaskError(f"Task: {name} must be a bool, got {flag!r}")
        if isinstance(plugins, (str, bytes, os.PathLike)) or not isinstance(plugins, Sequence):
            raise TaskError(f"Task: plugins must be a list of plugin files or module names, got {plugins!r}")
        from tr_mlir.errors import PluginError
        from tr_mlir.extend import load_plugins

        try:
            load_plugins(plugins)
        except PluginError as e:
            raise TaskError(f"Task: {e}") from e
        from tr_mlir.extend import plugin_spec

        self.plugins = [plugin_spec(p) for p in plugins]  # absolute paths: a save loads from anywhere
        self._backend = None
        if isinstance(device, str):
            if device not in ("cpu", "auto", "gpu", "cuda"):
                raise TaskError(f"Task: device must be 'cpu', 'auto' or 'gpu', got {device!r}")
            if device != "cpu":
                from tr_mlir.lowering.cuda.backend import cuda_available

                ok, why = cuda_available()
                if not ok and device != "auto":
                    raise TaskError(f"Task: device={device!r} needs a CUDA GPU with CuPy, but {why}; use "
                                    f"device='cpu' or device='auto'")
                device = "gpu" if ok else "cpu"
        elif hasattr(device, "kernels") and hasattr(device, "capture"):
            self._backend, device = device, "gpu" if getattr(device, "target", None) == "cuda" else "cpu"
        else:
            raise TaskError(f"Task: device must be 'cpu', 'auto' or 'gpu', got {device!r}")
        self.seed = _check_int("Task", "seed", seed, low=0)
        self.optimizer, self.scheduler, self.loss = optimizer, scheduler, loss
        self.amp, self.fuse, self.device, self.reuse = amp, fuse, device, reuse
        from tr_mlir.passes.memplan_select_conv_algo import check_value

        if not isinstance(conv_algo, str) or check_value(conv_algo):
            raise TaskError(f"Task: conv_algo: {check_value(conv_algo) if isinstance(conv_algo, str) else repr(conv_algo)}")
        self.conv_algo = conv_algo
        from tr_mlir import amp as _amp
        from tr_mlir.inits import INITS

        if init not in INITS:
            raise TaskError(f"Task: init must be one of {', '.join(map(repr, INITS))}, got {init!r}")
        if loss_scaler is not None and not isinstance(loss_scaler, _amp.GradScaler):
            raise TaskError(f"Task: loss_scaler must be None or tr_mlir.amp.GradScaler, got {loss_scaler!r}")
        if loss_scaler is not None and not amp:
            raise TaskError("Task: loss_scaler needs amp=True (fp32 training has no loss scale)")
        if augment is not None and not callable(augment):
            raise TaskError(f"Task: augment must be None or a tr_mlir.augment transform, got {augment!r}")
        self.init, self.loss_scaler, self.augment = init, loss_scaler, augment
        from tr_mlir.ema import EMA

        if ema is not None and not isinstance(ema, EMA):
            try:
                ema = EMA(ema)
            except ValueError as e:
                raise TaskError(f"Task: ema must be None, a decay in [0, 1) or tr_mlir.ema.EMA, got {ema!r}") from e
        self.ema = ema
        self._ema_count = 0  # EMA updates made (t of tr_mlir.ema)
        if resize is not None:
            if isinstance(resize, (str, bytes)) or not isinstance(resize, Sequence) or len(resize) != 3:
                raise TaskError(f"Task: resize must be (start, end, switch_epoch), got {resize!r}")
            resize = (_check_int("Task", "resize start", resize[0]), _check_int("Task", "resize end", resize[1]),
                      _check_int("Task", "resize switch_epoch", resize[2], low=0))
            h, w = self.input_shape[:2]
            for r in resize[:2]:
                if r * w % h:
                    raise TaskError(f"Task: resize resolution {r} gives the {h}x{w} input no whole width")
        self.resize = resize
        self._scaler_state = [0.0, 0]  # GradScaler: host copy of (scale, growth tracker)
        self._tree = self._emit(model)
        self.train_size: int | None = None
        self.val_size: int | None = None
        self.exe = None
        self.runner = None
        self.steps = 0  # optimizer steps taken
        self.epochs = 0  # fit epochs completed
        self._bn_dirty = True
        self.compile_seconds = 0.0
        self.torch_naming = None  # set by tr_mlir.frontend.torch: the imported module's names (state_dict)

    # -- model and compile -------------------------------------------------------------

    def _emit(self, model: Any) -> ModuleOp:
        from tr_mlir.blueprint import Layer, emit
        from tr_mlir.zoo import MODELS

        if isinstance(model, ModuleOp):
            tree = model.clone()
            models = [op for op in tree.walk() if isinstance(op, ModelOp)]
            if len(models) != 1:
                raise TaskError(f"Task: the module must hold one 'arch.model', got {len(models)}")
            m = models[0]
            if tuple(m.input_hwc) != self.input_shape:
                raise TaskError(f"Task: the module's model reads {tuple(m.input_hwc)}, input_shape is {self.input_shape}")
            return tree
        if isinstance(model, str):
            if model not in MODELS:
                raise TaskError(f"Task: unknown zoo model {model!r}; available: {', '.join(MODELS)}")
            model = MODELS[model].blueprint(self.num_classes)
        if not isinstance(model, Layer):
            raise TaskError(f"Task: model must be a BluePrint layer, a zoo model name or an arch module, got {model!r}")
        return emit(model, self.input_shape, num_classes=self.num_classes, amp=self.amp, fuse=self.fuse)

    def compile(self, train_size: int | None = None, val_size: int | None = None) -> Task:
        """Compile for these dataset sizes (default: the previous ones, else one batch) and build
        the executable. A recompile (other sizes) keeps parameters, buffers, optimizer state and
        loss scale. Returns ``self``. Raises :class:`TaskError` for bad sizes or a model the
        compiler rejects (the message names the op), and
        :class:`~tr_mlir.lowering.backend.ArenaTooLargeError` (a ``MemoryError``) before allocating
        a plan larger than the memory available (the message names the bytes and a batch size
        that fits)."""
        from xdsl.utils.exceptions import DiagnosticException, PassFailedException, VerifyException

        from tr_mlir.compile import make_context
        from tr_mlir.lowering.executable import Executable
        from tr_mlir.lowering.runner import Runner
        from tr_mlir.passes.tr_compile import TrCompilePass

        train_size = _check_int("Task.compile", "train_size", train_size if train_size is not None
                                else (self.train_size or self.batch_size))
        val_size = _check_int("Task.compile", "val_size", val_size if val_size is not None
                              else (self.val_size or self.batch_size))
        if self.exe is not None and (train_size, val_size) == (self.train_size, self.val_size):
            return self
        kept = self._snapshot() if self.exe is not None else None
        t0 = time.perf_counter()
        module = self._tree.clone()
        backend = self._make_backend()
        try:
            TrCompilePass(fuse=self.fuse, amp=self.amp, num_classes=self.num_classes, batch_size=self.batch_size,
                          train_size=train_size, val_size=val_size, optimizer=self.optimizer.kind.value,
                          target=backend.target.value, world_size=self.world_size,
                          reuse=self.reuse, ema=self.ema is not None, conv_algo=self.conv_algo,
                          **({} if self.resize is None else {"train_res": self.resize[0],
                                                             "train_res_end": self.resize[1]})
                          ).apply(make_context(), module)
            module.verify()
        except (DiagnosticException, PassFailedException, VerifyException) as e:
            raise TaskError(f"Task.compile: the compiler rejected the model: {e}") from e
        self.module = module
        from tr_mlir.lowering.backend import ArenaTooLargeError as _ArenaTooLarge
        from tr_mlir.lowering.executable import ExecutableError

        try:
            exe = Executable(module, backend=backend, seed=self.seed, decay_all=self.optimizer.decay_all)
        except _ArenaTooLarge:
            raise  # keeps its documented type (a MemoryError naming a batch size that fits)
        except (ExecutableError, TrMlirError) as e:
            raise TaskError(f"Task.compile: the {backend.name} backend cannot run the model: {e}") from e
        self.exe, self.train_size, self.val_size = exe, train_size, val_size
        for name, value in self.optimizer.scalars().items():
            if exe.has(name):
                exe.set_scalar(name, value)
        exe.set_scalar("label_smoothing", self.loss.label_smoothing)
        exe.scalar("dropout_seed")[:] = np.array([self.seed & 0x7FFFFFFF, 0], np.int32)
        exe.set_scalar("lr", self._lr_at(self.steps))
        self._entries()
        if kept is None and self.init == "torch":
            from tr_mlir.inits import torch_init

            values = torch_init([(e.name, e.shape) for e in self._params], self.seed)
            for e in self._params:
                if e.name in values:
                    self._put(e, values[e.name])
        if kept is None and self.ema is not None:
            self._reset_ema()
        if kept is None and self.loss_scaler is not None:
            exe.set_scalar("scaling", self.loss_scaler.init_scale)
            self._scaler_state = [float(self.loss_scaler.init_scale), 0]
        if kept is not None:
            self._restore(kept)
        self.runner = Runner(exe)
        self.runner.after_step = self._after_step
        if self.ema is not None:
            decay = exe.scalar("ema_decay")

            def before() -> None:
                decay[0] = self.ema.decay_at(self._ema_count)

            self.runner.before_step = before
        self.runner.prepare_weights()
        self._bn_dirty = True
        self.compile_seconds = time.perf_counter() - t0
        return self

    def _ready(self) -> None:
        if self.exe is None:
            self.compile()

    def _make_backend(self) -> Any:
        """The backend of ``device`` (created once; the CUDA backend joins the process group of a
        ``torchrun`` launch)."""
        if self._backend is None:
            if self.device == "gpu":
                from tr_mlir.lowering.cuda.backend import CudaBackend

                self._backend = CudaBackend()
            else:  # a torchrun launch of several processes: gloo (lowering/gloo.py), else NumPy alone
                from tr_mlir.lowering.gloo import cpu_backend

                self._backend = cpu_backend()
        return self._backend

    def _comm(self) -> Any:
        """The backend's data-parallel communicator (gloo on the CPU, NCCL on GPUs), or None."""
        backend = self._make_backend()
        comm = getattr(backend, "comm", None)
        return comm if comm is not None else getattr(getattr(backend, "device", None), "comm", None)

    @property
    def world_size(self) -> int:
        """Data-parallel processes (the communicator's: NCCL on GPUs, gloo on the CPU; 1 alone)."""
        comm = self._comm()
        return 1 if comm is None else int(comm.size)

    @property
    def rank(self) -> int:
        """This process's data-parallel rank (0 for one process)."""
        comm = self._comm()
        return 0 if comm is None else int(comm.rank)

    def _shard(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """This rank's samples of ``(x, y)`` (:func:`tr_mlir.lowering.distributed.shard`)."""
        if self.world_size == 1:
            return x, y
        from tr_mlir.lowering.distributed import shard

        return shard(x, y, self.rank, self.world_size)

    @property
    def steps_per_epoch(self) -> int:
        """Optimizer steps of one epoch over the compiled ``train_size`` (the last batch counts)."""
        per_rank = -(-(self.train_size or self.batch_size) // self.world_size)
        return -(-per_rank // self.batch_size)

    def _lr_at(self, step: int) -> float:
        base = self.optimizer.lr
        if self.scheduler is None:
            return base
        return self.scheduler.lr(base, step / self.steps_per_epoch)

    @property
    def lr(self) -> float:
        """The learning rate of the next optimizer step."""
        return self._lr_at(self.steps)

    def _epoch_resolution(self, epoch: int) -> tuple[bool, tuple[int, int] | None]:
        """``(lowres variants?, (H, W) to resize the batches to or None)`` of epoch ``epoch``
        (0-based) under :attr:`resize`."""
        if self.resize is None:
            return False, None
        start, end, switch = self.resize
        lowres = epoch >= switch and end != start
        res = end if epoch >= switch else start
        h, w = self.input_shape[:2]
        return lowres, None if res == h else (res, res * w // h)

    def _after_step(self) -> None:
        if self.ema is not None or self.loss_scaler is not None:
            found = self.exe.get_scalar("has_nan") != 0  # a skipped step: no EMA update either (tr_mlir.ema)
            self._ema_count += int(self.ema is not None and not found)
            if self.loss_scaler is not None:
                self._scaler_step(found)

    def _reset_ema(self) -> None:
        """EMA := the current weights, no update made yet (AveragedModel's deep copy)."""
        for e in self._params:
            self.exe.view(self._ema_tid[e.name])[...] = self.exe.view(e.tid)
        self._ema_count = 0

    def ema_parameters(self) -> list[tuple[str, np.ndarray]]:
        """``[(name, float32 array copy)]`` of the EMA of every parameter (names and layouts of
        :meth:`parameters`). Raises :class:`TaskError` without ``ema``."""
        self._ready()
        if self.ema is None:
            raise TaskError("Task.ema_parameters: the task keeps no EMA (Task(ema=DECAY))")
        return [(e.name, self._get(_Entry(e.name, self._ema_tid[e.name], e.store, e.index))) for e in self._params]

    def _scaler_step(self, found: bool) -> None:
        """GradScaler rule after one step (:mod:`tr_mlir.amp`; ``found``: ``has_nan``), writes ``scaling``."""
        scale, tracker = self.loss_scaler.update(self._scaler_state[0], self._scaler_state[1], found)
        self._scaler_state = [scale, tracker]
        self.exe.set_scalar("scaling", scale)

    @property
    def loss_scale(self) -> float:
        """The AMP loss scale in the arena (1.0 in fp32): with the seed's rule 8192 at the start,
        halved (floor 1) on every step whose gradients overflow, which is skipped; with a
        :class:`tr_mlir.amp.GradScaler`, its rule."""
        self._ready()
        return self.exe.get_scalar("scaling")

    # -- the Task view of the arena ------------------------------------------------------

    def _entries(self) -> None:
        """Canonical parameter / buffer names over the plan's DTensors (module doc)."""
        from tr_mlir.passes._descriptors_program import layers

        exe = self.exe
        ops = layers(exe.model)
        params: list[_Entry] = []
        buffers: list[_Entry] = []
        counters = {kind: -1 for kind in ("conv", "bn", "fc", "bn_stats")}
        for t in exe.tensors:
            rule = _NAMING.get(t.region)
            if not t.slot or rule is None:
                continue
            if rule.keep is not None and not rule.keep(t, ops):
                continue
            counters[rule.counter] += rule.starts
            store, index = rule.view(t, self.input_shape[2])
            name = f"{rule.prefix}{counters[rule.counter]}.{rule.field}"
            if rule.buffer:
                buffers.append(_Entry(name, t.id, store, index))
            else:
                state = tuple((s, exe.ids[t.name + s]) for s in (".m", ".v") if exe.has(t.name + s))
                params.append(_Entry(name, t.id, store, index, state))
        self._params = params
        self._buffers = buffers
        self._ema_tid = {e.name: exe.ids[exe.tensors[e.tid].name + ".ema"] for e in params
                         if exe.has(exe.tensors[e.tid].name + ".ema")}
        self._prev = {e.name: exe.ids[exe.tensors[e.tid].name.replace("bn_next_", "bn_prev_")] for e in buffers}

    def _get(self, e: _Entry) -> np.ndarray:
        return np.array(self.exe.to_host(self.exe.view(e.tid).reshape(e.store))[e.index], dtype=np.float32)

    def _put(self, e: _Entry, value: np.ndarray, tid: int | None = None) -> None:
        view = self.exe.view(e.tid if tid is None else tid).reshape(e.store)
        view.fill(0)
        view[e.index] = value

    def parameters(self) -> list[tuple[str, np.ndarray]]:
        """``[(name, float32 array copy)]`` of the trainable parameters, canonical order and
        layouts (module doc)."""
        self._ready()
        return [(e.name, self._get(e)) for e in self._params]

    def buffers(self) -> list[tuple[str, np.ndarray]]:
        """``[(name, float32 array copy)]`` of the BN running statistics (module doc)."""
        self._ready()
        return [(e.name, self._get(e)) for e in self._buffers]

    def state_dict(self) -> dict[str, Any]:
        """The trained parameters and BN buffers as a PyTorch ``state_dict`` of float32 CPU
        ``torch.Tensor`` s in torch layouts (conv OIHW): under the imported module's own names for a
        Task from :meth:`tr_mlir.frontend.torch.TorchModel.task` (``module.load_state_dict`` takes
        it), else under the canonical names of :meth:`parameters` / :meth:`buffers`. See
        :func:`tr_mlir.export.state_dict`; raises :class:`tr_mlir.export.ExportError` without torch."""
        from tr_mlir.export import state_dict

        return state_dict(self)

    def _load(self, entries: list[_Entry], values: Any, what: str) -> list[tuple[_Entry, np.ndarray]]:
        try:
            given = dict(values.items() if isinstance(values, Mapping) else values)
        except (TypeError, ValueError):
            raise TaskError(f"Task.load_{what}: expected {{name: array}} or [(name, array), ...] as "
                            f"task.{what}() returns, got {type(values).__name__}") from None
        names = [e.name for e in entries]
        missing = [n for n in names if n not in given]
        unexpected = [n for n in given if n not in names]
        if missing or unexpected:
            raise TaskError(f"Task.load_{what}: expected exactly the names of task.{what}(); "
                            f"missing {missing[:6]}, unexpected {unexpected[:6]}")
        out = []
        for e in entries:
            a = np.asarray(given[e.name])
            if a.shape != e.shape or not np.issubdtype(a.dtype, np.floating):
                raise TaskError(f"Task.load_{what}: '{e.name}' must be a float array of shape {e.shape}, "
                                f"got {a.dtype} {a.shape}")
            out.append((e, a))
        return out

    def load_parameters(self, params: Mapping[str, np.ndarray] | Iterable[tuple[str, np.ndarray]]) -> None:
        """Set every parameter from ``[(name, array)]`` or ``{name: array}`` (names, shapes and
        layouts of :meth:`parameters`; all of them). Optimizer state is left as it is. Raises
        :class:`TaskError` for another container, a missing or unknown name, or a wrong shape or
        dtype (nothing is written then)."""
        self._ready()
        for e, a in self._load(self._params, params, "parameters"):
            self._put(e, a)
        if self.ema is not None:
            self._reset_ema()
        self.runner.prepare_weights()
        self._bn_dirty = True

    def load_buffers(self, buffers: Mapping[str, np.ndarray] | Iterable[tuple[str, np.ndarray]]) -> None:
        """Set the BN running statistics (names and shapes of :meth:`buffers`); errors as
        :meth:`load_parameters`."""
        self._ready()
        for e, a in self._load(self._buffers, buffers, "buffers"):
            self._put(e, a)
            self._put(e, a, self._prev[e.name])
        self._bn_dirty = True

    _STATE_SCALARS = ("scaling", "step", "has_nan")

    def _snapshot(self) -> dict[str, np.ndarray]:
        """Parameters, buffers, optimizer state and state scalars (save / recompile)."""
        out: dict[str, np.ndarray] = {}
        for e in self._params:
            out[f"param/{e.name}"] = self._get(e)
            for suffix, tid in e.state:
                out[f"state/{e.name}{suffix}"] = np.array(self.exe.to_host(self.exe.view(tid)).reshape(e.store),
                                                          np.float32)
        for e in self._buffers:
            out[f"buffer/{e.name}"] = self._get(e)
        for name in self._STATE_SCALARS:
            if self.exe.has(name):
                out[f"scalar/{name}"] = np.array(self.exe.get_scalar(name), np.float64)
        out["scalar/dropout_seed"] = np.array(self.exe.to_host(self.exe.scalar("dropout_seed")), np.int64)
        if self.loss_scaler is not None:
            out["scalar/scaler_growth_tracker"] = np.array(self._scaler_state[1], np.float64)
        if self.ema is not None:
            for e in self._params:
                out[f"ema/{e.name}"] = np.array(self.exe.to_host(self.exe.view(self._ema_tid[e.name])).reshape(e.store),
                                                np.float32)
            out["scalar/ema_updates"] = np.array(self._ema_count, np.float64)
        return out

    def _state_layout(self) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """Every array :meth:`save` writes into ``state.npz`` for this task: key -> (shape, dtype)."""
        f32 = np.dtype(np.float32)
        want: dict[str, tuple[tuple[int, ...], np.dtype]] = {}
        for e in self._params:
            want[f"param/{e.name}"] = (e.shape, f32)
            want.update({f"state/{e.name}{suffix}": (e.store, f32) for suffix, _ in e.state})
        want.update({f"buffer/{e.name}": (e.shape, f32) for e in self._buffers})
        want.update({f"scalar/{name}": ((), np.dtype(np.float64)) for name in self._STATE_SCALARS
                     if self.exe.has(name)})
        want["scalar/dropout_seed"] = ((2,), np.dtype(np.int64))
        if self.loss_scaler is not None:
            want["scalar/scaler_growth_tracker"] = ((), np.dtype(np.float64))
        if self.ema is not None:
            want.update({f"ema/{e.name}": (e.store, f32) for e in self._params})
            want["scalar/ema_updates"] = ((), np.dtype(np.float64))
        return want

    def _check_state(self, state: Mapping[str, np.ndarray], source: Path) -> None:
        """Raise :class:`TaskError` unless ``state`` (a :meth:`save` archive read back) holds exactly
        the arrays :meth:`save` writes for this task (parameters, optimizer state, buffers, state
        scalars), each with its shape and dtype, and scalars a save can hold (finite numbers, a
        dropout RNG state of int32 values)."""
        def keys(names: list[str]) -> str:
            more = f" and {len(names) - 6} more" if len(names) > 6 else ""
            why = ("saved from another model?" if any(k.startswith(("param/", "buffer/")) for k in names)
                   else "saved with another optimizer or precision?")
            return f"{', '.join(names[:6])}{more} ({why})"

        want = self._state_layout()
        missing = [k for k in want if k not in state]
        if missing:
            raise TaskError(f"Task.load: {source} lacks {keys(missing)}")
        unexpected = sorted(k for k in state if k not in want)
        if unexpected:
            raise TaskError(f"Task.load: {source} holds arrays this task does not have: {keys(unexpected)}")
        for key, (shape, dtype) in want.items():
            a = state[key]
            if a.shape != shape:
                raise TaskError(f"Task.load: {source}: '{key}' has shape {a.shape}, the model's is {shape} "
                                f"(saved from another model?)")
            if a.dtype != dtype:
                raise TaskError(f"Task.load: {source}: '{key}' is {a.dtype}, a save writes {dtype}")
            if key.startswith("scalar/") and not np.isfinite(a).all():
                raise TaskError(f"Task.load: {source}: '{key}' is {a.tolist()}, expected finite numbers")
        seed = state["scalar/dropout_seed"]
        info = np.iinfo(np.int32)
        if seed.min() < info.min or seed.max() > info.max:
            raise TaskError(f"Task.load: {source}: 'scalar/dropout_seed' is {seed.tolist()}, expected int32 values")

    def _restore(self, state: Mapping[str, np.ndarray]) -> None:
        exe = self.exe
        for e in self._params:
            self._put(e, state[f"param/{e.name}"])
            for suffix, tid in e.state:
                key = f"state/{e.name}{suffix}"
                if key in state:
                    exe.view(tid).reshape(e.store)[...] = np.asarray(state[key], np.float32)
        for e in self._buffers:
            self._put(e, state[f"buffer/{e.name}"])
            self._put(e, state[f"buffer/{e.name}"], self._prev[e.name])
        for name in self._STATE_SCALARS:
            key = f"scalar/{name}"
            if key in state and exe.has(name):
                exe.set_scalar(name, float(state[key]))
        if "scalar/dropout_seed" in state:
            exe.scalar("dropout_seed")[:] = np.asarray(state["scalar/dropout_seed"], np.int32)
        if self.ema is not None:
            for e in self._params:
                if f"ema/{e.name}" in state:
                    exe.view(self._ema_tid[e.name]).reshape(e.store)[...] = np.asarray(state[f"ema/{e.name}"], np.float32)
            self._ema_count = int(state.get("scalar/ema_updates", self._ema_count))
        if self.loss_scaler is not None:
            self._scaler_state = [float(exe.get_scalar("scaling")),
                                  int(state.get("scalar/scaler_growth_tracker", 0))]
        exe.set_scalar("lr", self._lr_at(self.steps))

    # -- data validation ---------------------------------------------------------------

    def _x(self, x: Any, where: str, *, allow_empty: bool = False) -> np.ndarray:
        h, w, c = self.input_shape
        if not isinstance(x, np.ndarray) or x.dtype != np.float32 or x.ndim != 4 or x.shape[1:] != (h, w, c):
            got = f"{x.dtype} {x.shape}" if isinstance(x, np.ndarray) else type(x).__name__
            raise TaskError(f"{where}: expected x of shape (N, {h}, {w}, {c}) float32 (NHWC), got {got}")
        if x.shape[0] < 1:
            if allow_empty:
                return x
            raise TaskError(f"{where}: expected at least one sample, got 0")
        _check_finite(x, where)
        return x

    def _y(self, y: Any, n: int, where: str) -> np.ndarray:
        if not isinstance(y, np.ndarray) or not np.issubdtype(y.dtype, np.integer) or y.shape != (n,):
            got = f"{y.dtype} {y.shape}" if isinstance(y, np.ndarray) else type(y).__name__
            raise TaskError(f"{where}: expected y of shape ({n},) with integer labels, got {got}")
        if n and (int(y.min()) < 0 or int(y.max()) >= self.num_classes):
            raise TaskError(f"{where}: expected labels in [0, {self.num_classes}), got values in "
                            f"[{int(y.min())}, {int(y.max())}]")
        return y

    def _pair(self, data: Any, where: str) -> tuple[np.ndarray, np.ndarray]:
        if isinstance(data, (tuple, list)) and len(data) == 2:
            x = self._x(data[0], where)
            return x, self._y(data[1], x.shape[0], where)
        raise TaskError(f"{where}: expected (x, y) arrays or a tr_mlir.data.Dataset, got {type(data).__name__}")

    # -- training and inference ----------------------------------------------------------

    def _refresh(self) -> None:
        if self._bn_dirty:
            self.runner.refresh_bn()
            self._bn_dirty = False

    def train_step(self, x: np.ndarray, y: np.ndarray) -> float:
        """One optimizer step on exactly ``batch_size`` samples as given (``augment`` and ``resize``
        apply in :meth:`fit` only); returns the batch loss (mean, before the update). Compiles first if needed."""
        self._ready()
        x = self._x(x, "Task.train_step")
        if x.shape[0] != self.batch_size:
            raise TaskError(f"Task.train_step: expected exactly batch_size = {self.batch_size} samples, "
                            f"got {x.shape[0]} (fit() handles other sizes)")
        y = self._y(y, x.shape[0], "Task.train_step")
        loss = self.runner.train_step(x, y, self._lr_at(self.steps))
        self.steps += 1
        self._bn_dirty = True
        return loss

    def epoch_samples(self, n: int, drop_last: bool = False) -> int:
        """The training-set size an epoch over ``n`` samples compiles for: ``n``, or with
        ``drop_last`` the samples of the full batches only (per process, ``n`` is split into
        ``ceil(n / world_size)`` shards and each drops its last partial batch, as PyTorch's
        ``DataLoader(drop_last=True)``). Raises :class:`TaskError` when ``drop_last`` leaves no
        batch."""
        n = _check_int("Task", "train samples", n)
        if not drop_last:
            return n
        per_rank = -(-n // self.world_size)
        full = per_rank // self.batch_size
        if full < 1:
            raise TaskError(f"Task.fit: drop_last with {per_rank} samples per process and batch size "
                            f"{self.batch_size} leaves no batch")
        return full * self.batch_size * self.world_size

    def fit(self, train: Any, val: Any = None, epochs: int = 1, *, shuffle: bool = True,
            verbose: bool = False, on_batch: Callable[[int], None] | None = None,
            drop_last: bool = False) -> list[dict[str, float]]:
        """Train ``epochs`` epochs; returns one dict per epoch (``epoch``, ``lr`` at its start,
        ``train_loss``, ``train_top1``, ``train_top5``, ``val_loss``, ``val_top1``, ``val_top5``
        when there is validation data, ``seconds``).

        ``train``/``val``: ``(x, y)`` pairs, or a :class:`tr_mlir.data.Dataset` (its train split;
        its val split too when ``val`` is None). Recompiles, keeping the weights, when the data
        sizes differ from the compiled ones. ``shuffle``: a new sample order each epoch (from the
        Task seed and the epoch). The last batch of an epoch is the smaller ``train_last``
        variant; BN inference parameters are refreshed at the end of every epoch (facts 13).
        ``on_batch(b)``: called as the runner takes training batch ``b`` (0-based, counted per
        epoch); the runner stages batch ``b`` while step ``b - 1`` runs, so steps ``0 .. b - 2``
        have finished (progress bars: ``tr-train``). ``drop_last``: skip each epoch's last
        partial batch (a different one each epoch when shuffling), so every step has the full
        batch (:meth:`epoch_samples`; the fix for a batch norm that would otherwise see one
        sample in the last batch).
        """
        from tr_mlir.data import Dataset, iterate_batches, num_batches

        epochs = _check_int("Task.fit", "epochs", epochs, low=0)
        if isinstance(train, Dataset):
            if val is None:
                val = (train.val_x, train.val_y)
            train = (train.train_x, train.train_y)
        if isinstance(val, Dataset):
            val = (val.val_x, val.val_y)
        tx, ty = self._pair(train, "Task.fit (train)")
        vx, vy = self._pair(val, "Task.fit (val)") if val is not None else (None, None)
        if not isinstance(drop_last, bool):
            raise TaskError(f"Task.fit: drop_last must be a bool, got {drop_last!r}")
        self.compile(train_size=self.epoch_samples(tx.shape[0], drop_last),
                     val_size=None if vx is None else vx.shape[0])
        tx, ty = self._shard(tx, ty)
        if vx is not None:
            vx, vy = self._shard(vx, vy)
        nb = num_batches(tx.shape[0], self.batch_size, drop_last=drop_last)
        history = []
        for _ in range(epochs):
            t0 = time.perf_counter()
            start = self.steps
            lowres, size = self._epoch_resolution(self.epochs)
            seed = self.seed * 1_000_003 + self.epochs
            batches = ((b.x, b.y) for b in iterate_batches(tx, ty, self.batch_size, shuffle=shuffle, seed=seed,
                                                           drop_last=drop_last))
            if self.augment is not None or size is not None:
                from tr_mlir.augment import epoch_rng, prefetch
                from tr_mlir.data import resize_batch

                aug = self.augment

                def prep(x: np.ndarray, rng: np.random.Generator, aug: Any = aug, size: Any = size) -> np.ndarray:
                    if aug is not None:
                        x = aug(x, rng)
                    return x if size is None else resize_batch(x, size)

                batches = prefetch(batches, prep, epoch_rng(self.seed, self.epochs))
            if on_batch is not None:
                batches = _tapped(batches, on_batch)
            met = self.runner.train_epoch(batches, nb, lambda b: self._lr_at(start + b), lowres=lowres)
            self.steps += nb
            self.epochs += 1
            self._bn_dirty = False  # the epoch's last step refreshed them
            row = {"epoch": self.epochs, "lr": self._lr_at(start), "train_loss": met.loss,
                   "train_top1": met.top1, "train_top5": met.top5}
            if vx is not None:
                ev = self.runner.evaluate(vx, vy)
                row.update(val_loss=ev.loss, val_top1=ev.top1, val_top5=ev.top5)
                if self.ema is not None:
                    ev = self.runner.evaluate(vx, vy, ema=True)
                    row.update(val_ema_loss=ev.loss, val_ema_top1=ev.top1, val_ema_top5=ev.top5)
            row["seconds"] = time.perf_counter() - t0
            history.append(row)
            if verbose:
                print(" ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()),
                      flush=True)
        return history

    def evaluate(self, x: np.ndarray, y: np.ndarray, ema: bool = False) -> dict[str, float]:
        """``{'loss', 'top1', 'top5'}`` of the inference graph over any number of samples (the
        last batch padded and masked), with BN inference parameters refreshed first; ``ema``: of
        the EMA model (``INF_EMA_A/B``, :mod:`tr_mlir.ema`; :class:`TaskError` without ``ema``)."""
        self._ready()
        if ema and self.ema is None:
            raise TaskError("Task.evaluate: ema=True, but the task keeps no EMA (Task(ema=DECAY))")
        x = self._x(x, "Task.evaluate")
        y = self._y(y, x.shape[0], "Task.evaluate")
        x, y = self._shard(x, y)
        self._refresh()
        m = self.runner.evaluate(x, y, ema=ema)
        return {"loss": m.loss, "top1": m.top1, "top5": m.top5}

    def predict(self, x: np.ndarray, ema: bool = False) -> np.ndarray:
        """Softmax probabilities ``(N, num_classes)`` float32 for any number of samples (N = 0
        gives an empty ``(0, num_classes)`` array, as a torch model does for an empty batch);
        ``ema``: of the EMA model (as :meth:`evaluate`)."""
        self._ready()
        if ema and self.ema is None:
            raise TaskError("Task.predict: ema=True, but the task keeps no EMA (Task(ema=DECAY))")
        x = self._x(x, "Task.predict", allow_empty=True)
        if x.shape[0] == 0:
            return np.zeros((0, self.num_classes), np.float32)
        self._refresh()
        return self.runner.predict(x, ema=ema)

    # -- save / load ---------------------------------------------------------------------

    def config(self) -> dict[str, Any]:
        """The JSON-able configuration :meth:`save` writes (model as tree-form MLIR text)."""
        return {
            "format": FORMAT, "model": str(self._tree), "input_shape": list(self.input_shape),
            "num_classes": self.num_classes, "batch_size": self.batch_size,
            "optimizer": self.optimizer.config(),
            "scheduler": None if self.scheduler is None else self.scheduler.config(),
            "label_smoothing": self.loss.label_smoothing, "amp": self.amp, "fuse": self.fuse,
            "device": self.device, "seed": self.seed, "train_size": self.train_size, "val_size": self.val_size,
            "steps": self.steps, "epochs": self.epochs, "reuse": self.reuse, "plugins": list(self.plugins),
            "torch_naming": None if self.torch_naming is None else self.torch_naming.config(), "init": self.init,
            "loss_scaler": None if self.loss_scaler is None else self.loss_scaler.config(),
            "augment": None if self.augment is None else self.augment.config(),
            "ema": None if self.ema is None else self.ema.config(),
            "resize": None if self.resize is None else list(self.resize), "conv_algo": self.conv_algo,
        }

    def save(self, path: str | os.PathLike) -> Path:
        """Write ``path/state.npz`` (parameters, buffers, optimizer state, loss scale, Adam step,
        dropout RNG) and ``path/config.json`` (configuration, model, and ``state_sha256``: the
        SHA-256 of the ``state.npz`` it belongs to); returns the folder.

        Both files are written under temporary names first and then renamed over the old ones
        (``state.npz`` first), so a save that fails (a full disk, an interrupt) leaves a task saved
        earlier in ``path`` readable; one stopped between the two renames leaves the new
        ``state.npz`` next to its ``config.json.tmp``, which :meth:`load` then takes. Raises
        ``OSError`` when the folder or a file cannot be written."""
        self._ready()
        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        config, state = folder / (CONFIG_FILE + ".tmp"), folder / (STATE_FILE + ".tmp")
        leftovers = [config, state]
        try:
            with open(state, "wb") as f:  # a file object: np.savez would append '.npz' to a name
                np.savez(f, **self._snapshot())
            save_pause("task-state-written", folder)
            config.write_text(json.dumps({**self.config(), "state_sha256": _sha256(state.read_bytes())}, indent=1))
            save_pause("task-config-written", folder)
            os.replace(state, folder / STATE_FILE)
            leftovers = []  # config.json.tmp now completes the new state.npz: load() reads it if it stays
            save_pause("task-state-renamed", folder)
            os.replace(config, folder / CONFIG_FILE)
        finally:
            for tmp in leftovers:
                tmp.unlink(missing_ok=True)
        return folder

    @classmethod
    def load(cls, path: str | os.PathLike, device: Any = None) -> Task:
        """The Task saved in folder ``path`` (:meth:`save`), compiled, with its state restored;
        ``device``: where to run it (default: the saved device).

        Raises:
            TaskError: a missing or unreadable folder or file; a ``config.json`` that is no JSON,
                does not describe a task (a missing key, a value of another type, a model that does
                not parse) or records another ``state_sha256`` than the ``state.npz`` next to it
                has (damaged, copied from another save); a ``state.npz`` that is no readable
                archive or holds other arrays than a save of this task writes (missing or extra
                arrays, other shapes or dtypes, non-finite scalars). The message names the file.
            ArenaTooLargeError: the compiled model does not fit in memory (the message names
                ``config.json``).
        """
        from tr_mlir.lowering.backend import ArenaTooLargeError

        folder = Path(path)
        config_path, state_path = folder / CONFIG_FILE, folder / STATE_FILE
        try:
            cfg, unreadable = _read_config(config_path, folder), None
        except TaskError as e:
            cfg, unreadable = {}, e
        try:
            data = state_path.read_bytes()
        except OSError as e:
            raise unreadable or TaskError(f"Task.load: cannot read a saved task from {folder}: {state_path}: "
                                          f"{e.strerror or e}") from e
        digest = _sha256(data)
        if unreadable is not None or cfg.get("state_sha256", digest) != digest:
            try:  # a save stopped between its two renames left the config of this state.npz as a .tmp
                newer = _read_config(folder / (CONFIG_FILE + ".tmp"), folder)
            except TaskError:
                newer = {}
            if newer.get("state_sha256") == digest:
                cfg, config_path, unreadable = newer, folder / (CONFIG_FILE + ".tmp"), None
        if unreadable is not None:
            raise unreadable
        foreign = cfg.get("state_sha256", digest) != digest
        state = _read_state(data, state_path)
        problem = _config_problem(cfg)
        if problem:
            raise TaskError(f"Task.load: {config_path} does not describe a task: {problem}")
        task = cls._from_config(cfg, config_path, device)
        try:
            task.compile(cfg["train_size"], cfg["val_size"])
        except (ValueError, TypeError) as e:  # TaskError (a ValueError): sizes, a model the compiler rejects
            raise TaskError(f"Task.load: {config_path} does not describe a task: {e}") from e
        except ArenaTooLargeError as e:
            raise ArenaTooLargeError(f"Task.load: {config_path}: {e}") from e
        task._check_state(state, state_path)
        if foreign:
            raise TaskError(f"Task.load: {state_path} is not the archive {config_path} was saved with (its "
                            f"SHA-256 is not the 'state_sha256' recorded there): damaged, or copied from another save")
        task._restore(state)
        task.runner.prepare_weights()
        task._bn_dirty = True
        return task

    @classmethod
    def _from_config(cls, cfg: dict[str, Any], source: Path, device: Any) -> Task:
        """The (not yet compiled) Task of a ``config.json`` that passed :func:`_config_problem`."""
        from xdsl.parser import Parser

        from tr_mlir.compile import make_context

        def part(what: str, build: Callable[[], Any]) -> Any:
            try:
                return build()
            except Exception as e:  # untrusted text and objects: the parser and from_config raise many types
                raise TaskError(f"Task.load: {source} does not describe a task: {type(e).__name__}: {e} "
                                f"(in '{what}')") from e

        plugins = cfg.get("plugins", [])
        if not isinstance(plugins, list) or not all(isinstance(p, str) for p in plugins):
            raise TaskError(f"Task.load: {source} does not describe a task: 'plugins' must be a list of strings")
        try:
            from tr_mlir.extend import load_plugins

            load_plugins(plugins)
        except TrMlirError as e:
            raise TaskError(f"Task.load: {source} needs its plugins: {e}") from e
        module = part("model", lambda: Parser(make_context(), cfg["model"]).parse_module())
        optimizer = part("optimizer", lambda: _optim.from_config(cfg["optimizer"]))
        scheduler = part("scheduler", lambda: _sched.from_config(cfg["scheduler"]))
        loss = part("label_smoothing", lambda: CrossEntropyLoss(cfg["label_smoothing"]))
        from tr_mlir import amp as _amp
        from tr_mlir import augment as _augment

        scaler = part("loss_scaler", lambda: _amp.from_config(cfg.get("loss_scaler")))
        from tr_mlir import ema as _ema

        ema = part("ema", lambda: _ema.from_config(cfg.get("ema")))
        aug = part("augment", lambda: None if cfg.get("augment") is None else _augment.from_config(cfg["augment"]))
        try:
            task = cls(module, tuple(cfg["input_shape"]), cfg["num_classes"], cfg["batch_size"],
                       optimizer=optimizer, scheduler=scheduler, loss=loss, amp=cfg["amp"], fuse=cfg["fuse"],
                       device=cfg["device"] if device is None else device, seed=cfg["seed"],
                       reuse=cfg.get("reuse", True), init=cfg.get("init", "seed"), loss_scaler=scaler,
                       augment=aug, ema=ema, resize=cfg.get("resize"), conv_algo=cfg.get("conv_algo", "auto"),
                       plugins=plugins)
        except TaskError as e:
            raise TaskError(f"Task.load: {source} does not describe a task: {e}") from e
        task.steps, task.epochs = cfg["steps"], cfg["epochs"]
        if cfg.get("torch_naming") is not None:
            from tr_mlir.frontend.torch import TorchNaming

            task.torch_naming = part("torch_naming", lambda: TorchNaming.from_config(cfg["torch_naming"]))
        return task

    def __repr__(self) -> str:
        h, w, c = self.input_shape
        return (f"Task({h}x{w}x{c} -> {self.num_classes}, batch {self.batch_size}, {self.optimizer!r}, "
                f"amp={self.amp}, fuse={self.fuse}, steps={self.steps})")
