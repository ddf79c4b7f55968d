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
  shape, size-1 dims aside): a call of one private kernel per rank and element type (both sides
  ``memref.cast`` to fully dynamic sizes, strides and offset) whose body is a ``linalg.copy``,
  which ``convert-linalg-to-loops`` lowers to a loop nest whose innermost loop runs over the last
  dim (LLVM vectorizes it, versioned on a unit stride). One kernel for all sites, not a loop
  nest per site: DenseNet-121 has ~100 such copies, and LLVM optimized each nest on its own;

and leaves a copy between contiguous buffers to ``memrefCopy`` (one ``memcpy``).

Source: MLIR ``linalg.copy`` (One-Shot Bufferize's ``memcpy_op = "linalg.copy"`` option of the
transform op, which the pass form does not expose); the runtime's ``memrefCopy``
(``mlir/lib/ExecutionEngine/CRunnerUtils.cpp``).
"""

from __future__ import annotations

from typing import Dict, Tuple

from .._mlir import func_d, ir, linalg_d, memref_d
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
    kernels: Dict[Tuple[int, str], Tuple[str, ir.Type]] = {}
    with out.context, ir.Location.unknown():
        names = set(out.function_names())
        for op in [op for op in find_ops(out, "memref.copy") if _rewritten(op)]:
            if op.operands[0] != op.operands[1]:
                name, dyn = _kernel(out, kernels, names, ir.MemRefType(op.operands[0].type))
                with ir.InsertionPoint(op), op.location:
                    args = [memref_d.cast(dyn, v) for v in op.operands]
                    func_d.CallOp([], ir.FlatSymbolRefAttr.get(name), args)
            op.erase()
    return out


def _kernel(module: Module, kernels: dict, names: set, t: ir.MemRefType) -> Tuple[str, ir.Type]:
    """The copy kernel of ``t``'s rank and element type (made at the end of ``module`` on first
    use): ``(symbol, its argument type)``, a memref of dynamic sizes, strides and offset."""
    rank, elt = len(t.shape), t.element_type
    key = (rank, str(elt))
    if key in kernels:
        return kernels[key]
    dyn_size = ir.ShapedType.get_dynamic_size()
    dyn_stride = ir.ShapedType.get_dynamic_stride_or_offset()
    layout = ir.StridedLayoutAttr.get(dyn_stride, [dyn_stride] * rank)
    dyn = ir.MemRefType.get([dyn_size] * rank, elt, layout, t.memory_space)
    name, k = f"mlc_strided_copy_{rank}d_{elt}", 0
    while name in names:
        k += 1
        name = f"mlc_strided_copy_{rank}d_{elt}_{k}"
    names.add(name)
    with ir.InsertionPoint(module.ir_module.body), ir.Location.unknown():
        fn = func_d.FuncOp(name, ir.FunctionType.get([dyn, dyn], []), visibility="private")
        # one out-of-line kernel: LLVM would otherwise inline it back into every site
        fn.attributes["passthrough"] = ir.ArrayAttr.get([ir.StringAttr.get("noinline")])
        entry = fn.add_entry_block()
        with ir.InsertionPoint(entry):
            linalg_d.copy(entry.arguments[0], outs=[entry.arguments[1]])
            func_d.ReturnOp([])
    kernels[key] = (name, dyn)
    return kernels[key]
