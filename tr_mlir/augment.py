"""Host data augmentation: vectorized NumPy transforms of a float32 NHWC batch, seeded.

A transform is a callable ``t(x, rng) -> x`` over a batch ``x`` of shape ``(N, H, W, C)``
float32 (already normalized, as :mod:`tr_mlir.data` loads it) with a
``numpy.random.Generator``; it returns a new array of the same shape and dtype (the input is
never modified). :class:`Compose` chains transforms. Every random draw is one vectorized call
per batch, so a batch costs a few passes over its pixels, not a Python loop over samples: a crop
is one gather from a strided view of the padded batch's windows, a flip moves whole pixels, an
affine map computes float32 coordinates and gathers the four bilinear corners with flat ``take``
calls, or in one generated C pass where compiled kernels are available (same bits; batch 128 on
one core of the 2-core dev machine, quiet: MNIST affine ~0.7 ms in NumPy, CIFAR crop + flip
~0.6 ms; ``python -m bench.augment``). NumPy and the C pass release the GIL while they work.

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

import ctypes
import functools
import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from tr_mlir.errors import TrMlirError
from tr_mlir.lowering.cpu import _cc

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
    n, c = x.shape[0], x.shape[-1]
    if fill is not None:
        return np.full(c, fill, np.float32)
    if x.size == 0:
        return np.zeros(c, np.float32)
    if c == 1:
        return x.min().reshape(1)
    # the minimum over samples first (whole contiguous images), then over the H * W pixels: a
    # reduction over axes (0, 1, 2) at once walks the batch C-strided and is ~20x slower for C = 3
    return x.reshape(n, -1).min(axis=0).reshape(-1, c).min(axis=0)


def _padded(x: np.ndarray, fill: np.ndarray, before: int, after: int) -> np.ndarray:
    """``x`` ``(N, H, W, C)`` inside a border of ``fill`` (``(C,)``): ``before`` rows / columns
    ahead of the image, ``after`` behind it; ``(N, H + before + after, W + before + after, C)``
    float32. (Every row is filled as one contiguous run, then the image copied in: a fill of the
    border strips alone broadcasts ``C`` values at a time and is ~5x slower.)"""
    n, h, w, c = x.shape
    hp, wp = h + before + after, w + before + after
    out = np.empty((n, hp, wp, c), np.float32)
    out.reshape(n, hp, wp * c)[...] = np.tile(fill, wp)
    out[:, before:before + h, before:before + w] = x
    return out


def _pixels(a: np.ndarray) -> np.ndarray:
    """``a`` ``(..., W, C)`` contiguous float32 viewed with each pixel's ``C`` channels as one
    opaque item ``(..., W)``: NumPy copies an item per index (one ``memcpy``-sized move) where a
    C-wide float axis would be walked in steps of 4 bytes."""
    return a.view(np.dtype((np.void, 4 * a.shape[-1])))[..., 0]


def _windows(padded: np.ndarray, h: int, w: int) -> np.ndarray:
    """Every ``h x w`` window of ``padded`` ``(N, Hp, Wp, ...)`` as a read-only view
    ``(N, Hp - h + 1, Wp - w + 1, h, w, ...)``: ``[n, i, j]`` is the window at offset ``(i, j)``."""
    n, hp, wp = padded.shape[:3]
    s = padded.strides
    return np.lib.stride_tricks.as_strided(padded, (n, hp - h + 1, wp - w + 1, h, w, *padded.shape[3:]),
                                           (s[0], s[1], s[2], s[1], s[2], *s[3:]), writeable=False)


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
        """The cropped batch ``(N, H, W, C)`` float32; draws ``2 N`` integers from ``rng``
        (``(N, 2)``: row offset, column offset). One gather per batch: the padded batch's
        windows are a strided view, indexed by (sample, row offset, column offset)."""
        x = _batch(x, "RandomCrop")
        n, h, w, c = x.shape
        p = self.padding
        if p == 0 or n == 0:
            return x.copy()
        padded = _padded(x, _fill(x, self.fill), p, p)
        off = rng.integers(0, 2 * p + 1, size=(n, 2))
        return _windows(padded, h, w)[np.arange(n), off[:, 0], off[:, 1]]

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
        x = np.ascontiguousarray(_batch(x, "HorizontalFlip"))
        out = x.copy()
        flip = np.flatnonzero(rng.random(x.shape[0]) < self.p)
        if flip.size:  # whole pixels moved (_pixels), not C-strided floats
            _pixels(out)[flip] = _pixels(x)[flip, :, ::-1]
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
        (``(4, N)``: angle, scale, x shift, y shift).

        Cost: the per-sample map is formed in float64 on ``N`` values; the per-pixel work is
        float32 source coordinates (a row term plus a column term), one float32 flat index per
        pixel (exact below 2**24 pixels, else float64) and four flat ``take`` gathers of the
        padded batch, combined in place. Where compiled kernels are available
        (:mod:`tr_mlir.lowering.cpu._cc`) the per-pixel work is one generated C pass instead
        (:data:`AFFINE_C`, the same float32 operations in the same order: bit-identical output,
        ~1.5x faster under load here, GIL released)."""
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
        # (np.rot90's direction at 90 degrees); + 1 for the padding below. Separable in the
        # output row i and column j: src_x = col_x[j] + row_x[i], src_y = col_y[j] + row_y[i]
        cos, sin = (np.cos(theta) / s)[:, None], (np.sin(theta) / s)[:, None]
        ox = np.arange(w) - cx - tx[:, None]  # (N, W)
        oy = np.arange(h) - cy - ty[:, None]  # (N, H)
        f32 = np.float32
        col_x, row_x = (cos * ox).astype(f32), (cx + 1.0 - sin * oy).astype(f32)
        col_y, row_y = (sin * ox).astype(f32), (cy + 1.0 + cos * oy).astype(f32)
        fill = _fill(x, self.fill)
        kernel = _affine_kernel(h, w, c)
        if kernel is not None:  # the same float32 operations in one C pass (bit-identical)
            x, out = np.ascontiguousarray(x), np.empty(x.shape, f32)
            terms = [np.ascontiguousarray(a) for a in (col_x, col_y, row_x, row_y, fill)]
            kernel(*(_cc.ptr(a) for a in (x, out, *terms)), n)
            return out
        sx = np.add(col_x[:, None, :], row_x[:, :, None])
        sy = np.add(col_y[:, None, :], row_y[:, :, None])
        # sample a copy padded by one fill pixel before and two after on both axes, coordinates
        # clamped into [0, W + 1] x [0, H + 1]: every corner (x0 + 1, y0 + 1) is inside
        hp, wp = h + 3, w + 3
        padded = _padded(x, fill, 1, 2)
        np.clip(sx, 0.0, w + 1.0, out=sx)
        np.clip(sy, 0.0, h + 1.0, out=sy)
        x0, y0 = np.floor(sx), np.floor(sy)
        fx, fy = np.subtract(sx, x0, out=sx), np.subtract(sy, y0, out=sy)
        exact = f32 if n * hp * wp < 2 ** 24 else np.float64  # integers exact in the index dtype
        lin = np.multiply(y0, wp, dtype=exact)
        lin += x0
        lin += (np.arange(n, dtype=exact) * (hp * wp))[:, None, None]
        idx = lin.astype(np.intp)
        flat = padded.reshape(-1) if c == 1 else _pixels(padded).reshape(-1)

        def corner(offset: int) -> np.ndarray:  # the pixel at idx + offset: a take of a shifted view
            got = flat[offset:].take(idx)
            return got if c == 1 else got.view(np.float32).reshape(n, h, w, c)

        if c > 1:
            fx, fy = fx[..., None], fy[..., None]
        top, right = corner(0), corner(1)  # top = top + fx (right - top), etc.
        right -= top
        right *= fx
        top += right
        bottom, corner_ = corner(wp), corner(wp + 1)
        corner_ -= bottom
        corner_ *= fx
        bottom += corner_
        bottom -= top
        bottom *= fy
        top += bottom
        return top.reshape(n, h, w, c)

    def config(self) -> dict[str, Any]:
        return {"kind": "affine", "degrees": self.degrees, "translate": self.translate,
                "scale": list(self.scale), "fill": self.fill}

    def __repr__(self) -> str:
        return f"RandomAffine(degrees={self.degrees}, translate={self.translate}, scale={self.scale})"


