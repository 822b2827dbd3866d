"""Parameter initialization schemes of :class:`tr_mlir.Task` (``init=``, ``tr-train --init``).

* ``"seed"`` (the default): the plan's init rules (facts sheet section 7): conv weights
  ``trunc_normal`` (He-scaled normal truncated at 2 std, :func:`tr_mlir.lowering.executable.trunc_normal`),
  FC weights ``kaiming_uniform``, biases 0, BN weight 1 and bias 0;
* ``"torch"``: PyTorch's defaults of ``nn.Conv2d`` / ``nn.Linear.reset_parameters`` (their
  documentation): every conv and FC weight ``kaiming_uniform_(a=sqrt(5))``, i.e.
  ``U(-b, b)`` with ``b = gain * sqrt(3 / fan_in)``, ``gain = sqrt(2 / (1 + a^2))``, so
  ``b = 1 / sqrt(fan_in)``; every conv / FC bias ``U(-1 / sqrt(fan_in), 1 / sqrt(fan_in))`` with the
  fan-in of its layer's weight (``in_channels * k * k`` for a conv, ``in_features`` for an FC); BN
  weight 1 and bias 0 (as the seed).

The ``torch`` draws: parameter ``i`` (canonical order of ``Task.parameters()``) draws from
``numpy.random.default_rng([seed, 0x1417, i])``, so a seed gives the same weights every time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

INITS = ("seed", "torch")
"""The accepted ``init`` names."""


def fan_in(shape: Sequence[int]) -> int:
    """Fan-in of a weight in the Task's layout: conv ``(K, kh, kw, C)`` -> ``kh * kw * C``, FC
    ``(out, in)`` -> ``in`` (PyTorch's ``_calculate_fan_in_and_fan_out``: the product of all but the
    first dimension, the same number in OIHW)."""
    return max(int(np.prod(shape[1:])), 1)


def kaiming_uniform_bound(fan: int, a: float = math.sqrt(5.0)) -> float:
    """``gain * sqrt(3 / fan)`` with ``gain = sqrt(2 / (1 + a^2))`` (PyTorch's
    ``kaiming_uniform_``, leaky-ReLU gain); ``1 / sqrt(fan)`` for the default ``a = sqrt(5)``."""
    return math.sqrt(2.0 / (1.0 + a * a)) * math.sqrt(3.0 / fan)


def torch_init(params: Sequence[tuple[str, tuple[int, ...]]], seed: int) -> dict[str, np.ndarray]:
    """New values for the conv / FC weights and biases among ``params`` (``(name, shape)`` in
    :meth:`tr_mlir.Task.parameters` order and names: ``conv<i>.weight``, ``fc<i>.weight``,
    ``fc<i>.bias``) under the ``torch`` scheme (module doc); BN parameters are not returned (they
    keep 1 / 0). float32 arrays of the given shapes."""
    fans = {name.rsplit(".", 1)[0]: fan_in(shape) for name, shape in params
            if name.endswith(".weight") and name.startswith(("conv", "fc"))}
    out: dict[str, np.ndarray] = {}
    for i, (name, shape) in enumerate(params):
        layer, field = name.rsplit(".", 1)
        if not layer.startswith(("conv", "fc")) or field not in ("weight", "bias"):
            continue
        fan = fans.get(layer)
        if fan is None:
            continue
        bound = kaiming_uniform_bound(fan) if field == "weight" else 1.0 / math.sqrt(fan)
        rng = np.random.default_rng([int(seed), 0x1417, i])
        out[name] = rng.uniform(-bound, bound, size=shape).astype(np.float32)
    return out
