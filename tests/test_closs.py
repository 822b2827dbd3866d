"""The compiled softmax cross-entropy forward (lowering/cpu/_closs.py) against the NumPy path
(``TR_MLIR_CC=0``) and PyTorch: probabilities and loss to rounding, predictions and top-1 / top-5
counts exactly, including short batches, NaN rows, fewer than 5 classes and bad labels."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tr_mlir.lowering.cpu import KERNELS, _cc, _closs

F32 = np.float32


@pytest.fixture(autouse=True)
def _compiled_kernels_on(monkeypatch):
    """These tests test the compiled kernel: a ``TR_MLIR_CC=0`` in the environment (the suite's
    NumPy-path run) must not switch it off; the NumPy side sets it itself. Skipped only where no
    C compiler works."""
    monkeypatch.delenv(_cc.ENV_SWITCH, raising=False)
    if not _cc.available():
        pytest.skip(f"no usable C compiler ({_cc.reason()}): the compiled softmax-CE is untested")


def _forward(logits, labels, b, ls, numpy_path, monkeypatch, pred=True):
    n, k = labels.size, logits.shape[-1]
    out = dict(probs=np.full((n, k), 7.0, F32), loss=np.zeros(1, F32), top1=np.zeros(1, F32),
               top5=np.zeros(1, F32), pred=np.full(n, -1, np.int32) if pred else None, inv_batch=np.zeros(1, F32))
    calls = []
    compiled = _closs.forward
    with monkeypatch.context() as m:
        if numpy_path:
            m.setenv(_cc.ENV_SWITCH, "0")
        m.setattr(_closs, "forward", lambda *a: calls.append(1) or compiled(*a))
        try:
            with np.errstate(invalid="ignore", over="ignore"):
                KERNELS["softmax_ce_fwd"](logits=logits, labels=labels, batch_size=np.array([b], np.int32),
                                          label_smoothing=np.array([ls], F32), **out)
        finally:
            assert len(calls) == (0 if numpy_path else 1), "the path under test did not run"
    return out


def _both(logits, labels, b, ls, monkeypatch, pred=True):
    c = _forward(logits, labels, b, ls, False, monkeypatch, pred)
    ref = _forward(logits, labels, b, ls, True, monkeypatch, pred)
    np.testing.assert_allclose(c["probs"], ref["probs"], rtol=2e-6, atol=1e-9)
    np.testing.assert_allclose(c["loss"], ref["loss"], rtol=2e-6, atol=1e-7)
    for key in ("top1", "top5", "inv_batch"):
        np.testing.assert_array_equal(c[key], ref[key], err_msg=key)
    if pred:
        np.testing.assert_array_equal(c["pred"], ref["pred"])
    return c


@pytest.mark.parametrize("ls", [0.0, 0.1])
@pytest.mark.parametrize("n,k,b", [(128, 10, 128), (200, 10, 200), (9, 3, 9), (8, 6, 5), (5, 1000, 5), (4, 5, 0)])
def test_compiled_forward_matches_numpy_and_torch(n, k, b, ls, monkeypatch):
    rng = np.random.default_rng(n * k + b)
    logits = (rng.standard_normal((n, 1, 1, k)) * 4).astype(F32)
    logits[0, 0, 0, :2] = logits[0].max() + 1  # a tie for the maximum: the first wins
    labels = rng.integers(0, k, n).astype(np.int32)
    c = _both(logits, labels, b, ls, monkeypatch)
    z = torch.tensor(logits.reshape(n, k))
    torch.testing.assert_close(torch.tensor(c["probs"]), torch.softmax(z, 1), rtol=1e-5, atol=1e-7)
    assert c["pred"][0] == 0
    if b:
        loss = torch.nn.CrossEntropyLoss(label_smoothing=ls)(z[:b], torch.tensor(labels[:b], dtype=torch.long))
        assert c["loss"][0] == pytest.approx(float(loss), rel=1e-5)
        top1 = (z[:b].argmax(1).numpy() == labels[:b]).mean()
        assert c["top1"][0] == pytest.approx(top1)
    else:
        assert c["loss"][0] == 0 and c["top1"][0] == 0


def test_compiled_forward_nan_rows_are_misses_and_predict_the_first_nan(monkeypatch):
    rng = np.random.default_rng(3)
    n, k = 6, 10
    logits = rng.standard_normal((n, k)).astype(F32)
    labels = logits.argmax(1).astype(np.int32)  # every finite row is a hit
    logits[1, 3] = np.nan
    logits[2, :] = np.nan
    logits[3, 7] = np.inf
    logits[4, 0] = np.nan
    c = _both(logits, labels, n, 0.0, monkeypatch)
    assert c["top1"][0] == pytest.approx(2 / n) and c["top5"][0] == pytest.approx(2 / n)
    assert list(c["pred"][1:5]) == [3, 0, 7, 0]


def test_compiled_forward_without_predictions(monkeypatch):
    rng = np.random.default_rng(4)
    logits = rng.standard_normal((7, 4)).astype(F32)
    _both(logits, rng.integers(0, 4, 7).astype(np.int32), 7, 0.1, monkeypatch, pred=False)


def test_compiled_forward_bad_label_names_the_range(monkeypatch):
    logits = np.zeros((3, 4), F32)
    with pytest.raises(ValueError, match=r"expected labels in \[0, 4\), got values in \[0, 4\]"):
        _forward(logits, np.array([0, 4, 1], np.int32), 3, 0.0, False, monkeypatch)
    with pytest.raises(ValueError, match=r"expected labels in \[0, 4\), got values in \[-2, 1\]"):
        _forward(logits, np.array([0, -2, 1], np.int32), 3, 0.0, False, monkeypatch)
    # a bad label in a padding row (past B) is not read
    out = _forward(logits, np.array([0, 1, 9], np.int32), 2, 0.0, False, monkeypatch)
    assert out["loss"][0] == pytest.approx(np.log(4))


def test_usable_only_for_fp32_logits_and_int32_labels():
    z, p = np.zeros((2, 3), F32), np.zeros((2, 3), F32)
    lab = np.zeros(2, np.int32)
    assert _closs.usable(z, lab, p, None)
    assert not _closs.usable(z.astype(np.float16), lab, p, None)
    assert not _closs.usable(z, lab.astype(np.int64), p, None)
    assert not _closs.usable(np.zeros((3, 2), F32).T, lab, p, None)


@pytest.mark.parametrize("ls", [0.0, 0.1])
def test_compiled_forward_minus_inf_logits_as_torch(ls, monkeypatch):
    """A -inf logit (a masked class) is probability 0: the loss stays torch's, finite without
    label smoothing (no 0 * -inf) and +inf with it (torch's smoothing term is -log 0 there)."""
    logits = np.array([[0.0, 1.0, -np.inf, 2.0], [3.0, -np.inf, -np.inf, 0.5]], F32)
    labels = np.array([1, 0], np.int32)
    c = _both(logits, labels, 2, ls, monkeypatch)
    want = torch.nn.CrossEntropyLoss(label_smoothing=ls)(torch.tensor(logits), torch.tensor(labels, dtype=torch.long))
    if ls == 0.0:
        assert np.isfinite(c["loss"][0]) and c["loss"][0] == pytest.approx(float(want), rel=1e-6)
    else:
        assert c["loss"][0] == float(want) == np.inf
    np.testing.assert_array_equal(c["probs"][:, 2], 0.0)
