"""Host data augmentation: vectorized NumPy transforms of a float32 NHWC batch, seeded.

A transform is a callable ``t(x, rng) -> x`` over a batch ``x`` of shape ``(N, H, W, C)``
float32 (already normalized, as :mod:`tr_mlir.data` loads it) with a
``numpy.random.Generator``; it returns a new array of the same shape and dtype (the input is
never modified). :class:`Compose` chains transforms. Every random draw is one vectorized call
per batch, so a batch costs a few passes over its pixels, not a Python loop over samples.

Transforms (the semantics follow torchvision's of the same name; the formulas are re-derived
here, not copied):

* :class:`RandomCrop` ``(padding)``: pad each side by ``padding`` pixels with the fill value,
  then crop the original ``H x W`` at a uniformly random offset in ``[0, 2 * padding]`` per
  sample (torchvision ``RandomCrop(size, padding)``, constant padding).
* :class:`HorizontalFlip` ``(p)``: mirror the W axis of each sample with probability ``p``
  (torchvision ``RandomHorizontalFlip``).
* :class:`RandomAffine` ``(degrees, translate, scale)``: per sample a rotation angle
  ``U(-degrees, degrees)`` (degrees, counter-clockwise in image coordinates), a translation of
  ``U(-translate * W, translate * W)`` x ``U(-translate * H, translate * H)`` pixels (not rounded)
  and a scale ``U(scale[0], scale[1])`` about the image centre ``((H - 1) / 2, (W - 1) / 2)``;
  the output is sampled bilinearly from the inverse map, pixels outside the source take the fill
  value (torchvision ``RandomAffine`` with bilinear interpolation).

Fill value: ``fill=None`` (the default) is the batch's per-channel minimum, i.e. the normalized
value of a black pixel for MNIST / digits / CIFAR batches (a padded border must look like the
background, and after normalization black is not 0). A number is used as is.

Reproducibility: :func:`epoch_rng` gives the generator of an epoch from the task seed and the
epoch index; the batches of an epoch draw from it in order, so a run (and a resumed run) sees
the same augmented batches. Presets (:data:`PRESETS`, ``tr-train --augment``): ``cifar``
(crop 4 + flip), ``digits`` / ``mnist`` (affine: 10 degrees, 10 % translation, scale 0.9..1.1),
``flip``, ``crop``.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from tr_mlir.errors import TrMlirError

__all__ = ["AugmentError", "Compose", "HorizontalFlip", "PRESETS", "RandomAffine", "RandomCrop",
           "epoch_rng", "from_config", "prefetch", "preset"]


class AugmentError(TrMlirError, ValueError):
    """A bad transform argument or configuration (the message names it)."""


def _batch(x: Any, who: str) -> np.ndarray:
    if not isinstance(x, np.ndarray) or x.dtype != np.float32 or x.ndim != 4:
        got = f"{x.dtype} {x.shape}" if isinstance(x, np.ndarray) else type(x).__name__
        raise AugmentError(f"{who}: expected a float32 (N, H, W, C) batch, got {got}")
    return x


def _fill(x: np.ndarray, fill: float | None) -> np.ndarray:
    """Per-channel fill values ``(C,)`` float32 (module doc)."""
    if fill is None:
        return x.min(axis=(0, 1, 2)) if x.size else np.zeros(x.shape[-1], np.float32)
    return np.full(x.shape[-1], fill, np.float32)


class RandomCrop:
    """Pad by ``padding`` pixels (fill value, module doc) and crop back to ``H x W`` at a random
    offset per sample (torchvision ``RandomCrop(size=(H, W), padding=padding)``).

    Args:
        padding: pixels added on each side (int >= 0; 0 is the identity).
        fill: the border value (None: the per-channel batch minimum).

    Raises:
        AugmentError: a negative or non-integer padding.
    """

    def __init__(self, padding: int = 4, fill: float | None = None):
        if isinstance(padding, bool) or not isinstance(padding, int) or padding < 0:
            raise AugmentError(f"RandomCrop: padding must be an integer >= 0, got {padding!r}")
        self.padding, self.fill = padding, fill

    def __call__(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The cropped batch ``(N, H, W, C)`` float32; draws ``2 N`` integers from ``rng``."""
        x = _batch(x, "RandomCrop")
        n, h, w, c = x.shape
        p = self.padding
        if p == 0 or n == 0:
            return x.copy()
        padded = np.empty((n, h + 2 * p, w + 2 * p, c), np.float32)
        padded[...] = _fill(x, self.fill)
        padded[:, p:p + h, p:p + w] = x
        off = rng.integers(0, 2 * p + 1, size=(n, 2))
        rows = off[:, 0, None] + np.arange(h)  # (N, H)
        cols = off[:, 1, None] + np.arange(w)  # (N, W)
        return padded[np.arange(n)[:, None, None], rows[:, :, None], cols[:, None, :]]

    def config(self) -> dict[str, Any]:
        return {"kind": "crop", "padding": self.padding, "fill": self.fill}

    def __repr__(self) -> str:
        return f"RandomCrop(padding={self.padding}, fill={self.fill})"


