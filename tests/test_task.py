"""The Task API: arguments and data validation, the parameter view (canonical order, layouts,
identical for fused / unfused / AMP), loading, save / load, recompiles, inference on any number of
samples, the optimizers against torch.optim (LARS against the facts sheet's formula), the cosine
schedule."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tr_mlir
from tr_mlir import blueprint as bp
from tr_mlir import zoo
from tr_mlir.data import load_dataset
from tr_mlir.optim import LARS, SGD, Adam, AdamW
from tr_mlir.sched import CosineAnnealingLR
from tr_mlir.task import Task, TaskError

torch.set_num_threads(1)
RNG = np.random.default_rng(0)


def batch(n: int, shape=(8, 8, 1), classes: int = 10):
    return RNG.standard_normal((n, *shape)).astype(np.float32), RNG.integers(0, classes, n)


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits")


# --------------------------------------------------------------------------------------
# arguments and data
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, err, match", [
    (dict(input_shape=(8, 8)), TaskError, r"input_shape must be \(H, W, C\)"),
    (dict(num_classes=0), TaskError, "num_classes must be an int >= 1"),
    (dict(batch_size=2.5), TaskError, "batch_size must be an int >= 1"),
    (dict(optimizer=torch.optim.SGD), TaskError, "optimizer must be a tr_mlir.optim optimizer"),
    (dict(scheduler="cosine"), TaskError, "scheduler must be None or tr_mlir.sched.CosineAnnealingLR"),
    (dict(loss=torch.nn.CrossEntropyLoss()), TaskError, "loss must be tr_mlir.CrossEntropyLoss"),
    (dict(amp=1), TaskError, "amp must be a bool"),
    (dict(device="tpu"), TaskError, "device must be 'cpu', 'auto' or 'gpu'"),
    pytest.param(dict(device="gpu"), TaskError, r"device='gpu' needs a CUDA GPU with CuPy, but .*; use device='cpu'",
                 marks=pytest.mark.skipif(__import__("tr_mlir.lowering.cuda.backend", fromlist=["x"]).cuda_available()[0],
                                          reason="a GPU is present")),
    (dict(model="resnet9000"), TaskError, "unknown zoo model 'resnet9000'"),
    (dict(model=42), TaskError, "model must be a BluePrint layer"),
])
def test_bad_arguments(kwargs, err, match):
    args = dict(model="mlp_digits", input_shape=(8, 8, 1), num_classes=10, batch_size=4)
    args.update(kwargs)
    with pytest.raises(err, match=match):
        Task(args.pop("model"), args.pop("input_shape"), args.pop("num_classes"), args.pop("batch_size"), **args)


def test_bad_data_is_a_clear_error():
    task = Task("mlp_digits", (8, 8, 1), 10, 4)
    x, y = batch(4)
    with pytest.raises(TaskError, match=r"expected x of shape \(N, 8, 8, 1\) float32 \(NHWC\), got float64"):
        task.train_step(x.astype(np.float64), y)
    with pytest.raises(TaskError, match=r"got float32 \(4, 1, 8, 8\)"):
        task.evaluate(x.reshape(4, 1, 8, 8), y)
    with pytest.raises(TaskError, match=r"expected y of shape \(4,\) with integer labels, got float32"):
        task.train_step(x, y.astype(np.float32))
    with pytest.raises(TaskError, match=r"labels in \[0, 10\), got values in \[0, 12\]"):
        task.train_step(x, np.array([0, 1, 2, 12]))
    with pytest.raises(TaskError, match="exactly batch_size = 4 samples, got 3"):
        task.train_step(x[:3], y[:3])
    with pytest.raises(TaskError, match=r"expected \(x, y\) arrays or a tr_mlir.data.Dataset"):
        task.fit(x, epochs=1)
    with pytest.raises(TaskError, match="train_size must be an int >= 1"):
        task.compile(train_size=0)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_inputs_are_refused_before_they_poison_bn(bad):
    """A NaN/Inf sample used to run: the NaN-gated update was skipped, but the BN forward had
    already folded the batch into the running statistics, so every later evaluation was NaN."""
    task = Task(bp.seq(bp.cbr(8, 3, 1, 1), bp.gap_fc(10, True)), (8, 8, 1), 10, 4)
    x, y = batch(4)
    task.train_step(x, y)
    buffers = task.buffers()
    before = task.evaluate(x, y)
    x_bad = x.copy()
    x_bad[2, 3, 4, 0] = bad
    for call in (lambda: task.train_step(x_bad, y), lambda: task.fit((x_bad, y), epochs=1),
                 lambda: task.fit((x, y), (x_bad, y), epochs=1), lambda: task.evaluate(x_bad, y),
                 lambda: task.predict(x_bad)):
        with pytest.raises(TaskError, match=r"x holds NaN or Inf \(sample 2\); expected finite inputs"):
            call()
    assert all(np.array_equal(a, b) for (_, a), (_, b) in zip(task.buffers(), buffers))
    assert task.evaluate(x, y) == before  # nothing the refused calls did reached the model


def test_lazy_exports():
    assert tr_mlir.Task is Task and tr_mlir.CrossEntropyLoss is tr_mlir.loss.CrossEntropyLoss
    assert tr_mlir.optim.SGD is SGD and tr_mlir.sched.CosineAnnealingLR is CosineAnnealingLR
    with pytest.raises(AttributeError):
        tr_mlir.Nope  # noqa: B018


# --------------------------------------------------------------------------------------
# parameters
# --------------------------------------------------------------------------------------


def test_parameters_identical_for_fused_unfused_amp():
    """Names, order and shapes do not depend on fusion or AMP; conv KRSC, the first conv with the
    user's 3 input channels (AMP stores 4); fc (out, in); BN vectors."""
    model = bp.seq(bp.cbr(8, 3, 1, 1), bp.block(8, bp.BlockStyle.RESNET_3_3), bp.block(16, bp.BlockStyle.RESNET_3_3_DS),
                   bp.gap_fc(10, True))
    views = [[(n, a.shape) for n, a in Task(model, (8, 8, 3), 10, 4, amp=amp, fuse=fuse).parameters()]
             for amp, fuse in ((False, False), (False, True), (True, True))]
    assert views[0] == views[1] == views[2]
    names = [n for n, _ in views[0]]
    assert names[:3] == ["conv0.weight", "bn0.weight", "bn0.bias"]
    assert dict(views[0])["conv0.weight"] == (8, 3, 3, 3)
    # the projection block: shortcut conv/bn (conv3, bn3) before the main branch (conv4, conv5)
    assert dict(views[0])["conv3.weight"] == (16, 1, 1, 8) and dict(views[0])["conv4.weight"] == (16, 3, 3, 8)
    assert names[-2:] == ["fc0.weight", "fc0.bias"] and dict(views[0])["fc0.weight"] == (10, 16)
    amp_task = Task(model, (8, 8, 3), 10, 4, amp=True, fuse=True).compile()
    assert amp_task.exe.view("l0.conv_weight").shape == (8, 3, 3, 4)


