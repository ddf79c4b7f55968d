"""``DeadCodeElimination`` (``mlc-dce``): erase ops whose results are unused and private
functions nobody calls (TVM ``DeadCodeElimination``; upstream ``symbol-dce`` for the
functions); ``RemoveUnusedFunctions`` (``mlc-remove-unused-functions``) also removes public
functions the entry functions do not reach (TVM ``RemoveUnusedFunctions``).

Before::

    %0 = linalg.matmul ...        // unused
    func.func private @fused_unused(...) attributes {mlc.primitive}   // never called

After: both are gone. Ops with side effects or regions outside linalg/tensor/arith are kept.
"""

from __future__ import annotations

from typing import Sequence

from .._mlir import PassManager, ir
from ..errors import IRError
from ..ir.module import Module
from .pass_manager import Pass, register_pass

_PURE_PREFIXES = ("arith.", "math.", "linalg.", "tensor.")


def _unused(op) -> bool:
    return not any(True for r in op.results for _ in r.uses)


def erase_dead_pure_ops(block) -> None:
    """Erase the ops of ``block`` (linalg, tensor, arith, math) whose results are unused, until
    none is left (an op becomes dead when its last user is erased)."""
    changed = True
    while changed:
        changed = False
        for o in reversed(list(block.operations)):
            op = o.operation
            if op.results and op.name.startswith(_PURE_PREFIXES) and _unused(op):
                op.erase()
                changed = True


@register_pass
class DeadCodeElimination(Pass):
    """Remove dead pure ops and unused private functions (see module docstring)."""

    name = "mlc-dce"

    def transform(self, mod: Module) -> Module:
        with mod.context:
            for f in mod.defined_functions():
                erase_dead_pure_ops(f.regions[0].blocks[0])
            PassManager.parse("builtin.module(symbol-dce)").run(mod.operation)
        return mod


@register_pass
class RemoveUnusedFunctions(Pass):
    """``mlc-remove-unused-functions``: keep the entry functions and what they call, remove
    every other function, public or private (TVM ``relay.transform.RemoveUnusedFunctions``).

    The other functions are made private and upstream ``symbol-dce`` removes those no kept
    function references (``func.call``, ``mlc.call_library`` or any other symbol use); the
    survivors get their visibility back.

    Before (``entry_functions=("main",)``)::

        func.func @add_func(...)      // public, never called
        func.func @main(...)

    After: only ``@main``.

    Parameters
    ----------
    entry_functions : sequence of str
        Functions kept with everything they reach (default ``("main",)``, as TVM).

    Raises
    ------
    IRError
        If an entry function is not in the module (the message lists the functions).
    """

    name = "mlc-remove-unused-functions"

    def __init__(self, entry_functions: Sequence[str] = ("main",)):
        if isinstance(entry_functions, str):
            entry_functions = (entry_functions,)
        self.entry_functions = tuple(entry_functions)

    def transform(self, mod: Module) -> Module:
        names = [f.sym_name.value for f in mod.func_ops()]
        missing = [e for e in self.entry_functions if e not in names]
        if missing:
            raise IRError(f"{self.name}: entry function(s) {missing} are not in the module; "
                          f"functions: {names}")
        made_private = []
        for f in mod.func_ops():
            public = "sym_visibility" not in f.attributes or f.attributes["sym_visibility"].value == "public"
            if public and f.sym_name.value not in self.entry_functions and not f.is_external:
                f.attributes["sym_visibility"] = ir.StringAttr.get("private")
                made_private.append(f.sym_name.value)
        PassManager.parse("builtin.module(symbol-dce)").run(mod.operation)
        for f in mod.func_ops():
            if f.sym_name.value in made_private:
                del f.attributes["sym_visibility"]
        return mod

