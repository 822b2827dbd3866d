"""Exponential moving average (EMA) of the weights: ``Task(ema=...)``, ``tr-train --ema DECAY``.

The plan holds a copy of every trainable parameter in the ``E_*`` regions (``memplan-create-plans
{ema=true}``), and the ``ema_update`` graph runs after the optimizer in every training step:
``ema = d_t * ema + (1 - d_t) * w`` (``RANGE_EMA_PARAM_UPDATE``, fp32), where ``t`` is the number
of EMA updates made before this one:

* ``t = 0``: ``d_0 = 0`` (the EMA takes the weights: ``torch.optim.swa_utils.AveragedModel``
  copies the parameters on its first ``update_parameters``);
* ``t >= 1``: ``d_t = decay`` (:func:`torch.optim.swa_utils.get_ema_multi_avg_fn`), or with
  ``warmup=True`` (the default) ``d_t = min(decay, (1 + t) / (10 + t))`` (the decay warm-up of
  TensorFlow's ``ExponentialMovingAverage(num_updates=t)``): early weights, far from the final
  ones, leave the average quickly.

Before the first update the EMA holds the initial weights (AveragedModel deep-copies the model).
A step that the optimizer skips (``has_nan``: an AMP overflow, or an Inf / NaN gradient in fp32)
does not update the EMA either and does not count in ``t``: the kernel reads ``has_nan`` on the
device, and the host, which computes ``d_t``, reads it after each step (one scalar; on a GPU a
device-to-host copy per step, as the GradScaler rule already makes). In torch terms: a loop that
calls ``ema.update_parameters(model)`` only when ``scaler.step(opt)`` took the step
(``AveragedModel`` changes only when called; ``GradScaler`` skips ``optimizer.step``).

BN running statistics are **not** averaged: the EMA model uses the raw model's running mean and
variance, as ``AveragedModel(use_buffers=False)`` followed by copying the buffers over (torch's
default averages parameters only). ``cast_ema_fp32_to_fp16`` folds them with the EMA gamma / beta
into the EMA model's own BN inference scale / bias (and in AMP casts the EMA weights to fp16)
before an EMA evaluation, which then runs ``inf_ema_a`` / ``inf_ema_b``: the inference graph
reading the EMA tensors. The EMA state (its tensors and ``t``) is saved with the task.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = ["EMA", "from_config"]


@dataclass(frozen=True)
class EMA:
    """EMA settings (module doc).

    Args:
        decay: the decay in [0, 1) (typical: 0.99 .. 0.9999).
        warmup: ``d_t = min(decay, (1 + t) / (10 + t))`` instead of ``decay``.

    Raises:
        ValueError: ``decay`` outside [0, 1) or ``warmup`` not a bool.
    """

    decay: float = 0.999
    warmup: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.decay, bool) or not isinstance(self.decay, (int, float)) or not math.isfinite(self.decay) \
                or not 0.0 <= self.decay < 1.0:
            raise ValueError(f"EMA: decay must be in [0, 1), got {self.decay!r}")
        if not isinstance(self.warmup, bool):
            raise ValueError(f"EMA: warmup must be a bool, got {self.warmup!r}")

    def decay_at(self, t: int) -> float:
        """``d_t``, the decay of the update made after ``t`` earlier ones (module doc)."""
        if t <= 0:
            return 0.0
        return min(self.decay, (1.0 + t) / (10.0 + t)) if self.warmup else float(self.decay)

    def config(self) -> dict[str, Any]:
        """JSON-able form (:func:`from_config`)."""
        return {"decay": self.decay, "warmup": self.warmup}


def from_config(config: Any) -> EMA | None:
    """The :class:`EMA` of a :meth:`EMA.config` dict, None for None; ValueError otherwise."""
    if config is None:
        return None
    if not isinstance(config, dict) or "decay" not in config:
        raise ValueError(f"not an EMA config: {config!r}")
    return EMA(config["decay"], config.get("warmup", True))
