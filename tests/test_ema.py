"""EMA of the weights (issue 17): the EMA_UPDATE graph after the optimizer against
torch.optim.swa_utils.AveragedModel, INF_EMA evaluation, save / load, errors."""

from __future__ import annotations

import numpy as np
import pytest

from tr_mlir import blueprint as bp
from tr_mlir.dialects.memplan import GraphId
from tr_mlir.ema import EMA
from tr_mlir.task import Task, TaskError

torch = pytest.importorskip("torch")
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn  # noqa: E402

RNG = np.random.default_rng(0)
MODEL = bp.seq(bp.conv(8, 3, 1, 1), bp.bn(), bp.relu(), bp.flatten(), bp.fc(10, True))


def data(n=48):
    return RNG.standard_normal((n, 6, 6, 2)).astype(np.float32), RNG.integers(0, 10, n)


def averaged(history, ema: EMA):
    """torch's AveragedModel over a module whose parameters take each recorded value in turn."""
    names = [n for n, _ in history[0]]
    module = torch.nn.ParameterList([torch.nn.Parameter(torch.tensor(a)) for _, a in history[0]])
    if ema.warmup:
        def avg_fn(avg, cur, n):
            d = min(ema.decay, (1.0 + float(n)) / (10.0 + float(n)))
            return d * avg + (1 - d) * cur
        model = AveragedModel(module, avg_fn=avg_fn)
    else:
        model = AveragedModel(module, multi_avg_fn=get_ema_multi_avg_fn(ema.decay))
    for params in history[1:]:
        with torch.no_grad():
            for p, (_, a) in zip(module, params):
                p.copy_(torch.tensor(a))
        model.update_parameters(module)
    return {n: p.detach().numpy() for n, p in zip(names, model.module)}


@pytest.mark.parametrize("ema", [EMA(0.9, warmup=False), EMA(0.99, warmup=True)])
def test_ema_matches_averaged_model(ema):
    x, y = data()
    t = Task(MODEL, (6, 6, 2), 10, 16, ema=ema, seed=2)
    t.compile(48, 48)
    # before any update the EMA is the initial model (AveragedModel deep-copies it)
    for (n, a), (_, b) in zip(t.parameters(), t.ema_parameters()):
        assert np.array_equal(a, b), n
    history = [t.parameters()]
    for i in range(9):
        t.train_step(x[16 * (i % 3):16 * (i % 3) + 16], y[16 * (i % 3):16 * (i % 3) + 16])
        history.append(t.parameters())
    want = averaged(history, ema)
    got = dict(t.ema_parameters())
    for n in want:
        np.testing.assert_allclose(got[n], want[n], rtol=1e-5, atol=1e-6, err_msg=n)
    # and it is not just the weights
    assert not np.allclose(got["conv0.weight"], dict(t.parameters())["conv0.weight"])


@pytest.mark.parametrize("scaler", [None, "grad_scaler"])
def test_ema_skips_the_steps_the_optimizer_skips(scaler):
    """AMP overflow (a scale of 2**40 makes the fp16 gradients Inf until it has backed off): a
    skipped step leaves the EMA and its count t as they were; the EMA equals AveragedModel
    updated after the taken steps only (torch: ``update_parameters`` only when
    ``scaler.step`` stepped)."""
    from tr_mlir.amp import GradScaler

    g = np.random.default_rng(4)  # its own data: the module's RNG stream stays the other tests'
    x, y = g.standard_normal((48, 6, 6, 2)).astype(np.float32), g.integers(0, 10, 48)
    ema = EMA(0.9, warmup=True)
    rule = GradScaler(init_scale=2.0 ** 40, growth_interval=1000) if scaler else None
    t = Task(MODEL, (6, 6, 2), 10, 16, amp=True, ema=ema, seed=2, loss_scaler=rule)
    t.compile(48, 48)
    if rule is None:
        t.exe.set_scalar("scaling", 2.0 ** 40)  # the seed's rule halves it from there
    history, skipped = [t.parameters()], []
    for i in range(30):
        before, count = dict(t.ema_parameters()), t._ema_count
        t.train_step(x[16 * (i % 3):16 * (i % 3) + 16], y[16 * (i % 3):16 * (i % 3) + 16])
        if t.exe.get_scalar("has_nan") != 0:
            skipped.append(i)
            assert t._ema_count == count
            for n, a in t.ema_parameters():
                assert np.array_equal(a, before[n]), (i, n)
        else:
            assert t._ema_count == count + 1
            history.append(t.parameters())
    assert 5 < len(skipped) < 27  # both kinds of step occurred
    want = averaged(history, ema)
    for n, got in t.ema_parameters():
        np.testing.assert_allclose(got, want[n], rtol=1e-5, atol=1e-6, err_msg=n)


