"""Learning-rate schedules of the Task API: defined in epochs, evaluated per batch.

A schedule maps the optimizer's base learning rate and the training position in (fractional)
epochs, ``t = step / steps_per_epoch``, to the learning rate of that step; the Task writes it into
the arena's ``lr`` scalar before every batch (the seed's per-batch ``fetch_lr``, facts 13).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["CosineAnnealingLR", "from_config"]


@dataclass(frozen=True)
class CosineAnnealingLR:
    """Cosine annealing over ``T_max`` epochs with an optional linear warm-up.

    For ``t < warmup_epochs``: ``lr = warmup_start_lr + (base - warmup_start_lr) * t / warmup_epochs``;
    after it, with ``p = min((t - warmup_epochs) / (T_max - warmup_epochs), 1)``:
    ``lr = eta_min + (base - eta_min) * (1 + cos(pi * p)) / 2`` (and ``eta_min`` from ``T_max`` on).
    Without warm-up this is ``torch.optim.lr_scheduler.CosineAnnealingLR``'s closed form at integer
    epochs, evaluated at every batch's fractional epoch instead of once per epoch.
    """

    T_max: float
    eta_min: float = 0.0
    warmup_epochs: float = 0.0
    warmup_start_lr: float = 0.0

    def __post_init__(self) -> None:
        for name in ("T_max", "eta_min", "warmup_epochs", "warmup_start_lr"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ValueError(f"CosineAnnealingLR: {name} must be a number >= 0, got {v!r}")
        if self.T_max <= 0:
            raise ValueError(f"CosineAnnealingLR: T_max must be > 0 epochs, got {self.T_max}")
        if self.warmup_epochs >= self.T_max and self.warmup_epochs > 0:
            raise ValueError(f"CosineAnnealingLR: warmup_epochs ({self.warmup_epochs}) must be < T_max ({self.T_max})")

    def lr(self, base_lr: float, epoch: float) -> float:
        """The learning rate at fractional epoch ``epoch`` for base rate ``base_lr``."""
        if epoch < self.warmup_epochs:
            return self.warmup_start_lr + (base_lr - self.warmup_start_lr) * epoch / self.warmup_epochs
        p = min((epoch - self.warmup_epochs) / (self.T_max - self.warmup_epochs), 1.0)
        return self.eta_min + (base_lr - self.eta_min) * (1.0 + math.cos(math.pi * p)) / 2.0

    def config(self) -> dict[str, Any]:
        """JSON-able description (``from_config`` inverts it)."""
        return {"type": type(self).__name__, **asdict(self)}


def from_config(config: dict[str, Any] | None) -> CosineAnnealingLR | None:
    """The schedule described by ``config`` (``None`` for none); ``ValueError`` for an unknown type."""
    if config is None:
        return None
    d = dict(config)
    if d.pop("type", None) != "CosineAnnealingLR":
        raise ValueError(f"unknown scheduler type {config.get('type')!r}; expected CosineAnnealingLR")
    return CosineAnnealingLR(**d)
