"""tr_mlir.augment's vectorized transforms against independent references: RandomAffine against
torch's ``grid_sample`` (bilinear, the same per-sample maps), RandomCrop / HorizontalFlip against
per-sample slicing with the same random draws, and the per-channel fill value."""

from __future__ import annotations

import numpy as np
import pytest

from tr_mlir import augment as A

torch = pytest.importorskip("torch")
RNG = np.random.default_rng(3)


def affine_reference(x: np.ndarray, u: np.ndarray, degrees: float, translate: float, scale, fill) -> np.ndarray:
    """RandomAffine's map (module doc of tr_mlir.augment) sampled by torch's grid_sample: bilinear,
    align_corners=True (normalized -1 / +1 are the first / last pixel centres), zero padding
    applied to ``x - fill`` (bilinear weights sum to 1, so this is padding with ``fill``)."""
    n, h, w, c = x.shape
    theta = np.deg2rad((2 * u[0] - 1) * degrees)
    s = scale[0] + (scale[1] - scale[0]) * u[1]
    tx, ty = (2 * u[2] - 1) * translate * w, (2 * u[3] - 1) * translate * h
    cy, cx = (h - 1) / 2, (w - 1) / 2
    i, j = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    ox = j[None] - cx - tx[:, None, None]
    oy = i[None] - cy - ty[:, None, None]
    cos, sin = (np.cos(theta) / s)[:, None, None], (np.sin(theta) / s)[:, None, None]
    sx, sy = cos * ox - sin * oy + cx, sin * ox + cos * oy + cy
    grid = np.stack([2 * sx / (w - 1) - 1, 2 * sy / (h - 1) - 1], axis=-1)
    src = torch.from_numpy((x - fill).transpose(0, 3, 1, 2).astype(np.float64))
    out = torch.nn.functional.grid_sample(src, torch.from_numpy(grid), mode="bilinear", padding_mode="zeros",
                                          align_corners=True)
    return out.numpy().transpose(0, 2, 3, 1) + fill


@pytest.mark.parametrize("shape", [(32, 28, 28, 1), (9, 11, 7, 3)])
@pytest.mark.parametrize("params", [(10.0, 0.1, (0.9, 1.1)), (45.0, 0.3, (0.5, 1.6))])
def test_affine_matches_grid_sample(shape, params):
    x = RNG.standard_normal(shape).astype(np.float32)
    out = A.RandomAffine(*params)(x, np.random.default_rng(11))
    u = np.random.default_rng(11).random((4, shape[0]))  # the transform's draws (its doc)
    fill = x.reshape(-1, shape[-1]).min(axis=0)
    ref = affine_reference(x.astype(np.float64), u, *params, fill)
    assert out.dtype == np.float32 and out.shape == x.shape
    np.testing.assert_allclose(out, ref, atol=2e-4)  # float32 source coordinates: ~1e-5 pixels
    # a fixed fill: the border takes it
    fixed = A.RandomAffine(*params, fill=-5.0)(x, np.random.default_rng(11))
    np.testing.assert_allclose(fixed, affine_reference(x.astype(np.float64), u, *params, -5.0), atol=2e-4)


@pytest.mark.parametrize("c", [1, 3])
def test_crop_and_flip_match_per_sample_slicing(c):
    x = RNG.standard_normal((40, 10, 12, c)).astype(np.float32)
    p = 3
    out = A.RandomCrop(p)(x, np.random.default_rng(5))
    off = np.random.default_rng(5).integers(0, 2 * p + 1, size=(40, 2))
    fill = np.array([x[..., k].min() for k in range(c)], np.float32)
    padded = np.empty((40, 10 + 2 * p, 12 + 2 * p, c), np.float32)
    padded[...] = fill
    padded[:, p:-p, p:-p] = x
    ref = np.stack([padded[i, a:a + 10, b:b + 12] for i, (a, b) in enumerate(off)])
    assert out.flags.c_contiguous and np.array_equal(out, ref)
    flipped = A.HorizontalFlip(0.3)(x, np.random.default_rng(6))
    which = np.random.default_rng(6).random(40) < 0.3
    assert np.array_equal(flipped, np.stack([a[:, ::-1] if f else a for a, f in zip(x, which)]))
    # the preset's composition draws crop offsets, then flip coins, from one generator
    both = A.preset("cifar")(x, np.random.default_rng(8))
    g = np.random.default_rng(8)
    assert np.array_equal(both, A.HorizontalFlip(0.5)(A.RandomCrop(4)(x, g), g))


def test_inputs_are_not_modified_and_outputs_are_fresh():
    x = RNG.standard_normal((6, 8, 8, 3)).astype(np.float32)
    keep = x.copy()
    for t in (A.RandomCrop(2), A.HorizontalFlip(1.0), A.RandomAffine(), A.preset("cifar")):
        out = t(x, np.random.default_rng(0))
        assert np.array_equal(x, keep) and not np.shares_memory(out, x)
        out[...] = 0  # writable


@pytest.mark.parametrize("shape", [(16, 28, 28, 1), (5, 9, 13, 3)])
def test_affine_c_kernel_is_bit_identical_to_numpy(shape, monkeypatch):
    from tr_mlir.lowering.cpu import _cc

    if not _cc.available():
        pytest.skip(f"no compiled kernels: {_cc.reason()}")
    x = RNG.standard_normal(shape).astype(np.float32)
    t = A.RandomAffine(30.0, 0.4, (0.6, 1.5))  # large maps: many samples clamp to the border
    compiled = t(x, np.random.default_rng(9))
    monkeypatch.setenv(_cc.ENV_SWITCH, "0")
    assert A._affine_kernel(*shape[1:]) is None
    assert np.array_equal(compiled, t(x, np.random.default_rng(9)))
