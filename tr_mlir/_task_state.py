"""A Task's named state and its checkpoint files: the parameter and buffer naming rules (region
-> name, shape and slice), the argument checks, the checkpoint format (``config.json`` +
``state.npz``, SHA-256 checked) and the fault-injection pause of the save path
(:mod:`tr_mlir.task` re-exports the public names)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tr_mlir.dialects.memplan import MemRegion
from tr_mlir.errors import TrMlirError

R = MemRegion
CONFIG_FILE = "config.json"
"""The checkpoint folder's configuration file (JSON)."""
STATE_FILE = "state.npz"
"""The checkpoint folder's tensors (``.npz``, loaded without pickles)."""
FORMAT = "tr-mlir-task-1"


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


VIEWS: dict[MemRegion, Callable[[Any, int], tuple[tuple[int, ...], tuple[slice, ...]]]] = {
    R.W_FIRST_CONV: _conv_weight,
    R.W_DEEP_CONV: _conv_weight,
    R.W_BN_WEIGHT: _vector,
    R.W_BN_BIAS: _vector,
    R.W_FC_WEIGHT: _fc_weight,
    R.W_FC_BIAS: _vector,
    R.B_NEXT_MEAN: _vector,
    R.B_NEXT_VAR: _vector,
}
"""How a named DTensor (its region one of :data:`~tr_mlir.dialects.memplan.STATE_REGIONS`) is
shown to the user: its stored shape and the slice the user sees. The names themselves are the
compiler's (``memplan-name-parameters``)."""

BUFFER_REGIONS = frozenset({R.B_NEXT_MEAN, R.B_NEXT_VAR})
"""Named DTensors that are buffers (BN running statistics, ``Task.buffers()``) rather than
parameters."""


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
    "fuse_fc_relu": (lambda v: isinstance(v, bool), "a bool"),
    "fuse_bn_stats": (lambda v: isinstance(v, bool), "a bool"),
    "fuse_grad_acc": (lambda v: isinstance(v, bool), "a bool"),
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
