"""The markdown tables of a results dict (``bench/results/<date>.md``)."""

from __future__ import annotations

from typing import Any

from bench.cpu_time import describe

MIB = 2 ** 20


def _t(rows: list[list[str]], head: list[str]) -> str:
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def _mib(b: Any) -> str:
    return "-" if b is None else f"{b / MIB:,.1f}"


def _s(x: float) -> str:
    return f"{x:.3f}" if x < 10 else f"{x:.1f}"


def compile_tables(c: dict[str, Any]) -> str:
    rows = []
    for r in c["rows"]:
        rt = r.get("round_trip")
        top = sorted(r["passes"], key=lambda p: -p["s"])[:3]
        rows.append([r["model"], r["variant"], str(r["arch_ops"]), _s(r["total_s"]), _s(r["verify_s"]),
                     ", ".join(f"{p['pass']} {p['s']:.2f}" for p in top),
                     "-" if rt is None else f"{rt['print_s']:.2f} / {rt['parse_s']:.2f} / {rt['verify_s']:.2f}",
                     "-" if rt is None else f"{rt['chars'] / 1e6:.2f}" + ("" if rt["round_trip_ok"] else " (MISMATCH)")])
    parts = [_t(rows, ["model", "variant", "arch ops", "total s", "verify s", "slowest passes (s)",
                       "round trip print / parse / verify s", "text MB"])]
    for variant in ("fused_amp", "unfused_fp32"):
        vr = [r for r in c["rows"] if r["variant"] == variant]
        if not vr:
            continue
        names = [p["pass"] for p in vr[0]["passes"]]
        prow = [[n] + [f"{next(p['s'] for p in r['passes'] if p['pass'] == n):.3f}" for r in vr] for n in names]
        prow.append(["emit"] + [f"{r['emit_s']:.3f}" for r in vr])
        prow.append(["verify (all)"] + [f"{r['verify_s']:.3f}" for r in vr])
        prow.append(["**total**"] + [f"**{r['total_s']:.3f}**" for r in vr])
        parts.append(f"Per pass, {variant} (s):\n\n" + _t(prow, ["pass"] + [r["model"] for r in vr]))
    if c.get("depth_growth"):
        parts.append("Growth with depth:\n\n" + _t(
            [[d["model"], d["variant"], str(d["arch_ops"]), _s(d["total_s"]), f"{d['ms_per_op']:.1f}",
              f"{d['vs_resnet50']:.2f}x"] for d in c["depth_growth"]],
            ["model", "variant", "arch ops", "total s", "ms per arch op", "vs ResNet-50"]))
    return "\n\n".join(parts)


def throughput_table(t: dict[str, Any]) -> str:
    parts = [_throughput_one(t)]
    for th, sub in (t.get("by_threads") or {}).items():
        parts.append(f"The same on {th} thread(s):\n\n" + _throughput_one(sub))
    if t.get("scaling"):
        parts.append(_scaling_table(t["scaling"]) + _host_line(t.get("host_scaling") or []))
    return "\n\n".join(parts)


def _scaling_table(scaling: list[dict[str, Any]]) -> str:
    """Each side's step speed-up between thread counts (:func:`bench.throughput.thread_scaling`)."""
    rows = [[s["model"], f"{s['from_threads']} -> {s['threads']}", f"**{s['tr_mlir']:.2f}x**", f"{s['torch']:.2f}x",
             "yes" if s["tr_mlir"] >= s["torch"] else "no"] for s in scaling]
    return ("Thread scaling (each side's median step on the first thread count / on the second):\n\n"
            + _t(rows, ["model", "threads", "tr-mlir", "PyTorch", "tr-mlir scales at least as well"]))


