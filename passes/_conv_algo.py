"""The conv algorithm record on arch layer ops (written by ``memplan-select-conv-algo``).

``conv_algo`` (:data:`CONV_ALGO_ATTR`) maps the weight operand of each conv of the layer (``w`` of
its kernel: ``conv_weight``, ``c1_conv_weight``, ``conv_amp_w_fp16`` under AMP, ...) to the
algorithm params of its kernels, ``{algo = "...", algo_dgrad = "...", algo_wgrad = "..."}``
(:data:`tr_mlir.lowering.cpu.conv.DIRECTIONS`). :func:`recorded_params` is how phase 1 and phase 4
read it (through :func:`tr_mlir.passes._descriptors.plan_workspaces`); the reports count the choices
from the graphs' params (:func:`tr_mlir.memplan_summary.conv_algorithms`).
"""

from __future__ import annotations

from collections.abc import Iterable

from xdsl.dialects.builtin import DictionaryAttr, StringAttr
from xdsl.ir import Operation
from xdsl.utils.exceptions import VerifyException

from tr_mlir.dialects.kernels import KernelId, implementation
from tr_mlir.dialects.memplan import GraphOp, Node
from tr_mlir.errors import TrMlirError

CONV_ALGO_ATTR = "conv_algo"
"""The layer-op attribute holding the chosen algorithms (module doc)."""

class ConvAlgoError(TrMlirError, VerifyException):
    """A malformed ``conv_algo`` record or request (phase 1 reports it at the layer op)."""


def layer_algorithms(op: Operation, attr_name: str = CONV_ALGO_ATTR) -> dict[str, dict[str, str]]:
    """The record (or request) ``attr_name`` of ``op`` as weight operand -> {param: algorithm};
    ``{}`` without one. Raises :class:`ConvAlgoError` when it is not a dictionary of string
    dictionaries."""
    attr = op.attributes.get(attr_name) if hasattr(op, "attributes") else None
    if attr is None:
        return {}
    ok = isinstance(attr, DictionaryAttr) and all(
        isinstance(d, DictionaryAttr) and all(isinstance(v, StringAttr) for v in d.data.values())
        for d in attr.data.values())
    if not ok:
        raise ConvAlgoError(f"'{op.name}' op attribute '{attr_name}' must map weight names to dictionaries of "
                            f"algorithm names, got {attr}")
    return {w: {k: v.data for k, v in d.data.items()} for w, d in attr.data.items()}  # type: ignore[union-attr]


def recorded_params(op: Operation, weight: str | None, kernel_params: Iterable[str]) -> dict[str, str]:
    """The algorithm params recorded on ``op`` for the conv whose weight operand is ``weight``,
    restricted to the params the node's kernel takes (``{}``: none recorded)."""
    if weight is None:
        return {}
    mine = layer_algorithms(op).get(weight, {})
    return {k: mine[k] for k in kernel_params if k in mine}


def node_algorithm(graph: GraphOp, node: Node, param: str) -> str | None:
    """The algorithm a conv node of ``graph`` runs for one direction: its static ``param``
    (``algo``, ``algo_dgrad`` or ``algo_wgrad``, recorded by ``memplan-select-conv-algo``), or
    None for a node without it (the run-time rule)."""
    value = graph.params.data[node.param].data.get(param) if node.param >= 0 else None
    return value.data if isinstance(value, StringAttr) else None


def winograd_variants(kind: KernelId) -> frozenset[str]:
    """The Winograd variants of ``kind``'s kernel (its :attr:`~tr_mlir.dialects.kernels.AlgorithmTable.variants`):
    the algorithms whose output transform is the compiler's own code, where the fusion passes put
    their epilogues (``memplan-fuse-bn-stats``, ``memplan-fuse-grad-acc``)."""
    table = implementation(kind).algorithms
    return frozenset(table.variants) if table is not None else frozenset()
