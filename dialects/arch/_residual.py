"""The residual-block specification: one declaration per fused block op, read by every pass.

A fused residual block (``arch.bottleneck_identity``, ``arch.basic_block_projection``,
``arch.inv_residual_no_shortcut``, a plugin's own) declares its structure once, as the class
attribute ``RESIDUAL`` (a :class:`ResidualSpec`) of a :class:`ResidualBlockOp` subclass:

* the main path: conv + bn2d (+ relu) stages (:class:`ConvStage`), each conv's width and stride
  named by one of the op's properties or fixed;
* the shortcut: the block input itself (:attr:`Shortcut.IDENTITY`), a projection conv 1x1 + bn2d
  to the main path's width with the main path's total stride (:attr:`Shortcut.PROJECTION`), or
  none (:attr:`Shortcut.NONE`: no add);
* the join: ``arch.add %shortcut, %main``, then a relu or not (``post_relu``).

From it ``arch-expand`` emits the block's primitive ops, ``arch-merge-blocks`` builds the pattern
that recognizes them, the layer descriptor lays out the block's tensors and kernels, and the op
itself derives its output shape and channel count (:class:`ResidualBlockOp`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

IN = "in"
"""A stage width meaning "the block input's channel count" (a bottleneck's last 1x1 conv when the
block has an identity shortcut and no ``out_ch`` property)."""


class Shortcut(Enum):
    """What a residual block adds to its main path."""

    IDENTITY = "identity"
    """The block input itself (stride 1 and input C = the main path's width)."""
    PROJECTION = "projection"
    """conv 1x1 (no padding) + bn2d of the block input, to the main path's width and stride."""
    NONE = "none"
    """No shortcut and no add (an inverted residual that changes shape)."""


@dataclass(frozen=True)
class ConvStage:
    """One conv + bn2d (+ relu) stage of a block's main path.

    ``width``: the op property holding the conv's output channels, or :data:`IN`; ``k``, ``p``:
    the square kernel and the padding (pixels); ``stride``: a fixed stride or the op property
    holding it; ``depthwise``: ``groups`` = the conv's output channels (else 1); ``relu``: a ReLU
    after the batch norm.
    """

    width: str
    k: int
    p: int
    stride: int | str = 1
    depthwise: bool = False
    relu: bool = True

    def out_ch(self, params: Mapping[str, Any], cin: int) -> int:
        """The conv's output channels, given the op's properties and the block's input C."""
        return cin if self.width == IN else int(params[self.width])

    def s(self, params: Mapping[str, Any]) -> int:
        """The conv's stride, given the op's properties."""
        return self.stride if isinstance(self.stride, int) else int(params[self.stride])

    def groups(self, params: Mapping[str, Any], cin: int) -> int:
        """The conv's ``groups``: its output channels when depthwise, else 1."""
        return self.out_ch(params, cin) if self.depthwise else 1


@dataclass(frozen=True)
class ResidualSpec:
    """The structure of one fused residual block op (see the module doc).

    ``family``: the block's name in diagnostics (``"basic block"``). Raises ``ValueError`` for a
    spec without stages, a stage that is no :class:`ConvStage`, a shortcut that is no
    :class:`Shortcut`, or a post-add ReLU but no shortcut (there is no add then).
    """

    family: str
    main: tuple[ConvStage, ...]
    shortcut: Shortcut
    post_relu: bool

    def __post_init__(self) -> None:
        if not self.main:
            raise ValueError(f"residual spec '{self.family}': the main path needs at least one conv stage")
        bad = [st for st in self.main if not isinstance(st, ConvStage)]
        if bad:
            raise ValueError(f"residual spec '{self.family}': expected ConvStage stages in main, got {bad[0]!r}")
        if not isinstance(self.shortcut, Shortcut):
            raise ValueError(f"residual spec '{self.family}': expected a Shortcut, got {self.shortcut!r}")
        if self.post_relu and self.shortcut is Shortcut.NONE:
            raise ValueError(f"residual spec '{self.family}': a post-add relu needs a shortcut (an add)")

    @property
    def has_add(self) -> bool:
        return self.shortcut is not Shortcut.NONE

    @property
    def properties(self) -> tuple[str, ...]:
        """The op properties the stages name (widths and strides), in first-use order."""
        names: list[str] = []
        for st in self.main:
            for name in (st.width, st.stride):
                if isinstance(name, str) and name != IN and name not in names:
                    names.append(name)
        return tuple(names)

    def out_ch(self, params: Mapping[str, Any], cin: int) -> int:
        """The block's output channels (the last stage's width)."""
        return self.main[-1].out_ch(params, cin)

    def stride(self, params: Mapping[str, Any]) -> int:
        """The main path's total stride (the product of its stages')."""
        total = 1
        for st in self.main:
            total *= st.s(params)
        return total

    def projection(self, params: Mapping[str, Any], cin: int) -> tuple[int, int]:
        """``(out_ch, stride)`` of the projection conv 1x1: the main path's width and stride."""
        return self.out_ch(params, cin), self.stride(params)
