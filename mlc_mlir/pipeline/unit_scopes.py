"""Part of stage ``schedule`` of :func:`mlc_mlir.compile`: each unit of a graph function is
scheduled in a function of its own, then inlined back (:func:`outline_units`,
:func:`inline_units`).

Why: the transform interpreter's ``structured.fuse_into_containing_op`` prints the producer and
the containing op into a remark for every producer it fuses (MLIR's ``FuseIntoContainingOp::apply``,
``diag << "could not fuse " << *producerOp``, built even when the fusion succeeds), and printing
an op verifies and numbers the whole function around it (up to the nearest isolated-from-above
op). With every unit of a large model in ``@main`` (DenseNet-121: ~600 units, ~3500 ops), each
fusion costs time in proportion to the model, and the schedule stage is quadratic in the model's
size (perf: ~95% of the transform interpreter's time under ``Diagnostic::appendOp``). With each
unit in a private function of its own, a fusion verifies and numbers one unit.

The units are those of :func:`~mlc_mlir.graph.fuse_ops.fusion_groups` (the ``tasks`` stage's
units) with a plain boundary (:func:`~.shared_units.shareable`: the units ``tasks`` would also
make functions of were they repeated; a unit that writes into a buffer of its caller stays in
place), outlined with :func:`~mlc_mlir.graph.fuse_ops.outline` (weight constants stay in the
caller, as arguments); after scheduling each of their calls is inlined with MLIR's ``inline``
pass (the calls that were there before keep their ``no_inline`` state), so the later stages
see the same graph function as if it had been scheduled in place.
"""

from __future__ import annotations

from typing import List, Sequence, Tuple

from .._mlir import ir
from ..graph.fuse_ops import PRIMITIVE_ATTR, fusion_groups, outline
from ..ir.module import Module
from ..ir.pass_pipeline import run_pass_pipeline
from ..ir.walk import find_ops
from .shared_units import is_weight, shareable

#: Marks the functions :func:`outline_units` made (they are inlined and erased afterwards).
SCOPE_ATTR = "mlc.unit_scope"

#: Marks the calls kept from inlining while the scoped ones are inlined.
_HELD = "mlc.held_call"

#: Functions with fewer top-level ops than this are scheduled in place (the cost of a fusion
#: is proportional to the function's size; outlining pays off for large functions only).
MIN_OPS = 200


def _size(f) -> int:
    return len(f.regions[0].blocks[0].operations)


def outline_units(module: Module, functions: Sequence[str]) -> Tuple[Module, List[str]]:
    """A copy of ``module`` in which every shareable unit (:func:`fusion_groups`,
    :func:`shareable`) of each function of
    ``functions`` with :data:`MIN_OPS` top-level ops or more is a call of a private function of
    its own (marked :data:`SCOPE_ATTR`), and the names of those functions; ``(module, [])``
    when no function is that large."""
    with module.context:
        big = [f.sym_name.value for f in module.func_ops()
               if f.sym_name.value in functions and not f.is_external
               and PRIMITIVE_ATTR not in f.attributes and _size(f) >= MIN_OPS]
    if not big:
        return module, []
    out = module.clone()
    made = []
    with out.context, ir.Location.unknown():
        names = set(out.function_names())
        for f in out.func_ops():
            if f.sym_name.value not in big:
                continue
            for group in [g for g in fusion_groups(f) if shareable(g)]:
                prim = outline(out, f, group, used_names=names, keep_outside=is_weight)
                prim.attributes[SCOPE_ATTR] = ir.UnitAttr.get()
                made.append(prim.sym_name.value)
    return out, made


def inline_units(module: Module) -> Module:
    """``module`` with every call of a :data:`SCOPE_ATTR` function inlined and those functions
    erased (``module`` itself when it has none); other calls stay calls."""
    with module.context:
        scoped = {f.sym_name.value for f in module.func_ops() if SCOPE_ATTR in f.attributes}
    if not scoped:
        return module
    out = module.clone()
    with out.context:
        for c in find_ops(out, "func.call"):
            callee = ir.FlatSymbolRefAttr(c.attributes["callee"]).value
            if callee not in scoped and "no_inline" not in c.attributes:
                c.attributes["no_inline"] = ir.UnitAttr.get()
                c.attributes[_HELD] = ir.UnitAttr.get()
    out = run_pass_pipeline(out, "builtin.module(inline{default-pipeline=})", "schedule")
    with out.context:
        for f in out.func_ops():
            if SCOPE_ATTR in f.attributes:
                f.operation.erase()
        for c in find_ops(out, "func.call"):
            if _HELD in c.attributes:
                del c.attributes[_HELD]
                del c.attributes["no_inline"]
    return out
