"""Import a PyTorch ``nn.Module`` into the ``arch`` dialect (DESIGN section 9).

::

    from tr_mlir.frontend.torch import from_torch

    imported = from_torch(resnet18(num_classes=10), (32, 32, 3))   # input (H, W, C)
    task = imported.task(batch_size=32, fuse=True)                 # a tr_mlir.Task, weights loaded
    task.fit((x_nhwc, y), epochs=1)
    module.load_state_dict(task.state_dict())                      # trained weights back, NCHW

**Capture.** The module is captured with ``torch.export.export`` (in eval mode, so that batch norm
and dropout appear as single ops; the training flags are restored afterwards); where export cannot
run, with ``torch.fx.symbolic_trace`` plus shape propagation. The captured graph is translated op by
op into a BluePrint tree (:mod:`tr_mlir.blueprint`), whose emission is the ``arch.model`` (tree form)
the normal pipeline takes: a residual join ``a + b`` becomes ``add2(shortcut, main)`` over the two
branches from their fork point (the shorter branch is the shortcut, so ``arch-merge-blocks`` fuses
torchvision's blocks), so the residual structure is exact. Fusion (conv+bn+relu -> ``arch.cbr``,
residual blocks, gap+fc) comes from the normal passes when compiling with ``fuse=True``.

**What maps** (anything else is one :class:`TorchImportError`):

=================================================  =====================================================
PyTorch                                            arch
=================================================  =====================================================
``Conv2d`` (square kernel, equal strides and        ``arch.conv`` (``groups``: dense, grouped, depthwise)
paddings, dilation 1, zeros padding)
``Conv2d(bias=True)`` whose only user is a         ``arch.conv`` + ``arch.bn``; the bias is folded into
``BatchNorm2d``                                    the running mean (exact: train-mode BN removes any
                                                   per-channel constant, so the bias gets no gradient)
``BatchNorm2d`` / ``BatchNorm1d`` (affine,          ``arch.bn`` (``bn2d`` / ``bn1d``)
running statistics, a momentum)
``ReLU``, ``ReLU6`` (``hardtanh(0, 6)``), ``Tanh``,  the activation op
``Sigmoid``, ``SiLU``, ``Hardswish``, ``ELU(1)``,
``LeakyReLU(0.01)``
``MaxPool2d`` / ``AvgPool2d`` (square, no          ``arch.maxpool`` / ``arch.avgpool``
ceil_mode; avg: ``count_include_pad`` or p = 0)
``AdaptiveAvgPool2d(1)``, ``mean((2, 3))``          ``arch.gap``
``AdaptiveAvgPool2d(s)`` dividing the map evenly   ``arch.avgpool(k, k, 0)``; equal to the map: nothing
``Flatten``, ``torch.flatten(x, 1)``,              ``arch.flatten``
``view`` / ``reshape`` to ``(N, -1)``
``Linear``                                         ``arch.fc`` (after a spatial map the weight columns are
                                                   permuted from C,H,W to our H,W,C order)
``Dropout(p)``                                     ``arch.dropout`` (p = 0: nothing)
``a + b`` of two tensors, ``Identity``             ``arch.add2`` / nothing
=================================================  =====================================================

Not representable (a diagnostic, never an approximation): ``torch.cat`` and every other op without
an arch counterpart (e.g. ``F.gelu``, ``x * y``), a conv bias not followed by batch norm (AlexNet,
plain VGG: ``arch.conv`` has no bias), non-square kernels, dilation, ``ceil_mode``, batch norm without
affine parameters or running statistics, a graph whose branches do not nest as residual blocks.

**A folded conv bias** is not a Task parameter: it keeps its imported value (under train-mode batch
norm its gradient is exactly zero). That matches ``torch.optim`` as long as the bias gets no weight
decay (tr-mlir's default, ``decay_all=False``); with ``decay_all=True`` torch would shrink the bias and,
through the running mean, shift the module's eval output, which tr-mlir does not.

**Weights.** Parameters and BN buffers are converted to the Task layouts (:mod:`tr_mlir.task`):
conv weights OIHW -> KRSC ``(O, kh, kw, I/groups)``, FC weights ``(out, in)`` with columns in NHWC
order, vectors ``(C,)``, float32. :meth:`TorchModel.task` builds a :class:`tr_mlir.Task` and loads
them; :meth:`tr_mlir.Task.state_dict` gives them back under the module's own names and layouts.
"""

from __future__ import annotations

import argparse
import contextlib
import linecache
import operator
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from tr_mlir.errors import TrMlirError

__all__ = ["TorchImportError", "TorchModel", "TorchNaming", "from_torch", "load_factory", "main", "train_source"]


class TorchImportError(TrMlirError, ValueError):
    """A module that cannot be imported into the ``arch`` dialect, or torch missing.

    ``str(e)`` names the graph node, the op and, where torch records it, the line of the user's
    module that produced it, e.g.
    ``node 'cat' (aten.cat.default) at net.py:12: `return torch.cat([x, y], 1)`: torch.cat has no arch
    counterpart (arch has no concatenation)``.
    """


def _torch() -> Any:
    try:
        import torch
    except ImportError as e:  # pragma: no cover - exercised only without torch
        raise TorchImportError(
            "tr_mlir.frontend.torch needs PyTorch, which is not importable "
            f"({type(e).__name__}: {e}); install it with pip install 'tr-mlir[torch]'") from None
    return torch


# --------------------------------------------------------------------------------------
# Naming: canonical Task names <-> the module's own names
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NameEntry:
    """One tensor of the module's ``state_dict`` and how it maps onto the Task view.

    ``canonical``: the Task name (``conv3.weight``, ``bn2.running_mean``) or ``None`` for a tensor
    the Task does not hold (a folded conv bias, ``num_batches_tracked``). ``layout``: ``oihw`` (conv
    weight, KRSC in the Task), ``fc`` (Linear weight; ``chw`` set when its columns are permuted from a
    C,H,W flattening), ``vec``, ``folded_bias`` (the constant ``value``), ``batches`` (the
    ``num_batches_tracked`` counter, ``value`` at import). ``shift``: for a running mean, the folded
    conv bias subtracted from it in the Task."""

    torch_name: str
    canonical: str | None
    layout: str
    chw: tuple[int, int, int] | None = None
    value: Any = None
    shift: Any = None