def _host_line(host: list[dict[str, Any]]) -> str:
    """The host's own scaling under the scaling table (:func:`bench.throughput.host_scaling`)."""
    return "".join(
        f"\n\nThe host itself, {h['from_threads']} -> {h['threads']} threads: a 2048^3 np.matmul **{h['gemm']:.2f}x**"
        + ("; a split np.add streaming three operands (a reference for a step's memory-bound passes) "
           + ", ".join(f"**{r:.2f}x** over {_operand_mib(n)} operands" for n, r in h["stream"].items())
           if h.get("stream") else "") + "."
        for h in host)


def _operand_mib(elements: str) -> str:
    return f"{int(elements) * 4 / 2 ** 20:g} MiB"


def _pairs(m: dict[str, Any]) -> str:
    """The median and range of a model's per-pair ratios (``round_ratios``; "-" in older results)."""
    r = m.get("round_ratios")
    if not r:
        return "-"
    return f"{m['median_round_ratio']:.2f} [{min(r):.2f}, {max(r):.2f}]"


def _throughput_one(t: dict[str, Any]) -> str:
    peak = t["gemm_peak"]
    rows = [[m["model"], str(m["batch"]), f"{m['tr_mlir_images_per_s']:,.0f}", f"{m['torch_images_per_s']:,.0f}",
             f"**{m['ratio']:.2f}**", _pairs(m), f"{m['best_ratio']:.2f}", f"{m['step_flops'] / 1e9:.2f}",
             f"{m['tr_mlir_step_s'] * 1e3:.1f} / {m['torch_step_s'] * 1e3:.1f}",
             f"{m['tr_mlir_best_step_s'] * 1e3:.1f} / {m['torch_best_step_s'] * 1e3:.1f}",
             f"{100 * m['tr_mlir_peak_fraction']:.0f}%", f"{100 * m['torch_peak_fraction']:.0f}%",
             str(m["timed_steps"]), describe(m.get("quiet"))] for m in t["models"]]
    blas = ", ".join(f"{b.get('prefix')} {b.get('version') or ''} {b.get('architecture') or ''}".strip()
                     for b in t["blas"])
    return (_t(rows, ["model", "batch", "tr-mlir img/s", "PyTorch img/s", "ratio (median)",
                      "ratio per pair: median [min, max]", "ratio (best step)",
                      "GFLOP/step", "median step ms (tr-mlir / torch)", "best step ms", "tr-mlir % of peak",
                      "torch % of peak", "timed steps", "steal / others"])
            + f"\n\n{t['threads']} thread(s). fp32 GEMM peak ({peak['n']}^3, best before/after the models): "
              f"np.matmul {peak['numpy_flops'] / 1e9:.1f} GFLOP/s, torch.mm {peak['torch_flops'] / 1e9:.1f} GFLOP/s. "
              f"Thread pools: {blas}."
            + _breakdown_table(t["models"]))


BREAKDOWN_FAMILIES = ("conv", "batch norm", "activation", "fc / add / reshape", "pooling", "optimizer")
"""The kernel families given a column of their own in the breakdown table (the rest: "other")."""


def _algo_mix(mix: dict[str, int]) -> str:
    return ", ".join(f"{a} {n}" for a, n in sorted(mix.items(), key=lambda kv: -kv[1])) or "-"


def _breakdown_table(models: list[dict[str, Any]]) -> str:
    """Per model: the share of tr-mlir's kernel time per family and the conv algorithm mix
    (``breakdown`` of :func:`bench.throughput.measure`; absent in older results)."""
    rows = []
    for m in models:
        b = m.get("breakdown")
        if not b:
            continue
        fam = b["families"]
        other = 1.0 - sum(fam.get(f, 0.0) for f in BREAKDOWN_FAMILIES)
        algos = b.get("conv_algorithms") or {}
        rows.append([m["model"], *(f"{100 * fam.get(f, 0.0):.1f}%" for f in BREAKDOWN_FAMILIES),
                     f"{100 * max(other, 0.0):.1f}%",
                     *(_algo_mix(algos.get(d, {})) for d in ("fwd", "dgrad", "wgrad"))])
    if not rows:
        return ""
    return ("\n\nWhere tr-mlir's step goes (each kernel launch of one step timed on its own; shares of their sum) "
            "and the convolution algorithms per direction (launch counts):\n\n"
            + _t(rows, ["model", *BREAKDOWN_FAMILIES, "other", "conv fwd", "conv dgrad", "conv wgrad"]))