class HorizontalFlip:
    """Mirror the W axis of each sample with probability ``p`` (torchvision
    ``RandomHorizontalFlip(p)``). Raises :class:`AugmentError` for ``p`` outside [0, 1]."""

    def __init__(self, p: float = 0.5):
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
            raise AugmentError(f"HorizontalFlip: p must be in [0, 1], got {p!r}")
        self.p = float(p)

    def __call__(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The batch with a random subset of samples mirrored; draws ``N`` uniforms from ``rng``."""
        x = _batch(x, "HorizontalFlip")
        out = x.copy()
        flip = rng.random(x.shape[0]) < self.p
        out[flip] = x[flip, :, ::-1]
        return out

    def config(self) -> dict[str, Any]:
        return {"kind": "flip", "p": self.p}

    def __repr__(self) -> str:
        return f"HorizontalFlip(p={self.p})"


class RandomAffine:
    """Random rotation, translation and scale about the image centre, bilinear (module doc;
    torchvision ``RandomAffine(degrees, translate=(t, t), scale=scale)``, interpolation bilinear,
    translations not rounded to whole pixels).

    Args:
        degrees: maximum rotation in degrees (>= 0).
        translate: maximum translation as a fraction of the width / height, in [0, 1).
        scale: ``(low, high)`` zoom range, ``0 < low <= high``.
        fill: the value outside the source image (None: the per-channel batch minimum).

    Raises:
        AugmentError: an argument outside these ranges.
    """

    def __init__(self, degrees: float = 10.0, translate: float = 0.1,
                 scale: Sequence[float] = (0.9, 1.1), fill: float | None = None):
        if not np.isfinite(degrees) or degrees < 0:
            raise AugmentError(f"RandomAffine: degrees must be >= 0, got {degrees!r}")
        if not np.isfinite(translate) or not 0 <= translate < 1:
            raise AugmentError(f"RandomAffine: translate must be in [0, 1), got {translate!r}")
        if len(scale) != 2 or not 0 < scale[0] <= scale[1] or not np.isfinite(scale[1]):
            raise AugmentError(f"RandomAffine: scale must be (low, high) with 0 < low <= high, got {scale!r}")
        self.degrees, self.translate, self.scale, self.fill = float(degrees), float(translate), \
            (float(scale[0]), float(scale[1])), fill

    def __call__(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The transformed batch ``(N, H, W, C)`` float32; draws ``4 N`` uniforms from ``rng``
        (angle, scale, x shift, y shift)."""
        x = _batch(x, "RandomAffine")
        n, h, w, c = x.shape
        if n == 0:
            return x.copy()
        u = rng.random((4, n))
        theta = np.deg2rad((2 * u[0] - 1) * self.degrees)
        s = self.scale[0] + (self.scale[1] - self.scale[0]) * u[1]
        tx = (2 * u[2] - 1) * self.translate * w
        ty = (2 * u[3] - 1) * self.translate * h
        cy, cx = (h - 1) / 2.0, (w - 1) / 2.0
        # inverse map: src = R(-theta) (out - c - t) / s + c, in (x right, y down) pixel
        # coordinates, so a positive angle turns the content counter-clockwise on screen
        # (np.rot90's direction at 90 degrees)
        cos, sin = (np.cos(theta) / s)[:, None, None], (np.sin(theta) / s)[:, None, None]
        oy = np.arange(h, dtype=np.float64)[None, :, None] - cy - ty[:, None, None]
        ox = np.arange(w, dtype=np.float64)[None, None, :] - cx - tx[:, None, None]
        sx = cos * ox - sin * oy + cx  # (N, H, W)
        sy = sin * ox + cos * oy + cy
        # sample a copy padded by one fill pixel on every side; coordinates clamped into it
        padded = np.empty((n, h + 2, w + 2, c), np.float32)
        padded[...] = _fill(x, self.fill)
        padded[:, 1:-1, 1:-1] = x
        sx = np.clip(sx + 1.0, 0.0, w + 1.0)
        sy = np.clip(sy + 1.0, 0.0, h + 1.0)
        x0 = np.minimum(np.floor(sx).astype(np.int64), w)
        y0 = np.minimum(np.floor(sy).astype(np.int64), h)
        fx = (sx - x0).astype(np.float32)[..., None]
        fy = (sy - y0).astype(np.float32)[..., None]
        flat = padded.reshape(n, (h + 2) * (w + 2), c)
        base = y0 * (w + 2) + x0

        def at(offset: int) -> np.ndarray:
            idx = (base + offset).reshape(n, h * w, 1)
            return np.take_along_axis(flat, idx, axis=1).reshape(n, h, w, c)

        top = at(0) * (1 - fx) + at(1) * fx
        bottom = at(w + 2) * (1 - fx) + at(w + 3) * fx
        return (top * (1 - fy) + bottom * fy).astype(np.float32, copy=False)

    def config(self) -> dict[str, Any]:
        return {"kind": "affine", "degrees": self.degrees, "translate": self.translate,
                "scale": list(self.scale), "fill": self.fill}

    def __repr__(self) -> str:
        return f"RandomAffine(degrees={self.degrees}, translate={self.translate}, scale={self.scale})"


class Compose:
    """Apply ``transforms`` in order (each ``t(x, rng) -> x``, module doc). Raises
    :class:`AugmentError` when one is not callable."""

    def __init__(self, transforms: Iterable[Callable[[np.ndarray, np.random.Generator], np.ndarray]]):
        self.transforms = list(transforms)
        for t in self.transforms:
            if not callable(t):
                raise AugmentError(f"Compose: {t!r} is not a transform (a callable t(x, rng) -> x)")

    def __call__(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The batch after every transform; ``x`` is not modified."""
        x = _batch(x, "Compose")
        out = x
        for t in self.transforms:
            out = t(out, rng)
        return out if out is not x else x.copy()

    def config(self) -> dict[str, Any]:
        """JSON-able description (:func:`from_config` rebuilds it); transforms of this module only."""
        for t in self.transforms:
            if not hasattr(t, "config"):
                raise AugmentError(f"Compose.config: {t!r} has no config() (only tr_mlir.augment transforms save)")
        return {"kind": "compose", "transforms": [t.config() for t in self.transforms]}

    def __repr__(self) -> str:
        return f"Compose({self.transforms!r})"


_KINDS: dict[str, Callable[..., Any]] = {
    "crop": lambda c: RandomCrop(c["padding"], c.get("fill")),
    "flip": lambda c: HorizontalFlip(c["p"]),
    "affine": lambda c: RandomAffine(c["degrees"], c["translate"], tuple(c["scale"]), c.get("fill")),
    "compose": lambda c: Compose(from_config(t) for t in c["transforms"]),
}


def from_config(config: dict[str, Any]) -> Any:
    """The transform a ``config()`` dict describes. Raises :class:`AugmentError` for an unknown
    kind or missing fields."""
    try:
        return _KINDS[config["kind"]](config)
    except (KeyError, TypeError) as e:
        raise AugmentError(f"not an augmentation config: {config!r} ({type(e).__name__}: {e})") from None


PRESETS: dict[str, Callable[[], Compose]] = {
    "cifar": lambda: Compose([RandomCrop(4), HorizontalFlip(0.5)]),
    "mnist": lambda: Compose([RandomAffine(10.0, 0.1, (0.9, 1.1))]),
    "digits": lambda: Compose([RandomAffine(10.0, 0.1, (0.9, 1.1))]),
    "crop": lambda: Compose([RandomCrop(4)]),
    "flip": lambda: Compose([HorizontalFlip(0.5)]),
}
"""``tr-train --augment`` name -> pipeline (module doc)."""


def preset(name: str) -> Compose:
    """The :data:`PRESETS` pipeline ``name``; raises :class:`AugmentError` for another name."""
    if name not in PRESETS:
        raise AugmentError(f"unknown augmentation preset {name!r}; choose from {', '.join(PRESETS)}")
    return PRESETS[name]()


def epoch_rng(seed: int, epoch: int) -> np.random.Generator:
    """The generator of epoch ``epoch`` (0-based) of a run seeded ``seed`` (module doc)."""
    return np.random.default_rng([int(seed), 0xA46, int(epoch)])


def prefetch(batches: Iterable[tuple[np.ndarray, np.ndarray]], transform: Any, rng: np.random.Generator,
             depth: int = 2) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Augment ``batches`` (``(x, y)`` pairs) on a background thread, ``depth`` batches ahead,
    in order (so the random stream is the one a serial loop draws). Each yielded pair is a fresh
    copy (the source batches may be reused buffers). NumPy releases the GIL in its array loops,
    so the augmentation overlaps the step's kernels where cores allow. An exception in the
    thread is raised in the consumer."""
    q: queue.Queue = queue.Queue(maxsize=max(1, depth))
    done = object()
    stop = threading.Event()

    def work() -> None:
        try:
            for x, y in batches:
                if stop.is_set():
                    return
                q.put((transform(x, rng), np.array(y)))
            q.put(done)
        except BaseException as e:  # handed to the consumer
            q.put(e)

    th = threading.Thread(target=work, name="tr-augment", daemon=True)
    th.start()
    try:
        while True:
            item = q.get()
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        while th.is_alive():
            try:
                q.get_nowait()
            except queue.Empty:
                th.join(0.01)
