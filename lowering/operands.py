"""Operand binding: which kernel argument each positional operand of a graph node feeds.

The rows live with the node-op vocabulary (:mod:`tr_mlir.dialects.kernels`): each
:class:`~tr_mlir.dialects.kernels.KernelId` carries its :class:`Operands` (the module doc there
describes ``ins`` / ``outs`` / workspaces / ranges / ``host`` / ``when`` / ``optional``), so the
compiler (workspace planning) and every backend (capture) read one interface per kernel family.
This module is the backends' view of it: :func:`operands_for` (a node op's row),
:data:`OPERANDS` (key -> row, read-only), :func:`register_operands` (a plugin's row) and the
workspace DTensor naming rule :func:`workspace_tensor_name`.
"""

from __future__ import annotations

from tr_mlir.dialects.kernels import (
    OPERANDS,
    WORKSPACE_PREFIX,
    Operands,
    OperandsError,
    operands_for,
    register_operands,
    workspace_tensor_name,
)

__all__ = ["OPERANDS", "WORKSPACE_PREFIX", "Operands", "OperandsError", "operands_for", "register_operands",
           "workspace_tensor_name"]