@dataclass
class TorchNaming:
    """The module's ``state_dict`` keys in its own order, each with its :class:`NameEntry`."""

    entries: list[NameEntry] = field(default_factory=list)

    def by_torch_name(self) -> dict[str, NameEntry]:
        return {e.torch_name: e for e in self.entries}

    def config(self) -> list[dict[str, Any]]:
        """JSON-able form (``Task.save`` keeps it, so a loaded checkpoint's ``state_dict()`` has the
        module's keys); arrays as lists of floats (float32 values, exact in JSON's doubles)."""
        def plain(v: Any) -> Any:
            if v is None:
                return None
            a = np.asarray(v)
            return {"shape": list(a.shape), "dtype": str(a.dtype), "data": a.ravel().tolist()}

        return [{"torch_name": e.torch_name, "canonical": e.canonical, "layout": e.layout,
                 "chw": None if e.chw is None else list(e.chw), "value": plain(e.value), "shift": plain(e.shift)}
                for e in self.entries]

    @classmethod
    def from_config(cls, cfg: Any) -> TorchNaming:
        """The naming of :meth:`config`; raises ``ValueError`` / ``KeyError`` / ``TypeError`` for a
        malformed one (``Task.load`` reports it as a :class:`tr_mlir.TaskError`)."""
        def array(v: Any) -> Any:
            if v is None:
                return None
            a = np.array(v["data"], dtype=np.dtype(v["dtype"])).reshape(v["shape"])
            return a if a.ndim else a[()]

        return cls([NameEntry(str(e["torch_name"]), None if e["canonical"] is None else str(e["canonical"]),
                              str(e["layout"]), None if e["chw"] is None else tuple(int(x) for x in e["chw"]),
                              array(e["value"]), array(e["shift"])) for e in cfg])


def _to_task_layout(e: NameEntry, a: np.ndarray) -> np.ndarray:
    """A torch tensor value (NCHW conventions) -> the Task layout of ``e`` (a float32 copy)."""
    a = np.array(a, dtype=np.float32, copy=True)
    if e.layout == "oihw":
        return np.ascontiguousarray(a.transpose(0, 2, 3, 1))
    if e.layout == "fc" and e.chw is not None:
        c, h, w = e.chw
        return np.ascontiguousarray(a.reshape(a.shape[0], c, h, w).transpose(0, 2, 3, 1).reshape(a.shape[0], -1))
    if e.shift is not None:
        return a - np.asarray(e.shift, dtype=np.float32)
    return np.ascontiguousarray(a)


def to_torch_layout(e: NameEntry, a: np.ndarray) -> np.ndarray:
    """Inverse of :func:`_to_task_layout`."""
    a = np.asarray(a, dtype=np.float32)
    if e.layout == "oihw":
        return np.ascontiguousarray(a.transpose(0, 3, 1, 2))
    if e.layout == "fc" and e.chw is not None:
        c, h, w = e.chw
        return np.ascontiguousarray(a.reshape(a.shape[0], h, w, c).transpose(0, 3, 1, 2).reshape(a.shape[0], -1))
    if e.shift is not None:
        return a + np.asarray(e.shift, dtype=np.float32)
    return np.ascontiguousarray(a)


# --------------------------------------------------------------------------------------
# The result
# --------------------------------------------------------------------------------------


@dataclass
class TorchModel:
    """An imported module: its BluePrint, weights in Task layouts and the naming back.

    Attributes:
        blueprint: the BluePrint tree (:mod:`tr_mlir.blueprint`) of the module.
        input_shape: ``(H, W, C)`` of one sample (NHWC; the module reads ``(N, C, H, W)``).
        num_classes: the module's output features (the logits of ``arch.softmax_ce``).
        parameters: Task name -> float32 array in Task layout (``Task.parameters()`` names).
        buffers: Task name -> float32 array (BN running statistics, folded conv biases subtracted).
        naming: the module's ``state_dict`` keys and how each maps (:class:`TorchNaming`).
    """

    blueprint: Any
    input_shape: tuple[int, int, int]
    num_classes: int
    parameters: dict[str, np.ndarray]
    buffers: dict[str, np.ndarray]
    naming: TorchNaming

    def module(self, *, amp: bool = False, fuse: bool = False, name: str = "model") -> Any:
        """The ``builtin.module`` holding the tree-form ``arch.model`` (what ``tr-opt`` reads)."""
        from tr_mlir.blueprint import emit

        return emit(self.blueprint, self.input_shape, num_classes=self.num_classes, amp=amp, fuse=fuse,
                    name=name)

    def task(self, batch_size: int, **kwargs: Any) -> Any:
        """A :class:`tr_mlir.Task` of this model (``kwargs`` go to ``Task``: optimizer, fuse, amp,
        ...) with the module's parameters and BN buffers loaded; its :meth:`~tr_mlir.Task.state_dict`
        uses the module's names (``task.torch_naming``, kept by ``Task.save`` / ``Task.load``). Raises :class:`tr_mlir.TaskError` for bad Task arguments and
        :class:`TorchImportError` if the compiled plan's tensors do not match the import (a bug)."""
        from tr_mlir.task import Task

        task = Task(self.blueprint, self.input_shape, self.num_classes, batch_size, **kwargs)
        want = {n: a.shape for n, a in task.parameters()} | {n: a.shape for n, a in task.buffers()}
        have = {n: a.shape for n, a in (self.parameters | self.buffers).items()}
        if want != have:
            raise TorchImportError(f"internal error: the compiled plan holds {sorted(want.items())[:4]}..., the "
                                   f"import converted {sorted(have.items())[:4]}...")
        task.load_parameters(self.parameters)
        task.load_buffers(self.buffers)
        task.torch_naming = self.naming
        return task


# --------------------------------------------------------------------------------------
# Capture: torch.export (or torch.fx) -> a list of normalized calls
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _P:
    """A parameter or buffer of the module: its ``state_dict`` name and value."""

    name: str
    value: Any


@dataclass
class _Call:
    """One graph node, normalized: ``kind`` is ``layer`` (``layer`` set), ``add`` (two tensor
    ``inputs``) or ``alias`` (passes its input through)."""

    node: Any
    kind: str
    inputs: list[Any]
    layer: Any = None
    binds: list[tuple[str, str, NameEntry]] = field(default_factory=list)  # (counter, field, entry)
    conv_bias: _P | None = None


def _where(node: Any) -> str:
    """``file:line: `code``` of the innermost frame of the user's code in the node's stack trace."""
    trace = node.meta.get("stack_trace") if hasattr(node, "meta") else None
    if not trace:
        return ""
    import re

    torch_dir = str(Path(_torch().__file__).parent)
    best = ""
    for m in re.finditer(r'File "([^"]+)", line (\d+), in (\S+)\n\s*(.*)', trace):
        path, line, _fn, code = m.groups()
        if path.startswith(torch_dir) or path.startswith("<"):
            continue
        best = f"{path}:{line}: `{code.strip() or linecache.getline(path, int(line)).strip()}`"
    return best


