"""Sliding-window geometry shared by conv and pooling: the k x k taps and their valid ranges.

For tap ``(i, j)`` of a window of size ``k``, stride ``s`` and padding ``p``, output row ``o``
reads input row ``o*s + i - p``; the tap is *valid* on the output rows where that lands inside
``[0, H)``. Every kernel loops over the ``k*k`` taps (a short Python loop) and does one strided
NumPy operation per tap on the valid output block, so no loop runs over pixels and no padded
copy of the input is made.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass


def out_size(n: int, k: int, s: int, p: int) -> int:
    """Output length of a window over ``n`` (floor mode, PyTorch ``Conv2d`` / ``MaxPool2d``)."""
    return (n + 2 * p - k) // s + 1


def _axis(i: int, n_in: int, n_out: int, s: int, p: int) -> tuple[slice, slice]:
    o0 = max(0, -((i - p) // s))
    o1 = min(n_out, (n_in - 1 + p - i) // s + 1)
    if o1 <= o0:
        return slice(0, 0), slice(0, 0)
    start = o0 * s + i - p
    return slice(o0, o1), slice(start, start + (o1 - o0 - 1) * s + 1, s)


@dataclass(frozen=True)
class Tap:
    """One window offset: index ``t = i*k + j``, the valid output block ``(oh, ow)`` and the
    strided input block ``(ih, iw)`` it reads; ``empty`` when no output reads inside the input;
    ``border``: the parts of the output plane outside the valid block, as (rows, cols) slices."""

    t: int
    i: int
    j: int
    oh: slice
    ow: slice
    ih: slice
    iw: slice
    border: tuple[tuple[slice, slice], ...]

    @property
    def empty(self) -> bool:
        return self.oh.stop <= self.oh.start or self.ow.stop <= self.ow.start


@dataclass(frozen=True)
class Window:
    """A k x k window of stride ``s`` and padding ``p`` over an H x W input."""

    h: int
    w: int
    k: int
    s: int
    p: int

    @property
    def ho(self) -> int:
        return out_size(self.h, self.k, self.s, self.p)

    @property
    def wo(self) -> int:
        return out_size(self.w, self.k, self.s, self.p)

    @functools.cached_property
    def taps(self) -> tuple[Tap, ...]:
        ho, wo = self.ho, self.wo
        out = []
        for i in range(self.k):
            oh, ih = _axis(i, self.h, ho, self.s, self.p)
            for j in range(self.k):
                ow, iw = _axis(j, self.w, wo, self.s, self.p)
                if oh.stop <= oh.start or ow.stop <= ow.start:
                    oh_, ow_ = slice(0, 0), slice(0, 0)
                    border = ((slice(0, ho), slice(0, wo)),)
                else:
                    oh_, ow_ = oh, ow
                    parts = [(slice(0, oh.start), slice(0, wo)), (slice(oh.stop, ho), slice(0, wo)),
                             (oh, slice(0, ow.start)), (oh, slice(ow.stop, wo))]
                    border = tuple(b for b in parts if b[0].stop > b[0].start and b[1].stop > b[1].start)
                out.append(Tap(i * self.k + j, i, j, oh_, ow_, ih, iw, border))
        return tuple(out)

    @property
    def overlapping(self) -> bool:
        """True when two taps can write one input element (``k > s``)."""
        return self.k > self.s


@functools.lru_cache(maxsize=4096)
def window(h: int, w: int, k: int, s: int, p: int) -> Window:
    """The (cached) :class:`Window`; raises ``ValueError`` on an empty output or bad params."""
    if k < 1 or s < 1 or p < 0:
        raise ValueError(f"expected k >= 1, s >= 1, p >= 0, got k={k}, s={s}, p={p}")
    win = Window(h, w, k, s, p)
    if win.ho < 1 or win.wo < 1:
        raise ValueError(
            f"expected a window of size {k} (stride {s}, padding {p}) to fit in {h}x{w}, got an empty output"
        )
    return win
