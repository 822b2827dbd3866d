"""Capture: torch.export (or torch.fx) -> a list of normalized calls (:mod:`tr_mlir.frontend.torch`)."""

from __future__ import annotations

import linecache
import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tr_mlir.frontend.torch._naming import (  # noqa: F401
    NameEntry,
    TorchImportError,
    TorchNaming,
    _to_task_layout,
    _torch,
    to_torch_layout,
)

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


_PACKAGE_DIR = str(Path(__file__).resolve().parents[2])
"""The ``tr_mlir`` package's directory: its frames (the importer calling ``torch.export``) are not
the user's code."""


def _where(node: Any) -> str:
    """``file:line: `code``` of the innermost frame of the user's code in the node's stack trace
    (torch's and tr_mlir's own frames skipped); with none (a built-in module such as ``nn.GELU``
    inside an ``nn.Sequential``: its forward is torch's), the submodule that made the node, from
    the node's ``nn_module_stack``: ``submodule '1' (GELU)``."""
    meta = node.meta if hasattr(node, "meta") else {}
    trace = meta.get("stack_trace")
    best = ""
    if trace:
        import re

        skip = (str(Path(_torch().__file__).parent), _PACKAGE_DIR, "<")
        for m in re.finditer(r'File "([^"]+)", line (\d+), in (\S+)\n\s*(.*)', trace):
            path, line, _fn, code = m.groups()
            if path.startswith(skip):
                continue
            best = f"{path}:{line}: `{code.strip() or linecache.getline(path, int(line)).strip()}`"
    if best:
        return best
    stack = meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    path, cls = list(stack.values())[-1][:2]
    name = getattr(cls, "__name__", None) or str(cls).rsplit(".", 1)[-1]
    return f"submodule '{path}' ({name})"


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