def test_load_parameters_and_buffers():
    task = Task(zoo.resnet_tiny(10), (8, 8, 1), 10, 4, amp=True, fuse=True)
    params = [(n, RNG.standard_normal(a.shape).astype(np.float32)) for n, a in task.parameters()]
    task.load_parameters(dict(params))
    for (n, a), (_, b) in zip(task.parameters(), params):
        assert np.array_equal(a, b), n
    stored = task.exe.view("l0.conv_weight")
    assert (stored[..., 1:] == 0).all()  # the AMP alignment channels stay zero
    bufs = [(n, RNG.random(a.shape).astype(np.float32) + 0.5) for n, a in task.buffers()]
    task.load_buffers(bufs)
    assert all(np.array_equal(a, b) for (_, a), (_, b) in zip(task.buffers(), bufs))
    with pytest.raises(TaskError, match=r"missing \['fc0.bias'\]"):
        task.load_parameters(params[:-1])
    with pytest.raises(TaskError, match=r"'conv0.weight' must be a float array of shape \(16, 3, 3, 1\)"):
        task.load_parameters([(n, a.T if n == "conv0.weight" else a) for n, a in params])
    with pytest.raises(TaskError, match=r"unexpected \['bogus'\]"):
        task.load_buffers(dict(bufs, bogus=np.zeros(3)))


