"""Section 1: compile time of the whole pipeline, in process, per pass, and the text round-trip.

For each zoo model (:data:`bench.models.ZOO_MODELS`) and each of the two variants ``fused_amp``
(``fuse=True amp=True``) and ``unfused_fp32``, the pipeline of :func:`tr_mlir.compile.compile` is
run step by step with a timer around each step, in the order ``tr-compile`` runs them:

* ``emit``: BluePrint -> tree-form ``arch`` module (:func:`tr_mlir.blueprint.emit`);
* every pass of ``arch-plan`` (:func:`tr_mlir.passes.arch_plan.plan_steps`, instantiated from the
  pass registry :func:`tr_mlir.passes.get_all_passes`), then every phase of ``memplan-compile``
  (:meth:`MemplanCompilePass.phases`, with the compile spec on phase 1). Each pass's time excludes
  the module verification that follows it, which is timed on its own (``verify`` in the totals);
* ``total_s``: emit + passes + verifications, what ``tr_mlir.compile.compile`` costs.

The compile spec is the same for every model: batch 32, 50 000 training and 10 000 validation
samples (so the last-batch variants exist), momentum SGD, CPU target.

Round trip (what ``tr-opt`` costs on a compiled module): ``print_s`` prints the memplan module with
xDSL's printer, ``parse_s`` parses the text back with tr-opt's parser (:class:`TrParser`) and
``verify_s`` verifies the parsed module; ``chars`` is the text size. The parsed module must print
to the same text (checked: ``round_trip_ok``).
"""

from __future__ import annotations

import io
import time
from typing import Any

SPEC = {"batch_size": 32, "train_size": 50_000, "val_size": 10_000, "optimizer": "momentum", "target": "cpu"}
"""The compile spec of every measurement (module doc)."""

VARIANTS: dict[str, dict[str, bool]] = {"fused_amp": {"fuse": True, "amp": True},
                                        "unfused_fp32": {"fuse": False, "amp": False}}
"""The two compile variants of section 1 (section 3 has its own, :data:`bench.memory.VARIANTS`)."""


def model_spec(name: str):
    """``(builder, input (H, W, C), num_classes)`` of a zoo model or a throughput model."""
    from bench.models import THROUGHPUT_MODELS
    from tr_mlir.zoo import MODELS

    if name in MODELS:
        m = MODELS[name]
        return m.builder, m.input_shape, m.num_classes
    t = THROUGHPUT_MODELS[name]
    return t.builder, t.input_shape, t.num_classes


def compile_timed(name: str, *, fuse: bool, amp: bool, spec: dict[str, Any] | None = None, reuse: bool = True
                  ) -> tuple[Any, dict[str, Any]]:
    """Compile model ``name`` (:func:`model_spec`) pass by pass with the compile ``spec``
    (default :data:`SPEC`) and ``memplan-assign-offsets``'s ``reuse`` (``False``: the seed's
    one-slot-per-tensor layout); returns ``(module, timings)`` (module doc)."""
    from tr_mlir.blueprint import emit
    from tr_mlir.compile import make_context
    from tr_mlir.passes import get_all_passes
    from tr_mlir.passes.arch_plan import plan_steps, set_model_options
    from tr_mlir.passes.memplan_compile import MemplanCompilePass

    spec = dict(SPEC if spec is None else spec)
    builder, input_shape, num_classes = model_spec(name)
    ctx = make_context()
    registry = get_all_passes()
    passes: list[tuple[str, float]] = []
    verify = 0.0
    t0 = time.perf_counter()
    module = emit(builder(num_classes), input_shape, num_classes=num_classes, amp=amp, fuse=fuse, name=name)
    emit_s = time.perf_counter() - t0
    set_model_options(module, fuse=fuse, amp=amp)
    steps = [(n, registry[n]()()) for n in plan_steps(fuse, cbrp=False)]
    steps += [(p.name, p) for p in MemplanCompilePass(**spec, reuse=reuse).phases()]
    for pass_name, p in steps:
        t0 = time.perf_counter()
        p.apply(ctx, module)
        t1 = time.perf_counter()
        module.verify()
        verify += time.perf_counter() - t1
        passes.append((pass_name, t1 - t0))
    total = emit_s + verify + sum(t for _, t in passes)
    return module, {"emit_s": emit_s, "passes": [{"pass": n, "s": t} for n, t in passes], "verify_s": verify,
                    "total_s": total}


def round_trip(module) -> dict[str, Any]:
    """Print ``module``, parse the text back with tr-opt's parser and verify it (module doc)."""
    from xdsl.printer import Printer

    from tr_mlir.compile import make_context
    from tr_mlir.tools.opt_parser import TrParser

    t0 = time.perf_counter()
    buf = io.StringIO()
    Printer(stream=buf).print_op(module)
    text = buf.getvalue()
    t1 = time.perf_counter()
    parsed = TrParser(make_context(), text, "<bench>").parse_module()
    t2 = time.perf_counter()
    parsed.verify()
    t3 = time.perf_counter()
    again = io.StringIO()
    Printer(stream=again).print_op(parsed)
    return {"print_s": t1 - t0, "parse_s": t2 - t1, "verify_s": t3 - t2, "chars": len(text),
            "round_trip_ok": again.getvalue() == text}


def run(models: list[str], round_trip_models: list[str], visit=None) -> dict[str, Any]:
    """Section 1 for ``models`` (both variants), with the round trip for ``round_trip_models``;
    ``visit(name, variant, module)``, when given, sees every compiled module.

    Returns ``{"spec", "rows": [{model, variant, emit_s, passes, verify_s, total_s, round_trip?}],
    "depth_growth": [...]}``; ``depth_growth`` gives ResNet-50/101/152 (when measured) with their
    layer count and total time relative to ResNet-50.
    """
    rows = []
    for name in models:
        for variant, flags in VARIANTS.items():
            module, t = compile_timed(name, **flags)
            row = {"model": name, "variant": variant, **t, "arch_ops": _arch_ops(module)}
            if name in round_trip_models:
                row["round_trip"] = round_trip(module)
            rows.append(row)
            if visit is not None:
                visit(name, variant, module)
            del module
    return {"spec": SPEC, "rows": rows, "depth_growth": depth_growth(rows)}


def _arch_ops(module) -> int:
    from tr_mlir.dialects.arch import ModelOp

    model = next(op for op in module.walk() if isinstance(op, ModelOp))
    return sum(1 for _ in model.body.block.ops) - 1  # without arch.output


def depth_growth(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """ResNet-50 -> 101 -> 152 per variant: layers (arch ops after planning), total seconds,
    seconds per layer and the ratio to ResNet-50."""
    out = []
    for variant in VARIANTS:
        base = next((r for r in rows if r["model"] == "resnet50" and r["variant"] == variant), None)
        for name in ("resnet50", "resnet101", "resnet152"):
            r = next((r for r in rows if r["model"] == name and r["variant"] == variant), None)
            if r is None or base is None:
                continue
            out.append({"model": name, "variant": variant, "arch_ops": r["arch_ops"], "total_s": r["total_s"],
                        "ms_per_op": 1e3 * r["total_s"] / max(r["arch_ops"], 1),
                        "vs_resnet50": r["total_s"] / base["total_s"]})
    return out
