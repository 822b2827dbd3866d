"""``memplan-select-conv-algo``: choose the algorithm of every convolution, per direction, at compile time.

Each conv node's kernel names its algorithms in static params (:mod:`tr_mlir.lowering.cpu.conv`):
``algo`` for the forward (``CONV_*_FWD``, ``CONV_*_INF``), ``algo_dgrad`` and ``algo_wgrad`` for the
backward (``CONV_*_BWD``; ``CONV_*_BWD_FIRST_LAYER`` has no input gradient, so no ``algo_dgrad``).
This pass picks them and records them on the arch layer op, before phase 1 sizes any workspace.

Design. The pass runs on the flat ``arch.model`` (after ``arch-plan``), first in ``memplan-compile``.
It takes the compile spec as ``memplan-derive-shapes`` does (the same options, or the spec of an
existing ``memplan.program``), builds every layer's descriptor plan in all six variants
(:func:`tr_mlir.passes.memplan_derive_shapes.layer_plans`), and for each node whose kernel has
algorithm params (:data:`tr_mlir.lowering.cpu.conv.DIRECTIONS`) forms the conv's geometry in each
variant that runs the node (batch and resolution of the variant, fp16 operands under AMP; forward and
backward nodes in the training variants, inference nodes in all six). The choice is one per conv
and direction (the graph's nodes are shared by the six variants), written as the attribute
``conv_algo`` of the layer op, keyed by the conv's weight operand within the layer (a fused block
has several convs)::

    %1 = arch.basic_block_identity %0 out_ch = 64 ... {conv_algo = {c1_conv_weight = {algo = "im2col",
        algo_dgrad = "im2col", algo_wgrad = "im2col"}, c2_conv_weight = {...}}}

:func:`tr_mlir.passes._descriptors.plan_workspaces`, which every node pattern passes through, merges
it into the conv nodes' params before asking the kernel for its workspaces, so phase 1 sizes each
conv's scratch for its algorithm only, and phase 4 writes the params into the graphs' params table
(``tr-opt`` shows ``algo = "direct"`` there). Without the attribute a conv node has no algorithm
params: its kernel runs ``auto``. The pass always recomputes the attribute (rerunning it, with
other options, replaces it).

Options (values below): ``conv_algo`` (default ``auto``) for every conv; ``conv_algo_fwd``,
``conv_algo_dgrad``, ``conv_algo_wgrad`` (default empty: ``conv_algo``) for one direction; and the
compile-spec options of ``memplan-derive-shapes`` (``batch_size``, ``train_size``, ``val_size``,
resolutions, ``world_size``, ``optimizer``, ``target``). ``memplan-compile``, ``tr-compile``,
``Task(conv_algo=...)`` and ``tr-train --conv-algo`` pass ``conv_algo`` on.

Values:

* ``auto``: the cost rule (:func:`cost_rule`);
* ``im2col``: today's rule, the GEMM family as the kernels chose it at run time before this pass
  existed: im2col, pointwise or depthwise by geometry and, for few channels in fp32, the direct C
  kernels (:func:`tr_mlir.lowering.cpu.conv.rule_algorithm`); never Winograd. Its numerics are
  those of a kernel run with ``auto`` and no Winograd, bit for bit;
* ``numpy``: the NumPy method of each geometry, never the direct C kernels: the numerics of
  ``TR_MLIR_CC=0``, bit for bit (the depthwise method runs compiled where it can,
  :mod:`tr_mlir.lowering.cpu._cdepthwise`, with the NumPy code's bits);
* an algorithm of :data:`tr_mlir.lowering.cpu.conv.ALGORITHMS` (``im2col`` aside: ``pointwise``,
  ``depthwise``, ``direct``) or a Winograd name (:data:`~tr_mlir.lowering.cpu.conv.WINOGRAD`,
  refused while those kernels are not in the build): that algorithm for every conv it applies to in
  all six variants; the other convs keep the cost rule's choice.

Per-layer requests: a layer op may carry ``conv_algo_request``, a string (one of the values above,
for every conv of the layer) or a dictionary of the record's form (weight operand -> {param:
value}). It overrides the options, and an algorithm name in it must apply: one that does not is a
diagnostic at the layer naming the conv, the direction, the algorithm and the variant.

Cost rule (:func:`cost_rule`, per conv, direction and variant geometry): today's rule, measured
(the table of :func:`tr_mlir.lowering.cpu.conv.cc_geometry`: the direct C kernels for few channels,
1.2-6x faster than the NumPy methods there), then Winograd in place of ``im2col`` where it wins:
a dense stride-1 3x3 conv with at least :data:`WINOGRAD_MIN_CHANNELS` input and output channels and
an output map of at least :data:`WINOGRAD_MIN_PIXELS` pixels, F(4x4, 3x3) when both output sides are
at least :data:`WINOGRAD_4X4_MIN_SIDE`, else F(2x2, 3x3), in the directions of
:data:`WINOGRAD_DIRECTIONS`. The thresholds come from the per-shape timings of
``python -m bench.conv_algos`` (``bench/results/conv-algos-2026-12-02.md``: CIFAR ResNet-18's 3x3
stride-1 convs at batch 64, 64-512 channels on 32x32-4x4 maps, 2 threads, load 1.7: F(4x4, 3x3)
2.26-3.41x and F(2x2, 3x3) 1.79-2.51x faster than im2col in every direction); outside the measured
range (fewer than 64 channels, maps under 4x4) the rule keeps im2col. Winograd's larger rounding
error (F(4x4, 3x3): about 5x im2col's, bounded in :mod:`tr_mlir.lowering.cpu.winograd`) is the
price; ``conv_algo=im2col`` keeps today's numerics exactly. A conv whose rule choice differs between variants (a resolution schedule
crossing a threshold) records ``auto`` for that direction: the kernel applies today's rule per call.

Target ``cuda``: the CUDA backend runs an implicit GEMM per direction, or Winograd
(:mod:`tr_mlir.lowering.cuda.winograd`, the same F(2x2, 3x3) / F(4x4, 3x3) transforms) where a
Winograd variant is forced (``conv_algo=winograd_4x4_3x3``) and applies; with no cost rule measured
on a GPU yet, ``auto`` records ``auto`` (the implicit GEMM) for every conv. Other CPU algorithm names
(``direct``, ``numpy``, ...) are a diagnostic there.

Diagnostics: an unknown value; a Winograd name before those kernels are merged; a forced algorithm
on a cuda target; an inapplicable algorithm in a layer's request; malformed requests; and phase 1's
shape and spec diagnostics (the pass builds the same plans).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tr_mlir.dialects.arch import ModelOp
from tr_mlir.dialects.kernels import AlgorithmTable, K, implementation, operands_for
from tr_mlir.dialects.memplan import Target, is_train_variant
from tr_mlir.passes._conv_algo import CONV_ALGO_ATTR, ConvAlgoError, layer_algorithms
from tr_mlir.passes._descriptors import LayerCtx, LayerPlan, operand_info
from tr_mlir.passes._descriptors_program import fail, layers, model_programs
from tr_mlir.passes.memplan_derive_shapes import (
    CompileSpecOptions,
    compile_spec,
    input_channels,
    layer_plans,
    variant_specs,
)
from xdsl.context import Context
from xdsl.dialects.builtin import DictionaryAttr, ModuleOp, StringAttr
from xdsl.ir import Operation
from xdsl.passes import ModulePass

REQUEST_ATTR = "conv_algo_request"
"""The layer-op attribute of a user's per-layer request (module doc)."""