def test_save_load_resumes_bit_identically(tmp_path):
    """Parameters, BN statistics, optimizer state (Adam moments and step), loss scale, dropout RNG
    and the schedule position survive save/load: training continues exactly as without it."""
    model = bp.seq(bp.cbr(8, 3, 1, 1), bp.dropout(0.25), bp.gap_fc(10, True))
    kw = dict(optimizer=Adam(lr=1e-2, weight_decay=1e-3), scheduler=CosineAnnealingLR(5, warmup_epochs=1),
              amp=True, fuse=True, seed=3)
    task = Task(model, (8, 8, 1), 10, 4, **kw)
    x, y = batch(12)
    task.fit((x, y), epochs=1)
    folder = task.save(tmp_path / "ck")
    assert (folder / "config.json").is_file() and (folder / "state.npz").is_file()
    other = Task.load(folder)
    assert other.steps == task.steps == 3 and other.optimizer == task.optimizer and other.scheduler == task.scheduler
    for (n, a), (_, b) in zip(task.parameters() + task.buffers(), other.parameters() + other.buffers()):
        assert np.array_equal(a, b), n
    task.fit((x, y), epochs=1)
    other.fit((x, y), epochs=1)
    for (n, a), (_, b) in zip(task.parameters(), other.parameters()):
        assert np.array_equal(a, b), n
    assert task.evaluate(x, y) == other.evaluate(x, y)
    with pytest.raises(TaskError, match="cannot read a saved task"):
        Task.load(tmp_path / "nothing")


def _damaged_copy(src, dst, *, config=None, state=None, raw_state: bytes | None = None):
    """A copy of the saved task folder ``src`` with ``config(cfg)`` / ``state(dict)`` applied or
    ``state.npz`` replaced by ``raw_state``."""
    import json
    import shutil

    shutil.copytree(src, dst)
    if config is not None:
        cfg = json.loads((dst / "config.json").read_text())
        (dst / "config.json").write_text(json.dumps(config(cfg)))
    if state is not None:
        with np.load(dst / "state.npz") as z:
            s = {k: z[k] for k in z.files}
        state(s)
        np.savez(dst / "state.npz", **s)
    if raw_state is not None:
        (dst / "state.npz").write_bytes(raw_state)
    return dst


