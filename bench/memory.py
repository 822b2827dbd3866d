"""Section 3: memory of a training step -- tr-mlir's two layouts, the liveness bound, PyTorch.

For each model of :data:`MODELS` (at its batch) and each variant of :data:`VARIANTS` (``unfused_fp32``,
``fused_fp32``, ``fused_amp``) the model is compiled twice (:func:`bench.compile_time.compile_timed`,
the spec of section 1 at the model's batch): with ``memplan-assign-offsets``'s ``reuse=false`` (the
*seed layout*: every DTensor in its own slot) and with the default ``reuse=true`` (transient DTensors
split into webs and packed by lifetime into one transient pool). No arena is allocated for this
part (:func:`plan_row`); all numbers are of the ``train_base`` plan:

* ``seed_arena_bytes`` / ``arena_bytes``: the arena (``PlanOp.size``) of the seed / reuse layout;
  ``transient_pool_bytes``: the reuse layout's transient pool (``PlanOp.transient_pool``);
* ``persistent_bytes``: the slots of the DTensors outside the transient regions (parameters, BN
  statistics, gradients, optimizer state, inputs, scalars, results; the same in both layouts), with
  ``state_bytes`` (parameters ``W_*`` / AMP working copies ``A_*``, BN statistics ``B_*``,
  gradients ``G_*``, optimizer state ``M_*`` / ``V_*`` / ``N_*``; parts in ``state_parts``) and
  ``input_bytes`` (the A/B input buffers ``I_*``) among them;
* ``activation_bytes`` / ``workspace_bytes``: the seed layout's slots of features, gradient slots and
  masks (``F_*``, ``S_MASK``) / of temporaries and kernel workspaces (``T_*``);
* ``lower_bound_bytes``: the liveness lower bound of the reuse program: ``persistent_bytes`` plus
  the largest sum of the slots of transient DTensors live at one time
  (:func:`tr_mlir.dialects.lifetimes.lower_bound` over :func:`~tr_mlir.dialects.lifetimes.analyze`:
  every step order the runtime replays, the train and inference sequences end to end). Any
  placement that keeps these slots (256-byte multiples) and these kernels needs at least this much;
  ``seed_lower_bound_bytes`` is the same bound on the seed program (its DTensors not split into
  webs: what packing alone, without live-range splitting, could reach);
* ``arena_over_bound`` / ``seed_arena_over_bound``: the reuse / seed arena over ``lower_bound_bytes``;
* ``peak``: where the bound is reached: ``time`` on the timeline, ``where`` (graph, GraphId, node
  index, op), ``in_train_base_step`` (the time lies in the ``train_base`` training step on input
  buffer A), ``live_count`` and ``largest`` (the :data:`TOP` largest transient DTensors live there:
  name, region, bytes; split webs are named ``<name>.v<k>``);
* ``step_nodes`` and ``step_curve_mib``: the nodes of the ``train_base`` step (input buffer A, not
  the last batch; the first sequence of the lifetimes) and, along it, ``persistent_bytes`` plus the
  live transient slots of the reuse program, in MiB, in at most :data:`CURVE_POINTS` equal bins of
  the step's nodes (the largest value of each bin): the curve of the plot;
* ``compile_s``: the two compiles' times (``seed``, ``reuse``).

Measured in fresh processes (:mod:`bench.peak`, which documents how; fp32 only, 2 threads; each
measurement of a model in :attr:`Mode.memory_runs` repeated in that many processes, the run with the
median RSS delta kept, every run's RSS delta in ``rss_peak_delta_runs`` (null for a run that
failed, its message in ``run_errors``)):

* ``torch[model]``: PyTorch eager's ``rss_peak_delta_bytes`` (peak RSS of building the model and
  two training steps, above the baseline) and ``profiler_peak_bytes`` / ``timeline_mib`` (the
  allocator's live bytes over a profiled third step), for :attr:`Mode.torch_peak_models`;
* ``tr_mlir_rss`` on the ``unfused_fp32`` and ``fused_fp32`` rows: tr-mlir's
  ``rss_peak_delta_bytes`` the same way (building the Executable and Runner of the reuse layout and
  two training steps), for :attr:`Mode.tr_peak_models`;
* ``vs_torch`` on those rows: ``rss_delta`` (tr-mlir RSS delta / torch RSS delta),
  ``steps_rss_delta`` (the same for the two steps' own peaks, ``steps_peak_delta_bytes``),
  ``arena_vs_profiler`` (reuse arena / torch profiler peak) and ``seed_arena_vs_profiler``;
* ``targets``: the issue's checks, each with its value, the limit and whether it is met: CIFAR
  ResNet-18 at batch 64, fp32 fused and unfused, RSS delta ratio <= 0.8; ResNet-50 (224) at batch
  32, fp32 fused and unfused, arena / torch profiler peak <= 0.8.

:func:`write_plots` draws one PNG per model (:func:`plot`): the step curves of the two fp32 variants
with their seed and reuse arenas as constant lines, and torch's profiler timeline, against the
position in one training step (tr-mlir: node index / nodes; torch: time / the step's duration).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tr_mlir.dialects.memplan import VARIANTS as PLAN_VARIANTS
from tr_mlir.dialects.memplan import MemRegion

R = MemRegion
MIB = 2 ** 20
TOP = 5
"""How many of the largest DTensors live at the peak are listed."""
CURVE_POINTS = 200
"""Bins of ``step_curve_mib`` (a step with fewer nodes keeps one point per node)."""

MODELS: dict[str, int] = {"mlp": 200, "lenet5": 128, "resnet18_cifar": 64, "resnet18": 32, "resnet50": 32,
                          "mobilenet_v2": 32, "vgg16_bn": 32}
"""Section 3's models and batch sizes (the throughput models at section 2's batches, the zoo's at 32)."""