POLICIES = ("auto", "im2col", "numpy")
"""The option values that are rules rather than one algorithm (module doc)."""

WINOGRAD_MIN_CHANNELS = 64
"""Fewest input and output channels of a conv the cost rule runs with Winograd: the smallest
width measured (``bench/results/conv-algos-2026-12-02``: 64 channels at 32x32, F(4x4, 3x3) 2.5-2.6x
im2col per direction); narrower convs keep im2col (or the direct kernels) until measured."""

WINOGRAD_MIN_PIXELS = 16
"""Fewest output pixels Ho*Wo of a conv the cost rule runs with Winograd: 4x4, the smallest map
measured (512 channels at 4x4: F(4x4, 3x3) 2.3-3.1x im2col)."""

WINOGRAD_4X4_MIN_SIDE = 4
"""Smallest output side for F(4x4, 3x3) rather than F(2x2, 3x3): F(4x4) was faster than F(2x2) in
every measured shape and direction (by 1.1-1.6x, 4x4 to 32x32 maps), one 4x4 tile covering a 4x4 map."""

WINOGRAD_DIRECTIONS = ("fwd", "dgrad", "wgrad")
"""The directions the cost rule may run with Winograd: all three won in every measured shape."""

DIRECTION_WORDS = {"fwd": "forward", "dgrad": "input gradient", "wgrad": "weight gradient"}


