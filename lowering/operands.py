"""Operand binding table: which kernel argument each positional operand of a graph node feeds.

Graph nodes (``memplan.nodes``) are positional, as the seed's: a COMPUTE node has input and output
DTensor ids, a RANGE node has input/output region spans plus scalar ids. Kernels
(:data:`tr_mlir.lowering.cpu.KERNELS`) take named arrays. :data:`OPERANDS` is the one place
that connects them, keyed by kernel name (the op name without its precision token, see
:func:`~tr_mlir.lowering.cpu.kernel_name`):

* ``ins`` / ``outs``: the kernel argument of each positional input / output id; ``None`` marks an
  operand this backend does not read (the seed's cuDNN conv statistics ``sum`` / ``sq_sum``, the
  forward loss' ``scaling``, the GPU tree-reduction partials of softmax CE and LARS). One
  argument may appear in both lists (state updated in place: running statistics, the dropout RNG,
  optimizer moments); both must then name one DTensor.
* outputs after the listed ones are **workspaces**: DTensors named ``ws_<arg>``
  (:func:`workspace_tensor_name`) bound to the kernel's workspace argument ``<arg>``. The
  compiler plans them from :meth:`KernelSpec.workspace_shapes` (see
  :func:`tr_mlir.passes._descriptors.plan_workspaces`), so nothing is allocated at run time.
* ``in_ranges`` / ``out_ranges``: the kernel argument of each region span; a name ending in
  ``*`` takes every remaining span as a tuple (pairwise copies and casts, clears).
* ``host``: the argument that receives the backend's host staging views of the output spans
  (``RANGE_H2D_COPY_A|B``: the pinned zone the host fills with the next batch).
* ``when``: arguments passed only when a static param is true (the FC bias: ``bias = false``
  leaves a placeholder DTensor that must not be bound).
* ``optional``: trailing ``outs`` a node may leave out; the kernel then gets ``None`` there and
  skips that output (the ReLU mask, which a ReLU whose backward reads its output does not write).
  Such an op plans no workspaces, so a short output list is never mistaken for workspaces.

The compiler (workspace planning) and every backend (capture) read this table, so a new op is
one entry here plus one kernel.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tr_mlir.errors import PluginError
from tr_mlir.dialects.memplan import WORKSPACE_PREFIX  # noqa: F401 - re-exported (the DTensor naming rule)
from tr_mlir.lowering.cpu.activation import ACTIVATIONS
from tr_mlir.lowering.cpu.registry import kernel_name



def workspace_tensor_name(arg: str) -> str:
    """DTensor name of the shared workspace for kernel workspace argument ``arg`` (``ws_col``)."""
    return WORKSPACE_PREFIX + arg


@dataclass(frozen=True)
class Operands:
    """How one op's positional node operands map to its kernel's named arguments (module doc)."""

    ins: tuple[str | None, ...] = ()
    outs: tuple[str | None, ...] = ()
    in_ranges: tuple[str, ...] = ()
    out_ranges: tuple[str, ...] = ()
    host: str | None = None
    when: Mapping[str, str] = field(default_factory=dict)
    optional: frozenset[str] = frozenset()

    @property
    def required_outs(self) -> int:
        """How many of ``outs`` a node must give (the trailing ``optional`` ones may be left out)."""
        n = len(self.outs)
        while n and self.outs[n - 1] in self.optional:
            n -= 1
        return n

    def passes(self, arg: str, params: Mapping[str, Any]) -> bool:
        """Whether ``arg`` is bound under the node's static ``params`` (see ``when``)."""
        cond = self.when.get(arg)
        return cond is None or bool(params.get(cond))

    def named(self, ins: tuple[Any, ...], outs: tuple[Any, ...], params: Mapping[str, Any],
              op: str = "") -> tuple[dict[str, Any], tuple[Any, ...]]:
        """``({arg: operand}, trailing workspace outputs)`` for one node's positional operands.

        Operands may be anything (ids, shapes, arrays). Raises ``ValueError`` naming the op when
        there are fewer operands than the table lists, more inputs than it lists, or one argument
        gets two different operands.
        """
        if len(ins) != len(self.ins):
            raise ValueError(f"'{op}' node has {len(ins)} inputs, its operand table lists {len(self.ins)} "
                             f"({list(self.ins)})")
        if len(outs) < self.required_outs:
            least = "" if self.required_outs == len(self.outs) else f"at least {self.required_outs} of "
            raise ValueError(f"'{op}' node has {len(outs)} outputs, its operand table lists {least}"
                             f"{len(self.outs)} ({list(self.outs)})")
        out: dict[str, Any] = {}
        for arg, value in (*zip(self.ins, ins), *zip(self.outs, outs)):
            if arg is None or not self.passes(arg, params):
                continue
            if arg in out and not _same(out[arg], value):
                raise ValueError(f"'{op}' node binds kernel argument '{arg}' to two operands: {out[arg]!r} "
                                 f"and {value!r}")
            out[arg] = value
        return out, tuple(outs[len(self.outs):])

    def named_ranges(self, in_ranges: tuple[Any, ...], out_ranges: tuple[Any, ...],
                     op: str = "") -> dict[str, Any]:
        """``{arg: span or tuple of spans}`` for one RANGE node (see ``in_ranges``/``out_ranges``)."""
        out: dict[str, Any] = {}
        for names, spans, what in ((self.in_ranges, in_ranges, "input"), (self.out_ranges, out_ranges, "output")):
            collect = bool(names) and names[-1].endswith("*")
            fixed = names[:-1] if collect else names
            if len(spans) < len(fixed) or (not collect and len(spans) != len(fixed)):
                raise ValueError(f"'{op}' node has {len(spans)} {what} ranges, its operand table lists "
                                 f"{list(names)}")
            pairs: list[tuple[str, Any]] = list(zip(fixed, spans))
            if collect:
                pairs.append((names[-1][:-1], tuple(spans[len(fixed):])))
            for arg, value in pairs:
                if arg in out and not _same(out[arg], value):
                    raise ValueError(f"'{op}' node binds kernel argument '{arg}' to two different ranges")
                out[arg] = value
        return out