def test_damaged_saves_are_task_errors_naming_the_file(tmp_path):
    """Task.load of a damaged save raised BadZipFile, ParseError, KeyError, AttributeError or a
    NumPy broadcast error; each is now a TaskError naming the file and what is wrong with it."""
    task = Task(bp.seq(bp.cbr(8, 3, 1, 1), bp.gap_fc(10, True)), (8, 8, 1), 10, 4)
    good = task.save(tmp_path / "good")
    data = (good / "state.npz").read_bytes()

    def drop(key):
        return lambda d: d.pop(key)

    def narrow(d):
        d["param/conv0.weight"] = d["param/conv0.weight"][..., :0]

    cases = [
        (dict(raw_state=data[:len(data) // 2]), r"state.npz is not a readable NumPy .npz archive \(truncated"),
        (dict(raw_state=b"not an archive"), r"state.npz is not a readable NumPy .npz archive"),
        (dict(config=lambda c: [1, 2]), r"config.json is not a tr-mlir-task-1 file"),
        (dict(config=lambda c: {**c, "model": "garbage {"}), r"config.json does not describe a task: ParseError"),
        (dict(config=lambda c: {k: v for k, v in c.items() if k != "batch_size"}),
         r"config.json does not describe a task: missing key 'batch_size'"),
        (dict(config=lambda c: {**c, "batch_size": -3}), r"does not describe a task: .*batch_size must be an int"),
        (dict(config=lambda c: {**c, "optimizer": {"kind": "zzz"}}), r"does not describe a task: .*unknown optimizer"),
        (dict(state=drop("param/conv0.weight")), r"state.npz lacks param/conv0.weight \(saved from another model\?\)"),
        (dict(state=narrow), r"'param/conv0.weight' has shape \(8, 3, 3, 0\), the model's is \(8, 3, 3, 1\)"),
    ]
    for i, (damage, match) in enumerate(cases):
        with pytest.raises(TaskError, match=match):
            Task.load(_damaged_copy(good, tmp_path / f"bad{i}", **damage))
    Task.load(good)  # the original still loads


def test_load_parameters_refuses_other_containers():
    task = Task(bp.seq(bp.cbr(8, 3, 1, 1), bp.gap_fc(10, True)), (8, 8, 1), 10, 4)
    for bad in (5, None, "conv0.weight", [1, 2]):
        with pytest.raises(TaskError, match=r"expected \{name: array\} or \[\(name, array\), \.\.\.\]"):
            task.load_parameters(bad)
        with pytest.raises(TaskError, match=r"Task.load_buffers: expected \{name: array\}"):
            task.load_buffers(bad)


def test_save_over_an_older_save_replaces_both_files_whole(tmp_path, monkeypatch):
    """A save that fails half-way (here: the archive write) leaves the earlier save loadable and
    no temporary files behind."""
    task = Task(bp.seq(bp.cbr(8, 3, 1, 1), bp.gap_fc(10, True)), (8, 8, 1), 10, 4)
    x, y = batch(4)
    folder = task.save(tmp_path / "ck")
    before = task.parameters()
    task.train_step(x, y)

    def fail(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "savez", fail)
    with pytest.raises(OSError, match="No space left"):
        task.save(folder)
    monkeypatch.undo()
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "state.npz"]
    again = Task.load(folder)
    assert again.steps == 0
    assert all(np.array_equal(a, b) for (_, a), (_, b) in zip(again.parameters(), before))


def test_recompile_for_new_sizes_keeps_the_weights():
    task = Task("mlp_digits", (8, 8, 1), 10, 4, optimizer=SGD(lr=0.1, momentum=0.9))
    x, y = batch(8)
    task.fit((x, y), epochs=1)
    before = task.parameters()
    exe = task.exe
    task.fit((x[:6], y[:6]), epochs=0)  # 6 samples: another last-batch variant
    assert task.exe is not exe and task.exe.variants[1].batch_size == 2
    assert all(np.array_equal(a, b) for (_, a), (_, b) in zip(before, task.parameters()))
    momentum = [np.array(task.exe.view(tid)) for e in task._params for _, tid in e.state]
    assert any(np.abs(m).max() > 0 for m in momentum)  # the optimizer state came along


def test_inference_on_any_number_of_samples(digits):
    """Tails are padded and masked: predictions do not depend on how samples are batched, and
    evaluate's metrics are those of the predictions."""
    task = Task(zoo.resnet_tiny(10), (8, 8, 1), 10, 16, fuse=True, optimizer=SGD(lr=0.05, momentum=0.9))
    task.fit((digits.train_x[:64], digits.train_y[:64]), epochs=1)
    x, y = digits.val_x[:37], digits.val_y[:37]
    probs = task.predict(x)
    assert probs.shape == (37, 10) and np.allclose(probs.sum(1), 1, atol=1e-5)
    one_by_one = np.concatenate([task.predict(x[i:i + 1]) for i in range(5)])
    assert np.allclose(one_by_one, probs[:5], atol=1e-6)
    m = task.evaluate(x, y)
    assert m["top1"] == pytest.approx(float(np.mean(probs.argmax(1) == y)))
    assert m["loss"] == pytest.approx(float(np.mean(-np.log(probs[np.arange(37), y]))), rel=1e-4)
    top5 = np.mean([(probs[i] > probs[i, y[i]]).sum() < 5 for i in range(37)])
    assert m["top5"] == pytest.approx(top5)
    empty = task.predict(x[:0])  # 'any number' includes none, as a torch model's empty batch
    assert empty.shape == (0, 10) and empty.dtype == np.float32
    with pytest.raises(TaskError, match="expected at least one sample, got 0"):  # a metric of nothing
        task.evaluate(x[:0], y[:0])


def test_bn_inference_parameters_are_refreshed_after_steps():
    """evaluate after train_step uses the current running statistics (refreshed first)."""
    model = bp.seq(bp.conv(8, 3, 1, 1), bp.bn(), bp.relu(), bp.gap_fc(10, True))
    task = Task(model, (8, 8, 1), 10, 8, optimizer=SGD(lr=0.0))
    x, y = batch(8)
    first = task.evaluate(x, y)["loss"]
    for _ in range(3):
        task.train_step(x * 3 + 1, y)  # moves the running statistics, not the weights (lr 0)
    assert task.evaluate(x, y)["loss"] != first
    eq = task.exe.view("l1.bn_eq_scale").reshape(-1)
    (_, var), = [b for b in task.buffers() if b[0] == "bn0.running_var"]
    (_, gamma), = [p for p in task.parameters() if p[0] == "bn0.weight"]
    assert np.allclose(eq, gamma / np.sqrt(var + 1e-5), rtol=1e-6)


def test_fit_history_and_dataset_input(digits):
    task = Task("mlp_digits", (8, 8, 1), 10, 64, optimizer=SGD(lr=0.1, momentum=0.9))
    hist = task.fit(digits, epochs=2)
    assert [h["epoch"] for h in hist] == [1, 2]
    assert set(hist[0]) == {"epoch", "lr", "train_loss", "train_top1", "train_top5", "val_loss", "val_top1",
                            "val_top5", "seconds"}
    assert task.train_size == digits.num_train and task.val_size == digits.num_val
    assert hist[1]["train_loss"] < hist[0]["train_loss"] and hist[1]["val_top1"] > 0.8


# --------------------------------------------------------------------------------------
# optimizers
# --------------------------------------------------------------------------------------


def _mlp():
    return bp.seq(bp.flatten(), bp.fc(16, True), bp.relu(), bp.fc(10, True))


def _torch_mlp(params):
    w0, b0, w1, b1 = (torch.tensor(p, requires_grad=True) for _, p in params)
    return [w0, b0, w1, b1], lambda x: F.linear(F.relu(F.linear(x, w0, b0)), w1, b1)


@pytest.mark.parametrize("ours, theirs", [
    (SGD(lr=0.1, weight_decay=0.01), lambda g, ps: torch.optim.SGD(g(ps, 0.01), lr=0.1)),
    (SGD(lr=0.1, momentum=0.9, weight_decay=0.01, decay_all=True),
     lambda g, ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.01)),
    (SGD(lr=0.1, momentum=0.9, nesterov=True), lambda g, ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True)),
    (Adam(lr=0.01, weight_decay=0.01), lambda g, ps: torch.optim.Adam(g(ps, 0.01), lr=0.01)),
    (AdamW(lr=0.01), lambda g, ps: torch.optim.AdamW(g(ps, 0.01), lr=0.01)),
    (AdamW(lr=0.01, decay_all=True), lambda g, ps: torch.optim.AdamW(ps, lr=0.01)),
], ids=["sgd-wd", "momentum-decay_all", "nesterov", "adam", "adamw", "adamw-decay_all"])
def test_optimizers_match_torch(ours, theirs):
    """Two steps of each optimizer on an MLP: torch.optim semantics and defaults; weight decay on
    weights only (torch param groups) unless decay_all. Plain SGD honours weight decay."""
    task = Task(_mlp(), (2, 2, 2), 10, 4, optimizer=ours)
    start = task.parameters()
    ps, fwd = _torch_mlp(start)

    def groups(ps, wd):
        return [{"params": [ps[0], ps[2]], "weight_decay": wd}, {"params": [ps[1], ps[3]], "weight_decay": 0.0}]

    opt = theirs(groups, ps)
    for _ in range(2):
        x, y = batch(4, (2, 2, 2))
        task.train_step(x, y)
        opt.zero_grad()
        F.cross_entropy(fwd(torch.tensor(x.reshape(4, 8))), torch.tensor(y)).backward()
        opt.step()
    for (n, a), p in zip(task.parameters(), ps):
        ref = p.detach().numpy()
        assert np.abs(a - ref).max() <= 1e-5 * max(np.abs(ref).max(), 1e-3), n