def _x(r: Any) -> str:
    return "-" if r is None else f"{r:.2f}"


def _runs(d: dict[str, Any]) -> str:
    """The RSS delta in MiB, with every run's where there were several (the median first)."""
    cell = _mib(d.get("rss_peak_delta_bytes"))
    runs = d.get("rss_peak_delta_runs") or []
    return cell + (f" ({', '.join(_mib(b) for b in runs)})" if len(runs) > 1 else "")


def _peak_cell(p: dict[str, Any]) -> str:
    where = p["where"] + ("" if p["in_train_base_step"] else " (not in the train_base step)")
    return where + ": " + ", ".join(f"{t['name']} {t['bytes'] / MIB:,.1f}" for t in p["largest"])


def memory_table(m: dict[str, Any]) -> str:
    """Section 3 (bench/README.md): the plan side of every row, the fresh-process measurements of the
    fp32 rows against PyTorch, the issue's targets and the plots."""
    rows = [[r["model"], r["variant"], str(r["batch"]), _mib(r["seed_arena_bytes"]), _mib(r["arena_bytes"]),
             _mib(r["persistent_bytes"]), _mib(r["lower_bound_bytes"]), _mib(r["seed_lower_bound_bytes"]),
             f"{r['seed_arena_over_bound']:.2f}", f"**{r['arena_over_bound']:.2f}**", _peak_cell(r["peak"])]
            for r in m["rows"]]
    parts = [_t(rows, ["model", "variant", "batch", "seed arena MiB", "reuse arena MiB", "persistent MiB",
                       "liveness bound MiB", "bound without splitting MiB", "seed arena / bound",
                       "reuse arena / bound", "peak node: largest live DTensors (MiB)"])]
    mrows = []
    for r in m["rows"]:
        if "vs_torch" not in r:
            continue
        tp = (m.get("torch") or {}).get(r["model"]) or {}
        ours = r.get("tr_mlir_rss") or {}
        v = r["vs_torch"]
        steps = (f"{_mib(ours.get('steps_peak_delta_bytes'))} / {_mib(tp.get('steps_peak_delta_bytes'))} = "
                 f"{_x(v.get('steps_rss_delta'))}")
        mrows.append([r["model"], r["variant"], str(r["batch"]), _runs(ours), _runs(tp), f"**{_x(v['rss_delta'])}**",
                      steps, _mib(r["arena_bytes"]), _mib(tp.get("profiler_peak_bytes")),
                      f"**{_x(v['arena_vs_profiler'])}**",
                      _x(v["seed_arena_vs_profiler"])])
    if mrows:
        parts.append("Measured in fresh processes (fp32, 2 threads; tr-mlir: the reuse layout; RSS: the median "
                     "run, every run in parentheses where there were several):\n\n" + _t(
            mrows, ["model", "variant", "batch", "tr-mlir RSS delta MiB", "torch RSS delta MiB",
                    "RSS tr-mlir / torch", "steps alone: tr-mlir / torch MiB = ratio", "reuse arena MiB",
                    "torch profiler peak MiB", "reuse arena / profiler", "seed arena / profiler"]))
    notes = []
    for name, tp in (m.get("torch") or {}).items():
        if "error" in tp or "profiler_error" in tp:
            notes.append(f"- {name}, PyTorch: {tp.get('error') or tp.get('profiler_error')}")
    for r in m["rows"]:
        if "error" in (r.get("tr_mlir_rss") or {}):
            notes.append(f"- {r['model']} {r['variant']}, tr-mlir: {r['tr_mlir_rss']['error']}")
    if notes:
        parts.append("\n".join(notes))
    if m.get("targets"):
        parts.append("The issue's targets:\n\n" + "\n".join(
            f"- {t['model']} batch {t['batch']} {t['variant']}: {t['ratio']} {_x(t['value'])} <= {t['limit']}: "
            + ("not measured" if t["met"] is None else "**met**" if t["met"] else "**not met**")
            for t in m["targets"]))
    for model, name in (m.get("plots") or {}).items():
        parts.append(f"![{model}: memory over one training step]({name})")
    return "\n\n".join(parts)


