"""The benchmark driver behind ``python -m bench`` (module doc of :mod:`bench.__main__`).

The results JSON (``schema_version`` 1) has the top-level keys :data:`RESULT_KEYS`: ``mode``,
``date``, ``machine`` (CPU, cores, memory, versions, load averages before and after),
``openblas_env_unset``, ``duration_s``, and one key per section run: ``compile`` (section 1,
:mod:`bench.compile_time`), ``throughput`` (2, :mod:`bench.throughput`), ``memory`` (3,
:mod:`bench.memory`), ``gpu`` (4, :mod:`bench.gpu`). bench/README.md documents every field.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
RESULT_KEYS = ("schema_version", "mode", "date", "machine", "openblas_env_unset", "duration_s")
SECTIONS = ("compile", "throughput", "memory", "gpu")
REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Mode:
    """What one mode measures (the sizes of each section)."""

    compile_models: tuple[str, ...]
    round_trip_models: tuple[str, ...]
    throughput_models: tuple[str, ...]
    warmup: int
    rounds: int
    steps: dict[str, int] = field(default_factory=dict)
    torch_peak_models: tuple[str, ...] = ()
    memory_extra: tuple[str, ...] = ()  # throughput models also planned for section 3
    peak_n: int = 2048
    also_threads: tuple[int, ...] = ()  # section 2 repeated on these thread counts


def _modes() -> dict[str, Mode]:
    from bench.models import THROUGHPUT_MODELS, ZOO_MODELS

    tp = tuple(THROUGHPUT_MODELS)
    return {
        "smoke": Mode(("mlp",), ("mlp",), ("mlp",), warmup=1, rounds=1, steps={"mlp": 2}, peak_n=256),
        "quick": Mode(ZOO_MODELS, ("mlp", "lenet5", "resnet18", "resnet50"), tp, warmup=2, rounds=3,
                      steps={"mlp": 6, "lenet5": 6, "resnet18_cifar": 2},
                      torch_peak_models=("mlp", "lenet5", "resnet18_cifar", "resnet18"), memory_extra=tp,
                      also_threads=(1,)),
        "full": Mode(ZOO_MODELS, ZOO_MODELS, tp, warmup=3, rounds=5,
                     steps={"mlp": 10, "lenet5": 10, "resnet18_cifar": 4},
                     torch_peak_models=(*tp, *ZOO_MODELS), memory_extra=tp, also_threads=(1,)),
    }


def machine_info() -> dict[str, Any]:
    """CPU model, cores, memory, library versions and the load average now."""
    import numpy as np
    import torch
    import xdsl

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": mem, "python": platform.python_version(),
            "numpy": np.__version__, "torch": torch.__version__, "xdsl": str(getattr(xdsl, "__version__", "?")),
            "load_before": list(os.getloadavg())}


def run(mode_name: str, sections: tuple[str, ...], *, log=print) -> dict[str, Any]:
    """Run ``sections`` in mode ``mode_name``; returns the results dict (module doc)."""
    from bench import compile_time, gpu, memory, throughput

    mode = _modes()[mode_name]
    t_start = time.perf_counter()
    res: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "mode": mode_name,
                           "date": datetime.date.today().isoformat(), "machine": machine_info(),
                           "openblas_env_unset": [v for v in os.environ.get("TR_MLIR_BENCH_UNSET", "").split(",") if v]}
    mem_rows: list[dict[str, Any]] = []

    def visit(name: str, variant: str, module) -> None:
        if "memory" in sections:
            mem_rows.append({"model": name, "variant": variant, "batch": compile_time.SPEC["batch_size"],
                             **memory.analyze(module)})

    if "compile" in sections or "memory" in sections:
        log(f"[bench] section 1: compile time ({len(mode.compile_models)} models x 2 variants)")
        c = compile_time.run(list(mode.compile_models), list(mode.round_trip_models), visit=visit)
        if "compile" in sections:
            res["compile"] = c
    if "throughput" in sections:
        log(f"[bench] section 2: CPU throughput ({', '.join(mode.throughput_models)})")
        res["throughput"] = throughput.run(list(mode.throughput_models), warmup=mode.warmup, rounds=mode.rounds,
                                           steps=mode.steps, peak_n=mode.peak_n, also_threads=mode.also_threads)
    if "memory" in sections:
        log("[bench] section 3: memory")
        from bench.models import THROUGHPUT_MODELS

        for name in mode.memory_extra:
            m = THROUGHPUT_MODELS[name]
            spec = {**compile_time.SPEC, "batch_size": m.batch, "train_size": m.batch * 100, "val_size": m.batch}
            for variant, flags in compile_time.VARIANTS.items():
                module, _ = compile_time.compile_timed(name, spec=spec, **flags)
                mem_rows.append({"model": name, "variant": variant, "batch": m.batch, **memory.analyze(module)})
        for name in mode.torch_peak_models:
            row = next((r for r in mem_rows if r["model"] == name and r["variant"] == "unfused_fp32"), None)
            if row is None:
                continue
            _, shape, classes = compile_time.model_spec(name)
            log(f"[bench]   torch peak: {name} (batch {row['batch']})")
            row["torch"] = memory.torch_peak(name, shape, classes, row["batch"])
        res["memory"] = {"rows": mem_rows, "spec": compile_time.SPEC}
    if "gpu" in sections:
        res["gpu"] = gpu.run(str(REPO))
    res["machine"]["load_after"] = list(os.getloadavg())
    res["duration_s"] = time.perf_counter() - t_start
    return res


def main(argv: list[str] | None = None) -> int:
    """The command line (module doc of :mod:`bench.__main__`). Returns the exit status."""
    ap = argparse.ArgumentParser(prog="python -m bench", description="tr-mlir benchmarks: compile time, CPU "
                                 "training throughput vs PyTorch, memory (see bench/README.md).")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_true", help="the quick mode: under 5 minutes on 2 cores")
    g.add_argument("--smoke", action="store_true", help="seconds: every section on the MLP only (tests)")
    ap.add_argument("--sections", default=",".join(SECTIONS),
                    help=f"comma-separated sections to run (default: all of {','.join(SECTIONS)})")
    ap.add_argument("--out-dir", default=str(REPO / "bench" / "results"),
                    help="where <date>.json and <date>.md go (default: bench/results)")
    ap.add_argument("--name", default=None, help="file name stem instead of the date")
    ap.add_argument("--keep-blas-env", action="store_true",
                    help="do not unset OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE for the run")
    args = ap.parse_args(argv)
    sections = tuple(s.strip() for s in args.sections.split(",") if s.strip())
    bad = [s for s in sections if s not in SECTIONS]
    if bad:
        ap.error(f"unknown section(s) {', '.join(bad)}; choose from {', '.join(SECTIONS)}")
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    res = run(mode, sections, log=lambda m: print(m, file=sys.stderr, flush=True))
    from bench.report import render

    md = render(res)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stem = args.name or res["date"]
    (out / f"{stem}.json").write_text(json.dumps(res, indent=1) + "\n")
    (out / f"{stem}.md").write_text(md)
    print(md)
    print(f"[bench] wrote {out / (stem + '.json')} and {out / (stem + '.md')}", file=sys.stderr)
    return 0