@pytest.mark.parametrize("nesterov", [False, True])
def test_lars_matches_the_facts_formula(nesterov):
    """LARS (facts sheet 12.4) transcribed in NumPy: per weight tensor a trust ratio, then the
    momentum update with decay; biases use plain (Nesterov) momentum without decay."""
    lr, mu, wd, tc, eps = 0.5, 0.9, 1e-3, 1e-2, 1e-8
    task = Task(_mlp(), (2, 2, 2), 10, 4, optimizer=LARS(lr=lr, momentum=mu, nesterov=nesterov, weight_decay=wd,
                                                         trust_coefficient=tc, eps=eps))
    params = [a.astype(np.float64) for _, a in task.parameters()]
    moms = [np.zeros_like(p) for p in params]
    for _ in range(2):
        x, y = batch(4, (2, 2, 2))
        ps, fwd = _torch_mlp([(None, p.astype(np.float32)) for p in params])
        F.cross_entropy(fwd(torch.tensor(x.reshape(4, 8))), torch.tensor(y)).backward()
        task.train_step(x, y)
        for i, (p, m, t) in enumerate(zip(params, moms, ps)):
            g = t.grad.numpy().astype(np.float64)
            if i % 2 == 0:  # weights: LARS
                wn, gn = np.linalg.norm(p), np.linalg.norm(g)
                eta = min(tc * wn / (gn + wd * wn + eps), 100.0) if wn >= 1e-12 and gn >= 1e-12 else 1.0
                d = g + wd * p
                m *= mu
                m += lr * eta * d
                p -= (lr * eta * d + mu * m) if nesterov else m
            else:  # biases: momentum, no decay
                m *= mu
                m += g
                p -= lr * ((g + mu * m) if nesterov else m)
    for (n, a), p in zip(task.parameters(), params):
        assert np.abs(a - p).max() <= 1e-5 * max(np.abs(p).max(), 1e-3), n


