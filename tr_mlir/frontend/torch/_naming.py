"""The error type, PyTorch's lazy import and the naming between Task names and the module's own names."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tr_mlir.errors import TrMlirError


class TorchImportError(TrMlirError, ValueError):
    """A module that cannot be imported into the ``arch`` dialect, or torch missing.

    ``str(e)`` names the graph node, the op and, where torch records it, the line of the user's
    module that produced it, e.g.
    ``node 'cat' (aten.cat.default) at net.py:12: `return torch.cat([x, y], 1)`: torch.cat has no arch
    counterpart (arch has no concatenation)``.
    """


def _torch() -> Any:
    try:
        import torch
    except ImportError as e:  # pragma: no cover - exercised only without torch
        raise TorchImportError(
            "tr_mlir.frontend.torch needs PyTorch, which is not importable "
            f"({type(e).__name__}: {e}); install it with pip install 'tr-mlir[torch]'") from None
    return torch



# --------------------------------------------------------------------------------------
# Naming: canonical Task names <-> the module's own names
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NameEntry:
    """One tensor of the module's ``state_dict`` and how it maps onto the Task view.

    ``canonical``: the Task name (``conv3.weight``, ``bn2.running_mean``) or ``None`` for a tensor
    the Task does not hold (a folded conv bias, ``num_batches_tracked``). ``layout``: ``oihw`` (conv
    weight, KRSC in the Task), ``fc`` (Linear weight; ``chw`` set when its columns are permuted from a
    C,H,W flattening), ``vec``, ``folded_bias`` (the constant ``value``), ``batches`` (the
    ``num_batches_tracked`` counter, ``value`` at import). ``shift``: for a running mean, the folded
    conv bias subtracted from it in the Task."""

    torch_name: str
    canonical: str | None
    layout: str
    chw: tuple[int, int, int] | None = None
    value: Any = None
    shift: Any = None


@dataclass
class TorchNaming:
    """The module's ``state_dict`` keys in its own order, each with its :class:`NameEntry`."""

    entries: list[NameEntry] = field(default_factory=list)

    def by_torch_name(self) -> dict[str, NameEntry]:
        return {e.torch_name: e for e in self.entries}

    def config(self) -> list[dict[str, Any]]:
        """JSON-able form (``Task.save`` keeps it, so a loaded checkpoint's ``state_dict()`` has the
        module's keys); arrays as lists of floats (float32 values, exact in JSON's doubles)."""
        def plain(v: Any) -> Any:
            if v is None:
                return None
            a = np.asarray(v)
            return {"shape": list(a.shape), "dtype": str(a.dtype), "data": a.ravel().tolist()}

        return [{"torch_name": e.torch_name, "canonical": e.canonical, "layout": e.layout,
                 "chw": None if e.chw is None else list(e.chw), "value": plain(e.value), "shift": plain(e.shift)}
                for e in self.entries]

    @classmethod
    def from_config(cls, cfg: Any) -> TorchNaming:
        """The naming of :meth:`config`; raises ``ValueError`` / ``KeyError`` / ``TypeError`` for a
        malformed one (``Task.load`` reports it as a :class:`tr_mlir.TaskError`)."""
        def array(v: Any) -> Any:
            if v is None:
                return None
            a = np.array(v["data"], dtype=np.dtype(v["dtype"])).reshape(v["shape"])
            return a if a.ndim else a[()]

        return cls([NameEntry(str(e["torch_name"]), None if e["canonical"] is None else str(e["canonical"]),
                              str(e["layout"]), None if e["chw"] is None else tuple(int(x) for x in e["chw"]),
                              array(e["value"]), array(e["shift"])) for e in cfg])


def _to_task_layout(e: NameEntry, a: np.ndarray) -> np.ndarray:
    """A torch tensor value (NCHW conventions) -> the Task layout of ``e`` (a float32 copy)."""
    a = np.array(a, dtype=np.float32, copy=True)
    if e.layout == "oihw":
        return np.ascontiguousarray(a.transpose(0, 2, 3, 1))
    if e.layout == "fc" and e.chw is not None:
        c, h, w = e.chw
        return np.ascontiguousarray(a.reshape(a.shape[0], c, h, w).transpose(0, 2, 3, 1).reshape(a.shape[0], -1))
    if e.shift is not None:
        return a - np.asarray(e.shift, dtype=np.float32)
    return np.ascontiguousarray(a)


def to_torch_layout(e: NameEntry, a: np.ndarray) -> np.ndarray:
    """Inverse of :func:`_to_task_layout`."""
    a = np.asarray(a, dtype=np.float32)
    if e.layout == "oihw":
        return np.ascontiguousarray(a.transpose(0, 3, 1, 2))
    if e.layout == "fc" and e.chw is not None:
        c, h, w = e.chw
        return np.ascontiguousarray(a.reshape(a.shape[0], h, w, c).transpose(0, 3, 1, 2).reshape(a.shape[0], -1))
    if e.shift is not None:
        return a + np.asarray(e.shift, dtype=np.float32)
    return np.ascontiguousarray(a)
