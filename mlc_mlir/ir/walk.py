"""Walking a Module's operations through the bindings (never by reading printed IR)."""

from __future__ import annotations

from typing import List, Optional, Union

from .._mlir import ir
from .module import Module


def find_ops(module: Union[Module, ir.Operation], name: str) -> List[ir.Operation]:
    """Every operation named ``name`` (``"mlc.call_library"``) in ``module`` (a Module, or an
    operation: itself and the ops nested in it), in pre-order."""
    found: List[ir.Operation] = []

    def visit(op):
        op = op.operation if hasattr(op, "operation") else op
        if op.name == name:
            found.append(op)
        return ir.WalkResult.ADVANCE

    with module.context:
        module.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
    return found


def has_op(module: Union[Module, ir.Operation], *names: str) -> bool:
    """Whether ``module`` contains an operation named one of ``names``; the walk stops at the
    first one (a test for an absent op still visits every op: ask for several names at once)."""
    wanted = set(names)
    found = False

    def visit(op):
        nonlocal found
        op = op.operation if hasattr(op, "operation") else op
        if op.name in wanted:
            found = True
            return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    with module.context:
        module.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
    return found


def function_body_ops(module: Module) -> List[ir.Operation]:
    """The ops directly in the bodies of ``module``'s functions (declarations have none),
    function by function, in program order: a list, safe to rewrite while iterating. Call it
    with ``module``'s context active."""
    return [op.operation for f in module.func_ops() if not f.is_external
            for op in f.regions[0].blocks[0].operations]


def defining_op(v: ir.Value) -> Optional[ir.Operation]:
    """The operation that defines ``v``; None for a block argument."""
    owner = v.owner
    return None if isinstance(owner, ir.Block) else owner.operation


def users(v: ir.Value) -> List[ir.Operation]:
    """The operations using ``v``, one per use, in use-list order."""
    return [u.owner.operation if hasattr(u.owner, "operation") else u.owner for u in v.uses]


def ancestor_in(op: Optional[ir.Operation], block: ir.Block) -> Optional[ir.Operation]:
    """``op`` or the ancestor of ``op`` whose block is ``block``; None when it has none."""
    while op is not None:
        if op.block == block:
            return op
        op = op.parent
        op = op.operation if op is not None else None
    return None
