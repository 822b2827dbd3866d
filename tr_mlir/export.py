"""Export a trained :class:`tr_mlir.Task`: a PyTorch ``state_dict`` and an ONNX inference graph.

* :func:`state_dict` (also :meth:`tr_mlir.Task.state_dict`): the trained parameters and BN buffers
  as float32 ``torch.Tensor`` s in PyTorch layouts. For a Task made by
  :meth:`tr_mlir.frontend.torch.TorchModel.task` the keys are the imported module's own
  ``state_dict`` keys (``layer1.0.conv1.weight``, ...) so ``module.load_state_dict(task.state_dict())``
  works; for a BluePrint model they are the Task's canonical names (``conv0.weight``, ``bn0.bias``,
  ``bn0.running_mean``, ``fc0.weight``; see :mod:`tr_mlir.task`).
* :func:`onnx`: the inference graph of the model, built from our own unfused ArchPlan (the
  ``arch`` IR), with the trained weights, as an ONNX file (``onnx`` package).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from tr_mlir.errors import TrMlirError

__all__ = ["ExportError", "onnx", "state_dict"]


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

    from tr_mlir.dialects import arch as A
    from tr_mlir.passes._descriptors_program import layers

    model = _plan(task)
    params = dict(task.parameters()) | dict(task.buffers())
    nodes: list[Any] = []
    inits: list[Any] = []
    counters = {"conv": 0, "bn": 0, "fc": 0}
    names: dict[Any, tuple[str, int]] = {}  # SSA value -> (ONNX name, rank)
    fresh = iter(range(1 << 30))

    def tmp(stem: str) -> str:
        return f"{stem}_{next(fresh)}"

    def init(name: str, a: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.ascontiguousarray(a), name))
        return name

    def take(kind: str) -> int:
        i = counters[kind]
        counters[kind] += 1
        return i

    def to_2d(value: Any) -> str:
        """The ONNX value of an NHWC ``value`` as (N, H*W*C) in our NHWC feature order."""
        name, rank = names[value]
        if rank == 2:
            return name
        h, w, _ = _hwc(value)
        if h * w > 1:
            t = tmp("nhwc")
            nodes.append(helper.make_node("Transpose", [name], [t], perm=[0, 2, 3, 1]))
            name = t
        f = tmp("flat")
        nodes.append(helper.make_node("Flatten", [name], [f], axis=1))
        return f

    names[model.input_value] = ("input", 4)
    result = None
    for op in layers(model):
        x = op.operands[0]
        xn, rank = names[x] if x in names else (None, 0)
        y = tmp(op.name.split(".")[1])
        v = op.params() if hasattr(op, "params") else {}
        if isinstance(op, A.ConvOp):
            i = take("conv")
            w = init(f"conv{i}.weight", params[f"conv{i}.weight"].transpose(0, 3, 1, 2))
            nodes.append(helper.make_node("Conv", [xn, w], [y], kernel_shape=[v["k"]] * 2, strides=[v["s"]] * 2,
                                          pads=[v["p"]] * 4, group=v["groups"]))
        elif isinstance(op, (A.Bn2dOp, A.Bn1dOp)):
            j = take("bn")
            ins = [init(f"bn{j}.{f}", params[f"bn{j}.{f}"]) for f in ("weight", "bias", "running_mean", "running_var")]
            nodes.append(helper.make_node("BatchNormalization", [xn, *ins], [y], epsilon=float(v["eps"])))
        elif isinstance(op, A.ReluOp):
            nodes.append(helper.make_node("Relu", [xn], [y]))
        elif isinstance(op, A.Relu6Op):
            lo, hi = init(tmp("zero"), np.array(0.0, np.float32)), init(tmp("six"), np.array(6.0, np.float32))
            nodes.append(helper.make_node("Clip", [xn, lo, hi], [y]))
        elif isinstance(op, A.TanhOp):
            nodes.append(helper.make_node("Tanh", [xn], [y]))
        elif isinstance(op, A.SigmoidOp):
            nodes.append(helper.make_node("Sigmoid", [xn], [y]))
        elif isinstance(op, A.SiluOp):
            s = tmp("sig")
            nodes += [helper.make_node("Sigmoid", [xn], [s]), helper.make_node("Mul", [xn, s], [y])]
        elif isinstance(op, A.HardswishOp):
            nodes.append(helper.make_node("HardSwish", [xn], [y]))
        elif isinstance(op, A.LeakyReluOp):
            nodes.append(helper.make_node("LeakyRelu", [xn], [y], alpha=0.01))
        elif isinstance(op, A.EluOp):
            nodes.append(helper.make_node("Elu", [xn], [y], alpha=1.0))
        elif isinstance(op, A.MaxPoolOp):
            nodes.append(helper.make_node("MaxPool", [xn], [y], kernel_shape=[v["k"]] * 2, strides=[v["s"]] * 2,
                                          pads=[v["p"]] * 4))
        elif isinstance(op, A.AvgPoolOp):
            nodes.append(helper.make_node("AveragePool", [xn], [y], kernel_shape=[v["k"]] * 2,
                                          strides=[v["s"]] * 2, pads=[v["p"]] * 4, count_include_pad=1))
        elif isinstance(op, A.GapOp):
            nodes.append(helper.make_node("GlobalAveragePool", [xn], [y]))
        elif isinstance(op, A.FlattenOp):
            names[op.output] = (to_2d(x), 2)
            continue
        elif isinstance(op, A.FcOp):
            k = take("fc")
            w = params[f"fc{k}.weight"]
            b = params[f"fc{k}.bias"] if v.get("bias") else np.zeros(w.shape[0], np.float32)
            nodes.append(helper.make_node("Gemm", [to_2d(x), init(f"fc{k}.weight", w), init(f"fc{k}.bias", b)],
                                          [y], transB=1))
            names[op.output] = (y, 2)
            continue
        elif isinstance(op, (A.DropoutOp, A.IdentityOp)):
            names[op.output] = names[x]
            continue
        elif isinstance(op, A.AddOp):
            (an, ar), (bn_, br) = names[op.operands[0]], names[op.operands[1]]
            nodes.append(helper.make_node("Add", [an, bn_], [y]))
            names[op.output] = (y, ar)
            continue
        elif isinstance(op, A.ChannelPaddingOp):
            c = _hwc(x)[2]
            extra = -c % 8
            pads = init(tmp("pads"), np.array([0, 0, 0, 0, 0, extra, 0, 0], np.int64))
            nodes.append(helper.make_node("Pad", [xn, pads], [y]))
        elif isinstance(op, A.SoftmaxCeOp):
            result = to_2d(x)
            continue
        else:
            raise ExportError(f"onnx export: {op.name} has no ONNX form here")
        names[op.output] = (y, rank)
    if result is None:
        raise ExportError("onnx export: the plan has no softmax_ce head")
    nodes.append(helper.make_node("Identity", [result], ["logits"]))
    nodes.append(helper.make_node("Softmax", [result], ["probabilities"], axis=1))
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