def test_ema_graphs_run_after_the_optimizer_and_evaluate():
    t = Task(MODEL, (6, 6, 2), 10, 16, ema=0.5)
    t.compile(48, 48)
    from tr_mlir.dialects.lifetimes import after_deep

    order = after_deep("a", False)
    assert order.index(GraphId.EMA_UPDATE) > order.index(GraphId.OPTIMIZER)
    train = t.exe.graphs["train"]
    assert [n.op for n in train.nodes(GraphId.EMA_UPDATE)] == ["RANGE_EMA_PARAM_UPDATE"]
    infer = t.exe.graphs["infer"]
    assert len(infer.nodes(GraphId.INF_EMA_A)) == len(infer.nodes(GraphId.INF_MAIN_A)) > 0
    x, y = data()
    t.fit((x, y), (x, y), epochs=2)
    raw, ema = t.evaluate(x, y), t.evaluate(x, y, ema=True)
    assert raw != ema
    # the EMA model evaluated by INF_EMA equals a task that holds the EMA weights as its own
    other = Task(MODEL, (6, 6, 2), 10, 16)
    other.compile(48, 48)
    other.load_parameters(t.ema_parameters())
    other.load_buffers(t.buffers())
    want = other.evaluate(x, y)
    assert ema["top1"] == want["top1"]
    assert ema["loss"] == pytest.approx(want["loss"], rel=1e-5)
    np.testing.assert_allclose(t.predict(x[:5], ema=True), other.predict(x[:5]), rtol=1e-5, atol=1e-6)
    # evaluating the EMA leaves the raw model as it was
    assert t.evaluate(x, y) == raw
    rows = t.fit((x, y), (x, y), epochs=1)
    assert {"val_ema_loss", "val_ema_top1", "val_ema_top5"} <= set(rows[0])


def test_ema_without_ema_and_bad_decay():
    t = Task(MODEL, (6, 6, 2), 10, 16)
    x, y = data(16)
    with pytest.raises(TaskError, match="keeps no EMA"):
        t.evaluate(x, y, ema=True)
    with pytest.raises(TaskError, match="ema must be"):
        Task(MODEL, (6, 6, 2), 10, 16, ema=1.5)
    assert not t.exe.has("ema_decay")  # no EMA tensors planned without ema


def test_ema_resume_is_bit_identical(tmp_path):
    x, y = data()
    whole = Task(MODEL, (6, 6, 2), 10, 16, ema=0.9, seed=4)
    whole.fit((x, y), epochs=2)
    half = Task(MODEL, (6, 6, 2), 10, 16, ema=0.9, seed=4)
    half.fit((x, y), epochs=1)
    half.save(tmp_path / "ck")
    back = Task.load(tmp_path / "ck")
    assert back.ema == EMA(0.9) and back._ema_count == half._ema_count == 3
    back.fit((x, y), epochs=1)
    for (n, a), (_, b) in zip(whole.ema_parameters(), back.ema_parameters()):
        assert np.array_equal(a, b), n
    for (n, a), (_, b) in zip(whole.parameters(), back.parameters()):
        assert np.array_equal(a, b), n


def test_every_feature_on_the_cuda_backend_matches_the_cpu():
    """The CUDA backend (over the CPU kernel emulator): EMA update and evaluation, progressive
    resizing, GradScaler and torch init give the CPU's numbers."""
    from tr_mlir import augment as A
    from tr_mlir.amp import GradScaler
    from tr_mlir.lowering.cuda import emulator as emu

    if emu.host_compiler() is None:
        pytest.skip("no host C++ compiler for the kernel emulator")
    from tr_mlir.lowering.cuda.backend import CudaBackend

    x = RNG.standard_normal((32, 8, 8, 1)).astype(np.float32)
    y = RNG.integers(0, 10, 32)
    out = {}
    for dev in ("cpu", CudaBackend(emu.EmulatedDevice())):
        t = Task("resnet_tiny", (8, 8, 1), 10, 16, amp=True, device=dev, seed=1, ema=0.8, resize=(6, 8, 1),
                 init="torch", loss_scaler=GradScaler(init_scale=1024.0, growth_interval=2),
                 augment=A.preset("digits"))
        t.fit((x, y), (x, y), epochs=2)
        out[t.device] = (dict(t.ema_parameters()), t.evaluate(x, y, ema=True), t.loss_scale, t.exe.backend.name)
    assert out["gpu"][3] == "cuda"
    tol = 3e-3
    # the weights: the two backends' AMP trajectories drift apart by 1.7e-3 .. 5.0e-3 (max |gpu - cpu|
    # over the EMA parameters, measured for task seeds 1-3 with either augmentation implementation:
    # fp16 rounding of different kernels compounds over the 4 steps), so twice the largest
    wtol = 1e-2
    for name, p in out["cpu"][0].items():
        np.testing.assert_allclose(out["gpu"][0][name], p, rtol=wtol, atol=wtol, err_msg=name)
    for k in ("loss", "top1"):
        assert out["gpu"][1][k] == pytest.approx(out["cpu"][1][k], rel=tol, abs=tol)
    assert out["gpu"][2] == out["cpu"][2]
