"""Strided buffer copies as loops: :func:`strided_copies_to_loops`.

One-Shot Bufferize and ``buffer-results-to-out-params`` leave ``memref.copy`` ops between
buffers (a unit's input read from the interior of a padded buffer and passed to a shared unit,
whose boundary takes identity-layout memrefs; a value kept apart from the padded buffer it is
also inserted into). ``finalize-memref-to-llvm`` lowers each to a call of the runtime's
``memrefCopy``, which copies a non-contiguous memref one element at a time (a ``memcpy`` of the
element size per element, with the index arithmetic of a generic rank): SqueezeNet spends about
a tenth of its time there (perf, one thread: ``memrefCopy`` plus the ``memmove`` it calls),
copying the interiors of its fire modules' padded squeeze outputs.

Run on the buffers before ``convert-linalg-to-loops``, this rewrites each ``memref.copy``

* of a buffer onto itself: erased (nothing to copy);
* between buffers of which one is not contiguous (strides other than the row-major ones of its
  shape, size-1 dims aside): a ``linalg.copy``, which ``convert-linalg-to-loops`` lowers to a
  loop nest whose innermost loop runs over the unit-stride dim, which LLVM vectorizes;

and leaves a copy between contiguous buffers to ``memrefCopy`` (one ``memcpy``).

Source: MLIR ``linalg.copy`` (One-Shot Bufferize's ``memcpy_op = "linalg.copy"`` option of the
transform op, which the pass form does not expose); the runtime's ``memrefCopy``
(``mlir/lib/ExecutionEngine/CRunnerUtils.cpp``).
"""

from __future__ import annotations

from .._mlir import ir, linalg_d
from ..ir.module import Module
from ..ir.walk import find_ops


def contiguous(t: ir.MemRefType) -> bool:
    """Whether the memref type ``t`` (static strides) lays its elements out row-major without
    gaps (the offset aside); a dynamic stride or size counts as not contiguous."""
    if not t.has_static_shape:
        return False
    strides, _ = t.get_strides_and_offset()
    expected = 1
    for size, stride in reversed(list(zip(t.shape, strides))):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def _rewritten(op: ir.Operation) -> bool:
    """Whether :func:`strided_copies_to_loops` rewrites the ``memref.copy`` ``op``."""
    src, dst = op.operands[0], op.operands[1]
    if src == dst:
        return True
    ranked = all(isinstance(v.type, ir.MemRefType) for v in (src, dst))
    return ranked and not all(contiguous(ir.MemRefType(v.type)) for v in (src, dst))


def strided_copies_to_loops(module: Module) -> Module:
    """``module`` (on buffers) with each ``memref.copy`` of a buffer onto itself erased and each
    one with a non-contiguous side a ``linalg.copy`` (see the module docstring); ``module``
    itself when it has neither."""
    with module.context:
        if not any(_rewritten(op) for op in find_ops(module, "memref.copy")):
            return module
    out = module.clone()
    with out.context:
        for op in [op for op in find_ops(out, "memref.copy") if _rewritten(op)]:
            if op.operands[0] != op.operands[1]:
                with ir.InsertionPoint(op), op.location:
                    linalg_d.copy(op.operands[0], outs=[op.operands[1]])
            op.erase()
    return out