@dataclass(frozen=True)
class ConvAlgoOptions:
    """The options of the conv algorithm choice, shared by this pass, ``memplan-compile`` and
    ``tr-compile`` (module doc); an empty per-direction value means ``conv_algo``."""

    conv_algo: str = "auto"
    conv_algo_fwd: str = ""
    conv_algo_dgrad: str = ""
    conv_algo_wgrad: str = ""

    def algo_options(self) -> dict[str, str]:
        """These options as keyword arguments (to hand them on)."""
        return {k: getattr(self, k) for k in ("conv_algo", "conv_algo_fwd", "conv_algo_dgrad", "conv_algo_wgrad")}

    def policy(self, direction: str) -> str:
        """The value in force for ``direction`` (``fwd``, ``dgrad``, ``wgrad``)."""
        return getattr(self, f"conv_algo_{direction}") or self.conv_algo


def _table() -> AlgorithmTable:
    """The conv kernels' algorithm table, read through the kernel vocabulary
    (:attr:`~tr_mlir.dialects.kernels.KernelImpl.algorithms` of ``conv_fwd``; the conv backward
    carries the same table)."""
    table = implementation(K.CONV_FWD).algorithms
    assert table is not None, "conv_fwd declares its algorithms"
    return table


def check_value(value: str) -> str | None:
    """What is wrong with an option or request value, or ``None``."""
    if value in POLICIES or value in _table().algorithms:
        return None
    if value in _table().variants:
        return f"conv algorithm '{value}' is not available: the Winograd kernels are not in this build"
    known = ", ".join(dict.fromkeys([*POLICIES, *_table().algorithms, *_table().variants]))
    return f"unknown conv algorithm '{value}', expected one of {known}"


def winograd_choice(g: Any, fp16: bool, direction: str) -> str | None:
    """The Winograd variant the cost rule puts in place of im2col for ``g`` (module doc), or ``None``."""
    win = g.win
    if (direction not in WINOGRAD_DIRECTIONS or win.k != 3 or win.s != 1 or g.groups != 1
            or min(g.c, g.k_out) < WINOGRAD_MIN_CHANNELS or win.ho * win.wo < WINOGRAD_MIN_PIXELS):
        return None
    variant = _table().variants[1] if min(win.ho, win.wo) >= WINOGRAD_4X4_MIN_SIDE else _table().variants[0]
    alg = _table().algorithms.get(variant)
    return variant if alg is not None and alg.applicable(g, fp16) else None


def cost_rule(g: Any, fp16: bool, direction: str, *, winograd: bool = True) -> str:
    """The algorithm of ``auto`` for one geometry and direction: today's rule
    (:func:`~tr_mlir.lowering.cpu.conv.rule_algorithm`), with Winograd in place of im2col where
    :func:`winograd_choice` says it wins (``winograd=False``: the ``im2col`` value, today's rule)."""
    base = _table().rule(g, fp16)
    if winograd and base == "im2col":
        return winograd_choice(g, fp16, direction) or base
    return base


def _resolve(value: str, geoms: list[tuple[str, Any, bool]], direction: str) -> tuple[str, str | None]:
    """(the algorithm ``value`` picks for a conv with these variant geometries, why an algorithm
    name does not apply or ``None``)."""
    if value not in POLICIES:
        for variant, g, fp16 in geoms:
            try:
                _table().check(value, g, fp16)
            except ValueError as e:
                return _resolve("auto", geoms, direction)[0], f"{e} (variant {variant})"
        return value, None
    if value == "numpy":
        picks = {g.method for _, g, _ in geoms}
    else:
        picks = {cost_rule(g, fp16, direction, winograd=value == "auto") for _, g, fp16 in geoms}
    return (picks.pop() if len(picks) == 1 else _table().auto), None


def _conv_nodes(ctx: LayerCtx, lp: LayerPlan, train: bool) -> list[tuple[str, str, Any, bool]]:
    """(weight operand, algorithm param, geometry, fp16) for every algorithm param of every conv
    node of one layer plan that its variant runs (``train``: forward, backward and inference
    nodes; else inference only: a val variant runs only the ``@infer`` graph)."""
    out = []
    for pattern in (*lp.forward, *lp.backward, *lp.inference) if train else lp.inference:
        spec = implementation(pattern.op)
        table = spec.algorithms
        if table is None or not set(table.directions) & set(spec.params):
            continue
        params = dict(ctx.params) if pattern.params is None else dict(pattern.params)
        named, _ = operands_for(pattern.op).named(pattern.inputs, pattern.outputs, params, pattern.op)
        infos = {arg: operand_info(lp, ctx, o) for arg, o in named.items() if arg not in spec.workspaces}
        g, fp16, names = table.geometry(infos, params)
        out += [(named["w"], name, g, fp16) for name in names if name in spec.params]
    return out


