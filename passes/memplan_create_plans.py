"""``memplan-create-plans``: Compiler phase 3, the six MemoryPlans.

Per program this pass writes ``memplan.plan @plan_<variant>`` for the six variants (facts sheet
sections 5-7 and 8.4), with identical ids, slots and offsets (one arena serves every variant; only
shapes differ):

1. the baseline DTensors first, so their ids are fixed: ``label_a, data_a, label_b, data_b,
   label_smce, has_nan, lr, scaling, label_smoothing, loss, top1, top5, local_batch_size,
   last_train_batch_size, last_val_batch_size, accum_loss, accum_top1, accum_top5``, then the
   optimizer scalars (``beta`` unless plain SGD; ``wd`` always: the seed drops it for plain SGD,
   DESIGN section 7; Adam: ``beta2, eps, step, bias_corr1, bias_corr2``; LARS: ``tc, eps``), then
   ``dropout_seed``, ``bn_epsilon``, ``bn_momentum``. Input data is ``{B, max_res, max_width, C}``,
   fp16 in AMP;
2. per layer (``memplan.descs`` order), its tensors named ``l<layer>.<name>`` with the phase-2
   slots, then the optimizer buffers of its parameters (W_BN_BIAS .. W_DEEP_CONV): one ``.m``
   (momentum-like optimizers), then one ``.v`` (Adam) per parameter, same shape, and, for LARS,
   one ``.n`` trust-ratio scalar per FC/conv weight. Shared workspaces (``conv_im2col``) are
   allocated once, at their first use, with the largest slot;
3. for LARS, one partial-sum temporary ``{1, 1, 1, 2*65535}`` per populated weight family (the
   seed allocates one after every layer and overflows; fixed, DESIGN section 7).

A tensor in a region disabled for the configuration (A_* without AMP, F_*_FP32 with it, ...) gets a
zero-byte slot. Offsets come from the seed's linear layout (regions in address order, 256-byte
slots). Init rules: conv weights ``trunc_normal``, FC weights ``kaiming_uniform``, BN gamma, eq
scale and running variances ``ones``, other parameters, gradients and optimizer state ``zeros``;
scalars as listed in :func:`baseline`.

Option: ``optimizer`` (rewrites the spec's optimizer first). Option ``ema`` (issue 17): an
exponential moving average of the parameters in their own regions: the scalar ``ema_decay`` (host
written, after ``bn_momentum``), and per layer after its optimizer buffers one ``<param>.ema`` per
parameter in the parameter's ``E_*`` twin region (same shape and slot), one ``<w>.ema`` per AMP
fp16 working weight in ``E_*_FP16``, and one ``<eq>.ema`` per BN inference scale / bias in the same
``W_EQ_*`` region (the EMA model's folded BN); all ``zeros`` (the host copies the weights in).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from tr_mlir.dialects.memplan import (
    VARIANTS,
    DTensor,
    MemRegion,
    OptimizerAttr,
    OptimizerKind,
    PlanOp,
    ProgramOp,
    SpecOp,
    VariantOp,
    linear_layout,
    region_enabled,
    slot_bytes,
)
from tr_mlir.passes._descriptors_program import I64_MAX, fail, layers, model_programs

Shape = tuple[int, int, int, int]
SCALAR: Shape = (1, 1, 1, 1)
LARS_PARTIALS = 2 * 65535
"""Floats of a LARS two-phase reduction buffer (facts sheet section 12.4)."""

PARAMETER_REGIONS = (MemRegion.W_BN_BIAS, MemRegion.W_BN_WEIGHT, MemRegion.W_FC_BIAS, MemRegion.W_FC_WEIGHT,
                     MemRegion.W_FIRST_CONV, MemRegion.W_DEEP_CONV)
"""Regions whose tensors get optimizer state (the eq scale/bias are derived, not trained)."""

WEIGHT_REGIONS = (MemRegion.W_FC_WEIGHT, MemRegion.W_FIRST_CONV, MemRegion.W_DEEP_CONV)

_INIT_BY_REGION = {
    MemRegion.W_FIRST_CONV: "trunc_normal", MemRegion.W_DEEP_CONV: "trunc_normal",
    MemRegion.W_FC_WEIGHT: "kaiming_uniform", MemRegion.W_BN_WEIGHT: "ones", MemRegion.W_EQ_SCALE: "ones",
    MemRegion.B_PREV_VAR: "ones", MemRegion.B_NEXT_VAR: "ones",
}


def init_rule(region: MemRegion) -> str:
    """Init rule of a layer tensor by region (facts sheet section 7)."""
    if region in _INIT_BY_REGION:
        return _INIT_BY_REGION[region]
    if region.name.startswith(("W_", "B_", "G_", "M_", "V_", "N_", "E_", "R_")):
        return "zeros"
    return "none"


@dataclass
class _Row:
    """One DTensor under construction: shapes per variant, one slot."""

    name: str
    region: MemRegion
    dtype: str
    shapes: list[Shape]
    slot: int
    init: str = "none"
    value: float = 0.0


@dataclass
class _Table:
    rows: list[_Row] = field(default_factory=list)
    by_name: dict[str, int] = field(default_factory=dict)

    def add(self, row: _Row) -> int:
        self.by_name[row.name] = len(self.rows)
        self.rows.append(row)
        return len(self.rows) - 1


def _bn_params(program: ProgramOp, model_layers) -> tuple[float, float]:
    for op in model_layers:
        params = op.params() if hasattr(op, "params") else {}
        if "eps" in params and "momentum" in params:
            return float(params["eps"]), float(params["momentum"])
    return 1e-5, 0.1


def baseline(table: _Table, spec: SpecOp, variants: list[VariantOp], amp: bool, bn: tuple[float, float]) -> None:
    """The baseline DTensors (facts sheet section 7), ids 0.. in the seed's order."""
    target = spec.target_kind
    opt = spec.optimizer_kind
    batches = [v.batch_size for v in variants]
    data_dt = "f16" if amp else "f32"

    def add(name: str, region: MemRegion, dtype: str, shapes: list[Shape], init: str = "none",
            value: float = 0.0) -> None:
        slot = max(slot_bytes(s, dtype, region, target) for s in shapes)
        table.add(_Row(name, region, dtype, shapes, slot, init, value))

    labels = [(b, 1, 1, 1) for b in batches]
    data = [(v.batch_size, *v.max_hw, v.num_channels) for v in variants]
    scalar = [SCALAR] * len(variants)
    add("label_a", MemRegion.I_A_LABEL, "i32", labels)
    add("data_a", MemRegion.I_A_DATA, data_dt, data)
    add("label_b", MemRegion.I_B_LABEL, "i32", labels)
    add("data_b", MemRegion.I_B_DATA, data_dt, data)
    add("label_smce", MemRegion.T_TEMP_INT32, "i32", labels)
    add("has_nan", MemRegion.S_SCALAR_INT32, "i32", scalar, "zeros")
    add("lr", MemRegion.S_SCALAR_FP32, "f32", scalar, "host")
    add("scaling", MemRegion.S_SCALAR_FP32, "f32", scalar, "fill", 8192.0 if amp else 1.0)
    add("label_smoothing", MemRegion.S_SCALAR_FP32, "f32", scalar, "host")
    for name in ("loss", "top1", "top5"):
        add(name, MemRegion.R_RESULT, "f32", scalar, "zeros")
    by_name = {v.variant_name: v.batch_size for v in variants}
    for name, value in (("local_batch_size", by_name["train_base"]),
                        ("last_train_batch_size", by_name["train_last"]),
                        ("last_val_batch_size", by_name["val_last"])):
        add(name, MemRegion.S_SCALAR_INT32, "i32", scalar, "fill", float(value))
    for name in ("accum_loss", "accum_top1", "accum_top5"):
        add(name, MemRegion.R_RESULT_ACCUMULATED, "f32", scalar, "zeros")
    if opt.uses_momentum:
        add("beta", MemRegion.S_SCALAR_FP32, "f32", scalar, "host")
    add("wd", MemRegion.S_SCALAR_FP32, "f32", scalar, "host")
    if opt.uses_adam:
        add("beta2", MemRegion.S_SCALAR_FP32, "f32", scalar, "host")
        add("eps", MemRegion.S_SCALAR_FP32, "f32", scalar, "host")
        add("step", MemRegion.S_SCALAR_INT32, "i32", scalar, "zeros")
        add("bias_corr1", MemRegion.S_SCALAR_FP32, "f32", scalar, "zeros")
        add("bias_corr2", MemRegion.S_SCALAR_FP32, "f32", scalar, "zeros")
    if opt.uses_lars:
        add("tc", MemRegion.S_SCALAR_FP32, "f32", scalar, "host")
        add("eps", MemRegion.S_SCALAR_FP32, "f32", scalar, "host")
    add("dropout_seed", MemRegion.S_SCALAR_INT32, "i32", [(1, 1, 1, 2)] * len(variants), "host")
    add("bn_epsilon", MemRegion.S_SCALAR_FP32, "f32", scalar, "fill", bn[0])
    add("bn_momentum", MemRegion.S_SCALAR_FP32, "f32", scalar, "fill", bn[1])


