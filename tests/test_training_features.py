"""Issue 17 training features: the GradScaler loss-scale rule (against torch.amp.GradScaler),
PyTorch-default initialization (against torch's formulas), host augmentation (determinism,
geometry), and their save / load."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tr_mlir import augment as A
from tr_mlir.amp import GradScaler
from tr_mlir.inits import kaiming_uniform_bound, torch_init
from tr_mlir.task import Task, TaskError

torch = pytest.importorskip("torch")
RNG = np.random.default_rng(0)


def batch(n: int, shape=(8, 8, 1), classes: int = 10):
    return RNG.standard_normal((n, *shape)).astype(np.float32), RNG.integers(0, classes, n)


# --------------------------------------------------------------------------------------
# 4. GradScaler
# --------------------------------------------------------------------------------------


def torch_scales(pattern, **kw):
    """The scale after each step of torch.amp.GradScaler('cpu') when step i's gradient is inf
    where pattern[i] is True, and whether the optimizer stepped."""
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=0.1)
    scaler = torch.amp.GradScaler("cpu", **kw)
    out = []
    for bad in pattern:
        opt.zero_grad()
        scaler.scale(p.sum() * 1.0).backward()
        if bad:
            p.grad.fill_(float("inf"))
        before = p.detach().clone()
        scaler.step(opt)
        scaler.update()
        out.append((scaler.get_scale(), bool((p.detach() != before).any())))
    return out


@pytest.mark.parametrize("kw", [dict(), dict(init_scale=1024.0, growth_factor=4.0, backoff_factor=0.25,
                                             growth_interval=3)])
def test_gradscaler_rule_matches_torch(kw):
    rng = np.random.default_rng(1)
    pattern = list(rng.random(40) < 0.3) + [False] * 7 + [True, False, False, False]
    ours = GradScaler(**kw)
    scale, tracker = ours.init_scale, 0
    ref = torch_scales(pattern, **kw)
    for bad, (want, stepped) in zip(pattern, ref):
        scale, tracker = ours.update(scale, tracker, bool(bad))
        assert scale == want
        assert stepped == (not bad)


def test_gradscaler_arguments():
    for kw in (dict(init_scale=0.0), dict(growth_factor=1.0), dict(backoff_factor=1.0),
               dict(growth_interval=0), dict(init_scale=float("nan"))):
        with pytest.raises(ValueError, match="GradScaler"):
            GradScaler(**kw)
    with pytest.raises(TaskError, match="amp=True"):
        Task("mlp_digits", (8, 8, 1), 10, 16, loss_scaler=GradScaler())


def test_gradscaler_in_a_task_skips_steps_and_saves(tmp_path):
    """A scale that overflows fp16 backs off step by step (skipped steps: no Adam step, no update),
    then good steps grow it after growth_interval; the tracker survives save / load."""
    from tr_mlir.optim import Adam

    x, y = batch(16)
    rule = GradScaler(init_scale=2.0 ** 24, growth_interval=3)
    t = Task("mlp_digits", (8, 8, 1), 10, 16, amp=True, optimizer=Adam(lr=1e-3), loss_scaler=rule)
    t.compile()
    scale, tracker, good, seen = rule.init_scale, 0, 0, []
    for _ in range(14):
        w0 = t.parameters()[0][1]
        t.train_step(x, y)
        bad = t.exe.get_scalar("has_nan") != 0
        seen.append(bad)
        scale, tracker = rule.update(scale, tracker, bad)
        good += not bad
        assert t.loss_scale == scale
        assert np.array_equal(t.parameters()[0][1], w0) == bad
        assert t.exe.get_scalar("step") == good
    assert any(seen) and not all(seen)
    t.save(tmp_path / "ck")
    back = Task.load(tmp_path / "ck")
    assert back.loss_scaler == rule and back._scaler_state == t._scaler_state
    for _ in range(4):
        t.train_step(x, y)
        back.train_step(x, y)
        assert back.loss_scale == t.loss_scale
    for (n, a), (_, b) in zip(t.parameters(), back.parameters()):
        assert np.array_equal(a, b), n


# --------------------------------------------------------------------------------------
# 5. init
# --------------------------------------------------------------------------------------


def test_torch_init_bounds_match_torch():
    conv = torch.nn.Conv2d(3, 16, 5)
    lin = torch.nn.Linear(300, 7)
    for m, fan in ((conv, 3 * 25), (lin, 300)):
        fi, _ = torch.nn.init._calculate_fan_in_and_fan_out(m.weight)
        assert fi == fan
        gain = torch.nn.init.calculate_gain("leaky_relu", math.sqrt(5))
        assert kaiming_uniform_bound(fan) == pytest.approx(gain * math.sqrt(3.0 / fan), rel=1e-12)
        assert kaiming_uniform_bound(fan) == pytest.approx(1 / math.sqrt(fan), rel=1e-12)
        # torch's own draws stay within that bound
        assert float(m.weight.detach().abs().max()) <= kaiming_uniform_bound(fan)
        assert float(m.bias.detach().abs().max()) <= 1 / math.sqrt(fi)


def test_torch_init_in_a_task():
    from tr_mlir import blueprint as bp

    model = bp.seq(bp.conv(16, 3, 1, 1), bp.relu(), bp.flatten(), bp.fc(32, True), bp.relu(), bp.fc(10, True))
    t = Task(model, (8, 8, 3), 10, 8, init="torch", seed=3)
    seed_init = dict(Task(model, (8, 8, 3), 10, 8, seed=3).parameters())
    params = dict(t.parameters())
    fans = {"conv0": 3 * 9, "fc0": 8 * 8 * 16, "fc1": 32}
    for name, a in params.items():
        layer, field = name.split(".")
        b = 1 / math.sqrt(fans[layer])
        assert np.abs(a).max() <= b, name
        if a.size >= 256:  # uniform on [-b, b]: max near b, variance b^2 / 3
            assert np.abs(a).max() > 0.97 * b, name
            assert a.var() == pytest.approx(b * b / 3, rel=0.1), name
            assert abs(a.mean()) < 0.05 * b, name
    assert np.abs(params["fc0.bias"]).max() > 0  # torch draws biases; the seed zeroes them
    assert np.all(seed_init["fc0.bias"] == 0)
    assert not np.array_equal(seed_init["conv0.weight"], params["conv0.weight"])
    # reproducible, and equal to the documented draws
    again = dict(Task(model, (8, 8, 3), 10, 8, init="torch", seed=3).parameters())
    for n in params:
        assert np.array_equal(params[n], again[n])
    ref = torch_init([(n, a.shape) for n, a in t.parameters()], 3)
    assert np.array_equal(ref["fc1.weight"], params["fc1.weight"])
    with pytest.raises(TaskError, match="init must be"):
        Task(model, (8, 8, 3), 10, 8, init="xavier")


# --------------------------------------------------------------------------------------
# 3. augmentation
# --------------------------------------------------------------------------------------


def test_crop_and_flip_geometry():
    x = RNG.standard_normal((64, 6, 7, 3)).astype(np.float32)
    out = A.RandomCrop(2, fill=-9.0)(x, np.random.default_rng(0))
    assert out.shape == x.shape and out.dtype == np.float32
    # every output is a shifted window of its input: its non-fill part equals a slice of x
    padded = np.pad(x, ((0, 0), (2, 2), (2, 2), (0, 0)), constant_values=-9.0)
    for i in range(64):
        assert any(np.array_equal(out[i], padded[i, a:a + 6, b:b + 7]) for a in range(5) for b in range(5))
    assert not np.array_equal(out, x)
    f = A.HorizontalFlip(0.5)(x, np.random.default_rng(0))
    flipped = [np.array_equal(f[i], x[i, :, ::-1]) for i in range(64)]
    kept = [np.array_equal(f[i], x[i]) for i in range(64)]
    assert all(a or b for a, b in zip(flipped, kept)) and 10 < sum(flipped) < 54
    assert np.array_equal(A.HorizontalFlip(1.0)(x, np.random.default_rng(0)), x[:, :, ::-1])


def test_affine_identity_and_rotation():
    x = RNG.standard_normal((4, 9, 9, 2)).astype(np.float32)
    same = A.RandomAffine(0.0, 0.0, (1.0, 1.0))(x, np.random.default_rng(0))
    np.testing.assert_allclose(same, x, atol=1e-6)
    # 90 degrees exactly: a rotation of the pixel grid (np.rot90 up to the direction)
    big = A.RandomAffine(90.0, 0.0, (1.0, 1.0))
    # angle +90 degrees: a generator whose angle uniform is 1 (the others 0.5: no shift, scale 1)
    class G:
        def random(self, shape):
            r = np.full(shape, 0.5)
            r[0] = 1.0
            return r
    out = big(x, G())
    np.testing.assert_allclose(out, np.stack([np.rot90(a, k=1, axes=(0, 1)) for a in x]), atol=1e-5)
    # translation by whole pixels shifts and fills with the batch minimum
    class T:
        def random(self, shape):
            r = np.full(shape, 0.5)
            r[2] = 1.0  # tx = +translate * W = +3 pixels for W = 9, translate = 1/3
            return r
    shifted = A.RandomAffine(0.0, 1 / 3, (1.0, 1.0))(x, T())
    np.testing.assert_allclose(shifted[:, :, 3:], x[:, :, :6], atol=1e-5)
    np.testing.assert_allclose(shifted[:, :, :3], np.broadcast_to(x.min(axis=(0, 1, 2)), shifted[:, :, :3].shape),
                               atol=1e-6)


def test_augment_presets_config_and_errors():
    for name in A.PRESETS:
        p = A.preset(name)
        again = A.from_config(p.config())
        x = RNG.standard_normal((8, 10, 10, 3)).astype(np.float32)
        assert np.array_equal(p(x, np.random.default_rng(2)), again(x, np.random.default_rng(2)))
        assert not np.array_equal(p(x, np.random.default_rng(2)), x)
    with pytest.raises(A.AugmentError, match="unknown augmentation preset"):
        A.preset("nope")
    with pytest.raises(A.AugmentError, match="padding"):
        A.RandomCrop(-1)
    with pytest.raises(A.AugmentError, match="float32"):
        A.HorizontalFlip()(np.zeros((2, 3, 3)), np.random.default_rng(0))


def test_fit_with_augmentation_is_reproducible_and_differs(tmp_path):
    x, y = batch(96)
    aug = A.preset("digits")

    def run(augment, epochs=2):
        t = Task("mlp_digits", (8, 8, 1), 10, 32, augment=augment, seed=1)
        t.fit((x, y), epochs=epochs)
        return t

    a, b, plain = run(aug), run(A.preset("digits")), run(None)
    for (n, p), (_, q), (_, r) in zip(a.parameters(), b.parameters(), plain.parameters()):
        assert np.array_equal(p, q), n
    assert not all(np.array_equal(p, r) for (_, p), (_, r) in zip(a.parameters(), plain.parameters()))
    # resume after one epoch: bit-identical to two epochs in one go
    one = run(aug, epochs=1)
    one.save(tmp_path / "ck")
    back = Task.load(tmp_path / "ck")
    assert back.augment is not None
    back.fit((x, y), epochs=1)
    for (n, p), (_, q) in zip(a.parameters(), back.parameters()):
        assert np.array_equal(p, q), n



def test_train_step_takes_its_batch_as_given():
    """augment applies in fit only (Task doc): train_step of an augmenting task is the plain step."""
    x, y = batch(32)
    tasks = [Task("mlp_digits", (8, 8, 1), 10, 32, augment=a, seed=1) for a in (A.preset("digits"), None)]
    for t in tasks:
        t.train_step(x, y)
    for (n, p), (_, q) in zip(tasks[0].parameters(), tasks[1].parameters()):
        assert np.array_equal(p, q), n

def test_prefetch_raises_worker_errors():
    def bad():
        yield np.zeros((2, 3, 3, 1), np.float32), np.zeros(2, np.int64)
        raise RuntimeError("boom")

    it = A.prefetch(bad(), A.HorizontalFlip(), np.random.default_rng(0))
    next(it)
    with pytest.raises(RuntimeError, match="boom"):
        next(it)


# --------------------------------------------------------------------------------------
# 2. progressive resizing
# --------------------------------------------------------------------------------------


def test_resnet8_cifar_resize_and_ema_without_recompiling():
    """resnet8_cifar on CIFAR-shaped synthetic data: epoch 1 at 24x24 (train_base), epoch 2 at
    32x32 (train_lowres), one executable; the EMA is updated every step and evaluated."""
    from tr_mlir.dialects.memplan import GraphId
    from tr_mlir.lowering.runner import TRAIN_BASE, TRAIN_LAST, TRAIN_LOWRES, TRAIN_LOWRES_LAST

    x, y = batch(40, (32, 32, 3))
    t = Task("resnet8_cifar", (32, 32, 3), 10, 16, resize=(24, 32, 1), ema=0.9, augment=A.preset("cifar"))
    t.compile(40, 24)
    exe = t.exe
    assert [v.hw for v in exe.variants] == [(24, 24), (24, 24), (32, 32), (32, 32), (32, 32), (32, 32)]
    deep = list(GraphId).index(GraphId.DEEP_FWD_BWD)
    ema = list(GraphId).index(GraphId.EMA_UPDATE)
    watch = {id(exe._slots[v][deep]): v for v in (TRAIN_BASE, TRAIN_LAST, TRAIN_LOWRES, TRAIN_LOWRES_LAST)}
    ema_graph = exe._slots[TRAIN_BASE][ema]
    assert ema_graph is not None and ema_graph is exe._slots[TRAIN_LOWRES][ema]  # shape-invariant: one capture
    seen: list = []

    def replay(graphs):
        for g in graphs:
            if id(g) in watch:
                seen.append(watch[id(g)])
            elif g is ema_graph:
                seen.append("ema")
            g.replay()

    t.runner._replay = replay
    rows = t.fit((x, y), (x[:24], y[:24]), epochs=2)
    assert t.exe is exe  # no recompile at the switch
    steps = [s for s in seen if s != "ema"]
    assert steps == [TRAIN_BASE, TRAIN_BASE, TRAIN_LAST, TRAIN_LOWRES, TRAIN_LOWRES, TRAIN_LOWRES_LAST]
    assert seen.count("ema") == 6 and all(seen[2 * i + 1] == "ema" for i in range(6))  # after each step
    assert all(np.isfinite(r["train_loss"]) and "val_ema_top1" in r for r in rows)
    with pytest.raises(TaskError, match="resize must be"):
        Task("resnet8_cifar", (32, 32, 3), 10, 16, resize=(24, 32))


# --------------------------------------------------------------------------------------
# tr-train flags
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("flags, needle", [
    (["--loss-scaler", "torch"], "--loss-scaler torch needs --amp"),
    (["--scaler-init", "5"], "set the --loss-scaler torch rule; add --amp --loss-scaler torch"),
    (["--no-ema-warmup"], "--no-ema-warmup applies to --ema DECAY"),
    (["--amp", "--loss-scaler", "torch", "--scaler-backoff", "1.5"], "--scaler-backoff must be in (0, 1)"),
    (["--amp", "--loss-scaler", "torch", "--scaler-interval", "0"], "--scaler-interval must be an integer >= 1"),
    (["--ema", "1.0"], "--ema must be a decay in [0, 1)"),
    (["--resize-schedule", "24"], "--resize-schedule expects START:END"),
    (["--resize-schedule", "6:8:9"], "K (epochs at END) must be in 1..3"),
    (["--resize-schedule", "0:8"], "resolutions must be >= 1"),
    (["--augment", "nope"], "invalid choice: 'nope'"),
    (["--init", "xavier"], "invalid choice: 'xavier'"),
])
def test_bad_feature_flags(flags, needle, capsys):
    from tr_mlir.tools.tr_train import main

    try:
        code = main(["--device", "cpu", "--model", "mlp_digits", "--epochs", "3", *flags])
    except SystemExit as e:  # argparse's usage errors (the parser exits 1)
        code = e.code
    err = capsys.readouterr().err
    assert code == 1
    assert "error:" in err and needle in err, err
    assert "Traceback" not in err


def test_resize_schedule_of_a_model_without_global_pooling_is_an_error(capsys):
    from tr_mlir.tools.tr_train import main

    code = main(["--device", "cpu", "--model", "mlp_digits", "--epochs", "2", "--resize-schedule", "6:8"])
    err = capsys.readouterr().err
    assert code == 1 and "error: --resize-schedule 6:8: mlp_digits cannot train at several resolutions" in err, err
    assert "Traceback" not in err


MNIST = __import__("pathlib").Path("/work/shared/data/mnist")


@pytest.mark.skipif(not (MNIST / "train-images-idx3-ubyte.gz").exists(), reason="MNIST files absent")
def test_mnist_preset_keeps_digits_on_their_background():
    """On real MNIST the affine preset fills with the background (the normalized 0) and keeps the
    ink: per image the mean moves little, the minimum stays the background value."""
    from tr_mlir.data import load_dataset

    ds = load_dataset("mnist", MNIST)
    x = ds.train_x[:256]
    out = A.preset("mnist")(x, np.random.default_rng(0))
    bg = float(ds.train_x.min())
    assert np.allclose(out.min(axis=(1, 2, 3)), bg, atol=1e-5)
    assert np.abs(out.mean(axis=(1, 2, 3)) - x.mean(axis=(1, 2, 3))).max() < 0.35 * x.std()
    assert not np.array_equal(out, x)