def _node_text(node: Any, what: str) -> str:
    where = _where(node)
    return f"node '{node.name}' ({what})" + (f" at {where}" if where else "")


class _Fail(Exception):
    """Raised by a translator: the reason a node is not representable (wrapped with the node)."""


def _pair(v: Any, what: str) -> int:
    if isinstance(v, int):
        return v
    v = list(v)
    if len(v) == 1:
        return int(v[0])
    if len(v) != 2 or v[0] != v[1]:
        raise _Fail(f"{what} {tuple(v)} is not square (arch ops take one k, s and p)")
    return int(v[0])


class _Translator:
    """Normalized translators (shared by the export and the fx path)."""

    def __init__(self, shape: Callable[[Any], tuple[int, ...]]):
        self.shape = shape
        self.flat_chw: dict[Any, tuple[int, int, int]] = {}  # 2-D values that flatten a C,H,W map

    # each returns a _Call for ``node``
    def conv(self, node, x, w: _P, b: _P | None, stride, padding, dilation, groups) -> _Call:
        from tr_mlir import blueprint as bp

        if isinstance(padding, str):
            if padding != "valid":
                raise _Fail(f"padding='{padding}' (give the padding as a number)")
            padding = 0
        k = _pair(tuple(w.value.shape[2:]), "kernel")
        s = _pair(stride, "stride")
        p = _pair(padding, "padding")
        if _pair(dilation, "dilation") != 1:
            raise _Fail(f"dilation {dilation} (arch.conv has no dilation)")
        out_ch = int(w.value.shape[0])
        layer = bp.conv(out_ch, k, s, p) if groups == 1 else bp.group_conv(out_ch, int(groups), k, s, p)
        e = NameEntry(w.name, None, "oihw")
        return _Call(node, "layer", [x], layer, [("conv", "weight", e)], conv_bias=b)

    def bn(self, node, x, w: _P | None, b: _P | None, rm: _P | None, rv: _P | None, momentum, eps) -> _Call:
        from tr_mlir import blueprint as bp

        if w is None or b is None:
            raise _Fail("batch norm without affine parameters (affine=False) has no arch counterpart")
        if rm is None or rv is None:
            raise _Fail("batch norm without running statistics (track_running_stats=False)")
        if momentum is None:
            raise _Fail("batch norm with momentum=None (cumulative average) has no arch counterpart")
        rank = len(self.shape(node))
        if rank not in (2, 4):
            raise _Fail(f"batch norm over a rank-{rank} tensor (arch has (N, C) and (N, C, H, W))")
        if x in self.flat_chw:
            raise _Fail("BatchNorm1d over a flattened spatial map (its features are in C,H,W order)")
        layer = bp.bn(float(momentum), float(eps))
        binds = [("bn", "weight", NameEntry(w.name, None, "vec")), ("bn", "bias", NameEntry(b.name, None, "vec")),
                 ("bn_stats", "running_mean", NameEntry(rm.name, None, "vec")),
                 ("bn_stats", "running_var", NameEntry(rv.name, None, "vec"))]
        return _Call(node, "layer", [x], layer, binds)

    def act(self, node, x, kind: str) -> _Call:
        from tr_mlir import blueprint as bp

        factory = {"relu": bp.relu, "relu6": bp.relu6, "tanh": bp.tanh_act, "sigmoid": bp.sigmoid,
                   "silu": bp.silu, "hardswish": bp.hardswish, "elu": bp.elu, "leaky_relu": bp.leaky_relu}[kind]
        if x in self.flat_chw:
            self.flat_chw[node] = self.flat_chw[x]
        return _Call(node, "layer", [x], factory())

    def hardtanh(self, node, x, lo, hi) -> _Call:
        if (float(lo), float(hi)) != (0.0, 6.0):
            raise _Fail(f"hardtanh({lo}, {hi}) (arch has relu6 = hardtanh(0, 6) only)")
        return self.act(node, x, "relu6")

    def leaky_relu(self, node, x, slope) -> _Call:
        if float(slope) != 0.01:
            raise _Fail(f"leaky_relu with negative_slope={slope} (arch.leaky_relu has slope 0.01)")
        return self.act(node, x, "leaky_relu")

    def elu(self, node, x, alpha=1.0, scale=1.0, input_scale=1.0) -> _Call:
        if (float(alpha), float(scale), float(input_scale)) != (1.0, 1.0, 1.0):
            raise _Fail(f"elu with alpha={alpha} (arch.elu has alpha 1)")
        return self.act(node, x, "elu")

    def maxpool(self, node, x, k, s, p=0, dilation=1, ceil_mode=False) -> _Call:
        from tr_mlir import blueprint as bp

        if ceil_mode:
            raise _Fail("max pooling with ceil_mode=True")
        if _pair(dilation, "dilation") != 1:
            raise _Fail("max pooling with dilation")
        k = _pair(k, "kernel")
        s = k if s is None or (not isinstance(s, int) and len(s) == 0) else _pair(s, "stride")
        return _Call(node, "layer", [x], bp.maxpool(k, s, _pair(p, "padding")))

    def avgpool(self, node, x, k, s, p=0, ceil_mode=False, count_include_pad=True, divisor_override=None) -> _Call:
        from tr_mlir import blueprint as bp

        k = _pair(k, "kernel")
        s = k if s is None or (not isinstance(s, int) and len(s) == 0) else _pair(s, "stride")
        p = _pair(p, "padding")
        if ceil_mode:
            raise _Fail("average pooling with ceil_mode=True")
        if divisor_override is not None:
            raise _Fail("average pooling with divisor_override")
        if p and not count_include_pad:
            raise _Fail("average pooling with count_include_pad=False and padding (arch counts the padding)")
        return _Call(node, "layer", [x], bp.avgpool(k, s, p))

    def adaptive_avg(self, node, x, size) -> _Call:
        from tr_mlir import blueprint as bp

        _, _, h, w = self.shape(x)
        size = [size, size] if isinstance(size, int) else [h if d is None else int(d) for d in size]
        oh, ow = size
        if (oh, ow) == (1, 1):
            return _Call(node, "layer", [x], bp.gap())
        if (oh, ow) == (h, w):
            return _Call(node, "alias", [x])
        if h % oh == 0 and w % ow == 0 and h // oh == w // ow:
            k = h // oh
            return _Call(node, "layer", [x], bp.avgpool(k, k, 0))
        raise _Fail(f"adaptive average pooling of a {h}x{w} map to {oh}x{ow} (not an even square window; "
                    f"arch has gap and avgpool(k, s, p))")

    def mean(self, node, x, dims, keepdim=False) -> _Call:
        from tr_mlir import blueprint as bp

        rank = len(self.shape(x))
        dims = sorted(int(d) % rank for d in ([dims] if isinstance(dims, int) else dims))
        if rank != 4 or dims != [2, 3]:
            raise _Fail(f"mean over dims {dims} of a rank-{rank} tensor (arch has the spatial mean, gap)")
        return _Call(node, "layer", [x], bp.gap())

    def flatten(self, node, x, start=1, end=-1) -> _Call:
        from tr_mlir import blueprint as bp

        shape = self.shape(x)
        if int(start) != 1 or int(end) % len(shape) != len(shape) - 1:
            raise _Fail(f"flatten(start_dim={start}, end_dim={end}) (arch flattens all but the batch)")
        return self._flatten_call(node, x, shape, bp)

    def reshape(self, node, x, _shape_arg) -> _Call:
        from tr_mlir import blueprint as bp

        shape, out = self.shape(x), self.shape(node)
        if len(out) != 2 or out[0] != shape[0]:
            raise _Fail(f"reshape {tuple(shape)} -> {tuple(out)} (arch reshapes only to (N, -1))")
        return self._flatten_call(node, x, shape, bp)

    def _flatten_call(self, node, x, shape, bp) -> _Call:
        if len(shape) == 2:
            if x in self.flat_chw:
                self.flat_chw[node] = self.flat_chw[x]
            return _Call(node, "alias", [x])
        if len(shape) != 4:
            raise _Fail(f"flattening a rank-{len(shape)} tensor")
        _, c, h, w = shape
        if h * w > 1:
            self.flat_chw[node] = (int(c), int(h), int(w))
        return _Call(node, "layer", [x], bp.flatten())

    def linear(self, node, x, w: _P, b: _P | None) -> _Call:
        from tr_mlir import blueprint as bp

        if len(self.shape(x)) != 2:
            raise _Fail(f"linear on a rank-{len(self.shape(x))} tensor (flatten it to (N, F) first)")
        out = int(w.value.shape[0])
        binds = [("fc", "weight", NameEntry(w.name, None, "fc", chw=self.flat_chw.get(x)))]
        if b is not None:
            binds.append(("fc", "bias", NameEntry(b.name, None, "vec")))
        return _Call(node, "layer", [x], bp.fc(out, b is not None), binds)

    def dropout(self, node, x, p) -> _Call:
        from tr_mlir import blueprint as bp

        if x in self.flat_chw:
            self.flat_chw[node] = self.flat_chw[x]
        if float(p) == 0.0:
            return _Call(node, "alias", [x])
        return _Call(node, "layer", [x], bp.dropout(float(p)))

    def add(self, node, a, b, alpha=1) -> _Call:
        if not (hasattr(a, "op") and hasattr(b, "op")):
            raise _Fail("adding a constant (arch adds two tensors: a residual join)")
        if alpha != 1:
            raise _Fail(f"add with alpha={alpha}")
        if tuple(self.shape(a)) != tuple(self.shape(b)):
            raise _Fail(f"add of shapes {tuple(self.shape(a))} and {tuple(self.shape(b))} (broadcasting)")
        return _Call(node, "add", [a, b])

    def alias(self, node, x, *_: Any) -> _Call:
        if x in self.flat_chw:
            self.flat_chw[node] = self.flat_chw[x]
        return _Call(node, "alias", [x])