def _gpu_ms(side: dict[str, Any], key: str = "step_ms") -> str:
    if key in side:
        return f"{side[key]:.2f}"
    return "error" if "error" in side else "skipped" if "skipped" in side else "-"


def _gpu_ips(side: dict[str, Any], key: str = "img_per_s") -> str:
    return f"{side[key]:,.0f}" if key in side else "-"


def _gpu_ratio(r: float | None) -> str:
    return "-" if r is None else f"**{r:.2f}**"


def _gpu_resnet8(t: dict[str, Any]) -> str | None:
    rows = []
    for key in ("fp32", "amp"):
        ours, ref = t.get(f"ours_{key}") or {}, t.get(f"torch_eager_{key}") or {}
        if not ours:
            continue
        rows.append([t.get("model", "?"), str(t.get("batch", "?")), key, f"{ours['graph_replay_ms']:.2f}",
                     f"{ours['train_step_ms']:.2f}", f"{ref['step_ms']:.2f}" if "step_ms" in ref else "-",
                     f"{ref['step_ms'] / ours['train_step_ms']:.2f}" if "step_ms" in ref else "-"])
    if not rows:
        return None
    return _t(rows, ["model", "batch", "precision", "CUDA graphs ms", "Task.train_step ms", "torch eager ms",
                     "ratio (torch / ours)"])


def _gpu_comparisons(t: dict[str, Any]) -> tuple[str, list[str]]:
    rows, notes = [], []
    for c in t.get("comparisons") or []:
        tr, ea, co = c.get("tr_mlir") or {}, c.get("torch_eager") or {}, c.get("torch_compile") or {}
        rows.append([c["model"], str(c["batch"]), c["precision"] + (" fused" if c.get("fuse") else ""),
                     _gpu_ms(tr, "graph_replay_ms"), _gpu_ms(tr, "train_step_ms"), _gpu_ms(ea), _gpu_ms(co),
                     _gpu_ips(tr), _gpu_ips(ea), _gpu_ips(co), _gpu_ratio(c.get("ratio_vs_eager")),
                     _gpu_ratio(c.get("ratio_vs_compile")),
                     f"{co['first_step_s']:.1f}" if "first_step_s" in co else "-",
                     "/".join(str(s.get("timed_steps", "-")) for s in (tr, ea, co))])
        where = f"{c['model']} batch {c['batch']}"
        for side, d in (("tr-mlir", tr), ("torch eager", ea), ("torch.compile", co)):
            if "error" in d:
                notes.append(f"{where}, {side}: error: {d['error']}")
            elif "skipped" in d:
                notes.append(f"{where}, {side}: skipped: {d['skipped']}")
    head = ["model", "batch", "precision", "tr-mlir graphs ms", "tr-mlir Task.train_step ms", "torch eager ms",
            "torch.compile ms", "tr-mlir img/s", "eager img/s", "compile img/s", "tr-mlir / eager",
            "tr-mlir / compile", "torch.compile first step s", "timed steps (tr-mlir/eager/compile)"]
    return (_t(rows, head) if rows else ""), notes


