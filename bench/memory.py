"""Section 3: memory of a training step, tr-mlir's plan against a liveness bound and PyTorch.

From a compiled module (no arena is allocated) for the ``train_base`` variant:

* ``arena_bytes``: the plan's arena (``memplan.plan`` size: every DTensor has its own slot);
* ``state_bytes``: parameters (``W_*``, and the fp16 working copies ``A_*`` in AMP), BN running
  statistics (``B_*``), gradients (``G_*``, with AMP's fp16 ``G16`` copies) and optimizer state
  (momentum ``M_*``, Adam ``V_*``, LARS ``N_*``), with the parts in ``state_parts``;
* ``activation_bytes``: the features and their gradient slots (``F_*``) and the ReLU / pooling /
  dropout masks (``S_MASK``); ``workspace_bytes``: the temporaries (``T_*``: BN statistics, softmax
  probabilities, the conv im2col/cast workspaces); ``input_bytes``: the A/B input buffers (``I_*``);
* ``lower_bound_bytes``: a liveness lower bound for the same step. The step is the node sequence
  the runner replays for one mid-epoch training step (``ZERO_GRAD``, ``FIRST_LAYER_FWD_A``, the
  prefetch ``TRANSFER_B``, ``DEEP_FWD_BWD``, ``FIRST_LAYER_BWD_A``, ..., ``OPTIMIZER``; see
  :mod:`tr_mlir.lowering.runner`), each node's graph taken from the atlas. Every DTensor outside
  ``F_*``, ``S_MASK`` and ``T_*`` carries its value across steps and is live throughout; every other
  one is live from the first to the last node that names it (as an operand or inside a range
  operand). The bound is the persistent bytes plus the largest sum of live transient slots at
  one node; slot sizes are the plan's (256-byte aligned), so ``arena / bound`` measures only
  what sharing memory between tensors with disjoint lifetimes would save, for this graph as it is;
* ``arena_over_bound``: the ratio.

PyTorch (:func:`torch_peak`, fp32 only, in a fresh subprocess per model, 2 threads): the same
network (:func:`bench.models.torch_model`) and one training step (SGD with momentum, batch of the
spec), measured two ways:

* ``profiler_peak_bytes``: ``torch.profiler`` with ``profile_memory=True`` and its memory timeline
  (``prof._memory_profile().timeline``, the data behind ``export_memory_timeline``): the bytes held
  before the step (parameters, gradients, momentum, the batch) plus the running sum of every
  allocation and free of torch's CPU allocator during the step, at its maximum. Caveats: a private
  torch API; it sees torch tensors only (not oneDNN's or OpenMP's own scratch, not Python objects);
* ``rss_peak_delta_bytes``: the peak resident set size (``VmHWM`` of ``/proc/self/status``, reset
  through ``/proc/self/clear_refs`` just before the model is built, after a tiny warm-up net has
  loaded oneDNN and started the OpenMP threads) after two unprofiled steps, minus the resident
  size at that point (``getrusage``'s ``ru_maxrss`` cannot be used: a child inherits its parent's
  peak across ``fork``/``exec``). Caveats: includes everything the process touches (allocator
  caching and fragmentation, library scratch, the model's Python objects), counts whole pages;
  ``None`` where the peak cannot be reset.

The two bracket torch's real need; tr-mlir's ``arena_bytes`` (plus its host staging buffer, a
copy of the input buffers) is the whole of its memory for the step.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import numpy as np

from tr_mlir.dialects.memplan import GraphId, MemRegion

R = MemRegion
TRANSIENT = frozenset({R.F_FEATURE_FP32, R.F_GRAD_SLOT_FP32, R.F_FEATURE_FP16, R.F_GRAD_SLOT_FP16, R.S_MASK,
                       R.T_TEMP_FP32, R.T_TEMP_FP16, R.T_TEMP_INT32, R.T_TEMP_INT8})
"""Regions whose tensors are recomputed every step (live only between first and last use)."""

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


def step_sequence() -> tuple[GraphId, ...]:
    """GraphIds of one mid-epoch training step on input buffer A, in the runner's order."""
    from tr_mlir.lowering.runner import _after_deep

    return (GraphId.ZERO_GRAD, GraphId.FIRST_LAYER_FWD_A, GraphId.TRANSFER_B) + _after_deep("a", False)


