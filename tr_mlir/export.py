"""Export a trained :class:`tr_mlir.Task`: a PyTorch ``state_dict`` and an ONNX inference graph.

* :func:`state_dict` (also :meth:`tr_mlir.Task.state_dict`): the trained parameters and BN buffers
  as float32 ``torch.Tensor`` s in PyTorch layouts. For a Task made by
  :meth:`tr_mlir.frontend.torch.TorchModel.task` the keys are the imported module's own
  ``state_dict`` keys (``layer1.0.conv1.weight``, ...) so ``module.load_state_dict(task.state_dict())``
  works; for a BluePrint model they are the Task's canonical names (``conv0.weight``, ``bn0.bias``,
  ``bn0.running_mean``, ``fc0.weight``; see :mod:`tr_mlir.task`).
* :func:`onnx`: the inference graph of the model, built from our own unfused ArchPlan (the
  ``arch`` IR), with the trained weights, as an ONNX file (``onnx`` package). Each op's ONNX
  form is registered by op class (:data:`ONNX_FORMS`, :func:`onnx_form`; plugins:
  ``tr_mlir.extend.register_onnx_form``), not enumerated by the exporter.
"""

from __future__ import annotations

import os
from pathlib import Path
from collections.abc import Callable
from typing import Any

import numpy as np

from tr_mlir.errors import TrMlirError

__all__ = ["ONNX_FORMS", "ExportError", "OnnxForm", "OnnxGraph", "onnx", "onnx_form", "state_dict"]


class ExportError(TrMlirError, ValueError):
    """The Task cannot be exported (a missing optional package, an op without an ONNX form)."""


