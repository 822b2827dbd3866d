"""AMP loss-scale rules: the seed's (halve on overflow, no growth) and PyTorch's GradScaler.

With ``Task(amp=True)`` the loss is multiplied by the scale ``scaling`` before the backward pass,
the optimizer kernels divide the gradients by it, and a step whose fp32 gradients hold an Inf or
NaN (``has_nan``) is skipped: no parameter, momentum or Adam-moment update, and Adam's ``step``
is not incremented (``scalar_increment``).

The rules differ in how ``scaling`` moves:

* ``"seed"`` (the default): the plan starts at 8192; the device kernel ``RANGE_GRAD_SCALING``
  halves it on an overflowing step, floor 1, and never grows it (facts sheet 12.4);
* :class:`GradScaler`: PyTorch's ``torch.amp.GradScaler`` rule (its documentation and
  ``torch._amp_update_scale_``): the scale starts at ``init_scale``; after an overflowing step it
  is multiplied by ``backoff_factor`` and the count of good steps resets to 0; after a good step
  the count grows by one, and when it reaches ``growth_interval`` the scale is multiplied by
  ``growth_factor`` and the count resets to 0. The host applies it after every step (it reads
  ``has_nan``: on a GPU a device-to-host copy of one scalar per step) and writes the new scale into
  the arena; the count of good steps is saved with the task (``scalar/scaler_growth_tracker``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = ["GradScaler", "from_config"]


@dataclass(frozen=True)
class GradScaler:
    """PyTorch ``torch.amp.GradScaler`` semantics for ``Task(amp=True, loss_scaler=...)`` (module
    doc); the defaults are PyTorch's.

    Args:
        init_scale: the first scale (> 0).
        growth_factor: multiplier after ``growth_interval`` good steps in a row (> 1).
        backoff_factor: multiplier after an overflowing step (in (0, 1)).
        growth_interval: good steps in a row before the scale grows (integer >= 1).

    Raises:
        ValueError: an argument outside these ranges (the message names it).
    """

    init_scale: float = 65536.0
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    growth_interval: int = 2000

    def __post_init__(self) -> None:
        def bad(name: str, want: str) -> None:
            raise ValueError(f"GradScaler: {name} must be {want}, got {getattr(self, name)!r}")

        for name in ("init_scale", "growth_factor", "backoff_factor"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                bad(name, "a finite number")
        if self.init_scale <= 0:
            bad("init_scale", "> 0")
        if self.growth_factor <= 1.0:
            bad("growth_factor", "> 1")
        if not 0.0 < self.backoff_factor < 1.0:
            bad("backoff_factor", "in (0, 1)")
        if isinstance(self.growth_interval, bool) or not isinstance(self.growth_interval, int) \
                or self.growth_interval < 1:
            bad("growth_interval", "an integer >= 1")

    def update(self, scale: float, growth_tracker: int, found_inf: bool) -> tuple[float, int]:
        """``(new scale, new growth tracker)`` after one step (module doc; the rule of
        ``torch._amp_update_scale_``)."""
        if found_inf:
            return scale * self.backoff_factor, 0
        growth_tracker += 1
        if growth_tracker == self.growth_interval:
            return scale * self.growth_factor, 0
        return scale, growth_tracker

    def config(self) -> dict[str, Any]:
        """JSON-able form (:func:`from_config`)."""
        return {"kind": "grad_scaler", "init_scale": self.init_scale, "growth_factor": self.growth_factor,
                "backoff_factor": self.backoff_factor, "growth_interval": self.growth_interval}


def from_config(config: Any) -> GradScaler | None:
    """The rule a :meth:`GradScaler.config` dict describes; ``None`` or ``"seed"``: the seed's rule
    (returns None). Raises ValueError for anything else."""
    if config is None or config == "seed":
        return None
    if not isinstance(config, dict) or config.get("kind") != "grad_scaler":
        raise ValueError(f"not a loss-scaler config: {config!r}")
    return GradScaler(config["init_scale"], config["growth_factor"], config["backoff_factor"],
                      config["growth_interval"])
