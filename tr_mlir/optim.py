"""Optimizers of the Task API: ``torch.optim`` semantics and defaults (DESIGN section 7).

An optimizer here is a description: the compiler plans its state (momentum ``M_*``, Adam
``V_*``, LARS ``N_*`` buffers) from :attr:`Optimizer.kind`, the runtime writes its hyper-parameters
into the arena scalars (:meth:`Optimizer.scalars`) and the update kernels
(:mod:`tr_mlir.lowering.cpu.optim`) apply them to every parameter at once. Per element, with
``g`` the gradient (divided by the AMP loss scale) and ``wd`` the weight decay:

* :class:`SGD`: ``d = g + wd*w``; with momentum ``m = mu*m + d`` (no dampening; the first step
  sets ``m = d``), Nesterov ``d = d + mu*m`` else ``d = m``; ``w -= lr*d`` (``torch.optim.SGD``).
* :class:`Adam`: L2 decay ``d = g + wd*w``, then torch's Adam with bias corrections.
* :class:`AdamW`: decoupled decay ``w *= 1 - lr*wd``, then Adam on ``g`` (``torch.optim.AdamW``).
* :class:`LARS`: per tensor, trust ratio ``eta = tc*|w| / (|g| + wd*|w| + eps)`` (at most 100;
  1 when a norm is below 1e-12), ``m = mu*m + lr*eta*(g + wd*w)``, ``w -= m`` (Nesterov:
  ``w -= lr*eta*(g + wd*w) + mu*m``): the seed's formula (facts sheet 12.4); no torch reference.

The seed's convention is kept: BN gamma/beta and biases ("bias-like" parameters) get no weight
decay, and LARS treats them with plain (Nesterov) momentum, unless ``decay_all=True``, which
decays them as the weights (torch's behaviour for a single parameter group).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar

from tr_mlir.dialects.memplan import OptimizerKind

__all__ = ["SGD", "Adam", "AdamW", "LARS", "Optimizer", "from_config"]


def _check(owner: str, name: str, value: Any, *, low: float = 0.0, high: float | None = None,
           open_high: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TypeError(f"{owner}: {name} must be a finite number, got {value!r}")
    if value < low or (high is not None and (value >= high if open_high else value > high)):
        bound = f"in [{low}, {high}{')' if open_high else ']'}" if high is not None else f">= {low}"
        raise ValueError(f"{owner}: {name} must be {bound}, got {value}")
    return float(value)


@dataclass(frozen=True)
class Optimizer:
    """Common fields: learning rate ``lr``, ``weight_decay``, ``decay_all`` (module doc)."""

    lr: float = 1e-3
    weight_decay: float = 0.0
    decay_all: bool = False

    NAME: ClassVar[str] = ""

    def __post_init__(self) -> None:
        _check(type(self).__name__, "lr", self.lr)
        _check(type(self).__name__, "weight_decay", self.weight_decay)
        if not isinstance(self.decay_all, bool):
            raise TypeError(f"{type(self).__name__}: decay_all must be a bool, got {self.decay_all!r}")

    @property
    def kind(self) -> OptimizerKind:
        """The compiler's optimizer kind (decides the state buffers and update graphs)."""
        raise NotImplementedError

    def scalars(self) -> dict[str, float]:
        """Arena scalar name -> value (the learning rate is written per batch, not here)."""
        raise NotImplementedError

    def config(self) -> dict[str, Any]:
        """JSON-able description (``from_config`` inverts it)."""
        d = asdict(self)
        d["type"] = type(self).__name__
        return d


@dataclass(frozen=True)
class SGD(Optimizer):
    """``torch.optim.SGD(lr=1e-3, momentum=0, nesterov=False, weight_decay=0)`` (no dampening)."""

    momentum: float = 0.0
    nesterov: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        _check("SGD", "momentum", self.momentum)
        if self.nesterov and self.momentum <= 0:
            raise ValueError("SGD: Nesterov momentum requires a momentum > 0 (as torch.optim.SGD)")

    @property
    def kind(self) -> OptimizerKind:
        if self.momentum == 0:
            return OptimizerKind.SGD
        return OptimizerKind.NESTEROV if self.nesterov else OptimizerKind.MOMENTUM

    def scalars(self) -> dict[str, float]:
        return {"beta": self.momentum, "wd": self.weight_decay}


@dataclass(frozen=True)
class Adam(Optimizer):
    """``torch.optim.Adam(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0)`` (L2 decay)."""

    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8

    def __post_init__(self) -> None:
        super().__post_init__()
        name = type(self).__name__
        if not isinstance(self.betas, (tuple, list)) or len(self.betas) != 2:
            raise TypeError(f"{name}: betas must be a pair (beta1, beta2), got {self.betas!r}")
        object.__setattr__(self, "betas", tuple(self.betas))
        for i, b in enumerate(self.betas):
            _check(name, f"betas[{i}]", b, high=1.0, open_high=True)
        _check(name, "eps", self.eps)

    @property
    def kind(self) -> OptimizerKind:
        return OptimizerKind.ADAM

    def scalars(self) -> dict[str, float]:
        return {"beta": self.betas[0], "beta2": self.betas[1], "eps": self.eps, "wd": self.weight_decay}


@dataclass(frozen=True)
class AdamW(Adam):
    """``torch.optim.AdamW(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2)``."""

    weight_decay: float = 1e-2

    @property
    def kind(self) -> OptimizerKind:
        return OptimizerKind.ADAMW


@dataclass(frozen=True)
class LARS(Optimizer):
    """LARS (You et al. 2017) as the seed computes it (facts sheet 12.4; module doc):
    ``LARS(lr, momentum=0.9, nesterov=False, weight_decay=0, trust_coefficient=1e-3, eps=1e-8)``."""

    momentum: float = 0.9
    nesterov: bool = False
    trust_coefficient: float = 1e-3
    eps: float = 1e-8

    def __post_init__(self) -> None:
        super().__post_init__()
        _check("LARS", "momentum", self.momentum)
        _check("LARS", "trust_coefficient", self.trust_coefficient)
        _check("LARS", "eps", self.eps)

    @property
    def kind(self) -> OptimizerKind:
        return OptimizerKind.LARS_NESTEROV if self.nesterov else OptimizerKind.LARS

    def scalars(self) -> dict[str, float]:
        return {"beta": self.momentum, "wd": self.weight_decay, "tc": self.trust_coefficient, "eps": self.eps}


_TYPES = {cls.__name__: cls for cls in (SGD, Adam, AdamW, LARS)}


def from_config(config: dict[str, Any]) -> Optimizer:
    """The optimizer described by :meth:`Optimizer.config`; raises ``ValueError`` for an unknown type."""
    d = dict(config)
    cls = _TYPES.get(d.pop("type", None))
    if cls is None:
        raise ValueError(f"unknown optimizer type {config.get('type')!r}; expected one of {', '.join(_TYPES)}")
    names = {f.name for f in fields(cls)}
    if "betas" in d:
        d["betas"] = tuple(d["betas"])
    return cls(**{k: v for k, v in d.items() if k in names})