def test_optimizer_validation_and_config():
    with pytest.raises(ValueError, match="Nesterov momentum requires a momentum > 0"):
        SGD(lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match=r"betas\[1\] must be in \[0.0, 1.0\)"):
        Adam(betas=(0.9, 1.0))
    with pytest.raises(TypeError, match="lr must be a finite number"):
        SGD(lr=float("nan"))
    assert AdamW().weight_decay == 1e-2 and Adam().weight_decay == 0.0 and SGD().lr == 1e-3
    for opt in (SGD(0.1, momentum=0.5), Adam(betas=(0.8, 0.9)), AdamW(decay_all=True), LARS(0.2, nesterov=True)):
        assert tr_mlir.optim.from_config(opt.config()) == opt
    assert SGD(0.1).kind.value == "sgd" and LARS(0.1, nesterov=True).kind.value == "lars_nesterov"


# --------------------------------------------------------------------------------------
# schedule
# --------------------------------------------------------------------------------------


def test_cosine_schedule_matches_torch_at_epochs_and_warms_up():
    sched = CosineAnnealingLR(T_max=10, eta_min=0.01)
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.5)
    ref = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10, eta_min=0.01)
    for epoch in range(11):
        assert sched.lr(0.5, epoch) == pytest.approx(opt.param_groups[0]["lr"], rel=1e-9)
        opt.step()
        ref.step()
    assert sched.lr(0.5, 12) == 0.01  # after T_max: eta_min (torch's recursion would turn back up)
    warm = CosineAnnealingLR(T_max=10, warmup_epochs=2, warmup_start_lr=0.1)
    assert warm.lr(0.5, 0) == 0.1 and warm.lr(0.5, 1) == pytest.approx(0.3) and warm.lr(0.5, 2) == 0.5
    assert warm.lr(0.5, 6) == pytest.approx(0.25)
    with pytest.raises(ValueError, match="warmup_epochs"):
        CosineAnnealingLR(T_max=2, warmup_epochs=2)


