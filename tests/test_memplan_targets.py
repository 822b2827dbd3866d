"""A plan holds what its target's kernels use (per-target workspaces; no unread gradient slots).

* Kernel families declare their workspaces per target (``KernelSpec.target_workspace_fns``); a
  ``target=cuda`` plan holds only what the CUDA kernels declare (the fp32 accumulator of an fp16
  conv weight gradient), none of the CPU kernels' im2col columns, padded copies, fp32 casts and
  pooling scratch, while a ``target=cpu`` plan still holds them. The ``ws_*`` DTensors of either
  plan are exactly those its target's rules ask for, node by node.
* A cuda plan with convolutions, pooling and fused AMP trains on the CUDA emulator as on the CPU
  (the launchers get ``None`` for the CPU-only workspaces).
* The element-wise activations (tanh, silu, ...) recompute f'(x) from their input: their backward
  node reads (dY, X), so their output needs no gradient slot of its own.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import tr_mlir
from tr_mlir.blueprint import bn, conv, dropout, elu, fc, flatten, maxpool, relu, seq, silu, tanh_act
from tr_mlir.compile import compile as compile_model
from tr_mlir.dialects.memplan import WORKSPACE_PREFIX, GraphId
from tr_mlir.lowering.executable import DTYPES, find_program, graph_params
from tr_mlir.lowering.cpu import CUDA, KERNELS, lookup, register
from tr_mlir.lowering.operands import operands_for
from tr_mlir.zoo import MODELS

CPU_ONLY = {"ws_col", "ws_xbuf", "ws_ybuf", "ws_tmp", "ws_eq", "ws_acc"}
"""The CPU kernels' scratch: im2col columns and padded copies, fp32 casts of fp16 operands, the
compiled convs' per-thread scratch, pooling comparisons and accumulators."""


def vgg_like():
    """Conv + BN + ReLU stages (cbr when fused), max pools, the classifier with dropout."""
    return seq(conv(8, 3, 1, 1), bn(), relu(), conv(8, 3, 1, 1), bn(), relu(), maxpool(2, 2, 0),
               conv(16, 3, 1, 1), bn(), relu(), maxpool(3, 2, 1), flatten(), fc(32, True), relu(), dropout(0.5),
               fc(10, True))


def _compile(model, shape, target, **kw):
    return compile_model(model, shape, num_classes=10, batch_size=8, train_size=40, val_size=20, target=target,
                         **kw)


def _workspaces(module) -> dict[str, int]:
    """ws_* DTensor name -> elements in the base plan."""
    _, program = find_program(module)
    return {t.name: int(np.prod(t.shape)) for t in program.plans()[0].tensors() if t.name.startswith(WORKSPACE_PREFIX)}


def _asked(module, target: str) -> set[str]:
    """The ws_* names the target's kernel rules ask for, over every node of both graphs (base plan)."""
    _, program = find_program(module)
    tensors = program.plans()[0].by_id()
    out = set()
    for graph in program.graphs():
        table = graph_params(graph)
        for gid in GraphId:
            for node in graph.nodes(gid):
                spec = lookup(node.op)
                if not spec.workspaces:
                    continue
                params = table[node.param] if node.param >= 0 else {}
                named, _ = operands_for(node.op).named(node.inputs, node.outputs, params, node.op)
                infos = {a: (tensors[i].shape, DTYPES[tensors[i].dtype]) for a, i in named.items()
                         if a in spec.arrays and a not in spec.workspaces}
                out |= {WORKSPACE_PREFIX + a for a in spec.workspace_shapes(infos, target=target, **params)}
    return out


MODELS_WITH_SCRATCH = [
    ("resnet8_cifar fused amp", MODELS["resnet8_cifar"].blueprint(10), (32, 32, 3), {"amp": True, "fuse": True}),
    ("vgg-like fused amp", vgg_like(), (16, 16, 3), {"amp": True, "fuse": True}),
    ("vgg-like fp32", vgg_like(), (16, 16, 3), {}),
    ("lenet5", MODELS["lenet5"].blueprint(10), (32, 32, 1), {}),
]


@pytest.mark.parametrize("label,model,shape,kw", MODELS_WITH_SCRATCH, ids=[m[0] for m in MODELS_WITH_SCRATCH])
def test_a_cuda_plan_holds_no_cpu_only_workspace_and_a_cpu_plan_still_does(label, model, shape, kw):
    cpu, cuda = _compile(model, shape, "cpu", **kw), _compile(model, shape, "cuda", **kw)
    ws_cpu, ws_cuda = _workspaces(cpu), _workspaces(cuda)
    assert set(ws_cpu) & CPU_ONLY, label
    assert not set(ws_cuda) & CPU_ONLY, label
    # exactly what each target's rules ask for
    assert set(ws_cpu) == _asked(cpu, "cpu")
    assert set(ws_cuda) == _asked(cuda, CUDA)
    if kw.get("amp"):  # the fp32 accumulator of the fp16 conv weight gradients: the largest conv weight
        _, program = find_program(cuda)
        weights = [int(np.prod(t.shape)) for t in program.plans()[0].tensors() if t.name.endswith("conv_amp_g_fp16")]
        assert ws_cuda == {"ws_wbuf": max(weights)}
    else:
        assert ws_cuda == {}
    assert find_program(cuda)[1].plans()[0].size < find_program(cpu)[1].plans()[0].size


