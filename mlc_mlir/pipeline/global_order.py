"""The order of a lowered module's global variables: by name, so that one input compiles to the
same text, object code and library bytes every time. Upstream ``one-shot-bufferize`` creates the
``memref.global`` of each constant in an order that changes from run to run (three runs of
``mlir-opt --mlir-disable-threading`` on one light ResNet-50 module: three orders of its
``__constant_*`` globals), and the LLVM conversion keeps that order. The order of module-level
symbols means nothing to MLIR or LLVM. Source: reproducible builds (the same input gives the
same output), as LLVM's own tools guarantee.
"""

from __future__ import annotations

from ..ir.module import Module

#: The top-level ops that hold a module's global variables, before and after the LLVM conversion.
GLOBAL_OPS = ("memref.global", "llvm.mlir.global")


def sort_globals(module: Module) -> Module:
    """Move the top-level :data:`GLOBAL_OPS` of ``module`` (in place) to its start, in order of
    their ``sym_name``; every other op keeps its place relative to the others. Returns
    ``module``. Raises nothing (a module without globals is left as it is)."""
    body = module.ir_module.body
    found = [op.operation for op in body.operations if op.operation.name in GLOBAL_OPS]
    for op in sorted(found, key=lambda o: str(o.attributes["sym_name"]), reverse=True):
        first = body.operations[0].operation
        if op != first:
            op.move_before(first)
    return module