AFFINE_C = r"""
#include <math.h>
/* tr_mlir.augment.RandomAffine's bilinear resampling of float32 batches (N, %(H)d, %(W)d, %(C)d):
   out[s, i, j, :] samples x[s] at column sx = col_x[s, j] + row_x[s, i], row sy = col_y[s, j] +
   row_y[s, i] (the NumPy path's frame, shifted by + 1), clamped to [0, W + 1] x [0, H + 1]; a
   corner outside the image takes fill[c]. The operations and their order are the NumPy path's. */
void tr_affine_bilinear(const float* restrict x, float* restrict out, const float* restrict col_x,
                        const float* restrict col_y, const float* restrict row_x, const float* restrict row_y,
                        const float* restrict fill, int n) {
  enum { H = %(H)d, W = %(W)d, C = %(C)d };
  for (int s = 0; s < n; ++s) {
    const float* img = x + (long)s * H * W * C;
    for (int i = 0; i < H; ++i) {
      const float rx = row_x[s * H + i], ry = row_y[s * H + i];
      for (int j = 0; j < W; ++j) {
        float sx = col_x[s * W + j] + rx, sy = col_y[s * W + j] + ry;
        sx = sx < 0.0f ? 0.0f : (sx > W + 1.0f ? W + 1.0f : sx);
        sy = sy < 0.0f ? 0.0f : (sy > H + 1.0f ? H + 1.0f : sy);
        const float x0 = floorf(sx), y0 = floorf(sy);
        const float fx = sx - x0, fy = sy - y0;
        const int px = (int)x0 - 1, py = (int)y0 - 1; /* image coordinates of the top-left corner */
        const int in_l = px >= 0 && px < W, in_r = px + 1 < W, in_t = py >= 0 && py < H, in_b = py + 1 < H;
        const long q = ((long)py * W + px) * C;
        float* o = out + (((long)s * H + i) * W + j) * C;
        for (int c = 0; c < C; ++c) {
          const float f = fill[c];
          const float a = in_t && in_l ? img[q + c] : f, b = in_t && in_r ? img[q + C + c] : f;
          const float d = in_b && in_l ? img[q + W * C + c] : f, e = in_b && in_r ? img[q + W * C + C + c] : f;
          float top = b - a; top *= fx; top += a;
          float bot = e - d; bot *= fx; bot += d;
          float v = bot - top; v *= fy; v += top;
          o[c] = v;
        }
      }
    }
  }
}
"""
"""C source of :class:`RandomAffine`'s per-pixel pass, formatted with the image shape ``H``, ``W``, ``C``
(compiled once per shape; a corner is read only when it lies in the image)."""


def _affine_kernel(h: int, w: int, c: int) -> Any:
    """The compiled :data:`AFFINE_C` for ``(H, W, C)``, or None without compiled kernels
    (``TR_MLIR_CC=0``, no compiler: the NumPy path runs)."""
    if not _cc.available():
        return None
    return _affine_function(h, w, c)


@functools.lru_cache(maxsize=None)
def _affine_function(h: int, w: int, c: int) -> Any:
    return _cc.function(AFFINE_C % {"H": h, "W": w, "C": c}, "tr_affine_bilinear",
                        [ctypes.c_void_p] * 7 + [ctypes.c_int])


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
