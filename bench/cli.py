"""The benchmark driver behind ``python -m bench`` (module doc of :mod:`bench.__main__`).

The results JSON (``schema_version`` 1) has the top-level keys :data:`RESULT_KEYS`: ``mode``,
``date``, ``machine`` (the git commit and modified files, CPU, cores, memory, versions, load
averages before and after, ``quiet``: the run's steal time and other processes' CPU time,
:func:`bench.cpu_time.quietness`),
``openblas_env_unset``, ``duration_s``, and one key per section run: ``compile`` (section 1,
:mod:`bench.compile_time`), ``throughput`` (2, :mod:`bench.throughput`), ``memory`` (3,
:mod:`bench.memory`), ``gpu`` (4, :mod:`bench.gpu`). bench/README.md documents every field.
Section 3 also writes one plot per model next to the JSON (``<stem>-memory-<model>.png``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
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
    memory_models: tuple[str, ...] = ()  # section 3's plan side (bench.memory.MODELS)
    torch_peak_models: tuple[str, ...] = ()  # section 3: PyTorch's peak in a fresh process
    tr_peak_models: tuple[str, ...] = ()  # section 3: tr-mlir's own peak RSS in a fresh process
    memory_runs: dict[str, int] = field(default_factory=dict)  # section 3: processes per measurement
    peak_n: int = 2048
    also_threads: tuple[int, ...] = ()  # section 2 repeated on these thread counts


def _modes() -> dict[str, Mode]:
    from bench.memory import MODELS as MEMORY_MODELS
    from bench.models import THROUGHPUT_MODELS, ZOO_MODELS

    tp = tuple(THROUGHPUT_MODELS)
    small = ("mlp", "lenet5", "resnet18_cifar")  # section 3's fresh-process peaks: the models of its table
    mem = tuple(MEMORY_MODELS)
    return {
        "smoke": Mode(("mlp",), ("mlp",), ("mlp",), warmup=1, rounds=1, steps={"mlp": 2}, peak_n=256,
                      memory_models=("mlp",), torch_peak_models=("mlp",), tr_peak_models=("mlp",)),
        "quick": Mode(ZOO_MODELS, ("mlp", "lenet5", "resnet18", "resnet50"), tp, warmup=2, rounds=5,
                      # the small nets' steps take 2-10 ms: 30 a side per pair (0.1-0.3 s), so one
                      # hiccup of the host does not move a pair's median (6 gave LeNet-5 1.6-2.4x)
                      steps={"mlp": 30, "lenet5": 30, "resnet18_cifar": 2, "resnet18_cifar_unfused": 2, "resnet50": 1,
                             "mobilenet_v2": 10}, memory_models=mem,
                      torch_peak_models=("mlp", "lenet5", "resnet18_cifar", "resnet18", "resnet50"),
                      tr_peak_models=small, memory_runs={"resnet18_cifar": 3}, also_threads=(1,)),
        "full": Mode(ZOO_MODELS, ZOO_MODELS, tp, warmup=3, rounds=5,
                     steps={"mlp": 50, "lenet5": 50, "resnet18_cifar": 4, "resnet18_cifar_unfused": 4, "resnet50": 2,
                            "mobilenet_v2": 20}, memory_models=mem,
                     torch_peak_models=mem, tr_peak_models=mem, memory_runs={m: 3 for m in small},
                     also_threads=(1,)),
    }


def git_state() -> dict[str, Any]:
    """The checkout measured: ``commit`` (HEAD) and ``modified`` (tracked files changed in the working
    tree, which others may be editing); ``None`` values outside a git checkout."""
    import subprocess

    def git(*args: str) -> str | None:
        try:
            p = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return p.stdout if p.returncode == 0 else None

    head, status = git("rev-parse", "HEAD"), git("status", "--porcelain", "--untracked-files=no")
    return {"commit": head.strip() if head else None,
            "modified": sorted(line[3:] for line in status.splitlines()) if status is not None else None}


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
    return {"git": git_state(), "cpu": cpu, "cores": os.cpu_count(), "memory_gib": mem,
            "python": platform.python_version(),
            "numpy": np.__version__, "torch": torch.__version__, "xdsl": str(getattr(xdsl, "__version__", "?")),
            "load_before": list(os.getloadavg())}


def run(mode_name: str, sections: tuple[str, ...], *, log=print) -> dict[str, Any]:
    """Run ``sections`` in mode ``mode_name``; returns the results dict (module doc)."""
    from bench import compile_time, gpu, memory, throughput

    from bench.cpu_time import quietness, sample

    mode = _modes()[mode_name]
    t_start = time.perf_counter()
    s_start = sample()
    res: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "mode": mode_name,
                           "date": datetime.date.today().isoformat(), "machine": machine_info(),
                           "openblas_env_unset": [v for v in os.environ.get("TR_MLIR_BENCH_UNSET", "").split(",") if v]}
    if "compile" in sections:
        log(f"[bench] section 1: compile time ({len(mode.compile_models)} models x 2 variants)")
        res["compile"] = compile_time.run(list(mode.compile_models), list(mode.round_trip_models))
    if "throughput" in sections:
        log(f"[bench] section 2: CPU throughput ({', '.join(mode.throughput_models)})")
        res["throughput"] = throughput.run(list(mode.throughput_models), warmup=mode.warmup, rounds=mode.rounds,
                                           steps=mode.steps, peak_n=mode.peak_n, also_threads=mode.also_threads)
    if "memory" in sections:
        log(f"[bench] section 3: memory ({len(mode.memory_models)} models x {len(memory.VARIANTS)} variants)")
        m0 = time.perf_counter()
        res["memory"] = memory.run(mode.memory_models, mode.torch_peak_models, mode.tr_peak_models,
                                   runs=mode.memory_runs, log=log)
        res["memory"]["duration_s"] = time.perf_counter() - m0
    if "gpu" in sections:
        res["gpu"] = gpu.run(str(REPO))
    res["machine"]["load_after"] = list(os.getloadavg())
    res["machine"]["quiet"] = quietness(s_start, sample())
    res["duration_s"] = time.perf_counter() - t_start
    return res


_NUMBERS = re.compile(r"\[(?:\s*-?[0-9][0-9.eE+-]*\s*,)*\s*-?[0-9][0-9.eE+-]*\s*\]")


def dumps(res: dict[str, Any]) -> str:
    """The results as JSON, indented, with every list of plain numbers on one line (the curves)."""
    return _NUMBERS.sub(lambda m: "[" + ", ".join(x.strip() for x in m.group(0)[1:-1].split(",")) + "]",
                        json.dumps(res, indent=1))


def main(argv: list[str] | None = None) -> int:
    """The command line (module doc of :mod:`bench.__main__`). Returns the exit status."""
    ap = argparse.ArgumentParser(prog="python -m bench", description="tr-mlir benchmarks: compile time, CPU "
                                 "training throughput vs PyTorch, memory (see bench/README.md).",
                                 allow_abbrev=False)  # the re-exec (bench/__main__.py) sees --keep-blas-env whole
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_true", help="the quick mode: about 6 minutes on 2 cores")
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

    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stem = args.name or res["date"]
    if "memory" in res:
        from bench.memory import write_plots

        write_plots(res["memory"], out, stem)
    md = render(res)
    (out / f"{stem}.json").write_text(dumps(res) + "\n")
    (out / f"{stem}.md").write_text(md)
    print(md)
    print(f"[bench] wrote {out / (stem + '.json')} and {out / (stem + '.md')}", file=sys.stderr)
    return 0