VARIANTS: dict[str, dict[str, bool]] = {"unfused_fp32": {"fuse": False, "amp": False},
                                        "fused_fp32": {"fuse": True, "amp": False},
                                        "fused_amp": {"fuse": True, "amp": True}}
"""The compile variants of section 3."""

FP32_VARIANTS = ("unfused_fp32", "fused_fp32")
"""The variants measured against PyTorch (fp32)."""

STATE_PARTS: dict[str, frozenset[MemRegion]] = {
    "params": frozenset(r for r in R if r.name.startswith(("W_", "A_"))),
    "bn_stats": frozenset(r for r in R if r.name.startswith("B_")),
    "grads": frozenset(r for r in R if r.name.startswith("G_")),
    "optimizer": frozenset(r for r in R if r.name.startswith(("M_", "V_", "N_"))),
}
"""The parts of ``state_bytes`` (module doc)."""

OTHER_PARTS: dict[str, frozenset[MemRegion]] = {
    "activation_bytes": frozenset({R.F_FEATURE_FP32, R.F_GRAD_SLOT_FP32, R.F_FEATURE_FP16, R.F_GRAD_SLOT_FP16,
                                   R.S_MASK}),
    "workspace_bytes": frozenset({R.T_TEMP_FP32, R.T_TEMP_FP16, R.T_TEMP_INT32, R.T_TEMP_INT8}),
    "input_bytes": frozenset({R.I_A_LABEL, R.I_A_DATA, R.I_B_LABEL, R.I_B_DATA}),
}

TARGETS = (("resnet18_cifar", "rss_delta", 0.8), ("resnet50", "arena_vs_profiler", 0.8))
"""The issue's targets: (model, ratio of ``vs_torch``, limit), for both fp32 variants."""


# --------------------------------------------------------------------------------------
# Plan side
# --------------------------------------------------------------------------------------


def _layout(module) -> tuple[Any, Any, Any, list[int]]:
    """``(program, train_base plan, lifetimes, slots by id)`` of a compiled module."""
    from tr_mlir.dialects import lifetimes
    from tr_mlir.lowering.executable import find_program

    _, program = find_program(module)
    plans = {p.plan_name: p for p in program.plans()}
    base = plans[program.variants()[0].plan.root_reference.data]
    tensors = list(base.tensors())
    slots = [0] * (max((t.id for t in tensors), default=-1) + 1)
    for t in tensors:
        slots[t.id] = t.slot
    return program, base, lifetimes.analyze(program, base), slots


def _persistent(base, life) -> int:
    return sum(t.slot for t in base.tensors() if t.id not in life.transient)