def test_learning_rate_is_stepped_per_batch():
    """The arena's lr follows the schedule at every step's fractional epoch (step / steps per epoch)."""
    task = Task("mlp_digits", (8, 8, 1), 10, 4, optimizer=SGD(lr=0.2), scheduler=CosineAnnealingLR(T_max=3))
    x, y = batch(10)
    task.compile(train_size=10)
    assert task.steps_per_epoch == 3
    seen = []
    for _ in range(4):
        task.train_step(x[:4], y[:4])
        seen.append(task.exe.get_scalar("lr"))
    expect = [0.2 * (1 + math.cos(math.pi * (s / 3) / 3)) / 2 for s in range(4)]
    assert np.allclose(seen, expect, rtol=1e-6)
    task.fit((x, y), epochs=1)
    assert task.steps == 7 and task.lr == pytest.approx(0.2 * (1 + math.cos(math.pi * (7 / 3) / 3)) / 2)


def test_naming_table_covers_every_trained_region():
    """Every trainable region (W_*, except the BN-folded W_EQ_* of inference) and the BN running
    statistics (B_NEXT_*) have a naming rule (memplan-name-parameters) and a Task view; nothing
    else does, and the dialect's STATE_REGIONS (the regions a name may sit on) are the same set."""
    from tr_mlir.dialects.memplan import STATE_REGIONS, MemRegion
    from tr_mlir.passes.memplan_name_parameters import NAMING
    from tr_mlir.task import BUFFER_REGIONS, VIEWS

    trained = {r for r in MemRegion if r.name.startswith("W_") and not r.name.startswith("W_EQ_")}
    stats = {MemRegion.B_NEXT_MEAN, MemRegion.B_NEXT_VAR}
    assert set(NAMING) == set(VIEWS) == set(STATE_REGIONS) == trained | stats
    assert BUFFER_REGIONS == stats


def test_batch_norm_over_one_sample_is_refused_at_compile_time_and_drop_last_fixes_it():
    """Issue 15, item 2: 17 samples at batch 8 leave a last batch of one; a BN1d there would
    normalize over a single value per channel (PyTorch raises, the seed trained silently)."""
    from tr_mlir.blueprint import bn, fc, flatten, relu, seq

    net = seq(flatten(), fc(16, True), bn(), relu(), fc(10, True))
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((17, 4, 4, 1)).astype(np.float32), rng.integers(0, 10, 17)
    task = tr_mlir.Task(net, (4, 4, 1), 10, 8)
    with pytest.raises(tr_mlir.TaskError) as e:
        task.fit((x, y), epochs=1)
    msg = str(e.value)
    assert "'arch.bn1d' op would normalize over a single value per channel" in msg
    assert "train_last (batch 1, 1x1 map)" in msg and "drop_last" in msg
    # a 2d batch norm on a 1x1 map is the same case; on a 2x2 map a batch of one is fine
    from tr_mlir.blueprint import cbr, gap_fc

    for hw, ok in ((1, False), (2, True)):
        t2 = tr_mlir.Task(seq(cbr(8, 1, 1, 0), gap_fc(10, True)), (hw, hw, 1), 10, 8)
        if ok:
            t2.compile(17, 8)
        else:
            with pytest.raises(tr_mlir.TaskError, match="single value per channel"):
                t2.compile(17, 8)
    hist = task.fit((x, y), epochs=2, drop_last=True)
    assert task.train_size == 16 and task.steps == 4
    # the same steps by hand: each epoch's shuffled order without its last (partial) batch
    from tr_mlir.data import iterate_batches

    by_hand = tr_mlir.Task(net, (4, 4, 1), 10, 8)
    by_hand.compile(16, 8)
    losses = [[by_hand.train_step(b.x.copy(), b.y.copy()) for b in iterate_batches(x, y, 8, shuffle=True, seed=e,
                                                                                   drop_last=True)]
              for e in range(2)]
    assert [h["train_loss"] for h in hist] == pytest.approx([np.mean(ls) for ls in losses], rel=1e-6)
    for (name, a), (_, b) in zip(task.parameters(), by_hand.parameters(), strict=True):
        assert np.array_equal(a, b), name
    assert task.epoch_samples(17, drop_last=True) == 16 and task.epoch_samples(17) == 17
    with pytest.raises(tr_mlir.TaskError, match="leaves no batch"):
        task.epoch_samples(7, drop_last=True)