def _aten_table(torch: Any) -> dict[Any, Callable[..., _Call]]:
    """aten overload -> ``f(tr, node, args)`` (args with parameters resolved to :class:`_P`)."""
    a = torch.ops.aten

    def ops(packet: Any, *names: str) -> list[Any]:
        return [getattr(packet, n) for n in names if hasattr(packet, n)]

    table: dict[Any, Callable[..., _Call]] = {}

    def reg(overloads: list[Any], fn: Callable[..., _Call]) -> None:
        for o in overloads:
            table[o] = fn

    def arg(args, i, default=None):
        return args[i] if len(args) > i else default

    reg(ops(a.conv2d, "default", "padding"),
        lambda t, n, g: t.conv(n, g[0], g[1], arg(g, 2), arg(g, 3, 1), arg(g, 4, 0), arg(g, 5, 1), arg(g, 6, 1)))
    reg(ops(a.batch_norm, "default"), lambda t, n, g: t.bn(n, g[0], g[1], g[2], g[3], g[4], g[6], g[7]))
    for name, kind in (("relu", "relu"), ("relu_", "relu"), ("tanh", "tanh"), ("tanh_", "tanh"),
                       ("sigmoid", "sigmoid"), ("sigmoid_", "sigmoid"), ("silu", "silu"), ("silu_", "silu"),
                       ("hardswish", "hardswish"), ("hardswish_", "hardswish")):
        reg(ops(getattr(a, name), "default"), lambda t, n, g, kind=kind: t.act(n, g[0], kind))
    reg(ops(a.hardtanh, "default") + ops(a.hardtanh_, "default"),
        lambda t, n, g: t.hardtanh(n, g[0], arg(g, 1, -1.0), arg(g, 2, 1.0)))
    reg(ops(a.relu6, "default"), lambda t, n, g: t.act(n, g[0], "relu6"))
    reg(ops(a.leaky_relu, "default") + ops(a.leaky_relu_, "default"),
        lambda t, n, g: t.leaky_relu(n, g[0], arg(g, 1, 0.01)))
    reg(ops(a.elu, "default") + ops(a.elu_, "default"), lambda t, n, g: t.elu(n, g[0], *g[1:4]))
    reg(ops(a.max_pool2d, "default"), lambda t, n, g: t.maxpool(n, g[0], g[1], arg(g, 2), *g[3:6]))
    reg(ops(a.avg_pool2d, "default"), lambda t, n, g: t.avgpool(n, g[0], g[1], arg(g, 2), *g[3:7]))
    reg(ops(a.adaptive_avg_pool2d, "default"), lambda t, n, g: t.adaptive_avg(n, g[0], g[1]))
    reg(ops(a.mean, "dim"), lambda t, n, g: t.mean(n, g[0], g[1], arg(g, 2, False)))
    reg(ops(a.flatten, "using_ints"), lambda t, n, g: t.flatten(n, g[0], arg(g, 1, 0), arg(g, 2, -1)))
    reg(ops(a.view, "default") + ops(a.reshape, "default") + ops(a._unsafe_view, "default"),
        lambda t, n, g: t.reshape(n, g[0], g[1]))
    reg(ops(a.linear, "default"), lambda t, n, g: t.linear(n, g[0], g[1], arg(g, 2)))
    reg(ops(a.dropout, "default") + ops(a.dropout_, "default"), lambda t, n, g: t.dropout(n, g[0], g[1]))
    reg(ops(a.add, "Tensor") + ops(a.add_, "Tensor"), lambda t, n, g: t.add(n, g[0], g[1], arg(g, 2, 1)))
    reg(ops(a.clone, "default") + ops(a.contiguous, "default") + ops(a.alias, "default")
        + ops(a.detach, "default"), lambda t, n, g: t.alias(n, g[0]))
    return table


