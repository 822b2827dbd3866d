"""The FC+ReLU GEMM epilogue: the kernels ``fc_relu_fwd`` / ``relu_fc_bwd`` (lowering/cpu/dense.py)
and the pass ``memplan-fuse-fc-relu`` that writes them.

* Bit identity: each fused kernel writes what the unfused pair writes (``fc_fwd`` then
  ``relu_fwd``; ``fc_bwd`` then ``relu_bwd_from_output``) on every path: the C jobs (one and two
  threads; the MLP's shapes take the column-split and concurrent-backward jobs), NumPy's GEMM
  (``TR_MLIR_C_GEMM=0``), no C compiler (``TR_MLIR_CC=0``) and AMP.
* Against PyTorch: ``relu(linear(x))`` forward and the input gradient through a ReLU into a linear.
* The pass: where it fuses, where it must not (the intermediate read elsewhere, the ReLU's mask
  form), the option that turns it off, and whole training steps bit-identical with and without it.

Layouts NHWC (FC inputs (N, 1, 1, F) or (N, H, W, C) flattened).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from threadpoolctl import threadpool_limits

from tr_mlir.lowering.cpu import KERNELS

F32, F16 = np.float32, np.float16
SHAPES = [(5, 24, 10), (200, 784, 1024), (200, 1024, 512), (200, 256, 10)]  # (N, F, O): tiny, the MLP's


def run(name: str, **arrays) -> None:
    spec = KERNELS[name]
    ws = {k: np.zeros(s, d) for k, (s, d) in spec.workspace_shapes(arrays).items()}
    spec.bind({**arrays, **ws}, {})()


def _operands(rng, n, f, o, dt, special: bool = True):
    """x (n, 1, 1, f), w (o, 1, 1, f), b (o,) fp32, dy (n, 1, 1, o); ``special``: special values
    (signed zeros, NaN, Inf, a subnormal) in x, w and dy, so the bit comparisons cover them."""
    x = rng.standard_normal((n, 1, 1, f)).astype(dt)
    w = (rng.standard_normal((o, 1, 1, f)) / np.sqrt(f)).astype(dt)
    dy = rng.standard_normal((n, 1, 1, o)).astype(dt)
    if special:
        x.reshape(-1)[:4] = [0.0, -0.0, np.nan, 1e-30]
        w.reshape(-1)[-3:] = [np.inf, -0.0, 1e-30]  # the last output feature: Inf or NaN through the GEMM
        dy.reshape(-1)[-3:] = [np.nan, -np.inf, -0.0]
    return x, w, rng.standard_normal(o).astype(F32), dy


def _same(a: np.ndarray, b: np.ndarray, what: str) -> None:
    assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), f"{what}: not bit-identical"


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")  # NaN * 0 on a kernel thread (errstate is per thread)
@pytest.mark.parametrize("dtype,path", [(F32, "c"), (F32, "numpy-gemm"), (F32, "no-cc"), (F16, "c")],
                         ids=["fp32", "fp32-numpy-gemm", "fp32-no-cc", "amp"])
def test_fused_equals_unfused_to_the_bit(dtype, path, threads, shape, monkeypatch):
    if path == "numpy-gemm":
        monkeypatch.setenv("TR_MLIR_C_GEMM", "0")
    if path == "no-cc":
        monkeypatch.setenv("TR_MLIR_CC", "0")
    n, f, o = shape
    x, w, b, dy = _operands(np.random.default_rng(7), n, f, o, dtype)
    with np.errstate(invalid="ignore"), threadpool_limits(threads):
        t, unfused, fused = (np.full((n, 1, 1, o), 5, dtype) for _ in range(3))
        run("fc_fwd", x=x, w=w, b=b, y=t)
        run("relu_fwd", x=t, y=unfused)
        run("fc_relu_fwd", x=x, w=w, b=b, y=fused)
        _same(fused, unfused, "fc_relu_fwd y")
        xr = np.empty_like(x)
        run("relu_fwd", x=x, y=xr)  # the FC's input is a ReLU's output
        one = {"dw": np.full((o, 1, 1, f), 3, F32), "db": np.full(o, 3, F32), "dx": np.full_like(x, 3)}
        run("fc_bwd", dy=dy, w=w, x=xr, **one)
        g = np.full_like(x, 9)
        run("relu_bwd_from_output", dy=one["dx"], y=xr, dx=g)
        both = {"dw": np.full((o, 1, 1, f), 4, F32), "db": np.full(o, 4, F32), "dx": np.full_like(x, 4)}
        run("relu_fc_bwd", dy=dy, w=w, x=xr, **both)
    _same(both["dx"], g, "relu_fc_bwd dx")
    _same(both["dw"], one["dw"], "relu_fc_bwd dw")
    _same(both["db"], one["db"], "relu_fc_bwd db")


def test_relu_fc_bwd_refuses_a_dx_on_x():
    x, w, _, dy = _operands(np.random.default_rng(1), 4, 6, 3, F32)
    with pytest.raises(ValueError, match="needs a dx apart from x"):
        KERNELS["relu_fc_bwd"](dy=dy, w=w, x=x, dw=np.zeros((3, 1, 1, 6), F32), dx=x)
    both = np.zeros(2 * x.size, F32)  # dx overlapping x by half
    with pytest.raises(ValueError, match="needs a dx apart from x"):
        KERNELS["relu_fc_bwd"](dy=dy, w=w, x=both[:x.size].reshape(x.shape), dw=np.zeros((3, 1, 1, 6), F32),
                               dx=both[x.size // 2:x.size // 2 + x.size].reshape(x.shape))


@pytest.mark.parametrize("dtype", [F32, F16], ids=["fp32", "amp"])
def test_fused_against_torch(dtype):
    """``relu(x @ w.T + b)`` and ``d/dx_pre`` of ``linear(relu(x_pre))`` against torch (fp32 math;
    AMP: fp16 storage, tolerance of its rounding)."""
    n, f, o = 64, 96, 80
    x, w, b, dy = _operands(np.random.default_rng(3), n, f, o, dtype, special=False)  # compare values
    tol = 2e-5 if dtype == F32 else 2e-2
    y = np.empty((n, 1, 1, o), dtype)
    run("fc_relu_fwd", x=x, w=w, b=b, y=y)
    tx, tw, tb = (torch.tensor(a.astype(F32)) for a in (x.reshape(n, f), w.reshape(o, f), b))
    ref = torch.relu(torch.nn.functional.linear(tx, tw, tb))
    np.testing.assert_allclose(y.reshape(n, o).astype(F32), ref.numpy(), rtol=tol, atol=tol)

    pre = torch.tensor(x.reshape(n, f).astype(F32), requires_grad=True)
    tw2 = torch.tensor(w.reshape(o, f).astype(F32), requires_grad=True)
    tb2 = torch.tensor(b, requires_grad=True)
    out = torch.nn.functional.linear(torch.relu(pre), tw2, tb2)
    out.backward(torch.tensor(dy.reshape(n, o).astype(F32)))
    xr = np.maximum(x, 0).astype(dtype)
    dw, db, dx = np.empty((o, 1, 1, f), F32), np.empty(o, F32), np.empty_like(x)
    run("relu_fc_bwd", dy=dy, w=w, x=xr, dw=dw, db=db, dx=dx)
    np.testing.assert_allclose(dx.reshape(n, f).astype(F32), pre.grad.numpy(), rtol=tol, atol=tol)
    np.testing.assert_allclose(dw.reshape(o, f), tw2.grad.numpy(), rtol=tol, atol=tol * 10)
    np.testing.assert_allclose(db, tb2.grad.numpy(), rtol=tol, atol=tol * 10)


# --------------------------------------------------------------------------------------
# the pass
# --------------------------------------------------------------------------------------


def _compile(model, shape, **options):
    from tr_mlir.compile import compile as tr_compile
    from tr_mlir.lowering.executable import find_program

    module = tr_compile(model, shape, num_classes=10, batch_size=4, train_size=8, val_size=6, **options)
    return find_program(module)[1]


def _train_ops(program) -> list[str]:
    from tr_mlir.dialects.memplan import GraphId

    graph = next(g for g in program.graphs() if g.graph_name == "train")
    return [n.op for gid in GraphId for n in graph.nodes(gid)]


@pytest.mark.parametrize("amp", [False, True], ids=["fp32", "amp"])
def test_the_mlp_compiles_to_the_fused_kernels(amp):
    from tr_mlir import zoo

    p = "AMP" if amp else "FP32"
    ops = _train_ops(_compile(zoo.mlp(), (28, 28, 1), amp=amp))
    assert ops.count(f"FC_RELU_{p}_FWD") == 3 and ops.count(f"RELU_FC_{p}_BWD") == 3
    assert not {f"RELU_{p}_FWD", f"RELU_{p}_BWD_FROM_OUTPUT"} & set(ops)
    assert ops.count(f"FC_{p}_FWD") == 1  # the classifier: no ReLU after it
    off = _train_ops(_compile(zoo.mlp(), (28, 28, 1), amp=amp, fuse_fc_relu=False))
    assert not [o for o in off if o.startswith(("FC_RELU", "RELU_FC"))]
    assert off.count(f"RELU_{p}_FWD") == 3


def test_an_fc_output_read_elsewhere_stays_unfused():
    """fc -> relu -> fc where the first FC's output also feeds a residual add (through an
    identity): its value is read after the ReLU, so the forward pair stays apart; the backward of
    the ReLU into the second FC fuses. A ReLU in the mask form (it feeds the add) stays apart."""
    from tr_mlir.blueprint import add2, fc, flatten, identity, relu, seq

    ops = _train_ops(_compile(seq(flatten(), fc(8, True), add2(identity(), seq(relu(), fc(8, True))), fc(10, True)),
                              (2, 2, 3)))
    assert "FC_RELU_FP32_FWD" not in ops and ops.count("RELU_FP32_FWD") == 1
    assert ops.count("RELU_FC_FP32_BWD") == 1 and "RELU_FP32_BWD_FROM_OUTPUT" not in ops
    ops = _train_ops(_compile(seq(flatten(), fc(8, True), add2(identity(), relu()), fc(10, True)), (2, 2, 3)))
    assert "RELU_FP32_BWD" in ops and not [o for o in ops if o.startswith(("FC_RELU", "RELU_FC"))]


def test_the_pass_runs_once_and_checks_its_place():
    """The pass on the module memplan-build-graph leaves fuses the MLP's six pairs, a second run
    changes nothing; before memplan-build-graph, and on a compiled module (its atlas and offsets
    name the nodes), it stops with a diagnostic that names the pass to run."""
    from xdsl.utils.exceptions import DiagnosticException

    from tr_mlir import zoo
    from tr_mlir.compile import arch_plan, make_context
    from tr_mlir.lowering.executable import find_program
    from tr_mlir.passes.memplan_compile import MemplanCompilePass
    from tr_mlir.passes.memplan_fuse_fc_relu import MemplanFuseFcReluPass

    ctx = make_context()
    module = arch_plan(zoo.mlp(), (28, 28, 1), amp=False, fuse=False, num_classes=10)
    with pytest.raises(DiagnosticException, match="memplan-fuse-fc-relu runs after memplan-derive-shapes"):
        MemplanFuseFcReluPass().apply(ctx, module)
    phases = MemplanCompilePass(batch_size=4, train_size=8, val_size=6, fuse_fc_relu=False).phases()
    build = next(i for i, p in enumerate(phases) if p.name == "memplan-build-graph")
    for phase in phases[:build]:
        phase.apply(ctx, module)
    with pytest.raises(DiagnosticException, match="run memplan-build-graph first"):
        MemplanFuseFcReluPass().apply(ctx, module)
    build += 1
    phases[build - 1].apply(ctx, module)
    before = _train_ops(find_program(module)[1])
    MemplanFuseFcReluPass().apply(ctx, module)
    once = str(module)
    ops = _train_ops(find_program(module)[1])
    assert len(before) - len(ops) == 6 and ops.count("FC_RELU_FP32_FWD") == 3
    MemplanFuseFcReluPass().apply(ctx, module)
    assert str(module) == once
    for phase in phases[build:]:
        phase.apply(ctx, module)
    module.verify()
    compiled = str(module)
    with pytest.raises(DiagnosticException, match="already has its atlas"):
        MemplanFuseFcReluPass().apply(ctx, module)
    assert str(module) == compiled


def _three_steps(amp: bool, fuse_fc_relu: bool) -> tuple[list[float], list[np.ndarray]]:
    import tr_mlir
    from tr_mlir import zoo

    task = tr_mlir.Task(zoo.mlp(), (28, 28, 1), 10, 16, optimizer=tr_mlir.optim.SGD(lr=0.05, momentum=0.9),
                        amp=amp, seed=3, fuse_fc_relu=fuse_fc_relu)
    task.compile()
    fused = [o for o in _train_ops(task.exe.program) if o.startswith(("FC_RELU", "RELU_FC"))]
    assert len(fused) == (6 if fuse_fc_relu else 0)
    rng = np.random.default_rng(5)
    losses = [task.train_step(rng.standard_normal((16, 28, 28, 1)).astype(F32),
                              rng.integers(0, 10, 16).astype(np.int32)) for _ in range(3)]
    return losses, [a.copy() for _, a in task.parameters()]


@pytest.mark.parametrize("amp", [False, True], ids=["fp32", "amp"])
def test_whole_steps_with_and_without_the_pass_are_bit_identical(amp):
    """Three training steps of the seed's MLP with the fused kernels and with
    ``Task(fuse_fc_relu=False)``: the same losses and parameters to the bit (the memory plans
    differ: the verifier of every compile checks both)."""
    on = _three_steps(amp, True)
    off = _three_steps(amp, False)
    assert on[0] == off[0]
    for i, (a, b) in enumerate(zip(on[1], off[1])):
        assert a.tobytes() == b.tobytes(), f"parameter #{i}"


def test_the_task_option_is_checked_saved_and_recompiles_with_the_state(tmp_path):
    """``Task(fuse_fc_relu=...)``: a bool (else TaskError), kept by ``Task.save`` / ``Task.load``
    (which can override it); changing it (or ``reuse``) before ``compile()`` recompiles, keeping
    the parameters, and a non-bool is refused there."""
    import tr_mlir
    from tr_mlir import zoo

    with pytest.raises(tr_mlir.TaskError, match="fuse_fc_relu must be a bool"):
        tr_mlir.Task(zoo.mlp(), (28, 28, 1), 10, 4, fuse_fc_relu=1)
    task = tr_mlir.Task(zoo.mlp(), (28, 28, 1), 10, 4, fuse_fc_relu=False).compile()
    fused = lambda t: [o for o in _train_ops(t.exe.program) if o.startswith(("FC_RELU", "RELU_FC"))]  # noqa: E731
    assert fused(task) == []
    rng = np.random.default_rng(0)
    task.train_step(rng.standard_normal((4, 28, 28, 1)).astype(F32), rng.integers(0, 10, 4).astype(np.int32))
    task.save(tmp_path / "t")
    loaded = tr_mlir.Task.load(tmp_path / "t")
    assert loaded.fuse_fc_relu is False and fused(loaded) == []
    before = [a.copy() for _, a in loaded.parameters()]
    loaded.fuse_fc_relu = True
    assert len(fused(loaded.compile())) == 6
    for a, (_, b) in zip(before, loaded.parameters()):
        assert a.tobytes() == b.tobytes()
    loaded.fuse_fc_relu = 0
    with pytest.raises(tr_mlir.TaskError, match="Task.compile: fuse_fc_relu must be a bool, got 0"):
        loaded.compile(train_size=8)
    # Task.load with the options given compiles once, with them
    again = tr_mlir.Task.load(tmp_path / "t", fuse_fc_relu=True, reuse=False)
    assert (again.fuse_fc_relu, again.reuse) == (True, False) and len(fused(again)) == 6
