"""``FoldZeroSizeOps`` (``mlc-fold-zero-size``): ops on zero-size tensors become what they
compute without a loop running (numpy's semantics for empty arrays).

A linalg op with a zero-size operand or result has an empty iteration domain (every loop dim
indexes some operand, so one of its dims is 0), and by linalg's destination-passing semantics
its results are its ``outs`` operands unchanged: a matmul with ``K = 0`` is its zero fill (the
sum of nothing), a reduction over an empty axis its init (0 for ``sum``, so ``mean`` is
``0 / 0 = nan`` as numpy's). Any other op whose result has no element (a reshape, a slice, a
pad of an empty tensor along a dim it does not pad) becomes a ``tensor.empty`` of the same
type. What remains reaches no zero-size value, so schedules, tiling and vectorization never see
an extent of 0. Reductions without an identity (``max``, ``argmax`` of an empty axis) are
refused by the builder, as numpy raises.

Before::

    %0 = linalg.fill ins(%zero) outs(%e : tensor<3x4xf32>)
    %1 = linalg.matmul ins(%a, %b : tensor<3x0xf32>, tensor<0x4xf32>) outs(%0 : tensor<3x4xf32>)
    %2 = linalg.generic ... ins(%x : tensor<0x4xf32>) outs(%e2 : tensor<0x4xf32>)   // relu

After::

    %0 = linalg.fill ins(%zero) outs(%e : tensor<3x4xf32>)      // %1 replaced by %0
    %2 = tensor.empty() : tensor<0x4xf32>

Source: numpy's empty-array semantics; linalg's destination-passing style (the ``outs`` of an
op whose loops run zero times).
"""

from __future__ import annotations

from .._mlir import ir, tensor_d
from ..ir.module import Module
from .dce import erase_dead_pure_ops
from .pass_manager import Pass, register_pass


def _zero_size(t) -> bool:
    return isinstance(t, ir.RankedTensorType) and t.has_static_shape and 0 in t.shape


def _fold(op) -> bool:
    """Replace the results of ``op`` if it computes nothing; True when it did."""
    results = list(op.results)
    if not results or op.name == "tensor.empty":
        return False
    operands = list(op.operands)
    if op.name.startswith("linalg.") and len(operands) >= len(results) and \
            any(_zero_size(v.type) for v in operands + results):
        inits = operands[len(operands) - len(results):]
        if all(i.type == r.type for i, r in zip(inits, results)):
            for i, r in zip(inits, results):
                r.replace_all_uses_with(i)
            return True
    if any(_zero_size(r.type) for r in results):
        with ir.InsertionPoint(op), op.location:
            for r in results:
                if _zero_size(r.type):
                    r.replace_all_uses_with(tensor_d.EmptyOp(list(r.type.shape), r.type.element_type).result)
        return True
    return False


@register_pass
class FoldZeroSizeOps(Pass):
    """Fold the ops of zero-size tensors away (see the module docstring)."""

    name = "mlc-fold-zero-size"

    def transform(self, mod: Module) -> Module:
        for f in mod.defined_functions():
            block = f.regions[0].blocks[0]
            if any([_fold(o.operation) for o in list(block.operations)]):
                erase_dead_pure_ops(block)
        return mod


def fold_zero_size(mod: Module) -> Module:
    """``FoldZeroSizeOps()(mod)`` if a function of ``mod`` has a zero-size tensor, else ``mod``
    itself (no copy)."""
    found = []

    def visit(op):
        op = op.operation if hasattr(op, "operation") else op
        if any(_zero_size(v.type) for v in list(op.operands) + list(op.results)):
            found.append(op)
            return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    with mod.context:
        mod.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
    return FoldZeroSizeOps()(mod) if found else mod
