"""The captured graph -> a BluePrint tree (residual joins -> add2 over their branches)."""

from __future__ import annotations

from typing import Any

import numpy as np

from tr_mlir.frontend.torch._capture import (  # noqa: F401
    _NO_COUNTERPART,
    _P,
    _aten_table,
    _Call,
    _Fail,
    _from_export,
    _from_fx,
    _node_text,
    _op_label,
    _pair,
    _resolve,
    _translate,
    _Translator,
    _unsupported,
    _where,
)
from tr_mlir.frontend.torch._naming import (  # noqa: F401
    NameEntry,
    TorchImportError,
    TorchNaming,
    _to_task_layout,
    _torch,
    to_torch_layout,
)

# --------------------------------------------------------------------------------------
# The graph -> a BluePrint tree (residual joins -> add2 over their branches)
# --------------------------------------------------------------------------------------


def _tree(calls: list[_Call], inp: Any, out_node: Any) -> tuple[Any, list[tuple[str, str, NameEntry]]]:
    from tr_mlir import blueprint as bp

    by_node = {c.node: c for c in calls}
    order = {c.node: i for i, c in enumerate(calls)}
    order[inp] = -1
    anc: dict[Any, frozenset] = {inp: frozenset([inp])}
    for c in calls:
        for x in c.inputs:
            if x is not inp and x not in by_node:
                raise TorchImportError(f"{_node_text(c.node, _op_label(c.node))}: reads '{x}', which is not a "
                                       "tensor computed from the model input")
        anc[c.node] = frozenset([c.node]).union(*(anc[x] for x in c.inputs))
    visits: dict[Any, int] = {}

    def chain(node: Any, stop: Any) -> list[tuple[Any, list]]:
        items: list[tuple[Any, list]] = []
        cur = node
        while cur is not stop:
            if cur is inp:
                raise TorchImportError(f"the graph is not a nest of residual blocks: a branch ending at "
                                       f"'{node.name}' does not start at its fork point '{stop.name}'")
            c = by_node[cur]
            visits[cur] = visits.get(cur, 0) + 1
            if visits[cur] > 1:
                raise TorchImportError(f"{_node_text(cur, _op_label(cur))}: its value feeds two branches that "
                                       "do not join as one residual block (arch has add2(shortcut, main) only)")
            if c.kind == "add":
                a, b = c.inputs
                common = anc[a] & anc[b]
                fork = max(common, key=order.__getitem__)
                sa, sb = chain(a, fork), chain(b, fork)
                short, main = (sb, sa) if len(sb) <= len(sa) else (sa, sb)  # torch writes main + shortcut
                items.append((bp.add2(_seq(short), _seq(main)),
                              [bd for _, bs in short for bd in bs] + [bd for _, bs in main for bd in bs]))
                cur = fork
            elif c.kind == "alias":
                cur = c.inputs[0]
            else:
                items.append((c.layer, c.binds))
                cur = c.inputs[0]
        items.reverse()
        return items

    def _seq(items: list[tuple[Any, list]]) -> Any:
        layers = [layer for layer, _ in items]
        return None if not layers else layers[0] if len(layers) == 1 else bp.seq(*layers)

    result = out_node.args[0]
    if isinstance(result, (list, tuple)):
        if len(result) != 1:
            raise TorchImportError(f"the module returns {len(result)} values, expected one tensor of logits")
        result = result[0]
    if result is inp:
        raise TorchImportError("the module returns its input unchanged")
    items = chain(result, inp)
    unused = [c.node.name for c in calls if c.kind != "alias" and c.node not in visits and c.node.users]
    if unused:
        raise TorchImportError(f"nodes {unused[:4]} do not feed the output through residual blocks")
    binds = [bd for _, bs in items for bd in bs]
    return bp.seq(*[layer for layer, _ in items]), binds


def _fold_conv_biases(calls: list[_Call]) -> None:
    """A conv bias whose conv's only user is a batch norm: moved into that BN's running mean."""
    by_node = {c.node: c for c in calls}
    for c in calls:
        if c.conv_bias is None:
            continue
        users = list(c.node.users)
        bn = by_node.get(users[0]) if len(users) == 1 else None
        if bn is None or not any(f == "running_mean" for _, f, _ in bn.binds):
            raise TorchImportError(
                f"{_node_text(c.node, _op_label(c.node))}: a conv bias that does not feed a batch norm is not "
                "representable (arch.conv has no bias; a bias directly before BatchNorm2d is folded into its "
                "running mean); use bias=False or add a BatchNorm2d")
        bias = np.asarray(c.conv_bias.value.detach().cpu().numpy(), np.float32).copy()
        bn.binds = [(k, f, NameEntry(e.torch_name, None, e.layout, shift=bias) if f == "running_mean" else e)
                    for k, f, e in bn.binds]
        c.binds = c.binds + [("", "folded", NameEntry(c.conv_bias.name, None, "folded_bias", value=bias))]
