"""``memplan-derive-shapes``: Compiler phase 1, per-variant tensor descriptors of every layer.

For each ``arch.model`` (flat, shapes deduced: the output of ``arch-plan``) this pass writes a
``memplan.program`` holding the compile spec, the six variants and one ``memplan.descs`` per layer:
the layer's tensors (from its descriptor, :mod:`tr_mlir.passes._descriptors`) with their NHWC
shapes in all six variants (facts sheet sections 1 and 8.1).

Variants (facts sheet section 1): ``per_rank = ceil(size / world_size)``, ``last = per_rank %
batch_size`` (or ``batch_size`` when that is 0), for the train and the val set; ``train_base`` /
``train_last`` run at ``train_res``, the lowres pair at ``train_res_end`` (for real: the seed ignores
it, DESIGN section 7), the val pair at ``val_res``; ``max_res`` is the largest of the three (it sizes
the input buffers); ``channels`` is the model's input C (already rounded up to 4 in AMP by
``arch-align-amp-input``). Resolutions are heights: a non-square input (H != W) keeps its aspect
ratio in every variant (width ``res * W / H``, which must be whole), recorded as the variants'
``width`` / ``max_width``.

Options (each, when given, first rewrites the spec field it names; without an existing
``memplan.spec`` the three sizes are required): ``batch_size`` (per process), ``train_size``,
``val_size``, ``train_res``, ``train_res_end`` (default ``train_res``), ``val_res`` (default: the
model's input resolution), ``world_size`` (default 1), ``optimizer`` (sgd, momentum, nesterov,
adam, adamw, lars, lars-nesterov; default momentum), ``target`` (cpu or cuda; default cpu).

Diagnostics: bad spec values; a first layer other than flatten, conv, channel_padding or cbr (the
seed's ``validate_first_layer``) or another layer reading the model input; batch norms with
different eps/momentum (they share the BN range-op scalars); a batch norm of a training variant
over one value per channel (batch 1 on a 1x1 map: zero variance, refused as PyTorch does); a
resolution that gives a non-square input no whole width; shape errors of a variant's resolution; the seed's three cross-variant consistency checks (tensor count, region, name) and a
fourth: every parameter-like tensor (W, G, M, V, A, N, E, B regions) has one shape in all six
variants (DESIGN section 4).

Gradient placement: the gradient of a value overwrites the value (in-place dX) unless the value
has several uses or its producer reads it in backward (the descriptor says so, or the layer's plan
does for this instance: a ReLU that reads its output because its consumers keep it, see
:mod:`tr_mlir.passes._descriptors`); then the producer's descs gain ``<output>_grad`` (and, with
several uses, ``<output>_grad_part``, where later contributions are computed before being added),
in the gradient-slot region.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter
from xdsl.utils.exceptions import VerifyException

from tr_mlir.dialects.arch import ModelOp
from tr_mlir.dialects.memplan import (
    VARIANTS,
    DescsOp,
    MemRegion,
    OptimizerKind,
    ProgramOp,
    SpecOp,
    Target,
    VariantOp,
    is_train_variant,
)
from tr_mlir.passes._descriptors import (
    DescriptorError,
    check_node_kernels,
    LayerCtx,
    LayerPlan,
    Shape,
    TensorDesc,
    descriptor_for,
    layer_ctx,
)
from tr_mlir.passes._descriptors_program import I64_MAX, fail, layer_inputs, layers, model_programs, use_count

PARAMETER_PREFIXES = ("W_", "G_", "M_", "V_", "A_", "N_", "E_", "B_")
"""Regions of parameter-like tensors: their shapes must not differ across variants."""


@dataclass(frozen=True)
class VariantSpec:
    """One variant: name, batch, resolution (height), max resolution, input channels, and the
    widths that go with the two heights (equal to them for a square input)."""

    name: str
    batch: int
    res: int
    max_res: int
    channels: int
    width: int = 0
    max_width: int = 0

    def __post_init__(self) -> None:
        if not self.width:
            object.__setattr__(self, "width", self.res)
        if not self.max_width:
            object.__setattr__(self, "max_width", self.max_res)


def last_batch(size: int, world_size: int, batch_size: int) -> int:
    """The seed's last batch: ``ceil(size / world_size) % batch_size``, or ``batch_size`` if 0."""
    per_rank = -(-size // world_size)
    return per_rank % batch_size or batch_size


def variant_width(res: int, input_hw: tuple[int, int]) -> int | None:
    """The width of a variant at resolution (height) ``res`` for a model input ``(H, W)``: the
    input's aspect ratio kept, ``res * W / H``; ``None`` when that is not a whole number."""
    h, w = input_hw
    return res * w // h if (res * w) % h == 0 else None


def variant_specs(spec: SpecOp, channels: int, input_hw: tuple[int, int] | None = None) -> list[VariantSpec]:
    """The six variants of a spec, in the seed's order (facts sheet section 1). The spec's
    resolutions are heights; with ``input_hw`` (the model's input ``(H, W)``) each variant's width
    keeps the input's aspect ratio (:func:`variant_width`; a square input: width = height).
    Raises ``ValueError`` when a resolution gives no whole width."""
    bs, world = spec.value("batch_size"), spec.value("world_size")
    lt = last_batch(spec.value("train_size"), world, bs)
    lv = last_batch(spec.value("val_size"), world, bs)
    r0, r1, rv = spec.value("train_res"), spec.value("train_res_end"), spec.value("val_res")
    mx = max(r0, r1, rv)
    hw = input_hw or (1, 1)
    widths = {}
    for key, r in (("train_res", r0), ("train_res_end", r1), ("val_res", rv)):
        w = variant_width(r, hw)
        if w is None or w < 1:
            raise ValueError(f"{key} = {r} gives no whole width for the {hw[0]}x{hw[1]} input (the width "
                             f"keeps the aspect ratio: {r} * {hw[1]} / {hw[0]}); use a multiple of "
                             f"{hw[0] // math.gcd(*hw)}")
        widths[r] = w
    table = ((bs, r0), (lt, r0), (bs, r1), (lt, r1), (bs, rv), (lv, rv))
    return [VariantSpec(name, b, r, mx, channels, widths[r], widths[mx]) for name, (b, r) in zip(VARIANTS, table)]


@dataclass(frozen=True)
class CompileSpecOptions:
    """The compile-spec options shared by ``memplan-derive-shapes``, ``memplan-compile`` and
    ``tr-compile`` (``None``: take the value from the spec already in the module, or the
    default; see the module docstring)."""

    batch_size: int | None = None
    train_size: int | None = None
    val_size: int | None = None
    train_res: int | None = None
    train_res_end: int | None = None
    val_res: int | None = None
    world_size: int | None = None
    optimizer: str | None = None
    target: str | None = None


@dataclass(frozen=True)
class MemplanDeriveShapesPass(CompileSpecOptions, ModulePass):
    """Phase 1: compile spec, six variants, per-layer tensor descriptors (see the module doc)."""

    name = "memplan-derive-shapes"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for model, program in model_programs(op, self.name, need_program=False):
            spec = compile_spec(self, self.name, model, program)
            new = derive(model, spec)
            if program is not None:
                Rewriter.replace_op(program, new)
            else:
                Rewriter.insert_op(new, InsertPoint.after(model))


def compile_spec(options: CompileSpecOptions, name: str, model: ModelOp, program: ProgramOp | None) -> SpecOp:
    """The compile spec of ``model`` for the pass ``name`` with spec options ``options``: the
    program's spec (if any) with the given options' fields rewritten (module doc);
    diagnostics at the model for missing or bad values."""
    old = program.spec if program is not None else None
    fields = {k: (old.value(k) if old is not None else None)
              for k in ("batch_size", "train_size", "val_size", "train_res", "train_res_end", "val_res",
                        "world_size")}
    optimizer = old.optimizer_kind if old is not None else OptimizerKind.MOMENTUM
    target = old.target_kind if old is not None else Target.CPU
    for k in fields:
        given = getattr(options, k)
        if given is not None:
            fields[k] = given
    for k in ("batch_size", "train_size", "val_size"):
        if fields[k] is None:
            fail(model, f"{name} needs the option {k} (no 'memplan.spec' to take it from)")
    h, w, _ = model.input_hwc
    if fields["train_res"] is None:
        fields["train_res"] = h
    if fields["train_res_end"] is None:
        fields["train_res_end"] = fields["train_res"]
    if fields["val_res"] is None:
        fields["val_res"] = h
    if fields["world_size"] is None:
        fields["world_size"] = 1
    for k, v in fields.items():
        if v > I64_MAX:
            fail(model, f"{name}: {k} = {v} does not fit in 64 bits (at most {I64_MAX})")
    try:
        if options.optimizer is not None:
            optimizer = OptimizerKind.parse(options.optimizer)
        if options.target is not None:
            target = Target(options.target)
    except ValueError as e:
        msg = str(e) if options.target is None or "optimizer" in str(e) else (
            f"unknown target '{options.target}', expected cpu or cuda")
        fail(model, f"{name}: {msg}")
    spec = SpecOp(optimizer=optimizer, target=target, **fields)  # type: ignore[arg-type]
    try:
        spec.verify()
    except VerifyException as e:
        fail(model, f"{name}: {e}")
    return spec


def input_channels(model: ModelOp) -> int:
    """The model input's C (its type's, else the ``input(H, W, C)`` of the op)."""
    t = model.input_value.type
    c = t.get_shape()[3]  # type: ignore[attr-defined]
    return c if c > 0 else model.input_hwc[2]


def _variant_input(model: ModelOp, v: VariantSpec) -> Shape:
    return (v.batch, v.res, v.width, input_channels(model))


def _first_layer_checks(model: ModelOp, ops: list[Operation]) -> None:
    if not ops:
        fail(model, f"'{model.name}' op @{model.sym_name.data} has no layers")
    first = ops[0]
    if not descriptor_for_or_fail(first).first_layer_ok:
        fail(first, f"'{first.name}' op cannot be the first layer: it must be flatten, conv, "
                    f"channel_padding or cbr (the first layer reads the input buffers A/B)")
    arg = model.input_value
    for op in ops[1:]:
        if arg in layer_inputs(op):
            fail(op, f"'{op.name}' op reads the model input, but only the first layer may "
                     f"(the input lives in the A/B buffers)")


def descriptor_for_or_fail(op: Operation):
    """The op's descriptor; a missing one is a diagnostic at the op."""
    try:
        return descriptor_for(op)
    except DescriptorError as e:
        fail(op, f"'{op.name}' op: {e}")


def _bn_checks(ops: list[Operation]) -> None:
    ref: Operation | None = None
    for op in ops:
        params = op.params() if hasattr(op, "params") else {}
        if "eps" not in params or "momentum" not in params:
            continue
        if ref is None:
            ref = op
            continue
        rp = ref.params()  # type: ignore[attr-defined]
        if (params["eps"], params["momentum"]) != (rp["eps"], rp["momentum"]):
            fail(op, f"'{op.name}' op eps = {params['eps']}, momentum = {params['momentum']} differs from "
                     f"eps = {rp['eps']}, momentum = {rp['momentum']} of the first batch norm "
                     f"('{ref.name}'); all batch norms must share eps and momentum (one pair of BN scalars)")



SINGLE_VALUE_BN = "would normalize over a single value per channel"
"""The words of the error for a training batch norm over one value per channel (a batch size
problem, not the model's: tr-train says so rather than listing models that take the input)."""


def _bn_sample_checks(ops: list[Operation], variants: list[VariantSpec], per_variant: list[list[LayerPlan]]) -> None:
    """A training variant must not batch-normalize over one value per channel.

    A batch norm's statistics in training are over N*H*W values per channel; with one value the
    variance is zero and PyTorch refuses ("Expected more than 1 value per channel when
    training"). Every batch norm of a layer (fused ones included) is found by its weight tensor
    (region ``W_BN_WEIGHT``, ``<prefix>bn_weight``), its input shape by the ``<prefix>bn_output``
    tensor of the same shape."""
    for v_index, v in enumerate(variants):
        if not is_train_variant(v.name):
            continue
        for op, plan in zip(ops, per_variant[v_index]):
            by_name = {t.name: t for t in plan.tensors}
            for t in plan.tensors:
                if t.region is not MemRegion.W_BN_WEIGHT or not t.name.endswith("bn_weight"):
                    continue
                out = by_name.get(t.name[:-len("weight")] + "output")
                if out is None:
                    continue
                n, h, w, _ = out.shape
                if n * h * w == 1:
                    where = f" ({t.name[:-len('bn_weight')].rstrip('_')} batch norm)" if t.name != "bn_weight" else ""
                    fail(op, f"'{op.name}' op{where} {SINGLE_VALUE_BN} in the "
                             f"training variant {v.name} (batch {v.batch}, {h}x{w} map): its variance is zero "
                             f"(PyTorch refuses this: 'Expected more than 1 value per channel when training'); "
                             f"use a batch size that leaves no last batch of one sample (train_size % batch_size "
                             f"== 1 makes one), or drop the last partial batch (Task.fit(drop_last=True), "
                             f"tr-train --drop-last)")


def layer_plans(model: ModelOp, ops: list[Operation], v: VariantSpec, target: Target
                ) -> list[tuple[LayerCtx, LayerPlan]]:
    """Every layer's context and descriptor plan in variant ``v`` (shapes propagated from the
    model input); diagnostics at the layer for shape and descriptor errors."""
    amp = bool(model.param("amp"))
    shapes: dict[SSAValue, Shape] = {model.input_value: _variant_input(model, v)}
    result: list[tuple[LayerCtx, LayerPlan]] = []
    for index, op in enumerate(ops):
        desc = descriptor_for_or_fail(op)
        ins = tuple(shapes[x] for x in layer_inputs(op))
        try:
            if hasattr(op, "infer_hwc"):  # every arch layer op, arch.add included (one HWC per input)
                hwc = op.infer_hwc(*(shape[1:] for shape in ins))  # type: ignore[attr-defined]
            else:
                if len(set(ins)) != 1:
                    raise VerifyException(f"'{op.name}' op expected operands of one shape, got {list(ins)}")
                hwc = ins[0][1:]
            out = (ins[0][0], *hwc)
            ctx = layer_ctx(op, ins, out, amp=amp, first=index == 0, target=target)
            plan = desc.build(ctx)
            check_node_kernels(plan)
            if desc.output not in {t.name for t in plan.tensors}:
                raise DescriptorError(f"its descriptor names output tensor '{desc.output}', which is not one of "
                                      f"its layer plan's tensors {[t.name for t in plan.tensors][:8]}")
        except (VerifyException, DescriptorError) as e:
            text = str(e)
            if not text.startswith("'"):
                text = f"'{op.name}' op {text}"
            fail(op, f"{text} (variant {v.name}, resolution {v.res})")
        shapes[op.results[0]] = out
        result.append((ctx, plan))
    return result


def _plan_variant(model: ModelOp, ops: list[Operation], v: VariantSpec, target: Target) -> list[LayerPlan]:
    amp = bool(model.param("amp"))
    plans = [plan for _, plan in layer_plans(model, ops, v, target)]
    for index, op in enumerate(ops):
        desc = descriptor_for(op)
        value = op.results[0]
        uses = use_count(value)
        if uses == 0 or not (uses > 1 or desc.bwd_reads_output or plans[index].bwd_reads_output):
            continue
        out_t = next(t for t in plans[index].tensors if t.name == desc.output)
        region = MemRegion.F_GRAD_SLOT_FP16 if amp else MemRegion.F_GRAD_SLOT_FP32
        plans[index].add(f"{desc.output}_grad", region, out_t.dtype, out_t.shape)
        if uses > 1:
            plans[index].add(f"{desc.output}_grad_part", region, out_t.dtype, out_t.shape)
    return plans


def _consistency(ops: list[Operation], per_variant: list[list[LayerPlan]]) -> None:
    base = per_variant[0]
    for s in range(1, len(per_variant)):
        vs = VARIANTS[s]
        for l, op in enumerate(ops):
            t0, ts = base[l].tensors, per_variant[s][l].tensors
            if len(t0) != len(ts):
                fail(op, f"layer {l} ('{op.name}'): tensor count mismatch - {VARIANTS[0]} has {len(t0)}, "
                         f"{vs} has {len(ts)}")
            for t, (a, b) in enumerate(zip(t0, ts)):
                if a.region != b.region:
                    fail(op, f"layer {l} ('{op.name}') tensor {t}: region mismatch - {VARIANTS[0]}="
                             f"{a.region.name}, {vs}={b.region.name}")
                if a.name != b.name:
                    fail(op, f"layer {l} ('{op.name}') tensor {t}: name mismatch - {VARIANTS[0]}={a.name}, "
                             f"{vs}={b.name}")
                if a.region.name.startswith(PARAMETER_PREFIXES) and a.shape != b.shape:
                    fail(op, f"layer {l} ('{op.name}') tensor '{a.name}': parameter shape differs across "
                             f"variants: {list(a.shape)} in {VARIANTS[0]}, {list(b.shape)} in {vs}; "
                             f"parameter shapes must not depend on the resolution (e.g. put a gap before the fc)")


def derive(model: ModelOp, spec: SpecOp) -> ProgramOp:
    """Phase 1 for one model: the ``memplan.program`` with spec, variants and descs.

    Raises ``PassFailedException`` (annotated at the offending op) on the diagnostics of the
    module doc.
    """
    for op in model.body.walk():
        if op is not model and op.regions:
            fail(op, f"'{op.name}' op is tree form; memplan-derive-shapes needs the flat graph (run arch-plan)")
    ops = layers(model)
    _first_layer_checks(model, ops)
    _bn_checks(ops)
    amp = bool(model.param("amp"))
    h, w, _ = model.input_hwc
    try:
        variants = variant_specs(spec, input_channels(model), (h, w))
    except ValueError as e:
        fail(model, f"'{model.name}' op @{model.sym_name.data}: {e}")
    per_variant = [_plan_variant(model, ops, v, spec.target_kind) for v in variants]
    _consistency(ops, per_variant)
    _bn_sample_checks(ops, variants, per_variant)
    body: list[Operation] = [spec]
    body += [VariantOp(v.name, batch=v.batch, res=v.res, max_res=v.max_res, channels=v.channels, amp=amp,
                       width=v.width, max_width=v.max_width)
             for v in variants]
    for l, op in enumerate(ops):
        tensors: list[TensorDesc] = per_variant[0][l].tensors
        shapes = [d for plans in per_variant for t in plans[l].tensors for d in t.shape]
        body.append(DescsOp(l, op.name, [t.name for t in tensors], [t.region.name for t in tensors],
                            [t.dtype for t in tensors], shapes,
                            shared=[i for i, t in enumerate(tensors) if t.shared]))
    return ProgramOp(model.sym_name.data, body)