def _same(a: Any, b: Any) -> bool:
    if hasattr(a, "__array_interface__") and hasattr(b, "__array_interface__"):
        return (a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
                and a.nbytes == b.nbytes)
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _same_for(*names: str, entry: Operands) -> dict[str, Operands]:
    return {n: entry for n in names}


_ACTS = tuple(ACTIVATIONS)  # the element-wise activations of the kernel library (ReLU has its mask)
_XY = Operands(("x",), ("y",))
_DYDX = Operands(("dy",), ("dx",))
_NONE = Operands()
_BN_FWD = Operands(("x", "gamma", "beta", "running_mean", "running_var", "eps", "momentum"),
                   ("y", "save_mean", "save_istd", "running_mean", "running_var"))
_BN_BWD = Operands(("dy", "gamma", "save_mean", "save_istd", "x"), ("dx", "dgamma", "dbeta"))
_CE_FWD = Operands(("logits", None, "batch_size", "labels", "label_smoothing"),
                   ("loss", "inv_batch", "pred", "probs", "top1", "top5", None, None, None))
_LARS_TRUST = Operands(("w", "g", "trust_coefficient", "weight_decay", "eps", "loss_scale", "has_nan", None),
                       ("trust_ratio",))
_LARS_UPDATE = Operands(("w", "g", "m", "trust_ratio", "lr", "momentum", "weight_decay", "loss_scale", "has_nan"),
                        ("w", "m"))
_ADAM_IDS = ("beta1", "beta2", "eps", "loss_scale", "bc1", "bc2", "has_nan")