def train_base_step(life) -> tuple[int, int]:
    """``(start, nodes)`` of the ``train_base`` training step on input buffer A (not the last batch)
    on the lifetimes' timeline: their first sequence (:func:`tr_mlir.dialects.lifetimes.sequences`
    resolves ``train_base``, the first variant, through ``training_step_orders()[0]`` first).
    Raises ``ValueError`` when the first sequence is not that step."""
    from tr_mlir.dialects.lifetimes import training_step_orders

    assert PLAN_VARIANTS[0] == "train_base"
    order = training_step_orders()[0]
    gids = [s.gid for s in life.sequences[0]] if life.sequences else []
    it = iter(order)
    if not gids or not all(any(g == o for o in it) for g in dict.fromkeys(gids)):
        raise ValueError("the lifetimes' first sequence is not the train_base step")
    return life.starts[0], len(life.sequences[0])


def live_curve(life, slots: list[int], persistent: int, start: int, nodes: int) -> list[int]:
    """``persistent`` plus the live transient slots at each node of ``[start, start + nodes)``."""
    import numpy as np

    delta = np.zeros(nodes + 1, np.int64)
    for tid, ivs in life.intervals.items():
        for a, b in ivs:
            lo, hi = max(a, start), min(b, start + nodes - 1)
            if lo <= hi:
                delta[lo - start] += slots[tid]
                delta[hi - start + 1] -= slots[tid]
    return [persistent + int(v) for v in np.cumsum(delta[:-1])]


