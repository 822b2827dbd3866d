"""``memplan-build-graph``: Compiler phase 4, the shape-free ``train`` and ``infer`` ComputationGraphs.

Per program (after ``memplan-create-plans``) this pass writes ``memplan.graph @train`` and
``memplan.graph @infer`` (facts sheet section 8.5; DESIGN section 4). Nodes hold DTensor ids of
the plans (identical in all six) and never shapes. Each layer's node patterns come from its
descriptor (:mod:`tr_mlir.passes._descriptors`); their operands are resolved here:

* a tensor name of the layer -> the DTensor ``l<layer>.<name>`` (a shared workspace such as
  ``conv_im2col`` -> the one DTensor of that name); ``@name`` -> the baseline DTensor ``name``;
* ``$x`` / ``$x1`` -> the tensor holding input value 0 / 1: its producer's output tensor, or
  ``data_a`` / ``data_b`` for the first layer (its A and B copies);
* ``$dy`` -> where the gradient of the layer's output lives; ``$dx`` / ``$dx1`` -> where the layer
  writes the gradient of input 0 / 1. The gradient of a value ``v`` lives

  - in ``<out>_grad`` when ``v`` has several uses or its producer reads it in backward (phase 1
    allocated that slot). With several uses the contributions run in backward order (layers from
    last to first, operands in order): the first writes ``<out>_grad``, every later one writes
    ``<out>_grad_part`` and is followed by ``GRAD_ACCUM_<P>(ins [part, grad], outs [grad])``
    (``grad += part``), so ``v`` itself is never overwritten while a consumer may still read it;
  - in the consumer's own ``dx_tensor`` (GAP's ``gap_grad_slot``, SoftmaxCE's ``ce_output``) when
    ``v`` has one use and the consumer declares one (the seed's rule);
  - otherwise in ``v``'s own buffer (in-place dX: the only consumer overwrites the value it has
    just finished reading, the seed's rule "the gradient w.r.t. T lives in T's own buffer").

Train graph (GraphIds of facts section 10):

* ``first_layer_fwd_a`` / ``_b``: ``DTENSOR_COPY(ins [label_a|label_b], outs [label_smce])``, then
  the first layer's forward on ``data_a`` / ``data_b``;
* ``deep_fwd_bwd``: forward of layers 1..L-1, then backward of layers L-1..1 (with the
  ``GRAD_ACCUM`` nodes above);
* ``first_layer_bwd_a`` / ``_b``: the first layer's backward (its ops are the descriptors'
  ``*_BWD_FIRST_LAYER`` kinds: weight gradients only, no dX);
* ``zero_grad``: ``RANGE_CLEAR`` over ``[G_BN_BIAS .. G_DEEP_CONV_FP16]`` (R_RESULT included);
* the auxiliary graphs of facts section 8.5(d), in its order: ``transfer_a`` / ``_b``
  (``RANGE_H2D_COPY_A|B``, out ranges ``[I_*_LABEL]``, ``[I_*_DATA]``), ``first_comm`` /
  ``deep_comm`` (``RANGE_MEAN_ALLREDUCE`` over ``[G_BN_BIAS .. G_FIRST_CONV]`` /
  ``[G_DEEP_CONV .. R_RESULT]``), ``stats_comm`` (with BN: ``RANGE_BN_STATS_ALLREDUCE`` over
  ``[B_NEXT_MEAN .. B_NEXT_VAR]``), ``optimizer`` (Adam/AdamW: ``SCALAR_INCREMENT(step, has_nan -> step)``,
  ``ADAM_BIAS_CORRECTION(step, beta, beta2 -> bias_corr1, bias_corr2)``; weights:
  ``RANGE_UPDATE_WEIGHT_<K>`` over W ``[W_FC_WEIGHT .. W_DEEP_CONV]``, G, (M), (V), ids
  ``[lr, wd, (beta), (beta2, eps), scaling, (bias_corr1, bias_corr2), has_nan]``; bias-like
  parameters (BN gamma/beta, FC bias): ``RANGE_UPDATE_BIAS_<K>`` over ``[W_BN_BIAS .. W_FC_BIAS]``
  and partners, the same ids without ``wd`` (option ``decay_all``: the weight kernel of the
  optimizer there too, ``RANGE_UPDATE_WEIGHT_<K>`` with ``wd``: every parameter decays; LARS'
  bias-like parameters then take the decaying momentum / Nesterov kernel); LARS: the weights go to ``lars_fc_opt`` /
  ``lars_first_conv_opt`` / ``lars_deep_conv_opt`` as ``LARS_COMPUTE_TRUST_RATIO_<F>(W, G, tc,
  wd, eps, scaling, has_nan, partials -> N)`` and ``LARS_[NESTEROV_]UPDATE_<F>(W, G, M, N, lr,
  beta, wd, scaling, has_nan -> W, M)`` per weight tensor, paired by name), ``cast_main_fp32_to_fp16``
  (AMP: ``[W_FC_WEIGHT .. W_DEEP_CONV] -> [A_FC_WEIGHT .. A_DEEP_CONV]``),
  ``cast_deep_grad_fp16_to_fp32`` / ``cast_first_grad_fp16_to_fp32`` (AMP, when the fp16 conv
  gradients exist), ``nan_check_and_grad_scaling`` (``RANGE_CHECK_NAN`` over ``[G_BN_BIAS ..
  G_DEEP_CONV]`` -> ``has_nan``; AMP: ``RANGE_GRAD_SCALING(has_nan, scaling -> scaling)``),
  ``update_stats`` (with BN: ``RANGE_D2D_COPY`` ``[B_NEXT_MEAN], [B_NEXT_VAR] -> [B_PREV_MEAN],
  [B_PREV_VAR]``), ``update_bn_inf_params`` (one ``BN_UPDATE_EQ_PARAMS(gamma, beta, next_mean,
  next_var, bn_epsilon -> eq_scale, eq_bias)`` per batch norm, paired by name), ``clear_metrics``
  (``RANGE_CLEAR [R_RESULT_ACCUMULATED]``), ``accum_metrics`` / ``_train_last`` / ``_val_last``
  (``RANGE_ACCUM_METRICS(<batch size>, loss, top1, top5 -> accum_loss, accum_top1, accum_top5)``
  with ``local_batch_size`` / ``last_train_batch_size`` / ``last_val_batch_size``).
  EMA is not planned yet (no E_* tensors), so ``ema_update`` and the EMA casts stay empty.

Infer graph: ``inf_main_a`` / ``_b`` = ``DTENSOR_COPY`` of the labels, then every layer's inference
nodes (the first layer on ``data_a`` / ``data_b``); a layer without inference nodes (dropout) is
skipped and its output stands for its input; ``val_result_comm``: ``RANGE_MEAN_ALLREDUCE`` over
``[R_RESULT_ACCUMULATED]``.

Node params: each graph has a table of op parameter dictionaries (deduplicated); a node points at
its kernel's parameters (a conv inside a fused block at its own ``k``, ``s``, ``p``, ``groups``), a
layer node without kernel-specific parameters at the layer op's properties (the seed's rule).

Option: ``decay_all`` (default false): bias-like parameters decay too (the ``optimizer`` bucket
above); ``memplan-compile``, ``tr-compile``, :func:`tr_mlir.compile.compile` and ``Task`` (from
the optimizer's ``decay_all``) pass it on.

Diagnostics: no plans (run ``memplan-create-plans`` first); descs or plans that do not match the
model (rerun the earlier phases); a layer whose output gradient nobody writes (an unused result;
the model must end in ``softmax_ce``); a value read twice by one layer that also has other uses.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from xdsl.context import Context
from xdsl.dialects.builtin import DictionaryAttr, FloatAttr, IntegerAttr, ModuleOp, StringAttr, f64, i1, i64
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from tr_mlir.dialects.arch import ModelOp
from tr_mlir.dialects.kernels import K, KernelId
from tr_mlir.dialects.memplan import (
    AtlasOp,
    GraphId,
    GraphOp,
    MemRegion,
    Node,
    OptimizerKind,
    PlanOp,
    ProgramOp,
    VariantOp,
)
from tr_mlir.passes._descriptors import Descriptor, LayerPlan, NodePattern, Shape, descriptor_for, layer_ctx
from tr_mlir.passes._descriptors_program import fail, layer_inputs, layers, model_programs, use_count

R = MemRegion

TRAIN_GRAPH = "train"
INFER_GRAPH = "infer"
"""Symbol names of the two ComputationGraphs."""

GRAD_SLOT_SUFFIX = "_grad"
GRAD_PART_SUFFIX = "_grad_part"

_UPDATE_KERNELS: Mapping[OptimizerKind, tuple[KernelId | None, KernelId]] = {
    OptimizerKind.SGD: (K.RANGE_UPDATE_WEIGHT_SGD, K.RANGE_UPDATE_BIAS_SGD),
    OptimizerKind.MOMENTUM: (K.RANGE_UPDATE_WEIGHT_MOMENTUM, K.RANGE_UPDATE_BIAS_MOMENTUM),
    OptimizerKind.NESTEROV: (K.RANGE_UPDATE_WEIGHT_NESTEROV, K.RANGE_UPDATE_BIAS_NESTEROV),
    OptimizerKind.ADAM: (K.RANGE_UPDATE_WEIGHT_ADAM, K.RANGE_UPDATE_BIAS_ADAM),
    OptimizerKind.ADAMW: (K.RANGE_UPDATE_WEIGHT_ADAMW, K.RANGE_UPDATE_BIAS_ADAM),
    OptimizerKind.LARS: (None, K.RANGE_UPDATE_BIAS_MOMENTUM),
    OptimizerKind.LARS_NESTEROV: (None, K.RANGE_UPDATE_BIAS_NESTEROV),
}
"""Optimizer -> (weight range op, None for LARS; bias range op) (facts 8.5(d) 6)."""

_LARS_DECAYED_BIAS: Mapping[OptimizerKind, KernelId] = {
    OptimizerKind.LARS: K.RANGE_UPDATE_WEIGHT_MOMENTUM,
    OptimizerKind.LARS_NESTEROV: K.RANGE_UPDATE_WEIGHT_NESTEROV,
}
"""LARS with ``decay_all``: the range op of its bias-like parameters (plain momentum with weight
decay; LARS' trust ratio is for the weights only)."""

_LARS_FAMILIES = (
    (R.W_FC_WEIGHT, (K.LARS_COMPUTE_TRUST_RATIO_FC, K.LARS_UPDATE_FC, K.LARS_NESTEROV_UPDATE_FC),
     GraphId.LARS_FC_OPT),
    (R.W_FIRST_CONV, (K.LARS_COMPUTE_TRUST_RATIO_FIRST, K.LARS_UPDATE_FIRST, K.LARS_NESTEROV_UPDATE_FIRST),
     GraphId.LARS_FIRST_CONV_OPT),
    (R.W_DEEP_CONV, (K.LARS_COMPUTE_TRUST_RATIO_DEEP, K.LARS_UPDATE_DEEP, K.LARS_NESTEROV_UPDATE_DEEP),
     GraphId.LARS_DEEP_CONV_OPT),
)
"""Weight region -> (trust-ratio op, update op, Nesterov update op) and its LARS graph."""


# --------------------------------------------------------------------------------------
# Params table
# --------------------------------------------------------------------------------------


def _param_attr(value: Any) -> Attribute:
    if isinstance(value, bool):
        return IntegerAttr(int(value), i1)
    if isinstance(value, int):
        return IntegerAttr(value, i64)
    if isinstance(value, float):
        return FloatAttr(value, f64)
    if isinstance(value, str):
        return StringAttr(value)
    if isinstance(value, Attribute):
        return value
    raise TypeError(f"cannot store op parameter {value!r} in a graph's params table")


@dataclass
class _Params:
    """A graph's deduplicated table of op parameter dictionaries."""

    table: list[DictionaryAttr] = field(default_factory=list)
    index: dict[tuple, int] = field(default_factory=dict)

    def ref(self, params: Mapping[str, Any]) -> int:
        """Index of ``params`` in the table (-1 for no parameters)."""
        if not params:
            return -1
        key = tuple(sorted((k, type(v).__name__, v if not isinstance(v, Attribute) else str(v))
                           for k, v in params.items()))
        if key not in self.index:
            self.index[key] = len(self.table)
            self.table.append(DictionaryAttr({k: _param_attr(v) for k, v in sorted(params.items())}))
        return self.index[key]


# --------------------------------------------------------------------------------------
# The builder
# --------------------------------------------------------------------------------------


@dataclass
class _Layer:
    op: Operation
    index: int
    desc: Descriptor
    plan: LayerPlan
    params: dict[str, Any]


class _Builder:
    """Phase 4 for one (model, program) pair (see the module doc)."""

    def __init__(self, model: ModelOp, program: ProgramOp, decay_all: bool = False):
        self.model = model
        self.program = program
        self.decay_all = decay_all
        self.amp = bool(model.param("amp"))
        self.prec = "AMP" if self.amp else "FP32"
        if program.spec is None or not program.variants():
            fail(program, "'memplan.program' op has no spec or variants; run memplan-derive-shapes first")
        self.optimizer = program.spec.optimizer_kind
        self.target = program.spec.target_kind
        self.layers = self._layers()
        plans = program.plans()
        if not plans:
            fail(program, "'memplan.program' op has no 'memplan.plan'; run memplan-create-plans first")
        self.plan: PlanOp = plans[0]
        self.tensors = list(self.plan.tensors())
        self.ids = {t.name: t.id for t in self.tensors}
        self.producer: dict[SSAValue, _Layer] = {l.op.results[0]: l for l in self.layers}
        self.layer_of: dict[Operation, _Layer] = {l.op: l for l in self.layers}
        self.input = model.input_value
        self._contributions = self._contribution_order()

    # -- reconstruction of the layers' patterns (shapes of train_base, as in phase 1) ------

    def _layers(self) -> list[_Layer]:
        ops = layers(self.model)
        descs = self.program.descs()
        if len(descs) != len(ops) or [d.layer_index for d in descs] != list(range(len(ops))):
            fail(self.program, f"'memplan.program' op has {len(descs)} 'memplan.descs' for {len(ops)} layers of "
                               f"@{self.model.sym_name.data}; rerun memplan-derive-shapes")
        variant: VariantOp = self.program.variants()[0]
        res = variant.hw
        shapes: dict[SSAValue, Shape] = {
            self.model.input_value: (variant.batch_size, *res, variant.num_channels)}
        out: list[_Layer] = []
        for i, (op, d) in enumerate(zip(ops, descs)):
            desc = descriptor_for(op)
            names = d.tensor_names
            if d.op.data != op.name or desc.output not in names:
                fail(d, f"'memplan.descs' op {i} describes '{d.op.data}', but layer {i} is '{op.name}'; "
                        f"rerun memplan-derive-shapes")
            output = d.shape(0, names.index(desc.output))
            try:
                plan = desc.build(layer_ctx(op, tuple(shapes[x] for x in layer_inputs(op)), output,
                                            amp=self.amp, first=i == 0, target=self.target))
            except Exception as e:  # the descs were made from this model: only hand-edited IR gets here
                fail(op, f"'{op.name}' op cannot be planned from its 'memplan.descs' ({e}); "
                         f"rerun memplan-derive-shapes")
            own = plan.names()
            if names[:len(own)] != tuple(own):
                fail(d, f"'memplan.descs' op {i} lists tensors {list(names[:len(own)])}, the descriptor of "
                        f"'{op.name}' {own}; rerun memplan-derive-shapes")
            shapes[op.results[0]] = output
            params = op.params() if hasattr(op, "params") else {}
            out.append(_Layer(op, i, desc, plan, params))
        return out

    # -- operand resolution ---------------------------------------------------------------

    def tensor(self, name: str, at: Operation) -> int:
        """The id of DTensor ``name`` in the plans."""
        tid = self.ids.get(name)
        if tid is None:
            fail(at, f"'{at.name}' op needs DTensor '{name}', which @{self.plan.plan_name} does not have; "
                     f"rerun memplan-create-plans")
        return tid

    def own(self, layer: _Layer, name: str) -> int:
        qualified = f"l{layer.index}.{name}"
        if qualified in self.ids:
            return self.ids[qualified]
        return self.tensor(name, layer.op)  # a shared workspace

    def value(self, v: SSAValue, ab: str, alias: Mapping[SSAValue, SSAValue]) -> int:
        """The DTensor holding value ``v`` (the input buffer ``data_<ab>`` for the model input)."""
        v = alias.get(v, v)
        if v is self.input:
            return self.tensor(f"data_{ab}", self.model)
        producer = self.producer[v]
        return self.own(producer, producer.desc.output)

    def has_grad_slot(self, v: SSAValue) -> bool:
        producer = self.producer.get(v)
        return producer is not None and f"l{producer.index}.{producer.desc.output}{GRAD_SLOT_SUFFIX}" in self.ids

    def grad(self, v: SSAValue) -> int:
        """Where the gradient of value ``v`` lives once all its contributions are in."""
        producer = self.producer[v]
        if self.has_grad_slot(v):
            return self.own(producer, producer.desc.output + GRAD_SLOT_SUFFIX)
        consumers = [u.operation for u in v.uses if u.operation in self.layer_of]
        if len(consumers) == 1:
            consumer = self.layer_of[consumers[0]]
            if consumer.desc.dx_tensor is not None:
                return self.own(consumer, consumer.desc.dx_tensor)
        return self.own(producer, producer.desc.output)

    def _contribution_order(self) -> dict[SSAValue, list[tuple[int, int]]]:
        """Value -> its gradient contributions (layer, operand) in backward order."""
        order: dict[SSAValue, list[tuple[int, int]]] = {}
        for layer in reversed(self.layers):
            for k, v in enumerate(layer_inputs(layer.op)):
                order.setdefault(v, []).append((layer.index, k))
        return order

    def dx(self, layer: _Layer, k: int) -> tuple[int, int | None]:
        """(where layer writes the gradient of input ``k``, the gradient slot to accumulate into or None)."""
        v = layer_inputs(layer.op)[k]
        if v is self.input:
            raise AssertionError(f"{layer.op.name}: the first layer's descriptor wrote an input gradient")
        contributions = self._contributions[v]
        if use_count(v) > 1 and self.has_grad_slot(v) and contributions[0] != (layer.index, k):
            producer = self.producer[v]
            part = self.own(producer, producer.desc.output + GRAD_PART_SUFFIX)
            return part, self.grad(v)
        return self.grad(v), None

    def resolve(self, layer: _Layer, operand: str, ab: str, alias: Mapping[SSAValue, SSAValue],
                dx: Mapping[int, int]) -> int:
        if operand.startswith("@"):
            return self.tensor(operand[1:], layer.op)
        if operand.startswith("$dx"):
            return dx[int(operand[3:] or 0)]
        if operand == "$dy":
            v = layer.op.results[0]
            if use_count(v) == 0:
                fail(layer.op, f"'{layer.op.name}' op result has no use, so nothing computes its gradient; "
                               f"every layer must feed the loss (the model must end in softmax_ce)")
            return self.grad(v)
        if operand.startswith("$x"):
            return self.value(layer_inputs(layer.op)[int(operand[2:] or 0)], ab, alias)
        return self.own(layer, operand)

    def node(self, layer: _Layer, pattern: NodePattern, params: _Params, ab: str = "a",
             alias: Mapping[SSAValue, SSAValue] | None = None, dx: Mapping[int, int] | None = None) -> Node:
        alias = alias or {}
        dx = dx or {}
        ins = tuple(self.resolve(layer, o, ab, alias, dx) for o in pattern.inputs)
        outs = tuple(self.resolve(layer, o, ab, alias, dx) for o in pattern.outputs)
        kernel_params = layer.params if pattern.params is None else dict(pattern.params)
        return Node(pattern.op, ins, outs, param=params.ref(kernel_params))

    # -- train graph ----------------------------------------------------------------------

    def backward(self, layer: _Layer, params: _Params, ab: str = "a") -> list[Node]:
        """The layer's backward nodes, then the accumulation of later gradient contributions."""
        inputs = layer_inputs(layer.op)
        targets: dict[int, int] = {}
        accumulate: list[tuple[int, int]] = []
        used = {o for n in layer.plan.backward for o in n.inputs + n.outputs}
        for k in range(len(inputs)):
            if ("$dx" if k == 0 else f"$dx{k}") not in used:
                # only the first layer (it reads the input buffers) computes no input gradient
                assert layer.index == 0, f"{layer.op.name}: the descriptor writes no gradient of input {k}"
                continue
            target, into = self.dx(layer, k)
            if into is not None:
                if any(t == target for t, _ in accumulate):
                    fail(layer.op, f"'{layer.op.name}' op reads one value twice, and that value has other "
                                   f"uses: its gradient contributions cannot share the one partial slot")
                accumulate.append((target, into))
            targets[k] = target
        self._check_reads_before_overwrite(layer, targets)
        nodes = [self.node(layer, p, params, ab, dx=targets) for p in layer.plan.backward]
        nodes += [Node(K.GRAD_ACCUM.op(self.prec), (part, into), (into,)) for part, into in accumulate]
        return nodes

    def _check_reads_before_overwrite(self, layer: _Layer, targets: Mapping[int, int]) -> None:
        """In-place dX: no node of the layer may read input ``k`` after a node wrote over it."""
        for k, target in targets.items():
            if target != self.value(layer_inputs(layer.op)[k], "a", {}):
                continue
            x, dx = ("$x", "$dx") if k == 0 else (f"$x{k}", f"$dx{k}")
            written = False
            for p in layer.plan.backward:
                if written and x in p.inputs:
                    raise AssertionError(f"{layer.op.name}: backward reads {x} after overwriting it with {dx}")
                written = written or dx in p.outputs

    def train(self) -> GraphOp:
        params = _Params()
        buckets: dict[GraphId, list[Node]] = {g: [] for g in GraphId}
        first, deep = self.layers[0], self.layers[1:]
        for ab, fwd_gid, bwd_gid in (("a", GraphId.FIRST_LAYER_FWD_A, GraphId.FIRST_LAYER_BWD_A),
                                     ("b", GraphId.FIRST_LAYER_FWD_B, GraphId.FIRST_LAYER_BWD_B)):
            buckets[fwd_gid].append(self._label_copy(ab))
            buckets[fwd_gid] += [self.node(first, p, params, ab) for p in first.plan.forward]
            buckets[bwd_gid] += self.backward(first, params, ab)
        for layer in deep:
            buckets[GraphId.DEEP_FWD_BWD] += [self.node(layer, p, params) for p in layer.plan.forward]
        for layer in reversed(deep):
            buckets[GraphId.DEEP_FWD_BWD] += self.backward(layer, params)
        buckets[GraphId.ZERO_GRAD].append(Node(K.RANGE_CLEAR.op(), out_ranges=((R.G_BN_BIAS, R.G_DEEP_CONV_FP16),)))
        self._auxiliary(buckets, params)
        return GraphOp(TRAIN_GRAPH, buckets, params.table)

    def _label_copy(self, ab: str) -> Node:
        return Node(K.DTENSOR_COPY.op(), (self.tensor(f"label_{ab}", self.model),),
                    (self.tensor("label_smce", self.model),))

    # -- auxiliary graphs (facts 8.5 (d)) ------------------------------------------------

    def populated(self, *regions: MemRegion) -> bool:
        return any(self.plan.region_size(r) > 0 for r in regions)

    def scalar(self, name: str) -> int:
        return self.tensor(name, self.program)

    def _auxiliary(self, b: dict[GraphId, list[Node]], params: _Params) -> None:
        s = self.scalar
        amp = self.amp
        has_bn = self.populated(R.B_NEXT_MEAN)
        b[GraphId.TRANSFER_A].append(Node(K.RANGE_H2D_COPY_A.op(), out_ranges=((R.I_A_LABEL, R.I_A_LABEL),
                                                                            (R.I_A_DATA, R.I_A_DATA))))
        b[GraphId.TRANSFER_B].append(Node(K.RANGE_H2D_COPY_B.op(), out_ranges=((R.I_B_LABEL, R.I_B_LABEL),
                                                                            (R.I_B_DATA, R.I_B_DATA))))
        for gid, span in ((GraphId.FIRST_COMM, (R.G_BN_BIAS, R.G_FIRST_CONV)),
                          (GraphId.DEEP_COMM, (R.G_DEEP_CONV, R.R_RESULT))):
            b[gid].append(Node(K.RANGE_MEAN_ALLREDUCE.op(), in_ranges=(span,), out_ranges=(span,)))
        if has_bn:
            span = (R.B_NEXT_MEAN, R.B_NEXT_VAR)
            b[GraphId.STATS_COMM].append(Node(K.RANGE_BN_STATS_ALLREDUCE.op(), in_ranges=(span,), out_ranges=(span,)))
        self._optimizer(b)
        self._ema(b, params)
        if amp and self.populated(R.W_FC_WEIGHT, R.W_FIRST_CONV, R.W_DEEP_CONV):
            b[GraphId.CAST_MAIN_FP32_TO_FP16].append(Node(
                K.RANGE_CAST_FP32_TO_FP16.op(), in_ranges=((R.W_FC_WEIGHT, R.W_DEEP_CONV),),
                out_ranges=((R.A_FC_WEIGHT, R.A_DEEP_CONV),)))
        for gid, src, dst in ((GraphId.CAST_DEEP_GRAD_FP16_TO_FP32, R.G_DEEP_CONV_FP16, R.G_DEEP_CONV),
                              (GraphId.CAST_FIRST_GRAD_FP16_TO_FP32, R.G_FIRST_CONV_FP16, R.G_FIRST_CONV)):
            if amp and self.populated(src):
                b[gid].append(Node(K.RANGE_CAST_FP16_TO_FP32.op(), in_ranges=((src, src),), out_ranges=((dst, dst),)))
        nan = b[GraphId.NAN_CHECK_AND_GRAD_SCALING]
        nan.append(Node(K.RANGE_CHECK_NAN.op(), outputs=(s("has_nan"),), in_ranges=((R.G_BN_BIAS, R.G_DEEP_CONV),)))
        if amp:
            nan.append(Node(K.RANGE_GRAD_SCALING.op(), (s("has_nan"), s("scaling")), (s("scaling"),)))
        if has_bn:
            b[GraphId.UPDATE_STATS].append(Node(
                K.RANGE_D2D_COPY.op(), in_ranges=((R.B_NEXT_MEAN, R.B_NEXT_MEAN), (R.B_NEXT_VAR, R.B_NEXT_VAR)),
                out_ranges=((R.B_PREV_MEAN, R.B_PREV_MEAN), (R.B_PREV_VAR, R.B_PREV_VAR))))
        self._bn_inference_params(b[GraphId.UPDATE_BN_INF_PARAMS], params)
        b[GraphId.CLEAR_METRICS].append(Node(K.RANGE_CLEAR.op(), out_ranges=((R.R_RESULT_ACCUMULATED,) * 2,)))
        for gid, batch in ((GraphId.ACCUM_METRICS, "local_batch_size"),
                           (GraphId.ACCUM_METRICS_TRAIN_LAST, "last_train_batch_size"),
                           (GraphId.ACCUM_METRICS_VAL_LAST, "last_val_batch_size")):
            b[gid].append(Node(K.RANGE_ACCUM_METRICS.op(), (s(batch), s("loss"), s("top1"), s("top5")),
                               (s("accum_loss"), s("accum_top1"), s("accum_top5"))))

    def _optimizer(self, b: dict[GraphId, list[Node]]) -> None:
        s = self.scalar
        opt = self.optimizer
        weight_kind, bias_kind = _UPDATE_KERNELS[opt]
        momentum, adam = opt.uses_momentum, opt.uses_adam
        out = b[GraphId.OPTIMIZER]
        if adam:
            # has_nan: a step skipped on overflow is not counted (PyTorch's GradScaler semantics)
            out.append(Node(K.SCALAR_INCREMENT.op(), (s("step"), s("has_nan")), (s("step"),)))
            out.append(Node(K.ADAM_BIAS_CORRECTION.op(), (s("step"), s("beta"), s("beta2")),
                            (s("bias_corr1"), s("bias_corr2"))))

        def ids(wd: bool) -> tuple[int, ...]:
            names = ["lr"] + (["wd"] if wd else []) + (["beta"] if momentum else [])
            names += (["beta2", "eps"] if adam else []) + ["scaling"]
            names += (["bias_corr1", "bias_corr2"] if adam else []) + ["has_nan"]
            return tuple(s(n) for n in names)

        def spans(first: MemRegion, last: MemRegion) -> tuple[tuple[tuple[MemRegion, MemRegion], ...], ...]:
            w = (first, last)
            g = (MemRegion[f"G{first.name[1:]}"], MemRegion[f"G{last.name[1:]}"])
            m = (MemRegion[f"M{first.name[1:]}"], MemRegion[f"M{last.name[1:]}"])
            v = (MemRegion[f"V{first.name[1:]}"], MemRegion[f"V{last.name[1:]}"])
            ins = (w, g) + ((m,) if momentum else ()) + ((v,) if adam else ())
            outs = (w,) + ((m,) if momentum else ()) + ((v,) if adam else ())
            return ins, outs

        if self.populated(R.W_FC_WEIGHT, R.W_FIRST_CONV, R.W_DEEP_CONV):
            if weight_kind is None:
                self._lars(b)
            else:
                ins, outs = spans(R.W_FC_WEIGHT, R.W_DEEP_CONV)
                out.append(Node(weight_kind.op(), ids(True), (), ins, outs))
        if self.populated(R.W_BN_BIAS, R.W_BN_WEIGHT, R.W_FC_BIAS):
            ins, outs = spans(R.W_BN_BIAS, R.W_FC_BIAS)
            if self.decay_all:
                out.append(Node((weight_kind or _LARS_DECAYED_BIAS[opt]).op(), ids(True), (), ins, outs))
            else:
                out.append(Node(bias_kind.op(), ids(False), (), ins, outs))

    @property
    def has_ema(self) -> bool:
        """Whether the plan holds EMA tensors (``memplan-create-plans{ema=true}``)."""
        return "ema_decay" in self.ids

    def _ema(self, b: dict[GraphId, list[Node]], params: _Params) -> None:
        """EMA (issue 17): ``ema_update`` = ``RANGE_EMA_PARAM_UPDATE(ema_decay, has_nan)`` over
        ``[W_BN_BIAS .. W_DEEP_CONV] -> [E_BN_BIAS .. E_DEEP_CONV]`` (after the optimizer);
        ``cast_ema_fp32_to_fp16`` = the EMA model made ready for inference: AMP cast of the EMA
        weights to their fp16 twins, then one ``BN_UPDATE_EQ_PARAMS`` per BN from the EMA gamma /
        beta and the (raw model's) running statistics into the ``.ema`` eq scale / bias."""
        if not self.has_ema:
            return
        s = self.scalar
        b[GraphId.EMA_UPDATE].append(Node(K.RANGE_EMA_PARAM_UPDATE.op(), (s("ema_decay"), s("has_nan")), (),
                                          ((R.W_BN_BIAS, R.W_DEEP_CONV),), ((R.E_BN_BIAS, R.E_DEEP_CONV),)))
        out = b[GraphId.CAST_EMA_FP32_TO_FP16]
        if self.amp and self.populated(R.E_FC_WEIGHT, R.E_FIRST_CONV, R.E_DEEP_CONV):
            out.append(Node(K.RANGE_CAST_FP32_TO_FP16.op(), in_ranges=((R.E_FC_WEIGHT, R.E_DEEP_CONV),),
                            out_ranges=((R.E_FC_WEIGHT_FP16, R.E_DEEP_CONV_FP16),)))
        raw: list[Node] = []
        self._bn_inference_params(raw, params)
        out += [self._to_ema(n, inputs_only=False) for n in raw]

    def _to_ema(self, node: Node, inputs_only: bool = True) -> Node:
        """``node`` with every DTensor that has an ``.ema`` twin replaced by the twin (weights,
        AMP working weights, BN eq scale / bias); ``inputs_only``: leave the outputs alone."""
        def twin(ids: tuple[int, ...]) -> tuple[int, ...]:
            return tuple(self.ids.get(names[i] + ".ema", i) for i in ids)

        names = {t.id: t.name for t in self.tensors}

        return Node(node.op, twin(node.inputs), node.outputs if inputs_only else twin(node.outputs),
                    node.in_ranges, node.out_ranges, node.param)

    def _lars(self, b: dict[GraphId, list[Node]]) -> None:
        s = self.scalar
        nesterov = self.optimizer is OptimizerKind.LARS_NESTEROV
        for region, (trust, update, nesterov_update), gid in _LARS_FAMILIES:
            weights = [t for t in self.tensors if t.region is region and t.slot]
            if not weights:
                continue
            temp = self.scalar(f"lars_partial_{region.name[2:].lower()}")
            for w in weights:
                g, m, n = (self.scalar(w.name + suffix) for suffix in (GRAD_SLOT_SUFFIX, ".m", ".n"))
                b[gid].append(Node(trust.op(), (w.id, g, s("tc"), s("wd"), s("eps"), s("scaling"), s("has_nan"),
                                                temp), (n,)))
                b[gid].append(Node((nesterov_update if nesterov else update).op(),
                                   (w.id, g, m, n, s("lr"), s("beta"), s("wd"), s("scaling"), s("has_nan")), (w.id, m)))

    def _bn_inference_params(self, out: list[Node], params: _Params) -> None:
        s = self.scalar
        gammas = [t for t in self.tensors if t.region is R.W_BN_WEIGHT]
        if not gammas:
            return
        ref = params.ref({"eps": _bn_eps(self.layers)})
        for t in gammas:
            stem = t.name[:-len("bn_weight")]
            ins = (t.id, *(s(stem + n) for n in ("bn_bias", "bn_next_mean", "bn_next_var")), s("bn_epsilon"))
            outs = tuple(s(stem + n) for n in ("bn_eq_scale", "bn_eq_bias"))
            out.append(Node(K.BN_UPDATE_EQ_PARAMS.op(), ins, outs, param=ref))

    # -- infer graph ----------------------------------------------------------------------

    def infer(self) -> GraphOp:
        params = _Params()
        buckets: dict[GraphId, list[Node]] = {g: [] for g in GraphId}
        for ab, gid in (("a", GraphId.INF_MAIN_A), ("b", GraphId.INF_MAIN_B)):
            alias: dict[SSAValue, SSAValue] = {}
            nodes = buckets[gid]
            nodes.append(self._label_copy(ab))
            for layer in self.layers:
                if not layer.plan.inference:  # dropout: skipped, its output stands for its input
                    v = layer_inputs(layer.op)[0]
                    alias[layer.op.results[0]] = alias.get(v, v)
                    continue
                nodes += [self.node(layer, p, params, ab, alias) for p in layer.plan.inference]
            if self.has_ema:  # the same inference reading the EMA weights (``cast_ema_fp32_to_fp16`` first)
                ema = GraphId.INF_EMA_A if ab == "a" else GraphId.INF_EMA_B
                buckets[ema] = [self._to_ema(n) for n in nodes]
        span = (R.R_RESULT_ACCUMULATED, R.R_RESULT_ACCUMULATED)
        buckets[GraphId.VAL_RESULT_COMM].append(Node(K.RANGE_MEAN_ALLREDUCE.op(), in_ranges=(span,), out_ranges=(span,)))
        return GraphOp(INFER_GRAPH, buckets, params.table)


def _bn_eps(model_layers: Sequence[_Layer]) -> float:
    for layer in model_layers:
        if "eps" in layer.params:
            return float(layer.params["eps"])
    return 1e-5


def build_graphs(model: ModelOp, program: ProgramOp, decay_all: bool = False) -> tuple[GraphOp, GraphOp]:
    """Phase 4 for one model: its ``@train`` and ``@infer`` graphs (see the module doc);
    ``decay_all``: bias-like parameters get the weight update with weight decay.

    Raises ``PassFailedException`` (annotated at the offending op) on the diagnostics of the
    module doc.
    """
    builder = _Builder(model, program, decay_all)
    return builder.train(), builder.infer()


@dataclass(frozen=True)
class MemplanBuildGraphPass(ModulePass):
    """Phase 4: the ``@train`` and ``@infer`` ComputationGraphs of every program (see the module doc)."""

    name = "memplan-build-graph"

    decay_all: bool = False

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for model, program in model_programs(op, self.name):
            assert program is not None
            train, infer = build_graphs(model, program, self.decay_all)
            for old in program.graphs():
                Rewriter.erase_op(old)
            Rewriter.insert_op([train, infer], InsertPoint.after(program.plans()[-1]))


def graph_programs(op: ModuleOp, pass_name: str, atlas_reason: str):
    """``(model, program)`` for every program of ``op`` (as ``model_programs``) that a pass
    rewriting the ``@train`` graph's nodes may run on: it has its plans and ``@train`` graph
    (else the diagnostic says to run memplan-build-graph first) and no atlas yet (``atlas_reason``:
    what the atlas would name that the pass changes). Raises the diagnostics as ``fail``."""
    for model, program in model_programs(op, pass_name):
        assert program is not None
        if not any(g.graph_name == TRAIN_GRAPH for g in program.graphs()) or not program.plans():
            fail(model, f"'{model.name}' op @{model.sym_name.data}: {pass_name} needs the program's "
                        f"@{TRAIN_GRAPH} graph; run memplan-build-graph first (or memplan-compile)")
        if program.ops_of(AtlasOp):
            fail(model, f"'{model.name}' op @{model.sym_name.data}: {pass_name} runs before "
                        f"memplan-build-atlas ({atlas_reason}); this program "
                        f"already has its atlas: rerun the pipeline from memplan-build-graph")
        yield model, program