OPERANDS: dict[str, Operands] = {
    # conv: the seed's cuDNN forward also emits per-channel sum / sq_sum (BN fusion statistics)
    **_same_for("conv_fwd", "conv_inf", entry=Operands(("x", "w"), ("y", None, None))),
    "conv_bwd": Operands(("dy", "w", "x"), ("dx", "dw")),
    "conv_bwd_first_layer": Operands(("dy", "w", "x"), ("dw",)),
    **_same_for("bn1d_fwd", "bn2d_fwd", entry=_BN_FWD),
    **_same_for("bn1d_bwd", "bn2d_bwd", entry=_BN_BWD),
    **_same_for("bn1d_inf", "bn2d_inf", entry=Operands(("x", "eq_scale", "eq_bias"), ("y",))),
    "bn_update_eq_params": Operands(("gamma", "beta", "running_mean", "running_var", "eps"), ("eq_scale", "eq_bias")),
    # a ReLU whose backward reads its output writes no mask (its nodes list y alone)
    **_same_for("relu_fwd", "relu_inf", entry=Operands(("x",), ("y", "mask"), optional=frozenset({"mask"}))),
    "relu_bwd": Operands(("dy", "mask"), ("dx",)),
    "relu_bwd_from_output": Operands(("dy", "y"), ("dx",)),
    **{f"{a}_{p}": _XY for a in _ACTS for p in ("fwd", "inf")},
    # the kernels recompute f'(x) from the input: the output is not read
    **{f"{a}_bwd": Operands(("dy", "x"), ("dx",)) for a in _ACTS},
    **_same_for("maxpool_fwd", "maxpool_inf", entry=Operands(("x",), ("y", "mask"))),
    "maxpool_bwd": Operands(("dy", "mask"), ("dx",)),
    **_same_for("avgpool_fwd", "avgpool_inf", "gap_fwd", "gap_inf", entry=_XY),
    **_same_for("avgpool_bwd", "gap_bwd", entry=_DYDX),
    **_same_for("fc_fwd", "fc_inf", entry=Operands(("x", "w", "b"), ("y",), when={"b": "bias"})),
    "fc_bwd": Operands(("dy", "w", "x"), ("dx", "dw", "db"), when={"db": "bias"}),
    "fc_bwd_first_layer": Operands(("dy", "w", "x"), ("dw", "db"), when={"db": "bias"}),
    **_same_for("flatten_fwd", "flatten_inf", "channel_padding_fwd", "channel_padding_inf", entry=_XY),
    **_same_for("flatten_bwd", "channel_padding_bwd", entry=_DYDX),
    **_same_for("flatten_bwd_first_layer", "channel_padding_bwd_first_layer", entry=_NONE),
    # identity_bwd is the copy kernel identity_fwd(x, y): dy -> x, dx -> y
    **_same_for("identity_fwd", "identity_inf", "identity_bwd", "dtensor_copy", entry=_XY),
    **_same_for("softmax_ce_fwd", "softmax_ce_inf", entry=_CE_FWD),
    "softmax_ce_bwd": Operands(("probs", "inv_batch", "loss_scale", "labels", "label_smoothing"), ("dlogits",)),
    "dropout_fwd": Operands(("x", "rng"), ("y", "mask", "rng")),
    "dropout_bwd": Operands(("dy", "mask"), ("dx",)),
    "add_fwd": Operands(("a", "b"), ("y",)),
    "add_bwd": Operands(("dy",), ("da", "db")),
    "grad_accum": Operands(("dy", "dx"), ("dx",)),
    "scalar_increment": Operands(("step", "has_nan"), ("step",)),
    "adam_bias_correction": Operands(("step", "beta1", "beta2"), ("bc1", "bc2")),
    **{f"lars_compute_trust_ratio_{f}": _LARS_TRUST for f in ("fc", "first", "deep")},
    **{f"lars_update_{f}": _LARS_UPDATE for f in ("fc", "first", "deep")},
    **{f"lars_nesterov_update_{f}": _LARS_UPDATE for f in ("fc", "first", "deep")},
    # range ops
    "range_clear": Operands(out_ranges=("out*",)),
    **_same_for("range_d2d_copy", "range_cast_fp32_to_fp16", "range_cast_fp16_to_fp32",
                entry=Operands(in_ranges=("src*",), out_ranges=("dst*",))),
    **_same_for("range_h2d_copy_a", "range_h2d_copy_b", entry=Operands(out_ranges=("dst*",), host="src")),
    **_same_for("range_mean_allreduce", "range_sum_allreduce", "range_bn_stats_allreduce",
                entry=Operands(in_ranges=("data*",), out_ranges=("data*",))),
    "range_check_nan": Operands(outs=("has_nan",), in_ranges=("grads*",)),
    "range_grad_scaling": Operands(("has_nan", "loss_scale"), ("loss_scale",)),
    "range_ema_param_update": Operands(("decay", "has_nan"), in_ranges=("w",), out_ranges=("ema",)),
    "range_accum_metrics": Operands(("batch_size", "loss", "top1", "top5"), ("acc_loss", "acc_top1", "acc_top5")),
    "range_update_weight_sgd": Operands(("lr", "weight_decay", "loss_scale", "has_nan"),
                                        in_ranges=("w", "g"), out_ranges=("w",)),
    **_same_for("range_update_weight_momentum", "range_update_weight_nesterov",
                entry=Operands(("lr", "weight_decay", "momentum", "loss_scale", "has_nan"),
                               in_ranges=("w", "g", "m"), out_ranges=("w", "m"))),
    **_same_for("range_update_weight_adam", "range_update_weight_adamw",
                entry=Operands(("lr", "weight_decay", *_ADAM_IDS), in_ranges=("w", "g", "m", "v"),
                               out_ranges=("w", "m", "v"))),
    "range_update_bias_sgd": Operands(("lr", "loss_scale", "has_nan"), in_ranges=("w", "g"), out_ranges=("w",)),
    **_same_for("range_update_bias_momentum", "range_update_bias_nesterov",
                entry=Operands(("lr", "momentum", "loss_scale", "has_nan"), in_ranges=("w", "g", "m"),
                               out_ranges=("w", "m"))),
    "range_update_bias_adam": Operands(("lr", *_ADAM_IDS), in_ranges=("w", "g", "m", "v"),
                                       out_ranges=("w", "m", "v")),
}
"""Kernel name -> :class:`Operands` for every op the compiler emits (module doc)."""


