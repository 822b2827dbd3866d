"""``arch-normalize-identity``: ArchPlan step 4, identity only where a shortcut is empty.

The seed deletes every Identity layer, then gives each Add2 region whose shortcut became
empty a fresh Identity right after Add2Start, and rejects an Add2 with an empty stem
("Empty stem in add2"; facts sheet section 3.4). In SSA terms (DESIGN section 3):

1. every ``arch.identity`` is removed (its users read its input);
2. an ``arch.add %s, %m`` whose main branch is empty (``%m`` is ``%s``, or ``%m`` is the value
   the shortcut branch starts from) is a diagnostic at the add;
3. an ``arch.add %s, %m`` whose shortcut is empty, i.e. ``%s`` is also the value the main
   branch starts from (``%s`` has another user on which ``%m`` depends), gets
   ``%i = arch.identity %s`` inserted right before the main branch's first op (the seed's order:
   Add2Start, Identity, Add2ShortcutEnd, stem), and the add reads ``%i``.

Unlike the seed, adds nested in another residual branch are normalized too. Idempotent.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, OpResult, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from tr_mlir.dialects.arch import AddOp, IdentityOp, ModelOp
from tr_mlir.passes._model import body_ops, fail, forward_and_erase, models, require_flat


def _depends_on(value: SSAValue, target: Operation, pos: dict[Operation, int]) -> bool:
    """Whether ``value`` is computed from ``target``'s result (``value`` may be it).

    Walks producers backwards, never below ``target``'s position in the body."""
    floor = pos[target]
    stack = [value]
    seen: set[Operation] = set()
    while stack:
        v = stack.pop()
        if not isinstance(v, OpResult):
            continue
        op = v.op
        if op is target:
            return True
        if op in seen or pos.get(op, -1) <= floor:
            continue
        seen.add(op)
        stack.extend(op.operands)
    return False


def branch_start(add: AddOp, source: SSAValue, branch: SSAValue,
                 pos: dict[Operation, int]) -> Operation | None:
    """The first op (program order) of the branch computing ``branch`` that reads ``source``
    (the other operand of ``add``), or ``None`` when ``branch`` is not computed from
    ``source`` by another user of it. Not ``None`` means ``source`` is the input both
    branches start from: its own branch is empty."""
    users = sorted((u.operation for u in source.uses if u.operation is not add),
                   key=lambda o: pos.get(o, -1))
    for user in users:
        if user in pos and _depends_on(branch, user, pos):
            return user
    return None


def normalize_identity(model: ModelOp) -> None:
    """Apply steps 1-3 of the module doc to ``model``; raises ``PassFailedException`` at an
    ``arch.add`` with an empty main branch."""
    for op in body_ops(model):
        if isinstance(op, IdentityOp):
            forward_and_erase(op)
    for add in [op for op in body_ops(model) if isinstance(op, AddOp)]:
        pos = {op: i for i, op in enumerate(body_ops(model))}
        empty_main = add.main is add.shortcut or (
            branch_start(add, add.main, add.shortcut, pos) is not None
        )
        if empty_main:
            fail(add, f"'{add.name}' op expected a non-empty main branch, got the input of "
                      "the block as main operand (the seed's \"Empty stem in add2\"); give "
                      "the main branch of add2 at least one layer")
        start = branch_start(add, add.shortcut, add.main, pos)
        if start is None:
            continue
        identity = IdentityOp(add.shortcut, result_type=add.shortcut.type)
        Rewriter.insert_op(identity, InsertPoint.before(start))
        add.operands[0] = identity.output


@dataclass(frozen=True)
class ArchNormalizeIdentityPass(ModulePass):
    """Remove user identities; make every empty residual shortcut an explicit
    ``arch.identity`` (step 4). Fails at an ``arch.add`` whose main branch is empty, and at a
    tree-form op (run arch-expand first)."""

    name = "arch-normalize-identity"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for model in models(op):
            require_flat(model, self.name)
            normalize_identity(model)