def _twin(region: MemRegion, prefix: str) -> MemRegion:
    return MemRegion[prefix + region.name[1:]]


_EMA_FP16 = {MemRegion.A_FC_WEIGHT: MemRegion.E_FC_WEIGHT_FP16, MemRegion.A_FIRST_CONV: MemRegion.E_FIRST_CONV_FP16,
             MemRegion.A_DEEP_CONV: MemRegion.E_DEEP_CONV_FP16}
"""AMP fp16 working-weight region -> its EMA twin."""


def build_tables(program: ProgramOp, model_layers, ema: bool = False) -> _Table:
    """All DTensors of the program's plans, in id order (see the module doc)."""
    spec = program.spec
    variants = program.variants()
    if spec is None or len(variants) != len(VARIANTS):
        fail(program, "'memplan.program' op has no spec or variants; run memplan-derive-shapes first")
    amp = variants[0].is_amp
    opt = spec.optimizer_kind
    table = _Table()
    baseline(table, spec, variants, amp, _bn_params(program, model_layers))
    if ema:
        table.add(_Row("ema_decay", MemRegion.S_SCALAR_FP32, "f32", [SCALAR] * len(variants),
                       slot_bytes(SCALAR, "f32", MemRegion.S_SCALAR_FP32, spec.target_kind), "host"))
    all_descs = program.descs()
    # Shared workspaces: one slot, the largest over layers; per variant the largest shape.
    shared_slot: dict[str, int] = {}
    shared_shape: dict[str, list[Shape]] = {}
    for descs in all_descs:
        slots = descs.slot_bytes
        if slots is None:
            fail(descs, "'memplan.descs' op has no slots; run memplan-max-slots first")
        for t in descs.shared_indices:
            name = descs.tensor_names[t]
            shared_slot[name] = max(shared_slot.get(name, 0), slots[t])
            shapes = [descs.shape(v, t) for v in range(len(VARIANTS))]
            old = shared_shape.setdefault(name, shapes)
            shared_shape[name] = [max(a, b, key=lambda s: s[0] * s[1] * s[2] * s[3]) for a, b in zip(old, shapes)]
    populated: list[MemRegion] = []
    for descs in all_descs:
        names, regions, dtypes, slots = descs.tensor_names, descs.tensor_regions, descs.tensor_dtypes, descs.slot_bytes
        shared = set(descs.shared_indices)
        params: list[_Row] = []
        ema_extra: list[_Row] = []
        for t, (name, region, dtype) in enumerate(zip(names, regions, dtypes)):
            enabled = region_enabled(region, amp=amp, optimizer=opt)
            if t in shared:
                if name in table.by_name:
                    continue
                table.add(_Row(name, region, dtype, shared_shape[name], shared_slot[name] if enabled else 0))
                continue
            row = _Row(f"l{descs.layer_index}.{name}", region, dtype,
                       [descs.shape(v, t) for v in range(len(VARIANTS))],
                       slots[t] if enabled else 0, init_rule(region))  # type: ignore[index]
            table.add(row)
            if ema and row.slot and (region in _EMA_FP16 or region in (MemRegion.W_EQ_SCALE, MemRegion.W_EQ_BIAS)):
                ema_extra.append(_Row(f"{row.name}.ema", _EMA_FP16.get(region, region), row.dtype, row.shapes,
                                      row.slot, "zeros"))
            if region in PARAMETER_REGIONS:
                params.append(row)
                if region in WEIGHT_REGIONS and region not in populated:
                    populated.append(region)
        for prefix, on in (("M", opt.uses_momentum), ("V", opt.uses_adam)):
            if on:
                for p in params:
                    table.add(_Row(f"{p.name}.{prefix.lower()}", _twin(p.region, prefix), p.dtype, p.shapes,
                                   p.slot, "zeros"))
        if ema:
            for p in params:
                table.add(_Row(f"{p.name}.ema", _twin(p.region, "E"), p.dtype, p.shapes, p.slot, "zeros"))
            for r in ema_extra:
                table.add(r)
        if opt.uses_lars:
            for p in params:
                if p.region in WEIGHT_REGIONS:
                    n_region = _twin(p.region, "N")
                    table.add(_Row(f"{p.name}.n", n_region, "f32", [SCALAR] * len(VARIANTS),
                                   slot_bytes(SCALAR, "f32", n_region, spec.target_kind), "zeros"))
    if opt.uses_lars:
        for region in WEIGHT_REGIONS:
            if region in populated:
                shape: Shape = (1, 1, 1, LARS_PARTIALS)
                table.add(_Row(f"lars_partial_{region.name[2:].lower()}", MemRegion.T_TEMP_FP32, "f32",
                               [shape] * len(VARIANTS),
                               slot_bytes(shape, "f32", MemRegion.T_TEMP_FP32, spec.target_kind)))
    return table