def _requests(op: Operation) -> dict[str, dict[str, str]] | str | None:
    """The layer's request (module doc): a value for all its convs, per conv and param, or ``None``."""
    attr = op.attributes.get(REQUEST_ATTR)
    if attr is None or isinstance(attr, StringAttr):
        return None if attr is None else attr.data
    try:
        return layer_algorithms(op, REQUEST_ATTR)
    except ConvAlgoError:
        fail(op, f"'{op.name}' op {REQUEST_ATTR} must be a string or map weight names to dictionaries of "
                 f"algorithm names, got {attr}")


def select(model: ModelOp, ops: list[Operation], plans: Mapping[str, list[tuple[LayerCtx, LayerPlan]]],
           options: ConvAlgoOptions, target: Target, pass_name: str) -> None:
    """Write the ``conv_algo`` attribute of every layer of ``model`` with convs (module doc);
    ``plans``: variant name -> the layers' (context, plan) in that variant."""
    for d in ("fwd", "dgrad", "wgrad"):
        problem = check_value(options.policy(d))
        if problem:
            fail(model, f"{pass_name}: {problem}")
        if target is Target.CUDA and options.policy(d) not in ("auto", "im2col", *_table().variants):
            fail(model, f"{pass_name}: conv algorithm '{options.policy(d)}' selects CPU kernels; target cuda has "
                        f"its implicit GEMM and the Winograd variants (use auto, or "
                        f"{' / '.join(_table().variants)})")
    for index, op in enumerate(ops):
        geoms: dict[tuple[str, str], list[tuple[str, Any, bool]]] = {}
        for variant, per_layer in plans.items():
            ctx, lp = per_layer[index]
            for w, name, g, fp16 in _conv_nodes(ctx, lp, is_train_variant(variant)):
                geoms.setdefault((w, name), []).append((variant, g, fp16))
        request = _requests(op)
        if request is not None and target is Target.CUDA:
            fail(op, f"'{op.name}' op {REQUEST_ATTR}: target cuda has one convolution implementation per direction")
        record: dict[str, dict[str, str]] = {}
        for (w, name), gs in geoms.items():
            direction = _table().directions[name]
            asked = request if isinstance(request, str) else (request or {}).get(w, {}).get(name)
            if asked is not None and (problem := check_value(asked)):
                fail(op, f"'{op.name}' op {REQUEST_ATTR}: {problem}")
            if target is Target.CUDA:  # no cost rule measured on a GPU: the implicit GEMM, or a forced Winograd
                forced = options.policy(direction)
                choice = _table().auto
                if forced in _table().variants and all(_table().algorithms[forced].applicable(g, f) for _, g, f in gs):
                    choice = forced
            else:
                choice, why = _resolve(asked or options.policy(direction), gs, direction)
                if why and asked is not None:
                    fail(op, f"'{op.name}' op {REQUEST_ATTR} for conv '{w}' ({DIRECTION_WORDS[direction]}): {why}")
            record.setdefault(w, {})[name] = choice
        if record:
            op.attributes[CONV_ALGO_ATTR] = DictionaryAttr(
                {w: DictionaryAttr({k: StringAttr(v) for k, v in sorted(d.items())}) for w, d in record.items()})


@dataclass(frozen=True)
class MemplanSelectConvAlgoPass(CompileSpecOptions, ConvAlgoOptions, ModulePass):
    """Choose and record every conv's algorithms (see the module doc)."""

    name = "memplan-select-conv-algo"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for model, program in model_programs(op, self.name, need_program=False):
            spec = compile_spec(self, self.name, model, program)
            h, w, _ = model.input_hwc
            try:
                variants = variant_specs(spec, input_channels(model), (h, w))
            except ValueError as e:
                fail(model, f"'{model.name}' op @{model.sym_name.data}: {e}")
            ops = layers(model)
            for layer in ops:
                layer.attributes.pop(CONV_ALGO_ATTR, None)  # recomputed: plan without the old record
            plans = {v.name: layer_plans(model, ops, v, spec.target_kind) for v in variants}
            select(model, ops, plans, self, spec.target_kind, self.name)