def gpu_table(g: dict[str, Any]) -> str:
    """Section 4: the smoke script's timing -- resnet8_cifar (CUDA-graph replay vs torch eager)
    and the comparisons (MLP, ResNet-50 AMP: graph replay vs torch eager and torch.compile, the
    ratios being tr-mlir images/s over torch images/s from the graph-replay time) -- with every
    error and skip listed, or why the section was skipped."""
    if g.get("skipped"):
        return f"Skipped: {g['reason']}."
    t = g["timing"]
    parts = [f"Device: {g['device']}."]
    if g.get("ok") is False:
        parts.append(f"**The smoke script reported a failure** (exit {g.get('exit_code')})"
                     + (f": {g['error']}" if g.get("error") else "") + "; the failures are listed below.")
    r8 = _gpu_resnet8(t)
    if r8:
        parts.append("resnet8_cifar, CUDA-graph replay vs PyTorch eager (channels-last):\n\n" + r8)
    if t.get("resnet8_error"):
        parts.append("resnet8_cifar: error: " + t["resnet8_error"].strip().splitlines()[-1])
    table, notes = _gpu_comparisons(t)
    if table:
        st = t.get("torch_settings") or {}
        comp = t.get("compile") or {}
        parts.append(
            "Per training step, tr-mlir CUDA-graph replay vs PyTorch eager and `torch.compile` (median ms of the "
            "timed steps; img/s from the median; ratios = tr-mlir img/s (graph replay) / torch img/s, above 1 "
            "tr-mlir is faster):\n\n" + table
            + f"\n\ntorch {t.get('torch_version', '?')}, {st.get('memory_format', '?')}, cudnn.benchmark "
              f"{st.get('cudnn_benchmark', '?')}, TF32 matmul {st.get('allow_tf32_matmul', '?')} / cuDNN "
              f"{st.get('allow_tf32_cudnn', '?')}; torch.compile "
            + (f"backend {comp.get('backend')}, mode {comp.get('mode')}, budget "
               + ", ".join(f"{k} {v:.0f} s" for k, v in (comp.get("budget_s") or {}).items())
               if comp.get("enabled") else "not run (--no-compile)")
            + f"; {t.get('warmup', '?')} warm-up steps, up to {t.get('steps', '?')} timed steps.")
    if notes:
        parts.append("\n".join(f"- {n}" for n in notes))
    return "\n\n".join(parts)


def _git(g: dict[str, Any] | None) -> str:
    if not g or not g.get("commit"):
        return ""
    mod = g.get("modified") or []
    return f" Commit {g['commit'][:7]}" + (f" with {len(mod)} modified tracked files ({', '.join(mod)})."
                                          if mod else ", clean.")


def render(res: dict[str, Any]) -> str:
    """The whole markdown report of one run."""
    mach = res["machine"]
    parts = [f"# tr-mlir benchmark, {res['date']} ({res['mode']} mode)",
             f"Machine: {mach['cpu']}, {mach['cores']} cores, {mach['memory_gib']:.0f} GiB; Python {mach['python']}, "
             f"NumPy {mach['numpy']}, torch {mach['torch']}, xDSL {mach['xdsl']}. Load average (1 min) "
             f"before / after: {mach['load_before'][0]:.2f} / {mach['load_after'][0]:.2f}; "
             f"over the run: {describe(mach.get('quiet'))}. "
             f"OpenBLAS env unset for this run: {', '.join(res['openblas_env_unset']) or 'none was set'}. "
             f"Wall time {res['duration_s']:.0f} s."
             + _git(mach.get("git"))]
    if "compile" in res:
        parts.append("## 1. Compile time (in process)\n\n" + compile_tables(res["compile"]))
    if "throughput" in res:
        parts.append("## 2. CPU training throughput, tr-mlir (NumPy) vs PyTorch eager\n\n"
                     + throughput_table(res["throughput"]))
    if "memory" in res:
        parts.append("## 3. Memory of a training step\n\n" + memory_table(res["memory"]))
    if "gpu" in res:
        parts.append("## 4. GPU\n\n" + gpu_table(res["gpu"]))
    return "\n\n".join(parts) + "\n"
