"""The fused batch-norm epilogue kernels (lowering/cpu/norm.py): ``bn2d_relu_*`` (BN + ReLU) and
``bn2d_add_relu_*`` (BN + residual add + ReLU), forward and both backward forms (mask, output).

* Bit identity: every output equals, to the bit, what the unfused kernels write one after another
  (``bn2d_fwd``, ``add_fwd(skip, bn)``, ``relu_fwd``; ``relu_bwd`` or ``relu_bwd_from_output``,
  then ``bn2d_bwd``), on the C path (fp32 with a compiler) and the NumPy path (``TR_MLIR_CC=0``,
  and AMP), below and above the thread-split size.
* Against PyTorch (fp32 and AMP): ``relu(batch_norm(x) [+ skip])`` forward, running statistics,
  and the gradients of x, gamma, beta and skip.

Layouts NHWC; torch NCHW.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tr_mlir.lowering.cpu import KERNELS

F32, F16 = np.float32, np.float16
TOL = {F32: 2e-5, F16: 2e-2}
SHAPES = [(2, 5, 5, 8), (16, 16, 16, 128)]  # the second is past _cnorm.SPLIT_ELEMENTS (rows on 2 threads)


def run(name: str, **arrays) -> None:
    KERNELS[name].bind(arrays, {})()


def _inputs(rng, shape, dtype, skip: bool):
    c = shape[-1]
    x = (rng.standard_normal(shape) * 2 + 0.5).astype(dtype)
    p = {"gamma": (rng.standard_normal(c) * 0.3 + 1).astype(F32), "beta": (rng.standard_normal(c) * 0.3).astype(F32)}
    s = rng.standard_normal(shape).astype(dtype) if skip else None
    return x, p, s


def _stats(c: int) -> dict[str, np.ndarray]:
    return {"running_mean": np.zeros(c, F32), "running_var": np.ones(c, F32), "save_mean": np.zeros(c, F32),
            "save_istd": np.zeros(c, F32)}


def _unfused_forward(x, p, skip, mask: bool):
    st = _stats(x.shape[-1])
    bn = np.empty_like(x)
    run("bn2d_fwd", x=x, y=bn, **p, **st)
    if skip is not None:
        run("add_fwd", a=skip, b=bn, y=bn)
    y = np.empty_like(x)
    m = np.zeros(x.shape, np.int8) if mask else None
    run("relu_fwd", x=bn, y=y, **({"mask": m} if mask else {}))
    return y, m, st


def _fused_forward(x, p, skip, mask: bool):
    st = _stats(x.shape[-1])
    y = np.full_like(x, 7)
    m = np.full(x.shape, 3, np.int8) if mask else None
    extra = {"mask": m} if mask else {}
    if skip is None:
        run("bn2d_relu_fwd", x=x, y=y, **p, **st, **extra)
    else:
        run("bn2d_add_relu_fwd", x=x, skip=skip, y=y, **p, **st, **extra)
    return y, m, st


def _same(a: np.ndarray, b: np.ndarray, what: str) -> None:
    assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), f"{what}: not bit-identical"


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("form", ["mask", "output"])
@pytest.mark.parametrize("join", [False, True], ids=["bn_relu", "bn_add_relu"])
@pytest.mark.parametrize("dtype,path", [(F32, "c"), (F32, "numpy"), (F16, "numpy")], ids=["fp32-c", "fp32-numpy", "amp"])
def test_fused_equals_unfused_to_the_bit(dtype, path, join, form, shape, monkeypatch):
    if path == "numpy":
        monkeypatch.setenv("TR_MLIR_CC", "0")
    rng = np.random.default_rng(31)
    x, p, skip = _inputs(rng, shape, dtype, join)
    mask = form == "mask"
    y0, m0, st0 = _unfused_forward(x, p, skip, mask)
    y1, m1, st1 = _fused_forward(x, p, skip, mask)
    _same(y1, y0, "y")
    if mask:
        _same(m1, m0, "mask")
    for k in st0:
        _same(st1[k], st0[k], k)

    dy = rng.standard_normal(shape).astype(dtype)
    c = shape[-1]
    # unfused: the ReLU's dx (the join's gradient), then BN backward over the conv output's copy
    d_relu = np.empty_like(x)
    if mask:
        run("relu_bwd", dy=dy, mask=m0, dx=d_relu)
    else:
        run("relu_bwd_from_output", dy=dy, y=y0, dx=d_relu)
    dx0, dg0, db0 = x.copy(), np.zeros(c, F32), np.zeros(c, F32)
    run("bn2d_bwd", dy=d_relu, x=dx0, gamma=p["gamma"], save_mean=st0["save_mean"], save_istd=st0["save_istd"],
        dgamma=dg0, dbeta=db0, dx=dx0)
    # fused, dx over x's buffer as the descriptors bind it
    dx1, dg1, db1 = x.copy(), np.full(c, 5, F32), np.full(c, 5, F32)
    gate = {"mask": m1} if mask else {"y": y1}
    name = ("bn2d_add_relu_bwd" if join else "bn2d_relu_bwd") + ("" if mask else "_from_output")
    extra = {"dskip": np.full_like(x, 9)} if join else {}
    run(name, dy=dy.copy(), x=dx1, gamma=p["gamma"], save_mean=st1["save_mean"], save_istd=st1["save_istd"],
        dgamma=dg1, dbeta=db1, dx=dx1, **gate, **extra)
    _same(dx1, dx0, "dx")
    _same(dg1, dg0, "dgamma")
    _same(db1, db0, "dbeta")
    if join:
        _same(extra["dskip"], d_relu, "dskip")


def _nchw(a: np.ndarray, grad: bool = False) -> torch.Tensor:
    return torch.tensor(np.ascontiguousarray(a.astype(F32).transpose(0, 3, 1, 2)), requires_grad=grad)


def _nhwc(t: torch.Tensor) -> np.ndarray:
    return t.detach().numpy().transpose(0, 2, 3, 1)


def _close(ours, ref, dtype, what: str) -> None:
    ours, ref = np.asarray(ours, np.float64).reshape(np.shape(ref)), np.asarray(ref, np.float64)
    err = float(np.abs(ours - ref).max()) / max(float(np.abs(ref).max()), 1e-6)
    assert err <= TOL[dtype], f"{what}: relative error {err:.2e} > {TOL[dtype]:.0e}"


@pytest.mark.parametrize("join", [False, True], ids=["bn_relu", "bn_add_relu"])
@pytest.mark.parametrize("dtype", [F32, F16], ids=["fp32", "amp"])
def test_fused_against_torch(dtype, join):
    """Forward, running statistics and every gradient against PyTorch (fp32 on the fp16-rounded
    inputs for AMP; the AMP reference takes the kernel's ReLU branches, as a pre-activation within
    fp16 rounding of 0 may take the other one)."""
    rng = np.random.default_rng(32)
    shape = (4, 6, 6, 16)
    x, p, skip = _inputs(rng, shape, dtype, join)
    y, m, st = _fused_forward(x, p, skip, True)
    xt = _nchw(x, True)
    gt, bt = torch.tensor(p["gamma"], requires_grad=True), torch.tensor(p["beta"], requires_grad=True)
    rm, rv = torch.zeros(shape[-1]), torch.ones(shape[-1])
    h = F.batch_norm(xt, rm, rv, gt, bt, training=True, momentum=0.1, eps=1e-5)
    st_ = _nchw(skip, True) if join else None
    if join:
        h = h + st_
    yt = F.relu(h) if dtype is F32 else h * _nchw(m)
    _close(y, _nhwc(yt), dtype, "y")
    _close(st["running_mean"], rm.numpy(), dtype, "running mean")
    _close(st["running_var"], rv.numpy(), dtype, "running var")
    dy = rng.standard_normal(shape).astype(dtype)
    yt.backward(_nchw(dy))
    c = shape[-1]
    dx, dg, db = x.copy(), np.zeros(c, F32), np.zeros(c, F32)
    extra = {"dskip": np.zeros_like(x)} if join else {}
    run("bn2d_add_relu_bwd" if join else "bn2d_relu_bwd", dy=dy, mask=m, x=dx, gamma=p["gamma"],
        save_mean=st["save_mean"], save_istd=st["save_istd"], dgamma=dg, dbeta=db, dx=dx, **extra)
    _close(dx, _nhwc(xt.grad), dtype, "dx")
    _close(dg, gt.grad.numpy(), dtype, "dgamma")
    _close(db, bt.grad.numpy(), dtype, "dbeta")
    if join:
        _close(extra["dskip"], _nhwc(st_.grad), dtype, "dskip")


# --------------------------------------------------------------------------------------
# the descriptors: where the epilogues run, and whole steps with and without them
# --------------------------------------------------------------------------------------


def _node_ops(model, shape, **options) -> list[str]:
    from tr_mlir.compile import compile as tr_compile
    from tr_mlir.dialects.memplan import GraphId
    from tr_mlir.lowering.executable import find_program

    module = tr_compile(model, shape, num_classes=10, batch_size=4, train_size=8, val_size=6, **options)
    _, program = find_program(module)
    return [n.op for g in program.graphs() for gid in GraphId for n in g.nodes(gid)]


@pytest.mark.parametrize("amp", [False, True], ids=["fp32", "amp"])
def test_fused_resnet_runs_the_epilogues(amp, monkeypatch):
    """A fused ResNet's cbr, stage BN+ReLU pairs and joins compile to the epilogue kernels (the
    memory plan verified, as every compile verifies it), and to none with the epilogues off."""
    from tr_mlir import zoo
    import tr_mlir.passes._block_plans as descriptors

    p = "AMP" if amp else "FP32"
    ops = _node_ops(zoo.resnet_tiny(10), (8, 8, 1), fuse=True, amp=amp)
    # cbr and the blocks' stages (their ReLUs feed convs: the output form); the joins (the first
    # feeds a conv, the last the GAP: the mask form); no training ReLU of its own is left
    assert {f"BN2D_RELU_{p}_FWD", f"BN2D_RELU_{p}_BWD_FROM_OUTPUT", f"BN2D_ADD_RELU_{p}_FWD",
            f"BN2D_ADD_RELU_{p}_BWD_FROM_OUTPUT", f"BN2D_ADD_RELU_{p}_BWD"} <= set(ops)
    assert not {f"RELU_{p}_FWD", f"RELU_{p}_BWD", f"RELU_{p}_BWD_FROM_OUTPUT"} & set(ops)
    monkeypatch.setattr(descriptors, "EPILOGUES", False)
    ops = _node_ops(zoo.resnet_tiny(10), (8, 8, 1), fuse=True, amp=amp)
    assert not [o for o in ops if "_RELU_" in o and o.startswith("BN2D")]


def _three_steps(name: str, amp: bool) -> tuple[list[float], list[np.ndarray]]:
    import tr_mlir
    from tr_mlir.zoo import MODELS

    shape = MODELS[name].input_shape
    task = tr_mlir.Task(MODELS[name].blueprint(10), shape, 10, 8, optimizer=tr_mlir.optim.SGD(lr=0.1, momentum=0.9),
                        fuse=True, amp=amp, seed=3)
    rng = np.random.default_rng(5)
    losses = [task.train_step(rng.standard_normal((8, *shape)).astype(F32), rng.integers(0, 10, 8).astype(np.int32))
              for _ in range(3)]
    return losses, [a.copy() for _, a in (*task.parameters(), *task.buffers())]


@pytest.mark.parametrize("amp", [False, True], ids=["fp32", "amp"])
@pytest.mark.parametrize("name", ["resnet_tiny", "mobilenet_tiny"])
def test_whole_steps_with_and_without_the_epilogues_are_bit_identical(name, amp, monkeypatch):
    """Three training steps of a fused model with the epilogue kernels and with the unfused BN,
    add and ReLU kernels: the same losses, parameters and BN statistics to the bit."""
    import tr_mlir.passes._block_plans as descriptors

    on = _three_steps(name, amp)
    monkeypatch.setattr(descriptors, "EPILOGUES", False)
    off = _three_steps(name, amp)
    assert on[0] == off[0]
    for i, (a, b) in enumerate(zip(on[1], off[1])):
        assert a.tobytes() == b.tobytes(), f"parameter or buffer #{i}"