def analyze(module) -> dict[str, Any]:
    """The plan-side numbers of the module doc for a compiled module (``train_base``)."""
    from tr_mlir.dialects.memplan import AtlasOp
    from tr_mlir.lowering.executable import find_program

    _, program = find_program(module)
    plans = {p.plan_name: p for p in program.plans()}
    base = plans[program.variants()[0].plan.root_reference.data]
    tensors = {t.id: t for t in base.tensors()}
    by_region: dict[MemRegion, list[int]] = {}
    for t in tensors.values():
        if t.slot:
            by_region.setdefault(t.region, []).append(t.id)

    def total(regions) -> int:
        return sum(tensors[i].slot for r in regions for i in by_region.get(r, ()))

    out: dict[str, Any] = {"arena_bytes": base.size, "dtensors": len(tensors)}
    parts = {k: total(v) for k, v in STATE_PARTS.items()}
    out["state_bytes"] = sum(parts.values())
    out["state_parts"] = parts
    for k, regions in OTHER_PARTS.items():
        out[k] = total(regions)

    atlas = program.ops_of(AtlasOp)[0]
    keys = atlas.keys()
    graphs = {g.graph_name: g for g in program.graphs()}
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    pos = 0
    for gid in step_sequence():
        slot = atlas.slot(0, gid)
        if slot < 0:
            continue
        graph_name = keys[slot][0]
        for node in graphs[graph_name].nodes(gid):
            ids = set(node.inputs) | set(node.outputs)
            for a, b in (*node.in_ranges, *node.out_ranges):
                for r in range(a, b + 1):
                    ids.update(by_region.get(MemRegion(r), ()))
            for i in ids:
                t = tensors.get(i)
                if t is None or not t.slot or t.region not in TRANSIENT:
                    continue
                first.setdefault(i, pos)
                last[i] = pos
            pos += 1
    persistent = sum(t.slot for t in tensors.values() if t.slot and t.region not in TRANSIENT)
    delta = np.zeros(pos + 1, np.int64)
    for i, f in first.items():
        delta[f] += tensors[i].slot
        delta[last[i] + 1] -= tensors[i].slot
    live = np.cumsum(delta[:-1]) if pos else np.zeros(1, np.int64)
    peak_at = int(np.argmax(live))
    out["step_nodes"] = pos
    out["persistent_bytes"] = persistent
    out["lower_bound_bytes"] = persistent + int(live[peak_at])
    out["lower_bound_at_node"] = peak_at
    out["arena_over_bound"] = base.size / out["lower_bound_bytes"]
    return out


# --------------------------------------------------------------------------------------
# PyTorch
# --------------------------------------------------------------------------------------

_CHILD = r'''
import json, os, sys
import numpy as np
import torch
import torch.nn.functional as F

torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "2")))
name, h, w, c, classes, batch = sys.argv[1], *map(int, sys.argv[2:7])

def status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return None

def reset_peak():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM (the peak RSS) to the current RSS
        return True
    except OSError:
        return False

# warm-up: load oneDNN kernels and start the OpenMP threads before the baseline
tiny = torch.nn.Sequential(torch.nn.Conv2d(c, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                           torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.LazyLinear(10))
t_opt = None
for _ in range(2):
    out = tiny(torch.randn(8, c, max(h, 4), max(w, 4)))
    if t_opt is None:
        t_opt = torch.optim.SGD(tiny.parameters(), lr=0.01, momentum=0.9)
    F.cross_entropy(out, torch.randint(0, 10, (8,))).backward()
    t_opt.step()
torch.mm(torch.randn(512, 512), torch.randn(512, 512))
del tiny, t_opt, out

from bench.models import flat_plan, torch_model_from_plan
from tr_mlir.zoo import MODELS
from bench.models import THROUGHPUT_MODELS
builder = MODELS[name].builder if name in MODELS else THROUGHPUT_MODELS[name].builder
blueprint = builder(classes)
x = torch.randn(batch, c, h, w)
y = torch.randint(0, classes, (batch,))
plan = flat_plan(blueprint, (h, w, c), classes)  # the compiler's Python objects stay out of the delta
import gc; gc.collect()
reset = reset_peak()
base = status("VmRSS")
torch.manual_seed(0)
net = torch_model_from_plan(plan)
opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)

def step():
    opt.zero_grad()
    loss = F.cross_entropy(net(x), y)
    loss.backward()
    opt.step()
    return loss.item()

step(); step()
peak_rss = status("VmHWM")
out = {"rss_peak_delta_bytes": peak_rss - base if reset else None, "rss_base_bytes": base,
       "param_bytes": sum(p.numel() * p.element_size() for p in net.parameters())}
try:
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True) as prof:
        step()
    from torch.profiler._memory_profiler import Action
    live = peak = 0
    for t, action, _key, size in sorted(prof._memory_profile().timeline, key=lambda e: e[0]):
        if action in (Action.PREEXISTING, Action.CREATE):
            live += size
        elif action == Action.DESTROY:
            live -= size
        peak = max(peak, live)
    out["profiler_peak_bytes"] = peak
except Exception as e:  # a private API: report, do not fail the benchmark
    out["profiler_error"] = f"{type(e).__name__}: {e}"
print("BENCH-RESULT " + json.dumps(out))
'''


def torch_peak(name: str, input_shape: tuple[int, int, int], num_classes: int, batch: int, *,
               threads: int = 2, timeout: float = 600.0) -> dict[str, Any]:
    """PyTorch's memory for one fp32 training step of ``name`` (a zoo or throughput model) at
    ``batch``, measured in a fresh subprocess (module doc). Returns the child's numbers, or
    ``{"error": ...}`` when it failed or timed out."""
    h, w, c = input_shape
    env = dict(os.environ, BENCH_THREADS=str(threads), PYTHONPATH=_repo_root())
    try:
        proc = subprocess.run([sys.executable, "-c", _CHILD, name, str(h), str(w), str(c), str(num_classes),
                               str(batch)], capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    for line in proc.stdout.splitlines():
        if line.startswith("BENCH-RESULT "):
            return json.loads(line[len("BENCH-RESULT "):])
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
    return {"error": f"exit {proc.returncode}: {tail[0]}"}


def _repo_root() -> str:
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    old = os.environ.get("PYTHONPATH")
    return here if not old else here + os.pathsep + old