def bin_max(values: list[int], points: int = CURVE_POINTS) -> list[int]:
    """``values`` in at most ``points`` equal bins (the largest value of each)."""
    n = len(values)
    if n <= points:
        return list(values)
    return [max(values[b * n // points:max((b + 1) * n // points, b * n // points + 1)]) for b in range(points)]


def plan_row(seed_module, reuse_module) -> dict[str, Any]:
    """The plan-side numbers of the module doc from the ``reuse=false`` and ``reuse=true`` compiles
    of one model and variant."""
    from tr_mlir.dialects.lifetimes import lower_bound

    _, seed, seed_life, seed_slots = _layout(seed_module)
    _, base, life, slots = _layout(reuse_module)
    by_region: dict[MemRegion, int] = {}
    for t in seed.tensors():
        by_region[t.region] = by_region.get(t.region, 0) + t.slot
    persistent = _persistent(base, life)
    transient_peak, at = lower_bound(life, slots)
    seed_peak, _ = lower_bound(seed_life, seed_slots)
    pool = base.transient_pool
    out: dict[str, Any] = {"seed_arena_bytes": seed.size, "arena_bytes": base.size,
                           "transient_pool_bytes": pool[1] if pool else None,
                           "dtensors": len(seed), "dtensors_reuse": len(base),
                           "persistent_bytes": persistent}
    parts = {k: sum(by_region.get(r, 0) for r in v) for k, v in STATE_PARTS.items()}
    out["state_bytes"] = sum(parts.values())
    out["state_parts"] = parts
    for k, regions in OTHER_PARTS.items():
        out[k] = sum(by_region.get(r, 0) for r in regions)
    out["transient_peak_bytes"] = transient_peak
    out["lower_bound_bytes"] = persistent + transient_peak
    out["seed_lower_bound_bytes"] = _persistent(seed, seed_life) + seed_peak
    out["arena_over_bound"] = base.size / out["lower_bound_bytes"]
    out["seed_arena_over_bound"] = seed.size / out["lower_bound_bytes"]
    by_id = {t.id: t for t in base.tensors()}
    live = sorted(life.live_at(at), key=lambda i: (-slots[i], i))
    start, nodes = train_base_step(life)
    out["peak"] = {"time": at, "where": life.step_at(at).where, "in_train_base_step": start <= at < start + nodes,
                   "live_count": len(live),
                   "largest": [{"name": by_id[i].name, "region": by_id[i].region.name, "bytes": slots[i]}
                               for i in live[:TOP]]}
    out["step_nodes"] = nodes
    curve = live_curve(life, slots, persistent, start, nodes)
    out["step_curve_mib"] = [round(v / MIB, 2) for v in bin_max(curve)]
    return out


def compile_pair(name: str, batch: int, *, fuse: bool, amp: bool) -> tuple[dict[str, Any], dict[str, float]]:
    """``(plan_row, compile seconds)`` of one model and variant at ``batch`` (module doc)."""
    from bench.compile_time import SPEC, compile_timed

    spec = {**SPEC, "batch_size": batch, "train_size": batch * 100, "val_size": batch}
    t0 = time.perf_counter()
    seed, _ = compile_timed(name, fuse=fuse, amp=amp, spec=spec, reuse=False)
    t1 = time.perf_counter()
    reuse, _ = compile_timed(name, fuse=fuse, amp=amp, spec=spec, reuse=True)
    t2 = time.perf_counter()
    return plan_row(seed, reuse), {"seed": t1 - t0, "reuse": t2 - t1}


# --------------------------------------------------------------------------------------
# Fresh-process measurements (bench.peak)
# --------------------------------------------------------------------------------------


def measure(side: str, name: str, batch: int, *, fuse: bool = False, threads: int = 2,
            timeout: float = 900.0) -> dict[str, Any]:
    """Run :mod:`bench.peak` for ``side`` (``torch`` or ``tr-mlir``) in a fresh process; returns
    its numbers, or ``{"error": ...}`` when it failed or timed out."""
    repo = str(Path(__file__).resolve().parent.parent)
    old = os.environ.get("PYTHONPATH")
    env = dict(os.environ, PYTHONPATH=repo if not old else repo + os.pathsep + old)
    cmd = [sys.executable, "-m", "bench.peak", side, name, str(batch), "--threads", str(threads)]
    if fuse:
        cmd.append("--fuse")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=repo)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    for line in proc.stdout.splitlines():
        if line.startswith("BENCH-RESULT "):
            return json.loads(line[len("BENCH-RESULT "):])
    tail = [ln for ln in (proc.stderr or proc.stdout).strip().splitlines() if not ln.startswith("USDT")]
    return {"error": f"exit {proc.returncode}: {(tail[-1:] or ['no output'])[0]}"}


def measure_runs(side: str, name: str, batch: int, runs: int = 1, **kw) -> dict[str, Any]:
    """:func:`measure` ``runs`` times: the run with the median ``rss_peak_delta_bytes`` (the lower
    median of an even count), with ``rss_peak_delta_runs`` (every run's, in order) and ``runs``."""
    got = [measure(side, name, batch, **kw) for _ in range(max(runs, 1))]
    ok = [g for g in got if g.get("rss_peak_delta_bytes") is not None]
    if not ok:
        return {**got[0], "runs": len(got)}
    ok.sort(key=lambda g: g["rss_peak_delta_bytes"])
    out = {**ok[(len(ok) - 1) // 2], "runs": len(got),
           "rss_peak_delta_runs": [g.get("rss_peak_delta_bytes") for g in got]}
    errors = [g["error"] for g in got if "error" in g]
    if errors:  # a run that failed shows as null in rss_peak_delta_runs: say why
        out["run_errors"] = errors
    return out


def _ratio(a: Any, b: Any) -> float | None:
    return a / b if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else None


def compare(row: dict[str, Any], torch: dict[str, Any] | None) -> dict[str, float | None]:
    """``vs_torch`` of an fp32 row (module doc)."""
    torch = torch or {}
    ours = row.get("tr_mlir_rss") or {}
    return {"rss_delta": _ratio(ours.get("rss_peak_delta_bytes"), torch.get("rss_peak_delta_bytes")),
            "steps_rss_delta": _ratio(ours.get("steps_peak_delta_bytes"), torch.get("steps_peak_delta_bytes")),
            "arena_vs_profiler": _ratio(row["arena_bytes"], torch.get("profiler_peak_bytes")),
            "seed_arena_vs_profiler": _ratio(row["seed_arena_bytes"], torch.get("profiler_peak_bytes"))}


def targets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The issue's checks (:data:`TARGETS`) on the rows that have the ratio."""
    out = []
    for model, key, limit in TARGETS:
        for r in rows:
            if r["model"] == model and r["variant"] in FP32_VARIANTS:
                value = (r.get("vs_torch") or {}).get(key)
                out.append({"model": model, "batch": r["batch"], "variant": r["variant"], "ratio": key,
                            "value": value, "limit": limit, "met": None if value is None else value <= limit})
    return out


def run(models: tuple[str, ...], torch_models: tuple[str, ...], tr_models: tuple[str, ...], *,
        runs: dict[str, int] | None = None, log=print) -> dict[str, Any]:
    """Section 3 (module doc): plan side for ``models``, PyTorch for ``torch_models`` and tr-mlir's
    own RSS for ``tr_models`` (each a subset of ``models``); ``runs``: model -> how many fresh
    processes each measurement of it takes (:func:`measure_runs`; default 1)."""
    runs = runs or {}
    rows: list[dict[str, Any]] = []
    for name in models:
        batch = MODELS[name]
        for variant, flags in VARIANTS.items():
            row, compile_s = compile_pair(name, batch, **flags)
            rows.append({"model": name, "variant": variant, "batch": batch, **row, "compile_s": compile_s})
        log(f"[bench]   plans: {name} (batch {batch})")
    torch: dict[str, Any] = {}
    for name in torch_models:
        log(f"[bench]   torch peak: {name} (batch {MODELS[name]})")
        torch[name] = measure_runs("torch", name, MODELS[name], runs.get(name, 1))
    for r in rows:
        if r["variant"] not in FP32_VARIANTS:
            continue
        if r["model"] in tr_models:
            log(f"[bench]   tr-mlir peak RSS: {r['model']} {r['variant']} (batch {r['batch']})")
            r["tr_mlir_rss"] = measure_runs("tr-mlir", r["model"], r["batch"], runs.get(r["model"], 1),
                                            fuse=VARIANTS[r["variant"]]["fuse"])
        if r["model"] in torch or "tr_mlir_rss" in r:
            r["vs_torch"] = compare(r, torch.get(r["model"]))
    return {"rows": rows, "torch": torch, "targets": targets(rows), "models": dict(MODELS),
            "spec": {"optimizer": "momentum", "target": "cpu", "train_size": "100 x batch", "val_size": "batch"}}


# --------------------------------------------------------------------------------------
# Plot
# --------------------------------------------------------------------------------------

_COLORS = {"unfused_fp32": "tab:blue", "fused_fp32": "tab:orange", "torch": "tab:red"}


def plot(memory: dict[str, Any], model: str, path: str | Path, *, dpi: int = 100) -> None:
    """The memory-over-the-step plot of ``model`` (module doc) as a PNG at ``path``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.5, 4.2))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    batch = None
    for r in memory["rows"]:
        if r["model"] != model or r["variant"] not in FP32_VARIANTS:
            continue
        batch = r["batch"]
        c, label = _COLORS[r["variant"]], r["variant"].replace("_", " ")
        ys = r["step_curve_mib"]
        xs = [(i + 0.5) / len(ys) for i in range(len(ys))]
        ax.plot(xs, ys, color=c, lw=1.4, label=f"tr-mlir {label}: live bytes")
        ax.axhline(r["arena_bytes"] / MIB, color=c, ls="--", lw=1.0, label=f"tr-mlir {label}: reuse arena")
        ax.axhline(r["seed_arena_bytes"] / MIB, color=c, ls=":", lw=1.0, label=f"tr-mlir {label}: seed arena")
    t = (memory.get("torch") or {}).get(model) or {}
    if t.get("timeline_mib"):
        ys = t["timeline_mib"]
        ax.plot([(i + 0.5) / len(ys) for i in range(len(ys))], ys, color=_COLORS["torch"], lw=1.4,
                label="PyTorch fp32: profiler live bytes")
    ax.set_xlim(0, 1)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("position in one training step (tr-mlir: node / nodes; PyTorch: time / step time)")
    ax.set_ylabel("MiB")
    ax.set_title(f"{model}, batch {batch}: memory over one training step"
                 + ("" if t.get("timeline_mib") else " (PyTorch not measured)"), fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    import io

    from PIL import Image  # a dependency of matplotlib

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    buf.seek(0)
    # a 128-colour palette (octree: keeps the colour of a line with few pixels, as a legend sample):
    # a quarter of the bytes of the RGBA image, the lines unchanged to the eye
    Image.open(buf).convert("RGB").quantize(colors=128, method=Image.Quantize.FASTOCTREE).save(
        str(path), format="PNG", optimize=True)


def write_plots(memory: dict[str, Any], out_dir: str | Path, stem: str) -> dict[str, str]:
    """One plot per model of ``memory`` as ``<out_dir>/<stem>-memory-<model>.png``; returns
    model -> file name (relative to ``out_dir``), also stored as ``memory["plots"]``."""
    out = {}
    for model in dict.fromkeys(r["model"] for r in memory["rows"]):
        name = f"{stem}-memory-{model}.png"
        plot(memory, model, Path(out_dir) / name)
        out[model] = name
    memory["plots"] = out
    return out