def create_plans(program: ProgramOp, model_layers, ema: bool = False) -> list[PlanOp]:
    """The six ``memplan.plan`` ops of ``program`` (they share ids, slots and offsets); ``ema``:
    plan the EMA tensors (module doc).

    Fails at ``program`` when the arena does not fit in 64 bits (an absurd batch size)."""
    table = build_tables(program, model_layers, ema)
    offsets, bases, sizes = linear_layout([r.region for r in table.rows], [r.slot for r in table.rows])
    if (total := bases[-1] + sizes[-1]) > I64_MAX:
        fail(program, f"'{program.name}' op needs an arena of {total} bytes, more than a memory plan can "
                      f"address ({I64_MAX}); reduce batch_size or the resolutions")
    target = program.spec.target_kind  # type: ignore[union-attr]
    plans = []
    for v, name in enumerate(VARIANTS):
        tensors = [DTensor(i, r.name, r.region, r.dtype, r.shapes[v], r.slot, offsets[i], r.init, r.value)
                   for i, r in enumerate(table.rows)]
        plans.append(PlanOp(f"plan_{name}", target, region_bases=bases, region_sizes=sizes, tensors=tensors))
    return plans


@dataclass(frozen=True)
class MemplanCreatePlansPass(ModulePass):
    """Phase 3: six MemoryPlans per program (see the module doc). Options ``optimizer``, ``ema``."""

    name = "memplan-create-plans"

    optimizer: str | None = None
    ema: bool = False

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for model, program in model_programs(op, self.name):
            assert program is not None
            if self.optimizer is not None:
                try:
                    kind = OptimizerKind.parse(self.optimizer)
                except ValueError as e:
                    fail(program, f"{self.name}: {e}")
                if program.spec is None:
                    fail(program, "'memplan.program' op has no 'memplan.spec'; run memplan-derive-shapes first")
                program.spec.optimizer = OptimizerAttr(kind)
            for old in program.plans():
                Rewriter.erase_op(old)
            plans = create_plans(program, layers(model), self.ema)
            anchor = program.descs()[-1] if program.descs() else program.variants()[-1]
            Rewriter.insert_op(plans, InsertPoint.after(anchor))
