"""Walking a Module's operations through the bindings (never by reading printed IR)."""

from __future__ import annotations

from typing import List, Union

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


def has_op(module: Module, name: str) -> bool:
    """Whether ``module`` contains an operation named ``name``."""
    return bool(find_ops(module, name))


def function_body_ops(module: Module) -> List[ir.Operation]:
    """The ops directly in the bodies of ``module``'s functions (declarations have none),
    function by function, in program order: a list, safe to rewrite while iterating. Call it
    with ``module``'s context active."""
    return [op.operation for f in module.func_ops() if not f.is_external
            for op in f.regions[0].blocks[0].operations]
