"""Checkpoints of a :class:`tr_mlir.Task`: the state snapshot and restore, ``save`` / ``load`` and
the configuration they write (a base class of ``Task``; the file format is in
:mod:`tr_mlir._task_state` and the ``Task.save`` docstring)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tr_mlir import optim as _optim
from tr_mlir import sched as _sched
from tr_mlir._task_state import (
    CONFIG_FILE,
    FORMAT,
    STATE_FILE,
    TaskError,
    _config_problem,
    _read_config,
    _read_state,
    _sha256,
    save_pause,
)
from tr_mlir.errors import TrMlirError
from tr_mlir.loss import CrossEntropyLoss

if TYPE_CHECKING:
    from tr_mlir.task import Task


class TaskCheckpoints:
    """The checkpoint methods of :class:`tr_mlir.Task` (they read and write the Task's executable,
    parameters, optimizer and EMA state; ``Task`` is the only subclass)."""

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

    def config(self) -> dict[str, Any]:
        """The JSON-able configuration :meth:`save` writes (model as tree-form MLIR text)."""
        return {
            "format": FORMAT, "model": str(self._tree), "input_shape": list(self.input_shape),
            "num_classes": self.num_classes, "batch_size": self.batch_size,
            "optimizer": self.optimizer.config(),
            "scheduler": None if self.scheduler is None else self.scheduler.config(),
            "label_smoothing": self.loss.label_smoothing, "amp": self.amp, "fuse": self.fuse,
            "device": self.device, "seed": self.seed, "train_size": self.train_size, "val_size": self.val_size,
            "steps": self.steps, "epochs": self.epochs, "reuse": self.reuse,
            "fuse_fc_relu": self.fuse_fc_relu, "fuse_bn_stats": self.fuse_bn_stats,
            "fuse_grad_acc": self.fuse_grad_acc, "plugins": list(self.plugins),
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
    def load(cls, path: str | os.PathLike, device: Any = None, *, reuse: bool | None = None,
             fuse_fc_relu: bool | None = None, fuse_bn_stats: bool | None = None,
             fuse_grad_acc: bool | None = None) -> Task:
        """The Task saved in folder ``path`` (:meth:`save`), compiled, with its state restored;
        ``device``: where to run it (default: the saved device); ``reuse``, ``fuse_fc_relu``: the
        memory-plan options to compile with (default: the saved ones; the same numerics either way);
        ``fuse_bn_stats``: whether the Winograd convs write the BN statistics (default: the saved
        setting, on for a save that predates it; the last bits differ, :class:`Task`);
        ``fuse_grad_acc``: whether the Winograd input gradients add the joins' skip gradients
        (default: the saved setting, on for a save that predates it; the same numerics either way).

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
        if reuse is not None:
            task.reuse = reuse
        if fuse_fc_relu is not None:
            task.fuse_fc_relu = fuse_fc_relu
        if fuse_bn_stats is not None:
            task.fuse_bn_stats = fuse_bn_stats
        if fuse_grad_acc is not None:
            task.fuse_grad_acc = fuse_grad_acc
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
                       reuse=cfg.get("reuse", True), fuse_fc_relu=cfg.get("fuse_fc_relu", True),
                       fuse_bn_stats=cfg.get("fuse_bn_stats", True), fuse_grad_acc=cfg.get("fuse_grad_acc", True),
                       init=cfg.get("init", "seed"), loss_scaler=scaler,
                       augment=aug, ema=ema, resize=cfg.get("resize"), conv_algo=cfg.get("conv_algo", "auto"),
                       plugins=plugins)
        except TaskError as e:
            raise TaskError(f"Task.load: {source} does not describe a task: {e}") from e
        task.steps, task.epochs = cfg["steps"], cfg["epochs"]
        if cfg.get("torch_naming") is not None:
            from tr_mlir.frontend.torch import TorchNaming

            task.torch_naming = part("torch_naming", lambda: TorchNaming.from_config(cfg["torch_naming"]))
        return task