_NO_COUNTERPART = {
    "cat": "torch.cat has no arch counterpart (arch has no concatenation)",
    "concat": "torch.cat has no arch counterpart (arch has no concatenation)",
}


def _op_label(node: Any) -> str:
    t = node.target
    if node.op == "call_module":
        return f"module {t}"
    if node.op == "call_method":
        return f"Tensor.{t}"
    return str(getattr(t, "__name__", t)) if not hasattr(t, "_schema") else f"aten.{t._schema.name.split('::')[-1]}" \
        f".{t._overloadname}"


def _unsupported(node: Any) -> TorchImportError:
    short = str(getattr(node.target, "__name__", node.target)).split(".")[0].rstrip("_")
    why = _NO_COUNTERPART.get(short, "this op has no arch counterpart")
    return TorchImportError(f"{_node_text(node, _op_label(node))}: {why}; supported: Conv2d, BatchNorm1d/2d, "
                            "ReLU, ReLU6, Tanh, Sigmoid, SiLU, Hardswish, ELU, LeakyReLU, MaxPool2d, AvgPool2d, "
                            "AdaptiveAvgPool2d, flatten/view to (N, -1), Linear, Dropout, residual +, Identity "
                            "(tr_mlir.frontend.torch)")


def _translate(tr: _Translator, node: Any, fn: Callable[[], _Call]) -> _Call:
    from tr_mlir.blueprint import BluePrintError

    try:
        return fn()
    except _Fail as e:
        raise TorchImportError(f"{_node_text(node, _op_label(node))}: {e}") from None
    except BluePrintError as e:
        raise TorchImportError(f"{_node_text(node, _op_label(node))}: not representable: {e}") from None


def _from_export(ep: Any, module: Any, torch: Any) -> tuple[list[_Call], Any, Any]:
    """Normalized calls of an ``ExportedProgram``; also the user input and output nodes."""
    sig = ep.graph_signature
    values = dict(module.state_dict(keep_vars=True))
    names = dict(sig.inputs_to_parameters) | dict(sig.inputs_to_buffers)
    consts = dict(getattr(sig, "inputs_to_lifted_tensor_constants", {}) or {})
    user_inputs = list(sig.user_inputs)
    table = _aten_table(torch)
    tr = _Translator(lambda n: tuple(n.meta["val"].shape))
    env: dict[Any, Any] = {}
    calls: list[_Call] = []
    inp = out = None
    for node in ep.graph.nodes:
        if node.op == "placeholder":
            if node.name in names:
                env[node] = _P(names[node.name], values[names[node.name]].detach())
            elif node.name in consts:
                env[node] = _P(consts[node.name], ep.constants[consts[node.name]])
            elif node.name in user_inputs:
                inp = node
            continue
        if node.op == "output":
            out = node
            continue
        if node.op != "call_function" or node.target not in table:
            raise _unsupported(node)
        args = [_resolve(a, env) for a in node.args]
        kwargs = {k: _resolve(v, env) for k, v in node.kwargs.items()}
        if kwargs:
            # the few kwargs export writes (e.g. alpha, train) go in positionally by schema order
            schema_names = [arg.name for arg in node.target._schema.arguments]
            full = list(args) + [None] * (len(schema_names) - len(args))
            for k, v in kwargs.items():
                if k in schema_names:
                    full[schema_names.index(k)] = v
            while full and full[-1] is None:
                full.pop()
            args = full
        calls.append(_translate(tr, node, lambda node=node, args=args: table[node.target](tr, node, args)))
    return calls, inp, out


def _resolve(a: Any, env: dict[Any, Any]) -> Any:
    if isinstance(a, (list, tuple)):
        return type(a)(_resolve(x, env) for x in a)
    return env.get(a, a) if hasattr(a, "op") else a


