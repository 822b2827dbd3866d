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
momentum weighs the new batch, unbiased running variance). The names are a compile decision,
read from the program (``param_names`` of its ``memplan.descs``, written by the
``memplan-name-parameters`` pass, which states the rule).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from tr_mlir import optim as _optim
from tr_mlir import sched as _sched
from tr_mlir._task_checkpoints import TaskCheckpoints
from tr_mlir._task_state import (  # noqa: F401  (CONFIG_FILE, STATE_FILE, SAVE_PAUSE_ENV, save_pause: read from here)
    BUFFER_REGIONS,
    CONFIG_FILE,
    VIEWS,
    SAVE_PAUSE_ENV,
    STATE_FILE,
    TaskError,
    _check_finite,
    _check_int,
    _Entry,
    _tapped,
    save_pause,
)
from tr_mlir.dialects.arch import ModelOp
from tr_mlir.errors import TrMlirError
from tr_mlir.loss import CrossEntropyLoss

__all__ = ["Task", "TaskError"]


class Task(TaskCheckpoints):
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
        fuse_fc_relu: run each FC and the ReLU next to it as one GEMM with a ReLU epilogue
            (``memplan-fuse-fc-relu``, :mod:`tr_mlir.passes.memplan_fuse_fc_relu`). ``False`` keeps
            the separate FC and ReLU kernels (same numerics, bit for bit).
        fuse_bn_stats: let each Winograd training conv write the batch-norm statistics of its
            output (per-channel sum and squared deviations) for the BN forward after it, so the BN
            skips its own statistics pass (``memplan-fuse-bn-stats``,
            :mod:`tr_mlir.passes.memplan_fuse_bn_stats`). ``False`` keeps the BN's own statistics
            pass. The sums are taken in another order: the numbers differ in the last bits, so
            training with and without it is not bit-identical (each is deterministic); ``False``
            reproduces the bits of a run compiled without the pass.
        fuse_grad_acc: let the Winograd input gradient at a residual join add the skip's gradient
            in its output transform instead of a separate ``grad_accum`` pass
            (``memplan-fuse-grad-acc``, :mod:`tr_mlir.passes.memplan_fuse_grad_acc`). ``False``
            keeps the ``grad_accum`` nodes (same numerics: bit for bit on the CPU backend).
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
                 plugins: Sequence[str | os.PathLike] = (), fuse_fc_relu: bool = True,
                 fuse_bn_stats: bool = True, fuse_grad_acc: bool = True):
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
        for name, flag in (("amp", amp), ("fuse", fuse), ("reuse", reuse), ("fuse_fc_relu", fuse_fc_relu),
                           ("fuse_bn_stats", fuse_bn_stats), ("fuse_grad_acc", fuse_grad_acc)):
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
        self.fuse_fc_relu, self.fuse_bn_stats, self.fuse_grad_acc = fuse_fc_relu, fuse_bn_stats, fuse_grad_acc
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
        # (reuse, fuse_fc_relu, fuse_bn_stats, fuse_grad_acc) of self.exe
        self._compiled_layout: tuple[bool, bool, bool, bool] | None = None
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
        the executable. A recompile (other sizes, or ``reuse`` / ``fuse_fc_relu`` /
        ``fuse_bn_stats`` / ``fuse_grad_acc`` changed since the last compile) keeps parameters, buffers, optimizer
        state and loss scale. Returns ``self``.
        Raises :class:`TaskError` for bad sizes or a model the compiler rejects (the message names
        the op), and
        :class:`~tr_mlir.lowering.backend.ArenaTooLargeError` (a ``MemoryError``) before allocating
        a plan larger than the memory available (the message names the bytes and a batch size
        that fits)."""
        from xdsl.utils.exceptions import (
            DiagnosticException,
            PassFailedException,
            VerifyException,
        )

        from tr_mlir.compile import make_context
        from tr_mlir.lowering.executable import Executable
        from tr_mlir.lowering.runner import Runner
        from tr_mlir.passes.tr_compile import TrCompilePass

        train_size = _check_int("Task.compile", "train_size", train_size if train_size is not None
                                else (self.train_size or self.batch_size))
        val_size = _check_int("Task.compile", "val_size", val_size if val_size is not None
                              else (self.val_size or self.batch_size))
        for name in ("reuse", "fuse_fc_relu", "fuse_bn_stats", "fuse_grad_acc"):
            if not isinstance(getattr(self, name), bool):
                raise TaskError(f"Task.compile: {name} must be a bool, got {getattr(self, name)!r}")
        layout = (self.reuse, self.fuse_fc_relu, self.fuse_bn_stats, self.fuse_grad_acc)
        if self.exe is not None and (train_size, val_size, layout) == (self.train_size, self.val_size,
                                                                       self._compiled_layout):
            return self
        kept = self._snapshot() if self.exe is not None else None
        t0 = time.perf_counter()
        module = self._tree.clone()
        backend = self._make_backend()
        try:
            TrCompilePass(fuse=self.fuse, amp=self.amp, num_classes=self.num_classes, batch_size=self.batch_size,
                          train_size=train_size, val_size=val_size, optimizer=self.optimizer.kind.value,
                          target=backend.target.value, world_size=self.world_size,
                          reuse=self.reuse, fuse_fc_relu=self.fuse_fc_relu, fuse_bn_stats=self.fuse_bn_stats,
                          fuse_grad_acc=self.fuse_grad_acc,
                          ema=self.ema is not None,
                          conv_algo=self.conv_algo,
                          decay_all=self.optimizer.decay_all,
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
            exe = Executable(module, backend=backend, seed=self.seed)
        except _ArenaTooLarge:
            raise  # keeps its documented type (a MemoryError naming a batch size that fits)
        except (ExecutableError, TrMlirError) as e:
            raise TaskError(f"Task.compile: the {backend.name} backend cannot run the model: {e}") from e
        self.exe, self.train_size, self.val_size, self._compiled_layout = exe, train_size, val_size, layout
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
        """The named parameters / buffers over the plan's DTensors: the names the compiler gave
        (``memplan-name-parameters``), the views of :data:`VIEWS`, in DTensor id order.

        Raises :class:`TaskError` when the program carries no names (compiled before the pass
        existed, or by a pipeline without it)."""
        exe = self.exe
        named: list[tuple[int, str]] = []
        for descs in exe.program.descs():
            pnames = descs.tensor_param_names
            if pnames is None:
                raise TaskError(f"the compiled program has no parameter names (layer {descs.layer_index}'s "
                                f"'memplan.descs' has no param_names); recompile it with memplan-compile or "
                                f"tr-compile, which run memplan-name-parameters")
            for name, pname in zip(descs.tensor_names, pnames):
                if pname:
                    named.append((exe.ids[f"l{descs.layer_index}.{name}"], pname))
        params: list[_Entry] = []
        buffers: list[_Entry] = []
        for tid, name in sorted(named):
            t = exe.tensors[tid]
            store, index = VIEWS[t.region](t, self.input_shape[2])
            if t.region in BUFFER_REGIONS:
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

    def __repr__(self) -> str:
        h, w, c = self.input_shape
        return (f"Task({h}x{w}x{c} -> {self.num_classes}, batch {self.batch_size}, {self.optimizer!r}, "
                f"amp={self.amp}, fuse={self.fuse}, steps={self.steps})")