def _need(module: str, extra: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ExportError(f"exporting needs the '{module}' package, which is not importable ({e}); "
                          f"install it with pip install 'tr-mlir[{extra}]'") from None


def state_dict(task: Any) -> dict[str, Any]:
    """The Task's trained parameters and BN buffers as a PyTorch ``state_dict``.

    Layouts: conv weights OIHW ``(O, I/groups, kh, kw)``, Linear weights ``(out, in)``, vectors
    ``(C,)``, all float32 ``torch.Tensor`` s (CPU). For an imported module (the Task has a
    ``torch_naming``, set by ``TorchModel.task``): the module's own keys and column orders (an FC
    after a spatial map back in C,H,W order), a conv bias folded into its BN restored (the bias is
    returned unchanged: it has no gradient under training-mode batch norm; the running mean is
    shifted back by it), ``num_batches_tracked`` as imported plus the optimizer steps taken (int64).
    For a BluePrint model: the canonical names of :meth:`tr_mlir.Task.parameters` and
    :meth:`~tr_mlir.Task.buffers`, conv weights OIHW, FC weights over the NHWC-flattened input.

    Raises:
        ExportError: torch is not importable.
    """
    torch = _need("torch", "torch")
    values = dict(task.parameters()) | dict(task.buffers())
    naming = getattr(task, "torch_naming", None)
    out: dict[str, Any] = {}
    if naming is None:
        for name, a in values.items():
            out[name] = torch.from_numpy(np.ascontiguousarray(a.transpose(0, 3, 1, 2)) if a.ndim == 4 else a.copy())
        return out
    from tr_mlir.frontend.torch import to_torch_layout

    for e in naming.entries:
        if e.layout == "folded_bias":
            out[e.torch_name] = torch.from_numpy(np.array(e.value, np.float32))
        elif e.layout == "batches":
            out[e.torch_name] = torch.tensor(int(e.value) + int(task.steps), dtype=torch.int64)
        else:
            out[e.torch_name] = torch.from_numpy(to_torch_layout(e, values[e.canonical]))
    return out


# --------------------------------------------------------------------------------------
# ONNX
# --------------------------------------------------------------------------------------


def _plan(task: Any) -> Any:
    """The task's model planned unfused in fp32: a flat ``arch.model`` of primitive ops."""
    from tr_mlir.compile import make_context
    from tr_mlir.dialects.arch import ModelOp
    from tr_mlir.passes.arch_plan import ArchPlanPass

    module = task._tree.clone()
    ArchPlanPass(fuse=False, amp=False, num_classes=task.num_classes).apply(make_context(), module)
    return next(op for op in module.walk() if isinstance(op, ModelOp))


def _hwc(value: Any) -> tuple[int, int, int]:
    shape = value.type.get_shape()
    return int(shape[1]), int(shape[2]), int(shape[3])


class OnnxGraph:
    """The ONNX graph being built by :func:`onnx`, as an op's ONNX form (:func:`onnx_form`) sees it.

    ``names``: arch SSA value -> ``(ONNX value name, rank)`` (rank 4: NCHW, 2: ``(N, F)``);
    ``params``: the task's parameters and buffers by canonical name (float32 NumPy arrays, the
    Task's layouts: conv weights KRSC, FC weights ``(out, F)`` over the NHWC-flattened input).
    """

    def __init__(self, helper: Any, numpy_helper: Any, params: dict[str, np.ndarray]):
        self.helper, self._numpy_helper, self.params = helper, numpy_helper, params
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self.names: dict[Any, tuple[str, int]] = {}
        self.result: str | None = None  # the logits, set by the softmax_ce head
        self._counters: dict[str, int] = {}
        self._fresh = iter(range(1 << 30))

    def tmp(self, stem: str) -> str:
        """A fresh ONNX value name ``<stem>_<n>``."""
        return f"{stem}_{next(self._fresh)}"

    def init(self, name: str, a: np.ndarray) -> str:
        """Add initializer ``name`` holding ``a``; returns ``name``."""
        self.inits.append(self._numpy_helper.from_array(np.ascontiguousarray(a), name))
        return name

    def take(self, kind: str) -> int:
        """The next index of parameter kind ``kind`` (``conv``, ``bn``, ``fc``: the Task's canonical
        names ``conv0``, ``conv1``, ... in plan order)."""
        i = self._counters.get(kind, 0)
        self._counters[kind] = i + 1
        return i

    def node(self, op_type: str, inputs: list[str], outputs: list[str], **attrs: Any) -> None:
        """Append an ONNX node."""
        self.nodes.append(self.helper.make_node(op_type, inputs, outputs, **attrs))

    def input(self, op: Any, k: int = 0) -> str:
        """The ONNX name of operand ``k`` of ``op``."""
        return self.names[op.operands[k]][0]

    def define(self, op: Any, name: str, rank: int | None = None) -> None:
        """``op``'s output is ONNX value ``name`` of ``rank`` (default: its first operand's rank)."""
        self.names[op.output] = (name, self.names[op.operands[0]][1] if rank is None else rank)

    def to_2d(self, value: Any) -> str:
        """The ONNX value of an NHWC ``value`` as (N, H*W*C) in our NHWC feature order."""
        name, rank = self.names[value]
        if rank == 2:
            return name
        h, w, _ = _hwc(value)
        if h * w > 1:
            t = self.tmp("nhwc")
            self.node("Transpose", [name], [t], perm=[0, 2, 3, 1])
            name = t
        f = self.tmp("flat")
        self.node("Flatten", [name], [f], axis=1)
        return f


OnnxForm = Callable[[OnnxGraph, Any], None]
"""An op's ONNX form: given the graph and the (unfused, fp32) arch op, append its nodes and
:meth:`OnnxGraph.define` its output."""

ONNX_FORMS: dict[type, OnnxForm] = {}
"""arch op class -> its ONNX form (:func:`onnx_form`; plugins: ``tr_mlir.extend.register_onnx_form``).
An op is looked up by its class, then its bases."""


def onnx_form(*ops: type) -> Callable[[OnnxForm], OnnxForm]:
    """Decorator: register the function as the ONNX form of the arch op classes ``ops``."""

    def register(fn: OnnxForm) -> OnnxForm:
        for op in ops:
            ONNX_FORMS[op] = fn
        return fn

    return register


def _form_of(op: Any) -> OnnxForm:
    for cls in type(op).__mro__:
        if cls in ONNX_FORMS:
            return ONNX_FORMS[cls]
    raise ExportError(f"onnx export: {op.name} has no ONNX form (an op of a plugin registers one with "
                      f"tr_mlir.extend.register_onnx_form)")


def _apply(form: OnnxForm, g: OnnxGraph, op: Any) -> None:
    """Run ``op``'s ONNX form; a form that fails or leaves the op's output undefined is an
    :class:`ExportError` naming the op and the form (a plugin's form is the plugin's code)."""
    name = getattr(form, "__qualname__", repr(form))
    try:
        form(g, op)
    except ExportError:
        raise
    except Exception as e:
        raise ExportError(f"onnx export: the ONNX form of {op.name} ({name}) failed: {type(e).__name__}: {e}") from e
    if op.results and op.results[0] not in g.names and g.result is None:
        raise ExportError(f"onnx export: the ONNX form of {op.name} ({name}) did not define its output "
                          f"(call graph.define(op, name))")


def _register_builtin_forms() -> None:
    """The ONNX forms of the built-in primitive ops (fused ops never reach the export: it plans
    the model unfused)."""
    from tr_mlir.dialects import arch as A

    def unary(op_type: str, **attrs: Any) -> OnnxForm:
        def form(g: OnnxGraph, op: Any) -> None:
            y = g.tmp(op.name.split(".")[1])
            g.node(op_type, [g.input(op)], [y], **attrs)
            g.define(op, y)
        return form

    def window(op: Any) -> dict[str, Any]:
        v = op.params()
        return {"kernel_shape": [v["k"]] * 2, "strides": [v["s"]] * 2, "pads": [v["p"]] * 4}

    for cls, op_type, attrs in ((A.ReluOp, "Relu", {}), (A.TanhOp, "Tanh", {}), (A.SigmoidOp, "Sigmoid", {}),
                                (A.HardswishOp, "HardSwish", {}), (A.LeakyReluOp, "LeakyRelu", {"alpha": 0.01}),
                                (A.EluOp, "Elu", {"alpha": 1.0}), (A.GapOp, "GlobalAveragePool", {})):
        ONNX_FORMS[cls] = unary(op_type, **attrs)

    @onnx_form(A.ConvOp)
    def conv(g: OnnxGraph, op: Any) -> None:
        i, v, y = g.take("conv"), op.params(), g.tmp("conv")
        w = g.init(f"conv{i}.weight", g.params[f"conv{i}.weight"].transpose(0, 3, 1, 2))
        g.node("Conv", [g.input(op), w], [y], **window(op) | {"group": v["groups"]})
        g.define(op, y)

    @onnx_form(A.Bn2dOp, A.Bn1dOp)
    def batch_norm(g: OnnxGraph, op: Any) -> None:
        j, y = g.take("bn"), g.tmp("bn")
        ins = [g.init(f"bn{j}.{f}", g.params[f"bn{j}.{f}"]) for f in ("weight", "bias", "running_mean", "running_var")]
        g.node("BatchNormalization", [g.input(op), *ins], [y], epsilon=float(op.params()["eps"]))
        g.define(op, y)

    @onnx_form(A.Relu6Op)
    def relu6(g: OnnxGraph, op: Any) -> None:
        lo, hi = g.init(g.tmp("zero"), np.array(0.0, np.float32)), g.init(g.tmp("six"), np.array(6.0, np.float32))
        y = g.tmp("relu6")
        g.node("Clip", [g.input(op), lo, hi], [y])
        g.define(op, y)

    @onnx_form(A.SiluOp)
    def silu(g: OnnxGraph, op: Any) -> None:
        s, y = g.tmp("sig"), g.tmp("silu")
        g.node("Sigmoid", [g.input(op)], [s])
        g.node("Mul", [g.input(op), s], [y])
        g.define(op, y)

    @onnx_form(A.MaxPoolOp)
    def maxpool(g: OnnxGraph, op: Any) -> None:
        y = g.tmp("maxpool")
        g.node("MaxPool", [g.input(op)], [y], **window(op))
        g.define(op, y)

    @onnx_form(A.AvgPoolOp)
    def avgpool(g: OnnxGraph, op: Any) -> None:
        y = g.tmp("avgpool")
        g.node("AveragePool", [g.input(op)], [y], **window(op), count_include_pad=1)
        g.define(op, y)

    @onnx_form(A.FlattenOp)
    def flatten(g: OnnxGraph, op: Any) -> None:
        g.define(op, g.to_2d(op.operands[0]), 2)

    @onnx_form(A.FcOp)
    def fc(g: OnnxGraph, op: Any) -> None:
        k, y = g.take("fc"), g.tmp("fc")
        w = g.params[f"fc{k}.weight"]
        b = g.params[f"fc{k}.bias"] if op.params().get("bias") else np.zeros(w.shape[0], np.float32)
        g.node("Gemm", [g.to_2d(op.operands[0]), g.init(f"fc{k}.weight", w), g.init(f"fc{k}.bias", b)], [y], transB=1)
        g.define(op, y, 2)

    @onnx_form(A.DropoutOp, A.IdentityOp)
    def passthrough(g: OnnxGraph, op: Any) -> None:  # inference: dropout is the identity
        g.names[op.output] = g.names[op.operands[0]]

    @onnx_form(A.AddOp)
    def add(g: OnnxGraph, op: Any) -> None:
        y = g.tmp("add")
        g.node("Add", [g.input(op, 0), g.input(op, 1)], [y])
        g.define(op, y)

    @onnx_form(A.ChannelPaddingOp)
    def channel_padding(g: OnnxGraph, op: Any) -> None:  # zeros up to a multiple of 8 channels (NCHW axis 1)
        extra = -_hwc(op.operands[0])[2] % 8
        pads = g.init(g.tmp("pads"), np.array([0, 0, 0, 0, 0, extra, 0, 0], np.int64))
        y = g.tmp("channel_padding")
        g.node("Pad", [g.input(op), pads], [y])
        g.define(op, y)

    @onnx_form(A.SoftmaxCeOp)
    def softmax_ce(g: OnnxGraph, op: Any) -> None:  # the head: its input is the logits
        g.result = g.to_2d(op.operands[0])


_register_builtin_forms()


def onnx(task: Any, path: str | os.PathLike, *, opset: int = 17) -> Path:
    """Write the inference graph of ``task`` with its trained weights to ``path`` (ONNX).

    The graph reads ``input``: float32 ``(N, C, H, W)`` (NCHW, ONNX's convention; the Task reads
    NHWC), N dynamic, and has two outputs: ``logits`` ``(N, num_classes)`` and ``probabilities``
    (their softmax, what :meth:`tr_mlir.Task.predict` returns). Batch norm uses the running
    statistics, dropout is left out (inference). It is built from the task's own ArchPlan, planned
    unfused in fp32 (a fused or AMP task exports the same graph; its fp32 master weights).

    Returns the path written. Raises :class:`ExportError` when ``onnx`` is not importable, the
    plan holds an op without an ONNX form, or ``path`` cannot be written.
    """
    onnx_mod = _need("onnx", "onnx")
    from onnx import TensorProto, helper, numpy_helper

    from tr_mlir.passes._descriptors_program import layers

    model = _plan(task)
    g = OnnxGraph(helper, numpy_helper, dict(task.parameters()) | dict(task.buffers()))
    g.names[model.input_value] = ("input", 4)
    for op in layers(model):
        _apply(_form_of(op), g, op)
    if g.result is None:
        raise ExportError("onnx export: the plan has no softmax_ce head")
    g.node("Identity", [g.result], ["logits"])
    g.node("Softmax", [g.result], ["probabilities"], axis=1)
    nodes, inits = g.nodes, g.inits
    h, w, c = task.input_shape
    graph = helper.make_graph(
        nodes, model.sym_name.data, [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", c, h, w])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", task.num_classes]),
         helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["N", task.num_classes])],
        initializer=inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="tr-mlir")
    m.ir_version = 8
    onnx_mod.checker.check_model(m)
    path = Path(path)
    try:
        onnx_mod.save(m, str(path))
    except OSError as e:
        raise ExportError(f"export.onnx: cannot write {path}: {e.strerror or e}") from None
    return path