def test_vgg16_bn_fused_amp_on_cuda_plans_only_the_largest_weight_gradient_accumulator():
    # the issue's case: at batch 32 the CPU kernels' workspaces are 1.54 GB (three 411 MB fp32 casts
    # of the first FC's operands among them); the CUDA kernels need 512 x 3 x 3 x 512 fp32 elements
    spec = MODELS["vgg16_bn"]
    module = compile_model(spec.blueprint(1000), spec.input_shape, num_classes=1000, batch_size=32, train_size=1000,
                           val_size=500, amp=True, fuse=True, target="cuda")
    assert _workspaces(module) == {"ws_wbuf": 512 * 3 * 3 * 512}


def test_every_kernel_with_cpu_workspaces_declares_its_cuda_rule():
    undeclared = sorted(n for n, s in KERNELS.items()
                        if s.workspace_fn is not None and CUDA not in s.target_workspace_fns)
    assert undeclared == []


def test_a_workspace_rule_for_an_unknown_target_is_refused():
    spec = KERNELS["conv_fwd"]
    with pytest.raises(ValueError, match="unknown target 'tpu'"):
        spec.workspace_shapes({}, target="tpu")
    with pytest.raises(ValueError, match=r"workspace rules for unknown targets \['tpu'\]"):
        register(replace(spec, name="conv_fwd_tpu_probe", target_workspace_fns={"tpu": None}))


def test_a_cuda_plan_with_pooling_and_fused_amp_trains_on_the_emulator_as_on_the_cpu():
    from tr_mlir.lowering.cuda import emulator as emu

    if emu.host_compiler() is None:
        pytest.skip("no host C++ compiler for the kernel emulator")
    from tr_mlir.lowering.cuda.backend import CudaBackend

    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((16, 8, 8, 3)).astype(np.float32), rng.integers(0, 10, 16)
    model = seq(conv(8, 3, 1, 1), bn(), relu(), maxpool(3, 2, 1), conv(16, 3, 1, 1), bn(), relu(), maxpool(2, 2, 0),
                flatten(), fc(10, True))
    out = {}
    for device in ("cpu", CudaBackend(emu.EmulatedDevice())):
        task = tr_mlir.Task(model, (8, 8, 3), 10, batch_size=8, amp=True, fuse=True, device=device, seed=3)
        task.compile(16, 16)
        out[task.device] = ([task.train_step(x[:8], y[:8]), task.train_step(x[8:], y[8:])], dict(task.parameters()))
    assert out["gpu"][0] == pytest.approx(out["cpu"][0], rel=3e-3, abs=3e-3)
    for name, p in out["cpu"][1].items():
        np.testing.assert_allclose(out["gpu"][1][name], p, rtol=3e-3, atol=3e-3, err_msg=name)


ACTIVATION_NETS = [
    ("lenet5", MODELS["lenet5"].blueprint(10), (32, 32, 1)),
    ("silu elu", seq(conv(8, 3, 1, 1), silu(), conv(8, 3, 1, 1), elu(), flatten(), fc(16, True), tanh_act(),
                     fc(10, True)), (8, 8, 1)),
]


@pytest.mark.parametrize("label,model,shape", ACTIVATION_NETS, ids=[m[0] for m in ACTIVATION_NETS])
@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_activations_read_their_input_not_their_output_and_keep_no_gradient_slot(label, model, shape, target):
    tensors = find_program(_compile(model, shape, target))[1].plans()[0].tensors()
    assert not [t.name for t in tensors if t.name.endswith("_output_grad")], label
    _, program = find_program(_compile(model, shape, target, reuse=False))  # ids without live-range splits
    names = {t.id: t.name for t in program.plans()[0].tensors()}
    assert not [n for n in names.values() if n.endswith("_output_grad")], label
    deep = next(g for g in program.graphs() if g.graph_name == "train").nodes(GraphId.DEEP_FWD_BWD)
    for kind in ("TANH", "SILU", "ELU"):
        fwd = [n for n in deep if n.op.startswith(f"{kind}_") and n.op.endswith("_FWD")]
        bwd = [n for n in deep if n.op.startswith(f"{kind}_") and n.op.endswith("_BWD")][::-1]
        assert len(fwd) == len(bwd)
        for f, b in zip(fwd, bwd):
            (x,), (y,) = f.inputs, f.outputs
            # dY is written over Y by the consumer (no slot of its own); dX over X, read before
            assert (b.inputs, b.outputs) == ((y, x), (x,)), (names[y], names[x])