@pytest.mark.parametrize("shape,net", [
    ((4, 8, 1), lambda: bp.seq(bp.cbr(8, 3, 1, 1), bp.gap_fc(10, True))),
    ((8, 4, 1), lambda: bp.seq(bp.conv(8, 3, 1, 1), bp.relu(), bp.flatten(), bp.fc(10, True))),
    ((6, 10, 3), lambda: bp.seq(bp.cbr(8, 3, 1, 1), bp.maxpool(2, 2, 0), bp.gap_fc(10, True))),
])
def test_non_square_inputs_train_and_predict(shape, net):
    """Issue 15, item 1: (4, 8, 1) planned its input buffer as 4x4 (a raw NumPy broadcast error at
    the first step), (8, 4, 1) with a 3x3 conv failed to compile (an im2col workspace sized for
    8x8). Both train, evaluate and predict, at the model's (H, W)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, *shape)).astype(np.float32)
    y = rng.integers(0, 10, 6)
    task = Task(net(), shape, 10, 2)
    task.compile(6, 6)
    data = task.exe.tensors[task.exe.ids["data_a"]]
    assert tuple(data.shape[1:3]) == shape[:2]
    losses = [task.train_step(x[i:i + 2], y[i:i + 2]) for i in (0, 2, 4)]
    assert all(0.5 < loss < 10 for loss in losses)
    assert task.predict(x).shape == (6, 10)
    assert 0 <= task.evaluate(x, y)["top1"] <= 1


@pytest.mark.parametrize("fuse", [False, True])
@pytest.mark.parametrize("net", [
    lambda: bp.seq(bp.flatten(), bp.fc(10, True)),
    lambda: bp.seq(bp.flatten(), bp.relu(), bp.fc(10, True)),
], ids=["flatten-fc", "flatten-relu-fc"])
def test_leading_flatten_trains_on_a_1x1_input_like_on_2x2(net, fuse):
    """Issue 15, item 6: `seq(flatten(), fc(...))` on 1x1xC was refused ("'arch.fc' op cannot be
    the first layer"): arch-normalize-flatten deleted the user's flatten and, the input not being
    spatial, put none back. On 1x1x4 it trains exactly as on 2x2x1 (the same four features)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 2, 2, 1)).astype(np.float32)
    y = rng.integers(0, 10, 8)
    runs = []
    for shape in ((2, 2, 1), (1, 1, 4)):
        task = Task(net(), shape, 10, 4, fuse=fuse, seed=0)
        task.compile(8, 8)
        xs = x.reshape(8, *shape)
        losses = [task.train_step(xs[i:i + 4], y[i:i + 4]) for i in (0, 4, 0)]
        runs.append((losses, task.parameters(), task.predict(xs)))
    (losses_2x2, params_2x2, probs_2x2), (losses_1x1, params_1x1, probs_1x1) = runs
    assert all(math.isfinite(loss) for loss in losses_1x1)
    assert losses_1x1 == losses_2x2
    assert [n for n, _ in params_1x1] == ["fc0.weight", "fc0.bias"]
    for (_, a), (_, b) in zip(params_1x1, params_2x2):
        assert np.array_equal(a, b)
    assert np.array_equal(probs_1x1, probs_2x2)
