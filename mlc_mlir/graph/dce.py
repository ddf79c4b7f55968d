"""``DeadCodeElimination`` (``mlc-dce``): erase ops whose results are unused and private
functions nobody calls (TVM ``DeadCodeElimination`` + ``RemoveUnusedFunctions``; upstream
``symbol-dce`` for the functions).

Before::

    %0 = linalg.matmul ...        // unused
    func.func private @fused_unused(...) attributes {mlc.primitive}   // never called

After: both are gone. Ops with side effects or regions outside linalg/tensor/arith are kept.
"""

from __future__ import annotations

from .._mlir import PassManager
from ..ir.module import Module
from .pass_manager import Pass, register_pass

_PURE_PREFIXES = ("arith.", "math.", "linalg.", "tensor.")


def _unused(op) -> bool:
    return not any(True for r in op.results for _ in r.uses)


@register_pass
class DeadCodeElimination(Pass):
    """Remove dead pure ops and unused private functions (see module docstring)."""

    name = "mlc-dce"

    def transform(self, mod: Module) -> Module:
        with mod.context:
            for f in mod.func_ops():
                if f.is_external:
                    continue
                changed = True
                while changed:
                    changed = False
                    for o in reversed(list(f.regions[0].blocks[0].operations)):
                        op = o.operation
                        if op.results and op.name.startswith(_PURE_PREFIXES) and _unused(op):
                            op.erase()
                            changed = True
            PassManager.parse("builtin.module(symbol-dce)").run(mod.operation)
        return mod


@register_pass
class CommonSubexprElimination(Pass):
    """``mlc-cse``: upstream ``cse`` on every function (identical pure ops computed once)."""

    name = "mlc-cse"

    def transform(self, mod: Module) -> Module:
        with mod.context:
            PassManager.parse("builtin.module(func.func(cse))").run(mod.operation)
        return mod