def _from_fx(gm: Any, torch: Any) -> tuple[list[_Call], Any, Any]:
    """Normalized calls of a ``torch.fx.GraphModule`` traced with shape propagation."""
    nn, F = torch.nn, torch.nn.functional
    tr = _Translator(lambda n: tuple(n.meta["tensor_meta"].shape))
    calls: list[_Call] = []
    inp = out = None

    def p(prefix: str, name: str, m: Any) -> _P | None:
        v = getattr(m, name, None)
        return None if v is None else _P(f"{prefix}.{name}" if prefix else name, v.detach())

    def module_call(node: Any, m: Any, args: list[Any], kw: dict[str, Any]) -> _Call:
        x = args[0]
        t = node.target
        if type(m) is nn.Conv2d:
            if m.padding_mode != "zeros":
                raise _Fail(f"padding_mode='{m.padding_mode}'")
            return tr.conv(node, x, p(t, "weight", m), p(t, "bias", m), m.stride, m.padding, m.dilation, m.groups)
        if type(m) in (nn.BatchNorm2d, nn.BatchNorm1d):
            return tr.bn(node, x, p(t, "weight", m), p(t, "bias", m), p(t, "running_mean", m),
                         p(t, "running_var", m), m.momentum, m.eps)
        acts = {nn.ReLU: "relu", nn.ReLU6: "relu6", nn.Tanh: "tanh", nn.Sigmoid: "sigmoid", nn.SiLU: "silu",
                nn.Hardswish: "hardswish"}
        if type(m) in acts:
            return tr.act(node, x, acts[type(m)])
        if type(m) is nn.Hardtanh:
            return tr.hardtanh(node, x, m.min_val, m.max_val)
        if type(m) is nn.LeakyReLU:
            return tr.leaky_relu(node, x, m.negative_slope)
        if type(m) is nn.ELU:
            return tr.elu(node, x, m.alpha)
        if type(m) is nn.MaxPool2d:
            return tr.maxpool(node, x, m.kernel_size, m.stride, m.padding, m.dilation, m.ceil_mode)
        if type(m) is nn.AvgPool2d:
            return tr.avgpool(node, x, m.kernel_size, m.stride, m.padding, m.ceil_mode, m.count_include_pad,
                              m.divisor_override)
        if type(m) is nn.AdaptiveAvgPool2d:
            return tr.adaptive_avg(node, x, m.output_size)
        if type(m) is nn.Flatten:
            return tr.flatten(node, x, m.start_dim, m.end_dim)
        if type(m) is nn.Linear:
            return tr.linear(node, x, p(t, "weight", m), p(t, "bias", m))
        if type(m) is nn.Dropout:
            return tr.dropout(node, x, m.p)
        if type(m) is nn.Identity:
            return tr.alias(node, x)
        raise _unsupported(node)

    fns: dict[Any, Callable[..., _Call]] = {
        F.relu: lambda n, g, k: tr.act(n, g[0], "relu"), torch.relu: lambda n, g, k: tr.act(n, g[0], "relu"),
        F.relu6: lambda n, g, k: tr.act(n, g[0], "relu6"), torch.tanh: lambda n, g, k: tr.act(n, g[0], "tanh"),
        F.silu: lambda n, g, k: tr.act(n, g[0], "silu"), torch.sigmoid: lambda n, g, k: tr.act(n, g[0], "sigmoid"),
        F.hardswish: lambda n, g, k: tr.act(n, g[0], "hardswish"),
        torch.flatten: lambda n, g, k: tr.flatten(n, g[0], *(g[1:] or [k.get("start_dim", 0)])),
        F.adaptive_avg_pool2d: lambda n, g, k: tr.adaptive_avg(n, g[0], g[1] if len(g) > 1 else k["output_size"]),
        F.max_pool2d: lambda n, g, k: tr.maxpool(n, g[0], g[1] if len(g) > 1 else k["kernel_size"],
                                                 g[2] if len(g) > 2 else k.get("stride"),
                                                 g[3] if len(g) > 3 else k.get("padding", 0)),
        F.avg_pool2d: lambda n, g, k: tr.avgpool(n, g[0], g[1] if len(g) > 1 else k["kernel_size"],
                                                 g[2] if len(g) > 2 else k.get("stride"),
                                                 g[3] if len(g) > 3 else k.get("padding", 0)),
        F.dropout: lambda n, g, k: tr.dropout(n, g[0], g[1] if len(g) > 1 else k.get("p", 0.5)),
        F.leaky_relu: lambda n, g, k: tr.leaky_relu(n, g[0], g[1] if len(g) > 1 else k.get("negative_slope", 0.01)),
        F.elu: lambda n, g, k: tr.elu(n, g[0], g[1] if len(g) > 1 else k.get("alpha", 1.0)),
        F.sigmoid: lambda n, g, k: tr.act(n, g[0], "sigmoid"), F.tanh: lambda n, g, k: tr.act(n, g[0], "tanh"),
        operator.add: lambda n, g, k: tr.add(n, g[0], g[1]),
        operator.iadd: lambda n, g, k: tr.add(n, g[0], g[1]),
        torch.add: lambda n, g, k: tr.add(n, g[0], g[1], k.get("alpha", 1)),
    }
    methods: dict[str, Callable[..., _Call]] = {
        "view": lambda n, g, k: tr.reshape(n, g[0], g[1:]), "reshape": lambda n, g, k: tr.reshape(n, g[0], g[1:]),
        "flatten": lambda n, g, k: tr.flatten(n, g[0], *(g[1:] or [k.get("start_dim", 0)])),
        "relu": lambda n, g, k: tr.act(n, g[0], "relu"), "add": lambda n, g, k: tr.add(n, g[0], g[1]),
        "add_": lambda n, g, k: tr.add(n, g[0], g[1]),
        "mean": lambda n, g, k: tr.mean(n, g[0], g[1] if len(g) > 1 else k["dim"], k.get("keepdim", False)),
        "contiguous": lambda n, g, k: tr.alias(n, g[0]),
    }
    mods = dict(gm.named_modules())
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            if inp is not None:
                raise TorchImportError(f"{_node_text(node, 'input')}: the module takes more than one input")
            inp = node
            continue
        if node.op == "output":
            out = node
            continue
        args, kw = list(node.args), dict(node.kwargs)
        if (node.op == "call_method" and node.target in ("size", "dim")) or (
                node.op == "call_function" and node.target is getattr and args[1:] == ["shape"]):
            continue  # shape queries (x.view(x.size(0), -1)): Python values, not tensors of the graph
        if node.op == "call_module":
            m = mods[node.target]
            calls.append(_translate(tr, node, lambda node=node, m=m, args=args, kw=kw: module_call(node, m, args, kw)))
        elif node.op == "call_function" and node.target in fns:
            f = fns[node.target]
            calls.append(_translate(tr, node, lambda node=node, f=f, args=args, kw=kw: f(node, args, kw)))
        elif node.op == "call_method" and node.target in methods:
            f = methods[node.target]
            calls.append(_translate(tr, node, lambda node=node, f=f, args=args, kw=kw: f(node, args, kw)))
        else:
            raise _unsupported(node)
    return calls, inp, out


# --------------------------------------------------------------------------------------
# The graph -> a BluePrint tree (residual joins -> add2 over their branches)
# --------------------------------------------------------------------------------------


def _tree(calls: list[_Call], inp: Any, out_node: Any) -> tuple[Any, list[tuple[str, str, NameEntry]]]:
    from tr_mlir import blueprint as bp

    by_node = {c.node: c for c in calls}
    order = {c.node: i for i, c in enumerate(calls)}
    order[inp] = -1
    anc: dict[Any, frozenset] = {inp: frozenset([inp])}
    for c in calls:
        for x in c.inputs:
            if x is not inp and x not in by_node:
                raise TorchImportError(f"{_node_text(c.node, _op_label(c.node))}: reads '{x}', which is not a "
                                       "tensor computed from the model input")
        anc[c.node] = frozenset([c.node]).union(*(anc[x] for x in c.inputs))
    visits: dict[Any, int] = {}

    def chain(node: Any, stop: Any) -> list[tuple[Any, list]]:
        items: list[tuple[Any, list]] = []
        cur = node
        while cur is not stop:
            if cur is inp:
                raise TorchImportError(f"the graph is not a nest of residual blocks: a branch ending at "
                                       f"'{node.name}' does not start at its fork point '{stop.name}'")
            c = by_node[cur]
            visits[cur] = visits.get(cur, 0) + 1
            if visits[cur] > 1:
                raise TorchImportError(f"{_node_text(cur, _op_label(cur))}: its value feeds two branches that "
                                       "do not join as one residual block (arch has add2(shortcut, main) only)")
            if c.kind == "add":
                a, b = c.inputs
                common = anc[a] & anc[b]
                fork = max(common, key=order.__getitem__)
                sa, sb = chain(a, fork), chain(b, fork)
                short, main = (sb, sa) if len(sb) <= len(sa) else (sa, sb)  # torch writes main + shortcut
                items.append((bp.add2(_seq(short), _seq(main)),
                              [bd for _, bs in short for bd in bs] + [bd for _, bs in main for bd in bs]))
                cur = fork
            elif c.kind == "alias":
                cur = c.inputs[0]
            else:
                items.append((c.layer, c.binds))
                cur = c.inputs[0]
        items.reverse()
        return items

    def _seq(items: list[tuple[Any, list]]) -> Any:
        layers = [layer for layer, _ in items]
        return None if not layers else layers[0] if len(layers) == 1 else bp.seq(*layers)

    result = out_node.args[0]
    if isinstance(result, (list, tuple)):
        if len(result) != 1:
            raise TorchImportError(f"the module returns {len(result)} values, expected one tensor of logits")
        result = result[0]
    if result is inp:
        raise TorchImportError("the module returns its input unchanged")
    items = chain(result, inp)
    unused = [c.node.name for c in calls if c.kind != "alias" and c.node not in visits and c.node.users]
    if unused:
        raise TorchImportError(f"nodes {unused[:4]} do not feed the output through residual blocks")
    binds = [bd for _, bs in items for bd in bs]
    return bp.seq(*[layer for layer, _ in items]), binds


