"""Loss functions of the Task API."""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["CrossEntropyLoss"]


@dataclass(frozen=True)
class CrossEntropyLoss:
    """Softmax cross-entropy with label smoothing, batch mean: ``torch.nn.CrossEntropyLoss(
    label_smoothing=ls)``. The model's last layer is the compiler's ``softmax_ce``; this object
    carries its one setting, written into the arena's ``label_smoothing`` scalar (it also applies
    to the validation loss, as in torch)."""

    label_smoothing: float = 0.0

    def __post_init__(self) -> None:
        v = self.label_smoothing
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 0.0 <= v <= 1.0:
            raise ValueError(f"CrossEntropyLoss: label_smoothing must be in [0, 1], got {v!r}")
