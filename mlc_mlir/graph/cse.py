"""``CommonSubexprElimination`` (``mlc-cse``): upstream ``cse`` on every function, so identical
pure ops are computed once (TVM ``EliminateCommonSubexpr``).

Before::

    %a = linalg.add ins(%x, %y ...) ...
    %b = linalg.add ins(%x, %y ...) ...   // the same op on the same operands

After: one ``linalg.add``, its result used for both.
"""

from __future__ import annotations

from .._mlir import PassManager
from ..ir.module import Module
from .pass_manager import Pass, register_pass


@register_pass
class CommonSubexprElimination(Pass):
    """``mlc-cse``: upstream ``cse`` on every function (identical pure ops computed once)."""

    name = "mlc-cse"

    def transform(self, mod: Module) -> Module:
        with mod.context:
            PassManager.parse("builtin.module(func.func(cse))").run(mod.operation)
        return mod