def _fold_conv_biases(calls: list[_Call]) -> None:
    """A conv bias whose conv's only user is a batch norm: moved into that BN's running mean."""
    by_node = {c.node: c for c in calls}
    for c in calls:
        if c.conv_bias is None:
            continue
        users = list(c.node.users)
        bn = by_node.get(users[0]) if len(users) == 1 else None
        if bn is None or not any(f == "running_mean" for _, f, _ in bn.binds):
            raise TorchImportError(
                f"{_node_text(c.node, _op_label(c.node))}: a conv bias that does not feed a batch norm is not "
                "representable (arch.conv has no bias; a bias directly before BatchNorm2d is folded into its "
                "running mean); use bias=False or add a BatchNorm2d")
        bias = np.asarray(c.conv_bias.value.detach().cpu().numpy(), np.float32).copy()
        bn.binds = [(k, f, NameEntry(e.torch_name, None, e.layout, shift=bias) if f == "running_mean" else e)
                    for k, f, e in bn.binds]
        c.binds = c.binds + [("", "folded", NameEntry(c.conv_bias.name, None, "folded_bias", value=bias))]


# --------------------------------------------------------------------------------------
# from_torch
# --------------------------------------------------------------------------------------


def _hwc(input_shape: Any) -> tuple[int, int, int]:
    if (isinstance(input_shape, (str, bytes)) or not isinstance(input_shape, Sequence) or len(input_shape) != 3
            or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in input_shape)):
        raise TorchImportError(f"from_torch: input_shape must be (H, W, C) of positive ints, got {input_shape!r}")
    return tuple(int(d) for d in input_shape)  # type: ignore[return-value]


@contextlib.contextmanager
def _eval_mode(module: Any) -> Iterator[None]:
    """``module`` in eval mode for the capture; every submodule's training flag restored after."""
    modes = {m: m.training for m in module.modules()}
    module.eval()
    try:
        yield
    finally:
        for m, flag in modes.items():
            m.training = flag


def _first_line(e: BaseException) -> str:
    text = str(e)
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"


def _capture(module: Any, example: Any, torch: Any, how: str) -> tuple[list[_Call], Any, Any]:
    """Capture ``module`` on ``example`` (``how``: ``auto``, ``export``, ``fx``) and normalize it.
    A capture that fails is a :class:`TorchImportError` naming the tracer(s) and their errors; a
    module that cannot run on the example at all (its channels or size do not fit ``input_shape``)
    is one before any tracer tries (their own tracebacks would bury the reason)."""
    try:
        with torch.no_grad():
            module(example)
    except Exception as e:  # noqa: BLE001 - the user's module refused the input: say so in one line
        n, c, h, w = tuple(example.shape)
        raise TorchImportError(f"the module does not run on an input of {h}x{w}x{c} (H x W x C, from input_shape; "
                               f"the module reads N, C, H, W = {n}, {c}, {h}, {w}): {_first_line(e)}") from None
    errors = []
    if how in ("auto", "export"):
        try:
            ep = torch.export.export(module, (example,), strict=False)
        except Exception as e:  # export cannot run (data-dependent control flow, unsupported Python, ...)
            errors.append(f"torch.export failed ({_first_line(e)})")
        else:
            return _from_export(ep, module, torch)
    if how in ("auto", "fx"):
        try:
            from torch.fx.passes.shape_prop import ShapeProp

            gm = torch.fx.symbolic_trace(module)
            ShapeProp(gm).propagate(example)
        except Exception as e:
            errors.append(f"torch.fx symbolic tracing failed ({_first_line(e)})")
        else:
            return _from_fx(gm, torch)
    raise TorchImportError(f"cannot capture {type(module).__name__}: {' and '.join(errors)}")