class OperandsError(PluginError, KeyError):
    """A node op without an operand row, or a row :func:`register_operands` cannot add; the
    message names the op and the fix."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


def register_operands(name: str, entry: Operands) -> Operands:
    """Add the operand row of a plugin's kernel ``name`` (a registry key, or a node op name in any
    spelling: ``CONV_RELU_FP32_FWD`` and ``conv_relu_fwd`` are one row). Registering the same row
    twice is a no-op. Returns ``entry``.

    Raises :class:`OperandsError` when ``entry`` is not an :class:`Operands` or the op already has
    another row.
    """
    key = kernel_name(name)
    if not isinstance(entry, Operands):
        raise OperandsError(f"register_operands('{name}'): expected an Operands row, got {type(entry).__name__}")
    old = OPERANDS.get(key)
    if old is not None and old != entry:
        raise OperandsError(f"register_operands('{name}'): '{key}' already has an operand row {old}")
    OPERANDS[key] = entry
    return entry


def operands_for(op: str) -> Operands:
    """The :class:`Operands` of node op ``op`` (any spelling: ``CONV_AMP_BWD`` or ``conv_bwd``).

    Raises :class:`OperandsError` naming the op when the table has no entry (a plugin's kernel
    needs one: ``tr_mlir.extend.register_operands``).
    """
    name = kernel_name(op)
    entry = OPERANDS.get(name)
    if entry is None:
        raise OperandsError(f"no operand row for node op '{op}' (kernel '{name}'): the descriptor that emits it "
                            f"needs one; register it with tr_mlir.extend.register_operands('{name}', Operands(...))")
    return entry