def from_torch(module: Any, input_shape: Sequence[int], *, capture: str = "auto") -> TorchModel:
    """Import ``module`` (a ``torch.nn.Module`` reading ``(N, C, H, W)`` float32 and returning
    ``(N, num_classes)`` logits) for inputs of one sample's shape ``input_shape = (H, W, C)`` (NHWC,
    the Task's convention).

    ``capture``: ``'auto'`` (``torch.export``, falling back to ``torch.fx``), ``'export'`` or ``'fx'``.

    Returns a :class:`TorchModel`: the BluePrint, the weights in Task layouts (float32), the naming
    back to the module's ``state_dict``. The module's own parameters are copied, not shared; its
    training flags are unchanged.

    Raises:
        TorchImportError: torch is not importable; ``module`` is not an ``nn.Module``; the module
            cannot be captured; one op is not representable (the message names the node, the op and
            the line of the module's source that made it).
    """
    torch = _torch()
    if not isinstance(module, torch.nn.Module):
        raise TorchImportError(f"from_torch: expected a torch.nn.Module, got {type(module).__name__}")
    if capture not in ("auto", "export", "fx"):
        raise TorchImportError(f"from_torch: capture must be 'auto', 'export' or 'fx', got {capture!r}")
    h, w, c = _hwc(input_shape)
    example = torch.randn(2, c, h, w)
    with _eval_mode(module):
        calls, inp, out = _capture(module, example, torch, capture)
    _fold_conv_biases(calls)
    blueprint, binds = _tree(calls, inp, out)
    out_val = out.args[0][0] if isinstance(out.args[0], (list, tuple)) else out.args[0]
    meta = out_val.meta.get("val", None)
    shape = tuple(meta.shape) if meta is not None else tuple(out_val.meta["tensor_meta"].shape)
    if len(shape) != 2:
        raise TorchImportError(f"{_node_text(out_val, 'output')}: the module returns shape {shape}, expected "
                               "(N, num_classes) logits")
    num_classes = int(shape[1])

    state = {k: v.detach().cpu() for k, v in module.state_dict().items()}
    counters = {"conv": -1, "bn": -1, "fc": -1, "bn_stats": -1}
    entries: dict[str, NameEntry] = {}
    params: dict[str, np.ndarray] = {}
    buffers: dict[str, np.ndarray] = {}
    for counter, fld, e in binds:
        if counter == "":
            entries[e.torch_name] = e
            continue
        if fld in ("weight", "running_mean"):
            counters[counter] += 1
        prefix = "bn" if counter == "bn_stats" else counter
        name = f"{prefix}{counters[counter]}.{fld}"
        e = NameEntry(e.torch_name, name, e.layout, e.chw, e.value, e.shift)
        if e.torch_name in entries:
            raise TorchImportError(f"the module uses '{e.torch_name}' twice (shared layers are not representable)")
        entries[e.torch_name] = e
        value = _to_task_layout(e, state[e.torch_name].float().numpy())
        (buffers if counter == "bn_stats" else params)[name] = value
    for key, v in state.items():
        if key in entries:
            continue
        if key.endswith("num_batches_tracked") and key[: -len("num_batches_tracked")] + "running_mean" in entries:
            entries[key] = NameEntry(key, None, "batches", value=int(v.item()))
        else:
            raise TorchImportError(f"the module's state_dict entry '{key}' is not used by the captured graph "
                                   "(a parameter the forward never reads cannot be trained here)")
    naming = TorchNaming([entries[k] for k in state])
    return TorchModel(blueprint, (h, w, c), num_classes, params, buffers, naming)


# --------------------------------------------------------------------------------------
# Command line: python -m tr_mlir.frontend.torch FILE.py:FACTORY --input-shape H,W,C
# --------------------------------------------------------------------------------------


def load_factory(spec: str, num_classes: int | None = None) -> Any:
    """Import ``FILE.py`` and call ``FACTORY`` (with ``num_classes`` when it takes an argument and
    one is given); returns the ``nn.Module``. Raises :class:`TorchImportError` naming the problem
    (no such file, import failure with its line, no such factory, a result that is no module)."""
    torch = _torch()
    from tr_mlir.pyfile import PythonFileError, import_spec, takes_arguments

    try:
        path, mod, func_name = import_spec(spec, "_tr_torch_model_", "FACTORY")
    except PythonFileError as e:
        raise TorchImportError(str(e)) from None
    fn = getattr(mod, func_name, None)
    if fn is None or not callable(fn):
        raise TorchImportError(f"{path} defines no function '{func_name}'")
    takes = takes_arguments(fn, unknown=False)
    try:
        result = fn(num_classes) if takes and num_classes is not None else fn()
    except (Exception, SystemExit) as e:
        raise TorchImportError(f"{func_name}() in {path} failed: {type(e).__name__}: {e}") from None
    if not isinstance(result, torch.nn.Module):
        raise TorchImportError(f"{func_name}() in {path} must return a torch.nn.Module, got {type(result).__name__}")
    return result


def train_source(spec: str) -> Any:
    """``tr-train --torch-model FILE.py:FACTORY``: a :class:`tr_mlir.tools.train_inputs.ModelSource`
    whose ``build_for(num_classes, (H, W, C))`` imports the module for the dataset's shape and class
    count and returns the :class:`TorchModel` (the Task is made with its weights). Errors are
    ``TrainError`` s (``tr-train: error: ...``, exit 1)."""
    from tr_mlir.tools.train_inputs import ModelSource
    from tr_mlir.tools.train_options import TrainError

    def build_for(num_classes: int, shape: tuple[int, int, int]) -> TorchModel:
        try:
            imported = from_torch(load_factory(spec, num_classes), tuple(shape))
        except TorchImportError as e:
            raise TrainError(f"--torch-model {spec}: {e}") from None
        if imported.num_classes != num_classes:
            raise TrainError(f"--torch-model {spec}: the module outputs {imported.num_classes} classes, the "
                             f"dataset has {num_classes}")
        return imported

    def build(num_classes: int) -> Any:
        raise TrainError("--torch-model: the module is imported for the dataset's shape (build_for)")

    return ModelSource(spec, f"torch.nn.Module from {spec.rpartition(':')[0]}", None, 10, build,
                       build_for=build_for)


def _parse_hwc(text: str) -> tuple[int, int, int]:
    try:
        dims = tuple(int(d) for d in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected H,W,C, got '{text}'") from None
    if len(dims) != 3 or min(dims) < 1:
        raise argparse.ArgumentTypeError(f"expected H,W,C of positive ints, got '{text}'")
    return dims  # type: ignore[return-value]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tr_mlir.frontend.torch FILE.py:FACTORY --input-shape H,W,C [--fuse] [--amp]``:
    print the module's tree-form arch IR (``tr-opt`` reads it). Exit 0; 1 with ``error: ...`` on
    stderr for a missing file, a bad factory, an op that is not representable or a bad argument."""
    ap = argparse.ArgumentParser(prog="python -m tr_mlir.frontend.torch",
                                 description="Import a PyTorch nn.Module and print its arch IR (tree form).")
    ap.add_argument("model", metavar="FILE.py:FACTORY", help="a Python file and a function returning the module")
    ap.add_argument("--input-shape", type=_parse_hwc, required=True, metavar="H,W,C", help="one sample, NHWC")
    ap.add_argument("--amp", action="store_true", help="record amp on the model")
    ap.add_argument("--fuse", action="store_true", help="record fuse on the model")
    ap.add_argument("--num-classes", type=int, default=10, metavar="N",
                    help="passed to FACTORY(num_classes) when it takes an argument, as tr-train does (default 10)")

    def usage_error(message: str) -> NoReturn:
        print(f"{ap.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(1)

    ap.error = usage_error  # type: ignore[method-assign]  # exit 1 like tr-train and tr-opt, not argparse's 2
    args = ap.parse_args(argv)
    try:
        imported = from_torch(load_factory(args.model, args.num_classes), args.input_shape)
        print(imported.module(amp=args.amp, fuse=args.fuse))
    except TorchImportError as e:
        print(f"{ap.prog}: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
